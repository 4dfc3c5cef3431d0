//! The `contextfold._native` extension: contextfold-core over borrowed Python objects.
//!
//! This crate only adapts. `node::PyNode` implements the core's accessor trait on a
//! Python value (reading `str` data in place), `sizer` wraps a caller's estimator, and
//! `errors` maps core errors to the exception classes of `contextfold.errors`. Every
//! rule lives in contextfold-core.

/// The extension's own allocator on glibc. A batch's results are made on its worker
/// threads and freed on the calling one; glibc's malloc locks the worker's arena for each
/// such free (and trims it under the lock), so two threads packing request bodies ran at
/// 1.53x one thread, against 1.95x with mimalloc, which frees across threads without a
/// lock. Its thread-locals are the dynamic kind, so the extension loads with `dlopen`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod args;
mod batch;
mod errors;
mod node;
mod request;
mod result;
mod sizer;
mod snapshot;
mod strings;

use contextfold_core::items::{self, Format};
use contextfold_core::pack::{self, Cut, PackOptions};
use contextfold_core::provider::Sizing;
use contextfold_core::tokens::{self, ArraySizes, Role, SizedMessages};
use contextfold_core::transcript::Transcript;
use contextfold_core::window::{self, WindowLimits};
use contextfold_core::{CoreError, Text};
use node::PyNode;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyInt, PyList, PyString, PyType};
use request::{pack_lines, pack_request, pack_requests};
use sizer::PySizer;
use snapshot::Snapshot;

/// Runs `f` on a transcript of `messages` sized by `estimate` (chars/4 when `None`),
/// its entries read as chat messages or Responses items (detected).
fn with_transcript<'py, T>(
    messages: &Bound<'py, PyAny>,
    estimate: Option<Bound<'py, PyAny>>,
    f: impl FnOnce(&mut Transcript<'_, PyNode<'py>, PySizer<'py>>) -> Result<T, contextfold_core::CoreError>,
) -> PyResult<T> {
    with_nodes(Snapshot::of(messages)?.nodes(), estimate, Reading::UpFront(Format::Auto), Sizing::Seed, f)
}

/// How a transcript's entries are read: every one up front (windowing and sums need
/// every role), or on demand as packing reaches them (its cost follows what it keeps).
#[derive(Clone, Copy)]
enum Reading {
    UpFront(Format),
    OnDemand(Format),
}

