//! Loom models of the waiter protocol: the real `wake_one`, `on_timeout`
//! and `interrupt_locked` race over one wait whose waiter is a plain thread
//! handle (a task's worker-side steps are the same code under the same
//! lock). The timer is modelled by the version CAS of spindle-timer: the
//! timer thread moves ARMED to RUNNING before calling back; the waiter's
//! cancel moves ARMED to CANCELLED, and on seeing RUNNING waits for
//! `timer_done`; a waiter its timer ended skips the cancel and only waits
//! for `timer_done` (`leave` below, as `Leave` does).

use super::butex::{
    claim_for_stop, interrupt_locked, link_or_refuse, on_timeout, pass_on_unseen_wake, Signal,
};
use super::Butex;
use crate::error::WaitError;
use crate::loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use crate::meta::wait_queue::{Outcome, WaitNode, WaitPolicy, Waiter};
use crate::meta::InterruptState;
use loom::sync::Arc;
use loom::thread::{self, Thread};
use std::ptr;

const ARMED: u32 = 0;
const RUNNING: u32 = 1;
const CANCELLED: u32 = 2;

/// One wait's node and its timer's state, shared with the racers.
struct Model {
    butex: Arc<Butex>,
    node: WaitNode,
    timer: AtomicU32,
}
// SAFETY (test only): the node's cells are touched under the butex lock,
// and the node outlives every racer (the model joins them first).
unsafe impl Send for Model {}
// SAFETY (test only): as above.
unsafe impl Sync for Model {}

fn model(butex: &Arc<Butex>, waiter: Thread) -> Arc<Model> {
    Arc::new(Model {
        butex: butex.clone(),
        node: WaitNode::new(
            butex.queue(),
            0,
            Waiter::Thread(waiter),
            WaitPolicy::Interruptible,
            None,
        ),
        timer: AtomicU32::new(ARMED),
    })
}

/// Links the node with `block`'s own step (the timer is armed after
/// this; wakes and interrupts before it are caught by the value check
/// and the pending-interrupt check), for a wait nothing has refused.
fn link(m: &Model) {
    // SAFETY: the node lives in `m`, which outlives every racer.
    let linked = unsafe { link_or_refuse(None, || false, m.butex.queue(), &m.node) };
    assert!(linked, "nothing refuses this wait");
}

/// The waiter sleeps until somebody ends the wait, then cancels its
/// timer or waits for the running callback, as `wait_task` does.
fn wait(m: &Model) -> Outcome {
    let outcome = loop {
        match m.node.outcome(Ordering::Acquire) {
            Outcome::Waiting => thread::park(),
            o => break o,
        }
    };
    leave(m, outcome);
    outcome
}

/// The timer half of `Leave`, for a wait that ended with `outcome`:
/// timed out, the timer is spent (never to fire again: the skipped
/// cancel could not have found it armed) and only the callback's
/// `timer_done` is awaited; else unschedule: Removed (ARMED ->
/// CANCELLED), Running (wait for the callback to let go of the node),
/// or nothing armed.
fn leave(m: &Model, outcome: Outcome) {
    let timed_out = outcome == Outcome::TimedOut;
    if timed_out {
        assert_ne!(m.timer.load(Ordering::Acquire), ARMED, "a spent timer");
    }
    if timed_out || cancel_timer(m) == Err(RUNNING) {
        while !m.node.timer_done() {
            thread::yield_now();
        }
    }
}

