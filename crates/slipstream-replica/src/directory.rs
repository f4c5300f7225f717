//! The replication directory's data model, without I/O (001 §3.1, §5.2): logical URL patterns,
//! the entries one node writes about the replicas it holds (`Own`), the merged view of every
//! node's entries (`Directory`), and the string encoding a gossip engine carries.
//!
//! Each node is the only writer of its own entries, and every entry carries a version the
//! owner raises on each write, so merging is a per-`(node, pattern)` maximum: commutative,
//! associative and idempotent. Concurrent creates and deletes on different nodes touch
//! different keys and cannot conflict; a healed partition converges once every node has seen
//! every other node's latest entries, in whatever order they arrive.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The prefix of every gossip key this crate owns; other keys in a node's state are not ours.
pub const KEY_PREFIX: &str = "replica:";

/// The longest logical or physical URL accepted, in bytes. Bounds the size of a gossip key or
/// value (chitchat packs many into one UDP datagram) and the work `Directory::resolve` does.
pub const MAX_URL_BYTES: usize = 2048;

/// A node's identity in the directory: the gossip engine's node id.
pub type NodeId = String;

/// A logical URL pattern: one logical URL, or every logical URL that starts with a prefix.
///
/// Written `/img/*` for the prefix `/img/` (001 §3.1: "the logical URL suffixes may use a wild
/// card"); a `*` may only be the last character, so a pattern means exactly one thing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pattern {
    /// Exactly this logical URL.
    Exact(String),
    /// Every logical URL starting with this prefix (the pattern's text without its `*`); the
    /// empty prefix (`*`) matches every URL.
    Prefix(String),
}

impl Pattern {
    /// Parses a pattern: a logical URL, optionally ending in `*`.
    pub fn parse(text: &str) -> Result<Pattern, UrlError> {
        check_url(text, true)?;
        Ok(match text.strip_suffix('*') {
            Some(prefix) => Pattern::Prefix(prefix.to_owned()),
            None => Pattern::Exact(text.to_owned()),
        })
    }

    /// Whether `url` is one of the logical URLs this pattern names.
    pub fn matches(&self, url: &str) -> bool {
        match self {
            Pattern::Exact(exact) => url == exact,
            Pattern::Prefix(prefix) => url.starts_with(prefix.as_str()),
        }
    }

    /// The gossip key of this pattern's entry: `replica:<pattern>`.
    pub fn key(&self) -> String {
        format!("{KEY_PREFIX}{self}")
    }

    /// Parses a gossip key written by `Pattern::key`.
    pub fn from_key(key: &str) -> Result<Pattern, ParseError> {
        let text = key
            .strip_prefix(KEY_PREFIX)
            .ok_or(ParseError::NotReplicaKey)?;
        Pattern::parse(text).map_err(ParseError::Logical)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Exact(exact) => f.write_str(exact),
            Pattern::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// One node's statement about one pattern: "I hold a replica at `physical`, version `version`",
/// or, when `deleted`, "I no longer do" (a tombstone, kept so that the deletion wins over the
/// older creation wherever the two meet).
///
/// For a `Pattern::Prefix`, `physical` ends in `*`, which stands for the part of the logical
/// URL after the prefix: `/img/*` → `http://s1/images/*` resolves `/img/a.png` to
/// `http://s1/images/a.png`. A tombstone's `physical` is empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// Raised by the owning node on every write of this pattern (and never reused: the owner
    /// draws versions from one node-wide counter).
    pub version: u64,
    /// A tombstone: the node no longer holds this replica.
    pub deleted: bool,
    /// Where the replica is served; empty for a tombstone.
    pub physical: String,
}

impl Entry {
    /// A live entry.
    pub fn live(version: u64, physical: impl Into<String>) -> Entry {
        Entry {
            version,
            deleted: false,
            physical: physical.into(),
        }
    }

    /// A tombstone.
    pub fn tombstone(version: u64) -> Entry {
        Entry {
            version,
            deleted: true,
            physical: String::new(),
        }
    }

