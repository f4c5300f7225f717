//! Conditional requests (RFC 9110 §13): validators and the evaluation order of §13.2.2.

use std::time::SystemTime;

use http::header::{IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE, IF_UNMODIFIED_SINCE};
use http::{HeaderMap, Method, StatusCode};

/// The validators of one representation; either may be missing (a stored proxy response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validators {
    /// Entity tag, with quotes, e.g. `"5f3a-1c2"` (or `W/"..."`).
    pub etag: Option<String>,
    /// Modification time.
    pub last_modified: Option<SystemTime>,
}

impl Validators {
    /// The validators in a response's ETag and Last-Modified fields.
    pub fn from_headers(headers: &HeaderMap) -> Validators {
        Validators {
            etag: header_str(headers, http::header::ETAG).map(|e| e.trim().to_owned()),
            last_modified: header_date(headers, http::header::LAST_MODIFIED),
        }
    }
}

/// A strong ETag from a file's length and modification time: nginx's recipe with the time in
/// nanoseconds rather than seconds, so that a file rewritten within the second it was written
/// with a body of the same length gets a new tag (RFC 9110 §8.8.3: a strong validator changes
/// whenever the representation does; with seconds, a revalidating cache was told 304 and kept
/// the old body).
pub fn etag(len: u64, modified: SystemTime) -> String {
    let nanos = modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("\"{nanos:x}-{len:x}\"")
}

/// What the preconditions say to do with a GET or HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Serve the representation (possibly a range of it).
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

impl Outcome {
    /// The status to send instead of the representation, if any.
    pub fn status(self) -> Option<StatusCode> {
        match self {
            Outcome::Proceed => None,
            Outcome::NotModified => Some(StatusCode::NOT_MODIFIED),
            Outcome::Failed => Some(StatusCode::PRECONDITION_FAILED),
        }
    }
}

/// Evaluates the preconditions of a request in the order of RFC 9110 §13.2.2.
pub fn evaluate(method: &Method, headers: &HeaderMap, v: &Validators) -> Outcome {
    let safe = method == Method::GET || method == Method::HEAD;
    // Step 1: If-Match; step 2: If-Unmodified-Since only when If-Match is absent.
    if let Some(value) = header_str(headers, IF_MATCH) {
        if !list_matches(value, v.etag.as_deref(), false) {
            return Outcome::Failed;
        }
    } else if let (Some(since), Some(modified)) =
        (header_date(headers, IF_UNMODIFIED_SINCE), v.last_modified)
    {
        // §13.1.4: ignored when the representation has no modification date.
        if truncate(modified) > since {
            return Outcome::Failed;
        }
    }
    // Step 3: If-None-Match (weak comparison); step 4: If-Modified-Since only when it is absent.
    if let Some(value) = header_str(headers, IF_NONE_MATCH) {
        if list_matches(value, v.etag.as_deref(), true) {
            return if safe {
                Outcome::NotModified
            } else {
                Outcome::Failed
            };
        }
    } else if safe {
        // §13.1.3: ignored when the representation has no modification date.
        if let (Some(since), Some(modified)) =
            (header_date(headers, IF_MODIFIED_SINCE), v.last_modified)
        {
            if truncate(modified) <= since {
                return Outcome::NotModified;
            }
        }
    }
    Outcome::Proceed
}

/// RFC 9110 §13.1.5: whether a Range may be honoured given If-Range. An entity tag must match
/// strongly; a date must equal the Last-Modified exactly.
pub fn if_range_allows(headers: &HeaderMap, v: &Validators) -> bool {
    let Some(value) = header_str(headers, IF_RANGE) else {
        return true;
    };
    let value = value.trim();
    if value.starts_with('"') || value.starts_with("W/") {
        // A strong comparison: weak tags never match.
        return !value.starts_with("W/")
            && v.etag
                .as_deref()
                .is_some_and(|e| !e.starts_with("W/") && e == value);
    }
    match (httpdate::parse_http_date(value), v.last_modified) {
        (Ok(d), Some(modified)) => d == truncate(modified),
        _ => false,
    }
}

fn header_str(headers: &HeaderMap, name: http::header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// A date header; an invalid date is ignored, as RFC 9110 §13.1.3 requires.
fn header_date(headers: &HeaderMap, name: http::header::HeaderName) -> Option<SystemTime> {
    header_str(headers, name).and_then(|s| httpdate::parse_http_date(s).ok())
}

fn truncate(t: SystemTime) -> SystemTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs)
}

/// Whether a comma-separated list of entity tags (or `*`) matches `etag`. `*` matches any
/// current representation, even one without a tag; a specific tag needs ours. The strong
/// comparison (`weak == false`) never matches a weak tag (RFC 9110 §8.8.3.2).
fn list_matches(list: &str, etag: Option<&str>, weak: bool) -> bool {
    members(list).any(|tag| {
        if tag == "*" {
            return true;
        }
        let Some(etag) = etag else { return false };
        let ours = etag.trim_start_matches("W/");
        match tag.strip_prefix("W/") {
            Some(stripped) => weak && stripped == ours,
            None if weak => tag == ours,
            None => tag == etag && !etag.starts_with("W/"),
        }
    })
}

