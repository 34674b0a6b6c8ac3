//! Naming the task that overflowed its stack.
//!
//! Every task stack has a guard page below its limit (`stack::TaskStack`),
//! so an overflow faults. Without help the process would die of a bare SIGSEGV (or
//! Rust's "thread has overflowed its stack", naming the worker, not the
//! task). Each worker records which task it is running in a thread-local:
//! one pointer per switch, described ([`Describe`], the task layer's) only
//! when a fault comes. A SIGSEGV/SIGBUS handler, running on the thread's
//! alternate signal stack, checks whether the fault address lies in that
//! task's guard page. If so it writes which task overflowed, by id and by
//! the name given at spawn, and aborts; otherwise it hands the signal to the
//! handler that was installed before (std's, or the default action).
//!
//! The handler is async-signal-safe: it reads `const`-initialised
//! thread-locals and the running task's fields (plain memory, unchanged
//! while the task runs), formats into a stack buffer, and calls only
//! `write`, `abort`, `signal` and `raise` (saving and restoring `errno`).

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::Once;

/// What the handler needs to know about the running task.
#[derive(Clone, Copy)]
pub(crate) struct Running {
    /// The guard page: `[guard_lo, guard_hi)`.
    pub(crate) guard_lo: usize,
    pub(crate) guard_hi: usize,
    pub(crate) id: crate::id::TaskId,
    pub(crate) stack_size: usize,
    /// The task's name, `(pointer, length)` of its UTF-8 bytes, if it has
    /// one.
    pub(crate) name: Option<(*const u8, usize)>,
}

/// Describes the task that [`set_running`] recorded, for the handler.
///
/// # Safety
/// Called with a pointer `set_running` recorded on this thread, while that
/// task runs or unwinds here; it must only read memory, which that task's
/// run does not change (it is async-signal-safe).
pub(crate) type Describe = unsafe fn(*const ()) -> Running;

thread_local! {
    /// The task this thread runs or unwinds, null between tasks.
    static RUNNING: Cell<*const ()> = const { Cell::new(std::ptr::null()) };
    /// How to describe it (set by [`install`]).
    static DESCRIBE: Cell<Option<Describe>> = const { Cell::new(None) };
}

/// Records the task this worker is about to run or unwind (null when it is
/// done with it).
#[inline]
pub(crate) fn set_running(task: *const ()) {
    RUNNING.with(|c| c.set(task));
}

static INSTALL: Once = Once::new();
static mut PREVIOUS_SEGV: MaybeUninit<libc::sigaction> = MaybeUninit::uninit();
static mut PREVIOUS_BUS: MaybeUninit<libc::sigaction> = MaybeUninit::uninit();

/// Installs the handler once per process, and makes sure the calling worker
/// thread has an alternate signal stack to run it on; `describe` tells the
/// handler about the tasks this thread records.
pub(crate) fn install(describe: Describe) {
    DESCRIBE.with(|d| d.set(Some(describe)));
    INSTALL.call_once(|| {
        // SAFETY: sigaction with a valid handler and flags. The previous
        // actions are read and stored first, and only then is the handler
        // installed: a fault on another thread in between must not find
        // them unwritten (installing and reading the old action in one call
        // installs first).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            for (sig, previous) in [
                (libc::SIGSEGV, &raw mut PREVIOUS_SEGV),
                (libc::SIGBUS, &raw mut PREVIOUS_BUS),
            ] {
                libc::sigaction(sig, std::ptr::null(), previous.cast::<libc::sigaction>());
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
    ensure_altstack();
}

/// Std gives the threads it spawns an alternate signal stack; make sure.
fn ensure_altstack() {
    const SIZE: usize = 64 * 1024;
    // SAFETY: querying the current alternate stack has no preconditions.
    let mut cur: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cur` is a valid out-pointer.
    unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) };
    if cur.ss_flags & libc::SS_DISABLE == 0 {
        return;
    }
    // Leaked on purpose: it must outlive every signal on this thread, and a
    // worker thread lives as long as its runtime.
    let mem = Box::leak(vec![0u8; SIZE].into_boxed_slice());
    let st = libc::stack_t {
        ss_sp: mem.as_mut_ptr().cast(),
        ss_flags: 0,
        ss_size: SIZE,
    };
    // SAFETY: `st` describes live, writable memory that is never freed.
    unsafe { libc::sigaltstack(&st, std::ptr::null_mut()) };
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is this thread's; what we call below may change it, and
    // the interrupted code must find it as it was.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // A fault (si_code > 0) in the running task's guard page; a SIGSEGV
    // sent by kill(2) or raise(3) (si_code <= 0) carries no address.
    if code > 0 {
        let task = RUNNING.with(|c| c.get());
        if let (false, Some(describe)) = (task.is_null(), DESCRIBE.with(|d| d.get())) {
            // SAFETY: `task` was recorded on this thread, which runs or
            // unwinds it now (the fault is its); `describe` only reads.
            let r = unsafe { describe(task) };
            if (r.guard_lo..r.guard_hi).contains(&addr) {
                report(r);
            }
        }
    }
    // Not a task's guard page: hand over to whoever was there before.
    // SAFETY: the previous actions were written by `install` before this
    // handler could run; we only read them.
    let prev = unsafe {
        if sig == libc::SIGSEGV {
            (&raw const PREVIOUS_SEGV).read().assume_init()
        } else {
            (&raw const PREVIOUS_BUS).read().assume_init()
        }
    };
    if prev.sa_sigaction == libc::SIG_DFL || prev.sa_sigaction == libc::SIG_IGN {
        if code > 0 {
            // A fault: restore the default and return. The fault repeats
            // and kills us with the right signal (the kernel does not let a
            // fault be ignored).
            // SAFETY: resetting a signal to its default action is
            // async-signal-safe.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        } else if prev.sa_sigaction == libc::SIG_DFL {
            // A sent signal does not repeat: send it again, to be delivered
            // to the default action once we return.
            // SAFETY: as above; raise(3) is async-signal-safe too.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        }
        // A sent signal that was ignored before us is ignored still.
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous handler was installed with this signature.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Writes "spindle: task#<slot>.<version> "<name>" overflowed its <n>-byte
/// stack; aborting" (the name if it has one, at most 96 bytes of it) and
/// aborts, without allocating.
fn report(r: Running) -> ! {
    let mut buf = [0u8; 288];
    let mut len = 0;
    let mut put = |s: &[u8]| {
        let n = s.len().min(buf.len() - len);
        buf[len..len + n].copy_from_slice(&s[..n]);
        len += n;
    };
    // As TaskId's Display: pure bit arithmetic, safe here.
    put(b"\nspindle: task#");
    put(decimal(u64::from(r.id.slot()), &mut [0; 20]));
    put(b".");
    put(decimal(r.id.version(), &mut [0; 20]));
    if let Some((ptr, len)) = r.name {
        // SAFETY: the name's bytes, alive while its task runs (see
        // `Describe`).
        let name = unsafe { std::slice::from_raw_parts(ptr, len) };
        put(b" \"");
        put(&name[..name.len().min(96)]);
        put(b"\"");
    }
    put(b" overflowed its ");
    put(decimal(r.stack_size as u64, &mut [0; 20]));
    put(b"-byte stack; aborting (give it more with task::Builder::stack_size)\n");
    // SAFETY: write(2) and abort(3) are async-signal-safe.
    unsafe {
        libc::write(2, buf.as_ptr().cast(), len);
        libc::abort()
    }
}

/// `v` in decimal, written into the end of `buf`.
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}
