//! The `[cluster]` table of a node's config file: how a server joins its domain's cluster.
//!
//! ```toml
//! [cluster]
//! name = "eu-1"                         # unique in the cluster (default: [serve] name)
//! gossip_listen = "10.0.0.1:7946"       # UDP
//! seeds = ["10.0.0.2:7946"]             # any live member
//! advertise = "https://eu-1.example.org" # how browsers and peers reach this node
//! data_dir = "/var/lib/slipstream"      # replica.redb
//! token_file = "/etc/slipstream/token"  # bearer token of the replica API
//! secret_file = "/etc/slipstream/gossip.key" # seals gossip (default: derived from the token)
//! publish = ["/*"]                      # patterns served from the document root
//! [cluster.agent]                       # the client agent's selector and its settings
//! policy = "decay"                      # or "refresh" (default: decay, or refresh when
//! backoff_ms = 1000                     #   every setting is one of Refresh's only)
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::directory::Pattern;

/// The `[cluster]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Join a cluster. By default a node joins when its file has a `[cluster]` table or a
    /// cluster flag (`--cluster-seed`) is given; `false` keeps it out regardless.
    pub enabled: Option<bool>,
    /// The node's name, unique in the cluster (default: the `[serve]` name).
    pub name: Option<String>,
    /// Nodes with another cluster id ignore this node's gossip.
    pub cluster_id: String,
    /// The UDP address gossip is received on.
    #[serde(deserialize_with = "slipstream_node::config::listen")]
    pub gossip_listen: SocketAddr,
    /// The UDP address peers send gossip to (default: `gossip_listen`).
    pub gossip_advertise: Option<SocketAddr>,
    /// Gossip addresses (`host:port`) of members to join through.
    pub seeds: Vec<String>,
    /// The base URL (`http://host:port`) browsers and peers reach this node at (default: the
    /// scheme and the address the server is bound to, which must then not be a wildcard
    /// address).
    pub advertise: Option<String>,
    /// Where the node keeps its replica entries and bodies.
    pub data_dir: PathBuf,
    /// How often the node gossips with a peer, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub gossip_interval_ms: u64,
    /// How long a dead node's entries are remembered, flagged dead, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub dead_node_grace_ms: u64,
    /// The replica API's bearer token (prefer `token_file`; without either the API is
    /// read-only).
    pub token: Option<String>,
    /// A file holding the bearer token.
    pub token_file: Option<PathBuf>,
    /// The secret every member shares, which seals gossip (prefer `secret_file`). Without one
    /// the token is used; a node with neither cannot join.
    pub secret: Option<String>,
    /// A file holding the gossip secret.
    pub secret_file: Option<PathBuf>,
    /// Hosts (`host`, or `host:port`) that nodes' entries may point at besides each node's
    /// own origin (a CDN, a storage bucket).
    pub replica_hosts: Vec<String>,
    /// The most directory entries taken from one node (and written on this one).
    pub max_node_entries: usize,
    /// The most bytes of directory keys and values taken from one node.
    #[serde(deserialize_with = "slipstream_units::de::bytes_usize")]
    pub max_node_bytes: usize,
    /// The most nodes a gossip digest may list; a larger one is dropped.
    pub max_digest_nodes: u16,
    /// When set, the only members admitted: each name with its public key (what its
    /// `/_slipstream/directory` shows as `key`). Unset, a name is bound to the first key heard.
    pub members: std::collections::BTreeMap<String, String>,
    /// The largest replica content the API accepts.
    #[serde(deserialize_with = "slipstream_units::de::bytes_usize")]
    pub max_replica_bytes: usize,
    /// Logical URL patterns this node serves from its document root, announced at start
    /// (`"/*"`: the whole site; `"/img/*"`: a directory).
    pub publish: Vec<String>,
    /// Pre-process HTML pages (replica lists and the agent's registration).
    pub pre_process: bool,
    /// Processed pages kept, in bytes (a page over a quarter of it is not kept; 0: none).
    #[serde(deserialize_with = "slipstream_units::de::bytes_usize")]
    pub page_cache_bytes: usize,
    /// The client agent's selector: `policy` ("decay" or "refresh") and that selector's
    /// settings (names of `web/agent/decay.mjs`'s or `select.mjs`'s `DEFAULTS`).
    pub agent: toml::Table,
    /// The built-in placement policy (`[cluster.placement]`).
    pub placement: PlacementConfig,
}

