//! Waiting for Unix signals: [`ctrl_c`] and [`Signals`], whose waits
//! suspend only the calling task (a plain thread blocks).
//!
//! A [`Signals`] registers two actions per signal in the process's
//! handler, through the `signal-hook` crate: the first sets the signal's
//! pending flag in this `Signals`, the second writes a byte to a
//! non-blocking Unix socket pair that the `Signals` owns. [`Signals::recv`]
//! drains the pair's read end, then takes a pending flag; when none is
//! set it waits for the read end's readiness as a socket does
//! (`io/source.rs`), so the wait ends with the task's deadline scope,
//! `interrupt` and `stop`. Draining before looking at the flags loses no
//! delivery: a flag set after the look comes with a byte written after
//! the drain, which makes the read end ready again.
//!
//! Why not `signalfd`: it sees a signal only while the signal is blocked
//! in every thread of the process, which a library cannot promise
//! (threads it did not start, masks that children inherit). A handler
//! needs nothing of the sort.
//!
//! # What a program sees
//!
//! - Every `Signals` of a signal sees every delivery: several in one
//!   program, one per task, do not take signals from each other.
//! - Deliveries of one signal that come before a `recv` takes the first
//!   merge into one, as the kernel's own pending signals do. A delivery
//!   that comes while no `Signals` holds its signal is seen by none.
//! - **The default action is gone.** The first `Signals` (or [`ctrl_c`])
//!   of a signal installs signal-hook's handler for it, which stays for
//!   the life of the process: it calls a handler installed before it, but
//!   never the default action. From then on, a signal whose default
//!   terminates the process (`SIGINT`, `SIGTERM`, `SIGHUP`, ...) does
//!   nothing but wake its waiters, even once every `Signals` of it has
//!   dropped. A program that should still end on it ends itself.
//! - `SIGKILL` and `SIGSTOP` cannot be caught, and a handler for `SIGSEGV`,
//!   `SIGBUS`, `SIGILL` or `SIGFPE` would return into the faulting
//!   instruction (spindle's own stack-overflow report handles the first
//!   two): [`Signals::new`] refuses them, and numbers that name no signal,
//!   with `ErrorKind::InvalidInput`.
//!
//! # What it costs
//!
//! Making a `Signals`: a socket pair, one duplicate of its write end per
//! signal, and two registrations per signal in signal-hook's table (each
//! copies the table under its lock; the first for a signal also calls
//! `sigaction`). Dropping it undoes all of that. A wait is a socket's: a
//! read that finds nothing, then a wait on the read end, registered in the
//! waiting worker's poller at its first wait; a delivery costs the handler
//! a store and a `send(2)`, and the task is woken through the poller as for
//! any socket. No thread of its own, and nothing at all while no signal
//! comes. [`ctrl_c`] pays the set-up on each call.
//!
//! ```
//! fn send_sync<T: Send + Sync>() {}
//! send_sync::<spindle::signal::Signals>();
//! ```

use crate::driver::Direction;
use crate::io::source::IoSource;
use crate::loom::signal_handler::{AtomicBool, Ordering::SeqCst};
use crate::loom::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use libc::c_int;
use signal_hook::SigId;
use std::fmt;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

/// Waits for `SIGINT` (Ctrl-C at a terminal): suspends the calling task
/// only, or blocks the calling thread.
///
/// Each call registers for `SIGINT` afresh and unregisters when it
/// returns: a `SIGINT` that comes between two calls is missed. A loop that
/// handles more than one keeps a `Signals::new(&[libc::SIGINT])` instead.
///
/// After the first call, `SIGINT` no longer terminates the process, even
/// once this has returned (see the module docs): a program that should end
/// on Ctrl-C ends itself, with `std::process::exit(130)` say, after its
/// own clean-up.
///
/// ```no_run
/// let rt = spindle::Runtime::builder().build().unwrap();
/// rt.block_on(|| {
///     let server = spindle::spawn(|| { /* serve */ });
///     spindle::signal::ctrl_c().unwrap();
///     let _ = server.stop(); // its waits fail from now on
/// });
/// std::process::exit(130);
/// ```
///
/// # Errors
///
/// Those of [`Signals::new`] and [`Signals::recv`]: a wait ended by the
/// task's deadline scope is `ErrorKind::TimedOut` whose inner error is
/// [`WaitError::DeadlineExceeded`](crate::WaitError::DeadlineExceeded),
/// by `interrupt` `Interrupted`, by `stop` `Other`.
pub fn ctrl_c() -> io::Result<()> {
    Signals::new(&[libc::SIGINT])?.recv().map(drop)
}

/// A set of Unix signals to wait for; see the module docs.
///
/// Several tasks may wait on one `Signals` at once: each delivery is taken
/// by one of them. Dropping it unregisters its actions and closes its fds.
///
/// ```
/// use spindle::signal::Signals;
/// let rt = spindle::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     let signals = Signals::new(&[libc::SIGUSR1, libc::SIGUSR2]).unwrap();
///     // SAFETY: raise(3) has no memory-safety preconditions.
///     unsafe { libc::raise(libc::SIGUSR2) };
///     assert_eq!(signals.recv().unwrap(), libc::SIGUSR2);
///     assert_eq!(signals.try_recv(), None);
/// });
/// ```
pub struct Signals {
    /// The read end of the socket pair that the handler writes a byte to
    /// on each delivery; its write end is owned by the registrations.
    wake: IoSource<UnixStream>,
    /// The signals, in the order given (without repeats), each with the
    /// flag that the handler sets on a delivery and `recv` takes.
    pending: Vec<(c_int, Arc<AtomicBool>)>,
    /// signal-hook's registrations: per signal its flag's, then its
    /// byte's. signal-hook runs a signal's actions in the order they were
    /// registered, so a delivery's flag is set before its byte is written.
    registrations: Vec<SigId>,
    /// Where the next look at `pending` starts: one past the signal last
    /// taken, so that one signal coming over and over hides no other.
    next: AtomicUsize,
}

