//! Starting the binary and speaking HTTP to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_slipstream"))
}

/// A running `slipstream` process, killed on drop.
pub struct Node {
    pub child: Child,
    pub addr: SocketAddr,
    pub stdout: Vec<String>,
    /// The lines printed after the address, as they come.
    later: std::sync::mpsc::Receiver<String>,
}

impl Node {
    /// Waits (at most 30 s) for a later line of output containing `marker`, and returns it.
    pub fn wait_for_line(&self, marker: &str) -> String {
        loop {
            match self.later.recv_timeout(std::time::Duration::from_secs(30)) {
                Ok(line) if line.contains(marker) => return line,
                Ok(_) => {}
                Err(e) => panic!("no line with `{marker}` from the node: {e}"),
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary with `args` and waits until it prints a line containing `marker` followed
/// by an address (`http://ADDR/` or `https://ADDR/`).
pub fn start(args: &[&str], marker: &str) -> Node {
    let mut child = bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start slipstream");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!("slipstream exited before printing `{marker}`; output so far: {seen:?}");
        };
        seen.push(line.clone());
        if line.contains(marker) {
            let url = line
                .split_whitespace()
                .find(|w| w.starts_with("http"))
                .expect("a URL on the line");
            let host = url
                .split("://")
                .nth(1)
                .expect("scheme")
                .trim_end_matches('/')
                .split('/')
                .next()
                .expect("host");
            break host.parse().expect("socket address");
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    let (tx, later) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    Node {
        child,
        addr,
        stdout: seen,
        later,
    }
}

/// `slipstream serve DIR` on an ephemeral port, with extra flags.
pub fn serve(dir: &Path, extra: &[&str]) -> Node {
    let dir = dir.to_str().expect("utf-8 path");
    let mut args = vec!["serve", dir, "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    start(&args, "slipstream serve:")
}

/// `slipstream demo` on an ephemeral port, its files in `files` (a directory the test removes:
/// a killed demo cannot clean up).
pub fn demo(files: &Path) -> Node {
    start(
        &[
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--site-dir",
            files.to_str().expect("utf-8"),
        ],
        "site:",
    )
}

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends raw bytes on a fresh connection and reads the response to the end of the connection.
pub fn raw(addr: SocketAddr, request: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(request).expect("write");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    parse(&buf, request.starts_with(b"HEAD"))
}

/// A request with `Connection: close` and extra header lines.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    send(addr, method, path, headers, None)
}

/// A request with `Connection: close`, extra header lines and, if given, a body.
pub fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Reply {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(body) = body {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    raw(addr, &bytes)
}

pub fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, &[])
}

fn parse(buf: &[u8], head_only: bool) -> Reply {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(buf)));
    let head = std::str::from_utf8(&buf[..end]).expect("utf-8 head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .expect("status")
        .parse()
        .expect("numeric status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = buf[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked && !head_only {
        body = dechunk(&body);
    }
    let _ = head_only;
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(nl) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(
            std::str::from_utf8(&b[..nl]).expect("chunk size").trim(),
            16,
        )
        .expect("hex");
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + size]);
        b = &b[nl + 2 + size + 2..];
    }
}

/// A directory with a few files, including one larger than a small cache's chunk threshold.
pub fn site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    std::fs::write(p.join("index.html"), b"<h1>home</h1>\n").expect("write");
    std::fs::write(p.join("hello.txt"), b"hello, world\n").expect("write");
    std::fs::write(p.join("space name.txt"), b"spaced\n").expect("write");
    std::fs::create_dir(p.join("docs")).expect("mkdir");
    std::fs::write(p.join("docs/index.html"), b"<h1>docs</h1>\n").expect("write");
    std::fs::create_dir(p.join("empty")).expect("mkdir");
    std::fs::write(p.join("large.bin"), large()).expect("write");
    dir
}

/// 300 KB of a repeating non-trivial pattern.
pub fn large() -> Vec<u8> {
    (0..300_000u32).map(|i| (i % 251) as u8).collect()
}

/// A pre-processed page's replica block: its JSON, and its entries with every server index
/// expanded (the server's base URL followed by the key's logical URL, or for a rule `P*` by
/// `P*`), ready for `slipstream_replica::block::lookup` — how the agent resolves with it.
pub fn replica_block(
    page: &str,
) -> (
    serde_json::Value,
    std::collections::BTreeMap<String, Vec<String>>,
) {
    let json = page
        .rsplit("id=\"slipstream-replicas\">")
        .next()
        .and_then(|r| r.split("</script>").next())
        .unwrap_or_else(|| panic!("no replica block in {page}"));
    let b: serde_json::Value = serde_json::from_str(json).expect("block JSON");
    let entries = slipstream_replica::block::from_json(&b).expect("a block's shape");
    (b, entries)
}

/// How the agent resolves `url` with a page's block ([`replica_block`]).
pub fn block_lookup(page: &str, url: &str) -> Option<Vec<String>> {
    slipstream_replica::block::lookup(&replica_block(page).1, url).map(|mut list| {
        list.sort();
        list
    })
}

/// `GET path` on `addr`, which must answer 200 with JSON.
pub fn json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let r = get(addr, path);
    assert_eq!(
        r.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{path}: not JSON: {e}"))
}

/// Polls the JSON at `path` on `addr` until `done` holds (at most 30 s), and returns it: the
/// nodes' own tasks do the work, so a test waits for what they report, not for a fixed time.
pub fn wait_for_json(
    addr: SocketAddr,
    path: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = json(addr, path);
        if done(&s) {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: never happened; last {path}: {s}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
