//! NPS prefetching's no-I/O core (paper 000): what to prefetch.
//!
//! - [`predict`]: the predictors behind one trait. [`Ppm`] is the paper's PPM-n/w (§6.3): a
//!   client's `n` most recent page requests predict the URLs of the window that ends with its
//!   `w`-th next page request (n = 2, w = 10 by default). Beside it, two baselines: [`Popularity`]
//!   (the "top-10": the most requested URLs, whatever the client did) and the first-order Markov
//!   chain of Guess.js-style prefetchers ([`Ppm::markov`]: order 1, the next page only).
//!   Training is online: each request a client makes is [`Predictor::learn`]t as it comes, and
//!   training from a log is the same thing over the log's sessions.
//! - [`sessions`]: traces as clients' sessions: MSNBC's page-category sequences and Common Log
//!   Format logs (grouped by client, split after 30 idle minutes).
//! - [`eval`]: precision, recall and wasted bytes per useful byte at several list lengths, with
//!   the predictor frozen after training (offline) or learning as the test runs (online).
//!
//! - [`monitor`]: budget estimation (§3.3): AIMD over probe response times, and the threshold
//!   from the knee of a response-time curve.
//! - [`cost`]: what prefetching costs demand, from clients' reports of their pages' response
//!   times in quiet periods (no prefetching) and busy ones.
//! - [`budget`]: budget distribution (§3.3): which hint requests get one document's worth of
//!   hints, p = min(1, B·τ / (N·D)), and when the others should ask again.
//! - [`hints`]: the hint server's model, trained from the demand stream, answering a client's
//!   (current, previous document, turn).
//!
//! Time, I/O and randomness stay outside: everything here is deterministic.

pub mod budget;
pub mod cost;
pub mod eval;
pub mod hints;
pub mod monitor;
pub mod predict;
pub mod sessions;

pub use predict::{History, Item, Popularity, Ppm, Prediction, Predictor, Sym};
