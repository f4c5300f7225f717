//! Fuzz targets for the trace readers (CLF, Combined and TSV): arbitrary bytes, and valid lines
//! with mutated fields. A read either succeeds or names the source and a real line; a written
//! TSV trace reads back identically; a well-formed CLF record reads back with its key, size and
//! time.

#[path = "../../../tests/fuzz_support.rs"]
mod support;

use proptest::prelude::*;
use slipstream_workload::trace::{self, Format, TraceError};
use slipstream_workload::Request;
use support::fuzz;

fn check(text: &[u8], format: Option<Format>) -> Result<(), TestCaseError> {
    let lines = text.split(|b| *b == b'\n').count();
    match trace::read(text, "fuzz.log", format) {
        Ok(t) => {
            prop_assert!(t.requests.iter().all(|r| r.time_s.is_finite()));
        }
        Err(TraceError::Parse {
            source_name,
            line,
            message,
        }) => {
            prop_assert_eq!(source_name, "fuzz.log");
            prop_assert!(line >= 1 && line <= lines, "line {line} of {lines}");
            prop_assert!(!message.is_empty());
        }
        Err(e) => return Err(TestCaseError::fail(format!("not a parse error: {e}"))),
    }
    Ok(())
}

fn clf_line() -> impl Strategy<Value = String> {
    let host = "[a-z0-9.:-]{1,12}|-";
    let day = prop_oneof!["[0-9]{2}", "[0-9]{0,3}"];
    let month = prop_oneof![
        Just("Jan"),
        Just("Feb"),
        Just("Mar"),
        Just("Apr"),
        Just("May"),
        Just("Jun"),
        Just("Jul"),
        Just("Aug"),
        Just("Sep"),
        Just("Oct"),
        Just("Nov"),
        Just("Dec"),
        Just("Foo")
    ];
    let year = prop_oneof!["[0-9]{4}", "[0-9]{0,6}"];
    let clock = prop_oneof!["[0-9]{2}:[0-9]{2}:[0-9]{2}", "[0-9:]{0,10}"];
    let zone = prop_oneof!["[+-][0-9]{4}", "[+-]?[0-9]{0,6}", Just("GMT".to_owned())];
    let method = prop_oneof![Just("GET"), Just("HEAD"), Just("POST"), Just("-"), Just("")];
    let target = "/[ -~&&[^\" ]]{0,20}|[ -~]{0,10}";
    let status = prop_oneof!["[1-5][0-9]{2}", "[0-9]{0,5}", Just("-".to_owned())];
    let size = prop_oneof!["[0-9]{1,20}", Just("-".to_owned()), "[ -~&&[^ ]]{0,4}"];
    let tail = prop_oneof![
        Just(String::new()),
        " \"[ -~&&[^\"]]{0,10}\" \"[ -~&&[^\"]]{0,10}\""
    ];
    (
        (host, day, month, year, clock, zone),
        (method, target, status, size, tail),
    )
        .prop_map(|((h, d, mo, y, c, z), (m, t, st, si, tail))| {
            format!("{h} - - [{d}/{mo}/{y}:{c} {z}] \"{m} {t} HTTP/1.1\" {st} {si}{tail}")
        })
}

#[test]
fn trace_arbitrary_bytes() {
    fuzz(
        "trace_arbitrary_bytes",
        3_000,
        (
            proptest::collection::vec(any::<u8>(), 0..300),
            prop_oneof![Just(None), Just(Some(Format::Clf)), Just(Some(Format::Tsv))],
        ),
        |(bytes, format)| check(&bytes, format),
    );
}

#[test]
fn trace_mutated_clf_lines() {
    fuzz(
        "trace_mutated_clf_lines",
        3_000,
        proptest::collection::vec(clf_line(), 1..6),
        |lines| {
            let text = lines.join("\n");
            check(text.as_bytes(), None)?;
            // Times are relative to the earliest request, so never negative.
            if let Ok(t) = trace::read(text.as_bytes(), "fuzz.log", Some(Format::Clf)) {
                prop_assert!(t.requests.iter().all(|r| r.time_s >= 0.0));
                prop_assert!(t.requests.is_empty() || t.requests.iter().any(|r| r.time_s == 0.0));
            }
            Ok(())
        },
    );
}

#[test]
fn clf_records_read_back() {
    let time = (
        1u32..=28,
        0usize..12,
        1970u32..2100,
        0u32..24,
        0u32..60,
        0u32..60,
        -1400i32..1400,
    );
    fuzz(
        "clf_records_read_back",
        3_000,
        (
            time,
            "/[!-~&&[^\"]]{0,30}",
            0u64..u64::MAX,
            prop_oneof![Just("GET"), Just("HEAD")],
            200u16..300,
        ),
        |((d, mo, y, h, mi, s, z), key, size, method, status)| {
            const MONTHS: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            let zone = format!(
                "{}{:02}{:02}",
                if z < 0 { '-' } else { '+' },
                z.abs() / 100 % 24,
                z.abs() % 60
            );
            let line = format!(
                "10.0.0.1 - - [{d:02}/{}/{y:04}:{h:02}:{mi:02}:{s:02} {zone}] \"{method} {key} HTTP/1.0\" {status} {size}",
                MONTHS[mo]
            );
            let t = trace::read(line.as_bytes(), "one.log", None)
                .map_err(|e| TestCaseError::fail(format!("{line}: {e}")))?;
            prop_assert_eq!(
                t.requests,
                vec![Request {
                    time_s: 0.0,
                    key: key.clone(),
                    size_bytes: size
                }],
                "{}",
                line
            );
            Ok(())
        },
    );
}

#[test]
fn tsv_traces_read_back_identically() {
    let request = (
        prop_oneof![any::<f64>(), -1e6f64..1e6, Just(-0.0)],
        "[^\t\r\n]{0,20}",
        any::<u64>(),
    )
        .prop_map(|(time_s, key, size_bytes)| Request {
            time_s,
            key,
            size_bytes,
        });
    fuzz(
        "tsv_traces_read_back_identically",
        3_000,
        proptest::collection::vec(request, 0..20),
        |requests| {
            let mut text = Vec::new();
            match trace::write_tsv(&mut text, &requests) {
                Ok(()) => {
                    let back = trace::read(&text[..], "w.tsv", None)
                        .map_err(|e| TestCaseError::fail(format!("{e}")))?;
                    prop_assert_eq!(back.requests.len(), requests.len());
                    for (a, b) in back.requests.iter().zip(&requests) {
                        prop_assert_eq!(a.time_s.to_bits(), b.time_s.to_bits());
                        prop_assert_eq!(&a.key, &b.key);
                        prop_assert_eq!(a.size_bytes, b.size_bytes);
                    }
                }
                Err(_) => prop_assert!(requests.iter().any(|r| !r.time_s.is_finite())),
            }
            Ok(())
        },
    );
}
