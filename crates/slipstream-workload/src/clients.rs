//! Multi-client, multi-service traces: who asked which site for what, for per-client cache
//! studies such as paper 000 §5, Fig. 7 (`slipstream cachesim clients`).
//!
//! Three sources make a [`ClientTrace`]:
//!
//! * [`generate`]: a synthetic population ([`ClientMix`]) of clients that browse services in
//!   sessions, with Zipf popularity of clients, services and objects within a service, ProWGen's
//!   heavy-tailed sizes ([`SizeModel`]) and temporal locality (each client returns to its own
//!   recent objects). Seeded: the same mix gives the same trace.
//! * [`read`] of a Common/Combined Log Format log: the client is the log's host field; the
//!   service is the host of an absolute request target (a proxy log's `GET http://host/path`) or
//!   the leading virtual host of Apache's `vhost_combined` format (`host:port` before the
//!   client), else the one site the log belongs to, or the first path segment if asked
//!   ([`ServiceBy::PathSegment`]).
//! * [`read`] of the four-column TSV that [`write_tsv`] writes: `client`, `service`, `url`,
//!   `size_bytes`.

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufRead, Write};

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

use crate::trace::{self, TraceError, MALFORMED_EXAMPLES};
use crate::web::{SizeModel, WebError};

/// One request of a [`ClientTrace`]; the ids index its name tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientRequest {
    /// Index into [`ClientTrace::clients`].
    pub client: u32,
    /// Index into [`ClientTrace::services`].
    pub service: u32,
    /// Index into [`ClientTrace::urls`]: an object of one service.
    pub object: u64,
    /// The response size in bytes.
    pub size_bytes: u64,
}

/// A trace whose requests name a client and a service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientTrace {
    /// Client names, e.g. addresses.
    pub clients: Vec<String>,
    /// Service names, e.g. host names.
    pub services: Vec<String>,
    /// URL of each object within its service.
    pub urls: Vec<String>,
    /// The service each object belongs to.
    pub object_service: Vec<u32>,
    /// The requests, in trace order.
    pub requests: Vec<ClientRequest>,
    /// Records that are valid but not cacheable (CLF: a non-GET/HEAD method, a non-2xx status or
    /// a size of `-`).
    pub skipped: u64,
    /// Malformed lines passed over.
    pub malformed: u64,
    /// The first few of them, as `file:line: what is wrong`.
    pub malformed_examples: Vec<String>,
}

impl ClientTrace {
    /// Demand bytes of all requests.
    pub fn bytes(&self) -> u64 {
        self.requests.iter().map(|r| r.size_bytes).sum()
    }
}

/// Builds a [`ClientTrace`] by interning names.
#[derive(Debug, Default)]
struct Interner {
    trace: ClientTrace,
    clients: HashMap<String, u32>,
    services: HashMap<String, u32>,
    objects: HashMap<(u32, String), u64>,
}

impl Interner {
    fn push(&mut self, client: &str, service: &str, url: &str, size_bytes: u64) {
        let t = &mut self.trace;
        let client = *self.clients.entry(client.to_owned()).or_insert_with(|| {
            t.clients.push(client.to_owned());
            (t.clients.len() - 1) as u32
        });
        let service = *self.services.entry(service.to_owned()).or_insert_with(|| {
            t.services.push(service.to_owned());
            (t.services.len() - 1) as u32
        });
        let object = *self
            .objects
            .entry((service, url.to_owned()))
            .or_insert_with(|| {
                t.urls.push(url.to_owned());
                t.object_service.push(service);
                (t.urls.len() - 1) as u64
            });
        t.requests.push(ClientRequest {
            client,
            service,
            object,
            size_bytes,
        });
    }
}

/// Where a log without host names in its request targets takes its services from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServiceBy {
    /// The request target's host or the virtual host; a log with neither is one service, `-`.
    #[default]
    Host,
    /// As [`ServiceBy::Host`], but a bare path's first segment (`/blog/x` → `/blog`, `/x` → `/`)
    /// stands in for the service: a crude surrogate for a log of one site.
    PathSegment,
}

