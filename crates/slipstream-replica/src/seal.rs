//! Gossip sealed with the cluster secret: every chitchat datagram travels in an authenticated,
//! encrypted envelope, and whatever does not open is dropped before chitchat sees it.
//!
//! Serf and Consul do the same with their `encrypt` key. The envelope is
//!
//! ```text
//! "SSG1" | sent_at (u64 ms since the epoch, big-endian) | nonce (12 random bytes)
//!        | ChaCha20-Poly1305(chitchat message) with its 16-byte tag
//! ```
//!
//! keyed by HKDF-SHA256 of the secret with the cluster id, the first 12 bytes bound as
//! associated data. A datagram is dropped, and counted by why in [`Stats`], when it is too
//! short or too long, does not open (no secret, another cluster, one flipped bit), was sent
//! more than [`WINDOW_MS`] from this node's clock (a replay of old gossip would bring dead
//! nodes back), repeats a datagram already taken within the window, or holds a message chitchat
//! should not be given: another protocol version, an unknown type, or a digest listing more
//! than `max_digest_nodes` nodes (each of which chitchat would add to its state).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use async_trait::async_trait;
use chitchat::transport::{RecvOutcome, SendOutcome, Socket, Transport};
use chitchat::{ChitchatEnvelope, ProtocolVersion, MAX_UDP_DATAGRAM_PAYLOAD_SIZE};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

/// The envelope's first bytes.
pub const MAGIC: &[u8; 4] = b"SSG1";

/// Bytes the envelope adds to a chitchat message.
pub const OVERHEAD: usize = HEADER + TAG;

/// How far a datagram's send time may be from the receiver's clock, in milliseconds.
pub const WINDOW_MS: u64 = 60_000;

/// Datagrams remembered for replay detection; past it the oldest is forgotten and nothing
/// sent before it is taken any more.
pub const REPLAY_MEMORY: usize = 65_536;

/// Nodes a digest may list by default (a digest of 512 nodes is about 40 KB).
pub const DEFAULT_MAX_DIGEST_NODES: u16 = 512;

const HEADER: usize = 4 + 8 + NONCE_LEN;
const TAG: usize = 16;
const LARGEST: usize = MAX_UDP_DATAGRAM_PAYLOAD_SIZE + OVERHEAD;

/// The chitchat wire format this transport speaks (the cluster's `protocol_version`).
pub const PROTOCOL: ProtocolVersion = ProtocolVersion::V0;

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Shorter than an empty envelope or longer than the largest.
    Size,
    /// Not an envelope (no magic) or it does not open: no secret, another secret or cluster,
    /// altered bytes.
    Forged,
    /// Sent more than [`WINDOW_MS`] from this node's clock.
    Stale,
    /// Taken before.
    Replayed,
    /// Opened, but not a message chitchat should be given.
    Malformed,
}

/// Datagrams taken and dropped, by why (see the module comment).
#[derive(Debug, Default)]
pub struct Stats {
    /// Opened and handed to chitchat.
    pub accepted: AtomicU64,
    /// Dropped: [`Refusal::Size`].
    pub size: AtomicU64,
    /// Dropped: [`Refusal::Forged`].
    pub forged: AtomicU64,
    /// Dropped: [`Refusal::Stale`].
    pub stale: AtomicU64,
    /// Dropped: [`Refusal::Replayed`].
    pub replayed: AtomicU64,
    /// Dropped: [`Refusal::Malformed`].
    pub malformed: AtomicU64,
}

