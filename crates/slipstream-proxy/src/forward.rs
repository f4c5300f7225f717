//! Requests the cache does not keep: forwarded with their body; a success invalidates what the
//! method changes (RFC 9111 §4.4). Also the answers for failed upstream exchanges.

use http::{Method, Response, StatusCode};
use hyper::body::Incoming;
use slipstream_http::{rfc9111, Body};
use slipstream_node::respond::text;
use slipstream_node::Ctx;

use crate::headers::{self, Status};
use crate::upstream::UpstreamError;
use crate::Inner;

/// Any method but a cached GET or HEAD: forwarded with its body.
pub(crate) async fn forward(
    inner: &Inner,
    ctx: &mut Ctx,
    parts: http::request::Parts,
    body: Option<Incoming>,
) -> Response<Body> {
    let up = headers::upstream_parts(&inner.settings.name, &parts);
    let keyed = crate::route::cache_key(inner, &parts);
    let method = parts.method.clone();
    let target = parts.uri.clone();
    let response = match inner.upstreams.send(ctx, &inner.phases, up, body).await {
        Ok(response) => response,
        Err(e) => return upstream_error(inner, &e),
    };
    if let Some(store) = &inner.store {
        let invalidated =
            rfc9111::invalidated(&method, response.status(), &target, response.headers());
        if !invalidated.is_empty() {
            // With keyed forwarding fields, the entry for this request's own values too.
            store.remove(&keyed);
        }
        for uri in invalidated {
            store.remove(&uri.to_string());
        }
    }
    let (mut res_parts, body) = response.into_parts();
    if ctx.upstream.as_deref() == Some(crate::upstream::PHASE) {
        // A phase supplied the response (a cooperative cache's hit): this proxy neither
        // forwarded it nor stored it, so the phase's own Cache-Status member speaks for it
        // rather than a `fwd=uri-miss` that would say the origin answered.
        headers::strip_hop_by_hop(&mut res_parts.headers);
        return Response::from_parts(res_parts, body);
    }
    let status = Status {
        fwd: Some(if method == Method::GET || method == Method::HEAD {
            "uri-miss"
        } else {
            "request"
        }),
        fwd_status: Some(res_parts.status.as_u16()),
        ..Status::default()
    };
    if !inner.phases.is_empty() {
        inner.phases.upstream_response_filter(ctx, &mut res_parts);
    }
    inner.metrics.miss(0);
    passthrough(inner, res_parts, body, status)
}

/// An upstream response streamed to the client unchanged but for hop-by-hop fields.
pub(crate) fn passthrough(
    inner: &Inner,
    parts: http::response::Parts,
    body: Body,
    status: Status,
) -> Response<Body> {
    // A body that stalls ends the response instead of holding the client forever.
    let body = slipstream_node::body::idle_timeout(body, inner.upstreams.timeout());
    let mut response = Response::from_parts(parts, body);
    finish_forwarded(inner, &mut response, status);
    response
}

pub(crate) fn finish_forwarded(inner: &Inner, response: &mut Response<Body>, status: Status) {
    headers::strip_hop_by_hop(response.headers_mut());
    status.apply(response.headers_mut(), &inner.settings.name);
}

/// 502 or 504 saying what kind of failure it was. Which upstream failed, and how, goes to the
/// log only: a client is not told the addresses behind the proxy nor its HTTP stack's errors.
pub(crate) fn upstream_error(inner: &Inner, e: &UpstreamError) -> Response<Body> {
    if let UpstreamError::Refused { .. } = e {
        tracing::info!(error = %e.chain(), "forward-proxy target refused");
        return refused_destination();
    }
    inner.metrics.upstream_error(e);
    tracing::warn!(error = %e.chain(), "answering with an upstream error");
    let (status, message) = match e {
        UpstreamError::Timeout { .. } => (
            StatusCode::GATEWAY_TIMEOUT,
            "gateway timeout: the upstream server did not answer in time",
        ),
        UpstreamError::Connect { .. } => (
            StatusCode::BAD_GATEWAY,
            "bad gateway: the proxy could not connect to the upstream server",
        ),
        UpstreamError::Protocol { .. } => (
            StatusCode::BAD_GATEWAY,
            "bad gateway: the upstream server sent an invalid or incomplete response",
        ),
        UpstreamError::NoUpstream => (
            StatusCode::BAD_GATEWAY,
            "bad gateway: no upstream server to send the request to",
        ),
        UpstreamError::Refused { .. } => return refused_destination(),
    };
    let mut r = text(status, message);
    Status {
        fwd: Some("uri-miss"),
        detail: Some("upstream-error"),
        ..Status::default()
    }
    .apply(r.headers_mut(), &inner.settings.name);
    r
}

/// 403 for a forward-proxy target the access rules refuse: the same short answer for every
/// reason, so that it tells a client nothing about the addresses behind a name.
pub(crate) fn refused_destination() -> Response<Body> {
    text(
        StatusCode::FORBIDDEN,
        "forbidden: this proxy does not connect to that destination",
    )
}
