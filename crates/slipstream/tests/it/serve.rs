//! `slipstream serve`: HTTP behaviour against the real binary.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime};

use crate::support::{self, get, large, raw, request, serve, site};

#[test]
fn get_sends_file_with_validators_and_type() {
    let dir = site();
    let node = serve(dir.path(), &[]);
    let r = get(node.addr, "/hello.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello, world\n");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some("13"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert!(r.header("etag").is_some_and(|e| e.starts_with('"')));
    assert!(r.header("last-modified").is_some());
    // The second request is a cache hit and must be byte-identical.
    let again = get(node.addr, "/hello.txt");
    assert_eq!(again.body, r.body);
    assert_eq!(again.header("etag"), r.header("etag"));
}

#[test]
fn head_has_the_get_headers_and_no_body() {
    // RFC 9110 §9.3.2: HEAD is GET without the content.
    let dir = site();
    let node = serve(dir.path(), &[]);
    let g = get(node.addr, "/large.bin");
    let h = request(node.addr, "HEAD", "/large.bin", &[]);
    assert_eq!(h.status, 200);
    assert!(h.body.is_empty(), "HEAD sent {} body bytes", h.body.len());
    assert_eq!(h.header("content-length"), Some("300000"));
    assert_eq!(h.header("etag"), g.header("etag"));
    assert_eq!(h.header("content-type"), g.header("content-type"));
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let dir = site();
    let node = serve(dir.path(), &[]);
    let req = "GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_owned();
    let mut s = TcpStream::connect(node.addr).expect("connect");
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    assert_eq!(out.matches("HTTP/1.1 200 OK").count(), 2, "{out}");
    assert!(out.contains("hello, world") && out.contains("<h1>home</h1>"));
}

#[test]
fn if_none_match_gives_304_with_validators() {
    // RFC 9110 §13.1.2 and §15.4.5.
    let dir = site();
    let node = serve(dir.path(), &["--cache-control", "max-age=60"]);
    let etag = get(node.addr, "/hello.txt")
        .header("etag")
        .expect("etag")
        .to_owned();
    let r = request(node.addr, "GET", "/hello.txt", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(
        r.header("cache-control"),
        Some("max-age=60"),
        "a 304 keeps Cache-Control"
    );
    let multi = request(
        node.addr,
        "GET",
        "/hello.txt",
        &[("Range", "bytes=0-1,4-5")],
    );
    assert_eq!(multi.status, 206);
    assert_eq!(
        multi.header("cache-control"),
        Some("max-age=60"),
        "so does a multipart 206"
    );
    let weak = format!("\"nope\", W/{etag}");
    assert_eq!(
        request(node.addr, "GET", "/hello.txt", &[("If-None-Match", &weak)]).status,
        304
    );
    assert_eq!(
        request(
            node.addr,
            "GET",
            "/hello.txt",
            &[("If-None-Match", "\"other\"")]
        )
        .status,
        200
    );
    assert_eq!(
        request(node.addr, "HEAD", "/hello.txt", &[("If-None-Match", "*")]).status,
        304
    );
}

#[test]
fn if_modified_since_gives_304_only_when_unmodified() {
    // RFC 9110 §13.1.3, and §13.2.2: If-None-Match takes precedence.
    let dir = site();
    let node = serve(dir.path(), &[]);
    let lm = get(node.addr, "/hello.txt")
        .header("last-modified")
        .expect("last-modified")
        .to_owned();
    assert_eq!(
        request(
            node.addr,
            "GET",
            "/hello.txt",
            &[("If-Modified-Since", &lm)]
        )
        .status,
        304
    );
    let old = "Sat, 01 Jan 2000 00:00:00 GMT";
    assert_eq!(
        request(
            node.addr,
            "GET",
            "/hello.txt",
            &[("If-Modified-Since", old)]
        )
        .status,
        200
    );
    assert_eq!(
        request(
            node.addr,
            "GET",
            "/hello.txt",
            &[("If-Modified-Since", "not a date")]
        )
        .status,
        200
    );
    let both = request(
        node.addr,
        "GET",
        "/hello.txt",
        &[("If-None-Match", "\"x\""), ("If-Modified-Since", &lm)],
    );
    assert_eq!(
        both.status, 200,
        "a failed If-None-Match overrides If-Modified-Since"
    );
}

#[test]
fn if_match_and_if_unmodified_since_fail_with_412() {
    // RFC 9110 §13.1.1, §13.1.4.
    let dir = site();
    let node = serve(dir.path(), &[]);
    assert_eq!(
        request(node.addr, "GET", "/hello.txt", &[("If-Match", "\"other\"")]).status,
        412
    );
    let old = "Sat, 01 Jan 2000 00:00:00 GMT";
    assert_eq!(
        request(
            node.addr,
            "GET",
            "/hello.txt",
            &[("If-Unmodified-Since", old)]
        )
        .status,
        412
    );
}

#[test]
fn single_byte_ranges() {
    // RFC 9110 §14.1.2, §15.3.7.
    let dir = site();
    let node = serve(dir.path(), &[]);
    let r = request(node.addr, "GET", "/hello.txt", &[("Range", "bytes=0-4")]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"hello");
    assert_eq!(r.header("content-range"), Some("bytes 0-4/13"));
    assert_eq!(r.header("content-length"), Some("5"));
    let suffix = request(node.addr, "GET", "/hello.txt", &[("Range", "bytes=-6")]);
    assert_eq!(suffix.body, b"world\n");
    let open = request(node.addr, "GET", "/hello.txt", &[("Range", "bytes=7-")]);
    assert_eq!(open.body, b"world\n");
    // An unknown unit or invalid syntax is ignored: the whole file (§14.2).
    assert_eq!(
        request(node.addr, "GET", "/hello.txt", &[("Range", "lines=1-2")]).status,
        200
    );
    assert_eq!(
        request(node.addr, "GET", "/hello.txt", &[("Range", "bytes=9-3")]).status,
        200
    );
}

#[test]
fn unsatisfiable_range_gives_416_with_length() {
    // RFC 9110 §15.5.17.
    let dir = site();
    let node = serve(dir.path(), &[]);
    let r = request(
        node.addr,
        "GET",
        "/hello.txt",
        &[("Range", "bytes=100-200")],
    );
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */13"));
}

#[test]
fn multiple_ranges_give_multipart_byteranges() {
    // RFC 9110 §14.6.
    let dir = site();
    let node = serve(dir.path(), &[]);
    let r = request(
        node.addr,
        "GET",
        "/large.bin",
        &[("Range", "bytes=0-9,1000-1009,299990-")],
    );
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").expect("content-type");
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect("multipart type");
    assert_eq!(
        r.header("content-length")
            .and_then(|l| l.parse::<usize>().ok()),
        Some(r.body.len())
    );
    let body = &r.body;
    let data = large();
    let mut parts = 0;
    for (start, end) in [(0usize, 10usize), (1000, 1010), (299_990, 300_000)] {
        let marker = format!("Content-Range: bytes {start}-{}/300000\r\n\r\n", end - 1);
        let at = body
            .windows(marker.len())
            .position(|w| w == marker.as_bytes())
            .expect("part header");
        let content = &body[at + marker.len()..at + marker.len() + (end - start)];
        assert_eq!(content, &data[start..end]);
        parts += 1;
    }
    assert_eq!(parts, 3);
    assert!(String::from_utf8_lossy(body)
        .trim_end()
        .ends_with(&format!("--{boundary}--")));
}

#[test]
fn if_range_with_stale_validator_sends_everything() {
    // RFC 9110 §13.1.5.
    let dir = site();
    let node = serve(dir.path(), &[]);
    let etag = get(node.addr, "/hello.txt")
        .header("etag")
        .expect("etag")
        .to_owned();
    let ok = request(
        node.addr,
        "GET",
        "/hello.txt",
        &[("Range", "bytes=0-4"), ("If-Range", &etag)],
    );
    assert_eq!(ok.status, 206);
    let stale = request(
        node.addr,
        "GET",
        "/hello.txt",
        &[("Range", "bytes=0-4"), ("If-Range", "\"old\"")],
    );
    assert_eq!(stale.status, 200);
    assert_eq!(stale.body, b"hello, world\n");
}

#[test]
fn incomplete_entry_sends_cached_chunk_then_the_rest_from_disk() {
    // 002 §4.1.2 and §4.2.2: a 400 KiB cache has a 100 KiB chunk; the 300 KB file is kept as its
    // first chunk and the rest comes from the file.
    let dir = site();
    let node = serve(dir.path(), &["--cache-size", "400K"]);
    let data = large();
    for _ in 0..3 {
        let r = get(node.addr, "/large.bin");
        assert_eq!(r.status, 200);
        assert!(r.body == data, "body differs from the file");
    }
    let across = request(
        node.addr,
        "GET",
        "/large.bin",
        &[("Range", "bytes=102000-102600")],
    );
    assert_eq!(across.body, &data[102_000..102_601]);
    let metrics = String::from_utf8(get(node.addr, "/_slipstream/metrics").body).expect("utf-8");
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0)
    };
    assert!(
        value("slipstream_cache_requests_total{outcome=\"incomplete_hit\"}") >= 3.0,
        "{metrics}"
    );
    assert!(value("slipstream_response_bytes_total{source=\"memory\"}") > 0.0);
    assert!(value("slipstream_response_bytes_total{source=\"disk\"}") > 0.0);
    let used = value("slipstream_cache_used_bytes");
    assert!(
        used > 100_000.0 && used <= 102_400.0,
        "one chunk of at most 100 KiB is cached, got {used}"
    );
}

