//! A message as the context edits present it ([`Edited`]), built as Python values: what
//! a pack's output holds for a kept message an edit changed, and what a custom estimator
//! is handed. Only the containers on the way to a changed value are new (a dict copied
//! with its member replaced, a list with its items filtered or replaced), as
//! `contextfold.reference.edits` builds them, and an edited message in a pack's output
//! is built from copies of its `content` and `tool_calls` lists ([`as_output`]);
//! everything else is the caller's object.
//! Also the copies the edits plan on where other Python code can run mid-call ([`frozen`]).

use crate::borrow::{before_python, MayRunPython};
use crate::node::PyNode;
use contextfold_core::edits::{Edited, Substitute};
use contextfold_core::pack::Packed;
use contextfold_core::{JsonNode, Key, View};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

/// The Python value `node` presents (allocating may run a finaliser).
///
/// # Errors
/// A failed allocation, or a replaced member in a value that is not a dict or list (the
/// plan is made from these same values, so never for one that was not).
pub fn to_object<'py>(_: MayRunPython, py: Python<'py>, node: &Edited<'_, PyNode<'py>>) -> PyResult<Bound<'py, PyAny>> {
    built(py, node)
}

fn built<'py>(py: Python<'py>, value: &Edited<'_, PyNode<'py>>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Edited::Plain(node) => node.0.clone(),
        Edited::Str(text) => PyString::new(py, text).into_any(),
        Edited::EmptyObject => PyDict::new(py).into_any(),
        Edited::Message { node, edit, placeholders, alone } => {
            let message = copied(&node.0)?;
            for &(field, replacement) in &edit.fields {
                message.set_item(field.key(), substitute(py, replacement.resolve(placeholders)))?;
            }
            if !edit.blocks.is_empty() || alone.is_some() {
                if let Some(content) = message.get_item("content")? {
                    let (blocks, alone) = (&edit.blocks, alone.clone());
                    let view = Edited::Blocks { node: PyNode(content), blocks, alone, placeholders };
                    message.set_item("content", built(py, &view)?)?;
                }
            }
            if !edit.calls.is_empty() {
                if let Some(calls) = message.get_item("tool_calls")? {
                    message.set_item(
                        "tool_calls",
                        built(py, &Edited::Calls { node: PyNode(calls), calls: &edit.calls })?,
                    )?;
                }
            }
            message.into_any()
        }
        Edited::Blocks { node: list, blocks, .. } => {
            let len = list.0.cast::<PyList>().map_err(|_| changed())?.len();
            if blocks.last().is_some_and(|&(j, _)| j >= len) {
                return Err(changed());
            }
            // Each block as the core's view presents it (all of them, or the one weighed
            // alone), built.
            let View::Array { items, .. } = value.view().map_err(|_| changed())? else { return Err(changed()) };
            let out = PyList::empty(py);
            for block in items {
                out.append(built(py, &block)?)?;
            }
            out.into_any()
        }
        Edited::Calls { node, calls } => {
            let out = PyList::empty(py);
            let list = node.0.cast::<PyList>().map_err(|_| changed())?;
            if calls.last().is_some_and(|&j| j >= list.len()) {
                return Err(changed());
            }
            for (j, call) in list.iter().enumerate() {
                if calls.binary_search(&j).is_ok() {
                    out.append(built(py, &Edited::Call(PyNode(call)))?)?;
                } else {
                    out.append(call)?;
                }
            }
            out.into_any()
        }
        Edited::Call(node) => {
            let call = copied(&node.0)?;
            if let Some(function) = call.get_item("function")? {
                call.set_item("function", with(&function, "arguments", PyString::new(py, "{}").into_any())?)?;
            }
            call.into_any()
        }
        Edited::Patched { node, key, value } => with(&node.0, key, substitute(py, *value))?.into_any(),
    })
}

/// The messages as packing with edits reads them while other Python code can run
/// mid-call (a custom estimator's, or another thread's while the GIL is released). One
/// whose `content` or `tool_calls` is a list is a copy holding copies of those lists, so
/// the block and call positions the edits plan index lists that other code (or a key's
/// `__eq__` it makes run) cannot reorder; every other message is the caller's own.
///
/// # Errors
/// A failed allocation, or what a key's `__eq__` raised while a copy was filled.
pub fn frozen<'py>(_: MayRunPython, messages: &[PyNode<'py>]) -> PyResult<Vec<PyNode<'py>>> {
    messages.iter().map(|message| frozen_message(before_python(), message)).collect()
}

/// One message as [`frozen`] reads it.
///
/// # Errors
/// As [`frozen`].
pub fn frozen_message<'py>(_: MayRunPython, message: &PyNode<'py>) -> PyResult<PyNode<'py>> {
    // Read as the core reads a message (its storage, never a subclass's methods).
    let lists: Vec<_> = [Key::Content, Key::ToolCalls]
        .into_iter()
        .filter_map(|key| Some((key, message.get(key)?.0.cast_into::<PyList>().ok()?)))
        .collect();
    if lists.is_empty() {
        return Ok(message.clone());
    }
    // An exact dict is merged into one made first (no key's code runs): `PyDict_Copy`
    // sizes a split table's copy before it allocates it, and a collection run there (see
    // `list_copy`) could leave it reading values that are gone. A subclass, its storage.
    let copy = match message.0.cast_exact::<PyDict>() {
        Ok(dict) => {
            let out = PyDict::new(dict.py());
            out.update(dict.as_mapping())?;
            out
        }
        Err(_) => copied(&message.0)?,
    };
    for (key, list) in lists {
        copy.set_item(key.as_str(), list_copy(&list)?)?;
    }
    Ok(PyNode(copy.into_any()))
}

