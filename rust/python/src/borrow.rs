//! The rule of reading Python objects in place, and the token that holds it.
//!
//! A [`crate::snapshot::Snapshot`] copies a list's item pointers without taking a
//! reference to each, which is sound only while no Python code runs on this thread and
//! nothing is allocated on the Python heap (a finaliser, a `__eq__`, a profiler hook, or
//! another thread once the GIL is released could free an item). [`before_python`] ends
//! that borrow (the snapshot takes its references) and returns a [`MayRunPython`]: every
//! function of this crate that may run Python code takes one, so none can be called
//! without `before_python()` first. The compiler holds the rule, not a convention.
//!
//! One release of the GIL takes no token: pyo3 detaches while it first fills a lazy
//! static (`intern!`, `PyOnceLock`). So none is read while a snapshot borrows unless it
//! is filled when the module is imported, as the message keys are (`node::KEYS`).

use pyo3::ffi;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The items, and whether a reference to each is held. Boxed so its address, which
/// the thread's registry keeps, stays put when the snapshot moves.
pub struct Items {
    pub items: Vec<NonNull<ffi::PyObject>>,
    pub owned: Cell<bool>,
}

impl Items {
    /// Drops the references `own` took (a finaliser may run).
    pub fn release(&self, _: MayRunPython) {
        for item in &self.items {
            // SAFETY: called only when the snapshot holds this reference (`owned`).
            unsafe { ffi::Py_DECREF(item.as_ptr()) };
        }
    }

    fn own(&self) {
        if !self.owned.replace(true) {
            for item in &self.items {
                // SAFETY: no Python code has run since the items were copied from the
                // list (see the module notes), so each is still alive.
                unsafe { ffi::Py_INCREF(item.as_ptr()) };
            }
        }
    }
}

thread_local! {
    /// The snapshot of this thread that holds no references yet, if any.
    static BORROWING: Cell<*const Items> = const { Cell::new(std::ptr::null()) };
}

/// How many reads of this crate have run, or may have run, the caller's own code, on any
/// thread (what another thread's reads run can change values as well; other Python code
/// another thread runs while an exact count has the GIL released is not counted: a
/// message it changes mid-call is read before or after the change). Process-wide, as it
/// is read once a message while packing: a thread-local's address is looked up by a call
/// into the dynamic loader each time, from a shared library.
static CALLER_CODE: AtomicU64 = AtomicU64::new(0);

/// Registers `items` as this thread's borrowing snapshot (at most one borrows).
pub fn register(items: &Items) {
    BORROWING.set(std::ptr::from_ref(items));
}

/// Unregisters `items` if it is this thread's borrowing snapshot (it is being dropped).
pub fn unregister(items: &Items) {
    if BORROWING.get() == std::ptr::from_ref(items) {
        BORROWING.set(std::ptr::null());
    }
}

/// Leave to run Python code (or release the GIL) on this thread, given only by
/// [`before_python`]: no snapshot borrows when one is made. Each function of this crate
/// that may run Python code takes one, and it is used up there.
#[must_use = "a call that may run Python code takes it"]
pub struct MayRunPython {
    /// Neither `Send` nor `Sync`: it speaks for this thread only.
    _thread: std::marker::PhantomData<*const ()>,
}

/// Makes the snapshot of this thread that still borrows its items hold a reference to
/// each: what must happen before anything that may run Python code or release the GIL.
pub fn before_python() -> MayRunPython {
    let borrowing = BORROWING.replace(std::ptr::null());
    // SAFETY: a registered `Items` is alive: `Snapshot::drop` unregisters it first.
    if let Some(items) = unsafe { borrowing.as_ref() } {
        items.own();
    }
    MayRunPython { _thread: std::marker::PhantomData }
}

/// Notes that a read of a value runs, or may run, the caller's own code (a key's `__eq__`
/// in a dict lookup, a number's `__index__`, a metaclass's `__name__`): code that could
/// change values the call has read already. It runs with the leave [`before_python`]
/// gave, which this takes and hands back.
pub fn runs_caller_code(leave: MayRunPython) -> MayRunPython {
    CALLER_CODE.fetch_add(1, Ordering::Relaxed);
    leave
}

/// How many reads have noted [`runs_caller_code`] so far: a call that finds the same count
/// before and after ran none of the caller's code in between.
pub fn caller_code_runs() -> u64 {
    CALLER_CODE.load(Ordering::Relaxed)
}

/// The cyclic garbage collector paused while this lives (and restored as it was found).
/// On 3.10 and 3.11 an allocation may run a collection, and with it a finaliser or a `gc`
/// callback (from 3.12 a collection due while C code allocates waits for bytecode). Two
/// uses: packing with edits and chars/4 reads the caller's lists in place from planning
/// until the edited messages are built, and such code could reorder one in between and
/// move an edit; and `rank_by_count` builds a burst of results that hold no cycles, where
/// every few hundred allocations ran a young-generation collection that freed nothing
/// and walked every young object (a freshly made input list of 100,000 items among
/// them: seven collections). The one collection due when it ends runs at the next
/// allocation.
pub struct CollectorPaused<'py> {
    _py: pyo3::Python<'py>,
    was_enabled: bool,
}

impl<'py> CollectorPaused<'py> {
    pub fn new(py: pyo3::Python<'py>) -> Self {
        // SAFETY: the GIL is held (`py`); PyGC_Disable returns whether it was enabled.
        let was_enabled = unsafe { ffi::PyGC_Disable() } == 1;
        Self { _py: py, was_enabled }
    }
}

impl Drop for CollectorPaused<'_> {
    fn drop(&mut self) {
        if self.was_enabled {
            // SAFETY: the GIL is still held (the guard lives no longer than `py`).
            unsafe { ffi::PyGC_Enable() };
        }
    }
}
