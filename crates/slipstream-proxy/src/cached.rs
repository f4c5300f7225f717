//! GET and HEAD through the cache: lookup, freshness (RFC 9111 §4.2), collapsed fetches,
//! storing, validation (§4.3), stale-while-revalidate and stale-if-error (RFC 5861).

use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderMap, Method, Response, StatusCode};
use slipstream_http::{rfc9111, Body};
use slipstream_node::phase::CacheOutcome;
use slipstream_node::respond::text;
use slipstream_node::Ctx;

use crate::collapse::{self, Join, Outcome};
use crate::collect::{self, collect, content_length, Collected};
use crate::forward::{finish_forwarded, forward, passthrough, upstream_error};
use crate::headers::{self, Status};
use crate::inflight::{Buffer, Held};
use crate::store::{self, Stored};
use crate::upstream::UpstreamError;
use crate::{deception, partial, respond, Inner};

/// A GET or HEAD through the cache.
pub(crate) async fn cached(
    inner: &Arc<Inner>,
    ctx: &mut Ctx,
    parts: http::request::Parts,
) -> Response<Body> {
    let Some(store) = &inner.store else {
        return forward(inner, ctx, parts, None).await;
    };
    let key = crate::route::cache_key(inner, &parts);
    let now = inner.clock.now();
    let mut status = Status::default();
    let found = store.find(&key, &parts.headers);
    if matches!(found, store::Found::VaryMiss) {
        status.fwd = Some("vary-miss");
    }
    if let store::Found::Variant(stored) = found {
        let reuse = stored.policy.evaluate(&parts, now);
        if !inner.phases.is_empty() {
            let outcome = match reuse {
                rfc9111::Reuse::Fresh => CacheOutcome::Hit,
                rfc9111::Reuse::Mismatch => CacheOutcome::Miss,
                _ => CacheOutcome::Stale,
            };
            inner.phases.cache_lookup(ctx, &key, outcome);
        }
        match reuse {
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
                let peer = ctx.peer;
                tokio::spawn(async move { revalidate(&inner2, peer, &parts2, &stored2).await });
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
                return validate(inner, ctx, &parts, &stored, conditional).await;
            }
            rfc9111::Reuse::Mismatch => status.fwd = Some("vary-miss"),
        }
    } else if !inner.phases.is_empty() {
        inner.phases.cache_lookup(ctx, &key, CacheOutcome::Miss);
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
        return forward(inner, ctx, parts, None).await;
    }
    // A follower waits for the leader's response at most this long, then fetches alone.
    let patience = inner.settings.store_deadline + inner.upstreams.timeout();
    match inner.collapser.join(&key) {
        Join::Leader(leader) => {
            let mut leader = Some(leader);
            let (response, stored) = fetch(inner, ctx, &parts, &key, status, &mut leader).await;
            // Unless the body is being stored as it streams, which then finishes the flight.
            if let Some(leader) = leader {
                leader.finish(stored.map_or(Outcome::Alone, Outcome::Stored));
            }
            response
        }
        Join::Follower(rx) => match collapse::wait(rx, patience).await {
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
            _ => fetch(inner, ctx, &parts, &key, status, &mut None).await.0,
        },
        Join::Overflow => fetch(inner, ctx, &parts, &key, status, &mut None).await.0,
    }
}

