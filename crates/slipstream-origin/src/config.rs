//! `slipstream serve` settings: the TOML file's shape (every field has a default) and the
//! validated form the server runs with.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use slipstream_cache::Policy;
use slipstream_http::listen::Limits;

/// The `serve` section of a node's TOML config.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Directory to serve. Required (here or on the command line).
    pub root: Option<PathBuf>,
    /// Address to listen on.
    #[serde(deserialize_with = "slipstream_node::config::listen")]
    pub listen: SocketAddr,
    /// The memory cache.
    pub cache: CacheConfig,
    /// A cached file is checked against the file system (size and modification time) when its
    /// entry is older than this, so a changed file is never served stale for longer.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub revalidate_ms: u64,
    /// The node's name, shown by its status page (by default the machine's host name).
    pub name: Option<String>,
    /// PEM certificate chain; with `tls_key`, serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for `tls_cert`.
    pub tls_key: Option<PathBuf>,
    /// Largest request head in bytes.
    #[serde(deserialize_with = "slipstream_units::de::bytes_usize")]
    pub max_header_bytes: usize,
    /// Time a client has to send a request head, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub header_read_timeout_ms: u64,
    /// A connection making no progress for this long is closed, in milliseconds.
    #[serde(deserialize_with = "slipstream_units::de::millis")]
    pub idle_timeout_ms: u64,
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections from one IP address at once; more are closed as they arrive.
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
    /// Serve hidden files and directories (`.env`, `.git/`); off by default, when they answer
    /// 404 (`.well-known/` is always served).
    pub serve_hidden: bool,
    /// A Cache-Control value sent with every file, e.g. `max-age=60` (none by default, which
    /// leaves caches to their heuristics).
    pub cache_control: Option<String>,
    /// CPU time every request costs on top of its own work, in microseconds, spent on the
    /// thread that serves it (0, the default: none). For experiments only: it makes this
    /// machine a slower server, as if each request took more instructions, so that a load
    /// generator on the same machine can saturate it. Unlike a CPU quota it is ordinary work,
    /// preempted like any other, so a thread at low priority (the prefetch listener at
    /// `SCHED_IDLE`) stays below demand. At most 100,000 (0.1 s).
    pub cpu_cost_us: u64,
}

/// The memory cache section.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Whether to cache at all (off serves every request from the file system).
    pub enabled: bool,
    /// Bytes of file data and headers the cache may hold.
    #[serde(deserialize_with = "slipstream_units::de::bytes")]
    pub capacity_bytes: u64,
    /// Policy name: `adaptive` (paper 002), `total`, `small`, `lru`, `sieve`, or LEVEL+ALGORITHM.
    #[serde(deserialize_with = "slipstream_node::config::checked::<slipstream_cache::Policy, _>")]
    pub policy: String,
    /// The paper's MAX_FILE_SIZE: larger files keep only this many bytes (adaptive) or none
    /// (small). Default: a quarter of the capacity, as in paper 002 §5.2.
    #[serde(default, deserialize_with = "slipstream_units::de::opt_bytes")]
    pub max_file_size_bytes: Option<u64>,
    /// Flush the free list of evicted buffers every this many requests (002 §4.2.3.4); 0 = off.
    pub free_list_flush_every: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            root: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            cache: CacheConfig::default(),
            revalidate_ms: 1000,
            name: None,
            tls_cert: None,
            tls_key: None,
            max_header_bytes: 16 * 1024,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
            workers: 0,
            drain_timeout_ms: 30_000,
            access_log: None,
            pid_file: None,
            access_log_format: slipstream_node::access_log::Format::Combined,
            cache_control: None,
            serve_hidden: false,
            cpu_cost_us: 0,
        }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            capacity_bytes: 64 << 20,
            policy: "adaptive".into(),
            max_file_size_bytes: None,
            free_list_flush_every: 100,
        }
    }
}