impl Stats {
    fn count(&self, refusal: Refusal) {
        let counter = match refusal {
            Refusal::Size => &self.size,
            Refusal::Forged => &self.forged,
            Refusal::Stale => &self.stale,
            Refusal::Replayed => &self.replayed,
            Refusal::Malformed => &self.malformed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Every datagram dropped.
    pub fn refused(&self) -> u64 {
        [
            &self.size,
            &self.forged,
            &self.stale,
            &self.replayed,
            &self.malformed,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    /// The counters as JSON (the directory endpoint shows them).
    pub fn to_json(&self) -> serde_json::Value {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "accepted": n(&self.accepted),
            "refused": {
                "size": n(&self.size),
                "forged": n(&self.forged),
                "stale": n(&self.stale),
                "replayed": n(&self.replayed),
                "malformed": n(&self.malformed),
            },
        })
    }
}

/// The cluster's gossip key.
pub struct Sealer {
    key: LessSafeKey,
    max_digest_nodes: u16,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").finish_non_exhaustive()
    }
}

impl Sealer {
    /// The key of cluster `cluster_id` with shared secret `secret`.
    pub fn new(secret: &[u8], cluster_id: &str, max_digest_nodes: u16) -> Sealer {
        struct Len(usize);
        impl ring::hkdf::KeyType for Len {
            fn len(&self) -> usize {
                self.0
            }
        }
        let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"slipstream gossip v1");
        let info = [cluster_id.as_bytes()];
        let mut bytes = [0u8; 32];
        salt.extract(secret)
            .expand(&info, Len(bytes.len()))
            .and_then(|okm| okm.fill(&mut bytes))
            .expect("32 bytes is a valid HKDF-SHA256 length");
        let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).expect("a 32-byte key");
        Sealer {
            key: LessSafeKey::new(key),
            max_digest_nodes,
        }
    }

    /// Appends `plain` sealed, sent at `sent_at_ms`, to `out`.
    pub fn seal(&self, plain: &[u8], sent_at_ms: u64, nonce: [u8; NONCE_LEN], out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&sent_at_ms.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let (head, body) = out[start..].split_at_mut(HEADER);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&head[..12]),
                body,
            )
            .expect("a message shorter than 2^38 bytes");
        out.extend_from_slice(tag.as_ref());
    }

    /// Opens `packet` in place, received at `now_ms`; returns the chitchat message it holds,
    /// checked (see the module comment). `replay` remembers what was taken.
    pub fn open<'p>(
        &self,
        packet: &'p mut [u8],
        now_ms: u64,
        replay: &mut Replay,
    ) -> Result<&'p [u8], Refusal> {
        if packet.len() < OVERHEAD || packet.len() > LARGEST {
            return Err(Refusal::Size);
        }
        if &packet[..4] != MAGIC {
            return Err(Refusal::Forged);
        }
        let sent_at = u64::from_be_bytes(packet[4..12].try_into().expect("8 bytes"));
        let nonce: [u8; NONCE_LEN] = packet[12..HEADER].try_into().expect("12 bytes");
        let (head, body) = packet.split_at_mut(HEADER);
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&head[..12]),
                body,
            )
            .map_err(|_| Refusal::Forged)?;
        if sent_at.abs_diff(now_ms) > WINDOW_MS {
            return Err(Refusal::Stale);
        }
        replay.take(sent_at, nonce, now_ms)?;
        check_message(plain, self.max_digest_nodes)?;
        Ok(plain)
    }
}

/// Checks an opened chitchat message before chitchat parses it: the protocol version this
/// cluster speaks, a known message type, and no more than `max_digest_nodes` in a digest.
pub fn check_message(plain: &[u8], max_digest_nodes: u16) -> Result<(), Refusal> {
    // Magic (2, checked by chitchat), version (1), type (1), then for SYN and SYN-ACK the
    // digest, whose V0 form starts with its node count (u16, little-endian).
    let (&version, &kind) = match plain {
        [_, _, version, kind, ..] => (version, kind),
        _ => return Err(Refusal::Malformed),
    };
    if version != PROTOCOL as u8 {
        return Err(Refusal::Malformed);
    }
    match kind {
        0 | 1 => {
            let count = plain
                .get(4..6)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .ok_or(Refusal::Malformed)?;
            if count > max_digest_nodes {
                return Err(Refusal::Malformed);
            }
        }
        2 | 3 => {}
        _ => return Err(Refusal::Malformed),
    }
    Ok(())
}

/// The datagrams taken within the window, to refuse a second copy.
#[derive(Debug, Default)]
pub struct Replay {
    seen: BTreeSet<(u64, [u8; NONCE_LEN])>,
    /// Nothing sent at or before this is taken (raised when memory is full).
    floor: u64,
}

