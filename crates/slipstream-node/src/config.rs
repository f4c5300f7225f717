//! One TOML file per node. Its tables belong to capabilities (`[serve]`, `[proxy]`, and later
//! `[cluster]`, `[prefetch]`, `[coop]`); each command reads the tables it runs and leaves the
//! others alone, so one file holding several tables is valid for every command. A table's
//! fields are the capability's own (unknown fields are refused, with the line).
//!
//! Command-line flags override any field through one mechanism, [`Overrides`]: a named flag
//! (`--cache-size 64MiB`) and the generic `--set proxy.cache.policy=sieve` both become a
//! (dotted key, value) pair applied to the table before it is read, so a flag is checked exactly
//! as the same value in the file would be.

use std::path::{Path, PathBuf};

use serde::de::{DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::Deserializer as _;

/// The tables a node's file may have.
pub const TABLES: &[&str] = &["serve", "proxy", "cluster", "prefetch", "coop"];

/// Why a config cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a field is wrong; the message has the line.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, and where.
        message: String,
    },
    /// An override (a flag or `--set`) does not fit the field it sets.
    #[error("{key}: {message}")]
    Override {
        /// The dotted key.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// A node's config file (or none: every table then has its defaults).
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    path: Option<PathBuf>,
    text: String,
    tables: toml::Table,
}

