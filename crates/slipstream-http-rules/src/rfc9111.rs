//! HTTP caching decisions, without I/O and without reading a clock: may a response be stored
//! (RFC 9111 §3), may a stored response answer a new request (§4), with stale-while-revalidate
//! and stale-if-error (RFC 5861) and the targeted `CDN-Cache-Control` field (RFC 9213). The
//! caching proxy owns storage, keys by URI and does the fetching; this module owns the rules.
//!
//! Storability is decided by `http-cache-semantics` (RFC 7234 rules) with our corrections on
//! top; age and freshness are computed here, because the library's arithmetic conflicts with
//! RFC 9111 in ways a shared cache notices (see [`Policy::new`]).

mod directives;
mod fields;
mod freshness;

use std::time::{Duration, SystemTime};

use http::header::{
    HeaderMap, HeaderName, HeaderValue, AGE, AUTHORIZATION, DATE, ETAG, EXPIRES, IF_MODIFIED_SINCE,
    IF_NONE_MATCH, LAST_MODIFIED,
};
use http::{request, response, Method, StatusCode, Uri};

use directives::{Delta, Directives, DELTA_SECONDS_MAX};
use freshness::{age_header, first_date, freshness_lifetime, heuristic_fraction, since};

/// The targeted field of RFC 9213 that this cache (a CDN-like shared proxy) obeys.
const CDN_CACHE_CONTROL: HeaderName = HeaderName::from_static("cdn-cache-control");

/// The Edge Architecture field for surrogates, honoured after CDN-Cache-Control.
const SURROGATE_CONTROL: HeaderName = HeaderName::from_static("surrogate-control");

/// Cache behaviour knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// A shared cache (a proxy): `private` responses are not stored, `s-maxage` and
    /// `proxy-revalidate` apply, and `Authorization` restricts storing (RFC 9111 §3.5).
    pub shared: bool,
    /// The fraction of the time since `Last-Modified` used as a heuristic freshness lifetime
    /// (RFC 9111 §4.2.2 suggests 10%). Clamped to `0.0..=1.0`; NaN counts as 0.
    pub heuristic_fraction: f32,
    /// Obey `CDN-Cache-Control` instead of `Cache-Control`/`Expires` when it is present and
    /// valid (RFC 9213 §2.1).
    pub honor_cdn_cache_control: bool,
    /// This cache's device token for `Surrogate-Control` (the name it sends in
    /// `Surrogate-Capability`): members targeted `;NAME` apply to it and win over untargeted
    /// ones; members targeted at other names never apply. `None`: only untargeted members.
    pub surrogate_name: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            shared: true,
            heuristic_fraction: 0.1,
            honor_cdn_cache_control: true,
            surrogate_name: None,
        }
    }
}

/// What to do with a stored response for a new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reuse {
    /// Serve it as is (fresh, or stale but allowed by the request's max-stale).
    Fresh,
    /// Serve it now and revalidate in the background (RFC 5861 §3).
    StaleWhileRevalidate,
    /// Must validate first: send upstream with these extra request headers (RFC 9111 §4.3.1);
    /// empty if the stored response has no validator.
    Validate(HeaderMap),
    /// The stored response does not match this request (method, Vary, §4.1); fetch normally.
    Mismatch,
}

/// The stored metadata of one response: everything needed to decide reuse later. Cheap to
/// clone (no header map inside; the proxy keeps the stored headers and passes them in).
#[derive(Debug, Clone)]
pub struct Policy {
    storable: bool,
    method: Method,
    status: StatusCode,
    response_time: SystemTime,
    /// RFC 9111 §4.2.3 corrected_initial_age.
    initial_age: Duration,
    /// RFC 9111 §4.2.1 freshness_lifetime.
    lifetime: Duration,
    /// Response `no-cache` (§5.2.2.4): reuse only after validation.
    no_cache: bool,
    /// `must-revalidate`, or `proxy-revalidate` in a shared cache (§5.2.2.2, §5.2.2.8).
    must_revalidate: bool,
    /// `s-maxage` in a shared cache, which implies `proxy-revalidate` (§5.2.2.10).
    s_maxage: bool,
    stale_while_revalidate: Option<Duration>,
    stale_if_error: Option<Duration>,
    /// §4.1: the Vary field names and the stored request's key; `None` for `Vary: *`.
    vary: Option<(Vec<HeaderName>, String)>,
    etag: Option<HeaderValue>,
    last_modified: Option<HeaderValue>,
}

