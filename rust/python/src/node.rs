//! [`PyNode`]: the core's accessor trait over a borrowed Python value.

use contextfold_core::{JsonNode, Key, Problem, Shape, Text, View};
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
        // SAFETY (each cast_unchecked): `shape` has just checked the type.
        Ok(match self.shape() {
            Shape::Str => {
                View::Str(text_of(unsafe { v.cast_unchecked::<PyString>() }).ok_or_else(|| self.wrong_type())?)
            }
            Shape::Object => {
                let d = unsafe { v.cast_unchecked::<PyDict>() };
                View::Object { entries: d.iter().map(wrap_pair as fn(_) -> _), len: d.len() }
            }
            Shape::Array => {
                let l = unsafe { v.cast_unchecked::<PyList>() };
                View::Array { items: l.iter().map(PyNode as fn(_) -> _), len: l.len() }
            }
            Shape::Null => View::Null,
            Shape::Bool => View::Bool(v.is_truthy().unwrap_or(false)),
            Shape::Number if PyFloat::is_type_of(v) => View::Float(unsafe { v.cast_unchecked::<PyFloat>() }.value()),
            Shape::Number => match v.extract::<i64>() {
                Ok(i) => View::Int(i),
                // JavaScript holds the number as a double: too large for one is Infinity.
                Err(_) => View::Float(v.extract::<f64>().unwrap_or(f64::INFINITY)),
            },
            Shape::Other => return Err(self.wrong_type()),
        })
    }

    fn shape(&self) -> Shape {
        let v = &self.0;
        if PyString::is_type_of(v) {
            Shape::Str
        } else if PyDict::is_type_of(v) {
            Shape::Object
        } else if PyList::is_type_of(v) {
            Shape::Array
        } else if v.is_none() {
            Shape::Null
        } else if PyBool::is_type_of(v) {
            Shape::Bool
        } else if PyInt::is_type_of(v) || PyFloat::is_type_of(v) {
            Shape::Number
        } else {
            Shape::Other
        }
    }

    fn get(&self, k: Key) -> Option<Self> {
        if !PyDict::is_type_of(&self.0) {
            return None;
        }
        // SAFETY: checked to be a dict just above.
        let dict = unsafe { self.0.cast_unchecked::<PyDict>() };
        dict.get_item(key(dict.py(), k)).ok().flatten().map(PyNode)
    }

    fn type_name(&self) -> String {
        self.0.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
    }
}

impl PyNode<'_> {
    fn wrong_type(&self) -> Problem {
        Problem::WrongType {
            expected: "a JSON value (None, bool, int, float, str, list or dict)",
            got: self.type_name(),
        }
    }
}
