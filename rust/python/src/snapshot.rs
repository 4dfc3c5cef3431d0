//! [`Snapshot`]: a list's items, read once, holding a reference to each only once Python
//! code may run.
//!
//! Packing reads the caller's list as it was when the call began, whatever an estimator
//! or a hostile key does to it meanwhile, so the items are copied out first. Taking a
//! reference to each (and dropping it after) costs about as much as packing a long
//! run's untouched middle, and is needed only if the list can change: that is, only
//! once Python code runs (a callback, a `__eq__`, a finaliser the garbage collector
//! calls on an allocation, a profiler hook) or another thread does (the GIL released).
//! Until then the copied pointers are as good as the list's own.
//!
//! So a snapshot starts out borrowing, under one rule: while it borrows, no Python code
//! runs and nothing is allocated on the Python heap, whether or not its items are read
//! again ([`crate::borrow`] holds the rule: `before_python()` ends the borrow, and every
//! function that may run Python code needs what it returns). A caller done reading ends
//! the borrow with
//! [`Snapshot::into_kept`]. At
//! most one snapshot borrows at a time: a newer one is taken only by this crate's own
//! code (which owns the older one first) or from Python code (which ran after it).

use crate::borrow::{self, before_python, Items};
use crate::node::PyNode;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::cell::Cell;
use std::ptr::NonNull;

thread_local! {
    /// The last snapshot's buffer, for the next: a fresh large one would be mapped and
    /// page-faulted in on every call.
    static SPARE: Cell<Vec<NonNull<ffi::PyObject>>> = const { Cell::new(Vec::new()) };
}

/// Buffers up to this many items are kept for the next snapshot (512 KiB a thread).
const SPARE_ITEMS: usize = 1 << 16;

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
        // An older snapshot of this thread stops borrowing: only one is registered.
        let _ = before_python();
        let list = messages.cast::<PyList>().map_err(|_| crate::errors::not_a_list(messages))?;
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
        let mut items = SPARE.try_with(Cell::take).unwrap_or_default();
        items.clear();
        // SAFETY: none is null (checked above), and `NonNull` has a pointer's layout.
        items.extend_from_slice(unsafe { &*(std::ptr::from_ref(listed) as *const [NonNull<ffi::PyObject>]) });
        let items = Box::new(Items { items, owned: Cell::new(false) });
        borrow::register(&items);
        Ok(Snapshot { _py: list.py(), items })
    }

    /// How many items it holds.
    pub fn len(&self) -> usize {
        self.items.items.len()
    }

    /// The items at `kept` (each with its own reference), the snapshot's borrow ended:
    /// what a result is built from, the allocations that building takes made after.
    ///
    /// # Errors
    /// An index past the items (an internal error).
    pub fn into_kept(self, kept: &[usize]) -> PyResult<Vec<Bound<'py, PyAny>>> {
        kept_items(self.nodes(), kept)
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
        borrow::unregister(&self.items);
        if self.items.owned.get() {
            // A reference dropped may run a finaliser.
            self.items.release(before_python());
        }
        let items = std::mem::take(&mut self.items.items);
        if items.capacity() <= SPARE_ITEMS {
            // Dropped while the thread's locals are torn down: the buffer just goes.
            let _ = SPARE.try_with(|spare| spare.set(items));
        }
    }
}

/// The nodes at `kept`, each with its own reference.
///
/// # Errors
/// An index past the nodes (an internal error).
pub fn kept_items<'py>(nodes: &[PyNode<'py>], kept: &[usize]) -> PyResult<Vec<Bound<'py, PyAny>>> {
    kept.iter()
        .map(|&i| {
            nodes.get(i).map(|m| m.0.clone()).ok_or_else(|| crate::errors::internal("a kept index past the transcript"))
        })
        .collect()
}
