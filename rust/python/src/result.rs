//! Result objects: instances of the `NamedTuple` classes of `contextfold._contract` (and
//! `contextfold._edits.AppliedEdit`).

use crate::borrow::{before_python, MayRunPython};
use contextfold_core::edits::Plan;
use contextfold_core::message::Role;
use contextfold_core::pack::Packed;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyList, PyString, PyTuple, PyType};

/// A result class of `contextfold._contract`.
#[derive(Clone, Copy)]
pub enum Class {
    HandoffPack,
    PackedRequest,
    AppliedEdit,
}

/// A result class, looked up once, and whether its instances have a plain tuple's
/// layout (then their slots are filled directly).
pub struct Resolved {
    class: Py<PyType>,
    plain: bool,
}

impl Class {
    /// The class, looked up on first use (the module's init looks every one up, as the
    /// reference imports them, so a later patch reaches neither backend).
    pub fn get(self, py: Python<'_>) -> PyResult<&'static Resolved> {
        static HANDOFF_PACK: PyOnceLock<Resolved> = PyOnceLock::new();
        static PACKED_REQUEST: PyOnceLock<Resolved> = PyOnceLock::new();
        static APPLIED_EDIT: PyOnceLock<Resolved> = PyOnceLock::new();
        let (cell, module, name) = match self {
            Class::HandoffPack => (&HANDOFF_PACK, "contextfold._contract", "HandoffPack"),
            Class::PackedRequest => (&PACKED_REQUEST, "contextfold._contract", "PackedRequest"),
            Class::AppliedEdit => (&APPLIED_EDIT, "contextfold._edits", "AppliedEdit"),
        };
        cell.get_or_try_init(py, || {
            let class = py.import(module)?.getattr(name)?.cast_into::<PyType>()?;
            let tuple_type = py.get_type::<PyTuple>();
            // SAFETY: both are live type objects; only their size fields are read.
            let plain = class.is_subclass(&tuple_type)?
                && unsafe {
                    let (ours, tuple) = (&*class.as_type_ptr(), &*tuple_type.as_type_ptr());
                    ours.tp_basicsize == tuple.tp_basicsize && ours.tp_itemsize == tuple.tp_itemsize
                };
            Ok(Resolved { class: class.unbind(), plain })
        })
    }
}

/// An instance of the class holding `fields`. When it is a plain tuple subclass (a
/// `NamedTuple`), its slots are filled directly, as `tuple.__new__(class, fields)` would,
/// without running the class's Python `__new__`; anything else (a replaced class, say)
/// is called with the fields.
pub fn named_tuple<'py, const N: usize>(
    _: MayRunPython,
    py: Python<'py>,
    resolved: &Resolved,
    fields: [Bound<'py, PyAny>; N],
) -> PyResult<Bound<'py, PyAny>> {
    let class = resolved.class.bind(py);
    if !resolved.plain {
        return class.call1(PyTuple::new(py, fields)?);
    }
    // SAFETY: `class` is a tuple subclass with the tuple's own layout (checked when it
    // was looked up), so its tp_alloc gives a zeroed tuple of N slots that we own; each
    // slot takes over one owned reference.
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

/// A count the core holds as a u128, as an int: through a u64 when it fits, which pyo3
/// converts directly, not by the bytes of a u128 (a twelfth of a short pack).
pub fn count(py: Python<'_>, n: u128) -> PyResult<Bound<'_, PyAny>> {
    Ok(match u64::try_from(n) {
        Ok(small) => small.into_pyobject(py)?.into_any(),
        Err(_) => n.into_pyobject(py)?.into_any(),
    })
}

/// The edits that ran, as a tuple of `AppliedEdit` (the empty one when none did: no
/// allocation on the common path).
pub fn applied_edits<'py>(_: MayRunPython, py: Python<'py>, plan: &Plan) -> PyResult<Bound<'py, PyAny>> {
    if plan.applied.is_empty() {
        return Ok(PyTuple::empty(py).into_any());
    }
    let class = Class::AppliedEdit.get(py)?;
    let applied = plan.applied.iter().map(|a| {
        let fields = [
            PyString::new(py, a.kind.as_str()).into_any(),
            a.cleared_tool_uses.into_pyobject(py)?.into_any(),
            a.cleared_thinking_turns.into_pyobject(py)?.into_any(),
            a.cleared_input_tokens.into_pyobject(py)?.into_any(),
        ];
        named_tuple(before_python(), py, class, fields)
    });
    Ok(PyTuple::new(py, applied.collect::<PyResult<Vec<_>>>()?)?.into_any())
}

/// The `HandoffPack` for a transcript of `n` messages packed: the output list (`out`, the
/// kept messages as the output holds them ([`crate::edited::as_output`]), with the note a
/// new dict at its place), dropped, fits, tokens, budget, note, kept, applied edits.
pub fn handoff_pack<'py>(
    _: MayRunPython,
    n: usize,
    mut out: Vec<Bound<'py, PyAny>>,
    packed: Packed,
    budget: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = budget.py();
    let note = match &packed.note {
        Some(note) => {
            let dict = PyDict::new(py);
            if note.message_item {
                dict.set_item(intern!(py, "type"), intern!(py, "message"))?;
            }
            dict.set_item(intern!(py, "role"), if note.role == Role::User { "user" } else { "assistant" })?;
            // The note's text is the same str object as the note message's content.
            let text = PyString::new(py, &note.text).into_any();
            dict.set_item(intern!(py, "content"), &text)?;
            out.insert(note.at.min(out.len()), dict.into_any());
            text
        }
        None => py.None().into_bound(py),
    };
    let dropped = n - packed.kept.len().min(n);
    let fields = [
        PyList::new(py, out)?.into_any(),
        dropped.into_pyobject(py)?.into_any(),
        PyBool::new(py, packed.fits).to_owned().into_any(),
        count(py, packed.tokens)?,
        budget.clone(),
        note,
        PyList::new(py, &packed.kept)?.into_any(),
        applied_edits(before_python(), py, &packed.edits)?,
    ];
    named_tuple(before_python(), py, Class::HandoffPack.get(py)?, fields)
}
