//! The predictors: PPM-n/w (000 §6.3) and two baselines, behind [`Predictor`].

use std::collections::{HashMap, HashSet, VecDeque};

/// A URL (or, in MSNBC's trace, a page category), interned by [`crate::sessions::Symbols`].
pub type Sym = u32;

/// One request of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    /// What was requested.
    pub sym: Sym,
    /// A page, not an object embedded in one (image, stylesheet, script, font). The paper's
    /// contexts and windows count "non-image" requests only; embedded objects are predicted
    /// but do not move the window.
    pub page: bool,
}

impl Item {
    /// A page request.
    pub fn page(sym: Sym) -> Item {
        Item { sym, page: true }
    }

    /// A request for an object embedded in a page.
    pub fn embedded(sym: Sym) -> Item {
        Item { sym, page: false }
    }
}

/// One predicted URL.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// What to prefetch.
    pub sym: Sym,
    /// The estimated probability that the client requests it within the window.
    pub p: f64,
}

/// What a predictor knows of one client: its recent pages, what it requested this session,
/// and (for training) the windows still open.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The most recent pages, oldest first, at most [`History::KEEP`].
    recent: VecDeque<Sym>,
    /// Everything the client requested this session (its browser has it).
    seen: HashSet<Sym>,
    /// Windows still collecting the URLs that follow a context (PPM training).
    open: VecDeque<Window>,
}

/// A context's window: the URLs requested after it, until its `w`-th next page.
#[derive(Debug, Clone)]
struct Window {
    /// The context keys (every order) the window credits.
    keys: Vec<Vec<Sym>>,
    /// URLs already credited (each counts once a window).
    credited: Vec<Sym>,
    /// Pages still to come before the window closes.
    pages_left: usize,
}

impl History {
    /// The most pages of context a history keeps (the highest PPM order served).
    pub const KEEP: usize = 8;

    /// A new client's (or a new session's) history.
    pub fn new() -> History {
        History::default()
    }

    /// Notes `item` without training anything: the client's state moves on.
    pub fn push(&mut self, item: Item) {
        self.seen.insert(item.sym);
        if item.page {
            if self.recent.len() == History::KEEP {
                self.recent.pop_front();
            }
            self.recent.push_back(item.sym);
        }
    }

    /// The last `n` pages (fewer if the session has fewer), oldest first.
    pub fn context(&self, n: usize) -> Vec<Sym> {
        let n = n.min(self.recent.len());
        self.recent
            .iter()
            .skip(self.recent.len() - n)
            .copied()
            .collect()
    }

    /// Whether the client requested `sym` this session.
    pub fn has_seen(&self, sym: Sym) -> bool {
        self.seen.contains(&sym)
    }
}

/// A prefetch predictor. `learn` trains on one request of a client (and moves its history on);
/// `predict` ranks what the client will request next, best first.
pub trait Predictor: std::fmt::Debug {
    /// A short name for reports: `ppm-2/10`, `markov`, `top`.
    fn name(&self) -> String;

    /// Trains on `item`, the next request of the client whose history is `history`, and
    /// pushes it onto the history.
    fn learn(&mut self, history: &mut History, item: Item);

    /// At most `k` predictions for the client, most probable first. Unless `repeat`, a URL
    /// the client requested this session is never predicted (its browser has it).
    fn predict(&self, history: &History, k: usize, repeat: bool) -> Vec<Prediction>;
}

/// Prediction by partial matching over a window, PPM-n/w (000 §6.3, after Fan et al.): for
/// every context (a client's last 1 to `n` pages), how often it was seen and how often each URL
/// was requested within the window that ends with the `w`-th page after it. A client is
/// predicted from its longest context seen in training; shorter ones fill the list.
#[derive(Debug, Clone)]
pub struct Ppm {
    order: usize,
    window: usize,
    contexts: HashMap<Vec<Sym>, Counts>,
    /// At most this many contexts; a new one beyond it is not learnt.
    max_contexts: usize,
    /// At most this many followers a context; a new one beyond it is not learnt.
    max_follow: usize,
    /// What the bounds turned away.
    refused: u64,
}

/// One context's counts.
#[derive(Debug, Clone, Default)]
struct Counts {
    /// Windows opened after the context.
    seen: u64,
    /// Windows in which each URL was requested.
    follow: HashMap<Sym, u64>,
}

impl Ppm {
    /// PPM of order `order` (n ≥ 1, at most [`History::KEEP`]) over a window of `window` pages
    /// (w ≥ 1).
    pub fn new(order: usize, window: usize) -> Ppm {
        assert!((1..=History::KEEP).contains(&order), "PPM order {order}");
        assert!(window >= 1, "PPM window {window}");
        Ppm {
            order,
            window,
            contexts: HashMap::new(),
            max_contexts: usize::MAX,
            max_follow: usize::MAX,
            refused: 0,
        }
    }

