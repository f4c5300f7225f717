//! Control endpoints: `/_slipstream/metrics`, `/_slipstream/status`, and purging, by the PURGE
//! method or `/_slipstream/purge?url=...` / `?surrogate-key=...`, with a bearer token.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{
    HeaderValue, ALLOW, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE,
};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use slipstream_http::Body;

use crate::{text, Inner};

pub(crate) async fn handle(
    inner: &Arc<Inner>,
    what: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    match what {
        "metrics" | "status" | "status/" if req.method() == Method::GET || req.method() == Method::HEAD => {
            let (body, content_type): (Bytes, &'static str) = if what == "metrics" {
                (inner.metrics.registry.render().into(), "text/plain; version=0.0.4; charset=utf-8")
            } else {
                (Bytes::from_static(slipstream_http::status::PAGE.as_bytes()), "text/html; charset=utf-8")
            };
            let mut r = Response::new(if req.method() == Method::HEAD { Body::empty() } else { Body::full(body) });
            r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
            r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        "purge" if req.method() == Method::POST || req.method().as_str() == "PURGE" => {
            if let Err(refusal) = authorised(inner, &req) {
                return *refusal;
            }
            let query = req.uri().query().unwrap_or("");
            let param = |name: &str| query.split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| decode(v));
            if let Some(url) = param("url") {
                return purge_url(inner, &url);
            }
            if let Some(tag) = param("surrogate-key") {
                let n = inner.store.as_ref().map_or(0, |s| s.purge_tag(&tag));
                return json(StatusCode::OK, &format!("{{\"surrogate_key\":{tag:?},\"purged_keys\":{n}}}"));
            }
            text(StatusCode::BAD_REQUEST, "purge needs ?url=URL or ?surrogate-key=TAG")
        }
        "purge" => {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "purge with POST or PURGE");
            r.headers_mut().insert(ALLOW, HeaderValue::from_static("POST, PURGE"));
            r
        }
        "metrics" | "status" | "status/" => {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
            r.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            r
        }
        _ => text(StatusCode::NOT_FOUND, "no such control endpoint: try /_slipstream/status, /_slipstream/metrics or /_slipstream/purge"),
    }
}

/// `PURGE /path` (reverse proxy) or `PURGE http://host/path`.
/// `absolute`: the request names another server (see `fetch::absolute_form`).
pub(crate) fn purge_method<B>(inner: &Inner, req: &Request<B>, absolute: bool) -> Response<Body> {
    if let Err(refusal) = authorised(inner, req) {
        return *refusal;
    }
    let url = match (absolute, &inner.settings.origin) {
        (true, _) => req.uri().to_string(),
        (false, Some(origin)) => format!(
            "http://{origin}{}",
            req.uri().path_and_query().map_or("/", |p| p.as_str())
        ),
        (false, None) => {
            return text(
                StatusCode::BAD_REQUEST,
                "PURGE needs an absolute URL on a forward proxy",
            )
        }
    };
    purge_url(inner, &url)
}

fn purge_url(inner: &Inner, url: &str) -> Response<Body> {
    let normalised = url
        .parse::<http::Uri>()
        .map(|u| u.to_string())
        .unwrap_or_else(|_| url.to_owned());
    if let Some(store) = &inner.store {
        store.remove(&normalised);
    }
    json(
        StatusCode::OK,
        &format!("{{\"purged_url\":{normalised:?}}}"),
    )
}

/// `Err` holds the refusal to send.
fn authorised<B>(inner: &Inner, req: &Request<B>) -> Result<(), Box<Response<Body>>> {
    let Some(token) = &inner.settings.purge_token else {
        return Err(Box::new(text(
            StatusCode::FORBIDDEN,
            "purging is disabled: set purge_token in the config",
        )));
    };
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| constant_time_eq(g.trim().as_bytes(), token.as_bytes())) {
        return Ok(());
    }
    let mut r = text(
        StatusCode::UNAUTHORIZED,
        "purging needs Authorization: Bearer TOKEN",
    );
    r.headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Err(Box::new(r))
}

/// Compares without leaking where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn json(status: StatusCode, body: &str) -> Response<Body> {
    let mut r = Response::new(Body::full(Bytes::from(format!("{body}\n"))));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn decode(v: &str) -> String {
    percent_encoding::percent_decode_str(&v.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}
