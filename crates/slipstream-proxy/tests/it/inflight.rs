//! The in-flight budget (issue 40, "one memory bound that holds"): bodies buffered for storing
//! are charged to `inflight_bytes`; a response that finds no room streams whole to its client
//! without being stored, and every charge ends with its response.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{get, metric, proxy, reverse, wait_for_metric, Origin, Reply};

const INFLIGHT: &str = "slipstream_inflight_bytes";
const SKIPPED_BUDGET: &str = "slipstream_store_skipped_total{reason=\"budget\"}";

fn body(n: usize) -> String {
    (0..n).map(|i| (b'a' + (i % 26) as u8) as char).collect()
}

#[tokio::test]
async fn a_body_past_the_inflight_budget_streams_whole_and_unstored() {
    let origin = Origin::default();
    let big = body(600_000);
    origin.set("/big", Reply::ok(&big, &[("cache-control", "max-age=600")]));
    let mut config = reverse("edge", origin.start().await);
    config.inflight_bytes = 256 * 1024;
    let p = proxy(config).await;
    for _ in 0..2 {
        let got = get(p, "/big", &[]).await;
        assert_eq!(got.status, 200);
        assert!(got.body == big.as_bytes(), "the client gets the whole body");
        assert!(
            !got.cache_status().contains("hit"),
            "{}",
            got.cache_status()
        );
    }
    assert_eq!(origin.hits("/big"), 2, "nothing was stored");
    assert_eq!(metric(p, SKIPPED_BUDGET).await, 2.0);
    assert_eq!(metric(p, INFLIGHT).await, 0.0);
    // A body within the budget is still stored.
    origin.set(
        "/small",
        Reply::ok("small", &[("cache-control", "max-age=600")]),
    );
    assert!(get(p, "/small", &[])
        .await
        .cache_status()
        .contains("stored"));
    assert!(get(p, "/small", &[]).await.cache_status().contains("hit"));
}

#[tokio::test]
async fn a_chunked_body_that_outgrows_the_budget_is_streamed_whole_and_unstored() {
    // No Content-Length: the copy grows as the body streams, until the budget refuses it.
    let mut response =
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\nconnection: close\r\n\r\n".to_vec();
    response.extend(std::iter::repeat_n(b'z', 600_000));
    let response: &'static [u8] = Box::leak(response.into_boxed_slice());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let up = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(response).await;
                let _ = s.shutdown().await;
            });
        }
    });
    let mut config = reverse("edge", up);
    config.inflight_bytes = 256 * 1024;
    let p = proxy(config).await;
    let got = get(p, "/endless", &[]).await;
    assert_eq!(got.body.len(), 600_000);
    assert_eq!(metric(p, SKIPPED_BUDGET).await, 1.0);
    assert_eq!(metric(p, INFLIGHT).await, 0.0);
    assert!(!get(p, "/endless", &[]).await.cache_status().contains("hit"));
}

#[tokio::test]
async fn a_teed_body_is_stored_once_read_and_its_charge_ends() {
    let origin = Origin::default();
    let big = body(600_000);
    origin.set("/big", Reply::ok(&big, &[("cache-control", "max-age=600")]));
    let p = proxy(reverse("edge", origin.start().await)).await;
    let first = get(p, "/big", &[]).await;
    assert!(first.body == big.as_bytes());
    assert_eq!(first.header("content-length"), Some("600000"));
    assert_eq!(metric(p, INFLIGHT).await, 0.0);
    let second = get(p, "/big", &[]).await;
    assert!(
        second.cache_status().contains("hit"),
        "{}",
        second.cache_status()
    );
    assert!(second.body == big.as_bytes());
    assert_eq!(origin.hits("/big"), 1);
}

#[tokio::test]
async fn a_client_that_leaves_mid_body_releases_its_charge_and_stores_nothing() {
    let origin = Origin::default();
    let n = 15_000_000;
    origin.set(
        "/huge",
        Reply::ok(&body(n), &[("cache-control", "max-age=600")]),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    let mut client = tokio::net::TcpStream::connect(p).await.expect("connect");
    client
        .write_all(b"GET /huge HTTP/1.1\r\nhost: edge\r\n\r\n")
        .await
        .expect("send");
    // The head and a first part of the body; the rest waits for a reader that never comes.
    let mut buf = vec![0u8; 64 * 1024];
    let got = client.read(&mut buf).await.expect("read");
    assert!(buf[..got].starts_with(b"HTTP/1.1 200"));
    // The announced length is charged while the body is under way.
    assert_eq!(metric(p, INFLIGHT).await, n as f64);
    drop(client);
    wait_for_metric(p, INFLIGHT, |v| v == 0.0).await;
    assert_eq!(metric(p, "slipstream_cache_used_bytes").await, 0.0);
}

#[tokio::test]
async fn a_cacheable_204_is_stored_though_it_has_no_body_to_tee() {
    let origin = Origin::default();
    origin.set(
        "/none",
        Reply::ok("", &[("cache-control", "max-age=600")]).status(204),
    );
    let p = proxy(reverse("edge", origin.start().await)).await;
    assert_eq!(get(p, "/none", &[]).await.status, 204);
    let second = get(p, "/none", &[]).await;
    assert!(
        second.cache_status().contains("hit"),
        "{}",
        second.cache_status()
    );
    assert_eq!(origin.hits("/none"), 1);
}
