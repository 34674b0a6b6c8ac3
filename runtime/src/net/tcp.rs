//! TCP: [`TcpListener`] and [`TcpStream`], std's types in non-blocking
//! mode inside an `IoSource`, so that `accept`, `connect`, `read` and
//! `write` suspend only the task.

use super::addr::{each_addr, ToSocketAddrs};
use crate::driver::Direction;
use crate::io::source::IoSource;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::fmt;
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// A TCP socket server, listening for connections (std's
/// `TcpListener`, whose `accept` suspends only the task).
///
/// ```
/// use spindle::net::{TcpListener, TcpStream};
/// use std::io::{Read, Write};
///
/// let rt = spindle::Runtime::builder().workers(2).build()?;
/// rt.block_on(|| -> std::io::Result<()> {
///     let listener = TcpListener::bind("127.0.0.1:0")?; // a free port
///     let addr = listener.local_addr()?;
///     // An echo server for one connection: a plain blocking loop, in a task.
///     let server = spindle::spawn(move || -> std::io::Result<()> {
///         let (mut conn, _peer) = listener.accept()?;
///         let mut buf = [0u8; 1024];
///         loop {
///             let n = conn.read(&mut buf)?;
///             if n == 0 {
///                 return Ok(()); // the client closed
///             }
///             conn.write_all(&buf[..n])?;
///         }
///     });
///     let mut client = TcpStream::connect(addr)?;
///     client.write_all(b"ping")?;
///     let mut reply = [0u8; 4];
///     client.read_exact(&mut reply)?;
///     assert_eq!(&reply, b"ping");
///     drop(client);
///     server.join().unwrap()
/// })?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TcpListener {
    source: IoSource<std::net::TcpListener>,
}

impl fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpListener")
            .field("addr", &self.local_addr().ok())
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl TcpListener {
    /// Binds a listener to the first address of `addr` that works.
    ///
    /// # Errors
    ///
    /// The last address's error, or the lookup's.
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        each_addr(&addr, |a| {
            let l = std::net::TcpListener::bind(a)?;
            TcpListener::from_std(l)
        })
    }

    /// Wraps a std listener (made non-blocking here).
    ///
    /// # Errors
    ///
    /// If it cannot be made non-blocking.
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        listener.set_nonblocking(true)?;
        Ok(TcpListener {
            source: IoSource::new(listener),
        })
    }

    /// Accepts a connection: suspends the task until one comes.
    ///
    /// # Errors
    ///
    /// The syscall's, or the wait's (see [`crate::io`]).
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (fd, addr) = self
            .source
            .do_io(Direction::Read, |l| accept(l.as_raw_fd()))?;
        // SAFETY: `accept4` returned a new fd that nothing else owns.
        let std = unsafe { std::net::TcpStream::from_raw_fd(fd.into_raw_fd()) };
        let addr = addr.as_socket().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "accepted a non-IP address")
        })?;
        Ok((TcpStream::from_nonblocking(std), addr))
    }

    /// An endless iterator of accepted connections.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().local_addr()
    }

    /// Another handle to the same socket.
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        TcpListener::from_std(self.source.get_ref().try_clone()?)
    }

    /// Sets `IP_TTL`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.source.get_ref().set_ttl(ttl)
    }

    /// The pending error of the socket, if any (`SO_ERROR`).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.source.get_ref().take_error()
    }
}

/// `accept4` with the new fd non-blocking and close-on-exec.
fn accept(fd: RawFd) -> io::Result<(OwnedFd, SockAddr)> {
    // SAFETY: `SockAddr::try_init` hands a zeroed storage and its length
    // to the closure, which passes both to `accept4` as it expects.
    let (res, addr) = unsafe {
        SockAddr::try_init(|storage, len| {
            let fd = libc::accept4(
                fd,
                storage.cast(),
                len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            );
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(fd)
            }
        })
    }?;
    // SAFETY: a new fd from `accept4`, owned by nothing else.
    Ok((unsafe { OwnedFd::from_raw_fd(res) }, addr))
}

/// The iterator of [`TcpListener::incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;
    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

