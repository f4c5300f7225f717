//! Web cache deception (Gil, "Web Cache Deception Attack", 2017): an attacker makes a user ask
//! for `/account.php/x.css`; the application ignores the suffix and answers with the user's
//! page, and a cache that judges by the extension, or stores anything fresh, keeps it for the
//! attacker. Two rules keep such a page out of the store, each switchable:
//!
//! - `deception_armor` (as Cloudflare's Cache Deception Armor): a URL whose last path segment
//!   has a static file extension is stored only when the response's Content-Type is one that
//!   extension stands for ([`armor_refuses`]);
//! - `heuristic_with_credentials` off: a response to a request with `Cookie` or
//!   `Authorization` is stored only with explicit freshness ([`credentialed`]).

use http::header::{AUTHORIZATION, CONTENT_TYPE, COOKIE};
use http::HeaderMap;

/// Static file extensions and the media types each may be served as (`image/*`: any image, as
/// an image service may answer `.jpg` with WebP or AVIF by content negotiation, and `.gif`
/// with a video). A type not listed for its extension, such as `text/html` for `.css`, is what
/// a dynamic page looks like.
const TYPES: &[(&str, &[&str])] = &[
    ("css", &["text/css"]),
    (
        "js",
        &[
            "text/javascript",
            "application/javascript",
            "application/x-javascript",
            "application/ecmascript",
            "text/ecmascript",
        ],
    ),
    ("mjs", &["text/javascript", "application/javascript"]),
    ("json", &["application/json"]),
    ("map", &["application/json"]),
    ("png", &["image/*"]),
    ("jpg", &["image/*"]),
    ("jpeg", &["image/*"]),
    ("gif", &["image/*", "video/webm", "video/mp4"]),
    ("webp", &["image/*"]),
    ("avif", &["image/*"]),
    ("svg", &["image/svg+xml"]),
    (
        "ico",
        &["image/x-icon", "image/vnd.microsoft.icon", "image/ico"],
    ),
    ("bmp", &["image/*"]),
    ("woff", &["font/woff", "application/font-woff"]),
    ("woff2", &["font/woff2"]),
    ("ttf", &["font/ttf", "font/sfnt", "application/x-font-ttf"]),
    ("otf", &["font/otf", "font/sfnt", "application/x-font-otf"]),
    ("eot", &["application/vnd.ms-fontobject"]),
    ("txt", &["text/plain"]),
    ("csv", &["text/csv", "text/plain"]),
    ("xml", &["application/xml", "text/xml"]),
    ("pdf", &["application/pdf"]),
    ("mp4", &["video/mp4"]),
    ("webm", &["video/webm", "audio/webm"]),
    ("mp3", &["audio/mpeg"]),
    ("ogg", &["audio/ogg", "video/ogg", "application/ogg"]),
    ("wasm", &["application/wasm"]),
    ("zip", &["application/zip"]),
    ("gz", &["application/gzip", "application/x-gzip"]),
];

/// Whether the armor keeps a response to `path` with these headers out of the store: the last
/// path segment ends in an extension of [`TYPES`] and the Content-Type (without parameters) is
/// absent or not one the extension stands for. `application/octet-stream` agrees with every
/// extension, as in Cloudflare's armor (its documentation, "Cache Deception Armor",
/// Exceptions): a browser saves such a body rather than showing it, so it is not the page of
/// a deception. Any other path (no extension, `.php`, `.html`) is
/// not judged.
pub(crate) fn armor_refuses(path: &str, headers: &HeaderMap) -> bool {
    let Some(expected) = extension(path).and_then(|ext| {
        TYPES
            .iter()
            .find(|(e, _)| e.eq_ignore_ascii_case(ext))
            .map(|(_, types)| *types)
    }) else {
        return false;
    };
    let Some(essence) = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim())
    else {
        return true;
    };
    let agrees = essence.eq_ignore_ascii_case("application/octet-stream")
        || expected.iter().any(|t| match t.strip_suffix('*') {
            Some(prefix) => essence
                .get(..prefix.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(prefix)),
            None => t.eq_ignore_ascii_case(essence),
        })
        || (expected.contains(&"application/json")
            && essence.to_ascii_lowercase().ends_with("+json"));
    !agrees
}

/// The extension of the last segment of `path`: what follows its last dot, with `%2E` and
/// `%2F` read as the dot and slash they encode (an application may decode them before
/// routing).
fn extension(path: &str) -> Option<&str> {
    let seg = last_segment(path);
    let dot = seg
        .rfind('.')
        .map(|i| i + 1)
        .into_iter()
        .chain(find_ci(seg, "%2e").map(|i| i + 3))
        .max()?;
    let ext = &seg[dot..];
    (!ext.is_empty()).then_some(ext)
}

/// The last segment of `path` (after `/` or `%2F`). Parameters after `;` stay: an
/// application that routes `/account.php;x.css` to `account.php` still answers a URL that
/// looks like a stylesheet.
fn last_segment(path: &str) -> &str {
    let start = path
        .rfind('/')
        .map(|i| i + 1)
        .into_iter()
        .chain(find_ci(path, "%2f").map(|i| i + 3))
        .max()
        .unwrap_or(0);
    &path[start..]
}

/// The last position of `needle` (ASCII, lowercase) in `haystack`, case-insensitively.
fn find_ci(haystack: &str, needle: &str) -> Option<usize> {
    haystack
        .as_bytes()
        .windows(needle.len())
        .rposition(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// Whether a request carries credentials: `Cookie` or `Authorization`.
pub(crate) fn credentialed(headers: &HeaderMap) -> bool {
    headers.contains_key(COOKIE) || headers.contains_key(AUTHORIZATION)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn typed(t: Option<&'static str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = t {
            h.insert(CONTENT_TYPE, HeaderValue::from_static(t));
        }
        h
    }

    #[test]
    fn a_dynamic_page_under_a_static_extension_is_refused() {
        for path in [
            "/account.php/x.css",
            "/account/x.css",
            "/account.php;x.css",
            "/account.php%3Bx.css",
            "/account.php%2Fx.CSS",
            "/account%2Ex.css",
            "/account%2Ecss",
            "/a/b.js",
            "/account/photo.jpg",
        ] {
            assert!(
                armor_refuses(path, &typed(Some("text/html; charset=utf-8"))),
                "{path}"
            );
            assert!(armor_refuses(path, &typed(None)), "{path}: no type");
        }
    }

    #[test]
    fn agreeing_types_and_unjudged_paths_are_stored() {
        for (path, t) in [
            ("/site.css", "text/css"),
            ("/site.CSS", "Text/CSS; charset=utf-8"),
            ("/app.js", "application/javascript"),
            ("/logo.svg", "image/svg+xml"),
            ("/photo.jpg", "image/webp"),
            ("/anim.gif", "video/webm"),
            ("/data.json", "application/problem+json"),
            ("/font.woff2", "application/octet-stream"),
            ("/account.php", "text/html"),
            ("/index.html", "text/html"),
            ("/", "text/html"),
            ("/page", "text/html"),
            ("/archive.tar.unknown", "text/html"),
        ] {
            assert!(!armor_refuses(path, &typed(Some(t))), "{path} {t}");
        }
    }

    #[test]
    fn credentials_are_cookie_or_authorization() {
        let mut h = HeaderMap::new();
        assert!(!credentialed(&h));
        h.insert(COOKIE, HeaderValue::from_static("session=1"));
        assert!(credentialed(&h));
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        assert!(credentialed(&h));
    }
}
