//! What the OS refuses a runtime fails its build with the OS's error; it
//! does not panic, nor wait to fail at the first spawn: a thread, whichever
//! it is (the shared timer thread, started by the first build, or a
//! worker), or a task stack of the size asked for. The refusal is staged in
//! a child process (this test binary, re-run with an environment variable)
//! whose address space is capped just above what it already uses, so that
//! no more thread stacks (2 MiB each) can be mapped, or no large task
//! stack.

mod common;

use std::time::Duration;

const CHILD: &str = "SPINDLE_BUILD_REFUSED_CHILD";
/// What the child prints when `build` returned the error.
const REFUSED: &str = "child: build refused: ";
/// What the child prints when a build after the cap was lifted worked.
const RECOVERED: &str = "child: built once the cap was lifted";

/// Room for small allocations, none for a thread: the timer thread is
/// refused.
#[test]
fn a_refused_timer_thread_fails_the_build() {
    refused_build("a_refused_timer_thread_fails_the_build", 512, 0);
}

/// Room for one thread stack: the build starts the timer thread first, and
/// its worker is refused. (Before e3aff9b the worker started first, and the
/// refused timer thread was a panic.)
#[test]
fn a_refusal_after_the_timer_started_fails_the_build() {
    refused_build(
        "a_refusal_after_the_timer_started_fails_the_build",
        2048 + 512,
        0,
    );
}

/// Room for the threads (the timer's and one worker), none for a 512 MiB
/// task stack: the build fails, not every spawn after it.
#[test]
fn a_stack_size_the_os_cannot_map_fails_the_build() {
    refused_build(
        "a_stack_size_the_os_cannot_map_fails_the_build",
        64 * 1024,
        512 << 20,
    );
}

/// In the child: caps the address space `margin_kib` above its size, builds
/// a runtime (with tasks of `stack_size` bytes, if not 0), which must fail,
/// lifts the cap and builds again, and a task's timed sleep must then work.
/// In the parent: runs `test` in a child and checks what it said.
fn refused_build(test: &str, margin_kib: u64, stack_size: usize) {
    if std::env::var_os(CHILD).is_some() {
        let builder = || match stack_size {
            0 => spindle::Runtime::builder().workers(1),
            size => spindle::Runtime::builder().workers(1).stack_size(size),
        };
        cap_address_space(Some(margin_kib));
        let built = builder().build();
        let e = built.expect_err("a thread was refused: the build must fail");
        if stack_size > 0 {
            // The stack was refused, not a thread.
            assert!(e.to_string().contains("task stack"), "{e}");
        }
        say(&format!("{REFUSED}{e}"));
        cap_address_space(None);
        let rt = builder().build().unwrap();
        let slept = rt.spawn(|| spindle::sleep(Duration::from_millis(1)));
        assert_eq!(slept.join().expect("the sleeper does not panic"), Ok(()));
        say(RECOVERED);
        return;
    }
    let out = common::run_in_child(test, CHILD);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child failed: {stderr}");
    assert!(stderr.contains(REFUSED), "the build did not fail: {stderr}");
    assert!(
        stderr.contains(RECOVERED),
        "no build after the cap: {stderr}"
    );
}

/// Tells the parent, on stderr, in one write (so that the line is whole).
fn say(what: &str) {
    let line = format!("{what}\n");
    std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes()).unwrap();
}

/// Caps the address space at `margin_kib` above its current size, or lifts
/// the cap (`None`).
fn cap_address_space(margin_kib: Option<u64>) {
    let cap = margin_kib.map_or(libc::RLIM_INFINITY, |margin| {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmSize in /proc/self/status");
        (kib + margin) * 1024
    });
    let limit = libc::rlimit {
        rlim_cur: cap,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass; it touches no other memory.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
}
