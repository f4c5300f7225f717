//! Header rules every proxy applies: hop-by-hop fields (RFC 9110 §7.6.1), Via and loop
//! detection (§7.6.3), and the Cache-Status field (RFC 9211).

use http::header::{
    HeaderName, HeaderValue, CONNECTION, HOST, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH,
    IF_RANGE, IF_UNMODIFIED_SINCE, RANGE, VIA,
};
use http::{HeaderMap, Request};

/// Fields that describe one connection, never forwarded (RFC 9110 §7.6.1), plus the legacy
/// Keep-Alive and Proxy-Connection.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
];

/// Removes hop-by-hop fields, including those the Connection field names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Request fields that name the host, scheme, URL or method the client used; an origin that
/// trusts them can be made to build pages for another host (or to run another method), which
/// a cache would then keep for a URL they are not part of.
pub const FORWARDED: [&str; 12] = [
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-port",
    "x-forwarded-server",
    "x-forwarded-scheme",
    "x-host",
    "forwarded",
    "x-original-url",
    "x-rewrite-url",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Whether a Host field value is valid (RFC 9110 §7.2: `uri-host [ ":" port ]`, the host an
/// IP-literal in brackets, an IPv4 address or a reg-name of unreserved characters,
/// percent-encodings and sub-delims; RFC 3986 §3.2.2). An empty value is valid (RFC 9112 §3.2,
/// a target without an authority).
pub fn valid_host(value: &[u8]) -> bool {
    let (host, port) = if let Some(rest) = value.strip_prefix(b"[") {
        let Some(end) = rest.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &rest[..end];
        let ok = std::str::from_utf8(literal).is_ok_and(|l| {
            l.parse::<std::net::Ipv6Addr>().is_ok()
                // IPvFuture: "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
                || l.strip_prefix(['v', 'V']).and_then(|f| f.split_once('.')).is_some_and(
                    |(version, rest)| {
                        !version.is_empty()
                            && version.bytes().all(|b| b.is_ascii_hexdigit())
                            && !rest.is_empty()
                            && rest.bytes().all(|b| unreserved(b) || sub_delim(b) || b == b':')
                    },
                )
        });
        if !ok {
            return false;
        }
        match &rest[end + 1..] {
            [] => return true,
            [b':', port @ ..] => (&[][..], port),
            _ => return false,
        }
    } else {
        match value.iter().position(|&b| b == b':') {
            Some(i) => (&value[..i], &value[i + 1..]),
            None => (value, &[][..]),
        }
    };
    let mut i = 0;
    while i < host.len() {
        let b = host[i];
        if b == b'%' {
            let hex = host.get(i + 1..i + 3);
            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                return false;
            }
            i += 3;
            continue;
        }
        if !(unreserved(b) || sub_delim(b)) {
            return false;
        }
        i += 1;
    }
    port.iter().all(u8::is_ascii_digit)
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

fn sub_delim(b: u8) -> bool {
    b"!$&'()*+,;=".contains(&b)
}

/// Whether every Host field of `headers` is valid ([`valid_host`]); more than one is refused
/// by the node before the proxy sees the request.
pub fn host_ok(headers: &HeaderMap) -> bool {
    headers
        .get_all(HOST)
        .iter()
        .all(|v| valid_host(v.as_bytes()))
}

/// Removes the client's [`FORWARDED`] fields.
pub fn strip_forwarded(headers: &mut HeaderMap) {
    for name in FORWARDED {
        headers.remove(name);
    }
}

/// The cache key of a request for `uri` whose [`FORWARDED`] fields are keyed: the URI, then each
/// field present as `\nNAME: VALUES` (values of repeated lines joined by `, `), in a fixed order.
/// Without any of the fields, the URI alone: such a request shares the plain entry.
pub fn keyed_forwarded(uri: &str, headers: &HeaderMap) -> String {
    let mut key = uri.to_owned();
    for name in FORWARDED {
        let mut values = headers.get_all(name).iter().peekable();
        if values.peek().is_none() {
            continue;
        }
        key.push('\n');
        key.push_str(name);
        key.push_str(": ");
        for (i, v) in values.enumerate() {
            if i > 0 {
                key.push_str(", ");
            }
            key.push_str(&String::from_utf8_lossy(v.as_bytes()));
        }
    }
    key
}

/// Whether a message already passed through this node (RFC 9110 §7.6.3: Via lets a proxy
/// detect forwarding loops).
pub fn looped(headers: &HeaderMap, name: &str) -> bool {
    headers
        .get_all(VIA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|hop| {
            hop.split_whitespace()
                .nth(1)
                .is_some_and(|pseudonym| pseudonym == name)
        })
}

/// Appends `1.1 NAME` to Via.
pub fn add_via(headers: &mut HeaderMap, name: &str) {
    if let Ok(v) = HeaderValue::from_str(&format!("1.1 {name}")) {
        headers.append(VIA, v);
    }
}

/// Announces node `name` as a surrogate (Edge Architecture, W3C Note 2001, §2.1), after any
/// surrogate closer to the client: the origin may then target `Surrogate-Control` members at
/// `;name`.
pub fn add_surrogate_capability(headers: &mut HeaderMap, name: &str) {
    if let Ok(v) = HeaderValue::from_str(&format!("{name}=\"Surrogate/1.0\"")) {
        headers.append("surrogate-capability", v);
    }
}

/// The request as it goes upstream from node `name`: hop-by-hop fields removed, Via and
/// Surrogate-Capability added, Host set to the target.
pub fn upstream_parts(name: &str, parts: &http::request::Parts) -> http::request::Parts {
    let mut up = Request::new(());
    *up.method_mut() = parts.method.clone();
    *up.uri_mut() = parts.uri.clone();
    let (mut up, ()) = up.into_parts();
    up.headers = parts.headers.clone();
    strip_hop_by_hop(&mut up.headers);
    add_via(&mut up.headers, name);
    add_surrogate_capability(&mut up.headers, name);
    if let Some(authority) = parts.uri.authority() {
        if let Ok(v) = HeaderValue::from_str(authority.as_str()) {
            up.headers.insert(HOST, v);
        }
    }
    up
}

/// The request as it goes upstream for a full response to store: without the client's
/// preconditions and ranges, which the proxy answers itself from the stored response.
pub fn plain_upstream_parts(name: &str, parts: &http::request::Parts) -> http::request::Parts {
    let mut up = upstream_parts(name, parts);
    for field in [
        IF_NONE_MATCH,
        IF_MODIFIED_SINCE,
        IF_MATCH,
        IF_UNMODIFIED_SINCE,
        IF_RANGE,
        RANGE,
    ] {
        up.headers.remove(field);
    }
    up
}

/// Cache-Status (RFC 9211 §2) name.
pub const CACHE_STATUS: &str = "cache-status";

/// How this node handled a request, as one Cache-Status member.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// Served from storage without going upstream.
    pub hit: bool,
    /// Why it went upstream: `uri-miss`, `vary-miss`, `stale`, `request`, `bypass`.
    pub fwd: Option<&'static str>,
    /// The upstream status when it went upstream.
    pub fwd_status: Option<u16>,
    /// The response was stored.
    pub stored: bool,
    /// The request waited for another request's fetch (collapsed).
    pub collapsed: bool,
    /// Remaining freshness in seconds, when known.
    pub ttl: Option<i64>,
    /// Extra detail (e.g. `stale-while-revalidate`, `stale-if-error`).
    pub detail: Option<&'static str>,
}

impl Status {
    /// Appends this node's member to the response's Cache-Status, after those of upstream caches
    /// (RFC 9211 §2: the member closest to the client comes last), and sets X-Cache.
    pub fn apply(&self, headers: &mut HeaderMap, name: &str) {
        let mut member = name.to_owned();
        if self.hit {
            member.push_str("; hit");
        }
        if let Some(fwd) = self.fwd {
            member.push_str("; fwd=");
            member.push_str(fwd);
        }
        if let Some(s) = self.fwd_status {
            member.push_str(&format!("; fwd-status={s}"));
        }
        if self.stored {
            member.push_str("; stored");
        }
        if self.collapsed {
            member.push_str("; collapsed");
        }
        if let Some(ttl) = self.ttl {
            member.push_str(&format!("; ttl={ttl}"));
        }
        if let Some(detail) = self.detail {
            member.push_str(&format!("; detail={detail}"));
        }
        let combined = match headers.get(CACHE_STATUS).and_then(|v| v.to_str().ok()) {
            Some(upstream) if !upstream.is_empty() => format!("{upstream}, {member}"),
            _ => member,
        };
        if let Ok(v) = HeaderValue::from_str(&combined) {
            headers.insert(CACHE_STATUS, v);
        }
        let x_cache = format!("{} from {name}", if self.hit { "HIT" } else { "MISS" });
        if let Ok(v) = HeaderValue::from_str(&x_cache) {
            headers.append("x-cache", v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_removed() {
        // RFC 9110 §7.6.1.
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("close, x-private"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("x-end-to-end", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-end-to-end"));
    }

    #[test]
    fn rfc9110_s7_2_host_values_are_checked() {
        for ok in [
            "example.com",
            "example.com:8080",
            "127.0.0.1:3128",
            "[::1]",
            "[::1]:80",
            "[v1.fe80::a+en1]",
            "a%20b",
            "a-b_c.d~e!$&'()*+,;=",
            "host:",
            "",
        ] {
            assert!(valid_host(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "a b", "a/b@c", "[::1", "::1", "[::1]x", "[::g]", "a:b:c", "a@b", "host:80a", "a%2",
            "a%zz", "a\\b", "[]",
        ] {
            assert!(!valid_host(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn via_detects_loops() {
        // RFC 9110 §7.6.3.
        let mut h = HeaderMap::new();
        add_via(&mut h, "child");
        assert!(looped(&h, "child"));
        assert!(!looped(&h, "parent"));
        h.insert(
            "via",
            HeaderValue::from_static("1.0 fred, 1.1 parent (slipstream)"),
        );
        assert!(looped(&h, "parent"));
    }

    #[test]
    fn cache_status_appends_after_upstream_members() {
        // RFC 9211 §2.
        let mut h = HeaderMap::new();
        h.insert(
            CACHE_STATUS,
            HeaderValue::from_static("parent; hit; ttl=30"),
        );
        Status {
            fwd: Some("uri-miss"),
            fwd_status: Some(200),
            stored: true,
            ..Default::default()
        }
        .apply(&mut h, "child");
        assert_eq!(
            h.get(CACHE_STATUS).and_then(|v| v.to_str().ok()),
            Some("parent; hit; ttl=30, child; fwd=uri-miss; fwd-status=200; stored")
        );
    }
}
