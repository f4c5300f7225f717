//! The HTTP decisions of Riptide's roles, without I/O, on the shared RFC 9111 rules
//! (`slipstream-http-rules`):
//! - the browser proxy's pre-check (004 §4.2.2): is a request worth looking up in the
//!   cooperative cache at all, or does it go straight to the origin;
//! - the gateway's capture (§4.2.3): may a response be stored, and the object that stores it,
//!   with the exchange's times in its metadata (§4.1);
//! - revalidation: the conditional request for a held object (RFC 9111 §4.3.1) and the object a
//!   304 refreshes (§4.3.4);
//! - reuse: may a stored object answer a request now (RFC 9111 §4), judged from the object's
//!   head and times alone.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{request, response, Method, StatusCode};
use slipstream_http_rules::rfc9111::{Options, Policy, Reuse};

use crate::object::Object;

/// Why a request is not looked up in the cooperative cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Bypass {
    /// Only GET is looked up.
    #[error("only GET requests are looked up")]
    Method,
    /// The request carries credentials: its response is the user's, not everyone's.
    #[error("the request carries credentials (Authorization or Cookie)")]
    Credentials,
    /// The client asks not to use or fill caches.
    #[error("the request says no-store")]
    NoStore,
    /// Not an absolute http(s) URL.
    #[error("not an absolute http(s) URL")]
    Url,
}

/// The browser proxy's pre-check: `Ok` when the request may be answered from the cooperative
/// cache. The paper's proxy also passes over URLs that look dynamic (CGI paths, query
/// strings); RFC 9111 decides those by the response, so we look them up.
pub fn precheck(req: &request::Parts) -> Result<(), Bypass> {
    if req.method != Method::GET {
        return Err(Bypass::Method);
    }
    if req.headers.contains_key(http::header::AUTHORIZATION)
        || req.headers.contains_key(http::header::COOKIE)
    {
        return Err(Bypass::Credentials);
    }
    let no_store = req
        .headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("no-store"));
    if no_store {
        return Err(Bypass::NoStore);
    }
    match req.uri.scheme_str() {
        Some("http" | "https") if req.uri.host().is_some() => Ok(()),
        _ => Err(Bypass::Url),
    }
}

/// Why a gateway does not store a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotStorable {
    /// RFC 9111 §3 forbids storing it (no-store, private, an unstorable status or method...).
    #[error("RFC 9111 does not let a shared cache store it")]
    Rfc9111,
    /// Not a final response.
    #[error("not a final response")]
    Interim,
}

/// Header fields that describe one connection, not the response (RFC 9110 §7.6.1), and
/// `Set-Cookie`, which a shared cache must not hand from one user to the next.
const NOT_STORED: [HeaderName; 9] = [
    http::header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    http::header::PROXY_AUTHENTICATE,
    http::header::PROXY_AUTHORIZATION,
    http::header::TE,
    http::header::TRAILER,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    http::header::SET_COOKIE,
];

/// Milliseconds since the Unix epoch.
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().min(u64::MAX as u128) as u64)
}

fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The gateway's capture: the object storing `res` (with `body`) fetched for `req` at
/// `requested_at`, arriving at `received_at`, as version `version`; or why it may not be stored
/// by a shared cache.
pub fn capture(
    req: &request::Parts,
    res: &response::Parts,
    body: Bytes,
    requested_at: SystemTime,
    received_at: SystemTime,
    version: u64,
) -> Result<Object, NotStorable> {
    if res.status.is_informational() {
        return Err(NotStorable::Interim);
    }
    Policy::new(req, res, received_at, &Options::default()).ok_or(NotStorable::Rfc9111)?;
    Ok(Object {
        url: req.uri.to_string(),
        status: res.status.as_u16(),
        headers: stored_fields(&res.headers),
        body,
        requested_at_ms: unix_ms(requested_at),
        received_at_ms: unix_ms(received_at),
        version,
    })
}

/// RFC 9111 §4.3.1: the fields that make a request for `object` conditional (If-None-Match
/// from its ETag, If-Modified-Since from its Last-Modified); empty when it has no validator or
/// its head no longer lets a shared cache store it.
pub fn conditional_headers(object: &Object) -> HeaderMap {
    object
        .url
        .parse()
        .ok()
        .and_then(|uri| policy_of(object, uri))
        .map_or_else(HeaderMap::new, |p| p.conditional_headers())
}

