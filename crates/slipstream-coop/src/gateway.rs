//! The gateway role (004 §4.2.3, §5.4): fetches a URL from its origin, decides by RFC 9111
//! whether a shared cache may store the response, signs it with the cache provider's key and
//! holds it (stored, announced, its site's pushes followed). Gateways announce a well-known
//! service GUID so that cache managers and proxies find one through the DHT; a node that is
//! not a gateway refuses insert requests.
//!
//! An insert of an object the gateway already holds is a conditional request (RFC 9111 §4.3.1:
//! If-None-Match, If-Modified-Since from the held validators); a 304 refreshes the held object
//! (§4.3.4: the held body, its head updated with the 304's fields, the new exchange times). A
//! response with the same status, head and body makes no new version (a heartbeat); a changed
//! one becomes the next version (what a monitor pushes).
//! Requests reach it through the node's role task ([`crate::roles`]). Only `http://` origins
//! for now.
//!
//! A URL is any peer's to name, so the gateway's fetch follows the destination rules of the
//! node's browser proxy ([`Access`]: `[proxy] allow_destinations`, the node's own listeners
//! never): loopback, private, link-local and the like are refused unless listed, on every
//! address the name resolves to, before anything is connected.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use libp2p::identity::{Keypair, PublicKey};

use slipstream_node::access::Access;

use crate::net::Client;
use crate::object::{Guid, MAX_BODY_BYTES};
use crate::rules;

/// The GUID every gateway of the provider `provider` announces.
pub fn service_guid(provider: &PublicKey) -> Guid {
    Guid::new(provider, "slipstream:service:gateway")
}

/// One exchange with an origin.
struct Exchange {
    head: http::response::Parts,
    body: Bytes,
    requested_at: SystemTime,
    received_at: SystemTime,
}

/// A gateway for one cache provider.
#[derive(Debug, Clone)]
pub struct Gateway {
    client: Client,
    provider: Keypair,
    http: HttpClient<HttpConnector, Empty<Bytes>>,
    timeout: Duration,
    /// Where a fetch may go.
    access: Arc<Access>,
}

impl Gateway {
    /// A gateway signing with `provider`, holding objects through `client` (whose node must
    /// trust `provider`'s public key), fetching only what `access` allows.
    pub fn new(client: Client, provider: Keypair, access: Arc<Access>) -> Gateway {
        let http = HttpClient::builder(TokioExecutor::new()).build(HttpConnector::new());
        Gateway {
            client,
            provider,
            http,
            timeout: Duration::from_secs(10),
            access,
        }
    }

    /// Announces the gateway service.
    pub async fn announce(&self) {
        self.client
            .provide(service_guid(&self.provider.public()))
            .await;
    }

    /// Fetches `url` and holds it as a signed object; its GUID, or why not.
    pub async fn insert(&self, url: &str) -> Result<Guid, String> {
        let uri: http::Uri = url.parse().map_err(|_| format!("`{url}` is not a URL"))?;
        if uri.scheme_str() != Some("http") || uri.host().is_none() {
            return Err(format!("`{url}`: only absolute http:// URLs are fetched"));
        }
        let (Some(host), Some(authority)) = (uri.host(), uri.authority()) else {
            return Err(format!("`{url}`: only absolute http:// URLs are fetched"));
        };
        // Resolved once and checked here; the connection goes to an address that passed, so
        // a second answer of the resolver cannot lead elsewhere.
        let to = self
            .access
            .resolve(host, uri.port_u16().unwrap_or(80))
            .await
            .map_err(|e| format!("not fetched: {e}"))?;
        let target = http::Uri::builder()
            .scheme("http")
            .authority(to[0].to_string())
            .path_and_query(uri.path_and_query().map_or("/", |p| p.as_str()))
            .build()
            .map_err(|e| e.to_string())?;
        let (req_parts, _) = http::Request::get(uri.clone())
            .body(())
            .map_err(|e| e.to_string())?
            .into_parts();
        let guid = Guid::new(&self.provider.public(), url);
        let held = self.client.store().get(&guid);
        // RFC 9111 §4.3.1: a held version is validated, not fetched again whole.
        let conditional = held
            .as_ref()
            .map_or_else(HeaderMap::new, |h| rules::conditional_headers(&h.object));
        let mut exchange = self
            .exchange(url, &target, authority.as_str(), &conditional)
            .await?;
        let mut refreshed = None;
        if let (Some(h), StatusCode::NOT_MODIFIED) = (held.as_ref(), exchange.head.status) {
            let mut cond_parts = req_parts.clone();
            cond_parts.headers = conditional;
            refreshed = rules::revalidated(
                &h.object,
                &cond_parts,
                &exchange.head,
                exchange.requested_at,
                exchange.received_at,
            )
            .map_err(|e| format!("{url}: {e}"))?;
            if refreshed.is_none() {
                // §4.3.4: the 304 names another response than the one held; ask for the whole.
                exchange = self
                    .exchange(url, &target, authority.as_str(), &HeaderMap::new())
                    .await?;
            }
        }
        let mut object = match refreshed {
            Some(object) => object,
            None => {
                let version = held.as_ref().map_or(1, |h| h.object.version + 1);
                rules::capture(
                    &req_parts,
                    &exchange.head,
                    exchange.body,
                    exchange.requested_at,
                    exchange.received_at,
                    version,
                )
                .map_err(|e| format!("{url}: {e}"))?
            }
        };
        match held.as_ref() {
            // Unchanged: the same version, its exchange times renewed, so that it is fresh
            // again wherever it goes (the store replaces it in place; no past version).
            Some(h) if h.object.same_content(&object) => object.version = h.object.version,
            // A 304 that changed the head (say, its Cache-Control) makes the next version.
            Some(h) => object.version = h.object.version + 1,
            None => {}
        }
        let signed = object.sign(&self.provider).map_err(|e| e.to_string())?;
        self.client.hold(signed).await?;
        Ok(guid)
    }

