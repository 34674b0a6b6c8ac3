//! Shared helpers for the benchmarks (baselines written here).
