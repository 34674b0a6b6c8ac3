//! Unix domain sockets: [`UnixListener`] and [`UnixStream`], std's types
//! in non-blocking mode inside an `IoSource`.

use crate::driver::Direction;
use crate::io::blocking;
use crate::io::source::{wait_error, IoSource};
use crate::meta::wait_queue::WaitPolicy;
use crate::sched;
use socket2::{Domain, SockAddr, Socket, Type};
use std::fmt;
use std::io;
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::SocketAddr;
use std::path::Path;

/// A Unix socket server (std's `UnixListener`, whose `accept` suspends
/// only the task).
///
/// ```
/// use spindle::net::{UnixListener, UnixStream};
/// use std::io::{Read, Write};
///
/// let path = std::env::temp_dir().join(format!("spindle-doc-{}.sock", std::process::id()));
/// let _ = std::fs::remove_file(&path);
/// let rt = spindle::Runtime::builder().workers(2).build()?;
/// rt.block_on(|| -> std::io::Result<()> {
///     let listener = UnixListener::bind(&path)?;
///     let server = spindle::spawn(move || -> std::io::Result<String> {
///         let (mut conn, _) = listener.accept()?;
///         let mut request = String::new();
///         conn.read_to_string(&mut request)?; // until the client shuts its side
///         Ok(request)
///     });
///     let mut client = UnixStream::connect(&path)?;
///     client.write_all(b"status")?;
///     client.shutdown(std::net::Shutdown::Write)?;
///     assert_eq!(server.join().unwrap()?, "status");
///     Ok(())
/// })?;
/// std::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct UnixListener {
    source: IoSource<std::os::unix::net::UnixListener>,
}

impl fmt::Debug for UnixListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixListener")
            .field("addr", &self.local_addr().ok())
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl UnixListener {
    /// Binds a listener to `path`.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        UnixListener::from_std(std::os::unix::net::UnixListener::bind(path)?)
    }

    /// Wraps a std listener (made non-blocking here).
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        listener.set_nonblocking(true)?;
        Ok(UnixListener {
            source: IoSource::new(listener),
        })
    }

    /// Accepts a connection: suspends the task until one comes.
    pub fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        let (s, addr) = self.source.do_io(Direction::Read, |l| l.accept())?;
        Ok((UnixStream::from_std(s)?, addr))
    }

    /// An endless iterator of accepted connections.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The path (or unnamed address) this socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().local_addr()
    }

    /// Another handle to the same listening socket (its own fd).
    pub fn try_clone(&self) -> io::Result<UnixListener> {
        UnixListener::from_std(self.source.get_ref().try_clone()?)
    }

    /// Takes the socket's pending error (`SO_ERROR`), if any.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.source.get_ref().take_error()
    }
}

/// The iterator of [`UnixListener::incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a UnixListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<UnixStream>;
    fn next(&mut self) -> Option<io::Result<UnixStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

/// A Unix stream socket (std's `UnixStream`, whose waits suspend only the
/// task); `Read` and `Write` for `UnixStream` and `&UnixStream`.
///
/// ```
/// use spindle::net::UnixStream;
/// use std::io::{Read, Write};
///
/// let rt = spindle::Runtime::builder().workers(2).build()?;
/// rt.block_on(|| -> std::io::Result<()> {
///     let (a, b) = UnixStream::pair()?;
///     // `a` closes when its task ends, after the write.
///     let writer = spindle::spawn(move || (&a).write_all(b"hello"));
///     let mut got = String::new();
///     (&b).read_to_string(&mut got)?;
///     writer.join().unwrap()?;
///     assert_eq!(got, "hello");
///     Ok(())
/// })?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct UnixStream {
    source: IoSource<std::os::unix::net::UnixStream>,
}

impl fmt::Debug for UnixStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnixStream")
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl UnixStream {
    /// Connects to the socket at `path`. A Unix connect completes at
    /// once, unless the listener's backlog is full: then a task's connect
    /// waits on the blocking pool (ending early on its deadline, an
    /// interrupt or a stop), and a plain thread's blocks, as std's.
    pub fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        let path = path.as_ref();
        let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
        socket.set_nonblocking(true)?;
        match socket.connect(&SockAddr::unix(path)?) {
            Ok(()) => return Ok(UnixStream::from_nonblocking(socket.into())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        // The backlog is full: std's blocking connect, off the worker.
        let path = path.to_path_buf();
        let connect = move || std::os::unix::net::UnixStream::connect(path);
        let stream = if sched::suspendable_task().is_some() {
            match blocking::start(connect).wait(WaitPolicy::Interruptible, None) {
                Ok(Ok(result)) => result,
                Ok(Err(panic)) => std::panic::resume_unwind(panic),
                Err(e) => Err(wait_error(e)),
            }
        } else {
            connect()
        };
        UnixStream::from_std(stream?)
    }

    fn from_nonblocking(stream: std::os::unix::net::UnixStream) -> UnixStream {
        UnixStream {
            source: IoSource::new(stream),
        }
    }

    /// A connected pair.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let (a, b) = std::os::unix::net::UnixStream::pair()?;
        Ok((UnixStream::from_std(a)?, UnixStream::from_std(b)?))
    }

    /// Wraps a std stream (made non-blocking here).
    pub fn from_std(stream: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        stream.set_nonblocking(true)?;
        Ok(UnixStream {
            source: IoSource::new(stream),
        })
    }

    /// The path (or unnamed address) this socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().local_addr()
    }

    /// The address of the peer this stream is connected to.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().peer_addr()
    }

    /// Shuts down the read half, the write half, or both.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.source.get_ref().shutdown(how)
    }

    /// Another handle to the same connection (its own fd, no timeouts).
    pub fn try_clone(&self) -> io::Result<UnixStream> {
        UnixStream::from_std(self.source.get_ref().try_clone()?)
    }
}

super::tcp::stream_read_write!(UnixStream, do_len_io);
super::tcp::as_fd!(UnixListener, UnixStream);
super::tcp::socket_timeouts!(UnixStream);
