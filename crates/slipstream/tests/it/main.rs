//! Integration tests of the `slipstream` binary: each starts the real binary on loopback and
//! talks to it over real sockets.

mod cli;
mod cluster;
mod cluster_auth;
mod coop;
mod coop_adversary;
mod coop_failover;
mod coop_freshness;
mod coop_integrity;
mod get;
mod hierarchy;
mod node;
mod phases;
mod prefetch;
mod proxy_guard;
mod serve;
mod status_page;
mod support;
mod tls;
mod webpp;
