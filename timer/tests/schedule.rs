//! Scheduling, firing order, rescheduling, periodic timers and stats.
#![cfg(not(loom))]

mod common;

use common::*;
use spindle_timer::{TimerError, TimerId, TimerThread, Unschedule};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Holds the timer thread inside a callback until the returned sender is
/// dropped or sent to, so that a test can queue up timers that the thread
/// will then collect all at once.
fn block_timer_thread(timer: &TimerThread) -> mpsc::Sender<()> {
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (started_tx, started_rx) = mpsc::channel();
    timer
        .schedule(Instant::now(), move || {
            started_tx.send(()).unwrap();
            let _ = gate_rx.recv();
        })
        .unwrap();
    started_rx.recv_timeout(LONG).unwrap();
    gate_tx
}

/// Arms `n` timers with deadlines 20 µs apart, from 1 ms in the past on,
/// in shuffled order while the timer thread is busy (`arm(deadline, i, f)`
/// arms the `i`th), then checks that they fired in deadline order.
fn assert_fired_in_deadline_order(
    timer: &TimerThread,
    n: usize,
    seed: u64,
    arm: impl Fn(Instant, usize, Box<dyn FnOnce() + Send>),
) {
    let gate = block_timer_thread(timer);
    let base = ago(ms(1));
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in shuffled(n, seed) {
        let order = order.clone();
        let deadline = base + Duration::from_micros(20 * i as u64);
        arm(deadline, i, Box::new(move || order.lock().unwrap().push(i)));
    }
    drop(gate);
    wait_for("every timer", || order.lock().unwrap().len() == n);
    let order = order.lock().unwrap();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "fired out of deadline order: {order:?}"
    );
}

#[test]
fn timers_fire_in_deadline_order() {
    let timer = timer();
    assert_fired_in_deadline_order(&timer, 200, 42, |deadline, _, f| {
        timer.schedule(deadline, f).unwrap();
    });
}

#[test]
fn prefetching_timers_fire_in_deadline_order_whatever_their_hint() {
    let timer = timer();
    let buffer = [0u8; 256];
    // Memory long gone: a hint is never read through.
    let freed = {
        let gone = vec![0u8; 64];
        let at = gone.as_ptr();
        drop(gone);
        at
    };
    // Hints of every kind: none, real memory, freed memory, an address that
    // maps nothing, a length past the 63 lines that count.
    let hints: [(*const u8, usize); 5] = [
        (std::ptr::null(), 0),
        (buffer.as_ptr(), buffer.len()),
        (freed, 64),
        (0xdead_beef as *const u8, 192),
        (8 as *const u8, usize::MAX),
    ];
    assert_fired_in_deadline_order(&timer, 100, 7, |deadline, i, f| {
        let (data, len) = hints[i % hints.len()];
        timer.schedule_prefetching(deadline, data, len, f).unwrap();
    });
}

#[test]
fn a_deadline_in_the_past_fires_at_once() {
    let timer = timer();
    let (tx, rx) = mpsc::channel();
    let later = timer
        .schedule(Instant::now() + Duration::from_secs(3600), || {})
        .unwrap();
    let tx2 = tx.clone();
    timer
        .schedule(ago(Duration::from_secs(3600)), move || {
            tx2.send("past").unwrap()
        })
        .unwrap();
    timer
        .schedule(Instant::now(), move || tx.send("now").unwrap())
        .unwrap();
    let mut got = vec![
        rx.recv_timeout(LONG).unwrap(),
        rx.recv_timeout(LONG).unwrap(),
    ];
    got.sort_unstable();
    assert_eq!(got, ["now", "past"]);
    // The hour-long timer did not fire on the way.
    assert_eq!(timer.unschedule(later), Unschedule::Removed);
}

