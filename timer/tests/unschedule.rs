//! The three answers of `unschedule`, in their races, and arm+cancel churn.
#![cfg(not(loom))]

mod common;

use common::*;
use spindle_timer::{TimerId, Unschedule};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

#[test]
fn removed_then_not_found() {
    let timer = timer();
    let id = timer
        .schedule(Instant::now() + Duration::from_secs(3600), || {})
        .unwrap();
    assert_eq!(timer.unschedule(id), Unschedule::Removed);
    assert_eq!(timer.unschedule(id), Unschedule::NotFound);
}

#[test]
fn running_while_the_callback_runs_then_not_found() {
    let timer = timer();
    let (started_tx, started_rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    let id = timer
        .schedule(Instant::now(), move || {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
            done_tx.send(()).unwrap();
        })
        .unwrap();
    started_rx.recv_timeout(LONG).unwrap();
    assert_eq!(timer.unschedule(id), Unschedule::Running);
    assert_eq!(
        timer.unschedule(id),
        Unschedule::Running,
        "asking twice changes nothing"
    );
    gate_tx.send(()).unwrap();
    done_rx.recv_timeout(LONG).unwrap();
    wait_for("the callback to return", || {
        timer.unschedule(id) == Unschedule::NotFound
    });
}

#[test]
fn a_callback_that_unschedules_itself_gets_running_without_deadlock() {
    let timer = Arc::new(timer());
    let own_id = Arc::new(OnceLock::<TimerId>::new());
    let (tx, rx) = mpsc::channel();
    let (t, me) = (timer.clone(), own_id.clone());
    let id = timer
        .schedule(Instant::now(), move || {
            let id = published_id(&me);
            tx.send(t.unschedule(id)).unwrap();
        })
        .unwrap();
    own_id.set(id).unwrap();
    assert_eq!(rx.recv_timeout(LONG).unwrap(), Unschedule::Running);
}

#[test]
fn not_found_after_firing_and_for_forged_ids() {
    let timer = timer();
    let (tx, rx) = mpsc::channel();
    let fired = timer
        .schedule(Instant::now(), move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(LONG).unwrap();
    wait_for("the timer to finish", || {
        timer.unschedule(fired) == Unschedule::NotFound
    });

    let live = timer
        .schedule(Instant::now() + Duration::from_secs(3600), || {})
        .unwrap();
    let raw = live.as_u64();
    let slot = raw & 0xffff_ffff;
    let version = raw >> 32;
    let mut forged = vec![0, u64::MAX, slot, 1 << 40, u64::from(u32::MAX)];
    for dv in [1u64, 2, 3, 4, 5, 8, 1 << 20] {
        forged.push((version.wrapping_add(dv) & 0xffff_ffff) << 32 | slot);
        forged.push((version.wrapping_sub(dv) & 0xffff_ffff) << 32 | slot);
    }
    for other_slot in [slot + 1, slot + 1000, 1 << 31, u64::from(u32::MAX)] {
        forged.push(version << 32 | other_slot);
    }
    for raw in forged {
        assert_eq!(
            timer.unschedule(TimerId::from_u64(raw)),
            Unschedule::NotFound,
            "{raw:#x}"
        );
    }
    // None of them touched the live timer.
    assert_eq!(timer.unschedule(live), Unschedule::Removed);
}

/// Ids taken to another timer thread name none of its timers: both threads
/// number their slots from 0, but start their versions far apart. (Were the
/// first ids of two threads equal, one thread's id would cancel the other's
/// timer.)
#[test]
fn ids_of_another_timer_thread_are_not_found() {
    let far = Instant::now() + Duration::from_secs(3600);
    let (a, b) = (timer(), timer());
    let ids_a: Vec<TimerId> = (0..100).map(|_| a.schedule(far, || {}).unwrap()).collect();
    let ids_b: Vec<TimerId> = (0..100).map(|_| b.schedule(far, || {}).unwrap()).collect();
    for (&ia, &ib) in ids_a.iter().zip(&ids_b) {
        assert_ne!(ia, ib);
        assert_eq!(b.unschedule(ia), Unschedule::NotFound, "{ia}");
        assert!(b.reschedule(ia, far).is_err(), "{ia}");
    }
    // Every timer of each thread is still its own to cancel.
    for (t, ids) in [(&a, ids_a), (&b, ids_b)] {
        for id in ids {
            assert_eq!(t.unschedule(id), Unschedule::Removed, "{id}");
        }
    }
}

/// Timers at their deadline, cancelled by several threads at once: each
/// timer ran or was removed, exactly one of the two, and a `Removed` timer
/// never runs. `Running` means it ran.
#[test]
fn racing_unschedule_and_firing_is_exactly_once() {
    let timer = Arc::new(timer());
    let n = 20_000;
    let threads = 3;
    let ran: Arc<Vec<AtomicU8>> = Arc::new((0..n).map(|_| AtomicU8::new(0)).collect());
    let removed: Arc<Vec<AtomicU8>> = Arc::new((0..n).map(|_| AtomicU8::new(0)).collect());
    let base = Instant::now() + ms(2);
    let ids: Arc<Vec<TimerId>> = Arc::new(
        (0..n)
            .map(|i| {
                let ran = ran.clone();
                let deadline = base + Duration::from_micros(i as u64 % 2000);
                timer
                    .schedule(deadline, move || {
                        ran[i].fetch_add(1, SeqCst);
                    })
                    .unwrap()
            })
            .collect(),
    );
    let barrier = Arc::new(Barrier::new(threads));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (timer, ids, removed, barrier) =
                (timer.clone(), ids.clone(), removed.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut running = 0;
                for i in shuffled(n, t as u64 + 1) {
                    match timer.unschedule(ids[i]) {
                        Unschedule::Removed => {
                            removed[i].fetch_add(1, SeqCst);
                        }
                        Unschedule::Running => running += 1,
                        Unschedule::NotFound => {}
                    }
                }
                running
            })
        })
        .collect();
    let _running: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
    sentinel(&timer, base + ms(3));
    for i in 0..n {
        let (r, c) = (ran[i].load(SeqCst), removed[i].load(SeqCst));
        assert_eq!(r + c, 1, "timer {i}: ran {r} times, removed {c} times");
    }
    let stats = timer.stats();
    let removed_total: u64 = (0..n).map(|i| u64::from(removed[i].load(SeqCst))).sum();
    assert_eq!(stats.unscheduled, removed_total);
    // Plus one: the sentinel.
    assert_eq!(stats.triggered + stats.unscheduled, n as u64 + 1);
    assert_eq!(stats.pending, 0);
}

