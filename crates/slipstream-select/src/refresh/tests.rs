use super::*;
use proptest::prelude::*;

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("e{i}")).collect()
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn answered(v: u64) -> Outcome {
    Outcome::Answered { latency: ms(v) }
}

fn refresh(n: usize, config: Config, t0: Instant) -> Refresh {
    Refresh::new(&names(n), config, t0).unwrap()
}

/// No floors: the timeout is the T-percentile itself.
fn bare() -> Config {
    Config {
        min_timeout: Duration::ZERO,
        min_timeout_factor: 0.0,
        ..Config::default()
    }
}

#[test]
fn formulas_1_to_3_match_hand_computed_values() {
    let t0 = Instant::now();
    let mut s = refresh(1, bare(), t0);
    s.record("e0", answered(100), t0);
    let e = s.estimate("e0").unwrap();
    assert_eq!((e.avg_ms, e.var_ms2, e.samples), (100.0, 0.0, 1));
    // (2): 0.05 * 100 + 0.95 * 200 = 195; (3): 0.05 * 0 + 0.95 * (200 - 195)^2 = 23.75.
    s.record("e0", answered(200), t0);
    let e = s.estimate("e0").unwrap();
    assert!((e.avg_ms - 195.0).abs() < 1e-12);
    assert!((e.var_ms2 - 23.75).abs() < 1e-12);
    assert_eq!(e.samples, 2);
    // (1) with n capped at m = 1 (r = 0.95, p = 0.99): 195 + c_55 * sqrt(23.75).
    assert_eq!(s.samples_counted(), 1);
    assert!((s.score_ms("e0").unwrap() - 195.612_397_652_444_06).abs() < 1e-9);
    // The timeout at the T = 99.9 percentile: 195 + c_99.9 * sqrt(23.75).
    let t = s.timeout("e0", t0).unwrap().as_nanos() as f64 / 1e6;
    assert!((t - 210.059_929_382_951_2).abs() < 1e-6, "{t}");
}

#[test]
fn n_in_1_is_capped_by_formula_5() {
    let t0 = Instant::now();
    let with_r = |r| refresh(1, Config { r, ..bare() }, t0).samples_counted();
    // ln(0.01) / ln(0.05) - 1 = 0.537 -> 1; ln(0.01) / ln(0.5) - 1 = 5.64 -> 6.
    assert_eq!(with_r(0.95), 1);
    assert_eq!(with_r(0.5), 6);
    assert_eq!(with_r(1.0), 1);
    // r = 0.5, samples 10, 20, 30: avg 22.5, var 34.375, n = 3 (below the cap of 6).
    let mut s = refresh(1, Config { r: 0.5, ..bare() }, t0);
    for v in [10, 20, 30] {
        s.record("e0", answered(v), t0);
    }
    let e = s.estimate("e0").unwrap();
    assert!((e.avg_ms - 22.5).abs() < 1e-12 && (e.var_ms2 - 34.375).abs() < 1e-12);
    assert!((s.score_ms("e0").unwrap() - 22.925_365_669_928_71).abs() < 1e-9);
}

#[test]
fn order_is_unmeasured_then_least_percentile_then_failed() {
    let t0 = Instant::now();
    let mut s = refresh(5, Config::default(), t0);
    assert_eq!(s.order(t0), names(5), "all unmeasured: set order");
    s.record("e0", answered(300), t0);
    s.record("e1", answered(100), t0);
    s.record("e2", answered(200), t0);
    s.record("e4", Outcome::TimedOut, t0);
    // e3 unmeasured first, then by percentile, then the failed e4.
    assert_eq!(s.order(t0), ["e3", "e1", "e2", "e0", "e4"]);
    s.record("e3", answered(150), t0);
    assert_eq!(s.order(t0), ["e1", "e3", "e2", "e0", "e4"]);
    // A failed measured endpoint goes ahead of a failed unmeasured one.
    s.record("e1", Outcome::ConnectFailed, t0);
    assert_eq!(s.order(t0), ["e3", "e2", "e0", "e1", "e4"]);
    assert_eq!(
        s.health(t0),
        [
            ("e0".to_owned(), true),
            ("e1".to_owned(), false),
            ("e2".to_owned(), true),
            ("e3".to_owned(), true),
            ("e4".to_owned(), false),
        ]
    );
    // An answer (a probe's) puts it back; a cancelled exchange changes nothing.
    s.record("e1", Outcome::Cancelled, t0);
    assert_eq!(s.order(t0)[3], "e1");
    s.record("e1", answered(100), t0);
    assert_eq!(s.order(t0)[0], "e1");
}

