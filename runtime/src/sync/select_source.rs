//! What a `Select` needs of an operation's source (`select.rs`): how to
//! tell it is ready, and how to announce a wait on it. Apart from `Select`
//! so that the channels, which implement it, and `Select`, which uses
//! them, do not import each other.

use crate::meta::wait_queue::WaitQueue;

/// A source a `Select` waits on (implemented by the receivers and
/// `JoinHandle`).
pub(crate) trait SelectSource {
    /// Whether the operation completes now without waiting (a value, a
    /// disconnection, an end).
    fn is_ready(&self) -> bool;

    /// Step 1 of the module docs: announces a wait and returns the queue
    /// to register on and the value to wait while; `None` if the operation
    /// turned ready (the announcement is then taken back).
    fn announce(&self) -> Option<(&WaitQueue, u32)>;

    /// Takes back an announcement (step 5).
    fn withdraw(&self) {}
}
