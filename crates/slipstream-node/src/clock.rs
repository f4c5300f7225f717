//! The time a request path reads. Request paths never call `SystemTime::now()` or
//! `Instant::now()` themselves: they ask the node's [`Clock`], which is the system's in
//! production and tokio's in tests, so tests that wait run on tokio's paused clock
//! (`#[tokio::test(start_paused = true)]`, then `tokio::time::advance`).

use std::time::{Instant, SystemTime};

/// Wall-clock and monotonic time for one node.
#[derive(Debug, Clone, Copy, Default)]
pub enum Clock {
    /// The operating system's clocks.
    #[default]
    System,
    /// Tokio's clock, which tests may pause and advance: wall time is the wall time when the
    /// clock was made plus the time tokio's clock has moved since.
    Runtime {
        /// Wall time at `at`.
        wall: SystemTime,
        /// When the clock was made, on tokio's clock.
        at: tokio::time::Instant,
    },
}

impl Clock {
    /// A clock that follows tokio's (paused or not). Call inside a runtime.
    pub fn runtime() -> Clock {
        Clock::Runtime {
            wall: SystemTime::now(),
            at: tokio::time::Instant::now(),
        }
    }

    /// Wall-clock time (for HTTP dates and freshness).
    pub fn now(&self) -> SystemTime {
        match self {
            Clock::System => SystemTime::now(),
            Clock::Runtime { wall, at } => *wall + at.elapsed(),
        }
    }

    /// Monotonic time (for latencies and retry timers).
    pub fn instant(&self) -> Instant {
        match self {
            Clock::System => Instant::now(),
            Clock::Runtime { .. } => tokio::time::Instant::now().into_std(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_runtime_clock_moves_with_tokio_time() {
        let clock = Clock::runtime();
        let (wall, mono) = (clock.now(), clock.instant());
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(
            clock.now().duration_since(wall).ok(),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(clock.instant() - mono, Duration::from_secs(3600));
    }
}
