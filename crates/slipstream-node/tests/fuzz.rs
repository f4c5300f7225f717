//! Fuzz targets for a node's config: the file (any text, and valid tables with mutated fields),
//! reading one table into a capability's struct, `--set` overrides and listening addresses.
//! Errors must name the file and a line (or the override's key); nothing panics.

#[path = "../../../tests/fuzz_support.rs"]
mod support;

use proptest::prelude::*;
use slipstream_node::config::{self, ConfigError, ConfigFile, Overrides};
use support::fuzz;

/// A capability's table, as the proxy's and origin's are: units through the shared helpers,
/// a nested table, unknown fields refused.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[allow(dead_code)] // read only to check that reading works
struct Section {
    name: String,
    #[serde(deserialize_with = "slipstream_units_bytes")]
    size: u64,
    workers: u32,
    parents: Vec<String>,
    cache: Cache,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[allow(dead_code)]
struct Cache {
    policy: String,
    enabled: bool,
}

fn slipstream_units_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    serde::Deserialize::deserialize(d)
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\"edge\"".to_owned()),
        (-3i64..100_000).prop_map(|v| v.to_string()),
        Just("true".to_owned()),
        Just("[\"http://a\", \"http://b\"]".to_owned()),
        Just("{ policy = \"lru\" }".to_owned()),
        "\"[ -~&&[^\"\\\\]]{0,8}\"",
        "[ -~]{0,8}",
    ]
}

fn config_text() -> impl Strategy<Value = String> {
    let table = prop_oneof![
        Just("serve"),
        Just("proxy"),
        Just("cluster"),
        Just("prefetch"),
        Just("coop"),
        Just("proxy.cache"),
        Just("prxy"),
        Just(""),
    ];
    let key = prop_oneof![
        Just("name"),
        Just("size"),
        Just("workers"),
        Just("parents"),
        Just("cache"),
        Just("policy"),
        Just("enabled"),
        Just("nmae"),
        Just("cache.policy"),
    ];
    let entry = (key, value()).prop_map(|(k, v)| format!("{k} = {v}\n"));
    let section = (table, proptest::collection::vec(entry, 0..5)).prop_map(|(t, e)| {
        if t.is_empty() {
            e.concat()
        } else {
            format!("[{t}]\n{}", e.concat())
        }
    });
    prop_oneof![
        4 => proptest::collection::vec(section, 0..4).prop_map(|s| s.concat()),
        1 => ".{0,120}",
    ]
}

fn override_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ("(proxy|serve|coop|nope)\\.(name|size|workers|parents|cache\\.policy|cache\\.enabled|)(\\.x)?", value())
            .prop_map(|(k, v)| format!("{k}={v}")),
        ".{0,30}",
    ]
}

#[test]
fn config_files_and_overrides() {
    fuzz(
        "config_files_and_overrides",
        2_000,
        (
            config_text(),
            proptest::collection::vec(override_text(), 0..3),
        ),
        |(text, sets)| {
            let lines = text.lines().count().max(1);
            let file = match ConfigFile::parse(Some("node.toml".into()), text.clone()) {
                Ok(f) => f,
                Err(ConfigError::Invalid { path, message }) => {
                    prop_assert_eq!(path, "node.toml");
                    prop_assert!(!message.is_empty());
                    return Ok(());
                }
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            };
            let mut overrides = Overrides::default();
            for s in &sets {
                match config::parse_override(s) {
                    Ok(o) => {
                        prop_assert!(
                            s.starts_with(o.key.as_str())
                                || s.trim_start().starts_with(o.key.as_str())
                        );
                        overrides.extend([o]);
                    }
                    Err(e) => prop_assert!(!e.is_empty()),
                }
            }
            for table in ["serve", "proxy"] {
                match file.section::<Section>(table, &overrides) {
                    Ok(_) => {}
                    Err(ConfigError::Invalid { path, message }) => {
                        prop_assert_eq!(path, "node.toml");
                        // A field error in the file names its line.
                        let line = message
                            .split("line ")
                            .nth(1)
                            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                            .and_then(|n| n.parse::<usize>().ok());
                        prop_assert!(line.is_some_and(|l| l >= 1 && l <= lines), "{message}");
                    }
                    Err(ConfigError::Override { key, .. }) => {
                        prop_assert!(key.split(", ").all(|k| k.starts_with(table)), "{key}");
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
                }
            }
            Ok(())
        },
    );
}

#[test]
fn programmatic_overrides_with_any_key() {
    // Flags set keys in code; a key that names only a table must be an error, not a panic.
    fuzz(
        "programmatic_overrides_with_any_key",
        2_000,
        ("(proxy|serve)(\\.[a-z]{0,6}){0,3}\\.?", value()),
        |(key, v)| {
            let file = ConfigFile::parse(None, "[proxy]\nname = \"x\"\n".into()).expect("valid");
            let mut o = Overrides::default();
            o.set(&key, v);
            let table = key.split('.').next().unwrap_or_default().to_owned();
            let other = if table == "proxy" { "serve" } else { "proxy" };
            let mine = file.section::<Section>(&table, &o);
            // A key naming no field of its table is refused, as an override error naming it.
            if key == table || key.ends_with('.') {
                prop_assert!(
                    matches!(&mine, Err(ConfigError::Override { key: k, .. }) if k.contains(key.as_str())),
                    "{key}: {mine:?}"
                );
            }
            // Another table's overrides never touch this one.
            prop_assert!(
                file.section::<Section>(other, &Overrides::default())
                    .is_ok()
                    == file.section::<Section>(other, &o).is_ok()
            );
            Ok(())
        },
    );
}

#[test]
fn listen_addresses() {
    // Only forms that need no name lookup: IP literals, `:PORT`, and names with a bad port.
    fuzz(
        "listen_addresses",
        5_000,
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>())
                .prop_map(|(ip, p)| format!("{}.{}.{}.{}:{p}", ip[0], ip[1], ip[2], ip[3])),
            any::<u16>().prop_map(|p| format!(":{p}")),
            "[ :]{0,2}[0-9]{0,7}",
            (any::<[u16; 8]>(), any::<u16>())
                .prop_map(|(ip, p)| format!("[{}]:{p}", std::net::Ipv6Addr::from(ip))),
            "[a-z.]{0,8}:[a-z]{1,5}",
            "[a-z.]{0,8}",
        ],
        |s| {
            match config::parse_listen(&s) {
                Ok(addr) => {
                    if let Some(port) = s.trim().strip_prefix(':') {
                        prop_assert_eq!(Ok(addr.port()), port.parse::<u16>());
                    }
                }
                Err(e) => prop_assert!(e.contains(s.trim()), "{e}"),
            }
            Ok(())
        },
    );
}