/// `[cluster.placement]`: copy hot resources to the least-loaded peer, retire cold replicas.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementConfig {
    /// Run the policy (it needs the cluster's `token`, shared by the nodes).
    pub enabled: bool,
    /// How often rates are measured and decisions made, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub interval_ms: u64,
    /// A resource this node serves at least this often (requests per second) is hot.
    pub hot_requests_per_s: f64,
    /// A stored replica requested less often than this is cold.
    pub cold_requests_per_s: f64,
    /// Intervals in a row a stored replica must be cold before it is retired.
    pub cold_intervals: u32,
    /// A hot resource is copied until it has this many live replicas.
    pub max_replicas: usize,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            enabled: false,
            interval_ms: 10_000,
            hot_requests_per_s: 50.0,
            cold_requests_per_s: 1.0,
            cold_intervals: 6,
            max_replicas: 3,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: None,
            name: None,
            cluster_id: "slipstream".to_owned(),
            gossip_listen: SocketAddr::from(([127, 0, 0, 1], 7946)),
            gossip_advertise: None,
            seeds: Vec::new(),
            advertise: None,
            data_dir: PathBuf::from("slipstream-data"),
            gossip_interval_ms: 500,
            dead_node_grace_ms: 24 * 3600 * 1000,
            token: None,
            token_file: None,
            secret: None,
            secret_file: None,
            replica_hosts: Vec::new(),
            max_node_entries: 10_000,
            max_node_bytes: 4 << 20,
            max_digest_nodes: crate::seal::DEFAULT_MAX_DIGEST_NODES,
            members: std::collections::BTreeMap::new(),
            max_replica_bytes: 64 << 20,
            publish: Vec::new(),
            pre_process: true,
            page_cache_bytes: 16 << 20,
            agent: toml::Table::new(),
            placement: PlacementConfig::default(),
        }
    }
}

/// A `[cluster]` table that cannot work.
#[derive(Debug, thiserror::Error)]
#[error("[cluster] {field}: {reason}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        field,
        reason: reason.into(),
    }
}

/// A validated `[cluster]` table.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// How to join.
    pub settings: crate::cluster::Settings,
    /// The replica API's token.
    pub token: Option<String>,
    /// The largest replica content.
    pub max_replica_bytes: usize,
    /// Patterns served from the document root.
    pub publish: Vec<Pattern>,
    /// Pre-process pages.
    pub pre_process: bool,
    /// Processed pages kept, in bytes.
    pub page_cache_bytes: usize,
    /// The agent's settings, as JSON.
    pub agent: serde_json::Map<String, serde_json::Value>,
    /// The placement policy, when enabled.
    pub placement: Option<crate::placement::Settings>,
}

impl Config {
    /// Whether the node joins a cluster: `enabled`, or else whether the file has the table or
    /// a flag asked for it (`asked`).
    pub fn joins(&self, asked: bool) -> bool {
        self.enabled.unwrap_or(asked)
    }

