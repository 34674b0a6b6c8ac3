//! Leak checks. In a test binary of their own: the task table is
//! process-wide, so other tests running beside them would grow it.

mod common;

use common::rt;

#[test]
fn no_stack_or_slot_leaks_after_a_million_spawn_joins() {
    let rt = rt(2);
    rt.block_on(|| {
        for _ in 0..10_000 {
            spindle::spawn(|| ()).join().unwrap();
        }
    });
    let slots_before = rt.stats().task_slots;
    rt.block_on(|| {
        for _ in 0..1_000_000 {
            spindle::spawn(|| ()).join().unwrap();
        }
    });
    let s = rt.stats();
    // The table grows only by what was live at once, not by the count.
    assert!(
        s.task_slots <= slots_before + 4096,
        "task table grew from {slots_before} to {}",
        s.task_slots
    );
    // Stacks are reused, not piled up: the shared pool stays within the
    // quarter of max_map_count it aims for (workers keep 256 more each).
    let max_map_count: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        s.pooled_stacks <= max_map_count / 4,
        "{} pooled",
        s.pooled_stacks
    );
    assert!(s.finished >= 1_000_000);
}
