//! The caller's estimator, as the core's [`MessageSizer`].
//!
//! With no estimator the core's chars/4 rule (seed or provider sizing) runs natively, and so does a named encoding
//! (`"o200k_base"`, `"cl100k_base"`), counted by the core with the GIL released for long
//! texts. A custom estimator is a Python callable, so each message is sized by
//! `contextfold._contract`'s helpers (the same code the reference backend runs); an
//! exception it raises is kept and re-raised unchanged. An estimator may call contextfold
//! again, each level a native frame deeper: [`check_stack`] turns running out of stack
//! into `RecursionError`, not a crash.

use crate::borrow::{before_python, MayRunPython};
use crate::node::PyNode;
use contextfold_core::edits::Edited;
use contextfold_core::encoding::{Encoding, ExactTokens};
use contextfold_core::message::Checked;
use contextfold_core::provider::Sizing;
use contextfold_core::tokens::{CharsPerToken, MessageSizer, MESSAGE_OVERHEAD};
use contextfold_core::JsonNode;
use contextfold_core::{CoreError, Text};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

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
    py: Python<'py>,
    estimate: Estimate<'py>,
    /// How messages are sized without an estimator.
    sizing: Sizing,
    error: Option<PyErr>,
}

impl<'py> PySizer<'py> {
    /// The interpreter it sizes for.
    pub fn py(&self) -> Python<'py> {
        self.py
    }

    /// Whether other Python code may run while sizing: a custom estimator's, or another
    /// thread's while an exact count has the GIL released for a long text.
    pub fn lets_python_run(&self) -> bool {
        !matches!(self.estimate, Estimate::CharsPerToken)
    }
}

/// The embedded encoding `name` names.
///
/// # Errors
/// `ArgumentError` naming the encodings there are.
pub fn encoding(name: &str) -> PyResult<Encoding> {
    Encoding::from_name(name).ok_or_else(|| {
        let names = contextfold_core::encoding::ENCODING_NAMES.join("', '");
        crate::errors::argument(format!("unknown encoding '{name}': expected one of '{names}'"))
    })
}

/// Counts `text` with `encoding`, releasing the GIL when the text is long.
pub fn count(py: Python<'_>, encoding: Encoding, text: Text<'_>, transcoded: &mut String) -> usize {
    if text.utf16_len() < DETACH_UNITS {
        encoding.count(text, transcoded)
    } else {
        // Other threads run meanwhile.
        detached(before_python(), py, || encoding.count(text, transcoded))
    }
}

/// `f` run with the GIL released.
fn detached<T: Send>(_: MayRunPython, py: Python<'_>, f: impl pyo3::marker::Ungil + FnOnce() -> T) -> T {
    py.detach(f)
}

/// A custom estimator's helper called with `args`.
fn called<'py>(
    _: MayRunPython,
    helper: &Bound<'py, PyAny>,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    helper.call1(args)
}

impl<'py> PySizer<'py> {
    /// A sizer for `estimate`: `None`, an encoding name, or the pair of helpers
    /// `contextfold._contract` builds.
    ///
    /// # Errors
    /// An unknown encoding name.
    pub fn new(py: Python<'py>, estimate: Option<Bound<'py, PyAny>>, sizing: Sizing) -> PyResult<Self> {
        let estimate = match estimate {
            None => Estimate::CharsPerToken,
            Some(name) if name.is_instance_of::<PyString>() => {
                Estimate::Exact(ExactTokens::new(encoding(&name.extract::<String>()?)?, sizing))
            }
            Some(pair) => match pair.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>() {
                Ok((per_message, per_text)) => Estimate::Custom(per_message, per_text),
                Err(_) => Estimate::CharsPerToken,
            },
        };
        Ok(Self { py, estimate, sizing, error: None })
    }

    /// The Python exception for `err`: the one a callback raised, else the mapped core error.
    pub fn take_error(&mut self, err: CoreError) -> PyErr {
        match (err, self.error.take()) {
            (CoreError::Callback { .. }, Some(py_err)) => py_err,
            (err, _) => crate::errors::to_py(err),
        }
    }

    /// Tokens of a message passed alone: its errors name no index.
    ///
    /// # Errors
    /// What sizing a message in a transcript raises, without the index; the estimator's
    /// own exception unchanged.
    pub fn lone_message_tokens(&mut self, message: &PyNode<'py>, checked: &Checked<PyNode<'py>>) -> PyResult<u64> {
        self.message_tokens(None, message, checked).map_err(|err| self.take_error(err))
    }

    fn call(&mut self, result: PyResult<Bound<'py, PyAny>>) -> Result<u64, CoreError> {
        match result.and_then(|r| r.extract::<u64>()) {
            Ok(n) => Ok(n),
            Err(e) => {
                let malformed = crate::errors::is_message_error(self.py, &e);
                self.error = Some(e);
                Err(CoreError::Callback { malformed })
            }
        }
    }
}

