//! `slipstream proxy` in production (issue 40, round 2): no open forward proxy (clients and
//! destinations), no web cache deception, a dripping upstream cut, generic CONNECT errors,
//! Host validation and the unkeyed override fields stripped. Real processes on loopback; every
//! private or link-local address below is one the proxy must refuse before connecting, so no
//! packet leaves this machine.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{raw, request, start, Node, Reply};

/// What the scripted origin answers: a head (status line and fields) and a body, written
/// whole or a byte at a time every `drip`.
struct Answer {
    head: String,
    body: Vec<u8>,
    drip: Option<Duration>,
}

impl Answer {
    fn ok(fields: &[&str], body: &str) -> Answer {
        let mut head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n", body.len());
        for f in fields {
            head.push_str(f);
            head.push_str("\r\n");
        }
        Answer {
            head,
            body: body.as_bytes().to_vec(),
            drip: None,
        }
    }
}

/// An origin on loopback that records every request head and answers as `answer` says.
struct Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Origin {
    fn start(answer: impl Fn(&str) -> Answer + Send + Sync + 'static) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (log, answer) = (seen.clone(), Arc::new(answer));
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let (log, answer) = (log.clone(), answer.clone());
                std::thread::spawn(move || serve_one(stream, &log, &*answer));
            }
        });
        Origin { addr, seen }
    }

    /// The request heads whose request line names `path`.
    fn asked(&self, path: &str) -> Vec<String> {
        let line = format!(" {path} HTTP/1.1");
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .filter(|h| h.lines().next().is_some_and(|l| l.ends_with(&line)))
            .cloned()
            .collect()
    }

    fn count(&self) -> usize {
        self.seen.lock().expect("lock").len()
    }
}

fn serve_one(stream: TcpStream, log: &Mutex<Vec<String>>, answer: &dyn Fn(&str) -> Answer) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    log.lock().expect("lock").push(head.clone());
    let a = answer(&head);
    let mut out = stream;
    let _ = out.write_all(format!("{}connection: close\r\n\r\n", a.head).as_bytes());
    match a.drip {
        None => {
            let _ = out.write_all(&a.body);
        }
        Some(every) => {
            for b in &a.body {
                if out.write_all(&[*b]).is_err() {
                    return;
                }
                // The dripping is the behaviour under test, not a wait for something.
                std::thread::sleep(every);
            }
        }
    }
}