impl Policy {
    /// RFC 9111 §3: `None` when the response must not be stored. `req`/`res` are the request
    /// sent upstream and the response received, `response_time` when it arrived.
    ///
    /// Deviations from `http-cache-semantics`, which decides the rest of §3:
    /// - only GET and HEAD are stored (it also stores POST with explicit freshness, which a proxy
    ///   keyed by URI could then serve to a GET);
    /// - `Authorization` is re-checked here, because the library turns conflicting duplicate
    ///   directives into `must-revalidate`, which would wrongly allow storing (§3.5);
    /// - it receives `CDN-Cache-Control`'s directives as `Cache-Control` (RFC 9213 §2.1);
    /// - any final status may be stored (§3), not only the library's list (which leaves out
    ///   299, 400, 500, 502, 503, 504 and other codes with explicit freshness);
    /// - `must-understand` (§5.2.2.3) is implemented: it overrides `no-store` for the statuses
    ///   this cache understands and forbids storing the others.
    ///
    /// Freshness is computed here, not by the library, because it: ignores the apparent age
    /// (§4.2.3), parses only RFC 2822 dates (not the obsolete HTTP-date forms, §5.6.7 of RFC 9110),
    /// treats `proxy-revalidate` as "never fresh" (§5.2.2.8 only forbids serving it stale),
    /// applies heuristics to every status (§4.2.2 limits them), and zeroes freshness for
    /// `Set-Cookie`, which RFC 9111 does not ask for.
    pub fn new(
        req: &request::Parts,
        res: &response::Parts,
        response_time: SystemTime,
        opts: &Options,
    ) -> Option<Policy> {
        let policy = Policy::compute(
            &req.method,
            &req.headers,
            res.status,
            &res.headers,
            response_time,
            opts,
        );
        policy.storable.then_some(policy)
    }

    fn compute(
        method: &Method,
        req_headers: &HeaderMap,
        status: StatusCode,
        res_headers: &HeaderMap,
        response_time: SystemTime,
        opts: &Options,
    ) -> Policy {
        let (cc, targeted) = response_directives(res_headers, opts);
        let storable = storable(
            method,
            req_headers,
            status,
            res_headers,
            &cc,
            targeted,
            response_time,
            opts,
        );

        // RFC 9110 §6.6.1: without a (valid) Date the recipient uses the time it received it.
        let date = first_date(res_headers, &DATE);
        let date_value = date.unwrap_or(response_time);

        // RFC 9111 §4.2.3. The request time is not known to us, so response_delay is taken as 0:
        // the age is underestimated by at most one round trip.
        let age_value = age_header(res_headers);
        let apparent_age = date.map_or(Duration::ZERO, |d| since(response_time, d));
        let initial_age = apparent_age.max(age_value);

        let lifetime = freshness_lifetime(&cc, targeted, res_headers, status, date_value, opts);
        let window = |name| match cc.seconds(name) {
            Delta::Valid(d) => Some(d),
            _ => None,
        };

        Policy {
            storable,
            method: method.clone(),
            status,
            response_time,
            initial_age,
            lifetime,
            // §5.2.2.4. A qualified `no-cache="field"` is treated as unqualified: always
            // validating is what the unqualified form requires and is always allowed.
            no_cache: cc.has("no-cache"),
            must_revalidate: cc.has("must-revalidate")
                || (opts.shared && cc.has("proxy-revalidate")),
            s_maxage: opts.shared && cc.has("s-maxage"),
            stale_while_revalidate: window("stale-while-revalidate"),
            stale_if_error: window("stale-if-error"),
            vary: fields::vary_names(res_headers).map(|names| {
                let key = fields::vary_key_for(&names, req_headers);
                (names, key)
            }),
            // Copied, not cloned: a received value shares the connection's read buffer, which a
            // stored policy would otherwise keep alive.
            etag: res_headers
                .get(ETAG)
                .filter(|v| is_entity_tag(v))
                .map(detached),
            last_modified: res_headers
                .get(LAST_MODIFIED)
                .filter(|v| {
                    v.to_str()
                        .ok()
                        .and_then(|s| httpdate::parse_http_date(s).ok())
                        .is_some()
                })
                .map(detached),
        }
    }

