//! The hint server's endpoints on the node's router.
//!
//! `GET /_slipstream/hints?url=CUR&prev=PREV&turn=T`: the client's current document, the one
//! before it (000 §6.1's `PFCOOKIE`), and the turn in the chain of lists (`TURN`, from 0). The
//! answer is JSON:
//!
//! ```json
//! {"hints": ["/b.html", "/img/b.png"], "turn": 0, "next_turn": 1, "retry_after_ms": null}
//! ```
//!
//! A client's first hint request after a page may also report how long that page took to
//! load, as it saw it: `served_ms` (the page's `slipstream-served-ms` header, when the node
//! sent one) and `page_us` (microseconds), both or neither. The node measures what prefetching
//! costs demand from them (`cost_target`).
//!
//! `next_turn` is the turn to ask for once these are fetched (`null`: the chain has ended);
//! `retry_after_ms` says the budget had no room this epoch, and when to ask again (the same
//! turn). A request with `Save-Data: on` or a slow `ECT` gets no hints and `"save_data": true`
//! ([`crate::guard`]), as does the Speculation Rules set. A malformed request gets 400 and a sentence saying what is wrong; nothing about it
//! touches the model or the budget.
//!
//! `GET /_slipstream/prefetch`: the monitor's samples, the budget, and demand and prefetch
//! traffic, as JSON.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use http::header::{HeaderValue, CACHE_CONTROL};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use slipstream_http::Body;
use slipstream_node::respond::{json, method_not_allowed, text};
use slipstream_node::Endpoint;

use crate::Nps;

/// The longest document URL a hint request may name.
pub const MAX_URL_BYTES: usize = 2048;

/// `/_slipstream/hints`.
#[derive(Debug, Clone)]
pub struct HintsEndpoint(pub Arc<Nps>);

/// `/_slipstream/prefetch`.
#[derive(Debug, Clone)]
pub struct StatusEndpoint(pub Arc<Nps>);

/// A hint request's parameters, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintQuery {
    /// The current document's path.
    pub url: String,
    /// The previous document's path.
    pub prev: Option<String>,
    /// The turn.
    pub turn: usize,
    /// The client's report on its page: when it was served (`served_ms`) and how long it took
    /// to load, in microseconds (`page_us`).
    pub report: Option<(u64, u64)>,
}

/// Reads a document parameter: a path (`/...`), or an absolute `http(s)` URL whose path is
/// taken.
fn document(name: &str, value: &str) -> Result<String, String> {
    if value.len() > MAX_URL_BYTES {
        return Err(format!("`{name}` is longer than {MAX_URL_BYTES} bytes"));
    }
    let uri: http::Uri = value
        .parse()
        .map_err(|_| format!("`{name}` is not a URL: {value:?}"))?;
    match (uri.scheme_str(), uri.path_and_query()) {
        (None | Some("http") | Some("https"), Some(pq)) if pq.as_str().starts_with('/') => {
            Ok(pq.as_str().to_owned())
        }
        _ => Err(format!(
            "`{name}` must be a path starting with / or an http(s) URL, not {value:?}"
        )),
    }
}

/// Parses `url=...&prev=...&turn=...`; unknown parameters are ignored (cache busters).
pub fn parse_query(query: Option<&str>) -> Result<HintQuery, String> {
    let mut url = None;
    let mut prev = None;
    let mut turn = 0usize;
    let (mut served_ms, mut page_us) = (None, None);
    let whole = |name: &str, v: &str| {
        v.parse::<u64>()
            .map_err(|_| format!("`{name}` must be a whole number, not {v:?}"))
    };
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "url" => url = Some(document("url", &v)?),
            "prev" if !v.is_empty() => prev = Some(document("prev", &v)?),
            "turn" => {
                turn = v.parse::<u16>().map_err(|_| {
                    format!("`turn` must be a whole number from 0 to 65535, not {v:?}")
                })? as usize;
            }
            "served_ms" => served_ms = Some(whole("served_ms", &v)?),
            "page_us" => page_us = Some(whole("page_us", &v)?),
            _ => {}
        }
    }
    let url = url.ok_or("a hint request needs `url`, the client's current document")?;
    let report = match (served_ms, page_us) {
        (Some(at), Some(us)) => Some((at, us)),
        (None, None) => None,
        _ => return Err("`served_ms` and `page_us` go together: a report needs both".into()),
    };
    Ok(HintQuery {
        url,
        prev,
        turn,
        report,
    })
}

