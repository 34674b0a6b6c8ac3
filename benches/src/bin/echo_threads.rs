//! The `echo` benchmark's thread-per-connection server, in plain std: the
//! baseline every runtime must beat. Each connection gets an OS thread with
//! a 64 KiB stack (the kernel commits only the pages it touches) and
//! echoes through a `BUF_SIZE`-byte buffer on that stack.
//!
//! `echo_threads --addr 127.0.0.1:PORT` prints `listening ADDR` once bound;
//! `benches/echo.sh` drives it.

use spindle_benches::echo::{announce, raise_nofile_limit, server_addr, BUF_SIZE};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
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
            .spawn(move || echo(stream))?;
    }
}

/// Echoes until the peer closes; an error ends only this connection.
fn echo(mut stream: TcpStream) {
    let mut buf = [0u8; BUF_SIZE];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
