//! `pack_many`: transcripts read while attached to Python, packed with the GIL released.
//!
//! Lists and dicts are mutable, so they may only be read while attached: the calling
//! thread copies each transcript into an [`Arena`], borrowing every `str`'s data in place
//! (a `str` is immutable; a reference taken on it keeps its data alive until the chunk
//! comes back). Chunks of transcripts go to worker threads (the core's one batch runner,
//! [`Workers`], which packs request bodies too) that pack them without the GIL, so reading
//! the next chunk overlaps packing the previous ones; when the workers are all busy, the
//! calling thread packs the chunk itself. Packed chunks come back to the calling thread,
//! which drops their string references (that needs the GIL) and reuses their buffers.
//!
//! Reading Python objects is most of the work for typical transcripts, and it must hold
//! the GIL, so extraction pays only when workers have real work: with one thread,
//! `pack_many` packs in place instead, as `pack_handoff` does, without copying.
//!
//! Anything an arena cannot hold (a non-JSON value, a key that is not an exact `str`, nesting past
//! [`MAX_EXTRACT_DEPTH`]) leaves that transcript to the attached path, which raises exactly as
//! one-by-one packing does.

use crate::args::Options;
use crate::borrow::{before_python, MayRunPython};
use crate::errors::in_transcript;
use crate::node::PyNode;
use crate::node::{json_type_of, text_of};
use crate::result::handoff_pack;
use crate::snapshot::{self, Snapshot};
use contextfold_core::arena::{Arena, Entry, Node};
use contextfold_core::pack::{self, PackOptions, Packed};
use contextfold_core::workers::Workers;
use contextfold_core::{CoreError, JsonType, Text};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyInt, PyList, PyString};
use pyo3::PyTypeInfo;

/// Nesting extracted before a transcript is left to the attached path (which reports
/// content nested past the core's limit).
const MAX_EXTRACT_DEPTH: usize = 256;

/// Transcripts extracted per chunk: enough to amortise a hand-over, few enough to keep
/// memory small and both threads busy.
pub const CHUNK: usize = 32;

/// A transcript packed detached: the messages it was read from, and the outcome.
pub struct Detached {
    /// The transcript's items as extracted: the result is built from these, not from
    /// the list, which other Python threads may have changed since.
    pub messages: Vec<Py<PyAny>>,
    /// With edits, a copy of each item as extracted ([`crate::edited::frozen_message`]):
    /// an edited message is built from the lists the edits planned on, which other threads
    /// cannot have changed since (the calling thread lets them run between chunks). Empty
    /// without edits.
    pub planned: Vec<Py<PyAny>>,
    pub outcome: Result<Packed, CoreError>,
}

/// A transcript in a chunk.
struct Extracted {
    index: usize,
    /// The arena positions of its messages.
    roots: Vec<usize>,
    messages: Vec<Py<PyAny>>,
    /// See [`Detached::planned`].
    planned: Vec<Py<PyAny>>,
    outcome: Option<Result<Packed, CoreError>>,
}

/// Transcripts extracted together. Dropped anywhere (an interrupted batch drops chunks
/// in flight), it releases its references: `Py` defers the decrement to the next
/// attach when dropped detached.
struct Chunk {
    /// Declared first, so it is dropped before the strings whose data it borrows.
    arena: Arena<'static>,
    transcripts: Vec<Extracted>,
    /// References keeping the data the arena borrows alive.
    strings: Vec<Py<PyString>>,
}

impl Chunk {
    fn new() -> Self {
        Chunk { arena: Arena::new(), transcripts: Vec::new(), strings: Vec::new() }
    }

    /// Empties the chunk for reuse, its packed transcripts moved to `results`. Runs
    /// attached, so the references are released at once.
    fn recycle(&mut self, _py: Python<'_>, results: &mut [Option<Detached>]) {
        self.arena.truncate(0);
        self.strings.clear();
        for t in self.transcripts.drain(..) {
            if let (Some(outcome), Some(slot)) = (t.outcome, results.get_mut(t.index)) {
                *slot = Some(Detached { messages: t.messages, planned: t.planned, outcome });
            }
        }
    }
}