impl ConfigFile {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        ConfigFile::parse(Some(path.to_owned()), text)
    }

    /// `load` if a path is given, else no file.
    pub fn load_opt(path: Option<&Path>) -> Result<ConfigFile, ConfigError> {
        path.map_or_else(|| Ok(ConfigFile::default()), ConfigFile::load)
    }

    /// Checks `text` (from `path`, for messages): valid TOML, and only known tables.
    pub fn parse(path: Option<PathBuf>, text: String) -> Result<ConfigFile, ConfigError> {
        let label = path
            .as_ref()
            .map_or_else(|| "config".to_owned(), |p| p.display().to_string());
        let invalid = |message: String| ConfigError::Invalid {
            path: label.clone(),
            message,
        };
        let tables: toml::Table = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        for (key, value) in &tables {
            if !TABLES.contains(&key.as_str()) || !value.is_table() {
                return Err(invalid(format!(
                    "unknown {} `{key}`: a node's file has the tables {}",
                    if value.is_table() { "table" } else { "key" },
                    TABLES
                        .iter()
                        .map(|t| format!("[{t}]"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        Ok(ConfigFile { path, text, tables })
    }

    /// The tables the file has, in the order of [`TABLES`].
    pub fn tables(&self) -> Vec<&'static str> {
        TABLES
            .iter()
            .copied()
            .filter(|t| self.tables.contains_key(*t))
            .collect()
    }

    fn label(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| "config".to_owned(), |p| p.display().to_string())
    }

    /// The table `name` (defaults where the file has none), with the overrides for it applied.
    pub fn section<T: DeserializeOwned + Default>(
        &self,
        name: &str,
        overrides: &Overrides,
    ) -> Result<T, ConfigError> {
        // First the file alone, read from its text so that errors name the line.
        let from_file: T = if self.tables.contains_key(name) {
            toml::Deserializer::new(&self.text)
                .deserialize_map(Pick::<T> {
                    name,
                    _t: std::marker::PhantomData,
                })
                .map_err(|e| ConfigError::Invalid {
                    path: self.label(),
                    message: e.to_string(),
                })?
                .unwrap_or_default()
        } else {
            T::default()
        };
        let mine: Vec<&Override> = overrides
            .0
            .iter()
            .filter(|o| o.key.split('.').next() == Some(name))
            .collect();
        if mine.is_empty() {
            return Ok(from_file);
        }
        // Then the overrides, on the file's table.
        let mut table = self
            .tables
            .get(name)
            .cloned()
            .unwrap_or_else(|| toml::Value::Table(toml::Table::new()));
        for o in &mine {
            let override_error = |message: String| ConfigError::Override {
                key: o.key.clone(),
                message,
            };
            // `Overrides::set` takes any key, so `proxy` alone must be refused, not sliced.
            let field = o.key[name.len()..]
                .strip_prefix('.')
                .ok_or_else(|| override_error(format!("names the table [{name}], not a field")))?;
            set(&mut table, field, o.value.clone()).map_err(override_error)?;
        }
        table
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Override {
                key: mine
                    .iter()
                    .map(|o| o.key.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                message: e.message().trim().to_owned(),
            })
    }
}

/// Reads one top-level table of a file and skips the others.
struct Pick<'n, T> {
    name: &'n str,
    _t: std::marker::PhantomData<T>,
}

impl<'de, T: DeserializeOwned> Visitor<'de> for Pick<'_, T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a node's config tables")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.name {
                found = Some(map.next_value::<T>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Sets `value` at the dotted `key` inside `table`, making tables on the way.
fn set(table: &mut toml::Value, key: &str, value: toml::Value) -> Result<(), String> {
    let mut at = table;
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        if part.is_empty() {
            return Err("empty key segment".into());
        }
        let toml::Value::Table(t) = at else {
            return Err(format!("`{part}` is inside a value that is not a table"));
        };
        if parts.peek().is_none() {
            t.insert(part.to_owned(), value);
            return Ok(());
        }
        at = t
            .entry(part.to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    }
    Err("no field named".into())
}

/// Parses a listening address: `127.0.0.1:8080`, `[::1]:8080`, `:8080` (every IPv4
/// interface) or a name such as `localhost:8080` (its first address).
pub fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let s = s.trim();
    if let Some(port) = s.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("`{s}`: `{port}` is not a port"))?;
        return Ok(std::net::SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    if !s.contains(':') {
        return Err(format!(
            "`{s}` has no port: write HOST:PORT, e.g. 127.0.0.1:8080 or :8080"
        ));
    }
    s.to_socket_addrs()
        .map_err(|e| format!("`{s}` is not an address to listen on: {e}"))?
        .next()
        .ok_or_else(|| format!("`{s}` resolves to no address"))
}

/// serde: a listening address as [`parse_listen`] reads it.
pub fn listen<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::net::SocketAddr, D::Error> {
    let s: String = serde::Deserialize::deserialize(d)?;
    parse_listen(&s).map_err(serde::de::Error::custom)
}

/// serde: a string field that must parse as `T` (a policy name, say), so that a bad value is
/// reported with its line like any other field error. The string is kept as written.
pub fn checked<'de, T, D>(d: D) -> Result<String, D::Error>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
    D: serde::Deserializer<'de>,
{
    let s: String = serde::Deserialize::deserialize(d)?;
    s.parse::<T>().map_err(serde::de::Error::custom)?;
    Ok(s)
}

/// One override: a dotted key (`proxy.cache.capacity_bytes`) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    /// `TABLE.FIELD[.FIELD...]`.
    pub key: String,
    /// The value, as the file would hold it.
    pub value: toml::Value,
}

/// Parses `TABLE.FIELD=VALUE` (the `--set` flag). The value is read as a TOML value (`8`,
/// `true`, `["a", "b"]`, `"text"`) where it is one, and as a string otherwise (`64MiB`,
/// `max-age=60`).
pub fn parse_override(s: &str) -> Result<Override, String> {
    let (key, raw) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not TABLE.FIELD=VALUE"))?;
    let key = key.trim();
    let table = key.split('.').next().unwrap_or_default();
    if !TABLES.contains(&table) || !key.contains('.') {
        return Err(format!(
            "`{key}` does not name a field of a table ({})",
            TABLES.join(", ")
        ));
    }
    let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()));
    Ok(Override {
        key: key.to_owned(),
        value,
    })
}

/// Overrides from the command line, applied in order (a later one wins).
#[derive(Debug, Clone, Default)]
pub struct Overrides(Vec<Override>);

impl Overrides {
    /// Sets `key` to `value`.
    pub fn set(&mut self, key: &str, value: impl Into<toml::Value>) -> &mut Self {
        self.0.push(Override {
            key: key.to_owned(),
            value: value.into(),
        });
        self
    }

    /// Sets `key` to `value` if there is one.
    pub fn set_opt<V: Into<toml::Value>>(&mut self, key: &str, value: Option<V>) -> &mut Self {
        if let Some(v) = value {
            self.set(key, v);
        }
        self
    }

