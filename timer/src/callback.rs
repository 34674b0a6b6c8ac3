//! Type-erased timer callbacks, stored inline in a slot.
//!
//! A [`Callback`] is three words of storage plus a `&'static` vtable. A
//! closure that fits (size ≤ 3 words, alignment ≤ 8) is written into the
//! storage itself, so arming such a timer allocates nothing: the runtime's
//! sleep callback captures a task pointer and a version, two words. A larger
//! closure is boxed and the `Box` (one word) goes inline instead.
//!
//! One-shot callbacks (`FnOnce`) are *consumed* by [`Callback::call`]: the
//! vtable entry moves the closure out of the storage and calls it, so the
//! callback is empty afterwards, whether the closure returned or panicked
//! (unwinding drops the moved-out value exactly once). Periodic callbacks
//! (`FnMut`) are called in place and stay.

use std::marker::PhantomData;
use std::mem::{self, MaybeUninit};
use std::ptr;

/// Words of inline storage.
pub(crate) const INLINE_WORDS: usize = 3;

/// Inline storage: three words, 8-aligned.
#[repr(C, align(8))]
struct Storage([MaybeUninit<usize>; INLINE_WORDS]);

impl Storage {
    const fn uninit() -> Self {
        Storage([MaybeUninit::uninit(); INLINE_WORDS])
    }
}

/// Whether a value of type `F` fits in [`Storage`] without boxing.
pub(crate) const fn fits_inline<F>() -> bool {
    mem::size_of::<F>() <= mem::size_of::<Storage>()
        && mem::align_of::<F>() <= mem::align_of::<Storage>()
}

/// The operations on the value in a [`Storage`], for one concrete type.
struct VTable {
    /// Calls the value. If `consumes`, the value is moved out first and is
    /// gone afterwards.
    call: unsafe fn(*mut Storage),
    /// Drops the value in place.
    drop: unsafe fn(*mut Storage),
    /// Whether `call` moves the value out (`FnOnce`) or calls it in place
    /// (`FnMut`).
    consumes: bool,
}

/// Vtables for a one-shot closure type `F`.
struct Once<F>(PhantomData<F>);

impl<F: FnOnce()> Once<F> {
    const VTABLE: VTable = VTable {
        call: Self::call,
        drop: drop_in_place::<F>,
        consumes: true,
    };

    /// # Safety
    /// `p` holds an initialized `F` that nothing will use or drop afterwards.
    unsafe fn call(p: *mut Storage) {
        // SAFETY: the caller promises an initialized `F` that it gives up;
        // `Storage` is aligned for `F` (checked by `fits_inline` before the
        // value was written).
        let f = unsafe { ptr::read(p.cast::<F>()) };
        f();
    }
}

/// Vtables for a periodic closure type `F`.
struct Periodic<F>(PhantomData<F>);

impl<F: FnMut()> Periodic<F> {
    const VTABLE: VTable = VTable {
        call: Self::call,
        drop: drop_in_place::<F>,
        consumes: false,
    };

    /// # Safety
    /// `p` holds an initialized `F` and nothing else accesses it meanwhile.
    unsafe fn call(p: *mut Storage) {
        // SAFETY: initialized, aligned and exclusively ours, per the contract.
        let f = unsafe { &mut *p.cast::<F>() };
        f();
    }
}

/// # Safety
/// `p` holds an initialized `F` that nothing will use afterwards.
unsafe fn drop_in_place<F>(p: *mut Storage) {
    // SAFETY: per the contract; alignment as in `Once::call`.
    unsafe { ptr::drop_in_place(p.cast::<F>()) }
}

/// A timer callback: empty, or a closure of the type its vtable was made for.
///
/// `Send` because it is only ever built from `Send` closures; not `Sync`,
/// because nothing about the closures makes shared references safe (the
/// timer never shares one: a slot's payload has one holder at a time).
pub(crate) struct Callback {
    /// `None` when empty; otherwise the vtable of the value in `storage`.
    vtable: Option<&'static VTable>,
    /// The closure itself, or the `Box` of a closure that does not fit.
    storage: Storage,
    /// Opts out of `Sync` (see the type's docs); `Send` is restored below.
    _not_sync: PhantomData<*mut ()>,
}

// SAFETY: a `Callback` owns a closure that was `Send` when it was stored (both
// constructors require it), or a `Box` of one; moving it to another thread is
// moving that closure.
unsafe impl Send for Callback {}

impl Callback {
    /// A callback that holds nothing.
    pub(crate) const fn empty() -> Self {
        Callback {
            vtable: None,
            storage: Storage::uninit(),
            _not_sync: PhantomData,
        }
    }

