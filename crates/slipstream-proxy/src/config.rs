//! `slipstream proxy` settings: the TOML `[proxy]` table (every field has a default) and the
//! validated form the proxy runs with.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use slipstream_cache::Policy;
use slipstream_http::listen::Limits;
use slipstream_select::{FailOver, PeakEwma, Refresh, Select};

/// The `[proxy]` table of a node's config.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    #[serde(deserialize_with = "slipstream_node::config::listen")]
    pub listen: SocketAddr,
    /// Reverse proxy: the origin every request goes to, e.g. `http://127.0.0.1:8080`, or a
    /// list of origin servers of one site, chosen by the origin policy (ordered fail-over: the
    /// first that is up); cache keys name the first. Without it the proxy is a forward proxy
    /// (absolute-form requests and CONNECT).
    #[serde(deserialize_with = "one_or_many")]
    pub origin: Vec<String>,
    /// Accept forward-proxy requests (absolute-form, CONNECT) even with an origin set.
    pub forward: bool,
    /// The clients a forward proxy serves, as address ranges (`"10.0.0.0/8"`, `"fc00::/7"`,
    /// a bare address): others get 403 for absolute-form requests and CONNECT. By default
    /// loopback and the private ranges (127.0.0.0/8, ::1/128, 10.0.0.0/8, 172.16.0.0/12,
    /// 192.168.0.0/16, fc00::/7); link-local clients are not served unless listed. A proxy
    /// open to the Internet needs `["0.0.0.0/0", "::/0"]`, and should not be one.
    pub allow_clients: Vec<String>,
    /// Internal destinations a forward proxy may reach anyway, as address ranges. By default
    /// none: absolute-form requests and CONNECT to loopback, unspecified, private, shared,
    /// link-local, multicast or reserved addresses (and their IPv4-mapped IPv6 forms) get 403
    /// before anything is connected, whatever the spelling or the name that resolves to them.
    /// The proxy's own listener is refused even when listed (on a `slipstream node`, its p2p
    /// listeners too; its gateway fetches by these rules as well). A reverse proxy's origins and
    /// parents are not checked.
    pub allow_destinations: Vec<String>,
    /// What to do with the request fields that tell an origin which host and scheme the client
    /// used (`X-Forwarded-Host`, `-Proto`, `-Port`, `-Server`, `Forwarded`, `X-Original-URL`,
    /// `X-Rewrite-URL`): `strip` (the default) removes them, since an origin that builds links
    /// from them would have a cache keep an attacker's host for everyone; `pass` forwards them
    /// (only behind a front end that sets them itself); `key` forwards them and keys the cache
    /// by their values, so a page built for one host is served only to requests naming it.
    pub forwarded: Forwarded,
    /// A PEM file of CA certificates to trust for HTTPS origins, besides the platform's roots
    /// (verification is always on).
    pub ca_file: Option<std::path::PathBuf>,
    /// Parent proxies, chosen by `parent_policy`; a parent that fails is skipped for
    /// `parent_retry_ms`.
    pub parents: Vec<String>,
    /// How the origin servers are chosen among, fail-over included: `failover` (the default:
    /// the first that is up, in the configured order; a failed one is skipped for
    /// `parent_retry_ms`), `refresh` (Web++'s Refresh, paper 001 §4.1 with its §6 defaults:
    /// the least 55th percentile of latency, a timeout at the 99.9th, failed origins probed by
    /// HEAD every 28.8 hours, doubling) or `p2c` (power of two choices over a peak-sensitive
    /// EWMA of latency times requests in flight; a failed origin is skipped for
    /// `parent_retry_ms`). A policy's timeout for an origin is capped by `upstream_timeout_ms`.
    #[serde(deserialize_with = "slipstream_node::config::checked::<SelectPolicy, _>")]
    pub origin_policy: String,
    /// The same for the parent proxies.
    #[serde(deserialize_with = "slipstream_node::config::checked::<SelectPolicy, _>")]
    pub parent_policy: String,
    /// A Web++ cluster member (`http://host:port`) whose directory names the origin servers:
    /// the proxy asks it every `origin_directory_interval_ms` for the replicas of `/` (the
    /// servers publishing the whole site), and the origin set follows, `origin` being the set
    /// until the first answer and the site's name in cache keys throughout.
    pub origin_directory: Option<String>,
    /// How often the origin directory is asked, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub origin_directory_interval_ms: u64,
    /// How long a failed parent or origin is skipped, in milliseconds (or `"5s"`).
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub parent_retry_ms: u64,
    /// This node's name in Via and Cache-Status.
    pub name: String,
    /// Store responses that carry `Set-Cookie` (RFC 9111 §3 allows it, and the cookie is then
    /// served with the stored response to everyone). Off by default: a shared cache would hand
    /// one user's cookie, often a session, to others. Turn it on only for origins whose
    /// cacheable responses set no per-user cookies.
    pub store_set_cookie: bool,
    /// Store responses to requests that carry `Cookie` or `Authorization` when their
    /// freshness would be heuristic (RFC 9111 §4.2.2: a fraction of the time since
    /// `Last-Modified`) or zero. Off by default: such a response is often a page built for the
    /// user, and an attacker who makes the user ask for `/account.php/x.css` would find it in
    /// the cache for weeks. With it off, these responses are stored only with explicit
    /// freshness (`max-age`, `s-maxage`, `Expires`).
    pub heuristic_with_credentials: bool,
    /// Web cache deception armor (as Cloudflare's): a response to a URL whose last path
    /// segment has a static file extension (`.css`, `.js`, `.png`, ...) is stored only if its
    /// `Content-Type` is one that extension names (or `application/octet-stream`), so that a
    /// dynamic page answering `/account.php/x.css` is not kept as a stylesheet. On by default.
    pub deception_armor: bool,
    pub cache: CacheConfig,
    /// Waiting requests per key while one fetch is in flight (request collapsing); requests
    /// beyond the bound go upstream on their own.
    pub max_collapsed_waiters: usize,
    /// Bytes the proxy may buffer for responses under way (or `"64MiB"`): bodies being read
    /// to store, copies teed to the store while a body streams (read only as fast as its
    /// client takes it), first chunks being kept. A cacheable response that finds no room is
    /// streamed to its client without being stored (`slipstream_store_skipped_total`), never
    /// buffered whole. 0 (the default): a quarter of the cache capacity, and at least one
    /// largest storable object (`max_object_bytes`, at most the capacity).
    #[serde(deserialize_with = "slipstream_units::de::bytes")]
    pub inflight_bytes: u64,
    /// Connecting to an upstream, in milliseconds (or `"3s"`).
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub connect_timeout_ms: u64,
    /// Waiting for an upstream's response head, and between body chunks, in milliseconds (or
    /// `"30s"`).
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub upstream_timeout_ms: u64,
    /// How long the proxy reads a cacheable body before giving up on storing it and streaming
    /// the rest to the client, in milliseconds (or `"10s"`): a trickling upstream cannot hold
    /// a client with nothing sent for longer.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub store_deadline_ms: u64,
    /// Least rate of an upstream body, in bytes per second (or `"1KiB"`), averaged over each
    /// `upstream_min_rate_window_ms`; a slower body is cut. By default 1 KiB/s over 30 s (at
    /// least 30 KiB in every 30 s): a modem's rate passes, an upstream dripping a byte a
    /// second is cut after 30 s. The rate counts the bytes the proxy passed on, so a client
    /// that stops reading for longer than a window (a paused video) can be cut too, as can a
    /// long-lived quiet stream (server-sent events); 0 turns it off for such sites.
    #[serde(deserialize_with = "slipstream_units::de::bytes")]
    pub upstream_min_rate: u64,
    /// The window `upstream_min_rate` is averaged over (or `"30s"`).
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub upstream_min_rate_window_ms: u64,
    /// Longest an upstream body may take in all, in milliseconds (or `"10m"`); by default two
    /// hours, which bounds an upstream that keeps just above the least rate while leaving a
    /// 7 GiB download at 1 MB/s time to finish; 0 turns it off.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub upstream_body_timeout_ms: u64,
    /// Bearer token for PURGE and `/_slipstream/purge`; purging is refused without one.
    pub purge_token: Option<String>,
    /// Largest request head in bytes (or `"16KiB"`).
    #[serde(deserialize_with = "slipstream_units::de::bytes_usize")]
    pub max_header_bytes: usize,
    /// Client connections served at once; further clients wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Client connections from one IP address at once; more are closed as they arrive.
    pub max_connections_per_ip: usize,
    /// Worker threads; 0 means one per core.
    pub workers: usize,
    /// On SIGTERM or Ctrl-C, how long to wait for requests in progress before exiting, in
    /// milliseconds (or `"30s"`). New connections are refused at once.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub drain_timeout_ms: u64,
    /// Append a line per request to this file (reopened on SIGUSR1, for log rotation).
    pub access_log: Option<std::path::PathBuf>,
    /// Write the process id to this file while running, for `slipstream reload --config`.
    pub pid_file: Option<std::path::PathBuf>,
    /// `combined` (Apache's and nginx's format) or `json` (with cache status and upstream).
    pub access_log_format: slipstream_node::access_log::Format,
    /// PEM certificate chain; with `tls_key`, clients connect over HTTPS (HTTP/2 and HTTP/1.1
    /// by ALPN).
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key for `tls_cert`.
    pub tls_key: Option<std::path::PathBuf>,
    /// Ports a forward proxy opens CONNECT tunnels to (443 by default: a tunnel to any port would
    /// let clients reach arbitrary services through the proxy).
    pub connect_ports: Vec<u16>,
}

