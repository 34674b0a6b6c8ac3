//! A task's type-erased slots: its pending body and its result.
//!
//! Both are an [`Inline`]: a value whose type only its owner knows, kept in
//! a few words of the meta and dropped through a function pointer chosen
//! when it was stored. Spawning and finishing a task thus allocate nothing
//! for closures and results that fit.

use super::TaskRef;
use std::mem::{self, MaybeUninit};
use std::ptr;

/// A value whose type only its owner knows, kept inline in `N` words; it
/// remembers how to drop itself. Both of a task's type-erased slots (its
/// pending body and its result) are one of these.
pub(crate) struct Inline<const N: usize> {
    buf: MaybeUninit<[usize; N]>,
    /// How to drop the value held; `None` when empty.
    drop: Option<unsafe fn(*mut u8)>,
}

impl<const N: usize> Inline<N> {
    pub(crate) const EMPTY: Self = Inline {
        buf: MaybeUninit::uninit(),
        drop: None,
    };

    /// Whether a `V` fits.
    pub(crate) fn fits<V>() -> bool {
        mem::size_of::<V>() <= mem::size_of::<[usize; N]>()
            && mem::align_of::<V>() <= mem::align_of::<usize>()
    }

    /// Whether a value is held.
    pub(crate) fn is_some(&self) -> bool {
        self.drop.is_some()
    }

    /// Stores `value`, which must fit, in an empty slot.
    pub(crate) fn put<V>(&mut self, value: V) {
        assert!(Self::fits::<V>());
        debug_assert!(self.drop.is_none());
        unsafe fn drop_value<V>(p: *mut u8) {
            // SAFETY: `p` holds a `V` written by `put` and not taken.
            unsafe { ptr::drop_in_place(p.cast::<V>()) }
        }
        // SAFETY: `V` fits the buffer's size and alignment (asserted).
        unsafe { self.buf.as_mut_ptr().cast::<V>().write(value) };
        self.drop = Some(drop_value::<V>);
    }

    /// Takes the value out, leaving the slot empty.
    ///
    /// # Safety
    /// The slot must hold a value stored by `put::<V>` with this very `V`.
    pub(crate) unsafe fn take<V>(&mut self) -> V {
        debug_assert!(self.drop.is_some());
        self.drop = None;
        // SAFETY: the caller promises a `V` is stored; `drop` is cleared, so
        // it is read out only once.
        unsafe { self.buf.as_mut_ptr().cast::<V>().read() }
    }

    /// Drops whatever the slot holds.
    pub(crate) fn clear(&mut self) {
        if let Some(drop) = self.drop.take() {
            // SAFETY: `drop` was chosen by `put` for the value in `buf`.
            unsafe { drop(self.buf.as_mut_ptr().cast::<u8>()) }
        }
    }
}

impl<const N: usize> Drop for Inline<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Where a finished task leaves its result until the joiner takes it:
/// `std::thread::Result<T>` inline when it fits in four words, boxed
/// otherwise.
pub(crate) struct ResultSlot(Inline<4>);

impl ResultSlot {
    pub(crate) const fn empty() -> Self {
        ResultSlot(Inline::EMPTY)
    }

    /// Stores `value`. The slot must be empty.
    pub(crate) fn put<R>(&mut self, value: R) {
        if Inline::<4>::fits::<R>() {
            self.0.put(value);
        } else {
            self.0.put(Box::new(value));
        }
    }

    /// Takes the value out.
    ///
    /// # Safety
    /// The slot must hold a value stored by `put::<R>` with this very `R`.
    pub(crate) unsafe fn take<R>(&mut self) -> R {
        // SAFETY: the caller promises `put::<R>` stored it, inline or boxed
        // as `fits` decides, the same way here.
        unsafe {
            if Inline::<4>::fits::<R>() {
                self.0.take::<R>()
            } else {
                *self.0.take::<Box<R>>()
            }
        }
    }

    /// Whether a value is held.
    pub(crate) fn is_some(&self) -> bool {
        self.0.is_some()
    }

    /// Drops whatever the slot holds.
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

/// A task's body while it waits for its first run, stored inline in its
/// meta: a never-run task holds a reserved stack but has not touched it, and
/// its first run builds the coroutine on whichever stack is hottest (see
/// `meta::bind`). Bodies that do not fit (over [`BODY_WORDS`] words, or
/// aligned above a word) are written onto their stack at spawn instead.
pub(crate) struct PendingBody {
    body: Inline<BODY_WORDS>,
    /// Takes the body out of `body` and runs it; `None` when empty.
    run: Option<unsafe fn(&mut Inline<BODY_WORDS>, TaskRef)>,
}

/// The largest body kept inline: a closure capturing up to 6 words.
pub(crate) const BODY_WORDS: usize = 6;

impl PendingBody {
    pub(crate) const EMPTY: PendingBody = PendingBody {
        body: Inline::EMPTY,
        run: None,
    };

    /// Whether a body of type `B` fits inline.
    pub(crate) fn fits<B>() -> bool {
        Inline::<BODY_WORDS>::fits::<B>()
    }

    /// Stores `body`, which must fit (see [`fits`](Self::fits)), in an
    /// empty slot. The slot erases `B`'s type, lifetime and thread bounds.
    ///
    /// # Safety
    /// Everything `body` borrows must outlive the slot's `take`, `run` or
    /// drop of it (for a task: until it has finished or been cancelled).
    pub(crate) unsafe fn put<B>(&mut self, body: B)
    where
        B: FnOnce(TaskRef) + Send,
    {
        unsafe fn run<B: FnOnce(TaskRef)>(body: &mut Inline<BODY_WORDS>, t: TaskRef) {
            // SAFETY: `put::<B>` stored a `B`; `take` empties the slot, so it
            // runs once.
            let body = unsafe { body.take::<B>() };
            body(t)
        }
        self.body.put(body);
        self.run = Some(run::<B>);
    }

    /// Whether a body is waiting.
    pub(crate) fn is_some(&self) -> bool {
        self.body.is_some()
    }

    /// Moves the waiting body out, leaving the slot empty.
    pub(crate) fn take(&mut self) -> PendingBody {
        mem::replace(self, Self::EMPTY)
    }

    /// Runs the body. The slot must hold one.
    pub(crate) fn run(mut self, t: TaskRef) {
        let run = self.run.take().expect("a pending body");
        // SAFETY: `run` was made by `put` for the body in `self.body`.
        unsafe { run(&mut self.body, t) }
    }
}