/// The header line of the four-column TSV.
pub const TSV_HEADER: &str = "client\tservice\turl\tsize_bytes";

/// Reads a client trace: the four-column TSV if the first meaningful line has four tab-separated
/// columns, else Common/Combined Log Format (optionally `vhost_combined`). Malformed lines are
/// counted and passed over, unless nothing at all could be read: then the first one is the error.
/// `source_name` appears in error messages.
///
/// The whole input is read into memory first.
pub fn read<R: BufRead>(
    mut reader: R,
    source_name: &str,
    service_by: ServiceBy,
) -> Result<ClientTrace, TraceError> {
    let mut raw = Vec::new();
    reader
        .read_to_end(&mut raw)
        .map_err(|source| TraceError::Io {
            path: source_name.to_owned(),
            source,
        })?;
    let text = String::from_utf8_lossy(&raw);
    let meaningful = |l: &&str| !(l.trim().is_empty() || l.starts_with('#'));
    let first = text.lines().find(meaningful).unwrap_or("");
    if first.split('\t').count() == 4 {
        return read_tsv(&text, source_name);
    }
    if first.split('\t').count() == 3 {
        return Err(TraceError::Parse {
            source_name: source_name.to_owned(),
            line: 1 + text.lines().position(|l| l == first).unwrap_or(0),
            message: "a three-column TSV trace (time_s, key, size_bytes) names no clients; \
                      give a Common Log Format log or the four-column TSV (client, service, url, \
                      size_bytes)"
                .into(),
        });
    }
    // Move a vhost_combined log's virtual host into the request target, one line for one line so
    // that line numbers in errors stay true, and let the CLF reader do the rest.
    let mut clf = String::with_capacity(text.len() + text.len() / 8);
    for line in text.lines() {
        clf.push_str(&vhost_to_target(line).unwrap_or_else(|| line.to_owned()));
        clf.push('\n');
    }
    let log = trace::read_lenient(clf.as_bytes(), source_name)?;
    if log.clients.len() != log.requests.len() {
        return Err(TraceError::Parse {
            source_name: source_name.to_owned(),
            line: 1,
            message: "the log names no clients".into(),
        });
    }
    let mut interner = Interner::default();
    for (req, client) in log.requests.iter().zip(&log.clients) {
        let (service, url) = split_target(&req.key, service_by);
        interner.push(client, service, url, req.size_bytes);
    }
    let mut out = interner.trace;
    out.skipped = log.skipped;
    out.malformed = log.malformed;
    out.malformed_examples = log.malformed_examples;
    Ok(out)
}

fn read_tsv(text: &str, source_name: &str) -> Result<ClientTrace, TraceError> {
    let mut interner = Interner::default();
    let (mut malformed, mut examples, mut first_error) = (0, Vec::new(), None);
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') || line == TSV_HEADER {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        let parsed = match cols[..] {
            [client, service, url, size] => size
                .trim()
                .parse::<u64>()
                .map(|size| (client, service, url, size))
                .map_err(|_| format!("size_bytes {size:?} is not a non-negative integer")),
            _ => Err(format!(
                "expected 4 tab-separated columns (client, service, url, size_bytes), found {}",
                cols.len()
            )),
        };
        match parsed {
            Ok((client, service, url, size)) => interner.push(client, service, url, size),
            Err(message) => {
                let e = TraceError::Parse {
                    source_name: source_name.to_owned(),
                    line: i + 1,
                    message,
                };
                malformed += 1;
                if examples.len() < MALFORMED_EXAMPLES {
                    examples.push(e.to_string());
                }
                first_error.get_or_insert(e);
            }
        }
    }
    if interner.trace.requests.is_empty() {
        if let Some(e) = first_error {
            return Err(e);
        }
    }
    let mut out = interner.trace;
    out.malformed = malformed;
    out.malformed_examples = examples;
    Ok(out)
}

