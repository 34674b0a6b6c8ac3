//! Loom models of the idle protocol that drive the real worker loop
//! ([`Idle::work`]) and its handshakes: two workers run numbers from a
//! pinned queue each and two stealable ones, and producers push and notify
//! as spawns and wake-ups do. A lost wake-up shows as a deadlock, which
//! loom reports.

use super::*;
use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;
use std::cell::RefCell;

/// Explores every interleaving with up to two preemptions (three, for
/// the models with two producers, ran for over five minutes).
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    model_bounded(2, f)
}

fn model_bounded<F: Fn() + Sync + Send + 'static>(preemptions: usize, f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

/// A one-task queue with the orderings of the remote queue (a release
/// RMW to push, an acquire swap to take). Not a mutex: a mutex would
/// synchronize both ways and hide a missing fence. (The push must be an
/// RMW, as the real one is: loom 0.7 lets a later swap miss a plain
/// store that happens-before it, a false deadlock.)
struct Slot(loom::sync::atomic::AtomicU32);

impl Slot {
    fn new() -> Self {
        Slot(loom::sync::atomic::AtomicU32::new(0))
    }
    fn push(&self, t: u32) {
        self.0.swap(t, loom::sync::atomic::Ordering::Release);
    }
    fn is_empty(&self) -> bool {
        self.0.load(loom::sync::atomic::Ordering::Relaxed) == 0
    }
    fn pop(&self) -> Option<u32> {
        match self.0.swap(0, loom::sync::atomic::Ordering::Acquire) {
            0 => None,
            t => Some(t),
        }
    }
}

/// A worker's own queues: work pinned to it, and its inbox (spawns from a
/// plain thread onto it; in the models only its worker takes from it, the
/// strictest case: a thief's patience may leave it there).
struct Pinned {
    pinned: Slot,
    inbox: Slot,
}

struct Rt {
    idle: Idle,
    stealable: Slot,
    /// A second stealable queue, for the two-producer model.
    stealable2: Slot,
    workers: [Pinned; 2],
    done: AtomicUsize,
    stopping: AtomicBool,
    /// Whether a task other than [`LONG`] has run.
    other_ran: (loom::sync::Mutex<bool>, loom::sync::Condvar),
    /// Per worker: its poller, if it parks in one.
    pollers: [Option<Arc<ModelPoller>>; 2],
}

/// A worker's poller, as the idle protocol sees it: the kernel's list of
/// ready fds (an fd's task, once delivered, is pinned to the worker) and
/// the waker; a blocking poll returns when either has something.
#[derive(Debug, Default)]
struct ModelPoller {
    /// `(woken, fd events: tasks they make ready)`.
    state: loom::sync::Mutex<(bool, Vec<u32>)>,
    changed: loom::sync::Condvar,
}

impl ModelPoller {
    /// An fd becomes ready: the kernel queues the event and wakes a
    /// thread blocked in the poll, whatever the idle protocol's flags say.
    fn event(&self, task: u32) {
        self.state.lock().unwrap().1.push(task);
        self.changed.notify_all();
    }
}

/// The model's waker is a handle on the poller.
#[derive(Debug)]
struct ModelWaker(Arc<ModelPoller>);

impl PollWaker for ModelWaker {
    fn wake(&self) {
        self.0.state.lock().unwrap().0 = true;
        self.0.changed.notify_all();
    }
}

/// A task that runs until another task has run: its worker is busy
/// while the other waits to be picked up by a parked worker.
const LONG: u32 = 100;

/// A worker of the model: the real loop (`Idle::work`) over queues of
/// numbers, looking once (no spinning) before it parks.
struct ModelWorker<'a> {
    rt: &'a Rt,
    me: usize,
    /// Tasks to run in all, over both workers: the last one stops.
    total: usize,
    ran: RefCell<Vec<u32>>,
}

impl ModelWorker<'_> {
    fn steal(&self) -> Option<u32> {
        self.rt.stealable.pop().or_else(|| self.rt.stealable2.pop())
    }
}

