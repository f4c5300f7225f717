//! The hint server's core (000 §2.3, §6.1), without I/O: it learns from the demand stream and
//! answers a hint request with a ranked list of URLs.
//!
//! A hint request carries what the paper's `PFCOOKIE` carries: the client's current document
//! and the one before it, and the request's `TURN` in the chain of short lists (§6.1 step 6:
//! turn `t` gets the `t`-th slice of one document's worth). The client is therefore predicted
//! from what it says, not from state the server keeps per client, and needs no cookie at all.
//! Training keeps a bounded history per client (a key the caller derives from the demand
//! request, such as address and user agent, kept as a 64-bit hash), oldest client forgotten
//! first. What the model holds is bounded in bytes as well as counts: a URL longer than
//! `max_url_len` (a query string of kilobytes) is not learnt, nor one past `max_url_bytes` of
//! URL text.
//!
//! PPM-n/w ranks first; the popularity baseline fills the list when the contexts know too
//! little (a new site, a page never seen twice), so a budget is never left unspent for want
//! of a guess.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;

use crate::predict::{History, Item, Popularity, Ppm, Predictor};
use crate::sessions::Symbols;

/// The hint core's bounds and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintsConfig {
    /// PPM order n (000 §6.3: 2).
    pub order: usize,
    /// PPM window w, in pages (000 §6.3: 10).
    pub window: usize,
    /// At most this many distinct URLs learnt; requests for others are not learnt.
    pub max_urls: usize,
    /// URLs (path and query) longer than this are not learnt.
    pub max_url_len: usize,
    /// At most this many bytes of URL text held (each URL is held twice: by name and by id).
    pub max_url_bytes: usize,
    /// At most this many PPM contexts.
    pub max_contexts: usize,
    /// At most this many followers per context.
    pub max_follow: usize,
    /// At most this many clients' histories; the oldest is forgotten first.
    pub max_clients: usize,
    /// Fill lists from the most popular URLs when PPM knows too little.
    pub fill_popular: bool,
}

impl Default for HintsConfig {
    fn default() -> Self {
        HintsConfig {
            order: 2,
            window: 10,
            max_urls: 100_000,
            max_url_len: 512,
            max_url_bytes: 16 << 20,
            max_contexts: 200_000,
            max_follow: 256,
            max_clients: 50_000,
            fill_popular: true,
        }
    }
}

/// How often the popularity ranking is recomputed, in learnt requests.
const TOP_EVERY: u64 = 1024;
/// How many popular URLs are kept ranked.
const TOP_KEEP: usize = 256;
/// How many embedded objects are remembered per page.
const MAX_EMBEDS: usize = 64;

/// The hint server's model: PPM-n/w and popularity, trained online.
#[derive(Debug, Clone)]
pub struct Hints {
    config: HintsConfig,
    symbols: Symbols,
    ppm: Ppm,
    popularity: Popularity,
    /// The most popular URLs, best first, as of the last recomputation.
    top: Vec<u32>,
    learnt: u64,
    /// Each client's history, by the hash of its key.
    clients: HashMap<u64, History>,
    arrival: VecDeque<u64>,
    /// Hashes client keys (keyed at random, so that keys cannot be chosen to collide).
    hasher: std::collections::hash_map::RandomState,
    /// Bytes of URL text held.
    url_bytes: usize,
    /// Each page's embedded objects: those its clients requested after it and before their
    /// next page. A client asking for hints has just loaded them, so they are never hinted.
    embeds: HashMap<u32, Vec<u32>>,
    /// Requests not learnt because `max_urls` was reached.
    unlearnt: u64,
}

/// What the model holds, for the status page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelStats {
    /// Requests learnt.
    pub learnt: u64,
    /// Distinct URLs known.
    pub urls: usize,
    /// PPM contexts.
    pub contexts: usize,
    /// Clients with a history.
    pub clients: usize,
    /// Requests or contexts turned away by a bound.
    pub refused: u64,
}

