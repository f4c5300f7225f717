//! Integration tests of the proxy: a real proxy on loopback in front of a scriptable origin
//! (also real: hyper on loopback). One test per rule, named after its RFC section.

mod support;

mod caching;
mod hierarchy;
mod inflight;
mod partial;
mod robustness;
mod rules;
mod select;
