//! Integrity at rest (issue 41, item 2), with real processes: a `slipstream node` holding
//! replicas of a local origin's files in its data directory is stopped (SIGTERM, or SIGKILL
//! while it writes), random bytes of its `store.redb` are flipped, or the file is truncated,
//! and it is started again. Each time every object is fetched through the node and compared
//! with the origin's file: no wrong body is ever served, the node never panics, and what it
//! says about a damaged store is one line.
//!
//! `cargo test -p slipstream --test it coop_integrity -- --nocapture` prints the tally that
//! docs/experiments/004-riptide.md ("Integrity at rest") quotes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::coop::{holds, setup, status};
use crate::support::{bin, request};

/// Objects the node holds.
const OBJECTS: usize = 30;
/// Restarts after damage.
const ROUNDS: usize = 12;
/// Bytes flipped at random offsets of the whole file per round.
const FLIPS_ANYWHERE: usize = 4;
/// Bytes flipped inside stored bodies per round (random offsets rarely land in one: most of a
/// small store file is free space and tree pages).
const FLIPS_IN_BODIES: usize = 2;

/// A small deterministic generator (xorshift64*): the seed is printed, so that a failing run
/// can be repeated.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A byte to xor with: never 0, so every flip changes the byte.
    fn flip(&mut self) -> u8 {
        (self.below(255) + 1) as u8
    }
}

/// A running node: its process, its browser proxy's address, its stderr in a file.
struct Running {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &[String], log: &Path) -> Running {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = bin()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start slipstream");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.wait();
            panic!(
                "the node exited at start; stderr:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        };
        if line.contains("browser proxy on") {
            let url = line
                .split_whitespace()
                .find(|w| w.starts_with("http"))
                .unwrap();
            let host = url.trim_start_matches("http://").trim_end_matches('/');
            break host.parse().unwrap();
        }
    };
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
    Running { child, addr }
}

/// Stops the node with SIGTERM and waits for it to exit.
fn stop(mut node: Running) {
    let pid = node.child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    while node.child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the node did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops the node with SIGKILL (no chance to close its database).
fn kill(mut node: Running) {
    node.child.kill().unwrap();
    node.child.wait().unwrap();
}

/// The files the origin serves, by URL.
struct Site {
    urls: Vec<(String, Vec<u8>)>,
}

impl Site {
    fn body(i: usize) -> Vec<u8> {
        format!("object {i:03} of the torture; ")
            .repeat(80 + 7 * i)
            .into_bytes()
    }
}

/// What fetching everything once found.
#[derive(Default, Debug)]
struct Tally {
    wrong: usize,
    store_hits: usize,
}

/// Fetches every URL through the node and compares each body with the origin's.
fn fetch_all(addr: SocketAddr, site: &Site, tally: &mut Tally) {
    for (url, want) in &site.urls {
        let r = request(addr, "GET", url, &[]);
        if r.status != 200 || &r.body != want {
            tally.wrong += 1;
            eprintln!(
                "WRONG: {url}: status {}, {} bytes, cache-status {:?}",
                r.status,
                r.body.len(),
                r.header("cache-status")
            );
        }
        if r.header("cache-status")
            .is_some_and(|c| c.contains("detail=store"))
        {
            tally.store_hits += 1;
        }
    }
}

/// Fetches what the node's store lacks until it holds every object again (a miss sends a
/// hint to the node's own manager, which stores a replica; a hint may be dropped when many
/// are in flight, so a URL is asked for again until it is held).
fn refill(addr: SocketAddr, site: &Site, tally: &mut Tally) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = status(addr);
        let missing: Vec<&(String, Vec<u8>)> =
            site.urls.iter().filter(|(u, _)| !holds(&s, u)).collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never held again: {} objects; last status {s}",
            missing.len()
        );
        for (url, want) in missing {
            let r = request(addr, "GET", url, &[]);
            if r.status != 200 || &r.body != want {
                tally.wrong += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A GET of `url` through the proxy at `addr` that may fail (the node is being killed).
fn get_ignoring_errors(addr: SocketAddr, url: &str) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {url} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    s.read_to_end(&mut Vec::new()).map(drop)
}

/// Flips `n` bytes at random offsets of `path`.
fn flip_anywhere(path: &Path, n: usize, rng: &mut Rng) {
    let mut bytes = std::fs::read(path).unwrap();
    for _ in 0..n {
        let at = rng.below(bytes.len());
        bytes[at] ^= rng.flip();
    }
    std::fs::write(path, bytes).unwrap();
}

/// Flips `n` bytes inside stored bodies of `path` (found by their text).
fn flip_in_bodies(path: &Path, n: usize, rng: &mut Rng) {
    let mut bytes = std::fs::read(path).unwrap();
    let marker = b"of the torture; ";
    let places: Vec<usize> = bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, w)| *w == marker)
        .map(|(i, _)| i)
        .collect();
    if places.is_empty() {
        return;
    }
    for _ in 0..n {
        let at = places[rng.below(places.len())] + rng.below(marker.len());
        bytes[at] ^= rng.flip();
    }
    std::fs::write(path, bytes).unwrap();
}

/// The store files moved aside in `dir`.
fn moved_aside(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().contains(".corrupt-"))
        })
        .count()
}

