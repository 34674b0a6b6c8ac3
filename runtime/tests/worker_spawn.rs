//! A worker thread the OS refuses to create: `set_workers` says so with
//! `SetWorkersError::Spawn`, and the runtime goes on with the workers it
//! has. The refusal is provoked with an address-space limit, which holds
//! for the whole process: so it runs in a child process (this same test
//! binary, re-run with an environment variable).

mod common;

const CHILD: &str = "SPINDLE_WORKER_SPAWN_CHILD";
/// What the child prints once every check passed.
const CHECKED: &str = "child: every check passed";

#[test]
fn a_refused_worker_thread_is_reported_and_the_runtime_goes_on() {
    if std::env::var_os(CHILD).is_some() {
        refuse_a_worker_thread();
        return;
    }
    let out = common::run_in_child(
        "a_refused_worker_thread_is_reported_and_the_runtime_goes_on",
        CHILD,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(CHECKED),
        "the child failed.\nstdout: {stdout}\nstderr: {stderr}"
    );
}

fn refuse_a_worker_thread() {
    let rt = spindle::Runtime::builder().workers(1).build().unwrap();
    assert_eq!(rt.spawn(|| 1).join().unwrap(), 1);

    // Leave 256 KiB of address space: too little for a new thread's stack
    // (2 MiB by default), enough for the few small allocations around it.
    let limit = virtual_size() + (256 << 10);
    let before = set_address_space_limit(limit as libc::rlim_t);
    let refused = rt.set_workers(2);
    set_address_space_limit(before);

    match refused {
        Err(e @ spindle::SetWorkersError::Spawn { .. }) => println!("refused: {e}"),
        other => panic!("expected a spawn error, got {other:?}"),
    }
    assert_eq!(rt.workers(), 1, "the refused worker is not counted");
    assert_eq!(rt.spawn(|| 2).join().unwrap(), 2, "the runtime still runs");
    rt.set_workers(2)
        .expect("with the limit lifted, the worker starts");
    assert_eq!(rt.workers(), 2);
    assert_eq!(rt.spawn(|| 3).join().unwrap(), 3);
    rt.shutdown();
    println!("{CHECKED}");
}

/// This process's virtual size, in bytes (`VmSize` of /proc/self/status).
fn virtual_size() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .expect("Linux reports VmSize");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmSize is a number of kB");
    kib << 10
}

/// Sets the soft address-space limit to `soft`; returns the previous one.
fn set_address_space_limit(soft: libc::rlim_t) -> libc::rlim_t {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid rlimit for the kernel to fill in.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) }, 0);
    let before = r.rlim_cur;
    r.rlim_cur = soft.min(r.rlim_max);
    // SAFETY: as above; a soft limit at most the hard one is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &r) }, 0);
    before
}