/// A policy choosing among upstreams of one kind ([`Config::origin_policy`],
/// [`Config::parent_policy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SelectPolicy {
    /// `failover`: [`slipstream_select::FailOver`].
    #[default]
    FailOver,
    /// `refresh`: [`slipstream_select::Refresh`] with paper 001 §6's defaults.
    Refresh,
    /// `p2c`: [`slipstream_select::PeakEwma`].
    P2c,
}

/// A selection policy name that is not one of `failover`, `refresh`, `p2c`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown selection policy `{0}` (use failover, refresh or p2c)")]
pub struct ParseSelectPolicyError(pub String);

impl std::str::FromStr for SelectPolicy {
    type Err = ParseSelectPolicyError;

    fn from_str(s: &str) -> Result<SelectPolicy, ParseSelectPolicyError> {
        match s {
            "failover" => Ok(SelectPolicy::FailOver),
            "refresh" => Ok(SelectPolicy::Refresh),
            "p2c" => Ok(SelectPolicy::P2c),
            _ => Err(ParseSelectPolicyError(s.to_owned())),
        }
    }
}

impl SelectPolicy {
    /// The policy, over no endpoints yet; `retry`: how long a failed endpoint is skipped by the
    /// policies that take it (fail-over, p2c). Refresh's configuration is valid by
    /// construction, and so is p2c's.
    pub fn select(self, retry: Duration, now: std::time::Instant) -> Box<dyn Select> {
        match self {
            SelectPolicy::FailOver => Box::new(FailOver::new(&[], retry)),
            SelectPolicy::Refresh => {
                match Refresh::new(&[], slipstream_select::config::Refresh::default(), now) {
                    Ok(r) => Box::new(r),
                    Err(e) => panic!("Refresh rejected its own defaults: {e}"),
                }
            }
            SelectPolicy::P2c => {
                // A seed from the standard library's randomly keyed hasher: every proxy draws
                // differently, with no randomness crate for one number.
                let seed = std::hash::BuildHasher::hash_one(
                    &std::collections::hash_map::RandomState::new(),
                    0u8,
                );
                let config = slipstream_select::config::PeakEwma {
                    retry_after: retry,
                    ..Default::default()
                };
                match PeakEwma::new(&[], config, seed, now) {
                    Ok(p) => Box::new(p),
                    Err(e) => panic!("PeakEwma rejected a positive decay: {e}"),
                }
            }
        }
    }
}