/// The node's stderr holds no panic, and every line is one log event.
fn assert_quiet_and_one_line(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        !text.contains("panicked") && !text.contains("backtrace"),
        "a panic:\n{text}"
    );
    let mut warnings = 0;
    for line in text.lines() {
        // tracing's lines start with their timestamp; anything else continues a message.
        assert!(
            line.starts_with(|c: char| c.is_ascii_digit()),
            "a message over several lines:\n{text}"
        );
        warnings += usize::from(line.contains("WARN"));
    }
    warnings
}

#[test]
fn a_node_never_serves_a_body_damaged_at_rest_and_never_panics_on_its_store() {
    let files: Vec<(String, String)> = (0..OBJECTS)
        .map(|i| {
            let body = String::from_utf8(Site::body(i)).unwrap();
            (format!("o{i:03}.txt"), body)
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_str()))
        .collect();
    let s = setup(&refs, &[]);
    let site = Site {
        urls: (0..OBJECTS)
            .map(|i| {
                (
                    format!("http://{}/o{i:03}.txt", s.origin.addr),
                    Site::body(i),
                )
            })
            .collect(),
    };
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let store = data.path().join("store.redb");
    let args: Vec<String> = [
        "node",
        "--listen",
        "127.0.0.1:0",
        "--set",
        "proxy.allow_destinations=[\"127.0.0.0/8\"]",
        "--provider-key",
        s.key.as_str(),
        "--role",
        "gateway",
        "--role",
        "manager",
        "--data-dir",
        data.path().to_str().unwrap(),
    ]
    .map(str::to_owned)
    .to_vec();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("seed {seed}");
    let mut rng = Rng(seed);
    let mut tally = Tally::default();
    let (mut flips, mut restarts, mut quarantined, mut kills) = (0, 0, 0u64, 0);

    let log = logs.path().join("first.log");
    let node = start(&args, &log);
    refill(node.addr, &site, &mut tally);
    assert_eq!(tally.wrong, 0);
    stop(node);

    for round in 0..ROUNDS {
        flip_anywhere(&store, FLIPS_ANYWHERE, &mut rng);
        flip_in_bodies(&store, FLIPS_IN_BODIES, &mut rng);
        flips += FLIPS_ANYWHERE + FLIPS_IN_BODIES;
        let log = logs.path().join(format!("round-{round}.log"));
        let node = start(&args, &log);
        restarts += 1;
        fetch_all(node.addr, &site, &mut tally);
        refill(node.addr, &site, &mut tally);
        quarantined += status(node.addr)["store"]["quarantined"].as_u64().unwrap();
        assert_quiet_and_one_line(&log);
        // Every other round ends with SIGKILL: the next start repairs the file as well.
        if round % 2 == 1 {
            kill(node);
            kills += 1;
        } else {
            stop(node);
        }
    }

    // SIGKILL while it writes: new objects arriving, replicas being stored.
    let mut more = Vec::new();
    for i in OBJECTS..OBJECTS + 20 {
        std::fs::write(s.site.path().join(format!("o{i:03}.txt")), Site::body(i)).unwrap();
        more.push((
            format!("http://{}/o{i:03}.txt", s.origin.addr),
            Site::body(i),
        ));
    }
    let log = logs.path().join("killed-writing.log");
    let node = start(&args, &log);
    let addr = node.addr;
    let writer = {
        let more = more.clone();
        std::thread::spawn(move || {
            for (url, _) in &more {
                // The node dies under some of these: errors are expected and ignored.
                let _ = get_ignoring_errors(addr, url);
            }
        })
    };
    let before = status(addr)["store"]["objects"].as_u64().unwrap();
    crate::support::wait_for_json(addr, "/_slipstream/coop", "writes under way", |s| {
        s["store"]["objects"].as_u64() > Some(before)
    });
    kill(node);
    kills += 1;
    let _ = writer.join();
    let site_all = Site {
        urls: site.urls.iter().cloned().chain(more).collect(),
    };
    let log = logs.path().join("after-kill.log");
    let node = start(&args, &log);
    restarts += 1;
    fetch_all(node.addr, &site_all, &mut tally);
    refill(node.addr, &site_all, &mut tally);
    assert_quiet_and_one_line(&log);
    stop(node);

    // A truncated file: moved aside, one line says so, and the node starts empty.
    let len = std::fs::metadata(&store).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&store)
        .unwrap();
    file.set_len(len / 2).unwrap();
    drop(file);
    let aside = moved_aside(data.path());
    let log = logs.path().join("truncated.log");
    let node = start(&args, &log);
    restarts += 1;
    fetch_all(node.addr, &site_all, &mut tally);
    assert!(
        moved_aside(data.path()) > aside,
        "the truncated file was moved aside"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines().any(|l| l.contains("moved it to")),
        "no line says what happened: {text}"
    );
    assert_quiet_and_one_line(&log);
    stop(node);

    println!(
        "integrity at rest: {flips} bytes flipped over {ROUNDS} rounds ({kills} SIGKILLs, one \
         mid-write), a truncated file, {restarts} restarts; every object ({OBJECTS}, then \
         {}) fetched after each; wrong bodies served: {}; objects quarantined: {quarantined}; files moved aside: \
         {}; own-store hits: {}",
        site_all.urls.len(),
        tally.wrong,
        moved_aside(data.path()),
        tally.store_hits
    );
    assert_eq!(tally.wrong, 0, "wrong bodies served (seed {seed})");
}
