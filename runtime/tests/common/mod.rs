//! Helpers shared by the runtime's integration tests.

// Each test binary compiles this module and uses only some of it.
#![allow(dead_code)]

/// The process's memory mappings now.
pub fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .count()
}

/// `vm.max_map_count`.
pub fn max_map_count() -> usize {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .expect("read /proc/sys/vm/max_map_count")
        .trim()
        .parse()
        .expect("a number")
}
