//! Partial objects: paper 002's adaptive level in the proxy.

use slipstream_proxy::Config;

use crate::support::{get, get_fallible, proxy, reverse, Origin, Reply};

fn big() -> String {
    (0..100_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect()
}

fn chunked_proxy_config(origin: std::net::SocketAddr) -> Config {
    let mut c = reverse("edge", origin);
    c.cache.max_object_bytes = 10_000;
    c.cache.chunk_bytes = 4096;
    c
}

#[tokio::test]
async fn adaptive_level_keeps_the_first_chunk_and_fetches_the_rest_by_range() {
    // 002 §4.1.2 and §4.2.2: a hit sends the cached chunk and fetches the rest.
    let origin = Origin::default();
    let body = big();
    origin.set(
        "/big",
        Reply::ok(
            &body,
            &[("cache-control", "max-age=600"), ("etag", "\"b1\"")],
        )
        .with_ranges(),
    );
    let p = proxy(chunked_proxy_config(origin.start().await)).await;
    let first = get(p, "/big", &[]).await;
    assert_eq!(first.body, body);
    assert!(
        first.cache_status().contains("stored; detail=partial"),
        "{}",
        first.cache_status()
    );
    let second = get(p, "/big", &[]).await;
    assert_eq!(second.status, 200);
    assert!(
        second.body == body.as_bytes(),
        "the client sees one complete, correct body"
    );
    assert!(
        second.cache_status().contains("hit") && second.cache_status().contains("partial"),
        "{}",
        second.cache_status()
    );
    let rest = origin
        .seen()
        .into_iter()
        .filter(|s| s.path == "/big")
        .nth(1)
        .expect("a second upstream request");
    assert_eq!(
        rest.headers.get("range").and_then(|v| v.to_str().ok()),
        Some("bytes=4096-")
    );
    assert_eq!(
        rest.headers.get("if-range").and_then(|v| v.to_str().ok()),
        Some("\"b1\"")
    );
    // HEAD and a range inside the chunk need no upstream request.
    let head = crate::support::send(p, "HEAD", "/big", &[]).await;
    assert_eq!(head.header("content-length"), Some("100000"));
    let inside = get(p, "/big", &[("range", "bytes=10-19")]).await;
    assert_eq!(inside.status, 206);
    assert_eq!(&inside.body[..], &body.as_bytes()[10..20]);
    assert_eq!(
        inside.header("content-range"),
        Some("bytes 10-19/100000"),
        "the whole representation's length, not the chunk's"
    );
    let beyond = get(p, "/big", &[("range", "bytes=200000-")]).await;
    assert_eq!(beyond.status, 416);
    assert_eq!(beyond.header("content-range"), Some("bytes */100000"));
    assert_eq!(origin.hits("/big"), 2);
    let metrics =
        String::from_utf8_lossy(&get(p, "/_slipstream/metrics", &[]).await.body).into_owned();
    assert!(
        metrics.contains("slipstream_cache_requests_total{outcome=\"incomplete_hit\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_upstream_that_ignores_range_still_gives_a_correct_body() {
    let origin = Origin::default();
    let body = big();
    origin.set(
        "/big",
        Reply::ok(
            &body,
            &[("cache-control", "max-age=600"), ("etag", "\"b1\"")],
        ),
    );
    let p = proxy(chunked_proxy_config(origin.start().await)).await;
    get(p, "/big", &[]).await;
    let second = get(p, "/big", &[]).await;
    assert!(second.body == body.as_bytes());
    assert!(second.cache_status().contains("partial"));
}

#[tokio::test]
async fn an_object_changed_upstream_fails_the_transfer_instead_of_mixing_versions() {
    let origin = Origin::default();
    let body = big();
    origin.set(
        "/big",
        Reply::ok(
            &body,
            &[("cache-control", "max-age=600"), ("etag", "\"b1\"")],
        )
        .with_ranges(),
    );
    let p = proxy(chunked_proxy_config(origin.start().await)).await;
    get(p, "/big", &[]).await;
    let changed = body.to_uppercase();
    origin.set(
        "/big",
        Reply::ok(
            &changed,
            &[("cache-control", "max-age=600"), ("etag", "\"b2\"")],
        )
        .with_ranges(),
    );
    match get_fallible(p, "/big").await {
        Err(received) => assert!(
            received <= 4096,
            "only the stored chunk was sent before the failure: {received}"
        ),
        Ok(got) => panic!(
            "a changed object must not be completed from a new version: got {} bytes",
            got.body.len()
        ),
    }
    // The stale chunk was dropped: the next request is a miss and gets the new version.
    let next = get(p, "/big", &[]).await;
    assert!(
        next.cache_status().contains("fwd=uri-miss"),
        "{}",
        next.cache_status()
    );
    assert!(next.body == changed.as_bytes());
}

#[tokio::test]
async fn objects_without_a_validator_are_not_chunked() {
    let origin = Origin::default();
    origin.set(
        "/big",
        Reply::ok(&big(), &[("cache-control", "max-age=600")]),
    );
    let p = proxy(chunked_proxy_config(origin.start().await)).await;
    get(p, "/big", &[]).await;
    assert!(get(p, "/big", &[])
        .await
        .cache_status()
        .contains("fwd=uri-miss"));
}

#[tokio::test]
async fn a_range_the_chunk_cannot_answer_gets_the_whole_body() {
    // RFC 9110 §13.1.5 and §14.2: an If-Range that no longer matches, or a malformed Range,
    // means the whole representation: the chunk and the remainder, never the chunk alone
    // under the whole length.
    let origin = Origin::default();
    let body = big();
    origin.set(
        "/big",
        Reply::ok(
            &body,
            &[("cache-control", "max-age=600"), ("etag", "\"b1\"")],
        )
        .with_ranges(),
    );
    let p = proxy(chunked_proxy_config(origin.start().await)).await;
    get(p, "/big", &[]).await;
    for headers in [
        [("range", "bytes=10-19"), ("if-range", "\"old\"")],
        [("range", "bytes=oops"), ("x-case", "malformed")],
    ] {
        let got = get(p, "/big", &headers).await;
        assert_eq!(got.status, 200, "{headers:?}");
        assert_eq!(got.header("content-length"), Some("100000"), "{headers:?}");
        assert!(
            got.body == body.as_bytes(),
            "{headers:?}: a complete, correct body"
        );
    }
}
