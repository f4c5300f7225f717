//! Header-field plumbing for a cache: which stored fields are forwarded (RFC 9110 §7.6.1,
//! RFC 9111 §3.1), how a 304 updates them (RFC 9111 §3.2), the Vary secondary key (§4.1) and the
//! URIs an unsafe request invalidates (§4.4).

use http::header::{HeaderMap, HeaderName, CONNECTION, VARY};
use http::uri::{Authority, Scheme};
use http::{Method, StatusCode, Uri};

/// Fields never forwarded from storage: RFC 9110 §7.6.1's hop-by-hop fields (plus `Trailer`,
/// which describes the framing of one message) and RFC 9111 §3.1's proxy-specific fields, which
/// a cache MUST NOT store unless its key includes the proxy's identity.
const NOT_FORWARDED: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "transfer-encoding",
    "upgrade",
    "trailer",
    "proxy-authenticate",
    "proxy-authentication-info",
    "proxy-authorization",
];

/// RFC 9111 §3.2: fields a 304 must not change in the stored response. Content-Length is named
/// by the RFC; Content-Range is "automatically processed" and MAY be ignored; Content-Encoding
/// describes the stored bytes, which a proxy keeps as received, so a different value would
/// corrupt them (the RFC's own example of an integrity exception). The §3.1 exceptions
/// (`NOT_FORWARDED` and Connection-listed fields) are excluded as well.
/// ETag and Content-MD5 also stay: the 304 answered a conditional request for the stored
/// response, whose identity and checksum describe the bytes we keep (the HTTP cache test suite,
/// cache-tests.fyi, requires both).
const NOT_UPDATED_BY_304: &[&str] = &[
    "content-length",
    "content-range",
    "content-encoding",
    "etag",
    "content-md5",
];

/// The names listed in `Connection` (RFC 9110 §7.6.1), lowercased; malformed members skipped.
fn connection_listed(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect()
}