/// A container being copied: where its next child comes from.
enum Open<'py> {
    List { list: Bound<'py, PyList>, next: usize, at: usize },
    Dict { dict: Bound<'py, PyDict>, pos: ffi::Py_ssize_t, at: usize, len: usize },
}

/// Copies `value` into the chunk's arena, walking nested containers with a stack of its
/// own (a thread with a small stack may call this); `None` when it holds something an
/// arena cannot.
fn extract<'py>(value: Bound<'py, PyAny>, chunk: &mut Chunk) -> Option<()> {
    let py = value.py();
    let mut open: Vec<Open<'py>> = Vec::new();
    let mut next = Some(value);
    loop {
        if let Some(value) = next.take() {
            if open.len() > MAX_EXTRACT_DEPTH {
                return None;
            }
            match json_type_of(&value) {
                JsonType::Str => extract_str(&value, chunk)?,
                JsonType::Object => {
                    let at = chunk.arena.push(Entry::Object { len: 0 });
                    // SAFETY: `json_type_of` checked the type.
                    let dict = unsafe { value.cast_into_unchecked::<PyDict>() };
                    open.push(Open::Dict { dict, pos: 0, at, len: 0 });
                }
                JsonType::Array => {
                    let at = chunk.arena.push(Entry::Array { len: 0 });
                    // SAFETY: `json_type_of` checked the type.
                    let list = unsafe { value.cast_into_unchecked::<PyList>() };
                    open.push(Open::List { list, next: 0, at });
                }
                JsonType::Null => {
                    chunk.arena.push(Entry::Null);
                }
                JsonType::Bool => {
                    chunk.arena.push(Entry::Bool(value.is_truthy().ok()?));
                }
                // Numbers by `__index__` (numpy ints) are left to the attached path.
                JsonType::Number if !PyFloat::is_type_of(&value) && !PyInt::is_type_of(&value) => return None,
                JsonType::Number => {
                    let number = match value.cast::<PyFloat>() {
                        Ok(f) => Entry::Float(f.value()),
                        Err(_) => match value.extract::<i64>() {
                            Ok(i) => Entry::Int(i),
                            // A subclass's float() may run Python code, which extraction
                            // must never do: the probe reads a transcript twice.
                            Err(_) if !PyInt::is_exact_type_of(&value) => return None,
                            Err(_) => Entry::Float(value.extract::<f64>().unwrap_or(f64::INFINITY)),
                        },
                    };
                    chunk.arena.push(number);
                }
                JsonType::Other => return None,
            }
        }
        let top = open.last_mut()?;
        match top {
            // The end found by the length, not by an IndexError: raising one allocates an
            // exception, where a collection (and finalisers) may run.
            Open::List { list, next: i, at } => match (*i < list.len()).then(|| list.get_item(*i)) {
                Some(Ok(item)) => {
                    *i += 1;
                    next = Some(item);
                }
                _ => {
                    chunk.arena.close(*at, *i);
                    open.pop();
                }
            },
            Open::Dict { dict, pos, at, len } => {
                let (mut k, mut v) = (std::ptr::null_mut(), std::ptr::null_mut());
                // SAFETY: a dict; PyDict_Next lends references, which we turn into owned
                // ones at once (and nothing here runs Python code).
                if unsafe { ffi::PyDict_Next(dict.as_ptr(), pos, &mut k, &mut v) } == 0 {
                    chunk.arena.close(*at, *len);
                    open.pop();
                } else {
                    // Keys are matched by their text in the arena: only for an exact str is
                    // that what a dict lookup finds (the attached path looks them up).
                    if unsafe { ffi::PyUnicode_CheckExact(k) } == 0 {
                        return None;
                    }
                    let (key, val) = unsafe { (Bound::from_borrowed_ptr(py, k), Bound::from_borrowed_ptr(py, v)) };
                    extract_str(&key, chunk)?;
                    *len += 1;
                    next = Some(val);
                }
            }
        }
        if open.is_empty() && next.is_none() {
            return Some(());
        }
    }
}

/// Copies a short Latin-1 string into the arena, or borrows a longer one's data.
fn extract_str(value: &Bound<'_, PyAny>, chunk: &mut Chunk) -> Option<()> {
    // SAFETY: the caller checked the type with `json_type_of`.
    let s = unsafe { value.cast_unchecked::<PyString>() };
    let text: Text<'_> = text_of(s)?;
    if let Some(leaf) = if let Text::Latin1(bytes) = text { Entry::inline(bytes) } else { None } {
        chunk.arena.push(leaf);
        return Some(());
    }
    // SAFETY: the data belongs to `s`, an immutable str on which the chunk keeps a
    // reference until its arena is cleared (see `Chunk`'s field order).
    let text = unsafe { std::mem::transmute::<Text<'_>, Text<'static>>(text) };
    chunk.strings.push(s.clone().unbind());
    chunk.arena.push(Entry::Str(text));
    Some(())
}

