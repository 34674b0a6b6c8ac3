//! Loom models of structured families (`meta::family`) against the real
//! stop (`stop_locked`, as `signal` runs it under the parent's lock): an
//! adoption racing a stop of the parent, and a child's end racing its
//! parent's stop and end. Tasks are metas of their own
//! (`meta::leak_for_model`), driven by loom threads.

use super::butex::stop_locked;
use crate::meta::family::{adopt, is_alone, leave_family};
use crate::meta::leak_for_model;
use loom::thread;

fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A parent adopting a child (its spawn through a set or a scope) races a
/// stop of the parent: the child ends up stopped either way, walked by the
/// stop or born stopped.
#[test]
fn loom_an_adoption_racing_a_stop_of_its_parent_stops_the_child() {
    loom_model(|| {
        let (parent, child) = (leak_for_model(), leak_for_model());
        let stopper = thread::spawn(move || {
            let mut st = parent.lock_interrupts();
            assert!(stop_locked(parent, &mut st).is_none(), "no wait to end");
        });
        adopt(parent, child);
        stopper.join().unwrap();
        assert!(parent.is_stopped());
        assert!(
            child.is_stopped(),
            "the stop missed a child adopted beside it"
        );
    });
}

/// A child's end (unlinking itself) races its parent's stop (walking the
/// list) and then the parent's own end (letting go of its children): no
/// link is left behind, and the child, if the stop found it, is stopped.
#[test]
fn loom_a_childs_end_racing_its_parents_stop_and_end_leaves_no_link() {
    loom_model(|| {
        let (parent, first, second) = (leak_for_model(), leak_for_model(), leak_for_model());
        adopt(parent, first);
        adopt(parent, second);
        let ending = thread::spawn(move || leave_family(first.meta()));
        {
            let mut st = parent.lock_interrupts();
            assert!(stop_locked(parent, &mut st).is_none());
        }
        // The second child was linked throughout: the stop reached it.
        assert!(second.is_stopped());
        leave_family(parent.meta());
        ending.join().unwrap();
        assert!(is_alone(parent));
        assert!(is_alone(first));
        assert!(is_alone(second));
    });
}
