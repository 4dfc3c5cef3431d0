//! Arguments read from Python: a `contextfold.PackOptions` into the core's
//! [`PackOptions`], and the plain ints the other functions take.
//!
//! The pack options were checked when the value was built (`contextfold._contract`, the
//! one place those rules are written, for both backends); this module reads the checked
//! fields and converts them, and checks nothing of its own.

use contextfold_core::edits::{ClearThinking, ClearToolUses, Edit};
use contextfold_core::pack::{Counting, Cut, Dialect, PackOptions};
use contextfold_core::provider::Sizing;
use contextfold_core::request::IntDigits;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyInt, PyString, PyTuple, PyType};
use std::sync::Arc;

/// A `contextfold.PackOptions`, converted.
pub struct Options<'py> {
    /// What the core packs with (`system_tokens` 0: the caller sizes its prompt), shared
    /// with [`LAST_CONVERTED`] (a copy was a tenth of a short pack's fixed cost).
    pub pack: Arc<PackOptions>,
    /// A custom estimator's `(per_message, per_text)` pair, or an embedded encoding's
    /// name: what [`crate::sizer::PySizer`] takes.
    pub sizers: Option<Bound<'py, PyAny>>,
    /// How messages are sized without an estimator.
    pub sizing: Sizing,
    /// The budget as the result reports it (the value's own int).
    pub budget: Bound<'py, PyAny>,
}

impl<'py> Options<'py> {
    /// Whether counting runs Python code (a custom estimator).
    pub fn runs_python(&self) -> bool {
        is_custom(self.sizers.as_ref())
    }

    /// The sizer these options count with.
    ///
    /// # Errors
    /// An unknown encoding's name (never, for a checked value), or `RecursionError` when
    /// a custom estimator would run with the stack nearly full.
    pub fn sizer(&self) -> PyResult<crate::sizer::PySizer<'py>> {
        if self.runs_python() {
            crate::sizer::check_stack()?;
        }
        crate::sizer::PySizer::new(self.budget.py(), self.sizers.clone(), self.sizing)
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Options<'py> {
    type Error = PyErr;

    fn extract(value: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        static CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
        let py = value.py();
        if !value.is_instance(CLASS.import(py, "contextfold._contract", "PackOptions")?)? {
            let got = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            return Err(crate::errors::argument_type(format!("options must be a PackOptions, got {got}")));
        }
        // The value's `native` tuple: (budget, sizers, images, summary, shape, chunk, pinned,
        // edits, step).
        let native = value.getattr(intern!(py, "native"))?.cast_into::<PyTuple>()?;
        if native.len() != 9 {
            return Err(crate::errors::internal("PackOptions.native holds nine fields"));
        }
        let (budget, sizers) = (native.get_item(0)?, Some(native.get_item(1)?).filter(|s| !s.is_none()));
        let last = LAST_CONVERTED.with_borrow(|last| match last {
            Some((tuple, pack, sizing)) if tuple.is(&native) => Some((Arc::clone(pack), *sizing)),
            _ => None,
        });
        let (pack, sizing) = match last {
            Some(converted) => converted,
            None => {
                let (pack, sizing) = converted(&native, sizers.as_ref())?;
                let pack = Arc::new(pack);
                if pack.edits.is_empty() && !is_custom(sizers.as_ref()) {
                    let replaced = LAST_CONVERTED.replace(Some((native.clone().unbind(), Arc::clone(&pack), sizing)));
                    drop(replaced); // (after the cell's borrow: a finaliser may pack again)
                }
                (pack, sizing)
            }
        };
        Ok(Options { pack, sizers, sizing, budget })
    }
}

/// Options converted from a `native` tuple (held, by identity), and their sizing.
type Converted = (Py<PyTuple>, Arc<PackOptions>, Sizing);

thread_local! {
    /// The options this thread converted last, by their `native` tuple, held so that its
    /// address names no other tuple while kept: `pack_options` hands out one value per
    /// set of plain keywords, and a call with the last one converts nothing again (the
    /// conversion was a sixth of a short pack). Only options all of whose fields are
    /// immutable are kept: none with a custom estimator (which this would keep alive) or
    /// with edits (whose fields can be changed behind their frozen backs, and are read
    /// again each call, as the reference reads them).
    static LAST_CONVERTED: std::cell::RefCell<Option<Converted>> =
        const { std::cell::RefCell::new(None) };
}

/// Whether a `native` tuple's `sizers` are a custom estimator's (not an encoding's name).
fn is_custom(sizers: Option<&Bound<'_, PyAny>>) -> bool {
    sizers.is_some_and(|s| !s.is_instance_of::<PyString>())
}

