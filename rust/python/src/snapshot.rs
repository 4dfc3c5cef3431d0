//! [`Snapshot`]: a list's items, read once, holding a reference to each only once Python
//! code may run.
//!
//! Packing reads the caller's list as it was when the call began, whatever an estimator
//! or a hostile key does to it meanwhile, so the items are copied out first. Taking a
//! reference to each (and dropping it after) costs about as much as packing a long
//! run's untouched middle, and is needed only if the list can change: that is, only
//! once Python code runs (a callback, a `__eq__`, a finaliser the garbage collector
//! calls on an allocation) or another thread does (the GIL released). Until then the
//! copied pointers are as good as the list's own. So a snapshot starts out borrowing,
//! and every place in this crate that may let Python code run calls [`before_python`]
//! first, which takes the references of the one snapshot on this thread still
//! borrowing. At most one can be: a newer snapshot is only taken by this crate's own
//! code (which owns the older one first) or from Python code (which ran after it).

use crate::node::PyNode;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::cell::Cell;
use std::ptr::NonNull;

/// The items, and whether a reference to each is held. Boxed so its address, which
/// the thread's registry keeps, stays put when the snapshot moves.
struct Items {
    items: Vec<NonNull<ffi::PyObject>>,
    owned: Cell<bool>,
}

impl Items {
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
    /// The last snapshot's buffer, for the next: a fresh large one would be mapped and
    /// page-faulted in on every call.
    static SPARE: Cell<Vec<NonNull<ffi::PyObject>>> = const { Cell::new(Vec::new()) };
}

/// Buffers up to this many items are kept for the next snapshot (4 MiB).
const SPARE_ITEMS: usize = 1 << 19;

/// Makes the snapshot of this thread that still borrows its items hold a reference to
/// each: call it before anything that may run Python code or release the GIL.
pub fn before_python() {
    let borrowing = BORROWING.replace(std::ptr::null());
    // SAFETY: a registered `Items` is alive: `Snapshot::drop` unregisters it first.
    if let Some(items) = unsafe { borrowing.as_ref() } {
        items.own();
    }
}

/// A list's items as they were when it was taken.
pub struct Snapshot<'py> {
    /// The GIL, held as long as the snapshot lives.
    _py: Python<'py>,
    items: Box<Items>,
}

impl<'py> Snapshot<'py> {
    /// The items of `messages` (a list), borrowed until [`before_python`] runs.
    ///
    /// # Errors
    /// `TypeError` when `messages` is not a list.
    pub fn of(messages: &Bound<'py, PyAny>) -> PyResult<Self> {
        let list = messages.cast::<PyList>().map_err(|_| crate::errors::not_a_list(messages))?;
        before_python();
        // SAFETY: a list's `ob_item` holds its `len` item pointers (read with the GIL
        // held, no Python code run since); NULL only in a list a C caller has not
        // filled yet, refused below.
        let listed: &[*mut ffi::PyObject] = match list.len() {
            0 => &[],
            len => unsafe { std::slice::from_raw_parts((*list.as_ptr().cast::<ffi::PyListObject>()).ob_item, len) },
        };
        if listed.iter().any(|item| item.is_null()) {
            return Err(crate::errors::internal("a list holding NULL"));
        }
        let mut items = SPARE.take();
        items.clear();
        // SAFETY: none is null (checked above), and `NonNull` has a pointer's layout.
        items.extend_from_slice(unsafe { &*(std::ptr::from_ref(listed) as *const [NonNull<ffi::PyObject>]) });
        let items = Box::new(Items { items, owned: Cell::new(false) });
        BORROWING.set(&raw const *items);
        Ok(Snapshot { _py: list.py(), items })
    }

    /// The items as accessor nodes.
    pub fn nodes(&self) -> &[PyNode<'py>] {
        let items = &self.items.items;
        // SAFETY: `PyNode` is a transparent `Bound`, itself a transparent non-null
        // pointer, so the two slices have one layout; the nodes are only lent (never
        // dropped), and stay valid as the module notes say.
        unsafe { std::slice::from_raw_parts(items.as_ptr().cast::<PyNode<'py>>(), items.len()) }
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        if BORROWING.get() == &raw const *self.items {
            BORROWING.set(std::ptr::null());
        }
        if self.items.owned.get() {
            // A reference dropped may run a finaliser.
            before_python();
            for item in &self.items.items {
                // SAFETY: the snapshot holds this reference (`owned`).
                unsafe { ffi::Py_DECREF(item.as_ptr()) };
            }
        }
        let items = std::mem::take(&mut self.items.items);
        if items.capacity() <= SPARE_ITEMS {
            SPARE.set(items);
        }
    }
}
