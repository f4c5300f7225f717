//! Fuzz targets for what a cluster node reads from others: the gossip envelope (any datagram,
//! and every alteration of a sealed one), the chitchat message check behind it, and a page's
//! replica block as the agent parses it. Nothing panics; nothing but an intact sealed message
//! opens; a block round-trips.

#[path = "../../../tests/fuzz_support.rs"]
mod support;

use std::collections::BTreeMap;

use proptest::prelude::*;
use slipstream_replica::block;
use slipstream_replica::seal::{check_message, Replay, Sealer, OVERHEAD, PROTOCOL, WINDOW_MS};
use support::fuzz;

const NOW: u64 = 1_800_000_000_000;

fn sealer() -> Sealer {
    Sealer::new(b"fuzz-secret-0123456789", "slipstream", 512)
}

/// A chitchat message as a member sends it: magic, version, a type, a digest count and bytes.
fn message() -> impl Strategy<Value = Vec<u8>> {
    (
        0u8..5,
        any::<u16>(),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(kind, count, rest)| {
            let mut m = vec![0x53, 0xb0, PROTOCOL as u8, kind];
            m.extend_from_slice(&count.to_le_bytes());
            m.extend(rest);
            m
        })
}

#[test]
fn any_datagram_is_refused_without_panicking() {
    let sealer = sealer();
    let replay = std::cell::RefCell::new(Replay::default());
    fuzz(
        "any_datagram_is_refused_without_panicking",
        2_000,
        proptest::collection::vec(any::<u8>(), 0..2_000),
        |mut bytes| {
            // Random bytes never carry a valid tag (2^-128).
            prop_assert!(sealer
                .open(&mut bytes, NOW, &mut replay.borrow_mut())
                .is_err());
            Ok(())
        },
    );
}

#[test]
fn every_alteration_of_a_sealed_message_is_refused() {
    let sealer = sealer();
    fuzz(
        "every_alteration_of_a_sealed_message_is_refused",
        2_000,
        (
            message(),
            any::<[u8; 12]>(),
            any::<prop::sample::Index>(),
            1u8..=255,
            0usize..64,
        ),
        |(plain, nonce, at, flip, cut)| {
            let mut sealed = Vec::new();
            sealer.seal(&plain, NOW, nonce, &mut sealed);
            prop_assert_eq!(sealed.len(), plain.len() + OVERHEAD);
            // Intact, within the window: it opens to the message when chitchat may have it.
            let opened = sealer
                .open(
                    &mut sealed.clone(),
                    NOW + WINDOW_MS / 2,
                    &mut Replay::default(),
                )
                .map(<[u8]>::to_vec);
            prop_assert_eq!(opened.is_ok(), check_message(&plain, 512).is_ok());
            if let Ok(opened) = opened {
                prop_assert_eq!(opened, plain.clone());
            }
            // One byte changed, or the datagram cut short: refused.
            let mut altered = sealed.clone();
            let i = at.index(altered.len());
            altered[i] ^= flip;
            prop_assert!(sealer
                .open(&mut altered, NOW, &mut Replay::default())
                .is_err());
            let mut short = sealed[..sealed.len().saturating_sub(cut + 1)].to_vec();
            prop_assert!(sealer
                .open(&mut short, NOW, &mut Replay::default())
                .is_err());
            Ok(())
        },
    );
}

#[test]
fn the_message_check_never_panics() {
    fuzz(
        "the_message_check_never_panics",
        5_000,
        proptest::collection::vec(any::<u8>(), 0..64),
        |bytes| {
            let _ = check_message(&bytes, 512);
            Ok(())
        },
    );
}

/// JSON text shaped like a replica block, with mutations.
fn block_text() -> impl Strategy<Value = String> {
    let item = prop_oneof![
        (0u64..5).prop_map(|i| i.to_string()),
        "\"[a-z:/.*0-9]{0,16}\"",
        Just("null".to_owned()),
        Just("-1".to_owned()),
        Just("1e99".to_owned()),
    ];
    let list = proptest::collection::vec(item, 0..4).prop_map(|v| format!("[{}]", v.join(",")));
    let urls = proptest::collection::vec(("\"/[a-z*]{0,6}\"", list), 0..5).prop_map(|kv| {
        let body: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
        format!("{{{}}}", body.join(","))
    });
    let servers = proptest::collection::vec("\"http://[a-z]{1,4}(/_slipstream/replicas)?\"", 0..3)
        .prop_map(|v| format!("[{}]", v.join(",")));
    prop_oneof![
        (servers.clone(), urls)
            .prop_map(|(s, u)| format!("{{\"v\":2,\"config\":{{}},\"servers\":{s},\"urls\":{u}}}")),
        (servers, "[A-Za-z0-9+/=]{0,40}")
            .prop_map(|(s, z)| format!("{{\"v\":3,\"servers\":{s},\"urls_z\":\"{z}\"}}")),
        "[ -~]{0,60}",
    ]
}

#[test]
fn the_replica_block_parser_never_panics() {
    fuzz(
        "the_replica_block_parser_never_panics",
        3_000,
        (block_text(), "/[a-z*]{0,8}"),
        |(text, url)| {
            if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
                if let Some(entries) = block::from_json(&value) {
                    let _ = block::lookup(&entries, &url);
                }
            }
            Ok(())
        },
    );
}

#[test]
fn a_block_round_trips() {
    let entries = proptest::collection::btree_map(
        "/[a-z]{1,6}(/\\*)?",
        proptest::collection::vec("http://[a-z]{1,3}(:8[0-9])?(/_slipstream/replicas)?", 1..4),
        0..40,
    )
    .prop_map(|m: BTreeMap<String, Vec<String>>| {
        // A physical URL ends with its key, as the directory's do.
        m.into_iter()
            .map(|(k, bases)| {
                let list = bases.into_iter().map(|b| format!("{b}{k}")).collect();
                (k, list)
            })
            .collect::<BTreeMap<String, Vec<String>>>()
    });
    fuzz("a_block_round_trips", 500, entries, |entries| {
        let json = block::to_json(entries.clone(), &serde_json::Map::new());
        let text = json.to_string();
        let back: serde_json::Value = serde_json::from_str(&text).expect("its own JSON");
        prop_assert_eq!(block::from_json(&back), Some(entries));
        Ok(())
    });
}