fn proxy(extra: &[&str]) -> Node {
    let mut args = vec!["proxy", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    start(&args, "slipstream proxy")
}

/// An absolute-form GET of `url` through the forward proxy at `proxy`.
fn through(proxy: SocketAddr, url: &str) -> Reply {
    let host = url
        .split("://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_default();
    raw(
        proxy,
        format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

fn connect(proxy: SocketAddr, target: &str) -> Reply {
    raw(
        proxy,
        format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
}

fn body(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

const REFUSED_BODY: &str = "forbidden: this proxy does not connect to that destination";

fn assert_refused(r: &Reply, what: &str) {
    assert_eq!(r.status, 403, "{what}: {}", body(r));
    assert!(body(r).contains(REFUSED_BODY), "{what}: {}", body(r));
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn a_forward_proxy_refuses_internal_destinations_in_every_spelling() {
    let origin = Origin::start(|_| Answer::ok(&["cache-control: no-store"], "inside"));
    let port = origin.addr.port();
    let p = proxy(&["--set", &format!("proxy.connect_ports=[443, {port}]")]);
    let own = p.addr;
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://2130706433:{port}/"),
        format!("http://0x7f.1:{port}/"),
        format!("http://127.1:{port}/"),
        format!("http://0.0.0.0:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://{own}/_slipstream/metrics"),
        format!("http://{own}/_slipstream/status"),
    ] {
        assert_refused(&through(p.addr, &url), &url);
    }
    for target in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        "0.0.0.0:443".to_owned(),
    ] {
        assert_refused(&connect(p.addr, &target), &format!("CONNECT {target}"));
    }
    assert_eq!(origin.count(), 0, "the loopback origin was reached");
    // Refused before connecting: none of these is ever sent a packet.
    for url in [
        "http://10.0.0.1/",
        "http://172.16.0.1/",
        "http://192.168.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00::1]/",
        "http://[fe80::1]/",
        "http://[::ffff:169.254.169.254]/",
    ] {
        assert_refused(&through(p.addr, url), url);
    }
    for target in ["169.254.169.254:443", "10.0.0.1:443", "[fe80::1]:443"] {
        assert_refused(&connect(p.addr, target), target);
    }
}

#[test]
fn allowed_destinations_are_reached_but_never_the_proxy_itself() {
    let origin = Origin::start(|_| Answer::ok(&["cache-control: no-store"], "inside"));
    let allow = "proxy.allow_destinations=[\"127.0.0.0/8\"]";
    let p = proxy(&["--set", allow]);
    let got = through(p.addr, &format!("http://127.0.0.1:{}/", origin.addr.port()));
    assert_eq!((got.status, body(&got).as_str()), (200, "inside"));
    let got = through(p.addr, &format!("http://localhost:{}/", origin.addr.port()));
    assert_eq!(
        got.status,
        200,
        "localhost is 127.0.0.1 here: {}",
        body(&got)
    );

    // On a known port, the proxy's own listener is refused before connecting.
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let fixed = start(
        &["proxy", "--listen", &listen, "--set", allow],
        "slipstream proxy",
    );
    for url in [
        format!("http://127.0.0.1:{port}/_slipstream/metrics"),
        format!("http://0.0.0.0:{port}/_slipstream/status"),
    ] {
        assert_refused(&through(fixed.addr, &url), &url);
    }
    // On an ephemeral port it is not known in advance; the request that comes back names the
    // proxy in Via, and is refused as a loop instead of reaching the control endpoints.
    let looped = through(p.addr, &format!("http://{}/_slipstream/metrics", p.addr));
    assert_eq!(looped.status, 508, "{}", body(&looped));
    assert!(!body(&looped).contains("slipstream_"), "{}", body(&looped));
}

#[test]
fn clients_outside_allow_clients_are_refused_before_anything_is_fetched() {
    let origin = Origin::start(|_| Answer::ok(&["cache-control: no-store"], "inside"));
    let port = origin.addr.port();
    let p = proxy(&[
        "--set",
        "proxy.allow_clients=[\"10.0.0.0/8\"]",
        "--set",
        "proxy.allow_destinations=[\"127.0.0.0/8\"]",
        "--set",
        &format!("proxy.connect_ports=[{port}]"),
    ]);
    let got = through(p.addr, &format!("http://127.0.0.1:{port}/"));
    assert_eq!(got.status, 403, "{}", body(&got));
    assert!(body(&got).contains("does not serve your address"));
    let tunnel = connect(p.addr, &format!("127.0.0.1:{port}"));
    assert_eq!(tunnel.status, 403, "{}", body(&tunnel));
    assert_eq!(origin.count(), 0);
}

#[test]
fn connect_failures_say_nothing_of_their_cause() {
    let closed = free_port();
    let p = proxy(&[
        "--set",
        "proxy.allow_destinations=[\"127.0.0.0/8\"]",
        "--set",
        &format!("proxy.connect_ports=[{closed}]"),
    ]);
    let got = connect(p.addr, &format!("127.0.0.1:{closed}"));
    assert_eq!(got.status, 502, "{}", body(&got));
    let text = body(&got);
    assert!(
        text.contains("could not connect")
            && !text.contains("refused")
            && !text.contains("os error"),
        "{text}"
    );
    assert!(!text.contains(&closed.to_string()), "{text}");
}

#[test]
fn rfc9110_s7_2_invalid_host_fields_are_refused_with_400() {
    let origin = Origin::start(|_| Answer::ok(&["cache-control: no-store"], "page"));
    let p = proxy(&["--origin", &format!("http://{}", origin.addr)]);
    for host in ["a b", "a/b@c", "[::1", "exa mple.com:80", "a:b:c"] {
        let got = raw(
            p.addr,
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(got.status, 400, "Host: {host}: {}", body(&got));
        let control = raw(
            p.addr,
            format!(
                "GET /_slipstream/metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        assert_eq!(control.status, 400, "Host: {host} (control)");
    }
    assert_eq!(origin.count(), 0);
    for host in ["example.com", "example.com:8080", "[::1]:80", "127.0.0.1"] {
        let got = raw(
            p.addr,
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(got.status, 200, "Host: {host}");
    }
}

#[test]
fn override_fields_do_not_reach_the_origin() {
    let origin = Origin::start(|_| Answer::ok(&["cache-control: no-store"], "page"));
    let p = proxy(&["--origin", &format!("http://{}", origin.addr)]);
    let got = request(
        p.addr,
        "GET",
        "/o",
        &[
            ("X-Host", "evil.example"),
            ("X-Forwarded-Scheme", "nothttps"),
            ("X-HTTP-Method-Override", "DELETE"),
            ("X-Forwarded-Host", "evil.example"),
            ("X-Kept", "yes"),
        ],
    );
    assert_eq!(got.status, 200);
    let seen = origin.asked("/o");
    assert_eq!(seen.len(), 1);
    let head = seen[0].to_ascii_lowercase();
    for gone in [
        "x-host:",
        "x-forwarded-scheme:",
        "x-http-method-override:",
        "x-forwarded-host:",
    ] {
        assert!(!head.contains(gone), "{gone} reached the origin: {head}");
    }
    assert!(head.contains("x-kept: yes"), "{head}");
}

/// An application that ignores what follows `account.php` and answers with the page of the
/// session its cookie names, with a Last-Modified and no Cache-Control, as the finding's did.
fn account_origin() -> Origin {
    Origin::start(|head| {
        let who = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("cookie: session=")
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "nobody".into());
        let path = head.split_whitespace().nth(1).unwrap_or_default();
        let content_type = if path.starts_with("/static") {
            "content-type: text/css"
        } else {
            "content-type: text/html; charset=utf-8"
        };
        Answer::ok(
            &[content_type, "last-modified: Mon, 01 Jan 2024 00:00:00 GMT"],
            &format!("account of {who}"),
        )
    })
}

fn cache_status(r: &Reply) -> &str {
    r.header("cache-status").unwrap_or_default()
}

#[test]
fn a_session_page_under_a_stylesheet_url_is_not_kept_for_the_next_client() {
    let origin = account_origin();
    let p = proxy(&["--origin", &format!("http://{}", origin.addr)]);
    let victim = request(
        p.addr,
        "GET",
        "/account.php/x.css",
        &[("Cookie", "session=victim")],
    );
    assert_eq!(body(&victim), "account of victim");
    assert!(
        !cache_status(&victim).contains("stored"),
        "{}",
        cache_status(&victim)
    );
    let attacker = request(p.addr, "GET", "/account.php/x.css", &[]);
    assert_eq!(body(&attacker), "account of nobody");
    assert!(!cache_status(&attacker).contains("hit"));
    assert_eq!(origin.asked("/account.php/x.css").len(), 2);
    // Each rule alone keeps it out. The armor: no cookie, but HTML under .css.
    request(p.addr, "GET", "/account.php/y.css", &[]);
    let again = request(p.addr, "GET", "/account.php/y.css", &[]);
    assert!(
        !cache_status(&again).contains("hit"),
        "{}",
        cache_status(&again)
    );
    // No heuristic with credentials: a page without an extension.
    request(p.addr, "GET", "/profile", &[("Cookie", "session=victim")]);
    let other = request(p.addr, "GET", "/profile", &[]);
    assert_eq!(body(&other), "account of nobody");
    // A stylesheet that is one is kept, heuristically, as before.
    request(p.addr, "GET", "/static/site.css", &[]);
    let hit = request(p.addr, "GET", "/static/site.css", &[]);
    assert!(cache_status(&hit).contains("hit"), "{}", cache_status(&hit));
    assert_eq!(origin.asked("/static/site.css").len(), 1);
}

#[test]
fn the_deception_rules_can_be_switched_off() {
    let origin = account_origin();
    let p = proxy(&[
        "--origin",
        &format!("http://{}", origin.addr),
        "--set",
        "proxy.deception_armor=false",
        "--set",
        "proxy.heuristic_with_credentials=true",
    ]);
    request(
        p.addr,
        "GET",
        "/account.php/x.css",
        &[("Cookie", "session=victim")],
    );
    let attacker = request(p.addr, "GET", "/account.php/x.css", &[]);
    assert!(
        cache_status(&attacker).contains("hit"),
        "{}",
        cache_status(&attacker)
    );
    assert_eq!(
        body(&attacker),
        "account of victim",
        "the attack the defaults prevent"
    );
}

#[test]
fn an_upstream_dripping_a_byte_at_a_time_is_cut_by_the_default_least_rate() {
    let origin = Origin::start(|_| Answer {
        drip: Some(Duration::from_millis(100)),
        ..Answer::ok(&["cache-control: no-store"], &"x".repeat(200))
    });
    // The default rate (1 KiB/s) over a short window, so that the test takes two seconds.
    let p = proxy(&[
        "--origin",
        &format!("http://{}", origin.addr),
        "--set",
        "proxy.upstream_min_rate_window_ms=2000",
    ]);
    let got = request(p.addr, "GET", "/drip", &[]);
    assert_eq!(got.status, 200);
    assert!(
        got.body.len() < 200,
        "received all {} bytes of a drip",
        got.body.len()
    );
}