#[test]
fn variance_breaks_ties_between_equal_means() {
    let t0 = Instant::now();
    let mut s = refresh(2, Config { r: 0.5, ..bare() }, t0);
    // Both end with a mean of 100; e0 got there through a jump, so its variance is larger.
    for v in [100, 100, 100] {
        s.record("e1", answered(v), t0);
    }
    for v in [50, 150] {
        s.record("e0", answered(v), t0);
    }
    assert_eq!(s.estimate("e0").unwrap().avg_ms, 100.0);
    assert_eq!(s.order(t0), ["e1", "e0"]);
}

#[test]
fn the_timeout_has_a_default_and_floors_and_a_ceiling() {
    let t0 = Instant::now();
    let mut s = refresh(1, Config::default(), t0);
    assert_eq!(s.timeout("e0", t0), Some(Duration::from_secs(10)));
    assert_eq!(s.timeout("nowhere", t0), None);
    s.record("e0", answered(100), t0);
    assert_eq!(
        s.timeout("e0", t0),
        Some(Duration::from_secs(1)),
        "min_timeout"
    );
    s.record("e0", answered(2000), t0);
    // avg = 0.05 * 100 + 0.95 * 2000 = 1905; 4 * 1905 = 7620 ms beats the T-percentile.
    assert_eq!(s.timeout("e0", t0), Some(ms(7620)));
    s.record("e0", answered(100_000), t0);
    assert_eq!(
        s.timeout("e0", t0),
        Some(Duration::from_secs(60)),
        "max_timeout"
    );
}

#[test]
fn a_failed_endpoint_is_probed_every_f_with_f_doubling_and_reset_by_an_answer() {
    let t0 = Instant::now();
    let f = Duration::from_secs(100);
    let config = Config {
        probe_interval: f,
        max_probe_interval: f * 4,
        ..Config::default()
    };
    let mut s = refresh(2, config, t0);
    s.record("e0", answered(10), t0);
    s.record("e1", answered(10), t0);
    s.record("e0", Outcome::TimedOut, t0);
    let recover = vec![Probe {
        endpoint: "e0".into(),
        kind: ProbeKind::Recover,
    }];
    let at = |k: u32| t0 + f * k;
    assert!(s.probes(at(1) - ms(1)).is_empty());
    assert_eq!(s.probes(at(1)), recover);
    assert!(s.probes(at(1)).is_empty(), "handed out once");
    // F doubled to 2F after the first probe, 4F after the second, then capped at 4F.
    assert!(s.probes(at(3) - ms(1)).is_empty());
    // The probe failed too; the schedule stands.
    s.record("e0", Outcome::ConnectFailed, at(2));
    assert_eq!(s.probes(at(3)), recover);
    assert!(s.probes(at(7) - ms(1)).is_empty());
    assert_eq!(s.probes(at(7)), recover);
    assert!(s.probes(at(11) - ms(1)).is_empty());
    assert_eq!(s.probes(at(11)), recover);
    // An answer resets F: the next failure is probed after F again.
    s.record("e0", answered(10), at(11));
    s.record("e1", answered(10), at(11));
    assert!(s.probes(at(12)).is_empty());
    s.record("e0", Outcome::Broken, at(12));
    assert!(s.probes(at(13) - ms(1)).is_empty());
    assert_eq!(s.probes(at(13)), recover);
}

#[test]
fn the_oldest_entry_past_its_ttl_gets_one_refresh_at_a_time() {
    let t0 = Instant::now();
    let ttl = Config::default().ttl;
    let mut s = refresh(4, Config::default(), t0);
    s.record("e0", answered(10), t0);
    s.record("e1", answered(10), t0 + ms(5));
    s.record("e2", answered(10), t0);
    s.record("e2", Outcome::TimedOut, t0);
    // e3 has no sample: it is tried by requests first, not refreshed.
    assert!(s.probes(t0 + ttl - ms(1)).is_empty());
    let refresh_of = |e: &str| Probe {
        endpoint: e.into(),
        kind: ProbeKind::Refresh,
    };
    let late = t0 + ttl + ms(10);
    assert_eq!(s.probes(late), [refresh_of("e0")]);
    assert_eq!(
        s.probes(late),
        [refresh_of("e1")],
        "e0's refresh is under way"
    );
    assert!(s.probes(late).is_empty());
    // e0's refresh answers; e1's is lost and handed out again a TTL later.
    s.record("e0", answered(12), late);
    assert!(s.probes(late + ttl - ms(1)).is_empty());
    assert_eq!(s.probes(late + ttl), [refresh_of("e1")]);
    assert_eq!(s.probes(late + ttl), [refresh_of("e0")]);
}

