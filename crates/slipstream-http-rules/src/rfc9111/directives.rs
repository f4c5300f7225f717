//! Parsing of cache directives: `Cache-Control` (RFC 9111 §5.2), the targeted
//! `CDN-Cache-Control` (RFC 9213, a Structured Fields Dictionary, RFC 8941 §3.2) and the
//! request `Pragma` (RFC 9111 §5.4). Malformed input never fails the caller: an unparseable
//! directive is skipped, and an invalid targeted field counts as absent (RFC 9213 §2.1).

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, CACHE_CONTROL, PRAGMA};

/// RFC 9111 §1.2.2: a delta-seconds value too large to represent is taken as 2^31.
pub(crate) const DELTA_SECONDS_MAX: u64 = 2_147_483_648;

/// The directives of one field, names lowercased, in order of appearance (duplicates kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Directives {
    items: Vec<(String, Option<String>)>,
}

/// The value of a delta-seconds directive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delta {
    Absent,
    /// Present with a valid, unambiguous value.
    Valid(Duration),
    /// Present but without a valid value, or with conflicting duplicates (RFC 9111 §4.2.1).
    Invalid,
}

impl Directives {
    /// The `Cache-Control` directives of a header map (all field lines).
    pub(crate) fn cache_control(headers: &HeaderMap) -> Directives {
        Directives::parse_lines(headers, &CACHE_CONTROL)
    }

    /// Directives from every line of a field with `Cache-Control` syntax (RFC 9111 §5.2:
    /// `#( token [ "=" ( token / quoted-string ) ] )`, names case-insensitive).
    pub(crate) fn parse_lines(headers: &HeaderMap, name: &HeaderName) -> Directives {
        let mut items = Vec::new();
        for line in headers.get_all(name) {
            parse_cache_control_line(line.as_bytes(), &mut items);
        }
        Directives { items }
    }

    /// Whether the directive is present (with or without an argument).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.items.iter().any(|(n, _)| n == name)
    }

    /// The argument of the first occurrence: `None` if absent, `Some(None)` if valueless.
    pub(crate) fn arg(&self, name: &str) -> Option<Option<&str>> {
        self.items
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_deref())
    }

    /// Adds a valueless directive.
    pub(crate) fn push(&mut self, name: &str) {
        self.items.push((name.to_owned(), None));
    }

    /// A delta-seconds argument (RFC 9111 §1.2.2). Both token and quoted-string forms are
    /// accepted (§5.2). Duplicates with different values make the directive invalid (§4.2.1).
    pub(crate) fn seconds(&self, name: &str) -> Delta {
        let mut found: Option<Option<u64>> = None;
        for (n, v) in &self.items {
            if n != name {
                continue;
            }
            let parsed = v.as_deref().and_then(delta_seconds);
            match found {
                None => found = Some(parsed),
                Some(prev) if prev != parsed => return Delta::Invalid,
                Some(_) => {}
            }
        }
        match found {
            None => Delta::Absent,
            Some(None) => Delta::Invalid,
            Some(Some(secs)) => Delta::Valid(Duration::from_secs(secs)),
        }
    }

    /// Renders the directives back in `Cache-Control` syntax, for handing the targeted field's
    /// policy to code that only reads `Cache-Control`. Values that are not plain tokens are
    /// dropped (the directive name is kept), which only loses qualified `private`/`no-cache`
    /// field lists — and those are treated as unqualified everywhere in this module anyway.
    pub(crate) fn to_cache_control(&self) -> String {
        let mut out = String::new();
        for (n, v) in &self.items {
            if !out.is_empty() {
                out.push_str(", ");
            }
            out.push_str(n);
            if let Some(v) = v
                .as_deref()
                .filter(|v| !v.is_empty() && v.bytes().all(is_tchar))
            {
                out.push('=');
                out.push_str(v);
            }
        }
        out
    }

    /// These directives without any occurrence of `name`.
    pub(crate) fn without(&self, name: &str) -> Directives {
        Directives {
            items: self
                .items
                .iter()
                .filter(|(n, _)| n != name)
                .cloned()
                .collect(),
        }
    }

    /// Whether there are no directives at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The directives in order, for the fuzz targets.
    #[cfg(test)]
    pub(crate) fn items(&self) -> &[(String, Option<String>)] {
        &self.items
    }
}

