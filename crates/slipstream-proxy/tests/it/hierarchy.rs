//! Hierarchies (paper 003): a child proxy in front of parents, Cache-Status naming the level
//! that answered (RFC 9211), fail-over between parents, size rules, Via and loop detection.

use slipstream_proxy::Config;

use crate::support::{get, proxy, reverse, send, Origin, Reply};

fn parent_of(name: &str) -> Config {
    // A parent is a forward proxy: the child asks it for the origin's absolute URL. The
    // origin is on loopback, which a forward proxy reaches only when told to.
    Config {
        name: name.into(),
        allow_destinations: vec!["127.0.0.0/8".into()],
        ..Config::default()
    }
}

#[tokio::test]
async fn rfc9211_cache_status_names_the_level_that_answered() {
    let origin = Origin::default();
    origin.set("/h", Reply::ok("tree", &[("cache-control", "max-age=600")]));
    let o = origin.start().await;
    let parent = proxy(parent_of("parent")).await;
    let child = proxy(Config {
        parents: vec![format!("http://{parent}")],
        ..reverse("child", o)
    })
    .await;
    let first = get(child, "/h", &[]).await;
    assert_eq!(first.body, "tree");
    assert!(
        first.cache_status().starts_with("parent; fwd=uri-miss"),
        "{}",
        first.cache_status()
    );
    assert!(
        first.cache_status().contains(", child; fwd=uri-miss"),
        "{}",
        first.cache_status()
    );
    let second = get(child, "/h", &[]).await;
    assert!(
        second.cache_status().contains("child; hit; ttl="),
        "{}",
        second.cache_status()
    );
    // Purge the child only: the parent answers.
    assert_eq!(
        send(child, "PURGE", "/h", &[("authorization", "Bearer secret")])
            .await
            .status,
        200
    );
    let third = get(child, "/h", &[]).await;
    assert!(
        third.cache_status().contains("parent; hit"),
        "{}",
        third.cache_status()
    );
    assert!(
        third.cache_status().contains("child; fwd=uri-miss"),
        "{}",
        third.cache_status()
    );
    assert_eq!(origin.hits("/h"), 1);
    let via: Vec<&str> = third
        .headers
        .get_all("via")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let via = via.join(", ");
    assert!(
        via.contains("parent") && via.contains("child"),
        "Via: {via}"
    );
}

#[tokio::test]
async fn a_failed_parent_is_skipped_for_the_next() {
    let origin = Origin::default();
    origin.set("/f", Reply::ok("fo", &[("cache-control", "max-age=600")]));
    let o = origin.start().await;
    // A port with nothing listening: bind, note the address, drop the listener.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .local_addr()
        .expect("addr");
    let alive = proxy(parent_of("backup")).await;
    let child = proxy(Config {
        parents: vec![format!("http://{dead}"), format!("http://{alive}")],
        ..reverse("child", o)
    })
    .await;
    let got = get(child, "/f", &[]).await;
    assert_eq!(got.status, 200);
    assert!(
        got.cache_status().contains("backup; fwd=uri-miss"),
        "{}",
        got.cache_status()
    );
    let metrics =
        String::from_utf8_lossy(&get(child, "/_slipstream/metrics", &[]).await.body).into_owned();
    assert!(
        metrics.contains(&format!("slipstream_parent_up{{parent=\"{dead}\"}} 0")),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("slipstream_parent_up{{parent=\"{alive}\"}} 1")),
        "{metrics}"
    );
}

#[tokio::test]
async fn size_rules_split_objects_between_levels() {
    // Paper 003's size-threshold placement: the child keeps objects up to S, the parent above S.
    let origin = Origin::default();
    origin.set(
        "/small",
        Reply::ok(&"s".repeat(100), &[("cache-control", "max-age=600")]),
    );
    origin.set(
        "/large",
        Reply::ok(&"L".repeat(10_000), &[("cache-control", "max-age=600")]),
    );
    let o = origin.start().await;
    let mut parent_config = parent_of("parent");
    parent_config.cache.min_object_bytes = 1000;
    let parent = proxy(parent_config).await;
    let mut child_config = Config {
        parents: vec![format!("http://{parent}")],
        ..reverse("child", o)
    };
    child_config.cache.max_object_bytes = 1000;
    let child = proxy(child_config).await;
    get(child, "/small", &[]).await;
    get(child, "/large", &[]).await;
    let small = get(child, "/small", &[]).await;
    let large = get(child, "/large", &[]).await;
    assert!(
        small.cache_status().contains("child; hit"),
        "small at the child: {}",
        small.cache_status()
    );
    assert!(
        large.cache_status().contains("parent; hit"),
        "large at the parent: {}",
        large.cache_status()
    );
    assert!(
        large.cache_status().contains("child; fwd=uri-miss"),
        "{}",
        large.cache_status()
    );
    assert_eq!(large.body.len(), 10_000);
}

