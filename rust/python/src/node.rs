//! [`PyNode`]: the core's accessor trait over a borrowed Python value.

use crate::borrow::MayRunPython;
use contextfold_core::text::holds_at;
use contextfold_core::{JsonNode, JsonType, Key, MessageFields, Problem, Text, View};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};
use pyo3::PyTypeInfo;
use std::cell::Cell;

thread_local! {
    /// The first exception caller code raised while this thread read values as JSON (a
    /// key's `__eq__` in a lookup, an interrupt in a number's `__index__`). The core's
    /// accessor trait has no room for it: the read goes on as if the key were absent or
    /// the value no number, and [`raising`] raises it when the call is done.
    static RAISED: Cell<Option<PyErr>> = const { Cell::new(None) };
}

/// Keeps `err` for [`raising`], unless an earlier one is kept (the first raised wins; the
/// other is dropped, which may run a finaliser).
fn keep_raised(_: MayRunPython, err: PyErr) {
    let _ = RAISED.try_with(|slot| {
        let first = slot.take();
        slot.set(first.or(Some(err)));
    });
}

/// Runs `read`, a call that reads Python values as JSON, and returns in place of its
/// outcome the first exception caller code raised meanwhile, as the reference raises it.
/// A call made from within (by an estimator) raises its own, not the caller's.
pub fn raising<T>(read: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    let outer = RAISED.take();
    let outcome = read();
    match RAISED.replace(outer) {
        Some(err) => Err(err),
        None => outcome,
    }
}

/// Leave for a read that may run the caller's own code, noted as such (a dict lookup
/// does whenever a key that is not an exact str could share the wanted key's hash, which
/// only a walk over the keys would rule out).
fn caller_code() -> MayRunPython {
    crate::borrow::runs_caller_code(crate::borrow::before_python())
}

/// A Python value read as JSON: `None`, `bool`, `int`, `float`, `str`, `list`, `dict`.
#[derive(Clone)]
#[repr(transparent)]
pub struct PyNode<'py>(pub Bound<'py, PyAny>);

/// The string's data as the core's [`Text`], borrowed in place.
pub fn text_of<'a>(s: &'a Bound<'_, PyString>) -> Option<Text<'a>> {
    // SAFETY: `s` is a str, and its data lives (unchanged: str is immutable) as long as `s`.
    unsafe { text_at(s.as_ptr()) }
}

/// The data of the str at `ptr`, borrowed for `'a`.
///
/// # Safety
/// `ptr` must be a `str` that stays alive for `'a`.
pub unsafe fn text_at<'a>(ptr: *mut pyo3::ffi::PyObject) -> Option<Text<'a>> {
    use pyo3::ffi;
    unsafe {
        // A no-op from Python 3.12 on; before it, readies a legacy string.
        #[allow(deprecated)]
        if ffi::PyUnicode_READY(ptr) != 0 {
            ffi::PyErr_Clear();
            return None;
        }
        let len = usize::try_from(ffi::PyUnicode_GET_LENGTH(ptr)).ok()?;
        let data = ffi::PyUnicode_DATA(ptr);
        Some(match ffi::PyUnicode_KIND(ptr) {
            ffi::PyUnicode_1BYTE_KIND => Text::Latin1(std::slice::from_raw_parts(data.cast::<u8>(), len)),
            ffi::PyUnicode_2BYTE_KIND => Text::Ucs2(std::slice::from_raw_parts(data.cast::<u16>(), len)),
            _ => Text::Ucs4(std::slice::from_raw_parts(data.cast::<u32>(), len)),
        })
    }
}

/// Calls `f` on a Python string's data.
pub fn with_text<T>(s: &Bound<'_, PyString>, f: impl FnOnce(Text<'_>) -> T) -> PyResult<T> {
    text_of(s).map(f).ok_or_else(|| crate::errors::internal("unreadable str data"))
}

/// Every message key as an interned str, by `Key as usize`. Made when the module is
/// imported ([`load`]), not on first use: pyo3 releases the GIL while it first fills a
/// lazy static, and keys are read while a snapshot borrows the caller's items, when no
/// other thread may run (it could free them).
static KEYS: PyOnceLock<[Py<PyString>; Key::ALL.len()]> = PyOnceLock::new();

fn keys(py: Python<'_>) -> &[Py<PyString>; Key::ALL.len()] {
    KEYS.get_or_init(py, || Key::ALL.map(|k| PyString::intern(py, k.as_str()).unbind()))
}