/// RFC 9111 §1.2.2: `delta-seconds = 1*DIGIT`; overflow saturates at 2^31.
fn delta_seconds(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: u64 = 0;
    for b in s.bytes() {
        v = v.saturating_mul(10).saturating_add(u64::from(b - b'0'));
    }
    Some(v.min(DELTA_SECONDS_MAX))
}

/// RFC 9110 §5.6.2 tchar.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// One `Cache-Control` field line. A member that does not parse is skipped up to the next
/// top-level comma, so one bad directive does not hide the others.
fn parse_cache_control_line(s: &[u8], out: &mut Vec<(String, Option<String>)>) {
    let mut i = 0;
    while i < s.len() {
        while i < s.len() && (is_ows(s[i]) || s[i] == b',') {
            i += 1;
        }
        let start = i;
        while i < s.len() && is_tchar(s[i]) {
            i += 1;
        }
        if i == start {
            i = skip_member(s, i);
            continue;
        }
        let name = String::from_utf8_lossy(&s[start..i]).to_ascii_lowercase();
        while i < s.len() && is_ows(s[i]) {
            i += 1;
        }
        let mut value = None;
        if i < s.len() && s[i] == b'=' {
            i += 1;
            while i < s.len() && is_ows(s[i]) {
                i += 1;
            }
            if i < s.len() && s[i] == b'"' {
                match quoted_string(s, i) {
                    Some((v, next)) => {
                        value = Some(v);
                        i = next;
                    }
                    None => return, // unterminated quote: nothing after it is trustworthy
                }
            } else {
                let vs = i;
                while i < s.len() && is_tchar(s[i]) {
                    i += 1;
                }
                value = Some(String::from_utf8_lossy(&s[vs..i]).into_owned());
            }
        }
        while i < s.len() && is_ows(s[i]) {
            i += 1;
        }
        if i < s.len() && s[i] != b',' {
            i = skip_member(s, i); // trailing garbage: the whole member is malformed
            continue;
        }
        out.push((name, value));
    }
}

/// RFC 9110 §5.6.4 quoted-string starting at `s[i] == '"'`; returns the unescaped value and the
/// index after the closing quote.
fn quoted_string(s: &[u8], mut i: usize) -> Option<(String, usize)> {
    i += 1;
    let mut v = Vec::new();
    while i < s.len() {
        match s[i] {
            b'"' => return Some((String::from_utf8_lossy(&v).into_owned(), i + 1)),
            b'\\' if i + 1 < s.len() => {
                v.push(s[i + 1]);
                i += 2;
            }
            b => {
                v.push(b);
                i += 1;
            }
        }
    }
    None
}

/// Skips to the next comma outside a quoted string (or the end: never past it, even when the
/// value ends in a quoted backslash).
fn skip_member(s: &[u8], mut i: usize) -> usize {
    let mut quoted = false;
    while i < s.len() {
        match s[i] {
            b'"' => quoted = !quoted,
            b'\\' if quoted => i += 1,
            b',' if !quoted => return i,
            _ => {}
        }
        i += 1;
    }
    i.min(s.len())
}

/// The Edge Architecture's `Surrogate-Control` (W3C Note, 2001, §3): Cache-Control's syntax,
/// where a member may end in `;device-token` to target one surrogate (the token it announced in
/// `Surrogate-Capability`). Members targeted at `device` win; without any, the untargeted members
/// apply. Members targeted at other devices never apply.
pub(crate) fn surrogate_control(
    headers: &HeaderMap,
    name: &HeaderName,
    device: Option<&str>,
) -> Directives {
    let mut mine = Vec::new();
    let mut everyone = Vec::new();
    for line in headers.get_all(name) {
        let s = line.as_bytes();
        let mut start = 0;
        while start < s.len() {
            let end = skip_member(s, start);
            let member = &s[start..end];
            start = end + 1;
            // The target follows the last `;` outside a quoted string.
            let mut quoted = false;
            let mut split = None;
            for (i, &b) in member.iter().enumerate() {
                match b {
                    b'"' => quoted = !quoted,
                    b';' if !quoted => split = Some(i),
                    _ => {}
                }
            }
            match split {
                None => parse_cache_control_line(member, &mut everyone),
                Some(i) => {
                    let target = String::from_utf8_lossy(&member[i + 1..]);
                    if device.is_some_and(|d| target.trim().eq_ignore_ascii_case(d)) {
                        parse_cache_control_line(&member[..i], &mut mine);
                    }
                }
            }
        }
    }
    Directives {
        items: if mine.is_empty() { everyone } else { mine },
    }
}