/// The answer from a stored response, with this node's Cache-Status.
fn served(
    inner: &Arc<Inner>,
    stored: &Arc<Stored>,
    parts: &http::request::Parts,
    mut status: Status,
) -> Response<Body> {
    let now = inner.clock.now();
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

/// A cacheable body of a plain GET (no Range, no precondition) larger than this, or of unknown
/// length, streams to its client as it is read, a copy teed to the store; a smaller one, or
/// one for a request the stored response must answer (a range, a 304), is read whole first.
pub const TEE_ABOVE: u64 = 256 * 1024;

/// Fetches `parts` upstream without client preconditions or ranges (so that a full response can
/// be stored), stores it if allowed, and answers the client. Returns the stored response too,
/// unless it takes `leader` to finish once a teed body is stored.
async fn fetch(
    inner: &Arc<Inner>,
    ctx: &mut Ctx,
    parts: &http::request::Parts,
    key: &str,
    mut status: Status,
    leader: &mut Option<collapse::Leader>,
) -> (Response<Body>, Option<Arc<Stored>>) {
    let up = headers::plain_upstream_parts(&inner.settings.name, parts);
    let sent = up.clone();
    let response = match inner.upstreams.send(ctx, &inner.phases, up, None).await {
        Ok(response) => response,
        Err(e) => {
            forget(inner, key);
            return (upstream_error(inner, &e), None);
        }
    };
    status.fwd_status = Some(response.status().as_u16());
    let (mut res_parts, body) = response.into_parts();
    if !inner.phases.is_empty() {
        inner.phases.upstream_response_filter(ctx, &mut res_parts);
    }
    let now = inner.clock.now();
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
        forget(inner, key);
        return (passthrough(inner, res_parts, body, status), None);
    };
    // Store: within the size bound and the in-flight budget.
    let buffer = match Buffer::new(&inner.inflight, inner.settings.max_object_bytes, length) {
        Ok(buffer) => buffer,
        Err(why) => {
            inner.metrics.skipped(why);
            inner.metrics.miss(0);
            return (passthrough(inner, res_parts, body, status), None);
        }
    };
    // A response with no body to stream (a 204, an empty one) is stored at once: a client
    // connection may never ask for its end.
    let empty = res_parts.status == StatusCode::NO_CONTENT || http_body::Body::is_end_stream(&body);
    if plain(&parts.headers) && !empty && length.is_none_or(|n| n > TEE_ABOVE) {
        inner.metrics.miss(length.unwrap_or(0) as usize);
        let response = teed(
            inner,
            key,
            leader.take(),
            res_parts,
            body,
            buffer,
            (policy, vary_key),
            length,
            status,
        );
        return (response, None);
    }
    // Read the whole body first, within the per-chunk timeout and the deadline for storing.
    let (body, charge) = match collect(
        body,
        buffer,
        inner.upstreams.timeout(),
        inner.settings.store_deadline,
    )
    .await
    {
        Ok(Collected::Whole(bytes, charge)) if fits(bytes.len() as u64) => (bytes, charge),
        Ok(other) => {
            // Outside the size rules (e.g. a chunked body that grew past the limit), refused
            // by the budget, or too slow to wait for: the client gets everything, nothing is
            // stored.
            if let Collected::Over(_, _, _, why) = &other {
                inner.metrics.skipped(*why);
            }
            inner.metrics.miss(0);
            let mut r = Response::from_parts(res_parts, other.into_body(inner.upstreams.timeout()));
            finish_forwarded(inner, &mut r, status);
            return (r, None);
        }
        Err(e) => {
            forget(inner, key);
            return (upstream_error(inner, &e), None);
        }
    };
    inner.metrics.miss(body.len());
    let mut stored_headers = res_parts.headers.clone();
    headers::strip_hop_by_hop(&mut stored_headers);
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
        .is_some_and(|s| s.put(key, stored.clone()));
    status.stored = admitted;
    let stored = Arc::new(stored);
    (
        held(served(inner, &stored, parts, status), charge),
        admitted.then_some(stored),
    )
}

/// `response` with its body keeping `charge` until the client has it.
fn held(response: Response<Body>, charge: crate::inflight::Charge) -> Response<Body> {
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, Body::stream(Held::new(body, charge)))
}

/// Whether the client's request is answered by the whole response as it is: no Range and no
/// precondition, which only the stored response can evaluate.
fn plain(headers: &HeaderMap) -> bool {
    use http::header::{
        IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE, RANGE,
    };
    ![
        RANGE,
        IF_RANGE,
        IF_MATCH,
        IF_NONE_MATCH,
        IF_MODIFIED_SINCE,
        IF_UNMODIFIED_SINCE,
    ]
    .iter()
    .any(|h| headers.contains_key(h))
}