/// `vhost:port client ident user [time] "GET /p HTTP/1.1" …` →
/// `client ident user [time] "GET http://vhost/p HTTP/1.1" …`; `None` for any other line.
fn vhost_to_target(line: &str) -> Option<String> {
    let mut tokens = line.split(' ');
    let vhost = tokens.next()?;
    // In plain CLF the timestamp is the fourth token; with a virtual host first, the fifth.
    let fifth = tokens.nth(3)?;
    if !fifth.starts_with('[') || vhost.is_empty() || vhost.contains(['/', '"', '[']) {
        return None;
    }
    let rest = &line[vhost.len() + 1..];
    let quote = rest.find('"')?;
    let (head, request) = rest.split_at(quote + 1);
    let (method, target) = request.split_once(' ')?;
    if !target.starts_with('/') {
        return Some(rest.to_owned());
    }
    let host = vhost.rsplit_once(':').map_or(vhost, |(h, _)| h);
    Some(format!("{head}{method} http://{host}{target}"))
}

/// A request target → (service, URL within it).
fn split_target(key: &str, service_by: ServiceBy) -> (&str, &str) {
    let lower = key.get(..8).unwrap_or(key).to_ascii_lowercase();
    let scheme = if lower.starts_with("http://") {
        7
    } else if lower.starts_with("https://") {
        8
    } else {
        0
    };
    if scheme > 0 {
        let rest = &key[scheme..];
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..end];
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let url = if end == rest.len() { "/" } else { &rest[end..] };
        return (host, url);
    }
    match service_by {
        ServiceBy::Host => ("-", key),
        ServiceBy::PathSegment => {
            let path = key.split(['?', '#']).next().unwrap_or(key);
            match path.get(1..).and_then(|p| p.find('/')) {
                Some(i) => (&key[..i + 1], key),
                None => ("/", key),
            }
        }
    }
}

/// Writes `trace` as the four-column TSV, with a header line. Fails with
/// [`io::ErrorKind::InvalidInput`] on a name with a tab or line break, which could not be read
/// back.
pub fn write_tsv<W: Write>(mut w: W, trace: &ClientTrace) -> io::Result<()> {
    writeln!(w, "{TSV_HEADER}")?;
    for r in &trace.requests {
        let client = &trace.clients[r.client as usize];
        let service = &trace.services[r.service as usize];
        let url = &trace.urls[r.object as usize];
        for name in [client, service, url] {
            if name.contains(['\t', '\n', '\r']) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{name:?} contains a tab or line break"),
                ));
            }
        }
        writeln!(w, "{client}\t{service}\t{url}\t{}", r.size_bytes)?;
    }
    Ok(())
}

/// A synthetic population of clients browsing services.
///
/// Each request comes from a client drawn by Zipf(`client_alpha`) activity. With probability
/// `revisit` the client re-requests one of its own last `history` requests, at a depth drawn
/// log-uniformly (recent ones likelier: temporal locality). Otherwise it continues its current
/// session, or starts one (of geometric length, mean `session_mean`) at one of its
/// `favourites` services with probability `favourite_share` or at a service drawn by
/// Zipf(`service_alpha`), and asks for an object drawn by Zipf(`object_alpha`) within the service.
/// The service of popularity rank `r` (from 1) has `max(min_objects, max_objects / √r)` objects,
/// each with one size drawn from `sizes`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientMix {
    /// Clients.
    pub clients: u32,
    /// Services (sites).
    pub services: u32,
    /// Requests to generate.
    pub requests: usize,
    /// Zipf exponent of client activity.
    pub client_alpha: f64,
    /// Zipf exponent of service popularity.
    pub service_alpha: f64,
    /// Zipf exponent of object popularity within a service.
    pub object_alpha: f64,
    /// Objects of the most popular service.
    pub max_objects: u64,
    /// Fewest objects of any service.
    pub min_objects: u64,
    /// Services each client favours.
    pub favourites: u32,
    /// Share of sessions at a favourite service.
    pub favourite_share: f64,
    /// Mean requests per session.
    pub session_mean: f64,
    /// Probability that a request re-visits one of the client's recent requests.
    pub revisit: f64,
    /// Recent requests a client may re-visit (the bound on per-client state).
    pub history: usize,
    /// Object sizes.
    pub sizes: SizeModel,
    /// Seed: the same seed gives the same trace.
    pub seed: u64,
}

