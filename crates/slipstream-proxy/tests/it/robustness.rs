//! Broken upstreams: the proxy answers 502/504 clearly, keeps serving others, stores nothing.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{get, metric, proxy, reverse, Origin, Reply};

/// A raw upstream that answers every connection with `bytes` (then closes), or resets.
async fn raw_upstream(bytes: &'static [u8]) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(bytes).await;
                let _ = s.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn malformed_upstream_response_is_a_502_and_nothing_is_stored() {
    let up = raw_upstream(b"HTTP/1.1 2OO NOT A STATUS\r\n\r\n").await;
    let p = proxy(reverse("edge", up)).await;
    let got = get(p, "/m", &[]).await;
    assert_eq!(got.status, 502);
    assert!(
        String::from_utf8_lossy(&got.body).contains("invalid or incomplete response"),
        "{:?}",
        got.body
    );
    assert_eq!(
        get(p, "/m", &[]).await.status,
        502,
        "nothing broken was stored"
    );
}

#[tokio::test]
async fn oversized_upstream_headers_are_a_502() {
    let mut head = b"HTTP/1.1 200 OK\r\nX-Big: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', 512 * 1024));
    head.extend_from_slice(b"\r\ncontent-length: 0\r\n\r\n");
    let up = raw_upstream(Box::leak(head.into_boxed_slice())).await;
    let p = proxy(reverse("edge", up)).await;
    assert_eq!(get(p, "/big", &[]).await.status, 502);
}

#[tokio::test]
async fn truncated_upstream_body_is_a_502_and_not_stored() {
    let up = raw_upstream(b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: 100\r\n\r\nonly a few bytes").await;
    let p = proxy(reverse("edge", up)).await;
    assert_eq!(get(p, "/t", &[]).await.status, 502);
    assert_eq!(get(p, "/t", &[]).await.status, 502);
}

#[tokio::test(start_paused = true)]
async fn connection_refused_is_a_502_and_a_slow_upstream_a_504() {
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .local_addr()
        .expect("addr");
    let p = proxy(reverse("edge", dead)).await;
    let got = get(p, "/x", &[]).await;
    assert_eq!(got.status, 502);
    let body = String::from_utf8_lossy(&got.body);
    assert!(body.contains("could not connect"), "{body}");
    // Nothing about what is behind the proxy: no address, no error chain.
    assert!(
        !body.contains(&dead.to_string())
            && !body.contains("127.0.0.1")
            && !body.contains("os error"),
        "{body}"
    );

    let origin = Origin::default();
    origin.set("/slow", Reply::ok("late", &[]).held());
    origin.set("/fast", Reply::ok("ok", &[]));
    let mut config = reverse("edge", origin.start().await);
    config.upstream_timeout_ms = 200;
    let p = proxy(config).await;
    assert_eq!(get(p, "/slow", &[]).await.status, 504);
    assert_eq!(
        get(p, "/fast", &[]).await.body,
        "ok",
        "other requests are still served"
    );
}

#[tokio::test]
async fn a_chunked_response_larger_than_the_object_limit_passes_through_unstored() {
    // No Content-Length (the raw upstream closes the connection to end the body), 50 KB, and a
    // proxy that stores objects up to 10 KB: the client must get all of it.
    let mut response =
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\nconnection: close\r\n\r\n".to_vec();
    response.extend(std::iter::repeat_n(b'z', 50_000));
    let up = raw_upstream(Box::leak(response.into_boxed_slice())).await;
    let mut config = reverse("edge", up);
    config.cache.max_object_bytes = 10_000;
    let p = proxy(config).await;
    let got = get(p, "/chunky", &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body.len(), 50_000);
    assert!(
        !got.cache_status().contains("stored"),
        "{}",
        got.cache_status()
    );
}

#[tokio::test]
async fn an_upstream_that_closes_without_answering_is_a_502() {
    let up = raw_upstream(b"").await;
    let p = proxy(reverse("edge", up)).await;
    assert_eq!(get(p, "/closed", &[]).await.status, 502);
}

#[tokio::test]
async fn requests_for_made_up_urls_leave_nothing_in_the_store() {
    let origin = Origin::default();
    origin.set(
        "/real",
        Reply::ok("yes", &[("cache-control", "max-age=600")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    for i in 0..100 {
        assert_eq!(get(p, &format!("/made-up-{i}"), &[]).await.status, 404);
    }
    assert_eq!(metric(p, "slipstream_cache_tracked_objects").await, 0.0);
    assert_eq!(get(p, "/real", &[]).await.status, 200);
    assert_eq!(metric(p, "slipstream_cache_tracked_objects").await, 1.0);
}

#[tokio::test]
async fn x_forwarded_host_and_the_like_are_stripped_unless_passed() {
    let origin = Origin::default();
    origin.set("/f", Reply::ok("f", &[]));
    let up = origin.start().await;
    let sent = [
        ("x-forwarded-host", "evil.example"),
        ("forwarded", "host=evil.example"),
    ];
    let strip = proxy(reverse("edge", up)).await;
    get(strip, "/f", &sent).await;
    let mut pass_config = reverse("edge2", up);
    pass_config.forwarded = slipstream_proxy::config::Forwarded::Pass;
    let pass = proxy(pass_config).await;
    get(pass, "/f", &sent).await;
    let seen = origin.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].headers.get("x-forwarded-host").is_none());
    assert!(seen[0].headers.get("forwarded").is_none());
    assert_eq!(
        seen[1]
            .headers
            .get("x-forwarded-host")
            .map(|v| v.as_bytes()),
        Some(&b"evil.example"[..])
    );
}

/// An upstream that sends `head`, then `body` one byte every `every`, then stalls for ever.
async fn trickling_upstream(
    head: &'static [u8],
    body: &'static [u8],
    every: std::time::Duration,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(head).await;
                for b in body {
                    tokio::time::sleep(every).await;
                    if s.write_all(&[*b]).await.is_err() {
                        return;
                    }
                }
                std::future::pending::<()>().await;
            });
        }
    });
    addr
}

