//! Shared helpers for the benchmarks (baselines written here).

pub mod echo;
pub mod naive_timer;
pub mod sleepers;
pub mod workload;
