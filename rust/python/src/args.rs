//! `pack_handoff`'s arguments, read without a round trip through Python in the plain case.
//!
//! The rules live once, in `contextfold._contract.pack_arguments`. This module only
//! recognises arguments that are plainly valid (exact ints in range, no estimator or an
//! embedded encoding's name, pins a list or tuple of ints, known shape and cut) and reads
//! them directly; anything else goes to `pack_arguments`, which raises the error or
//! normalises the value.

use contextfold_core::encoding::Encoding;
use contextfold_core::pack::{Cut, Dialect};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyList, PyString, PyTuple};

/// `pack_handoff`'s arguments as Python passed them.
pub struct RawArgs<'py> {
    pub target: Bound<'py, PyAny>,
    pub reserve: Bound<'py, PyAny>,
    pub estimate: Bound<'py, PyAny>,
    pub pinned: Bound<'py, PyAny>,
    pub summary: Bound<'py, PyAny>,
    pub system: Bound<'py, PyAny>,
    pub shape: Bound<'py, PyAny>,
    pub cut: Bound<'py, PyAny>,
    pub chunk_tokens: Bound<'py, PyAny>,
    pub tools: Bound<'py, PyAny>,
}

/// What `pack_arguments` returns (a `PackArguments` tuple).
type Normalised<'py> = (
    Bound<'py, PyAny>,
    Option<Bound<'py, PyAny>>,
    Vec<Bound<'py, PyInt>>,
    Option<Bound<'py, PyString>>,
    Option<Bound<'py, PyAny>>,
    String,
    Option<Bound<'py, PyInt>>,
    Option<Bound<'py, PyAny>>,
);

/// The checked arguments.
pub struct PackArgs<'py> {
    /// The budget for the core (a larger Python int saturates: nothing is that long).
    pub budget: u64,
    /// The budget as the result reports it.
    pub budget_int: Bound<'py, PyAny>,
    /// An embedded encoding's name, or `contextfold._contract`'s helper pair for a custom
    /// estimator.
    pub sizers: Option<Bound<'py, PyAny>>,
    pub pinned: Vec<usize>,
    pub summary: Option<String>,
    /// The separate system prompt, still to be sized.
    pub system: Option<Bound<'py, PyAny>>,
    /// The tool definitions (checked by `pack_arguments`), still to be sized.
    pub tools: Option<Bound<'py, PyAny>>,
    pub dialect: Option<Dialect>,
    pub cut: Cut,
}