/// RFC 9111 §5.4: a request `Pragma: no-cache` counts as `Cache-Control: no-cache` only when the
/// request has no `Cache-Control` field.
pub(crate) fn pragma_no_cache(headers: &HeaderMap) -> bool {
    !headers.contains_key(CACHE_CONTROL)
        && headers
            .get_all(PRAGMA)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|p| p.trim().eq_ignore_ascii_case("no-cache"))
}

/// RFC 9213 §2.1 with RFC 8941 §4.2.2: the `CDN-Cache-Control` field as a Structured Fields
/// Dictionary. `None` when it is absent, empty or fails to parse — then the cache falls back to
/// `Cache-Control` and `Expires`. Members map to directives: a bare key or `?1` is a valueless
/// directive, an Integer/Token/String is its argument, `?0` removes the directive; parameters are
/// ignored. Duplicate keys keep the last value (RFC 8941 §4.2.2).
pub(crate) fn cdn_cache_control(headers: &HeaderMap, name: &HeaderName) -> Option<Directives> {
    let mut lines = headers.get_all(name).iter().peekable();
    lines.peek()?;
    // RFC 8941 §4.2: multiple field lines are combined with ", " before parsing.
    let mut combined = Vec::new();
    for (k, line) in lines.enumerate() {
        if k > 0 {
            combined.extend_from_slice(b", ");
        }
        combined.extend_from_slice(line.as_bytes());
    }
    let mut members: Vec<(String, Option<Option<String>>)> = Vec::new();
    sf::dictionary(&combined, &mut members)?;
    if members.is_empty() {
        return None; // "valid, non-empty" (RFC 9213 §2.1)
    }
    let mut items: Vec<(String, Option<String>)> = Vec::new();
    for (key, value) in members {
        items.retain(|(n, _)| n != &key);
        if let Some(v) = value {
            items.push((key, v));
        }
    }
    Some(Directives { items })
}

/// A minimal RFC 8941 parser: enough to accept every valid Dictionary and reject invalid ones.
mod sf {
    /// RFC 8941 §4.2.2. Each member's value: `None` for `?0` (directive off), `Some(None)` for a
    /// valueless directive, `Some(Some(v))` for an argument.
    pub(super) fn dictionary(
        s: &[u8],
        out: &mut Vec<(String, Option<Option<String>>)>,
    ) -> Option<()> {
        let mut i = skip(s, 0, |b| b == b' ');
        while i < s.len() {
            let (key, next) = key(s, i)?;
            i = next;
            let value;
            if s.get(i) == Some(&b'=') {
                i += 1;
                if s.get(i) == Some(&b'(') {
                    i = inner_list(s, i)?;
                    value = Some(None);
                } else {
                    let (item, next) = bare_item(s, i)?;
                    i = next;
                    value = match item {
                        Item::Bool(false) => None,
                        Item::Bool(true) | Item::Other => Some(None),
                        // RFC 9213 §2.1: a delta-seconds directive's value is an Integer, and
                        // "implementations SHOULD NOT consume values that violate these inferred
                        // constraints": `max-age="60"` is kept without its value, so it counts
                        // as invalid (stale, RFC 9111 §4.2.1) rather than as 60 seconds.
                        Item::String(_) if DELTA_SECONDS_DIRECTIVES.contains(&key.as_str()) => {
                            Some(None)
                        }
                        Item::Value(v) | Item::String(v) => Some(Some(v)),
                    };
                }
            } else {
                value = Some(None);
            }
            i = parameters(s, i)?;
            out.push((key, value));
            i = skip(s, i, |b| b == b' ' || b == b'\t');
            if i >= s.len() {
                return Some(());
            }
            if s[i] != b',' {
                return None;
            }
            i = skip(s, i + 1, |b| b == b' ' || b == b'\t');
            if i >= s.len() {
                return None; // trailing comma
            }
        }
        Some(())
    }

    /// The directives whose argument is delta-seconds (RFC 9111 §5.2, RFC 5861).
    const DELTA_SECONDS_DIRECTIVES: &[&str] = &[
        "max-age",
        "s-maxage",
        "max-stale",
        "min-fresh",
        "stale-while-revalidate",
        "stale-if-error",
    ];

    enum Item {
        Bool(bool),
        /// An Integer, Decimal or Token, as text.
        Value(String),
        /// A String, unescaped.
        String(String),
        Other,
    }

    fn skip(s: &[u8], mut i: usize, f: impl Fn(u8) -> bool) -> usize {
        while i < s.len() && f(s[i]) {
            i += 1;
        }
        i
    }

