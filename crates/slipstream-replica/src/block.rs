//! What a page's replica block carries (001 §3.3): for the logical URLs the page names, the
//! directory entries the agent needs to resolve them, with no I/O.
//!
//! The paper expands every logical URL of a page into its replica list. A page of a site
//! replicated by wildcard (`/*` on every server) would then repeat the same list for each of
//! its hundreds of URLs, a quarter of a 100 KB page's bytes. The block carries *rules*
//! instead where it can: for a wildcard prefix `P`, the physical stems that every URL under
//! `P` resolves to, unless a more specific pattern decides it. The agent resolves a URL as the
//! directory does: its own entry if the block has one, else the block's longest matching rule
//! ([`lookup`]).
//!
//! That is sound only if the block holds, beside a rule for `P`, every pattern of the
//! directory more specific than `P` (exact URLs and longer wildcards under it), so that no URL
//! the agent matches to `P` is decided by something else. A rule whose directory has more
//! than [`MAX_UNDER`] such patterns is not sent; the page's own URLs under it are listed one by
//! one instead, and other URLs under it get no list from this page (the agent fetches them as
//! they are).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::directory::{Decider, Directory};

/// The most patterns under one wildcard that a block sends with its rule.
pub const MAX_UNDER: usize = 256;

/// The most URLs of one page that are looked up (a bound on the work and on the block).
pub const MAX_URLS: usize = 4096;

/// The URLs one page names, gathered as it streams, by the pattern that decides each.
#[derive(Debug, Default)]
pub struct Needs {
    seen: HashSet<String>,
    /// URLs with entries of their own.
    exact: BTreeSet<String>,
    /// Wildcard prefixes deciding some of the page's URLs, with those URLs.
    rules: BTreeMap<String, Vec<String>>,
}

impl Needs {
    /// Notes one same-origin logical URL of the page. A URL ending in `*` cannot be named
    /// by an exact key of the block (a trailing `*` makes a rule) and is left out.
    pub fn note(&mut self, directory: &Directory, url: String) {
        if url.ends_with('*') || self.seen.len() >= MAX_URLS || self.seen.contains(&url) {
            return;
        }
        match directory.decider(&url) {
            None => {}
            Some(Decider::Exact(_)) => {
                self.exact.insert(url.clone());
            }
            Some(Decider::Prefix(prefix)) => match self.rules.get_mut(prefix) {
                Some(urls) => urls.push(url.clone()),
                None => {
                    self.rules.insert(prefix.to_owned(), vec![url.clone()]);
                }
            },
        }
        self.seen.insert(url);
    }

    /// The block's entries, each pattern's text (`/a.png`, or `/img/*` for a rule) to its
    /// physical URLs on the nodes `speaks` accepts (for a rule, stems ending in `*`). An
    /// entry may be empty: it then says the URLs it names have no replica and are fetched as
    /// they are, and keeps a wider rule from claiming them.
    pub fn entries(
        &self,
        directory: &Directory,
        speaks: impl Fn(&str) -> bool,
    ) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        for url in &self.exact {
            out.insert(url.clone(), directory.resolve_among(url, &speaks));
        }
        for (prefix, urls) in &self.rules {
            let under: Vec<_> = directory.under(prefix).take(MAX_UNDER + 1).collect();
            if under.len() > MAX_UNDER {
                for url in urls {
                    out.insert(url.clone(), directory.resolve_among(url, &speaks));
                }
                continue;
            }
            out.insert(format!("{prefix}*"), directory.rule_among(prefix, &speaks));
            for pattern in under {
                let key = pattern.to_string();
                if out.contains_key(&key) {
                    continue;
                }
                let list = match &pattern {
                    crate::Pattern::Exact(url) => directory.resolve_among(url, &speaks),
                    crate::Pattern::Prefix(p) => directory.rule_among(p, &speaks),
                };
                out.insert(key, list);
            }
        }
        out
    }
}

/// The block's version (`"v"`) that [`to_json`] writes for a small block: 2 added rules.
pub const VERSION: u64 = 2;

/// The version [`to_json`] writes when it compresses the entries: 3 is 2 with `urls` carried
/// as `urls_z`.
pub const VERSION_COMPRESSED: u64 = 3;