// In bounds: `Key::ALL` holds each key at its discriminant (a core test checks).
#[allow(clippy::indexing_slicing)]
fn key<'py>(py: Python<'py>, key: Key) -> &'py Bound<'py, PyString> {
    keys(py)[key as usize].bind(py)
}

/// Makes the message keys now (the module is being imported): see [`KEYS`].
pub fn load(py: Python<'_>) {
    let _ = keys(py);
}

/// A list's items. Reads `ob_item` directly: a plain index walk, one new reference an
/// item, and a bounds check against the live length (a list cannot change while the
/// GIL is held by this thread, but the check costs nothing).
pub struct ListItems<'py> {
    list: Bound<'py, PyList>,
    next: usize,
}

impl<'py> Iterator for ListItems<'py> {
    type Item = PyNode<'py>;

    fn next(&mut self) -> Option<PyNode<'py>> {
        let i = self.next;
        if i >= self.list.len() {
            return None;
        }
        self.next += 1;
        // SAFETY: `i` is in bounds; PyList_GET_ITEM returns a borrowed reference that we
        // turn into an owned one at once.
        let item = unsafe { pyo3::ffi::PyList_GET_ITEM(self.list.as_ptr(), i as pyo3::ffi::Py_ssize_t) };
        Some(PyNode(unsafe { Bound::from_borrowed_ptr(self.list.py(), item) }))
    }
}

/// A dict's entries, by `PyDict_Next`. The caller's code run while they are read (a
/// number's `__index__`, a finaliser) may change the dict: the walk then ends, and
/// [`raising`] raises what Python's own iteration raises (`_js.DICT_KEYS_CHANGED` in
/// the reference), for an entry passed over too.
pub struct DictEntries<'py> {
    dict: Bound<'py, PyDict>,
    pos: pyo3::ffi::Py_ssize_t,
    /// The dict's size when the walk began, and how many entries are still to come.
    size: usize,
    left: usize,
}

impl<'py> DictEntries<'py> {
    fn new(dict: &Bound<'py, PyDict>) -> Self {
        let size = dict.len();
        DictEntries { dict: dict.clone(), pos: 0, size, left: size }
    }

    #[cold]
    fn changed(what: &'static str) -> Option<(PyNode<'py>, PyNode<'py>)> {
        keep_raised(crate::borrow::before_python(), pyo3::exceptions::PyRuntimeError::new_err(what));
        None
    }
}

impl<'py> Iterator for DictEntries<'py> {
    type Item = (PyNode<'py>, PyNode<'py>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.dict.len() != self.size {
            return Self::changed(SIZE_CHANGED);
        }
        let (mut k, mut v) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: a valid dict; PyDict_Next hands out borrowed references, which we turn
        // into owned ones before anything can run Python code.
        if unsafe { pyo3::ffi::PyDict_Next(self.dict.as_ptr(), &mut self.pos, &mut k, &mut v) } == 0 {
            return if self.left == 0 { None } else { Self::changed(KEYS_CHANGED) };
        }
        if self.left == 0 {
            return Self::changed(KEYS_CHANGED);
        }
        self.left -= 1;
        let py = self.dict.py();
        Some(unsafe { (PyNode(Bound::from_borrowed_ptr(py, k)), PyNode(Bound::from_borrowed_ptr(py, v))) })
    }
}

const SIZE_CHANGED: &str = "dictionary changed size during iteration";
const KEYS_CHANGED: &str = "dictionary keys changed during iteration";

/// The JSON type of a Python value, by its type flags (no failed casts).
pub fn json_type_of(v: &Bound<'_, PyAny>) -> JsonType {
    if PyString::is_type_of(v) {
        JsonType::Str
    } else if PyDict::is_type_of(v) {
        JsonType::Object
    } else if PyList::is_type_of(v) {
        JsonType::Array
    } else if v.is_none() {
        JsonType::Null
    } else if PyBool::is_type_of(v) {
        JsonType::Bool
    } else if PyInt::is_type_of(v) || PyFloat::is_type_of(v) || has_index(v) {
        JsonType::Number
    } else {
        JsonType::Other
    }
}

/// Whether the value's type defines `__index__` (a `numpy.int64`): a number by the int
/// it returns, as the reference reads it.
fn has_index(v: &Bound<'_, PyAny>) -> bool {
    // SAFETY: a live object's type; we only read its number slots.
    unsafe {
        let numbers = (*pyo3::ffi::Py_TYPE(v.as_ptr())).tp_as_number;
        !numbers.is_null() && (*numbers).nb_index.is_some()
    }
}