/// Adds transcript `index` to the chunk, or leaves it out (for the attached path). Its
/// items are listed first: with `edits`, each message is copied
/// ([`crate::edited::frozen_message`]), which allocates, and a collection that runs there
/// may run code that changes the list. The copy is what the arena reads, so the edits
/// plan on the lists the result is built from; only an exact dict whose keys are exact
/// strs is copied (its copy runs no key's code), any other message leaves the transcript
/// to the attached path.
fn extract_transcript(index: usize, transcript: &Bound<'_, PyAny>, chunk: &mut Chunk, edits: bool) {
    let Ok(list) = transcript.cast::<PyList>() else { return };
    let items: Vec<_> = list.iter().collect();
    let mark = chunk.arena.len();
    let mut roots = Vec::with_capacity(items.len());
    let mut planned = Vec::with_capacity(if edits { items.len() } else { 0 });
    for m in &items {
        roots.push(chunk.arena.len());
        // A failed copy leaves the transcript to the attached path too, which raises it.
        let read = if edits {
            m.cast_exact::<PyDict>()
                .ok()
                .filter(|dict| crate::node::keys_are_exact_strs(dict))
                .and_then(|_| crate::edited::frozen_message(before_python(), &PyNode(m.clone())).ok())
                .map(|copy| copy.0)
        } else {
            Some(m.clone())
        };
        let Some(read) = read.filter(|read| extract(read.clone(), chunk).is_some()) else {
            // The strings already referenced stay in `strings` and are released with it.
            chunk.arena.truncate(mark);
            return;
        };
        if edits {
            planned.push(read.unbind());
        }
    }
    let messages = items.into_iter().map(Bound::unbind).collect();
    chunk.transcripts.push(Extracted { index, roots, messages, planned, outcome: None });
}

/// Packs every transcript of the chunk.
fn pack_chunk(chunk: &mut Chunk, options: &[PackOptions]) {
    let Chunk { arena, transcripts, .. } = chunk;
    for t in transcripts.iter_mut() {
        let Some(opts) = options.get(t.index) else { continue };
        let messages: Vec<Node<'_, 'static>> = t.roots.iter().map(|&at| arena.node(at)).collect();
        t.outcome = Some(pack::pack_messages(&messages, opts));
    }
}

