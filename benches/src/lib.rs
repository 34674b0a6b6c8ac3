//! Shared helpers for the benchmarks (baselines written here).
#![warn(missing_docs)]

pub mod echo;
pub mod naive_timer;
pub mod sleepers;
pub mod turn;
pub mod workload;
