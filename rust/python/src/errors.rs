//! Core errors as the exception classes of `contextfold.errors` (defined once, in Python).
//!
//! Each class is looked up on first use and kept, as the reference's imports are. A
//! lookup that fails (the module or class patched away) becomes the error raised instead
//! of the intended one; a class that is not an exception becomes CPython's `TypeError`
//! ("exceptions must derive from BaseException"). Never an abort.

use crate::borrow::MayRunPython;
use contextfold_core::{CoreError, Problem};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use pyo3::PyErrArguments;

/// A class of `contextfold.errors`.
#[derive(Clone, Copy)]
enum Class {
    Contextfold,
    Message,
    MessageType,
    MessageValue,
    Argument,
    ArgumentType,
    Request,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Contextfold => "ContextfoldError",
            Class::Message => "MessageError",
            Class::MessageType => "MessageTypeError",
            Class::MessageValue => "MessageValueError",
            Class::Argument => "ArgumentError",
            Class::ArgumentType => "ArgumentTypeError",
            Class::Request => "RequestError",
        }
    }

    fn cell(self) -> &'static PyOnceLock<Py<PyType>> {
        static CONTEXTFOLD: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static MESSAGE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static MESSAGE_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static MESSAGE_VALUE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static ARGUMENT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static ARGUMENT_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        static REQUEST: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        match self {
            Class::Contextfold => &CONTEXTFOLD,
            Class::Message => &MESSAGE,
            Class::MessageType => &MESSAGE_TYPE,
            Class::MessageValue => &MESSAGE_VALUE,
            Class::Argument => &ARGUMENT,
            Class::ArgumentType => &ARGUMENT_TYPE,
            Class::Request => &REQUEST,
        }
    }

    /// The exception `class(*args)`.
    #[cold]
    fn err<A: PyErrArguments + Send + Sync + 'static>(self, args: A) -> PyErr {
        // Attaching applies references dropped while detached, and a failed lookup
        // imports: either may run Python code.
        self.made(crate::borrow::before_python(), args)
    }

    fn made<A: PyErrArguments + Send + Sync + 'static>(self, _: MayRunPython, args: A) -> PyErr {
        Python::attach(|py| match self.class(py) {
            Ok(class) => PyErr::from_type(class.clone(), args),
            Err(lookup) => lookup,
        })
    }

    /// The class, looked up once.
    fn class(self, py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
        self.cell().import(py, "contextfold.errors", self.name())
    }
}

/// Looks every class up now (when the extension is imported, as the reference imports
/// them), so a later patch of `contextfold.errors` reaches neither backend.
pub fn load(py: Python<'_>) {
    for class in [
        Class::Contextfold,
        Class::Message,
        Class::MessageType,
        Class::MessageValue,
        Class::Argument,
        Class::ArgumentType,
        Class::Request,
    ] {
        let _ = class.class(py);
    }
}

/// Whether `err` is a `MessageError`: a message found malformed (by the contract's
/// helpers that size it for a custom estimator, say), which packing treats as the core's
/// own. A class that cannot be looked up is no match.
pub fn is_message_error(py: Python<'_>, err: &PyErr) -> bool {
    Class::Message.class(py).is_ok_and(|class| err.is_instance(py, class))
}

/// The Python exception for a core error.
#[cold]
pub fn to_py(err: CoreError) -> PyErr {
    let text = err.to_string();
    match err {
        CoreError::Message { index, field, problem: Problem::TooDeep }
        | CoreError::Prompt { index, field, problem: Problem::TooDeep } => {
            Class::MessageValue.err((text, index, field))
        }
        CoreError::Message { index, field, .. } | CoreError::Prompt { index, field, .. } => {
            Class::MessageType.err((text, index, field))
        }
        CoreError::Argument(_) | CoreError::Callback { .. } => Class::Argument.err(text),
        CoreError::Internal(_) => Class::Contextfold.err(text),
    }
}

/// An `ArgumentError` (a bad value of an argument other than the messages).
#[cold]
pub fn argument(text: String) -> PyErr {
    Class::Argument.err(text)
}

/// An `ArgumentTypeError` (an argument other than the messages of the wrong type).
#[cold]
pub fn argument_type(text: String) -> PyErr {
    Class::ArgumentType.err(text)
}

/// A `MessageTypeError` about a message that was passed alone (no index).
#[cold]
pub fn message_type(text: String, field: &'static str) -> PyErr {
    Class::MessageType.err((text, None::<usize>, field))
}

/// A state the binding's own logic rules out; raised rather than trusted.
#[cold]
pub fn internal(what: &str) -> PyErr {
    Class::Contextfold.err(format!("internal error: {what}"))
}

/// The error for a transcript that is not a list.
#[cold]
pub fn not_a_list(value: &Bound<'_, PyAny>) -> PyErr {
    let got = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    message_type(format!("messages: expected a list, got {got}"), "")
}

/// A body that is not a JSON request (`RequestError(text, byte offset or None)`).
#[cold]
pub fn request(text: String, offset: Option<usize>) -> PyErr {
    Class::Request.err((text, offset))
}

/// `err` with a note naming the transcript it came from (`contextfold._contract.add_note`,
/// which works on every supported Python); a failure to add the note keeps `err` as is.
/// An interrupt (not an `Exception`) is no transcript's fault: it gets none.
pub fn in_transcript(py: Python<'_>, err: PyErr, index: usize) -> PyErr {
    noted(crate::borrow::before_python(), py, err, index)
}

fn noted(_: MayRunPython, py: Python<'_>, err: PyErr, index: usize) -> PyErr {
    // Asking a lazy error its class makes it, which may run Python code.
    if !err.is_instance_of::<pyo3::exceptions::PyException>(py) {
        return err;
    }
    static ADD_NOTE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    if let Ok(add_note) = ADD_NOTE.import(py, "contextfold._contract", "add_note") {
        let _ = add_note.call1((err.value(py), format!("in transcript {index}")));
    }
    err
}
