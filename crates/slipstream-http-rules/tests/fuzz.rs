//! Fuzz targets for the fields this crate parses by hand, through its public API: Range, the
//! conditional fields (entity-tag lists, dates, If-Range) and every response and request field
//! the caching rules read (Cache-Control, CDN-Cache-Control, Surrogate-Control, Pragma,
//! Expires, Date, Age, Vary, Location). Inputs are arbitrary strings and mutated valid fields;
//! each target checks properties, not only the absence of panics. The private directive
//! parsers have their own targets in `src/rfc9111/fuzz.rs`.

#[path = "../../../tests/fuzz_support.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use proptest::prelude::*;
use slipstream_http_rules::conditional::{self, Outcome, Validators};
use slipstream_http_rules::range::{self, Ranges};
use slipstream_http_rules::rfc9111::{self, Options, Policy};
use support::fuzz;

/// One range-spec as a request might write it, and the bytes it asks for (`first`, `last`
/// inclusive or open; a suffix).
#[derive(Debug, Clone)]
enum Spec {
    Closed(u64, u64),
    Open(u64),
    Suffix(u64),
    Junk(String),
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..64, 0u64..5_000, any::<u64>(), Just(u64::MAX)]
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        4 => (number(), number()).prop_map(|(a, b)| Spec::Closed(a.min(b), a.max(b))),
        2 => number().prop_map(Spec::Open),
        2 => number().prop_map(Spec::Suffix),
        1 => "[0-9a-z =,+-]{0,6}".prop_map(Spec::Junk),
    ]
}

fn write_spec(s: &Spec) -> String {
    match s {
        Spec::Closed(a, b) => format!("{a}-{b}"),
        Spec::Open(a) => format!("{a}-"),
        Spec::Suffix(n) => format!("-{n}"),
        Spec::Junk(j) => j.clone(),
    }
}

/// The bytes of `0..len` a spec covers, or `None` when the spec is not one.
fn covered(s: &Spec, len: u64) -> Option<Option<(u64, u64)>> {
    Some(match *s {
        Spec::Closed(a, b) => (a < len).then(|| (a, b.saturating_add(1).min(len))),
        Spec::Open(a) => (a < len).then_some((a, len)),
        Spec::Suffix(n) => (n > 0 && len > 0).then(|| (len.saturating_sub(n), len)),
        Spec::Junk(_) => return None,
    })
}

/// The union of intervals, as sorted disjoint, non-touching intervals.
fn union(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

#[test]
fn range_arbitrary_headers() {
    fuzz(
        "range_arbitrary_headers",
        2_000,
        (
            prop_oneof![".*", "(bytes|BYTES| bytes |items)=[0-9, -]{0,40}"],
            number(),
        ),
        |(header, len)| {
            if let Ranges::Satisfiable(rs) = range::parse(&header, len) {
                check_answer(&rs, len)?;
            }
            Ok(())
        },
    );
}

/// What any satisfiable answer must be: non-empty ranges inside the representation, at most
/// `MAX_RANGES`, none overlapping or touching another, so the answer is never larger than the
/// representation; and each renders as a Content-Range.
fn check_answer(rs: &[std::ops::Range<u64>], len: u64) -> Result<(), TestCaseError> {
    prop_assert!(!rs.is_empty() && rs.len() <= range::MAX_RANGES);
    let mut sorted = rs.to_vec();
    sorted.sort_by_key(|r| r.start);
    for r in &sorted {
        prop_assert!(r.start < r.end && r.end <= len, "{r:?} outside 0..{len}");
        let cr = range::content_range(r, len);
        let total = format!("/{len}");
        prop_assert!(cr.starts_with("bytes ") && cr.ends_with(&total), "{}", cr);
    }
    for w in sorted.windows(2) {
        prop_assert!(
            w[1].start > w[0].end,
            "{:?} overlaps or touches {:?}",
            w[0],
            w[1]
        );
    }
    let total: u64 = rs.iter().map(|r| r.end - r.start).sum();
    prop_assert!(total <= len);
    Ok(())
}

#[test]
fn range_specs_cover_exactly_the_bytes_asked_for() {
    fuzz(
        "range_specs_cover_exactly_the_bytes_asked_for",
        2_000,
        (
            proptest::collection::vec(spec(), 0..40),
            number(),
            "[ \t]{0,2}",
        ),
        |(specs, len, ows)| {
            let header = format!(
                "bytes={}",
                specs
                    .iter()
                    .map(write_spec)
                    .collect::<Vec<_>>()
                    .join(&format!("{ows},{ows}"))
            );
            let got = range::parse(&header, len);
            let wanted: Option<Vec<Option<(u64, u64)>>> =
                specs.iter().map(|s| covered(s, len)).collect();
            let Some(wanted) = wanted else {
                return Ok(()); // a junk member: ignored or not, any answer must still be sane
            };
            let hits: Vec<(u64, u64)> = wanted.iter().flatten().copied().collect();
            match got {
                Ranges::Ignore => prop_assert!(
                    specs.is_empty() || hits.len() > range::MAX_RANGES,
                    "{header} ignored"
                ),
                Ranges::Unsatisfiable => prop_assert!(hits.is_empty(), "{header}"),
                Ranges::Satisfiable(rs) => {
                    check_answer(&rs, len)?;
                    let answered = union(rs.iter().map(|r| (r.start, r.end)).collect());
                    prop_assert_eq!(answered, union(hits), "{}", header);
                }
            }
            Ok(())
        },
    );
}

fn any_time() -> impl Strategy<Value = SystemTime> {
    prop_oneof![
        (0u64..4_000_000_000).prop_map(|s| UNIX_EPOCH + Duration::from_secs(s)),
        (0u64..4_000_000_000, 0u32..1_000_000_000)
            .prop_map(|(s, n)| UNIX_EPOCH + Duration::new(s, n)),
    ]
}

/// A field value as a client or origin might send it: a real date, a mangled one, or anything.
fn date_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any_time().prop_map(httpdate::fmt_http_date),
        any_time().prop_map(|t| {
            let d = httpdate::fmt_http_date(t);
            d.replace("GMT", "PST")
        }),
        "[A-Za-z]{3}, [0-9]{1,3} [A-Za-z]{3} [0-9]{1,5} [0-9:]{1,9} GMT",
        ".{0,40}",
    ]
}

