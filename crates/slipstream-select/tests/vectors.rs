//! Replays the shared selection test vectors (`web/test-vectors/select/*.json`, format in
//! `web/test-vectors/README.md`) against the Rust selectors. The JavaScript agent replays the
//! same files, so both make the same choices; a changed expectation must fail here, which
//! `every_changed_expectation_fails` checks by changing each one in turn. Two policies are
//! shared: `refresh` ([`Refresh`]) and `decay` ([`Decay`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use slipstream_select::{config, Decay, Outcome, ProbeKind, Refresh, Select};

fn vector_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/test-vectors/select")
}

fn vectors() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(vector_dir())
        .expect("web/test-vectors/select exists")
        .map(|e| e.expect("readable directory").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("readable vector");
            let v = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: not JSON: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().into_owned(), v)
        })
        .collect()
}

fn duration_ms(ms: f64) -> Duration {
    Duration::from_nanos((ms * 1e6).round() as u64)
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-6 + 1e-9 * want.abs()
}

fn num(v: &Value, what: &str) -> Result<f64, String> {
    v.as_f64()
        .ok_or_else(|| format!("{what}: not a number: {v}"))
}

fn strings(v: &Value, what: &str) -> Result<Vec<String>, String> {
    v.as_array()
        .ok_or_else(|| format!("{what}: not an array"))?
        .iter()
        .map(|s| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{what}: not a string: {s}"))
        })
        .collect()
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what}: not an object"))
}

/// The vector's config overrides, each through the policy's own `Config::set` (its names).
fn set_config(v: Option<&Value>, mut set: impl FnMut(&str, f64) -> bool) -> Result<(), String> {
    let Some(v) = v else { return Ok(()) };
    for (key, value) in object(v, "config")? {
        if !set(key, num(value, key)?) {
            return Err(format!("config: unknown field {key}"));
        }
    }
    Ok(())
}

/// The selector a vector replays.
enum Policy {
    Refresh(Refresh),
    Decay(Decay),
}

impl Policy {
    fn new(
        name: Option<&str>,
        config: Option<&Value>,
        endpoints: &[String],
        now: Instant,
    ) -> Result<Policy, String> {
        match name {
            Some("refresh") => {
                let mut c = config::Refresh::default();
                set_config(config, |k, x| c.set(k, x))?;
                Ok(Policy::Refresh(
                    Refresh::new(endpoints, c, now).map_err(|e| e.to_string())?,
                ))
            }
            Some("decay") => {
                let mut c = config::Decay::default();
                set_config(config, |k, x| c.set(k, x))?;
                Ok(Policy::Decay(
                    Decay::new(endpoints, c, now).map_err(|e| e.to_string())?,
                ))
            }
            _ => Err("policy: only \"refresh\" and \"decay\" are shared".into()),
        }
    }

    fn select(&mut self) -> &mut dyn Select {
        match self {
            Policy::Refresh(s) => s,
            Policy::Decay(s) => s,
        }
    }

    /// Whether `endpoint`'s estimate is `want` (`null`: none yet); the fields each policy has,
    /// the last one optional (Refresh's `score_ms`, Decay's `long_ms`).
    fn estimate_is(&self, endpoint: &str, want: &Value) -> Result<(), String> {
        let (got, score, fields): (_, _, &[&str]) = match self {
            Policy::Refresh(s) => (
                s.estimate(endpoint)
                    .map(|e| (e.avg_ms, e.var_ms2, e.samples)),
                s.score_ms(endpoint),
                &["avg_ms", "var_ms2", "samples", "score_ms"],
            ),
            Policy::Decay(s) => (
                s.estimate(endpoint)
                    .map(|e| (e.avg_ms, e.var_ms2, e.samples)),
                s.estimate(endpoint).map(|e| e.long_ms),
                &["avg_ms", "var_ms2", "samples", "long_ms"],
            ),
        };
        let optional = fields[3];
        let ok = match (got, want) {
            (None, Value::Null) => true,
            (Some((avg, var, n)), Value::Object(w)) => {
                let field = |k: &str| w.get(k).and_then(Value::as_f64);
                w.keys().all(|k| fields.contains(&k.as_str()))
                    && field("avg_ms").is_some_and(|x| close(avg, x))
                    && field("var_ms2").is_some_and(|x| close(var, x))
                    && field("samples").is_some_and(|x| n as f64 == x)
                    && w.get(optional).is_none_or(|x| {
                        x.as_f64()
                            .is_some_and(|x| close(score.unwrap_or(f64::NAN), x))
                    })
            }
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            let score = score.map_or(String::new(), |x| format!(" {optional} {x:?}"));
            Err(format!(
                "estimate of {endpoint}: {got:?}{score}, want {want}"
            ))
        }
    }
}

