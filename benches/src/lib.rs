//! Shared helpers for the benchmarks (baselines written here).

pub mod naive_timer;
pub mod sleepers;
pub mod workload;
