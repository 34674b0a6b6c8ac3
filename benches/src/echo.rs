//! What the `echo` benchmark's servers and client share (`src/bin/echo_*.rs`,
//! driven by `benches/echo.sh`): the command line of a server, the line it
//! prints once bound, its worker count, the size of its read buffer, and raising the open-file
//! limit that a thousand or ten thousand connections need.
//!
//! Every server reads into a buffer of [`BUF_SIZE`] bytes, kept where its
//! model naturally keeps it (a task's or thread's stack, a future, a
//! goroutine's heap), so that the resident memory of an idle connection
//! compares like with like.

use std::io::{self, Read, Write};
use std::net::SocketAddr;

/// Bytes of each server's read buffer, one per connection: the largest
/// message the benchmark sends.
pub const BUF_SIZE: usize = 4096;

/// Worker threads a runtime's server runs: `ECHO_WORKERS` if set (`echo.sh`
/// sets 1 for `spindle-1w` and for every server with `--per-core`), else 2.
pub fn workers() -> usize {
    std::env::var("ECHO_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .filter(|&w| w > 0)
        .unwrap_or(2)
}

/// The address a server binds, from `--addr HOST:PORT` (default
/// `127.0.0.1:0`, any free port); exits with a usage line on a bad argument.
pub fn server_addr() -> SocketAddr {
    let mut args = std::env::args().skip(1);
    let mut addr = SocketAddr::from(([127, 0, 0, 1], 0));
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--addr", Some(value)) => match value.parse() {
                Ok(a) => addr = a,
                Err(e) => usage(&format!("--addr {value}: {e}")),
            },
            _ => usage(&format!("unexpected argument {arg}")),
        }
    }
    addr
}

fn usage(problem: &str) -> ! {
    eprintln!("{problem}\nusage: {} [--addr 127.0.0.1:PORT]", program());
    std::process::exit(2)
}

fn program() -> String {
    std::env::args()
        .next()
        .unwrap_or_else(|| "echo server".into())
}

/// Prints `listening ADDR` and flushes: the driver waits for this line (and
/// learns the port from it) before it connects.
pub fn announce(addr: SocketAddr) {
    let mut out = io::stdout().lock();
    // A driver that stopped reading is no reason to stop serving.
    let _ = writeln!(out, "listening {addr}");
    let _ = out.flush();
}

/// Raises this process's soft limit on open files to its hard limit, and
/// returns the new limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable `rlimit` for the call's duration.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: `lim` is a valid `rlimit`, read for the call's duration.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(lim.rlim_cur)
}

/// Echoes what `stream` reads back to it until the peer closes, through a
/// [`BUF_SIZE`] buffer on the caller's stack (a task's or coroutine's, for
/// the runtimes); an error ends only this connection. Every server's loop.
pub fn echo_connection(mut stream: impl Read + Write) {
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
