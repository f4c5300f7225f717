//! The `[coop]` table of a node's config file: what `slipstream node` runs.
//!
//! ```toml
//! [coop]
//! listen = "127.0.0.1:3128"          # the browser proxy (an HTTP forward proxy)
//! p2p_listen = ["/ip4/0.0.0.0/tcp/4001"]
//! bootstrap = ["/ip4/10.0.0.7/tcp/4001/p2p/12D3KooW..."]
//! # external = ["/ip4/203.0.113.5/tcp/4001"]  # where peers reach this node (a NAT or a TCP
//! #                                  # proxy in front of it), announced instead of p2p_listen
//! digests = true                     # Bloom-filter digests to neighbours (§3.2.2's fast path)
//! mdns = false                       # find peers on the LAN (never sees loopback)
//! data_dir = "/var/lib/slipstream/coop"   # the node's key and its replicas (redb)
//! capacity_bytes = "256MiB"          # the content cache's bound
//! policy = "lru"                     # 004 §4.2.1: LRU; any slipstream-cache policy
//! provider = "12D3KooW..."           # the cache provider whose objects this node serves
//! roles = ["cache"]                  # "cache" (hold replicas when asked), "gateway", "manager"
//! # provider_key = "provider.key"    # a gateway signs with the provider's key, or
//! # delegation = "gateway.delegation" # with its node key, which the provider vouched for
//! #                                  # (`slipstream node delegate`); needs data_dir
//! lookup_budget_ms = "1s"            # how long a lookup may search before the origin is asked
//! # monitor = ["http://origin/news.html"]  # a gateway refreshes these and pushes changes
//! monitor_period_ms = "5s"
//! ```

use std::path::PathBuf;
use std::time::Duration;

use libp2p::identity::{Keypair, PublicKey};
use libp2p::{Multiaddr, PeerId};
use serde::Deserialize;

use crate::object::key_of_peer_id;

/// The `[coop]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The browser proxy's HTTP address.
    #[serde(deserialize_with = "listen")]
    pub listen: std::net::SocketAddr,
    /// The peer-to-peer addresses (multiaddrs).
    pub p2p_listen: Vec<String>,
    /// Peers to join through, each ending in `/p2p/<peer id>`.
    pub bootstrap: Vec<String>,
    /// Find peers on the LAN by mDNS.
    pub mdns: bool,
    /// Addresses peers reach this node at (multiaddrs), announced instead of the listen
    /// addresses: a NAT's, or a TCP proxy's in front of the node.
    pub external: Vec<String>,
    /// Exchange attenuated Bloom-filter digests with neighbours (the local fast path).
    pub digests: bool,
    /// The node's key (`node.key`), replicas (`store.redb`) and the addresses of the peers it
    /// knew (`peers`, dialled at the next start) live here; without it the node has a new
    /// identity, an empty cache and only its bootstrap peers at every start.
    pub data_dir: Option<PathBuf>,
    /// The content cache's bound, in bytes.
    #[serde(deserialize_with = "slipstream_units::de::bytes")]
    pub capacity_bytes: u64,
    /// The content cache's replacement policy.
    pub policy: String,
    /// The cache provider (its ed25519 peer id, which embeds its public key).
    pub provider: Option<String>,
    /// The provider's key file (protobuf-encoded ed25519 keypair): a gateway signs with it.
    pub provider_key: Option<PathBuf>,
    /// A delegation file (`slipstream node delegate`): the provider vouching for this node's
    /// key, with which a gateway then signs (the provider's key stays elsewhere).
    pub delegation: Option<PathBuf>,
    /// The node's roles besides the browser proxy every node runs.
    pub roles: Vec<String>,
    /// How long one lookup may search the cooperative cache, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub lookup_budget_ms: u64,
    /// URLs a gateway refreshes every `monitor_period_ms`, pushing changes to their replicas.
    pub monitor: Vec<String>,
    /// The monitors' period, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub monitor_period_ms: u64,
    /// A cache manager spreads an object over this many more nodes once it has had
    /// `hot_after` miss hints or slow-hit hints, and any node an object whose copy it holds
    /// once that copy has served `hot_after` fetches to peers (0: never).
    pub spread_copies: usize,
    /// Hints about one object, or fetches of one copy by peers, after which it is spread.
    pub hot_after: u32,
    /// How pushed updates reach a site's replicas: "tree" (a tree of near peers, the default:
    /// far fewer copies across domains, Fig. 22; a push under way while the tree moves may
    /// miss a replica until the next push) or "mesh" (gossipsub's random mesh).
    pub push: String,
    /// When a neighbour departs, the nodes that held objects along with it (by its last
    /// digest) make more replicas until each has this many live ones (0 or 1: never).
    pub min_replicas: usize,
    /// Worker threads (0: one per core).
    pub workers: usize,
}

