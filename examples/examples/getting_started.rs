// The server of docs/getting-started.md: a line in, a line out, each
// request under a deadline, idle connections dropped, and Ctrl-C drains
// the open connections before it stops them.
//
//     cargo run --release --example getting_started
//     nc 127.0.0.1 7878

use spindle::net::{TcpListener, TcpStream};
use spindle::sync::{mpsc, Select};
use spindle::JoinSet;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How long one request may take.
const REQUEST_DEADLINE: Duration = Duration::from_millis(500);
/// How long a connection may stay silent.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the open connections get to finish at shutdown.
const DRAIN: Duration = Duration::from_secs(5);

fn main() -> io::Result<()> {
    let rt = spindle::Runtime::new()?;
    rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:7878")?;
        println!("listening on {}", listener.local_addr()?);
        // Ctrl-C arrives as a message on a channel.
        let (ctrl_c, shutdown) = mpsc::channel();
        spindle::spawn(move || {
            if spindle::signal::ctrl_c().is_ok() {
                let _ = ctrl_c.send(());
            }
        });
        let served = serve(listener, shutdown)?;
        println!("served {served} connections");
        Ok(())
    })
}

/// Accepts connections until `shutdown` receives (or its sender is gone),
/// then gives the open ones `DRAIN` to finish and stops the rest. Returns
/// how many connections it accepted.
pub fn serve(listener: TcpListener, shutdown: mpsc::Receiver<()>) -> io::Result<u64> {
    let mut connections = JoinSet::new();
    let mut accepted = 0;
    loop {
        // A connection or the shutdown, whichever comes first.
        let mut select = Select::new();
        let stop = select.recv(&shutdown);
        select.readable(listener.as_fd());
        if select.select()?.index() == stop {
            break;
        }
        let (stream, peer) = listener.accept()?;
        accepted += 1;
        connections.spawn(move || {
            if let Err(e) = handle(stream) {
                eprintln!("{peer}: {e}");
            }
        });
        // Forget the connections that have closed.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let drained = spindle::with_deadline(Instant::now() + DRAIN, || {
        while connections.join_next()?.is_some() {}
        Ok::<(), spindle::WaitError>(())
    });
    if drained.is_err() {
        eprintln!("stopping {} connections", connections.len());
        connections.stop_all(); // their waits fail from now on
        while let Ok(Some(_)) = connections.join_next() {}
    }
    Ok(accepted)
}

/// Serves one connection until the client closes it, stays silent for
/// `IDLE_TIMEOUT`, or the server stops it.
fn handle(stream: TcpStream) -> io::Result<()> {
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    for line in BufReader::new(&stream).lines() {
        let request = line?;
        let deadline = Instant::now() + REQUEST_DEADLINE;
        let reply = match spindle::with_deadline(deadline, || respond(&request)) {
            Ok(reply) => reply,
            Err(e) => format!("error: {e}"),
        };
        (&stream).write_all(format!("{reply}\n").as_bytes())?;
    }
    Ok(())
}

/// A request's work: `sleep MS` takes MS milliseconds; any other line
/// comes back in capitals.
fn respond(request: &str) -> Result<String, spindle::SleepError> {
    match request.strip_prefix("sleep ").map(str::parse) {
        Some(Ok(ms)) => {
            spindle::sleep(Duration::from_millis(ms))?;
            Ok(format!("slept {ms} ms"))
        }
        _ => Ok(request.to_uppercase()),
    }
}
