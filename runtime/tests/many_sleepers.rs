//! 100 000 sleeping tasks, in a binary of its own (it needs the machine).

mod common;

use spindle::Runtime;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// bthread: 100 000 tasks sleeping 1 s all wake, each once, soon after 1 s.
///
/// Every task stack has a guard page. Where the kernel has no guard regions
/// (before Linux 6.13) that costs 2 memory mappings per stack, and this
/// needs `vm.max_map_count` above 200 000 (`.ci/run` raises it; the kernel's
/// default is 65 530).
#[test]
fn a_hundred_thousand_sleepers_all_wake_once() {
    const N: usize = 100_000;
    if !spindle::stack_guard_regions() {
        let limit = common::max_map_count();
        assert!(
            limit >= 2 * N + 10_000,
            "vm.max_map_count is {limit} and this kernel has no guard regions: \
             run `sysctl -w vm.max_map_count=262144` (as .ci/run does)"
        );
    }
    let rt = Runtime::builder()
        .workers(2)
        .stack_size(16 * 1024)
        .build()
        .unwrap();
    let woken = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let hs: Vec<_> = (0..N)
        .map(|_| {
            let w = woken.clone();
            rt.spawn(move || {
                spindle::sleep(Duration::from_secs(1)).unwrap();
                w.fetch_add(1, Ordering::Relaxed);
                Instant::now()
            })
        })
        .collect();
    let mut last = start;
    for h in hs {
        let at = h.join().unwrap();
        assert!(at >= start + Duration::from_secs(1), "woke early");
        last = last.max(at);
    }
    assert_eq!(woken.load(Ordering::Relaxed), N);
    // Generous: the 1.2 s is a benchmark goal on an idle machine.
    assert!(
        last - start < Duration::from_secs(10),
        "took {:?}",
        last - start
    );
}
