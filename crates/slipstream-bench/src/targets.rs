//! The set of request URIs a run chooses from, parsed and validated once up front.

use anyhow::{bail, Context};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::Uri;
use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;

use crate::Targets;

/// Request URIs in the form the wire protocol wants: origin-form (`/path?q`) for
/// HTTP/1.1 to the server itself, absolute form for HTTP/2 (hyper takes `:scheme` and
/// `:authority` from it) and for a forward proxy (RFC 9112 §3.2.2).
#[derive(Debug)]
pub(crate) struct TargetSet {
    uris: Vec<Uri>,
    choice: Choice,
}

#[derive(Debug)]
enum Choice {
    Weighted(WeightedIndex<f64>),
    Sequence,
}

impl TargetSet {
    pub(crate) fn new(
        targets: &Targets,
        authority: &Authority,
        absolute: bool,
    ) -> anyhow::Result<Self> {
        let paths: Vec<&str> = match targets {
            Targets::Weighted(list) => list.iter().map(|(p, _)| p.as_str()).collect(),
            Targets::Sequence(list) => list.iter().map(String::as_str).collect(),
        };
        if paths.is_empty() {
            bail!("no targets to request");
        }
        let uris = paths
            .iter()
            .map(|path| request_uri(path, authority, absolute))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let choice = match targets {
            Targets::Weighted(list) => Choice::Weighted(
                WeightedIndex::new(list.iter().map(|(_, w)| *w))
                    .context("target weights must be non-negative with a positive sum")?,
            ),
            Targets::Sequence(_) => Choice::Sequence,
        };
        Ok(TargetSet { uris, choice })
    }

    /// The most requests this set can supply: a trace ends, a weighted list does not.
    pub(crate) fn capacity(&self) -> u64 {
        match self.choice {
            Choice::Weighted(_) => u64::MAX,
            Choice::Sequence => self.uris.len() as u64,
        }
    }

    /// The URI for request number `ticket`. `ticket` must be below [`Self::capacity`].
    pub(crate) fn pick(&self, ticket: u64, rng: &mut StdRng) -> &Uri {
        match &self.choice {
            Choice::Weighted(index) => &self.uris[index.sample(rng)],
            Choice::Sequence => {
                let i = usize::try_from(ticket).unwrap_or(usize::MAX);
                &self.uris[i.min(self.uris.len() - 1)]
            }
        }
    }
}

fn request_uri(path: &str, authority: &Authority, absolute: bool) -> anyhow::Result<Uri> {
    if !path.starts_with('/') {
        bail!("target `{path}` must start with `/`");
    }
    let pq = PathAndQuery::try_from(path).with_context(|| format!("bad target path `{path}`"))?;
    let mut parts = http::uri::Parts::default();
    if absolute {
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = Some(authority.clone());
    }
    parts.path_and_query = Some(pq);
    Uri::from_parts(parts).with_context(|| format!("bad target path `{path}`"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn sequence_is_replayed_in_order() {
        let auth = Authority::from_static("h:1");
        let t = Targets::Sequence(vec!["/a".into(), "/b".into()]);
        let set = TargetSet::new(&t, &auth, false).unwrap();
        let mut rng = StdRng::seed_from_u64(0);
        assert_eq!(set.capacity(), 2);
        assert_eq!(set.pick(0, &mut rng), "/a");
        assert_eq!(set.pick(1, &mut rng), "/b");
    }

    #[test]
    fn weighted_follows_weights_and_h2_uses_absolute_form() {
        let auth = Authority::from_static("h:1");
        let t = Targets::Weighted(vec![("/never".into(), 0.0), ("/x?y=1".into(), 2.0)]);
        let set = TargetSet::new(&t, &auth, true).unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        for n in 0..100 {
            assert_eq!(set.pick(n, &mut rng), "http://h:1/x?y=1");
        }
    }

    #[test]
    fn bad_targets_are_rejected() {
        let auth = Authority::from_static("h:1");
        assert!(TargetSet::new(&Targets::Sequence(vec![]), &auth, false).is_err());
        assert!(TargetSet::new(&Targets::Sequence(vec!["x".into()]), &auth, false).is_err());
        let zero = Targets::Weighted(vec![("/a".into(), 0.0)]);
        assert!(TargetSet::new(&zero, &auth, false).is_err());
    }
}
