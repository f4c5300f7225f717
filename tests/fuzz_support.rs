//! The driver every `fuzz` test file shares (included with `#[path]`): runs one property over
//! generated inputs with proptest on the stable toolchain, for a bounded number of cases or a
//! bounded time, and reports what it ran so `experiments/robustness/fuzz.sh` can record it.
//!
//! - `SLIPSTREAM_FUZZ_CASES=N` runs N cases per target (default: the target's own, a few
//!   seconds at most in a debug `cargo test`).
//! - `SLIPSTREAM_FUZZ_SECONDS=S` instead runs batches of cases until S seconds have passed.
//!
//! A failing case panics with proptest's shrunk input, so the target fails like any test.
//! Each target prints `fuzz-result NAME CASES SECONDS` (seen with `--nocapture`).

#![allow(dead_code)] // each test file uses part of it

use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};

/// Cases per batch when running for a time.
const BATCH: u32 = 512;

/// Runs `property` on values of `strategy` (see the module comment for the bounds).
pub fn fuzz<S: Strategy>(
    name: &str,
    default_cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let env = |key: &str| std::env::var(key).ok().and_then(|v| v.parse::<u64>().ok());
    let seconds = env("SLIPSTREAM_FUZZ_SECONDS");
    let cases =
        env("SLIPSTREAM_FUZZ_CASES").map_or(default_cases, |n| n.min(u32::MAX.into()) as u32);
    let batch = if seconds.is_some() { BATCH } else { cases };
    let config = Config {
        cases: batch,
        // Inputs that fail are turned into named regression tests instead.
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let start = Instant::now();
    let deadline = seconds.map(|s| start + Duration::from_secs(s));
    let mut ran: u64 = 0;
    loop {
        // A runner counts its successes and stops at `cases`, so each batch needs a fresh one
        // (seeded at random unless PROPTEST_RNG_SEED fixes it).
        let mut runner = TestRunner::new(config.clone());
        if let Err(e) = runner.run(&strategy, &property) {
            panic!("fuzz target {name} failed after {ran} passing cases: {e}");
        }
        ran += u64::from(batch);
        match deadline {
            Some(d) if Instant::now() < d => continue,
            _ => break,
        }
    }
    println!(
        "fuzz-result {name} {ran} {:.1}",
        start.elapsed().as_secs_f64()
    );
}
