//! The caller's estimator, as the core's [`Sizer`].
//!
//! With no estimator the core's chars/4 rule runs natively. A custom estimator is a
//! Python callable, so each message is sized by `contextfold._contract`'s helpers (the
//! same code the reference backend runs); an exception it raises is kept and re-raised
//! unchanged. An estimator may call contextfold again, each level a native frame deeper:
//! [`check_stack`] turns running out of stack into `RecursionError`, not a crash.

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
