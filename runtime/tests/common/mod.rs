//! Helpers shared by the runtime's integration tests.

// Each test binary compiles this module and uses only some of it.
#![allow(dead_code)]

/// Whether this kernel has guard regions (`MADV_GUARD_INSTALL`, Linux 6.13),
/// so that a task stack is one memory mapping rather than two.
pub fn guard_regions() -> bool {
    const MADV_GUARD_INSTALL: libc::c_int = 102;
    // SAFETY: a fresh private page of our own, advised, then unmapped.
    unsafe {
        let page = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(page, libc::MAP_FAILED, "mmap a page");
        let ok = libc::madvise(page, 4096, MADV_GUARD_INSTALL) == 0;
        libc::munmap(page, 4096);
        ok
    }
}

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