/// A miss answered as it streams, its body teed to the store (see [`collect::tee`]); the
/// leader's followers get the stored response once the body is whole. Its Cache-Status cannot
/// say `stored`: that is decided after the head is sent.
#[allow(clippy::too_many_arguments)]
fn teed(
    inner: &Arc<Inner>,
    key: &str,
    leader: Option<collapse::Leader>,
    res_parts: http::response::Parts,
    body: Body,
    buffer: Buffer,
    (policy, vary_key): (rfc9111::Policy, String),
    length: Option<u64>,
    status: Status,
) -> Response<Body> {
    let mut stored_headers = res_parts.headers.clone();
    headers::strip_hop_by_hop(&mut stored_headers);
    let mut head = policy.response_headers(&stored_headers, inner.clock.now());
    if let Some(n) = length {
        head.insert(http::header::CONTENT_LENGTH, n.into());
    }
    let (inner2, key2, code) = (inner.clone(), key.to_owned(), res_parts.status);
    let stored = move |bytes: bytes::Bytes| {
        let stored = Stored {
            status: code,
            headers: stored_headers,
            total_len: bytes.len() as u64,
            body: bytes,
            policy,
            vary_key,
        };
        let admitted = stored.total_len >= inner2.settings.min_object_bytes
            && inner2
                .store
                .as_ref()
                .is_some_and(|s| s.put(&key2, stored.clone()));
        if let Some(leader) = leader {
            leader.finish(if admitted {
                Outcome::Stored(Arc::new(stored))
            } else {
                Outcome::Alone
            });
        }
    };
    let body = slipstream_node::body::idle_timeout(body, inner.upstreams.timeout());
    let mut response = Response::new(collect::tee(inner, body, buffer, length, stored));
    *response.status_mut() = res_parts.status;
    *response.headers_mut() = head;
    status.apply(response.headers_mut(), &inner.settings.name);
    response
}

/// Forgets what the store counted for `key` when its response could not be stored at all (an
/// error, a 404, `no-store`), so that requests for made-up URLs leave nothing behind. A response
/// the admission rule refused keeps its count.
fn forget(inner: &Inner, key: &str) {
    if let Some(store) = &inner.store {
        store.forget(key);
    }
}

/// The caching rules for a response, or `None` when this proxy must not store it: RFC 9111's
/// rules, and some of ours. Unless `store_set_cookie` is on, a response that sets a cookie is not
/// stored even when RFC 9111 would allow it, because a shared cache would hand one user's cookie
/// to others (Varnish's default does the same). The rules against web cache deception
/// (`deception.rs`): with `deception_armor`, a response whose Content-Type disagrees with its
/// URL's extension is not stored; unless `heuristic_with_credentials` is on, a response to a
/// request with credentials is stored only with explicit freshness.
fn policy_for(
    inner: &Inner,
    sent: &http::request::Parts,
    res: &http::response::Parts,
    now: SystemTime,
) -> Option<rfc9111::Policy> {
    if !inner.settings.store_set_cookie && res.headers.contains_key(http::header::SET_COOKIE) {
        return None;
    }
    if inner.settings.deception_armor && deception::armor_refuses(sent.uri.path(), &res.headers) {
        tracing::debug!(uri = %sent.uri, "not stored: Content-Type disagrees with the extension");
        return None;
    }
    if !inner.settings.heuristic_with_credentials && deception::credentialed(&sent.headers) {
        // Freshness without the heuristic: a lifetime left is explicit. A zero one is not
        // stored either, even with a validator, since the origin may answer another client's
        // conditional request with a 304 that would hand it this one's page.
        let explicit = rfc9111::Options {
            heuristic_fraction: 0.0,
            ..inner.rules.clone()
        };
        let policy = rfc9111::Policy::new(sent, res, now, &explicit)?;
        return (!policy.time_to_live(now).is_zero()).then_some(policy);
    }
    let policy = rfc9111::Policy::new(sent, res, now, &inner.rules)?;
    // Stale on arrival, with no validator and no permission to serve it stale: every later
    // request would fetch it whole again, so keeping it only costs memory (a 404 for a
    // made-up URL, typically). RFC 9111 lets a cache decline to store anything.
    let may_serve_stale = res
        .headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("stale-"));
    if policy.time_to_live(now).is_zero()
        && !partial::has_validator(&res.headers)
        && !may_serve_stale
    {
        return None;
    }
    Some(policy)
}