fn listen<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::net::SocketAddr, D::Error> {
    slipstream_node::config::listen(d)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: ([127, 0, 0, 1], 3128).into(),
            p2p_listen: vec!["/ip4/127.0.0.1/tcp/0".into()],
            bootstrap: Vec::new(),
            mdns: false,
            external: Vec::new(),
            digests: true,
            data_dir: None,
            capacity_bytes: 256 << 20,
            policy: "lru".into(),
            provider: None,
            provider_key: None,
            delegation: None,
            roles: vec!["cache".into()],
            lookup_budget_ms: 1000,
            monitor: Vec::new(),
            monitor_period_ms: 5000,
            spread_copies: 2,
            hot_after: 8,
            min_replicas: 2,
            push: "tree".into(),
            workers: 0,
        }
    }
}

/// A role a node may take besides the browser proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Holds replicas when a cache manager asks (every node is a content cache, §4.2.1).
    Cache,
    /// Fetches from origins, signs, pushes updates (§4.2.3).
    Gateway,
    /// Makes replicas on miss hints and spreads hot objects (§4.4).
    Manager,
}

/// The validated `[coop]` table.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The browser proxy's address.
    pub listen: std::net::SocketAddr,
    /// The peer-to-peer addresses.
    pub p2p_listen: Vec<Multiaddr>,
    /// Peers to join through.
    pub bootstrap: Vec<Multiaddr>,
    /// mDNS on.
    pub mdns: bool,
    /// Addresses announced instead of the listen addresses.
    pub external: Vec<Multiaddr>,
    /// Bloom-filter digests on.
    pub digests: bool,
    /// Where the key and the replicas live.
    pub data_dir: Option<PathBuf>,
    /// The content cache's bound.
    pub capacity_bytes: u64,
    /// The content cache's policy.
    pub policy: slipstream_cache::Policy,
    /// The provider's public key.
    pub provider: PublicKey,
    /// The provider's keypair, for a gateway.
    pub provider_key: Option<Keypair>,
    /// The provider's delegation to this node's key, for a gateway without the provider's
    /// key.
    pub delegation: Option<crate::object::Delegation>,
    /// The roles.
    pub roles: Vec<Role>,
    /// A lookup's time budget.
    pub lookup_budget: Duration,
    /// The gateway's monitored URLs.
    pub monitor: Vec<String>,
    /// The monitors' period.
    pub monitor_period: Duration,
    /// Replicas a manager adds for a hot object.
    pub spread_copies: usize,
    /// Hints that make an object hot.
    pub hot_after: u32,
    /// Live replicas re-made after a holder departs.
    pub min_replicas: usize,
    /// How pushes travel.
    pub push: crate::net::PushMode,
    /// Worker threads (0: one per core).
    pub workers: usize,
}

/// A `[coop]` field that does not validate.
#[derive(Debug, thiserror::Error)]
#[error("[coop] {field}: {message}")]
pub struct Invalid {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

fn refuse(field: &'static str, message: impl Into<String>) -> Invalid {
    Invalid {
        field,
        message: message.into(),
    }
}

/// Reads a delegation file (`slipstream node delegate`).
pub fn read_delegation(path: &std::path::Path) -> Result<crate::object::Delegation, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    crate::object::Delegation::decode(&bytes)
        .map_err(|e| format!("{} is not a delegation file: {e}", path.display()))
}

/// Reads a protobuf-encoded keypair from `path`.
pub fn read_keypair(path: &std::path::Path) -> Result<Keypair, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Keypair::from_protobuf_encoding(&bytes)
        .map_err(|e| format!("{} is not a slipstream key file: {e}", path.display()))
}

