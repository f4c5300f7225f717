//! Byte ranges (RFC 9110 §14): parsing `Range: bytes=...` against a representation length.

use std::ops::Range;

/// How many ranges one request may ask for before the header is ignored, a guard against
/// requests that ask for thousands of tiny or overlapping ranges.
pub const MAX_RANGES: usize = 32;

/// The outcome of evaluating a Range header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ranges {
    /// No usable Range header: send the whole representation (RFC 9110 §14.2: an invalid or
    /// unknown-unit Range is ignored).
    Ignore,
    /// Satisfiable ranges, each `start..end` (end exclusive), in request order.
    Satisfiable(Vec<Range<u64>>),
    /// Syntactically valid but none overlaps the representation: 416.
    Unsatisfiable,
}

/// Evaluates a Range header value against a representation of `len` bytes.
pub fn parse(header: &str, len: u64) -> Ranges {
    let Some(spec) = header.trim().strip_prefix("bytes=").or_else(|| {
        let (unit, rest) = header.trim().split_once('=')?;
        unit.trim().eq_ignore_ascii_case("bytes").then_some(rest)
    }) else {
        return Ranges::Ignore;
    };
    let mut out = Vec::new();
    let mut any = false;
    for part in spec.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        any = true;
        let Some((first, last)) = part.split_once('-') else {
            return Ranges::Ignore;
        };
        let (first, last) = (first.trim(), last.trim());
        let range = if first.is_empty() {
            // Suffix range: the last N bytes.
            let Ok(n) = last.parse::<u64>() else {
                return Ranges::Ignore;
            };
            if n == 0 || len == 0 {
                continue;
            }
            len.saturating_sub(n)..len
        } else {
            let Ok(start) = first.parse::<u64>() else {
                return Ranges::Ignore;
            };
            let end = if last.is_empty() {
                len
            } else {
                let Ok(last) = last.parse::<u64>() else {
                    return Ranges::Ignore;
                };
                if last < start {
                    return Ranges::Ignore;
                }
                last.saturating_add(1).min(len)
            };
            if start >= len {
                continue;
            }
            start..end
        };
        out.push(range);
        if out.len() > MAX_RANGES {
            return Ranges::Ignore;
        }
    }
    match (any, out.is_empty()) {
        (false, _) => Ranges::Ignore,
        (true, true) => Ranges::Unsatisfiable,
        (true, false) => Ranges::Satisfiable(coalesce(out)),
    }
}

/// Merges ranges that overlap or touch (RFC 9110 §14.2 lets a server coalesce them), so
/// that no request makes the answer larger than the representation: `0-` asked 32 times is
/// one part, not 32 copies. Ranges that are apart keep the order they were asked in.
fn coalesce(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    if ranges.len() < 2 {
        return ranges;
    }
    let mut sorted = ranges.clone();
    sorted.sort_by_key(|r| r.start);
    let apart = sorted.windows(2).all(|w| w[1].start > w[0].end);
    if apart {
        return ranges;
    }
    ranges.clear();
    for r in sorted {
        match ranges.last_mut() {
            Some(last) if r.start <= last.end => {
                last.end = last.end.max(r.end);
            }
            _ => ranges.push(r),
        }
    }
    ranges
}

/// The header of one part of a multipart/byteranges body (RFC 9110 §14.6), starting with the
/// delimiter line.
pub fn part_header(boundary: &str, content_type: &str, r: &Range<u64>, total: u64) -> String {
    format!("\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {}-{}/{total}\r\n\r\n", r.start, r.end - 1)
}

/// The closing delimiter of a multipart/byteranges body.
pub fn closing(boundary: &str) -> String {
    format!("\r\n--{boundary}--\r\n")
}

/// The Content-Range of a single-part 206.
pub fn content_range(r: &Range<u64>, total: u64) -> String {
    format!("bytes {}-{}/{total}", r.start, r.end - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one merged range is the point
    fn overlapping_ranges_are_merged_so_an_answer_never_outgrows_the_representation() {
        let many = format!("bytes={}", vec!["0-"; 32].join(","));
        assert_eq!(
            parse(&many, 200_000_000),
            Ranges::Satisfiable(vec![0..200_000_000])
        );
        assert_eq!(
            parse("bytes=0-99,50-149,1000-1099", 10_000),
            Ranges::Satisfiable(vec![0..150, 1000..1100])
        );
        // Touching: one part.
        assert_eq!(
            parse("bytes=0-9,10-19", 10_000),
            Ranges::Satisfiable(vec![0..20])
        );
        // Apart: as asked, in the order asked.
        assert_eq!(
            parse("bytes=5000-5009,0-9", 10_000),
            Ranges::Satisfiable(vec![5000..5010, 0..10])
        );
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // a list holding one range is the point
    fn forms() {
        assert_eq!(parse("bytes=0-99", 1000), Ranges::Satisfiable(vec![0..100]));
        assert_eq!(
            parse("bytes=900-", 1000),
            Ranges::Satisfiable(vec![900..1000])
        );
        assert_eq!(
            parse("bytes=-100", 1000),
            Ranges::Satisfiable(vec![900..1000])
        );
        assert_eq!(
            parse("bytes=-5000", 1000),
            Ranges::Satisfiable(vec![0..1000])
        );
        assert_eq!(
            parse("bytes=990-2000", 1000),
            Ranges::Satisfiable(vec![990..1000])
        );
        assert_eq!(
            parse("bytes=0-0, 5-9", 1000),
            Ranges::Satisfiable(vec![0..1, 5..10])
        );
        assert_eq!(parse("bytes=1000-", 1000), Ranges::Unsatisfiable);
        assert_eq!(parse("bytes=5-1", 1000), Ranges::Ignore);
        assert_eq!(parse("items=0-1", 1000), Ranges::Ignore);
        assert_eq!(parse("bytes=a-b", 1000), Ranges::Ignore);
        assert_eq!(parse("bytes=-0", 1000), Ranges::Unsatisfiable);
    }

    proptest::proptest! {
        #[test]
        fn ranges_lie_within_the_representation(start in 0u64..2000, span in 0u64..2000, len in 0u64..1500) {
            if let Ranges::Satisfiable(rs) = parse(&format!("bytes={start}-{}", start + span), len) {
                for r in rs {
                    proptest::prop_assert!(r.start < r.end && r.end <= len);
                }
            }
        }
    }
}