#[test]
fn a_deadline_beyond_the_clock_never_fires_but_can_be_cancelled() {
    let Some(far) = far_future() else { return };
    let timer = timer();
    let fired = Arc::new(AtomicUsize::new(0));
    let f = fired.clone();
    let id = timer
        .schedule(far, move || {
            f.fetch_add(1, SeqCst);
        })
        .unwrap();
    assert!(timer.reschedule(id, far).is_ok());
    sentinel(&timer, Instant::now() + ms(5));
    assert_eq!(timer.stats().pending, 1);
    assert_eq!(timer.unschedule(id), Unschedule::Removed);
    assert_eq!(fired.load(SeqCst), 0);
}

#[test]
fn cancelled_timers_never_run() {
    let timer = timer();
    let fired = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + ms(20);
    let ids: Vec<TimerId> = (0..1000)
        .map(|_| {
            let (f, d) = (fired.clone(), DropCount(drops.clone()));
            timer
                .schedule(deadline, move || {
                    let _d = d;
                    f.fetch_add(1, SeqCst);
                })
                .unwrap()
        })
        .collect();
    for &id in &ids {
        assert_eq!(timer.unschedule(id), Unschedule::Removed);
    }
    assert_eq!(
        drops.load(SeqCst),
        1000,
        "Removed drops the callback at once"
    );
    sentinel(&timer, deadline + ms(1));
    assert_eq!(fired.load(SeqCst), 0);
    for &id in &ids {
        assert_eq!(timer.unschedule(id), Unschedule::NotFound);
    }
}

#[test]
fn reschedule_earlier_makes_it_fire() {
    let timer = timer();
    let (tx, rx) = mpsc::channel();
    let id = timer
        .schedule(Instant::now() + Duration::from_secs(3600), move || {
            tx.send(()).unwrap()
        })
        .unwrap();
    timer.reschedule(id, Instant::now()).unwrap();
    rx.recv_timeout(LONG).unwrap();
    wait_for("the timer to finish", || timer.stats().pending == 0);
    assert!(matches!(
        timer.reschedule(id, Instant::now()),
        Err(TimerError::NotPending)
    ));
    assert_eq!(timer.unschedule(id), Unschedule::NotFound);
}

#[test]
fn reschedule_later_makes_it_wait() {
    let timer = timer();
    let fired = Arc::new(AtomicUsize::new(0));
    let f = fired.clone();
    let id = timer
        .schedule(Instant::now() + ms(5), move || {
            f.fetch_add(1, SeqCst);
        })
        .unwrap();
    timer
        .reschedule(id, Instant::now() + Duration::from_secs(3600))
        .unwrap();
    // Past the old deadline: the stale entry is skipped.
    sentinel(&timer, Instant::now() + ms(20));
    assert_eq!(fired.load(SeqCst), 0);
    // The id is still valid after a reschedule.
    assert_eq!(timer.unschedule(id), Unschedule::Removed);
    assert!(matches!(
        timer.reschedule(id, Instant::now()),
        Err(TimerError::NotPending)
    ));
}

#[test]
fn reschedule_rejects_stale_and_forged_ids() {
    let timer = timer();
    let id = timer
        .schedule(Instant::now() + Duration::from_secs(3600), || {})
        .unwrap();
    for raw in [
        0,
        u64::MAX,
        id.as_u64() + 1,
        id.as_u64() + (1 << 32),
        id.as_u64() + (4 << 32),
    ] {
        let r = timer.reschedule(TimerId::from_u64(raw), Instant::now());
        assert!(matches!(r, Err(TimerError::NotPending)), "{raw:#x}: {r:?}");
    }
    assert_eq!(timer.unschedule(id), Unschedule::Removed);
}

