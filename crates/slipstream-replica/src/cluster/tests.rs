use super::*;

thread_local! {
    /// One key per node name, as each node has its own.
    static KEYS: std::cell::RefCell<HashMap<String, Arc<Identity>>> = Default::default();
}

const CLUSTER: &str = "slipstream";

fn key_of(name: &str) -> Arc<Identity> {
    KEYS.with(|k| {
        k.borrow_mut()
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Identity::ephemeral()))
            .clone()
    })
}

/// A node instance's state as chitchat holds it, its values signed by the name's key.
fn heard(name: &str, generation: u64, version: u64, keys: &[(&str, &str)]) -> Heard {
    heard_signed_by(&key_of(name), name, generation, version, keys)
}

fn heard_signed_by(
    id: &Identity,
    name: &str,
    generation: u64,
    version: u64,
    keys: &[(&str, &str)],
) -> Heard {
    let mut keys: Vec<(String, String)> = keys
        .iter()
        .map(|(k, v)| ((*k).to_owned(), id.sign(CLUSTER, name, k, v)))
        .collect();
    keys.push((KEY_KEY.to_owned(), id.public().to_owned()));
    Heard {
        id: ChitchatId::new(name, generation, "127.0.0.1:1".parse().unwrap()),
        version,
        keys,
    }
}

fn merge_for(me: &str) -> Merge {
    merge_with(me, BTreeMap::new())
}

fn merge_with(me: &str, members: BTreeMap<String, String>) -> Merge {
    Merge::new(Policy {
        me: me.to_owned(),
        my_key: key_of(me).public().to_owned(),
        cluster_id: CLUSTER.to_owned(),
        replica_hosts: vec!["cdn.example".to_owned()],
        max_entries: 4,
        max_bytes: 4096,
        members,
    })
}

#[test]
fn merges_peers_and_flags_the_dead() {
    let mut merge = merge_for("me");
    let mut view = View::default();
    let a = heard(
        "a",
        1,
        3,
        &[
            (HTTP_KEY, "http://a"),
            ("replica:/x", "2+http://a/x"),
            ("other", "?"),
        ],
    );
    let b = heard(
        "b",
        1,
        1,
        &[(HTTP_KEY, "http://b"), ("replica:/x", "1+http://b/x")],
    );
    assert!(merge.apply(&mut view, &[a.clone(), b.clone()]));
    assert_eq!(view.resolve("/x"), ["http://a/x", "http://b/x"]);
    assert_eq!(view.nodes["a"].advertise.as_deref(), Some("http://a"));
    // Nothing new: nothing changes, the version stays.
    let version = view.version;
    assert!(!merge.apply(&mut view, &[a.clone(), b.clone()]));
    assert_eq!(view.version, version);
    // b dies: its entry stays in the directory but no longer resolves.
    assert!(merge.apply(&mut view, std::slice::from_ref(&a)));
    assert!(!view.nodes["b"].live);
    assert_eq!(view.resolve("/x"), ["http://a/x"]);
    assert_eq!(view.directory.entries().count(), 2);
    // b restarts under a new generation with the same entries: live again.
    let b2 = heard(
        "b",
        2,
        1,
        &[(HTTP_KEY, "http://b"), ("replica:/x", "1+http://b/x")],
    );
    assert!(merge.apply(&mut view, &[a, b2]));
    assert_eq!(view.resolve("/x"), ["http://a/x", "http://b/x"]);
}