    /// Whether the response may be stored. Always true for a `Policy` from [`Policy::new`]; a
    /// policy from [`Policy::revalidated`] is false when the 304 made the response unstorable
    /// (e.g. it added `no-store`): serve it this once, then drop it.
    pub fn storable(&self) -> bool {
        self.storable
    }

    /// The stored response's status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// RFC 9111 §4: may the stored response answer `req` (a new request) at `now`?
    pub fn evaluate(&self, req: &request::Parts, now: SystemTime) -> Reuse {
        if !self.matches(req) {
            return Reuse::Mismatch;
        }
        let rcc = Directives::cache_control(&req.headers);
        // §5.2.1.4 request no-cache, §5.4 Pragma without Cache-Control; §5.2.2.4 response no-cache.
        if rcc.has("no-cache") || directives::pragma_no_cache(&req.headers) || self.no_cache {
            return self.validate();
        }
        let age = self.age(now);
        let ttl = self.time_to_live(now);
        // §5.2.1.1: the client does not want a response older than max-age.
        if let Delta::Valid(max_age) = rcc.seconds("max-age") {
            if age > max_age {
                return self.validate();
            }
        }
        // §5.2.1.3: the client wants one that stays fresh for at least min-fresh.
        if let Delta::Valid(min_fresh) = rcc.seconds("min-fresh") {
            if ttl < min_fresh {
                return self.validate();
            }
        }
        // §4.2: fresh iff freshness_lifetime > current_age.
        if self.lifetime > age {
            return Reuse::Fresh;
        }
        let staleness = age - self.lifetime;
        // §4.2.4: never serve stale against must-revalidate / proxy-revalidate / s-maxage.
        // §5.2.1.2: max-stale without a value accepts any staleness; with one, up to it.
        if !self.must_revalidate && !self.s_maxage {
            let allowed = match rcc.arg("max-stale") {
                None => false,
                Some(None) => true,
                // A malformed value grants nothing.
                Some(Some(_)) => {
                    matches!(rcc.seconds("max-stale"), Delta::Valid(limit) if staleness <= limit)
                }
            };
            if allowed {
                return Reuse::Fresh;
            }
        }
        // RFC 5861 §3. An explicit must-revalidate (or proxy-revalidate) forbids it (RFC 9111
        // §4.2.4). The proxy-revalidate that s-maxage implies (§5.2.2.10) does not: the same
        // origin explicitly granted the window in the same field, the common CDN idiom
        // `s-maxage=60, stale-while-revalidate=30`, and RFC 9111 §4.2.4 names RFC 5861
        // extensions as an explicit permission.
        if !self.must_revalidate {
            if let Some(window) = self.stale_while_revalidate {
                if staleness <= window {
                    return Reuse::StaleWhileRevalidate;
                }
            }
        }
        self.validate()
    }