/// See [`Config::forwarded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Forwarded {
    /// Remove the fields before the request goes upstream.
    #[default]
    Strip,
    /// Forward them as the client sent them.
    Pass,
    /// Forward them, and make their values part of the cache key, so that a response built
    /// for one client's host is only ever served to requests naming the same (as Varnish does
    /// by adding them to the hash).
    Key,
}

/// The `[proxy.cache]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Whether to cache at all.
    pub enabled: bool,
    /// Bytes of responses (headers and bodies) the cache may hold (or `"256MiB"`).
    #[serde(deserialize_with = "slipstream_units::de::bytes")]
    pub capacity_bytes: u64,
    /// Replacement policy (as for `serve`).
    #[serde(deserialize_with = "slipstream_node::config::checked::<slipstream_cache::Policy, _>")]
    pub policy: String,
    /// Objects larger than this are not stored (the hierarchy's per-level size rule, paper
    /// 003: a child keeps objects up to S).
    #[serde(deserialize_with = "slipstream_units::de::bytes")]
    pub max_object_bytes: u64,
    /// Objects smaller than this are not stored (a parent keeps objects above S).
    #[serde(deserialize_with = "slipstream_units::de::bytes")]
    pub min_object_bytes: u64,
    /// Objects larger than `max_object_bytes` keep their first this many bytes (paper 002's
    /// adaptive level); a hit sends the chunk at once and fetches the rest with a Range
    /// request. 0 turns it off.
    #[serde(deserialize_with = "slipstream_units::de::bytes")]
    pub chunk_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 3128)),
            origin: Vec::new(),
            forward: false,
            allow_clients: crate::access::DEFAULT_CLIENTS
                .iter()
                .map(|c| (*c).to_owned())
                .collect(),
            allow_destinations: Vec::new(),
            ca_file: None,
            forwarded: Forwarded::Strip,
            parents: Vec::new(),
            origin_policy: "failover".into(),
            parent_policy: "failover".into(),
            origin_directory: None,
            origin_directory_interval_ms: 2_000,
            parent_retry_ms: 5_000,
            name: "slipstream".into(),
            store_set_cookie: false,
            heuristic_with_credentials: false,
            deception_armor: true,
            cache: CacheConfig::default(),
            max_collapsed_waiters: 1024,
            inflight_bytes: 0,
            connect_timeout_ms: 3_000,
            upstream_timeout_ms: 30_000,
            store_deadline_ms: 10_000,
            upstream_min_rate: 1024,
            upstream_min_rate_window_ms: 30_000,
            upstream_body_timeout_ms: 2 * 3600 * 1000,
            purge_token: None,
            max_header_bytes: 16 * 1024,
            workers: 0,
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
            drain_timeout_ms: 30_000,
            access_log: None,
            pid_file: None,
            access_log_format: slipstream_node::access_log::Format::Combined,
            connect_ports: vec![443],
            tls_cert: None,
            tls_key: None,
        }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            capacity_bytes: 256 << 20,
            policy: "lru".into(),
            max_object_bytes: 16 << 20,
            min_object_bytes: 0,
            chunk_bytes: 1 << 20,
        }
    }
}

