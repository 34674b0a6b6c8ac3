//! Which CPUs worker threads run on.
//!
//! A runtime takes its CPUs from the thread that builds it: that thread's
//! mask and `available_parallelism` (which also heeds a cgroup quota), and
//! a new thread inherits its creator's mask. So a runtime built on a
//! restricted thread is restricted alike, as a user restricting that thread
//! would expect. One case is not what anybody means: a runtime built or
//! grown from a task, on a worker that spindle itself pinned to one CPU. A
//! runtime built on a worker therefore takes the CPUs of that worker's
//! runtime, and workers started from a worker set their mask to their
//! runtime's CPUs, instead of inheriting one CPU.
//!
//! Reading the mask and pinning a worker to one CPU (`Builder::pin_workers`)
//! go through `core_affinity`. Setting a mask of several CPUs (the case
//! above) is a direct `sched_setaffinity`: `core_affinity` only pins to a
//! single core.

use std::io;

/// The CPUs a runtime's workers may use, as read when it was built.
#[derive(Debug, Clone)]
pub(crate) struct Cpus {
    /// The CPUs of the building thread's mask, in order; empty if the mask
    /// could not be read.
    ids: Vec<usize>,
    /// `std::thread::available_parallelism` then.
    parallelism: usize,
}

/// How a new worker thread sets its mask.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bind {
    /// Keep the mask inherited from the thread that started it.
    Inherit,
    /// Every CPU of its runtime.
    All,
    /// This CPU only (`Builder::pin_workers`).
    One(usize),
}

impl Cpus {
    /// The calling thread's CPUs.
    pub(crate) fn of_this_thread() -> Cpus {
        let ids = match core_affinity::get_core_ids() {
            Some(ids) => ids.into_iter().map(|c| c.id).collect(),
            None => {
                tracing::warn!(error = %io::Error::last_os_error(), "cannot read the CPU mask");
                Vec::new()
            }
        };
        Cpus {
            ids,
            parallelism: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// How many workers a runtime gets by default (before its cap).
    pub(crate) fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// How worker `i` binds: to one CPU if `pinned`, to all of them if it
    /// is started from a worker thread (whose mask may be one CPU), else
    /// as it inherits.
    pub(crate) fn bind_for(&self, i: usize, pinned: bool, from_a_worker: bool) -> Bind {
        if self.ids.is_empty() {
            Bind::Inherit // unknown: leave it
        } else if pinned {
            Bind::One(self.ids[i % self.ids.len()])
        } else if from_a_worker {
            Bind::All
        } else {
            Bind::Inherit
        }
    }

    /// Sets the calling thread's mask as `bind` says.
    pub(crate) fn bind_current(&self, bind: Bind) -> io::Result<()> {
        match bind {
            Bind::Inherit => Ok(()),
            Bind::One(id) => {
                if core_affinity::set_for_current(core_affinity::CoreId { id }) {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            }
            Bind::All => set_mask(&self.ids),
        }
    }
}

/// Sets the calling thread's mask to `ids`.
fn set_mask(ids: &[usize]) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &id in ids.iter().filter(|&&id| id < libc::CPU_SETSIZE as usize) {
        // SAFETY: `id` is below CPU_SETSIZE, so within the set.
        unsafe { libc::CPU_SET(id, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size we pass.
    match unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}
