//! Result objects: instances of the `NamedTuple` classes of `contextfold._contract`.

use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};

/// An instance of `class` holding `fields`. When `class` is a plain tuple subclass (a
/// `NamedTuple`), its slots are filled directly, as `tuple.__new__(class, fields)` would,
/// without running the class's Python `__new__`; anything else (a replaced class, say)
/// is called with the fields.
pub fn named_tuple<'py, const N: usize>(
    class: &Bound<'py, PyType>,
    fields: [Bound<'py, PyAny>; N],
) -> PyResult<Bound<'py, PyAny>> {
    let py = class.py();
    let tuple_type = py.get_type::<PyTuple>();
    // SAFETY: both are live type objects; only their size fields are read.
    let plain = class.is_subclass(&tuple_type)?
        && unsafe {
            let (ours, tuple) = (&*class.as_type_ptr(), &*tuple_type.as_type_ptr());
            ours.tp_basicsize == tuple.tp_basicsize && ours.tp_itemsize == tuple.tp_itemsize
        };
    if !plain {
        return class.call1(PyTuple::new(py, fields)?);
    }
    // SAFETY: `class` is a tuple subclass with the tuple's own layout (checked above),
    // so its tp_alloc gives a zeroed tuple of N slots that we own; each slot takes over
    // one owned reference.
    unsafe {
        let alloc = (*class.as_type_ptr()).tp_alloc.unwrap_or(pyo3::ffi::PyType_GenericAlloc);
        let len = pyo3::ffi::Py_ssize_t::try_from(N).unwrap_or(0);
        let tuple = Bound::from_owned_ptr_or_err(py, alloc(class.as_type_ptr(), len))?;
        for (slot, field) in (0..len).zip(fields) {
            pyo3::ffi::PyTuple_SET_ITEM(tuple.as_ptr(), slot, field.into_ptr());
        }
        Ok(tuple)
    }
}