/// `reschedule` racing with firing: every timer either was rescheduled away
/// (and is then still pending) or had already started (and ran), never both,
/// never neither.
#[test]
fn reschedule_racing_with_firing_is_exactly_once() {
    let timer = Arc::new(timer());
    let n = 5000;
    let ran: Arc<Vec<AtomicU8>> = Arc::new((0..n).map(|_| AtomicU8::new(0)).collect());
    let base = Instant::now() + ms(2);
    let ids: Vec<TimerId> = (0..n)
        .map(|i| {
            let ran = ran.clone();
            let deadline = base + Duration::from_micros(i as u64 % 500);
            timer
                .schedule(deadline, move || {
                    ran[i].fetch_add(1, SeqCst);
                })
                .unwrap()
        })
        .collect();
    let far = Instant::now() + Duration::from_secs(3600);
    let moved: Vec<bool> = ids
        .iter()
        .map(|&id| match timer.reschedule(id, far) {
            Ok(()) => true,
            Err(TimerError::NotPending) => false,
            Err(e) => panic!("{e}"),
        })
        .collect();
    sentinel(&timer, base + ms(2));
    for (i, &id) in ids.iter().enumerate() {
        let runs = ran[i].load(SeqCst);
        if moved[i] {
            assert_eq!(runs, 0, "timer {i} was rescheduled away but ran");
            assert_eq!(timer.unschedule(id), Unschedule::Removed);
        } else {
            assert_eq!(
                runs, 1,
                "timer {i} was not pending for reschedule but did not run once"
            );
        }
    }
    assert_eq!(timer.stats().pending, 0);
}

#[test]
fn periodic_timers_repeat_until_cancelled() {
    let timer = timer();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let id = timer
        .schedule_periodic(Instant::now(), ms(1), move || {
            r.fetch_add(1, SeqCst);
        })
        .unwrap();
    wait_for("five runs", || runs.load(SeqCst) >= 5);
    let answer = timer.unschedule(id);
    assert!(
        matches!(answer, Unschedule::Removed | Unschedule::Running),
        "{answer:?}"
    );
    // A run in progress at the time has finished once the sentinel fires.
    sentinel(&timer, Instant::now() + ms(5));
    let after = runs.load(SeqCst);
    sentinel(&timer, Instant::now() + ms(20));
    assert_eq!(runs.load(SeqCst), after, "ran after being cancelled");
    assert_eq!(timer.unschedule(id), Unschedule::NotFound);
    assert_eq!(timer.stats().pending, 0);
}

#[test]
fn a_periodic_timer_can_cancel_itself() {
    let timer = Arc::new(timer());
    let runs = Arc::new(AtomicUsize::new(0));
    let own_id = Arc::new(OnceLock::<TimerId>::new());
    let (tx, rx) = mpsc::channel();
    let drops = Arc::new(AtomicUsize::new(0));
    let (t, r, me, guard) = (
        timer.clone(),
        runs.clone(),
        own_id.clone(),
        DropCount(drops.clone()),
    );
    let id = timer
        .schedule_periodic(Instant::now(), Duration::from_micros(100), move || {
            let _g = &guard;
            if r.fetch_add(1, SeqCst) + 1 == 3 {
                let id = published_id(&me);
                tx.send(t.unschedule(id)).unwrap();
            }
        })
        .unwrap();
    own_id.set(id).unwrap();
    assert_eq!(rx.recv_timeout(LONG).unwrap(), Unschedule::Running);
    sentinel(&timer, Instant::now() + ms(5));
    assert_eq!(runs.load(SeqCst), 3);
    assert_eq!(
        drops.load(SeqCst),
        1,
        "the closure is dropped once it is retired"
    );
    assert_eq!(timer.unschedule(id), Unschedule::NotFound);
}

#[test]
fn rescheduling_a_periodic_timer_moves_its_next_run() {
    let timer = timer();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let hour = Duration::from_secs(3600);
    let id = timer
        .schedule_periodic(Instant::now() + hour, hour, move || {
            r.fetch_add(1, SeqCst);
        })
        .unwrap();
    timer.reschedule(id, Instant::now()).unwrap();
    wait_for("the rescheduled run", || runs.load(SeqCst) == 1);
    // Re-armed an hour later, not again at once.
    sentinel(&timer, Instant::now() + ms(10));
    assert_eq!(runs.load(SeqCst), 1);
    assert_eq!(timer.stats().pending, 1);
    assert_eq!(timer.unschedule(id), Unschedule::Removed);
}