    /// Bounds the model for a server that learns forever: at most `max_contexts` contexts and
    /// `max_follow` followers each. At a bound, what is new is not learnt (counted in
    /// [`Ppm::refused`]); what is known keeps counting.
    pub fn with_limits(mut self, max_contexts: usize, max_follow: usize) -> Ppm {
        self.max_contexts = max_contexts;
        self.max_follow = max_follow;
        self
    }

    /// New contexts and followers not learnt because the model was at a bound.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The paper's prototype: n = 2, w = 10.
    pub fn paper() -> Ppm {
        Ppm::new(2, 10)
    }

    /// The first-order Markov chain of Guess.js-style prefetchers: the current page predicts
    /// the next page (and what is requested before it).
    pub fn markov() -> Ppm {
        Ppm::new(1, 1)
    }

    /// How many contexts the model holds.
    pub fn contexts(&self) -> usize {
        self.contexts.len()
    }
}

impl Predictor for Ppm {
    fn name(&self) -> String {
        if (self.order, self.window) == (1, 1) {
            "markov".into()
        } else {
            format!("ppm-{}/{}", self.order, self.window)
        }
    }

    fn learn(&mut self, history: &mut History, item: Item) {
        for w in history.open.iter_mut() {
            if !w.credited.contains(&item.sym) {
                w.credited.push(item.sym);
                for key in &w.keys {
                    if let Some(c) = self.contexts.get_mut(key) {
                        if let Some(n) = c.follow.get_mut(&item.sym) {
                            *n += 1;
                        } else if c.follow.len() < self.max_follow {
                            c.follow.insert(item.sym, 1);
                        } else {
                            self.refused += 1;
                        }
                    }
                }
            }
            if item.page {
                w.pages_left -= 1;
            }
        }
        history.open.retain(|w| w.pages_left > 0);
        history.push(item);
        if item.page {
            let keys: Vec<Vec<Sym>> = (1..=self.order.min(history.recent.len()))
                .map(|n| history.context(n))
                .collect();
            for key in &keys {
                if let Some(c) = self.contexts.get_mut(key) {
                    c.seen += 1;
                } else if self.contexts.len() < self.max_contexts {
                    self.contexts.insert(
                        key.clone(),
                        Counts {
                            seen: 1,
                            ..Counts::default()
                        },
                    );
                } else {
                    self.refused += 1;
                }
            }
            history.open.push_back(Window {
                keys,
                credited: Vec::new(),
                pages_left: self.window,
            });
        }
    }

    fn predict(&self, history: &History, k: usize, repeat: bool) -> Vec<Prediction> {
        let mut out: Vec<Prediction> = Vec::new();
        for n in (1..=self.order.min(history.recent.len())).rev() {
            if out.len() >= k {
                break;
            }
            let Some(c) = self.contexts.get(&history.context(n)) else {
                continue;
            };
            let mut found: Vec<Prediction> = c
                .follow
                .iter()
                .filter(|(s, _)| repeat || !history.has_seen(**s))
                .filter(|(s, _)| !out.iter().any(|p| p.sym == **s))
                .map(|(s, count)| Prediction {
                    sym: *s,
                    p: *count as f64 / c.seen as f64,
                })
                .collect();
            found.sort_by(|a, b| b.p.total_cmp(&a.p).then(a.sym.cmp(&b.sym)));
            out.extend(found.into_iter().take(k - out.len()));
        }
        out
    }
}

/// The popularity baseline ("top-10"): the URLs requested most often, by anyone.
#[derive(Debug, Clone, Default)]
pub struct Popularity {
    counts: HashMap<Sym, u64>,
    total: u64,
}

impl Popularity {
    /// An untrained baseline.
    pub fn new() -> Popularity {
        Popularity::default()
    }
}

impl Predictor for Popularity {
    fn name(&self) -> String {
        "top".into()
    }

    fn learn(&mut self, history: &mut History, item: Item) {
        *self.counts.entry(item.sym).or_default() += 1;
        self.total += 1;
        history.push(item);
    }

