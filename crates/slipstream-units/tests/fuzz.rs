//! Fuzz targets for the unit parsers: sizes, durations and link rates as people write them in
//! flags, configs and scenarios, and the serde helpers configs use. Arbitrary strings must get a
//! value or an error (never a panic, never a silently clamped value), and numbers written with a
//! unit must read back exactly.

#[path = "../../../tests/fuzz_support.rs"]
mod support;

use std::time::Duration;

use proptest::prelude::*;
use support::fuzz;

/// Strings near the grammar: a number, an optional space, a unit or something like one.
fn near_unit() -> impl Strategy<Value = String> {
    prop_oneof![
        ".*",
        "[0-9]{15,25}(G|GB|Gb|T|TB|h)?",
        " ?[0-9.]{0,25} ?(B|b|K|k|M|m|G|g|T|KiB|MiB|GiB|TiB|Ki|kB|KB|MB|GB|TB|ns|us|µs|ms|s|min|h|kb|Mb|Gb|bps|Mbps|[a-zA-Zµ]{0,3}) ?",
    ]
}

#[test]
fn sizes_durations_and_rates_from_any_text() {
    fuzz(
        "sizes_durations_and_rates_from_any_text",
        5_000,
        near_unit(),
        |s| {
            // A value that does not fit is an error, not u64::MAX.
            if let Ok(b) = slipstream_units::bytes(&s) {
                prop_assert!(b < u64::MAX, "{s:?} -> {b}");
            }
            if let Ok(b) = slipstream_units::bits_per_second(&s) {
                prop_assert!(b > 0 && b < u64::MAX, "{s:?} -> {b}");
            }
            if let Ok(d) = slipstream_units::duration(&s) {
                prop_assert!(d < Duration::MAX, "{s:?}");
            }
            for e in [
                slipstream_units::bytes(&s).err(),
                slipstream_units::duration(&s).err(),
                slipstream_units::bits_per_second(&s).err(),
            ]
            .into_iter()
            .flatten()
            {
                prop_assert!(e.contains('`'), "the message quotes the input: {e}");
            }
            Ok(())
        },
    );
}

#[test]
fn whole_numbers_with_units_read_back_exactly() {
    let units = prop_oneof![
        Just(("", 1u64)),
        Just(("B", 1)),
        Just(("K", 1 << 10)),
        Just(("KiB", 1 << 10)),
        Just(("M", 1 << 20)),
        Just(("MiB", 1 << 20)),
        Just(("G", 1 << 30)),
        Just(("GiB", 1 << 30)),
        Just(("kB", 1_000)),
        Just(("KB", 1_000)),
        Just(("MB", 1_000_000)),
        Just(("GB", 1_000_000_000)),
    ];
    fuzz(
        "whole_numbers_with_units_read_back_exactly",
        5_000,
        (0u64..1 << 22, units, " ?"),
        |(n, (unit, mult), space)| {
            let text = format!("{n}{space}{unit}");
            prop_assert_eq!(slipstream_units::bytes(&text), Ok(n * mult), "{}", text);
            for (unit, per) in [("ms", 1_000_000u64), ("s", 1_000_000_000), ("ns", 1)] {
                let text = format!("{n}{space}{unit}");
                prop_assert_eq!(
                    slipstream_units::duration(&text),
                    Ok(Duration::from_nanos(n * per)),
                    "{}",
                    text
                );
            }
            Ok(())
        },
    );
}

#[test]
fn human_sizes_read_back_within_their_rounding() {
    fuzz(
        "human_sizes_read_back_within_their_rounding",
        5_000,
        prop_oneof![0u64..4096, any::<u64>().prop_map(|b| b >> (b % 64))],
        |b| {
            let shown = slipstream_units::human_bytes(b);
            let back = slipstream_units::bytes(&shown);
            prop_assert!(back.is_ok(), "{b} shown as {shown:?}: {back:?}");
            let back = back.unwrap_or_default() as f64;
            // One decimal of a unit at least 1024 times the next: 5 % at worst.
            prop_assert!(
                (back - b as f64).abs() <= 0.05 * b as f64,
                "{b} -> {shown} -> {back}"
            );
            Ok(())
        },
    );
}

#[derive(Debug, serde::Deserialize)]
struct Fields {
    #[serde(default, deserialize_with = "slipstream_units::de::millis")]
    timeout_ms: u64,
    #[serde(default, deserialize_with = "slipstream_units::de::bytes")]
    size_bytes: u64,
    #[serde(default, deserialize_with = "slipstream_units::de::bytes_usize")]
    chunk_bytes: usize,
}

#[test]
fn config_fields_from_any_toml_value() {
    let value = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        near_unit().prop_map(|s| format!("{s:?}")),
        Just("1.5".to_owned()),
        Just("true".to_owned()),
        Just("[1]".to_owned()),
    ];
    fuzz(
        "config_fields_from_any_toml_value",
        3_000,
        (
            prop_oneof![Just("timeout_ms"), Just("size_bytes"), Just("chunk_bytes")],
            value,
        ),
        |(field, value)| {
            let text = format!("{field} = {value}");
            match toml::from_str::<Fields>(&text) {
                Ok(f) => {
                    if let Ok(n) = value.parse::<i64>() {
                        let got = match field {
                            "timeout_ms" => f.timeout_ms,
                            "size_bytes" => f.size_bytes,
                            _ => f.chunk_bytes as u64,
                        };
                        prop_assert_eq!(Some(got), u64::try_from(n).ok());
                    }
                }
                Err(e) => prop_assert!(e.to_string().contains("line 1"), "{e}"),
            }
            Ok(())
        },
    );
}