    /// One GET of `target` (for `url`, named `authority`) with `conditional`'s fields, its
    /// body read whole (at most [`MAX_BODY_BYTES`]), within the gateway's timeout.
    async fn exchange(
        &self,
        url: &str,
        target: &http::Uri,
        authority: &str,
        conditional: &HeaderMap,
    ) -> Result<Exchange, String> {
        let mut req = http::Request::get(target.clone())
            .header(http::header::HOST, authority)
            .header(http::header::USER_AGENT, "slipstream-gateway")
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        req.headers_mut().extend(conditional.clone());
        let requested_at = SystemTime::now();
        let exchange = async {
            let res = self
                .http
                .request(req)
                .await
                .map_err(|e| format!("cannot fetch {url}: {e}"))?;
            let (parts, body) = res.into_parts();
            let body = Limited::new(body, MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| format!("{url}: {e}"))?
                .to_bytes();
            // A small body is a slice of the connection's read buffer: kept as it is, it would
            // hold the whole buffer in the store (8 KiB or more for a 1 KB object).
            let body = Bytes::copy_from_slice(&body);
            Ok::<_, String>((parts, body))
        };
        let (head, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| format!("{url}: no answer within {:?}", self.timeout))??;
        Ok(Exchange {
            head,
            body,
            requested_at,
            received_at: SystemTime::now(),
        })
    }

    /// Fetches `url` again: a changed response becomes the next version, pushed to the site's
    /// replicas (004 §4.5). Returns the version pushed, if any.
    pub async fn refresh(&self, url: &str) -> Result<Option<u64>, String> {
        let guid = Guid::new(&self.provider.public(), url);
        let before = self.client.store().get(&guid);
        self.insert(url).await?;
        let Some(object) = self.client.store().get(&guid) else {
            return Ok(None);
        };
        // A new version is an update; the same version with renewed times is a heartbeat
        // (§5.4: replicas of unchanged content stay fresh instead of expiring between changes).
        let pushed = before.is_some_and(|b| {
            b.object.version != object.object.version
                || b.object.received_at_ms != object.object.received_at_ms
        });
        if !pushed {
            return Ok(None);
        }
        if let Err(e) = self.client.push(&object).await {
            // No replica follows the site yet: nothing to update.
            tracing::debug!(%url, error = %e, "push not sent");
        }
        Ok(Some(object.object.version))
    }

    /// A monitor (§5.4): refreshes `url` every `period` until the task is dropped, so that a
    /// change at the origin reaches the replicas within about one period.
    pub async fn monitor(self, url: String, period: Duration) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(why) = self.refresh(&url).await {
                tracing::info!(%url, %why, "monitor: refresh failed; the replicas keep their version");
            }
        }
    }
}