#[test]
fn a_malformed_update_changes_nothing_and_is_counted_once() {
    let mut merge = merge_for("me");
    let mut view = View::default();
    merge.apply(
        &mut view,
        &[heard(
            "a",
            1,
            1,
            &[(HTTP_KEY, "http://a"), ("replica:/x", "5+http://a/x")],
        )],
    );
    let before = view.directory.clone();
    for (i, bad) in [
        "5+",
        "05+http://a/x",
        "x",
        "6-junk",
        "7+http://a/*",
        "\u{0}",
    ]
    .iter()
    .enumerate()
    {
        let version = 2 + i as u64;
        merge.apply(
            &mut view,
            &[heard(
                "a",
                1,
                version,
                &[("replica:/x", bad), ("replica:/a*b", "1-")],
            )],
        );
        assert_eq!(view.directory, before, "{bad}");
    }
    assert_eq!(view.rejected, 7);
    // Heard again (a later state repeating them): not counted again.
    merge.apply(
        &mut view,
        &[heard(
            "a",
            1,
            99,
            &[("replica:/x", "x"), ("replica:/a*b", "1-")],
        )],
    );
    assert_eq!(view.rejected, 7);
    // An older version than the one held does not win either.
    merge.apply(&mut view, &[heard("a", 1, 100, &[("replica:/x", "4-")])]);
    assert_eq!(view.directory, before);
}

#[test]
fn own_updates_are_not_taken_from_gossip() {
    let mut merge = merge_for("me");
    let mut view = View::default();
    merge.apply(
        &mut view,
        &[heard("me", 1, 1, &[("replica:/x", "1+http://me/x")])],
    );
    assert!(view.resolve("/x").is_empty());
    // Another instance naming itself "me" with another key is an impostor; "me" with its
    // own key (an earlier instance) is not.
    let rogue = Identity::ephemeral();
    merge.apply(
        &mut view,
        &[
            heard_signed_by(&rogue, "me", 7, 1, &[]),
            heard("me", 6, 1, &[]),
        ],
    );
    assert_eq!(view.impostors, 1);
}

#[test]
fn unsigned_and_forged_values_are_refused() {
    let mut merge = merge_for("me");
    let mut view = View::default();
    let mut a = heard(
        "a",
        1,
        1,
        &[(HTTP_KEY, "http://a"), ("replica:/x", "1+http://a/x")],
    );
    // A relay rewrote the physical URL (its signature no longer holds) and added an
    // unsigned entry.
    for (k, v) in a.keys.iter_mut() {
        if k == "replica:/x" {
            *v = v.replace("http://a/x", "http://a/evil");
        }
    }
    a.keys.push(("replica:/y".into(), "1+http://a/y".into()));
    merge.apply(&mut view, &[a]);
    assert!(view.resolve("/x").is_empty());
    assert!(view.resolve("/y").is_empty());
    assert_eq!(view.rejected, 2);
    // A state without a key is not admitted at all (its key may be on its way).
    let keyless = Heard {
        id: ChitchatId::new("c", 1, "127.0.0.1:1".parse().unwrap()),
        version: 1,
        keys: vec![("replica:/z".into(), "1+http://c/z".into())],
    };
    merge.apply(&mut view, &[keyless]);
    assert!(!view.nodes.contains_key("c"));
}

#[test]
fn a_name_stays_bound_to_the_first_key_heard() {
    let mut merge = merge_for("me");
    let mut view = View::default();
    let a = heard(
        "a",
        1,
        1,
        &[(HTTP_KEY, "http://a"), ("replica:/x", "1+http://a/x")],
    );
    merge.apply(&mut view, std::slice::from_ref(&a));
    // Another instance under the same name, with its own key, claims a's URLs: refused, and
    // counted once however often it is heard.
    let rogue = Identity::ephemeral();
    for version in 1..4 {
        let impostor = heard_signed_by(
            &rogue,
            "a",
            2,
            version,
            &[(HTTP_KEY, "http://evil"), ("replica:/x", "9+http://evil/x")],
        );
        merge.apply(&mut view, &[a.clone(), impostor]);
    }
    assert_eq!(view.resolve("/x"), ["http://a/x"]);
    assert_eq!(view.nodes["a"].advertise.as_deref(), Some("http://a"));
    assert_eq!(view.impostors, 1);
    // When a dies, the impostor does not keep its name alive.
    let impostor = heard_signed_by(&rogue, "a", 2, 9, &[(HTTP_KEY, "http://evil")]);
    merge.apply(&mut view, &[impostor]);
    assert!(!view.nodes["a"].live);
    assert!(view.resolve("/x").is_empty());
}

