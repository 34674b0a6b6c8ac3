//! Task dumps: every kind of wait listed with its kind and deadline, the
//! running and the ready, a finished task absent, a dump of 100 000
//! sleepers, backtraces, and the dump on a signal.
//!
//! Backtraces need frame pointers: in a build with
//! `RUSTFLAGS="-C force-frame-pointers=yes"` (CI runs this file so, with
//! `SPINDLE_EXPECT_BACKTRACES=1`) the test asserts that a task's backtrace
//! names the function it sleeps in; in other builds, that there is none.

use spindle::io::Interest;
use spindle::net::TcpStream;
use spindle::sync::{mpsc, Barrier, Condvar, Mutex, OnceCell, RwLock, Semaphore};
use spindle::{Butex, Runtime, TaskDump, TaskId, TaskInfo, TaskState, WaitKind};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(3600);

/// Dumps `rt` until `ready` holds for the dump (a generous minute, so a
/// busy machine never fails it), and returns that dump.
fn dump_until(rt: &Runtime, what: &str, ready: impl Fn(&TaskDump) -> bool) -> TaskDump {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let d = rt.dump();
        if ready(&d) {
            return d;
        }
        assert!(
            Instant::now() < give_up,
            "never saw {what}; last dump:\n{d}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn named<'a>(d: &'a TaskDump, name: &str) -> Option<&'a TaskInfo> {
    d.iter().find(|t| t.name.as_deref() == Some(name))
}

fn waiting_on(d: &TaskDump, name: &str) -> Option<(WaitKind, Option<Instant>)> {
    match named(d, name)?.state {
        TaskState::Waiting { on, deadline } => Some((on, deadline)),
        _ => None,
    }
}

fn spawn_named<T: Send + 'static>(
    rt: &Runtime,
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> spindle::JoinHandle<T> {
    spindle::task::Builder::new()
        .name(name)
        .spawn_on(&rt.handle(), f)
        .expect("spawn")
}

/// Each kind of wait, with the deadline of the wait or of its scope.
#[test]
fn the_dump_lists_each_kind_of_wait_with_its_deadline() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let start = Instant::now();
    let mut handles = Vec::new();

    handles.push(spawn_named(&rt, "sleeper", || {
        let _ = spindle::sleep(LONG);
    }));
    let butex = Arc::new(Butex::new(0));
    let b = butex.clone();
    let butex_deadline = start + Duration::from_secs(1800);
    handles.push(spawn_named(&rt, "butex", move || {
        let _ = b.wait(0, Some(butex_deadline));
    }));
    // Held by this thread while the task waits.
    let mutex = Arc::new(Mutex::new(()));
    let held = mutex.lock().unwrap();
    let m = mutex.clone();
    handles.push(spawn_named(&rt, "mutex", move || {
        let _g = m.lock();
    }));
    let cv = Arc::new((Mutex::new(false), Condvar::new()));
    let c = cv.clone();
    handles.push(spawn_named(&rt, "condvar", move || {
        let g = c.0.lock().unwrap();
        let _ = c.1.wait_while(g, |done| !*done);
    }));
    let rwlock = Arc::new(RwLock::new(()));
    let written = rwlock.write().unwrap();
    let r = rwlock.clone();
    handles.push(spawn_named(&rt, "rwlock", move || {
        let _g = r.read();
    }));
    let semaphore = Arc::new(Semaphore::new(0));
    let s = semaphore.clone();
    handles.push(spawn_named(&rt, "semaphore", move || {
        let _p = s.acquire();
    }));
    let barrier = Arc::new(Barrier::new(2));
    let b = barrier.clone();
    handles.push(spawn_named(&rt, "barrier", move || {
        let _ = b.wait();
    }));
    let cell = Arc::new(OnceCell::<u32>::new());
    let c = cell.clone();
    handles.push(spawn_named(&rt, "once_cell", move || {
        let _ = c.wait();
    }));
    let (tx, rx) = mpsc::channel::<u32>();
    let scope_deadline = start + Duration::from_secs(1200);
    handles.push(spawn_named(&rt, "channel", move || {
        // The scope's deadline is the wait's.
        let _ = spindle::with_deadline(scope_deadline, || rx.recv());
    }));
    let sleeper_id = handles[0].id();
    let target = rt.spawn(|| {
        let _ = spindle::sleep(LONG);
    });
    let target_id = target.id();
    handles.push(spawn_named(&rt, "join", move || {
        let _ = target.join();
    }));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (fd_tx, fd_rx) = std::sync::mpsc::channel();
    handles.push(spawn_named(&rt, "fd", move || {
        let mut s = TcpStream::connect(addr).unwrap();
        fd_tx.send(s.as_raw_fd()).unwrap();
        let mut buf = [0u8; 8];
        let _ = s.read(&mut buf);
    }));
    let (_peer, _) = listener.accept().unwrap();
    let fd = fd_rx.recv().unwrap();
    let release_blocking = Arc::new(AtomicBool::new(false));
    let r = release_blocking.clone();
    let blocking = rt.block_on(|| {
        spindle::task::spawn_blocking(move || {
            while !r.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    });
    let blocking_id = blocking.id();
    handles.push(spawn_named(&rt, "future", || {
        let _ = spindle::task::block_on_future(std::future::pending::<()>());
    }));

    let expect = [
        ("butex", WaitKind::Butex),
        ("mutex", WaitKind::Mutex),
        ("condvar", WaitKind::Condvar),
        ("rwlock", WaitKind::RwLock),
        ("semaphore", WaitKind::Semaphore),
        ("barrier", WaitKind::Barrier),
        ("once_cell", WaitKind::OnceCell),
        ("channel", WaitKind::Channel),
        ("join", WaitKind::Join),
        (
            "fd",
            WaitKind::Fd {
                fd,
                interest: Interest::Readable,
            },
        ),
        ("future", WaitKind::Future),
    ];
    let d = dump_until(&rt, "every wait", |d| {
        expect
            .iter()
            .all(|(name, kind)| waiting_on(d, name).is_some_and(|(on, _)| on == *kind))
            && matches!(
                named(d, "sleeper").map(|t| &t.state),
                Some(TaskState::Sleeping { .. })
            )
            && d.get(blocking_id).is_some_and(|t| {
                matches!(
                    t.state,
                    TaskState::Waiting {
                        on: WaitKind::Blocking,
                        ..
                    }
                )
            })
    });
    // Deadlines: a sleep's end, a wait's own, a scope's; none for the rest.
    match named(&d, "sleeper").unwrap().state {
        TaskState::Sleeping { until } => {
            assert!(
                until >= start + LONG && until <= Instant::now() + LONG,
                "{until:?}"
            )
        }
        ref s => panic!("{s:?}"),
    }
    assert_eq!(waiting_on(&d, "butex").unwrap().1, Some(butex_deadline));
    assert_eq!(waiting_on(&d, "channel").unwrap().1, Some(scope_deadline));
    for name in [
        "mutex",
        "condvar",
        "rwlock",
        "semaphore",
        "barrier",
        "once_cell",
        "join",
        "fd",
        "future",
    ] {
        assert_eq!(waiting_on(&d, name).unwrap().1, None, "{name}");
    }
    // Names, workers, ages; the unnamed target listed too.
    let sleeper = d.get(sleeper_id).unwrap();
    assert_eq!(sleeper.name.as_deref(), Some("sleeper"));
    assert!(sleeper.worker.is_some_and(|w| w < 2));
    assert!(sleeper.age <= start.elapsed() + Duration::from_millis(20));
    assert!(d.get(target_id).is_some_and(|t| t.name.is_none()));
    // Display says each.
    let text = d.to_string();
    for needle in [
        "sleeping, in",
        "waiting on Mutex",
        "waiting on Channel, deadline in",
        &format!("waiting on fd {fd} (readable)"),
        "\"sleeper\"",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }

    // Let everything go.
    drop(held);
    drop(written);
    butex.value().store(1, Ordering::Release);
    butex.wake_all();
    *cv.0.lock().unwrap() = true;
    cv.1.notify_all();
    semaphore.add_permits(1);
    let _ = barrier.wait_until(Instant::now());
    let _ = cell.set(1);
    tx.send(1).unwrap();
    release_blocking.store(true, Ordering::Release);
    for h in &handles {
        let _ = h.stop();
    }
    let _ = blocking.join();
    for h in handles {
        let _ = h.join();
    }
}

/// The running task, a ready one behind it, and one not started yet; a
/// finished task is absent.
#[test]
fn running_ready_and_finished() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let go = Arc::new(AtomicBool::new(false));
    let g = go.clone();
    let spinner = spawn_named(&rt, "spinner", move || {
        while !g.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
    });
    let behind = spawn_named(&rt, "behind", || ());
    let d = dump_until(&rt, "the spinner running", |d| {
        matches!(
            named(d, "spinner").map(|t| &t.state),
            Some(TaskState::Running)
        )
    });
    let b = d.get(behind.id()).expect("listed");
    assert_eq!(b.state, TaskState::Ready);
    assert_eq!(b.worker, None, "never run");
    assert_eq!(d.get(spinner.id()).unwrap().worker, Some(0));
    assert_eq!(
        d.get(spinner.id()).unwrap().backtrace,
        None,
        "a running task has none"
    );
    go.store(true, Ordering::Release);
    let (spinner_id, behind_id) = (spinner.id(), behind.id());
    spinner.join().unwrap();
    behind.join().unwrap();
    let d = rt.dump();
    assert!(
        d.get(spinner_id).is_none() && d.get(behind_id).is_none(),
        "{d}"
    );
}

/// A dump taken by a task of the runtime lists that task, running, and the
/// tasks of its own worker (whose walker runs while it waits).
#[test]
fn a_task_dumps_its_own_runtime() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let sleeper = spawn_named(&rt, "neighbour", || {
        let _ = spindle::sleep(LONG);
    });
    let id = sleeper.id();
    let handle = rt.handle();
    let d = rt.block_on(move || {
        let me = spindle::current().unwrap();
        loop {
            let d = handle.dump();
            if d.get(id)
                .is_some_and(|t| matches!(t.state, TaskState::Sleeping { .. }))
            {
                assert_eq!(d.get(me).unwrap().state, TaskState::Running);
                return d;
            }
            spindle::yield_now();
        }
    });
    // In the frame-pointer build (see the file's docs) its own worker
    // walked the neighbour's stack while the dumping task waited.
    let expect = std::env::var_os("SPINDLE_EXPECT_BACKTRACES").is_some();
    assert_eq!(d.has_backtraces(), expect, "{d}");
    let neighbour = d.get(id).unwrap().backtrace.as_deref();
    if expect {
        assert!(neighbour.is_some_and(|bt| bt.contains("sleep")), "{d}");
    } else {
        assert_eq!(neighbour, None);
    }
    sleeper.stop().unwrap();
    let _ = sleeper.join();
}

