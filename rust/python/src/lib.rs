//! The `contextfold._native` extension: contextfold-core over borrowed Python objects.
//!
//! This crate only adapts. `node::PyNode` implements the core's accessor trait on a
//! Python value (reading `str` data in place), `sizer` wraps a caller's estimator, and
//! `errors` maps core errors to the exception classes of `contextfold.errors`. Every
//! rule lives in contextfold-core.

/// The extension's own allocator on glibc. A batch's results are made on its worker
/// threads and freed on the calling one; glibc's malloc locks the worker's arena for each
/// such free (and trims it under the lock), so two threads packing request bodies gained
/// little over one; mimalloc frees across threads without a lock (the gate holds the
/// gain: benches/floors.toml). Its thread-locals are the dynamic kind, so the extension loads with `dlopen`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod args;
mod batch;
mod borrow;
mod edited;
mod errors;
mod node;
mod pack;
mod request;
mod result;
mod sizer;
mod snapshot;
mod strings;

use contextfold_core::count_cache;
use contextfold_core::items::{self, Format};
use contextfold_core::provider::Sizing;
use contextfold_core::tokens::{ArraySizes, SizedMessages};
use contextfold_core::transcript::Transcript;
use contextfold_core::window::{self, WindowLimits};
use contextfold_core::{CoreError, Text};
use node::PyNode;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString};
use request::{pack_lines, pack_request, pack_requests, pack_rows, request_head};
use sizer::PySizer;
use snapshot::Snapshot;

/// Runs `f` on a transcript of `messages` sized by `estimate` (chars/4 when `None`),
/// its entries read as chat messages or Responses items (detected).
fn with_transcript<'py, T>(
    messages: &Bound<'py, PyAny>,
    estimate: Option<Bound<'py, PyAny>>,
    f: impl FnOnce(&mut Transcript<'_, PyNode<'py>, PySizer<'py>>) -> Result<T, contextfold_core::CoreError>,
) -> PyResult<T> {
    let sizer = sizer_for(messages.py(), estimate, Sizing::Seed)?;
    with_nodes(Snapshot::of(messages)?.nodes(), sizer, f)
}

/// The sizer for `estimate` (chars/4 by `sizing` when `None`).
fn sizer_for<'py>(py: Python<'py>, estimate: Option<Bound<'py, PyAny>>, sizing: Sizing) -> PyResult<PySizer<'py>> {
    if estimate.is_some() {
        sizer::check_stack()?;
    }
    PySizer::new(py, estimate, sizing)
}

