//! [`PyNode`]: the core's accessor trait over a borrowed Python value.

use contextfold_core::{JsonNode, Key, Problem, Text, View};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};
use pyo3::{intern, PyTypeInfo};

/// A Python value read as JSON: `None`, `bool`, `int`, `float`, `str`, `list`, `dict`.
#[derive(Clone)]
pub struct PyNode<'py>(pub Bound<'py, PyAny>);

/// The string's data as the core's [`Text`], borrowed in place.
fn text_of<'a>(s: &'a Bound<'_, PyString>) -> Option<Text<'a>> {
    use pyo3::types::string::PyStringData;
    // SAFETY: the data is borrowed for as long as `s` is, and `str` is immutable.
    match unsafe { s.data() }.ok()? {
        PyStringData::Ucs1(b) => Some(Text::Latin1(b)),
        PyStringData::Ucs2(u) => Some(Text::Ucs2(u)),
        PyStringData::Ucs4(u) => Some(Text::Ucs4(u)),
    }
}

/// Calls `f` on a Python string's data.
pub fn with_text<T>(s: &Bound<'_, PyString>, f: impl FnOnce(Text<'_>) -> T) -> PyResult<T> {
    text_of(s).map(f).ok_or_else(|| pyo3::exceptions::PyValueError::new_err("unreadable str data"))
}

fn key<'py>(py: Python<'py>, key: Key) -> &'py Bound<'py, PyString> {
    match key {
        Key::Role => intern!(py, "role"),
        Key::Content => intern!(py, "content"),
        Key::ToolCalls => intern!(py, "tool_calls"),
        Key::Type => intern!(py, "type"),
        Key::Text => intern!(py, "text"),
        Key::Name => intern!(py, "name"),
        Key::Function => intern!(py, "function"),
    }
}

type ListItems<'py> = std::iter::Map<pyo3::types::iter::BoundListIterator<'py>, fn(Bound<'py, PyAny>) -> PyNode<'py>>;
type DictEntries<'py> = std::iter::Map<
    pyo3::types::iter::BoundDictIterator<'py>,
    fn((Bound<'py, PyAny>, Bound<'py, PyAny>)) -> (PyNode<'py>, PyNode<'py>),
>;

fn wrap_pair<'py>((k, v): (Bound<'py, PyAny>, Bound<'py, PyAny>)) -> (PyNode<'py>, PyNode<'py>) {
    (PyNode(k), PyNode(v))
}

impl<'py> JsonNode for PyNode<'py> {
    type Items = ListItems<'py>;
    type Entries = DictEntries<'py>;

    fn view(&self) -> Result<View<'_, Self>, Problem> {
        let v = &self.0;
        if let Ok(s) = v.cast_exact::<PyString>().or_else(|_| v.cast::<PyString>()) {
            return text_of(s).map(View::Str).ok_or_else(|| self.wrong_type());
        }
        if let Ok(d) = v.cast::<PyDict>() {
            return Ok(View::Object { entries: d.iter().map(wrap_pair as fn(_) -> _), len: d.len() });
        }
        if let Ok(l) = v.cast::<PyList>() {
            return Ok(View::Array { items: l.iter().map(PyNode as fn(_) -> _), len: l.len() });
        }
        if v.is_none() {
            return Ok(View::Null);
        }
        if let Ok(b) = v.cast::<PyBool>() {
            return Ok(View::Bool(b.is_true()));
        }
        if PyInt::is_type_of(v) {
            return Ok(match v.extract::<i64>() {
                Ok(i) => View::Int(i),
                // JavaScript holds the number as a double: too large for one is Infinity.
                Err(_) => View::Float(v.extract::<f64>().unwrap_or(f64::INFINITY)),
            });
        }
        if let Ok(f) = v.cast::<PyFloat>() {
            return Ok(View::Float(f.value()));
        }
        Err(self.wrong_type())
    }

    fn get(&self, k: Key) -> Option<Self> {
        let dict = self.0.cast::<PyDict>().ok()?;
        dict.get_item(key(dict.py(), k)).ok().flatten().map(PyNode)
    }

    fn type_name(&self) -> String {
        self.0.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
    }

    fn is_object(&self) -> bool {
        self.0.cast::<PyDict>().is_ok()
    }
}

impl PyNode<'_> {
    fn wrong_type(&self) -> Problem {
        Problem::WrongType { expected: "a JSON value (None, bool, int, float, str, list or dict)", got: self.type_name() }
    }
}