/// `pack_many`'s batch: transcript `i` packed under `options[i]` (counted as `call`
/// says), on up to `threads` threads (`0`: one a CPU); each result a `HandoffPack`, in
/// order.
///
/// `threads` is a maximum: the first transcripts are packed in place and timed, and the
/// workers are used only when reading a transcript costs clearly less than packing it
/// (else they would idle while this thread reads, and a batch asked to use two threads
/// would run slower than on one). A transcript the workers could not
/// take (or failed on) is packed in place, so its error is raised exactly as one-by-one
/// packing raises it.
///
/// # Errors
/// The first transcript's error (with a note naming it), or a signal handler's.
pub fn pack_many<'py>(
    transcripts: &Bound<'py, PyList>,
    options: &[PackOptions],
    call: &Options<'py>,
    threads: usize,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = transcripts.py();
    let mut fairness = Fairness::new(before_python(), py);
    let threads = thread_count(threads);
    let n = options.len();
    // What reading a transcript raised (a caller's exception included) carries its note.
    let pack_in_place = |i: usize, transcript: &Bound<'py, PyAny>, opts: &PackOptions| {
        crate::node::raising(|| {
            let mut sizer = call.sizer()?;
            crate::pack::packed_snapshot(Snapshot::of(transcript)?, &mut sizer, opts)
        })
        .map_err(|e| in_transcript(py, e, i))
    };
    let mut out = Vec::with_capacity(n);
    let probe = if threads > 1 && n >= PROBE + 2 * CHUNK { PROBE } else { 0 };
    let mut packing = Vec::with_capacity(probe);
    // The probe's last `GATE` transcripts are also extracted, each just before it is
    // packed in place, so the two costs are of the same transcripts (a batch's sizes vary
    // a thousandfold). Extracting first warms what packing reads: when in doubt, the
    // threads stay out.
    let mut extracting = std::time::Duration::ZERO;
    for ((i, transcript), opts) in transcripts.iter().enumerate().zip(options).take(probe) {
        if i + GATE >= probe {
            extracting += extraction_time(i, &transcript, !opts.edits.is_empty());
        }
        let started = std::time::Instant::now();
        let (n, kept, packed) = pack_in_place(i, &transcript, opts)?;
        packing.push(started.elapsed());
        out.push(handoff_pack(before_python(), n, kept, packed, &call.budget)?);
        fairness.tick(before_python())?;
    }
    let gated: std::time::Duration = packing.iter().rev().take(GATE).sum();
    // Workers pay when extracting costs clearly less than packing in place: they pack
    // what this thread extracts.
    let detached = if probe > 0 && extracting.as_secs_f64() < WORTH_IT * gated.as_secs_f64() {
        // The median: a time slice lost to another process must not make packing in
        // place look dear (a low estimate keeps the threads out when in doubt).
        packing.sort_unstable();
        let cost = packing.get(packing.len() / 2).copied().unwrap_or_default();
        pack_detached(transcripts, probe, options, threads, &mut fairness, cost)?
    } else {
        Vec::new()
    };
    let mut detached = detached.into_iter().skip(probe);
    for ((i, transcript), opts) in transcripts.iter().enumerate().zip(options).skip(probe) {
        let (n, kept, packed) = match detached.next().flatten() {
            Some(Detached { outcome: Ok(packed), messages, planned }) => {
                let bound = |items: Vec<Py<PyAny>>| -> Vec<PyNode<'py>> {
                    items.into_iter().map(|m| PyNode(m.into_bound(py))).collect()
                };
                let nodes = bound(messages);
                let kept = snapshot::kept_items(&nodes, &packed.kept)?;
                (nodes.len(), crate::edited::as_output(before_python(), py, kept, &packed, &bound(planned))?, packed)
            }
            _ => pack_in_place(i, &transcript, opts)?,
        };
        out.push(handoff_pack(before_python(), n, kept, packed, &call.budget)?);
        fairness.tick(before_python())?;
    }
    Ok(out)
}

/// Lets other Python threads run while a long batch holds the GIL, as the interpreter
/// does between bytecodes: every so often it calls a Python no-op, where the interpreter
/// hands the GIL to a thread that has waited a switch interval for it, and runs pending
/// signal handlers (so Ctrl-C stops a long batch). A bare release and retake would not
/// do: the releasing thread usually wins the GIL straight back.
pub struct Fairness<'py> {
    switch_point: Option<Bound<'py, PyAny>>,
    every: std::time::Duration,
    since: std::time::Instant,
}

impl<'py> Fairness<'py> {
    pub fn new(_: MayRunPython, py: Python<'py>) -> Self {
        let interval = py
            .import("sys")
            .and_then(|sys| sys.getattr("getswitchinterval")?.call0()?.extract::<f64>())
            .unwrap_or(0.005);
        // A quarter interval: a waiting thread gets its turn soon after it asks.
        let every = std::time::Duration::try_from_secs_f64(interval / 4.0).unwrap_or_default();
        let switch_point = py.import("contextfold._contract").and_then(|m| m.getattr("switch_point")).ok();
        Fairness { switch_point, every, since: std::time::Instant::now() }
    }

    /// Passes through the interpreter when a quarter switch interval has gone by.
    ///
    /// # Errors
    /// The exception a signal handler raised (KeyboardInterrupt).
    pub fn tick(&mut self, _: MayRunPython) -> PyResult<()> {
        if self.since.elapsed() < self.every {
            return Ok(());
        }
        if let Some(switch_point) = &self.switch_point {
            switch_point.call0()?;
            switch_point.py().check_signals()?;
        }
        self.since = std::time::Instant::now();
        Ok(())
    }
}

/// The threads to use when `requested` are allowed: at most one a CPU; `0` asks for one
/// a CPU, used only where the work pays for them (see [`pack_detached`]).
pub fn thread_count(requested: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    if requested == 0 {
        cpus
    } else {
        requested.min(cpus)
    }
}

