//! Freshness and age arithmetic (RFC 9111 §4.2): the freshness lifetime from s-maxage, max-age,
//! Expires or a heuristic, the Age field, and HTTP-dates.

use std::time::{Duration, SystemTime};

use http::header::{HeaderMap, HeaderName, AGE, EXPIRES, LAST_MODIFIED};
use http::StatusCode;

use super::directives::{Delta, Directives, DELTA_SECONDS_MAX};
use super::Options;

/// RFC 9110 §15.1: status codes that are heuristically cacheable (RFC 9111 §4.2.2).
const HEURISTICALLY_CACHEABLE: &[u16] =
    &[200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// RFC 9111 §4.2.1 freshness_lifetime: s-maxage (shared) > max-age > Expires − Date > heuristic.
/// An invalid or conflicting value counts as stale (§4.2.1), and a malformed Expires, such as
/// "0", as already expired (§5.3).
pub(crate) fn freshness_lifetime(
    cc: &Directives,
    targeted: bool,
    headers: &HeaderMap,
    status: StatusCode,
    date_value: SystemTime,
    opts: &Options,
) -> Duration {
    let explicit = |name| match cc.seconds(name) {
        Delta::Valid(d) => Some(Some(d)),
        Delta::Invalid => Some(None),
        Delta::Absent => None,
    };
    if opts.shared {
        if let Some(s_maxage) = explicit("s-maxage") {
            return s_maxage.unwrap_or_default();
        }
    }
    if let Some(max_age) = explicit("max-age") {
        return max_age.unwrap_or_default();
    }
    // RFC 9213 §2.1: Expires is ignored when the targeted field governs.
    if !targeted {
        let mut expires = headers.get_all(EXPIRES).iter();
        if let Some(first) = expires.next() {
            if expires.next().is_some() {
                return Duration::ZERO; // §4.2.1: more than one Expires
            }
            return first
                .to_str()
                .ok()
                .and_then(|s| httpdate::parse_http_date(s.trim()).ok())
                .map_or(Duration::ZERO, |exp| since(exp, date_value));
        }
    }
    // §4.2.2: heuristics only for heuristically cacheable statuses, or when `public` marks the
    // response explicitly cacheable; a fraction of the time since Last-Modified.
    if HEURISTICALLY_CACHEABLE.contains(&status.as_u16()) || cc.has("public") {
        if let Some(lm) = first_date(headers, &LAST_MODIFIED) {
            // Whole seconds, like every other lifetime; the float cast saturates (NaN is 0).
            let secs = since(date_value, lm).as_secs() as f64 * f64::from(heuristic_fraction(opts));
            return Duration::from_secs((secs.floor() as u64).min(DELTA_SECONDS_MAX));
        }
    }
    Duration::ZERO
}

pub(crate) fn heuristic_fraction(opts: &Options) -> f32 {
    let f = opts.heuristic_fraction;
    if f.is_nan() {
        0.0
    } else {
        f.clamp(0.0, 1.0)
    }
}

/// RFC 9111 §5.1: Age is one non-negative integer. A response whose Age is anything else
/// (several field lines, a list, a sign, a fraction, parameters, letters) cannot be trusted to
/// be young, so it counts as infinitely old: stale (the HTTP cache test suite's age-parse
/// checks).
pub(crate) fn age_header(headers: &HeaderMap) -> Duration {
    let mut lines = headers.get_all(AGE).iter();
    let Some(first) = lines.next() else {
        return Duration::ZERO;
    };
    let value = first.to_str().unwrap_or("").trim();
    let valid =
        lines.next().is_none() && !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    if !valid {
        return Duration::from_secs(DELTA_SECONDS_MAX);
    }
    // §1.2.2: overflow saturates at 2^31.
    Duration::from_secs(
        value
            .parse::<u64>()
            .unwrap_or(DELTA_SECONDS_MAX)
            .min(DELTA_SECONDS_MAX),
    )
}

/// The first line of a date field as an HTTP-date (RFC 9110 §5.6.7, all three forms).
pub(crate) fn first_date(headers: &HeaderMap, name: &HeaderName) -> Option<SystemTime> {
    let s = headers.get(name)?.to_str().ok()?;
    httpdate::parse_http_date(s.trim()).ok()
}

/// `later - earlier`, zero if negative.
pub(crate) fn since(later: SystemTime, earlier: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or_default()
}
