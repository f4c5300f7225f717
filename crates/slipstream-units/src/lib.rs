//! Human units, parsed the same way everywhere slipstream reads them: on the command line, in
//! `[serve]`/`[proxy]` configs and in simulator scenarios.
//!
//! - Byte sizes ([`bytes`]): `K`, `M`, `G`, `T`, `KiB`, `MiB`, `GiB`, `TiB` are powers of 1024;
//!   `kB`, `KB`, `MB`, `GB`, `TB` powers of 1000 (IEC 80000-13). So `8KiB` is 8,192 bytes and
//!   `8KB` 8,000. A size beyond 2^64 - 1 bytes is an error.
//! - Durations ([`duration`]): `ns`, `us`, `ms`, `s`, `m`, `h`; a bare number is seconds.
//! - Link rates ([`bits_per_second`]): as ns-2 writes them, in bits: `10Mb`, `1.5Mb`, `100kb`.
//! - Config fields ([`de`]): serde helpers that take either an integer or a string with a unit.

use std::time::Duration;

pub mod de;

/// Parses a byte size: `64MiB`, `512K`, `1.5M`, `10MB`, `4096`.
pub fn bytes(s: &str) -> Result<u64, String> {
    let (n, unit) =
        split_number(s).ok_or_else(|| format!("`{s}` is not a size (try 64MiB, 512K, 1000000)"))?;
    let mult: f64 = match unit {
        "" | "B" | "b" => 1.0,
        "K" | "k" | "KiB" | "Ki" => 1024.0,
        "M" | "m" | "MiB" | "Mi" => 1024.0 * 1024.0,
        "G" | "g" | "GiB" | "Gi" => 1024.0 * 1024.0 * 1024.0,
        // `human_bytes` writes TiB, so sizes it shows read back.
        "T" | "t" | "TiB" | "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{s}` (use K, M, G, T, KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ))
        }
    };
    whole(n * mult).ok_or_else(|| format!("`{s}` is too large a size"))
}

/// `v` rounded to a whole number, if it fits in a u64 (`as` would saturate silently).
fn whole(v: f64) -> Option<u64> {
    let v = v.round();
    // 2^64 is exactly representable; every f64 below it converts without loss of range.
    (v < 18_446_744_073_709_551_616.0).then_some(v as u64)
}

/// Parses a duration: a number with `ns`, `us`, `ms`, `s`, `m` or `h` (a bare number is
/// seconds).
pub fn duration(s: &str) -> Result<Duration, String> {
    let (n, unit) =
        split_number(s).ok_or_else(|| format!("`{s}` is not a duration (try 10s, 250ms, 2m)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "ns" => n / 1e9,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        other => {
            return Err(format!(
                "unknown duration unit `{other}` in `{s}` (use ns, us, ms, s, m, h)"
            ))
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is too long a duration"))
}

/// Parses a link rate in bits per second as ns-2 writes it: `10Mb`, `1.5Mb`, `100kb`, `1Gb`
/// (also `Mbps`); it must be positive.
pub fn bits_per_second(s: &str) -> Result<u64, String> {
    let (n, unit) = split_number(s)
        .ok_or_else(|| format!("`{s}` is not a bandwidth (try 10Mb, 1.5Mb, 100kb)"))?;
    let mult = match unit {
        "" | "b" | "bps" => 1.0,
        "kb" | "Kb" | "kbps" => 1e3,
        "Mb" | "mb" | "Mbps" => 1e6,
        "Gb" | "gb" | "Gbps" => 1e9,
        other => {
            return Err(format!(
                "unknown bandwidth unit `{other}` in `{s}` (use b, kb, Mb, Gb)"
            ))
        }
    };
    match whole(n * mult) {
        Some(0) => Err(format!("`{s}`: a bandwidth must be positive")),
        Some(v) => Ok(v),
        None => Err(format!("`{s}` is too large a bandwidth")),
    }
}

/// Splits `12.5MiB` into `(12.5, "MiB")`; the number must be finite and not negative.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some((n, unit.trim()))
}

/// Formats bytes for people: `512 B`, `1.5 KiB`, `64.0 MiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(bytes("64MiB"), Ok(64 << 20));
        assert_eq!(bytes("512K"), Ok(512 << 10));
        assert_eq!(bytes("1.5M"), Ok(1_572_864));
        assert_eq!(bytes("8KiB"), Ok(8192));
        assert_eq!(bytes("8KB"), Ok(8000));
        assert_eq!(bytes("10MB"), Ok(10_000_000));
        assert_eq!(bytes("4096"), Ok(4096));
        assert!(bytes("lots").is_err());
        assert!(bytes("-3K").is_err());
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }

    #[test]
    fn sizes_too_large_are_errors_and_shown_sizes_read_back() {
        // Found by tests/fuzz.rs: these used to saturate to u64::MAX, and `human_bytes`
        // wrote TiB, which `bytes` refused.
        assert!(bytes("99999999999999999999G")
            .unwrap_err()
            .contains("too large"));
        assert!(bytes("16EiB").is_err());
        assert!(bits_per_second("99999999999999999999Gb")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(bytes(&human_bytes(3 << 40)), Ok(3 << 40));
        assert_eq!(bytes("2TB"), Ok(2_000_000_000_000));
    }

    #[test]
    fn durations() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("200us"), Ok(Duration::from_micros(200)));
        assert_eq!(duration("1.0371ms"), Ok(Duration::from_nanos(1_037_100)));
        assert!(duration("5 parsecs").is_err());
        assert!(duration("1e400").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(bits_per_second("10Mb"), Ok(10_000_000));
        assert_eq!(bits_per_second("1.5Mb"), Ok(1_500_000));
        assert_eq!(bits_per_second("1Gb"), Ok(1_000_000_000));
        assert!(bits_per_second("0Mb").is_err());
        assert!(bits_per_second("fast")
            .unwrap_err()
            .contains("not a bandwidth"));
    }
}
