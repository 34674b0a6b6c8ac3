//! Async interop, both directions, with a tokio runtime beside spindle's:
//!
//! 1. spindle tasks use an async library: here tokio's own `TcpStream`,
//!    talking to a spindle `TcpListener`. A task waits for each future with
//!    `task::block_on_future`, which suspends only the task; the futures are
//!    polled inside tokio's context (`InTokio`), as a tokio-based library
//!    needs.
//! 2. An async program awaits spindle tasks: `JoinHandle` is `IntoFuture`.
//!
//! `cargo run --release --example async_bridge`

use spindle::net::TcpListener;
use spindle::task::block_on_future;
use std::future::Future;
use std::io::{Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Polls a future inside a tokio runtime's context, entered around each
/// poll only: never left entered on the worker while the task waits.
struct InTokio<F> {
    handle: tokio::runtime::Handle,
    future: Pin<Box<F>>,
}

impl<F: Future> Future for InTokio<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _entered = self.handle.enter();
        self.future.as_mut().poll(cx)
    }
}

fn in_tokio<F: Future>(handle: &tokio::runtime::Handle, future: F) -> InTokio<F> {
    InTokio {
        handle: handle.clone(),
        future: Box::pin(future),
    }
}

fn main() {
    spindle_examples::init_tracing();
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("start tokio");
    let rt = spindle::Runtime::builder()
        .workers(2)
        .build()
        .expect("start spindle");

    // 1. spindle tasks calling tokio's TcpStream.
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 100;
    let handle = tokio_rt.handle().clone();
    let started = Instant::now();
    rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        let server = spindle::spawn(move || {
            let mut conns = spindle::JoinSet::new();
            for _ in 0..CLIENTS {
                let (s, _) = listener.accept().expect("accept");
                conns.spawn(move || {
                    let mut buf = [0u8; 64];
                    loop {
                        let n = (&s).read(&mut buf).expect("read");
                        if n == 0 {
                            return;
                        }
                        (&s).write_all(&buf[..n]).expect("write");
                    }
                });
            }
            while let Ok(Some(_)) = conns.join_next() {}
        });
        let mut clients = spindle::JoinSet::new();
        for c in 0..CLIENTS {
            let handle = handle.clone();
            clients.spawn(move || {
                block_on_future(in_tokio(&handle, async move {
                    let mut s = tokio::net::TcpStream::connect(addr).await?;
                    let mut buf = [0u8; 16];
                    for r in 0..ROUNDS {
                        let msg = format!("{c:02}:{r:03}").into_bytes();
                        s.write_all(&msg).await?;
                        s.read_exact(&mut buf[..msg.len()]).await?;
                        assert_eq!(&buf[..msg.len()], &msg[..]);
                    }
                    std::io::Result::Ok(())
                }))
            });
        }
        while let Some((_, r)) = clients.join_next().expect("join the clients") {
            r.expect("a client task panicked")
                .expect("the task's wait ended")
                .expect("a tokio client failed");
        }
        server.join().expect("the server panicked");
    });
    println!(
        "{CLIENTS} spindle tasks made {} round trips through tokio's TcpStream to a spindle listener in {:.1?}",
        CLIENTS * ROUNDS,
        started.elapsed()
    );

    // 2. An async program awaiting spindle tasks.
    let tasks: Vec<_> = (1..=4u64)
        .map(|i| {
            rt.spawn(move || {
                spindle::sleep(std::time::Duration::from_millis(5 * i)).expect("sleep");
                i * i
            })
        })
        .collect();
    let sum = tokio_rt.block_on(async move {
        let mut sum = 0;
        for t in tasks {
            sum += t.await.expect("a spindle task failed");
        }
        sum
    });
    println!("tokio awaited 4 spindle tasks: sum of squares {sum}");
    assert_eq!(sum, 30);
}
