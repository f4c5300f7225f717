//! Trace reading: CLF with zones and combined fields, skipped records, line numbers
//! of malformed lines, and the TSV round trip.

use proptest::prelude::*;
use slipstream_workload::trace::{self, Format, TraceError};
use slipstream_workload::Request;

const LOG: &str = r#"# a comment
127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326
10.0.0.2 - - [10/Oct/2000:22:55:40 +0200] "GET /index.html?lang=en HTTP/1.1" 200 512 "http://example.com/" "Mozilla/4.08 [en] (Win98; I ;Nav)"

10.0.0.3 - - [10/Oct/2000:20:55:37 +0000] "POST /form HTTP/1.1" 200 10
10.0.0.4 - - [10/Oct/2000:20:55:38 +0000] "GET /missing HTTP/1.1" 404 209
10.0.0.5 - - [10/Oct/2000:20:55:39 +0000] "GET /notmod HTTP/1.1" 304 -
10.0.0.6 - - [10/Oct/2000:20:55:39 +0000] "-" 408 -
10.0.0.7 - - [10/Oct/2000:20:55:41 +0000] "GET /empty HTTP/1.1" 200 -
10.0.0.8 - - [10/Oct/2000:20:56:36 +0000] "HEAD /apache_pb.gif HTTP/1.0" 206 100
"#;

#[test]
fn parses_clf_and_combined() {
    let t = trace::read(LOG.as_bytes(), "log", None).expect("valid log");
    assert_eq!(t.skipped, 5);
    let got: Vec<(f64, &str, u64)> = t
        .requests
        .iter()
        .map(|r| (r.time_s, r.key.as_str(), r.size_bytes))
        .collect();
    // 13:55:36 -0700 and 22:55:40 +0200 are 20:55:36Z and 20:55:40Z.
    assert_eq!(
        got,
        vec![
            (0.0, "/apache_pb.gif", 2326),
            (4.0, "/index.html?lang=en", 512),
            (60.0, "/apache_pb.gif", 100),
        ]
    );
}

#[test]
fn explicit_format_and_detection_agree() {
    let a = trace::read(LOG.as_bytes(), "log", None).expect("detected");
    let b = trace::read(LOG.as_bytes(), "log", Some(Format::Clf)).expect("explicit");
    assert_eq!(a, b);
}

fn parse_error(text: &str, format: Option<Format>) -> (usize, String) {
    match trace::read(text.as_bytes(), "bad.log", format) {
        Err(TraceError::Parse {
            source_name,
            line,
            message,
        }) => {
            assert_eq!(source_name, "bad.log");
            (line, message)
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn malformed_clf_reports_line_and_field() {
    let good = r#"h - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1"#;
    let cases = [
        (
            r#"h - - [10/Oct/2000:13:55:36] "GET / HTTP/1.0" 200 1"#,
            "timestamp",
        ),
        (
            r#"h - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" ok 1"#,
            "status",
        ),
        (
            r#"h - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1k"#,
            "size",
        ),
        (
            r#"h - - [10/Oct/2000:13:55:36 -0700] GET / HTTP/1.0 200 1"#,
            "request line",
        ),
    ];
    for (bad, field) in cases {
        let text = format!("{good}\n# comment\n\n{good}\n{bad}\n{good}\n");
        let (line, message) = parse_error(&text, None);
        assert_eq!(line, 5, "{bad}");
        assert!(message.contains(field), "{message:?} should name {field}");
    }
    let err = trace::read(
        format!("{good}\n{}\n", cases[0].0).as_bytes(),
        "x.log",
        None,
    )
    .expect_err("malformed");
    assert!(err.to_string().starts_with("x.log:2: "), "{err}");
}

#[test]
fn malformed_tsv_reports_line() {
    let head = "time_s\tkey\tsize_bytes\n0\t/a\t1\n";
    assert_eq!(parse_error(&format!("{head}1\t/b\n"), None).0, 3);
    assert_eq!(parse_error(&format!("{head}1\t/b\t1\t9\n"), None).0, 3);
    assert_eq!(parse_error(&format!("{head}\n1\t/b\tbig\n"), None).0, 4);
    assert_eq!(parse_error(&format!("{head}soon\t/b\t1\n"), None).0, 3);
}

#[test]
fn reads_files_from_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.tsv");
    let reqs = vec![Request {
        time_s: 0.5,
        key: "/x".into(),
        size_bytes: 7,
    }];
    let file = std::fs::File::create(&path).expect("create");
    trace::write_tsv(file, &reqs).expect("write");
    let t = trace::read_path(&path).expect("read back");
    assert_eq!(t.requests, reqs);
    assert_eq!(t.skipped, 0);
}

fn request() -> impl Strategy<Value = Request> {
    (-1e12f64..1e12, "[^\t\r\n]{0,40}", any::<u64>()).prop_map(|(time_s, key, size_bytes)| {
        Request {
            time_s,
            key,
            size_bytes,
        }
    })
}

proptest! {
    #[test]
    fn tsv_round_trip(reqs in proptest::collection::vec(request(), 0..50)) {
        let mut out = Vec::new();
        trace::write_tsv(&mut out, &reqs).expect("write to vec");
        let t = trace::read(&out[..], "mem", Some(Format::Tsv)).expect("read back");
        prop_assert_eq!(t.requests, reqs.clone());
        // Detection finds TSV from the header too.
        let t = trace::read(&out[..], "mem", None).expect("read back detected");
        prop_assert_eq!(t.requests, reqs);
    }
}
