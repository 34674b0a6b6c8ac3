//! The wait layer: how a task (or a plain thread) waits, and what ends it.
//!
//! [`Butex`] is the one wait primitive: a task that waits switches out and
//! hands its worker the wait through the scheduler's seam
//! (`meta::seam::Blocker`, implemented here by the wait node), and whoever
//! ends the wait — a waker, its timer, an interrupt, the runtime's stop —
//! hands the task back through `sched::make_ready`. Deadline scopes
//! ([`deadline`]) fold into every wait. Sleeps, joins, the `sync`
//! primitives and channels, I/O readiness (`io::source`) and the blocking
//! pool's results (`io::blocking`) are all waits of this layer. They use
//! the scheduler's small API (which task runs here, `suspend`,
//! `make_ready`); the scheduler uses nothing of theirs but the seam, so a
//! new wait adds no edge into it.

mod butex;
pub(crate) mod deadline;
#[cfg(all(test, loom))]
mod loom_butex;
#[cfg(all(test, loom))]
mod loom_family;

pub use butex::Butex;
pub(crate) use butex::{signal, wait, Signal};
