//! Which CPUs worker threads run on.
//!
//! A new thread inherits its creator's CPU mask, and `sched_getaffinity`
//! reads the calling thread's. Both would let one pinned thread shrink a
//! runtime: a runtime built, or grown with `set_workers`, from a task on a
//! pinned worker would count one CPU and put every worker on it. So the
//! process's CPUs are read once, when the first runtime is built (no
//! spindle worker exists yet to have called it), and every worker starts
//! by taking that whole set, or the one CPU it is pinned to.

use std::io;
use std::sync::OnceLock;

/// The CPUs of the process, as the first runtime's build found them.
pub(crate) struct ProcessCpus {
    set: libc::cpu_set_t,
    /// The CPUs in `set`, in order.
    ids: Vec<usize>,
    /// `std::thread::available_parallelism` then: the CPU count, lowered by
    /// a cgroup quota.
    parallelism: usize,
}

/// See [`ProcessCpus`]; read on first use.
pub(crate) fn process_cpus() -> &'static ProcessCpus {
    static CPUS: OnceLock<ProcessCpus> = OnceLock::new();
    CPUS.get_or_init(|| {
        // SAFETY: cpu_set_t is a plain bit array, valid when zeroed.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid cpu_set_t of the size we pass.
        let read = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
        let ids = if read == 0 {
            // SAFETY: CPU_ISSET reads `set` within its bounds (the index is
            // below CPU_SETSIZE).
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
                .collect()
        } else {
            tracing::warn!(error = %io::Error::last_os_error(), "cannot read the CPU mask");
            Vec::new()
        };
        ProcessCpus {
            set,
            ids,
            parallelism: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    })
}

impl ProcessCpus {
    /// How many workers a runtime gets by default (before its cap).
    pub(crate) fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// The CPU that pinned worker `i` runs on, if the mask could be read.
    pub(crate) fn for_worker(&self, i: usize) -> Option<usize> {
        (!self.ids.is_empty()).then(|| self.ids[i % self.ids.len()])
    }

    /// Lets the calling thread run on `cpu` only, or (`None`) on every CPU
    /// of the process.
    pub(crate) fn bind_current(&self, cpu: Option<usize>) -> io::Result<()> {
        if self.ids.is_empty() {
            return Ok(()); // unknown: leave the inherited mask
        }
        let set = match cpu {
            None => self.set,
            Some(c) => {
                // SAFETY: a zeroed cpu_set_t is the empty set.
                let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: `c` came from `ids`, so it is below CPU_SETSIZE.
                unsafe { libc::CPU_SET(c, &mut one) };
                one
            }
        };
        // SAFETY: `set` is a valid cpu_set_t of the size we pass.
        match unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }
}
