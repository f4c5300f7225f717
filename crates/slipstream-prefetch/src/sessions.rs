//! Traces as clients' sessions, with URLs interned as [`Sym`]s.
//!
//! - MSNBC (UCI's `msnbc990928.seq`): one line per user-day, each a sequence of page
//!   categories numbered from 1 (`frontpage`, `news`, …) after a `% Sequences:` header.
//! - Common Log Format: requests grouped by client (the log's host), a session ending after
//!   [`IDLE_S`] without a request. A request whose path ends in an image, stylesheet, script or
//!   font extension is an embedded object, anything else a page.

use std::collections::HashMap;

use slipstream_workload::trace::Trace;

use crate::predict::{Item, Sym};

/// A client's session.
pub type Session = Vec<Item>;

/// A session ends after this long without a request from its client (the usual 30 minutes).
pub const IDLE_S: f64 = 30.0 * 60.0;

/// Interned URLs (or categories), with the size of each where the trace gives one.
#[derive(Debug, Clone, Default)]
pub struct Symbols {
    ids: HashMap<String, Sym>,
    names: Vec<String>,
    sizes: Vec<u64>,
}

impl Symbols {
    /// The id of `name`, interning it.
    pub fn intern(&mut self, name: &str) -> Sym {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = self.names.len() as Sym;
        self.ids.insert(name.to_owned(), id);
        self.names.push(name.to_owned());
        self.sizes.push(0);
        id
    }

    /// The id of `name` if it was interned.
    pub fn find(&self, name: &str) -> Option<Sym> {
        self.ids.get(name).copied()
    }

    /// The name of `sym`.
    pub fn name(&self, sym: Sym) -> &str {
        &self.names[sym as usize]
    }

    /// The size in bytes of `sym` (its last response's), or 0 if the trace gives none.
    pub fn size(&self, sym: Sym) -> u64 {
        self.sizes[sym as usize]
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// A trace read as sessions.
#[derive(Debug, Clone, Default)]
pub struct Sessions {
    /// The sessions, in the order they start.
    pub sessions: Vec<Session>,
    /// What their items name.
    pub symbols: Symbols,
    /// Whether items carry sizes (CLF) or stand for pages of unknown size (MSNBC).
    pub sized: bool,
}

impl Sessions {
    /// The number of requests in all sessions.
    pub fn requests(&self) -> usize {
        self.sessions.iter().map(Vec::len).sum()
    }
}

/// Why a trace could not be read as sessions.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    /// A line is malformed.
    #[error("{source_name}:{line}: {message}")]
    Parse {
        /// The trace's name.
        source_name: String,
        /// The 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The trace holds no session at all.
    #[error("{0}: no sessions (is it the right format?)")]
    Empty(String),
}

/// Reads MSNBC's sequence format: `%` lines (the header, naming the categories on the line
/// after `% Different categories found in input file:`) are skipped, as are empty lines; each
/// other line is one session of category numbers from 1. A category is named after the header
/// when it gives names, else by its number.
pub fn msnbc(text: &str, source_name: &str) -> Result<Sessions, SessionsError> {
    let mut out = Sessions::default();
    let mut names: Vec<String> = Vec::new();
    let mut after_categories = false;
    let mut in_sequences = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('%') {
            after_categories = line.contains("categories");
            in_sequences |= line.contains("Sequences");
            continue;
        }
        if line.is_empty() {
            continue;
        }
        if after_categories && !in_sequences {
            names = line.split_whitespace().map(str::to_owned).collect();
            after_categories = false;
            continue;
        }
        let mut session = Session::new();
        for word in line.split_whitespace() {
            let n: usize = match word.parse() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(SessionsError::Parse {
                        source_name: source_name.to_owned(),
                        line: i + 1,
                        message: format!("{word:?} is not a category number (1, 2, …)"),
                    })
                }
            };
            let name = names.get(n - 1).cloned().unwrap_or_else(|| n.to_string());
            session.push(Item::page(out.symbols.intern(&name)));
        }
        out.sessions.push(session);
    }
    if out.sessions.is_empty() {
        return Err(SessionsError::Empty(source_name.to_owned()));
    }
    Ok(out)
}

/// Whether a URL path names an embedded object (image, stylesheet, script, font, icon) rather
/// than a page.
pub fn is_embedded(path: &str) -> bool {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let Some((_, ext)) = path.rsplit_once('.') else {
        return false;
    };
    if ext.contains('/') {
        return false;
    }
    matches!(
        ext.to_ascii_lowercase().as_str(),
        "png"
            | "jpg"
            | "jpeg"
            | "gif"
            | "ico"
            | "svg"
            | "webp"
            | "avif"
            | "bmp"
            | "css"
            | "js"
            | "mjs"
            | "woff"
            | "woff2"
            | "ttf"
            | "otf"
            | "eot"
    )
}

