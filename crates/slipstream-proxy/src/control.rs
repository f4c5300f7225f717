//! The proxy's control endpoint, purging: by the PURGE method on a URL, or
//! `/_slipstream/purge?url=...` / `?surrogate-key=...`, with a bearer token. Metrics and the
//! status page come from the node layer.

use std::sync::Arc;

use async_trait::async_trait;
use http::header::{HeaderValue, ALLOW};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;
use slipstream_http::Body;
use slipstream_node::respond::{json, text};
use slipstream_node::Endpoint;

use crate::Inner;

/// `/_slipstream/purge`.
#[derive(Debug)]
pub(crate) struct Purge(pub(crate) Arc<Inner>);

#[async_trait]
impl Endpoint for Purge {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        let inner = &self.0;
        if !rest.is_empty() {
            return text(StatusCode::NOT_FOUND, "no such control endpoint");
        }
        if req.method() != Method::POST && req.method().as_str() != "PURGE" {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "purge with POST or PURGE");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST, PURGE"));
            return r;
        }
        if let Err(refusal) = authorised(inner, &req) {
            return *refusal;
        }
        let query = req.uri().query().unwrap_or("");
        let param = |name: &str| {
            form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        };
        if let Some(url) = param("url") {
            return purge_url(inner, &url);
        }
        if let Some(tag) = param("surrogate-key") {
            let n = inner.store.as_ref().map_or(0, |s| s.purge_tag(&tag));
            return json(
                StatusCode::OK,
                &json!({ "surrogate_key": tag, "purged_keys": n }),
            );
        }
        text(
            StatusCode::BAD_REQUEST,
            "purge needs ?url=URL or ?surrogate-key=TAG",
        )
    }
}

/// `PURGE /path` (reverse proxy) or `PURGE http://host/path`.
/// `absolute`: the request names another server (see `route::absolute_form`).
pub(crate) fn purge_method<B>(inner: &Inner, req: &Request<B>, absolute: bool) -> Response<Body> {
    if let Err(refusal) = authorised(inner, req) {
        return *refusal;
    }
    let url = match (absolute, &inner.settings.origin) {
        (true, _) => req.uri().to_string(),
        (false, Some(origin)) => format!(
            "{}://{origin}{}",
            inner.settings.origin_scheme,
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
    let removed = inner.store.as_ref().is_some_and(|s| s.remove(&normalised));
    if removed {
        json(StatusCode::OK, &json!({ "purged_url": normalised }))
    } else {
        // As Varnish and Squid answer: there was nothing to purge.
        json(
            StatusCode::NOT_FOUND,
            &json!({ "purged_url": normalised, "error": "not in this cache" }),
        )
    }
}

/// `Err` holds the refusal to send.
fn authorised<B>(inner: &Inner, req: &Request<B>) -> Result<(), Box<Response<Body>>> {
    slipstream_node::respond::bearer(
        req.headers(),
        inner.settings.purge_token.as_deref(),
        "purging is disabled: set purge_token in the config",
        "purging needs Authorization: Bearer TOKEN",
    )
}
