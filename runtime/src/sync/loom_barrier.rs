//! Loom models of `Barrier`, driving the real barrier with loom threads:
//! an arrival that trips the barrier races a waiter that gives up and
//! withdraws. A deadline already past stands in for a timeout (`wait`
//! fails with `TimedOut` before it links, as if the timer fired first).

use super::Barrier;
use crate::error::WaitError;
use loom::sync::Arc;
use loom::thread;
use std::time::Instant;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Two parties that both give up at once: either the second came before
/// the first withdrew (both through, one leader) or it did not (both
/// fail). Either way, no arrival is left behind: a full round after
/// passes, with one leader.
#[test]
fn loom_barrier_an_arrival_races_a_withdrawal() {
    loom_model(|| {
        let barrier = Arc::new(Barrier::new(2));
        let party = |b: &Arc<Barrier>, timed: bool| {
            let b = b.clone();
            thread::spawn(move || {
                let r = if timed {
                    b.wait_until(Instant::now())
                } else {
                    b.wait()
                };
                r.map(|r| r.is_leader())
            })
        };
        let other = party(&barrier, true);
        let mine = barrier.wait_until(Instant::now()).map(|r| r.is_leader());
        match (mine, other.join().unwrap()) {
            (Ok(a), Ok(b)) => assert_ne!(a, b, "one leader"),
            (Err(WaitError::TimedOut), Err(WaitError::TimedOut)) => {}
            other => panic!("one through and one not: {other:?}"),
        }
        let other = party(&barrier, false);
        let mine = barrier.wait().unwrap().is_leader();
        assert_ne!(mine, other.join().unwrap().unwrap(), "one leader");
    });
}