    /// RFC 5861 §4: may the stale response be served because revalidation or the fetch failed
    /// with an error (5xx or connection failure)? A response `evaluate` would serve is always
    /// allowed (RFC 9111 §4.3.3: act as if the server did not answer). Otherwise the response's
    /// or the request's `stale-if-error` window must cover the staleness; `no-cache` and
    /// `must-revalidate` forbid it (§4.2.4, §5.2.2.2: "MUST generate an error"), and the client's
    /// window cannot override s-maxage's implied proxy-revalidate (§5.2.2.10) any more than
    /// max-stale can.
    pub fn stale_if_error(&self, req: &request::Parts, now: SystemTime) -> bool {
        match self.evaluate(req, now) {
            Reuse::Mismatch => return false,
            Reuse::Fresh | Reuse::StaleWhileRevalidate => return true,
            Reuse::Validate(_) => {}
        }
        if self.no_cache || self.must_revalidate {
            return false;
        }
        let staleness = self.age(now).saturating_sub(self.lifetime);
        let by_response = self.stale_if_error.is_some_and(|w| staleness <= w);
        let by_request = !self.s_maxage
            && matches!(Directives::cache_control(&req.headers).seconds("stale-if-error"),
                Delta::Valid(w) if staleness <= w);
        by_response || by_request
    }

    /// RFC 9111 §4.2.4: may the stale response be served because the cache cannot reach the
    /// origin (the connection failed, closed or timed out)? "A cache SHOULD NOT generate a stale
    /// response unless it is disconnected": when disconnected it may, unless a directive forbids
    /// it: the response's `no-cache`, `must-revalidate`, `proxy-revalidate` or `s-maxage`
    /// (§5.2.2.10 implies proxy-revalidate), or the request's `no-cache` (§5.2.1.4), `max-age`
    /// (when the response is older, §5.2.1.1) or `min-fresh` (§5.2.1.3), which each ask for a
    /// response validated or young enough. A response [`Policy::stale_if_error`] allows is
    /// allowed too.
    pub fn stale_if_disconnected(&self, req: &request::Parts, now: SystemTime) -> bool {
        if self.stale_if_error(req, now) {
            return true;
        }
        if !self.matches(req) || self.no_cache || self.must_revalidate || self.s_maxage {
            return false;
        }
        let rcc = Directives::cache_control(&req.headers);
        let too_old = matches!(rcc.seconds("max-age"), Delta::Valid(max) if self.age(now) > max);
        !(rcc.has("no-cache")
            || directives::pragma_no_cache(&req.headers)
            || too_old
            || rcc.has("min-fresh"))
    }

    /// Headers for a response served from storage: the stored headers minus hop-by-hop and
    /// proxy-specific fields (RFC 9110 §7.6.1, RFC 9111 §3.1), `Age` set to the current age in
    /// whole seconds (RFC 9111 §5.1, §4.2.3). The origin's `Date` is kept; if there is none, the
    /// time the response was received is added (RFC 9110 §6.6.1).
    pub fn response_headers(&self, stored: &HeaderMap, now: SystemTime) -> HeaderMap {
        let mut out = fields::forwardable(stored);
        let age = self.age(now).as_secs().min(DELTA_SECONDS_MAX);
        out.insert(AGE, HeaderValue::from(age));
        if !out.contains_key(DATE) {
            if let Ok(date) = HeaderValue::from_str(&httpdate::fmt_http_date(self.response_time)) {
                out.insert(DATE, date);
            }
        }
        out
    }

