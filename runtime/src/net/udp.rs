//! UDP: [`UdpSocket`], std's type in non-blocking mode inside an
//! `IoSource`, so that `send` and `recv` suspend only the task.

use super::addr::{each_addr, resolve, ToSocketAddrs};
use crate::driver::Direction;
use crate::io::source::IoSource;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// A UDP socket (std's `UdpSocket`, whose waits suspend only the task).
///
/// ```
/// use spindle::net::UdpSocket;
///
/// let rt = spindle::Runtime::builder().workers(1).build()?;
/// rt.block_on(|| -> std::io::Result<()> {
///     let server = UdpSocket::bind("127.0.0.1:0")?;
///     let client = UdpSocket::bind("127.0.0.1:0")?;
///     client.send_to(b"ping", server.local_addr()?)?;
///     let mut buf = [0u8; 64];
///     let (n, from) = server.recv_from(&mut buf)?; // suspends only this task
///     assert_eq!(&buf[..n], b"ping");
///     assert_eq!(from, client.local_addr()?);
///     Ok(())
/// })?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct UdpSocket {
    source: IoSource<std::net::UdpSocket>,
}

impl fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpSocket")
            .field("addr", &self.local_addr().ok())
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl UdpSocket {
    /// Binds a socket to the first address of `addr` that works.
    ///
    /// # Errors
    ///
    /// The last address's error, or the lookup's.
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        each_addr(&addr, |a| {
            UdpSocket::from_std(std::net::UdpSocket::bind(a)?)
        })
    }

    /// Wraps a std socket (made non-blocking here).
    ///
    /// # Errors
    ///
    /// If it cannot be made non-blocking.
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        socket.set_nonblocking(true)?;
        Ok(UdpSocket {
            source: IoSource::new(socket),
        })
    }

    /// Sets the peer that `send` sends to and `recv` receives from.
    pub fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<()> {
        each_addr(&addr, |a| self.source.get_ref().connect(a))
    }

    /// Sends to the connected peer.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.source.do_io(Direction::Write, |s| s.send(buf))
    }

    /// Receives from the connected peer.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_io(Direction::Read, |s| s.recv(buf))
    }

    /// Sends to the first address of `addr`.
    pub fn send_to(&self, buf: &[u8], addr: impl ToSocketAddrs) -> io::Result<usize> {
        let to = resolve(&addr)?.into_iter().next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no addresses to send data to")
        })?;
        self.source.do_io(Direction::Write, |s| s.send_to(buf, to))
    }

    /// Receives a datagram and who sent it.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.source.do_io(Direction::Read, |s| s.recv_from(buf))
    }

    /// Receives without removing the datagram from the queue.
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.source.do_io(Direction::Read, |s| s.peek_from(buf))
    }

    /// The address this socket is connected to (see `connect`).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().peer_addr()
    }

    /// The address this socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().local_addr()
    }

    /// Sets `SO_BROADCAST`.
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.source.get_ref().set_broadcast(on)
    }

    /// Another handle to the same socket (its own fd, no timeouts set).
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        UdpSocket::from_std(self.source.get_ref().try_clone()?)
    }
}

super::tcp::as_fd!(UdpSocket);
super::tcp::socket_timeouts!(UdpSocket);
