//! docs/getting-started.md's whole program is `examples/getting_started.rs`,
//! word for word (checked here), and it serves as the guide says: replies,
//! a request cut short by its deadline, and a shutdown that drains, then
//! stops a connection left open.

#[allow(dead_code)] // its `main`: the server is driven through `serve`
#[path = "../examples/getting_started.rs"]
mod getting_started;

use spindle::net::TcpListener;
use spindle::sync::mpsc;
use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

#[test]
fn the_guide_shows_this_program() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let guide = std::fs::read_to_string(format!("{root}/docs/getting-started.md")).unwrap();
    let program =
        std::fs::read_to_string(format!("{root}/examples/examples/getting_started.rs")).unwrap();
    let section = guide
        .split("\n## ")
        .find(|s| s.starts_with("Step 5"))
        .expect("the guide has a Step 5");
    let block = section
        .split("```rust,no_run\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("Step 5 shows the program");
    assert_eq!(
        format!("{block}\n"),
        program,
        "docs/getting-started.md's Step 5 and examples/examples/getting_started.rs differ"
    );
}

/// Sends a line and reads the reply line.
fn ask(conn: &mut BufReader<std::net::TcpStream>, line: &str) -> String {
    writeln!(conn.get_mut(), "{line}").unwrap();
    let mut reply = String::new();
    conn.read_line(&mut reply).unwrap();
    reply.trim_end().to_owned()
}

#[test]
fn serves_cuts_short_and_drains() {
    let rt = spindle::Runtime::builder().workers(2).build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (shutdown_tx, shutdown) = mpsc::channel();
    let server = rt.spawn(move || getting_started::serve(listener, shutdown));

    let mut first = BufReader::new(std::net::TcpStream::connect(addr).unwrap());
    assert_eq!(ask(&mut first, "hello"), "HELLO");
    assert_eq!(ask(&mut first, "sleep 10"), "slept 10 ms");
    let start = Instant::now();
    assert_eq!(
        ask(&mut first, "sleep 60000"),
        "error: sleep cut short: deadline exceeded"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    drop(first);

    // One connection stays open through the shutdown: the drain waits for
    // it, then stops it.
    let mut open = BufReader::new(std::net::TcpStream::connect(addr).unwrap());
    assert_eq!(ask(&mut open, "still here"), "STILL HERE");
    let start = Instant::now();
    shutdown_tx.send(()).unwrap();
    assert_eq!(server.join().unwrap().unwrap(), 2);
    let waited = start.elapsed();
    assert!(waited >= Duration::from_secs(4), "drained for {waited:?}");
    let mut rest = Vec::new();
    let n = open.read_to_end(&mut rest).unwrap();
    assert_eq!(n, 0, "the stopped connection is closed");
}
