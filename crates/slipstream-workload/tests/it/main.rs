//! Integration tests of slipstream-workload: trace parsing and the Table 1 workload.

mod table1;
mod trace;
