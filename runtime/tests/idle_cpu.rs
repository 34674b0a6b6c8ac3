//! An idle runtime uses no CPU to speak of: its workers park, and nothing
//! wakes them but the stall watchdog's rare samples. In a binary of its own:
//! it reads the process's CPU time.

use std::time::{Duration, Instant};

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given, which is ours.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Two seconds of a built runtime with nothing to do, after a burst of
/// sleeping tasks has come and gone, cost under 5 % of a core (about
/// 0.03 % is what it takes; a worker that spun would take 100 %).
#[test]
fn an_idle_runtime_parks() {
    let rt = spindle::Runtime::builder().workers(2).build().unwrap();
    let hs: Vec<_> = (0..1000)
        .map(|_| rt.spawn(|| spindle::sleep(Duration::from_millis(5)).unwrap()))
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    // Let the pools' housekeeping and the workers' spins settle.
    std::thread::sleep(Duration::from_millis(200));
    let (cpu0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (cpu, wall) = (cpu_time() - cpu0, t0.elapsed());
    let cores = cpu.as_secs_f64() / wall.as_secs_f64();
    assert!(
        cores < 0.05,
        "an idle runtime used {cores:.3} cores ({cpu:?} in {wall:?})"
    );
}
