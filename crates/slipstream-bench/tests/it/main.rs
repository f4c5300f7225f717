//! Integration tests of the load generator against a tiny in-process hyper
//! server on 127.0.0.1 that speaks HTTP/1.1 and h2c.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use slipstream_bench::{parse_url_list, run, Limits, Mode, Plan, Report, Targets, UrlListError};
use tokio::net::TcpListener;

const BODY_LEN: usize = 1024;

/// `/ok`: 200 with a 1 KiB body; `/slow`: the same after 2 s; anything else: 404.
/// A request that names no authority (no `Host`, no `:authority`) gets 400.
async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, body: Bytes| {
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        Ok(response)
    };
    if req.uri().authority().is_none() && !req.headers().contains_key(header::HOST) {
        return reply(StatusCode::BAD_REQUEST, Bytes::from_static(b"no host"));
    }
    match req.uri().path() {
        "/ok" => reply(StatusCode::OK, Bytes::from(vec![b'x'; BODY_LEN])),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(2)).await;
            reply(StatusCode::OK, Bytes::from(vec![b'x'; BODY_LEN]))
        }
        _ => reply(StatusCode::NOT_FOUND, Bytes::new()),
    }
}

async fn serve() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service_fn(handle))
                    .await;
            });
        }
    });
    addr
}

fn plan(addr: SocketAddr, targets: Targets, mode: Mode) -> Plan {
    Plan {
        base: format!("http://{addr}").parse().unwrap(),
        targets,
        mode,
        limits: Limits {
            max_requests: 1_000_000,
            duration: Duration::from_secs(10),
        },
        timeout: Duration::from_secs(5),
        http2: false,
        proxy: None,
        seed: 1,
    }
}

fn weighted(paths: &[&str]) -> Targets {
    Targets::Weighted(paths.iter().map(|p| (p.to_string(), 1.0)).collect())
}

fn closed(clients: usize) -> Mode {
    Mode::Closed {
        clients,
        think_time: Duration::ZERO,
    }
}