/// A node that stands for a Python value: what a custom estimator is handed.
pub trait PyValue<'py>: JsonNode {
    /// The value (built anew for an edited one).
    ///
    /// # Errors
    /// A failed allocation.
    fn value(&self, run: MayRunPython, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

impl<'py> PyValue<'py> for PyNode<'py> {
    fn value(&self, _: MayRunPython, _: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(self.0.clone())
    }
}

impl<'py> PyValue<'py> for Edited<'_, PyNode<'py>> {
    fn value(&self, run: MayRunPython, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::edited::to_object(run, py, self)
    }
}

impl<'py, N: PyValue<'py>> MessageSizer<N> for PySizer<'py> {
    fn message_tokens(&mut self, index: Option<usize>, message: &N, checked: &Checked<N>) -> Result<u64, CoreError> {
        match &mut self.estimate {
            Estimate::CharsPerToken => self.sizing.message_tokens(index, message, checked),
            Estimate::Exact(exact) => {
                let py = self.py;
                let counted = exact
                    .counted(message, checked, |encoding, text, transcoded| count(py, encoding, text, transcoded))?;
                Ok(counted.saturating_add(MESSAGE_OVERHEAD))
            }
            Estimate::Custom(per_message, _) => {
                let whole = checked.item.sized_whole();
                let value = message.value(before_python(), self.py);
                let result = value.and_then(|value| called(before_python(), per_message, (index, value, whole)));
                self.call(result)
            }
        }
    }

    fn system_tokens(&mut self, checked: &Checked<N>) -> Result<u64, CoreError> {
        match &mut self.estimate {
            Estimate::CharsPerToken => <Sizing as MessageSizer<N>>::system_tokens(&mut self.sizing, checked),
            Estimate::Exact(exact) => <ExactTokens as MessageSizer<N>>::system_tokens(exact, checked),
            Estimate::Custom(per_message, _) => {
                // The estimator sees the system message the prompt stands for.
                let run = before_python();
                let py = self.py;
                let message = PyDict::new(py);
                let content = match checked.content.as_ref() {
                    Some(content) => content.value(before_python(), py),
                    None => Ok(py.None().into_bound(py)),
                };
                let result = message
                    .set_item(intern!(py, "role"), intern!(py, "system"))
                    .and_then(|()| message.set_item(intern!(py, "content"), content?))
                    .and_then(|()| called(run, per_message, (py.None(), message, false)));
                self.call(result)
            }
        }
    }

    fn calls_out(&self) -> bool {
        matches!(self.estimate, Estimate::Custom(..))
    }

    fn splits_before_dash_lines(&self) -> bool {
        matches!(self.estimate, Estimate::Exact(_))
    }

    fn units_tokens(&self, units: usize) -> Option<u64> {
        matches!(self.estimate, Estimate::CharsPerToken).then(|| contextfold_core::tokens::estimate_units(units))
    }

    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
        match &mut self.estimate {
            Estimate::CharsPerToken => <CharsPerToken as MessageSizer<N>>::text_tokens(&mut CharsPerToken, text),
            Estimate::Exact(exact) => <ExactTokens as MessageSizer<N>>::text_tokens(exact, text),
            Estimate::Custom(_, per_text) => {
                let result = called(before_python(), per_text, (text,));
                self.call(result)
            }
        }
    }
}

/// Stack left below which a call that runs an estimator raises `RecursionError`: room
/// for one more level of packing plus the interpreter's unwinding.
#[cfg(target_os = "linux")]
const STACK_MARGIN: usize = 64 * 1024;

/// The lowest address of this thread's stack (it grows down), read once a thread.
#[cfg(target_os = "linux")]
fn stack_floor() -> Option<usize> {
    thread_local! {
        static FLOOR: Option<usize> = {
            let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
            // SAFETY: `attr` is initialised by pthread_getattr_np before it is read, and
            // destroyed after; the out-pointers are valid locals.
            unsafe {
                if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
                    None
                } else {
                    let (mut addr, mut size) = (std::ptr::null_mut(), 0);
                    let got = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size);
                    libc::pthread_attr_destroy(attr.as_mut_ptr());
                    (got == 0).then_some(addr as usize)
                }
            }
        };
    }
    FLOOR.with(|floor| *floor)
}

/// `RecursionError` when this thread's stack is nearly used up (an estimator re-entering
/// contextfold again and again), as the reference hits the interpreter's limit.
///
/// # Errors
/// `RecursionError` with less than [`STACK_MARGIN`] of stack left.
pub fn check_stack() -> PyResult<()> {
    #[cfg(target_os = "linux")]
    {
        let here = 0u8;
        let at = std::ptr::addr_of!(here) as usize;
        if stack_floor().is_some_and(|floor| at < floor.saturating_add(STACK_MARGIN)) {
            return Err(pyo3::exceptions::PyRecursionError::new_err(
                "maximum recursion depth exceeded: an estimator re-entered contextfold past this thread's stack",
            ));
        }
    }
    Ok(())
}