/// A TCP connection (std's `TcpStream`, whose waits suspend only the
/// task). `Read` and `Write` are implemented for `TcpStream` and
/// `&TcpStream`: one task may read while another writes.
///
/// ```
/// use spindle::net::{TcpListener, TcpStream};
/// use spindle::WaitError;
/// use std::io::{ErrorKind, Read};
/// use std::time::{Duration, Instant};
///
/// let rt = spindle::Runtime::builder().workers(1).build()?;
/// rt.block_on(|| -> std::io::Result<()> {
///     let listener = TcpListener::bind("127.0.0.1:0")?;
///     let mut stream = TcpStream::connect(listener.local_addr()?)?;
///     stream.set_nodelay(true)?;
///     let (_silent_peer, _) = listener.accept()?;
///
///     // The deadline scope ends a read that waits too long...
///     let mut buf = [0u8; 16];
///     let soon = Instant::now() + Duration::from_millis(10);
///     let err = spindle::with_deadline(soon, || stream.read(&mut buf)).unwrap_err();
///     assert_eq!(err.kind(), ErrorKind::TimedOut);
///     assert_eq!(spindle::io::wait_error(&err), Some(WaitError::DeadlineExceeded));
///
///     // ...and so does the socket's own timeout, as with std.
///     stream.set_read_timeout(Some(Duration::from_millis(10)))?;
///     let err = stream.read(&mut buf).unwrap_err();
///     assert_eq!(err.kind(), ErrorKind::TimedOut);
///     assert_eq!(spindle::io::wait_error(&err), None); // the socket's, not the scope's
///     Ok(())
/// })?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TcpStream {
    source: IoSource<std::net::TcpStream>,
}

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStream")
            .field("addr", &self.local_addr().ok())
            .field("peer", &self.peer_addr().ok())
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl TcpStream {
    /// Connects to the first address of `addr` that accepts, trying each
    /// in turn as std does. Names are looked up off the worker.
    ///
    /// # Errors
    ///
    /// The last address's error, the lookup's, or the wait's (see
    /// [`crate::io`]).
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        each_addr(&addr, |a| connect(a, None))
    }

    /// Connects to `addr`, giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); `TimedOut` once `timeout` passes; a
    /// zero `timeout` is `InvalidInput`, as std.
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        connect(addr, Some(timeout))
    }

    /// Wraps a std stream (made non-blocking here).
    ///
    /// # Errors
    ///
    /// If it cannot be made non-blocking.
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        stream.set_nonblocking(true)?;
        Ok(TcpStream::from_nonblocking(stream))
    }

    fn from_nonblocking(stream: std::net::TcpStream) -> TcpStream {
        TcpStream {
            source: IoSource::new(stream),
        }
    }

    /// The address of the peer this stream is connected to.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().peer_addr()
    }

    /// The local address of this end of the connection.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().local_addr()
    }

    /// Shuts down the read half, the write half, or both.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.source.get_ref().shutdown(how)
    }

    /// Sets `TCP_NODELAY`: segments go out at once, not gathered by
    /// Nagle's algorithm (what a request-reply protocol wants).
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.source.get_ref().set_nodelay(nodelay)
    }

    /// Whether `TCP_NODELAY` is set.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.source.get_ref().nodelay()
    }

    /// Sets the IP time-to-live of the packets this stream sends.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.source.get_ref().set_ttl(ttl)
    }

    /// The IP time-to-live of the packets this stream sends.
    pub fn ttl(&self) -> io::Result<u32> {
        self.source.get_ref().ttl()
    }

    /// Another handle to the same connection (its own fd, with no
    /// timeouts set).
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        Ok(TcpStream::from_nonblocking(
            self.source.get_ref().try_clone()?,
        ))
    }

    /// Reads without removing what it read from the socket's queue.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_io(Direction::Read, |s| s.peek(buf))
    }
}

