//! A TCP echo server: one task per connection, each a plain blocking loop
//! of `read` and `write_all` that suspends only its task.
//!
//! `cargo run --release --example echo_server -- --addr 127.0.0.1:7878`
//!
//! Options: `--workers N` (default: one per CPU); `--serve N` to exit after
//! N connections have closed (as CI runs it); `--idle-timeout SECS` to drop
//! connections silent that long (a socket read timeout).

use spindle::net::{TcpListener, TcpStream};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Args {
    addr: String,
    workers: Option<usize>,
    serve: Option<u64>,
    idle_timeout: Option<Duration>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:7878".into(),
        workers: None,
        serve: None,
        idle_timeout: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--addr" => args.addr = value()?,
            "--workers" => args.workers = Some(number(value()?)? as usize),
            "--serve" => args.serve = Some(number(value()?)?),
            "--idle-timeout" => args.idle_timeout = Some(Duration::from_secs(number(value()?)?)),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

/// Echoes until the peer closes, the idle timeout passes, or an error.
fn echo(stream: TcpStream) -> std::io::Result<u64> {
    let mut buf = [0u8; 16 * 1024];
    let mut echoed = 0;
    loop {
        let n = (&stream).read(&mut buf)?;
        if n == 0 {
            return Ok(echoed);
        }
        (&stream).write_all(&buf[..n])?;
        echoed += n as u64;
    }
}

fn main() {
    spindle_examples::init_tracing();
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("echo_server: {e}");
        std::process::exit(2);
    });
    let mut builder = spindle::Runtime::builder();
    if let Some(n) = args.workers {
        builder = builder.workers(n);
    }
    let rt = builder.build().expect("start the runtime");
    let closed = Arc::new(AtomicU64::new(0));
    rt.block_on(|| {
        let listener = TcpListener::bind(args.addr.as_str()).unwrap_or_else(|e| {
            eprintln!("echo_server: cannot bind {}: {e}", args.addr);
            std::process::exit(1);
        });
        println!("listening on {}", listener.local_addr().unwrap());
        let mut accepted = 0;
        let mut handles = Vec::new();
        while args.serve.is_none_or(|n| accepted < n) {
            let (stream, _) = match listener.accept() {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("echo_server: accept: {e}");
                    continue;
                }
            };
            accepted += 1;
            let _ = stream.set_nodelay(true);
            if let Some(t) = args.idle_timeout {
                let _ = stream.set_read_timeout(Some(t));
            }
            let closed = Arc::clone(&closed);
            let h = spindle::spawn(move || {
                let r = echo(stream);
                closed.fetch_add(1, Ordering::Relaxed);
                r
            });
            if args.serve.is_some() {
                handles.push(h);
            }
        }
        let mut bytes = 0;
        for h in handles {
            match h.join().expect("a connection's task panicked") {
                Ok(n) => bytes += n,
                Err(e) => eprintln!("echo_server: connection: {e}"),
            }
        }
        println!(
            "served {accepted} connections, echoed {bytes} bytes; {} closed",
            closed.load(Ordering::Relaxed)
        );
    });
}