/// RFC 9111 §4.3.4: `held` refreshed by the 304 `not_modified` to the conditional request `req`
/// sent at `requested_at`, arriving at `received_at`: the held body and status, the held head
/// updated with the 304's fields (but those §3.2 keeps, and those never stored), the new times,
/// the held version (the caller decides whether the head changed enough to make a new one).
/// `Ok(None)` when the 304 does not select the held response (another validator): fetch it
/// unconditionally instead. An error when the updated head no longer lets it be stored.
pub fn revalidated(
    held: &Object,
    req: &request::Parts,
    not_modified: &response::Parts,
    requested_at: SystemTime,
    received_at: SystemTime,
) -> Result<Option<Object>, NotStorable> {
    let policy = policy_of(held, req.uri.clone()).ok_or(NotStorable::Rfc9111)?;
    if !policy.is_selected_by(&not_modified.headers) {
        return Ok(None);
    }
    let stored = head_of(held).headers;
    let (updated, merged) =
        policy.revalidated(req, not_modified, &stored, received_at, &Options::default());
    if !updated.storable() {
        return Err(NotStorable::Rfc9111);
    }
    Ok(Some(Object {
        url: held.url.clone(),
        status: held.status,
        headers: stored_fields(&merged),
        body: held.body.clone(),
        requested_at_ms: unix_ms(requested_at),
        received_at_ms: unix_ms(received_at),
        version: held.version,
    }))
}

/// The fields of `headers` an object keeps.
fn stored_fields(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .filter(|(name, _)| !NOT_STORED.contains(name))
        .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
        .collect()
}

/// The object's head as HTTP parts (fields that no longer parse are left out).
pub fn head_of(object: &Object) -> response::Parts {
    let mut headers = HeaderMap::new();
    for (name, value) in &object.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    }
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = StatusCode::from_u16(object.status).unwrap_or(StatusCode::OK);
    parts.headers = headers;
    parts
}

/// May `object` answer `req` at `now` (RFC 9111 §4, from the object's head and its response
/// time)? `None` when the object's own head no longer allows storing it.
pub fn reuse(object: &Object, req: &request::Parts, now: SystemTime) -> Option<Reuse> {
    Some(policy_of(object, req.uri.clone())?.evaluate(req, now))
}

/// Whether `object` may answer a plain GET of its URL at `now` without validation (RFC 9111
/// §4.2): what a peer checks before it sends a body asked for fresh.
pub fn fresh(object: &Object, now: SystemTime) -> bool {
    let Ok(uri) = object.url.parse::<http::Uri>() else {
        return false;
    };
    let (mut req, ()) = http::Request::new(()).into_parts();
    req.uri = uri.clone();
    policy_of(object, uri).is_some_and(|p| matches!(p.evaluate(&req, now), Reuse::Fresh))
}

/// Whether `object`, stale, may answer `req` at `now` because its revalidation failed: the
/// response's or the request's `stale-if-error` window (RFC 5861 §4) covers its staleness.
pub fn stale_if_error(object: &Object, req: &request::Parts, now: SystemTime) -> bool {
    policy_of(object, req.uri.clone()).is_some_and(|p| p.stale_if_error(req, now))
}

/// The object's current age (RFC 9111 §4.2.3), for the `Age` field of a response it answers;
/// `None` when its head would not let a shared cache store it.
pub fn age(object: &Object, now: SystemTime) -> Option<Duration> {
    Some(policy_of(object, object.url.parse().ok()?)?.age(now))
}