/// `headers` minus the fields a cache does not forward (RFC 9110 §7.6.1, RFC 9111 §3.1).
pub(crate) fn forwardable(headers: &HeaderMap) -> HeaderMap {
    let listed = connection_listed(headers);
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !NOT_FORWARDED.contains(&name.as_str()) && !listed.contains(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// RFC 9111 §3.2: the stored fields updated with a 304's: each field in the 304 replaces all
/// stored lines of that name, except the fields listed above.
pub(crate) fn merge_304(stored: &HeaderMap, not_modified: &HeaderMap) -> HeaderMap {
    let listed = connection_listed(not_modified);
    let mut out = forwardable(stored);
    let updatable = |name: &HeaderName| {
        !NOT_FORWARDED.contains(&name.as_str())
            && !NOT_UPDATED_BY_304.contains(&name.as_str())
            && !listed.contains(name)
    };
    for name in not_modified.keys().filter(|n| updatable(n)) {
        out.remove(name);
        for value in not_modified.get_all(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// The field names a response's `Vary` lists, lowercased, sorted and deduplicated (so that the
/// key does not depend on how the origin ordered them). `None` for `*` — and for a member that is
/// not a field name, which we cannot match either, so it is treated like `*`.
pub(crate) fn vary_names(response_headers: &HeaderMap) -> Option<Vec<HeaderName>> {
    let mut names = Vec::new();
    for line in response_headers.get_all(VARY) {
        let line = line.to_str().ok()?;
        for member in line.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            if member == "*" {
                return None;
            }
            names.push(HeaderName::from_bytes(member.as_bytes()).ok()?);
        }
    }
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    names.dedup();
    Some(names)
}

/// RFC 9111 §4.1: the request's values of `names`, normalised: field lines trimmed and combined
/// with ", ". An absent field is distinct from an empty one (§4.1: absent only matches absent).
/// Bytes outside visible ASCII are percent-escaped so that distinct values never collide.
pub(crate) fn vary_key_for(names: &[HeaderName], request_headers: &HeaderMap) -> String {
    let mut key = String::new();
    for name in names {
        key.push_str(name.as_str());
        let mut lines = request_headers.get_all(name).iter().peekable();
        if lines.peek().is_some() {
            key.push(':');
            for (i, line) in lines.enumerate() {
                if i > 0 {
                    key.push_str(", ");
                }
                let bytes = line.as_bytes().trim_ascii();
                for &b in bytes {
                    if (0x20..0x7f).contains(&b) && b != b'%' {
                        key.push(char::from(b));
                    } else {
                        key.push_str(&format!("%{b:02X}"));
                    }
                }
            }
        }
        key.push('\n');
    }
    key
}

/// RFC 9110 §9.2.1: GET, HEAD, OPTIONS and TRACE are safe; anything else (including unknown
/// methods) counts as unsafe for RFC 9111 §4.4.
fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// RFC 9111 §4.4, see [`super::invalidated`].
pub(crate) fn invalidated(
    method: &Method,
    status: StatusCode,
    target: &Uri,
    response_headers: &HeaderMap,
) -> Vec<Uri> {
    // §4.4: only a non-error (2xx or 3xx) response to an unsafe method invalidates.
    if is_safe(method) || !(status.is_success() || status.is_redirection()) {
        return Vec::new();
    }
    let mut out = vec![target.clone()];
    for name in [http::header::LOCATION, http::header::CONTENT_LOCATION] {
        let Some(reference) = response_headers.get(&name).and_then(|v| v.to_str().ok()) else {
            continue;
        };
        // §4.4: MUST NOT invalidate a URI whose origin differs from the target's (a DoS guard).
        if let Some(uri) = resolve(target, reference.trim()).filter(|u| same_origin(target, u)) {
            if !out.contains(&uri) {
                out.push(uri);
            }
        }
    }
    out
}

/// RFC 9110 §4.3.1 origin comparison: scheme and host case-insensitively, ports with defaults.
fn same_origin(a: &Uri, b: &Uri) -> bool {
    match (a.authority(), b.authority()) {
        (None, None) => true,
        (Some(x), Some(y)) => {
            let scheme_a = a.scheme_str().map(str::to_ascii_lowercase);
            let scheme_b = b.scheme_str().map(str::to_ascii_lowercase);
            scheme_a == scheme_b
                && x.host().eq_ignore_ascii_case(y.host())
                && port(x, scheme_a.as_deref()) == port(y, scheme_b.as_deref())
        }
        _ => false,
    }
}

fn port(authority: &Authority, scheme: Option<&str>) -> Option<u16> {
    authority.port_u16().or(match scheme {
        Some("http") => Some(80),
        Some("https") => Some(443),
        _ => None,
    })
}

/// RFC 3986 §5.2: resolves a URI reference from Location/Content-Location against the target.
/// Fragments are dropped (they never reach a cache key). `None` for references that do not parse.
fn resolve(base: &Uri, reference: &str) -> Option<Uri> {
    let reference = reference.split('#').next().unwrap_or_default();
    let has_scheme = reference.split_once(':').is_some_and(|(s, _)| {
        !s.is_empty() && !s.contains(['/', '?']) && s.parse::<Scheme>().is_ok()
    });
    if has_scheme {
        let uri: Uri = reference.parse().ok()?;
        let path = remove_dot_segments(uri.path());
        return rebuild(uri.scheme(), uri.authority(), &path, uri.query());
    }
    if let Some(rest) = reference.strip_prefix("//") {
        let uri: Uri = format!("{}://{rest}", base.scheme_str().unwrap_or("http"))
            .parse()
            .ok()?;
        let path = remove_dot_segments(uri.path());
        return rebuild(base.scheme(), uri.authority(), &path, uri.query());
    }
    let (ref_path, ref_query) = match reference.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (reference, None),
    };
    let (path, query) = if ref_path.is_empty() {
        (base.path().to_owned(), ref_query.or(base.query()))
    } else if ref_path.starts_with('/') {
        (remove_dot_segments(ref_path), ref_query)
    } else {
        // §5.2.3 merge: the base path up to its last '/', then the reference.
        let base_path = base.path();
        let dir = &base_path[..base_path.rfind('/').map_or(0, |i| i + 1)];
        let merged = if dir.is_empty() {
            format!("/{ref_path}")
        } else {
            format!("{dir}{ref_path}")
        };
        (remove_dot_segments(&merged), ref_query)
    };
    rebuild(base.scheme(), base.authority(), &path, query)
}

fn rebuild(
    scheme: Option<&Scheme>,
    authority: Option<&Authority>,
    path: &str,
    query: Option<&str>,
) -> Option<Uri> {
    let path_and_query = match query {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut builder = Uri::builder();
    if let (Some(s), Some(a)) = (scheme, authority) {
        builder = builder.scheme(s.clone()).authority(a.clone());
    }
    builder.path_and_query(path_and_query).build().ok()
}

/// RFC 3986 §5.2.4.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        match *seg {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    if joined.starts_with('/') {
        joined
    } else {
        format!("/{joined}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3986_5_2_resolution() {
        let base: Uri = "http://a/b/c/d;p?q".parse().unwrap();
        for (r, want) in [
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g/"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("g#s", "http://a/b/c/g"),
            ("..", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../../../g", "http://a/g"),
            ("HTTPS://x/y", "https://x/y"),
        ] {
            assert_eq!(
                resolve(&base, r).map(|u| u.to_string()).as_deref(),
                Some(want),
                "{r}"
            );
        }
    }

    #[test]
    fn rfc9110_4_3_1_same_origin_normalises_default_port_and_case() {
        let a: Uri = "http://Example.com/x".parse().unwrap();
        assert!(same_origin(&a, &"http://example.com:80/y".parse().unwrap()));
        assert!(!same_origin(&a, &"https://example.com/y".parse().unwrap()));
        assert!(!same_origin(
            &a,
            &"http://example.com:8080/y".parse().unwrap()
        ));
        assert!(!same_origin(&a, &"/y".parse().unwrap()));
    }
}