    /// Adds parsed `--set` overrides.
    pub fn extend(&mut self, more: impl IntoIterator<Item = Override>) -> &mut Self {
        self.0.extend(more);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Proxy {
        name: String,
        #[serde(deserialize_with = "slipstream_units_free_bytes")]
        size: u64,
        cache: Cache,
    }

    #[derive(Debug, Default, serde::Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Cache {
        policy: String,
    }

    fn slipstream_units_free_bytes<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<u64, D::Error> {
        serde::Deserialize::deserialize(d)
    }

    fn file(text: &str) -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse(Some("node.toml".into()), text.to_owned())
    }

    #[test]
    fn each_command_reads_its_table_and_ignores_the_others() {
        let f = file("[serve]\nroot = \"/srv\"\n\n[proxy]\nname = \"edge\"\n[proxy.cache]\npolicy = \"lru\"\n")
            .expect("valid");
        let p: Proxy = f.section("proxy", &Overrides::default()).expect("proxy");
        assert_eq!(p.name, "edge");
        assert_eq!(p.cache.policy, "lru");
        let none: Proxy = ConfigFile::default()
            .section("proxy", &Overrides::default())
            .expect("defaults");
        assert_eq!(none, Proxy::default());
    }

    #[test]
    fn unknown_tables_and_fields_are_refused_with_the_line() {
        let e = file("[prxy]\nname = \"x\"").unwrap_err().to_string();
        assert!(e.contains("unknown table `prxy`"), "{e}");
        let f = file("[proxy]\nname = \"x\"\nnmae = \"y\"\n").expect("valid toml");
        let e = f
            .section::<Proxy>("proxy", &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node.toml") && e.contains("line 3") && e.contains("nmae"),
            "{e}"
        );
    }

    #[test]
    fn overrides_reach_any_field_and_are_checked_like_the_file() {
        let f = file("[proxy]\nname = \"edge\"\nsize = 1\n").expect("valid");
        let mut o = Overrides::default();
        o.extend([
            parse_override("proxy.cache.policy=sieve").expect("parse"),
            parse_override("proxy.size=42").expect("parse"),
        ]);
        let p: Proxy = f.section("proxy", &o).expect("overridden");
        assert_eq!(
            (p.name.as_str(), p.size, p.cache.policy.as_str()),
            ("edge", 42, "sieve")
        );
        let mut bad = Overrides::default();
        bad.set("proxy.size", "lots");
        let e = f.section::<Proxy>("proxy", &bad).unwrap_err().to_string();
        assert!(e.starts_with("proxy.size"), "{e}");
        let mut unknown = Overrides::default();
        unknown.extend([parse_override("proxy.nmae=x").expect("parse")]);
        assert!(f.section::<Proxy>("proxy", &unknown).is_err());
    }

    #[test]
    fn an_override_naming_only_a_table_is_an_error() {
        // Found by tests/fuzz.rs: this used to panic slicing past the key's end.
        let mut o = Overrides::default();
        o.set("proxy", 1);
        let e = ConfigFile::default()
            .section::<Proxy>("proxy", &o)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("proxy: names the table [proxy]"), "{e}");
    }

    #[test]
    fn listen_addresses_take_the_forms_people_write() {
        assert_eq!(parse_listen(":8080"), Ok(([0, 0, 0, 0], 8080).into()));
        assert_eq!(
            parse_listen("127.0.0.1:80"),
            Ok(([127, 0, 0, 1], 80).into())
        );
        assert!(parse_listen("localhost:8080").is_ok_and(|a| a.ip().is_loopback()));
        assert!(parse_listen("localhost").unwrap_err().contains("no port"));
        assert!(parse_listen(":http").is_err());
    }

    #[test]
    fn override_values_are_toml_where_they_parse_and_strings_otherwise() {
        let v = |s: &str| parse_override(s).expect("parse").value;
        assert_eq!(v("proxy.workers=2"), toml::Value::Integer(2));
        assert_eq!(
            v("serve.cache_control=max-age=60"),
            toml::Value::String("max-age=60".into())
        );
        assert!(v("proxy.parents=[\"http://a\", \"http://b\"]").is_array());
        assert!(parse_override("nonsense").is_err());
        assert!(parse_override("listen=1").is_err());
    }
}
