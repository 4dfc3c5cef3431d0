//! The caller's estimator, as the core's [`Sizer`].
//!
//! With no estimator the core's chars/4 rule runs natively, and so does a named encoding
//! (`"o200k_base"`, `"cl100k_base"`), counted by the core with the GIL released for long
//! texts. A custom estimator is a Python callable, so each message is sized by
//! `contextfold._contract`'s helpers (the same code the reference backend runs); an
//! exception it raises is kept and re-raised unchanged.

use crate::node::PyNode;
use contextfold_core::encoding::{message_text, Encoding, ExactTokens};
use contextfold_core::tokens::{CharsPerToken, Checked, Sizer, MESSAGE_OVERHEAD};
use contextfold_core::{CoreError, Text};
use pyo3::prelude::*;
use pyo3::types::PyString;

/// Texts at least this many UTF-16 units long are counted with the GIL released; for
/// shorter ones the release and retake would cost more than the count.
const DETACH_UNITS: usize = 1024;

enum Estimate<'py> {
    CharsPerToken,
    Exact(ExactTokens),
    /// `(per_message(index, message), per_text(text))`.
    Custom(Bound<'py, PyAny>, Bound<'py, PyAny>),
}

pub struct PySizer<'py> {
    estimate: Estimate<'py>,
    error: Option<PyErr>,
}

/// The embedded encoding `name` names.
///
/// # Errors
/// `ArgumentError` naming the encodings there are.
pub fn encoding(name: &str) -> PyResult<Encoding> {
    Encoding::from_name(name).ok_or_else(|| {
        let names = contextfold_core::encoding::ENCODING_NAMES.join("', '");
        crate::errors::ArgumentError::new_err(format!("unknown encoding {name:?}: expected one of '{names}'"))
    })
}

/// Counts `text` with `encoding`, releasing the GIL when the text is long.
pub fn count(py: Python<'_>, encoding: Encoding, text: Text<'_>, transcoded: &mut String) -> usize {
    if text.utf16_len() < DETACH_UNITS {
        encoding.count(text, transcoded)
    } else {
        py.detach(|| encoding.count(text, transcoded))
    }
}

impl<'py> PySizer<'py> {
    /// A sizer for `estimate`: `None`, an encoding name, or the pair of helpers
    /// `contextfold._contract` builds.
    ///
    /// # Errors
    /// An unknown encoding name.
    pub fn new(estimate: Option<Bound<'py, PyAny>>) -> PyResult<Self> {
        let estimate = match estimate {
            None => Estimate::CharsPerToken,
            Some(name) if name.is_instance_of::<PyString>() => {
                Estimate::Exact(ExactTokens::new(encoding(&name.extract::<String>()?)?))
            }
            Some(pair) => match pair.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>() {
                Ok((per_message, per_text)) => Estimate::Custom(per_message, per_text),
                Err(_) => Estimate::CharsPerToken,
            },
        };
        Ok(Self { estimate, error: None })
    }

    /// The Python exception for `err`: the one a callback raised, else the mapped core error.
    pub fn take_error(&mut self, err: CoreError) -> PyErr {
        match (err, self.error.take()) {
            (CoreError::Callback, Some(py_err)) => py_err,
            (err, _) => crate::errors::to_py(err),
        }
    }

    fn call(&mut self, result: PyResult<Bound<'py, PyAny>>) -> Result<u64, CoreError> {
        match result.and_then(|r| r.extract::<u64>()) {
            Ok(n) => Ok(n),
            Err(e) => {
                self.error = Some(e);
                Err(CoreError::Callback)
            }
        }
    }
}

impl<'py> Sizer<PyNode<'py>> for PySizer<'py> {
    fn message_tokens(
        &mut self,
        index: usize,
        message: &PyNode<'py>,
        checked: &Checked<PyNode<'py>>,
    ) -> Result<u64, CoreError> {
        match &mut self.estimate {
            Estimate::CharsPerToken => CharsPerToken.message_tokens(index, message, checked),
            Estimate::Exact(ExactTokens { encoding, text, transcoded }) => {
                let text = message_text(checked, text)?;
                Ok(count(message.0.py(), *encoding, text, transcoded) as u64 + MESSAGE_OVERHEAD)
            }
            Estimate::Custom(per_message, _) => {
                let result = per_message.call1((index, message.0.clone()));
                self.call(result)
            }
        }
    }

    fn units_tokens(&self, units: usize) -> Option<u64> {
        matches!(self.estimate, Estimate::CharsPerToken).then(|| contextfold_core::tokens::estimate_units(units))
    }

    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
        match &mut self.estimate {
            Estimate::CharsPerToken => <CharsPerToken as Sizer<PyNode<'py>>>::text_tokens(&mut CharsPerToken, text),
            Estimate::Exact(exact) => <ExactTokens as Sizer<PyNode<'py>>>::text_tokens(exact, text),
            Estimate::Custom(_, per_text) => {
                let result = per_text.call1((text,));
                self.call(result)
            }
        }
    }
}
