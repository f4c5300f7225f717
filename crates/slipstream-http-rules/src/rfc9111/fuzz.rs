//! Fuzz targets for the directive parsers, which are private: `Cache-Control` syntax (also
//! `Surrogate-Control`) and `CDN-Cache-Control`'s Structured Fields Dictionary. The targets over
//! the public API are in `tests/fuzz.rs`; both use the shared driver in `tests/fuzz_support.rs`.

#[path = "../../../../tests/fuzz_support.rs"]
mod support;

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, CACHE_CONTROL};
use proptest::prelude::*;
use support::fuzz;

use super::directives::{cdn_cache_control, Delta, Directives, DELTA_SECONDS_MAX};

const CDN: HeaderName = HeaderName::from_static("cdn-cache-control");

fn lines(name: &HeaderName, values: &[Vec<u8>]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in values {
        if let Ok(v) = HeaderValue::from_bytes(v) {
            h.append(name.clone(), v);
        }
    }
    h
}

/// Field lines: arbitrary bytes, or members built from the grammar with mutations.
fn field_lines() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let member = prop_oneof![
        "[a-zA-Z*-]{1,10}",
        "[a-z-]{1,10}=[0-9]{1,20}",
        "[a-z-]{1,10}=\"([ -!#-\\[\\]-~]|\\\\[ -~]){0,10}\"",
        "[a-z-]{1,10} ?= ?[!-~]{0,6}",
        "[a-z]{1,6}=\\?[01]",
        "[a-z]{1,6}=\\([a-z0-9 \"]{0,8}\\)(;[a-z]=[0-9])?",
        "[a-z]{1,6};[a-z]{1,3}(=[a-z0-9]{1,3})?",
        "[a-z]{1,6}=:[A-Za-z0-9+/=]{0,8}:",
        "[a-z]{1,6}=-?[0-9]{1,16}(\\.[0-9]{0,4})?",
    ];
    let line = prop_oneof![
        3 => proptest::collection::vec(member, 0..6)
            .prop_map(|m| m.join(", ").into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => "[ -~]{0,40}".prop_map(String::into_bytes),
    ];
    proptest::collection::vec(line, 1..3)
}

/// What a directive set says once rendered as `Cache-Control`: names kept, arguments kept only
/// when they are non-empty tokens.
fn rendered_form(d: &Directives) -> Directives {
    let text = d.to_cache_control();
    Directives::parse_lines(&lines(&CACHE_CONTROL, &[text.into_bytes()]), &CACHE_CONTROL)
}

/// RFC 9110 §5.6.2 tchar, written out again rather than taken from the parser.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[test]
fn cache_control_renders_and_reparses_to_the_same_directives() {
    fuzz(
        "cache_control_renders_and_reparses_to_the_same_directives",
        3_000,
        field_lines(),
        |values| {
            let d = Directives::parse_lines(&lines(&CACHE_CONTROL, &values), &CACHE_CONTROL);
            let again = rendered_form(&d);
            prop_assert_eq!(again.items().len(), d.items().len());
            for ((n1, v1), (n2, v2)) in d.items().iter().zip(again.items()) {
                prop_assert_eq!(n1, n2);
                prop_assert!(!n1.is_empty() && n1.bytes().all(|b| !b.is_ascii_uppercase()));
                let token = v1.as_deref().filter(|v| is_token(v));
                prop_assert_eq!(token, v2.as_deref());
            }
            // A second round changes nothing.
            prop_assert_eq!(rendered_form(&again), again);
            Ok(())
        },
    );
}

