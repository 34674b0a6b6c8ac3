//! The `echo` benchmark's thread-per-connection server, in plain std: the
//! baseline every runtime must beat. Each connection gets an OS thread with
//! a 64 KiB stack (the kernel commits only the pages it touches) and
//! echoes through a `BUF_SIZE`-byte buffer on that stack.
//!
//! `echo_threads --addr 127.0.0.1:PORT` prints `listening ADDR` once bound;
//! `benches/echo.sh` drives it.

use spindle_benches::echo::{announce, echo_connection, raise_nofile_limit, server_addr};
use std::io;
use std::net::TcpListener;
use std::thread;

const STACK_SIZE: usize = 64 * 1024;

fn main() -> io::Result<()> {
    let addr = server_addr();
    raise_nofile_limit()?;
    let listener = TcpListener::bind(addr)?;
    announce(listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        thread::Builder::new()
            .stack_size(STACK_SIZE)
            .spawn(move || echo_connection(stream))?;
    }
}