#[test]
fn invalid_configurations_are_refused() {
    let t0 = Instant::now();
    let bad = |c: Config| Refresh::new(&[], c, t0).unwrap_err().field;
    let d = Config::default;
    assert_eq!(bad(Config { r: 0.0, ..d() }), "r");
    assert_eq!(bad(Config { r: 1.5, ..d() }), "r");
    assert_eq!(
        bad(Config {
            choice_percentile: 100.0,
            ..d()
        }),
        "choice_percentile"
    );
    assert_eq!(
        bad(Config {
            timeout_percentile: 0.0,
            ..d()
        }),
        "timeout_percentile"
    );
    assert_eq!(
        bad(Config {
            weight_share: 1.0,
            ..d()
        }),
        "weight_share"
    );
    assert_eq!(
        bad(Config {
            probe_interval: Duration::ZERO,
            ..d()
        }),
        "probe_interval"
    );
    assert_eq!(
        bad(Config {
            min_timeout_factor: f64::NAN,
            ..d()
        }),
        "min_timeout_factor"
    );
    assert_eq!(
        bad(Config {
            min_timeout: Duration::from_secs(61),
            ..d()
        }),
        "min_timeout"
    );
}

fn outcome(kind: u8, latency_ms: u64) -> Outcome {
    match kind {
        0..=3 => answered(latency_ms),
        4 => Outcome::TimedOut,
        5 => Outcome::ConnectFailed,
        6 => Outcome::Broken,
        _ => Outcome::Cancelled,
    }
}