/// A config that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A URL that is not `http://host[:port]` (or `https://` where allowed).
    #[error("{field}: `{value}` is not a usable upstream URL ({reason})")]
    BadUrl {
        /// The field.
        field: &'static str,
        /// What was given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// Unknown policy name.
    #[error(transparent)]
    Policy(#[from] slipstream_cache::ParsePolicyError),
    /// A value out of range.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Reverse proxy: the site's name in cache keys and targets (the first origin).
    pub origin: Option<http::uri::Authority>,
    /// Reverse proxy: every origin server of the site.
    pub origins: Vec<http::uri::Authority>,
    /// `http` or `https`, for every origin.
    pub origin_scheme: http::uri::Scheme,
    /// What happens to `X-Forwarded-Host` and the like.
    pub forwarded: Forwarded,
    /// Certificates trusted for HTTPS upstreams, besides the platform's.
    pub ca_certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Whether absolute-form and CONNECT requests are served.
    pub forward: bool,
    /// Who may use the forward proxy and where it may go.
    pub access: std::sync::Arc<crate::access::Access>,
    /// Parent proxies in order of preference.
    pub parents: Vec<http::uri::Authority>,
    /// The parents spoken to over TLS (`https://` in the config).
    pub https_parents: Vec<http::uri::Authority>,
    /// How long a failed parent is skipped.
    pub parent_retry: Duration,
    /// How origins are chosen.
    pub origin_policy: SelectPolicy,
    /// The cluster member whose directory names the origins, and how often it is asked.
    pub origin_directory: Option<(http::Uri, Duration)>,
    /// How parents are chosen.
    pub parent_policy: SelectPolicy,
    /// Name in Via and Cache-Status.
    pub name: String,
    /// Whether responses with `Set-Cookie` are stored.
    pub store_set_cookie: bool,
    /// Whether responses to credentialed requests may be stored without explicit freshness.
    pub heuristic_with_credentials: bool,
    /// Whether a stored response's Content-Type must agree with its URL's extension.
    pub deception_armor: bool,
    /// Cache engine settings, if caching.
    pub cache: Option<slipstream_cache::Config>,
    /// Size rules for storing.
    pub min_object_bytes: u64,
    /// Size rules for storing.
    pub max_object_bytes: u64,
    /// First-chunk size for objects above `max_object_bytes` (0 = off).
    pub chunk_bytes: u64,
    /// Bound on collapsed waiters per key.
    pub max_collapsed_waiters: usize,
    /// Bound on bytes buffered for responses under way.
    pub inflight_bytes: u64,
    /// Upstream connect timeout.
    pub connect_timeout: Duration,
    /// Upstream response and body-chunk timeout.
    pub upstream_timeout: Duration,
    /// How long a body is read for storing before it is streamed instead.
    pub store_deadline: Duration,
    /// The least rate and the total deadline of upstream bodies.
    pub body_pace: slipstream_node::body::Pace,
    /// Purge token.
    pub purge_token: Option<String>,
    /// Connection limits for clients.
    pub limits: Limits,
    /// Worker threads.
    pub workers: usize,
    /// How long a stopping node waits for requests in progress.
    pub drain: Duration,
    /// The access log file and its format, if any.
    pub access_log: Option<(std::path::PathBuf, slipstream_node::access_log::Format)>,
    /// Where the process id is written while running.
    pub pid_file: Option<std::path::PathBuf>,
    /// Ports CONNECT may reach.
    pub connect_ports: Vec<u16>,
    /// Certificate and key, if clients use TLS.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// `inflight_bytes` when not set: a quarter of the cache capacity, and at least one largest
/// storable object.
pub fn default_inflight_bytes(capacity_bytes: u64, max_object_bytes: u64) -> u64 {
    (capacity_bytes / 4).max(max_object_bytes.min(capacity_bytes))
}

/// The scheme and authority of an upstream URL (`http://` or `https://`).
fn upstream(
    field: &'static str,
    value: &str,
) -> Result<(http::uri::Scheme, http::uri::Authority), ConfigError> {
    let bad = |reason: &str| ConfigError::BadUrl {
        field,
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: http::Uri = value
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(bad("give an http:// or https:// URL")),
    }
    if uri.path() != "/" && !uri.path().is_empty() {
        return Err(bad("give the origin without a path"));
    }
    let authority = uri.authority().cloned().ok_or_else(|| bad("no host"))?;
    Ok((
        uri.scheme().cloned().unwrap_or(http::uri::Scheme::HTTP),
        authority,
    ))
}

/// The certificates of a PEM file.
fn certificates(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        field: "ca_file",
        reason: format!("{}: {reason}", path.display()),
    };
    let pem = std::fs::read(path).map_err(|e| invalid(e.to_string()))?;
    let certs = rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(e.to_string()))?;
    if certs.is_empty() {
        return Err(invalid("no PEM certificate found".into()));
    }
    Ok(certs)
}

