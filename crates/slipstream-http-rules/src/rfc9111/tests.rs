use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{request, response, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use proptest::prelude::*;

use super::*;

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn at(secs: u64) -> SystemTime {
    t0() + Duration::from_secs(secs)
}

fn http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

fn headers(fields: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in fields {
        h.append(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn req_m(method: Method, fields: &[(&str, &str)]) -> request::Parts {
    let (mut p, ()) = http::Request::new(()).into_parts();
    p.method = method;
    p.uri = Uri::from_static("http://example.com/a");
    p.headers = headers(fields);
    p
}

fn req(fields: &[(&str, &str)]) -> request::Parts {
    req_m(Method::GET, fields)
}

fn res_s(status: u16, fields: &[(&str, &str)]) -> response::Parts {
    let (mut p, ()) = http::Response::new(()).into_parts();
    p.status = StatusCode::from_u16(status).unwrap();
    p.headers = headers(fields);
    p
}

fn res(fields: &[(&str, &str)]) -> response::Parts {
    res_s(200, fields)
}

fn store(req_fields: &[(&str, &str)], res_fields: &[(&str, &str)]) -> Option<Policy> {
    Policy::new(
        &req(req_fields),
        &res(res_fields),
        t0(),
        &Options::default(),
    )
}

fn stored(res_fields: &[(&str, &str)]) -> Policy {
    store(&[], res_fields).expect("storable")
}

fn private_cache() -> Options {
    Options {
        shared: false,
        ..Options::default()
    }
}

// ---- §3 storing ----

#[test]
fn rfc9111_3_no_store_in_request_or_response_prevents_storing() {
    assert!(store(
        &[("cache-control", "no-store")],
        &[("cache-control", "max-age=60")]
    )
    .is_none());
    assert!(store(&[], &[("cache-control", "max-age=60, no-store")]).is_none());
    assert!(store(&[], &[("cache-control", "max-age=60")]).is_some());
}

#[test]
fn rfc9111_3_private_is_not_stored_by_a_shared_cache() {
    let r = res(&[("cache-control", "private, max-age=60")]);
    assert!(Policy::new(&req(&[]), &r, t0(), &Options::default()).is_none());
    assert!(Policy::new(&req(&[]), &r, t0(), &private_cache()).is_some());
    assert!(store(
        &[],
        &[("cache-control", "private=\"set-cookie\", max-age=60")]
    )
    .is_none());
}

#[test]
fn rfc9111_3_5_authorization_needs_public_s_maxage_or_must_revalidate() {
    let auth = [("authorization", "Bearer x")];
    assert!(store(&auth, &[("cache-control", "max-age=60")]).is_none());
    assert!(store(&auth, &[("cache-control", "public, max-age=60")]).is_some());
    assert!(store(&auth, &[("cache-control", "s-maxage=60")]).is_some());
    assert!(store(&auth, &[("cache-control", "max-age=60, must-revalidate")]).is_some());
    // The library would read conflicting duplicates as must-revalidate and store this.
    assert!(store(&auth, &[("cache-control", "max-age=1, max-age=2")]).is_none());
    // A private cache is not restricted.
    let p = Policy::new(
        &req(&auth),
        &res(&[("cache-control", "max-age=60")]),
        t0(),
        &private_cache(),
    );
    assert!(p.is_some());
}

#[test]
fn rfc9111_3_status_must_be_understood_and_cacheable() {
    let opts = Options::default();
    let get = req(&[]);
    let new =
        |status, fields: &[(&str, &str)]| Policy::new(&get, &res_s(status, fields), t0(), &opts);
    assert!(new(200, &[]).is_some(), "heuristically cacheable");
    assert!(new(404, &[]).is_some());
    assert!(
        new(206, &[("cache-control", "max-age=60")]).is_none(),
        "partial content not understood"
    );
    assert!(new(304, &[("cache-control", "max-age=60")]).is_none());
    assert!(new(302, &[]).is_none(), "no explicit freshness");
    assert!(new(302, &[("cache-control", "max-age=60")]).is_some());
    // §3 asks for a final status, not a known one: explicit freshness makes any of them
    // storable, and without it only the heuristically cacheable ones are.
    for status in [299, 400, 499, 500, 502, 503, 504, 599] {
        let p = new(status, &[("cache-control", "max-age=60")]);
        assert!(p.is_some(), "{status} with max-age");
        assert_eq!(
            p.map(|p| p.time_to_live(t0())),
            Some(Duration::from_secs(60))
        );
        assert!(new(status, &[]).is_none(), "{status} without freshness");
        assert!(
            new(
                status,
                &[(
                    "last-modified",
                    &http_date(at(0) - Duration::from_secs(9000))
                )]
            )
            .is_none(),
            "{status} is not heuristically cacheable"
        );
        assert!(
            new(status, &[("cache-control", "max-age=60, no-store")]).is_none(),
            "{status} with no-store"
        );
    }
    assert!(new(500, &[("expires", &http_date(at(60)))]).is_some());
    assert!(
        new(103, &[("cache-control", "max-age=60")]).is_none(),
        "not final"
    );
}

#[test]
fn rfc9111_5_2_2_3_must_understand_overrides_no_store_for_understood_statuses() {
    let opts = Options::default();
    let get = req(&[]);
    let new =
        |status, fields: &[(&str, &str)]| Policy::new(&get, &res_s(status, fields), t0(), &opts);
    let cc = [("cache-control", "max-age=3600, no-store, must-understand")];
    for status in [200, 404, 500] {
        assert!(new(status, &cc).is_some(), "{status} is understood");
    }
    for status in [299, 599] {
        assert!(new(status, &cc).is_none(), "{status} is not understood");
        assert!(
            new(
                status,
                &[("cache-control", "max-age=3600, must-understand")]
            )
            .is_none(),
            "{status}: must-understand alone also forbids storing it"
        );
    }
    assert!(
        Policy::new(
            &req(&[("cache-control", "no-store")]),
            &res_s(200, &cc),
            t0(),
            &opts
        )
        .is_none(),
        "the request's no-store still holds"
    );
}

#[test]
fn rfc9111_3_only_get_and_head_are_stored() {
    let opts = Options::default();
    let r = res(&[("cache-control", "max-age=60")]);
    assert!(Policy::new(&req_m(Method::HEAD, &[]), &r, t0(), &opts).is_some());
    assert!(Policy::new(&req_m(Method::POST, &[]), &r, t0(), &opts).is_none());
    assert!(Policy::new(&req_m(Method::PUT, &[]), &r, t0(), &opts).is_none());
}

// ---- §4.2 freshness ----

#[test]
fn rfc9111_4_2_1_s_maxage_over_max_age_over_expires() {
    let date = http_date(t0());
    let expires = http_date(at(1000));
    let all = [
        ("date", date.as_str()),
        ("expires", expires.as_str()),
        ("cache-control", "max-age=100, s-maxage=10"),
    ];
    assert_eq!(stored(&all).time_to_live(t0()), Duration::from_secs(10));
    let p = Policy::new(&req(&[]), &res(&all), t0(), &private_cache()).unwrap();
    assert_eq!(
        p.time_to_live(t0()),
        Duration::from_secs(100),
        "s-maxage is for shared caches"
    );
    let p = stored(&[
        ("date", &date),
        ("expires", &expires),
        ("cache-control", "public"),
    ]);
    assert_eq!(
        p.time_to_live(t0()),
        Duration::from_secs(1000),
        "Expires - Date"
    );
}

#[test]
fn rfc9111_4_2_1_invalid_freshness_is_stale() {
    let date = http_date(t0());
    let later = http_date(at(100));
    assert_eq!(
        stored(&[("date", &date), ("expires", "0")]).time_to_live(t0()),
        Duration::ZERO
    );
    let two = stored(&[("date", &date), ("expires", &later), ("expires", &later)]);
    assert_eq!(two.time_to_live(t0()), Duration::ZERO);
    assert_eq!(
        stored(&[("cache-control", "max-age=ten")]).time_to_live(t0()),
        Duration::ZERO
    );
    assert_eq!(
        stored(&[("cache-control", "max-age=1, max-age=2")]).time_to_live(t0()),
        Duration::ZERO
    );
    // §5.3: max-age wins over Expires, even an invalid one.
    assert_eq!(
        stored(&[("expires", "0"), ("cache-control", "max-age=5")]).time_to_live(t0()),
        Duration::from_secs(5)
    );
}

#[test]
fn rfc9110_5_6_7_obsolete_date_forms_are_understood() {
    // RFC 850 and asctime forms; the library's RFC 2822 parser rejects them.
    let p = stored(&[
        ("date", "Tuesday, 14-Nov-23 22:13:20 GMT"),
        ("expires", "Tue Nov 14 22:15:00 2023"),
    ]);
    assert_eq!(p.time_to_live(t0()), Duration::from_secs(100));
}

#[test]
fn rfc9111_4_2_2_heuristic_only_for_heuristically_cacheable_statuses() {
    let date = http_date(t0());
    let lm = http_date(t0() - Duration::from_secs(10 * 86_400));
    let p = stored(&[("date", &date), ("last-modified", &lm)]);
    assert_eq!(
        p.time_to_live(t0()),
        Duration::from_secs(86_400),
        "10% of 10 days"
    );

    let h = headers(&[("date", &date), ("last-modified", &lm)]);
    let none = Directives::default();
    let opts = Options::default();
    let found = StatusCode::FOUND;
    assert_eq!(
        freshness_lifetime(&none, false, &h, found, t0(), &opts),
        Duration::ZERO
    );
    let mut public = Directives::default();
    public.push("public");
    let lifetime = freshness_lifetime(&public, false, &h, found, t0(), &opts);
    assert_eq!(
        lifetime,
        Duration::from_secs(86_400),
        "public allows heuristics (§4.2.2)"
    );
    // Stored through `public`, a 302 gets the heuristic too.
    let p = Policy::new(
        &req(&[]),
        &res_s(
            302,
            &[
                ("date", &date),
                ("last-modified", &lm),
                ("cache-control", "public"),
            ],
        ),
        t0(),
        &opts,
    )
    .unwrap();
    assert_eq!(p.time_to_live(t0()), Duration::from_secs(86_400));
}

#[test]
fn rfc9111_4_2_3_age_includes_upstream_age_and_apparent_age() {
    let p = stored(&[("cache-control", "max-age=600"), ("age", "100")]);
    assert_eq!(p.age(at(10)), Duration::from_secs(110));
    assert_eq!(p.time_to_live(at(10)), Duration::from_secs(490));
    // Date 50 s before arrival: apparent_age 50 beats Age 20.
    let date = http_date(t0() - Duration::from_secs(50));
    let p = stored(&[
        ("cache-control", "max-age=600"),
        ("age", "20"),
        ("date", &date),
    ]);
    assert_eq!(p.age(at(0)), Duration::from_secs(50));
    // §5.1 as the test suite reads it: the first member of the first line counts; a member
    // that is not a non-negative integer is ignored (age 0), so only Date's apparent age is left.
    for (value, age) in [
        ("0, 7200", 0),
        ("7200, 0", 7200),
        ("3600, 3600", 3600),
        (" 12 ", 12),
        ("99999999999", directives::DELTA_SECONDS_MAX),
    ] {
        let p = stored(&[("cache-control", "max-age=3600"), ("age", value)]);
        assert_eq!(p.age(at(0)), Duration::from_secs(age), "Age: {value}");
    }
    let p = stored(&[
        ("cache-control", "max-age=3600"),
        ("age", "7200"),
        ("age", "0"),
    ]);
    assert_eq!(
        p.time_to_live(at(0)),
        Duration::ZERO,
        "the first line counts"
    );
    let p = stored(&[
        ("cache-control", "max-age=3600"),
        ("age", "0"),
        ("age", "7200"),
    ]);
    assert_eq!(p.time_to_live(at(0)), Duration::from_secs(3600));
    for bad in ["-7200", "7200.0", "abc", "7200;foo=bar", ""] {
        let p = stored(&[("cache-control", "max-age=3600"), ("age", bad)]);
        assert_eq!(p.age(at(0)), Duration::ZERO, "Age: {bad}");
        assert_eq!(
            p.time_to_live(at(0)),
            Duration::from_secs(3600),
            "Age: {bad}"
        );
    }
    // An ignored Age leaves the apparent age: Date 7200 s before arrival is still stale.
    let date = http_date(t0() - Duration::from_secs(7200));
    let p = stored(&[
        ("cache-control", "max-age=3600"),
        ("age", "abc"),
        ("date", &date),
    ]);
    assert_eq!(p.time_to_live(at(0)), Duration::ZERO);
    // A clock that goes backwards does not underflow.
    assert_eq!(
        stored(&[]).age(t0() - Duration::from_secs(5)),
        Duration::ZERO
    );
}

#[test]
fn rfc9111_5_1_response_headers_set_age_and_strip_hop_by_hop() {
    let date = http_date(t0());
    let stored_h = headers(&[
        ("date", &date),
        ("cache-control", "max-age=60"),
        ("age", "7"),
        ("connection", "close, x-hop"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("transfer-encoding", "chunked"),
        ("proxy-authenticate", "Basic"),
        ("x-end", "kept"),
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
    ]);
    let p = Policy::new(
        &req(&[]),
        &res_s(200, &[]).tap_headers(&stored_h),
        t0(),
        &Options::default(),
    )
    .unwrap();
    let out = p.response_headers(&stored_h, t0() + Duration::from_millis(3900));
    assert_eq!(out.get(AGE).unwrap(), "10", "7 + 3.9 s, whole seconds");
    assert_eq!(
        out.get(DATE).unwrap().to_str().unwrap(),
        date,
        "origin's Date kept"
    );
    for gone in [
        "connection",
        "x-hop",
        "keep-alive",
        "transfer-encoding",
        "proxy-authenticate",
    ] {
        assert!(!out.contains_key(gone), "{gone}");
    }
    assert_eq!(out.get("x-end").unwrap(), "kept");
    assert_eq!(out.get_all("set-cookie").iter().count(), 2);
    // RFC 9110 §6.6.1: a response without Date gets the time it was received.
    let p = stored(&[]);
    let out = p.response_headers(&HeaderMap::new(), at(5));
    assert_eq!(out.get(DATE).unwrap().to_str().unwrap(), date);
}

trait TapHeaders {
    fn tap_headers(self, h: &HeaderMap) -> Self;
}

impl TapHeaders for response::Parts {
    fn tap_headers(mut self, h: &HeaderMap) -> Self {
        self.headers = h.clone();
        self
    }
}

// ---- §4 reuse ----

#[test]
fn rfc9111_4_fresh_then_validate_with_validators_4_3_1() {
    let p = stored(&[
        ("cache-control", "max-age=60"),
        ("etag", "\"v1\""),
        ("last-modified", "Tue, 14 Nov 2023 00:00:00 GMT"),
    ]);
    assert_eq!(p.evaluate(&req(&[]), at(59)), Reuse::Fresh);
    let Reuse::Validate(h) = p.evaluate(&req(&[]), at(60)) else {
        panic!("expected Validate")
    };
    assert_eq!(h.get(IF_NONE_MATCH).unwrap(), "\"v1\"");
    assert_eq!(
        h.get(IF_MODIFIED_SINCE).unwrap(),
        "Tue, 14 Nov 2023 00:00:00 GMT"
    );
    // No validators: an empty map; a malformed ETag is not echoed.
    let p = stored(&[("cache-control", "max-age=1"), ("etag", "v1-unquoted")]);
    assert_eq!(
        p.evaluate(&req(&[]), at(5)),
        Reuse::Validate(HeaderMap::new())
    );
}

#[test]
fn rfc9111_5_2_2_4_no_cache_response_is_stored_but_always_validated() {
    let p = stored(&[
        ("cache-control", "no-cache, max-age=600"),
        ("etag", "W/\"a\""),
    ]);
    let Reuse::Validate(h) = p.evaluate(&req(&[]), at(0)) else {
        panic!()
    };
    assert_eq!(h.get(IF_NONE_MATCH).unwrap(), "W/\"a\"");
    assert_eq!(p.time_to_live(at(0)), Duration::ZERO);
    // Not even with max-stale.
    assert!(matches!(
        p.evaluate(&req(&[("cache-control", "max-stale")]), at(0)),
        Reuse::Validate(_)
    ));
}

#[test]
fn rfc9111_5_4_pragma_no_cache_response_without_cache_control() {
    let p = stored(&[("pragma", "no-cache")]);
    assert!(matches!(p.evaluate(&req(&[]), at(0)), Reuse::Validate(_)));
    let p = stored(&[("pragma", "no-cache"), ("cache-control", "max-age=60")]);
    assert_eq!(p.evaluate(&req(&[]), at(0)), Reuse::Fresh);
}

#[test]
fn rfc9111_5_2_1_4_and_5_4_request_no_cache_and_pragma_force_validation() {
    let p = stored(&[("cache-control", "max-age=600")]);
    assert!(matches!(
        p.evaluate(&req(&[("cache-control", "no-cache")]), at(0)),
        Reuse::Validate(_)
    ));
    assert!(matches!(
        p.evaluate(&req(&[("pragma", "no-cache")]), at(0)),
        Reuse::Validate(_)
    ));
    // §5.4: Pragma is ignored when the request has Cache-Control.
    let r = req(&[("pragma", "no-cache"), ("cache-control", "max-stale=5")]);
    assert_eq!(p.evaluate(&r, at(0)), Reuse::Fresh);
}

#[test]
fn rfc9111_5_2_1_1_request_max_age() {
    let p = stored(&[("cache-control", "max-age=600")]);
    assert!(matches!(
        p.evaluate(&req(&[("cache-control", "max-age=10")]), at(30)),
        Reuse::Validate(_)
    ));
    assert_eq!(
        p.evaluate(&req(&[("cache-control", "max-age=60")]), at(30)),
        Reuse::Fresh
    );
    assert!(matches!(
        p.evaluate(&req(&[("cache-control", "max-age=0")]), at(1)),
        Reuse::Validate(_)
    ));
}

#[test]
fn rfc9111_5_2_1_3_request_min_fresh() {
    let p = stored(&[("cache-control", "max-age=60")]);
    assert!(matches!(
        p.evaluate(&req(&[("cache-control", "min-fresh=40")]), at(30)),
        Reuse::Validate(_)
    ));
    assert_eq!(
        p.evaluate(&req(&[("cache-control", "min-fresh=20")]), at(30)),
        Reuse::Fresh
    );
}

#[test]
fn rfc9111_5_2_1_2_request_max_stale_with_and_without_value() {
    let p = stored(&[("cache-control", "max-age=60")]);
    let any = req(&[("cache-control", "max-stale")]);
    assert_eq!(p.evaluate(&any, at(100_000)), Reuse::Fresh);
    let ten = req(&[("cache-control", "max-stale=10")]);
    assert_eq!(p.evaluate(&ten, at(70)), Reuse::Fresh);
    assert!(matches!(p.evaluate(&ten, at(71)), Reuse::Validate(_)));
    let junk = req(&[("cache-control", "max-stale=soon")]);
    assert!(matches!(p.evaluate(&junk, at(61)), Reuse::Validate(_)));
}

#[test]
fn rfc9111_5_2_2_2_must_revalidate_never_serves_stale() {
    let p = stored(&[(
        "cache-control",
        "max-age=60, must-revalidate, stale-while-revalidate=100, stale-if-error=100",
    )]);
    assert_eq!(p.evaluate(&req(&[]), at(10)), Reuse::Fresh);
    let r = req(&[("cache-control", "max-stale, stale-if-error=1000")]);
    assert!(matches!(p.evaluate(&r, at(61)), Reuse::Validate(_)));
    assert!(!p.stale_if_error(&r, at(61)));
}

#[test]
fn rfc9111_5_2_2_8_proxy_revalidate_only_binds_shared_caches() {
    let fields = [("cache-control", "max-age=60, proxy-revalidate")];
    let p = stored(&fields);
    assert_eq!(
        p.evaluate(&req(&[]), at(10)),
        Reuse::Fresh,
        "still fresh until it expires"
    );
    let r = req(&[("cache-control", "max-stale")]);
    assert!(matches!(p.evaluate(&r, at(61)), Reuse::Validate(_)));
    let p = Policy::new(&req(&[]), &res(&fields), t0(), &private_cache()).unwrap();
    assert_eq!(p.evaluate(&r, at(61)), Reuse::Fresh);
}

#[test]
fn rfc9111_5_2_2_10_s_maxage_implies_proxy_revalidate() {
    let p = stored(&[("cache-control", "s-maxage=60")]);
    let r = req(&[("cache-control", "max-stale")]);
    assert!(matches!(p.evaluate(&r, at(61)), Reuse::Validate(_)));
}

#[test]
fn rfc9111_4_1_vary_matching() {
    let p = store(
        &[("accept-encoding", "gzip, br")],
        &[("cache-control", "max-age=60"), ("vary", "Accept-Encoding")],
    )
    .unwrap();
    assert_eq!(
        p.evaluate(&req(&[("accept-encoding", "gzip, br")]), at(0)),
        Reuse::Fresh
    );
    assert_eq!(
        p.evaluate(&req(&[("accept-encoding", " gzip, br ")]), at(0)),
        Reuse::Fresh,
        "trimmed"
    );
    assert_eq!(
        p.evaluate(&req(&[("accept-encoding", "gzip")]), at(0)),
        Reuse::Mismatch
    );
    assert_eq!(
        p.evaluate(&req(&[]), at(0)),
        Reuse::Mismatch,
        "absent differs"
    );
    let p = stored(&[("cache-control", "max-age=60"), ("vary", "*")]);
    assert_eq!(
        p.evaluate(&req(&[]), at(0)),
        Reuse::Mismatch,
        "Vary: * never matches"
    );
    let p = stored(&[("cache-control", "max-age=60"), ("vary", "accept, *")]);
    assert_eq!(p.evaluate(&req(&[]), at(0)), Reuse::Mismatch);
}

#[test]
fn rfc9111_4_1_vary_key_normalisation() {
    let res_h = headers(&[("vary", "Accept-Language, accept"), ("vary", "ACCEPT")]);
    let a = headers(&[
        ("accept", "text/html"),
        ("accept-language", "en"),
        ("accept-language", "fr "),
    ]);
    let b = headers(&[("accept-language", "en, fr"), ("accept", " text/html")]);
    assert_eq!(vary_key(&res_h, &a), vary_key(&res_h, &b));
    assert_eq!(
        vary_key(&res_h, &a).unwrap(),
        "accept:text/html\naccept-language:en, fr\n"
    );
    let empty = headers(&[("accept", ""), ("accept-language", "en, fr")]);
    let absent = headers(&[("accept-language", "en, fr")]);
    assert_ne!(vary_key(&res_h, &empty), vary_key(&res_h, &absent));
    assert_eq!(vary_key(&headers(&[("vary", "*")]), &a), None);
    assert_eq!(vary_key(&HeaderMap::new(), &a).as_deref(), Some(""));
}

#[test]
fn rfc9111_4_method_must_allow_reuse() {
    let p = stored(&[("cache-control", "max-age=60")]);
    assert_eq!(
        p.evaluate(&req_m(Method::HEAD, &[]), at(0)),
        Reuse::Fresh,
        "GET answers HEAD"
    );
    assert_eq!(
        p.evaluate(&req_m(Method::POST, &[]), at(0)),
        Reuse::Mismatch
    );
    let head = Policy::new(
        &req_m(Method::HEAD, &[]),
        &res(&[("cache-control", "max-age=60")]),
        t0(),
        &Options::default(),
    )
    .unwrap();
    assert_eq!(
        head.evaluate(&req(&[]), at(0)),
        Reuse::Mismatch,
        "HEAD has no content for GET"
    );
}

// ---- RFC 5861 ----

#[test]
fn rfc5861_3_stale_while_revalidate_window() {
    let p = stored(&[("cache-control", "max-age=60, stale-while-revalidate=30")]);
    assert_eq!(
        p.evaluate(&req(&[]), at(59)),
        Reuse::Fresh,
        "only when stale"
    );
    assert_eq!(p.evaluate(&req(&[]), at(60)), Reuse::StaleWhileRevalidate);
    assert_eq!(p.evaluate(&req(&[]), at(90)), Reuse::StaleWhileRevalidate);
    assert!(matches!(p.evaluate(&req(&[]), at(91)), Reuse::Validate(_)));
    // The client's own limits still apply.
    assert!(matches!(
        p.evaluate(&req(&[("cache-control", "max-age=30")]), at(70)),
        Reuse::Validate(_)
    ));
    // must-revalidate forbids it; s-maxage's implied proxy-revalidate does not (see evaluate).
    let p = stored(&[(
        "cache-control",
        "max-age=60, must-revalidate, stale-while-revalidate=30",
    )]);
    assert!(matches!(p.evaluate(&req(&[]), at(70)), Reuse::Validate(_)));
    let p = stored(&[("cache-control", "s-maxage=60, stale-while-revalidate=30")]);
    assert_eq!(p.evaluate(&req(&[]), at(70)), Reuse::StaleWhileRevalidate);
}

#[test]
fn rfc5861_4_stale_if_error_response_and_request_directives() {
    let p = stored(&[("cache-control", "max-age=60, stale-if-error=100")]);
    assert!(p.stale_if_error(&req(&[]), at(160)));
    assert!(!p.stale_if_error(&req(&[]), at(161)));
    let p = stored(&[("cache-control", "max-age=60")]);
    assert!(!p.stale_if_error(&req(&[]), at(61)));
    assert!(p.stale_if_error(&req(&[("cache-control", "stale-if-error=50")]), at(110)));
    assert!(!p.stale_if_error(&req(&[("cache-control", "stale-if-error=50")]), at(111)));
    assert!(
        p.stale_if_error(&req(&[]), at(10)),
        "a fresh response is always usable"
    );
    let p = stored(&[("cache-control", "no-cache, stale-if-error=100")]);
    assert!(!p.stale_if_error(&req(&[]), at(1)));
    let p = store(
        &[],
        &[
            ("cache-control", "max-age=60, stale-if-error=100"),
            ("vary", "x"),
        ],
    )
    .unwrap();
    assert!(!p.stale_if_error(&req(&[("x", "1")]), at(61)), "mismatch");
}

// ---- RFC 9213 ----

#[test]
fn rfc9111_4_2_4_stale_when_disconnected_unless_forbidden() {
    let later = at(100);
    let p = stored(&[("cache-control", "max-age=2")]);
    assert!(
        !p.stale_if_error(&req(&[]), later),
        "no stale-if-error window"
    );
    assert!(p.stale_if_disconnected(&req(&[]), later));
    for cc in [
        "max-age=2, must-revalidate",
        "max-age=2, proxy-revalidate",
        "max-age=2, no-cache",
        "max-age=2, s-maxage=2",
    ] {
        let p = stored(&[("cache-control", cc)]);
        assert!(!p.stale_if_disconnected(&req(&[]), later), "{cc}");
    }
    for rcc in ["no-cache", "max-age=10", "min-fresh=1"] {
        assert!(
            !p.stale_if_disconnected(&req(&[("cache-control", rcc)]), later),
            "request {rcc}"
        );
    }
    assert!(p.stale_if_disconnected(&req(&[("cache-control", "max-age=1000")]), later));
    assert!(!p.stale_if_disconnected(&req(&[("pragma", "no-cache")]), later));
}

#[test]
fn rfc9213_2_1_cdn_cache_control_replaces_cache_control() {
    let p = stored(&[
        ("cache-control", "no-store"),
        ("cdn-cache-control", "max-age=120"),
    ]);
    assert_eq!(p.time_to_live(t0()), Duration::from_secs(120));
    assert!(store(
        &[],
        &[
            ("cache-control", "max-age=600"),
            ("cdn-cache-control", "no-store")
        ]
    )
    .is_none());
    // It also replaces Expires.
    let date = http_date(t0());
    let expires = http_date(at(500));
    let p = stored(&[
        ("date", &date),
        ("expires", &expires),
        ("cdn-cache-control", "must-revalidate"),
    ]);
    assert_eq!(p.time_to_live(t0()), Duration::ZERO);
    // An invalid field is ignored: Cache-Control governs.
    let p = stored(&[
        ("cache-control", "max-age=30"),
        ("cdn-cache-control", "Max-Age=120"),
    ]);
    assert_eq!(p.time_to_live(t0()), Duration::from_secs(30));
    // And so when the option is off.
    let opts = Options {
        honor_cdn_cache_control: false,
        ..Options::default()
    };
    let r = res(&[
        ("cache-control", "max-age=30"),
        ("cdn-cache-control", "no-store"),
    ]);
    assert_eq!(
        Policy::new(&req(&[]), &r, t0(), &opts)
            .unwrap()
            .time_to_live(t0()),
        Duration::from_secs(30)
    );
    // Targeted private keeps a shared cache from storing.
    assert!(store(
        &[],
        &[
            ("cache-control", "public"),
            ("cdn-cache-control", "private")
        ]
    )
    .is_none());
}

// ---- §4.3.4 / §3.2 304 handling ----

#[test]
fn rfc9111_3_2_and_4_3_4_merging_a_304() {
    let old_date = http_date(t0());
    let stored_h = headers(&[
        ("date", &old_date),
        ("age", "40"),
        ("cache-control", "max-age=10"),
        ("etag", "\"v1\""),
        ("content-length", "10"),
        ("content-encoding", "br"),
        ("x-old", "1"),
        ("x-multi", "a"),
        ("x-multi", "b"),
    ]);
    let p = Policy::new(
        &req(&[]),
        &res(&[]).tap_headers(&stored_h),
        t0(),
        &Options::default(),
    )
    .unwrap();
    let not_modified = res_s(
        304,
        &[
            ("cache-control", "max-age=100"),
            ("etag", "\"v1\""),
            ("content-length", "0"),
            ("content-encoding", "gzip"),
            ("x-multi", "c"),
            ("connection", "x-secret"),
            ("x-secret", "1"),
        ],
    );
    assert!(p.is_selected_by(&not_modified.headers));
    let (np, merged) = p.revalidated(
        &req(&[]),
        &not_modified,
        &stored_h,
        at(1000),
        &Options::default(),
    );
    assert_eq!(
        merged.get("content-length").unwrap(),
        "10",
        "§3.2: never Content-Length"
    );
    assert_eq!(merged.get("content-encoding").unwrap(), "br");
    assert_eq!(merged.get("cache-control").unwrap(), "max-age=100");
    assert_eq!(merged.get_all("x-multi").iter().collect::<Vec<_>>(), ["c"]);
    assert_eq!(merged.get("x-old").unwrap(), "1");
    assert!(!merged.contains_key("x-secret") && !merged.contains_key("connection"));
    assert!(!merged.contains_key(AGE), "the old Age no longer applies");
    assert_eq!(
        merged.get(DATE).unwrap().to_str().unwrap(),
        http_date(at(1000))
    );
    assert!(np.storable());
    assert_eq!(np.status(), StatusCode::OK);
    assert_eq!(np.age(at(1000)), Duration::ZERO);
    assert_eq!(np.evaluate(&req(&[]), at(1050)), Reuse::Fresh);
    // A 304 adding no-store makes the response unstorable from now on.
    let ns = res_s(304, &[("cache-control", "no-store")]);
    let (np, _) = p.revalidated(&req(&[]), &ns, &stored_h, at(1000), &Options::default());
    assert!(!np.storable());
    assert_eq!(np.evaluate(&req(&[]), at(1000)), Reuse::Mismatch);
}

#[test]
fn rfc9111_4_3_4_selecting_the_stored_response() {
    let p = stored(&[
        ("etag", "\"v1\""),
        ("last-modified", "Tue, 14 Nov 2023 00:00:00 GMT"),
    ]);
    assert!(p.is_selected_by(&headers(&[("etag", "\"v1\"")])));
    assert!(
        p.is_selected_by(&headers(&[("etag", "W/\"v1\"")])),
        "weak matches too"
    );
    assert!(!p.is_selected_by(&headers(&[("etag", "\"v2\"")])));
    assert!(p.is_selected_by(&headers(&[(
        "last-modified",
        "Tue, 14 Nov 2023 00:00:00 GMT"
    )])));
    assert!(!p.is_selected_by(&headers(&[(
        "last-modified",
        "Wed, 15 Nov 2023 00:00:00 GMT"
    )])));
    assert!(
        !p.is_selected_by(&HeaderMap::new()),
        "no validator: only a validator-less entry"
    );
    let weak = stored(&[("etag", "W/\"v1\"")]);
    assert!(
        !weak.is_selected_by(&headers(&[("etag", "\"v1\"")])),
        "strong needs strong"
    );
    assert!(stored(&[]).is_selected_by(&HeaderMap::new()));
}

// ---- §4.4 invalidation ----

#[test]
fn rfc9111_4_4_invalidation_targets() {
    let target: Uri = "http://example.com/items/1".parse().unwrap();
    let h = headers(&[
        ("location", "/items/2"),
        ("content-location", "http://evil.com/items/1"),
    ]);
    let uris = invalidated(&Method::POST, StatusCode::CREATED, &target, &h);
    let want: Vec<Uri> = vec![
        target.clone(),
        "http://example.com/items/2".parse().unwrap(),
    ];
    assert_eq!(uris, want, "cross-origin Content-Location ignored");
    assert!(invalidated(&Method::POST, StatusCode::NOT_FOUND, &target, &h).is_empty());
    assert!(invalidated(&Method::DELETE, StatusCode::BAD_GATEWAY, &target, &h).is_empty());
    assert!(
        invalidated(&Method::GET, StatusCode::OK, &target, &h).is_empty(),
        "safe method"
    );
    let purge = Method::from_bytes(b"PURGE").unwrap();
    assert_eq!(
        invalidated(&purge, StatusCode::NO_CONTENT, &target, &HeaderMap::new()),
        vec![target.clone()]
    );
    let h = headers(&[
        ("content-location", "3"),
        ("location", "HTTP://EXAMPLE.COM:80/x"),
    ]);
    let uris = invalidated(&Method::PUT, StatusCode::SEE_OTHER, &target, &h);
    assert_eq!(uris.len(), 3, "{uris:?}");
    assert_eq!(uris[1], "http://EXAMPLE.COM:80/x".parse::<Uri>().unwrap());
    assert_eq!(
        uris[2],
        "http://example.com/items/3".parse::<Uri>().unwrap()
    );
    // An origin-form target only accepts relative references.
    let local: Uri = "/items/1".parse().unwrap();
    let h = headers(&[
        ("location", "2"),
        ("content-location", "http://example.com/items/9"),
    ]);
    let uris = invalidated(&Method::PATCH, StatusCode::OK, &local, &h);
    assert_eq!(
        uris,
        vec![local.clone(), "/items/2".parse::<Uri>().unwrap()]
    );
}

#[test]
fn rfc9111_5_2_1_7_only_if_cached() {
    assert!(only_if_cached(&headers(&[(
        "cache-control",
        "max-stale, Only-If-Cached"
    )])));
    assert!(!only_if_cached(&headers(&[("pragma", "only-if-cached")])));
}

#[test]
fn malformed_values_are_ignored_not_fatal() {
    let mut h = HeaderMap::new();
    for name in [
        "cache-control",
        "cdn-cache-control",
        "age",
        "date",
        "expires",
        "last-modified",
        "vary",
        "etag",
        "pragma",
        "connection",
    ] {
        h.insert(
            HeaderName::from_static(name),
            HeaderValue::from_bytes(b"\xff\xfe,=\"").unwrap(),
        );
    }
    let r = res(&[]).tap_headers(&h);
    let p = Policy::new(
        &req_m(Method::GET, &[]).with_headers(&h),
        &r,
        t0(),
        &Options::default(),
    );
    if let Some(p) = p {
        let _ = p.evaluate(&req(&[]).with_headers(&h), at(1));
        let _ = p.response_headers(&h, at(1));
        let _ = p.stale_if_error(&req(&[]), at(1));
    }
}

trait WithHeaders {
    fn with_headers(self, h: &HeaderMap) -> Self;
}

impl WithHeaders for request::Parts {
    fn with_headers(mut self, h: &HeaderMap) -> Self {
        self.headers = h.clone();
        self
    }
}

const FIELDS: &[&str] = &[
    "cache-control",
    "cdn-cache-control",
    "age",
    "date",
    "expires",
    "last-modified",
    "vary",
    "etag",
    "pragma",
    "connection",
    "location",
    "content-location",
];

proptest! {
    /// Arbitrary field values never panic; age grows with time; the time to live never exceeds
    /// the lifetime nor grows.
    #[test]
    fn arbitrary_fields_never_panic(
        values in proptest::collection::vec((0..FIELDS.len(), proptest::collection::vec(0x20u8..0x7f, 0..24)), 0..10),
        later in 0u64..1_000_000,
    ) {
        let mut h = HeaderMap::new();
        for (i, v) in &values {
            if let Ok(v) = HeaderValue::from_bytes(v) {
                h.append(HeaderName::from_static(FIELDS[*i]), v);
            }
        }
        let r = res(&[]).tap_headers(&h);
        let q = req(&[]).with_headers(&h);
        if let Some(p) = Policy::new(&q, &r, t0(), &Options::default()) {
            prop_assert!(p.age(at(later)) >= p.age(t0()));
            prop_assert!(p.time_to_live(at(later)) <= p.time_to_live(t0()));
            let _ = p.evaluate(&q, at(later));
            let _ = p.stale_if_error(&q, at(later));
            let out = p.response_headers(&h, at(later));
            prop_assert!(out.contains_key(AGE));
            let _ = vary_key(&h, &h);
            let (np, _) = p.revalidated(&q, &res_s(304, &[]).tap_headers(&h), &h, at(later), &Options::default());
            let _ = np.evaluate(&q, at(later));
        }
        let _ = invalidated(&Method::POST, StatusCode::OK, &Uri::from_static("http://a/b"), &h);
    }
}

/// Found by the `caching_fields` fuzz target: a field value ending in a quoted backslash made the
/// member scan step past the end of the value and panic.
#[test]
fn a_value_ending_in_a_quoted_backslash_is_malformed_not_a_panic() {
    let opts = Options {
        surrogate_name: Some("edge".into()),
        ..Options::default()
    };
    for field in ["surrogate-control", "cache-control", "cdn-cache-control"] {
        for value in ["\"\\", "max-age=60, \"\\", "max-age=60;edge, x=\"\\"] {
            let res = res(&[(field, value)]);
            // Whatever it decides, it decides without panicking.
            let _ = Policy::new(&req(&[]), &res, t0(), &opts);
        }
    }
}
