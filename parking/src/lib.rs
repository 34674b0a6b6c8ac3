//! The OS-thread blocking layer of spindle.
//!
//! Everything in spindle that puts an OS thread to sleep goes through this
//! crate: [`futex`] is a thin, safe wrapper over Linux's private futex, and
//! [`ParkingLot`] is the handshake idle workers use to sleep without losing a
//! wake-up. Nothing here knows about tasks or timers.
//!
//! Under `--cfg loom` the futex is replaced by an emulation built from loom's
//! mutex and condition variable (see [`Futex`]), so that the protocols built on
//! it — here and in the crates above — can be model-checked.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod futex;
pub mod loom;
mod lot;
#[cfg(all(test, not(loom)))]
mod test_support;

pub use futex::Futex;
pub use lot::{ParkState, ParkingLot};
