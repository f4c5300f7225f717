//! The experiment side of slipstream, around the pure engines: full-factorial designs of
//! simulator scenarios run on a thread pool and resumed from their run directories
//! ([`design`]), a run's output files `transfers.csv` and `summary.json` ([`output`]), and the
//! SVG charts of every report ([`chart`]). This crate reads wall time, spawns threads and writes
//! files so that `slipstream-sim` need not; it never depends on tokio or hyper.

pub mod chart;
pub mod design;
pub mod output;