/// RFC 9111 §4.3: a conditional request for a stored response that must be validated.
async fn validate(
    inner: &Arc<Inner>,
    ctx: &mut Ctx,
    parts: &http::request::Parts,
    stored: &Arc<Stored>,
    conditional: HeaderMap,
) -> Response<Body> {
    let status = Status {
        fwd: Some("stale"),
        ..Status::default()
    };
    match send_conditional(inner, ctx, parts, stored, conditional).await {
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
        Err(e)
            if stored
                .policy
                .stale_if_disconnected(parts, inner.clock.now()) =>
        {
            // RFC 9111 §4.2.4 (the origin cannot be reached) and RFC 5861 §4.
            tracing::debug!(error = %e.chain(), "serving stale on error");
            if stored.complete() {
                inner.metrics.hit(stored.body.len());
            }
            let detail = if stored.policy.stale_if_error(parts, inner.clock.now()) {
                "stale-if-error"
            } else {
                "stale-disconnected"
            };
            served(
                inner,
                stored,
                parts,
                Status {
                    hit: true,
                    detail: Some(detail),
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
    ctx: &mut Ctx,
    parts: &http::request::Parts,
    stored: &Arc<Stored>,
    conditional: HeaderMap,
) -> Result<Revalidated, UpstreamError> {
    let mut up = headers::plain_upstream_parts(&inner.settings.name, parts);
    up.method = Method::GET;
    for (name, value) in &conditional {
        up.headers.insert(name.clone(), value.clone());
    }
    let sent = up.clone();
    let mut response = inner.upstreams.send(ctx, &inner.phases, up, None).await?;
    if !inner.phases.is_empty() {
        let (mut res_parts, body) = response.into_parts();
        inner.phases.upstream_response_filter(ctx, &mut res_parts);
        response = Response::from_parts(res_parts, body);
    }
    if response.status().is_server_error() && stored.policy.stale_if_error(parts, inner.clock.now())
    {
        return Err(UpstreamError::Protocol {
            upstream: ctx.upstream.clone().unwrap_or_else(|| "upstream".into()),
            source: format!("answered {}", response.status()).into(),
        });
    }
    let key = crate::route::cache_key(inner, parts);
    // RFC 9111 §4.3.4: the 304 answers the conditional request we sent for this one stored
    // response (we send one response's validators), so it selects that response; its ETag and
    // the other fields of §3.2's exclusions do not replace the stored ones.
    if response.status() == StatusCode::NOT_MODIFIED {
        let (res_parts, _) = response.into_parts();
        let (policy, headers) = stored.policy.revalidated(
            &sent,
            &res_parts,
            &stored.headers,
            inner.clock.now(),
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
            store.put(&key, fresh.clone());
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
    response: Response<Body>,
    key: &str,
) -> Result<Response<Body>, UpstreamError> {
    let (res_parts, body) = response.into_parts();
    let status = Status {
        fwd: Some("stale"),
        fwd_status: Some(res_parts.status.as_u16()),
        ..Status::default()
    };
    let policy = policy_for(inner, sent, &res_parts, inner.clock.now());
    let vary_key = rfc9111::vary_key(&res_parts.headers, &parts.headers);
    let (Some(policy), Some(vary_key)) = (policy, vary_key) else {
        if let Some(store) = &inner.store {
            store.remove(key);
        }
        return Ok(passthrough(inner, res_parts, body, status));
    };
    let buffer = match Buffer::new(
        &inner.inflight,
        inner.settings.max_object_bytes,
        content_length(&res_parts.headers),
    ) {
        Ok(buffer) => buffer,
        Err(why) => {
            inner.metrics.skipped(why);
            if let Some(store) = &inner.store {
                store.remove(key);
            }
            return Ok(passthrough(inner, res_parts, body, status));
        }
    };
    let (bytes, charge) = match collect(
        body,
        buffer,
        inner.upstreams.timeout(),
        inner.settings.store_deadline,
    )
    .await?
    {
        Collected::Whole(bytes, charge) => (bytes, charge),
        over => {
            if let Collected::Over(_, _, _, why) = &over {
                inner.metrics.skipped(*why);
            }
            if let Some(store) = &inner.store {
                store.remove(key);
            }
            let mut r = Response::from_parts(res_parts, over.into_body(inner.upstreams.timeout()));
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
        .is_some_and(|s| s.put(key, fresh.clone()));
    Ok(held(
        served(
            inner,
            &Arc::new(fresh),
            parts,
            Status {
                stored: admitted,
                ..status
            },
        ),
        charge,
    ))
}

/// Background revalidation for stale-while-revalidate (RFC 5861 §3), collapsed per key.
async fn revalidate(
    inner: &Arc<Inner>,
    peer: std::net::SocketAddr,
    parts: &http::request::Parts,
    stored: &Arc<Stored>,
) {
    // One background revalidation per stored entry: the cache key, not the URI, so keyed
    // variants (`forwarded = "key"`) do not share one slot.
    let key = format!("revalidate {}", crate::route::cache_key(inner, parts));
    let Join::Leader(leader) = inner.collapser.join(&key) else {
        return;
    };
    let conditional = stored.policy.conditional_headers();
    let mut ctx = Ctx::new(peer, inner.clock.instant());
    if let Err(e) = send_conditional(inner, &mut ctx, parts, stored, conditional).await {
        tracing::debug!(error = %e.chain(), "background revalidation failed");
    }
    leader.finish(Outcome::Alone);
}