fn tag() -> impl Strategy<Value = String> {
    prop_oneof![
        "\"[a-z0-9,-]{0,6}\"",
        "W/\"[a-z0-9,-]{0,6}\"",
        Just("*".to_owned()),
        "[ -~]{0,8}",
    ]
}

fn tag_list() -> impl Strategy<Value = String> {
    proptest::collection::vec(tag(), 0..5).prop_map(|v| v.join(", "))
}

/// RFC 9110 §8.8.3: `[W/] DQUOTE *etagc DQUOTE`, where etagc is any visible character but `"`
/// (commas included).
fn is_entity_tag(e: &str) -> bool {
    let opaque = e.strip_prefix("W/").unwrap_or(e);
    opaque.len() >= 2
        && opaque.starts_with('"')
        && opaque.ends_with('"')
        && opaque[1..opaque.len() - 1]
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x7e).contains(&b))
}

/// Puts `(name, value)` into `h` when the value is a valid field value.
fn put(h: &mut HeaderMap, name: &'static str, value: Option<String>) {
    if let Some(v) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
        h.append(HeaderName::from_static(name), v);
    }
}

#[test]
fn conditional_fields() {
    let fields = (
        proptest::option::of(tag_list()),
        proptest::option::of(tag_list()),
        proptest::option::of(date_value()),
        proptest::option::of(date_value()),
        proptest::option::of(prop_oneof![tag(), date_value()]),
    );
    let validators = (
        proptest::option::of(tag()),
        proptest::option::of(any_time()),
    );
    fuzz(
        "conditional_fields",
        2_000,
        (fields, validators, any::<bool>()),
        |((im, inm, ims, ius, ir), (etag, modified), get)| {
            let mut h = HeaderMap::new();
            put(&mut h, "if-match", im.clone());
            put(&mut h, "if-none-match", inm.clone());
            put(&mut h, "if-modified-since", ims);
            put(&mut h, "if-unmodified-since", ius);
            put(&mut h, "if-range", ir);
            let v = Validators {
                etag: etag.clone(),
                last_modified: modified,
            };
            let method = if get { Method::GET } else { Method::PUT };
            let outcome = conditional::evaluate(&method, &h, &v);
            conditional::if_range_allows(&h, &v);
            // §13.2.2: only GET and HEAD are ever answered 304.
            prop_assert!(get || outcome != Outcome::NotModified);
            // §13.1.2: If-None-Match naming our tag (or `*`), with no If-Match and no
            // If-Unmodified-Since to fail first, never lets the request proceed.
            if im.is_none() && !h.contains_key("if-unmodified-since") {
                let ours = etag.as_deref().filter(|e| is_entity_tag(e));
                let mut h2 = h.clone();
                let listed = match ours {
                    Some(e) => format!("\"zz\", {e}"),
                    None => "*".to_owned(),
                };
                h2.insert(
                    "if-none-match",
                    HeaderValue::from_str(&listed).expect("ascii"),
                );
                let again = conditional::evaluate(&method, &h2, &v);
                prop_assert_ne!(again, Outcome::Proceed, "{:?} with {}", v, listed);
            }
            // §13.1.5: a strong tag equal to ours allows the range; a weak one never does.
            if let Some(e) = etag
                .as_deref()
                .filter(|e| is_entity_tag(e) && e.starts_with('"'))
            {
                let mut h3 = HeaderMap::new();
                put(&mut h3, "if-range", Some(e.to_owned()));
                prop_assert_eq!(
                    conditional::if_range_allows(&h3, &v),
                    h3.contains_key("if-range")
                );
                let mut weak = HeaderMap::new();
                put(&mut weak, "if-range", Some(format!("W/{e}")));
                prop_assert!(
                    !conditional::if_range_allows(&weak, &v) || !weak.contains_key("if-range")
                );
            }
            Ok(())
        },
    );
}