/// A `{name: number or null}` expectation of durations (`null`: none), within [`close`].
fn durations_are(
    arg: &Value,
    what: &str,
    mut got: impl FnMut(&str) -> Option<Duration>,
) -> Result<(), String> {
    for (name, want) in object(arg, &format!("expect_{what}_ms"))? {
        let got = got(name).map(|d| d.as_nanos() as f64 / 1e6);
        let ok = match (got, want.as_f64()) {
            (Some(g), Some(w)) => close(g, w),
            (None, None) => want.is_null(),
            _ => false,
        };
        if !ok {
            return Err(format!("{what} of {name}: {got:?} ms, want {want}"));
        }
    }
    Ok(())
}

fn outcome(v: &Value) -> Result<Outcome, String> {
    let o = object(v, "record")?;
    let kind = o
        .get("outcome")
        .and_then(Value::as_str)
        .ok_or("record: no outcome")?;
    let latency = o.get("latency_ms");
    let allowed: &[&str] = if kind == "answered" {
        &["endpoint", "outcome", "latency_ms"]
    } else {
        &["endpoint", "outcome"]
    };
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("record: unexpected field {k}"));
    }
    Ok(match kind {
        "answered" => Outcome::Answered {
            latency: duration_ms(num(
                latency.ok_or("answered: no latency_ms")?,
                "latency_ms",
            )?),
        },
        "timed_out" => Outcome::TimedOut,
        "connect_failed" => Outcome::ConnectFailed,
        "broken" => Outcome::Broken,
        "cancelled" => Outcome::Cancelled,
        other => return Err(format!("record: unknown outcome {other}")),
    })
}

/// Replays one vector; `Err` names the first step that did not go as expected.
fn replay(v: &Value) -> Result<(), String> {
    let top = object(v, "vector")?;
    for key in top.keys() {
        if ![
            "name",
            "description",
            "policy",
            "config",
            "endpoints",
            "steps",
        ]
        .contains(&key.as_str())
        {
            return Err(format!("unknown top-level field {key}"));
        }
    }
    let base = Instant::now();
    let policy = top.get("policy").and_then(Value::as_str);
    if !matches!(policy, Some("refresh" | "decay")) {
        return Err("policy: only \"refresh\" and \"decay\" are shared".into());
    }
    let endpoints = strings(top.get("endpoints").ok_or("no endpoints")?, "endpoints")?;
    let mut p = Policy::new(policy, top.get("config"), &endpoints, base)?;
    let steps = top
        .get("steps")
        .and_then(Value::as_array)
        .ok_or("no steps")?;
    let mut last_at = 0.0;
    for (i, step) in steps.iter().enumerate() {
        let fail = |m: String| format!("step {i}: {m}");
        let step = object(step, "step").map_err(fail)?;
        let at = num(
            step.get("at_ms").ok_or_else(|| fail("no at_ms".into()))?,
            "at_ms",
        )
        .map_err(fail)?;
        if at < last_at {
            return Err(fail(format!("at_ms goes back from {last_at} to {at}")));
        }
        last_at = at;
        let now = base + duration_ms(at);
        let mut actions = step.iter().filter(|(k, _)| *k != "at_ms" && *k != "note");
        let (action, arg) = match (actions.next(), actions.next()) {
            (Some(a), None) => a,
            _ => {
                return Err(fail(
                    "want exactly one action besides at_ms and note".into(),
                ))
            }
        };
        let s = p.select();
        match action.as_str() {
            "update" => s.update(&strings(arg, "update").map_err(fail)?, now),
            "record" => {
                let endpoint = arg.get("endpoint").and_then(Value::as_str);
                let endpoint = endpoint.ok_or_else(|| fail("record: no endpoint".into()))?;
                s.record(endpoint, outcome(arg).map_err(fail)?, now);
            }
            "expect_order" => {
                let want = strings(arg, "expect_order").map_err(fail)?;
                let got = s.order(now);
                if got != want {
                    return Err(fail(format!("order {got:?}, want {want:?}")));
                }
            }
            "expect_health" => {
                for (name, want) in object(arg, "expect_health").map_err(fail)? {
                    let got = s
                        .health(now)
                        .into_iter()
                        .find(|(n, _)| n == name)
                        .map(|h| h.1);
                    // `null` means "not in the set"; anything but a boolean or null is refused.
                    let ok = match (got, want) {
                        (Some(g), Value::Bool(w)) => g == *w,
                        (None, Value::Null) => true,
                        _ => false,
                    };
                    if !ok {
                        return Err(fail(format!("health of {name}: {got:?}, want {want}")));
                    }
                }
            }
            "expect_timeout_ms" => {
                durations_are(arg, "timeout", |n| s.timeout(n, now)).map_err(fail)?;
            }
            "expect_hedge_after_ms" => {
                durations_are(arg, "hedge_after", |n| s.hedge_after(n, now)).map_err(fail)?;
            }
            "expect_estimate" => {
                for (name, want) in object(arg, "expect_estimate").map_err(fail)? {
                    p.estimate_is(name, want).map_err(fail)?;
                }
            }
            "request" => {
                if arg != &Value::Bool(true) {
                    return Err(fail(format!("request: want true, not {arg}")));
                }
                s.requested(now);
            }
            "hedged" => {
                let endpoint = arg
                    .as_str()
                    .ok_or_else(|| fail(format!("hedged: not an endpoint name: {arg}")))?;
                s.hedged(endpoint, now);
            }
            "expect_race" => {
                let want = num(arg, "expect_race").map_err(fail)?;
                let got = s.race(now);
                if got as f64 != want {
                    return Err(fail(format!("race {got}, want {want}")));
                }
            }
            "expect_tokens" => {
                let want = num(arg, "expect_tokens").map_err(fail)?;
                let Policy::Decay(d) = &p else {
                    return Err(fail("expect_tokens: only decay holds tokens".into()));
                };
                if !close(d.tokens(), want) {
                    return Err(fail(format!("tokens {}, want {want}", d.tokens())));
                }
            }
            "expect_probes" => {
                let want = arg
                    .as_array()
                    .ok_or_else(|| fail("expect_probes: not an array".into()))?;
                let got: Vec<Value> = s
                    .probes(now)
                    .into_iter()
                    .map(|p| {
                        let kind = match p.kind {
                            ProbeKind::Recover => "recover",
                            ProbeKind::Refresh => "refresh",
                        };
                        serde_json::json!({ "endpoint": p.endpoint, "kind": kind })
                    })
                    .collect();
                if &got != want {
                    return Err(fail(format!("probes {got:?}, want {want:?}")));
                }
            }
            other => return Err(fail(format!("unknown action {other}"))),
        }
    }
    Ok(())
}

