//! Membership that heals: a node keeps the addresses of the peers it is connected to in its
//! data directory (`peers`, one multiaddr ending in `/p2p/<peer id>` a line) and dials them at
//! its next start, besides any bootstrap peer, so a restarted node (the first gateway, which
//! has no bootstrap peer, included) finds its way back within seconds. While it has no peer at
//! all it dials them again every period.
//!
//! The file is advice: a line that does not parse is skipped with a warning naming it, and a
//! missing or unreadable file means no saved peers.

use std::path::Path;
use std::time::Duration;

use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};

use crate::net::Client;

/// The peers file in a node's data directory.
pub const PEERS_FILE: &str = "peers";
/// Addresses kept in it at most (the first ones, in the order the swarm gave them).
pub const MAX_SAVED: usize = 64;
/// How often the file is brought up to date (and, with no peer, the saved ones dialled).
pub const PERIOD: Duration = Duration::from_secs(2);
/// How long one dial of a saved address may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(3);

/// The saved addresses in `dir`, without `me`'s own, each once, at most [`MAX_SAVED`].
pub fn load(dir: &Path, me: &PeerId) -> Vec<Multiaddr> {
    let path = dir.join(PEERS_FILE);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Vec::new();
    };
    let mut out: Vec<Multiaddr> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match parse(line) {
            Some((addr, peer)) if peer != *me && !out.contains(&addr) => out.push(addr),
            Some(_) => {}
            None => tracing::warn!(
                "{}:{}: not a multiaddr ending in /p2p/<peer id>: skipped",
                path.display(),
                n + 1
            ),
        }
        if out.len() == MAX_SAVED {
            break;
        }
    }
    out
}

/// A saved line's address and the peer it names.
fn parse(line: &str) -> Option<(Multiaddr, PeerId)> {
    let addr: Multiaddr = line.parse().ok()?;
    match addr.iter().last()? {
        Protocol::P2p(peer) => Some((addr, peer)),
        _ => None,
    }
}

/// Writes `addrs` (at most [`MAX_SAVED`]) to `dir`'s peers file, whole or not at all (a new
/// file renamed over the old).
pub fn save(dir: &Path, addrs: &[Multiaddr]) -> std::io::Result<()> {
    let mut text = String::new();
    for a in addrs.iter().take(MAX_SAVED) {
        text.push_str(&a.to_string());
        text.push('\n');
    }
    let tmp = dir.join(format!("{PEERS_FILE}.new"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dir.join(PEERS_FILE))
}

/// Keeps `dir`'s peers file up to date every [`PERIOD`] while the node has peers, and dials the
/// saved addresses (`saved`, then the latest written) while it has none. Runs until the node
/// stops.
pub async fn keep(client: Client, dir: std::path::PathBuf, mut saved: Vec<Multiaddr>) {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let mut known = client.known().await;
        if known.is_empty() {
            if client.peers().await.is_empty() {
                for addr in &saved {
                    let _ = tokio::time::timeout(DIAL_TIMEOUT, client.dial(addr.clone())).await;
                }
            }
            continue;
        }
        known.sort();
        known.dedup();
        known.truncate(MAX_SAVED);
        if known != saved {
            match save(&dir, &known) {
                Ok(()) => saved = known,
                Err(e) => tracing::warn!(
                    "cannot write {}: {e}; the node's peers are not kept for its next start",
                    dir.join(PEERS_FILE).display()
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16, peer: &PeerId) -> Multiaddr {
        format!("/ip4/127.0.0.1/tcp/{port}/p2p/{peer}")
            .parse()
            .expect("multiaddr")
    }

    #[test]
    fn saved_peers_come_back_without_this_node_bad_lines_or_repeats() {
        let dir = tempfile::tempdir().expect("dir");
        let (me, a, b) = (PeerId::random(), PeerId::random(), PeerId::random());
        save(dir.path(), &[addr(1, &a), addr(2, &me), addr(3, &b)]).expect("saved");
        let mut text = std::fs::read_to_string(dir.path().join(PEERS_FILE)).expect("read");
        text.push_str("not an address\n/ip4/127.0.0.1/tcp/9\n\n");
        text.push_str(&format!("{}\n", addr(1, &a)));
        std::fs::write(dir.path().join(PEERS_FILE), text).expect("write");
        assert_eq!(load(dir.path(), &me), vec![addr(1, &a), addr(3, &b)]);
    }

    #[test]
    fn no_file_means_no_saved_peers_and_the_list_is_bounded() {
        let dir = tempfile::tempdir().expect("dir");
        let me = PeerId::random();
        assert!(load(dir.path(), &me).is_empty());
        let many: Vec<Multiaddr> = (0..100).map(|p| addr(p, &PeerId::random())).collect();
        save(dir.path(), &many).expect("saved");
        assert_eq!(load(dir.path(), &me).len(), MAX_SAVED);
    }
}