    /// Checks the table; `listen` and `name` are the node's `[serve]` address and name.
    pub fn validate(&self, listen: SocketAddr, name: &str) -> Result<Cluster, ConfigError> {
        let name = self.name.clone().unwrap_or_else(|| name.to_owned());
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(
                "name",
                format!("`{name}`: a node name is non-empty, without spaces"),
            ));
        }
        let advertise = match &self.advertise {
            Some(a) => a.trim_end_matches('/').to_owned(),
            None if listen.ip().is_unspecified() => {
                return Err(invalid(
                    "advertise",
                    format!(
                        "the node listens on {listen}, a wildcard address: say which URL \
                         browsers and peers reach it at, e.g. advertise = \"http://10.0.0.1:{}\"",
                        listen.port()
                    ),
                ))
            }
            // The bound address, known once the server listens (the port may be 0 here).
            None => String::new(),
        };
        let base = advertise.parse::<http::Uri>().ok().filter(|u| {
            matches!(u.scheme_str(), Some("http" | "https"))
                && u.authority().is_some()
                && matches!(u.path(), "" | "/")
                && u.query().is_none()
        });
        if base.is_none() && !advertise.is_empty() {
            return Err(invalid(
                "advertise",
                format!("`{advertise}` is not a base URL like http://host:port"),
            ));
        }
        if self.gossip_interval_ms == 0 {
            return Err(invalid("gossip_interval_ms", "must be positive"));
        }
        let token = shared_secret(
            &self.token,
            &self.token_file,
            ("token", "token_file"),
            "a token",
        )?;
        let secret = shared_secret(
            &self.secret,
            &self.secret_file,
            ("secret", "secret_file"),
            "a gossip secret",
        )?;
        let Some(secret) = secret.or_else(|| token.clone()) else {
            return Err(invalid(
                "secret_file",
                "gossip is sealed with a secret every member shares: set `secret_file` (or \
                 `secret`, or the replica API's `token`, from which it is then derived), the \
                 same on every node; make one with `openssl rand -hex 32`",
            ));
        };
        for host in &self.replica_hosts {
            let ok = !host.is_empty()
                && host
                    .parse::<http::uri::Authority>()
                    .is_ok_and(|a| a.as_str() == host)
                && !host.contains('@');
            if !ok {
                return Err(invalid(
                    "replica_hosts",
                    format!("`{host}` is not a host or host:port"),
                ));
            }
        }
        if self.max_node_entries == 0 || self.max_node_bytes == 0 || self.max_digest_nodes < 2 {
            return Err(invalid(
                "max_node_entries",
                "max_node_entries and max_node_bytes are positive, max_digest_nodes at least 2",
            ));
        }
        for (member, key) in &self.members {
            if !crate::identity::is_public_key(key) {
                return Err(invalid(
                    "members",
                    format!("`{member}`: `{key}` is not a node's public key (base64 of 32 bytes)"),
                ));
            }
        }
        let publish = self
            .publish
            .iter()
            .map(|p| match Pattern::parse(p) {
                Ok(pattern) if p.starts_with('/') => Ok(pattern),
                Ok(_) => Err(invalid("publish", format!("`{p}` is not a path"))),
                Err(e) => Err(invalid("publish", format!("`{p}`: {e}"))),
            })
            .collect::<Result<_, _>>()?;
        let agent = agent_settings(&self.agent)?;
        let placement = if self.placement.enabled {
            let p = &self.placement;
            if token.is_none() {
                return Err(invalid(
                    "placement",
                    "the policy copies through the peers' replica API: set the cluster's `token`",
                ));
            }
            if p.interval_ms == 0 {
                return Err(invalid("placement.interval_ms", "must be positive"));
            }
            if !(p.cold_requests_per_s >= 0.0 && p.hot_requests_per_s > p.cold_requests_per_s) {
                return Err(invalid(
                    "placement.hot_requests_per_s",
                    "must be above cold_requests_per_s, itself at least 0",
                ));
            }
            if p.max_replicas < 2 || p.cold_intervals == 0 {
                return Err(invalid(
                    "placement.max_replicas",
                    "max_replicas is at least 2 and cold_intervals at least 1",
                ));
            }
            Some(crate::placement::Settings {
                interval: Duration::from_millis(p.interval_ms),
                hot_per_s: p.hot_requests_per_s,
                cold_per_s: p.cold_requests_per_s,
                cold_intervals: p.cold_intervals,
                max_replicas: p.max_replicas,
            })
        } else {
            None
        };
        Ok(Cluster {
            placement,
            settings: crate::cluster::Settings {
                name,
                cluster_id: self.cluster_id.clone(),
                gossip_listen: self.gossip_listen,
                gossip_advertise: self.gossip_advertise.unwrap_or(self.gossip_listen),
                seeds: self.seeds.clone(),
                advertise: (!advertise.is_empty()).then_some(advertise),
                data_dir: self.data_dir.clone(),
                gossip_interval: Duration::from_millis(self.gossip_interval_ms),
                dead_node_grace: Duration::from_millis(self.dead_node_grace_ms),
                secret: secret.into_bytes(),
                replica_hosts: self.replica_hosts.clone(),
                max_node_entries: self.max_node_entries,
                max_node_bytes: self.max_node_bytes,
                max_digest_nodes: self.max_digest_nodes,
                members: self.members.clone(),
            },
            token,
            max_replica_bytes: self.max_replica_bytes,
            publish,
            pre_process: self.pre_process,
            page_cache_bytes: self.page_cache_bytes,
            agent,
        })
    }
}