/// An exact `int` that fits an i64, read without raising (so without allocating).
fn small_int(v: &Bound<'_, PyAny>) -> Option<i64> {
    use pyo3::ffi;
    // SAFETY: an exact int; PyLong_AsLongAndOverflow reports overflow in `overflow`
    // without setting an exception, and cannot fail otherwise on an int.
    unsafe {
        if ffi::PyLong_CheckExact(v.as_ptr()) == 0 {
            return None;
        }
        let mut overflow = 0;
        let value = ffi::PyLong_AsLongAndOverflow(v.as_ptr(), &mut overflow);
        #[allow(clippy::useless_conversion)] // a C long is 32 bits on Windows
        (overflow == 0).then(|| i64::from(value))
    }
}

/// The int a non-`int` number stands for (its `__index__`); `None` when that raises: an
/// `Exception` makes the value no number, anything else (an interrupt) is kept for
/// [`raising`].
fn index_of<'py>(run: MayRunPython, v: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    // SAFETY: PyNumber_Index returns a new reference or NULL with an exception set,
    // which `from_owned_ptr_or_err` takes over.
    match unsafe { Bound::from_owned_ptr_or_err(v.py(), pyo3::ffi::PyNumber_Index(v.as_ptr())) } {
        Ok(int) => Some(int),
        Err(err) => {
            if !err.is_instance_of::<PyException>(v.py()) {
                keep_raised(run, err);
            }
            None
        }
    }
}

/// A number that is not a small exact int (an int subclass, a large int, an
/// `__index__` type): Python code or allocations read it. An int (a subclass too) is read
/// through its storage, as `json.dumps` reads it. `None` when `__index__` fails.
fn number<'py>(_: MayRunPython, v: &Bound<'py, PyAny>) -> Option<View<'static, PyNode<'py>>> {
    let int = if PyInt::is_type_of(v) { v.clone() } else { index_of(caller_code(), v)? };
    Some(match int.extract::<i64>() {
        Ok(i) => View::Int(i),
        // JavaScript holds the number as a double: too large for one is Infinity.
        Err(_) => View::Float(long_as_double(&int)),
    })
}

/// The double nearest an int, read from its storage (a subclass's `__float__` is not
/// called); past a double's range +infinity whatever the sign (JSON writes `null` either
/// way).
fn long_as_double(int: &Bound<'_, PyAny>) -> f64 {
    // SAFETY: an int (or subclass); PyLong_AsDouble fails only with OverflowError, which
    // is taken and dropped here.
    unsafe {
        let value = pyo3::ffi::PyLong_AsDouble(int.as_ptr());
        if value == -1.0 && !pyo3::ffi::PyErr_Occurred().is_null() {
            pyo3::ffi::PyErr_Clear();
            return f64::INFINITY;
        }
        value
    }
}

impl<'py> JsonNode for PyNode<'py> {
    type Items = ListItems<'py>;
    type Entries = DictEntries<'py>;

