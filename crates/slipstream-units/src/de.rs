//! serde helpers so config files take the units the command line takes: a field of
//! milliseconds accepts `250` (milliseconds) or `"1s"`, a field of bytes accepts `65536` or
//! `"64MiB"`. A string without a unit is refused for durations, so `"30"` is never silently
//! read as seconds or milliseconds.
//!
//! Use with `#[serde(deserialize_with = "slipstream_units::de::millis")]` on a `u64` field.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};

struct Millis;

impl Visitor<'_> for Millis {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("milliseconds as an integer, or a duration with a unit such as \"1s\"")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::custom(format!("{v} is negative")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        if v.trim().chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(E::custom(format!(
                "`{v}` has no unit: write \"{v}ms\" or \"{v}s\""
            )));
        }
        let d = crate::duration(v).map_err(E::custom)?;
        u64::try_from(d.as_millis()).map_err(|_| E::custom(format!("`{v}` is too long")))
    }
}

/// A duration in milliseconds: an integer, or a string with a unit (`"1s"`, `"250ms"`).
pub fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Millis)
}

struct Bytes;

impl Visitor<'_> for Bytes {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a byte count, or a size such as \"64MiB\"")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::custom(format!("{v} is negative")))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        crate::bytes(v).map_err(E::custom)
    }
}

/// A size in bytes: an integer, or a string with a unit (`"64MiB"`, `"8KB"`).
pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Bytes)
}

/// Like [`bytes`], for an optional field.
pub fn opt_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    bytes(d).map(Some)
}

/// Like [`bytes`], for a `usize` field.
pub fn bytes_usize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = bytes(d)?;
    usize::try_from(n).map_err(|_| de::Error::custom(format!("{n} bytes is too large")))
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize)]
    struct T {
        #[serde(deserialize_with = "super::millis")]
        timeout_ms: u64,
        #[serde(deserialize_with = "super::bytes")]
        size_bytes: u64,
    }

    fn parse(s: &str) -> Result<T, String> {
        toml::from_str(s).map_err(|e| e.to_string())
    }

    #[test]
    fn integers_and_units_are_both_accepted() {
        let t = parse("timeout_ms = 250\nsize_bytes = 4096").expect("integers");
        assert_eq!((t.timeout_ms, t.size_bytes), (250, 4096));
        let t = parse("timeout_ms = \"1.5s\"\nsize_bytes = \"64MiB\"").expect("units");
        assert_eq!((t.timeout_ms, t.size_bytes), (1500, 64 << 20));
    }

    #[test]
    fn a_unitless_duration_string_and_a_bad_size_are_refused_with_the_line() {
        let e = parse("timeout_ms = \"30\"\nsize_bytes = 1").unwrap_err();
        assert!(e.contains("no unit") && e.contains("line 1"), "{e}");
        let e = parse("timeout_ms = 1\nsize_bytes = \"lots\"").unwrap_err();
        assert!(e.contains("not a size") && e.contains("line 2"), "{e}");
        assert!(parse("timeout_ms = -1\nsize_bytes = 1").is_err());
    }
}