    /// RFC 9111 §4.3.4: whether a 304 selects this stored response for update: the same strong
    /// validator, else the same weak one, else the same Last-Modified; with no validator in the
    /// 304, only a stored response without one. When false, do not call [`Policy::revalidated`]:
    /// fetch the response unconditionally instead.
    pub fn is_selected_by(&self, not_modified: &HeaderMap) -> bool {
        let opaque = |v: &HeaderValue| -> Option<(bool, String)> {
            let s = v.to_str().ok()?.trim();
            Some(match s.strip_prefix("W/") {
                Some(tag) => (true, tag.to_owned()),
                None => (false, s.to_owned()),
            })
        };
        let stored = self.etag.as_ref().and_then(opaque);
        if let Some((weak, tag)) = not_modified.get(ETAG).and_then(opaque) {
            return match stored {
                Some((stored_weak, stored_tag)) if stored_tag == tag => weak || !stored_weak,
                _ => false,
            };
        }
        if let Some(lm) = first_date(not_modified, &LAST_MODIFIED) {
            return self
                .last_modified
                .as_ref()
                .and_then(|v| v.to_str().ok())
                .and_then(|s| httpdate::parse_http_date(s).ok())
                == Some(lm);
        }
        self.etag.is_none() && self.last_modified.is_none()
    }

    /// RFC 9111 §4.3.4: after a 304 to our conditional request, the updated `Policy` and the
    /// stored headers updated with the 304's fields (§3.2), except Content-Length,
    /// Content-Range, Content-Encoding and the fields never stored (see `fields::merge_304`).
    /// The stored `Age` is dropped unless the 304 carries one (it described the old response),
    /// and a 304 without `Date` gets `response_time` (RFC 9110 §6.6.1) so the old Date does not
    /// make the refreshed response look old. Check [`Policy::is_selected_by`] first.
    pub fn revalidated(
        &self,
        req: &request::Parts,
        not_modified: &response::Parts,
        stored: &HeaderMap,
        response_time: SystemTime,
        opts: &Options,
    ) -> (Policy, HeaderMap) {
        let mut merged = fields::merge_304(stored, &not_modified.headers);
        if !not_modified.headers.contains_key(AGE) {
            merged.remove(AGE);
        }
        if !not_modified.headers.contains_key(DATE) {
            if let Ok(date) = HeaderValue::from_str(&httpdate::fmt_http_date(response_time)) {
                merged.insert(DATE, date);
            }
        }
        let policy = Policy::compute(
            &self.method,
            &req.headers,
            self.status,
            &merged,
            response_time,
            opts,
        );
        (policy, merged)
    }

    /// Freshness left (zero when stale, and always zero for `no-cache` responses).
    pub fn time_to_live(&self, now: SystemTime) -> Duration {
        if self.no_cache {
            return Duration::ZERO;
        }
        self.lifetime.saturating_sub(self.age(now))
    }

    /// RFC 9111 §4.2.3 current_age: corrected_initial_age + resident_time.
    pub fn age(&self, now: SystemTime) -> Duration {
        self.initial_age
            .saturating_add(since(now, self.response_time))
    }

    /// RFC 9111 §4: method and Vary (§4.1). The URI is the caller's primary key; a GET response
    /// may answer a HEAD (§4: "the request method ... allows it to be used").
    fn matches(&self, req: &request::Parts) -> bool {
        let method_ok =
            req.method == self.method || (req.method == Method::HEAD && self.method == Method::GET);
        let vary_ok = match &self.vary {
            None => false, // §4.1: `Vary: *` always fails to match.
            Some((names, key)) => fields::vary_key_for(names, &req.headers) == *key,
        };
        self.storable && method_ok && vary_ok
    }

    /// §4.3.1: the fields of a conditional request for this stored response: If-None-Match with
    /// the stored entity tag (MUST), If-Modified-Since with the stored Last-Modified (SHOULD).
    /// Empty when the response has no validator.
    pub fn conditional_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(etag) = &self.etag {
            headers.insert(IF_NONE_MATCH, etag.clone());
        }
        if let Some(lm) = &self.last_modified {
            headers.insert(IF_MODIFIED_SINCE, lm.clone());
        }
        headers
    }

    fn validate(&self) -> Reuse {
        Reuse::Validate(self.conditional_headers())
    }
}