fn total(report: &Report) -> u64 {
    report.completed + report.error_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_issues_exactly_max_requests() {
    let addr = serve().await;
    let mut p = plan(addr, weighted(&["/ok"]), closed(8));
    p.limits.max_requests = 500;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let report = run(p, move |_| {
        seen.fetch_add(1, Ordering::Relaxed);
    })
    .await
    .unwrap();
    assert_eq!(total(&report), 500, "{report}");
    assert_eq!(report.completed, 500, "{report}");
    assert_eq!(report.bytes, 500 * BODY_LEN as u64);
    assert_eq!(report.latency_us.len(), 500);
    assert!(calls.load(Ordering::Relaxed) >= 1, "final progress call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_is_counted_by_status() {
    let addr = serve().await;
    let mut p = plan(addr, weighted(&["/ok", "/missing"]), closed(2));
    p.limits.max_requests = 200;
    let report = run(p, |_| {}).await.unwrap();
    assert_eq!(total(&report), 200);
    let not_found = report.errors.get("status 404").copied().unwrap_or(0);
    assert!(not_found > 0 && report.completed > 0, "{report}");
    assert_eq!(not_found + report.completed, 200);
    assert_eq!(report.errors.len(), 1, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_replays_trace_and_stops_at_its_end() {
    let addr = serve().await;
    let trace = vec!["/ok".to_owned(), "/missing".to_owned(), "/ok".to_owned()];
    let report = run(plan(addr, Targets::Sequence(trace), closed(1)), |_| {})
        .await
        .unwrap();
    assert_eq!(report.completed, 2);
    assert_eq!(report.errors.get("status 404"), Some(&1));
}

// On tokio's paused clock: the waits below are virtual.
#[tokio::test(start_paused = true)]
async fn slow_responses_time_out() {
    let addr = serve().await;
    let mut p = plan(addr, weighted(&["/slow"]), closed(1));
    p.limits.max_requests = 2;
    p.timeout = Duration::from_millis(200);
    let report = run(p, |_| {}).await.unwrap();
    assert_eq!(report.errors.get("timeout"), Some(&2), "{report}");
    assert_eq!(report.completed, 0);
    assert!(report.elapsed < Duration::from_millis(1500), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_connect_errors() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut p = plan(addr, weighted(&["/ok"]), closed(1));
    p.limits.max_requests = 3;
    let report = run(p, |_| {}).await.unwrap();
    assert_eq!(report.errors.get("connect"), Some(&3), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_limit_stops_the_run() {
    let addr = serve().await;
    let mut p = plan(addr, weighted(&["/ok"]), closed(4));
    p.limits.max_requests = u64::MAX;
    p.limits.duration = Duration::from_millis(300);
    let report = run(p, |_| {}).await.unwrap();
    assert!(report.elapsed < Duration::from_secs(2), "{report}");
    assert!(report.completed > 0, "{report}");
}

// On tokio's paused clock: the waits below are virtual.
#[tokio::test(start_paused = true)]
async fn open_loop_sends_at_the_planned_rate() {
    let addr = serve().await;
    let mode = Mode::Open {
        rate_per_s: 200.0,
        max_in_flight: 64,
    };
    let mut p = plan(addr, weighted(&["/ok"]), mode);
    p.limits.duration = Duration::from_millis(500);
    let report = run(p, |_| {}).await.unwrap();
    let sent = total(&report);
    assert!((80..=120).contains(&sent), "{sent} requests\n{report}");
    assert_eq!(report.error_count(), 0, "{report}");
}

// On tokio's paused clock: the waits below are virtual.
#[tokio::test(start_paused = true)]
async fn open_loop_counts_overload_when_in_flight_is_full() {
    let addr = serve().await;
    let mode = Mode::Open {
        rate_per_s: 100.0,
        max_in_flight: 1,
    };
    let mut p = plan(addr, weighted(&["/slow"]), mode);
    p.limits.max_requests = 5;
    p.timeout = Duration::from_millis(300);
    let report = run(p, |_| {}).await.unwrap();
    assert_eq!(total(&report), 5, "{report}");
    assert_eq!(report.errors.get("overload"), Some(&4), "{report}");
    assert_eq!(report.errors.get("timeout"), Some(&1), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_closed_and_open_loop() {
    let addr = serve().await;
    let mut p = plan(addr, weighted(&["/ok"]), closed(4));
    p.http2 = true;
    p.limits.max_requests = 100;
    let report = run(p, |_| {}).await.unwrap();
    assert_eq!(report.completed, 100, "{report}");
    assert_eq!(report.bytes, 100 * BODY_LEN as u64);

    let mode = Mode::Open {
        rate_per_s: 200.0,
        max_in_flight: 32,
    };
    let mut p = plan(addr, weighted(&["/ok", "/missing"]), mode);
    p.http2 = true;
    p.limits.max_requests = 40;
    let report = run(p, |_| {}).await.unwrap();
    assert_eq!(total(&report), 40, "{report}");
    assert!(
        report.completed > 0 && report.errors.contains_key("status 404"),
        "{report}"
    );
}

#[tokio::test]
async fn invalid_plans_are_rejected() {
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    assert!(run(plan(addr, weighted(&["/ok"]), closed(0)), |_| {})
        .await
        .is_err());
    let mut p = plan(addr, weighted(&["/ok"]), closed(1));
    p.base = "https://example.invalid".parse().unwrap();
    assert!(run(p, |_| {}).await.is_err());
    let bad_rate = Mode::Open {
        rate_per_s: 0.0,
        max_in_flight: 1,
    };
    assert!(run(plan(addr, weighted(&["/ok"]), bad_rate), |_| {})
        .await
        .is_err());
}

#[test]
fn url_list_errors_name_the_line() {
    let text = "# urls\n2 /a\n/b\n\nheavy /c\n";
    let err = parse_url_list(text, "urls.txt").unwrap_err();
    assert!(matches!(err, UrlListError::BadWeight { line: 5, .. }));
    assert!(err.to_string().starts_with("urls.txt:5:"), "{err}");
    let ok = parse_url_list("2\t/a\n/b\n", "u").unwrap();
    assert_eq!(ok, vec![("/a".to_owned(), 2.0), ("/b".to_owned(), 1.0)]);
}