impl IdleWorker for ModelWorker<'_> {
    type Task = u32;
    fn index(&self) -> usize {
        self.me
    }
    fn stopping(&self) -> bool {
        self.rt.stopping.load(SeqCst)
    }
    fn next_local(&self) -> Option<u32> {
        let mine = &self.rt.workers[self.me];
        mine.pinned.pop().or_else(|| mine.inbox.pop())
    }
    fn look(&self) -> Look<u32> {
        match self.steal() {
            Some(t) => Look::Found(t),
            None => Look::Park(None),
        }
    }
    fn last_look(&self) -> Option<u32> {
        self.next_local().or_else(|| self.steal())
    }
    fn stealable_in_sight(&self) -> bool {
        !self.rt.stealable.is_empty() || !self.rt.stealable2.is_empty()
    }
    fn parking(&self) {}
    fn unparked(&self) {}
    fn look_again_at(&self) -> Option<Instant> {
        None
    }

    fn search_ended(&self, _: &u32) {}
    fn polls(&self) -> bool {
        self.rt.pollers[self.me].is_some()
    }
    fn poll_io(&self, wait: PollWait) {
        let Some(p) = &self.rt.pollers[self.me] else {
            return;
        };
        let mut st = p.state.lock().unwrap();
        if let PollWait::Park(_) = wait {
            while !st.0 && st.1.is_empty() {
                st = p.changed.wait(st).unwrap();
            }
        }
        // A poll takes the waker's event and every fd's, as epoll does.
        st.0 = false;
        for t in st.1.drain(..) {
            self.rt.workers[self.me].pinned.push(t);
        }
    }
    fn run(&self, t: u32) {
        let rt = self.rt;
        if t == LONG {
            // Runs until the other task has run.
            let (m, cv) = &rt.other_ran;
            let mut ran = m.lock().unwrap();
            while !*ran {
                ran = cv.wait(ran).unwrap();
            }
        } else {
            *rt.other_ran.0.lock().unwrap() = true;
            rt.other_ran.1.notify_all();
        }
        self.ran.borrow_mut().push(t);
        if rt.done.fetch_add(1, SeqCst) + 1 == self.total {
            rt.stopping.store(true, SeqCst);
            rt.idle.stop();
        }
    }
}

/// Runs worker `me` of `rt` until the model stops; returns what it ran.
fn worker(rt: &Rt, me: usize, total: usize) -> Vec<u32> {
    let w = ModelWorker {
        rt,
        me,
        total,
        ran: RefCell::new(Vec::new()),
    };
    rt.idle.work(&w);
    w.ran.into_inner()
}

fn runtime() -> Arc<Rt> {
    runtime_polling([false, false])
}

/// A runtime whose worker `i` parks in a poller if `polling[i]`.
fn runtime_polling(polling: [bool; 2]) -> Arc<Rt> {
    let idle = Idle::new(2);
    idle.add_worker();
    idle.add_worker();
    let pollers = polling.map(|p| p.then(|| Arc::new(ModelPoller::default())));
    for (i, p) in pollers.iter().enumerate() {
        if let Some(p) = p {
            idle.set_waker(i, Box::new(ModelWaker(p.clone())));
        }
    }
    Arc::new(Rt {
        pollers,
        idle,
        stealable: Slot::new(),
        stealable2: Slot::new(),
        workers: [
            Pinned {
                pinned: Slot::new(),
                inbox: Slot::new(),
            },
            Pinned {
                pinned: Slot::new(),
                inbox: Slot::new(),
            },
        ],
        done: AtomicUsize::new(0),
        stopping: AtomicBool::new(false),
        other_ran: Default::default(),
    })
}

/// Starts both workers, to run `total` tasks between them.
fn start_workers(rt: &Arc<Rt>, total: usize) -> Vec<thread::JoinHandle<Vec<u32>>> {
    (0..2)
        .map(|i| {
            let rt = rt.clone();
            thread::spawn(move || worker(&rt, i, total))
        })
        .collect()
}

/// Runs `produce` on a thread of its own: a second producer.
fn producer(rt: &Arc<Rt>, produce: fn(&Rt)) -> thread::JoinHandle<()> {
    let rt = rt.clone();
    thread::spawn(move || produce(&rt))
}

/// New, stealable work is always picked up: no worker sleeps through it.
#[test]
fn loom_stealable_work_is_never_lost() {
    // One task and one producer: three preemptions explore in seconds.
    model_bounded(3, || {
        let rt = runtime();
        let ws = start_workers(&rt, 1);
        rt.stealable.push(7);
        rt.idle.notify_work(0);
        let ran: Vec<u32> = ws.into_iter().flat_map(|w| w.join().unwrap()).collect();
        assert_eq!(ran, [7]);
    });
}

/// Work pinned to worker 1 wakes worker 1, and only worker 1 runs it.
#[test]
fn loom_pinned_work_wakes_its_worker() {
    model_bounded(3, || {
        let rt = runtime();
        let ws = start_workers(&rt, 1);
        rt.workers[1].pinned.push(9);
        rt.idle.notify_worker(1);
        let ran: Vec<Vec<u32>> = ws.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(ran, [vec![], vec![9]]);
    });
}

/// Two producers, each pushing a task and notifying, racing the workers'
/// parking: both tasks run. (A scheme that skips wake-ups while a
/// signalled worker is on its way loses a wake-up here.)
#[test]
fn loom_two_producers_never_lose_a_task() {
    model(|| assert_eq!(two_producers(7), [7, 8]));
}

/// Two workers; this thread pushes `first` (and notifies), a second
/// producer pushes task 8: returns the tasks that ran, sorted.
fn two_producers(first: u32) -> Vec<u32> {
    let rt = runtime();
    let ws = start_workers(&rt, 2);
    let other = producer(&rt, |rt| {
        rt.stealable2.push(8);
        rt.idle.notify_work(1);
    });
    rt.stealable.push(first);
    rt.idle.notify_work(0);
    other.join().unwrap();
    let mut ran: Vec<u32> = ws.into_iter().flat_map(|w| w.join().unwrap()).collect();
    ran.sort();
    ran
}

