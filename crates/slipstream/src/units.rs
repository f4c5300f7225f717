//! Human units on the command line: byte sizes (`64MiB`, `1.5M`, `4096`) and durations
//! (`10s`, `250ms`, `2m`).

use std::time::Duration;

/// Parses a byte size. `K`, `M`, `G` are powers of 1024 (as are `KiB`, `MiB`, `GiB`); `kB`,
/// `MB`, `GB` are powers of 1000.
pub fn bytes(s: &str) -> Result<u64, String> {
    let (n, unit) =
        split_number(s).ok_or_else(|| format!("`{s}` is not a size (try 64MiB, 512K, 1000000)"))?;
    let mult: f64 = match unit {
        "" | "B" | "b" => 1.0,
        "K" | "k" | "KiB" | "Ki" => 1024.0,
        "M" | "m" | "MiB" | "Mi" => 1024.0 * 1024.0,
        "G" | "g" | "GiB" | "Gi" => 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{s}` (use K, M, G, KiB, MiB, GiB, kB, MB, GB)"
            ))
        }
    };
    Ok((n * mult).round() as u64)
}

/// Parses a duration: a number with `ms`, `s`, `m` or `h` (a bare number is seconds).
pub fn duration(s: &str) -> Result<Duration, String> {
    let (n, unit) =
        split_number(s).ok_or_else(|| format!("`{s}` is not a duration (try 10s, 250ms, 2m)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        other => {
            return Err(format!(
                "unknown duration unit `{other}` in `{s}` (use ms, s, m, h)"
            ))
        }
    };
    Ok(Duration::from_secs_f64(secs))
}

/// Splits `12.5MiB` into `(12.5, "MiB")`.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    Some((num.parse().ok()?, unit.trim()))
}

/// Formats bytes for people.
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
    fn parses() {
        assert_eq!(bytes("64MiB"), Ok(64 << 20));
        assert_eq!(bytes("512K"), Ok(512 << 10));
        assert_eq!(bytes("1.5M"), Ok(1_572_864));
        assert_eq!(bytes("10MB"), Ok(10_000_000));
        assert_eq!(bytes("4096"), Ok(4096));
        assert!(bytes("lots").is_err());
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert!(duration("5 parsecs").is_err());
    }
}