impl<'py> RawArgs<'py> {
    /// The checked arguments for packing `n` messages: read directly when plainly valid,
    /// else by `pack_arguments`.
    pub fn check(&self, n: usize) -> PyResult<PackArgs<'py>> {
        match self.plain() {
            Some(args) => Ok(args),
            None => self.delegated(n),
        }
    }

    fn plain(&self) -> Option<PackArgs<'py>> {
        let target = exact_u64(&self.target)?;
        let reserve = exact_u64(&self.reserve)?;
        let budget = target.checked_sub(reserve)?;
        // No estimator, or an embedded encoding's name: both are sized natively.
        let sizers = if self.estimate.is_none() {
            None
        } else {
            let name = self.estimate.cast_exact::<PyString>().ok()?;
            Encoding::from_name(name.to_str().ok()?)?;
            Some(self.estimate.clone())
        };
        let pinned = if let Ok(list) = self.pinned.cast_exact::<PyList>() {
            list.iter().map(|p| exact_u64(&p).and_then(|p| usize::try_from(p).ok())).collect::<Option<Vec<_>>>()?
        } else {
            let tuple = self.pinned.cast_exact::<PyTuple>().ok()?;
            tuple.iter().map(|p| exact_u64(&p).and_then(|p| usize::try_from(p).ok())).collect::<Option<Vec<_>>>()?
        };
        let summary = match self.summary.cast_exact::<PyString>() {
            Ok(s) => Some(lossy(s)?),
            Err(_) if self.summary.is_none() => None,
            Err(_) => return None,
        };
        let system_ok = self.system.is_none()
            || self.system.is_exact_instance_of::<PyString>()
            || self.system.is_exact_instance_of::<PyList>();
        if !system_ok || !self.tools.is_none() {
            return None;
        }
        let dialect = dialect(self.shape.cast_exact::<PyString>().ok()?.to_str().ok()?)?;
        let cut = match self.cut.cast_exact::<PyString>().ok()?.to_str().ok()? {
            "greedy" => Cut::Greedy,
            "chunked" if self.chunk_tokens.is_none() => Cut::Chunked { chunk: None },
            "chunked" => Cut::Chunked { chunk: Some(exact_u64(&self.chunk_tokens).filter(|&c| c >= 1)?) },
            _ => return None,
        };
        Some(PackArgs {
            budget,
            budget_int: budget.into_pyobject(self.target.py()).ok()?.into_any(),
            sizers,
            pinned,
            summary,
            system: (!self.system.is_none()).then(|| self.system.clone()),
            tools: None,
            dialect,
            cut,
        })
    }

    fn delegated(&self, n: usize) -> PyResult<PackArgs<'py>> {
        static PACK_ARGUMENTS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = self.target.py();
        let checked = PACK_ARGUMENTS.import(py, "contextfold._contract", "pack_arguments")?.call1((
            &self.target,
            &self.reserve,
            &self.estimate,
            &self.pinned,
            &self.summary,
            &self.system,
            &self.shape,
            &self.cut,
            &self.chunk_tokens,
            &self.tools,
        ))?;
        let (budget_int, sizers, pinned, summary, system, shape, chunk, tools): Normalised<'py> = checked.extract()?;
        let pinned = pinned
            .iter()
            .map(|p| {
                p.extract::<usize>()
                    .map_err(|_| crate::errors::argument(format!("pinned index {p} is out of range for {n} messages")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let chunk = chunk.map(|c| whole_u64("chunk_tokens", &c)).transpose()?;
        Ok(PackArgs {
            budget: whole_u64("budget", budget_int.cast::<PyInt>()?)?,
            budget_int,
            sizers,
            pinned,
            summary: summary.map(|s| lossy(&s).unwrap_or_default()),
            system,
            tools,
            dialect: dialect(&shape).unwrap_or(None),
            cut: match chunk {
                Some(c) => Cut::Chunked { chunk: Some(c) },
                None if self.cut.eq("chunked").unwrap_or(false) => Cut::Chunked { chunk: None },
                None => Cut::Greedy,
            },
        })
    }
}

/// An int argument the core holds as a u64; past that, an `ArgumentError` naming it
/// (worded as `contextfold._contract.whole` words it).
pub fn whole_u64(name: &str, value: &Bound<'_, PyInt>) -> PyResult<u64> {
    value.extract::<u64>().map_err(|_| out_of_range(name, value, 0, u64::MAX))
}

/// [`whole_u64`] for a count or index the core holds as a usize.
pub fn whole_usize(name: &str, value: &Bound<'_, PyInt>) -> PyResult<usize> {
    usize::try_from(whole_u64(name, value)?).map_err(|_| out_of_range(name, value, 0, usize::MAX))
}

/// [`whole_u64`] for a signed index the core holds as an i64.
pub fn whole_i64(name: &str, value: &Bound<'_, PyInt>) -> PyResult<i64> {
    value.extract::<i64>().map_err(|_| out_of_range(name, value, i64::MIN, i64::MAX))
}

#[cold]
fn out_of_range(
    name: &str,
    value: &Bound<'_, PyInt>,
    min: impl std::fmt::Display,
    max: impl std::fmt::Display,
) -> PyErr {
    let bound = if value.lt(0).unwrap_or(false) { format!("at least {min}") } else { format!("at most {max}") };
    crate::errors::argument(format!("{name} must be {bound}, got {value}"))
}

/// An exact `int` that fits a u64 (not a bool, not a subclass).
fn exact_u64(value: &Bound<'_, PyAny>) -> Option<u64> {
    value.cast_exact::<PyInt>().ok()?.extract::<u64>().ok()
}

/// The text with surrogate pairs joined and unpaired surrogates as U+FFFD, as the core
/// reads UTF-16.
pub fn lossy(s: &Bound<'_, PyString>) -> Option<String> {
    crate::node::text_of(s).map(|t| t.to_string_lossy())
}

/// `None` for `"auto"`; the outer `None` for an unknown shape.
pub fn dialect(shape: &str) -> Option<Option<Dialect>> {
    match shape {
        "auto" => Some(None),
        "openai" => Some(Some(Dialect::OpenAi)),
        "anthropic" => Some(Some(Dialect::Anthropic)),
        "responses" => Some(Some(Dialect::Responses)),
        _ => None,
    }
}
