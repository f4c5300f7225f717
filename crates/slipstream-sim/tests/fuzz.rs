//! Fuzz targets for the simulator's inputs: scenario files (TOML with every table and field,
//! valid and broken values, then mutated text) planned into a validated run, the ns-2 reference
//! workload format and `transfers.csv`. Errors must name a line of the file; a valid workload
//! reads back from its own formatting.

#[path = "../../../tests/fuzz_support.rs"]
mod support;

use std::path::Path;

use proptest::prelude::*;
use slipstream_sim::compare;
use slipstream_sim::reference::{self, Job};
use slipstream_sim::scenario::{self, Scenario, ScenarioError};
use support::fuzz;

fn q(s: &str) -> String {
    format!("{s:?}")
}

fn rate() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("10Mb"),
        Just("1.5Mb"),
        Just("100kb"),
        Just("1Gb"),
        Just("0Mb"),
        Just("10"),
        Just("1e3Mb"),
        Just("99999999999999999999Gb"),
        Just(""),
        Just("Mb"),
    ]
    .prop_map(q)
}

fn delay() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1ms"),
        Just("0ms"),
        Just("30ms"),
        Just("0.5s"),
        Just("200us"),
        Just("30"),
        Just("999999999999h"),
        Just("-1ms"),
        Just("1 fortnight"),
    ]
    .prop_map(q)
}

fn int() -> impl Strategy<Value = String> {
    prop_oneof![
        (-2i64..40).prop_map(|v| v.to_string()),
        Just("9223372036854775807".to_owned()),
        Just("4294967296".to_owned()),
        Just("\"7\"".to_owned()),
    ]
}

fn float() -> impl Strategy<Value = String> {
    prop_oneof![
        (-1.0f64..2.0).prop_map(|v| format!("{v:?}")),
        (1.0f64..1e6).prop_map(|v| format!("{v:?}")),
        Just("nan".to_owned()),
        Just("inf".to_owned()),
        Just("0.0".to_owned()),
        Just("1e300".to_owned()),
        Just("5".to_owned()),
    ]
}

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("client"),
        Just("child"),
        Just("parent"),
        Just("origin"),
        Just("backbone"),
        Just("x"),
    ]
    .prop_map(str::to_owned)
}

