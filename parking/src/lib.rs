//! The futex layer of spindle: where its own threads sleep.
//!
//! [`futex`] is a thin, safe wrapper over Linux's private futex, and
//! [`ParkingLot`] is the handshake idle workers use to sleep without losing a
//! wake-up. Nothing here knows about tasks or timers.
//!
//! Two of spindle's sleeps go through this crate: an idle worker that polls
//! no fds parks on a [`ParkingLot`], and the timer thread waits on a
//! [`Futex`] until its next deadline. The others do not:
//!
//! - an idle worker with registered fds sleeps in its poller's epoll wait
//!   (or a `ppoll` of the epoll fd, for a timeout under a millisecond), so
//!   that an I/O event wakes it too; the runtime's I/O dispatcher thread,
//!   if it has one, always does;
//! - a plain thread blocked in a spindle wait (a butex, a lock, a join, a
//!   channel) parks with `std::thread::park`/`park_timeout`; in `sleep`, it
//!   sleeps with `std::thread::sleep`; waiting for an fd, it `ppoll`s it;
//! - the blocking pool's idle threads wait on a `std::sync::Condvar`;
//! - at a runtime's stop, a worker waiting for its cancelled tasks to come
//!   back yields, then sleeps a millisecond at a time, and an unwinding
//!   scope's owner polls the scope's count with 100 µs sleeps.
//!
//! Under `--cfg loom` the futex is replaced by an emulation built from loom's
//! mutex and condition variable (see [`Futex`]), so that the protocols built on
//! it — here and in the crates above — can be model-checked.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// Other targets stop here, with one clear error, rather than deep inside
// libc (tests/linux_only.rs checks it).
#[cfg(not(target_os = "linux"))]
compile_error!(
    "spindle runs on Linux only: spindle-parking is a wrapper over Linux's futex system call."
);

pub mod futex;
pub mod loom;
mod lot;
#[cfg(all(test, not(loom)))]
mod test_support;

pub use futex::Futex;
pub use lot::{ParkState, ParkingLot};