#[test]
fn delta_seconds_saturate_and_conflicts_are_invalid() {
    fuzz(
        "delta_seconds_saturate_and_conflicts_are_invalid",
        3_000,
        ("[0-9]{1,30}", "[0-9]{1,30}", any::<bool>()),
        |(a, b, quoted)| {
            let value = |s: &str| {
                if quoted {
                    format!("\"{s}\"")
                } else {
                    s.to_owned()
                }
            };
            let secs = |s: &str| {
                let n = s.trim_start_matches('0');
                if n.len() > 10 {
                    DELTA_SECONDS_MAX
                } else {
                    n.parse::<u64>().unwrap_or(0).min(DELTA_SECONDS_MAX)
                }
            };
            let h = lines(
                &CACHE_CONTROL,
                &[format!("max-age={}", value(&a)).into_bytes()],
            );
            let d = Directives::parse_lines(&h, &CACHE_CONTROL);
            prop_assert_eq!(
                d.seconds("max-age"),
                Delta::Valid(Duration::from_secs(secs(&a)))
            );
            let h = lines(
                &CACHE_CONTROL,
                &[format!("max-age={}, max-age={}", value(&a), value(&b)).into_bytes()],
            );
            let d = Directives::parse_lines(&h, &CACHE_CONTROL);
            let want = if secs(&a) == secs(&b) {
                Delta::Valid(Duration::from_secs(secs(&a)))
            } else {
                Delta::Invalid
            };
            prop_assert_eq!(d.seconds("max-age"), want);
            Ok(())
        },
    );
}

/// A valid RFC 8941 Dictionary member: its key, its text, and whether it turns the directive off.
fn sf_member() -> impl Strategy<Value = (String, String, bool)> {
    let key = "[a-z*][a-z0-9_.*-]{0,8}";
    let value = prop_oneof![
        Just((String::new(), false)),
        Just(("=?1".to_owned(), false)),
        Just(("=?0".to_owned(), true)),
        "-?[0-9]{1,15}".prop_map(|v| (format!("={v}"), false)),
        "-?[0-9]{1,12}\\.[0-9]{1,3}".prop_map(|v| (format!("={v}"), false)),
        "[A-Za-z*][A-Za-z0-9:/!#$%&'*+.^_`|~-]{0,8}".prop_map(|v| (format!("={v}"), false)),
        "([ !#-\\[\\]-~]|\\\\\"|\\\\\\\\){0,8}".prop_map(|v| (format!("=\"{v}\""), false)),
        "[A-Za-z0-9+/]{0,8}=?".prop_map(|v| (format!("=:{v}:"), false)),
        proptest::collection::vec("[a-z][a-z0-9]{0,3}|[0-9]{1,3}", 0..3)
            .prop_map(|v| (format!("=({})", v.join(" ")), false)),
    ];
    let params = proptest::collection::vec(
        "[a-z][a-z0-9]{0,3}(=[0-9]{1,3}|=[a-z]{1,3}|=\\?[01])?",
        0..3,
    )
    .prop_map(|p| p.iter().map(|p| format!(";{p}")).collect::<String>());
    (key, value, params).prop_map(|(k, (v, off), p)| (k.clone(), format!("{k}{v}{p}"), off))
}

#[test]
fn cdn_cache_control_accepts_every_valid_dictionary() {
    fuzz(
        "cdn_cache_control_accepts_every_valid_dictionary",
        3_000,
        (proptest::collection::vec(sf_member(), 1..8), "[ \t]{0,2}"),
        |(members, ows)| {
            let text = members
                .iter()
                .map(|(_, m, _)| m.as_str())
                .collect::<Vec<_>>()
                .join(&format!(",{ows}"));
            let h = lines(&CDN, &[text.clone().into_bytes()]);
            let d = cdn_cache_control(&h, &CDN);
            let d = match d {
                Some(d) => d,
                None => return Err(TestCaseError::fail(format!("refused {text:?}"))),
            };
            // RFC 8941 §4.2.2: the last value of a key wins; `?0` turns the directive off.
            for (key, _, _) in &members {
                let last_off = members
                    .iter()
                    .rev()
                    .find(|(k, _, _)| k == key)
                    .is_some_and(|m| m.2);
                prop_assert_eq!(d.has(key), !last_off, "{} in {:?}", key, text);
            }
            prop_assert_eq!(rendered_form(&d).items().len(), d.items().len());
            Ok(())
        },
    );
}

#[test]
fn cdn_cache_control_arbitrary_lines() {
    fuzz(
        "cdn_cache_control_arbitrary_lines",
        3_000,
        field_lines(),
        |values| {
            let h = lines(&CDN, &values);
            if let Some(d) = cdn_cache_control(&h, &CDN) {
                // Every key is an RFC 8941 key, so it survives rendering as Cache-Control.
                for (n, _) in d.items() {
                    prop_assert!(n.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b"_-.*".contains(&b)));
                }
                let again = rendered_form(&d);
                prop_assert_eq!(again.items().len(), d.items().len());
            }
            Ok(())
        },
    );
}