#[test]
fn a_zero_period_is_an_error() {
    let timer = timer();
    let r = timer.schedule_periodic(Instant::now(), Duration::ZERO, || {});
    assert!(matches!(r, Err(TimerError::InvalidPeriod)));
    assert!(!r.unwrap_err().to_string().is_empty());
    assert_eq!(timer.stats().scheduled, 0);
}

#[test]
fn callbacks_may_schedule_and_unschedule_other_timers() {
    let timer = Arc::new(timer());
    let victim = timer
        .schedule(Instant::now() + Duration::from_secs(3600), || {})
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let t = timer.clone();
    timer
        .schedule(Instant::now(), move || {
            let cancelled = t.unschedule(victim);
            let tx2 = tx.clone();
            t.schedule(Instant::now(), move || tx2.send(None).unwrap())
                .unwrap();
            tx.send(Some(cancelled)).unwrap();
        })
        .unwrap();
    assert_eq!(rx.recv_timeout(LONG).unwrap(), Some(Unschedule::Removed));
    assert_eq!(
        rx.recv_timeout(LONG).unwrap(),
        None,
        "the timer scheduled by a callback fired"
    );
}

#[test]
fn a_hundred_thousand_timers_all_fire_exactly_once() {
    let timer = timer();
    let n = 100_000;
    let hits: Arc<Vec<AtomicU8>> = Arc::new((0..n).map(|_| AtomicU8::new(0)).collect());
    let total = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    for i in 0..n {
        let (hits, total) = (hits.clone(), total.clone());
        let deadline = start + Duration::from_micros((i as u64 * 7919) % 100_000);
        timer
            .schedule(deadline, move || {
                hits[i].fetch_add(1, SeqCst);
                total.fetch_add(1, SeqCst);
            })
            .unwrap();
    }
    wait_for("every timer", || total.load(SeqCst) == n);
    wait_for("the counters to settle", || timer.stats().pending == 0);
    let twice: Vec<usize> = (0..n).filter(|&i| hits[i].load(SeqCst) != 1).collect();
    assert!(twice.is_empty(), "timers not fired exactly once: {twice:?}");
    let stats = timer.stats();
    assert_eq!(stats.scheduled, n as u64);
    assert_eq!(stats.triggered, n as u64);
    assert_eq!(stats.unscheduled, 0);
}

#[test]
fn stats_count_what_happened() {
    let timer = timer();
    let hour = Instant::now() + Duration::from_secs(3600);
    let ids: Vec<TimerId> = (0..10)
        .map(|_| timer.schedule(hour, || {}).unwrap())
        .collect();
    let s = timer.stats();
    assert_eq!(
        (s.scheduled, s.pending, s.triggered, s.unscheduled),
        (10, 10, 0, 0)
    );
    assert!(s.slots >= 10);
    for &id in &ids[..4] {
        timer.unschedule(id);
    }
    for &id in &ids[4..] {
        timer.reschedule(id, Instant::now()).unwrap();
    }
    wait_for("the rescheduled timers", || timer.stats().pending == 0);
    let s = timer.stats();
    assert_eq!(
        (s.scheduled, s.unscheduled, s.triggered, s.panics),
        (10, 4, 6, 0)
    );
    // The thread sleeps when its next timer is not due yet; on a busy machine
    // it may find a 1 ms timer already due, so try until it did sleep.
    let mut sentinels = 0;
    while timer.stats().wakeups == 0 {
        sentinel(&timer, Instant::now() + ms(1));
        sentinels += 1;
    }
    let s = timer.stats();
    assert!(s.busy > Duration::ZERO);
    assert_eq!(s.triggered, 6 + sentinels);
}

#[test]
fn the_global_timer_thread_is_one_and_works() {
    let a = TimerThread::global() as *const TimerThread;
    let b = TimerThread::global() as *const TimerThread;
    assert_eq!(a, b);
    let (tx, rx) = mpsc::channel();
    TimerThread::global()
        .schedule(Instant::now(), move || tx.send(()).unwrap())
        .unwrap();
    rx.recv_timeout(LONG).unwrap();
}

