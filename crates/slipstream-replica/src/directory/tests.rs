use proptest::prelude::*;

use super::*;

fn pat(text: &str) -> Pattern {
    Pattern::parse(text).unwrap()
}

#[test]
fn exact_beats_own_wildcard_but_not_another_nodes() {
    let mut dir = Directory::new();
    dir.apply("a", &pat("/img/*"), Entry::live(1, "http://a/images/*"));
    dir.apply(
        "a",
        &pat("/img/logo.png"),
        Entry::live(2, "http://a/logo.png"),
    );
    dir.apply("b", &pat("/img/*"), Entry::live(1, "http://b/img/*"));
    dir.apply("c", &pat("/*"), Entry::live(1, "http://c/*"));
    dir.apply("c", &pat("/img/x/*"), Entry::live(2, "http://c/x/*"));
    assert_eq!(
        dir.resolve("/img/logo.png"),
        [
            "http://a/logo.png",
            "http://b/img/logo.png",
            "http://c/img/logo.png"
        ]
    );
    assert_eq!(
        dir.resolve("/img/x/y.png"),
        [
            "http://a/images/x/y.png",
            "http://b/img/x/y.png",
            "http://c/x/y.png"
        ]
    );
    assert_eq!(dir.resolve("/other"), ["http://c/other"]);
    assert!(Directory::new().resolve("/img/a").is_empty());
}

#[test]
fn tombstone_is_an_absence() {
    let mut dir = Directory::new();
    dir.apply("a", &pat("/img/*"), Entry::live(1, "http://a/img/*"));
    dir.apply(
        "a",
        &pat("/img/logo.png"),
        Entry::live(2, "http://a/logo.png"),
    );
    assert_eq!(dir.resolve("/img/logo.png"), ["http://a/logo.png"]);
    dir.apply("a", &pat("/img/logo.png"), Entry::tombstone(3));
    assert_eq!(dir.resolve("/img/logo.png"), ["http://a/img/logo.png"]);
    dir.apply("a", &pat("/img/*"), Entry::tombstone(4));
    assert!(dir.resolve("/img/logo.png").is_empty());
}

#[test]
fn keys_and_values_round_trip_and_refuse_junk() {
    let p = pat("/img/*");
    assert_eq!(p.key(), "replica:/img/*");
    assert_eq!(Pattern::from_key("replica:/img/*"), Ok(p.clone()));
    let live = Entry::live(42, "http://a/img/*");
    assert_eq!(live.encode(), "42+http://a/img/*");
    assert_eq!(Entry::decode(&p, b"42+http://a/img/*"), Ok(live));
    assert_eq!(Entry::decode(&p, b"7-"), Ok(Entry::tombstone(7)));

    assert_eq!(
        Pattern::from_key("other:/x"),
        Err(ParseError::NotReplicaKey)
    );
    assert_eq!(
        Pattern::from_key("replica:/a*b"),
        Err(ParseError::Logical(UrlError::Star { offset: 2 }))
    );
    assert_eq!(
        Pattern::from_key("replica:"),
        Err(ParseError::Logical(UrlError::Empty))
    );
    assert_eq!(
        Pattern::from_key("replica:/a b"),
        Err(ParseError::Logical(UrlError::BadChar { offset: 2 }))
    );
    let exact = pat("/a");
    assert_eq!(
        Entry::decode(&exact, b"07+http://a"),
        Err(ParseError::Version)
    );
    assert_eq!(
        Entry::decode(&exact, b"+http://a"),
        Err(ParseError::Version)
    );
    assert_eq!(
        Entry::decode(&exact, b"99999999999999999999+http://a"),
        Err(ParseError::Version)
    );
    assert_eq!(
        Entry::decode(&exact, b"1?"),
        Err(ParseError::Flag { offset: 1 })
    );
    assert_eq!(
        Entry::decode(&exact, b"1-x"),
        Err(ParseError::TombstoneWithUrl)
    );
    assert_eq!(
        Entry::decode(&exact, b"1+"),
        Err(ParseError::Physical(UrlError::Empty))
    );
    assert_eq!(
        Entry::decode(&exact, b"1+http://a/*"),
        Err(ParseError::Physical(UrlError::Star { offset: 9 }))
    );
    assert_eq!(
        Entry::decode(&p, b"1+http://a/x"),
        Err(ParseError::WildcardMismatch)
    );
    assert_eq!(
        Entry::decode(&exact, b"1+\xff"),
        Err(ParseError::NotUtf8 { offset: 2 })
    );
    let long = format!("1+http://{}", "a".repeat(MAX_URL_BYTES));
    assert!(matches!(
        Entry::decode(&exact, long.as_bytes()),
        Err(ParseError::Physical(UrlError::TooLong { .. }))
    ));
}