#[tokio::test]
async fn rfc9110_s7_6_3_a_request_that_already_passed_is_refused_as_a_loop() {
    let origin = Origin::default();
    let p = proxy(reverse("edge", origin.start().await)).await;
    let got = get(p, "/x", &[("via", "1.1 other, 1.1 edge")]).await;
    assert_eq!(got.status, 508);
    assert_eq!(origin.hits("/x"), 0);
}

#[tokio::test]
async fn rfc9110_s7_6_1_hop_by_hop_fields_are_not_forwarded() {
    let origin = Origin::default();
    origin.set(
        "/hop",
        Reply::ok(
            "h",
            &[
                ("connection", "x-secret"),
                ("x-secret", "1"),
                ("x-kept", "1"),
            ],
        ),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    let got = get(
        p,
        "/hop",
        &[
            ("connection", "x-client-private"),
            ("x-client-private", "1"),
            ("x-e2e", "1"),
        ],
    )
    .await;
    assert_eq!(got.header("x-secret"), None);
    assert_eq!(got.header("x-kept"), Some("1"));
    let seen = origin.seen().pop().expect("origin saw the request");
    assert!(seen.headers.get("x-client-private").is_none());
    assert!(seen.headers.get("x-e2e").is_some());
    assert!(seen
        .headers
        .get("via")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("edge")));
}

#[tokio::test]
async fn forward_proxy_takes_absolute_form_and_a_reverse_proxy_refuses_it() {
    let origin = Origin::default();
    origin.set("/fw", Reply::ok("fw", &[("cache-control", "max-age=600")]));
    let o = origin.start().await;
    let forward = proxy(parent_of("fwd")).await;
    let got = get(forward, &format!("http://{o}/fw"), &[]).await;
    assert_eq!(got.body, "fw");
    assert!(get(forward, &format!("http://{o}/fw"), &[])
        .await
        .cache_status()
        .contains("hit"));
    assert_eq!(
        get(forward, "/fw", &[]).await.status,
        400,
        "a forward proxy needs absolute form"
    );
    let reverse_only = proxy(reverse("edge", o)).await;
    assert_eq!(
        get(reverse_only, &format!("http://{o}/fw"), &[])
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn rfc9110_s9_3_6_connect_opens_a_tunnel_to_allowed_ports_only() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An echo server stands in for the TLS server a browser would tunnel to.
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let echo_addr = echo.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let p = proxy(Config {
        name: "fwd".into(),
        connect_ports: vec![echo_addr.port()],
        allow_destinations: vec!["127.0.0.0/8".into()],
        ..Config::default()
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(p).await.expect("connect");
    s.write_all(format!("CONNECT {echo_addr} HTTP/1.1\r\nHost: {echo_addr}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        assert_eq!(
            s.read(&mut byte).await.expect("read"),
            1,
            "proxy closed before answering CONNECT"
        );
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s.write_all(b"ping through the tunnel")
        .await
        .expect("write");
    let mut back = [0u8; 23];
    s.read_exact(&mut back).await.expect("echo");
    assert_eq!(&back, b"ping through the tunnel");
    // A port not in connect_ports is refused.
    let refused = send(p, "CONNECT", "127.0.0.1:22", &[]).await;
    assert_eq!(refused.status, 403);
    // A reverse proxy does not tunnel.
    let origin = Origin::default();
    let reverse_only = proxy(reverse("edge", origin.start().await)).await;
    assert_eq!(
        send(reverse_only, "CONNECT", &echo_addr.to_string(), &[])
            .await
            .status,
        405
    );
}

#[tokio::test]
async fn clients_may_speak_http2_cleartext() {
    use http_body_util::BodyExt;
    let origin = Origin::default();
    origin.set("/h2", Reply::ok("two", &[("cache-control", "max-age=600")]));
    let p = proxy(reverse("edge", origin.start().await)).await;
    let tcp = tokio::net::TcpStream::connect(p).await.expect("connect");
    let (mut send_req, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    for expect_hit in [false, true] {
        let req = http::Request::get(format!("http://{p}/h2"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        let resp = send_req.send_request(req).await.expect("response");
        assert_eq!(resp.version(), http::Version::HTTP_2);
        let status = resp
            .headers()
            .get("cache-status")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        assert_eq!(status.contains("hit"), expect_hit, "{status}");
        assert_eq!(
            &resp.into_body().collect().await.expect("body").to_bytes()[..],
            b"two"
        );
    }
    assert_eq!(origin.hits("/h2"), 1);
}
