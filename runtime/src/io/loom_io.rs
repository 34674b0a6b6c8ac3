//! Loom models of the readiness protocol: the real `IoReadiness` (the
//! poller's side: bump the sequence, wake the waiters) and the real
//! `wait` against a reader written as `IoSource::do_io_until` reads: it
//! loads the sequence before each try, skips the try when its last read
//! was short at that same sequence (the socket is known drained), and
//! otherwise waits for the sequence to move. The "socket" is a count of
//! bytes that the model's kernel adds to before it reports the edge. A
//! lost edge shows as a reader that waits for good, which loom reports as
//! a deadlock.

use crate::driver::{Direction, IoReadiness};
use crate::loom::sync::atomic::{AtomicU32, Ordering};
use crate::meta::activity::{Interest, WaitKind};
use crate::meta::wait_queue::WaitPolicy;
use crate::wait;
use loom::sync::Arc;
use loom::thread;

struct Socket {
    /// Bytes received and not read yet.
    queued: AtomicU32,
    readiness: IoReadiness,
}

/// The kernel receives a byte, then the poller delivers its edge.
fn receive(s: &Socket) {
    s.queued.fetch_add(1, Ordering::Release);
    s.readiness.deliver(true, false, 0, |_| {
        unreachable!("no task waits in the model")
    });
}

/// Reads until `want` bytes came, as `do_io_until` does; returns them.
fn read_all(s: &Socket, want: u32) -> u32 {
    let mut got = 0;
    // The sequence at which a read last drained the socket.
    let mut drained_at = None;
    while got < want {
        let seq = s.readiness.sequence(Direction::Read);
        if drained_at != Some(seq) {
            let n = s.queued.swap(0, Ordering::Acquire);
            if n > 0 {
                // A read takes all there is: a short read.
                got += n;
                drained_at = Some(seq);
                continue;
            }
        }
        match wait::wait(
            s.readiness.queue(Direction::Read),
            seq,
            None,
            WaitPolicy::Interruptible,
            WaitKind::Fd {
                fd: -1,
                interest: Interest::Readable,
            },
        ) {
            Ok(()) | Err(crate::error::WaitError::WouldBlock) => {}
            Err(e) => panic!("the wait failed: {e}"),
        }
    }
    got
}

fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Two bytes arrive, each with its edge, while the reader tries, drains
/// and waits: it gets both, and never waits through an edge.
#[test]
fn loom_no_edge_is_lost_between_a_try_and_its_wait() {
    model(|| {
        let s = Arc::new(Socket {
            queued: AtomicU32::new(0),
            readiness: IoReadiness::new(),
        });
        let kernel = {
            let s = s.clone();
            thread::spawn(move || {
                receive(&s);
                receive(&s);
            })
        };
        assert_eq!(read_all(&s, 2), 2);
        kernel.join().unwrap();
    });
}
