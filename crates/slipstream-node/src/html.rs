//! A streaming HTML rewriter for body filters, on `lol_html`: capabilities (Web++'s replica
//! lists, NPS's munger) register [`HtmlHandler`]s, and [`Rewriter`] applies them to a page as
//! it streams, holding back no more than an unfinished tag.

use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use lol_html::send::{ElementContentHandlers, HtmlRewriter, Settings};
use parking_lot::Mutex;

use crate::body::BodyFilter;

pub use lol_html::html_content::ContentType;
pub use lol_html::send::Element;
pub use lol_html::HandlerResult;

/// Rewrites the elements a CSS selector matches.
pub trait HtmlHandler: Send + Sync + std::fmt::Debug + 'static {
    /// Which elements, e.g. `a[href]`.
    fn selector(&self) -> &str;
    /// Changes one matching element.
    fn element(&self, el: &mut Element<'_, '_>) -> HandlerResult;

    /// HTML to add at the end: before `</body>` when the page has that end tag, else at the
    /// end of the document; asked once every element up to there went through `element` (so
    /// it may carry what the handler collected).
    fn end(&self) -> Option<String> {
        None
    }
}

/// Whether a response is an HTML page a rewriter may change: 200 with an HTML content type.
pub fn is_page(parts: &http::response::Parts) -> bool {
    parts.status == http::StatusCode::OK
        && parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("text/html"))
}

/// A body filter applying [`HtmlHandler`]s.
pub struct Rewriter {
    rewriter: Option<HtmlRewriter<'static, Sink>>,
    out: Arc<Mutex<Vec<u8>>>,
}

impl std::fmt::Debug for Rewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewriter").finish_non_exhaustive()
    }
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl lol_html::OutputSink for Sink {
    fn handle_chunk(&mut self, chunk: &[u8]) {
        self.0.lock().extend_from_slice(chunk);
    }
}

/// A selector that `lol_html` does not support.
#[derive(Debug, thiserror::Error)]
#[error("HTML handler selector `{selector}`: {source}")]
pub struct SelectorError {
    selector: String,
    #[source]
    source: lol_html::errors::SelectorError,
}

impl Rewriter {
    /// A rewriter applying `handlers` (UTF-8 pages).
    pub fn new(handlers: &[Arc<dyn HtmlHandler>]) -> Result<Rewriter, SelectorError> {
        let mut element_content_handlers = Vec::with_capacity(handlers.len());
        for h in handlers {
            let selector: lol_html::Selector =
                h.selector().parse().map_err(|source| SelectorError {
                    selector: h.selector().to_owned(),
                    source,
                })?;
            let h = h.clone();
            element_content_handlers.push((
                std::borrow::Cow::Owned(selector),
                ElementContentHandlers::default()
                    .element(move |el: &mut Element<'_, '_>| h.element(el)),
            ));
        }
        let out = Arc::new(Mutex::new(Vec::new()));
        // What the handlers add at the end goes inside the body, before `</body>`, when the
        // page has one; otherwise at the end of the document. Once only.
        let written = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (in_body, body_written) = (handlers.to_vec(), written.clone());
        element_content_handlers.push((
            std::borrow::Cow::Owned("body".parse().expect("a valid selector")),
            ElementContentHandlers::default().element(move |el: &mut Element<'_, '_>| {
                let (enders, written) = (in_body.clone(), body_written.clone());
                // No end tag in the source (an implied one): the document end takes it.
                let _ = el.on_end_tag(Box::new(
                    move |end: &mut lol_html::html_content::EndTag<'_>| {
                        if !written.swap(true, std::sync::atomic::Ordering::Relaxed) {
                            for h in &enders {
                                if let Some(html) = h.end() {
                                    end.before(&html, lol_html::html_content::ContentType::Html);
                                }
                            }
                        }
                        Ok(())
                    },
                ));
                Ok(())
            }),
        ));
        let enders: Vec<Arc<dyn HtmlHandler>> = handlers.to_vec();
        let document_content_handlers = vec![lol_html::send::DocumentContentHandlers::default()
            .end(move |end: &mut lol_html::html_content::DocumentEnd<'_>| {
                if written.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    return Ok(());
                }
                for h in &enders {
                    if let Some(html) = h.end() {
                        end.append(&html, lol_html::html_content::ContentType::Html);
                    }
                }
                Ok(())
            })];
        let rewriter = HtmlRewriter::new(
            Settings {
                element_content_handlers,
                document_content_handlers,
                ..Settings::new_send()
            },
            Sink(out.clone()),
        );
        Ok(Rewriter {
            rewriter: Some(rewriter),
            out,
        })
    }

    fn take(&self) -> Bytes {
        Bytes::from(std::mem::take(&mut *self.out.lock()))
    }
}

impl BodyFilter for Rewriter {
    fn filter(&mut self, chunk: Bytes) -> std::io::Result<Bytes> {
        if let Some(r) = &mut self.rewriter {
            r.write(&chunk).map_err(std::io::Error::other)?;
        }
        Ok(self.take())
    }

    fn finish(&mut self) -> std::io::Result<Bytes> {
        if let Some(r) = self.rewriter.take() {
            r.end().map_err(std::io::Error::other)?;
        }
        Ok(self.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Mark;

    impl HtmlHandler for Mark {
        fn selector(&self) -> &str {
            "a[href]"
        }
        fn element(&self, el: &mut Element<'_, '_>) -> HandlerResult {
            el.set_attribute("data-seen", "1")?;
            Ok(())
        }
    }

    #[derive(Debug)]
    struct Tail;

    impl HtmlHandler for Tail {
        fn selector(&self) -> &str {
            "a[href]"
        }
        fn element(&self, _el: &mut Element<'_, '_>) -> HandlerResult {
            Ok(())
        }
        fn end(&self) -> Option<String> {
            Some("<script>tail</script>".into())
        }
    }

    fn rewrite(page: &str) -> String {
        let mut r = Rewriter::new(&[Arc::new(Tail)]).expect("selector");
        let mut out = r
            .filter(Bytes::from(page.to_owned()))
            .expect("write")
            .to_vec();
        out.extend_from_slice(&r.finish().expect("end"));
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn what_handlers_add_at_the_end_goes_inside_the_body() {
        assert_eq!(
            rewrite("<html><body><p>x</p></body></html>\n"),
            "<html><body><p>x</p><script>tail</script></body></html>\n"
        );
        // No `</body>` in the source: at the end of the document, once.
        assert_eq!(rewrite("<p>x</p>"), "<p>x</p><script>tail</script>");
        assert_eq!(
            rewrite("<html><body><p>x"),
            "<html><body><p>x<script>tail</script>"
        );
    }

    #[test]
    fn rewrites_across_chunk_boundaries() {
        let mut r = Rewriter::new(&[Arc::new(Mark)]).expect("selector");
        let mut out = Vec::new();
        for chunk in ["<p><a hr", "ef=\"/x\">x</a>", "</p>"] {
            out.extend_from_slice(&r.filter(Bytes::from(chunk)).expect("write"));
        }
        out.extend_from_slice(&r.finish().expect("end"));
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "<p><a href=\"/x\" data-seen=\"1\">x</a></p>"
        );
    }
}
