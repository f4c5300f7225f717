//! HTTPS with ALPN: HTTP/2 and HTTP/1.1 over TLS.

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;

use crate::support::{serve, site};

fn client(
    cert_der: rustls::pki_types::CertificateDer<'static>,
    alpn: &[&[u8]],
) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der).expect("trust the test certificate");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

#[tokio::test]
async fn tls_negotiates_h2_and_http11_by_alpn() {
    let dir = site();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("certificate");
    let keys = tempfile::tempdir().expect("tempdir");
    let (cert_path, key_path) = write_pem(&cert, keys.path());
    let node = serve(
        dir.path(),
        &[
            "--tls-cert",
            cert_path.to_str().expect("utf-8"),
            "--tls-key",
            key_path.to_str().expect("utf-8"),
        ],
    );
    assert!(
        node.stdout.iter().any(|l| l.contains("https://")),
        "{:?}",
        node.stdout
    );
    let der = cert.cert.der().clone();
    let name = ServerName::try_from("localhost").expect("name");

    // HTTP/2 by ALPN.
    let tcp = tokio::net::TcpStream::connect(node.addr)
        .await
        .expect("connect");
    let tls = client(der.clone(), &[b"h2", b"http/1.1"])
        .connect(name.clone(), tcp)
        .await
        .expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .expect("h2");
    tokio::spawn(conn);
    let req = http::Request::get("https://localhost/hello.txt")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.version(), http::Version::HTTP_2);
    assert_eq!(
        &resp.into_body().collect().await.expect("body").to_bytes()[..],
        b"hello, world\n"
    );

    // HTTP/1.1 by ALPN.
    let tcp = tokio::net::TcpStream::connect(node.addr)
        .await
        .expect("connect");
    let tls = client(der, &[b"http/1.1"])
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("h1");
    tokio::spawn(conn);
    let req = http::Request::get("/index.html")
        .header("host", "localhost")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.version(), http::Version::HTTP_11);
    assert_eq!(
        &resp.into_body().collect().await.expect("body").to_bytes()[..],
        b"<h1>home</h1>\n"
    );
}

#[test]
fn missing_key_file_is_a_clear_error() {
    let dir = site();
    let out = crate::support::bin()
        .args([
            "serve",
            dir.path().to_str().expect("utf-8"),
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            "/nonexistent/key.pem",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/cert.pem"), "{err}");
}

/// A self-signed certificate for 127.0.0.1 and its key, written as PEM files in `dir`; the
/// certificate doubles as the CA a client is told to trust.
fn certificate_for_loopback(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).expect("certificate");
    write_pem(&cert, dir)
}

/// Writes `cert` and its key as `cert.pem` and `key.pem` in `dir` (replacing them); returns
/// their paths.
fn write_pem(
    cert: &rcgen::CertifiedKey,
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).expect("write cert");
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).expect("write key");
    (cert_path, key_path)
}

#[test]
fn an_https_origin_is_verified_against_the_ca_file() {
    let dir = site();
    let certs = tempfile::tempdir().expect("tempdir");
    let (cert_path, key_path) = certificate_for_loopback(certs.path());
    let origin = serve(
        dir.path(),
        &[
            "--tls-cert",
            cert_path.to_str().expect("utf-8"),
            "--tls-key",
            key_path.to_str().expect("utf-8"),
        ],
    );
    let url = format!("https://{}", origin.addr);
    let trusting = crate::support::start(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--origin",
            &url,
            "--set",
            &format!("proxy.ca_file=\"{}\"", cert_path.display()),
        ],
        "slipstream proxy",
    );
    let got = crate::support::get(trusting.addr, "/hello.txt");
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"hello, world\n");
    // Verification is on: without the CA the origin's certificate is refused.
    let doubting = crate::support::start(
        &["proxy", "--listen", "127.0.0.1:0", "--origin", &url],
        "slipstream proxy",
    );
    assert_eq!(crate::support::get(doubting.addr, "/hello.txt").status, 502);
}

