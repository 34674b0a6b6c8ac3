//! Sockets whose waits suspend only the task: std's `net` types (and
//! `std::os::unix::net`'s) in their shapes.
//!
//! Each type holds the std socket, non-blocking, in an `IoSource`
//! (`io/source.rs`): a call that would block waits for the fd's readiness
//! in the poller of the task's worker, and honours the task's deadline
//! scope, `interrupt`, `stop` and the socket's own timeouts (see
//! [`crate::io`] for the errors). On a plain thread the same calls block
//! the thread, as std's do. Names resolve on the blocking pool
//! ([`lookup_host`]), literal addresses at once.

mod addr;
mod tcp;
mod udp;
mod unix;

pub use addr::{lookup_host, ToSocketAddrs};
pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;
pub use unix::{Incoming as UnixIncoming, UnixListener, UnixStream};