    /// Whether `self` replaces `other` in a merge. The order is total — version, then a
    /// tombstone over a live entry, then the physical URL — so that two differing entries at
    /// the same version (which a correct owner never writes) still merge the same way
    /// everywhere.
    pub fn supersedes(&self, other: &Entry) -> bool {
        (self.version, self.deleted, &self.physical)
            > (other.version, other.deleted, &other.physical)
    }

    /// The gossip value: `<version>+<physical>` for a live entry, `<version>-` for a tombstone,
    /// the version in decimal without leading zeros (so every entry has one encoding).
    pub fn encode(&self) -> String {
        if self.deleted {
            format!("{}-", self.version)
        } else {
            format!("{}+{}", self.version, self.physical)
        }
    }

    /// Parses a gossip value written by `Entry::encode`, checking it against the pattern it
    /// was found under. Refuses, never panics, on any other bytes.
    pub fn decode(pattern: &Pattern, value: &[u8]) -> Result<Entry, ParseError> {
        let value = std::str::from_utf8(value).map_err(|e| ParseError::NotUtf8 {
            offset: e.valid_up_to(),
        })?;
        let digits = value.bytes().take_while(u8::is_ascii_digit).count();
        let canonical = digits == 1 || (digits > 1 && !value.starts_with('0'));
        let version = match value[..digits].parse::<u64>() {
            Ok(version) if canonical => version,
            _ => return Err(ParseError::Version),
        };
        let rest = &value[digits..];
        if let Some(physical) = rest.strip_prefix('+') {
            check_url(physical, matches!(pattern, Pattern::Prefix(_)))
                .map_err(ParseError::Physical)?;
            if matches!(pattern, Pattern::Prefix(_)) != physical.ends_with('*') {
                return Err(ParseError::WildcardMismatch);
            }
            Ok(Entry::live(version, physical))
        } else if rest == "-" {
            Ok(Entry::tombstone(version))
        } else if rest.starts_with('-') {
            Err(ParseError::TombstoneWithUrl)
        } else {
            Err(ParseError::Flag { offset: digits })
        }
    }

    /// The physical URL serving `url` under `pattern`, `None` for a tombstone.
    fn physical_for(&self, pattern_len: usize, wildcard: bool, url: &str) -> Option<String> {
        if self.deleted {
            None
        } else if wildcard {
            let stem = self.physical.strip_suffix('*').unwrap_or(&self.physical);
            Some(format!("{stem}{}", &url[pattern_len..]))
        } else {
            Some(self.physical.clone())
        }
    }
}

/// Why a logical or physical URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// The URL is empty.
    #[error("empty URL")]
    Empty,
    /// The URL is longer than `MAX_URL_BYTES`.
    #[error("URL of {len} bytes, more than the {MAX_URL_BYTES} allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The URL holds whitespace or a control character.
    #[error("whitespace or control character at byte {offset}")]
    BadChar {
        /// Byte offset of the character.
        offset: usize,
    },
    /// A `*` that is not the URL's last character, or in a URL that may not hold one.
    #[error("'*' at byte {offset}: only a wildcard pattern's last character may be '*'")]
    Star {
        /// Byte offset of the `*`.
        offset: usize,
    },
}

