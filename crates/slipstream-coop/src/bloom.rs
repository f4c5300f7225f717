//! Attenuated Bloom filters (004 §3.2.2, after Rhea and Kubiatowicz): the local-area fast
//! path. Each node keeps, for each neighbour, a stack of filters: level 0 says what the
//! neighbour holds itself, level `d` what nodes `d` hops beyond it hold. A lookup asks the
//! neighbour whose shallowest matching level is lowest first, without a DHT walk; an object no
//! level matches is not nearby, so the lookup goes to the DHT at once (a miss fails fast).
//!
//! A node builds what it sends a neighbour from its own objects (level 0) and the filters its
//! other neighbours sent it, each shifted one level down ([`Attenuated::absorb`]); the depth
//! bounds how far the information travels. Squid's cache digests are the one-level form of
//! the same idea. No I/O here: the network layer exchanges [`Attenuated::encode`]'s bytes.

use crate::object::{DecodeError, Guid};

/// The most bits a filter may have (1 MiB of bits).
pub const MAX_BITS: usize = 8 << 20;
/// The most hash functions.
pub const MAX_HASHES: u32 = 16;
/// The most levels.
pub const MAX_DEPTH: usize = 8;

const MAGIC: &[u8; 4] = b"SSAB";

/// A Bloom filter over GUIDs: `bits` bits, `hashes` indices per GUID derived from the GUID's
/// own bytes (a GUID is already a uniform hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bloom {
    words: Vec<u64>,
    bits: usize,
    hashes: u32,
}

impl Bloom {
    /// An empty filter; `bits` is rounded up to a multiple of 64 and bounded by [`MAX_BITS`].
    pub fn new(bits: usize, hashes: u32) -> Bloom {
        let bits = bits.clamp(64, MAX_BITS).div_ceil(64) * 64;
        Bloom {
            words: vec![0; bits / 64],
            bits,
            hashes: hashes.clamp(1, MAX_HASHES),
        }
    }

    /// A filter sized for `items` entries at a false-positive rate of about `fp`.
    pub fn for_items(items: usize, fp: f64) -> Bloom {
        let n = items.max(1) as f64;
        let fp = fp.clamp(1e-6, 0.5);
        let bits = (-n * fp.ln() / (std::f64::consts::LN_2.powi(2))).ceil() as usize;
        let hashes = ((bits as f64 / n) * std::f64::consts::LN_2).round() as u32;
        Bloom::new(bits, hashes)
    }

    fn indices(&self, guid: &Guid) -> impl Iterator<Item = usize> + '_ {
        // Double hashing (Kirsch and Mitzenmacher) over two 64-bit halves of the GUID.
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&guid.0[..8]);
        b.copy_from_slice(&guid.0[8..16]);
        let (h1, h2) = (u64::from_le_bytes(a), u64::from_le_bytes(b) | 1);
        let m = self.bits as u64;
        (0..self.hashes as u64).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % m) as usize)
    }

    /// Adds `guid`.
    pub fn insert(&mut self, guid: &Guid) {
        let idx: Vec<usize> = self.indices(guid).collect();
        for i in idx {
            self.words[i / 64] |= 1 << (i % 64);
        }
    }

    /// Whether `guid` may have been added (never false for one that was).
    pub fn contains(&self, guid: &Guid) -> bool {
        self.indices(guid)
            .all(|i| self.words[i / 64] & (1 << (i % 64)) != 0)
    }

    /// Adds everything `other` holds; false (and nothing changed) when the shapes differ.
    pub fn union(&mut self, other: &Bloom) -> bool {
        if other.bits != self.bits || other.hashes != self.hashes {
            return false;
        }
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
        true
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }
}

/// A stack of filters, level `d` for what lies `d` hops away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attenuated {
    levels: Vec<Bloom>,
}

impl Attenuated {
    /// `depth` empty levels of `bits` bits and `hashes` hashes each.
    pub fn new(depth: usize, bits: usize, hashes: u32) -> Attenuated {
        let depth = depth.clamp(1, MAX_DEPTH);
        Attenuated {
            levels: vec![Bloom::new(bits, hashes); depth],
        }
    }

    /// The number of levels.
    pub fn depth(&self) -> usize {
        self.levels.len()
    }

    /// Adds an object held at this node (level 0).
    pub fn insert_local(&mut self, guid: &Guid) {
        self.levels[0].insert(guid);
    }

    /// Merges what a neighbour sent, one hop further away: its level `d` becomes our level
    /// `d + 1`; its deepest level falls off. False when the shapes differ (nothing merged).
    pub fn absorb(&mut self, neighbour: &Attenuated) -> bool {
        if neighbour.levels.first().map(|b| (b.bits, b.hashes))
            != self.levels.first().map(|b| (b.bits, b.hashes))
        {
            return false;
        }
        for d in 1..self.levels.len() {
            if let Some(theirs) = neighbour.levels.get(d - 1) {
                self.levels[d].union(theirs);
            }
        }
        true
    }

    /// The shallowest level that may hold `guid`, if any: 0 is "here", `d` is "about `d`
    /// hops away". `None` is certain: nothing within the depth holds it.
    pub fn shallowest(&self, guid: &Guid) -> Option<usize> {
        self.levels.iter().position(|b| b.contains(guid))
    }