#[tokio::test(start_paused = true)]
async fn a_trickling_cacheable_upstream_is_streamed_after_the_store_deadline() {
    let up = trickling_upstream(
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: 10\r\n\r\n",
        b"0123456789",
        std::time::Duration::from_secs(5),
    )
    .await;
    // Two bytes in 10 s would be cut by the default least rate; this test is about storing.
    let mut config = reverse("edge", up);
    config.upstream_min_rate = 0;
    let p = proxy(config).await;
    let t0 = tokio::time::Instant::now();
    // `get` allows 20 s for the response head: before the store deadline existed, the proxy
    // read all 50 s of body before answering.
    let got = get(p, "/slow", &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, "0123456789");
    assert!(
        !got.cache_status().contains("stored"),
        "{}",
        got.cache_status()
    );
    assert!(t0.elapsed() >= std::time::Duration::from_secs(50));
}

#[tokio::test(start_paused = true)]
async fn a_stalled_uncacheable_body_ends_after_the_upstream_timeout() {
    let up = trickling_upstream(
        b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncontent-length: 100\r\n\r\nab",
        b"",
        std::time::Duration::from_secs(1),
    )
    .await;
    let p = proxy(reverse("edge", up)).await;
    let t0 = tokio::time::Instant::now();
    let received = crate::support::get_fallible(p, "/stalled")
        .await
        .expect_err("the body cannot complete");
    assert_eq!(received, 2);
    let held = t0.elapsed();
    assert!(
        held >= std::time::Duration::from_secs(30) && held < std::time::Duration::from_secs(61),
        "held {held:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_under_the_least_rate_is_cut_at_the_end_of_its_window() {
    // One byte every 5 s never stalls for the 30 s upstream timeout: without a least rate it
    // would hold the client for 500 s.
    let up = trickling_upstream(
        b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncontent-length: 100\r\n\r\n",
        &[b'x'; 100],
        std::time::Duration::from_secs(5),
    )
    .await;
    let mut config = reverse("edge", up);
    config.upstream_min_rate = 10;
    config.upstream_min_rate_window_ms = 20_000;
    let p = proxy(config).await;
    let t0 = tokio::time::Instant::now();
    let received = crate::support::get_fallible(p, "/trickle")
        .await
        .expect_err("the body is cut");
    assert!(received < 100, "received {received}");
    assert_eq!(t0.elapsed().as_secs(), 20);
}

#[tokio::test(start_paused = true)]
async fn by_default_a_body_dripping_a_byte_a_second_is_cut_after_thirty_seconds() {
    // Issue 40: an upstream dripping a byte a second was followed for as long as it dripped.
    // The default least rate (1 KiB/s over 30 s) ends it at the first window.
    let up = trickling_upstream(
        b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncontent-length: 1000\r\n\r\n",
        &[b'x'; 1000],
        std::time::Duration::from_secs(1),
    )
    .await;
    let p = proxy(reverse("edge", up)).await;
    let t0 = tokio::time::Instant::now();
    let received = crate::support::get_fallible(p, "/drip")
        .await
        .expect_err("the body is cut");
    assert!(received <= 31, "received {received}");
    assert_eq!(t0.elapsed().as_secs(), 30);
}

#[tokio::test(start_paused = true)]
async fn a_body_still_arriving_after_the_total_deadline_is_cut() {
    let up = trickling_upstream(
        b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncontent-length: 100\r\n\r\n",
        &[b'x'; 100],
        std::time::Duration::from_secs(1),
    )
    .await;
    let mut config = reverse("edge", up);
    config.upstream_body_timeout_ms = 30_000;
    let p = proxy(config).await;
    let t0 = tokio::time::Instant::now();
    let received = crate::support::get_fallible(p, "/long")
        .await
        .expect_err("the body is cut");
    assert!((25..=30).contains(&received), "received {received}");
    assert_eq!(t0.elapsed().as_secs(), 30);
}

#[tokio::test]
async fn keyed_forwarding_fields_keep_one_hosts_page_from_anothers_clients() {
    let origin = Origin::default();
    origin.set(
        "/page",
        Reply::ok("page", &[("cache-control", "max-age=600")]),
    );
    let up = origin.start().await;
    let mut config = reverse("edge", up);
    config.forwarded = slipstream_proxy::config::Forwarded::Key;
    let p = proxy(config).await;
    let evil = [("x-forwarded-host", "evil.example")];
    assert!(get(p, "/page", &evil)
        .await
        .cache_status()
        .contains("stored"));
    // A client that names no host must not get the page built for evil.example.
    let plain = get(p, "/page", &[]).await;
    assert!(
        !plain.cache_status().contains("hit"),
        "{}",
        plain.cache_status()
    );
    assert!(get(p, "/page", &[]).await.cache_status().contains("hit"));
    assert!(get(p, "/page", &evil).await.cache_status().contains("hit"));
    let other = get(p, "/page", &[("x-forwarded-host", "other.example")]).await;
    assert!(
        !other.cache_status().contains("hit"),
        "{}",
        other.cache_status()
    );
    // The origin saw each distinct value once, with the field passed on.
    let seen = origin.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(
        seen[0]
            .headers
            .get("x-forwarded-host")
            .map(|v| v.as_bytes()),
        Some(&b"evil.example"[..])
    );
    assert!(seen[1].headers.get("x-forwarded-host").is_none());
}