impl ClientMix {
    /// The defaults of `slipstream cachesim clients`: 300 clients, 400 services, 400,000
    /// requests, sizes calibrated to paper 003's Table 2 (mean near 10 KB).
    pub fn standard() -> ClientMix {
        ClientMix {
            clients: 300,
            services: 400,
            requests: 400_000,
            client_alpha: 0.6,
            service_alpha: 1.0,
            object_alpha: 0.8,
            max_objects: 5_000,
            min_objects: 50,
            favourites: 5,
            favourite_share: 0.6,
            session_mean: 5.0,
            revisit: 0.2,
            history: 2_000,
            sizes: SizeModel::paper003(),
            seed: 1,
        }
    }
}

/// Why a [`ClientMix`] cannot generate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MixError {
    /// No clients, services or objects.
    #[error("clients, services, min_objects and max_objects must be at least 1")]
    Empty,
    /// A Zipf exponent that is not a positive number.
    #[error("Zipf exponents must be positive numbers, not {0}")]
    Alpha(f64),
    /// A probability outside 0..=1.
    #[error("favourite_share and revisit must be probabilities (0 to 1), not {0}")]
    Probability(f64),
    /// A mean session length below 1.
    #[error("session_mean must be a number of requests ≥ 1, not {0}")]
    Session(f64),
    /// A bad size model.
    #[error(transparent)]
    Sizes(#[from] WebError),
}

#[derive(Debug, Default)]
struct ClientState {
    favourites: Vec<u32>,
    /// The service of the current session.
    session: Option<u32>,
    recent: VecDeque<(u32, u64)>,
}

