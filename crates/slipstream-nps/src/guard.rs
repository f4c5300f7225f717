//! What prefetching must not do, whatever the budget says: spend a user's data when the user
//! asked to save it, or fetch a page made for one user ahead of time.
//!
//! - **Save-Data and slow connections.** A request with `Save-Data: on` (the browser's data
//!   saver, RFC 8942's client hints) or an `ECT` of `slow-2g` or `2g` gets no hint list and an
//!   empty Speculation Rules set: prefetching would spend data the user asked to keep. The
//!   page itself is the same either way (no `Vary` needed); the agent also checks
//!   `navigator.connection.saveData` before it asks.
//! - **Personal pages.** A response that sets a cookie or is `Cache-Control: private` or
//!   `no-store`, and a request that carried a `Cookie` or `Authorization`, are not learnt, and
//!   such a response's URL is never hinted afterwards (even if it was learnt before from a
//!   request without cookies): prefetching it would store one user's page in a cache, or run
//!   a personal request the user did not make. Only GETs are ever learnt, so non-idempotent
//!   URLs are not hinted either.

use std::collections::HashSet;

use http::header::{AUTHORIZATION, COOKIE, SET_COOKIE};
use http::HeaderMap;
use parking_lot::Mutex;

/// The most personal URLs remembered; past it, further ones are still not learnt, but a URL
/// learnt before without cookies could be hinted.
pub const MAX_PERSONAL: usize = 65_536;

/// Whether the client asked to save data or is on a slow connection.
pub fn wants_less_data(headers: &HeaderMap) -> bool {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().trim_matches('"').to_ascii_lowercase())
    };
    value("save-data").is_some_and(|v| v == "on")
        || value("ect").is_some_and(|v| v == "slow-2g" || v == "2g")
}

/// Whether a request carries what makes its answer personal (cookies, credentials).
pub fn personal_request(headers: &HeaderMap) -> bool {
    headers.contains_key(COOKIE) || headers.contains_key(AUTHORIZATION)
}

/// Whether a response is for one user only: it sets a cookie, or caches may not share or keep
/// it (`private`, `no-store`).
pub fn personal_response(headers: &HeaderMap) -> bool {
    headers.contains_key(SET_COOKIE) || slipstream_http_rules::rfc9111::private_or_no_store(headers)
}

/// The URLs whose responses were personal: never hinted.
#[derive(Debug, Default)]
pub struct Personal {
    urls: Mutex<HashSet<String>>,
}

impl Personal {
    /// Remembers `url` as personal (up to [`MAX_PERSONAL`] URLs).
    pub fn mark(&self, url: &str) {
        let mut urls = self.urls.lock();
        if urls.len() < MAX_PERSONAL && !urls.contains(url) {
            urls.insert(url.to_owned());
        }
    }

    /// Whether `url` was found personal.
    pub fn contains(&self, url: &str) -> bool {
        self.urls.lock().contains(url)
    }

    /// The URLs remembered.
    pub fn len(&self) -> usize {
        self.urls.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `hints` without the personal URLs, in order.
    pub fn retain_public(&self, mut hints: Vec<String>) -> Vec<String> {
        let urls = self.urls.lock();
        if !urls.is_empty() {
            hints.retain(|h| !urls.contains(h));
        }
        hints
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn save_data_and_slow_connections_are_told_apart() {
        assert!(wants_less_data(&headers(&[("save-data", "on")])));
        assert!(wants_less_data(&headers(&[("Save-Data", "On")])));
        assert!(wants_less_data(&headers(&[("ect", "2g")])));
        assert!(wants_less_data(&headers(&[("ect", "\"slow-2g\"")])));
        assert!(!wants_less_data(&headers(&[("save-data", "off")])));
        assert!(!wants_less_data(&headers(&[("ect", "4g")])));
        assert!(!wants_less_data(&headers(&[])));
    }

    #[test]
    fn personal_requests_and_responses() {
        assert!(personal_request(&headers(&[("cookie", "a=1")])));
        assert!(personal_request(&headers(&[("authorization", "Bearer x")])));
        assert!(!personal_request(&headers(&[("accept", "*/*")])));
        assert!(personal_response(&headers(&[("set-cookie", "a=1")])));
        assert!(personal_response(&headers(&[(
            "cache-control",
            "max-age=60, private"
        )])));
        assert!(personal_response(&headers(&[(
            "cache-control",
            "no-store"
        )])));
        assert!(personal_response(&headers(&[
            ("cache-control", "public"),
            ("cache-control", "private=\"x\"")
        ])));
        assert!(!personal_response(&headers(&[(
            "cache-control",
            "public, max-age=600"
        )])));
        // A comma inside a quoted string is not a directive boundary.
        assert!(!personal_response(&headers(&[(
            "cache-control",
            "no-cache=\"x-a, private\", max-age=60"
        )])));
        assert!(!personal_response(&headers(&[])));
    }

    #[test]
    fn personal_urls_are_left_out_of_lists() {
        let p = Personal::default();
        p.mark("/account.html");
        assert!(p.contains("/account.html"));
        assert_eq!(
            p.retain_public(vec![
                "/a.html".into(),
                "/account.html".into(),
                "/b.png".into()
            ]),
            ["/a.html", "/b.png"]
        );
    }
}