/// A non-blocking connect to `addr`: waits for the socket to be writable
/// (until `timeout`, if any), then reads its outcome.
fn connect(addr: &SocketAddr, timeout: Option<Duration>) -> io::Result<TcpStream> {
    let socket = Socket::new(
        Domain::for_address(*addr),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_nonblocking(true)?;
    let stream = TcpStream::from_nonblocking(socket.into());
    match socket2::SockRef::from(stream.source.get_ref()).connect(&(*addr).into()) {
        Ok(()) => return Ok(stream),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let timeout = timeout.map(|t| (t, Instant::now().checked_add(t)));
    stream.source.do_io_until(
        Direction::Write,
        timeout,
        |_| false,
        |s| match s.take_error()? {
            Some(e) => Err(e),
            // Connected, or still on its way (a spurious wake-up): the
            // peer address says which.
            None => match s.peer_addr() {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    Err(io::ErrorKind::WouldBlock.into())
                }
                Err(e) => Err(e),
            },
        },
    )?;
    Ok(stream)
}

/// `Read` and `Write` for a stream type and for a shared reference to it,
/// through its `IoSource` and std's impls for `&Std`; with std's retry
/// loops replaced by ones that end on an interrupt (see [`crate::io`]).
macro_rules! stream_read_write {
    ($t:ty, $io:ident) => {
        impl std::io::Read for &$t {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let dir = $crate::driver::Direction::Read;
                self.source
                    .$io(dir, buf.len(), |mut s| std::io::Read::read(&mut s, buf))
            }
            fn read_vectored(
                &mut self,
                bufs: &mut [std::io::IoSliceMut<'_>],
            ) -> std::io::Result<usize> {
                let dir = $crate::driver::Direction::Read;
                self.source
                    .do_io(dir, |mut s| std::io::Read::read_vectored(&mut s, bufs))
            }
            fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
                $crate::io::read_exact(|b| std::io::Read::read(self, b), buf)
            }
            fn read_to_end(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
                $crate::io::read_to_end(|b| std::io::Read::read(self, b), buf)
            }
            fn read_to_string(&mut self, buf: &mut String) -> std::io::Result<usize> {
                $crate::io::read_to_string(|b| std::io::Read::read(self, b), buf)
            }
        }

        impl std::io::Write for &$t {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                let dir = $crate::driver::Direction::Write;
                self.source
                    .$io(dir, buf.len(), |mut s| std::io::Write::write(&mut s, buf))
            }
            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                let dir = $crate::driver::Direction::Write;
                self.source
                    .do_io(dir, |mut s| std::io::Write::write_vectored(&mut s, bufs))
            }
            fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
                $crate::io::write_all(|b| std::io::Write::write(self, b), buf)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }

        impl std::io::Read for $t {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                std::io::Read::read(&mut &*self, buf)
            }
            fn read_vectored(
                &mut self,
                bufs: &mut [std::io::IoSliceMut<'_>],
            ) -> std::io::Result<usize> {
                std::io::Read::read_vectored(&mut &*self, bufs)
            }
            fn read_exact(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
                std::io::Read::read_exact(&mut &*self, buf)
            }
            fn read_to_end(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
                std::io::Read::read_to_end(&mut &*self, buf)
            }
            fn read_to_string(&mut self, buf: &mut String) -> std::io::Result<usize> {
                std::io::Read::read_to_string(&mut &*self, buf)
            }
        }

        impl std::io::Write for $t {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                std::io::Write::write(&mut &*self, buf)
            }
            fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
                std::io::Write::write_vectored(&mut &*self, bufs)
            }
            fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
                std::io::Write::write_all(&mut &*self, buf)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
    };
}
pub(crate) use stream_read_write;

stream_read_write!(TcpStream, do_stream_io);

/// `AsFd` and `AsRawFd` through the `IoSource`.
macro_rules! as_fd {
    ($($t:ty),*) => {$(
        impl std::os::fd::AsFd for $t {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                self.source.get_ref().as_fd()
            }
        }
        impl std::os::fd::AsRawFd for $t {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                self.source.get_ref().as_raw_fd()
            }
        }
    )*};
}
pub(crate) use as_fd;

as_fd!(TcpListener, TcpStream);

/// The timeouts and `take_error` of a socket type, through its
/// `IoSource`: std's names and rules.
macro_rules! socket_timeouts {
    ($($t:ty),*) => {$(
        impl $t {
            /// Bounds each later wait of a read or receive (`None`: no
            /// bound); an ended wait is `TimedOut`.
            ///
            /// # Errors
            ///
            /// `Some(Duration::ZERO)` is `InvalidInput`, as std.
            pub fn set_read_timeout(
                &self,
                timeout: Option<std::time::Duration>,
            ) -> std::io::Result<()> {
                self.source.set_timeout($crate::driver::Direction::Read, timeout)
            }

            /// Bounds each later wait of a write or send (`None`: no
            /// bound); an ended wait is `TimedOut`.
            ///
            /// # Errors
            ///
            /// `Some(Duration::ZERO)` is `InvalidInput`, as std.
            pub fn set_write_timeout(
                &self,
                timeout: Option<std::time::Duration>,
            ) -> std::io::Result<()> {
                self.source.set_timeout($crate::driver::Direction::Write, timeout)
            }

            /// The read timeout (`None`: no bound).
            pub fn read_timeout(&self) -> std::io::Result<Option<std::time::Duration>> {
                Ok(self.source.timeout($crate::driver::Direction::Read))
            }

            /// The write timeout (`None`: no bound).
            pub fn write_timeout(&self) -> std::io::Result<Option<std::time::Duration>> {
                Ok(self.source.timeout($crate::driver::Direction::Write))
            }

            /// The pending error of the socket, if any (`SO_ERROR`).
            pub fn take_error(&self) -> std::io::Result<Option<std::io::Error>> {
                self.source.get_ref().take_error()
            }
        }
    )*};
}
pub(crate) use socket_timeouts;

socket_timeouts!(TcpStream);
