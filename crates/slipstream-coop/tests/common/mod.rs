//! What the coop integration tests share.

use std::time::{Duration, Instant};

/// How long a test waits for the network to settle.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `f` until it gives `Some` (at most [`DEADLINE`]): the network settles on its own
/// schedule, so tests wait for what they need, not for a fixed time.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "{what}: never happened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