fn no_store(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A GET or HEAD of the endpoint itself with a valid query, or the response saying what is
/// wrong.
fn checked(req: &Request<Incoming>, rest: &str) -> Result<HintQuery, Box<Response<Body>>> {
    if !rest.is_empty() {
        return Err(Box::new(text(
            StatusCode::NOT_FOUND,
            "no such control endpoint",
        )));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Err(Box::new(method_not_allowed("GET, HEAD")));
    }
    parse_query(req.uri().query())
        .map_err(|why| Box::new(no_store(text(StatusCode::BAD_REQUEST, &why))))
}

#[async_trait]
impl Endpoint for HintsEndpoint {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        let q = match checked(&req, rest) {
            Ok(q) => q,
            Err(r) => return *r,
        };
        if req
            .extensions()
            .get::<crate::demand::ViaPrefetchListener>()
            .is_some()
        {
            self.0
                .hint_requests_via_listener
                .fetch_add(1, Ordering::Relaxed);
        }
        if let Some((served_ms, page_us)) = q.report {
            // Implausible reports (a page served in the future, a load of minutes) are
            // counted and left out; none stops the answer.
            self.0.report_page(served_ms, page_us);
        }
        if crate::guard::wants_less_data(req.headers()) {
            // The user asked to save data: no list, and no chain to come back for; the
            // budget is not touched.
            self.0.save_data_requests.fetch_add(1, Ordering::Relaxed);
            let body = serde_json::json!({
                "hints": [],
                "prefetch_base": self.0.prefetch_base(),
                "turn": q.turn,
                "next_turn": null,
                "retry_after_ms": null,
                "save_data": true,
            });
            return no_store(json(StatusCode::OK, &body));
        }
        let a = self.0.answer(&q.url, q.prev.as_deref(), q.turn);
        if let Some(hold) = a.hold {
            // The list's paced slot: answered then, so that the client prefetches on the
            // schedule instead of asking again (held, a request costs a timer, not a refusal).
            tokio::time::sleep(hold).await;
        }
        let body = serde_json::json!({
            "hints": a.hints,
            "prefetch_base": self.0.prefetch_base(),
            "turn": q.turn,
            "next_turn": a.next_turn,
            "retry_after_ms": a.retry_after.map(|d| d.as_millis() as u64),
        });
        no_store(json(StatusCode::OK, &body))
    }
}

/// `/_slipstream/speculationrules?url=CUR&prev=PREV`: the predictor's list for a page as a
/// Speculation Rules set (`application/speculationrules+json`), which the `Speculation-Rules`
/// header of the page names. Browsers then prefetch natively, each prefetch admitted by the
/// budget as it arrives.
#[derive(Debug, Clone)]
pub struct SpeculationRules(pub Arc<Nps>);

#[async_trait]
impl Endpoint for SpeculationRules {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        let q = match checked(&req, rest) {
            Ok(q) => q,
            Err(r) => return *r,
        };
        let urls = if crate::guard::wants_less_data(req.headers()) {
            self.0.save_data_requests.fetch_add(1, Ordering::Relaxed);
            Vec::new()
        } else {
            self.0.predictions(&q.url, q.prev.as_deref())
        };
        let rules = serde_json::json!({
            "prefetch": [{"source": "list", "urls": urls}],
        });
        let mut r = no_store(json(StatusCode::OK, &rules));
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/speculationrules+json"),
        );
        r
    }
}

#[async_trait]
impl Endpoint for StatusEndpoint {
    async fn call(&self, req: Request<Incoming>, rest: &str) -> Response<Body> {
        if !rest.is_empty() {
            return text(StatusCode::NOT_FOUND, "no such control endpoint");
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return method_not_allowed("GET, HEAD");
        }
        no_store(json(StatusCode::OK, &self.0.status()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_or_say_what_is_wrong() {
        assert_eq!(
            parse_query(Some("url=%2Fa.html&prev=/b.html&turn=2&_=123")),
            Ok(HintQuery {
                url: "/a.html".into(),
                prev: Some("/b.html".into()),
                turn: 2,
                report: None,
            })
        );
        assert_eq!(
            parse_query(Some("url=http://example.org/x?y=1&prev=")).unwrap(),
            HintQuery {
                url: "/x?y=1".into(),
                prev: None,
                turn: 0,
                report: None,
            }
        );
        assert_eq!(
            parse_query(Some("url=/a&served_ms=1200&page_us=3100"))
                .unwrap()
                .report,
            Some((1200, 3100))
        );
        for (q, says) in [
            (None, "needs `url`"),
            (Some("prev=/a"), "needs `url`"),
            (Some("url=a.html"), "must be a path"),
            (Some("url=ftp://h/a"), "must be a path"),
            (Some("url=/a&turn=-1"), "`turn`"),
            (Some("url=/a&turn=x"), "`turn`"),
            (Some("url=%20%7F"), "not a URL"),
            (Some("url=/a&served_ms=12"), "go together"),
            (Some("url=/a&page_us=12"), "go together"),
            (Some("url=/a&served_ms=-1&page_us=3"), "`served_ms`"),
            (Some("url=/a&served_ms=1&page_us=3.5"), "`page_us`"),
        ] {
            let e = parse_query(q).unwrap_err();
            assert!(e.contains(says), "{q:?}: {e}");
        }
        let long = format!("url=/{}", "a".repeat(MAX_URL_BYTES));
        assert!(parse_query(Some(&long)).unwrap_err().contains("longer"));
    }
}
