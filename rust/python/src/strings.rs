//! Python strings as the core's ranking keys and path code points: `rank_by_count`,
//! `canonical_path` and `repo_path`.

use crate::borrow::{before_python, MayRunPython};
use crate::node::text_of;
use contextfold_core::Text;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use pyo3::PyTypeInfo;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// A `str` as a ranking key: hashed and equal by its data (kind and bytes), ordered by
/// code points (so ties rank in plain code-point order). Borrowed from the list being
/// ranked.
pub struct RankKey<'a, 'py> {
    pub string: Borrowed<'a, 'py, PyString>,
    hash: u64,
    /// `string`'s data, read once.
    text: Text<'a>,
}

impl<'a, 'py> RankKey<'a, 'py> {
    /// The key for `list[index]`; `None` when that item is no exact `str` (or its data
    /// cannot be read), named by [`refused`] once no key borrows any more.
    ///
    /// # Safety
    /// `index` must be in bounds, and the list must not change while the key is alive
    /// (no Python code may run: only exact `str` items are accepted, hashed and compared
    /// by their data, and nothing is done about the others here).
    pub unsafe fn from_list(list: &'a Bound<'py, PyList>, index: usize) -> Option<Self> {
        let py = list.py();
        // SAFETY: in bounds (caller); the list keeps the item alive while unchanged.
        let item: Borrowed<'a, 'py, PyAny> = unsafe {
            Borrowed::from_ptr(py, pyo3::ffi::PyList_GET_ITEM(list.as_ptr(), index as pyo3::ffi::Py_ssize_t))
        };
        if !PyString::is_exact_type_of(&item) {
            return None;
        }
        // SAFETY: checked to be an exact str just above.
        let string: Borrowed<'a, 'py, PyString> = unsafe { item.cast_unchecked() };
        // SAFETY: an exact str, alive (and immutable) while the list holds it.
        let text = unsafe { crate::node::text_at(string.as_ptr()) }?;
        // Keyed at random per process (flooding-resistant, as CPython's own str hash is)
        // and several times faster than CPython's SipHash on a short path: a fresh str has
        // no cached hash, so CPython's would be computed here for every item. Equal strs
        // hold equal data (CPython keeps each in its narrowest kind).
        let hash = contextfold_core::keyed::hash64(text.raw_bytes());
        Some(Self { string, hash, text })
    }
}

/// The error for `items[index]`, a key [`RankKey::from_list`] refused. Naming its type
/// may run Python code (a metaclass, a `__name__` that is a str subclass), so it is
/// called only once no key borrows the list.
fn refused(_: MayRunPython, items: &Bound<'_, PyList>, index: usize) -> PyErr {
    match items.get_item(index) {
        Ok(item) if PyString::is_exact_type_of(&item) => crate::errors::internal("unreadable str data"),
        Ok(item) => {
            let got = item.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            crate::errors::argument_type(format!("items[{index}]: expected str, got {got}"))
        }
        Err(err) => err,
    }
}

impl Hash for RankKey<'_, '_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialEq for RankKey<'_, '_> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && (self.string.as_ptr() == other.string.as_ptr() || self.text.same_data(&other.text))
    }
}

impl Eq for RankKey<'_, '_> {}

impl PartialOrd for RankKey<'_, '_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RankKey<'_, '_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.text.cmp_code_points(&other.text)
    }
}

/// The string's code points (surrogates included, as Python holds them).
pub fn code_points(s: &Bound<'_, PyString>) -> Vec<u32> {
    match text_of(s) {
        Some(Text::Latin1(b)) => b.iter().map(|&c| u32::from(c)).collect(),
        Some(Text::Ucs2(u)) => u.iter().map(|&c| u32::from(c)).collect(),
        Some(Text::Ucs4(u)) => u.to_vec(),
        Some(Text::Utf8(s)) => s.chars().map(u32::from).collect(),
        None => Vec::new(),
    }
}