    /// The wire form: magic, depth, bits, hashes, then the levels' words.
    pub fn encode(&self) -> Vec<u8> {
        let first = &self.levels[0];
        let mut out = Vec::with_capacity(16 + self.levels.len() * first.bits / 8);
        out.extend_from_slice(MAGIC);
        out.push(self.levels.len() as u8);
        out.extend_from_slice(&(first.bits as u32).to_be_bytes());
        out.push(first.hashes as u8);
        for level in &self.levels {
            for w in &level.words {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        out
    }

    /// Reads [`Attenuated::encode`]'s form; anything malformed or out of bounds is an error.
    pub fn decode(bytes: &[u8]) -> Result<Attenuated, DecodeError> {
        if bytes.len() < 10 || &bytes[..4] != MAGIC {
            return Err(DecodeError::Field(
                "digest",
                "not an attenuated Bloom filter",
            ));
        }
        let depth = bytes[4] as usize;
        let bits = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) as usize;
        let hashes = bytes[9] as u32;
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(DecodeError::Field("digest depth", "out of bounds"));
        }
        if bits == 0 || bits > MAX_BITS || !bits.is_multiple_of(64) {
            return Err(DecodeError::Field("digest bits", "out of bounds"));
        }
        if !(1..=MAX_HASHES).contains(&hashes) {
            return Err(DecodeError::Field("digest hashes", "out of bounds"));
        }
        let words = bits / 64;
        let body = &bytes[10..];
        if body.len() != depth * words * 8 {
            return Err(DecodeError::Field(
                "digest",
                "length does not match its shape",
            ));
        }
        let levels = body
            .chunks_exact(words * 8)
            .map(|level| Bloom {
                words: level
                    .chunks_exact(8)
                    .map(|w| {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(w);
                        u64::from_le_bytes(a)
                    })
                    .collect(),
                bits,
                hashes,
            })
            .collect();
        Ok(Attenuated { levels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libp2p::identity::Keypair;
    use proptest::prelude::*;

    fn guids(n: usize, tag: &str) -> Vec<Guid> {
        let key = Keypair::generate_ed25519().public();
        (0..n)
            .map(|i| Guid::new(&key, &format!("http://{tag}/{i}")))
            .collect()
    }

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut b = Bloom::for_items(1000, 0.01);
        let held = guids(1000, "held");
        for g in &held {
            b.insert(g);
        }
        assert!(held.iter().all(|g| b.contains(g)));
        let others = guids(10_000, "other");
        let fp = others.iter().filter(|g| b.contains(g)).count() as f64 / 10_000.0;
        assert!(fp < 0.03, "false-positive rate {fp}");
    }

    #[test]
    fn levels_say_how_far_away_an_object_is() {
        // a - b - c in a line: c holds x, b holds y. What b sends a, and a's view of it.
        let x = guids(1, "x")[0];
        let y = guids(1, "y")[0];
        let mut c = Attenuated::new(3, 4096, 4);
        c.insert_local(&x);
        let mut b = Attenuated::new(3, 4096, 4);
        b.insert_local(&y);
        assert!(b.absorb(&c));
        let mut a_view_of_b = Attenuated::new(3, 4096, 4);
        assert!(a_view_of_b.absorb(&b));
        // Through b: y one hop away, x two.
        assert_eq!(a_view_of_b.shallowest(&y), Some(1));
        assert_eq!(a_view_of_b.shallowest(&x), Some(2));
        // Something nobody holds: a certain miss (at this filter size).
        assert_eq!(a_view_of_b.shallowest(&guids(1, "z")[0]), None);
        // Beyond the depth, information falls off.
        let mut far = Attenuated::new(3, 4096, 4);
        far.absorb(&a_view_of_b);
        assert_eq!(far.shallowest(&x), None);
        assert_eq!(far.shallowest(&y), Some(2));
    }

    #[test]
    fn shapes_must_match_to_merge() {
        let mut a = Attenuated::new(2, 4096, 4);
        assert!(!a.absorb(&Attenuated::new(2, 8192, 4)));
        assert!(!a.absorb(&Attenuated::new(2, 4096, 3)));
    }

    #[test]
    fn digests_round_trip_and_bad_ones_are_refused() {
        let mut a = Attenuated::new(3, 1024, 3);
        for g in guids(50, "d") {
            a.insert_local(&g);
        }
        let bytes = a.encode();
        assert_eq!(Attenuated::decode(&bytes).unwrap(), a);
        assert!(Attenuated::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut deep = bytes.clone();
        deep[4] = 200;
        assert!(Attenuated::decode(&deep).is_err());
        let mut huge = bytes.clone();
        huge[5..9].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(Attenuated::decode(&huge).is_err());
        assert!(Attenuated::decode(b"SSAB").is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Attenuated::decode(&bytes);
            let mut framed = b"SSAB\x01\x00\x00\x00\x40\x02".to_vec();
            framed.extend_from_slice(&bytes);
            let _ = Attenuated::decode(&framed);
        }
    }
}