/// The core's options and the sizing a `native` tuple holds (`sizers` its second field).
fn converted(native: &Bound<'_, PyTuple>, sizers: Option<&Bound<'_, PyAny>>) -> PyResult<(PackOptions, Sizing)> {
    let field = |i| native.get_item(i);
    let (budget, images, summary) = (field(0)?, field(2)?, field(3)?);
    let (shape, chunk, pinned, edits, step) = (field(4)?, field(5)?, field(6)?, field(7)?, field(8)?);
    let images: Option<u64> = images.extract()?;
    let sizing = images.map_or(Sizing::Seed, |image_tokens| Sizing::Provider { image_tokens });
    let counting = match sizers.map(|s| s.cast::<PyString>()) {
        Some(Ok(name)) => Counting::Exact(crate::sizer::encoding(&name.to_cow()?)?, sizing),
        // A custom estimator is the binding's sizer to run: the core counts nothing.
        Some(Err(_)) => Counting::Chars(Sizing::Seed),
        None => Counting::Chars(sizing),
    };
    let summary = match summary.cast::<PyString>() {
        Ok(text) => Some(lossy(text).unwrap_or_default()),
        Err(_) => None,
    };
    let dialect = dialect(&shape.cast::<PyString>()?.to_cow()?);
    let chunk: Option<u64> = chunk.extract()?;
    let edits = edits.cast::<PyTuple>()?;
    let pack = PackOptions {
        budget: budget.extract()?,
        system_tokens: 0,
        pinned: if pinned.is_empty()? { Vec::new() } else { pinned.extract()? },
        summary,
        dialect,
        cut: chunk.map_or(Cut::Greedy, |chunk| Cut::Chunked { chunk: Some(chunk) }),
        counting,
        edits: edits.iter().map(|edit| edit_of(&edit)).collect::<PyResult<_>>()?,
        edit_step: Some(step.extract()?),
        // The bytes path sets Python's limit as it is at the call
        // (`request::with_live_int_digits`, `request::batch_options`).
        int_digits: IntDigits::FEWEST,
    };
    Ok((pack, sizing))
}

/// What a packing call packs with: `options`, the value
/// `contextfold._contract.pack_options` made for the call (the one place the options'
/// rules are written); or, when `options` is None, the value it made before of the same
/// plain `keywords` (exact ints, strs and Nones), found in its own cache (`_BUILT`, keyed
/// by the `(name, value)` pairs in the order given, every name an exact str) by a lookup
/// that runs no Python code of its own. `None` when there is none: the caller makes the
/// options and calls again with them.
///
/// Performance: calling `pack_options` from Python was a third of a short pack. It is
/// never called from here: Python code run under this call could end the thread while
/// the interpreter shuts down, which no Rust frame may be unwound by. Keywords that are
/// the same objects as those of the thread's last call that found its options (as a
/// call site's names and constants are, call after call) find those options by identity
/// ([`LAST_KEYWORDS`]), without the key's tuples.
pub fn call_options<'py>(options: &Bound<'py, PyAny>, keywords: &Bound<'py, PyDict>) -> PyResult<Option<Options<'py>>> {
    static BUILT: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
    if !options.is_none() {
        return options.extract().map(Some);
    }
    let py = keywords.py();
    let last = LAST_KEYWORDS.with_borrow(|last| {
        let found = last.as_ref()?;
        let same = found.keywords.len() == keywords.len()
            && keywords
                .iter()
                .zip(&found.keywords)
                .all(|((name, value), (last_name, last_value))| name.is(last_name) && value.is(last_value));
        same.then(|| found.options.bind(py).clone())
    });
    if let Some(made) = last {
        return made.extract().map(Some);
    }
    let mut pairs = Vec::with_capacity(keywords.len());
    let mut held = Vec::with_capacity(keywords.len());
    for (name, value) in keywords.iter() {
        // Hashing and comparing exact strs, ints and None (with the keys `pack_options`
        // keeps: their names exact strs too) runs no Python code; any other value (pins,
        // edits) is left to the caller.
        if !(name.is_exact_instance_of::<PyString>() && is_plain(&value)) {
            return Ok(None);
        }
        held.push((name.clone().unbind(), value.clone().unbind()));
        pairs.push(PyTuple::new(py, [name, value])?);
    }
    let built = BUILT.import(py, "contextfold._contract", "_BUILT")?;
    let Some(made) = built.get_item(PyTuple::new(py, pairs)?)? else { return Ok(None) };
    let replaced = LAST_KEYWORDS.replace(Some(Found { keywords: held, options: made.clone().unbind() }));
    drop(replaced); // (after the cell's borrow: a finaliser may pack again)
    made.extract().map(Some)
}

