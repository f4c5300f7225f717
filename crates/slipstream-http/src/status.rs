//! The live status page served at `/_slipstream/status`: one self-contained HTML file whose
//! script polls `/_slipstream/metrics` every second and draws charts on canvases. No external
//! assets, so it works on an isolated network.
//!
//! After each redraw the page records in the DOM how many charts it drew
//! (`body[data-charts-drawn]`) and, per canvas, how many pixels carry ink (`data-ink`) and how many data points it
//! plotted (`data-points`), which
//! is what the browser test checks.

/// The page.
pub const PAGE: &str = include_str!("status.html");
