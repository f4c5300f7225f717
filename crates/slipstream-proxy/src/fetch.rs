//! The request path: routing, the cache, collapsed fetches, forwarding and invalidation.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{
    HeaderValue, HOST, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE,
    RANGE,
};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use slipstream_http::{rfc9111, Body};

use crate::collapse::{self, Join, Outcome};
use crate::headers::{self, Status};
use crate::store::{self, Stored};
use crate::upstream::UpstreamError;
use crate::{control, partial, respond, text, Inner, CONTROL_PREFIX};

pub(crate) async fn handle(inner: &Arc<Inner>, req: Request<Incoming>) -> Response<Body> {
    let name = inner.settings.name.as_str();
    let absolute = absolute_form(inner, &req);
    if !absolute {
        if let Some(what) = req
            .uri()
            .path()
            .strip_prefix(CONTROL_PREFIX)
            .map(str::to_owned)
        {
            return control::handle(inner, &what, req).await;
        }
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
    let (mut parts, body) = req.into_parts();
    parts.uri = target;
    // A body known to be empty, or on GET/HEAD (where content has no meaning, RFC 9110 §9.3.1),
    // is not forwarded, so the request stays repeatable for fail-over between parents.
    let body =
        (!(body.is_end_stream() || parts.method == Method::GET || parts.method == Method::HEAD))
            .then_some(body);
    let cacheable =
        inner.store.is_some() && (parts.method == Method::GET || parts.method == Method::HEAD);
    let mut response = if cacheable {
        cached(inner, parts).await
    } else {
        forward(inner, parts, body).await
    };
    headers::add_via(response.headers_mut(), name);
    response
}

/// Whether a request names another server (a forward-proxy request). In HTTP/1.1 that is the
/// absolute form (RFC 9112 §3.2.2). Every HTTP/2 request carries `:scheme` and `:authority`
/// (RFC 9113 §8.3.1), so there it means: this proxy has no origin of its own.
fn absolute_form<B>(inner: &Inner, req: &Request<B>) -> bool {
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
    format!("http://{origin}{path}")
        .parse()
        .map_err(|_| Box::new(text(StatusCode::BAD_REQUEST, "malformed request target")))
}

/// The request as it goes upstream: hop-by-hop fields removed, Via added, Host set to the target.
pub(crate) fn upstream_parts(inner: &Inner, parts: &http::request::Parts) -> http::request::Parts {
    let mut up = Request::new(());
    *up.method_mut() = parts.method.clone();
    *up.uri_mut() = parts.uri.clone();
    let (mut up, ()) = up.into_parts();
    up.headers = parts.headers.clone();
    headers::strip_hop_by_hop(&mut up.headers);
    headers::add_via(&mut up.headers, &inner.settings.name);
    if let Some(authority) = parts.uri.authority() {
        if let Ok(v) = HeaderValue::from_str(authority.as_str()) {
            up.headers.insert(HOST, v);
        }
    }
    up
}

/// The request as it goes upstream for a full response to store: without the client's
/// preconditions and ranges, which this proxy answers itself from the stored response.
pub(crate) fn plain_upstream_parts(
    inner: &Inner,
    parts: &http::request::Parts,
) -> http::request::Parts {
    let mut up = upstream_parts(inner, parts);
    for name in [
        IF_NONE_MATCH,
        IF_MODIFIED_SINCE,
        IF_MATCH,
        IF_UNMODIFIED_SINCE,
        IF_RANGE,
        RANGE,
    ] {
        up.headers.remove(name);
    }
    up
}

/// A GET or HEAD through the cache.
async fn cached(inner: &Arc<Inner>, parts: http::request::Parts) -> Response<Body> {
    let Some(store) = &inner.store else {
        return forward(inner, parts, None).await;
    };
    let key = parts.uri.to_string();
    let now = SystemTime::now();
    let mut status = Status::default();
    let found = store.find(&key, &parts.headers);
    if matches!(found, store::Found::VaryMiss) {
        status.fwd = Some("vary-miss");
    }
    if let store::Found::Variant(stored) = found {
        match stored.policy.evaluate(&parts, now) {
            rfc9111::Reuse::Fresh => {
                if stored.complete() {
                    inner.metrics.hit(stored.body.len());
                }
                return served(
                    inner,
                    &stored,
                    &parts,
                    Status {
                        hit: true,
                        ..Status::default()
                    },
                );
            }
            rfc9111::Reuse::StaleWhileRevalidate => {
                if stored.complete() {
                    inner.metrics.hit(stored.body.len());
                }
                let (inner2, parts2, stored2) = (inner.clone(), parts.clone(), stored.clone());
                tokio::spawn(async move { revalidate(&inner2, &parts2, &stored2).await });
                return served(
                    inner,
                    &stored,
                    &parts,
                    Status {
                        hit: true,
                        detail: Some("stale-while-revalidate"),
                        ..Status::default()
                    },
                );
            }
            rfc9111::Reuse::Validate(conditional) => {
                return validate(inner, &parts, &stored, conditional).await;
            }
            rfc9111::Reuse::Mismatch => status.fwd = Some("vary-miss"),
        }
    }
    if rfc9111::only_if_cached(&parts.headers) {
        // RFC 9111 §5.2.1.7.
        return text(
            StatusCode::GATEWAY_TIMEOUT,
            "only-if-cached: not in this cache",
        );
    }
    status.fwd.get_or_insert("uri-miss");
    if parts.method == Method::HEAD {
        // A HEAD response has no body to store; a later GET fills the cache.
        return forward(inner, parts, None).await;
    }
    match inner.collapser.join(&key) {
        Join::Leader(leader) => {
            let (response, stored) = fetch(inner, &parts, &key, status).await;
            leader.finish(stored.map_or(Outcome::Alone, Outcome::Stored));
            response
        }
        Join::Follower(rx) => match collapse::wait(rx).await {
            Outcome::Stored(stored)
                if rfc9111::vary_key(&stored.headers, &parts.headers).as_deref()
                    == Some(stored.vary_key.as_str()) =>
            {
                inner.metrics.collapsed();
                served(
                    inner,
                    &stored,
                    &parts,
                    Status {
                        fwd: status.fwd,
                        collapsed: true,
                        ..Status::default()
                    },
                )
            }
            _ => fetch(inner, &parts, &key, status).await.0,
        },
        Join::Overflow => fetch(inner, &parts, &key, status).await.0,
    }
}

/// The answer from a stored response, with this node's Cache-Status.
fn served(
    inner: &Arc<Inner>,
    stored: &Arc<Stored>,
    parts: &http::request::Parts,
    mut status: Status,
) -> Response<Body> {
    let now = SystemTime::now();
    if status.hit {
        status.ttl = Some(stored.policy.time_to_live(now).as_secs() as i64);
    }
    let mut response = if stored.complete() {
        respond::from_stored(stored, &parts.method, &parts.headers, now)
    } else {
        status.detail = status.detail.or(Some("partial"));
        partial::from_chunk(inner, stored, parts, now)
    };
    status.apply(response.headers_mut(), &inner.settings.name);
    response
}

/// Fetches `parts` upstream without client preconditions or ranges (so that a full response can
/// be stored), stores it if allowed, and answers the client. Returns the stored response too.
async fn fetch(
    inner: &Arc<Inner>,
    parts: &http::request::Parts,
    key: &str,
    mut status: Status,
) -> (Response<Body>, Option<Arc<Stored>>) {
    let up = plain_upstream_parts(inner, parts);
    let sent = up.clone();
    let response = match inner.upstreams.send(up, None).await {
        Ok(response) => response,
        Err(e) => return (upstream_error(inner, &e), None),
    };
    status.fwd_status = Some(response.status().as_u16());
    let (res_parts, body) = response.into_parts();
    let now = SystemTime::now();
    let policy = policy_for(inner, &sent, &res_parts, now);
    let length = content_length(&res_parts.headers);
    let fits =
        |n: u64| n >= inner.settings.min_object_bytes && n <= inner.settings.max_object_bytes;
    // Paper 002's adaptive level: too large to keep whole, so keep the first chunk while the
    // response streams to the client. Needs a known length and a validator for the Range
    // request that later fetches the rest.
    if let (Some(total), Some(policy), Some(vary_key)) = (
        length,
        &policy,
        rfc9111::vary_key(&res_parts.headers, &parts.headers),
    ) {
        if total > inner.settings.max_object_bytes
            && inner.settings.chunk_bytes > 0
            && res_parts.status == StatusCode::OK
            && partial::has_validator(&res_parts.headers)
        {
            inner.metrics.miss(total as usize);
            let response = partial::tee(
                inner,
                key,
                res_parts,
                body,
                policy.clone(),
                vary_key,
                total,
                status,
            );
            return (response, None);
        }
    }
    let (Some(policy), Some(vary_key), true) = (
        policy,
        rfc9111::vary_key(&res_parts.headers, &parts.headers),
        length.is_none_or(fits),
    ) else {
        inner.metrics.miss(0);
        return (passthrough(inner, res_parts, body, status), None);
    };
    // Store: read the whole body, within the size bound and the per-chunk timeout.
    let body = match collect(
        body,
        inner.settings.max_object_bytes,
        inner.upstreams.timeout(),
    )
    .await
    {
        Ok(Collected::Whole(bytes)) if fits(bytes.len() as u64) => bytes,
        Ok(other) => {
            // Outside the size rules (e.g. a chunked body that grew past the limit): the client
            // gets everything, nothing is stored.
            inner.metrics.miss(0);
            let mut r = Response::from_parts(res_parts, other.into_body());
            finish_forwarded(inner, &mut r, status);
            return (r, None);
        }
        Err(e) => return (upstream_error(inner, &e), None),
    };
    inner.metrics.miss(body.len());
    let mut stored_headers = res_parts.headers.clone();
    headers::strip_hop_by_hop(&mut stored_headers);
    let surrogate_keys: Vec<String> = res_parts
        .headers
        .get_all("surrogate-key")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    let stored = Stored {
        status: res_parts.status,
        headers: stored_headers,
        total_len: body.len() as u64,
        body,
        policy,
        vary_key,
    };
    let admitted = inner
        .store
        .as_ref()
        .is_some_and(|s| s.put(key, stored.clone(), &surrogate_keys));
    status.stored = admitted;
    let stored = Arc::new(stored);
    (
        served(inner, &stored, parts, status),
        admitted.then_some(stored),
    )
}

/// The caching rules for a response, or `None` when this proxy must not store it: RFC 9111's
/// rules, and one of ours. A response that sets a cookie is not stored even when RFC 9111 would
/// allow it, because a shared cache would hand one user's cookie to others (Varnish's default
/// does the same).
fn policy_for(
    inner: &Inner,
    sent: &http::request::Parts,
    res: &http::response::Parts,
    now: SystemTime,
) -> Option<rfc9111::Policy> {
    if res.headers.contains_key(http::header::SET_COOKIE) {
        return None;
    }
    rfc9111::Policy::new(sent, res, now, &inner.rules)
}

/// RFC 9111 §4.3: a conditional request for a stored response that must be validated.
async fn validate(
    inner: &Arc<Inner>,
    parts: &http::request::Parts,
    stored: &Arc<Stored>,
    conditional: HeaderMap,
) -> Response<Body> {
    let status = Status {
        fwd: Some("stale"),
        ..Status::default()
    };
    match send_conditional(inner, parts, stored, conditional).await {
        Ok(Revalidated::Same(fresh)) => {
            inner.metrics.revalidated();
            served(
                inner,
                &fresh,
                parts,
                Status {
                    fwd_status: Some(304),
                    ..status
                },
            )
        }
        Ok(Revalidated::Changed(response)) => response,
        Err(e) if stored.policy.stale_if_error(parts, SystemTime::now()) => {
            // RFC 5861 §4.
            tracing::debug!(error = %e, "serving stale on error");
            if stored.complete() {
                inner.metrics.hit(stored.body.len());
            }
            served(
                inner,
                stored,
                parts,
                Status {
                    hit: true,
                    detail: Some("stale-if-error"),
                    ..Status::default()
                },
            )
        }
        Err(e) => upstream_error(inner, &e),
    }
}

enum Revalidated {
    /// 304: the stored response, updated.
    Same(Arc<Stored>),
    /// Anything else: the new response, already answered (and stored if allowed).
    Changed(Response<Body>),
}

async fn send_conditional(
    inner: &Arc<Inner>,
    parts: &http::request::Parts,
    stored: &Arc<Stored>,
    conditional: HeaderMap,
) -> Result<Revalidated, UpstreamError> {
    let mut up = plain_upstream_parts(inner, parts);
    up.method = Method::GET;
    for (name, value) in &conditional {
        up.headers.insert(name.clone(), value.clone());
    }
    let sent = up.clone();
    let response = inner.upstreams.send(up, None).await?;
    if response.status().is_server_error() && stored.policy.stale_if_error(parts, SystemTime::now())
    {
        return Err(UpstreamError::Protocol {
            upstream: "upstream".into(),
            message: format!("status {}", response.status()),
        });
    }
    let key = parts.uri.to_string();
    // RFC 9111 §4.3.4: the 304 answers the conditional request we sent for this one stored
    // response (we send one response's validators), so it selects that response; its ETag and
    // the other fields of §3.2's exclusions do not replace the stored ones.
    if response.status() == StatusCode::NOT_MODIFIED {
        let (res_parts, _) = response.into_parts();
        let (policy, headers) = stored.policy.revalidated(
            &sent,
            &res_parts,
            &stored.headers,
            SystemTime::now(),
            &inner.rules,
        );
        let fresh = Stored {
            status: stored.status,
            headers,
            body: stored.body.clone(),
            total_len: stored.total_len,
            policy,
            vary_key: stored.vary_key.clone(),
        };
        if let Some(store) = &inner.store {
            store.put(&key, fresh.clone(), &[]);
        }
        return Ok(Revalidated::Same(Arc::new(fresh)));
    }
    Ok(Revalidated::Changed(
        replace(inner, parts, &sent, response, &key).await?,
    ))
}

/// A full response that replaces the stored one: stored if allowed, else the old one is dropped.
async fn replace(
    inner: &Arc<Inner>,
    parts: &http::request::Parts,
    sent: &http::request::Parts,
    response: Response<Incoming>,
    key: &str,
) -> Result<Response<Body>, UpstreamError> {
    let (res_parts, body) = response.into_parts();
    let status = Status {
        fwd: Some("stale"),
        fwd_status: Some(res_parts.status.as_u16()),
        ..Status::default()
    };
    let policy = policy_for(inner, sent, &res_parts, SystemTime::now());
    let vary_key = rfc9111::vary_key(&res_parts.headers, &parts.headers);
    let (Some(policy), Some(vary_key)) = (policy, vary_key) else {
        if let Some(store) = &inner.store {
            store.remove(key);
        }
        return Ok(passthrough(inner, res_parts, body, status));
    };
    let bytes = match collect(
        body,
        inner.settings.max_object_bytes,
        inner.upstreams.timeout(),
    )
    .await?
    {
        Collected::Whole(bytes) => bytes,
        over => {
            if let Some(store) = &inner.store {
                store.remove(key);
            }
            let mut r = Response::from_parts(res_parts, over.into_body());
            finish_forwarded(inner, &mut r, status);
            return Ok(r);
        }
    };
    let mut stored_headers = res_parts.headers.clone();
    headers::strip_hop_by_hop(&mut stored_headers);
    let fresh = Stored {
        status: res_parts.status,
        headers: stored_headers,
        total_len: bytes.len() as u64,
        body: bytes,
        policy,
        vary_key,
    };
    let admitted = inner
        .store
        .as_ref()
        .is_some_and(|s| s.put(key, fresh.clone(), &[]));
    Ok(served(
        inner,
        &Arc::new(fresh),
        parts,
        Status {
            stored: admitted,
            ..status
        },
    ))
}

/// Background revalidation for stale-while-revalidate (RFC 5861 §3), collapsed per key.
async fn revalidate(inner: &Arc<Inner>, parts: &http::request::Parts, stored: &Arc<Stored>) {
    let key = format!("revalidate {}", parts.uri);
    let Join::Leader(leader) = inner.collapser.join(&key) else {
        return;
    };
    let conditional = stored.policy.conditional_headers();
    if let Err(e) = send_conditional(inner, parts, stored, conditional).await {
        tracing::debug!(error = %e, "background revalidation failed");
    }
    leader.finish(Outcome::Alone);
}

/// Any other method: forwarded with its body; a success invalidates the target (RFC 9111 §4.4).
async fn forward(
    inner: &Inner,
    parts: http::request::Parts,
    body: Option<Incoming>,
) -> Response<Body> {
    let up = upstream_parts(inner, &parts);
    let method = parts.method.clone();
    let target = parts.uri.clone();
    let response = match inner.upstreams.send(up, body).await {
        Ok(response) => response,
        Err(e) => return upstream_error(inner, &e),
    };
    if let Some(store) = &inner.store {
        for uri in rfc9111::invalidated(&method, response.status(), &target, response.headers()) {
            store.remove(&uri.to_string());
        }
    }
    let status = Status {
        fwd: Some(if method == Method::GET || method == Method::HEAD {
            "uri-miss"
        } else {
            "request"
        }),
        fwd_status: Some(response.status().as_u16()),
        ..Status::default()
    };
    let (res_parts, body) = response.into_parts();
    inner.metrics.miss(0);
    passthrough(inner, res_parts, body, status)
}

/// An upstream response streamed to the client unchanged but for hop-by-hop fields.
fn passthrough(
    inner: &Inner,
    parts: http::response::Parts,
    body: Incoming,
    status: Status,
) -> Response<Body> {
    let body = body.map_err(std::io::Error::other);
    let mut response = Response::from_parts(parts, Body::stream(body));
    finish_forwarded(inner, &mut response, status);
    response
}

pub(crate) fn finish_forwarded(inner: &Inner, response: &mut Response<Body>, status: Status) {
    headers::strip_hop_by_hop(response.headers_mut());
    status.apply(response.headers_mut(), &inner.settings.name);
}

/// A body read for storing.
enum Collected {
    /// The whole body, within the limit.
    Whole(Bytes),
    /// Larger than the limit: what was read, and the rest still to come.
    Over(Bytes, Incoming),
}

impl Collected {
    /// The body for a client that gets it without storing: the bytes read, then the rest.
    fn into_body(self) -> Body {
        match self {
            Collected::Whole(bytes) => Body::full(bytes),
            Collected::Over(head, rest) => {
                use futures_util::{StreamExt, TryStreamExt};
                let rest = rest.into_data_stream().map_err(std::io::Error::other);
                let stream = futures_util::stream::iter([Ok(head)]).chain(rest);
                Body::stream(http_body_util::StreamBody::new(
                    stream.map_ok(hyper::body::Frame::data),
                ))
            }
        }
    }
}

/// Reads a body for storing, up to `limit` bytes; a chunk slower than `timeout` fails.
async fn collect(
    mut body: Incoming,
    limit: u64,
    timeout: std::time::Duration,
) -> Result<Collected, UpstreamError> {
    let mut out = Vec::new();
    loop {
        let frame = match tokio::time::timeout(timeout, body.frame()).await {
            Err(_) => {
                return Err(UpstreamError::Timeout {
                    upstream: "upstream body".into(),
                    timeout,
                })
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(UpstreamError::Protocol {
                    upstream: "upstream body".into(),
                    message: e.to_string(),
                })
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
            if out.len() as u64 > limit {
                return Ok(Collected::Over(Bytes::from(out), body));
            }
        }
    }
    Ok(Collected::Whole(Bytes::from(out)))
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// 502 or 504 with a message saying which upstream failed and how.
fn upstream_error(inner: &Inner, e: &UpstreamError) -> Response<Body> {
    inner.metrics.upstream_error(e);
    let status = match e {
        UpstreamError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_GATEWAY,
    };
    let mut r = text(status, &e.to_string());
    Status {
        fwd: Some("uri-miss"),
        detail: Some("upstream-error"),
        ..Status::default()
    }
    .apply(r.headers_mut(), &inner.settings.name);
    r
}
