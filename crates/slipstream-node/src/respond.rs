//! Small responses a node makes itself: plain-text messages and JSON documents.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{Response, StatusCode};
use slipstream_http::Body;

/// A short plain-text response (a newline is added).
pub fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut r = Response::new(Body::full(Bytes::from(format!("{message}\n"))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A JSON response.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut body = serde_json::to_vec(value).unwrap_or_default();
    body.push(b'\n');
    let mut r = Response::new(Body::full(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// 405 naming the methods allowed (`Allow`, RFC 9110 §15.5.6).
pub fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    r
}

/// Checks `Authorization: Bearer <token>` (RFC 6750 §2.1), comparing in time independent of
/// where the tokens differ. Without a `token` configured the action is off: 403 saying
/// `disabled`. A missing or wrong token: 401 saying `needs`, with `WWW-Authenticate: Bearer`.
pub fn bearer(
    headers: &HeaderMap,
    token: Option<&str>,
    disabled: &str,
    needs: &str,
) -> Result<(), Box<Response<Body>>> {
    let Some(token) = token else {
        return Err(Box::new(text(StatusCode::FORBIDDEN, disabled)));
    };
    let given = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| constant_time_eq(g.trim().as_bytes(), token.as_bytes())) {
        return Ok(());
    }
    let mut r = text(StatusCode::UNAUTHORIZED, needs);
    r.headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Err(Box::new(r))
}

/// Compares without leaking where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