/// Entries whose JSON is longer than this many bytes travel compressed (`urls_z`). A page that
/// lists its URLs one by one (every URL a replica of its own, §5.2's placement at work) would
/// otherwise carry about 27 bytes a URL, a third more bytes for a 100 KB page naming 1,200.
pub const COMPRESS_ABOVE: usize = 1024;

/// The most bytes the compressed entries may expand to; a block claiming more is refused (a
/// few kilobytes of zlib can expand to gigabytes).
pub const MAX_EXPANDED: u64 = 8 << 20;

/// The block's JSON, compact: `{"v":2,"config":…,"servers":[…],"urls":{key: [item…]}}`. A
/// physical URL that ends with its key's logical URL (for a rule `P*`, a stem ending with `P*`)
/// is written as the index in `servers` of what comes before it: a server's base URL, or the
/// base of its replica store (`http://r2/_slipstream/replicas`). Any other is written in full.
///
/// When the `urls` object's JSON is longer than [`COMPRESS_ABOVE`], the block is version 3 and
/// carries it as `"urls_z"`: the standard base64 of its zlib stream (RFC 1950), which a
/// browser expands with `DecompressionStream('deflate')`.
pub fn to_json(
    entries: BTreeMap<String, Vec<String>>,
    config: &serde_json::Map<String, serde_json::Value>,
) -> serde_json::Value {
    let mut servers: Vec<String> = Vec::new();
    let mut urls = serde_json::Map::new();
    for (key, physical) in entries {
        let list: Vec<serde_json::Value> = physical
            .into_iter()
            .map(
                |p| match p.strip_suffix(key.as_str()).filter(|b| !b.is_empty()) {
                    Some(base) => {
                        let i = servers.iter().position(|s| s == base).unwrap_or_else(|| {
                            servers.push(base.to_owned());
                            servers.len() - 1
                        });
                        serde_json::json!(i)
                    }
                    None => serde_json::Value::String(p),
                },
            )
            .collect();
        urls.insert(key, serde_json::Value::Array(list));
    }
    let urls = serde_json::Value::Object(urls);
    let text = urls.to_string();
    if text.len() <= COMPRESS_ABOVE {
        return serde_json::json!({
            "v": VERSION,
            "config": config,
            "servers": servers,
            "urls": urls,
        });
    }
    serde_json::json!({
        "v": VERSION_COMPRESSED,
        "config": config,
        "servers": servers,
        "urls_z": compress(text.as_bytes()),
    })
}

/// `bytes` as zlib, in standard base64.
fn compress(bytes: &[u8]) -> String {
    use base64::Engine as _;
    use std::io::Write as _;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    z.write_all(bytes).expect("zlib into memory");
    let z = z.finish().expect("zlib into memory");
    base64::engine::general_purpose::STANDARD.encode(z)
}

/// What [`compress`] made, back; `None` if it is not base64 of a zlib stream expanding to at
/// most [`MAX_EXPANDED`] bytes.
fn expand(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    use std::io::Read as _;
    let z = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(z.as_slice())
        .take(MAX_EXPANDED + 1)
        .read_to_end(&mut out)
        .ok()?;
    (out.len() as u64 <= MAX_EXPANDED).then_some(out)
}

/// A block's entries as [`to_json`] wrote them, each index expanded (`servers[i]` followed by
/// the key), as the agent reads them; `None` for JSON of another shape.
pub fn from_json(block: &serde_json::Value) -> Option<BTreeMap<String, Vec<String>>> {
    let servers = block.get("servers").and_then(|s| s.as_array());
    let expanded: serde_json::Value;
    let urls = match block.get("urls_z") {
        Some(z) => {
            expanded = serde_json::from_slice(&expand(z.as_str()?)?).ok()?;
            &expanded
        }
        None => block.get("urls")?,
    };
    let mut entries = BTreeMap::new();
    for (key, list) in urls.as_object()? {
        let list = list
            .as_array()?
            .iter()
            .map(|item| match item.as_u64() {
                Some(i) => Some(format!("{}{key}", servers?.get(i as usize)?.as_str()?)),
                None => item.as_str().map(str::to_owned),
            })
            .collect::<Option<Vec<String>>>()?;
        entries.insert(key.clone(), list);
    }
    Some(entries)
}