#[test]
fn ids_round_trip_and_display() {
    let timer = timer();
    let id = timer
        .schedule(Instant::now() + Duration::from_secs(3600), || {})
        .unwrap();
    assert_eq!(TimerId::from_u64(id.as_u64()), id);
    assert!(id.to_string().starts_with("timer "), "{id}");
    assert_ne!(id.as_u64(), 0, "no valid id is 0");
    assert_eq!(
        timer.unschedule(TimerId::from_u64(id.as_u64())),
        Unschedule::Removed
    );
}

/// Several threads scheduling at once, with deadlines in every order: all
/// fire exactly once (exercises buckets, the global nearest time and the
/// wake-up protocol under contention).
#[test]
fn concurrent_schedulers_lose_nothing() {
    let timer = Arc::new(timer());
    let threads = 4;
    let per = 5000;
    let total = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (timer, total) = (timer.clone(), total.clone());
            std::thread::spawn(move || {
                for i in shuffled(per, t as u64 + 7) {
                    let total = total.clone();
                    let deadline = Instant::now() + Duration::from_micros(i as u64 % 3000);
                    timer
                        .schedule(deadline, move || {
                            total.fetch_add(1, SeqCst);
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    wait_for("every timer", || total.load(SeqCst) == threads * per);
    wait_for("the counters to settle", || timer.stats().pending == 0);
    assert_eq!(timer.stats().triggered, (threads * per) as u64);
}

/// When the instants the timers of `deadlines` (offsets from now) fired,
/// on a timer thread that coalesces within `coalesce`.
fn fire_times(coalesce: Duration, deadlines: &[Duration]) -> Vec<(Instant, Instant)> {
    let timer = TimerThread::start({
        let mut o = spindle_timer::TimerOptions::default();
        o.coalesce = coalesce;
        o
    })
    .unwrap();
    let t0 = Instant::now();
    let (tx, rx) = mpsc::channel();
    for (i, d) in deadlines.iter().enumerate() {
        let (tx, due) = (tx.clone(), t0 + *d);
        timer
            .schedule(due, move || tx.send((i, due, Instant::now())).unwrap())
            .unwrap();
    }
    let mut fired = vec![None; deadlines.len()];
    for _ in deadlines {
        let (i, due, at) = rx.recv_timeout(LONG).unwrap();
        fired[i] = Some((due, at));
    }
    timer.stop_and_join();
    fired.into_iter().map(Option::unwrap).collect()
}

/// Timers due within `coalesce` of the earliest fire together, at the
/// earliest one's deadline plus `coalesce`; a lone timer fires at its own
/// deadline; none fires early.
#[test]
fn timers_due_close_together_fire_together_and_never_early() {
    const COALESCE: Duration = Duration::from_millis(200);
    let ms = Duration::from_millis;
    // Two close together, then one alone (far past the first two's window).
    let fired = fire_times(COALESCE, &[ms(50), ms(60), ms(900)]);
    for (due, at) in &fired {
        assert!(at >= due, "a timer fired {:?} early", *due - *at);
    }
    let (first_due, first_at) = fired[0];
    assert!(
        first_at >= first_due + COALESCE,
        "the first of two close timers waited for the window: fired {:?} after its deadline",
        first_at - first_due
    );
    // The lone timer is not held back by a window (its lateness is the
    // thread's, far below the window on any host this runs on).
    let (lone_due, lone_at) = fired[2];
    assert!(
        lone_at - lone_due < COALESCE,
        "a lone timer fired {:?} late",
        lone_at - lone_due
    );
    // Without coalescing, the first fires without waiting for a window.
    let fired = fire_times(Duration::ZERO, &[ms(50), ms(60)]);
    let (first_due, first_at) = fired[0];
    assert!(first_at >= first_due);
    assert!(
        first_at - first_due < COALESCE,
        "{:?}",
        first_at - first_due
    );
}