/// Why a gossip key or value was refused. A refused update changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The key does not start with `replica:`: it belongs to another subsystem, or is corrupt.
    #[error("key does not start with {KEY_PREFIX:?}")]
    NotReplicaKey,
    /// The key's logical URL pattern is malformed.
    #[error("logical URL pattern in key: {0}")]
    Logical(#[source] UrlError),
    /// The value's physical URL is malformed.
    #[error("physical URL in value: {0}")]
    Physical(#[source] UrlError),
    /// The value is not UTF-8.
    #[error("value is not UTF-8 (valid up to byte {offset})")]
    NotUtf8 {
        /// Length of the valid UTF-8 prefix.
        offset: usize,
    },
    /// The value does not start with a version: a decimal `u64` without leading zeros.
    #[error("value does not start with a version (a decimal u64 without leading zeros)")]
    Version,
    /// The version is not followed by `+` (live) or `-` (tombstone).
    #[error("expected '+' or '-' at byte {offset} of the value")]
    Flag {
        /// Byte offset after the version.
        offset: usize,
    },
    /// A tombstone (`<version>-`) followed by more bytes.
    #[error("tombstone value carries trailing bytes")]
    TombstoneWithUrl,
    /// A wildcard pattern's physical URL does not end in `*`, or an exact one's does.
    #[error("a wildcard pattern's physical URL must end in '*', and only a wildcard pattern's")]
    WildcardMismatch,
}

/// Checks a URL's length and characters; `star_last` allows a `*` as its last character.
fn check_url(text: &str, star_last: bool) -> Result<(), UrlError> {
    if text.is_empty() {
        return Err(UrlError::Empty);
    }
    if text.len() > MAX_URL_BYTES {
        return Err(UrlError::TooLong { len: text.len() });
    }
    for (offset, ch) in text.char_indices() {
        if ch.is_whitespace() || ch.is_control() {
            return Err(UrlError::BadChar { offset });
        }
        if ch == '*' && !(star_last && offset == text.len() - 1) {
            return Err(UrlError::Star { offset });
        }
    }
    Ok(())
}

/// Parses one gossip update (a key and its value) into a pattern and an entry.
pub fn parse_update(key: &str, value: &[u8]) -> Result<(Pattern, Entry), ParseError> {
    let pattern = Pattern::from_key(key)?;
    let entry = Entry::decode(&pattern, value)?;
    Ok((pattern, entry))
}

/// The entries of this node, of which it is the only writer. Draws versions from one counter,
/// so a replica re-created after its deletion gets a version above the tombstone's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Own {
    entries: BTreeMap<Pattern, Entry>,
    last_version: u64,
}

impl Own {
    /// Restores a node's entries (from its store after a restart).
    pub fn from_entries(entries: impl IntoIterator<Item = (Pattern, Entry)>) -> Own {
        let entries: BTreeMap<Pattern, Entry> = entries.into_iter().collect();
        let last_version = entries.values().map(|e| e.version).max().unwrap_or(0);
        Own {
            entries,
            last_version,
        }
    }

    /// The entry that creating or updating `pattern` at `physical` would write, not yet
    /// recorded (the caller persists it first, then calls `Own::record`).
    pub fn next_put(&self, pattern: &Pattern, physical: &str) -> Result<Entry, ParseError> {
        let entry = Entry::live(self.last_version + 1, physical);
        // One check for local writes and gossip alike: what we publish, peers accept.
        Entry::decode(pattern, entry.encode().as_bytes())
    }

    /// The tombstone that deleting `pattern` would write; `None` when there is no live entry.
    pub fn next_delete(&self, pattern: &Pattern) -> Option<Entry> {
        match self.entries.get(pattern) {
            Some(entry) if !entry.deleted => Some(Entry::tombstone(self.last_version + 1)),
            _ => None,
        }
    }

    /// Records an entry written by `next_put` or `next_delete`.
    pub fn record(&mut self, pattern: Pattern, entry: Entry) {
        self.last_version = self.last_version.max(entry.version);
        self.entries.insert(pattern, entry);
    }

    /// This node's entry for `pattern`, a tombstone included.
    pub fn get(&self, pattern: &Pattern) -> Option<&Entry> {
        self.entries.get(pattern)
    }

    /// This node's entries, tombstones included.
    pub fn entries(&self) -> impl Iterator<Item = (&Pattern, &Entry)> {
        self.entries.iter()
    }

    /// The gossip keys and values of this node's entries.
    pub fn gossip(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.entries.iter().map(|(p, e)| (p.key(), e.encode()))
    }
}