/// Runs `f` on a transcript of `nodes` sized by `estimate` (`sizing` when `None`), the
/// entries read as `reading` says.
fn with_nodes<'py, T>(
    nodes: &[PyNode<'py>],
    estimate: Option<Bound<'py, PyAny>>,
    reading: Reading,
    sizing: Sizing,
    f: impl FnOnce(&mut Transcript<'_, PyNode<'py>, PySizer<'py>>) -> Result<T, contextfold_core::CoreError>,
) -> PyResult<T> {
    if estimate.is_some() {
        sizer::check_stack()?;
    }
    let sizer = PySizer::new(estimate, sizing)?;
    let mut transcript = match reading {
        Reading::UpFront(format) => Transcript::read_all(nodes, sizer, format),
        Reading::OnDemand(format) => Transcript::read(nodes, sizer, format),
    }
    .map_err(errors::to_py)?;
    match f(&mut transcript) {
        Ok(value) => Ok(value),
        Err(err) => Err(transcript.sizer().take_error(err)),
    }
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
    if estimate.is_some() {
        sizer::check_stack()?;
    }
    let message = PyNode(message);
    let checked = items::check_entry(&message).map_err(errors::to_py)?;
    PySizer::new(estimate, sizing(image_tokens))?.lone_message_tokens(&message, &checked)
}

/// Sum of the messages' tokens.
#[pyfunction]
#[pyo3(signature = (messages, estimate=None, image_tokens=None))]
fn tokens_of<'py>(
    messages: &Bound<'py, PyAny>,
    estimate: Option<Bound<'py, PyAny>>,
    image_tokens: Option<u64>,
) -> PyResult<u128> {
    with_nodes(Snapshot::of(messages)?.nodes(), estimate, Reading::UpFront(Format::Auto), sizing(image_tokens), |t| {
        t.sum(0..t.len())
    })
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
    let sizes = with_nodes(
        Snapshot::of(messages)?.nodes(),
        estimate,
        Reading::UpFront(Format::Auto),
        sizing(image_tokens),
        |t| {
            (0..t.len())
                .map(|i| {
                    let size = t.tokens(i)?;
                    i64::try_from(size).map_err(|_| {
                        CoreError::argument(format!("message {i} costs {size} tokens, more than an int64 array holds"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        },
    )?;
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

/// Packs `messages` into `target_context_tokens - reserve_output_tokens` tokens: a
/// `HandoffPack`.
#[pyfunction]
#[pyo3(signature = (
    messages, target_context_tokens, reserve_output_tokens, estimate_tokens, pinned, summary, system, shape, cut,
    chunk_tokens, tools=None, image_tokens=None
))]
#[allow(clippy::too_many_arguments)] // mirrors the reference backend's signature
fn pack_handoff<'py>(
    messages: &Bound<'py, PyAny>,
    target_context_tokens: Bound<'py, PyAny>,
    reserve_output_tokens: Bound<'py, PyAny>,
    estimate_tokens: Bound<'py, PyAny>,
    pinned: Bound<'py, PyAny>,
    summary: Bound<'py, PyAny>,
    system: Bound<'py, PyAny>,
    shape: Bound<'py, PyAny>,
    cut: Bound<'py, PyAny>,
    chunk_tokens: Bound<'py, PyAny>,
    tools: Option<Bound<'py, PyAny>>,
    image_tokens: Option<u64>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = messages.py();
    let raw = args::RawArgs {
        target: target_context_tokens,
        reserve: reserve_output_tokens,
        estimate: estimate_tokens,
        pinned,
        summary,
        system,
        shape,
        cut,
        chunk_tokens,
        tools: tools.unwrap_or_else(|| py.None().into_bound(py)),
    };
    let n = messages.len().unwrap_or(0);
    let args = raw.check(n)?;
    if args.sizers.is_some() {
        sizer::check_stack()?;
    }
    let mut sizer = PySizer::new(args.sizers.clone(), sizing(image_tokens))?;
    let system_tokens = prompt_tokens(&mut sizer, [&args.system, &args.tools])?;
    let options = PackOptions {
        budget: args.budget,
        system_tokens,
        pinned: args.pinned,
        summary: args.summary,
        dialect: args.dialect,
        cut: args.cut,
    };
    // Read once: the result comes from this reading, whatever an estimator does to the list.
    let snapshot = Snapshot::of(messages)?;
    let reading = Reading::OnDemand(pack::format_for(args.dialect));
    let packed = with_nodes(snapshot.nodes(), args.sizers, reading, sizing(image_tokens), |t| pack::pack(t, &options))?;
    handoff_from(snapshot, packed, &args.budget_int)
}

/// What a separate system prompt and the tool definitions cost: each what a system
/// message with that content costs (sums past u64 saturate: nothing that large fits).
fn prompt_tokens<'py, 'a>(
    sizer: &mut PySizer<'py>,
    parts: impl IntoIterator<Item = &'a Option<Bound<'py, PyAny>>>,
) -> PyResult<u64>
where
    'py: 'a,
{
    let mut total = 0u64;
    for content in parts.into_iter().flatten() {
        let tokens = tokens::system_tokens(sizer, PyNode(content.clone())).map_err(|e| sizer.take_error(e))?;
        total = total.saturating_add(tokens);
    }
    Ok(total)
}

/// Packs many transcripts (the same options for each, a separate system prompt each when
/// `systems` is given) on up to `threads` threads with the GIL released (`0`: as many as
/// pay, up to one a CPU); a list of what `pack_handoff` returns.
#[pyfunction]
#[pyo3(signature = (transcripts, budget, systems, tools, dialect, chunk_tokens, threads, encoding=None))]
#[allow(clippy::too_many_arguments)] // mirrors the Python wrapper's arguments
fn pack_many<'py>(
    transcripts: &Bound<'py, PyList>,
    budget: Bound<'py, PyInt>,
    systems: Option<Vec<Option<Bound<'py, PyAny>>>>,
    tools: Option<Bound<'py, PyAny>>,
    dialect: &str,
    chunk_tokens: Option<Bound<'py, PyInt>>,
    threads: Bound<'py, PyInt>,
    encoding: Option<Bound<'py, PyString>>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = transcripts.py();
    let exact = encoding.as_ref().map(|name| sizer::encoding(&name.to_cow()?)).transpose()?;
    let budget_int = budget.clone().into_any();
    let budget = args::whole_u64("budget", &budget)?;
    let dialect = args::dialect(dialect).ok_or_else(|| {
        errors::argument(format!("shape must be 'auto', 'openai', 'anthropic' or 'responses', not {dialect:?}"))
    })?;
    let cut = match chunk_tokens {
        Some(chunk) => Cut::Chunked { chunk: Some(args::whole_u64("chunk_tokens", &chunk)?) },
        None => Cut::Greedy,
    };
    let mut sizer = PySizer::new(encoding.clone().map(Bound::into_any), Sizing::Seed)?;
    let systems = systems.unwrap_or_default();
    let options = (0..transcripts.len())
        .map(|i| {
            let system_tokens = prompt_tokens(&mut sizer, [systems.get(i).unwrap_or(&None), &tools])?;
            Ok(PackOptions { budget, system_tokens, pinned: Vec::new(), summary: None, dialect, cut })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let mut fairness = batch::Fairness::new(py);
    let requested = threads.extract().unwrap_or(usize::MAX);
    let threads = batch::thread_count(requested);
    let n = options.len();
    let in_place = |i: usize, transcript: &Bound<'py, PyAny>, opts: &PackOptions| {
        let snapshot = Snapshot::of(transcript).map_err(|e| in_transcript(py, e, i))?;
        let packed = with_nodes(
            snapshot.nodes(),
            encoding.clone().map(Bound::into_any),
            Reading::OnDemand(pack::format_for(dialect)),
            Sizing::Seed,
            |t| pack::pack(t, opts),
        );
        match packed {
            Ok(packed) => PyResult::Ok((packed, snapshot)),
            Err(e) => {
                drop(snapshot); // its borrow ends before the note's Python code runs
                Err(in_transcript(py, e, i))
            }
        }
    };
    let mut out = Vec::with_capacity(n);
    // With the default thread count, the first transcripts are packed in place and timed:
    // the workers are used only when reading a transcript costs clearly less than packing
    // it (else they would idle while this thread reads).
    let auto = requested == 0;
    let probe = if auto && threads > 1 && n >= batch::PROBE + 2 * batch::CHUNK { batch::PROBE } else { 0 };
    let mut packing = Vec::with_capacity(probe);
    for ((i, transcript), opts) in transcripts.iter().enumerate().zip(&options).take(probe) {
        let started = std::time::Instant::now();
        let (packed, snapshot) = in_place(i, &transcript, opts)?;
        packing.push(started.elapsed());
        out.push(handoff_from(snapshot, packed, &budget_int)?);
        fairness.tick()?;
    }
    let threaded = threads > 1 && (!auto || probe > 0);
    let detached = if threaded {
        // The median: a time slice lost to another process must not make packing in
        // place look dear (a low estimate keeps the threads out when in doubt).
        packing.sort_unstable();
        let cost = if auto { packing.get(packing.len() / 2).copied() } else { None };
        batch::pack_detached(transcripts, probe, &options, exact, threads, &mut fairness, cost)?
    } else {
        Vec::new()
    };
    let mut detached = detached.into_iter().skip(probe);
    for ((i, transcript), opts) in transcripts.iter().enumerate().zip(&options).skip(probe) {
        let handoff = match detached.next().flatten() {
            Some(batch::Detached { outcome: Ok(packed), messages }) => {
                let nodes: Vec<PyNode<'py>> = messages.into_iter().map(|m| PyNode(m.into_bound(py))).collect();
                let kept = snapshot::kept_items(&nodes, &packed.kept)?;
                to_handoff_pack(nodes.len(), kept, packed, &budget_int)?
            }
            // Packed in place: with one thread, or when not extracted, or to raise the
            // error exactly as one-by-one packing does.
            _ => {
                let (packed, snapshot) = in_place(i, &transcript, opts)?;
                handoff_from(snapshot, packed, &budget_int)?
            }
        };
        out.push(handoff);
        fairness.tick()?;
    }
    Ok(out)
}

/// `err` with a note naming the transcript it came from (`contextfold._contract.add_note`,
/// which works on every supported Python); a failure to add the note keeps `err` as is.
fn in_transcript(py: Python<'_>, err: PyErr, index: usize) -> PyErr {
    snapshot::before_python();
    static ADD_NOTE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    if let Ok(add_note) = ADD_NOTE.import(py, "contextfold._contract", "add_note") {
        let _ = add_note.call1((err.value(py), format!("in transcript {index}")));
    }
    err
}

/// The `HandoffPack` for a transcript read into `snapshot` and packed, the snapshot's
/// borrow ended before the result is allocated.
fn handoff_from<'py>(
    snapshot: Snapshot<'py>,
    packed: pack::Packed,
    budget: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let n = snapshot.len();
    let kept = snapshot.into_kept(&packed.kept)?;
    to_handoff_pack(n, kept, packed, budget)
}

/// The `HandoffPack` for a transcript of `n` messages packed: the output list (`kept`,
/// the caller's messages, with the note a new dict at its place), dropped, fits, tokens,
/// budget, note, kept.
fn to_handoff_pack<'py>(
    n: usize,
    mut out: Vec<Bound<'py, PyAny>>,
    packed: pack::Packed,
    budget: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = budget.py();
    if let Some(note) = &packed.note {
        let dict = PyDict::new(py);
        if note.message_item {
            dict.set_item(intern!(py, "type"), intern!(py, "message"))?;
        }
        dict.set_item(intern!(py, "role"), if note.role == Role::User { "user" } else { "assistant" })?;
        dict.set_item(intern!(py, "content"), &note.text)?;
        out.insert(note.at.min(out.len()), dict.into_any());
    }
    let out = PyList::new(py, out)?;
    // The note's text is the same str object as the note message's content.
    let note = match &packed.note {
        Some(note) => out.get_item(note.at.min(out.len()))?.get_item(intern!(py, "content"))?,
        None => py.None().into_bound(py),
    };
    let dropped = n - packed.kept.len().min(n);
    let fields: [Bound<'py, PyAny>; 7] = [
        out.into_any(),
        dropped.into_pyobject(py)?.into_any(),
        pyo3::types::PyBool::new(py, packed.fits).to_owned().into_any(),
        packed.tokens.into_pyobject(py)?.into_any(),
        budget.clone(),
        note,
        PyList::new(py, &packed.kept)?.into_any(),
    ];
    let class = ResultClass::get(py)?;
    if !class.plain_tuple {
        return class.class.bind(py).call1(pyo3::types::PyTuple::new(py, fields)?);
    }
    // What tuple.__new__(HandoffPack, fields) does (the NamedTuple's own __new__ is Python
    // code), without the argument tuples: allocate the subclass instance, fill its slots.
    let class = class.class.bind(py);
    // SAFETY: `plain_tuple` checked that the class lays out its instances as a tuple's,
    // so its tp_alloc gives a zeroed tuple of 7 slots that we own; each slot takes over
    // one owned reference.
    unsafe {
        let alloc = (*class.as_type_ptr()).tp_alloc.unwrap_or(pyo3::ffi::PyType_GenericAlloc);
        let tuple = Bound::from_owned_ptr_or_err(py, alloc(class.as_type_ptr(), 7))?;
        for (slot, field) in fields.into_iter().enumerate() {
            pyo3::ffi::PyTuple_SET_ITEM(tuple.as_ptr(), slot as pyo3::ffi::Py_ssize_t, field.into_ptr());
        }
        Ok(tuple)
    }
}

/// The result class, `contextfold._contract.HandoffPack`, looked up once (when the module
/// is imported, as the reference imports it) and checked then.
struct ResultClass {
    class: Py<PyType>,
    /// A tuple subclass with seven fields and a tuple's layout: its slots may be filled
    /// directly. Anything else (a patched class) is called with the fields instead.
    plain_tuple: bool,
}

impl ResultClass {
    fn get(py: Python<'_>) -> PyResult<&'static ResultClass> {
        static RESULT_CLASS: PyOnceLock<ResultClass> = PyOnceLock::new();
        RESULT_CLASS.get_or_try_init(py, || {
            let class = py.import("contextfold._contract")?.getattr("HandoffPack")?.cast_into::<PyType>()?;
            let fields = class.getattr(intern!(py, "_fields")).and_then(|f| f.len()).unwrap_or(0);
            let tuple = py.get_type::<pyo3::types::PyTuple>();
            // SAFETY: both are live type objects; we only read their size fields.
            let same_layout = unsafe {
                let (ours, base) = (&*class.as_type_ptr(), &*tuple.as_type_ptr());
                ours.tp_basicsize == base.tp_basicsize && ours.tp_itemsize == base.tp_itemsize
            };
            let plain_tuple = class.is_subclass(&tuple)? && same_layout && fields == 7;
            Ok(ResultClass { class: class.unbind(), plain_tuple })
        })
    }
}

/// Each distinct string with its count: most frequent first, ties in code-point order.
#[pyfunction]
fn rank_by_count<'py>(items: &Bound<'py, PyList>) -> PyResult<Vec<(Bound<'py, PyString>, usize)>> {
    let mut error = None;
    // SAFETY: every index is in bounds, and no Python code runs while the keys borrow the
    // list (exact str items only; their hashing and comparison are CPython's and ours).
    let keys = (0..items.len()).map_while(|i| {
        prefetch_item(items, i + RANK_PREFETCH_AHEAD);
        match unsafe { strings::RankKey::from_list(items, i) } {
            Ok(key) => Some(key),
            Err(e) => {
                error = Some(e);
                None
            }
        }
    });
    let ranked = contextfold_core::rank::rank_by_count(keys);
    if let Some(e) = error {
        return Err(e);
    }
    Ok(ranked.into_iter().map(|(k, n)| (k.string.to_owned(), n)).collect())
}

/// How many items ahead of the one being counted `rank_by_count` asks the CPU to fetch.
/// A list of distinct strings is a random walk through memory, and waiting for each
/// object's first read was most of the count: with the fetch ahead, 100,000 paths of
/// 5,000 distinct ones in random order rank 5-9x faster than `sorted(Counter(items)
/// .items(), ...)`, up from 2.4x (the gate's floor is in benches/floors.toml).
const RANK_PREFETCH_AHEAD: usize = 16;

/// Asks the CPU to start loading the header and first characters of `list[index]`.
fn prefetch_item(list: &Bound<'_, PyList>, index: usize) {
    #[cfg(target_arch = "x86_64")]
    if index < list.len() {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `index` is in bounds, so the slot holds a live object; a prefetch reads
        // nothing into the program and never faults, whatever the address.
        unsafe {
            let item = pyo3::ffi::PyList_GET_ITEM(list.as_ptr(), index as pyo3::ffi::Py_ssize_t).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(item);
            _mm_prefetch::<_MM_HINT_T0>(item.wrapping_add(64));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (list, index);
}

/// The canonical spelling of a path.
#[pyfunction]
fn canonical_path<'py>(path: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyString>> {
    strings::from_code_points(path.py(), &contextfold_core::paths::canonical(&strings::code_points(path)))
}

/// The path relative to `root`, or None when it is not a repo file worth mapping.
#[pyfunction]
#[pyo3(signature = (path, root=None))]
fn repo_path<'py>(
    path: &Bound<'py, PyString>,
    root: Option<&Bound<'py, PyString>>,
) -> PyResult<Option<Bound<'py, PyString>>> {
    let root = root.map(strings::code_points);
    match contextfold_core::paths::repo_path(&strings::code_points(path), root.as_deref()) {
        Some(p) => strings::from_code_points(path.py(), &p).map(Some),
        None => Ok(None),
    }
}