impl fmt::Debug for Signals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let signals: Vec<c_int> = self.pending.iter().map(|(sig, _)| *sig).collect();
        f.debug_struct("Signals")
            .field("signals", &signals)
            .field("fd", &self.wake.get_ref().as_raw_fd())
            .finish()
    }
}

impl Signals {
    /// Registers for each of `signals`: from now on each delivery of one
    /// is kept for [`recv`](Self::recv) (and the signal's default action
    /// no longer happens: see the module docs).
    ///
    /// # Errors
    ///
    /// `ErrorKind::InvalidInput` for no signals, a number that names no
    /// signal, or one that cannot be waited for: `SIGKILL`, `SIGSTOP`,
    /// `SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`. An fd that cannot be made
    /// (`EMFILE`) is that error. On an error nothing stays registered.
    pub fn new(signals: &[c_int]) -> io::Result<Signals> {
        if signals.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no signals to wait for",
            ));
        }
        if let Some(&sig) = signals.iter().find(|&&sig| !can_wait_for(sig)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("signal {sig} cannot be waited for"),
            ));
        }
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        let mut this = Signals {
            wake: IoSource::new(read),
            pending: Vec::with_capacity(signals.len()),
            registrations: Vec::with_capacity(2 * signals.len()),
            next: AtomicUsize::new(0),
        };
        // On an error `this` drops, which unregisters what was registered.
        for &sig in signals {
            if this.pending.iter().any(|(s, _)| *s == sig) {
                continue;
            }
            let flag = Arc::new(AtomicBool::new(false));
            this.registrations
                .push(signal_hook::flag::register(sig, Arc::clone(&flag))?);
            // The registration owns (and closes) its duplicate of the
            // write end; signal-hook writes to it with MSG_DONTWAIT.
            this.registrations
                .push(signal_hook::low_level::pipe::register(
                    sig,
                    write.try_clone()?,
                )?);
            this.pending.push((sig, flag));
        }
        Ok(this)
    }

    /// Waits for the next of the signals and returns its number: suspends
    /// the calling task only, or blocks the calling thread. A signal that
    /// came since the last `recv` took one is returned at once; several
    /// that came are returned in turn.
    ///
    /// # Errors
    ///
    /// A wait's end, as for a socket (`docs/io.md`): the task's deadline
    /// scope passed: `ErrorKind::TimedOut`, whose inner error is
    /// [`WaitError::DeadlineExceeded`](crate::WaitError::DeadlineExceeded);
    /// `interrupt`: `Interrupted`; `stop`: `Other` (`WaitError::Stopped`).
    /// A wait so ended takes no signal: one that came meanwhile is there
    /// for the next `recv`.
    pub fn recv(&self) -> io::Result<c_int> {
        self.wake.do_io(Direction::Read, |read| {
            let closed = drain(read)?;
            match self.try_recv() {
                Some(sig) => Ok(sig),
                // Only an unregistration by somebody else (signal-hook's
                // deprecated `unregister_signal`) closes the write ends.
                None if closed => Err(io::Error::other(
                    "the signal's registration was removed by another library",
                )),
                None => Err(io::ErrorKind::WouldBlock.into()),
            }
        })
    }

    /// The fd that becomes readable when one of the signals comes (for a
    /// thread that polls it beside others: `dump::DumpOnSignal`).
    pub(crate) fn wake_fd(&self) -> std::os::fd::RawFd {
        self.wake.get_ref().as_raw_fd()
    }

    /// After [`wake_fd`](Self::wake_fd) polled readable: reads its
    /// wake-up bytes, then takes the next signal that came, if any.
    pub(crate) fn take_after_wake(&self) -> io::Result<Option<c_int>> {
        if drain(self.wake.get_ref())? {
            return Err(io::Error::other(
                "the signal's registration was removed by another library",
            ));
        }
        Ok(self.try_recv())
    }

    /// The next of the signals that came since the last one was taken, if
    /// any: never waits.
    pub fn try_recv(&self) -> Option<c_int> {
        let n = self.pending.len();
        let start = self.next.load(Relaxed);
        (0..n).map(|i| (start + i) % n).find_map(|i| {
            let (sig, flag) = &self.pending[i];
            // SeqCst as the handler's store (signal-hook's `flag`).
            flag.swap(false, SeqCst).then(|| {
                self.next.store((i + 1) % n, Relaxed);
                *sig
            })
        })
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        // signal-hook drops an action (closing its fd) once no handler
        // runs it any more; then `wake` closes the read end.
        for id in self.registrations.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Whether `sig` names a signal that a `Signals` may wait for.
fn can_wait_for(sig: c_int) -> bool {
    const FAULTS: &[c_int] = &[libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];
    (1..=libc::SIGRTMAX()).contains(&sig)
        && !FAULTS.contains(&sig)
        && !signal_hook::consts::FORBIDDEN.contains(&sig)
}

/// Reads the wake-up bytes until none is left; whether the write ends
/// are all closed.
fn drain(mut read: &UnixStream) -> io::Result<bool> {
    let mut buf = [0u8; 64];
    loop {
        match read.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
