//! Core errors as the exception classes of `contextfold.errors` (defined once, in Python).

use contextfold_core::{CoreError, Problem};
use pyo3::prelude::*;

pyo3::import_exception!(contextfold.errors, MessageTypeError);
pyo3::import_exception!(contextfold.errors, MessageValueError);
pyo3::import_exception!(contextfold.errors, ArgumentError);
pyo3::import_exception!(contextfold.errors, ContextfoldError);

/// The Python exception for a core error.
#[cold]
pub fn to_py(err: CoreError) -> PyErr {
    let text = err.to_string();
    match err {
        CoreError::Message { index, field, problem: Problem::TooDeep } => {
            MessageValueError::new_err((text, index, field))
        }
        CoreError::Message { index, field, .. } => MessageTypeError::new_err((text, index, field)),
        CoreError::Argument(_) | CoreError::Callback => ArgumentError::new_err(text),
        CoreError::Internal(_) => ContextfoldError::new_err(text),
    }
}

/// The error for a transcript that is not a list.
#[cold]
pub fn not_a_list(value: &Bound<'_, PyAny>) -> PyErr {
    let got = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    MessageTypeError::new_err((format!("messages: expected a list, got {got}"), None::<usize>, ""))
}