/// A CLF trace's requests as sessions: by client, in log order, split after [`IDLE_S`] idle.
/// Needs the clients a CLF read records (`Trace::clients`).
pub fn from_trace(trace: &Trace, source_name: &str) -> Result<Sessions, SessionsError> {
    if trace.clients.len() != trace.requests.len() {
        return Err(SessionsError::Parse {
            source_name: source_name.to_owned(),
            line: 1,
            message: "the trace names no clients (a Common Log Format log is needed)".into(),
        });
    }
    let mut out = Sessions {
        sized: true,
        ..Sessions::default()
    };
    // The open session of each client: its index in `out.sessions` and its last request time.
    let mut open: HashMap<&str, (usize, f64)> = HashMap::new();
    for (req, client) in trace.requests.iter().zip(&trace.clients) {
        let sym = out.symbols.intern(&req.key);
        out.symbols.sizes[sym as usize] = req.size_bytes;
        let item = if is_embedded(&req.key) {
            Item::embedded(sym)
        } else {
            Item::page(sym)
        };
        match open.get_mut(client.as_str()) {
            // Logs are written when responses end, so times go back a little: only a gap
            // forward ends a session.
            Some((index, last)) if req.time_s - *last <= IDLE_S => {
                out.sessions[*index].push(item);
                *last = last.max(req.time_s);
            }
            _ => {
                open.insert(client, (out.sessions.len(), req.time_s));
                out.sessions.push(vec![item]);
            }
        }
    }
    if out.sessions.is_empty() {
        return Err(SessionsError::Empty(source_name.to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msnbc_sequences_with_named_categories() {
        let text = "% Different categories found in input file:\n\nfrontpage news tech\n\n\n% Sequences:\n\n1 1 \n2 \n3 2 2 \n";
        let s = msnbc(text, "t").expect("sessions");
        assert_eq!(s.sessions.len(), 3);
        assert_eq!(s.requests(), 6);
        assert_eq!(s.symbols.name(s.sessions[2][0].sym), "tech");
        assert!(s.sessions.iter().flatten().all(|i| i.page));
        assert!(!s.sized);
    }

    #[test]
    fn a_bad_msnbc_line_is_named() {
        let e = msnbc("% Sequences:\n1 2\n1 x 3\n", "seq").unwrap_err();
        assert_eq!(
            e.to_string(),
            "seq:3: \"x\" is not a category number (1, 2, …)"
        );
        let e = msnbc("% Sequences:\n0\n", "seq").unwrap_err();
        assert!(e.to_string().starts_with("seq:2:"), "{e}");
        assert!(matches!(
            msnbc("% only a header\n", "seq"),
            Err(SessionsError::Empty(_))
        ));
    }

    #[test]
    fn clf_requests_make_sessions_by_client_and_idle_time() {
        let log = "\
a - - [10/Oct/2000:13:00:00 +0000] \"GET /index.html HTTP/1.0\" 200 100
b - - [10/Oct/2000:13:00:01 +0000] \"GET /b.html HTTP/1.0\" 200 50
a - - [10/Oct/2000:13:00:02 +0000] \"GET /logo.png HTTP/1.0\" 200 7
a - - [10/Oct/2000:13:00:01 +0000] \"GET /next.html?x=1 HTTP/1.0\" 200 30
a - - [10/Oct/2000:14:00:00 +0000] \"GET /index.html HTTP/1.0\" 200 100
";
        let trace = slipstream_workload::trace::read(log.as_bytes(), "log", None).expect("trace");
        let s = from_trace(&trace, "log").expect("sessions");
        let names = |i: usize| -> Vec<(&str, bool)> {
            s.sessions[i]
                .iter()
                .map(|it| (s.symbols.name(it.sym), it.page))
                .collect()
        };
        assert_eq!(s.sessions.len(), 3);
        assert_eq!(
            names(0),
            [
                ("/index.html", true),
                ("/logo.png", false),
                ("/next.html?x=1", true)
            ]
        );
        assert_eq!(names(1), [("/b.html", true)]);
        assert_eq!(names(2), [("/index.html", true)]);
        assert_eq!(s.symbols.size(s.sessions[0][1].sym), 7);
        assert!(s.sized);
    }

    #[test]
    fn embedded_objects_by_extension() {
        for p in ["/a.png", "/x/y.JS", "/f.woff2?v=3", "/s.css#x"] {
            assert!(is_embedded(p), "{p}");
        }
        for p in [
            "/",
            "/a.html",
            "/blog/tags/ipv6",
            "/v1.2/page",
            "/q?file=a.png",
        ] {
            assert!(!is_embedded(p), "{p}");
        }
    }
}