/// A searcher takes a task that runs until a second one has run, while
/// the second one's producer skips its wake-up because it sees that
/// searcher: the searcher, the last one, sees the second task once it
/// stops searching and wakes the parked worker for it. (A searcher that
/// looks for more work before it stops searching leaves the second task
/// waiting on the busy worker's queue.)
#[test]
fn loom_the_last_searcher_wakes_a_worker_for_work_left_behind() {
    model(|| assert_eq!(two_producers(LONG), [8, LONG]));
}

/// A pinned wake-up (which wakes its worker without making it a
/// searcher) racing a notification of stealable work (which picks a
/// parked worker and makes it one): both tasks run, the pinned one on
/// its own worker, and no searcher count is left behind.
#[test]
fn loom_pinned_and_stealable_wakes_race() {
    model(|| {
        let rt = runtime();
        let ws = start_workers(&rt, 2);
        let other = producer(&rt, |rt| {
            rt.workers[0].pinned.push(9);
            rt.idle.notify_worker(0);
        });
        rt.stealable.push(7);
        rt.idle.notify_work(1);
        other.join().unwrap();
        let ran: Vec<Vec<u32>> = ws.into_iter().map(|w| w.join().unwrap()).collect();
        assert!(ran[0].contains(&9), "the pinned task ran on its worker");
        let mut all: Vec<u32> = ran.concat();
        all.sort();
        assert_eq!(all, [7, 9]);
        assert_eq!(rt.idle.searching.load(SeqCst), 0, "no searcher left over");
    });
}

/// Work pinned to a worker parked in its poller wakes it through its
/// waker: the producer's signal and the worker's `in_poll` flag are the
/// lot handshake's two sides, so either the worker sees the signal and
/// does not block, or the producer sees the flag and wakes the poller.
/// (With the flag set after the lot's state is checked, or no fence
/// between them, the model deadlocks.)
#[test]
fn loom_pinned_work_wakes_a_worker_parked_in_its_poller() {
    model_bounded(3, || {
        let rt = runtime_polling([false, true]);
        let ws = start_workers(&rt, 1);
        rt.workers[1].pinned.push(9);
        rt.idle.notify_worker(1);
        let ran: Vec<Vec<u32>> = ws.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(ran, [vec![], vec![9]]);
    });
}

/// Stealable work reaches workers that park in their pollers, and an fd
/// event wakes its worker from its poll: both tasks run, the event's on
/// its own worker.
#[test]
fn loom_fd_events_and_spawns_reach_polling_workers() {
    model(|| {
        let rt = runtime_polling([true, true]);
        let ws = start_workers(&rt, 2);
        let other = producer(&rt, |rt| {
            rt.pollers[1].as_ref().unwrap().event(5);
        });
        rt.stealable.push(7);
        rt.idle.notify_work(0);
        other.join().unwrap();
        let ran: Vec<Vec<u32>> = ws.into_iter().map(|w| w.join().unwrap()).collect();
        assert!(ran[1].contains(&5), "the fd's task ran on its worker");
        let mut all: Vec<u32> = ran.concat();
        all.sort();
        assert_eq!(all, [5, 7]);
    });
}

/// A spawn from a plain thread into worker 1's inbox reaches worker 1,
/// whether it is running, on its way to park, or parked (then it is picked
/// as `Notified`, and counted as a searcher on its behalf), even though no
/// other worker takes from that inbox. (Without the fence between the push
/// and the read of the worker's state, or with the inbox left out of the
/// last look before parking, the model deadlocks.)
#[test]
fn loom_an_inbox_spawn_reaches_its_worker() {
    model_bounded(3, || {
        let rt = runtime();
        let ws = start_workers(&rt, 1);
        rt.workers[1].inbox.push(9);
        rt.idle.notify_inbox(1);
        let ran: Vec<Vec<u32>> = ws.into_iter().map(|w| w.join().unwrap()).collect();
        assert_eq!(ran, [vec![], vec![9]]);
        assert_eq!(rt.idle.searching.load(SeqCst), 0, "no searcher left over");
    });
}

/// An inbox spawn (which may pick its parked worker as a searcher) racing
/// a notification of stealable work (which picks a parked worker too):
/// both tasks run, the inbox's on its worker, and no searcher count is
/// left behind.
#[test]
fn loom_inbox_and_stealable_spawns_race() {
    model(|| {
        let rt = runtime();
        let ws = start_workers(&rt, 2);
        let other = producer(&rt, |rt| {
            rt.workers[0].inbox.push(9);
            rt.idle.notify_inbox(0);
        });
        rt.stealable.push(7);
        rt.idle.notify_work(1);
        other.join().unwrap();
        let ran: Vec<Vec<u32>> = ws.into_iter().map(|w| w.join().unwrap()).collect();
        assert!(ran[0].contains(&9), "the inbox's task ran on its worker");
        let mut all: Vec<u32> = ran.concat();
        all.sort();
        assert_eq!(all, [7, 9]);
        assert_eq!(rt.idle.searching.load(SeqCst), 0, "no searcher left over");
    });
}
