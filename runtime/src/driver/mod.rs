//! The I/O driver: fd readiness, the pollers that deliver it, and parking
//! a worker in its poller.
//!
//! It sits between task state and the scheduler, and knows nothing of the
//! scheduler: it uses only `meta` (a `TaskRef`, a `WaitQueue`) and below.
//!
//! - `readiness.rs`: each registered fd's two sequences and the tasks
//!   waiting for them to move, in a process-wide table of slots;
//! - `poller.rs`: a [`Poller`] (a `mio::Poll`, edge-triggered epoll) and
//!   the [`IoRegistration`]s of its fds. A poll turns events into bumped
//!   sequences, and hands every task they wake to the function its caller
//!   passes (the scheduler's `make_ready`): the driver never queues a task.
//! - `park.rs`: what the idle protocol needs to park a worker in its
//!   poller and wake it there: a blocking poll ([`PollWait::Park`]), the
//!   [`PollWaker`] that ends it, and [`PollParking`], per worker whether it
//!   is parked in its poller and its waker.
//!
//! The scheduler owns one poller per worker, makes it when a task first
//! waits for an fd, polls it in its idle loop, and says which poller a
//! task registers in; the I/O layer (`io`, `net`) registers fds and waits
//! on their readiness.

mod park;
mod poller;
mod readiness;

pub(crate) use park::{PollParking, PollWaker};
pub(crate) use poller::{IoRegistration, PollWait, Poller, PollerShared};
pub(crate) use readiness::Direction;
// Named outside only by the readiness model (`io/loom_io.rs`).
#[cfg(all(test, loom))]
pub(crate) use readiness::IoReadiness;
