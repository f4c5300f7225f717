//! Common Log Format (and Combined Log Format) records.
//!
//! `host ident authuser [10/Oct/2000:13:55:36 -0700] "GET /path HTTP/1.0" 200 2326`,
//! optionally followed by Combined Log Format's `"referer" "user-agent"`, which are
//! ignored. The timestamp, including its zone offset, is turned into Unix seconds by
//! a small parser here, because `httpdate` only knows RFC 7231 dates.

/// The outcome of one well-formed record.
#[derive(Debug, PartialEq)]
pub(super) enum Record {
    /// A GET/HEAD with a 2xx status and a numeric size.
    Cacheable {
        /// The client, as the log names it (an address or a host name).
        host: String,
        /// The request time in Unix seconds (UTC).
        unix_s: i64,
        /// The request target, query string included.
        key: String,
        /// The response size in bytes.
        size: u64,
    },
    /// Well-formed but not cacheable.
    Skipped,
}

/// A cursor over one log line.
struct Cursor<'a> {
    rest: &'a str,
}

impl<'a> Cursor<'a> {
    /// The next space-delimited token, or an error naming `field`.
    fn token(&mut self, field: &str) -> Result<&'a str, String> {
        let s = self.rest.trim_start();
        if s.is_empty() {
            return Err(format!("missing {field}"));
        }
        let end = s.find([' ', '\t']).unwrap_or(s.len());
        self.rest = &s[end..];
        Ok(&s[..end])
    }

    /// The text between `open` and `close`; `escapes` honours backslash escapes.
    fn delimited(
        &mut self,
        open: char,
        close: char,
        escapes: bool,
        field: &str,
    ) -> Result<&'a str, String> {
        let s = self.rest.trim_start();
        let Some(body) = s.strip_prefix(open) else {
            return Err(format!("{field} must start with '{open}'"));
        };
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            if escaped {
                escaped = false;
            } else if escapes && c == '\\' {
                escaped = true;
            } else if c == close {
                self.rest = &body[i + c.len_utf8()..];
                return Ok(&body[..i]);
            }
        }
        Err(format!("{field} has no closing '{close}'"))
    }
}

/// Parses one non-empty line; the error message names the bad field.
pub(super) fn parse_line(line: &str) -> Result<Record, String> {
    let mut c = Cursor { rest: line };
    let host = c.token("host")?;
    c.token("ident")?;
    c.token("authuser")?;
    let unix_s = parse_time(c.delimited('[', ']', false, "timestamp")?)?;
    let request = c.delimited('"', '"', true, "request line")?;
    let status = c.token("status")?;
    let status: u16 = match status.parse() {
        Ok(s) if (100..=999).contains(&s) => s,
        _ => return Err(format!("status {status:?} is not a 3-digit number")),
    };
    let size = c.token("size")?;
    let size: Option<u64> = if size == "-" {
        None
    } else {
        Some(
            size.parse()
                .map_err(|_| format!("size {size:?} is neither a number nor '-'"))?,
        )
    };
    // Anything after the size (Combined Log Format's referer and agent) is ignored.
    let mut words = request.split_whitespace();
    let method = words.next().unwrap_or("");
    if !matches!(method, "GET" | "HEAD") || !(200..=299).contains(&status) {
        // Includes `-` and junk request lines, which servers log for 400/408 responses.
        return Ok(Record::Skipped);
    }
    let Some(key) = words.next() else {
        return Err(format!("request line {request:?} has no target"));
    };
    match size {
        Some(size) => Ok(Record::Cacheable {
            host: host.to_owned(),
            unix_s,
            key: key.to_owned(),
            size,
        }),
        None => Ok(Record::Skipped),
    }
}

/// Parses `10/Oct/2000:13:55:36 -0700` into Unix seconds.
fn parse_time(s: &str) -> Result<i64, String> {
    let bad = |what: &str| format!("timestamp {s:?}: {what}");
    let (local, zone) = s.split_once(' ').ok_or_else(|| bad("missing zone"))?;
    let mut parts = local.splitn(4, [':', '/']);
    let mut next = |what: &str| parts.next().ok_or_else(|| bad(what));
    let day = number(next("missing day")?, 1, 31).ok_or_else(|| bad("bad day"))?;
    let month = month_number(next("missing month")?).ok_or_else(|| bad("bad month"))?;
    let year = number(next("missing year")?, 0, 9999).ok_or_else(|| bad("bad year"))?;
    let clock: Vec<&str> = next("missing time of day")?.split(':').collect();
    let [h, m, sec] = clock[..] else {
        return Err(bad("time of day is not hh:mm:ss"));
    };
    let h = number(h, 0, 23).ok_or_else(|| bad("bad hour"))?;
    let m = number(m, 0, 59).ok_or_else(|| bad("bad minute"))?;
    let sec = number(sec, 0, 60).ok_or_else(|| bad("bad second"))?;
    let offset_s = parse_zone(zone).ok_or_else(|| bad("bad zone offset"))?;
    let days = days_from_civil(year, month, day);
    Ok(days * 86_400 + h * 3600 + m * 60 + sec - offset_s)
}