impl Config {
    /// Checks every field; the settings, or the first field that is wrong and why.
    pub fn validate(self) -> Result<Settings, Invalid> {
        let addrs = |field: &'static str, v: &[String]| -> Result<Vec<Multiaddr>, Invalid> {
            v.iter()
                .map(|a| {
                    a.parse::<Multiaddr>()
                        .map_err(|e| refuse(field, format!("`{a}` is not a multiaddr: {e}")))
                })
                .collect()
        };
        let p2p_listen = addrs("p2p_listen", &self.p2p_listen)?;
        if p2p_listen.is_empty() {
            return Err(refuse("p2p_listen", "needs at least one address"));
        }
        let bootstrap = addrs("bootstrap", &self.bootstrap)?;
        let external = addrs("external", &self.external)?;
        if let Some(a) = external.iter().find(|a| {
            a.iter()
                .any(|p| matches!(p, libp2p::multiaddr::Protocol::P2p(_)))
        }) {
            return Err(refuse(
                "external",
                format!("`{a}`: give the address without `/p2p/…` (the node adds its own id)"),
            ));
        }
        for (a, raw) in bootstrap.iter().zip(&self.bootstrap) {
            if !matches!(a.iter().last(), Some(libp2p::multiaddr::Protocol::P2p(_))) {
                return Err(refuse(
                    "bootstrap",
                    format!(
                        "`{raw}` must end in /p2p/<peer id> (the node's id, printed at its start)"
                    ),
                ));
            }
        }
        let policy = self
            .policy
            .parse()
            .map_err(|e| refuse("policy", format!("{e}")))?;
        if self.capacity_bytes == 0 {
            return Err(refuse("capacity_bytes", "must be positive"));
        }
        let provider_key = self
            .provider_key
            .as_deref()
            .map(read_keypair)
            .transpose()
            .map_err(|e| refuse("provider_key", e))?;
        let delegation = self
            .delegation
            .as_deref()
            .map(read_delegation)
            .transpose()
            .map_err(|e| refuse("delegation", e))?;
        if let Some(d) = &delegation {
            if provider_key.is_some() {
                return Err(refuse(
                    "delegation",
                    "give the provider's key or a delegation, not both",
                ));
            }
            if self.data_dir.is_none() {
                return Err(refuse(
                    "delegation",
                    "a delegated gateway signs with its node key, which is kept in data_dir: set it",
                ));
            }
            let now = crate::rules::unix_ms(std::time::SystemTime::now());
            d.verify_at(now).map_err(|e| {
                refuse(
                    "delegation",
                    format!(
                        "{}: {e} (expiry {}); issue a new one with `slipstream node delegate`",
                        self.delegation
                            .as_deref()
                            .unwrap_or(std::path::Path::new(""))
                            .display(),
                        httpdate::fmt_http_date(
                            std::time::UNIX_EPOCH + Duration::from_millis(d.expires_ms)
                        )
                    ),
                )
            })?;
        }
        let provider_key_public = provider_key
            .as_ref()
            .map(Keypair::public)
            .or_else(|| delegation.as_ref().map(|d| d.provider.clone()));
        let provider = match (&self.provider, &provider_key_public) {
            (Some(id), key) => {
                let peer: PeerId = id
                    .parse()
                    .map_err(|e| refuse("provider", format!("`{id}` is not a peer id: {e}")))?;
                let public = key_of_peer_id(&peer).ok_or_else(|| {
                    refuse("provider", format!("`{id}` does not embed its key (use an ed25519 peer id)"))
                })?;
                if key.as_ref().is_some_and(|k| *k != public) {
                    let field = if delegation.is_some() {
                        "delegation"
                    } else {
                        "provider_key"
                    };
                    return Err(refuse(field, "is not from `provider`".to_owned()));
                }
                public
            }
            (None, Some(key)) => key.clone(),
            (None, None) => {
                return Err(refuse(
                    "provider",
                    "a node serves one cache provider's objects: name it (its peer id, printed by `slipstream node keygen`)",
                ))
            }
        };
        let mut roles = Vec::new();
        for r in &self.roles {
            let role = match r.as_str() {
                "cache" => Role::Cache,
                "gateway" => Role::Gateway,
                "manager" => Role::Manager,
                other => {
                    return Err(refuse(
                        "roles",
                        format!("unknown role `{other}`: the roles are cache, gateway, manager"),
                    ))
                }
            };
            if !roles.contains(&role) {
                roles.push(role);
            }
        }
        if roles.contains(&Role::Gateway) && provider_key.is_none() && delegation.is_none() {
            return Err(refuse(
                "provider_key",
                "a gateway signs objects with the provider's key, or with its own under a \
                 delegation: give the key's file, or `delegation`",
            ));
        }
        if !self.monitor.is_empty() && !roles.contains(&Role::Gateway) {
            return Err(refuse("monitor", "only a gateway monitors URLs"));
        }
        for u in &self.monitor {
            match u.parse::<http::Uri>() {
                Ok(uri) if uri.scheme_str() == Some("http") && uri.host().is_some() => {}
                _ => {
                    return Err(refuse(
                        "monitor",
                        format!("`{u}` is not an absolute http:// URL"),
                    ))
                }
            }
        }
        if self.monitor_period_ms == 0 {
            return Err(refuse("monitor_period_ms", "must be positive"));
        }
        let push = match self.push.as_str() {
            "mesh" => crate::net::PushMode::Mesh,
            "tree" => crate::net::PushMode::Tree,
            other => {
                return Err(refuse(
                    "push",
                    format!("`{other}`: pushes travel by \"mesh\" or \"tree\""),
                ))
            }
        };
        if self.lookup_budget_ms == 0 {
            return Err(refuse("lookup_budget_ms", "must be positive"));
        }
        Ok(Settings {
            listen: self.listen,
            p2p_listen,
            bootstrap,
            mdns: self.mdns,
            external,
            digests: self.digests,
            data_dir: self.data_dir,
            capacity_bytes: self.capacity_bytes,
            policy,
            provider,
            provider_key,
            delegation,
            roles,
            lookup_budget: Duration::from_millis(self.lookup_budget_ms),
            monitor: self.monitor,
            monitor_period: Duration::from_millis(self.monitor_period_ms),
            spread_copies: self.spread_copies,
            hot_after: self.hot_after.max(1),
            min_replicas: self.min_replicas,
            push,
            workers: self.workers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> (Keypair, String) {
        let k = Keypair::generate_ed25519();
        let id = k.public().to_peer_id().to_string();
        (k, id)
    }

    #[test]
    fn a_plain_node_needs_only_its_provider() {
        let (k, id) = provider();
        let s = Config {
            provider: Some(id),
            ..Config::default()
        }
        .validate()
        .unwrap();
        assert_eq!(s.provider, k.public());
        assert_eq!(s.roles, [Role::Cache]);
        assert!(s.provider_key.is_none());
    }

    #[test]
    fn what_is_wrong_is_named() {
        let (_, id) = provider();
        let err = |c: Config| c.validate().unwrap_err().to_string();
        assert!(err(Config::default()).contains("[coop] provider"));
        let with = |f: fn(&mut Config)| {
            let mut c = Config {
                provider: Some(id.clone()),
                ..Config::default()
            };
            f(&mut c);
            c
        };
        assert!(err(with(|c| c.provider = Some("nope".into()))).contains("not a peer id"));
        assert!(err(with(|c| c.roles = vec!["boss".into()])).contains("unknown role `boss`"));
        assert!(err(with(|c| c.roles = vec!["gateway".into()])).contains("provider_key"));
        assert!(
            err(with(|c| c.external = vec![
                "/ip4/1.2.3.4/tcp/1/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
                    .into()
            ]))
            .contains("[coop] external"),
            "an external address with a peer id"
        );
        assert!(
            err(with(|c| c.external = vec!["nonsense".into()])).contains("not a multiaddr"),
            "a malformed external address"
        );
        assert!(
            err(with(|c| c.bootstrap = vec!["/ip4/1.2.3.4/tcp/1".into()]))
                .contains("must end in /p2p/")
        );
        assert!(err(with(|c| c.p2p_listen = vec!["tcp://x".into()])).contains("not a multiaddr"));
        assert!(err(with(|c| c.monitor = vec!["http://a/".into()])).contains("only a gateway"));
        assert!(err(with(|c| c.policy = "best".into())).contains("[coop] policy"));
    }

    #[test]
    fn a_gateway_reads_the_providers_key_and_checks_it() {
        let (k, _) = provider();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("provider.key");
        std::fs::write(&path, k.to_protobuf_encoding().unwrap()).unwrap();
        let s = Config {
            provider_key: Some(path.clone()),
            roles: vec!["gateway".into(), "manager".into()],
            monitor: vec!["http://127.0.0.1:1/a".into()],
            ..Config::default()
        }
        .validate()
        .unwrap();
        assert_eq!(s.provider, k.public());
        assert_eq!(s.roles, [Role::Gateway, Role::Manager]);
        // A key that is not the named provider's is refused.
        let (_, other) = provider();
        let e = Config {
            provider: Some(other),
            provider_key: Some(path),
            ..Config::default()
        }
        .validate()
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("provider_key: is not from `provider`"),
            "{e}"
        );
        std::fs::write(dir.path().join("bad.key"), b"garbage").unwrap();
        let e = Config {
            provider_key: Some(dir.path().join("bad.key")),
            ..Config::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("not a slipstream key file"), "{e}");
    }
}
