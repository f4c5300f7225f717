//! Level rules: how much of an object the cache may hold (paper 002 §3.2, §4.1.2, Table 3).

/// How much of an object a cache keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// 002 Table 3 `total`: an object is cached whole as long as it fits in the cache.
    Total,
    /// 002 Table 3 `small`: an object is cached whole only if it is at most `max_file_size` bytes.
    Small,
    /// 002 Table 3 `adaptive`: an object of at most `max_file_size` bytes is cached whole
    /// ("completely cached"); a larger one keeps only its first `max_file_size` bytes
    /// ("incompletely cached", 002 §4.1.2).
    Adaptive,
}

/// What the cache would store of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// Bytes charged to the cache.
    pub bytes: u64,
    /// Whether those bytes are the whole object.
    pub complete: bool,
}

impl Level {
    /// How much of an object of `object_bytes` would be stored in a cache of
    /// `capacity_bytes` whose chunk threshold is `max_file_size` (the paper's MAX_FILE_SIZE),
    /// or `None` when this level never caches such an object.
    pub fn stored(
        self,
        object_bytes: u64,
        capacity_bytes: u64,
        max_file_size: u64,
    ) -> Option<Stored> {
        let whole = Stored {
            bytes: object_bytes,
            complete: true,
        };
        match self {
            Level::Total => (object_bytes <= capacity_bytes).then_some(whole),
            Level::Small => (object_bytes <= max_file_size.min(capacity_bytes)).then_some(whole),
            Level::Adaptive => {
                let chunk = max_file_size.min(capacity_bytes);
                if object_bytes <= chunk {
                    Some(whole)
                } else if chunk == 0 {
                    None
                } else {
                    // 002 §4.1.2: the first k bytes, k = MAX_FILE_SIZE minus the header, which
                    // the caller has already included in `object_bytes`.
                    Some(Stored {
                        bytes: chunk,
                        complete: false,
                    })
                }
            }
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Level::Total => "total",
            Level::Small => "small",
            Level::Adaptive => "adaptive",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_3_rules() {
        let (cap, max) = (1000, 250);
        assert_eq!(
            Level::Total.stored(900, cap, max),
            Some(Stored {
                bytes: 900,
                complete: true
            })
        );
        assert_eq!(Level::Total.stored(1001, cap, max), None);
        assert_eq!(
            Level::Small.stored(250, cap, max),
            Some(Stored {
                bytes: 250,
                complete: true
            })
        );
        assert_eq!(Level::Small.stored(251, cap, max), None);
        assert_eq!(
            Level::Adaptive.stored(100, cap, max),
            Some(Stored {
                bytes: 100,
                complete: true
            })
        );
        assert_eq!(
            Level::Adaptive.stored(5000, cap, max),
            Some(Stored {
                bytes: 250,
                complete: false
            })
        );
    }
}