/// A decimal number of ASCII digits within `lo..=hi`.
fn number(s: &str, lo: i64, hi: i64) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 4 {
        return None;
    }
    s.parse().ok().filter(|n| (lo..=hi).contains(n))
}

/// `+hhmm` / `-hhmm` as seconds east of UTC.
fn parse_zone(z: &str) -> Option<i64> {
    let (sign, digits) = match z.as_bytes().first()? {
        b'+' => (1, &z[1..]),
        b'-' => (-1, &z[1..]),
        _ => return None,
    };
    if digits.len() != 4 {
        return None;
    }
    let h = number(&digits[..2], 0, 23)?;
    let m = number(&digits[2..], 0, 59)?;
    Some(sign * (h * 3600 + m * 60))
}

fn month_number(s: &str) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    MONTHS
        .iter()
        .position(|m| m.eq_ignore_ascii_case(s))
        .map(|i| i as i64 + 1)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_timestamps() {
        // 2000-10-10T20:55:36Z
        assert_eq!(parse_time("10/Oct/2000:13:55:36 -0700"), Ok(971_211_336));
        assert_eq!(parse_time("01/Jan/1970:00:00:00 +0000"), Ok(0));
        assert_eq!(parse_time("01/Jan/1970:01:00:00 +0100"), Ok(0));
        // A leap day.
        assert_eq!(parse_time("29/Feb/2024:00:00:00 +0000"), Ok(1_709_164_800));
        assert_eq!(parse_time("07/Jul/1997:08:30:00 +0800"), Ok(868_235_400));
    }

    #[test]
    fn bad_timestamps() {
        for s in [
            "10/Oct/2000:13:55:36",
            "10/Foo/2000:13:55:36 -0700",
            "32/Oct/2000:13:55:36 -0700",
            "10/Oct/2000:25:55:36 -0700",
            "10/Oct/2000:13:55 -0700",
            "10/Oct/2000:13:55:36 0700",
            "10/Oct/2000:13:55:36 -07",
        ] {
            assert!(parse_time(s).is_err(), "{s} should not parse");
        }
    }

    #[test]
    fn escaped_quote_in_request() {
        let r = parse_line(r#"h - - [10/Oct/2000:13:55:36 -0700] "GET /a\"b HTTP/1.0" 200 5"#);
        assert_eq!(
            r,
            Ok(Record::Cacheable {
                host: "h".into(),
                unix_s: 971_211_336,
                key: r#"/a\"b"#.into(),
                size: 5
            })
        );
    }

    #[test]
    fn names_bad_field() {
        let base = "h - - [10/Oct/2000:13:55:36 -0700]";
        let e = parse_line(&format!(r#"{base} "GET / HTTP/1.0" 2x0 5"#)).unwrap_err();
        assert!(e.contains("status"), "{e}");
        let e = parse_line(&format!(r#"{base} "GET / HTTP/1.0" 200 abc"#)).unwrap_err();
        assert!(e.contains("size"), "{e}");
        let e = parse_line(&format!(r#"{base} "GET / HTTP/1.0" 200"#)).unwrap_err();
        assert!(e.contains("size"), "{e}");
        let e = parse_line(r#"h - - 10/Oct/2000 "GET /" 200 5"#).unwrap_err();
        assert!(e.contains("timestamp"), "{e}");
        let e = parse_line(&format!(r#"{base} "GET / HTTP/1.0 200 5"#)).unwrap_err();
        assert!(e.contains("request line"), "{e}");
        let e = parse_line(&format!(r#"{base} "GET" 200 5"#)).unwrap_err();
        assert!(e.contains("target"), "{e}");
        let e = parse_line("h -").unwrap_err();
        assert!(e.contains("authuser"), "{e}");
    }
}