/// Generates the trace. Client `i` is `c{i}`, the service of popularity rank `r` (from 0) is
/// `s{r}.example`, object `j` of a service is `/o/{j}`.
pub fn generate(mix: &ClientMix) -> Result<ClientTrace, MixError> {
    if mix.clients == 0 || mix.services == 0 || mix.min_objects == 0 || mix.max_objects == 0 {
        return Err(MixError::Empty);
    }
    for a in [mix.client_alpha, mix.service_alpha, mix.object_alpha] {
        if !(a.is_finite() && a > 0.0) {
            return Err(MixError::Alpha(a));
        }
    }
    for p in [mix.favourite_share, mix.revisit] {
        if !(0.0..=1.0).contains(&p) {
            return Err(MixError::Probability(p));
        }
    }
    if !(mix.session_mean.is_finite() && mix.session_mean >= 1.0) {
        return Err(MixError::Session(mix.session_mean));
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(mix.seed);
    let sampler = mix.sizes.sampler()?;
    let zipf = |n: u64, a: f64| Zipf::new(n, a).map_err(|_| MixError::Alpha(a));
    let mut trace = ClientTrace {
        clients: (0..mix.clients).map(|i| format!("c{i}")).collect(),
        services: (0..mix.services).map(|r| format!("s{r}.example")).collect(),
        ..ClientTrace::default()
    };
    // Per service: its first object id and its object-popularity distribution.
    let mut catalogue = Vec::with_capacity(mix.services as usize);
    let mut sizes = Vec::new();
    for r in 0..mix.services {
        let n = ((mix.max_objects as f64 / f64::from(r + 1).sqrt()).round() as u64)
            .max(mix.min_objects);
        catalogue.push((sizes.len() as u64, zipf(n, mix.object_alpha)?));
        for j in 0..n {
            sizes.push(sampler.sample(&mut rng));
            trace.urls.push(format!("/o/{j}"));
            trace.object_service.push(r);
        }
    }
    let service_pick = zipf(u64::from(mix.services), mix.service_alpha)?;
    let client_pick = zipf(u64::from(mix.clients), mix.client_alpha)?;
    let rank = |z: &Zipf<f64>, rng: &mut rand::rngs::StdRng, n: u64| {
        (z.sample(rng) as u64).clamp(1, n) - 1
    };
    let mut states: Vec<ClientState> = (0..mix.clients)
        .map(|_| ClientState {
            favourites: (0..mix.favourites)
                .map(|_| rank(&service_pick, &mut rng, u64::from(mix.services)) as u32)
                .collect(),
            ..ClientState::default()
        })
        .collect();
    // A session continues with probability 1 − 1/mean after each request.
    let go_on = 1.0 - 1.0 / mix.session_mean;
    trace.requests.reserve(mix.requests);
    for _ in 0..mix.requests {
        let client = rank(&client_pick, &mut rng, u64::from(mix.clients)) as u32;
        let st = &mut states[client as usize];
        let (service, object) = if !st.recent.is_empty() && rng.gen_bool(mix.revisit) {
            // Log-uniform depth: each doubling of the distance is as likely as the last.
            let len = st.recent.len() as f64;
            let depth = (len.powf(rng.gen::<f64>()) - 1.0) as usize;
            st.recent[depth.min(st.recent.len() - 1)]
        } else {
            let service = match st.session {
                Some(s) if rng.gen_bool(go_on) => s,
                _ if !st.favourites.is_empty() && rng.gen_bool(mix.favourite_share) => {
                    st.favourites[rng.gen_range(0..st.favourites.len())]
                }
                _ => rank(&service_pick, &mut rng, u64::from(mix.services)) as u32,
            };
            let (first, objects) = &catalogue[service as usize];
            let j = objects.sample(&mut rng) as u64 - 1;
            st.session = Some(service);
            (service, first + j)
        };
        st.recent.push_front((service, object));
        st.recent.truncate(mix.history.max(1));
        trace.requests.push(ClientRequest {
            client,
            service,
            object,
            size_bytes: sizes[object as usize],
        });
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> ClientMix {
        ClientMix {
            clients: 50,
            services: 40,
            requests: 20_000,
            max_objects: 500,
            ..ClientMix::standard()
        }
    }

    #[test]
    fn generation_is_seeded_and_consistent() {
        let a = generate(&small()).expect("valid");
        assert_eq!(a, generate(&small()).expect("valid"));
        let other = generate(&ClientMix { seed: 2, ..small() }).expect("valid");
        assert_ne!(a.requests, other.requests);
        assert_eq!(a.requests.len(), 20_000);
        let mut size_of = HashMap::new();
        for r in &a.requests {
            // An object belongs to one service and has one size.
            assert_eq!(a.object_service[r.object as usize], r.service);
            assert_eq!(
                *size_of.entry(r.object).or_insert(r.size_bytes),
                r.size_bytes
            );
        }
        let mean = a.bytes() as f64 / a.requests.len() as f64;
        assert!((3_000.0..30_000.0).contains(&mean), "mean size {mean}");
    }

    #[test]
    fn services_and_clients_are_skewed_and_clients_repeat_themselves() {
        let t = generate(&small()).expect("valid");
        let mut per_service = vec![0u32; 40];
        let mut per_client = vec![0u32; 50];
        for r in &t.requests {
            per_service[r.service as usize] += 1;
            per_client[r.client as usize] += 1;
        }
        assert!(per_service[0] > 5 * per_service[39], "{per_service:?}");
        assert!(per_client[0] > 3 * per_client[49], "{per_client:?}");
        // Temporal locality: a good share of a client's requests repeat one of its own.
        let mut seen = std::collections::HashSet::new();
        let repeats = t
            .requests
            .iter()
            .filter(|r| !seen.insert((r.client, r.object)))
            .count();
        let share = repeats as f64 / t.requests.len() as f64;
        assert!((0.2..0.9).contains(&share), "repeat share {share}");
    }

    #[test]
    fn bad_mixes_are_errors() {
        let bad = |m: ClientMix| generate(&m).expect_err("invalid");
        assert_eq!(
            bad(ClientMix {
                clients: 0,
                ..small()
            }),
            MixError::Empty
        );
        assert!(matches!(
            bad(ClientMix {
                object_alpha: f64::NAN,
                ..small()
            }),
            MixError::Alpha(_)
        ));
        assert!(matches!(
            bad(ClientMix {
                revisit: 1.5,
                ..small()
            }),
            MixError::Probability(_)
        ));
        assert!(matches!(
            bad(ClientMix {
                session_mean: 0.5,
                ..small()
            }),
            MixError::Session(_)
        ));
    }

    #[test]
    fn tsv_round_trips() {
        let t = generate(&ClientMix {
            requests: 500,
            ..small()
        })
        .expect("valid");
        let mut buf = Vec::new();
        write_tsv(&mut buf, &t).expect("write");
        let back = read(&buf[..], "t.tsv", ServiceBy::Host).expect("read");
        assert_eq!(back.requests.len(), 500);
        for (a, b) in t.requests.iter().zip(&back.requests) {
            assert_eq!(
                t.clients[a.client as usize],
                back.clients[b.client as usize]
            );
            assert_eq!(
                t.services[a.service as usize],
                back.services[b.service as usize]
            );
            assert_eq!(t.urls[a.object as usize], back.urls[b.object as usize]);
            assert_eq!(a.size_bytes, b.size_bytes);
        }
    }

    #[test]
    fn a_bad_tsv_row_is_named_and_passed_over() {
        let text = "client\tservice\turl\tsize_bytes\nc\ts\t/a\t10\nc\ts\t/b\tlots\n";
        let t = read(text.as_bytes(), "t.tsv", ServiceBy::Host).expect("lenient");
        assert_eq!((t.requests.len(), t.malformed), (1, 1));
        assert!(t.malformed_examples[0].starts_with("t.tsv:3:"), "{t:?}");
        let e = read("c\ts\t/a\tx\n".as_bytes(), "t.tsv", ServiceBy::Host).expect_err("bad");
        assert!(e.to_string().contains("t.tsv:1"), "{e}");
        let e = read("0\t/a\t10\n".as_bytes(), "old.tsv", ServiceBy::Host).expect_err("no clients");
        assert!(e.to_string().contains("names no clients"), "{e}");
    }

    #[test]
    fn clf_services_come_from_targets_and_virtual_hosts() {
        let log = concat!(
            "10.0.0.1 - - [10/Oct/2000:13:55:36 +0000] \"GET http://a.example:8080/x HTTP/1.0\" 200 10\n",
            "10.0.0.1 - - [10/Oct/2000:13:55:37 +0000] \"GET http://B.example HTTP/1.0\" 200 20\n",
            "www.c.example:443 10.0.0.2 - - [10/Oct/2000:13:55:38 +0000] \"GET /y HTTP/1.1\" 200 30 \"-\" \"agent\"\n",
            "10.0.0.3 - - [10/Oct/2000:13:55:39 +0000] \"GET /blog/z?q=1 HTTP/1.0\" 200 40\n",
            "10.0.0.3 - - [10/Oct/2000:13:55:40 +0000] \"POST /form HTTP/1.0\" 200 40\n",
            "not a log line\n",
        );
        let t = read(log.as_bytes(), "x.log", ServiceBy::Host).expect("read");
        let names: Vec<(&str, &str, &str)> = t
            .requests
            .iter()
            .map(|r| {
                (
                    t.clients[r.client as usize].as_str(),
                    t.services[r.service as usize].as_str(),
                    t.urls[r.object as usize].as_str(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("10.0.0.1", "a.example:8080", "/x"),
                ("10.0.0.1", "B.example", "/"),
                ("10.0.0.2", "www.c.example", "/y"),
                ("10.0.0.3", "-", "/blog/z?q=1"),
            ]
        );
        assert_eq!((t.skipped, t.malformed), (1, 1));
        assert!(t.malformed_examples[0].starts_with("x.log:6:"), "{t:?}");
        let t = read(log.as_bytes(), "x.log", ServiceBy::PathSegment).expect("read");
        assert_eq!(t.services[t.requests[3].service as usize], "/blog");
    }

    #[test]
    fn path_segments() {
        let s = |k| split_target(k, ServiceBy::PathSegment).0;
        assert_eq!(s("/a/b/c"), "/a");
        assert_eq!(s("/favicon.ico"), "/");
        assert_eq!(s("/?x=/y"), "/");
        assert_eq!(s("/a?x"), "/");
        assert_eq!(
            split_target("https://h/p", ServiceBy::PathSegment),
            ("h", "/p")
        );
        assert_eq!(split_target("http://u@h?q", ServiceBy::Host), ("h", "?q"));
    }
}
