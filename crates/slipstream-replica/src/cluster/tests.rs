use super::*;

fn heard(name: &str, generation: u64, version: u64, keys: &[(&str, &str)]) -> Heard {
    Heard {
        id: ChitchatId::new(name, generation, "127.0.0.1:1".parse().unwrap()),
        version,
        keys: keys
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

#[test]
fn merges_peers_and_flags_the_dead() {
    let mut merge = Merge::new("me".into());
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
    let b = heard("b", 1, 1, &[("replica:/x", "1+http://b/x")]);
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
    let b2 = heard("b", 2, 1, &[("replica:/x", "1+http://b/x")]);
    assert!(merge.apply(&mut view, &[a, b2]));
    assert_eq!(view.resolve("/x"), ["http://a/x", "http://b/x"]);
}

#[test]
fn a_malformed_update_changes_nothing_and_is_counted_once() {
    let mut merge = Merge::new("me".into());
    let mut view = View::default();
    merge.apply(
        &mut view,
        &[heard("a", 1, 1, &[("replica:/x", "5+http://a/x")])],
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
    let mut merge = Merge::new("me".into());
    let mut view = View::default();
    merge.apply(
        &mut view,
        &[heard("me", 1, 1, &[("replica:/x", "1+http://me/x")])],
    );
    assert!(view.resolve("/x").is_empty());
}