    fn view(&self) -> Result<View<'_, Self>, Problem> {
        let v = &self.0;
        // SAFETY (each cast_unchecked): `shape` has just checked the type.
        Ok(match self.json_type() {
            JsonType::Str => {
                View::Str(text_of(unsafe { v.cast_unchecked::<PyString>() }).ok_or_else(|| self.wrong_type())?)
            }
            JsonType::Object => {
                let d = unsafe { v.cast_unchecked::<PyDict>() };
                let entries = DictEntries::new(d);
                View::Object { len: entries.size, entries }
            }
            JsonType::Array => {
                let l = unsafe { v.cast_unchecked::<PyList>() };
                View::Array { items: ListItems { list: l.clone(), next: 0 }, len: l.len() }
            }
            JsonType::Null => View::Null,
            JsonType::Bool => View::Bool(v.is_truthy().unwrap_or(false)),
            JsonType::Number if PyFloat::is_type_of(v) => View::Float(unsafe { v.cast_unchecked::<PyFloat>() }.value()),
            JsonType::Number => {
                if let Some(i) = small_int(v) {
                    return Ok(View::Int(i));
                }
                // `__index__`, `__float__` and the overflow error are Python code or
                // allocations.
                number(crate::borrow::before_python(), v).ok_or_else(|| self.wrong_type())?
            }
            JsonType::Other => return Err(self.wrong_type()),
        })
    }

    fn json_type(&self) -> JsonType {
        json_type_of(&self.0)
    }

    fn as_text(&self) -> Option<Text<'_>> {
        // SAFETY (cast_unchecked): checked to be a str first.
        PyString::is_type_of(&self.0).then(|| text_of(unsafe { self.0.cast_unchecked::<PyString>() })).flatten()
    }

    fn get(&self, k: Key) -> Option<Self> {
        if !PyDict::is_type_of(&self.0) {
            return None;
        }
        // SAFETY: checked to be a dict just above.
        let dict = unsafe { self.0.cast_unchecked::<PyDict>() };
        let wanted = key(dict.py(), k);
        if dict.len() > SCANNED_ENTRIES {
            return looked_up(caller_code(), dict, wanted);
        }
        // A message has a handful of keys, `role` usually first: a walk over its entries
        // finds one sooner than a hash lookup, and never runs Python code.
        let (mut pos, mut kp, mut v) = (0, std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: PyDict_Next hands out borrowed references, valid while nothing runs
        // Python code; the value's is turned into an owned one at once. Nothing changes
        // the dict meanwhile, so the walk ends at its size (no call to find the end).
        for _ in 0..dict.len() {
            if unsafe { pyo3::ffi::PyDict_Next(dict.as_ptr(), &mut pos, &mut kp, &mut v) } == 0 {
                break;
            }
            // Any other key may or may not be found by a lookup: leave it to the dict.
            if unsafe { pyo3::ffi::PyUnicode_CheckExact(kp) } == 0 {
                return looked_up(caller_code(), dict, wanted);
            }
            if kp == wanted.as_ptr() || unsafe { spells(kp, k.as_str()) } {
                return Some(PyNode(unsafe { Bound::from_borrowed_ptr(dict.py(), v) }));
            }
        }
        None
    }

    fn message_fields(&self) -> MessageFields<Self> {
        let mut out = MessageFields { role: None, content: None, tool_calls: None, kind: None };
        if !PyDict::is_type_of(&self.0) {
            return out;
        }
        // SAFETY: checked to be a dict just above.
        let dict = unsafe { self.0.cast_unchecked::<PyDict>() };
        let walked = walk_message_keys(dict, |key, value| {
            let slot = match key {
                Key::Role => &mut out.role,
                Key::Content => &mut out.content,
                Key::ToolCalls => &mut out.tool_calls,
                _ => &mut out.kind,
            };
            *slot = Some(value);
            true
        });
        if walked {
            out
        } else {
            self.looked_up_fields()
        }
    }

    fn role_and_content(&self) -> (Option<Self>, Option<Option<Self>>) {
        if !PyDict::is_type_of(&self.0) {
            return (None, Some(None));
        }
        // SAFETY: checked to be a dict just above.
        let dict = unsafe { self.0.cast_unchecked::<PyDict>() };
        // A lookup may run a key's `__eq__`: `role` alone is looked up, as `get` would.
        if dict.len() > SCANNED_ENTRIES {
            return (self.get(Key::Role), None);
        }
        let (mut role, mut content) = (None, None);
        let walked = walk_message_keys(dict, |key, value| {
            match key {
                Key::Role => role = Some(value),
                Key::Content => content = Some(value),
                _ => {}
            }
            role.is_none() || content.is_none()
        });
        if walked {
            (role, Some(content))
        } else {
            (self.get(Key::Role), None)
        }
    }

    fn foreign_code_runs() -> u64 {
        crate::borrow::caller_code_runs()
    }

    fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch only hints; any address is allowed.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.0.as_ptr().cast());
        }
    }

    fn type_name(&self) -> String {
        type_name_of(caller_code(), &self.0)
    }
}