/// One string or a list of strings.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

impl Settings {
    /// Where and how the proxy listens.
    pub fn listen(&self) -> slipstream_node::bootstrap::Listen {
        slipstream_node::bootstrap::Listen {
            addr: self.listen,
            tls: self.tls.clone(),
            limits: self.limits,
            drain: self.drain,
        }
    }
}

impl Config {
    /// Checks the config.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let schemed = self
            .origin
            .iter()
            .map(|o| upstream("origin", o))
            .collect::<Result<Vec<_>, _>>()?;
        let origin_scheme = schemed
            .first()
            .map_or(http::uri::Scheme::HTTP, |(s, _)| s.clone());
        if schemed.iter().any(|(s, _)| *s != origin_scheme) {
            return Err(ConfigError::Invalid {
                field: "origin",
                reason: "the origins of one site all use http:// or all https://".into(),
            });
        }
        let origins: Vec<http::uri::Authority> = schemed.into_iter().map(|(_, a)| a).collect();
        let origin = origins.first().cloned();
        let origin_directory = match &self.origin_directory {
            None => None,
            Some(_) if origin.is_none() => {
                return Err(ConfigError::Invalid {
                    field: "origin_directory",
                    reason: "a reverse proxy's: give `origin` too (the site's name, and the \
                             origins until the directory answers)"
                        .into(),
                })
            }
            Some(base) => {
                let uri: http::Uri = base
                    .parse()
                    .ok()
                    .filter(|u: &http::Uri| {
                        u.scheme_str() == Some("http") && u.authority().is_some()
                    })
                    .ok_or_else(|| ConfigError::Invalid {
                        field: "origin_directory",
                        reason: format!("`{base}` is not a cluster member's http:// base URL"),
                    })?;
                if self.origin_directory_interval_ms == 0 {
                    return Err(ConfigError::Invalid {
                        field: "origin_directory_interval_ms",
                        reason: "must be positive".into(),
                    });
                }
                Some((
                    uri,
                    Duration::from_millis(self.origin_directory_interval_ms),
                ))
            }
        };
        let ca_certs = match &self.ca_file {
            Some(path) => certificates(path)?,
            None => Vec::new(),
        };
        let schemed_parents = self
            .parents
            .iter()
            .map(|p| upstream("parents", p))
            .collect::<Result<Vec<_>, _>>()?;
        let https_parents = schemed_parents
            .iter()
            .filter(|(s, _)| *s == http::uri::Scheme::HTTPS)
            .map(|(_, a)| a.clone())
            .collect();
        let parents = schemed_parents.into_iter().map(|(_, a)| a).collect();
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(ConfigError::Invalid {
                field: "name",
                reason: "use letters, digits, '-', '_' or '.'".into(),
            });
        }
        let policy = |field: &'static str, value: &str| {
            value
                .parse::<SelectPolicy>()
                .map_err(|e| ConfigError::Invalid {
                    field,
                    reason: e.to_string(),
                })
        };
        let origin_policy = policy("origin_policy", &self.origin_policy)?;
        let parent_policy = policy("parent_policy", &self.parent_policy)?;
        let cache = if self.cache.enabled {
            let policy: Policy = self.cache.policy.parse()?;
            Some(crate::store::bounded_config(
                self.cache.capacity_bytes,
                policy,
            ))
        } else {
            None
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Invalid {
                    field: "tls_cert",
                    reason: "TLS needs both tls_cert and tls_key".into(),
                })
            }
        };
        if self.cache.min_object_bytes > self.cache.max_object_bytes {
            return Err(ConfigError::Invalid {
                field: "cache.min_object_bytes",
                reason: "larger than cache.max_object_bytes".into(),
            });
        }
        let ranges = |field: &'static str, list: &[String]| {
            list.iter()
                .map(|r| {
                    r.parse::<crate::access::Cidr>()
                        .map_err(|e| ConfigError::Invalid {
                            field,
                            reason: e.to_string(),
                        })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let access = crate::access::Access {
            clients: ranges("allow_clients", &self.allow_clients)?,
            destinations: ranges("allow_destinations", &self.allow_destinations)?,
            listener: self.listen,
            own: Vec::new(),
        };
        Ok(Settings {
            listen: self.listen,
            forward: self.forward || origin.is_none(),
            access: std::sync::Arc::new(access),
            origin,
            origins,
            origin_scheme,
            forwarded: self.forwarded,
            ca_certs,
            parents,
            https_parents,
            parent_retry: Duration::from_millis(self.parent_retry_ms),
            origin_policy,
            origin_directory,
            parent_policy,
            name: self.name.clone(),
            store_set_cookie: self.store_set_cookie,
            heuristic_with_credentials: self.heuristic_with_credentials,
            deception_armor: self.deception_armor,
            cache,
            min_object_bytes: self.cache.min_object_bytes,
            max_object_bytes: self.cache.max_object_bytes,
            chunk_bytes: self.cache.chunk_bytes.min(self.cache.max_object_bytes),
            max_collapsed_waiters: self.max_collapsed_waiters,
            inflight_bytes: match self.inflight_bytes {
                0 => default_inflight_bytes(self.cache.capacity_bytes, self.cache.max_object_bytes),
                n => n,
            },
            connect_timeout: Duration::from_millis(self.connect_timeout_ms.max(1)),
            upstream_timeout: Duration::from_millis(self.upstream_timeout_ms.max(1)),
            store_deadline: Duration::from_millis(self.store_deadline_ms.max(1)),
            body_pace: slipstream_node::body::Pace {
                idle: None,
                min_rate: (self.upstream_min_rate > 0).then(|| slipstream_node::body::MinRate {
                    bytes_per_second: self.upstream_min_rate,
                    window: Duration::from_millis(self.upstream_min_rate_window_ms.max(1)),
                }),
                total: (self.upstream_body_timeout_ms > 0)
                    .then(|| Duration::from_millis(self.upstream_body_timeout_ms)),
            },
            purge_token: self.purge_token.clone().filter(|t| !t.is_empty()),
            limits: Limits {
                max_header_bytes: self.max_header_bytes,
                max_connections: self.max_connections.max(1),
                max_connections_per_ip: self.max_connections_per_ip.max(1),
                ..Limits::default()
            },
            workers: self.workers,
            drain: Duration::from_millis(self.drain_timeout_ms),
            access_log: self.access_log.clone().map(|p| (p, self.access_log_format)),
            pid_file: self.pid_file.clone(),
            connect_ports: self.connect_ports.clone(),
            tls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_policies_are_named_and_a_bad_one_names_its_field() {
        let config = |origin_policy: &str, parent_policy: &str| Config {
            origin_policy: origin_policy.into(),
            parent_policy: parent_policy.into(),
            ..Config::default()
        };
        let s = config("refresh", "p2c").validate().expect("valid");
        assert_eq!(
            (s.origin_policy, s.parent_policy),
            (SelectPolicy::Refresh, SelectPolicy::P2c)
        );
        let s = Config::default().validate().expect("valid");
        assert_eq!(s.origin_policy, SelectPolicy::FailOver);
        for (c, field) in [
            (config("fastest", "failover"), "origin_policy"),
            (config("failover", "Refresh"), "parent_policy"),
        ] {
            let e = c.validate().expect_err("refused").to_string();
            assert!(
                e.starts_with(field) && e.contains("use failover, refresh or p2c"),
                "{e}"
            );
        }
    }

    #[test]
    fn production_defaults_bound_bodies_and_close_the_forward_proxy() {
        let s = Config::default().validate().expect("valid");
        assert_eq!(
            s.body_pace.min_rate,
            Some(slipstream_node::body::MinRate {
                bytes_per_second: 1024,
                window: Duration::from_secs(30),
            })
        );
        assert_eq!(s.body_pace.total, Some(Duration::from_secs(2 * 3600)));
        assert!(s.access.client_allowed("192.168.1.2".parse().expect("ip")));
        assert!(!s.access.client_allowed("203.0.113.9".parse().expect("ip")));
        assert!(s.access.destinations.is_empty());
        assert!(s.deception_armor && !s.heuristic_with_credentials);
        for (field, config) in [
            (
                "allow_clients",
                Config {
                    allow_clients: vec!["10.0.0.0/40".into()],
                    ..Config::default()
                },
            ),
            (
                "allow_destinations",
                Config {
                    allow_destinations: vec!["localhost".into()],
                    ..Config::default()
                },
            ),
        ] {
            let e = config.validate().expect_err("refused").to_string();
            assert!(e.starts_with(field), "{e}");
        }
    }
}