/// How the agent resolves `url` with a block's entries (`web/agent/agent.mjs` does the same):
/// the entry named by the URL itself, else the rule with the longest prefix of it, each `*`
/// of its stems replaced by the rest of the URL; `None` when the block says nothing of it.
pub fn lookup(entries: &BTreeMap<String, Vec<String>>, url: &str) -> Option<Vec<String>> {
    if !url.ends_with('*') {
        if let Some(list) = entries.get(url) {
            return Some(list.clone());
        }
    }
    entries
        .iter()
        .filter_map(|(key, list)| Some((key.strip_suffix('*')?, list)))
        .filter(|(prefix, _)| url.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(prefix, stems)| {
            let rest = &url[prefix.len()..];
            stems
                .iter()
                .map(|s| format!("{}{rest}", s.strip_suffix('*').unwrap_or(s)))
                .collect()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::{Entry, Pattern};
    use proptest::prelude::*;

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[test]
    fn a_wildcard_site_needs_one_rule_per_page() {
        let mut d = Directory::new();
        for node in ["a", "b", "c"] {
            d.apply(
                node,
                &Pattern::Prefix("/".into()),
                Entry::live(1, format!("http://{node}/*")),
            );
        }
        let mut needs = Needs::default();
        for i in 0..100 {
            needs.note(&d, format!("/img/{i}.png"));
        }
        let entries = needs.entries(&d, |_| true);
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(
            lookup(&entries, "/img/7.png"),
            Some(vec![
                "http://a/img/7.png".into(),
                "http://b/img/7.png".into(),
                "http://c/img/7.png".into()
            ])
        );
    }

    #[test]
    fn a_more_specific_pattern_travels_with_its_rule() {
        let mut d = Directory::new();
        d.apply(
            "a",
            &Pattern::Prefix("/".into()),
            Entry::live(1, "http://a/*"),
        );
        d.apply(
            "b",
            &Pattern::Exact("/x".into()),
            Entry::live(1, "http://b/r/x"),
        );
        d.apply("a", &Pattern::Exact("/y".into()), Entry::tombstone(2));
        let mut needs = Needs::default();
        needs.note(&d, "/z".into());
        let entries = needs.entries(&d, |_| true);
        // `/x` and `/y` are not on the page, but a rule for `/` must not answer for them.
        assert_eq!(
            lookup(&entries, "/x"),
            Some(vec!["http://a/x".into(), "http://b/r/x".into()])
        );
        assert_eq!(lookup(&entries, "/y"), Some(d.resolve("/y")));
    }

    #[test]
    fn too_many_patterns_under_a_rule_list_the_page_urls_alone() {
        let mut d = Directory::new();
        d.apply(
            "a",
            &Pattern::Prefix("/".into()),
            Entry::live(1, "http://a/*"),
        );
        for i in 0..=MAX_UNDER {
            d.apply(
                "b",
                &Pattern::Exact(format!("/e/{i}")),
                Entry::live(1, "http://b/e"),
            );
        }
        let mut needs = Needs::default();
        needs.note(&d, "/page.css".into());
        let entries = needs.entries(&d, |_| true);
        assert_eq!(entries.keys().collect::<Vec<_>>(), ["/page.css"]);
        assert_eq!(lookup(&entries, "/e/3"), None);
    }

    /// The shared vectors `web/test-vectors/block/*.json`, which the agent's tests replay
    /// too (`web/test/agent.test.mjs`): a block as the server writes it, read as the agent
    /// reads it (a server index is the server's string followed by the key). `compressed.json`
    /// carries `lookup.json`'s entries as version 3's `urls_z`.
    #[test]
    fn the_shared_lookup_vectors() {
        for text in [
            include_str!("../../../web/test-vectors/block/lookup.json"),
            include_str!("../../../web/test-vectors/block/compressed.json"),
        ] {
            let v: serde_json::Value = serde_json::from_str(text).expect("vector JSON");
            let entries = from_json(&v["block"]).expect("a block");
            let lookups = v["lookups"].as_object().expect("lookups");
            assert!(lookups.len() >= 8);
            for (url, want) in lookups {
                let want: Option<Vec<String>> =
                    serde_json::from_value(want.clone()).expect("a list or null");
                assert_eq!(lookup(&entries, url).map(sorted), want.map(sorted), "{url}");
            }
        }
    }

    #[test]
    fn a_long_list_travels_compressed_and_reads_back() {
        let entries: BTreeMap<String, Vec<String>> = (0..1200)
            .map(|i| {
                let url = format!("/img/{i}.png");
                let list = ["http://a", "http://b/_slipstream/replicas"]
                    .iter()
                    .map(|base| format!("{base}{url}"))
                    .collect();
                (url, list)
            })
            .collect();
        let json = to_json(entries.clone(), &serde_json::Map::new());
        assert_eq!(json["v"], VERSION_COMPRESSED);
        assert!(json.get("urls").is_none());
        let carried = json.to_string().len();
        // 1,200 URLs listed one by one: about 22 bytes each as plain JSON, under 4 compressed.
        assert!(carried < 1200 * 4, "{carried} bytes");
        assert_eq!(from_json(&json), Some(entries));
        // A small block stays plain JSON, readable in the page.
        let small = to_json(
            [("/a".to_owned(), vec!["http://a/a".to_owned()])].into(),
            &serde_json::Map::new(),
        );
        assert_eq!(small["v"], VERSION);
        assert_eq!(small["urls"]["/a"], serde_json::json!([0]));
    }

    #[test]
    fn a_bad_or_overlong_compressed_block_is_refused() {
        let block = |z: serde_json::Value| serde_json::json!({"v": 3, "servers": [], "urls_z": z});
        assert_eq!(from_json(&block("not base64!".into())), None);
        assert_eq!(from_json(&block(compress(b"[1,2]").into())), None);
        assert_eq!(from_json(&block(serde_json::json!(7))), None);
        // Expands past MAX_EXPANDED: refused without expanding it all.
        let bomb = vec![b' '; MAX_EXPANDED as usize + 2];
        let mut text = b"{".to_vec();
        text.extend_from_slice(&bomb);
        text.push(b'}');
        assert_eq!(from_json(&block(compress(&text).into())), None);
        // The same, under the bound, is read.
        assert_eq!(
            from_json(&block(compress(b"{ }").into())),
            Some(BTreeMap::new())
        );
    }

    fn update() -> impl Strategy<Value = (String, Pattern, Entry)> {
        let pattern = prop_oneof![
            "/[ab]{0,3}".prop_map(Pattern::Exact),
            "/[ab]{0,2}".prop_map(Pattern::Prefix),
        ];
        ("[n-p]", pattern, 0u64..4, any::<bool>(), "[xy]{0,2}").prop_map(
            |(node, pattern, version, deleted, path)| {
                let entry = if deleted {
                    Entry::tombstone(version)
                } else if matches!(pattern, Pattern::Prefix(_)) {
                    Entry::live(version, format!("http://{node}/{path}*"))
                } else {
                    Entry::live(version, format!("http://{node}/{path}"))
                };
                (node, pattern, entry)
            },
        )
    }

    proptest! {
        /// Whatever the directory and the page, the agent's lookup in the block agrees with
        /// the directory for every URL it answers, and answers every URL of the page that
        /// has a replica.
        #[test]
        fn the_agent_resolves_as_the_directory_does(
            updates in prop::collection::vec(update(), 0..24),
            page in prop::collection::vec("/[ab]{0,4}", 0..8),
            others in prop::collection::vec("/[ab]{0,5}", 0..16),
            dead in "[n-p]?",
        ) {
            let mut d = Directory::new();
            for (node, pattern, entry) in &updates {
                d.apply(node, pattern, entry.clone());
            }
            let speaks = |n: &str| n != dead;
            let mut needs = Needs::default();
            for url in &page {
                needs.note(&d, url.clone());
            }
            let entries = needs.entries(&d, speaks);
            // What the page carries reads back as the same entries.
            let json = to_json(entries.clone(), &serde_json::Map::new());
            prop_assert_eq!(from_json(&json), Some(entries.clone()));
            for url in page.iter().chain(&others) {
                let truth = d.resolve_among(url, speaks);
                match lookup(&entries, url) {
                    Some(list) => prop_assert_eq!(sorted(list), truth, "{}", url),
                    None => prop_assert!(
                        !page.contains(url) || truth.is_empty(),
                        "page URL {} left out", url
                    ),
                }
            }
        }
    }
}
