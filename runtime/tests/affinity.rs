//! Worker threads' CPUs: a pinned worker runs on one CPU of its runtime's;
//! a runtime built from a task on a pinned worker gets the CPUs of that
//! task's runtime, not the one CPU of the worker (whose mask a new thread
//! would inherit).

use spindle::Runtime;

/// The CPUs the calling thread may run on.
fn my_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is a plain bit array, valid when zeroed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size we pass.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: the index is below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// The CPUs of the test process, if more than one: on one CPU the tests
/// have nothing to tell apart, and say so.
fn several_cpus() -> Option<Vec<usize>> {
    let cpus = my_cpus();
    if cpus.len() < 2 {
        eprintln!("one CPU: nothing to tell apart, skipped");
        return None;
    }
    Some(cpus)
}

#[test]
fn pinned_workers_run_on_one_cpu_of_the_process() {
    let Some(process) = several_cpus() else {
        return;
    };
    let rt = Runtime::builder()
        .workers(2)
        .pin_workers(true)
        .build()
        .unwrap();
    let seen: Vec<Vec<usize>> = (0..64)
        .map(|_| rt.spawn(my_cpus))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    for cpus in seen {
        assert_eq!(cpus.len(), 1, "a pinned worker runs on one CPU: {cpus:?}");
        assert!(process.contains(&cpus[0]), "{cpus:?} not in {process:?}");
    }
}

#[test]
fn a_runtime_built_on_a_pinned_worker_gets_its_runtimes_cpus() {
    let Some(process) = several_cpus() else {
        return;
    };
    let parallelism = std::thread::available_parallelism().unwrap().get();
    let pinned = Runtime::builder()
        .workers(1)
        .pin_workers(true)
        .build()
        .unwrap();
    let (workers, cpus) = pinned
        .spawn(|| {
            assert_eq!(my_cpus().len(), 1, "this task's worker is pinned");
            let inner = Runtime::builder().build().unwrap();
            let seen = (inner.workers(), inner.spawn(my_cpus).join().unwrap());
            // Dropped from a plain thread: it then waits for its workers.
            std::thread::spawn(move || drop(inner)).join().unwrap();
            seen
        })
        .join()
        .unwrap();
    assert_eq!(
        workers,
        parallelism.min(256),
        "one worker per CPU of the outer runtime"
    );
    assert_eq!(cpus, process, "an unpinned worker may use every CPU");
}
