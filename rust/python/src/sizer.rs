//! The caller's estimator, as the core's [`Sizer`].
//!
//! With no estimator the core's chars/4 rule runs natively. A custom estimator is a
//! Python callable, so each message is sized by `contextfold._contract`'s helpers (the
//! same code the reference backend runs); an exception it raises is kept and re-raised
//! unchanged.

use crate::node::PyNode;
use contextfold_core::tokens::{CharsPerToken, Checked, Sizer};
use contextfold_core::CoreError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

pub struct PySizer<'py> {
    /// `(per_message(index, message), per_text(text))` for a custom estimator.
    custom: Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    error: Option<PyErr>,
}

impl<'py> PySizer<'py> {
    /// A sizer for `estimate`: `None`, or the pair of helpers `contextfold._contract` builds.
    pub fn new(estimate: Option<Bound<'py, PyAny>>) -> Self {
        let custom = estimate.and_then(|pair| pair.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>().ok());
        Self { custom, error: None }
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
        index: Option<usize>,
        message: &PyNode<'py>,
        checked: &Checked<PyNode<'py>>,
    ) -> Result<u64, CoreError> {
        match self.custom.clone() {
            None => CharsPerToken.message_tokens(index, message, checked),
            Some((per_message, _)) => {
                let result = per_message.call1((index, message.0.clone()));
                self.call(result)
            }
        }
    }

    fn system_tokens(&mut self, checked: &Checked<PyNode<'py>>) -> Result<u64, CoreError> {
        match self.custom.clone() {
            None => <CharsPerToken as Sizer<PyNode<'py>>>::system_tokens(&mut CharsPerToken, checked),
            Some((per_message, _)) => {
                // The estimator sees the system message the prompt stands for.
                let py = per_message.py();
                let message = PyDict::new(py);
                let content = checked.content.as_ref().map_or_else(|| py.None().into_bound(py), |c| c.0.clone());
                let result = message
                    .set_item(intern!(py, "role"), intern!(py, "system"))
                    .and_then(|()| message.set_item(intern!(py, "content"), content))
                    .and_then(|()| per_message.call1((py.None(), message)));
                self.call(result)
            }
        }
    }

    fn units_tokens(&self, units: usize) -> Option<u64> {
        self.custom.is_none().then(|| contextfold_core::tokens::estimate_units(units))
    }

    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
        match self.custom.clone() {
            None => <CharsPerToken as Sizer<PyNode<'py>>>::text_tokens(&mut CharsPerToken, text),
            Some((_, per_text)) => {
                let result = per_text.call1((text,));
                self.call(result)
            }
        }
    }
}
