//! The hot paths allocate nothing and make no futex call (the system call
//! they would make to park or wake a thread) in steady state: spawn + join
//! from a task, yield, wake + wait on a Butex, a timed wait whose timer is
//! armed and cancelled, an uncontended `sync::Mutex`, which arms no timer
//! either, even inside a deadline scope, a socket read and write that are
//! ready, and a TCP round trip whose read waits for the reply (the
//! worker polls its fds instead of parking on a futex). Allocations are counted by a
//! global allocator, in a binary of its own, and futex calls by the parking
//! crate: both per thread, the one that runs the path (a task's worker), so
//! that the runtime's other threads (the timer thread, an idle worker's
//! housekeeping) do not count.

use spindle::sync::Mutex;
use spindle::{Butex, Runtime};
use spindle_parking::futex::calls_on_this_thread;
use spindle_timer::TimerThread;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Counting;

thread_local! {
    /// Allocations made by this thread (a `Cell` with no destructor: reading
    /// it allocates nothing, even from inside the allocator).
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count_allocation() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

fn allocations_on_this_thread() -> usize {
    ALLOCS.try_with(Cell::get).unwrap_or(0)
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// What some rounds of a hot path cost beyond their work.
#[derive(Debug, PartialEq)]
struct Cost {
    allocations: usize,
    /// Futex calls made by the calling thread (a task's worker).
    futex_calls: u64,
}

const FREE: Cost = Cost {
    allocations: 0,
    futex_calls: 0,
};

/// Runs `round` many times to warm every cache up, then counts what further
/// rounds allocate and the futex calls they make on this thread.
fn steady_state(mut round: impl FnMut()) -> Cost {
    for _ in 0..50_000 {
        round();
    }
    let allocs = allocations_on_this_thread();
    let calls = calls_on_this_thread();
    for _ in 0..100_000 {
        round();
    }
    Cost {
        allocations: allocations_on_this_thread() - allocs,
        futex_calls: calls_on_this_thread() - calls,
    }
}

/// Uncontended lock + unlock of a `sync::Mutex`, plain and inside a deadline
/// scope; also checks that no timer was scheduled meanwhile.
fn uncontended_mutex() -> (Cost, Cost) {
    let m = Mutex::new(0u64);
    let scheduled = TimerThread::global().stats().scheduled;
    let plain = steady_state(|| *m.lock().unwrap() += 1);
    let scoped = spindle::with_deadline(Instant::now() + Duration::from_secs(600), || {
        steady_state(|| *m.lock().unwrap() += 1)
    });
    assert_eq!(
        TimerThread::global().stats().scheduled,
        scheduled,
        "an uncontended mutex armed a timer"
    );
    assert_eq!(m.into_inner(), 300_000);
    (plain, scoped)
}

/// A write and a read on a TCP connection that are ready (the data is
/// there: no wait), then round trips to an echoing task where each read
/// waits for the reply. Inside a task of a 1-worker runtime.
fn io_paths() -> (Cost, Cost) {
    use spindle::net::{TcpListener, TcpStream};
    use std::io::{Read, Write};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    a.set_nodelay(true).unwrap();
    b.set_nodelay(true).unwrap();
    let mut byte = [0u8; 1];
    let ready = steady_state(|| {
        (&a).write_all(b"x").unwrap();
        (&b).read_exact(&mut byte).unwrap();
    });
    let echo = spindle::spawn(move || {
        let mut buf = [0u8; 64];
        loop {
            match (&b).read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => (&b).write_all(&buf[..n]).unwrap(),
            }
        }
    });
    let round_trip = steady_state(|| {
        (&a).write_all(b"y").unwrap();
        (&a).read_exact(&mut byte).unwrap();
    });
    a.shutdown(std::net::Shutdown::Write).unwrap();
    echo.join().unwrap();
    (ready, round_trip)
}

#[test]
fn hot_paths_allocate_nothing_and_make_no_futex_call() {
    // The counts are real: a wake with nobody waiting is still a call, and
    // a box is an allocation.
    let before = calls_on_this_thread();
    spindle_parking::futex::wake(&std::sync::atomic::AtomicU32::new(0), 1);
    assert_eq!(calls_on_this_thread(), before + 1);
    let before = allocations_on_this_thread();
    drop(std::hint::black_box(Box::new(1u64)));
    assert_eq!(allocations_on_this_thread(), before + 1);
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (spawn_join, yields, butex, timed, mutex) = rt.block_on(|| {
        let spawn_join = steady_state(|| {
            spindle::spawn(|| 1u64).join().unwrap();
        });
        let yields = steady_state(spindle::yield_now);
        // A ping-pong through a butex: the partner task waits, we wake.
        let b = Arc::new(Butex::new(0));
        let b2 = b.clone();
        let partner = spindle::spawn(move || loop {
            let v = b2.value().load(Ordering::Acquire);
            if v == u32::MAX {
                return;
            }
            let _ = b2.wait(v, None);
        });
        let butex = steady_state(|| {
            b.value().fetch_add(1, Ordering::Release);
            b.wake_one();
            spindle::yield_now();
        });
        b.value().store(u32::MAX, Ordering::Release);
        b.wake_all();
        partner.join().unwrap();
        // A timed wait that is woken first: a timer armed and cancelled.
        let t = Arc::new(Butex::new(0));
        let t2 = t.clone();
        let waker = spindle::spawn(move || loop {
            let v = t2.value().load(Ordering::Acquire);
            if v == u32::MAX {
                return;
            }
            t2.value().store(v + 1, Ordering::Release);
            t2.wake_one();
            spindle::yield_now();
        });
        let timed = steady_state(|| {
            let v = t.value().load(Ordering::Acquire);
            let _ = t.wait(v, Some(Instant::now() + Duration::from_secs(10)));
        });
        t.value().store(u32::MAX, Ordering::Release);
        waker.join().unwrap();
        let io = io_paths();
        (spawn_join, yields, butex, timed, (uncontended_mutex(), io))
    });
    let (mutex, (ready_io, round_trip)) = mutex;
    assert_eq!(ready_io, FREE, "a ready write and read");
    assert_eq!(round_trip, FREE, "a TCP round trip whose read waits");
    assert_eq!(spawn_join, FREE, "spawn + join");
    assert_eq!(yields, FREE, "yield");
    assert_eq!(butex, FREE, "butex wake/wait");
    assert_eq!(timed, FREE, "a timed wait (timer arm + cancel)");
    assert_eq!(mutex, (FREE, FREE), "a task's uncontended mutex");
    // And from a plain thread.
    assert_eq!(
        uncontended_mutex(),
        (FREE, FREE),
        "a thread's uncontended mutex"
    );
}
