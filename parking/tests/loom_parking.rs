//! Loom models of the ParkingLot handshake. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p spindle-parking --release --test loom_parking`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use spindle_parking::ParkingLot;

/// Runs `f` under loom with a preemption bound: the models loop (retry on a
/// spurious wake), and an unbounded search of those loops never ends. Three
/// preemptions cover every interleaving of the handshake's few accesses.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// The idle-worker rule: read the state, look once more, wait on the state.
fn park_until(lot: &ParkingLot, ready: &AtomicBool) {
    loop {
        let st = lot.state();
        if ready.load(SeqCst) || st.stopped() {
            return;
        }
        lot.wait(st);
    }
}

/// A producer that publishes work and signals never leaves the worker asleep,
/// whichever way the no-waiter shortcut interleaves with the park.
#[test]
fn signal_is_never_lost() {
    model(|| {
        let lot = Arc::new(ParkingLot::new());
        let ready = Arc::new(AtomicBool::new(false));
        let (l2, r2) = (lot.clone(), ready.clone());
        let worker = thread::spawn(move || park_until(&l2, &r2));
        ready.store(true, SeqCst);
        lot.signal(1);
        worker.join().unwrap();
    });
}

/// Two workers, two units of work, each signalled once: both get out.
#[test]
fn two_signals_release_two_workers() {
    model(|| {
        let lot = Arc::new(ParkingLot::new());
        let work = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for _ in 0..2 {
            let (l, w) = (lot.clone(), work.clone());
            hs.push(thread::spawn(move || loop {
                let st = l.state();
                let n = w.load(SeqCst);
                if n > 0 {
                    if w.compare_exchange(n, n - 1, SeqCst, SeqCst).is_ok() {
                        return;
                    }
                    continue;
                }
                l.wait(st);
            }));
        }
        for _ in 0..2 {
            work.fetch_add(1, SeqCst);
            lot.signal(1);
        }
        for h in hs {
            h.join().unwrap();
        }
    });
}

/// `stop` releases every waiter, whenever it lands.
#[test]
fn stop_releases_all_waiters() {
    model(|| {
        let lot = Arc::new(ParkingLot::new());
        let never = Arc::new(AtomicBool::new(false));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (l, n) = (lot.clone(), never.clone());
                thread::spawn(move || park_until(&l, &n))
            })
            .collect();
        lot.stop();
        for h in hs {
            h.join().unwrap();
        }
        assert!(lot.state().stopped());
    });
}