#[test]
fn every_vector_replays() {
    let all = vectors();
    assert!(
        all.len() >= 5,
        "the vectors are missing: {}",
        vector_dir().display()
    );
    let failures: Vec<String> = all
        .iter()
        .filter_map(|(name, v)| replay(v).err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every way to change one expectation: the order's first two swapped, a number moved by
/// 1 % (a bare one too: race, tokens), a boolean flipped, a null made a number, a probe dropped
/// or added, an estimate wished away.
fn mutations(arg: &Value, action: &str) -> Vec<Value> {
    let mut out = Vec::new();
    match (action, arg) {
        ("expect_order", Value::Array(a)) if a.len() >= 2 && a[0] != a[1] => {
            let mut b = a.clone();
            b.swap(0, 1);
            out.push(Value::Array(b));
        }
        ("expect_probes", Value::Array(a)) => {
            if !a.is_empty() {
                out.push(Value::Array(a[1..].to_vec()));
            }
            let mut b = a.clone();
            b.push(serde_json::json!({ "endpoint": "nobody", "kind": "recover" }));
            out.push(Value::Array(b));
        }
        (_, Value::Number(n)) => {
            let x = n.as_f64().unwrap();
            out.push(serde_json::json!(x * 1.01 + 0.01));
        }
        (_, Value::Object(m)) => {
            for (k, v) in m {
                let changed: Vec<Value> = match v {
                    Value::Bool(b) => vec![Value::Bool(!b)],
                    Value::Number(n) => {
                        let x = n.as_f64().unwrap();
                        vec![serde_json::json!(x * 1.01 + 0.01)]
                    }
                    Value::Null => vec![serde_json::json!(1.0)],
                    Value::Object(_) => mutations(v, "nested"),
                    _ => vec![],
                };
                if action == "expect_estimate" && !v.is_null() {
                    let mut c = m.clone();
                    c.insert(k.clone(), Value::Null);
                    out.push(Value::Object(c));
                }
                for c in changed {
                    let mut m2 = m.clone();
                    m2.insert(k.clone(), c);
                    out.push(Value::Object(m2));
                }
            }
        }
        _ => {}
    }
    out
}

#[test]
fn every_changed_expectation_fails() {
    let mut checked = 0;
    for (name, v) in vectors() {
        let steps = v["steps"].as_array().unwrap().clone();
        for (i, step) in steps.iter().enumerate() {
            let Some((action, arg)) = step
                .as_object()
                .unwrap()
                .iter()
                .find(|(k, _)| k.starts_with("expect_"))
            else {
                continue;
            };
            for changed in mutations(arg, action) {
                let mut w = v.clone();
                w["steps"][i][action] = changed.clone();
                assert!(
                    replay(&w).is_err(),
                    "{name} step {i}: {action} = {changed} passes too"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 30, "only {checked} expectations changed");
}

#[test]
fn malformed_vectors_are_refused() {
    let ok = serde_json::json!({
        "name": "x", "policy": "refresh", "endpoints": ["a"],
        "steps": [{ "at_ms": 0, "expect_order": ["a"] }]
    });
    assert_eq!(replay(&ok), Ok(()));
    let bad = |f: &dyn Fn(&mut Value)| {
        let mut v = ok.clone();
        f(&mut v);
        replay(&v).unwrap_err()
    };
    assert!(bad(&|v| v["policy"] = "p2c".into()).contains("policy"));
    assert!(bad(&|v| v["confg"] = serde_json::json!({})).contains("confg"));
    assert!(bad(&|v| v["config"] = serde_json::json!({ "rr": 1 })).contains("rr"));
    assert!(bad(&|v| {
        let step = v["steps"][0].as_object_mut().unwrap();
        let order = step.remove("expect_order").unwrap();
        step.insert("expect_ordr".into(), order);
    })
    .contains("expect_ordr"));
    assert!(bad(&|v| v["steps"][0]["update"] = serde_json::json!(["a"])).contains("exactly one"));
    assert!(bad(&|v| {
        v["steps"] =
            serde_json::json!([{ "at_ms": 5, "update": ["a"] }, { "at_ms": 4, "update": ["a"] }]);
    })
    .contains("goes back"));
    assert!(bad(&|v| {
        v["steps"][0] =
            serde_json::json!({ "at_ms": 0, "record": { "endpoint": "a", "outcome": "answered" } });
    })
    .contains("latency_ms"));
    // Decay: its own config names and estimate fields, its actions' arguments; tokens are
    // decay's alone.
    let decay = |f: &dyn Fn(&mut Value)| {
        let mut v = ok.clone();
        v["policy"] = "decay".into();
        f(&mut v);
        replay(&v)
    };
    assert_eq!(decay(&|_| {}), Ok(()));
    assert!(decay(&|v| v["config"] = serde_json::json!({ "r": 0.5 }))
        .unwrap_err()
        .contains("unknown field r"));
    assert!(decay(&|v| v["config"] = serde_json::json!({ "budget": 1 }))
        .unwrap_err()
        .contains("`budget`"));
    assert!(bad(&|v| v["config"] = serde_json::json!({ "budget": 0.5 })).contains("budget"));
    let step = |s: Value| move |v: &mut Value| v["steps"][0] = s.clone();
    assert!(
        decay(&step(serde_json::json!({ "at_ms": 0, "request": 1 })))
            .unwrap_err()
            .contains("request")
    );
    assert!(
        decay(&step(serde_json::json!({ "at_ms": 0, "hedged": ["a"] })))
            .unwrap_err()
            .contains("hedged")
    );
    assert!(
        decay(&step(serde_json::json!({ "at_ms": 0, "expect_race": "1" })))
            .unwrap_err()
            .contains("expect_race")
    );
    assert!(decay(&step(serde_json::json!({
        "at_ms": 0,
        "record": { "endpoint": "a", "outcome": "answered", "latency_ms": 5 }
    })))
    .is_ok());
    let scored = serde_json::json!({ "at_ms": 0, "expect_estimate": { "a": null } });
    assert_eq!(decay(&step(scored)), Ok(()));
    let scored = serde_json::json!({
        "at_ms": 0,
        "expect_estimate": { "a": { "avg_ms": 1, "var_ms2": 0, "samples": 1, "score_ms": 1 } }
    });
    assert!(decay(&step(scored)).unwrap_err().contains("estimate of a"));
    assert!(
        bad(&step(serde_json::json!({ "at_ms": 0, "expect_tokens": 2 }))).contains("only decay")
    );
    assert_eq!(
        decay(&step(serde_json::json!({ "at_ms": 0, "expect_tokens": 2 }))),
        Ok(())
    );
}