/// The RFC 9111 policy of the stored response, as requested for `uri`.
fn policy_of(object: &Object, uri: http::Uri) -> Option<Policy> {
    let head = head_of(object);
    let (mut original, ()) = http::Request::new(()).into_parts();
    original.uri = uri;
    Policy::new(
        &original,
        &head,
        from_unix_ms(object.received_at_ms),
        &Options::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(url: &str, headers: &[(&str, &str)]) -> request::Parts {
        let mut b = http::Request::get(url);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn response(status: u16, headers: &[(&str, &str)]) -> response::Parts {
        let mut b = http::Response::builder().status(status);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    const T0: Duration = Duration::from_secs(1_700_000_000);

    #[test]
    fn the_precheck_passes_plain_gets_only() {
        assert_eq!(precheck(&get("http://site.test/a?x=1", &[])), Ok(()));
        assert_eq!(
            precheck(&get("http://site.test/a", &[("cookie", "id=1")])),
            Err(Bypass::Credentials)
        );
        assert_eq!(
            precheck(&get("http://site.test/a", &[("authorization", "Bearer x")])),
            Err(Bypass::Credentials)
        );
        assert_eq!(
            precheck(&get(
                "http://site.test/a",
                &[("cache-control", "max-age=0, no-store")]
            )),
            Err(Bypass::NoStore)
        );
        assert_eq!(precheck(&get("/relative", &[])), Err(Bypass::Url));
        let mut post = get("http://site.test/a", &[]);
        post.method = Method::POST;
        assert_eq!(precheck(&post), Err(Bypass::Method));
    }

    #[test]
    fn a_storable_response_becomes_an_object_with_its_times() {
        let req = get("http://site.test/a", &[]);
        let res = response(
            200,
            &[
                ("cache-control", "max-age=60"),
                ("content-type", "text/html"),
                ("connection", "keep-alive"),
                ("set-cookie", "id=secret"),
            ],
        );
        let sent = UNIX_EPOCH + T0;
        let got = sent + Duration::from_millis(42);
        let o = capture(&req, &res, Bytes::from_static(b"hi"), sent, got, 3).unwrap();
        assert_eq!(o.url, "http://site.test/a");
        assert_eq!(o.received_at_ms - o.requested_at_ms, 42);
        assert_eq!(o.version, 3);
        assert_eq!(o.header("content-type"), Some("text/html"));
        assert_eq!(o.header("connection"), None);
        assert_eq!(o.header("set-cookie"), None, "never shared between users");
    }

    #[test]
    fn unstorable_responses_are_refused() {
        let req = get("http://site.test/a", &[]);
        let at = UNIX_EPOCH + T0;
        for cc in ["no-store", "private"] {
            let res = response(200, &[("cache-control", cc)]);
            assert_eq!(
                capture(&req, &res, Bytes::new(), at, at, 1),
                Err(NotStorable::Rfc9111),
                "{cc}"
            );
        }
        let res = response(103, &[]);
        assert_eq!(
            capture(&req, &res, Bytes::new(), at, at, 1),
            Err(NotStorable::Interim)
        );
    }

    #[test]
    fn reuse_follows_the_objects_freshness() {
        let req = get("http://site.test/a", &[]);
        let res = response(200, &[("cache-control", "max-age=60"), ("etag", "\"v1\"")]);
        let at = UNIX_EPOCH + T0;
        let o = capture(&req, &res, Bytes::from_static(b"hi"), at, at, 1).unwrap();
        assert_eq!(
            reuse(&o, &req, at + Duration::from_secs(30)),
            Some(Reuse::Fresh)
        );
        match reuse(&o, &req, at + Duration::from_secs(90)) {
            Some(Reuse::Validate(h)) => {
                assert_eq!(h.get("if-none-match").unwrap(), "\"v1\"")
            }
            other => panic!("stale: {other:?}"),
        }
        // The client's own limit applies too.
        let strict = get("http://site.test/a", &[("cache-control", "max-age=10")]);
        assert!(matches!(
            reuse(&o, &strict, at + Duration::from_secs(30)),
            Some(Reuse::Validate(_))
        ));
    }

    #[test]
    fn a_304_refreshes_the_held_object_in_place() {
        let req = get("http://site.test/a", &[]);
        let res = response(
            200,
            &[
                ("cache-control", "max-age=2"),
                ("etag", "\"v1\""),
                ("last-modified", "Tue, 14 Nov 2023 22:13:20 GMT"),
                ("content-length", "2"),
                ("x-old", "kept"),
            ],
        );
        let at = UNIX_EPOCH + T0;
        let held = capture(&req, &res, Bytes::from_static(b"hi"), at, at, 4).unwrap();
        let cond = conditional_headers(&held);
        assert_eq!(cond.get("if-none-match").unwrap(), "\"v1\"");
        assert_eq!(
            cond.get("if-modified-since").unwrap(),
            "Tue, 14 Nov 2023 22:13:20 GMT"
        );

        let later = at + Duration::from_secs(10);
        let nm = response(
            304,
            &[
                ("cache-control", "max-age=5"),
                ("etag", "\"v1\""),
                ("content-length", "0"),
                ("set-cookie", "id=secret"),
            ],
        );
        let o = revalidated(&held, &req, &nm, later, later)
            .unwrap()
            .unwrap();
        assert_eq!((o.status, o.version, &o.body[..]), (200, 4, &b"hi"[..]));
        assert_eq!(o.received_at_ms, unix_ms(later));
        assert_eq!(o.header("cache-control"), Some("max-age=5"), "updated");
        assert_eq!(o.header("content-length"), Some("2"), "§3.2: not updated");
        assert_eq!(o.header("x-old"), Some("kept"));
        assert_eq!(o.header("set-cookie"), None);
        assert_eq!(reuse(&o, &req, later), Some(Reuse::Fresh));

        // A 304 for another validator does not select it; one adding no-store ends it.
        let other = response(304, &[("etag", "\"v2\"")]);
        assert_eq!(revalidated(&held, &req, &other, later, later), Ok(None));
        let ns = response(304, &[("etag", "\"v1\""), ("cache-control", "no-store")]);
        assert_eq!(
            revalidated(&held, &req, &ns, later, later),
            Err(NotStorable::Rfc9111)
        );
    }
}