#[test]
fn traversal_attempts_are_refused() {
    let dir = site();
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret.txt"), b"secret").expect("write");
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        dir.path().join("escape.txt"),
    )
    .expect("symlink");
    std::os::unix::fs::symlink(outside.path(), dir.path().join("escape-dir")).expect("symlink");
    std::os::unix::fs::symlink(dir.path().join("hello.txt"), dir.path().join("inside.txt"))
        .expect("symlink");
    let node = serve(dir.path(), &[]);
    for path in [
        "/../secret.txt",
        "/docs/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/docs/..%2f..%2fsecret.txt",
        "/escape.txt",
        "/escape-dir/secret.txt",
    ] {
        let r = get(node.addr, path);
        assert_eq!(r.status, 403, "{path} gave {}", r.status);
        assert!(
            !String::from_utf8_lossy(&r.body).contains("secret\n") && r.body != b"secret",
            "{path} leaked"
        );
    }
    assert_eq!(
        get(node.addr, "/inside.txt").body,
        b"hello, world\n",
        "a link inside the root is fine"
    );
    assert_eq!(get(node.addr, "/%ff%fe").status, 400);
    assert_eq!(get(node.addr, "/a%00b").status, 400);
}

#[test]
fn paths_are_percent_decoded_and_directories_serve_their_index() {
    let dir = site();
    let node = serve(dir.path(), &[]);
    assert_eq!(get(node.addr, "/space%20name.txt").body, b"spaced\n");
    assert_eq!(get(node.addr, "/").body, b"<h1>home</h1>\n");
    assert_eq!(get(node.addr, "/docs/").body, b"<h1>docs</h1>\n");
    let redirect = get(node.addr, "/docs?x=1");
    assert_eq!(redirect.status, 301);
    assert_eq!(redirect.header("location"), Some("/docs/?x=1"));
    assert_eq!(get(node.addr, "/empty/").status, 404);
    assert_eq!(get(node.addr, "/missing.txt").status, 404);
    assert_eq!(get(node.addr, "/hello.txt/").status, 404);
}

