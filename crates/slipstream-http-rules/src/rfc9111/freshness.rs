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

/// RFC 9111 §5.1 Age, as the current HTTP cache test suite (cache-tests.fyi, `age-parse`)
/// reads it: the first member of the first field line counts (`Age: 0, 7200` is 0, `Age: 7200`
/// then `Age: 0` is 7200), and a member that is not a non-negative integer (`abc`, `-7200`,
/// `7200.0`, `7200;foo=bar`) is ignored, as if there were no Age (§4.2.3: age_value is 0 when
/// unavailable). Ignoring it never makes a response look younger than its Date says, because
/// the apparent age still counts (§4.2.3 takes the larger). Overflow saturates at 2^31 (§1.2.2).
pub(crate) fn age_header(headers: &HeaderMap) -> Duration {
    let Some(first) = headers.get(AGE) else {
        return Duration::ZERO;
    };
    let member = first
        .to_str()
        .unwrap_or("")
        .split(',')
        .next()
        .unwrap_or("")
        .trim();
    if member.is_empty() || !member.bytes().all(|b| b.is_ascii_digit()) {
        return Duration::ZERO;
    }
    let secs = member.bytes().fold(0u64, |v, b| {
        v.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    });
    Duration::from_secs(secs.min(DELTA_SECONDS_MAX))
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
