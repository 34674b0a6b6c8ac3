//! `TaskId`: the name of a task, valid or stale.
//!
//! An id is `version << 24 | slot`: the slot of the task's meta in the task
//! table (`meta::table`) and the version that slot had when the task was
//! made. The version bumps each time the slot is freed, so a stale id is
//! detected (its version no longer matches), never confused with a later
//! task. Pure bit arithmetic, so that the overflow handler (`stack`), which
//! runs in a signal handler, can print one.

use std::fmt;

/// The id of a task: unique among live tasks, and never confused with a
/// task that has ended (its version differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(u64);

/// Bits of a [`TaskId`] that hold the slot; the rest hold the version.
pub(crate) const SLOT_BITS: u32 = 24;
/// The version a slot is retired at (see the module docs).
pub(crate) const VERSION_LIMIT: u64 = 1 << (64 - SLOT_BITS);

impl TaskId {
    pub(crate) fn new(slot: u32, version: u64) -> Self {
        debug_assert!(slot < 1 << SLOT_BITS && version < VERSION_LIMIT);
        TaskId(version << SLOT_BITS | u64::from(slot))
    }
    /// The raw value, e.g. for logs.
    pub fn as_u64(self) -> u64 {
        self.0
    }
    /// An id from a raw value. A forged value names no task: calls that take
    /// it answer [`NoSuchTask`](crate::NoSuchTask).
    pub fn from_u64(raw: u64) -> Self {
        TaskId(raw)
    }
    pub(crate) fn slot(self) -> u32 {
        (self.0 & ((1 << SLOT_BITS) - 1)) as u32
    }
    pub(crate) fn version(self) -> u64 {
        self.0 >> SLOT_BITS
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task#{}.{}", self.slot(), self.version())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_id_carries_its_slot_and_version() {
        let id = TaskId::new((1 << SLOT_BITS) - 1, VERSION_LIMIT - 1);
        assert_eq!(
            (id.slot(), id.version()),
            ((1 << SLOT_BITS) - 1, VERSION_LIMIT - 1)
        );
        assert_eq!(TaskId::new(0, 1).as_u64(), 1 << SLOT_BITS);
    }
}
