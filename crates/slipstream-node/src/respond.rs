//! Small responses a node makes itself: plain-text messages and JSON documents.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
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