/// The timer's cancel (`unschedule`): `Ok` if it was still armed.
fn cancel_timer(m: &Model) -> Result<u32, u32> {
    m.timer
        .compare_exchange(ARMED, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
}

/// The timer thread, firing the timer if it is still armed.
fn spawn_timer(m: &Arc<Model>) -> thread::JoinHandle<()> {
    let m = m.clone();
    thread::spawn(move || fire_timer(&m))
}

/// An interrupter of the wait; its thread returns whether the interrupt
/// stayed pending (it lost the race).
fn spawn_interrupter(m: &Arc<Model>) -> thread::JoinHandle<bool> {
    let m = m.clone();
    thread::spawn(move || {
        let mut st = InterruptState {
            pending: false,
            waiting: &m.node,
        };
        assert!(
            interrupt_locked(&mut st, Signal::Interrupt).is_none(),
            "a thread waiter is unparked, not queued"
        );
        st.pending
    })
}

fn fire_timer(m: &Model) {
    if m.timer
        .compare_exchange(ARMED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        on_timeout(&m.node);
    }
}

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Waker, timer and interrupter race: exactly one of them ends the wait,
/// the others see it ended, and the list is left empty.
#[test]
fn loom_wake_timeout_interrupt_have_one_winner() {
    loom_model(|| {
        let butex = Arc::new(Butex::new(0));
        let m = model(&butex, thread::current());
        link(&m);
        let waker = {
            let b = butex.clone();
            thread::spawn(move || b.wake_one())
        };
        let timer = spawn_timer(&m);
        let interrupter = spawn_interrupter(&m);
        let outcome = wait(&m);
        let woke = waker.join().unwrap();
        timer.join().unwrap();
        let interrupt_pending = interrupter.join().unwrap();
        assert_eq!(
            woke == 1,
            outcome == Outcome::Woken,
            "wake_one counted iff it won"
        );
        assert_eq!(
            !interrupt_pending,
            outcome == Outcome::Interrupted,
            "an interrupt that lost is remembered"
        );
        assert!(matches!(
            outcome,
            Outcome::Woken | Outcome::TimedOut | Outcome::Interrupted
        ));
        assert!(
            butex.queue().lock().front().is_none(),
            "the node left the list"
        );
    });
}

/// A stale timer never ends a later wait: the first wait's timer fires
/// late, after a wake ended that wait; the waiter reuses the node's
/// memory for a second wait only after the callback is done with it, so
/// the second wait is ended by its own wake, never by a TimedOut.
#[test]
fn loom_a_cancelled_timer_never_ends_a_later_wait() {
    loom_model(|| {
        let butex = Arc::new(Butex::new(0));
        let m = model(&butex, thread::current());
        let waker = |b: &Arc<Butex>| {
            let b = b.clone();
            thread::spawn(move || b.wake_one())
        };
        link(&m);
        let timer = spawn_timer(&m);
        let first_waker = waker(&butex);
        let first = wait(&m);
        assert!(matches!(first, Outcome::Woken | Outcome::TimedOut));
        // Reuse the node for a second wait with no timer of its own, as
        // a task's next wait reuses its meta's node.
        m.node.set_outcome(Outcome::Waiting, Ordering::Release);
        m.node.set_timer_done(false);
        m.timer.store(CANCELLED, Ordering::Release);
        link(&m);
        let second_waker = waker(&butex);
        let second = wait(&m);
        assert_eq!(second, Outcome::Woken, "a stale timer ended a later wait");
        timer.join().unwrap();
        let wakes = first_waker.join().unwrap() + second_waker.join().unwrap();
        assert_eq!(wakes, if first == Outcome::Woken { 2 } else { 1 });
    });
}

/// A task's interrupt state behind a loom mutex, as in its meta (these
/// models build no task meta).
struct Locked(loom::sync::Mutex<InterruptState>);
// SAFETY (test only): the raw node pointer inside is only followed
// under the lock, while the node is alive.
unsafe impl Send for Locked {}
// SAFETY (test only): as above.
unsafe impl Sync for Locked {}

/// An interrupt racing the start of a wait (brpc PR #3551) is never
/// lost: the worker links under the task's interrupt lock after checking
/// for a pending interrupt, and the interrupter records the interrupt and
/// looks for the node under the same lock.
#[test]
fn loom_an_interrupt_racing_the_start_of_a_wait_is_not_lost() {
    loom_model(|| {
        let butex = Arc::new(Butex::new(0));
        let m = model(&butex, thread::current());
        let st = Arc::new(Locked(loom::sync::Mutex::new(InterruptState {
            pending: false,
            waiting: ptr::null(),
        })));
        let interrupter = {
            let st = st.clone();
            thread::spawn(move || {
                let mut st = st.0.lock().unwrap();
                interrupt_locked(&mut st, Signal::Interrupt)
            })
        };
        // The worker's step 2 of `block`, for an interruptible wait.
        let linked = {
            let mut g = st.0.lock().unwrap();
            // SAFETY: the node lives in `m`, which outlives every racer.
            unsafe { link_or_refuse(Some(&mut g), || false, m.butex.queue(), &m.node) }
        };
        m.timer.store(CANCELLED, Ordering::Release); // no timer here
        let outcome = if linked {
            wait(&m)
        } else {
            Outcome::Interrupted
        };
        st.0.lock().unwrap().waiting = ptr::null();
        assert!(interrupter.join().unwrap().is_none());
        assert_eq!(
            outcome,
            Outcome::Interrupted,
            "the interrupt ended this wait"
        );
        assert!(!st.0.lock().unwrap().pending, "and was consumed once");
    });
}

/// `stop` (the flag and an interrupt, under the interrupt lock, as
/// `butex::signal` does) racing the start of a wait ends that wait, and
/// refuses the next one too, although the interrupt was consumed.
#[test]
fn loom_a_stop_racing_the_start_of_a_wait_refuses_every_wait() {
    loom_model(|| {
        let butex = Arc::new(Butex::new(0));
        let stopped = Arc::new(AtomicBool::new(false));
        let st = Arc::new(Locked(loom::sync::Mutex::new(InterruptState {
            pending: false,
            waiting: ptr::null(),
        })));
        let mut stopper = Some({
            let (st, stopped) = (st.clone(), stopped.clone());
            thread::spawn(move || {
                let mut st = st.0.lock().unwrap();
                stopped.store(true, Ordering::Release);
                interrupt_locked(&mut st, Signal::Interrupt)
            })
        });
        let is_stopped = || stopped.load(Ordering::Acquire);
        for wait_number in 1..=2 {
            let m = model(&butex, thread::current());
            let linked = {
                let mut g = st.0.lock().unwrap();
                // SAFETY: the node lives in `m`, which outlives the
                // stopper (joined below, or before the second wait).
                unsafe { link_or_refuse(Some(&mut g), is_stopped, m.butex.queue(), &m.node) }
            };
            m.timer.store(CANCELLED, Ordering::Release); // no timer here
            let outcome = if linked {
                wait(&m)
            } else {
                Outcome::Interrupted
            };
            st.0.lock().unwrap().waiting = ptr::null();
            assert_eq!(
                outcome,
                Outcome::Interrupted,
                "wait {wait_number} ended by the stop"
            );
            if wait_number == 1 {
                // The second wait begins after the stop has landed.
                let stopper = stopper.take().expect("joined once");
                assert!(stopper.join().unwrap().is_none());
            }
        }
    });
}

/// The stop claims a blocked task's wait (`claim_for_stop`) while a
/// waker's one `wake_one` and the timer race it, with a second waiter
/// queued behind: whichever wins, the wake-up is not lost. If the waker
/// reached the task first, the task, unwound instead of resumed, passes
/// it on (`pass_on_unseen_wake`); if the stop did, the waker finds the
/// second waiter itself.
#[test]
fn loom_the_stop_claiming_a_wait_loses_no_wake_up() {
    loom_model(|| {
        let butex = Arc::new(Butex::new(0));
        // The second waiter is a thread of its own, and so are all the
        // racers: this thread only joins them. (Loom's `unpark` would
        // also end a `join` it landed in.) The first waiter, a task,
        // has its wake-ups go through its worker, which polls; they
        // are addressed to the second waiter's thread, as a spurious
        // wake-up it re-checks.
        let published = Arc::new(AtomicBool::new(false));
        let slot = Arc::new(std::sync::OnceLock::<Arc<Model>>::new());
        let second_waiter = {
            let (published, slot) = (published.clone(), slot.clone());
            thread::spawn(move || {
                while !published.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                wait(slot.get().expect("published"))
            })
        };
        let first = model(&butex, second_waiter.thread().clone());
        let second = model(&butex, second_waiter.thread().clone());
        second.timer.store(CANCELLED, Ordering::Release); // untimed
        link(&first);
        link(&second);
        let _ = slot.set(second.clone());
        published.store(true, Ordering::Release);
        let waker = {
            let b = butex.clone();
            thread::spawn(move || b.wake_one())
        };
        let timer = spawn_timer(&first);
        let worker = {
            let first = first.clone();
            thread::spawn(move || {
                // The stopping worker: claim, or find the wait ended.
                // SAFETY (of the model): the nodes and butex are alive.
                let claimed = unsafe { claim_for_stop(&first.node) }.is_some();
                let outcome = loop {
                    match first.node.outcome(Ordering::Acquire) {
                        Outcome::Waiting => thread::yield_now(),
                        o => break o,
                    }
                };
                leave(&first, outcome);
                // The task unwinds: its guard passes an unseen wake-up on.
                // SAFETY (of the model): as above.
                unsafe { pass_on_unseen_wake(&first.node) };
                (claimed, outcome)
            })
        };
        let second_outcome = second_waiter.join().unwrap();
        let (claimed, outcome) = worker.join().unwrap();
        assert_eq!(claimed, outcome == Outcome::Interrupted);
        assert_eq!(
            waker.join().unwrap(),
            1,
            "a waiter was always there to wake"
        );
        timer.join().unwrap();
        assert_eq!(
            second_outcome,
            Outcome::Woken,
            "the wake-up reached the second waiter"
        );
        assert!(
            butex.queue().lock().front().is_none(),
            "both nodes left the list"
        );
    });
}

/// The sleeper's own worker ends a due sleep (`Blocker::end_due_sleep`: cancel
/// the timer, and if that wins, run its callback) while the timer thread
/// fires and an interrupter strikes: still exactly one outcome, the
/// callback runs at most once, and a losing interrupt is remembered.
#[test]
fn loom_a_worker_ending_a_due_sleep_races_its_timer() {
    loom_model(|| {
        let butex = Arc::new(Butex::new(0));
        let m = model(&butex, thread::current());
        link(&m);
        let timer = spawn_timer(&m);
        let interrupter = spawn_interrupter(&m);
        // The worker, on the sleeper's thread before it resumes: the
        // cancel half of `end_due_sleep`, then the callback if it won.
        if cancel_timer(&m).is_ok() {
            on_timeout(&m.node);
        }
        let outcome = wait(&m);
        timer.join().unwrap();
        let interrupt_pending = interrupter.join().unwrap();
        assert!(matches!(outcome, Outcome::TimedOut | Outcome::Interrupted));
        assert_eq!(!interrupt_pending, outcome == Outcome::Interrupted);
        assert!(m.node.timer_done() || outcome == Outcome::Interrupted);
        assert!(
            butex.queue().lock().front().is_none(),
            "the node left the list"
        );
    });
}

/// The real `Butex::wait` of a plain thread against a change of the
/// value and a `wake_one` (a gate opening): the wait returns, `Ok` if
/// and only if the wake counted it, and its node is unlinked. Its waiter
/// frees the node once it sees the outcome, so a claim that read the
/// node after publishing the outcome is reported (`read_for_claim`).
#[test]
fn loom_a_thread_wait_racing_a_change_and_a_wake_returns() {
    loom_model(|| {
        let butex = Arc::new(Butex::new(0));
        let opener = {
            let b = butex.clone();
            thread::spawn(move || {
                b.value().store(1, Ordering::Release);
                b.wake_one()
            })
        };
        let r = butex.wait(0, None);
        let woke = opener.join().unwrap();
        assert!(matches!(r, Ok(()) | Err(WaitError::WouldBlock)), "{r:?}");
        assert_eq!(
            woke == 1,
            r.is_ok(),
            "wake_one counted iff it ended the wait"
        );
        assert!(
            butex.queue().lock().front().is_none(),
            "the node left the list"
        );
    });
}

/// Two plain threads pass a gate, each waiting for it in a loop with
/// the real `Butex::wait`, while it opens with one `wake_all`: neither
/// sleeps for good (loom reports a deadlock if one does).
#[test]
fn loom_wake_all_lets_every_thread_through_a_gate() {
    loom_model(|| {
        let butex = Arc::new(Butex::new(0));
        let passer = |b: Arc<Butex>| {
            thread::spawn(move || {
                while b.value().load(Ordering::Acquire) == 0 {
                    let _ = b.wait(0, None);
                }
            })
        };
        let (a, b) = (passer(butex.clone()), passer(butex.clone()));
        butex.value().store(1, Ordering::Release);
        butex.wake_all();
        a.join().unwrap();
        b.join().unwrap();
        assert!(
            butex.queue().lock().front().is_none(),
            "no node is left linked"
        );
    });
}