/// A call's plain keywords, `(name, value)` in the order given, and the options they
/// found. The keywords are held so that no other object takes their addresses while they
/// are compared by identity.
struct Found {
    keywords: Vec<(Py<PyAny>, Py<PyAny>)>,
    options: Py<PyAny>,
}

thread_local! {
    /// What this thread's last call that found its options in `_BUILT` by its plain
    /// keywords found. Plain values compare equal to themselves, so the same objects find
    /// what their key would (or, once that cache is cleared, an equal value made of the
    /// same keywords; an entry replaced in it is not seen).
    static LAST_KEYWORDS: std::cell::RefCell<Option<Found>> = const { std::cell::RefCell::new(None) };
}

/// An exact int, str or None: a value whose hash and comparisons are the interpreter's own.
fn is_plain(value: &Bound<'_, PyAny>) -> bool {
    value.is_none() || value.is_exact_instance_of::<PyInt>() || value.is_exact_instance_of::<PyString>()
}

/// A checked `ClearToolUses` or `ClearThinking` (contextfold._edits) as the core's edit.
fn edit_of<'py>(edit: &Bound<'py, PyAny>) -> PyResult<Edit> {
    static CLEAR_TOOL_USES: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static CLEAR_THINKING: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let py = edit.py();
    let field = |name: &Bound<'py, PyString>| edit.getattr(name);
    if edit.is_exact_instance(CLEAR_THINKING.import(py, "contextfold._edits", "ClearThinking")?) {
        return Ok(Edit::ClearThinking(ClearThinking { keep: field(intern!(py, "keep"))?.extract()? }));
    }
    if !edit.is_exact_instance(CLEAR_TOOL_USES.import(py, "contextfold._edits", "ClearToolUses")?) {
        let got = edit.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        return Err(crate::errors::argument_type(format!("an edit must be ClearToolUses or ClearThinking, got {got}")));
    }
    Ok(Edit::ClearToolUses(ClearToolUses {
        trigger: field(intern!(py, "trigger"))?.extract()?,
        keep: field(intern!(py, "keep"))?.extract()?,
        clear_at_least: field(intern!(py, "clear_at_least"))?.extract()?,
        exclude_tools: field(intern!(py, "exclude_tools"))?.extract()?,
        clear_tool_inputs: field(intern!(py, "clear_tool_inputs"))?.extract()?,
        placeholder: field(intern!(py, "placeholder"))?.extract()?,
    }))
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
    let lt = int_method(value, "__lt__").and_then(|lt| lt.call1((value, 0)));
    let negative = lt.and_then(|b| b.is_truthy()).unwrap_or(false);
    let bound = if negative { format!("at least {min}") } else { format!("at most {max}") };
    crate::errors::argument(format!("{name} must be {bound}, got {}", shown(value, negative)))
}

/// `int`'s own method: an int is read as `int` reads it, never by a subclass's methods.
fn int_method<'py>(value: &Bound<'py, PyInt>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    value.py().get_type::<PyInt>().getattr(name)
}

/// An int as an error quotes it (as `contextfold._js.shown` words it): in decimal, or by
/// its size when it has more digits than Python writes.
fn shown(value: &Bound<'_, PyInt>, negative: bool) -> String {
    let of_int = |name: &str| int_method(value, name).and_then(|m| m.call1((value,)));
    match of_int("__repr__") {
        Ok(text) => text.to_string(),
        Err(_) => {
            let bits = of_int("bit_length").and_then(|b| b.extract::<u64>()).unwrap_or_default();
            format!("{} of {bits} bits", if negative { "a negative int" } else { "an int" })
        }
    }
}

/// The text with surrogate pairs joined and unpaired surrogates as U+FFFD, as the core
/// reads UTF-16.
pub fn lossy(s: &Bound<'_, PyString>) -> Option<String> {
    crate::node::text_of(s).map(|t| t.to_string_lossy())
}

/// The dialect a (checked) shape names; `None` for `"auto"`.
fn dialect(shape: &str) -> Option<Dialect> {
    match shape {
        "openai" => Some(Dialect::OpenAi),
        "anthropic" => Some(Dialect::Anthropic),
        "responses" => Some(Dialect::Responses),
        _ => None,
    }
}
