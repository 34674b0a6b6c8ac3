//! The stack pool gives its idle stacks back when a new mapping fails.
//!
//! Alone in its binary: it lowers the process's address-space limit.

use spindle::Runtime;

const MIB: u64 = 1 << 20;

fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmSize in /proc/self/status");
    kib * 1024
}

fn set_address_space_limit(bytes: u64) {
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct we pass and changes this process's
    // soft limit only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
}

/// With the address space nearly used up by idle pooled stacks, a task that
/// needs a stack of its own size still gets one: the failed mapping makes
/// the pool unmap its idle stacks, and the spawn tries again.
#[test]
fn a_failed_mapping_trims_the_pool_and_retries() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    // 2 000 tasks at once leave ~1 700 idle 256 KiB stacks in the shared pool
    // (the worker keeps a few hundred for itself): about 430 MiB.
    rt.block_on(|| {
        let hs: Vec<_> = (0..2000).map(|_| spindle::spawn(|| ())).collect();
        for h in hs {
            h.join().unwrap();
        }
    });
    let r = rt.block_on(|| {
        set_address_space_limit(vm_size() + 64 * MIB);
        let big = spindle::task::Builder::new()
            .stack_size(256 * MIB as usize)
            .spawn(|| 7);
        set_address_space_limit(libc::RLIM_INFINITY);
        big.map(|h| h.join().unwrap())
    });
    assert_eq!(
        r.expect("the pool's idle stacks were unmapped to make room"),
        7
    );
}