    /// RFC 8941 §4.2.3.3.
    fn key(s: &[u8], i: usize) -> Option<(String, usize)> {
        let first = *s.get(i)?;
        if !(first.is_ascii_lowercase() || first == b'*') {
            return None;
        }
        let end = skip(s, i + 1, |b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b)
        });
        Some((String::from_utf8_lossy(&s[i..end]).into_owned(), end))
    }

    /// RFC 8941 §4.2.3.2.
    fn parameters(s: &[u8], mut i: usize) -> Option<usize> {
        while s.get(i) == Some(&b';') {
            i = skip(s, i + 1, |b| b == b' ');
            let (_, next) = key(s, i)?;
            i = next;
            if s.get(i) == Some(&b'=') {
                i = bare_item(s, i + 1)?.1;
            }
        }
        Some(i)
    }

    /// RFC 8941 §4.2.1.2.
    fn inner_list(s: &[u8], mut i: usize) -> Option<usize> {
        i += 1;
        loop {
            i = skip(s, i, |b| b == b' ');
            match s.get(i)? {
                b')' => return parameters(s, i + 1),
                _ => {
                    i = bare_item(s, i)?.1;
                    i = parameters(s, i)?;
                    if !matches!(s.get(i)?, b' ' | b')') {
                        return None;
                    }
                }
            }
        }
    }

    /// RFC 8941 §4.2.3.1 (Integer, Decimal, String, Token, Byte Sequence, Boolean).
    fn bare_item(s: &[u8], i: usize) -> Option<(Item, usize)> {
        let c = *s.get(i)?;
        match c {
            b'-' | b'0'..=b'9' => {
                let digits_from = if c == b'-' { i + 1 } else { i };
                let end = skip(s, digits_from, |b| b.is_ascii_digit() || b == b'.');
                let text = std::str::from_utf8(&s[i..end]).ok()?;
                let int_part = text.trim_start_matches('-');
                if int_part.is_empty() || !int_part.as_bytes()[0].is_ascii_digit() {
                    return None;
                }
                if let Some((whole, frac)) = int_part.split_once('.') {
                    // Decimal: up to 12 integer and 1-3 fractional digits. Not a delta-seconds.
                    if whole.len() > 12 || frac.is_empty() || frac.len() > 3 || frac.contains('.') {
                        return None;
                    }
                    return Some((Item::Value(text.to_owned()), end));
                }
                if int_part.len() > 15 {
                    return None;
                }
                Some((Item::Value(text.to_owned()), end))
            }
            b'"' => {
                let mut j = i + 1;
                let mut v = String::new();
                loop {
                    let b = *s.get(j)?;
                    match b {
                        b'"' => return Some((Item::String(v), j + 1)),
                        b'\\' => {
                            let e = *s.get(j + 1)?;
                            if e != b'"' && e != b'\\' {
                                return None;
                            }
                            v.push(char::from(e));
                            j += 2;
                        }
                        0x20..=0x7e => {
                            v.push(char::from(b));
                            j += 1;
                        }
                        _ => return None,
                    }
                }
            }
            b'*' | b'a'..=b'z' | b'A'..=b'Z' => {
                let end = skip(s, i + 1, |b| super::is_tchar(b) || b == b':' || b == b'/');
                Some((
                    Item::Value(String::from_utf8_lossy(&s[i..end]).into_owned()),
                    end,
                ))
            }
            b':' => {
                let end = skip(s, i + 1, |b| {
                    b.is_ascii_alphanumeric() || b"+/=".contains(&b)
                });
                (s.get(end) == Some(&b':')).then_some((Item::Other, end + 1))
            }
            b'?' => match s.get(i + 1)? {
                b'0' => Some((Item::Bool(false), i + 2)),
                b'1' => Some((Item::Bool(true), i + 2)),
                _ => None,
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn cc(v: &str) -> Directives {
        let mut h = HeaderMap::new();
        h.insert(CACHE_CONTROL, HeaderValue::from_str(v).unwrap());
        Directives::cache_control(&h)
    }

    fn cdn(v: &str) -> Option<Directives> {
        let mut h = HeaderMap::new();
        h.insert("cdn-cache-control", HeaderValue::from_str(v).unwrap());
        cdn_cache_control(&h, &HeaderName::from_static("cdn-cache-control"))
    }

    #[test]
    fn rfc9111_5_2_token_and_quoted_arguments() {
        let d = cc(r#"Max-Age="60", no-cache="set-cookie, x", public , s-maxage=5"#);
        assert_eq!(d.seconds("max-age"), Delta::Valid(Duration::from_secs(60)));
        assert!(d.has("no-cache") && d.has("public"));
        assert_eq!(d.seconds("s-maxage"), Delta::Valid(Duration::from_secs(5)));
        assert!(!d.has("x"), "a comma inside a quoted string does not split");
    }

    #[test]
    fn rfc9111_1_2_2_delta_seconds_saturates_and_rejects_junk() {
        let d = cc("max-age=99999999999999999999999");
        assert_eq!(
            d.seconds("max-age"),
            Delta::Valid(Duration::from_secs(DELTA_SECONDS_MAX))
        );
        assert_eq!(cc("max-age=-1").seconds("max-age"), Delta::Invalid);
        assert_eq!(cc("max-age").seconds("max-age"), Delta::Invalid);
        assert_eq!(cc("max-age=1.5").seconds("max-age"), Delta::Invalid);
    }

    #[test]
    fn rfc9111_4_2_1_conflicting_duplicates_are_invalid() {
        assert_eq!(
            cc("max-age=1, max-age=2").seconds("max-age"),
            Delta::Invalid
        );
        assert_eq!(
            cc("max-age=1, max-age=1").seconds("max-age"),
            Delta::Valid(Duration::from_secs(1))
        );
    }

    #[test]
    fn malformed_member_is_skipped() {
        let d = cc("max-age=5 junk, public, =x, \"q\", no-store");
        assert_eq!(d.seconds("max-age"), Delta::Absent);
        assert!(d.has("public") && d.has("no-store"));
    }

    #[test]
    fn rfc9213_2_1_structured_dictionary() {
        let d = cdn(r#"max-age=60, no-store=?0, private;x=1, must-revalidate=?1, a="s""#).unwrap();
        assert_eq!(d.seconds("max-age"), Delta::Valid(Duration::from_secs(60)));
        assert!(!d.has("no-store"));
        assert!(d.has("private") && d.has("must-revalidate") && d.has("a"));
        assert_eq!(
            cdn("max-age=-5").unwrap().seconds("max-age"),
            Delta::Invalid
        );
        assert_eq!(
            cdn("max-age=1.5").unwrap().seconds("max-age"),
            Delta::Invalid
        );
        // A String where an Integer belongs is not consumed (RFC 9213 §2.1).
        assert_eq!(
            cdn("max-age=\"10000\"").unwrap().seconds("max-age"),
            Delta::Invalid
        );
        // Last duplicate wins (RFC 8941 §4.2.2).
        let d = cdn("max-age=1, max-age=2").unwrap();
        assert_eq!(d.seconds("max-age"), Delta::Valid(Duration::from_secs(2)));
    }

    #[test]
    fn surrogate_control_targets() {
        let sc = |v: &str, device| {
            let mut h = HeaderMap::new();
            h.insert("surrogate-control", HeaderValue::from_str(v).unwrap());
            surrogate_control(&h, &HeaderName::from_static("surrogate-control"), device)
        };
        let d = sc("max-age=60;edge, no-store", Some("edge"));
        assert_eq!(d.seconds("max-age"), Delta::Valid(Duration::from_secs(60)));
        assert!(
            !d.has("no-store"),
            "targeted members win over untargeted ones"
        );
        let d = sc("max-age=60;other, no-store", Some("edge"));
        assert!(d.has("no-store") && !d.has("max-age"));
        assert!(sc("max-age=60;other", Some("edge")).is_empty());
        assert!(sc("max-age=60;edge", None).is_empty());
        let d = sc("content=\"ESI/1.0;x\", MaX-aGe=5", Some("x"));
        assert_eq!(d.seconds("max-age"), Delta::Valid(Duration::from_secs(5)));
    }

    #[test]
    fn rfc9213_2_1_invalid_dictionary_is_ignored() {
        assert!(cdn("Max-Age=60").is_none(), "keys are lowercase");
        assert!(cdn("max-age=60,").is_none(), "trailing comma");
        assert!(cdn("max-age=60 no-store").is_none());
        assert!(cdn("max-age=\"60").is_none());
        assert!(cdn("  ").is_none(), "empty");
        assert!(
            cdn("no-store=?0").is_some_and(|d| d.is_empty()),
            "valid, so it still replaces"
        );
        assert!(cdn("a=(1 2);p, b").is_some());
    }
}