#[test]
fn a_refused_gossip_update_changes_nothing() {
    let mut dir = Directory::new();
    dir.apply_gossip("a", "replica:/x", b"1+http://a/x")
        .unwrap();
    let before = dir.clone();
    assert!(dir
        .apply_gossip("a", "replica:/x", b"2+http://a/*")
        .is_err());
    assert!(dir.apply_gossip("a", "replica:/x", b"2-junk").is_err());
    assert!(dir.apply_gossip("a", "replica/x", b"2-").is_err());
    assert_eq!(dir, before);
}

#[test]
fn own_versions_grow_across_delete_and_recreate() {
    let mut own = Own::default();
    let p = pat("/a");
    let e1 = own.next_put(&p, "http://n/a").unwrap();
    own.record(p.clone(), e1.clone());
    let t = own.next_delete(&p).unwrap();
    own.record(p.clone(), t.clone());
    assert_eq!(own.next_delete(&p), None);
    let e2 = own.next_put(&p, "http://n/a").unwrap();
    assert!(t.supersedes(&e1) && e2.supersedes(&t));
    assert!(own.next_put(&pat("/img/*"), "http://n/img").is_err());
    let restored = Own::from_entries(own.entries().map(|(p, e)| (p.clone(), e.clone())));
    assert_eq!(restored, own);
}

// Small alphabets so that updates collide on nodes, patterns and versions.
fn node() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_owned)
}

fn pattern() -> impl Strategy<Value = Pattern> {
    prop::sample::select(vec!["/x", "/x/y", "/x/*", "/x/y*", "*", "/z"]).prop_map(pat)
}

fn update() -> impl Strategy<Value = (String, Pattern, Entry)> {
    (node(), pattern(), 0u64..6, any::<bool>(), 0u8..3).prop_map(|(n, p, v, deleted, host)| {
        let entry = if deleted {
            Entry::tombstone(v)
        } else {
            let star = if matches!(p, Pattern::Prefix(_)) {
                "*"
            } else {
                ""
            };
            Entry::live(v, format!("http://{n}{host}/p{star}"))
        };
        (n, p, entry)
    })
}

fn build(updates: &[(String, Pattern, Entry)]) -> Directory {
    let mut dir = Directory::new();
    for (n, p, e) in updates {
        dir.apply(n, p, e.clone());
    }
    dir
}

const URLS: [&str; 6] = ["/x", "/x/y", "/x/yz", "/x/", "/z", "/q"];