/// The pattern that decides a URL's resolution ([`Directory::decider`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider<'a> {
    /// The URL has exact entries: it resolves on its own.
    Exact(&'a str),
    /// The URL's longest matching wildcard prefix.
    Prefix(&'a str),
}

/// The merged view of every node's entries.
///
/// Resolution (`Directory::resolve`): for each node, the most specific of its *live* entries
/// matching the URL speaks for it — an exact pattern first, then the wildcard with the longest
/// prefix — and the answer is the union over nodes. So a node's `/img/logo.png` entry overrides
/// its own `/img/*` for that URL, but never hides another node's `/img/*`: each entry is a true
/// claim that its node holds the replica. A tombstone is an absence: deleting a node's exact
/// entry lets its wildcard speak again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Directory {
    /// Exact patterns, by logical URL.
    exact: BTreeMap<String, BTreeMap<NodeId, Entry>>,
    /// Wildcard patterns, by prefix.
    prefix: BTreeMap<String, BTreeMap<NodeId, Entry>>,
}

impl Directory {
    /// An empty directory.
    pub fn new() -> Directory {
        Directory::default()
    }

    /// Merges one node's entry: kept if it supersedes what the directory holds for
    /// `(node, pattern)`. Returns whether the directory changed.
    pub fn apply(&mut self, node: &str, pattern: &Pattern, entry: Entry) -> bool {
        let (map, text) = match pattern {
            Pattern::Exact(url) => (&mut self.exact, url),
            Pattern::Prefix(prefix) => (&mut self.prefix, prefix),
        };
        let nodes = map.entry(text.clone()).or_default();
        match nodes.get(node) {
            Some(held) if !entry.supersedes(held) => false,
            _ => {
                nodes.insert(node.to_owned(), entry);
                true
            }
        }
    }

    /// Parses and merges one gossip update. A malformed key or value changes nothing.
    pub fn apply_gossip(
        &mut self,
        node: &str,
        key: &str,
        value: &[u8],
    ) -> Result<bool, ParseError> {
        let (pattern, entry) = parse_update(key, value)?;
        Ok(self.apply(node, &pattern, entry))
    }

    /// The physical URLs of `url`'s live replicas, sorted and without duplicates (see the
    /// type's documentation for which entries speak).
    pub fn resolve(&self, url: &str) -> Vec<String> {
        self.resolve_among(url, |_| true)
    }

    /// [`Directory::resolve`] counting only the nodes `speaks` accepts (the live ones).
    pub fn resolve_among(&self, url: &str, speaks: impl Fn(&str) -> bool) -> Vec<String> {
        self.hear_all(url, &speaks).1.into_iter().collect()
    }

    /// The nodes (among those `speaks` accepts) holding a live replica of `url`, sorted.
    pub fn holders(&self, url: &str, speaks: impl Fn(&str) -> bool) -> Vec<String> {
        self.hear_all(url, &speaks)
            .0
            .into_iter()
            .map(str::to_owned)
            .collect()
    }

