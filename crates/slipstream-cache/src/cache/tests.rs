use proptest::prelude::*;

use super::*;

fn cache(capacity: u64, policy: &str) -> Cache<String, u64> {
    Cache::new(Config::new(capacity, policy.parse().expect("policy")))
}

fn request(c: &mut Cache<String, u64>, key: &str, size: u64) -> bool {
    match c.access(key) {
        Access::Hit { .. } => true,
        Access::Miss => {
            c.admit(key, size, size);
            false
        }
    }
}

#[test]
fn refusals_decided_by_plan_are_counted() {
    // LFU admission (002 §4.2.4.2): a once-seen object may not displace a popular one.
    let mut c = cache(1000, "total");
    for _ in 0..3 {
        request(&mut c, "/popular", 800);
    }
    assert!(!c.admit("/newcomer", 800, 800));
    assert_eq!(c.stats().admission_rejects, 1);
    // No level stores an object larger than the whole cache.
    assert!(!c.admit("/huge", 5000, 5000));
    assert_eq!(c.stats().level_rejects, 1);
}

#[test]
fn complete_and_incomplete_entries() {
    let mut c = cache(1000, "adaptive");
    request(&mut c, "/small", 100);
    request(&mut c, "/large", 5000);
    let Access::Hit { stored, .. } = c.access("/small") else {
        panic!("small should hit")
    };
    assert!(stored.complete);
    let Access::Hit { stored, .. } = c.access("/large") else {
        panic!("large should hit")
    };
    assert_eq!(
        stored,
        Stored {
            bytes: 250,
            complete: false
        }
    );
    assert_eq!(c.used_bytes(), 350);
}

#[test]
fn newcomer_cannot_displace_more_popular_entries() {
    // 002 §4.2.4.2: p may displace q only if freq(p) > freq(q).
    let mut c = cache(300, "total");
    for _ in 0..3 {
        request(&mut c, "/a", 300);
    }
    assert!(!request(&mut c, "/b", 300));
    assert!(!request(&mut c, "/b", 300));
    assert!(
        !request(&mut c, "/b", 300),
        "freq(b)=3 == freq(a)=3, b must not be cached"
    );
    assert!(matches!(c.access("/a"), Access::Hit { .. }));
    // b's fourth and fifth requests: freq(b)=5 > freq(a)=4 now, so b displaces a.
    assert!(!request(&mut c, "/b", 300));
    assert!(!request(&mut c, "/b", 300));
    assert!(matches!(c.access("/b"), Access::Hit { .. }));
    assert!(matches!(
        c.access("/a"),
        Access::Miss | Access::Hit { revived: true, .. }
    ));
}

#[test]
fn evicted_entry_comes_back_from_the_free_list() {
    let mut config = Config::new(100, "lru".parse().expect("policy"));
    config.free_list_flush_every = 1000;
    let mut c: Cache<String, u64> = Cache::new(config);
    request(&mut c, "/a", 100);
    request(&mut c, "/b", 100);
    assert_eq!(c.free_list_bytes(), 100);
    assert!(matches!(c.access("/a"), Access::Hit { revived: true, .. }));
    assert_eq!(c.stats().revived, 1);
    c.audit().expect("accounting");
}

#[test]
fn free_list_is_flushed_every_n_accesses() {
    let mut config = Config::new(100, "lru".parse().expect("policy"));
    config.free_list_flush_every = 10;
    let mut c: Cache<String, u64> = Cache::new(config);
    request(&mut c, "/a", 100);
    request(&mut c, "/b", 100);
    assert_eq!(c.free_list_bytes(), 100);
    for _ in 0..8 {
        c.access("/b");
    }
    assert_eq!(c.free_list_bytes(), 0);
    assert_eq!(c.stats().free_list_flushes, 1);
}

#[test]
fn invalidate_keeps_frequency() {
    let mut c = cache(1000, "adaptive");
    request(&mut c, "/a", 10);
    request(&mut c, "/a", 10);
    c.invalidate("/a");
    assert!(matches!(c.access("/a"), Access::Miss));
    assert_eq!(c.frequency("/a"), Some(3));
    assert_eq!(c.used_bytes(), 0);
}

#[test]
fn header_table_is_bounded() {
    let mut config = Config::new(100, Policy::ADAPTIVE);
    config.max_tracked = 50;
    let mut c: Cache<String, u64> = Cache::new(config);
    for i in 0..1000 {
        request(&mut c, &format!("/k{i}"), 1000);
    }
    c.audit().expect("bounded");
    assert!(c.stats().header_sweeps > 0);
}