/// Every one of 100 000 sleepers is listed.
#[test]
fn a_dump_of_100_000_sleepers_lists_them_all() {
    const N: usize = 100_000;
    let rt = Runtime::builder().workers(2).build().unwrap();
    let handles: Vec<_> = (0..N)
        .map(|_| {
            rt.spawn(|| {
                let _ = spindle::sleep(LONG);
            })
        })
        .collect();
    let ids: Vec<TaskId> = handles.iter().map(|h| h.id()).collect();
    let d = dump_until(&rt, "every sleeper asleep", |d| {
        d.iter()
            .filter(|t| matches!(t.state, TaskState::Sleeping { .. }))
            .count()
            == N
    });
    assert_eq!(d.len(), N, "only the sleepers live");
    for id in &ids {
        assert!(d.get(*id).is_some(), "{id} missing");
    }
    drop(handles); // detached: the runtime's drop cancels them
}

#[inline(never)]
fn parked_in_here() {
    let slept = spindle::sleep(LONG);
    // Used after the call: no tail call, so this frame stays on the stack.
    std::hint::black_box(slept.is_ok());
}

/// Where the build has frame pointers, a backtrace names the function the
/// task sleeps in (see the file's docs for which builds).
#[test]
fn a_backtrace_names_where_the_task_waits() {
    let expect = std::env::var_os("SPINDLE_EXPECT_BACKTRACES").is_some();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let h = spawn_named(&rt, "parked", parked_in_here);
    let d = dump_until(&rt, "the task asleep", |d| {
        matches!(
            named(d, "parked").map(|t| &t.state),
            Some(TaskState::Sleeping { .. })
        )
    });
    let t = named(&d, "parked").unwrap();
    if expect {
        assert!(d.has_backtraces(), "expected backtraces:\n{d}");
    }
    if d.has_backtraces() {
        let bt = t
            .backtrace
            .as_deref()
            .expect("a suspended task's backtrace");
        assert!(bt.contains("parked_in_here"), "{bt}");
        assert!(d.to_string().contains("parked_in_here"));
    } else {
        assert_eq!(t.backtrace, None);
        assert!(d.to_string().contains("force-frame-pointers"));
    }
    h.stop().unwrap();
    let _ = h.join();
}