/// One note line for `message`.
#[pyfunction]
fn handoff_line(message: Bound<'_, PyAny>) -> PyResult<String> {
    pack::handoff_line(&PyNode(message)).map_err(errors::to_py)
}

/// Reads each message's role and string content length: the least any windowing must
/// do. Benchmarks use it as the floor the real functions are compared with (built only
/// with the `bench-floor` feature).
#[cfg(feature = "bench-floor")]
#[pyfunction]
fn _scan_floor(messages: &Bound<'_, PyAny>) -> PyResult<usize> {
    let mut total = 0usize;
    for node in Snapshot::of(messages)?.nodes() {
        let role = contextfold_core::tokens::role_of(&node).map_err(errors::to_py)?;
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
        canonical_path, compact_tail_start_for_budget, count_tokens, estimate_tokens, handoff_line, message_tokens,
        message_tokens_array, pack_handoff, pack_lines, pack_many, pack_request, pack_requests, pinned_directive_index,
        rank_by_count, repo_path, tokens_of, verbatim_start, window_start, window_start_array,
    };

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        use pyo3::types::PyModuleMethods;
        // The result and error classes as the package defines them now; a later patch
        // does not reach the extension, as it does not reach the reference.
        let _ = super::ResultClass::get(m.py());
        super::errors::load(m.py());
        let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
        m.add("build_profile", profile)?;
        // The workspace's version, which maturin also gives the distribution.
        m.add("__version__", env!("CARGO_PKG_VERSION"))
    }
}
