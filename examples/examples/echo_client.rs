//! A TCP echo client: `--conns` tasks, each connecting and making
//! `--msgs` round trips of `--size` bytes, checking every byte that comes
//! back; then requests/s and latency percentiles.
//!
//! `cargo run --release --example echo_client -- --addr 127.0.0.1:7878 --conns 64 --msgs 1000`
//!
//! Every round trip runs under a deadline scope (`--deadline-ms`, default
//! 1000): a server that stalls fails the call with `TimedOut`, it does not
//! hang the client.

use spindle::net::TcpStream;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

struct Args {
    addr: String,
    conns: usize,
    msgs: usize,
    size: usize,
    deadline: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:7878".into(),
        conns: 64,
        msgs: 1000,
        size: 64,
        deadline: Duration::from_secs(1),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--addr" => args.addr = value()?,
            "--conns" => args.conns = number(value()?)?,
            "--msgs" => args.msgs = number(value()?)?,
            "--size" => args.size = number(value()?)?.max(1),
            "--deadline-ms" => args.deadline = Duration::from_millis(number(value()?)? as u64),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

/// One connection's round trips; their latencies in µs.
fn run_connection(
    addr: &str,
    id: usize,
    msgs: usize,
    size: usize,
    deadline: Duration,
) -> std::io::Result<Vec<u32>> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut out = vec![0u8; size];
    let mut back = vec![0u8; size];
    let mut latencies = Vec::with_capacity(msgs);
    for m in 0..msgs {
        for (i, b) in out.iter_mut().enumerate() {
            *b = (id + m + i) as u8;
        }
        let start = Instant::now();
        spindle::with_deadline(start + deadline, || {
            stream.write_all(&out)?;
            stream.read_exact(&mut back)
        })?;
        latencies.push(start.elapsed().as_micros().min(u32::MAX as u128) as u32);
        if back != out {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("connection {id}, message {m}: the echo differs"),
            ));
        }
    }
    Ok(latencies)
}

fn main() {
    spindle_examples::init_tracing();
    let args = parse_args().unwrap_or_else(|e| {
        eprintln!("echo_client: {e}");
        std::process::exit(2);
    });
    let rt = spindle::Runtime::new().expect("start the runtime");
    let start = Instant::now();
    let (mut latencies, errors) = rt.block_on(|| {
        let handles: Vec<_> = (0..args.conns)
            .map(|id| {
                let addr = args.addr.clone();
                let (msgs, size, deadline) = (args.msgs, args.size, args.deadline);
                spindle::spawn(move || run_connection(&addr, id, msgs, size, deadline))
            })
            .collect();
        let mut all = Vec::new();
        let mut errors = 0;
        for h in handles {
            match h.join().expect("a connection's task panicked") {
                Ok(l) => all.extend(l),
                Err(e) => {
                    eprintln!("echo_client: {e}");
                    errors += 1;
                }
            }
        }
        (all, errors)
    });
    let elapsed = start.elapsed();
    latencies.sort_unstable();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{} round trips of {} B over {} connections in {:.2?}: {:.0} requests/s, p50 {} µs, p99 {} µs; {} connections failed",
        latencies.len(),
        args.size,
        args.conns,
        elapsed,
        latencies.len() as f64 / elapsed.as_secs_f64(),
        pct(0.50),
        pct(0.99),
        errors
    );
    if errors > 0 {
        std::process::exit(1);
    }
}