impl Replay {
    /// Takes a datagram sent at `sent_at` with `nonce`, unless it was taken before.
    fn take(&mut self, sent_at: u64, nonce: [u8; NONCE_LEN], now_ms: u64) -> Result<(), Refusal> {
        if sent_at <= self.floor && self.floor > 0 {
            return Err(Refusal::Replayed);
        }
        if !self.seen.insert((sent_at, nonce)) {
            return Err(Refusal::Replayed);
        }
        // Forget what the window refuses anyway.
        let horizon = now_ms.saturating_sub(WINDOW_MS);
        while let Some(&(at, _)) = self.seen.first() {
            if at >= horizon && self.seen.len() <= REPLAY_MEMORY {
                break;
            }
            self.seen.pop_first();
            if at >= horizon {
                self.floor = self.floor.max(at);
            }
        }
        Ok(())
    }
}

/// A chitchat transport over UDP that seals every datagram (see the module comment).
#[derive(Debug, Clone)]
pub struct SealedTransport {
    sealer: Arc<Sealer>,
    stats: Arc<Stats>,
}

impl SealedTransport {
    /// A transport sealing with `sealer`, counting into `stats`.
    pub fn new(sealer: Sealer, stats: Arc<Stats>) -> SealedTransport {
        SealedTransport {
            sealer: Arc::new(sealer),
            stats,
        }
    }
}

#[async_trait]
impl Transport for SealedTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let socket = tokio::net::UdpSocket::bind(listen_addr)
            .await
            .with_context(|| format!("failed to bind to {listen_addr}/UDP for gossip"))?;
        Ok(Box::new(SealedSocket {
            socket,
            sealer: self.sealer.clone(),
            stats: self.stats.clone(),
            replay: Replay::default(),
            rng: SystemRandom::new(),
            plain: Vec::with_capacity(MAX_UDP_DATAGRAM_PAYLOAD_SIZE),
            sealed: Vec::with_capacity(LARGEST),
            recv: vec![0; LARGEST + 1].into_boxed_slice(),
        }))
    }
}

struct SealedSocket {
    socket: tokio::net::UdpSocket,
    sealer: Arc<Sealer>,
    stats: Arc<Stats>,
    replay: Replay,
    rng: SystemRandom,
    plain: Vec<u8>,
    sealed: Vec<u8>,
    /// One byte longer than the largest envelope, so that a longer datagram is seen as such.
    recv: Box<[u8]>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Errors after which the socket still works (as chitchat's own UDP transport treats them).
fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::OutOfMemory
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionRefused
    )
}

#[async_trait]
impl Socket for SealedSocket {
    fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        self.socket
            .local_addr()
            .context("failed to get UDP socket address")
    }

    async fn send(
        &mut self,
        to: SocketAddr,
        envelope: ChitchatEnvelope,
    ) -> anyhow::Result<SendOutcome> {
        self.plain.clear();
        envelope.serialize(&mut self.plain);
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| anyhow::anyhow!("no randomness for a gossip nonce"))?;
        self.sealed.clear();
        self.sealer
            .seal(&self.plain, now_ms(), nonce, &mut self.sealed);
        self.socket
            .send_to(&self.sealed, to)
            .await
            .context("failed to send chitchat message to peer")?;
        Ok(SendOutcome {
            num_bytes_sent: self.plain.len(),
        })
    }

    async fn recv(&mut self) -> anyhow::Result<RecvOutcome> {
        loop {
            let (len, from_addr) = match self.socket.recv_from(&mut self.recv).await {
                Ok(r) => r,
                Err(e) if is_transient(&e) => continue,
                Err(e) => return Err(e).context("fatal UDP recv error"),
            };
            let plain = match self
                .sealer
                .open(&mut self.recv[..len], now_ms(), &mut self.replay)
            {
                Ok(plain) => plain,
                Err(why) => {
                    self.stats.count(why);
                    tracing::debug!(from = %from_addr, len, ?why, "dropped a gossip datagram");
                    continue;
                }
            };
            let mut buf = plain;
            match ChitchatEnvelope::deserialize(&mut buf) {
                Ok(envelope) => {
                    self.stats.accepted.fetch_add(1, Ordering::Relaxed);
                    return Ok(RecvOutcome {
                        from_addr,
                        envelope,
                        num_bytes_received: len,
                    });
                }
                Err(e) => {
                    self.stats.count(Refusal::Malformed);
                    tracing::debug!(from = %from_addr, len, "dropped a gossip message: {e:#}");
                }
            }
        }
    }
}

