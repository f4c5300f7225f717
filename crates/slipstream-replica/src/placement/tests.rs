use super::*;
use crate::cluster::NodeInfo;
use crate::directory::Entry;

fn settings() -> Settings {
    Settings {
        interval: Duration::from_secs(1),
        hot_per_s: 10.0,
        cold_per_s: 1.0,
        cold_intervals: 2,
        max_replicas: 2,
    }
}

fn view(nodes: &[(&str, bool, Option<f64>)], entries: &[(&str, &str)]) -> View {
    let mut v = View::default();
    for (name, live, load) in nodes {
        v.nodes.insert(
            (*name).to_owned(),
            NodeInfo {
                advertise: Some(format!("http://{name}")),
                live: *live,
                load: *load,
                state_version: 0,
            },
        );
    }
    for (i, (node, pattern)) in entries.iter().enumerate() {
        let p = Pattern::parse(pattern).unwrap();
        let physical = match &p {
            Pattern::Exact(u) => format!("http://{node}{u}"),
            Pattern::Prefix(pre) => format!("http://{node}{pre}*"),
        };
        v.directory
            .apply(node, &p, Entry::live(i as u64 + 1, physical));
    }
    v
}

fn served(pairs: &[(&str, u64)]) -> HashMap<String, u64> {
    pairs.iter().map(|(u, n)| ((*u).to_owned(), *n)).collect()
}

#[test]
fn a_hot_resource_goes_to_the_least_loaded_live_peer_without_one() {
    let v = view(
        &[
            ("a", true, Some(50.0)),
            ("b", true, Some(5.0)),
            ("c", true, Some(1.0)),
            ("d", false, Some(0.0)),
            ("e", true, None),
        ],
        &[("a", "/*")],
    );
    let mut streaks = Streaks::new();
    let d = decide(
        "a",
        &settings(),
        &v,
        &served(&[
            ("/hot.png", 30),
            ("/warm.png", 9),
            ("/_slipstream/status", 99),
        ]),
        &[],
        &mut streaks,
    );
    // c is the least loaded live peer that reports a load (d is dead, e says nothing).
    assert_eq!(d.copy, [("/hot.png".to_owned(), "c".to_owned())]);
    assert!(d.retire.is_empty());

    // Once c holds it, it has its two replicas: no more copies.
    let v = view(
        &[
            ("a", true, Some(50.0)),
            ("b", true, Some(5.0)),
            ("c", true, Some(1.0)),
        ],
        &[("a", "/*"), ("c", "/hot.png")],
    );
    let d = decide(
        "a",
        &settings(),
        &v,
        &served(&[("/hot.png", 30)]),
        &[],
        &mut streaks,
    );
    assert!(d.copy.is_empty());
    // With room for three, the next least loaded peer without it gets it.
    let more = Settings {
        max_replicas: 3,
        ..settings()
    };
    let d = decide(
        "a",
        &more,
        &v,
        &served(&[("/hot.png", 30)]),
        &[],
        &mut streaks,
    );
    assert_eq!(d.copy, [("/hot.png".to_owned(), "b".to_owned())]);
    // A node copies only what it holds itself.
    let d = decide(
        "b",
        &more,
        &v,
        &served(&[("/hot.png", 30)]),
        &[],
        &mut streaks,
    );
    assert!(d.copy.is_empty());
}

#[test]
fn a_cold_stored_replica_is_retired_after_its_streak_but_never_the_last() {
    let v = view(
        &[("a", true, Some(0.0)), ("c", true, Some(0.0))],
        &[("a", "/*"), ("c", "/x.png"), ("c", "/only.png")],
    );
    let stored = ["/x.png".to_owned(), "/only.png".to_owned()];
    let mut streaks = Streaks::new();
    let s = settings();
    let d = decide("c", &s, &v, &served(&[]), &stored, &mut streaks);
    assert!(d.retire.is_empty(), "one cold interval is not enough");
    // A warm interval resets the streak.
    let d = decide(
        "c",
        &s,
        &v,
        &served(&[("/x.png", 5), ("/only.png", 5)]),
        &stored,
        &mut streaks,
    );
    assert!(d.retire.is_empty());
    let d = decide("c", &s, &v, &served(&[]), &stored, &mut streaks);
    assert!(d.retire.is_empty());
    let d = decide("c", &s, &v, &served(&[]), &stored, &mut streaks);
    // /x.png has a's wildcard too; /only.png is the last replica (a's "/*" covers it too
    // here, so make a dead to see the guard).
    assert_eq!(d.retire, ["/x.png".to_owned(), "/only.png".to_owned()]);
    let v = view(
        &[("a", false, Some(0.0)), ("c", true, Some(0.0))],
        &[("a", "/*"), ("c", "/x.png"), ("c", "/only.png")],
    );
    let d = decide("c", &s, &v, &served(&[]), &stored, &mut streaks);
    assert!(d.retire.is_empty(), "never the last live replica: {d:?}");
}