/// A config that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No root directory.
    #[error("no directory to serve: give DIR on the command line or `root` in the config")]
    NoRoot,
    /// The root is not a readable directory.
    #[error("cannot serve {path}: {reason}")]
    BadRoot {
        /// The root given.
        path: String,
        /// Why it cannot be served.
        reason: String,
    },
    /// Unknown policy name.
    #[error(transparent)]
    Policy(#[from] slipstream_cache::ParsePolicyError),
    /// Only one of the two TLS files given.
    #[error("TLS needs both a certificate and a key (tls_cert and tls_key)")]
    HalfTls,
    /// A value out of range.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

/// The largest [`Config::cpu_cost_us`]: a tenth of a second a request.
const MAX_CPU_COST_US: u64 = 100_000;

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Canonical root directory.
    pub root: PathBuf,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The cache, if enabled.
    pub cache: Option<slipstream_cache::Config>,
    /// See [`Config::revalidate_ms`].
    pub revalidate: Duration,
    /// Certificate and key, if serving TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The node's name.
    pub name: String,
    /// Connection limits.
    pub limits: Limits,
    /// Worker threads (0 = one per core).
    pub workers: usize,
    /// How long a stopping node waits for requests in progress.
    pub drain: Duration,
    /// The access log file and its format, if any.
    pub access_log: Option<(std::path::PathBuf, slipstream_node::access_log::Format)>,
    /// Where the process id is written while running.
    pub pid_file: Option<std::path::PathBuf>,
    /// Cache-Control sent with every file.
    pub cache_control: Option<http::HeaderValue>,
    /// Whether hidden files are served.
    pub serve_hidden: bool,
    /// See [`Config::cpu_cost_us`].
    pub cpu_cost: Duration,
}

impl Settings {
    /// Where and how the server listens.
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
    /// Checks the config and resolves the root directory.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let root = self.root.as_ref().ok_or(ConfigError::NoRoot)?;
        let bad_root = |reason: String| ConfigError::BadRoot {
            path: root.display().to_string(),
            reason,
        };
        let canonical = root.canonicalize().map_err(|e| bad_root(e.to_string()))?;
        if !canonical.is_dir() {
            return Err(bad_root("not a directory".into()));
        }
        let cache = if self.cache.enabled {
            let policy: Policy = self.cache.policy.parse()?;
            if self.cache.capacity_bytes == 0 {
                return Err(ConfigError::Invalid {
                    field: "cache.capacity_bytes",
                    reason: "must be positive (or set cache.enabled = false)".into(),
                });
            }
            let mut c = slipstream_cache::Config::new(self.cache.capacity_bytes, policy);
            c.max_file_size = self.cache.max_file_size_bytes;
            c.free_list_flush_every = self.cache.free_list_flush_every;
            Some(c)
        } else {
            None
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => return Err(ConfigError::HalfTls),
        };
        let cache_control = match &self.cache_control {
            Some(v) => Some(
                http::HeaderValue::from_str(v).map_err(|_| ConfigError::Invalid {
                    field: "cache_control",
                    reason: format!("`{v}` is not a valid header value"),
                })?,
            ),
            None => None,
        };
        if self.max_header_bytes < 1024 {
            return Err(ConfigError::Invalid {
                field: "max_header_bytes",
                reason: "must be at least 1024".into(),
            });
        }
        if self.cpu_cost_us > MAX_CPU_COST_US {
            return Err(ConfigError::Invalid {
                field: "cpu_cost_us",
                reason: format!(
                    "{} µs is more than the most a request may be made to cost, {MAX_CPU_COST_US} µs",
                    self.cpu_cost_us
                ),
            });
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Invalid {
                field: "max_connections",
                reason: "must be positive".into(),
            });
        }
        Ok(Settings {
            root: canonical,
            listen: self.listen,
            cache,
            revalidate: Duration::from_millis(self.revalidate_ms),
            tls,
            name: self.name.clone().unwrap_or_else(host_name),
            limits: Limits {
                max_header_bytes: self.max_header_bytes,
                header_read_timeout: Duration::from_millis(self.header_read_timeout_ms.max(1)),
                idle_timeout: Duration::from_millis(self.idle_timeout_ms.max(1)),
                max_connections: self.max_connections,
                max_connections_per_ip: self.max_connections_per_ip.max(1),
                ..Limits::default()
            },
            workers: self.workers,
            drain: Duration::from_millis(self.drain_timeout_ms),
            access_log: self.access_log.clone().map(|p| (p, self.access_log_format)),
            pid_file: self.pid_file.clone(),
            cache_control,
            serve_hidden: self.serve_hidden,
            cpu_cost: Duration::from_micros(self.cpu_cost_us),
        })
    }
}

/// The machine's host name, or `slipstream` when it cannot be read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "slipstream".into())
}