/// RFC 9111 §4.1: the secondary cache key — the request's values of the fields named in the
/// response's Vary, normalised (names lowercased and sorted; field lines trimmed and combined
/// with ", "; an absent field differs from an empty one). `None` for `Vary: *`, which never
/// matches (§4.1), and for a Vary member that is not a field name.
pub fn vary_key(response_headers: &HeaderMap, request_headers: &HeaderMap) -> Option<String> {
    fields::vary_names(response_headers).map(|names| fields::vary_key_for(&names, request_headers))
}

/// RFC 9111 §4.4: the URIs an unsafe request with a non-error (2xx/3xx) response invalidates: the
/// target, and Location / Content-Location (resolved against the target) when same-origin.
pub fn invalidated(
    method: &Method,
    status: StatusCode,
    target: &Uri,
    response_headers: &HeaderMap,
) -> Vec<Uri> {
    fields::invalidated(method, status, target, response_headers)
}

/// RFC 9111 §5.2.1.7: `only-if-cached` — answer from storage or with 504 (Gateway Timeout).
pub fn only_if_cached(req: &HeaderMap) -> bool {
    Directives::cache_control(req).has("only-if-cached")
}

/// Whether a response is for one user only as far as shared caches go (RFC 9111 §5.2.2.3
/// `no-store`, §5.2.2.7 `private`, with or without a field list): parsed as the cache parses
/// it, quoted strings and all field lines included.
pub fn private_or_no_store(response: &HeaderMap) -> bool {
    let d = Directives::cache_control(response);
    d.has("private") || d.has("no-store")
}

/// The directives that govern this cache's freshness decisions and whether they came from the
/// targeted field. RFC 9213 §2.1: a valid, non-empty `CDN-Cache-Control` replaces both
/// `Cache-Control` and `Expires`. Without Cache-Control, a response `Pragma: no-cache` counts as
/// `no-cache`: RFC 9111 §5.4 defines it for requests only, but HTTP/1.0 origins use it on
/// responses to mean exactly that, and validating is always safe.
fn response_directives(headers: &HeaderMap, opts: &Options) -> (Directives, bool) {
    if opts.honor_cdn_cache_control {
        if let Some(d) = directives::cdn_cache_control(headers, &CDN_CACHE_CONTROL) {
            return (d, true);
        }
        // The older Edge Architecture `Surrogate-Control` (W3C note, 2001) targets the same
        // caches, with Cache-Control's syntax; CDN-Cache-Control wins when both are present.
        let surrogate = directives::surrogate_control(
            headers,
            &SURROGATE_CONTROL,
            opts.surrogate_name.as_deref(),
        );
        if !surrogate.is_empty() {
            return (surrogate, true);
        }
    }
    let mut cc = Directives::cache_control(headers);
    if directives::pragma_no_cache(headers) {
        cc.push("no-cache");
    }
    (cc, false)
}

/// The statuses `http-cache-semantics` stores (its `UNDERSTOOD_STATUSES`).
const LIBRARY_UNDERSTOOD_STATUSES: &[u16] = &[
    200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 501,
];

/// RFC 9111 §5.2.2.3: the statuses whose caching requirements this cache implements, for
/// `must-understand`: the final statuses RFC 9110 §15 defines, but 206 (stored only as a first
/// chunk by the proxy) and the 1xx/304 it never stores. Unregistered codes (299, 599) are not
/// understood.
const UNDERSTOOD_STATUSES: &[u16] = &[
    200, 201, 202, 203, 204, 205, 300, 301, 302, 303, 305, 307, 308, 400, 401, 402, 403, 404, 405,
    406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421, 422, 426, 500, 501, 502, 503,
    504, 505,
];