/// A `str` from code points (surrogates kept).
pub fn from_code_points<'py>(py: Python<'py>, points: &[u32]) -> PyResult<Bound<'py, PyString>> {
    let len = pyo3::ffi::Py_ssize_t::try_from(points.len()).unwrap_or(0);
    // SAFETY: `points` is a valid buffer of `len` UCS-4 code units; CPython copies it.
    let ptr = unsafe { pyo3::ffi::PyUnicode_FromKindAndData(4, points.as_ptr().cast(), len) };
    // SAFETY: a new reference or NULL with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, ptr) }.map(|s| unsafe { s.cast_into_unchecked() })
}

/// Each distinct string with its count: most frequent first, ties in code-point order.
#[pyfunction]
pub fn rank_by_count<'py>(items: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let mut refused_at = None;
    // SAFETY: every index is in bounds, and no Python code runs while the keys borrow the
    // list (exact str items only, hashed and compared by their data here; another item
    // only ends the keys, and is named after).
    let keys = (0..items.len()).map_while(|i| {
        prefetch_item(items, i + RANK_PREFETCH_AHEAD);
        let key = unsafe { RankKey::from_list(items, i) };
        if key.is_none() {
            refused_at = Some(i);
        }
        key
    });
    let ranked = contextfold_core::rank::rank_by_count(keys);
    if let Some(index) = refused_at {
        drop(ranked); // no key borrows the list any more
        return Err(refused(before_python(), items, index));
    }
    let ranked: Vec<(Bound<'py, PyString>, usize)> =
        ranked.into_iter().map(|(k, n)| (k.string.to_owned(), n)).collect();
    let _paused = crate::borrow::CollectorPaused::new(items.py());
    PyList::new(items.py(), ranked)
}

/// How many items ahead of the one being counted `rank_by_count` asks the CPU to fetch.
/// A list of distinct strings is a random walk through memory, and waiting for each
/// object's first read was most of the count (benches/bench_codemap.py measures it).
const RANK_PREFETCH_AHEAD: usize = 16;

/// Asks the CPU to start loading the header and first characters of `list[index]`.
fn prefetch_item(list: &Bound<'_, PyList>, index: usize) {
    #[cfg(target_arch = "x86_64")]
    if index < list.len() {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `index` is in bounds, so the slot holds a live object; a prefetch reads
        // nothing into the program and never faults, whatever the address.
        unsafe {
            let item = pyo3::ffi::PyList_GET_ITEM(list.as_ptr(), index as pyo3::ffi::Py_ssize_t).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(item);
            _mm_prefetch::<_MM_HINT_T0>(item.wrapping_add(64));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (list, index);
}

/// The canonical spelling of a path.
#[pyfunction]
pub fn canonical_path<'py>(path: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyString>> {
    from_code_points(path.py(), &contextfold_core::paths::canonical(&code_points(path)))
}

/// The path relative to `root`, or None when it is not a repo file worth mapping.
#[pyfunction]
#[pyo3(signature = (path, root=None))]
pub fn repo_path<'py>(
    path: &Bound<'py, PyString>,
    root: Option<&Bound<'py, PyString>>,
) -> PyResult<Option<Bound<'py, PyString>>> {
    let py = path.py();
    let root = root.map(code_points);
    // Drive paths fold case as the reference does: ASCII here, anything else by Python's
    // own `str.lower` (its Unicode tables, the final sigma), not by Rust's.
    let lower = |s: &[u32]| -> PyResult<Vec<u32>> {
        if s.iter().all(|&c| c < 0x80) {
            return Ok(s.iter().map(|&c| if (0x41..=0x5A).contains(&c) { c + 0x20 } else { c }).collect());
        }
        let lowered = from_code_points(py, s)?.call_method0(pyo3::intern!(py, "lower"))?;
        Ok(code_points(lowered.cast::<PyString>()?))
    };
    match contextfold_core::paths::repo_path(&code_points(path), root.as_deref(), lower)? {
        Some(p) => from_code_points(py, &p).map(Some),
        None => Ok(None),
    }
}