/// Checks that sealing stays inside the datagram room chitchat leaves.
const _: () = assert!(OVERHEAD <= chitchat::ENVELOPE_RESERVE);

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn syn(nodes: u16) -> Vec<u8> {
        let mut m = vec![0x53, 0xb0, PROTOCOL as u8, 0];
        m.extend_from_slice(&nodes.to_le_bytes());
        m
    }

    #[test]
    fn a_sealed_message_opens_once_with_the_same_secret_and_cluster() {
        let a = Sealer::new(b"secret-secret-secret", "c", 512);
        let mut out = Vec::new();
        a.seal(&syn(3), NOW, [7; 12], &mut out);
        assert_eq!(out.len(), syn(3).len() + OVERHEAD);
        let mut replay = Replay::default();
        assert_eq!(
            a.open(&mut out.clone(), NOW + 5, &mut replay),
            Ok(&syn(3)[..])
        );
        assert_eq!(
            a.open(&mut out.clone(), NOW + 6, &mut replay),
            Err(Refusal::Replayed)
        );
        let other = Sealer::new(b"another-secret-xxxxx", "c", 512);
        let cluster = Sealer::new(b"secret-secret-secret", "d", 512);
        for s in [&other, &cluster] {
            assert_eq!(
                s.open(&mut out.clone(), NOW, &mut Replay::default()),
                Err(Refusal::Forged)
            );
        }
        // Every single flipped bit, the header's included, is refused.
        for i in 0..out.len() {
            for bit in 0..8 {
                let mut bad = out.clone();
                bad[i] ^= 1 << bit;
                assert!(a.open(&mut bad, NOW, &mut Replay::default()).is_err());
            }
        }
        assert_eq!(
            a.open(&mut out.clone()[..10].to_vec(), NOW, &mut Replay::default()),
            Err(Refusal::Size)
        );
    }

    #[test]
    fn old_future_and_oversized_gossip_is_refused() {
        let a = Sealer::new(b"secret-secret-secret", "c", 512);
        let mut out = Vec::new();
        a.seal(&syn(1), NOW, [1; 12], &mut out);
        let mut replay = Replay::default();
        assert_eq!(
            a.open(&mut out.clone(), NOW + WINDOW_MS + 1, &mut replay),
            Err(Refusal::Stale)
        );
        assert_eq!(
            a.open(&mut out.clone(), NOW - WINDOW_MS - 1, &mut replay),
            Err(Refusal::Stale)
        );
        let mut big = Vec::new();
        a.seal(&syn(513), NOW, [2; 12], &mut big);
        assert_eq!(a.open(&mut big, NOW, &mut replay), Err(Refusal::Malformed));
        for bad in [
            &[][..],
            &[0x53, 0xb0, 1, 0][..],
            &[0x53, 0xb0, 0, 9][..],
            &[0x53, 0xb0, 0, 0, 1][..],
        ] {
            assert_eq!(check_message(bad, 512), Err(Refusal::Malformed), "{bad:?}");
        }
        assert_eq!(check_message(&[0x53, 0xb0, 0, 2], 512), Ok(()));
    }

    #[test]
    fn replay_memory_is_bounded_and_never_reopens_a_forgotten_datagram() {
        let mut replay = Replay::default();
        for i in 0..(REPLAY_MEMORY as u64 + 10) {
            let mut nonce = [0; 12];
            nonce[..8].copy_from_slice(&i.to_be_bytes());
            replay.take(NOW + i / 100, nonce, NOW).unwrap();
        }
        assert!(replay.seen.len() <= REPLAY_MEMORY);
        // The first datagram was forgotten: its copy is still refused, by the floor.
        assert_eq!(replay.take(NOW, [0; 12], NOW), Err(Refusal::Replayed));
    }
}