/// `Builder::dump_on_signal`: a child process (this test binary again)
/// raises the signal; its stderr has the dump, which the parent reads
/// before it lets the child end (by closing its stdin). A signal that
/// cannot be waited for is refused at build.
#[test]
fn a_signal_prints_a_dump() {
    if std::env::var_os("SPINDLE_DUMP_CHILD").is_some() {
        let rt = Runtime::builder()
            .workers(1)
            .dump_on_signal(libc::SIGUSR1)
            .build()
            .unwrap();
        let h = spawn_named(&rt, "asleep-in-child", || {
            let _ = spindle::sleep(LONG);
        });
        dump_until(&rt, "the child's task asleep", |d| {
            matches!(
                named(d, "asleep-in-child").map(|t| &t.state),
                Some(TaskState::Sleeping { .. })
            )
        });
        // SAFETY: raise(3) has no memory-safety preconditions.
        unsafe { libc::raise(libc::SIGUSR1) };
        // Until the parent has read the dump.
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        h.stop().unwrap();
        return;
    }
    let err = Runtime::builder()
        .dump_on_signal(libc::SIGKILL)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_signal_prints_a_dump",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SPINDLE_DUMP_CHILD", "1")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read the child's stderr on a thread, line by line, until the task's
    // line of the dump (or the end): then close its stdin.
    let err = child.stderr.take().unwrap();
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(err)) {
            let line = line.unwrap_or_default();
            if line.contains("\"asleep-in-child\"") {
                let _ = seen_tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let seen = seen_rx.recv_timeout(spindle_testkit::HANG).is_ok();
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    assert!(seen, "no dump within {:?}: {stderr}", spindle_testkit::HANG);
    assert!(status.success(), "child failed: {stderr}");
    assert!(stderr.contains("spindle task dump: "), "{stderr}");
    assert!(stderr.contains("\"asleep-in-child\""), "{stderr}");
}