/// The RPC pattern at full speed: two threads each arm a timeout 100 ms
/// ahead and cancel it, a million times. Nothing fires, every cancel is
/// `Removed`, and no slot or entry is left behind.
#[test]
fn two_threads_a_million_arm_cancel_pairs_fire_nothing_and_leave_nothing() {
    let timer = Arc::new(timer());
    let fired = Arc::new(AtomicUsize::new(0));
    let pairs = 1_000_000;
    let hs: Vec<_> = (0..2)
        .map(|_| {
            let (timer, fired) = (timer.clone(), fired.clone());
            std::thread::spawn(move || {
                let mut last = Instant::now();
                for i in 0..pairs {
                    let f = fired.clone();
                    last = Instant::now() + ms(100);
                    let id = timer
                        .schedule(last, move || {
                            f.fetch_add(i, SeqCst);
                        })
                        .unwrap();
                    assert_eq!(timer.unschedule(id), Unschedule::Removed);
                }
                last
            })
        })
        .collect();
    let last = hs.into_iter().map(|h| h.join().unwrap()).max().unwrap();
    sentinel(&timer, last + ms(1));
    assert_eq!(fired.load(SeqCst), 0);
    let stats = timer.stats();
    assert_eq!(stats.pending, 0);
    assert_eq!(
        stats.scheduled,
        2 * pairs as u64 + 1,
        "the pairs and the sentinel"
    );
    assert_eq!(stats.unscheduled, 2 * pairs as u64);
    assert_eq!(stats.triggered, 1, "only the sentinel");
    // Slots are reused from the threads' caches: the table stays at its
    // first segments (256, then 512 more), nowhere near one slot per timer.
    assert!(
        stats.slots <= 768,
        "{} slots for 2 live timers",
        stats.slots
    );
    assert!(stats.queued < 10_000, "{} entries kept", stats.queued);
}