proptest! {
    /// Any order, with duplicates, gives the same directory: a CRDT.
    #[test]
    fn merge_is_order_and_duplicate_insensitive(
        updates in prop::collection::vec(update(), 0..30),
        seed in any::<u64>(),
        dups in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let mut shuffled = updates.clone();
        for i in dups.iter().filter(|_| !updates.is_empty()) {
            shuffled.push(i.get(&updates).clone());
        }
        // A seeded Fisher–Yates shuffle.
        let mut state = seed;
        for i in (1..shuffled.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (state >> 33) as usize % (i + 1));
        }
        let (a, b) = (build(&updates), build(&shuffled));
        prop_assert_eq!(&a, &b);
        for url in URLS {
            prop_assert_eq!(a.resolve(url), b.resolve(url));
        }
        // Merging a directory into itself changes nothing (idempotence).
        let mut again = a.clone();
        for (n, p, e) in a.entries() {
            prop_assert!(!again.apply(n, &p, e.clone()));
        }
        prop_assert_eq!(again, a);
    }

    /// A tombstone hides an entry iff its version is higher (or equal: tombstones win ties).
    #[test]
    fn tombstone_versions(live in 0u64..10, dead in 0u64..10, order in any::<bool>()) {
        let p = pat("/x");
        let updates = [
            ("a".to_owned(), p.clone(), Entry::live(live, "http://a/x")),
            ("a".to_owned(), p.clone(), Entry::tombstone(dead)),
        ];
        let dir = if order { build(&updates) } else { build(&[updates[1].clone(), updates[0].clone()]) };
        let expect: Vec<String> = if dead >= live { vec![] } else { vec!["http://a/x".into()] };
        prop_assert_eq!(dir.resolve("/x"), expect);
    }

    /// `resolve` answers exactly the winning live entries, never a deleted replica.
    #[test]
    fn resolve_never_returns_a_deleted_replica(updates in prop::collection::vec(update(), 0..30)) {
        let dir = build(&updates);
        for url in URLS {
            let found = dir.resolve(url);
            for (node, p, e) in dir.entries() {
                if e.deleted || !p.matches(url) {
                    continue;
                }
                // A live matching entry is either heard or shadowed by a more specific live
                // entry of the same node.
                let physical = e.physical_for(match &p { Pattern::Exact(u) => u.len(), Pattern::Prefix(x) => x.len() }, matches!(p, Pattern::Prefix(_)), url).unwrap();
                let shadowed = dir.entries().any(|(n2, p2, e2)| {
                    n2 == node && !e2.deleted && p2.matches(url) && more_specific(&p2, &p)
                });
                prop_assert!(shadowed || found.contains(&physical));
            }
            // Every answer comes from a live entry (tombstones carry no physical URL, and each
            // node's physical URLs are distinct from the others').
            for physical in &found {
                let heard = dir.entries().any(|(n, p, e)| {
                    !e.deleted && p.matches(url) && physical.starts_with(&format!("http://{n}"))
                });
                prop_assert!(heard);
            }
        }
    }

    /// The value parser never panics, and whatever it accepts re-encodes to the same bytes.
    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64), wildcard in any::<bool>()) {
        let p = if wildcard { pat("/x/*") } else { pat("/x") };
        if let Ok(entry) = Entry::decode(&p, &bytes) {
            prop_assert_eq!(entry.encode().into_bytes(), bytes);
        }
    }

    /// The same for keys, with text likely to look like one.
    #[test]
    fn key_parser_never_panics(text in "(replica:)?[/a-z* \\x00é]{0,12}") {
        if let Ok(p) = Pattern::from_key(&text) {
            prop_assert_eq!(p.key(), text);
        }
    }

    /// Valid values round-trip.
    #[test]
    fn values_round_trip(version in any::<u64>(), path in "[a-z/]{0,20}", deleted in any::<bool>(), wildcard in any::<bool>()) {
        let p = if wildcard { pat("/x/*") } else { pat("/x") };
        let entry = if deleted {
            Entry::tombstone(version)
        } else {
            Entry::live(version, format!("http://h/{path}{}", if wildcard { "*" } else { "" }))
        };
        prop_assert_eq!(Entry::decode(&p, entry.encode().as_bytes()), Ok(entry));
    }
}

/// Whether `a` speaks before `b` for a URL both match.
fn more_specific(a: &Pattern, b: &Pattern) -> bool {
    match (a, b) {
        (Pattern::Exact(_), Pattern::Prefix(_)) => true,
        (Pattern::Prefix(x), Pattern::Prefix(y)) => x.len() > y.len(),
        _ => false,
    }
}