#[test]
fn an_https_parent_carries_a_childs_misses() {
    let dir = site();
    let certs = tempfile::tempdir().expect("tempdir");
    let (cert_path, key_path) = certificate_for_loopback(certs.path());
    let origin = serve(dir.path(), &["--cache-control", "max-age=60"]);
    // A forward proxy on HTTPS, the parent.
    let parent = crate::support::start(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--name",
            "tls-parent",
            "--set",
            "proxy.allow_destinations=[\"127.0.0.0/8\"]",
            "--tls-cert",
            cert_path.to_str().expect("utf-8"),
            "--tls-key",
            key_path.to_str().expect("utf-8"),
        ],
        "slipstream proxy",
    );
    let child = crate::support::start(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--name",
            "child",
            "--origin",
            &format!("http://{}", origin.addr),
            "--parent",
            &format!("https://{}", parent.addr),
            "--set",
            &format!("proxy.ca_file=\"{}\"", cert_path.display()),
        ],
        "slipstream proxy",
    );
    let got = crate::support::get(child.addr, "/hello.txt");
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"hello, world\n");
    let status = got.header("cache-status").unwrap_or_default().to_owned();
    assert!(
        status.starts_with("tls-parent;"),
        "through the parent: {status}"
    );
    let metrics = String::from_utf8(crate::support::get(child.addr, "/_slipstream/metrics").body)
        .expect("utf-8");
    assert!(
        metrics.contains(&format!(
            "slipstream_parent_failures_total{{parent=\"{}\"}} 0",
            parent.addr
        )),
        "{metrics}"
    );
}

/// A TLS connection to `addr` that trusts only `cert` for `localhost`: the handshake's result,
/// and an HTTP/1.1 sender on success.
async fn connect_trusting(
    addr: std::net::SocketAddr,
    cert: &rcgen::CertifiedKey,
) -> Result<hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>, String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let tls = client(cert.cert.der().clone(), &[b"http/1.1"])
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("h1");
    tokio::spawn(conn);
    Ok(send)
}

async fn hello(
    send: &mut hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>,
) -> u16 {
    let req = http::Request::get("/hello.txt")
        .header("host", "localhost")
        .body(http_body_util::Empty::new())
        .expect("request");
    send.send_request(req)
        .await
        .expect("response")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_presents_the_new_certificate_to_new_connections_only() {
    let dir = site();
    let keys = tempfile::tempdir().expect("tempdir");
    let old = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("certificate");
    let new = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("certificate");
    let (cert_path, key_path) = write_pem(&old, keys.path());
    let node = serve(
        dir.path(),
        &[
            "--tls-cert",
            cert_path.to_str().expect("utf-8"),
            "--tls-key",
            key_path.to_str().expect("utf-8"),
        ],
    );
    let mut before = connect_trusting(node.addr, &old)
        .await
        .expect("old certificate");
    assert_eq!(hello(&mut before).await, 200);

    // The files are replaced and the node asked to reload.
    write_pem(&new, keys.path());
    let pid = node.child.id().to_string();
    let reload = crate::support::bin()
        .args(["reload", "--pid", &pid])
        .status()
        .expect("slipstream reload");
    assert!(reload.success());
    node.wait_for_line("reloaded: TLS certificate");
    let mut after = connect_trusting(node.addr, &new)
        .await
        .expect("new certificate");
    assert_eq!(hello(&mut after).await, 200);
    assert!(connect_trusting(node.addr, &old).await.is_err());
    // The connection opened before goes on with the old one.
    assert_eq!(hello(&mut before).await, 200);

    // A broken file is refused and the current certificate stays.
    std::fs::write(&cert_path, "not a certificate").expect("write");
    let reload = crate::support::bin()
        .args(["reload", "--pid", &pid])
        .status()
        .expect("slipstream reload");
    assert!(reload.success());
    // Waits past the first reload's other lines for this one's answer.
    node.wait_for_line("TLS certificate refused");
    let mut still = connect_trusting(node.addr, &new)
        .await
        .expect("new certificate kept");
    assert_eq!(hello(&mut still).await, 200);
}