#[test]
fn entries_point_only_at_the_nodes_origin_or_an_allowed_host() {
    let mut merge = merge_for("me");
    let mut view = View::default();
    merge.apply(
        &mut view,
        &[heard(
            "a",
            1,
            1,
            &[
                (HTTP_KEY, "http://a:8080"),
                ("replica:/own", "1+http://a:8080/own"),
                ("replica:/cdn", "2+https://cdn.example/cdn"),
                ("replica:/evil/*", "3+http://evil.example/*"),
                ("replica:/port", "4+http://a:9999/port"),
                ("replica:/js", "5+javascript:alert(1)"),
                ("replica:/data", "6+data:text/html,x"),
            ],
        )],
    );
    assert_eq!(view.resolve("/own"), ["http://a:8080/own"]);
    assert_eq!(view.resolve("/cdn"), ["https://cdn.example/cdn"]);
    for url in ["/evil/x", "/port", "/js", "/data"] {
        assert!(view.resolve(url).is_empty(), "{url}");
    }
    assert_eq!(view.rejected, 4);
}

#[test]
fn a_node_is_taken_up_to_its_cap() {
    let mut merge = merge_for("me");
    let mut view = View::default();
    let mut keys = vec![(HTTP_KEY.to_owned(), "http://a".to_owned())];
    for i in 0..10 {
        keys.push((format!("replica:/f{i}"), format!("1+http://a/f{i}")));
    }
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    merge.apply(&mut view, &[heard("a", 1, 1, &keys)]);
    assert_eq!(view.directory.entries().count(), 4);
    assert_eq!(view.rejected, 6);
}

#[test]
fn physical_urls_are_checked_in_every_spelling() {
    let allowed = ["cdn.example".to_owned(), "files.example:8443".to_owned()];
    let base = Some("http://node.example:8080");
    for ok in [
        "http://node.example:8080/x",
        "HTTP://Node.Example:8080/x",
        "https://cdn.example/x",
        "http://cdn.example:81/x",
        "https://files.example:8443/*",
    ] {
        assert_eq!(check_physical(ok, base, &allowed), Ok(()), "{ok}");
    }
    for bad in [
        "javascript:alert(1)",
        "data:text/html,x",
        "ftp://node.example:8080/x",
        "//node.example:8080/x",
        "/x",
        "http://user@node.example:8080/x",
    ] {
        assert_eq!(
            check_physical(bad, base, &allowed),
            Err(PhysicalError::Scheme),
            "{bad}"
        );
    }
    for foreign in [
        "http://node.example/x",
        "https://node.example:8080/x",
        "http://evil.example/x",
        "https://files.example/x",
    ] {
        assert!(
            matches!(
                check_physical(foreign, base, &allowed),
                Err(PhysicalError::Host { .. })
            ),
            "{foreign}"
        );
    }
    assert!(check_physical("http://node.example:8080/x", None, &[]).is_err());
}

#[test]
fn with_a_member_list_only_listed_names_with_their_keys_are_admitted() {
    let mut merge = merge_with(
        "me",
        BTreeMap::from([("a".to_owned(), key_of("a").public().to_owned())]),
    );
    let mut view = View::default();
    // A listed member whose key was never heard before is admitted at once; an unlisted one,
    // and the listed name under another key, are not.
    let rogue = Identity::ephemeral();
    merge.apply(
        &mut view,
        &[
            heard_signed_by(&rogue, "a", 1, 1, &[(HTTP_KEY, "http://evil")]),
            heard("b", 1, 1, &[(HTTP_KEY, "http://b")]),
            heard("a", 2, 1, &[(HTTP_KEY, "http://a")]),
        ],
    );
    assert_eq!(view.nodes["a"].advertise.as_deref(), Some("http://a"));
    assert!(!view.nodes.contains_key("b"));
    assert_eq!(view.impostors, 2);
}
