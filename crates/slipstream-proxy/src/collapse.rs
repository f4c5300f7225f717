//! Request collapsing: concurrent misses on one key make one upstream request; the others wait
//! for its outcome. The waiting list per key is bounded; a request beyond the bound goes
//! upstream on its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::store::Stored;

/// What the leader's fetch produced for its followers.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// A stored response the followers may reuse.
    Stored(Arc<Stored>),
    /// Nothing reusable (not storable, an error, or the leader went away): fetch on your own.
    Alone,
}

type Flights = Arc<Mutex<HashMap<String, Flight>>>;

struct Flight {
    tx: watch::Sender<Option<Outcome>>,
    waiters: usize,
}

/// In-flight fetches by key.
pub struct Collapser {
    flights: Flights,
    max_waiters: usize,
}

impl std::fmt::Debug for Collapser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collapser")
            .field("in_flight", &self.flights.lock().len())
            .field("max_waiters", &self.max_waiters)
            .finish()
    }
}

/// A request's place in a flight.
#[derive(Debug)]
pub enum Join {
    /// Fetch, then call [`Leader::finish`].
    Leader(Leader),
    /// Wait for the leader.
    Follower(watch::Receiver<Option<Outcome>>),
    /// The waiting list is full: fetch without collapsing.
    Overflow,
}

/// The request that fetches for a key. Dropping it without finishing releases the followers
/// with [`Outcome::Alone`]. It owns its place, so a response body storing as it streams can
/// carry it.
pub struct Leader {
    flights: Flights,
    key: String,
    done: bool,
}

impl Collapser {
    /// A collapser allowing `max_waiters` followers per key.
    pub fn new(max_waiters: usize) -> Collapser {
        Collapser {
            flights: Arc::new(Mutex::new(HashMap::new())),
            max_waiters,
        }
    }

    /// Joins the flight for `key`, or starts it.
    pub fn join(&self, key: &str) -> Join {
        let mut flights = self.flights.lock();
        if let Some(flight) = flights.get_mut(key) {
            if flight.waiters >= self.max_waiters {
                return Join::Overflow;
            }
            flight.waiters += 1;
            return Join::Follower(flight.tx.subscribe());
        }
        let (tx, _) = watch::channel(None);
        flights.insert(key.to_owned(), Flight { tx, waiters: 0 });
        Join::Leader(Leader {
            flights: self.flights.clone(),
            key: key.to_owned(),
            done: false,
        })
    }

    /// Flights in progress.
    pub fn in_flight(&self) -> usize {
        self.flights.lock().len()
    }

    /// Requests waiting for another's fetch, over all flights.
    pub fn waiting(&self) -> usize {
        self.flights.lock().values().map(|f| f.waiters).sum()
    }
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leader").field("key", &self.key).finish()
    }
}

impl Leader {
    /// Hands the outcome to every follower and ends the flight.
    pub fn finish(mut self, outcome: Outcome) {
        self.release(outcome);
    }

    fn release(&mut self, outcome: Outcome) {
        if self.done {
            return;
        }
        self.done = true;
        if let Some(flight) = self.flights.lock().remove(&self.key) {
            // Followers may all have gone; that is fine.
            let _ = flight.tx.send(Some(outcome));
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.release(Outcome::Alone);
    }
}

/// Waits for a leader's outcome, at most `patience`: a leader storing a body as its client
/// reads it may take as long as that client, and a follower then fetches alone.
pub async fn wait(mut rx: watch::Receiver<Option<Outcome>>, patience: Duration) -> Outcome {
    match tokio::time::timeout(patience, rx.wait_for(Option::is_some)).await {
        Ok(Ok(v)) => v.clone().unwrap_or(Outcome::Alone),
        _ => Outcome::Alone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followers_get_the_leaders_outcome_and_the_list_is_bounded() {
        let c = Collapser::new(2);
        let Join::Leader(leader) = c.join("k") else {
            panic!("first is leader")
        };
        let Join::Follower(a) = c.join("k") else {
            panic!("second follows")
        };
        let Join::Follower(b) = c.join("k") else {
            panic!("third follows")
        };
        assert!(matches!(c.join("k"), Join::Overflow));
        drop(leader);
        let patience = Duration::from_secs(1);
        assert!(matches!(wait(a, patience).await, Outcome::Alone));
        assert!(matches!(wait(b, patience).await, Outcome::Alone));
        assert_eq!(c.in_flight(), 0);
        assert!(matches!(c.join("k"), Join::Leader(_)));
    }
}