    /// The nodes that speak for `url` and the physical URLs they name.
    fn hear_all<'a>(
        &'a self,
        url: &str,
        speaks: &impl Fn(&str) -> bool,
    ) -> (BTreeSet<&'a str>, BTreeSet<String>) {
        // Nodes that have spoken through a more specific pattern.
        let mut spoken: BTreeSet<&str> = BTreeSet::new();
        let mut found = BTreeSet::new();
        if let Some(nodes) = self.exact.get(url) {
            hear(
                nodes,
                url,
                url.len(),
                false,
                speaks,
                &mut spoken,
                &mut found,
            );
        }
        for (prefix, nodes) in self.matching_prefixes(url) {
            hear(
                nodes,
                url,
                prefix.len(),
                true,
                speaks,
                &mut spoken,
                &mut found,
            );
        }
        (spoken, found)
    }

    /// The wildcard patterns matching `url`, longest prefix first.
    fn matching_prefixes<'a>(&'a self, url: &str) -> Vec<(&'a str, &'a BTreeMap<NodeId, Entry>)> {
        let mut found: Vec<(&str, &BTreeMap<NodeId, Entry>)> = if self.prefix.len() <= url.len() {
            // Few wildcards (the usual case): test each.
            self.prefix
                .iter()
                .filter(|(p, _)| url.starts_with(p.as_str()))
                .map(|(p, nodes)| (p.as_str(), nodes))
                .collect()
        } else {
            // Many: look up each prefix of the URL, at most `url.len() + 1` lookups (the URL
            // is bounded by the caller).
            (0..=url.len())
                .filter(|&end| url.is_char_boundary(end))
                .filter_map(|end| self.prefix.get_key_value(&url[..end]))
                .map(|(p, nodes)| (p.as_str(), nodes))
                .collect()
        };
        found.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        found
    }

    /// Which pattern decides `url`'s resolution: `url` itself when it has entries of its own
    /// (exact patterns, tombstones included), else its longest matching wildcard prefix, whose
    /// [`Directory::rule_among`] then gives it; `None` when no pattern matches.
    pub fn decider(&self, url: &str) -> Option<Decider<'_>> {
        if let Some((url, _)) = self.exact.get_key_value(url) {
            return Some(Decider::Exact(url));
        }
        self.matching_prefixes(url)
            .first()
            .map(|(p, _)| Decider::Prefix(p))
    }

    /// How every URL whose [`Directory::decider`] is the wildcard `prefix` resolves: the
    /// physical URL stems of its live replicas on nodes `speaks` accepts, sorted, each ending
    /// in `*` for the part of the URL after `prefix`. For such a URL `u`, each stem with its
    /// `*` replaced by `u[prefix.len()..]` is one of [`Directory::resolve_among`]'s answers.
    pub fn rule_among(&self, prefix: &str, speaks: impl Fn(&str) -> bool) -> Vec<String> {
        let mut spoken: BTreeSet<&str> = BTreeSet::new();
        let mut found = BTreeSet::new();
        for (p, nodes) in self.matching_prefixes(prefix) {
            hear(
                nodes,
                prefix,
                p.len(),
                true,
                &speaks,
                &mut spoken,
                &mut found,
            );
        }
        found.into_iter().map(|stem| stem + "*").collect()
    }

    /// The patterns more specific than the wildcard `prefix`: the exact ones starting with
    /// it, and the longer wildcards starting with it, in order.
    pub fn under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = Pattern> + 'a {
        use std::ops::Bound;
        let from = (Bound::Included(prefix), Bound::Unbounded);
        let exact = self
            .exact
            .range::<str, _>(from)
            .map(|(k, _)| k)
            .take_while(move |k| k.starts_with(prefix))
            .map(|k| Pattern::Exact(k.clone()));
        let wildcards = self
            .prefix
            .range::<str, _>(from)
            .map(|(k, _)| k)
            .take_while(move |k| k.starts_with(prefix))
            .filter(move |k| k.len() > prefix.len())
            .map(|k| Pattern::Prefix(k.clone()));
        exact.chain(wildcards)
    }

    /// Every entry held, tombstones included: `(node, pattern, entry)`.
    pub fn entries(&self) -> impl Iterator<Item = (&str, Pattern, &Entry)> {
        let exact = self.exact.iter().flat_map(|(url, nodes)| {
            nodes
                .iter()
                .map(move |(node, e)| (node.as_str(), Pattern::Exact(url.clone()), e))
        });
        let prefix = self.prefix.iter().flat_map(|(p, nodes)| {
            nodes
                .iter()
                .map(move |(node, e)| (node.as_str(), Pattern::Prefix(p.clone()), e))
        });
        exact.chain(prefix)
    }
}

/// Adds the physical URLs of the live entries of nodes that have not spoken yet.
fn hear<'a>(
    nodes: &'a BTreeMap<NodeId, Entry>,
    url: &str,
    pattern_len: usize,
    wildcard: bool,
    speaks: &impl Fn(&str) -> bool,
    spoken: &mut BTreeSet<&'a str>,
    found: &mut BTreeSet<String>,
) {
    for (node, entry) in nodes {
        if spoken.contains(node.as_str()) || !speaks(node) {
            continue;
        }
        if let Some(physical) = entry.physical_for(pattern_len, wildcard, url) {
            spoken.insert(node.as_str());
            found.insert(physical);
        }
    }
}

#[cfg(test)]
mod tests;