/// A secret given inline or in a file (`names`: the two fields), checked: at least 16
/// characters, without spaces. `what` names it in the error.
fn shared_secret(
    inline: &Option<String>,
    file: &Option<PathBuf>,
    names: (&'static str, &'static str),
    what: &str,
) -> Result<Option<String>, ConfigError> {
    let (inline_name, file_name) = names;
    let value = match (inline, file) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                file_name,
                format!("give `{inline_name}` or `{file_name}`, not both"),
            ))
        }
        (Some(v), None) => Some(v.clone()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| invalid(file_name, format!("{}: {e}", path.display())))?
                .trim()
                .to_owned(),
        ),
        (None, None) => None,
    };
    if let Some(v) = &value {
        if v.len() < 16 || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(
                inline_name,
                format!(
                    "{what} is at least 16 characters, without spaces \
                     (e.g. `openssl rand -hex 32`)"
                ),
            ));
        }
    }
    Ok(value)
}

/// The `[cluster.agent]` table checked by the selector the agent ports, under the same names,
/// as the page's block carries it: what the node passes on, the browser accepts. `policy` names
/// the selector: "decay" (the default) or "refresh"; without it, a table whose settings are all
/// Refresh's and not all Decay's (one written before Decay, e.g. `probe_interval_ms`) keeps
/// Refresh. The block names the policy only when it is not the default.
fn agent_settings(
    table: &toml::Table,
) -> Result<serde_json::Map<String, serde_json::Value>, ConfigError> {
    use slipstream_select::config::{Decay, Refresh};
    let policy = match table.get("policy") {
        Some(toml::Value::String(p)) if p == "decay" || p == "refresh" => p.as_str(),
        Some(p) => {
            return Err(invalid(
                "agent",
                format!("`policy` = {p}: want \"decay\" or \"refresh\""),
            ))
        }
        None => {
            let keys = || table.keys().map(String::as_str);
            if keys().any(|k| !Decay::FIELDS.contains(&k))
                && keys().all(|k| Refresh::FIELDS.contains(&k))
            {
                "refresh"
            } else {
                "decay"
            }
        }
    };
    let mut agent = serde_json::Map::new();
    if policy != "decay" {
        agent.insert("policy".into(), serde_json::json!(policy));
    }
    let (mut decay, mut refresh) = (Decay::default(), Refresh::default());
    for (key, value) in table.iter().filter(|(k, _)| *k != "policy") {
        let number = value
            .as_float()
            .or_else(|| value.as_integer().map(|i| i as f64))
            .ok_or_else(|| invalid("agent", format!("`{key}` must be a number")))?;
        let (known, fields) = if policy == "decay" {
            (decay.set(key, number), Decay::FIELDS)
        } else {
            (refresh.set(key, number), Refresh::FIELDS)
        };
        if !known {
            return Err(invalid(
                "agent",
                format!(
                    "unknown setting `{key}` of policy {policy}; known: {}",
                    fields.join(", ")
                ),
            ));
        }
        agent.insert(key.clone(), serde_json::json!(number));
    }
    let checked = if policy == "decay" {
        decay.check().map_err(|e| e.to_string())
    } else {
        refresh.check().map_err(|e| e.to_string())
    };
    checked.map_err(|e| invalid("agent", e))?;
    Ok(agent)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults with the one field they lack: the gossip secret.
    fn base() -> Config {
        Config {
            secret: Some("0123456789abcdef-test".into()),
            ..Config::default()
        }
    }

    #[test]
    fn the_secret_comes_from_the_token_when_not_given() {
        let token = "a-token-of-the-replica-api";
        let c = Config {
            token: Some(token.into()),
            ..Config::default()
        }
        .validate(listen(), "n")
        .unwrap();
        assert_eq!(c.settings.secret, token.as_bytes());
        let c = Config {
            token: Some(token.into()),
            ..base()
        }
        .validate(listen(), "n")
        .unwrap();
        assert_eq!(c.settings.secret, b"0123456789abcdef-test");
    }

    fn listen() -> SocketAddr {
        "127.0.0.1:8080".parse().unwrap()
    }

    #[test]
    fn defaults_advertise_the_listen_address() {
        let c = base().validate(listen(), "n1").unwrap();
        // The server's bound address, set once it listens.
        assert_eq!(c.settings.advertise, None);
        assert_eq!(c.settings.name, "n1");
        assert!(c.token.is_none());
    }

    #[test]
    fn bad_tables_are_refused_with_the_field() {
        let cases: Vec<(Config, &str)> = vec![
            (
                base(),
                "advertise", // with a wildcard listen address, below
            ),
            (Config::default(), "secret_file"),
            (
                Config {
                    secret: Some("short".into()),
                    ..base()
                },
                "secret",
            ),
            (
                Config {
                    secret_file: Some("/nonexistent/gossip.key".into()),
                    ..base()
                },
                "secret_file",
            ),
            (
                Config {
                    replica_hosts: vec!["http://cdn.example".into()],
                    ..base()
                },
                "replica_hosts",
            ),
            (
                Config {
                    advertise: Some("ftp://x".into()),
                    ..base()
                },
                "advertise",
            ),
            (
                Config {
                    token: Some("short".into()),
                    ..base()
                },
                "token",
            ),
            (
                Config {
                    publish: vec!["img/*".into()],
                    ..base()
                },
                "publish",
            ),
            (
                Config {
                    publish: vec!["/a*b".into()],
                    ..base()
                },
                "publish",
            ),
            (
                Config {
                    agent: toml::toml! { probe_ms = 5 },
                    ..base()
                },
                "agent",
            ),
            (
                Config {
                    agent: toml::toml! { probe_interval_ms = "soon" },
                    ..base()
                },
                "agent",
            ),
            (
                Config {
                    agent: toml::toml! { r = 2.0 },
                    ..base()
                },
                "agent",
            ),
            (
                Config {
                    name: Some("a b".into()),
                    ..base()
                },
                "name",
            ),
        ];
        for (i, (config, field)) in cases.into_iter().enumerate() {
            let listen = if i == 0 {
                "0.0.0.0:80".parse().unwrap()
            } else {
                listen()
            };
            let e = config.validate(listen, "n").unwrap_err();
            assert_eq!(e.field, field, "case {i}: {e}");
        }
    }

    #[test]
    fn agent_settings_pass_as_json_numbers() {
        let c = Config {
            agent: toml::toml! { probe_interval_ms = 500
            r = 0.9 },
            ..base()
        }
        .validate(listen(), "n")
        .unwrap();
        assert_eq!(c.agent["probe_interval_ms"], 500.0);
        assert_eq!(c.agent["r"], 0.9);
        // Refresh's settings alone keep Refresh, and the block names it.
        assert_eq!(c.agent["policy"], "refresh");
    }

    #[test]
    fn agent_policy_is_named_and_checked() {
        let with = |agent: toml::Table| Config { agent, ..base() }.validate(listen(), "n");
        // Decay by default, not named in the block.
        let c = with(toml::toml! { backoff_ms = 200
        max_backoff_ms = 800 })
        .unwrap();
        assert_eq!(c.agent.get("policy"), None);
        assert_eq!(c.agent["backoff_ms"], 200.0);
        assert!(with(toml::Table::new()).unwrap().agent.is_empty());
        let c = with(toml::toml! { policy = "refresh"
        ttl_ms = 1000 })
        .unwrap();
        assert_eq!(c.agent["policy"], "refresh");
        let c = with(toml::toml! { policy = "decay" }).unwrap();
        assert_eq!(c.agent.get("policy"), None);
        for bad in [
            toml::toml! { policy = "fastest" },
            toml::toml! { policy = 1 },
            toml::toml! { policy = "decay"
            probe_interval_ms = 5 },
            toml::toml! { policy = "refresh"
            budget = 0.1 },
            toml::toml! { backoff_ms = 500
            max_backoff_ms = 100 },
        ] {
            let e = with(bad.clone()).unwrap_err();
            assert_eq!(e.field, "agent", "{bad}: {e}");
        }
    }
}
