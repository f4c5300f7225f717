//! The entry of the request path: PURGE, loops, CONNECT, the request's target, the request
//! filters, then the cache (GET and HEAD) or plain forwarding (anything else), and the response
//! phases on the way out.

use std::net::SocketAddr;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode, Uri};
use http_body::Body as _;
use hyper::body::Incoming;
use slipstream_http::Body;
use slipstream_node::respond::text;
use slipstream_node::Ctx;

use crate::{cached, control, forward, headers, Inner};

pub(crate) async fn handle(
    inner: &Arc<Inner>,
    req: Request<Incoming>,
    peer: SocketAddr,
    arrived: std::time::Instant,
) -> Response<Body> {
    let name = inner.settings.name.as_str();
    if !headers::host_ok(req.headers()) {
        return text(
            StatusCode::BAD_REQUEST,
            "invalid Host field (RFC 9110 §7.2)",
        );
    }
    let absolute = absolute_form(inner, &req);
    // The forward proxy serves only the clients it is for (`allow_clients`), before it does
    // anything else for them.
    let forward_request = absolute || req.method() == Method::CONNECT;
    if forward_request && inner.settings.forward && !inner.settings.access.client_allowed(peer.ip())
    {
        tracing::info!(client = %peer.ip(), "forward-proxy client not in allow_clients");
        return text(
            StatusCode::FORBIDDEN,
            "forbidden: this proxy does not serve your address",
        );
    }
    if req.method().as_str() == "PURGE" {
        return control::purge_method(inner, &req, absolute);
    }
    if headers::looped(req.headers(), name) {
        return text(
            StatusCode::LOOP_DETECTED,
            &format!("loop detected: this request already passed through {name}"),
        );
    }
    if req.method() == Method::CONNECT {
        return crate::tunnel::connect(inner, req).await;
    }
    let target = match target(inner, req.uri(), absolute) {
        Ok(t) => t,
        Err(response) => return *response,
    };
    let mut ctx = Ctx::new(peer, arrived);
    let (mut parts, body) = req.into_parts();
    parts.uri = target;
    if inner.settings.forwarded == crate::config::Forwarded::Strip {
        headers::strip_forwarded(&mut parts.headers);
    }
    if !inner.phases.is_empty() {
        if let Some(response) = inner.phases.request_filter(&mut ctx, &mut parts).await {
            return inner.phases.respond(&mut ctx, response);
        }
    }
    // A body known to be empty, or on GET/HEAD (where content has no meaning, RFC 9110 §9.3.1),
    // is not forwarded, so the request stays repeatable for fail-over between upstreams.
    let body =
        (!(body.is_end_stream() || parts.method == Method::GET || parts.method == Method::HEAD))
            .then_some(body);
    let cacheable =
        inner.store.is_some() && (parts.method == Method::GET || parts.method == Method::HEAD);
    let mut response = if cacheable {
        cached::cached(inner, &mut ctx, parts).await
    } else {
        forward::forward(inner, &mut ctx, parts, body).await
    };
    headers::add_via(response.headers_mut(), name);
    inner.phases.respond(&mut ctx, response)
}

/// Whether a request names another server (a forward-proxy request). In HTTP/1.1 that is the
/// absolute form (RFC 9112 §3.2.2). Every HTTP/2 request carries `:scheme` and `:authority`
/// (RFC 9113 §8.3.1), so there it means: this proxy has no origin of its own.
pub(crate) fn absolute_form<B>(inner: &Inner, req: &Request<B>) -> bool {
    match req.version() {
        http::Version::HTTP_2 | http::Version::HTTP_3 => inner.settings.origin.is_none(),
        _ => req.uri().scheme().is_some(),
    }
}

/// The absolute URI a request is for; `Err` holds the refusal to send.
fn target(inner: &Inner, uri: &Uri, absolute: bool) -> Result<Uri, Box<Response<Body>>> {
    if absolute {
        if !inner.settings.forward {
            return Err(Box::new(text(
                StatusCode::FORBIDDEN,
                "this is a reverse proxy: absolute-form requests are not forwarded",
            )));
        }
        if uri.scheme_str() != Some("http") {
            return Err(Box::new(text(
                StatusCode::BAD_REQUEST,
                "only http:// targets can be proxied",
            )));
        }
        return Ok(uri.clone());
    }
    let Some(origin) = &inner.settings.origin else {
        return Err(Box::new(text(
            StatusCode::BAD_REQUEST,
            "this is a forward proxy: send requests in absolute form (http://host/path)",
        )));
    };
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let scheme = &inner.settings.origin_scheme;
    format!("{scheme}://{origin}{path}")
        .parse()
        .map_err(|_| Box::new(text(StatusCode::BAD_REQUEST, "malformed request target")))
}

/// The store's key for a request: its target URI, with the forwarding fields when they are keyed
/// (`forwarded = "key"`).
pub(crate) fn cache_key(inner: &Inner, parts: &http::request::Parts) -> String {
    let uri = parts.uri.to_string();
    match inner.settings.forwarded {
        crate::config::Forwarded::Key => headers::keyed_forwarded(&uri, &parts.headers),
        _ => uri,
    }
}
