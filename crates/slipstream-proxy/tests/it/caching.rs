//! RFC 9111 (and RFC 5861, RFC 9211) behaviour through the real proxy.

use std::time::Duration;

use slipstream_proxy::Config;

use crate::support::{get, proxy, reverse, send, wait_for_metric, Origin, Reply};

#[tokio::test]
async fn rfc9111_s3_fresh_response_is_stored_and_reused_with_age() {
    let origin = Origin::default();
    origin.set("/a", Reply::ok("alpha", &[("cache-control", "max-age=60")]));
    let p = proxy(reverse("edge", origin.start().await)).await;
    let first = get(p, "/a", &[]).await;
    assert_eq!(first.body, "alpha");
    assert!(
        first
            .cache_status()
            .contains("edge; fwd=uri-miss; fwd-status=200; stored"),
        "{}",
        first.cache_status()
    );
    let second = get(p, "/a", &[]).await;
    assert_eq!(second.body, "alpha");
    assert!(
        second.cache_status().starts_with("edge; hit"),
        "{}",
        second.cache_status()
    );
    assert!(
        second.header("age").is_some(),
        "§5.1: a response from storage carries Age"
    );
    assert_eq!(origin.hits("/a"), 1);
}

#[tokio::test]
async fn rfc9111_s3_no_store_and_private_are_not_stored() {
    let origin = Origin::default();
    origin.set(
        "/ns",
        Reply::ok("x", &[("cache-control", "no-store, max-age=60")]),
    );
    origin.set(
        "/pv",
        Reply::ok("y", &[("cache-control", "private, max-age=60")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    for path in ["/ns", "/pv"] {
        get(p, path, &[]).await;
        let again = get(p, path, &[]).await;
        assert!(
            !again.cache_status().contains("hit"),
            "{path}: {}",
            again.cache_status()
        );
        assert_eq!(origin.hits(path), 2, "{path}");
    }
}

#[tokio::test]
async fn rfc9111_s3_5_authorized_requests_are_stored_only_when_allowed() {
    let origin = Origin::default();
    origin.set("/auth", Reply::ok("a", &[("cache-control", "max-age=60")]));
    origin.set(
        "/auth-public",
        Reply::ok("b", &[("cache-control", "public, max-age=60")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    let creds = [("authorization", "Basic dTpw")];
    get(p, "/auth", &creds).await;
    get(p, "/auth", &creds).await;
    assert_eq!(origin.hits("/auth"), 2);
    get(p, "/auth-public", &creds).await;
    get(p, "/auth-public", &creds).await;
    assert_eq!(origin.hits("/auth-public"), 1);
}

#[tokio::test]
async fn rfc9111_s4_2_1_s_maxage_overrides_max_age_in_a_shared_cache() {
    let origin = Origin::default();
    origin.set(
        "/s",
        Reply::ok("s", &[("cache-control", "max-age=600, s-maxage=0")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/s", &[]).await;
    get(p, "/s", &[]).await;
    assert_eq!(
        origin.hits("/s"),
        2,
        "s-maxage=0 makes it stale at once for a shared cache"
    );
}

#[tokio::test]
async fn rfc9111_s4_2_3_age_counts_the_upstream_age() {
    let origin = Origin::default();
    origin.set(
        "/aged",
        Reply::ok("old", &[("cache-control", "max-age=600"), ("age", "100")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/aged", &[]).await;
    let hit = get(p, "/aged", &[]).await;
    let age: u64 = hit
        .header("age")
        .and_then(|a| a.parse().ok())
        .expect("numeric Age");
    assert!(age >= 100, "Age {age} lost the upstream's 100 s");
}

#[tokio::test]
async fn rfc9111_s4_3_stale_response_is_validated_and_updated_from_304() {
    let origin = Origin::default();
    origin.set(
        "/v",
        Reply::ok(
            "body-1",
            &[
                ("cache-control", "max-age=0"),
                ("etag", "\"v1\""),
                ("x-version", "1"),
            ],
        ),
    );
    origin.validates("/v", "\"v1\"");
    let p = proxy(reverse("edge", origin.start().await)).await;
    assert_eq!(get(p, "/v", &[]).await.body, "body-1");
    // The origin now sends a new header with its 304; the stored body is kept.
    origin.set(
        "/v",
        Reply::ok(
            "ignored",
            &[
                ("cache-control", "max-age=60"),
                ("etag", "\"v1\""),
                ("x-version", "2"),
            ],
        ),
    );
    let second = get(p, "/v", &[]).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body, "body-1");
    assert_eq!(
        second.header("x-version"),
        Some("2"),
        "§3.2: stored headers are updated from the 304"
    );
    assert!(
        second.cache_status().contains("fwd=stale; fwd-status=304"),
        "{}",
        second.cache_status()
    );
    let conditional = origin
        .seen()
        .into_iter()
        .filter(|s| s.path == "/v")
        .nth(1)
        .expect("second request");
    assert_eq!(
        conditional
            .headers
            .get("if-none-match")
            .and_then(|v| v.to_str().ok()),
        Some("\"v1\"")
    );
    // Now fresh for 60 s: served from storage.
    assert!(get(p, "/v", &[]).await.cache_status().contains("hit"));
    assert_eq!(origin.hits("/v"), 2);
}

#[tokio::test]
async fn rfc9111_s5_2_2_4_no_cache_response_is_always_validated() {
    let origin = Origin::default();
    origin.set(
        "/nc",
        Reply::ok(
            "nc",
            &[
                ("cache-control", "no-cache, max-age=600"),
                ("etag", "\"n\""),
            ],
        ),
    );
    origin.validates("/nc", "\"n\"");
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/nc", &[]).await;
    let again = get(p, "/nc", &[]).await;
    assert_eq!(again.body, "nc");
    assert_eq!(origin.hits("/nc"), 2);
}

#[tokio::test]
async fn rfc9111_s5_2_1_4_request_no_cache_forces_validation() {
    let origin = Origin::default();
    origin.set(
        "/r",
        Reply::ok("r", &[("cache-control", "max-age=600"), ("etag", "\"r\"")]),
    );
    origin.validates("/r", "\"r\"");
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/r", &[]).await;
    get(p, "/r", &[("cache-control", "no-cache")]).await;
    assert_eq!(origin.hits("/r"), 2);
    get(p, "/r", &[]).await;
    assert_eq!(origin.hits("/r"), 2);
}

#[tokio::test]
async fn rfc9111_s5_2_1_7_only_if_cached_gives_504_on_a_miss() {
    let origin = Origin::default();
    origin.set("/o", Reply::ok("o", &[("cache-control", "max-age=600")]));
    let p = proxy(reverse("edge", origin.start().await)).await;
    assert_eq!(
        get(p, "/o", &[("cache-control", "only-if-cached")])
            .await
            .status,
        504
    );
    assert_eq!(origin.hits("/o"), 0);
    get(p, "/o", &[]).await;
    assert_eq!(
        get(p, "/o", &[("cache-control", "only-if-cached")])
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn rfc9111_s4_1_vary_keeps_one_response_per_selecting_header() {
    let origin = Origin::default();
    origin.set(
        "/lang",
        Reply::ok(
            "hello",
            &[
                ("cache-control", "max-age=600"),
                ("vary", "Accept-Language"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/lang", &[("accept-language", "en")]).await;
    get(p, "/lang", &[("accept-language", "fr")]).await;
    assert_eq!(
        origin.hits("/lang"),
        2,
        "a different Accept-Language is a different response"
    );
    assert!(get(p, "/lang", &[("accept-language", "en")])
        .await
        .cache_status()
        .contains("hit"));
    assert!(get(p, "/lang", &[("accept-language", "fr")])
        .await
        .cache_status()
        .contains("hit"));
    assert_eq!(origin.hits("/lang"), 2);
}

#[tokio::test]
async fn rfc9111_s4_1_vary_star_never_matches() {
    let origin = Origin::default();
    origin.set(
        "/star",
        Reply::ok("*", &[("cache-control", "max-age=600"), ("vary", "*")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/star", &[]).await;
    get(p, "/star", &[]).await;
    assert_eq!(origin.hits("/star"), 2);
}

#[tokio::test]
async fn rfc9111_s4_4_unsafe_method_invalidates_the_target() {
    let origin = Origin::default();
    origin.set("/doc", Reply::ok("v1", &[("cache-control", "max-age=600")]));
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/doc", &[]).await;
    assert!(get(p, "/doc", &[]).await.cache_status().contains("hit"));
    let post = send(p, "POST", "/doc", &[("content-length", "0")]).await;
    assert_eq!(post.status, 200);
    assert!(
        post.cache_status().contains("fwd=request"),
        "{}",
        post.cache_status()
    );
    let after = get(p, "/doc", &[]).await;
    assert!(
        after.cache_status().contains("fwd=uri-miss"),
        "the POST invalidated /doc: {}",
        after.cache_status()
    );
}

#[tokio::test]
async fn rfc9111_s4_head_and_ranges_are_answered_from_the_stored_get() {
    let origin = Origin::default();
    origin.set(
        "/file",
        Reply::ok(
            "0123456789",
            &[
                ("cache-control", "max-age=600"),
                ("etag", "\"f\""),
                ("content-type", "text/plain"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/file", &[]).await;
    let head = send(p, "HEAD", "/file", &[]).await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-length"), Some("10"));
    assert!(head.cache_status().contains("hit"));
    let range = get(p, "/file", &[("range", "bytes=2-5")]).await;
    assert_eq!(range.status, 206);
    assert_eq!(range.body, "2345");
    assert_eq!(range.header("content-range"), Some("bytes 2-5/10"));
    let multi = get(p, "/file", &[("range", "bytes=0-0,9-9")]).await;
    assert_eq!(multi.status, 206);
    assert!(multi
        .header("content-type")
        .is_some_and(|t| t.starts_with("multipart/byteranges")));
    let inm = get(p, "/file", &[("if-none-match", "\"f\"")]).await;
    assert_eq!(inm.status, 304);
    assert_eq!(origin.hits("/file"), 1);
}

#[tokio::test(start_paused = true)]
async fn request_collapsing_makes_one_upstream_request() {
    let origin = Origin::default();
    origin.set(
        "/slow",
        Reply::ok("slow", &[("cache-control", "max-age=600")]).held(),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    let clients: Vec<_> = (0..20)
        .map(|_| tokio::spawn(async move { get(p, "/slow", &[]).await }))
        .collect();
    // The origin holds its answer until the other 19 requests wait for the first one's fetch.
    wait_for_metric(p, "slipstream_collapsed_waiting", |n| n == 19.0).await;
    origin.release();
    let mut collapsed = 0;
    for c in clients {
        let got = c.await.expect("client");
        assert_eq!(got.body, "slow");
        collapsed += usize::from(got.cache_status().contains("collapsed"));
    }
    assert_eq!(
        origin.hits("/slow"),
        1,
        "20 concurrent misses, one upstream request"
    );
    assert_eq!(collapsed, 19);
}

#[tokio::test(start_paused = true)]
async fn a_stored_response_expires_when_its_max_age_has_passed() {
    let origin = Origin::default();
    origin.set(
        "/short",
        Reply::ok("v1", &[("cache-control", "max-age=60")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/short", &[]).await;
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(get(p, "/short", &[]).await.cache_status().contains("hit"));
    assert_eq!(origin.hits("/short"), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    let expired = get(p, "/short", &[]).await;
    assert!(
        expired.cache_status().contains("fwd=stale"),
        "{}",
        expired.cache_status()
    );
    assert_eq!(origin.hits("/short"), 2);
}

#[tokio::test]
async fn rfc5861_s4_stale_if_error_serves_the_stored_response_when_upstream_fails() {
    let origin = Origin::default();
    origin.set(
        "/sie",
        Reply::ok(
            "good",
            &[
                ("cache-control", "max-age=0, stale-if-error=600"),
                ("etag", "\"g\""),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    assert_eq!(get(p, "/sie", &[]).await.body, "good");
    origin.set("/sie", Reply::ok("broken", &[]).status(500));
    let got = get(p, "/sie", &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, "good");
    assert!(
        got.cache_status().contains("stale-if-error"),
        "{}",
        got.cache_status()
    );
}

#[tokio::test]
async fn rfc5861_s3_stale_while_revalidate_serves_at_once_and_refreshes_in_the_background() {
    let origin = Origin::default();
    origin.set(
        "/swr",
        Reply::ok(
            "old",
            &[("cache-control", "max-age=0, stale-while-revalidate=600")],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/swr", &[]).await;
    origin.set(
        "/swr",
        Reply::ok("new", &[("cache-control", "max-age=600")]),
    );
    let arrived = origin.arrived.notified();
    let got = get(p, "/swr", &[]).await;
    assert_eq!(got.body, "old", "served stale at once");
    assert!(
        got.cache_status().contains("stale-while-revalidate"),
        "{}",
        got.cache_status()
    );
    tokio::time::timeout(Duration::from_secs(10), arrived)
        .await
        .expect("a background revalidation reached the origin");
    assert_eq!(origin.hits("/swr"), 2);
}

#[tokio::test]
async fn purge_by_url_and_surrogate_key_needs_the_token() {
    let origin = Origin::default();
    origin.set(
        "/p1",
        Reply::ok(
            "1",
            &[
                ("cache-control", "max-age=600"),
                ("surrogate-key", "news front"),
            ],
        ),
    );
    origin.set(
        "/p2",
        Reply::ok(
            "2",
            &[("cache-control", "max-age=600"), ("surrogate-key", "news")],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/p1", &[]).await;
    get(p, "/p2", &[]).await;
    assert_eq!(send(p, "PURGE", "/p1", &[]).await.status, 401);
    assert_eq!(
        send(p, "PURGE", "/p1", &[("authorization", "Bearer wrong")])
            .await
            .status,
        401
    );
    assert_eq!(
        send(p, "PURGE", "/p1", &[("authorization", "Bearer secret")])
            .await
            .status,
        200
    );
    // Nothing left to purge: 404, as Varnish and Squid answer.
    assert_eq!(
        send(p, "PURGE", "/p1", &[("authorization", "Bearer secret")])
            .await
            .status,
        404
    );
    assert!(get(p, "/p1", &[]).await.cache_status().contains("uri-miss"));
    assert!(get(p, "/p2", &[]).await.cache_status().contains("hit"));
    let tag = send(
        p,
        "POST",
        "/_slipstream/purge?surrogate-key=news",
        &[("authorization", "Bearer secret")],
    )
    .await;
    assert_eq!(tag.status, 200, "{:?}", tag.body);
    assert!(get(p, "/p1", &[]).await.cache_status().contains("uri-miss"));
    assert!(get(p, "/p2", &[]).await.cache_status().contains("uri-miss"));
}

#[tokio::test]
async fn responses_that_set_cookies_are_not_stored_in_a_shared_cache() {
    let origin = Origin::default();
    origin.set(
        "/login",
        Reply::ok(
            "hi",
            &[
                ("cache-control", "max-age=600"),
                ("set-cookie", "session=abc"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    let first = get(p, "/login", &[]).await;
    assert_eq!(
        first.header("set-cookie"),
        Some("session=abc"),
        "the client still gets its cookie"
    );
    let second = get(p, "/login", &[]).await;
    assert!(
        !second.cache_status().contains("hit"),
        "{}",
        second.cache_status()
    );
    assert_eq!(origin.hits("/login"), 2);
}

#[tokio::test]
async fn rfc9111_s4_3_1_validation_with_last_modified_only_sends_if_modified_since() {
    let origin = Origin::default();
    let lm = "Sat, 01 Jan 2000 00:00:00 GMT";
    origin.set(
        "/lm",
        Reply::ok(
            "lm",
            &[("cache-control", "max-age=0"), ("last-modified", lm)],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/lm", &[]).await;
    get(p, "/lm", &[]).await;
    let second = origin
        .seen()
        .into_iter()
        .filter(|s| s.path == "/lm")
        .nth(1)
        .expect("a validation request");
    assert_eq!(
        second
            .headers
            .get("if-modified-since")
            .and_then(|v| v.to_str().ok()),
        Some(lm)
    );
}

#[tokio::test(start_paused = true)]
async fn rfc9111_s4_2_4_stale_is_served_when_the_origin_disconnects_unless_forbidden() {
    let origin = Origin::default();
    let allowed = "/stale-close";
    let forbidden = [
        ("/must-revalidate", "max-age=2, must-revalidate"),
        ("/proxy-revalidate", "max-age=2, proxy-revalidate"),
        ("/no-cache", "max-age=2, no-cache"),
        ("/s-maxage", "max-age=2, s-maxage=2"),
    ];
    origin.set(
        allowed,
        Reply::ok("kept", &[("cache-control", "max-age=2")]),
    );
    for (path, cc) in forbidden {
        origin.set(path, Reply::ok("kept", &[("cache-control", cc)]));
    }
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, allowed, &[]).await;
    for (path, _) in forbidden {
        get(p, path, &[]).await;
    }
    tokio::time::advance(Duration::from_secs(3)).await;
    origin.set(allowed, Reply::disconnect());
    for (path, _) in forbidden {
        origin.set(path, Reply::disconnect());
    }

    let got = get(p, allowed, &[]).await;
    assert_eq!((got.status, &got.body[..]), (200, &b"kept"[..]));
    assert!(
        got.cache_status().contains("; hit") && got.cache_status().contains("stale-disconnected"),
        "{}",
        got.cache_status()
    );
    assert_eq!(origin.hits(allowed), 2, "it tried the origin first");
    // The client can still insist on a validated response.
    let insisted = get(p, allowed, &[("cache-control", "no-cache")]).await;
    assert_eq!(insisted.status, 502);
    for (path, cc) in forbidden {
        let got = get(p, path, &[]).await;
        assert_eq!(got.status, 502, "{cc}: {}", got.cache_status());
    }
}

#[tokio::test]
async fn responses_that_set_cookies_are_stored_when_configured() {
    let origin = Origin::default();
    origin.set(
        "/shared-cookie",
        Reply::ok(
            "hi",
            &[
                ("cache-control", "max-age=600"),
                ("set-cookie", "theme=dark"),
            ],
        ),
    );
    let p = proxy(Config {
        store_set_cookie: true,
        ..reverse("edge", origin.start().await)
    })
    .await;
    get(p, "/shared-cookie", &[]).await;
    let second = get(p, "/shared-cookie", &[]).await;
    assert!(
        second.cache_status().contains("; hit"),
        "{}",
        second.cache_status()
    );
    assert_eq!(second.header("set-cookie"), Some("theme=dark"));
    assert_eq!(origin.hits("/shared-cookie"), 1);
}