    /// A one-shot callback; boxes `f` only if it does not fit inline.
    #[inline]
    pub(crate) fn once<F: FnOnce() + Send + 'static>(f: F) -> Self {
        if fits_inline::<F>() {
            // SAFETY: `F` fits, as just checked.
            unsafe { Self::inline(f, &Once::<F>::VTABLE) }
        } else {
            // SAFETY: a `Box` is one pointer: it always fits.
            unsafe { Self::inline(Box::new(f), &Once::<Box<F>>::VTABLE) }
        }
    }

    /// A periodic callback; boxes `f` only if it does not fit inline.
    #[inline]
    pub(crate) fn periodic<F: FnMut() + Send + 'static>(f: F) -> Self {
        if fits_inline::<F>() {
            // SAFETY: `F` fits, as just checked.
            unsafe { Self::inline(f, &Periodic::<F>::VTABLE) }
        } else {
            // SAFETY: a `Box` is one pointer: it always fits.
            unsafe { Self::inline(Box::new(f), &Periodic::<Box<F>>::VTABLE) }
        }
    }

    /// # Safety
    /// `fits_inline::<T>()` must hold and `vtable` must be made for `T`.
    #[inline]
    unsafe fn inline<T>(value: T, vtable: &'static VTable) -> Self {
        let mut cb = Callback {
            vtable: Some(vtable),
            storage: Storage::uninit(),
            _not_sync: PhantomData,
        };
        // SAFETY: the storage is large and aligned enough for `T` (caller's
        // contract) and uninitialized, so nothing is overwritten.
        unsafe { ptr::write(ptr::addr_of_mut!(cb.storage).cast::<T>(), value) };
        cb
    }

    /// Whether the callback holds nothing.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.vtable.is_none()
    }

    /// Calls the closure. A one-shot is consumed (the callback is empty
    /// afterwards, even if the closure panics); a periodic one stays. Calling
    /// an empty callback does nothing.
    #[inline]
    pub(crate) fn call(&mut self) {
        let Some(vtable) = self.vtable else { return };
        if vtable.consumes {
            // From here on the value belongs to `call`, which moves it out:
            // forget it first so that neither a return nor an unwind drops it
            // a second time.
            self.vtable = None;
        }
        // SAFETY: `vtable` was made for the value in `storage`, which is
        // initialized (the vtable was `Some`); we hold `&mut self`, so access
        // is exclusive; a consumed value has just been forgotten.
        unsafe { (vtable.call)(&mut self.storage) }
    }
}

impl Drop for Callback {
    fn drop(&mut self) {
        if let Some(vtable) = self.vtable.take() {
            // SAFETY: `vtable` was made for the initialized value in
            // `storage`, which is dropped exactly once (the vtable is gone).
            unsafe { (vtable.drop)(&mut self.storage) }
        }
    }
}

impl std::fmt::Debug for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callback")
            .field("empty", &self.is_empty())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;

    struct CountDrops(Arc<AtomicUsize>);
    impl Drop for CountDrops {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    #[test]
    fn three_words_fit_four_do_not() {
        assert!(fits_inline::<[usize; 3]>());
        assert!(fits_inline::<(usize, u32)>());
        assert!(fits_inline::<()>());
        assert!(!fits_inline::<[usize; 4]>());
        #[repr(align(16))]
        struct Aligned16(#[allow(dead_code)] u8);
        assert!(!fits_inline::<Aligned16>());
        assert_eq!(mem::size_of::<Callback>(), 32);
    }

    #[test]
    fn a_one_shot_runs_once_and_is_consumed() {
        let hits = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let (h, guard) = (hits.clone(), CountDrops(drops.clone()));
        let mut cb = Callback::once(move || {
            let _g = &guard;
            h.fetch_add(1, SeqCst);
        });
        assert!(!cb.is_empty());
        cb.call();
        assert!(cb.is_empty());
        assert_eq!(drops.load(SeqCst), 1, "the closure is dropped by its call");
        cb.call(); // empty: nothing happens
        drop(cb);
        assert_eq!((hits.load(SeqCst), drops.load(SeqCst)), (1, 1));
    }

    #[test]
    fn a_large_closure_is_boxed_and_behaves_the_same() {
        let hits = Arc::new(AtomicUsize::new(0));
        let drops = Arc::new(AtomicUsize::new(0));
        let big = [7u64; 8];
        let (h, guard) = (hits.clone(), CountDrops(drops.clone()));
        let mut cb = Callback::once(move || {
            let _g = &guard;
            h.fetch_add(big.iter().sum::<u64>() as usize, SeqCst);
        });
        cb.call();
        assert_eq!((hits.load(SeqCst), drops.load(SeqCst)), (56, 1));

        // Dropped without being called.
        let guard = CountDrops(drops.clone());
        let cb = Callback::once(move || {
            let _g = (&guard, big);
        });
        drop(cb);
        assert_eq!(drops.load(SeqCst), 2);
    }

    #[test]
    fn a_periodic_keeps_its_state_between_calls() {
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let mut n = 0usize;
        let mut cb = Callback::periodic(move || {
            n += 1;
            s.store(n, SeqCst);
        });
        for _ in 0..3 {
            cb.call();
        }
        assert!(!cb.is_empty());
        assert_eq!(seen.load(SeqCst), 3);
    }

    #[test]
    fn a_panicking_one_shot_is_dropped_exactly_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let guard = CountDrops(drops.clone());
        let mut cb = Callback::once(move || {
            let _g = guard;
            panic!("boom");
        });
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb.call()));
        assert!(r.is_err());
        assert!(cb.is_empty());
        drop(cb);
        assert_eq!(drops.load(SeqCst), 1);
    }
}
