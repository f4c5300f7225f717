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
use crate::object::{Delegation, Freshness, Guid, Object, SignedObject, MAX_BODY_BYTES};
use crate::rules;

/// The GUID every gateway of the provider `provider` announces.
pub fn service_guid(provider: &PublicKey) -> Guid {
    Guid::new(provider, "slipstream:service:gateway")
}

/// What a gateway signs with.
#[derive(Debug, Clone)]
pub enum Signer {
    /// The provider's own key.
    Provider(Keypair),
    /// A key the provider vouched for (004's trust with the provider key kept offline).
    Delegated {
        /// The gateway's key (the node's own).
        key: Keypair,
        /// The provider's delegation to it.
        delegation: Box<Delegation>,
    },
}

impl Signer {
    /// The provider it signs for.
    pub fn provider(&self) -> PublicKey {
        match self {
            Signer::Provider(k) => k.public(),
            Signer::Delegated { delegation, .. } => delegation.provider.clone(),
        }
    }

    /// `object` signed; an error once a delegation has expired (nothing it signed would be
    /// accepted).
    pub fn sign(&self, object: Object) -> Result<SignedObject, String> {
        match self {
            Signer::Provider(k) => object.sign(k).map_err(|e| e.to_string()),
            Signer::Delegated { key, delegation } => {
                delegation
                    .verify_at(rules::unix_ms(SystemTime::now()))
                    .map_err(|e| format!("not signed: {e}"))?;
                object
                    .sign_delegated(key, delegation)
                    .map_err(|e| e.to_string())
            }
        }
    }
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
    signer: Signer,
    http: HttpClient<HttpConnector, Empty<Bytes>>,
    timeout: Duration,
    /// Where a fetch may go.
    access: Arc<Access>,
    /// Revalidations under way, one per object: those that arrive meanwhile wait for its
    /// outcome instead of sending their own conditional request.
    flights: Arc<Flights>,
}

/// What a revalidation sends back ([`Gateway::revalidate`]).
#[derive(Debug, Clone)]
pub enum Revalidation {
    /// The asker's body is current: the record that renews it.
    Record(Box<Freshness>),
    /// The object changed, or the asker holds none: the whole object.
    Object(Arc<SignedObject>),
}

/// One async lock per object being revalidated; an entry lives while someone holds or waits
/// for its lock.
#[derive(Debug, Default)]
struct Flights(parking_lot::Mutex<std::collections::HashMap<Guid, Arc<tokio::sync::Mutex<()>>>>);

/// A turn at revalidating one object.
struct Turn<'a> {
    flights: &'a Flights,
    guid: Guid,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Flights {
    async fn turn(&self, guid: Guid) -> Turn<'_> {
        let lock = self.0.lock().entry(guid).or_default().clone();
        let guard = Some(lock.clone().lock_owned().await);
        Turn {
            flights: self,
            guid,
            lock,
            guard,
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.flights.0.lock();
        // Clones are made under the map's lock: two references (the map's and ours) mean
        // nobody else holds or waits for this one.
        if Arc::strong_count(&self.lock) == 2 {
            map.remove(&self.guid);
        }
    }
}

impl Gateway {
    /// A gateway signing with `provider`, holding objects through `client` (whose node must
    /// trust `provider`'s public key), fetching only what `access` allows.
    pub fn new(client: Client, provider: Keypair, access: Arc<Access>) -> Gateway {
        Gateway::signing(client, Signer::Provider(provider), access)
    }

    /// A gateway signing with `signer`: the provider's key, or a key it vouched for.
    pub fn signing(client: Client, signer: Signer, access: Arc<Access>) -> Gateway {
        let http = HttpClient::builder(TokioExecutor::new()).build(HttpConnector::new());
        Gateway {
            client,
            signer,
            http,
            timeout: Duration::from_secs(10),
            access,
            flights: Arc::default(),
        }
    }

    /// Announces the gateway service.
    pub async fn announce(&self) {
        self.client
            .provide(service_guid(&self.signer.provider()))
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
        let guid = Guid::new(&self.signer.provider(), url);
        let held = self.client.store().get(&guid);
        // RFC 9111 §4.3.1: a held version is validated, not fetched again whole.
        let conditional = held
            .as_ref()
            .map_or_else(HeaderMap::new, |h| rules::conditional_headers(&h.object));
        let mut exchange = self
            .exchange(url, &target, authority.as_str(), &conditional)
            .await?;
        if held.is_some() && exchange.head.status.is_server_error() {
            // RFC 9111 §4.3.3: a server error does not replace what is held; the caller
            // decides whether a stale copy may stand in (stale-if-error).
            return Err(format!(
                "{url}: the origin answered {} to the revalidation",
                exchange.head.status
            ));
        }
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
        let signed = self.signer.sign(object)?;
        self.client.hold(signed).await?;
        // The gateway is a root of its sites' push trees from the first object it holds, so
        // that replicas join under it before its first push.
        if let Err(e) = self.client.lead(url).await {
            tracing::debug!(%url, error = %e, "not a push root");
        }
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
    /// replicas (004 §4.5); an unchanged one renews their copies by a pushed freshness record.
    /// Returns the version pushed, if any.
    pub async fn refresh(&self, url: &str) -> Result<Option<u64>, String> {
        let guid = Guid::new(&self.signer.provider(), url);
        let _turn = self.flights.turn(guid).await;
        self.refresh_held(url, guid).await
    }

    async fn refresh_held(&self, url: &str, guid: Guid) -> Result<Option<u64>, String> {
        let before = self.client.store().get(&guid);
        self.insert(url).await?;
        let Some(object) = self.client.store().get(&guid) else {
            return Ok(None);
        };
        let Some(before) = before else {
            return Ok(None);
        };
        let pushed = if before.object.version != object.object.version {
            if before.object.body_hash() == object.object.body_hash() {
                // A new head on the same body (a 304 changed a field): the record will do.
                self.client.push_record(&object.freshness()).await
            } else {
                self.client.push(&object).await
            }
        } else if before.object.received_at_ms != object.object.received_at_ms {
            // A heartbeat (§5.4): replicas of unchanged content stay fresh instead of expiring
            // between changes, and no body moves.
            self.client.push_record(&object.freshness()).await
        } else {
            return Ok(None);
        };
        if let Err(e) = pushed {
            // No replica follows the site yet: nothing to update.
            tracing::debug!(%url, error = %e, "push not sent");
        }
        Ok(Some(object.object.version))
    }

    /// Makes sure the object of `url` is fresh here, revalidating it with its origin when it
    /// is not (one conditional request at a time per object: those asking meanwhile wait for
    /// its outcome), and pushes the renewal to the site's replicas. The answer is the record
    /// that renews the asker's copy when `held_body` (its body's SHA-256) is current, or the
    /// whole object.
    pub async fn revalidate(
        &self,
        url: &str,
        held_body: Option<[u8; 32]>,
    ) -> Result<Revalidation, String> {
        let guid = Guid::new(&self.signer.provider(), url);
        let object = {
            let _turn = self.flights.turn(guid).await;
            let store = self.client.store();
            match store.get(&guid) {
                Some(o) if rules::fresh(&o.object, SystemTime::now()) => o,
                _ => {
                    self.refresh_held(url, guid).await?;
                    store
                        .get(&guid)
                        .ok_or_else(|| format!("{url}: not held after its fetch"))?
                }
            }
        };
        Ok(match held_body {
            Some(h) if h == object.object.body_hash() => {
                Revalidation::Record(Box::new(object.freshness()))
            }
            _ => Revalidation::Object(object),
        })
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