/// A Cache-Control-like value: directives people send, mutated, plus noise.
fn directives() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("max-age"),
        Just("s-maxage"),
        Just("no-store"),
        Just("no-cache"),
        Just("private"),
        Just("public"),
        Just("must-revalidate"),
        Just("proxy-revalidate"),
        Just("immutable"),
        Just("stale-while-revalidate"),
        Just("stale-if-error"),
        Just("only-if-cached"),
        Just("max-stale"),
        Just("min-fresh"),
        Just("Max-Age"),
        Just("x"),
    ];
    let value = prop_oneof![
        Just(String::new()),
        (0u64..100_000).prop_map(|n| format!("={n}")),
        "=[0-9]{10,25}".prop_map(|s| s),
        "=\"[ -~]{0,8}\"",
        "=\\?[01]",
        "=[-0-9.]{1,6}",
        "[ ;=()\"a-z]{0,5}",
    ];
    let member = (name, value).prop_map(|(n, v)| format!("{n}{v}"));
    prop_oneof![
        4 => proptest::collection::vec(member, 0..5).prop_map(|m| m.join(", ")),
        1 => "[ -~]{0,40}",
    ]
}

fn response_fields() -> impl Strategy<Value = Vec<(&'static str, String)>> {
    let field = prop_oneof![
        directives().prop_map(|v| ("cache-control", v)),
        directives().prop_map(|v| ("cdn-cache-control", v)),
        directives().prop_map(|v| ("surrogate-control", v)),
        date_value().prop_map(|v| ("expires", v)),
        date_value().prop_map(|v| ("date", v)),
        date_value().prop_map(|v| ("last-modified", v)),
        "[0-9]{1,25}|[ -~]{0,6}".prop_map(|v| ("age", v)),
        tag().prop_map(|v| ("etag", v)),
        "(\\*|accept-encoding|[ -~]{0,10})(, [a-z-]{0,8}){0,2}".prop_map(|v| ("vary", v)),
        "(/|https?://[a-z.]{1,8}(:[0-9]{1,6})?/|//|\\.\\./|\\?)[ -~]{0,12}"
            .prop_map(|v| ("location", v)),
        "[ -~]{0,12}".prop_map(|v| ("content-location", v)),
        Just(("set-cookie", "a=b".to_owned())),
        "[a-z, -]{0,20}".prop_map(|v| ("connection", v)),
    ];
    proptest::collection::vec(field, 0..8)
}

fn request_fields() -> impl Strategy<Value = Vec<(&'static str, String)>> {
    let field = prop_oneof![
        directives().prop_map(|v| ("cache-control", v)),
        "(no-cache|[ -~]{0,8})".prop_map(|v| ("pragma", v)),
        Just(("authorization", "Bearer x".to_owned())),
        "[a-z, ]{0,10}".prop_map(|v| ("accept-encoding", v)),
        tag_list().prop_map(|v| ("if-none-match", v)),
        date_value().prop_map(|v| ("if-modified-since", v)),
    ];
    proptest::collection::vec(field, 0..6)
}