/// Transcripts the calling thread packs in place before `pack_detached` takes over: the
/// first chunk. Its last [`GATE`] decide whether workers start; its median cost per
/// transcript is what the workers' pace is held to after [`TRIAL`] transcripts.
pub const PROBE: usize = CHUNK;

/// How much cheaper a transcript must be with workers than packed in place for them to
/// pay: the calling thread also turns their results into Python objects, and a worker
/// packing from the arena is no faster than packing in place. At 0.75, long transcripts
/// (extraction about two thirds of packing in place) took the workers and lost time on
/// a loaded machine, more than they could gain on an idle one.
const WORTH_IT: f64 = 0.5;

/// Transcripts of the probe whose extraction is timed against packing them in place
/// before any worker starts.
const GATE: usize = 4;

/// How long extracting transcript `i` takes (into a chunk dropped at once: the probe
/// packs it in place).
fn extraction_time(i: usize, transcript: &Bound<'_, PyAny>, edits: bool) -> std::time::Duration {
    let mut scratch = Chunk::new();
    let started = std::time::Instant::now();
    extract_transcript(i, transcript, &mut scratch, edits);
    started.elapsed()
}

/// Transcripts handled with workers before this thread's pace is compared with packing
/// in place again (enough chunks for the pipeline to fill).
const TRIAL: usize = 2 * CHUNK;

/// Packs transcripts `from..` with `options[i]` on up to `threads` threads (the calling
/// one included; fewer when the OS refuses to start more); for each, `None` where it was
/// left to the attached path.
///
/// Called once the probe found that extracting pays (see [`GATE`]). The threads are used
/// only while they pay against `in_place`, the measured cost of packing one transcript
/// in place. After [`TRIAL`] transcripts this thread's pace is compared with it: when
/// the workers cannot keep up (the CPUs are busy with other work) this thread packs
/// chunks itself, its pace falls to that of packing in place or below, and the rest is
/// left to the attached path.
///
/// # Errors
/// The exception a signal handler raised (KeyboardInterrupt); the chunks in flight are
/// dropped on the way out, and their references with them.
pub fn pack_detached(
    transcripts: &Bound<'_, PyList>,
    from: usize,
    options: &[PackOptions],
    threads: usize,
    fairness: &mut Fairness<'_>,
    in_place: std::time::Duration,
) -> PyResult<Vec<Option<Detached>>> {
    let py = transcripts.py();
    let total = transcripts.len();
    let mut results: Vec<Option<Detached>> = std::iter::repeat_with(|| None).take(total).collect();
    let pack = |chunk: &mut Chunk| pack_chunk(chunk, options);
    std::thread::scope(|scope| -> PyResult<()> {
        let crew = Workers::start(scope, threads, 1, &pack);
        if crew.started() == 0 {
            return Ok(()); // the OS refused: all left to the attached path
        }
        let mut chunk = Chunk::new();
        let started = std::time::Instant::now();
        // Whether `done` transcripts took clearly less time than packing them in place.
        let pays = |done: usize| started.elapsed().as_secs_f64() < WORTH_IT * in_place.as_secs_f64() * done as f64;
        for (i, transcript) in transcripts.iter().enumerate().skip(from) {
            let edits = options.get(i).is_some_and(|o| !o.edits.is_empty());
            extract_transcript(i, &transcript, &mut chunk, edits);
            let done = i + 1 - from;
            if chunk.transcripts.len() < CHUNK && i + 1 < total {
                continue;
            }
            let spare = crew.done().next().unwrap_or_else(Chunk::new);
            if let Err(mut mine) = crew.offer(std::mem::replace(&mut chunk, spare)) {
                // The workers are busy: pack this chunk here, without a GIL round trip
                // per chunk (see `Fairness`).
                pack_chunk(&mut mine, options);
                mine.recycle(py, &mut results);
                chunk.recycle(py, &mut results);
                chunk = mine;
            }
            chunk.recycle(py, &mut results);
            fairness.tick(before_python())?;
            if (done..done + CHUNK).contains(&TRIAL) && !pays(done) {
                break;
            }
        }
        // The chunks still queued are packed here too, detached, and the last ones taken
        // back as they come; their references are dropped attached, after.
        let mut last = Vec::new();
        py.detach(|| {
            crew.finish(|chunk| {
                last.push(chunk);
                true
            });
        });
        last.iter_mut().for_each(|chunk| chunk.recycle(py, &mut results));
        Ok(())
    })?;
    Ok(results)
}