#[test]
fn other_methods_get_405_with_allow() {
    let dir = site();
    let node = serve(dir.path(), &[]);
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let r = request(node.addr, method, "/hello.txt", &[("Content-Length", "0")]);
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
    }
}

#[test]
fn oversized_and_malformed_requests_are_refused_and_the_server_keeps_serving() {
    let dir = site();
    let node = serve(dir.path(), &[]);
    let big = "a".repeat(64 * 1024);
    let r = request(node.addr, "GET", "/hello.txt", &[("X-Big", &big)]);
    assert_eq!(r.status, 431);
    let garbage = raw(node.addr, b"GARBAGE\x01\x02 nonsense\r\n\r\n");
    assert_eq!(garbage.status, 400);
    assert_eq!(get(node.addr, "/hello.txt").status, 200, "still serving");
}

#[test]
fn slow_client_is_disconnected() {
    let dir = site();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        "[serve]\nheader_read_timeout_ms = 300\nidle_timeout_ms = 500\n",
    )
    .expect("write");
    let node = serve(dir.path(), &["--config", config.to_str().expect("utf-8")]);
    let mut s = TcpStream::connect(node.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n")
        .expect("write");
    // The head never completes: the server must close (possibly after a 408).
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    assert!(
        read.is_ok(),
        "server did not close the connection: {read:?}"
    );
    assert!(
        out.is_empty() || String::from_utf8_lossy(&out).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(get(node.addr, "/hello.txt").status, 200);
}

#[test]
fn changed_file_is_served_fresh_after_the_revalidation_interval() {
    let dir = site();
    let node = serve(dir.path(), &["--revalidate", "0s"]);
    let path = dir.path().join("hello.txt");
    assert_eq!(get(node.addr, "/hello.txt").body, b"hello, world\n");
    assert_eq!(get(node.addr, "/hello.txt").body, b"hello, world\n");
    // A new size.
    std::fs::write(&path, b"changed and longer\n").expect("write");
    assert_eq!(get(node.addr, "/hello.txt").body, b"changed and longer\n");
    // The same size, a new modification time.
    std::fs::write(&path, b"CHANGED AND LONGER\n").expect("write");
    let f = std::fs::File::options()
        .write(true)
        .open(&path)
        .expect("open");
    f.set_modified(SystemTime::now() + Duration::from_secs(5))
        .expect("set mtime");
    drop(f);
    assert_eq!(get(node.addr, "/hello.txt").body, b"CHANGED AND LONGER\n");
}

#[test]
fn within_the_interval_a_complete_hit_does_not_touch_the_file_system() {
    // 002 §4.1.1: a complete hit is served from memory with its cached head. With an hour-long
    // interval, a hit after the file changed still returns the cached copy, which shows that
    // the hit made no file-system call.
    let dir = site();
    let node = serve(dir.path(), &["--revalidate", "1h"]);
    assert_eq!(get(node.addr, "/hello.txt").body, b"hello, world\n");
    std::fs::write(dir.path().join("hello.txt"), b"changed\n").expect("write");
    assert_eq!(get(node.addr, "/hello.txt").body, b"hello, world\n");
}

#[test]
fn without_cache_every_request_comes_from_disk() {
    let dir = site();
    let node = serve(dir.path(), &["--no-cache"]);
    for _ in 0..3 {
        assert_eq!(get(node.addr, "/hello.txt").body, b"hello, world\n");
    }
    let metrics = String::from_utf8(get(node.addr, "/_slipstream/metrics").body).expect("utf-8");
    assert!(
        metrics.contains("slipstream_response_bytes_total{source=\"memory\"} 0\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("slipstream_response_bytes_total{source=\"disk\"} 39\n"),
        "{metrics}"
    );
}

#[test]
fn metrics_count_hits_misses_and_bytes() {
    let dir = site();
    let node = serve(dir.path(), &[]);
    for _ in 0..4 {
        get(node.addr, "/hello.txt");
    }
    get(node.addr, "/missing");
    let r = get(node.addr, "/_slipstream/metrics");
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/openmetrics-text; version=1.0.0")));
    let m = String::from_utf8(r.body).expect("utf-8");
    assert!(
        m.contains("slipstream_cache_requests_total{outcome=\"complete_hit\"} 3\n"),
        "{m}"
    );
    assert!(
        m.contains("slipstream_cache_requests_total{outcome=\"miss\"} 2\n"),
        "{m}"
    );
    assert!(
        m.contains("slipstream_response_bytes_total{source=\"memory\"} 39\n"),
        "{m}"
    );
    assert!(
        m.contains("slipstream_response_bytes_total{source=\"disk\"} 13\n"),
        "{m}"
    );
    assert!(
        m.contains("slipstream_requests_total{status=\"4xx\"} 1\n"),
        "{m}"
    );
    assert!(m.contains("# TYPE slipstream_response_seconds histogram"));
    assert_eq!(get(node.addr, "/_slipstream/nope").status, 404);
}

#[tokio::test]
async fn h2c_prior_knowledge() {
    use http_body_util::BodyExt;
    let dir = site();
    let node = serve(dir.path(), &[]);
    let tcp = tokio::net::TcpStream::connect(node.addr)
        .await
        .expect("connect");
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    for (path, want) in [
        ("/hello.txt", &b"hello, world\n"[..]),
        ("/docs/", b"<h1>docs</h1>\n"),
    ] {
        let req = http::Request::get(format!("http://{}{path}", node.addr))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        let resp = send.send_request(req).await.expect("response");
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], want);
    }
    let req = http::Request::get(format!("http://{}/large.bin", node.addr))
        .header("range", "bytes=10-19")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 206);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], &large()[10..20]);
    let _ = support::bin;
}