/// Runs `f` on a transcript of `nodes` sized by `sizer`, every entry read up front
/// (windowing and sums need every role), chat messages or Responses items (detected).
fn with_nodes<'py, T>(
    nodes: &[PyNode<'py>],
    sizer: PySizer<'py>,
    f: impl FnOnce(&mut Transcript<'_, PyNode<'py>, PySizer<'py>>) -> Result<T, contextfold_core::CoreError>,
) -> PyResult<T> {
    node::raising(|| {
        let mut transcript = Transcript::read_all(nodes, sizer, Format::Auto).map_err(errors::to_py)?;
        f(&mut transcript).map_err(|err| transcript.sizer().take_error(err))
    })
}

/// ⌈UTF-16 length / 4⌉ of `text`.
#[pyfunction]
fn estimate_tokens(text: &Bound<'_, PyString>) -> PyResult<u64> {
    let units = node::with_text(text, |t: Text<'_>| t.utf16_len())?;
    Ok(contextfold_core::tokens::estimate_units(units))
}

/// Exact tokens of `text` in the embedded encoding `name` (the GIL released for long
/// texts).
#[pyfunction]
fn count_tokens(text: &Bound<'_, PyString>, name: &str) -> PyResult<usize> {
    let encoding = sizer::encoding(name)?;
    let mut transcoded = String::new();
    node::with_text(text, |t: Text<'_>| sizer::count(text.py(), encoding, t, &mut transcoded))
}

/// Empties the count cache and bounds it by `max_bytes` (0 turns it off).
#[pyfunction]
fn set_count_cache(max_bytes: u64) {
    count_cache::GLOBAL.configure(usize::try_from(max_bytes).unwrap_or(usize::MAX));
}

/// Has every child forked by `os.fork` start its count cache afresh (see
/// `CountCache::forget_after_fork`): a thread that held one of its locks at the fork
/// (`pack_requests`' workers count without the GIL) is not in the child, and
/// `count_cache_info` and `set_count_cache` there would wait for it forever.
fn forget_count_cache_in_forked_children(py: Python<'_>) -> PyResult<()> {
    let Ok(register) = py.import("os")?.getattr("register_at_fork") else { return Ok(()) }; // not on Windows
    let forget = pyo3::types::PyCFunction::new_closure(py, None, None, |_, _| {
        count_cache::GLOBAL.forget_after_fork();
    })?;
    let keywords = pyo3::types::PyDict::new(py);
    keywords.set_item("after_in_child", forget)?;
    register.call((), Some(&keywords))?;
    Ok(())
}

/// The count cache's `(hits, misses, entries, bytes, max_bytes)`.
#[pyfunction]
fn count_cache_info() -> (u64, u64, usize, usize, usize) {
    let stats = count_cache::GLOBAL.stats();
    (stats.hits, stats.misses, stats.entries, stats.bytes, stats.max_bytes)
}

/// Seed sizing, or provider sizing with this image cost.
fn sizing(image_tokens: Option<u64>) -> Sizing {
    image_tokens.map_or(Sizing::Seed, |image_tokens| Sizing::Provider { image_tokens })
}

/// Tokens of one message.
#[pyfunction]
#[pyo3(signature = (message, estimate=None, image_tokens=None))]
fn message_tokens<'py>(
    message: Bound<'py, PyAny>,
    estimate: Option<Bound<'py, PyAny>>,
    image_tokens: Option<u64>,
) -> PyResult<u64> {
    let message = PyNode(message);
    node::raising(|| {
        let checked = items::check_entry(&message).map_err(errors::to_py)?;
        sizer_for(message.0.py(), estimate, sizing(image_tokens))?.lone_message_tokens(&message, &checked)
    })
}

/// Sum of the messages' tokens.
#[pyfunction]
#[pyo3(signature = (messages, estimate=None, image_tokens=None))]
fn tokens_of<'py>(
    messages: &Bound<'py, PyAny>,
    estimate: Option<Bound<'py, PyAny>>,
    image_tokens: Option<u64>,
) -> PyResult<u128> {
    let sizer = sizer_for(messages.py(), estimate, sizing(image_tokens))?;
    with_nodes(Snapshot::of(messages)?.nodes(), sizer, |t| t.sum(0..t.len()))
}

/// Each message's tokens, as an int64 array.
#[pyfunction]
#[pyo3(signature = (messages, estimate=None, image_tokens=None))]
fn message_tokens_array<'py>(
    messages: &Bound<'py, PyAny>,
    estimate: Option<Bound<'py, PyAny>>,
    image_tokens: Option<u64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let py = messages.py();
    let sizer = sizer_for(messages.py(), estimate, sizing(image_tokens))?;
    let sizes = with_nodes(Snapshot::of(messages)?.nodes(), sizer, |t| {
        (0..t.len())
            .map(|i| {
                let size = t.tokens(i)?;
                i64::try_from(size).map_err(|_| {
                    CoreError::argument(format!("message {i} costs {size} tokens, more than an int64 array holds"))
                })
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(PyArray1::from_vec(py, sizes))
}

/// Index where the chunked history window starts.
#[pyfunction]
#[pyo3(signature = (messages, window, token_budget, estimate=None))]
fn window_start<'py>(
    messages: &Bound<'py, PyAny>,
    window: &Bound<'py, PyInt>,
    token_budget: &Bound<'py, PyInt>,
    estimate: Option<Bound<'py, PyAny>>,
) -> PyResult<usize> {
    let limits = window_limits(window, token_budget)?;
    with_transcript(messages, estimate, |t| window::window_start(t, limits))
}

/// [`window_start`] over per-message token sizes and a user-turn mask.
#[pyfunction]
fn window_start_array(
    sizes: PyReadonlyArray1<'_, i64>,
    user: PyReadonlyArray1<'_, bool>,
    window: &Bound<'_, PyInt>,
    token_budget: &Bound<'_, PyInt>,
) -> PyResult<usize> {
    let limits = window_limits(window, token_budget)?;
    let mut arrays = ArraySizes::new(sizes.as_slice()?, user.as_slice()?).map_err(errors::to_py)?;
    window::window_start(&mut arrays, limits).map_err(errors::to_py)
}

/// The window limits, checked.
fn window_limits(window: &Bound<'_, PyInt>, token_budget: &Bound<'_, PyInt>) -> PyResult<WindowLimits> {
    let window = args::whole_usize("window", window)?;
    let token_budget = args::whole_u64("token_budget", token_budget)?;
    WindowLimits::new(window, token_budget).map_err(errors::to_py)
}

/// `i` clamped, then moved past `tool` messages.
#[pyfunction]
fn verbatim_start(messages: &Bound<'_, PyAny>, i: &Bound<'_, PyInt>) -> PyResult<usize> {
    // Clamped: any index past the end (usize::MAX included) means the end.
    let at = usize::try_from(args::whole_i64("i", i)?.max(0)).unwrap_or(usize::MAX);
    with_transcript(messages, None, |t| Ok(window::verbatim_start(t, at)))
}

/// Start of a compaction tail under `budget` tokens.
#[pyfunction]
#[pyo3(signature = (messages, budget, estimate=None))]
fn compact_tail_start_for_budget<'py>(
    messages: &Bound<'py, PyAny>,
    budget: &Bound<'py, PyInt>,
    estimate: Option<Bound<'py, PyAny>>,
) -> PyResult<usize> {
    let budget = args::whole_u64("budget", budget)?;
    with_transcript(messages, estimate, |t| window::compact_tail_start_for_budget(t, budget))
}

/// Index of the last user message when it lies before `tail_start`, else -1.
#[pyfunction]
fn pinned_directive_index(messages: &Bound<'_, PyAny>, tail_start: &Bound<'_, PyInt>) -> PyResult<i64> {
    // Clamped, as in `verbatim_start`.
    let before = usize::try_from(args::whole_i64("tail_start", tail_start)?.max(0)).unwrap_or(usize::MAX);
    with_transcript(messages, None, |t| {
        Ok(window::pinned_directive_index(t, before).and_then(|i| i64::try_from(i).ok()).unwrap_or(-1))
    })
}

/// Reads each message's role and string content length: the least any windowing must
/// do. Benchmarks use it as the floor the real functions are compared with (built only
/// with the `bench-floor` feature).
#[cfg(feature = "bench-floor")]
#[pyfunction]
fn _scan_floor(messages: &Bound<'_, PyAny>) -> PyResult<usize> {
    let mut total = 0usize;
    for node in Snapshot::of(messages)?.nodes() {
        let role = contextfold_core::message::role_of(&node).map_err(errors::to_py)?;
        total += role as usize;
        if let Some(content) = contextfold_core::JsonNode::get(&node, contextfold_core::Key::Content) {
            total += contextfold_core::JsonNode::as_text(&content).map_or(0, |t| t.utf16_len());
        }
    }
    Ok(total)
}

/// Declared as needing the GIL: nothing has been tested on a free-threaded interpreter,
/// and the batch path shares borrowed objects across threads.
#[pymodule(gil_used = true)]
mod _native {
    #[cfg(feature = "bench-floor")]
    #[pymodule_export]
    use super::_scan_floor;
    #[pymodule_export]
    use super::{
        compact_tail_start_for_budget, count_cache_info, count_tokens, estimate_tokens, message_tokens,
        message_tokens_array, pack::handoff_line, pack::pack_handoff, pack::pack_many, pack_lines, pack_request,
        pack_requests, pack_rows, pinned_directive_index, request_head, set_count_cache, strings::canonical_path,
        strings::rank_by_count, strings::repo_path, tokens_of, verbatim_start, window_start, window_start_array,
    };

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        use pyo3::types::PyModuleMethods;
        // The result and error classes as the package defines them now; a later patch
        // does not reach the extension, as it does not reach the reference.
        let _ = super::result::Class::HandoffPack.get(m.py());
        let _ = super::result::Class::PackedRequest.get(m.py());
        let _ = super::result::Class::AppliedEdit.get(m.py());
        super::errors::load(m.py());
        super::node::load(m.py());
        super::forget_count_cache_in_forked_children(m.py())?;
        let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
        m.add("build_profile", profile)?;
        // The workspace's version, which maturin also gives the distribution.
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }
}
