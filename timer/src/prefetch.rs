//! A cache prefetch hint: the timer thread reads heap levels and slots in
//! deadline order, all over memory, and with many timers each read was a
//! cache miss; it asks for the next ones early. Public, for the runtime's
//! workers, which prefetch the stack of the task they run next.

/// Starts loading the cache lines of `bytes` bytes from `at` (at least one
/// line). A hint: it reads nothing and cannot fault, wherever `at` points;
/// it does nothing off x86_64. One instruction per 64 bytes: for a few
/// lines, not a large region.
///
/// Not part of the timer's API: shared with the spindle runtime, and may
/// change with it.
#[doc(hidden)]
#[inline]
pub fn prefetch<T>(at: *const T, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..bytes.max(1)).step_by(64) {
        // SAFETY: a prefetch reads nothing and cannot fault, whatever the
        // address (`wrapping_add` keeps computing it defined); SSE is part
        // of the x86_64 baseline.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                at.cast::<i8>().wrapping_add(offset),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, bytes);
}
