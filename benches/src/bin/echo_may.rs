//! The `echo` benchmark's may server: may's scheduler with 2 workers (or
//! `ECHO_WORKERS`), a coroutine per connection, each echoing through a
//! `BUF_SIZE`-byte buffer on its stack (may's default coroutine stack).
//!
//! `echo_may --addr 127.0.0.1:PORT` prints `listening ADDR` once bound;
//! `benches/echo.sh` drives it.

use may::net::TcpListener;
use spindle_benches::echo::{announce, echo_connection, raise_nofile_limit, server_addr, workers};
use std::io;

fn main() -> io::Result<()> {
    let addr = server_addr();
    raise_nofile_limit()?;
    // may is configured through globals, before its scheduler starts.
    may::config().set_workers(workers());
    let listener = TcpListener::bind(addr)?;
    announce(listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        // SAFETY: may's spawn is unsafe because a coroutine may move between
        // worker threads and so see another thread's thread-local storage.
        // `echo` holds none across a switch: it only reads and writes its
        // socket, through may's own blocking calls.
        unsafe { may::coroutine::spawn(move || echo_connection(stream)) };
    }
}