proptest! {
    /// Never picks a failed endpoint while a live one exists; the order is a permutation of
    /// the set; health agrees with the order (live ones first).
    #[test]
    fn never_picks_a_failed_endpoint_while_a_live_one_exists(
        events in prop::collection::vec((0usize..5, 0u8..8, 1u64..5000, 0u64..200_000), 0..100),
    ) {
        let t0 = Instant::now();
        let config = Config { probe_interval: Duration::from_secs(10), ..Config::default() };
        let mut s = refresh(5, config, t0);
        let mut at = 0;
        for (i, kind, latency, step) in events {
            at += step;
            let now = t0 + ms(at);
            s.record(&format!("e{i}"), outcome(kind, latency), now);
            let _ = s.probes(now);
            let order = s.order(now);
            let mut sorted = order.clone();
            sorted.sort();
            prop_assert_eq!(&sorted, &names(5));
            let health = s.health(now);
            let up = |n: &str| health.iter().any(|(m, u)| m == n && *u);
            let live = health.iter().filter(|(_, u)| *u).count();
            for (k, name) in order.iter().enumerate() {
                prop_assert_eq!(up(name), k < live, "order {:?} health {:?}", order, health);
            }
        }
    }

    /// Fed a stationary latency, the mean converges to it geometrically, at rate (1 - r) per
    /// sample from wherever it started, and the variance to 0.
    #[test]
    fn estimates_converge_to_a_stationary_latency(
        r in 0.05f64..=1.0,
        history in prop::collection::vec(1u64..10_000, 1..20),
        latency in 1u64..10_000,
        k in 1i32..60,
    ) {
        let t0 = Instant::now();
        let mut s = refresh(1, Config { r, ..Config::default() }, t0);
        for v in history {
            s.record("e0", answered(v), t0);
        }
        let start = s.estimate("e0").unwrap();
        for _ in 0..k {
            s.record("e0", answered(latency), t0);
        }
        let end = s.estimate("e0").unwrap();
        let target = latency as f64;
        let bound = (1.0 - r).powi(k) * (start.avg_ms - target).abs() + 1e-9 * target;
        prop_assert!((end.avg_ms - target).abs() <= bound, "{:?} -> {:?}", start, end);
        // With d the distance of the old mean, each constant sample gives
        // var' = (1 - r) var + r (1 - r)^2 d^2 and d' = (1 - r) d, so after k samples
        // var <= (1 - r)^k (var_0 + (1 - r) d_0^2).
        let d0 = (start.avg_ms - target).abs();
        let var_bound = (1.0 - r).powi(k) * (start.var_ms2 + (1.0 - r) * d0 * d0);
        prop_assert!(
            end.var_ms2 <= var_bound * (1.0 + 1e-9) + 1e-9,
            "var {} bound {}", end.var_ms2, var_bound
        );
        prop_assert!(end.var_ms2 >= 0.0);
    }

    /// Fed latencies within [lo, hi], the mean ends within [lo, hi] up to what is left of its
    /// start, (1 - r)^k of the distance.
    #[test]
    fn the_mean_stays_within_a_stationary_range(
        r in 0.05f64..=1.0,
        start in 1u64..10_000,
        lo in 1u64..5000,
        width in 0u64..5000,
        samples in prop::collection::vec(0.0f64..=1.0, 1..60),
    ) {
        let t0 = Instant::now();
        let mut s = refresh(1, Config { r, ..Config::default() }, t0);
        s.record("e0", answered(start), t0);
        let (lo, hi) = (lo as f64, (lo + width) as f64);
        for u in &samples {
            let v = lo + u * (hi - lo);
            s.record("e0", Outcome::Answered { latency: Duration::from_nanos((v * 1e6) as u64) }, t0);
        }
        let avg = s.estimate("e0").unwrap().avg_ms;
        let slack = (1.0 - r).powi(samples.len() as i32) * (start as f64 - lo).abs().max((start as f64 - hi).abs()) + 1e-6;
        prop_assert!(avg >= lo - slack && avg <= hi + slack, "{} not in [{}, {}] ± {}", avg, lo, hi, slack);
    }

    /// Successive recovery probes of a failed endpoint are at least F, 2F, 4F, ... apart
    /// (capped), and none comes before F has passed since the failure.
    #[test]
    fn recovery_probes_back_off_doubling(
        steps in prop::collection::vec(1u64..400, 1..120),
        cap in 0u32..6,
    ) {
        let t0 = Instant::now();
        let f = Duration::from_secs(10);
        let max = f * 2u32.pow(cap);
        let config = Config { probe_interval: f, max_probe_interval: max, ..Config::default() };
        let mut s = refresh(2, config, t0);
        s.record("e1", answered(10), t0);
        s.record("e0", Outcome::TimedOut, t0);
        let mut last = t0;
        let mut gap = f;
        let mut now = t0;
        let mut sent = 0;
        for step in steps {
            now += Duration::from_secs(step);
            for p in s.probes(now) {
                if p.endpoint == "e0" {
                    prop_assert_eq!(p.kind, ProbeKind::Recover);
                    prop_assert!(now - last >= gap, "probe after {:?}, want {:?}", now - last, gap);
                    last = now;
                    gap = (gap * 2).min(max);
                    sent += 1;
                }
            }
            // Its probes keep failing.
            s.record("e0", Outcome::TimedOut, now);
        }
        // Probes are due at the intervals, not only allowed: with calls at most 400 s apart
        // after 10 + 20 + ... seconds, at least one must have been handed out.
        if now - t0 >= f + Duration::from_secs(400) {
            prop_assert!(sent >= 1);
        }
    }

    /// An update keeps what was learnt about the endpoints that stay.
    #[test]
    fn update_keeps_learnt_state(
        latencies in prop::collection::vec(1u64..1000, 4),
        keep in prop::collection::vec(any::<bool>(), 4),
        fail in 0usize..4,
    ) {
        let t0 = Instant::now();
        let mut s = refresh(4, Config::default(), t0);
        for (i, v) in latencies.iter().enumerate() {
            s.record(&format!("e{i}"), answered(*v), t0);
        }
        s.record(&format!("e{fail}"), Outcome::TimedOut, t0);
        let before: Vec<_> = (0..4).map(|i| s.estimate(&format!("e{i}"))).collect();
        let health = s.health(t0);
        let mut set: Vec<String> = (0..4).filter(|&i| keep[i]).map(|i| format!("e{i}")).collect();
        set.push("new".into());
        set.reverse();
        s.update(&set, t0);
        for i in 0..4 {
            let name = format!("e{i}");
            if keep[i] {
                prop_assert_eq!(s.estimate(&name), before[i]);
                let up = s.health(t0).into_iter().find(|(n, _)| *n == name).map(|(_, u)| u);
                prop_assert_eq!(up, Some(health[i].1));
            } else {
                prop_assert_eq!(s.estimate(&name), None);
                prop_assert_eq!(s.timeout(&name, t0), None);
            }
        }
        prop_assert_eq!(s.estimate("new"), None);
        let order = s.order(t0);
        prop_assert_eq!(order[0].as_str(), "new");
        prop_assert_eq!(order.len(), set.len());
    }
}
