//! The `echo` benchmark's spindle server: a runtime of 2 workers (or
//! `ECHO_WORKERS`), a task per connection, each echoing with plain blocking `Read`/`Write` on a
//! `spindle::net::TcpStream` (a read that must wait suspends only its
//! task) through a `BUF_SIZE`-byte buffer on the task's stack.
//!
//! `echo_spindle --addr 127.0.0.1:PORT` prints `listening ADDR` once bound;
//! `benches/echo.sh` drives it.

use spindle::net::TcpListener;
use spindle_benches::echo::{announce, echo_connection, raise_nofile_limit, server_addr, workers};
use std::io;

fn main() -> io::Result<()> {
    let addr = server_addr();
    raise_nofile_limit()?;
    let rt = spindle::Runtime::builder().workers(workers()).build()?;
    rt.block_on(|| {
        let listener = TcpListener::bind(addr)?;
        announce(listener.local_addr()?);
        loop {
            let (stream, _) = listener.accept()?;
            stream.set_nodelay(true)?;
            spindle::spawn(move || echo_connection(stream));
        }
    })
}
