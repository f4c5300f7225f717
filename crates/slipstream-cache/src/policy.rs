//! Policy names: a level rule plus a replacement algorithm.

use std::fmt;
use std::str::FromStr;

use crate::Level;

/// Which entries leave the cache to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacement {
    /// Least frequently used with paper 002's admission rule (§4.2.4.2): a newcomer may displace
    /// only entries it is strictly more popular than, and only if they free enough room.
    Lfu,
    /// Least recently used; always admits.
    Lru,
    /// SIEVE (Zhang et al., NSDI 2024): FIFO order with a visited bit and a moving hand.
    Sieve,
}

/// A cache policy: a level rule and a replacement algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How much of an object may be stored.
    pub level: Level,
    /// How victims are chosen.
    pub replacement: Replacement,
}

impl Policy {
    /// Paper 002's `adaptive` policy.
    pub const ADAPTIVE: Policy = Policy {
        level: Level::Adaptive,
        replacement: Replacement::Lfu,
    };

    /// Every name accepted by [`Policy::from_str`] without a `+` combination.
    pub const NAMES: [&'static str; 5] = ["total", "small", "adaptive", "lru", "sieve"];
}

impl Replacement {
    fn name(self) -> &'static str {
        match self {
            Replacement::Lfu => "lfu",
            Replacement::Lru => "lru",
            Replacement::Sieve => "sieve",
        }
    }
}

/// A policy name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cache policy `{0}`: expected one of total, small, adaptive, lru, sieve, or LEVEL+REPLACEMENT such as adaptive+sieve")]
pub struct ParsePolicyError(pub String);

impl FromStr for Policy {
    type Err = ParsePolicyError;

    /// `total`, `small`, `adaptive` are paper 002's LFU policies; `lru` and `sieve` store whole
    /// objects; `LEVEL+REPLACEMENT` (e.g. `adaptive+sieve`) combines any level with any algorithm.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParsePolicyError(s.to_owned());
        let level = |l: &str| match l {
            "total" => Some(Level::Total),
            "small" => Some(Level::Small),
            "adaptive" => Some(Level::Adaptive),
            _ => None,
        };
        let replacement = |r: &str| match r {
            "lfu" => Some(Replacement::Lfu),
            "lru" => Some(Replacement::Lru),
            "sieve" => Some(Replacement::Sieve),
            _ => None,
        };
        let name = s.trim().to_ascii_lowercase();
        if let Some((l, r)) = name.split_once('+') {
            return Ok(Policy {
                level: level(l).ok_or_else(err)?,
                replacement: replacement(r).ok_or_else(err)?,
            });
        }
        if let Some(level) = level(&name) {
            return Ok(Policy {
                level,
                replacement: Replacement::Lfu,
            });
        }
        let replacement = replacement(&name)
            .filter(|r| *r != Replacement::Lfu)
            .ok_or_else(err)?;
        Ok(Policy {
            level: Level::Total,
            replacement,
        })
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.level, self.replacement) {
            (level, Replacement::Lfu) => f.write_str(level.name()),
            (Level::Total, r) => f.write_str(r.name()),
            (level, r) => write!(f, "{}+{}", level.name(), r.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in Policy::NAMES
            .iter()
            .copied()
            .chain(["adaptive+sieve", "small+lru"])
        {
            let p: Policy = name.parse().expect("valid name");
            assert_eq!(p.to_string(), name);
        }
        assert!("lfu".parse::<Policy>().is_err());
        assert!("adaptive+mru".parse::<Policy>().is_err());
    }
}
