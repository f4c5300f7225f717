//! Workloads for slipstream: recorded traces and synthetic request streams.
//!
//! * [`trace`] reads access logs (Common/Combined Log Format) and the project's own
//!   three-column TSV format into a list of [`Request`]s, and writes TSV.
//! * [`table1`] builds the synthetic file set and request mix of paper 002 §5.1.2
//!   (Table 1, the "current workload") and the "modified workload" of §5.4, in which the
//!   three largest files receive a chosen share of the requests.
//! * [`web`] is a ProWGen-like proxy workload (Zipf popularity, heavy-tailed sizes).
//! * [`clients`] holds traces whose requests name a client and a service: read from logs, or
//!   generated for a population of clients browsing many sites (paper 000 §5, Fig. 7).
//!
//! Nothing here touches the network; randomness comes from an explicit seed so every
//! stream is reproducible.

pub mod clients;
pub mod table1;
pub mod trace;
pub mod web;

/// One request of a trace or synthetic stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Arrival time in seconds, relative to the start of the stream.
    pub time_s: f64,
    /// The requested object, e.g. a URL path (query string included).
    pub key: String,
    /// The size of the response body in bytes.
    pub size_bytes: u64,
}
