//! Python strings as the core's ranking keys and path code points.

use crate::node::text_of;
use contextfold_core::Text;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use pyo3::PyTypeInfo;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

/// A `str` as a ranking key: hashed by CPython's cached hash, equal and ordered by code
/// points (so ties rank in plain code-point order). Borrowed from the list being ranked.
pub struct RankKey<'a, 'py> {
    pub string: Borrowed<'a, 'py, PyString>,
    hash: isize,
    /// `string`'s data, read once.
    text: Text<'a>,
}

impl<'a, 'py> RankKey<'a, 'py> {
    /// The key for `list[index]`.
    ///
    /// # Safety
    /// `index` must be in bounds, and the list must not change while the key is alive
    /// (no Python code may run: only exact `str` items are accepted, whose hash is
    /// CPython's own).
    pub unsafe fn from_list(list: &'a Bound<'py, PyList>, index: usize) -> PyResult<Self> {
        let py = list.py();
        // SAFETY: in bounds (caller); the list keeps the item alive while unchanged.
        let item: Borrowed<'a, 'py, PyAny> = unsafe {
            Borrowed::from_ptr(py, pyo3::ffi::PyList_GET_ITEM(list.as_ptr(), index as pyo3::ffi::Py_ssize_t))
        };
        if !PyString::is_exact_type_of(&item) {
            let got = item.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            return Err(crate::errors::argument_type(format!("items[{index}]: expected str, got {got}")));
        }
        // SAFETY: checked to be an exact str just above.
        let string: Borrowed<'a, 'py, PyString> = unsafe { item.cast_unchecked() };
        let hash = string.hash()?;
        // SAFETY: an exact str, alive (and immutable) while the list holds it.
        let text = unsafe { crate::node::text_at(string.as_ptr()) }
            .ok_or_else(|| crate::errors::internal("unreadable str data"))?;
        Ok(Self { string, hash, text })
    }
}

impl Hash for RankKey<'_, '_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_isize(self.hash);
    }
}

impl PartialEq for RankKey<'_, '_> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && (self.string.as_ptr() == other.string.as_ptr() || self.cmp(other) == Ordering::Equal)
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