/// RFC 9111 §3, decided by `http-cache-semantics` plus the corrections listed at [`Policy::new`].
#[allow(clippy::too_many_arguments)]
fn storable(
    method: &Method,
    req_headers: &HeaderMap,
    status: StatusCode,
    res_headers: &HeaderMap,
    cc: &Directives,
    targeted: bool,
    response_time: SystemTime,
    opts: &Options,
) -> bool {
    // §3: the method must be understood and cacheable; this cache stores GET and HEAD only.
    if *method != Method::GET && *method != Method::HEAD {
        return false;
    }
    // §3, §3.5: in a shared cache, Authorization forbids storing unless public, s-maxage or
    // must-revalidate allows it.
    if opts.shared
        && req_headers.contains_key(AUTHORIZATION)
        && !(cc.has("public") || cc.has("s-maxage") || cc.has("must-revalidate"))
    {
        return false;
    }
    // RFC 9213 §2.1: the library only reads Cache-Control, so hand it the targeted directives
    // in its place (and no Expires). `no-store` there prevents storing.
    let mut headers = res_headers.clone();
    if targeted {
        headers.remove(http::header::CACHE_CONTROL);
        headers.remove(EXPIRES);
        match HeaderValue::from_str(&cc.to_cache_control()) {
            Ok(v) => {
                headers.insert(http::header::CACHE_CONTROL, v);
            }
            Err(_) => return false,
        }
    }
    // §5.2.2.3 must-understand: only a cache that understands the status may store the
    // response, and one that does ignores `no-store` (which the directive comes with, for caches
    // that do not implement it).
    if cc.has("must-understand") {
        if !UNDERSTOOD_STATUSES.contains(&status.as_u16()) {
            return false;
        }
        let without: Directives = cc.without("no-store");
        match HeaderValue::from_str(&without.to_cache_control()) {
            Ok(v) => {
                headers.insert(http::header::CACHE_CONTROL, v);
            }
            Err(_) => return false,
        }
    }
    let (mut req, ()) = http::Request::new(()).into_parts();
    req.method = method.clone();
    req.headers = req_headers.clone();
    let (mut res, ()) = http::Response::new(()).into_parts();
    // §3 asks only that the status be final; understanding it is required for 206, 304 and
    // must-understand. The library refuses every status outside its short list (so no 299, 400,
    // 500 or 503 even with max-age), so it is shown a final status it accepts but does not
    // cache by default (302): what it decides then is the rest of §3, including the need for
    // explicit freshness or `public`. 1xx, 206 and 304 stay with the library, which refuses them
    // (this cache stores 206 only through the proxy's chunk path, and never stores a 304).
    res.status = if status.as_u16() >= 200
        && !matches!(status.as_u16(), 206 | 304)
        && !LIBRARY_UNDERSTOOD_STATUSES.contains(&status.as_u16())
    {
        StatusCode::FOUND
    } else {
        status
    };
    res.headers = headers;
    let lib_opts = http_cache_semantics::CacheOptions {
        shared: opts.shared,
        cache_heuristic: heuristic_fraction(opts),
        immutable_min_time_to_live: Duration::ZERO,
        ignore_cargo_cult: false,
    };
    // §3: request/response no-store, private (shared), status understood (the library does not
    // understand 206, which this cache does not store), and explicit-or-heuristic cacheability.
    http_cache_semantics::CachePolicy::new_options(&req, &res, response_time, lib_opts)
        .is_storable()
}

/// A copy of `value` in its own allocation. A value parsed by hyper is a slice of the
/// connection's read buffer, and a clone keeps that whole buffer alive.
pub fn detached(value: &HeaderValue) -> HeaderValue {
    let mut copy = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
    copy.set_sensitive(value.is_sensitive());
    copy
}

/// RFC 9110 §8.8.3 entity-tag: `[W/] DQUOTE *etagc DQUOTE`. A malformed one is not sent back.
fn is_entity_tag(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    let b = b.strip_prefix(b"W/").unwrap_or(b);
    b.len() >= 2
        && b[0] == b'"'
        && b[b.len() - 1] == b'"'
        && b[1..b.len() - 1]
            .iter()
            .all(|&c| c == 0x21 || (0x23..=0x7e).contains(&c) || c >= 0x80)
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
