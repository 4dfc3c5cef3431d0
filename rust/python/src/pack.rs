//! `pack_handoff` and `pack_many` over Python lists, the results built as
//! `contextfold._contract.HandoffPack`.

use crate::args::{call_options, Options};
use crate::borrow::before_python;
use crate::node::PyNode;
use crate::result::handoff_pack;
use crate::sizer::PySizer;
use crate::snapshot::Snapshot;
use contextfold_core::pack::{self, PackOptions, Packed};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList};
use std::borrow::Cow;

/// Packs `messages` under the call's options ([`call_options`]: None when they are
/// still to be made), a separate system prompt and tool definitions counted and never
/// dropped: a `HandoffPack`.
#[pyfunction]
#[pyo3(signature = (messages, options, keywords, system=None, tools=None))]
pub fn pack_handoff<'py>(
    messages: &Bound<'py, PyAny>,
    options: &Bound<'py, PyAny>,
    keywords: &Bound<'py, PyDict>,
    system: Option<Bound<'py, PyAny>>,
    tools: Option<Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(options) = call_options(options, keywords)? else { return Ok(None) };
    crate::node::raising(|| {
        let mut sizer = options.sizer()?;
        let pack = match prompt_tokens(&mut sizer, system, tools)? {
            0 => Cow::Borrowed(&*options.pack),
            system_tokens => Cow::Owned(PackOptions { system_tokens, ..(*options.pack).clone() }),
        };
        in_place(messages, &pack, sizer, &options.budget)
    })
    .map(Some)
}

/// Packs each transcript under `options` (a separate system prompt each when `systems`
/// is given, the same tools for all) on up to `threads` threads with the GIL released
/// (`0`: as many as pay, up to one a CPU): a list of what `pack_handoff` returns.
#[pyfunction]
#[pyo3(signature = (transcripts, options, systems, tools, threads))]
pub fn pack_many<'py>(
    transcripts: &Bound<'py, PyList>,
    options: Options<'py>,
    systems: Option<Vec<Option<Bound<'py, PyAny>>>>,
    tools: Option<Bound<'py, PyAny>>,
    threads: &Bound<'py, PyInt>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    // More threads than a usize holds means as many as there are CPUs.
    let threads = threads.extract::<usize>().unwrap_or(usize::MAX);
    crate::node::raising(|| packed_many(transcripts, &options, systems, tools, threads))
}

/// [`pack_many`] with the thread count read.
fn packed_many<'py>(
    transcripts: &Bound<'py, PyList>,
    options: &Options<'py>,
    systems: Option<Vec<Option<Bound<'py, PyAny>>>>,
    tools: Option<Bound<'py, PyAny>>,
    threads: usize,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut sizer = options.sizer()?;
    // The tools cost the same in every transcript: sized once.
    let tools_tokens = prompt_tokens(&mut sizer, None, tools)?;
    let systems = systems.unwrap_or_default();
    let each = (0..transcripts.len())
        .map(|i| {
            let system = systems.get(i).cloned().flatten();
            let system_tokens = prompt_tokens(&mut sizer, system, None)
                .map_err(|err| crate::errors::in_transcript(transcripts.py(), err, i))?;
            Ok(PackOptions { system_tokens: tools_tokens.saturating_add(system_tokens), ..(*options.pack).clone() })
        })
        .collect::<PyResult<Vec<_>>>()?;
    // A custom estimator is Python code: those transcripts are packed in place, one by one.
    let threads = if options.runs_python() { 1 } else { threads };
    crate::batch::pack_many(transcripts, &each, options, threads)
}

/// One note line for `message`.
#[pyfunction]
pub fn handoff_line(message: Bound<'_, PyAny>) -> PyResult<String> {
    crate::node::raising(|| pack::handoff_line(&PyNode(message)).map_err(crate::errors::to_py))
}

/// What a separate system prompt and the tool definitions cost (checked first).
fn prompt_tokens<'py>(
    sizer: &mut PySizer<'py>,
    system: Option<Bound<'py, PyAny>>,
    tools: Option<Bound<'py, PyAny>>,
) -> PyResult<u64> {
    pack::prompt_tokens(sizer, system.map(PyNode), "system", tools.map(PyNode)).map_err(|e| sizer.take_error(e))
}

/// Packs one transcript attached, read once when packing begins: its `HandoffPack`.
fn in_place<'py>(
    messages: &Bound<'py, PyAny>,
    options: &PackOptions,
    mut sizer: PySizer<'py>,
    budget: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    // Read once: the result comes from this reading, whatever an estimator does to the list.
    let (n, kept, packed) = packed_snapshot(Snapshot::of(messages)?, &mut sizer, options)?;
    handoff_pack(before_python(), n, kept, packed, budget)
}

/// Packs the messages a snapshot holds: their count, the kept ones as the output holds
/// them ([`crate::edited::as_output`]) and the decision. With edits, where other Python
/// code could run mid-call (a custom estimator's, another thread's while an exact count
/// has the GIL released), the edits plan on copies of the lists they index
/// ([`crate::edited::frozen`]), from which the edited messages are built. Otherwise they
/// plan on the caller's lists, and again on copies when the caller's own types' code may
/// have run meanwhile or could run as the output is built.
pub fn packed_snapshot<'py>(
    snapshot: Snapshot<'py>,
    sizer: &mut PySizer<'py>,
    options: &PackOptions,
) -> PyResult<(usize, Vec<Bound<'py, PyAny>>, Packed)> {
    let n = snapshot.len();
    let py = sizer.py();
    // The copies cost a quarter of an edited pack with chars/4, which runs no Python code
    // of its own: it reads in place, collections held off until the edited messages are
    // built. The caller's own code (a key's `__eq__`, a number's `__index__`) could
    // reorder a list the edits planned on: when reading may have run it as they planned,
    // or it could run as the output is built, they plan again, on copies.
    if options.edits.is_empty() || !sizer.lets_python_run() {
        let paused = (!options.edits.is_empty()).then(|| crate::borrow::CollectorPaused::new(py));
        let runs = crate::borrow::caller_code_runs();
        let packed = pack::pack_edited(snapshot.nodes(), &mut *sizer, options).map_err(|e| sizer.take_error(e))?;
        let unchanged =
            || crate::borrow::caller_code_runs() == runs && crate::edited::builds_in_place(snapshot.nodes(), &packed);
        if paused.is_none() || unchanged() {
            // The snapshot's borrow ends before the result is allocated.
            let kept = snapshot.into_kept(&packed.kept)?;
            return Ok((n, crate::edited::as_output(before_python(), py, kept, &packed, &[])?, packed));
        }
    }
    let frozen = crate::edited::frozen(before_python(), snapshot.nodes())?;
    let packed = pack::pack_edited(&frozen, &mut *sizer, options).map_err(|e| sizer.take_error(e))?;
    let kept = snapshot.into_kept(&packed.kept)?;
    Ok((n, crate::edited::as_output(before_python(), py, kept, &packed, &frozen)?, packed))
}
