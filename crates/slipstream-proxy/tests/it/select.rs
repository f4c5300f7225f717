//! Several origins chosen by a selection policy (`origin_policy`): Refresh (paper 001 §4.1)
//! prefers the faster origin, times a stalled one out at its own percentile and fails over,
//! and probes a failed one until it answers again; p2c never sends to an origin it counts down
//! while another is up. All on tokio's paused clock: origins' delays are timers.

use std::net::SocketAddr;
use std::time::Duration;

use slipstream_proxy::config::CacheConfig;
use slipstream_proxy::Config;

use crate::support::{get, metric, proxy, wait_for_metric, Origin, Reply};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A reverse proxy without a cache (every request goes upstream) for `origins`, chosen by
/// `policy`.
fn site(policy: &str, origins: &[SocketAddr]) -> Config {
    Config {
        origin: origins.iter().map(|o| format!("http://{o}")).collect(),
        origin_policy: policy.into(),
        name: "edge".into(),
        cache: CacheConfig {
            enabled: false,
            ..CacheConfig::default()
        },
        ..Config::default()
    }
}

/// A loopback address nothing listens on.
async fn down() -> SocketAddr {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .local_addr()
        .expect("addr")
}

fn up_metric(origin: SocketAddr) -> String {
    format!("slipstream_origin_up{{origin=\"{origin}\"}}")
}

#[tokio::test(start_paused = true)]
async fn refresh_sends_requests_to_the_faster_origin() {
    let (slow, fast) = (Origin::default(), Origin::default());
    slow.set("/r", Reply::ok("slow", &[]).after(ms(200)));
    fast.set("/r", Reply::ok("fast", &[]).after(ms(20)));
    // The slow origin is listed first: fail-over would send everything there.
    let p = proxy(site("refresh", &[slow.start().await, fast.start().await])).await;
    let mut bodies = Vec::new();
    for _ in 0..10 {
        let got = get(p, "/r", &[]).await;
        assert_eq!(got.status, 200);
        bodies.push(got.body);
    }
    // The first two requests measure each origin once (unmeasured ones first, in set order);
    // then the least 55th percentile of latency wins every time.
    assert_eq!(bodies[0], "slow");
    assert_eq!(bodies[1], "fast");
    assert!(bodies[2..].iter().all(|b| b == "fast"), "{bodies:?}");
    assert_eq!(slow.hits("/r"), 1);
    assert_eq!(fast.hits("/r"), 9);
}

#[tokio::test(start_paused = true)]
async fn refresh_times_a_stalled_origin_out_at_its_percentile_and_fails_over() {
    let (a, b) = (Origin::default(), Origin::default());
    a.set("/t", Reply::ok("a", &[]).after(ms(10)));
    b.set("/t", Reply::ok("b", &[]).after(ms(50)));
    let config = site("refresh", &[a.start().await, b.start().await]);
    assert_eq!(config.upstream_timeout_ms, 30_000);
    let p = proxy(config).await;
    for expected in ["a", "b", "a"] {
        assert_eq!(get(p, "/t", &[]).await.body, expected);
    }
    // `a` stalls. Its timeout is the largest of its 99.9th percentile, four times its mean
    // and the 1 s floor (the floor here), far below the configured 30 s.
    a.set("/t", Reply::ok("a", &[]).held());
    let start = tokio::time::Instant::now();
    let got = get(p, "/t", &[]).await;
    let took = start.elapsed();
    assert_eq!(got.status, 200);
    assert_eq!(got.body, "b", "failed over to the next candidate");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(a.hits("/t"), 3);
    // `a` is now counted as failed: the next requests go straight to `b`.
    for _ in 0..3 {
        let start = tokio::time::Instant::now();
        assert_eq!(get(p, "/t", &[]).await.body, "b");
        assert!(start.elapsed() < ms(500), "{:?}", start.elapsed());
    }
    assert_eq!(a.hits("/t"), 3);
}

#[tokio::test(start_paused = true)]
async fn refresh_probes_a_down_origin_and_uses_it_again_once_it_is_back() {
    let a = down().await;
    let b = Origin::default();
    b.set("/d", Reply::ok("b", &[]).after(ms(50)));
    let p = proxy(site("refresh", &[a, b.start().await])).await;
    for _ in 0..5 {
        let got = get(p, "/d", &[]).await;
        assert_eq!((got.status, &got.body[..]), (200, &b"b"[..]));
    }
    assert_eq!(metric(p, &up_metric(a)).await, 0.0);

    // `a` comes back on its port. 001 §6: a failed replica is probed after F = 28.8 hours.
    let back = Origin::default();
    back.set("/d", Reply::ok("a", &[]));
    back.start_at(a).await;
    tokio::time::advance(Duration::from_secs(28 * 3600)).await;
    assert_eq!(get(p, "/d", &[]).await.body, "b");
    assert!(back.seen().is_empty(), "probed before F: {:?}", back.seen());
    assert_eq!(metric(p, &up_metric(a)).await, 0.0);

    tokio::time::advance(Duration::from_secs(3600)).await;
    wait_for_metric(p, &up_metric(a), |v| v == 1.0).await;
    // The probe was a HEAD for the path last requested from `a`.
    let seen = back.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("HEAD", "/d")
    );
    // `a` answers faster than `b`: it is used again.
    for _ in 0..3 {
        assert_eq!(get(p, "/d", &[]).await.body, "a");
    }
    assert_eq!(back.hits("/d"), 4);
}

#[tokio::test(start_paused = true)]
async fn p2c_never_sends_to_a_down_origin_while_another_is_up() {
    let (broken, good) = (Origin::default(), Origin::default());
    broken.set("/p", Reply::disconnect());
    good.set("/p", Reply::ok("good", &[]).after(ms(100)));
    let mut config = site("p2c", &[broken.start().await, good.start().await]);
    config.parent_retry_ms = 60_000;
    let p = proxy(config).await;
    // Untried, `broken` looks cheaper than `good` (30 ms against a 100 ms peak), so it is
    // tried within the first two requests; it fails, and is down for the next minute.
    for _ in 0..30 {
        let got = get(p, "/p", &[]).await;
        assert_eq!((got.status, &got.body[..]), (200, &b"good"[..]));
    }
    assert_eq!(broken.hits("/p"), 1);

    // It recovers; once the minute is over it is tried again and, faster, takes the load.
    broken.set("/p", Reply::ok("recovered", &[]));
    tokio::time::advance(Duration::from_secs(61)).await;
    let mut recovered = 0;
    for _ in 0..10 {
        let got = get(p, "/p", &[]).await;
        assert_eq!(got.status, 200);
        recovered += usize::from(got.body == "recovered");
    }
    assert!(
        recovered >= 8,
        "{recovered} of 10 from the recovered origin"
    );
}
