//! `Barrier`, shared by tasks and plain threads: every party sees every
//! generation, one leader each; a wait that gives up withdraws its
//! arrival; interrupt and stop do not end a wait; the runtime's stop
//! unwinds a waiter without leaving its arrival behind.

mod common;

use common::{rt, wait_for};
use spindle::sync::Barrier;
use spindle::{SleepError, WaitError};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Long enough that a wait this long means a bug, not a slow machine.
const LONG: Duration = Duration::from_secs(30);

#[test]
fn barriers_of_zero_and_one_never_block() {
    for n in [0, 1] {
        let b = Barrier::new(n);
        for _ in 0..3 {
            assert!(b.wait().unwrap().is_leader());
        }
    }
    static GLOBAL: Barrier = Barrier::new(1);
    assert!(GLOBAL.wait().unwrap().is_leader());
    let b = Barrier::new(2);
    assert_eq!(
        b.wait_until(Instant::now() + Duration::from_millis(10))
            .unwrap_err(),
        WaitError::TimedOut
    );
    assert!(format!("{b:?}").contains("arrived: 0"), "withdrawn: {b:?}");
}

/// 8 tasks and 4 threads pass 3000 generations: in each, nobody passes
/// before all 12 have come, and exactly one is the leader.
#[test]
fn every_party_sees_every_generation_with_one_leader() {
    let rt = rt(2);
    const PARTIES: usize = 12;
    const GENERATIONS: usize = 3000;
    let barrier = Arc::new(Barrier::new(PARTIES));
    let arrived: Arc<Vec<AtomicUsize>> =
        Arc::new((0..GENERATIONS).map(|_| AtomicUsize::new(0)).collect());
    let leaders: Arc<Vec<AtomicUsize>> =
        Arc::new((0..GENERATIONS).map(|_| AtomicUsize::new(0)).collect());
    let body = |i: usize| {
        let (barrier, arrived, leaders) = (barrier.clone(), arrived.clone(), leaders.clone());
        move || {
            for g in 0..GENERATIONS {
                arrived[g].fetch_add(1, Ordering::SeqCst);
                if (g + i) % 500 == 0 {
                    spindle::usleep(100).unwrap();
                }
                let r = barrier.wait().unwrap();
                assert_eq!(
                    arrived[g].load(Ordering::SeqCst),
                    PARTIES,
                    "passed generation {g} before everybody came"
                );
                if r.is_leader() {
                    leaders[g].fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    };
    let tasks: Vec<_> = (0..8).map(|i| rt.spawn(body(i))).collect();
    let threads: Vec<_> = (8..PARTIES).map(|i| std::thread::spawn(body(i))).collect();
    for h in tasks {
        h.join().unwrap();
    }
    for h in threads {
        h.join().unwrap();
    }
    for (g, l) in leaders.iter().enumerate() {
        assert_eq!(l.load(Ordering::SeqCst), 1, "generation {g}'s leaders");
    }
}

/// Spawns a party that waits (untimed) and then raises `through`.
fn party(
    rt: &spindle::Runtime,
    barrier: &Arc<Barrier>,
    through: &Arc<AtomicBool>,
) -> spindle::JoinHandle<bool> {
    let (barrier, through) = (barrier.clone(), through.clone());
    rt.spawn(move || {
        let leader = barrier.wait().unwrap().is_leader();
        through.store(true, Ordering::SeqCst);
        leader
    })
}

/// A party that gives up at its scope's deadline withdraws its arrival:
/// the next party still waits for a partner, as if it had never come.
#[test]
fn a_party_that_gives_up_withdraws_its_arrival() {
    let rt = rt(2);
    let barrier = Arc::new(Barrier::new(2));
    let quitter = {
        let barrier = barrier.clone();
        rt.spawn(move || {
            spindle::with_deadline(Instant::now() + Duration::from_millis(20), || {
                barrier.wait().map(|r| r.is_leader())
            })
        })
    };
    assert_eq!(quitter.join().unwrap(), Err(WaitError::DeadlineExceeded));
    let through = Arc::new(AtomicBool::new(false));
    let first = party(&rt, &barrier, &through);
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !through.load(Ordering::SeqCst),
        "a party passed alone: the arrival that gave up was left behind"
    );
    let second = barrier
        .wait_until(Instant::now() + LONG)
        .unwrap()
        .is_leader();
    assert!(second, "the last to come leads");
    assert!(!first.join().unwrap());
}

/// Parties that give up at random moments while others keep coming: a
/// generation only trips with a full set of arrivals still waiting, and
/// the patient parties all get through, every round.
#[test]
fn parties_giving_up_in_a_crowd_leave_counts_exact() {
    let rt = rt(2);
    const ROUNDS: usize = 300;
    let barrier = Arc::new(Barrier::new(3));
    let gave_up = Arc::new(AtomicUsize::new(0));
    let passed = Arc::new(AtomicUsize::new(0));
    // Three patient parties, and quitters that come and go meanwhile.
    let patient: Vec<_> = (0..3)
        .map(|_| {
            let (barrier, passed) = (barrier.clone(), passed.clone());
            rt.spawn(move || {
                for _ in 0..ROUNDS {
                    barrier.wait().unwrap();
                    passed.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let stop_quitting = Arc::new(AtomicBool::new(false));
    let quitters: Vec<_> = (0..2)
        .map(|i| {
            let (barrier, gave_up, passed, stop) = (
                barrier.clone(),
                gave_up.clone(),
                passed.clone(),
                stop_quitting.clone(),
            );
            std::thread::spawn(move || {
                let mut r = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    r += 1;
                    let d = Instant::now() + Duration::from_micros(10 + (r * 31 + i) % 100);
                    match barrier.wait_until(d) {
                        Ok(_) => {
                            passed.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(WaitError::TimedOut) => {
                            gave_up.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for h in patient {
        h.join().unwrap();
    }
    stop_quitting.store(true, Ordering::SeqCst);
    // Quitters that still wait give up at their deadlines.
    for h in quitters {
        h.join().unwrap();
    }
    // Every pass belongs to a full generation of 3.
    let passes = passed.load(Ordering::SeqCst);
    assert_eq!(
        passes % 3,
        0,
        "{passes} passes: a generation short of parties"
    );
    assert!(passes >= 3 * ROUNDS);
    assert!(format!("{barrier:?}").contains("arrived: 0"), "{barrier:?}");
}

/// `interrupt` and `stop` do not end a barrier wait (as with the other
/// waits of `sync`): the party passes once its partner comes, and the
/// interrupt stays pending for its next sleep.
#[test]
fn interrupt_and_stop_do_not_end_a_barrier_wait() {
    let rt = rt(2);
    for stop in [false, true] {
        let barrier = Arc::new(Barrier::new(2));
        let h = {
            let barrier = barrier.clone();
            rt.spawn(move || {
                let r = barrier.wait().map(|r| r.is_leader());
                (r, spindle::sleep(LONG))
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        if stop {
            h.stop().unwrap();
        } else {
            h.interrupt().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(!h.is_finished(), "the barrier wait ended");
        assert!(barrier.wait().unwrap().is_leader());
        let expected = if stop {
            SleepError::Stopped
        } else {
            SleepError::Interrupted
        };
        assert_eq!(h.join().unwrap(), (Ok(false), Err(expected)));
    }
}

/// The runtime's stop unwinds a task waiting at the barrier: its arrival
/// is withdrawn, so two parties later still need each other.
#[test]
fn a_party_unwound_at_shutdown_withdraws_its_arrival() {
    let rt1 = rt(1);
    let barrier = Arc::new(Barrier::new(2));
    let h = {
        let barrier = barrier.clone();
        rt1.spawn(move || barrier.wait().map(|_| ()))
    };
    wait_for("the party to arrive", || {
        format!("{barrier:?}").contains("arrived: 1")
    });
    rt1.shutdown();
    assert!(h.join().is_err(), "the party was cancelled");
    let rt2 = rt(1);
    let through = Arc::new(AtomicBool::new(false));
    let first = party(&rt2, &barrier, &through);
    std::thread::sleep(Duration::from_millis(20));
    assert!(!through.load(Ordering::SeqCst), "a party passed alone");
    assert!(barrier.wait().unwrap().is_leader());
    assert!(!first.join().unwrap());
}
