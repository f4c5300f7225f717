//! The proxy's memory is bounded by its capacity (issue 9): a proxy filled far past its capacity
//! by unique cacheable URIs holds no more than the documented bound. Its own test binary, with
//! one test, because it counts every allocation of the process through the global allocator.

#[allow(dead_code)]
#[path = "it/support.rs"]
mod support;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use slipstream_proxy::store;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Net heap growth since `region` began.
fn growth(region: &Region<'_, std::alloc::System>) -> i64 {
    let c = region.change();
    // A reallocation is already counted in the bytes allocated or deallocated.
    c.bytes_allocated as i64 - c.bytes_deallocated as i64
}

/// An origin that answers every URI with its own cacheable 1 KiB body. Not `support::Origin`,
/// which records every request it sees: that record would count as held memory.
async fn origin() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let body = Bytes::from(vec![b'x'; 1024]);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let mut r = Response::new(Full::new(body.clone()));
                    let h = r.headers_mut();
                    h.insert("cache-control", "max-age=3600".parse().expect("value"));
                    h.insert("etag", format!("\"{}\"", req.uri()).parse().expect("value"));
                    h.insert("x-padding", "p".repeat(200).parse().expect("value"));
                    async move { Ok::<_, Infallible>(r) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_filled_past_its_capacity_by_unique_uris_stays_within_its_bound() {
    let capacity: u64 = 2 << 20;
    let origin = origin().await;
    let mut config = support::reverse("memory", origin);
    config.cache.capacity_bytes = capacity;
    let proxy = support::proxy(config).await;
    // Warm up: connections, pools, the metrics page.
    for i in 0..50 {
        support::get(proxy, &format!("/warm/{i}"), &[]).await;
    }
    support::metric(proxy, "slipstream_cache_used_bytes").await;
    let region = Region::new(GLOBAL);
    let n = 8_000;
    for i in 0..n {
        let uri = if i % 4 == 0 {
            format!("/object?{i}-{}", "q".repeat(300))
        } else {
            format!("/object?{i}")
        };
        let got = support::get(proxy, &uri, &[]).await;
        assert_eq!(got.status, 200);
    }
    // A long URI is found again under its hash.
    let long = format!("/object?{}-{}", n - 4, "q".repeat(300));
    assert!(support::get(proxy, &long, &[])
        .await
        .cache_status()
        .contains("hit"));
    let used = support::metric(proxy, "slipstream_cache_used_bytes").await as u64;
    let tracked = support::metric(proxy, "slipstream_cache_tracked_objects").await as u64;
    let held = growth(&region);
    // The documented bound: the capacity, the free list's eighth, the uncached headers'
    // sixteenth, and 1 MiB for what is in flight (connections, the test's own client).
    let bound = (capacity + capacity / 8 + capacity / 16 + (1 << 20)) as i64;
    assert!(used <= capacity);
    assert!(
        held <= bound,
        "after {n} unique URIs the process holds {held} more heap bytes, over the bound {bound} \
         (cache used {used} of {capacity}, {tracked} headers tracked)"
    );
    let config = store::bounded_config(capacity, "lru".parse().expect("policy"));
    assert!(tracked as usize <= config.max_tracked);
}