/// A new list of `list`'s items (its storage's), read once the new list is made.
/// CPython's own slice (`PyList_GetSlice`, `list.copy`) takes the length first and
/// allocates after, so on 3.10 and 3.11 a collection that allocation runs (a finaliser
/// or `gc` callback that empties the list) leaves it reading items that are gone
/// (python/cpython#75348). Appending makes no Python object: no Python code runs while
/// the items are read.
fn list_copy<'py>(list: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(list.py());
    let mut i = 0;
    while i < list.len() {
        out.append(list.get_item(i)?)?;
        i += 1;
    }
    Ok(out)
}

/// Whether [`as_output`] builds the edited messages of `packed` from the caller's own
/// (`messages`) without running any of the caller's code: every dict it copies on the
/// way to a changed value (an edited message, its blocks and calls, a call's `function`)
/// has exact str keys only, so no key's `__eq__` runs as it is copied or looked up. Such
/// code could otherwise reorder a list between the edits' planning and the build, and
/// move an edit.
pub fn builds_in_place(messages: &[PyNode<'_>], packed: &Packed) -> bool {
    let exact = |value: &Bound<'_, PyAny>| value.cast::<PyDict>().is_ok_and(crate::node::keys_are_exact_strs);
    // The dicts of a message's `content` or `tool_calls` list (blocks, calls), and a
    // call's `function` dict (read once the call's own keys are known to be exact).
    let items_exact = |message: &PyNode<'_>, key: Key| {
        let Some(Ok(list)) = message.get(key).map(|list| list.0.cast_into::<PyList>()) else { return true };
        list.iter().filter(|item| item.is_instance_of::<PyDict>()).all(|item| {
            exact(&item)
                && PyNode(item).get(Key::Function).is_none_or(|f| !f.0.is_instance_of::<PyDict>() || exact(&f.0))
        })
    };
    packed.kept.iter().filter(|&&i| packed.edits.edit(i).is_some()).all(|&i| {
        messages.get(i).is_some_and(|m| exact(&m.0) && items_exact(m, Key::Content) && items_exact(m, Key::ToolCalls))
    })
}

/// The kept messages (the caller's own, in `packed.kept` order) as the output holds them:
/// each one an edit changed built anew, from the copy in `frozen` the edits planned on
/// where there is one (empty: none), else from one made now the same way, so that an
/// edited message holds none of the caller's `content` and `tool_calls` lists whichever
/// way the edits planned (as the reference's, which always plans on copies).
///
/// # Errors
/// A failed allocation, or a message changed so that its edits no longer fit it.
pub fn as_output<'py>(
    _: MayRunPython,
    py: Python<'py>,
    mut kept: Vec<Bound<'py, PyAny>>,
    packed: &Packed,
    frozen: &[PyNode<'py>],
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if packed.edits.is_empty() {
        return Ok(kept);
    }
    for (message, &i) in kept.iter_mut().zip(&packed.kept) {
        if packed.edits.edit(i).is_some() {
            let source = match frozen.get(i) {
                Some(copy) => copy.clone(),
                None => frozen_message(before_python(), &PyNode(message.clone()))?,
            };
            *message = to_object(before_python(), py, &packed.edits.view(i, source))?;
        }
    }
    Ok(kept)
}

/// A new dict with `value`'s entries, as its storage holds them: a subclass's own
/// methods (`keys`, `__getitem__`, `__iter__`) are not called, as the reference's
/// `dict(list(dict.items(value)))` calls none. The entries are listed first: inserting a
/// key may run its `__eq__`, which may change the dict they come from.
fn copied<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let dict = value.cast::<PyDict>().map_err(|_| changed())?;
    let out = PyDict::new(dict.py());
    for entry in dict.items().iter() {
        let (key, item) = entry.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()?;
        out.set_item(key, item)?;
    }
    Ok(out)
}

/// The error for a message whose content changed (Python code ran during the call) so
/// that the edits planned for it no longer fit it.
#[cold]
fn changed() -> PyErr {
    crate::errors::argument(contextfold_core::error::MESSAGE_CHANGED.into())
}

/// A copy of the dict `value` with member `key` replaced by `new`.
fn with<'py>(value: &Bound<'py, PyAny>, key: &str, new: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let out = copied(value)?;
    out.set_item(key, new)?;
    Ok(out)
}

fn substitute<'py>(py: Python<'py>, value: Substitute<'_>) -> Bound<'py, PyAny> {
    match value {
        Substitute::Str(text) => PyString::new(py, text).into_any(),
        Substitute::EmptyObject => PyDict::new(py).into_any(),
    }
}