#[test]
fn rfc9112_s3_2_a_missing_or_repeated_host_is_a_400() {
    let www = site();
    let node = serve(www.path(), &[]);
    let none = raw(
        node.addr,
        b"GET /hello.txt HTTP/1.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(none.status, 400);
    let two = raw(
        node.addr,
        b"GET /hello.txt HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(two.status, 400);
    // HTTP/1.0 may leave Host out.
    let old = raw(node.addr, b"GET /hello.txt HTTP/1.0\r\n\r\n");
    assert_eq!(old.status, 200);
}

#[test]
fn hidden_files_are_not_served_unless_asked_for() {
    let www = site();
    std::fs::write(www.path().join(".env"), "SECRET=1").expect("write");
    std::fs::create_dir_all(www.path().join(".git")).expect("mkdir");
    std::fs::write(www.path().join(".git/config"), "[core]").expect("write");
    std::fs::create_dir_all(www.path().join(".well-known")).expect("mkdir");
    std::fs::write(www.path().join(".well-known/security.txt"), "Contact: x").expect("write");
    let node = serve(www.path(), &[]);
    for path in ["/.env", "/.git/config", "/%2eenv", "/a/../.env"] {
        let r = get(node.addr, path);
        assert!(r.status == 404 || r.status == 403, "{path}: {}", r.status);
        assert!(
            !String::from_utf8_lossy(&r.body).contains("SECRET"),
            "{path}"
        );
    }
    assert_eq!(get(node.addr, "/.well-known/security.txt").status, 200);
    let open = serve(www.path(), &["--set", "serve.serve_hidden=true"]);
    assert_eq!(get(open.addr, "/.env").body, b"SECRET=1");
}

#[test]
fn a_cpu_cost_makes_every_request_take_at_least_that_long() {
    let www = site();
    // 30 ms a request: far above what serving hello.txt takes, so the assertion fails if the
    // setting is ignored, and a spin on the thread's CPU clock cannot end sooner.
    let node = serve(www.path(), &["--set", "serve.cpu_cost_us=30000"]);
    for path in ["/hello.txt", "/_slipstream/status"] {
        let t = std::time::Instant::now();
        let r = get(node.addr, path);
        assert!(r.status == 200 || r.status == 404, "{path}: {}", r.status);
        assert!(
            t.elapsed() >= std::time::Duration::from_millis(30),
            "{path} took {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn requests_for_made_up_paths_leave_nothing_in_the_cache() {
    let www = site();
    let node = serve(www.path(), &[]);
    let tracked = || {
        let page = String::from_utf8(get(node.addr, "/_slipstream/metrics").body).expect("utf-8");
        page.lines()
            .find_map(|l| l.strip_prefix("slipstream_cache_tracked_objects "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .expect("tracked objects gauge")
    };
    let long = "x".repeat(4_000);
    for i in 0..200 {
        assert_eq!(get(node.addr, &format!("/nothing-{i}-{long}")).status, 404);
    }
    assert_eq!(tracked(), 0.0, "404s are not tracked");
    assert_eq!(get(node.addr, "/hello.txt").status, 200);
    assert_eq!(tracked(), 1.0);
}

#[test]
fn cache_counters_are_typed_counters_named_total() {
    let www = site();
    let node = serve(www.path(), &[]);
    let page = String::from_utf8(get(node.addr, "/_slipstream/metrics").body).expect("utf-8");
    for name in [
        "slipstream_cache_evictions_total",
        "slipstream_cache_admission_rejects_total",
        "slipstream_cache_revived_total",
    ] {
        // OpenMetrics names the counter's family without `_total` and its sample with it.
        let family = name.trim_end_matches("_total");
        assert!(
            page.contains(&format!("# TYPE {family} counter\n{name} ")),
            "{name}\n{page}"
        );
    }
    // No sample without the suffix (the `# HELP`/`# TYPE` lines name the family).
    assert!(
        !page
            .lines()
            .any(|l| l.starts_with("slipstream_cache_evictions ")),
        "{page}"
    );
}