fn header_map(fields: &[(&'static str, String)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in fields {
        put(&mut h, n, Some(v.clone()));
    }
    h
}

#[test]
fn caching_fields() {
    let statuses = prop_oneof![
        Just(200u16),
        Just(203),
        Just(206),
        Just(301),
        Just(404),
        100u16..600
    ];
    let methods = prop_oneof![Just(Method::GET), Just(Method::HEAD), Just(Method::POST)];
    let uris = prop_oneof![
        Just("http://example.com/a/b?q".to_owned()),
        Just("/x".to_owned()),
        Just("https://Example.COM:443/".to_owned()),
    ];
    fuzz(
        "caching_fields",
        1_000,
        (
            (methods, uris, request_fields(), statuses, response_fields()),
            (any_time(), 0u64..10_000_000, response_fields()),
            (any::<bool>(), any::<bool>(), request_fields(), any::<f32>()),
        ),
        |(
            (method, uri, req_f, status, res_f),
            (received, later_s, not_modified_f),
            (shared, cdn, req2_f, fraction),
        )| {
            let (mut req, ()) = http::Request::new(()).into_parts();
            req.method = method.clone();
            req.uri = uri.parse::<Uri>().expect("valid uri");
            req.headers = header_map(&req_f);
            let (mut res, ()) = http::Response::new(()).into_parts();
            res.status = StatusCode::from_u16(status).expect("valid status");
            res.headers = header_map(&res_f);
            let opts = Options {
                shared,
                honor_cdn_cache_control: cdn,
                heuristic_fraction: fraction,
                // Targeted Surrogate-Control members are parsed whenever a cache has a name.
                surrogate_name: shared.then(|| "edge".to_owned()),
            };
            rfc9111::vary_key(&res.headers, &req.headers);
            rfc9111::only_if_cached(&req.headers);
            for m in [Method::POST, Method::DELETE, method.clone()] {
                let gone = rfc9111::invalidated(&m, res.status, &req.uri, &res.headers);
                prop_assert!(gone.is_empty() || gone[0] == req.uri);
                for u in gone.iter().skip(1) {
                    prop_assert_eq!(
                        u.host().map(str::to_ascii_lowercase),
                        req.uri.host().map(str::to_ascii_lowercase)
                    );
                }
            }
            let policy = Policy::new(&req, &res, received, &opts);
            // RFC 9111 §3: `no-store` in the only field that speaks forbids storing.
            // (Quoted strings may hide commas: such fields are left out of this check.)
            let only_cc = !cdn
                || (!res.headers.contains_key("cdn-cache-control")
                    && !res.headers.contains_key("surrogate-control"));
            let quoted = res
                .headers
                .get_all("cache-control")
                .iter()
                .any(|v| v.as_bytes().contains(&b'"'));
            let cc = res
                .headers
                .get_all("cache-control")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .map(|d| d.trim().to_ascii_lowercase())
                .collect::<BTreeSet<_>>();
            if only_cc && !quoted && cc.contains("no-store") {
                prop_assert!(
                    policy.is_none(),
                    "stored despite no-store: {:?}",
                    res.headers
                );
            }
            let Some(policy) = policy else { return Ok(()) };
            prop_assert!(matches!(method, Method::GET | Method::HEAD));
            let later = received + Duration::from_secs(later_s);
            // Age only grows and time to live only shrinks.
            prop_assert!(policy.age(later) >= policy.age(received));
            prop_assert!(policy.time_to_live(later) <= policy.time_to_live(received));
            let mut req2 = req.clone();
            req2.headers = header_map(&req2_f);
            for now in [received, later] {
                policy.evaluate(&req, now);
                policy.evaluate(&req2, now);
                policy.stale_if_error(&req2, now);
                let shown = policy.response_headers(&res.headers, now);
                if let Some(age) = shown.get("age") {
                    prop_assert!(
                        age.to_str().is_ok_and(|a| a.parse::<u64>().is_ok()),
                        "{age:?}"
                    );
                }
            }
            policy.conditional_headers();
            let not_modified = header_map(&not_modified_f);
            policy.is_selected_by(&not_modified);
            let (mut nm, ()) = http::Response::new(()).into_parts();
            nm.status = StatusCode::NOT_MODIFIED;
            nm.headers = not_modified;
            policy.revalidated(&req, &nm, &res.headers, later, &opts);
            Ok(())
        },
    );
}