#[derive(Debug, Clone)]
enum Op {
    Request(u8, u64),
    Invalidate(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        9 => (0u8..40, 0u64..600).prop_map(|(k, s)| Op::Request(k, s)),
        1 => (0u8..40).prop_map(Op::Invalidate),
    ]
}

fn policy() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "total",
        "small",
        "adaptive",
        "lru",
        "sieve",
        "adaptive+sieve",
        "small+lru",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Capacity is never exceeded and the byte accounting is exact after every operation.
    #[test]
    fn capacity_and_accounting(policy in policy(), capacity in 1u64..2000, flush in 0u64..20, ops in prop::collection::vec(op(), 1..400)) {
        let mut config = Config::new(capacity, policy.parse().expect("policy"));
        config.free_list_flush_every = flush;
        config.max_tracked = 30;
        let mut c: Cache<String, u64> = Cache::new(config);
        for op in ops {
            match op {
                Op::Request(k, size) => { request(&mut c, &format!("/{k}"), size); }
                Op::Invalidate(k) => { c.invalidate(&format!("/{k}")); }
            }
            prop_assert!(c.used_bytes() <= capacity);
            if let Err(e) = c.audit() { prop_assert!(false, "{}", e); }
        }
    }

    /// 002 §4.2.4.2: under LFU a newcomer evicts only strictly less frequent entries, and a
    /// refused newcomer evicts nothing.
    #[test]
    fn admission_rule(level in prop::sample::select(vec!["total", "small", "adaptive"]), capacity in 1u64..2000, ops in prop::collection::vec((0u8..30, 1u64..800), 1..400)) {
        let mut c: Cache<String, u64> = Cache::new(Config::new(capacity, level.parse().expect("policy")));
        for (k, size) in ops {
            let key = format!("/{k}");
            if let Access::Miss = c.access(key.as_str()) {
                let before_used = c.used_bytes();
                let before_evictions = c.stats().evictions;
                let planned = c.plan(key.as_str(), size);
                match c.insert(key.clone(), size, size) {
                    Ok(ins) => {
                        prop_assert!(planned.is_some(), "plan refused but insert succeeded");
                        if let Some(victim) = ins.max_victim_freq {
                            prop_assert!(victim < ins.freq, "evicted freq {} for newcomer freq {}", victim, ins.freq);
                        }
                    }
                    Err(_) => {
                        prop_assert!(planned.is_none(), "plan admitted but insert refused");
                        prop_assert_eq!(c.used_bytes(), before_used);
                        prop_assert_eq!(c.stats().evictions, before_evictions);
                    }
                }
            }
        }
    }
}

#[test]
fn forget_drops_only_headers_without_data() {
    let mut c: Cache<String, u32> = Cache::new(Config::new(1000, "lru".parse().expect("policy")));
    assert!(matches!(c.access("/missing"), Access::Miss));
    assert_eq!(c.tracked(), 1);
    assert!(c.forget("/missing"));
    assert_eq!(c.tracked(), 0);
    assert!(matches!(c.access("/a"), Access::Miss));
    c.insert("/a".to_owned(), 10, 1).expect("admitted");
    assert!(!c.forget("/a"), "a cached object keeps its header");
    assert_eq!(c.tracked(), 1);
    c.audit().expect("exact accounting");
}

#[test]
fn insert_evicting_names_the_entries_it_evicted() {
    let mut c = cache(1000, "lru");
    let mut evicted = Vec::new();
    for k in ["/a", "/b", "/c"] {
        c.access(k);
        c.insert_evicting(k.to_owned(), 300, 300, &mut evicted)
            .expect("room");
    }
    assert!(evicted.is_empty());
    c.access("/a"); // /b is now the least recently used
    c.access("/d");
    c.insert_evicting("/d".to_owned(), 300, 300, &mut evicted)
        .expect("room made");
    assert_eq!(evicted, vec!["/b".to_owned()]);
    assert!(c.peek("/b").is_none());
}

#[test]
fn the_eviction_log_names_every_victim_of_inserts_and_revivals() {
    let mut config = Config::new(1000, "lru".parse().expect("policy"));
    config.free_list_flush_every = 1000;
    let mut c: Cache<String, u64> = Cache::new(config);
    c.log_evictions();
    let mut out = Vec::new();
    request(&mut c, "/a", 600);
    request(&mut c, "/b", 600);
    c.take_evicted(&mut out);
    assert_eq!(out, ["/a"]);
    // /a comes back from the free list and makes room by evicting /b.
    assert!(matches!(c.access("/a"), Access::Hit { revived: true, .. }));
    c.take_evicted(&mut out);
    assert_eq!(out, ["/a", "/b"]);
    c.take_evicted(&mut out);
    assert_eq!(out.len(), 2, "the log was drained");
}