impl Hints {
    /// An untrained model.
    pub fn new(config: HintsConfig) -> Hints {
        let ppm = Ppm::new(config.order, config.window)
            .with_limits(config.max_contexts, config.max_follow);
        Hints {
            config,
            symbols: Symbols::default(),
            ppm,
            popularity: Popularity::new(),
            top: Vec::new(),
            learnt: 0,
            clients: HashMap::new(),
            arrival: VecDeque::new(),
            hasher: std::collections::hash_map::RandomState::new(),
            url_bytes: 0,
            embeds: HashMap::new(),
            unlearnt: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &HintsConfig {
        &self.config
    }

    /// What the model holds.
    pub fn stats(&self) -> ModelStats {
        ModelStats {
            learnt: self.learnt,
            urls: self.symbols.len(),
            contexts: self.ppm.contexts(),
            clients: self.clients.len(),
            refused: self.unlearnt + self.ppm.refused(),
        }
    }

    /// Learns one demand request of `client` for `url` (a path with its query), a page or an
    /// object embedded in one.
    pub fn learn(&mut self, client: &str, url: &str, page: bool) {
        let sym = match self.symbols.find(url) {
            Some(s) => s,
            None if self.symbols.len() < self.config.max_urls
                && url.len() <= self.config.max_url_len
                && self.url_bytes + 2 * url.len() <= self.config.max_url_bytes =>
            {
                self.url_bytes += 2 * url.len();
                self.symbols.intern(url)
            }
            None => {
                self.unlearnt += 1;
                return;
            }
        };
        let client = self.hasher.hash_one(client);
        let item = if page {
            Item::page(sym)
        } else {
            Item::embedded(sym)
        };
        if !self.clients.contains_key(&client) {
            if self.clients.len() >= self.config.max_clients.max(1) {
                if let Some(old) = self.arrival.pop_front() {
                    self.clients.remove(&old);
                }
            }
            self.clients.insert(client, History::new());
            self.arrival.push_back(client);
        }
        let history = self.clients.get_mut(&client).expect("inserted above");
        if !page {
            if let Some(&parent) = history.context(1).first() {
                // Pages are symbols too, so at most `max_urls` entries.
                let embeds = self.embeds.entry(parent).or_default();
                if embeds.len() < MAX_EMBEDS && !embeds.contains(&sym) {
                    embeds.push(sym);
                }
            }
        }
        self.ppm.learn(history, item);
        let mut scratch = History::new();
        self.popularity.learn(&mut scratch, item);
        self.learnt += 1;
        // Early on the ranking is cheap and changes fast; later, once every TOP_EVERY requests.
        if self.learnt <= TOP_EVERY || self.learnt.is_multiple_of(TOP_EVERY) {
            self.top = self
                .popularity
                .predict(&History::new(), TOP_KEEP, true)
                .into_iter()
                .map(|p| p.sym)
                .collect();
        }
    }

    /// The `turn`-th list (from 0) of at most `len` URLs for a client whose current document
    /// is `current` and previous one `previous`: PPM's ranking from the client's context, the
    /// popular URLs after it. The documents themselves and the objects embedded in them (the
    /// client has just loaded both) are never hinted.
    pub fn hints(
        &self,
        current: &str,
        previous: Option<&str>,
        turn: usize,
        len: usize,
    ) -> Vec<String> {
        let mut history = History::new();
        for doc in previous.into_iter().chain(Some(current)) {
            if let Some(sym) = self.symbols.find(doc) {
                history.push(Item::page(sym));
                for &e in self.embeds.get(&sym).into_iter().flatten() {
                    history.push(Item::embedded(e));
                }
            }
        }
        let skip = turn.saturating_mul(len);
        let want = skip.saturating_add(len);
        let mut ranked: Vec<u32> = self
            .ppm
            .predict(&history, want, false)
            .into_iter()
            .map(|p| p.sym)
            .collect();
        if self.config.fill_popular && ranked.len() < want {
            for &sym in &self.top {
                if ranked.len() >= want {
                    break;
                }
                let name = self.symbols.name(sym);
                if name != current
                    && Some(name) != previous
                    && !history.has_seen(sym)
                    && !ranked.contains(&sym)
                {
                    ranked.push(sym);
                }
            }
        }
        ranked
            .into_iter()
            .skip(skip)
            .take(len)
            .map(|sym| self.symbols.name(sym).to_owned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visit(h: &mut Hints, client: &str, pages: &[&str]) {
        for p in pages {
            h.learn(client, p, true);
            h.learn(client, &format!("{p}.png"), false);
        }
    }

    #[test]
    fn the_context_ranks_and_turns_slice_the_ranking() {
        let mut h = Hints::new(HintsConfig {
            fill_popular: false,
            ..HintsConfig::default()
        });
        for c in 0..20 {
            visit(&mut h, &format!("c{c}"), &["/a", "/b", "/c", "/d"]);
        }
        let first = h.hints("/b", Some("/a"), 0, 2);
        assert_eq!(first.len(), 2);
        assert!(!first.contains(&"/b".to_owned()) && !first.contains(&"/a".to_owned()));
        let second = h.hints("/b", Some("/a"), 1, 2);
        assert!(
            second.iter().all(|u| !first.contains(u)),
            "{first:?} {second:?}"
        );
        // Everything that followed /a, /b in the window, in four turns of two.
        let all: Vec<String> = (0..4)
            .flat_map(|t| h.hints("/b", Some("/a"), t, 2))
            .collect();
        for u in ["/c", "/c.png", "/d", "/d.png"] {
            assert!(all.contains(&u.to_owned()), "{u} missing from {all:?}");
        }
        assert!(h.hints("/b", Some("/a"), 9, 2).is_empty());
        // An unknown page, without popularity, gets nothing.
        assert!(h.hints("/zzz", None, 0, 5).is_empty());
    }

    #[test]
    fn popularity_fills_what_ppm_cannot() {
        let mut h = Hints::new(HintsConfig::default());
        for c in 0..50 {
            visit(&mut h, &format!("c{c}"), &["/home", "/news"]);
        }
        let list = h.hints("/never-seen", None, 0, 3);
        assert_eq!(list.len(), 3);
        assert!(list.contains(&"/home".to_owned()) || list.contains(&"/news".to_owned()));
        assert!(!h.hints("/home", None, 0, 10).contains(&"/home".to_owned()));
    }

    #[test]
    fn a_documents_own_objects_are_never_hinted() {
        let mut h = Hints::new(HintsConfig::default());
        for c in 0..30 {
            visit(&mut h, &format!("c{c}"), &["/a", "/b"]);
        }
        // Without the rule, /a.png (it follows /a in every window) would rank first.
        let list: Vec<String> = (0..5).flat_map(|t| h.hints("/a", None, t, 2)).collect();
        assert!(!list.contains(&"/a.png".to_owned()), "{list:?}");
        assert!(list.contains(&"/b".to_owned()) && list.contains(&"/b.png".to_owned()));
        // Nor from the popular fill, nor the previous document's.
        let list: Vec<String> = (0..5)
            .flat_map(|t| h.hints("/b", Some("/a"), t, 2))
            .collect();
        assert!(
            !list.contains(&"/a.png".to_owned()) && !list.contains(&"/b.png".to_owned()),
            "{list:?}"
        );
    }

    #[test]
    fn bounds_hold() {
        let mut h = Hints::new(HintsConfig {
            max_urls: 10,
            max_clients: 3,
            ..HintsConfig::default()
        });
        for c in 0..10 {
            for u in 0..20 {
                h.learn(&format!("c{c}"), &format!("/{u}"), true);
            }
        }
        let s = h.stats();
        assert_eq!(s.urls, 10);
        assert_eq!(s.clients, 3);
        assert_eq!(s.refused, 100);
        assert_eq!(s.learnt, 100);
    }

    #[test]
    fn long_urls_and_url_bytes_are_bounded() {
        let mut h = Hints::new(HintsConfig {
            max_url_len: 64,
            max_url_bytes: 1000,
            ..HintsConfig::default()
        });
        let long = format!("/index.html?q={}", "x".repeat(14_000));
        for i in 0..1000 {
            h.learn(
                &format!("10.0.0.1 agent-{i}-{}", "u".repeat(1000)),
                &long,
                true,
            );
        }
        assert_eq!(h.stats().urls, 0);
        assert_eq!(h.stats().clients, 0);
        for i in 0..1000 {
            h.learn("c", &format!("/p?{i:040}"), true);
        }
        // Each URL is 43 bytes, held twice: 11 of them fit in 1000 bytes.
        assert_eq!(h.stats().urls, 11);
        assert_eq!(h.stats().refused, 1000 + 989);
    }
}