    fn predict(&self, history: &History, k: usize, repeat: bool) -> Vec<Prediction> {
        let mut all: Vec<(Sym, u64)> = self
            .counts
            .iter()
            .filter(|(s, _)| repeat || !history.has_seen(**s))
            .map(|(s, c)| (*s, *c))
            .collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        all.into_iter()
            .take(k)
            .map(|(sym, c)| Prediction {
                sym,
                p: c as f64 / self.total as f64,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn train(p: &mut dyn Predictor, sessions: &[Vec<Item>]) {
        for s in sessions {
            let mut h = History::new();
            for item in s {
                p.learn(&mut h, *item);
            }
        }
    }

    fn syms(ps: &[Prediction]) -> Vec<Sym> {
        ps.iter().map(|p| p.sym).collect()
    }

    fn pages(s: &[Sym]) -> Vec<Item> {
        s.iter().map(|&s| Item::page(s)).collect()
    }

    #[test]
    fn the_longest_context_decides_and_shorter_ones_fill() {
        // After 1 then 2 comes 3; after 5 then 2 comes 4; after 2 alone, 3 and 4 each half.
        let mut ppm = Ppm::new(2, 1);
        train(
            &mut ppm,
            &[pages(&[1, 2, 3]), pages(&[5, 2, 4]), pages(&[1, 2, 3])],
        );
        let mut h = History::new();
        h.push(Item::page(1));
        h.push(Item::page(2));
        let got = ppm.predict(&h, 2, false);
        assert_eq!(syms(&got), [3, 4]);
        assert_eq!(got[0].p, 1.0);
        // 4 comes from the order-1 context `2`: one window of three.
        assert!((got[1].p - 1.0 / 3.0).abs() < 1e-9, "{got:?}");
        // A context never seen: order 1 only.
        let mut h = History::new();
        h.push(Item::page(9));
        h.push(Item::page(2));
        assert_eq!(syms(&ppm.predict(&h, 5, false)), [3, 4]);
    }

    #[test]
    fn the_window_counts_pages_and_spans_embedded_objects() {
        // 1 → (image 7) 2 → 3 → 4: with w = 2 the window after 1 holds 7, 2 and 3, not 4.
        let mut ppm = Ppm::new(1, 2);
        let s = vec![
            Item::page(1),
            Item::embedded(7),
            Item::page(2),
            Item::page(3),
            Item::page(4),
        ];
        train(&mut ppm, &[s]);
        let mut h = History::new();
        h.push(Item::page(1));
        let mut got = syms(&ppm.predict(&h, 10, false));
        got.sort();
        assert_eq!(got, [2, 3, 7]);
        // An embedded object is no context: after the image, still page 1's predictions.
        h.push(Item::embedded(7));
        let mut got = syms(&ppm.predict(&h, 10, false));
        got.sort();
        assert_eq!(got, [2, 3]);
    }

    #[test]
    fn a_url_counts_once_a_window_and_seen_urls_are_not_predicted() {
        let mut ppm = Ppm::new(1, 3);
        train(&mut ppm, &[pages(&[1, 2, 2, 2])]);
        let mut h = History::new();
        h.push(Item::page(1));
        assert_eq!(ppm.predict(&h, 3, false)[0].p, 1.0);
        h.push(Item::page(2));
        h.push(Item::page(1));
        // 2 was seen this session: not predicted, unless repeats are wanted (MSNBC's categories).
        assert!(ppm.predict(&h, 3, false).is_empty());
        assert_eq!(syms(&ppm.predict(&h, 3, true)), [2]);
    }

    #[test]
    fn popularity_ranks_by_count() {
        let mut top = Popularity::new();
        train(&mut top, &[pages(&[1, 2, 2, 3, 3, 3])]);
        assert_eq!(syms(&top.predict(&History::new(), 2, false)), [3, 2]);
        assert_eq!(top.name(), "top");
        assert_eq!(Ppm::markov().name(), "markov");
        assert_eq!(Ppm::paper().name(), "ppm-2/10");
    }

    proptest! {
        /// A chain that always goes a → a+1 is learnt: every prediction's probability is in
        /// (0, 1], the next page is ranked first, and lists are as long as asked or the model
        /// knows.
        #[test]
        fn probabilities_are_in_range_and_a_deterministic_chain_is_learnt(
            sessions in prop::collection::vec(prop::collection::vec(0u32..20, 1..30), 1..20),
            order in 1usize..4,
            window in 1usize..6,
            k in 1usize..8,
        ) {
            let mut ppm = Ppm::new(order, window);
            let items: Vec<Vec<Item>> = sessions.iter().map(|s| pages(s)).collect();
            train(&mut ppm, &items);
            for s in &sessions {
                let mut h = History::new();
                for &sym in s {
                    h.push(Item::page(sym));
                    let got = ppm.predict(&h, k, true);
                    prop_assert!(got.len() <= k);
                    for p in &got {
                        prop_assert!(p.p > 0.0 && p.p <= 1.0, "{:?}", p);
                    }
                    let mut unique = syms(&got);
                    unique.sort();
                    unique.dedup();
                    prop_assert_eq!(unique.len(), got.len());
                }
            }
            let mut chain = Ppm::new(order, 1);
            train(&mut chain, &[pages(&(0..50).collect::<Vec<_>>())]);
            let mut h = History::new();
            for sym in 0..10 {
                h.push(Item::page(sym));
                prop_assert_eq!(syms(&chain.predict(&h, 1, false)), vec![sym + 1]);
            }
        }
    }
}
