//! One rule per test, through the real proxy: freshness from Expires and heuristics (RFC 9111
//! §4.2), request and response directives (§5.2), invalidation (§4.4), the targeted
//! CDN-Cache-Control (RFC 9213), Cache-Status (RFC 9211), 304 and HEAD from storage (RFC 9110),
//! and malformed directives.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use slipstream_proxy::Config;

use crate::support::{get, proxy, reverse, send, Got, Origin, Reply};

/// An HTTP-date `offset_secs` from now (negative: in the past).
fn http_date(offset_secs: i64) -> String {
    let now = SystemTime::now();
    let delta = Duration::from_secs(offset_secs.unsigned_abs());
    let at = if offset_secs >= 0 {
        now + delta
    } else {
        now - delta
    };
    httpdate::fmt_http_date(at)
}

/// The conditional request headers the origin saw for `path`, in order.
fn if_none_match_seen(origin: &Origin, path: &str) -> Vec<Option<String>> {
    origin
        .seen()
        .into_iter()
        .filter(|s| s.path == path)
        .map(|s| {
            s.headers
                .get("if-none-match")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .collect()
}

fn assert_hit(got: &Got, why: &str) {
    assert!(
        got.cache_status().contains("; hit"),
        "{why}: {}",
        got.cache_status()
    );
}

fn assert_not_hit(got: &Got, why: &str) {
    assert!(
        !got.cache_status().contains("; hit"),
        "{why}: {}",
        got.cache_status()
    );
}

#[tokio::test]
async fn rfc9111_s4_2_1_expires_gives_freshness() {
    let origin = Origin::default();
    origin.set("/exp", Reply::ok("later", &[("expires", &http_date(600))]));
    let p = proxy(reverse("edge", origin.start().await)).await;
    assert_eq!(get(p, "/exp", &[]).await.body, "later");
    let again = get(p, "/exp", &[]).await;
    assert_eq!(again.body, "later");
    assert_hit(&again, "Expires 10 minutes ahead, no max-age: fresh");
    assert_eq!(origin.hits("/exp"), 1);
}

#[tokio::test]
async fn rfc9111_s4_2_1_past_or_invalid_expires_means_stale() {
    let origin = Origin::default();
    origin.set(
        "/past",
        Reply::ok("p", &[("expires", &http_date(-3600)), ("etag", "\"p\"")]),
    );
    // §5.3: "A cache recipient MUST interpret invalid date formats, especially the value "0", as
    // representing a time in the past (i.e., 'already expired')."
    origin.set(
        "/zero",
        Reply::ok("z", &[("expires", "0"), ("etag", "\"z\"")]),
    );
    origin.validates("/past", "\"p\"");
    origin.validates("/zero", "\"z\"");
    let p = proxy(reverse("edge", origin.start().await)).await;
    for (path, body, etag) in [("/past", "p", "\"p\""), ("/zero", "z", "\"z\"")] {
        get(p, path, &[]).await;
        let again = get(p, path, &[]).await;
        assert_eq!(again.body, body, "{path}");
        assert!(
            again.cache_status().contains("fwd=stale"),
            "{path}: {}",
            again.cache_status()
        );
        assert_eq!(origin.hits(path), 2, "{path}: stale, so validated");
        assert_eq!(
            if_none_match_seen(&origin, path),
            vec![None, Some(etag.to_owned())],
            "{path}"
        );
    }
}

#[tokio::test]
async fn rfc9111_s4_2_2_last_modified_gives_heuristic_freshness() {
    let origin = Origin::default();
    // 10% of 10 days is a day of heuristic freshness.
    origin.set(
        "/lm",
        Reply::ok("old news", &[("last-modified", &http_date(-10 * 86_400))]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/lm", &[]).await;
    let again = get(p, "/lm", &[]).await;
    assert_eq!(again.body, "old news");
    assert_hit(&again, "heuristically fresh");
    assert_eq!(origin.hits("/lm"), 1);
}

#[tokio::test]
async fn rfc9111_s4_2_2_no_explicit_or_heuristic_freshness_is_not_reused_unvalidated() {
    let origin = Origin::default();
    origin.set("/bare", Reply::ok("bare", &[]));
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/bare", &[]).await;
    let again = get(p, "/bare", &[]).await;
    assert_eq!(again.body, "bare");
    assert_not_hit(&again, "no freshness lifetime at all");
    assert_eq!(origin.hits("/bare"), 2);
}

/// Stored stale (Age 100 > max-age 10) under `directive`, then asked for with max-stale: the
/// proxy must validate each time rather than serve it stale.
async fn stale_is_validated_despite_max_stale(directive: &str) {
    let origin = Origin::default();
    let cc = format!("max-age=10, {directive}");
    origin.set(
        "/mr",
        Reply::ok(
            "checked",
            &[("cache-control", &cc), ("age", "100"), ("etag", "\"m\"")],
        ),
    );
    origin.validates("/mr", "\"m\"");
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/mr", &[]).await;
    for (i, max_stale) in ["max-stale", "max-stale=600"].into_iter().enumerate() {
        let got = get(p, "/mr", &[("cache-control", max_stale)]).await;
        assert_eq!(got.status, 200);
        assert_eq!(got.body, "checked");
        assert!(
            got.cache_status().contains("fwd=stale; fwd-status=304"),
            "{directive} with {max_stale}: {}",
            got.cache_status()
        );
        assert_eq!(origin.hits("/mr"), i + 2, "{directive} with {max_stale}");
    }
    assert_eq!(
        if_none_match_seen(&origin, "/mr")[1..],
        [Some("\"m\"".to_owned()), Some("\"m\"".to_owned())]
    );
}

#[tokio::test]
async fn rfc9111_s5_2_2_2_must_revalidate_overrides_request_max_stale() {
    stale_is_validated_despite_max_stale("must-revalidate").await;
}

#[tokio::test]
async fn rfc9111_s5_2_2_8_proxy_revalidate_overrides_request_max_stale_in_a_shared_cache() {
    stale_is_validated_despite_max_stale("proxy-revalidate").await;
}

#[tokio::test]
async fn rfc9111_s5_2_1_2_request_max_stale_accepts_a_stale_response() {
    let origin = Origin::default();
    // Age 100 against max-age 10: about 90 s stale from the start.
    origin.set(
        "/ms",
        Reply::ok(
            "stale ok",
            &[
                ("cache-control", "max-age=10"),
                ("age", "100"),
                ("etag", "\"s\""),
            ],
        ),
    );
    origin.validates("/ms", "\"s\"");
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/ms", &[]).await;
    for max_stale in ["max-stale", "max-stale=600"] {
        let got = get(p, "/ms", &[("cache-control", max_stale)]).await;
        assert_eq!(got.body, "stale ok");
        assert_hit(&got, max_stale);
    }
    assert_eq!(origin.hits("/ms"), 1);
    // A limit below the staleness does not cover it.
    let got = get(p, "/ms", &[("cache-control", "max-stale=30")]).await;
    assert_eq!(got.body, "stale ok");
    assert_not_hit(&got, "max-stale=30 against ~90 s of staleness");
    assert_eq!(origin.hits("/ms"), 2);
}

#[tokio::test]
async fn rfc9111_s5_2_1_3_request_min_fresh_refuses_a_nearly_stale_response() {
    let origin = Origin::default();
    // Age 50 against max-age 60: about 10 s of freshness left.
    origin.set(
        "/mf",
        Reply::ok(
            "short",
            &[
                ("cache-control", "max-age=60"),
                ("age", "50"),
                ("etag", "\"f\""),
            ],
        ),
    );
    origin.validates("/mf", "\"f\"");
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/mf", &[]).await;
    assert_hit(
        &get(p, "/mf", &[("cache-control", "min-fresh=5")]).await,
        "10 s left covers min-fresh=5",
    );
    assert_eq!(origin.hits("/mf"), 1);
    let got = get(p, "/mf", &[("cache-control", "min-fresh=30")]).await;
    assert_eq!(got.body, "short");
    assert_not_hit(&got, "10 s left does not cover min-fresh=30");
    assert_eq!(origin.hits("/mf"), 2);
    assert_eq!(
        if_none_match_seen(&origin, "/mf")[1].as_deref(),
        Some("\"f\"")
    );
}

#[tokio::test]
async fn rfc9111_s5_2_1_1_request_max_age_0_forces_validation() {
    let origin = Origin::default();
    // The Age field makes the stored response unambiguously older than 0 s.
    origin.set(
        "/ma",
        Reply::ok(
            "m",
            &[
                ("cache-control", "max-age=600"),
                ("age", "5"),
                ("etag", "\"a\""),
            ],
        ),
    );
    origin.validates("/ma", "\"a\"");
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/ma", &[]).await;
    assert_hit(&get(p, "/ma", &[]).await, "fresh");
    let got = get(p, "/ma", &[("cache-control", "max-age=0")]).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, "m");
    assert!(
        got.cache_status().contains("fwd=stale; fwd-status=304"),
        "{}",
        got.cache_status()
    );
    assert_eq!(
        if_none_match_seen(&origin, "/ma"),
        vec![None, Some("\"a\"".to_owned())]
    );
}

#[tokio::test]
async fn rfc9111_s4_4_unsafe_methods_invalidate_location_and_content_location_of_the_same_origin() {
    // A forward proxy, so that it stores responses of two origins and a cross-origin Location
    // names something actually stored.
    let (one, two) = (Origin::default(), Origin::default());
    for o in [&one, &two] {
        o.set("/a", Reply::ok("a", &[("cache-control", "max-age=600")]));
        o.set("/b", Reply::ok("b", &[("cache-control", "max-age=600")]));
    }
    let (o1, o2) = (one.start().await, two.start().await);
    let same_b = format!("http://{o1}/b");
    one.set(
        "/same",
        Reply::ok("", &[("location", "/a"), ("content-location", &same_b)]).status(201),
    );
    let cross_a = format!("http://{o2}/a");
    let cross_b = format!("http://{o2}/b");
    one.set(
        "/cross",
        Reply::ok(
            "",
            &[("location", &cross_a), ("content-location", &cross_b)],
        )
        .status(201),
    );
    let p = proxy(Config {
        name: "fwd".into(),
        allow_destinations: vec!["127.0.0.0/8".into()],
        ..Config::default()
    })
    .await;
    let url = |o: SocketAddr, path: &str| format!("http://{o}{path}");
    for method in ["POST", "PUT", "DELETE"] {
        for u in [url(o1, "/a"), url(o1, "/b"), url(o2, "/a"), url(o2, "/b")] {
            let got = get(p, &u, &[]).await;
            assert!(
                got.cache_status().contains("; hit") || got.cache_status().contains("; stored"),
                "{method}: {u} is stored: {}",
                got.cache_status()
            );
        }
        let cross = send(p, method, &url(o1, "/cross"), &[("content-length", "0")]).await;
        assert_eq!(cross.status, 201, "{method}");
        for u in [url(o2, "/a"), url(o2, "/b")] {
            assert_hit(
                &get(p, &u, &[]).await,
                &format!("{method}: cross-origin {u} is left alone"),
            );
        }
        let same = send(p, method, &url(o1, "/same"), &[("content-length", "0")]).await;
        assert_eq!(same.status, 201, "{method}");
        for u in [url(o1, "/a"), url(o1, "/b")] {
            let got = get(p, &u, &[]).await;
            assert!(
                got.cache_status().contains("fwd=uri-miss"),
                "{method}: same-origin {u} was invalidated: {}",
                got.cache_status()
            );
        }
    }
}

#[tokio::test]
async fn rfc9111_s4_4_an_error_response_invalidates_nothing() {
    let origin = Origin::default();
    origin.set("/a", Reply::ok("a", &[("cache-control", "max-age=600")]));
    origin.set("/b", Reply::ok("b", &[("cache-control", "max-age=600")]));
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/a", &[]).await;
    get(p, "/b", &[]).await;
    // The POST to /a fails (the origin answers every method on /a with 500 now) and names /b.
    origin.set(
        "/a",
        Reply::ok("broken", &[("content-location", "/b")]).status(500),
    );
    let post = send(p, "POST", "/a", &[("content-length", "0")]).await;
    assert_eq!(post.status, 500);
    for path in ["/a", "/b"] {
        let got = get(p, path, &[]).await;
        assert_eq!(got.status, 200, "{path}");
        assert_hit(&got, &format!("{path} survives a failed POST"));
    }
    assert_eq!(origin.hits("/b"), 1);
}

#[tokio::test]
async fn rfc9213_s2_cdn_cache_control_max_age_overrides_cache_control_no_store() {
    let origin = Origin::default();
    origin.set(
        "/cdn",
        Reply::ok(
            "for the cdn",
            &[
                ("cache-control", "no-store"),
                ("cdn-cache-control", "max-age=600"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    let first = get(p, "/cdn", &[]).await;
    assert!(
        first.cache_status().contains("stored"),
        "{}",
        first.cache_status()
    );
    let again = get(p, "/cdn", &[]).await;
    assert_eq!(again.body, "for the cdn");
    assert_hit(&again, "CDN-Cache-Control governs this cache");
    assert_eq!(origin.hits("/cdn"), 1);
}

#[tokio::test]
async fn rfc9213_s2_cdn_cache_control_no_store_overrides_cache_control_max_age() {
    let origin = Origin::default();
    origin.set(
        "/cdn",
        Reply::ok(
            "not for the cdn",
            &[
                ("cache-control", "max-age=600"),
                ("cdn-cache-control", "no-store"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    let first = get(p, "/cdn", &[]).await;
    assert!(
        !first.cache_status().contains("stored"),
        "{}",
        first.cache_status()
    );
    let again = get(p, "/cdn", &[]).await;
    assert_eq!(again.body, "not for the cdn");
    assert_not_hit(&again, "CDN-Cache-Control: no-store");
    assert_eq!(origin.hits("/cdn"), 2);
}

#[tokio::test]
async fn rfc9111_s3_1_hop_by_hop_fields_are_not_replayed_from_storage() {
    let origin = Origin::default();
    origin.set(
        "/hop",
        Reply::ok(
            "h",
            &[
                ("cache-control", "max-age=600"),
                ("connection", "x-secret, x-other"),
                ("x-secret", "1"),
                ("x-other", "2"),
                ("keep-alive", "timeout=5"),
                ("x-kept", "1"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/hop", &[]).await;
    let hit = get(p, "/hop", &[]).await;
    assert_hit(&hit, "stored");
    for name in ["x-secret", "x-other", "keep-alive"] {
        assert_eq!(hit.header(name), None, "{name} replayed from storage");
    }
    assert!(
        hit.headers
            .get_all("connection")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .all(|v| !v.contains("x-secret") && !v.contains("x-other")),
        "{:?}",
        hit.headers
    );
    assert_eq!(hit.header("x-kept"), Some("1"));
}

#[tokio::test]
async fn rfc9211_s2_cache_status_has_fwd_uri_miss_on_a_miss_and_ttl_on_a_hit() {
    let origin = Origin::default();
    origin.set("/cs", Reply::ok("cs", &[("cache-control", "max-age=600")]));
    let p = proxy(reverse("edge", origin.start().await)).await;
    let miss = get(p, "/cs", &[]).await;
    assert!(
        miss.cache_status().starts_with("edge; fwd=uri-miss"),
        "{}",
        miss.cache_status()
    );
    assert!(!miss.cache_status().contains("; hit"));
    let hit = get(p, "/cs", &[]).await;
    let member = hit.cache_status();
    assert!(member.starts_with("edge; hit"), "{member}");
    assert!(
        !member.contains("fwd="),
        "a hit was not forwarded: {member}"
    );
    let ttl: i64 = member
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("ttl="))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("numeric ttl in {member}"));
    assert!((590..=600).contains(&ttl), "ttl={ttl}");
}

#[tokio::test]
async fn rfc9211_s2_2_a_vary_mismatch_is_fwd_vary_miss() {
    let origin = Origin::default();
    origin.set(
        "/v",
        Reply::ok(
            "v",
            &[
                ("cache-control", "max-age=600"),
                ("vary", "accept-language"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/v", &[("accept-language", "en")]).await;
    let other = get(p, "/v", &[("accept-language", "fr")]).await;
    assert!(
        other.cache_status().contains("edge; fwd=vary-miss"),
        "a response is stored for the URI, Vary did not match: {}",
        other.cache_status()
    );
    assert_eq!(origin.hits("/v"), 2);
}

#[tokio::test]
async fn rfc9110_s15_4_5_not_modified_from_storage_has_etag_and_cache_control_but_no_body() {
    let origin = Origin::default();
    origin.set(
        "/nm",
        Reply::ok(
            "the body",
            &[
                ("cache-control", "max-age=600"),
                ("etag", "\"nm\""),
                ("x-other", "1"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/nm", &[]).await;
    let got = get(p, "/nm", &[("if-none-match", "\"nm\"")]).await;
    assert_eq!(got.status, 304);
    assert!(got.body.is_empty(), "{:?}", got.body);
    assert_eq!(got.header("etag"), Some("\"nm\""));
    assert_eq!(got.header("cache-control"), Some("max-age=600"));
    assert!(got.header("date").is_some());
    assert_eq!(origin.hits("/nm"), 1, "answered from storage");
}

#[tokio::test]
async fn rfc9110_s9_3_2_a_head_miss_is_forwarded_as_head_and_stores_no_bodiless_response() {
    let origin = Origin::default();
    origin.set(
        "/hd",
        Reply::ok("the full body", &[("cache-control", "max-age=600")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    let head = send(p, "HEAD", "/hd", &[]).await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    let seen = origin.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "HEAD", "a HEAD miss goes upstream as HEAD");
    let got = get(p, "/hd", &[]).await;
    assert_eq!(got.body, "the full body");
    assert!(
        got.cache_status().contains("fwd=uri-miss"),
        "{}",
        got.cache_status()
    );
    assert_eq!(origin.hits("/hd"), 2);
    let hit = get(p, "/hd", &[]).await;
    assert_eq!(hit.body, "the full body");
    assert_hit(&hit, "the GET filled the cache");
}

#[tokio::test]
async fn rfc9111_s5_2_malformed_request_directives_do_not_break_the_response() {
    let origin = Origin::default();
    origin.set(
        "/fresh",
        Reply::ok("fresh", &[("cache-control", "max-age=600")]),
    );
    origin.set(
        "/stale",
        Reply::ok(
            "stale",
            &[("cache-control", "max-age=0"), ("etag", "\"s\"")],
        ),
    );
    origin.validates("/stale", "\"s\"");
    let p = proxy(reverse("edge", origin.start().await)).await;
    let bad = [("cache-control", "max-age=abc, max-stale=-1")];
    let first = get(p, "/fresh", &bad).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, "fresh");
    let again = get(p, "/fresh", &bad).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, "fresh");
    get(p, "/stale", &[]).await;
    let got = get(p, "/stale", &bad).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, "stale");
    assert_not_hit(&got, "a malformed max-stale grants no staleness");
    assert_eq!(origin.hits("/stale"), 2);
    // The proxy keeps serving.
    assert_hit(&get(p, "/fresh", &[]).await, "still serving");
}

#[tokio::test]
async fn rfc9111_s5_2_3_unknown_and_garbage_response_directives_are_ignored() {
    let origin = Origin::default();
    // §5.2.3: unrecognised directives MUST be ignored; the valid max-age still applies.
    origin.set(
        "/junk",
        Reply::ok(
            "junk",
            &[("cache-control", "x-junk=(1), @@@, max-age=600, frobnicate")],
        ),
    );
    // §4.2.1: an invalid max-age value means stale, not fresh forever and not a failure.
    origin.set(
        "/badage",
        Reply::ok("bad", &[("cache-control", "max-age=abc")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    get(p, "/junk", &[]).await;
    let again = get(p, "/junk", &[]).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, "junk");
    assert_hit(&again, "max-age=600 survives the junk around it");
    assert_eq!(origin.hits("/junk"), 1);
    assert_eq!(get(p, "/badage", &[]).await.body, "bad");
    let again = get(p, "/badage", &[]).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, "bad");
    assert_not_hit(&again, "max-age=abc is stale");
    assert_eq!(origin.hits("/badage"), 2);
}

/// Whether the second of two GETs for `path` is answered from storage.
async fn reused(p: SocketAddr, path: &str) -> bool {
    get(p, path, &[]).await;
    get(p, path, &[]).await.cache_status().contains("; hit")
}

#[tokio::test]
async fn rfc9111_s5_1_an_invalid_age_is_ignored_and_a_list_counts_its_first_member() {
    let origin = Origin::default();
    let cases = [
        ("/age-abc", "abc", true),
        ("/age-negative", "-7200", true),
        ("/age-float", "7200.0", true),
        ("/age-prefix", "0, 7200", true),
        ("/age-suffix", "7200, 0", false),
        ("/age-large", "2147483648", false),
    ];
    for (path, age, _) in cases {
        origin.set(
            path,
            Reply::ok("a", &[("cache-control", "max-age=3600"), ("age", age)]),
        );
    }
    let p = proxy(reverse("edge", origin.start().await)).await;
    for (path, age, fresh) in cases {
        assert_eq!(reused(p, path).await, fresh, "Age: {age}");
    }
}

#[tokio::test]
async fn rfc9111_s3_any_final_status_with_explicit_freshness_is_stored() {
    let origin = Origin::default();
    for status in [299, 400, 500, 503, 599] {
        origin.set(
            &format!("/fresh-{status}"),
            Reply::ok("s", &[("cache-control", "max-age=600")]).status(status),
        );
        origin.set(
            &format!("/plain-{status}"),
            Reply::ok("s", &[]).status(status),
        );
    }
    // §5.2.2.3: must-understand keeps an unknown status out even though max-age allows it, and
    // lets a known one in despite no-store.
    let mu = [("cache-control", "max-age=600, no-store, must-understand")];
    origin.set("/mu-599", Reply::ok("s", &mu).status(599));
    origin.set("/mu-200", Reply::ok("s", &mu));
    let p = proxy(reverse("edge", origin.start().await)).await;
    for status in [299, 400, 500, 503, 599] {
        let fresh = format!("/fresh-{status}");
        assert!(reused(p, &fresh).await, "{status} with max-age");
        let got = get(p, &fresh, &[]).await;
        assert_eq!(got.status, status, "served with its own status");
        assert!(
            !reused(p, &format!("/plain-{status}")).await,
            "{status} alone"
        );
    }
    assert!(!reused(p, "/mu-599").await);
    assert!(reused(p, "/mu-200").await);
}

#[tokio::test]
async fn surrogate_control_targeted_at_this_node_wins_and_capability_is_announced() {
    let origin = Origin::default();
    origin.set(
        "/mine",
        Reply::ok(
            "m",
            &[
                ("cache-control", "no-store"),
                ("surrogate-control", "max-age=600;edge"),
            ],
        ),
    );
    origin.set(
        "/theirs",
        Reply::ok("t", &[("surrogate-control", "max-age=600;other")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    assert!(reused(p, "/mine").await, "targeted at edge, over no-store");
    assert!(!reused(p, "/theirs").await, "targeted at another device");
    let seen = origin.seen();
    let capability = seen[0]
        .headers
        .get("surrogate-capability")
        .and_then(|v| v.to_str().ok());
    assert_eq!(capability, Some("edge=\"Surrogate/1.0\""));
}

#[tokio::test]
async fn rfc9213_s2_1_a_cdn_cache_control_value_of_the_wrong_type_is_not_used() {
    let origin = Origin::default();
    origin.set(
        "/typed",
        Reply::ok(
            "t",
            &[
                ("cdn-cache-control", "max-age=\"10000\""),
                ("cache-control", "no-store"),
            ],
        ),
    );
    origin.set(
        "/integer",
        Reply::ok(
            "i",
            &[
                ("cdn-cache-control", "max-age=10000"),
                ("cache-control", "no-store"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    assert!(
        !reused(p, "/typed").await,
        "a String is not a delta-seconds"
    );
    assert!(reused(p, "/integer").await);
}
