//! The `echo` benchmark's tokio server: a multi-threaded runtime of 2
//! workers (or `ECHO_WORKERS`), a task per connection, each echoing what it reads through a
//! buffer of `BUF_SIZE` bytes held in the task's future.
//!
//! `echo_tokio --addr 127.0.0.1:PORT` prints `listening ADDR` once bound;
//! `benches/echo.sh` drives it.

use spindle_benches::echo::{announce, raise_nofile_limit, server_addr, workers, BUF_SIZE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn main() -> std::io::Result<()> {
    let addr = server_addr();
    raise_nofile_limit()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers())
        .enable_io()
        .build()?;
    rt.block_on(async {
        let listener = TcpListener::bind(addr).await?;
        announce(listener.local_addr()?);
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            tokio::spawn(echo(stream));
        }
    })
}

/// Echoes until the peer closes; an error ends only this connection.
async fn echo(mut stream: TcpStream) {
    let mut buf = [0u8; BUF_SIZE];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}
