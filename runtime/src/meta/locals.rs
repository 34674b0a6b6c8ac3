//! Per-task storage: the values of `task_local!` keys (bthread_key).
//!
//! A task's [`LocalValues`] lives in its meta and is touched only by the
//! task itself: looked up and filled by the running task, emptied when its
//! body returns (`coro::drop_locals`, from the coroutine's entry), so a value
//! drops on the task's own stack, before its joiner can see it finished.
//! Values are boxed, so a reference handed out stays put while other keys
//! are added; nothing is removed before the task ends. A key is the address
//! of its `static`, unique in the process. Empty storage allocates nothing,
//! so a task that uses no key costs nothing here.

use std::any::Any;

/// The values a task (or a plain thread) has for its `task_local!` keys.
#[derive(Default)]
pub(crate) struct LocalValues {
    values: Vec<(usize, Box<dyn Any>)>,
}

impl LocalValues {
    /// No values.
    pub(crate) const fn new() -> Self {
        LocalValues { values: Vec::new() }
    }

    /// The value stored under `key`, made by `init` if there is none yet.
    /// `init` may use other keys (or this one: the value it makes is then
    /// dropped for the one made inside it).
    ///
    /// # Safety
    /// `storage` is valid, and used by the calling task (or thread) alone,
    /// which holds no reference into it other than to values' contents.
    /// The pointer returned is valid until the values are taken.
    pub(crate) unsafe fn get_or_init<T: 'static>(
        storage: *mut LocalValues,
        key: usize,
        init: impl FnOnce() -> T,
    ) -> *const T {
        // SAFETY: the caller's contract; the borrow ends before `init` runs.
        if let Some(v) = unsafe { (*storage).find::<T>(key) } {
            return v;
        }
        let made: Box<dyn Any> = Box::new(init());
        // SAFETY: as above; `init` has returned, so no borrow of it is live.
        let storage = unsafe { &mut *storage };
        if let Some(v) = storage.find::<T>(key) {
            // `init` used this key itself: keep what it stored.
            drop(made);
            return v;
        }
        storage.values.push((key, made));
        let (_, v) = storage.values.last().expect("just pushed");
        ptr_of::<T>(v)
    }

    fn find<T: 'static>(&self, key: usize) -> Option<*const T> {
        self.values
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| ptr_of::<T>(v))
    }

    /// Takes every value out, leaving the storage empty.
    pub(crate) fn take(&mut self) -> Vec<(usize, Box<dyn Any>)> {
        std::mem::take(&mut self.values)
    }
}

/// The `T` inside a value stored for a key of type `T`.
fn ptr_of<T: 'static>(v: &Box<dyn Any>) -> *const T {
    let v: &T = v
        .downcast_ref::<T>()
        .expect("a task-local key stores values of its own type");
    v
}