/// `key = value` lines, each present or not.
fn fields(
    table: &str,
    options: Vec<(&'static str, BoxedStrategy<String>)>,
) -> BoxedStrategy<String> {
    let table = table.to_owned();
    options
        .into_iter()
        .map(|(k, v)| {
            proptest::option::weighted(0.5, v).prop_map(move |v| v.map(|v| format!("{k} = {v}\n")))
        })
        .collect::<Vec<_>>()
        .prop_map(move |lines| {
            let body: String = lines.into_iter().flatten().collect();
            format!("[{table}]\n{body}")
        })
        .boxed()
}

fn topology() -> BoxedStrategy<String> {
    let three = |s: BoxedStrategy<String>| {
        proptest::collection::vec(s, 0..5)
            .prop_map(|v| format!("[{}]", v.join(", ")))
            .boxed()
    };
    let chain = fields(
        "topology",
        vec![
            ("capacity", three(rate().boxed())),
            ("delay", three(delay().boxed())),
            ("queue", int().boxed()),
        ],
    );
    let link = (
        names(),
        names(),
        rate(),
        delay(),
        proptest::option::of(int()),
    )
        .prop_map(|(a, b, c, d, q)| {
            let q = q.map(|q| format!(", queue = {q}")).unwrap_or_default();
            format!(
                "  {{ between = [{}, {}], capacity = {c}, delay = {d}{q} }},\n",
                self::q(&a),
                self::q(&b)
            )
        });
    let graph = (
        proptest::collection::vec(names(), 0..7),
        proptest::collection::vec(link, 0..7),
        proptest::option::of(proptest::collection::vec(
            (
                prop_oneof![
                    Just("client"),
                    Just("child"),
                    Just("parent"),
                    Just("origin"),
                    Just("other")
                ],
                names(),
            ),
            0..5,
        )),
        int(),
    )
        .prop_map(|(nodes, links, roles, queue)| {
            let nodes: Vec<String> = nodes.iter().map(|n| q(n)).collect();
            let mut s = format!(
                "[topology]\nqueue = {queue}\nnodes = [{}]\nlinks = [\n{}]\n",
                nodes.join(", "),
                links.concat()
            );
            if let Some(roles) = roles {
                s.push_str("[topology.roles]\n");
                for (role, node) in roles {
                    s.push_str(&format!("{role} = {}\n", q(&node)));
                }
            }
            s
        });
    prop_oneof![Just(String::new()), chain, graph].boxed()
}

fn scenario_text() -> impl Strategy<Value = String> {
    let tcp = fields(
        "tcp",
        vec![
            (
                "era",
                prop_oneof![Just("2.35"), Just("2.26"), Just("3.0")]
                    .prop_map(q)
                    .boxed(),
            ),
            ("segment_bytes", int().boxed()),
            ("window", int().boxed()),
            ("window_init", int().boxed()),
            (
                "syn",
                prop_oneof![Just("true"), Just("false"), Just("1")]
                    .prop_map(str::to_owned)
                    .boxed(),
            ),
            ("request_bytes", int().boxed()),
        ],
    );
    // Workload sizes stay small: planning generates every transfer.
    let workload = fields(
        "workload",
        vec![
            ("transfers", int().boxed()),
            ("rate", float().boxed()),
            (
                "file",
                prop_oneof![Just("missing.txt"), Just("")]
                    .prop_map(q)
                    .boxed(),
            ),
            ("body_mean", float().boxed()),
            ("body_sd", float().boxed()),
            ("tail_k", float().boxed()),
            ("tail_alpha", float().boxed()),
            ("max_size", float().boxed()),
            ("objects", int().boxed()),
            ("zipf_alpha", float().boxed()),
            ("warmup", int().boxed()),
            ("nonsense", Just("1".to_owned()).boxed()),
        ],
    )
    .prop_map(|w| {
        // The defaults (5,000 transfers, 50,000 warm-up requests) are too slow for fuzzing.
        let mut w = w;
        if !w.contains("\ntransfers") {
            w.push_str("transfers = 20\n");
        }
        if !w.contains("\nwarmup") {
            w.push_str("warmup = 10\n");
        }
        w
    });
    let size = prop_oneof![
        Just("64KB"),
        Just("1MiB"),
        Just("0"),
        Just("lots"),
        Just("1e3")
    ]
    .prop_map(q);
    let policy = prop_oneof![
        Just("lru"),
        Just("sieve"),
        Just("adaptive+sieve"),
        Just("fifo")
    ]
    .prop_map(q);
    let hits = fields(
        "hits",
        vec![
            ("child", float().boxed()),
            ("parent", float().boxed()),
            ("size_threshold", size.clone().boxed()),
        ],
    );
    let caches = proptest::option::of((size.clone(), policy.clone(), size, policy)).prop_map(|c| {
        c.map(|(s1, p1, s2, p2)| {
            format!("[caches.child]\nsize = {s1}\npolicy = {p1}\n[caches.parent]\nsize = {s2}\npolicy = {p2}\n")
        })
        .unwrap_or_default()
    });
    let head = (
        proptest::option::of("[a-z]{0,6}"),
        proptest::option::of(0u64..5),
    )
        .prop_map(|(n, s)| {
            let mut h = String::new();
            if let Some(n) = n {
                h.push_str(&format!("name = {}\n", q(&n)));
            }
            if let Some(s) = s {
                h.push_str(&format!("seed = {s}\n"));
            }
            h
        });
    (head, topology(), tcp, workload, hits, caches)
        .prop_map(|(h, t, tcp, w, hits, c)| format!("{h}{t}{tcp}{w}{hits}{c}"))
}

/// Mutations of a text: a byte changed, a line dropped or repeated.
fn mutated(text: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (text, 0usize..4, any::<usize>(), any::<u8>()).prop_map(|(t, kind, at, byte)| {
        let lines: Vec<&str> = t.lines().collect();
        let i = at % lines.len().max(1);
        match kind {
            1 if !lines.is_empty() => {
                let mut l = lines.clone();
                l.remove(i);
                l.join("\n")
            }
            2 if !lines.is_empty() => {
                let mut l = lines.clone();
                l.insert(i, lines[i]);
                l.join("\n")
            }
            3 => {
                let mut b = t.into_bytes();
                let j = at % b.len().max(1);
                if j < b.len() {
                    b[j] = byte;
                }
                String::from_utf8_lossy(&b).into_owned()
            }
            _ => t,
        }
    })
}

fn plan(text: &str) -> Result<(), TestCaseError> {
    let path = Path::new("/nonexistent-fuzz/scenario.toml");
    let lines = text.lines().count();
    let scenario: Scenario = match toml::from_str(text) {
        Ok(s) => s,
        Err(e) => {
            // What `Scenario::load` reports: the parser's message, with its line.
            prop_assert!(e.to_string().contains("line "), "{e}");
            return Ok(());
        }
    };
    match scenario.plan(path, text) {
        Ok(plan) => {
            prop_assert!(!plan.jobs.is_empty());
            prop_assert!(plan
                .jobs
                .iter()
                .all(|j| j.start_s.is_finite() && j.start_s >= 0.0 && (1..=3).contains(&j.src)));
            // The same scenario gives the same plan.
            let again = scenario
                .plan(path, text)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(again.jobs, plan.jobs);
        }
        Err(ScenarioError::Invalid {
            line,
            field,
            path: p,
            ..
        }) => {
            prop_assert_eq!(p, path.display().to_string());
            prop_assert!(line <= lines, "{field} at line {line} of {lines}");
            let last = field.rsplit('.').next().unwrap_or(field);
            if line > 0 && !field.starts_with("topology.") && field != "workload" {
                let at = text.lines().nth(line - 1).unwrap_or_default();
                prop_assert!(at.contains(last), "{field}: line {line} is {at:?}");
            }
        }
        Err(ScenarioError::Workload(e)) => prop_assert!(e.line >= 1),
        Err(e) => return Err(TestCaseError::fail(format!("unexpected error: {e}"))),
    }
    Ok(())
}

#[test]
fn scenarios_from_generated_toml() {
    fuzz("scenarios_from_generated_toml", 300, scenario_text(), |t| {
        plan(&t)
    });
}

#[test]
fn scenarios_from_mutated_toml() {
    fuzz(
        "scenarios_from_mutated_toml",
        300,
        mutated(scenario_text()),
        |t| plan(&t),
    );
}

#[test]
fn scenarios_from_arbitrary_text() {
    fuzz("scenarios_from_arbitrary_text", 1_000, ".{0,200}", |t| {
        plan(&t)
    });
}

#[test]
fn link_rates_and_delays() {
    fuzz(
        "link_rates_and_delays",
        5_000,
        prop_oneof![".{0,12}", "[0-9.]{0,22}(b|kb|Mb|Gb|ns|us|ms|s|m|h|min)?"],
        |s| {
            if let Ok(b) = scenario::bandwidth(&s) {
                prop_assert!(b > 0);
            }
            if let Err(e) = scenario::delay(&s) {
                prop_assert!(e.contains('`'), "{e}");
            }
            Ok(())
        },
    );
}

#[test]
fn reference_workloads_read_back() {
    let job = (
        any::<u64>(),
        0u64..10_000_000_000_000,
        1u8..=3,
        any::<u64>(),
    )
        .prop_map(|(id, ns, src, size)| Job {
            id,
            start_s: ns as f64 / 1e9,
            src,
            size,
        });
    fuzz(
        "reference_workloads_read_back",
        2_000,
        (proptest::collection::vec(job, 0..20), ".{0,40}"),
        |(jobs, noise)| {
            let text = reference::format_workload(&jobs);
            let back =
                reference::parse(&text, "w.txt").map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back.len(), jobs.len());
            for (a, b) in back.iter().zip(&jobs) {
                prop_assert_eq!((a.id, a.src, a.size), (b.id, b.src, b.size));
                prop_assert!((a.start_s - b.start_s).abs() <= 1e-9 * b.start_s.max(1.0));
            }
            // A stray line is an error naming it.
            let broken = format!("{text}{noise}\n");
            if let Err(e) = reference::parse(&broken, "w.txt") {
                prop_assert_eq!(e.line, text.lines().count() + 1, "{}", e);
            }
            Ok(())
        },
    );
}

#[test]
fn transfers_csv_arbitrary_text() {
    let row = (
        "[0-9]{1,4}|.{0,4}",
        prop_oneof![Just("child"), Just("origin")],
        "[0-9.e-]{1,8}|.{0,4}",
    )
        .prop_map(|(i, s, l)| format!("{i},{s},{l}"));
    fuzz(
        "transfers_csv_arbitrary_text",
        3_000,
        prop_oneof![
            ".{0,80}",
            proptest::collection::vec(row, 0..6)
                .prop_map(|r| format!("id,source,latency_s\n{}", r.join("\n"))),
        ],
        |text| {
            match compare::parse(&text, "t.csv") {
                Ok(rows) => prop_assert!(rows.len() < text.lines().count().max(1)),
                Err(e) => prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1), "{e}"),
            }
            Ok(())
        },
    );
}