/// Walks `dict`'s entries, handing `take` each of the four message keys met (`role`,
/// `content`, `tool_calls`, `type`, told by their text) with its value, until `take`
/// says it has what it wants. `false` when a key is not an exact str: a str subclass
/// with its own hash, or an object equal to "role", may or may not be found by a lookup,
/// which the caller then leaves to the dict.
#[inline(always)]
fn walk_message_keys<'py>(dict: &Bound<'py, PyDict>, mut take: impl FnMut(Key, PyNode<'py>) -> bool) -> bool {
    let py = dict.py();
    let (mut pos, mut k, mut v) = (0, std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: PyDict_Next hands out borrowed references that stay valid while the dict
    // is not mutated, which nothing does while we hold the GIL and run no Python code
    // (so the walk ends at its size, with no call to find the end).
    for _ in 0..dict.len() {
        if unsafe { pyo3::ffi::PyDict_Next(dict.as_ptr(), &mut pos, &mut k, &mut v) } == 0 {
            break;
        }
        if unsafe { pyo3::ffi::PyUnicode_CheckExact(k) } == 0 {
            return false;
        }
        // SAFETY: `k` is an exact str; `v` a valid borrowed reference (see above), of
        // which we take a new one.
        if let Some(which) = unsafe { key_named(k) } {
            if !take(which, PyNode(unsafe { Bound::from_borrowed_ptr(py, v) })) {
                break;
            }
        }
    }
    true
}

/// Whether every key of `dict` is an exact `str`: then no key's code runs as it is
/// copied, or looked up by a str.
pub fn keys_are_exact_strs(dict: &Bound<'_, PyDict>) -> bool {
    let (mut pos, mut key, mut value) = (0, std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: a dict; PyDict_Next lends references, only read here, and nothing runs
    // Python code meanwhile.
    while unsafe { pyo3::ffi::PyDict_Next(dict.as_ptr(), &mut pos, &mut key, &mut value) } != 0 {
        if unsafe { pyo3::ffi::PyUnicode_CheckExact(key) } == 0 {
            return false;
        }
    }
    true
}

/// Dicts of at most this many entries are searched by a walk over them (see `get`);
/// larger ones (a LangChain message's dict) by a lookup, which owns the snapshot first.
const SCANNED_ENTRIES: usize = 8;

/// `dict.get(key)`: may run Python code (a key's `__eq__`), whose exception is kept for
/// [`raising`].
fn looked_up<'py>(run: MayRunPython, dict: &Bound<'py, PyDict>, key: &Bound<'py, PyString>) -> Option<PyNode<'py>> {
    dict.get_item(key)
        .unwrap_or_else(|err| {
            keep_raised(run, err);
            None
        })
        .map(PyNode)
}

/// The name of `value`'s type (a metaclass may compute it).
fn type_name_of(_: MayRunPython, value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
}

/// Whether the exact str `k` spells `name`: what a lookup of `name` finds.
///
/// # Safety
/// `k` must be a live exact str.
unsafe fn spells(k: *mut pyo3::ffi::PyObject, name: &str) -> bool {
    // An ASCII key's bytes are compared in place (the length tells most keys apart at
    // once); any other is read as text. A dict's keys are ready: each was hashed.
    unsafe {
        match ascii_bytes(k) {
            Some(bytes) => bytes == name.as_bytes(),
            None => text_at(k).is_some_and(|t| t.eq_ascii(name)),
        }
    }
}

/// Which of the four message keys the exact str `k` spells, compared by content (a dict
/// built by `json.loads` holds its own key objects, not the interned ones); for an exact
/// str, equal content is what a dict lookup finds.
///
/// # Safety
/// `k` must be a valid pointer to an exact `str`.
#[inline(always)]
unsafe fn key_named(k: *mut pyo3::ffi::PyObject) -> Option<Key> {
    // Told apart by length, then by four-byte words, the last one ending where the key
    // does (overlapping the one before). A byte-string match cost 32 instructions a key,
    // a third of walking one.
    let bytes = unsafe { ascii_bytes(k) }?;
    let is = |at: usize, word: &[u8; 4]| holds_at(bytes, at, word);
    match bytes.len() {
        4 if is(0, b"role") => Some(Key::Role),
        4 if is(0, b"type") => Some(Key::Type),
        7 if is(0, b"cont") && is(3, b"tent") => Some(Key::Content),
        10 if is(0, b"tool") && is(4, b"_cal") && is(6, b"alls") => Some(Key::ToolCalls),
        _ => None,
    }
}

/// The data of the exact str `k` when it is ASCII, borrowed for `'a`.
///
/// # Safety
/// `k` must be a live exact `str` that stays alive for `'a`.
unsafe fn ascii_bytes<'a>(k: *mut pyo3::ffi::PyObject) -> Option<&'a [u8]> {
    use pyo3::ffi;
    unsafe {
        if ffi::PyUnicode_IS_ASCII(k) == 0 {
            return None;
        }
        let len = usize::try_from(ffi::PyUnicode_GET_LENGTH(k)).ok()?;
        Some(std::slice::from_raw_parts(ffi::PyUnicode_1BYTE_DATA(k), len))
    }
}

impl PyNode<'_> {
    /// The message's fields by dict lookup, as `dict.get(message, key)` finds them.
    fn looked_up_fields(&self) -> MessageFields<Self> {
        MessageFields {
            role: self.get(Key::Role),
            content: self.get(Key::Content),
            tool_calls: self.get(Key::ToolCalls),
            kind: self.get(Key::Type),
        }
    }

    fn wrong_type(&self) -> Problem {
        Problem::WrongType {
            expected: "a JSON value (None, bool, int, float, str, list or dict)",
            got: self.type_name(),
        }
    }
}