/// The members of a comma-separated list of entity tags, trimmed. A comma inside quotes belongs
/// to its tag (RFC 9110 §8.8.3: `etagc` includes `,`), so `"a,b"` is one member.
fn members(list: &str) -> impl Iterator<Item = &str> {
    let mut rest = list;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut quoted = false;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                if c == '"' {
                    quoted = !quoted;
                }
                c == ',' && !quoted
            })
            .map_or(rest.len(), |(i, _)| i);
        let member = rest[..end].trim();
        rest = rest.get(end + 1..).unwrap_or_default();
        Some(member)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_rewritten_within_a_second_with_the_same_length_gets_a_new_etag() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 100);
        let later = t + std::time::Duration::from_millis(300);
        assert_ne!(etag(12, t), etag(12, later));
        assert_ne!(etag(12, t), etag(13, t));
        assert_eq!(etag(12, t), etag(12, t));
    }
    use std::time::Duration;

    fn v() -> Validators {
        Validators {
            etag: Some("\"a-1\"".into()),
            last_modified: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, val) in pairs {
            h.insert(*k, val.parse().expect("header value"));
        }
        h
    }

    #[test]
    fn none_match_wins_over_modified_since() {
        let old = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH);
        let h = headers(&[("if-none-match", "\"a-1\""), ("if-modified-since", &old)]);
        assert_eq!(evaluate(&Method::GET, &h, &v()), Outcome::NotModified);
        let h = headers(&[
            ("if-none-match", "\"zzz\""),
            (
                "if-modified-since",
                &httpdate::fmt_http_date(v().last_modified.expect("set")),
            ),
        ]);
        assert_eq!(evaluate(&Method::GET, &h, &v()), Outcome::Proceed);
        let h = headers(&[("if-none-match", "W/\"a-1\", \"b\"")]);
        assert_eq!(evaluate(&Method::HEAD, &h, &v()), Outcome::NotModified);
    }

    #[test]
    fn modified_since_and_failed_preconditions() {
        let h = headers(&[(
            "if-modified-since",
            &httpdate::fmt_http_date(v().last_modified.expect("set")),
        )]);
        assert_eq!(evaluate(&Method::GET, &h, &v()), Outcome::NotModified);
        let h = headers(&[("if-modified-since", "garbage")]);
        assert_eq!(evaluate(&Method::GET, &h, &v()), Outcome::Proceed);
        let h = headers(&[("if-match", "\"other\"")]);
        assert_eq!(evaluate(&Method::GET, &h, &v()), Outcome::Failed);
        let h = headers(&[(
            "if-unmodified-since",
            &httpdate::fmt_http_date(SystemTime::UNIX_EPOCH),
        )]);
        assert_eq!(evaluate(&Method::GET, &h, &v()), Outcome::Failed);
    }

    #[test]
    fn missing_validators() {
        // §13.1.3 and §13.1.4: date conditions do not apply without a Last-Modified; `*`
        // matches any current representation, with or without a tag.
        let none = Validators {
            etag: None,
            last_modified: None,
        };
        let lm = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH);
        assert_eq!(
            evaluate(&Method::GET, &headers(&[("if-modified-since", &lm)]), &none),
            Outcome::Proceed
        );
        assert_eq!(
            evaluate(
                &Method::GET,
                &headers(&[("if-unmodified-since", &lm)]),
                &none
            ),
            Outcome::Proceed
        );
        assert_eq!(
            evaluate(&Method::GET, &headers(&[("if-none-match", "*")]), &none),
            Outcome::NotModified
        );
        assert_eq!(
            evaluate(&Method::GET, &headers(&[("if-none-match", "\"x\"")]), &none),
            Outcome::Proceed
        );
        assert!(!if_range_allows(&headers(&[("if-range", &lm)]), &none));
    }

    #[test]
    fn a_comma_inside_an_entity_tag_is_part_of_it() {
        // Found by tests/fuzz.rs: the list was split at every comma, so `"a,b"` never matched.
        let v = Validators {
            etag: Some("\"a,b\"".into()),
            last_modified: None,
        };
        let h = headers(&[("if-none-match", "\"x\", \"a,b\"")]);
        assert_eq!(evaluate(&Method::GET, &h, &v), Outcome::NotModified);
        let h = headers(&[("if-match", "\"a\", \"b\"")]);
        assert_eq!(evaluate(&Method::GET, &h, &v), Outcome::Failed);
    }

    #[test]
    fn if_range() {
        assert!(if_range_allows(&headers(&[("if-range", "\"a-1\"")]), &v()));
        assert!(!if_range_allows(
            &headers(&[("if-range", "W/\"a-1\"")]),
            &v()
        ));
        assert!(!if_range_allows(&headers(&[("if-range", "\"b\"")]), &v()));
        assert!(if_range_allows(
            &headers(&[(
                "if-range",
                &httpdate::fmt_http_date(v().last_modified.expect("set"))
            )]),
            &v()
        ));
    }
}
