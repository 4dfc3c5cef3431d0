//! `pack_many`: transcripts read while attached to Python, packed with the GIL released.
//!
//! Lists and dicts are mutable, so they may only be read while attached: the calling
//! thread copies each transcript into an [`Arena`], borrowing every `str`'s data in place
//! (a `str` is immutable; a reference taken on it keeps its data alive until the chunk
//! comes back). Chunks of transcripts go to worker threads that pack them without the
//! GIL, so reading the next chunk overlaps packing the previous ones; when the workers
//! are all busy, the calling thread packs the chunk itself. Packed chunks come back to
//! the calling thread, which drops their string references (that needs the GIL) and
//! reuses their buffers.
//!
//! Reading Python objects is most of the work for typical transcripts, and it must hold
//! the GIL, so extraction pays only when workers have real work: with one thread,
//! `pack_many` packs in place instead, as `pack_handoff` does, without copying.
//!
//! Anything an arena cannot hold (a non-JSON value, nesting past [`MAX_EXTRACT_DEPTH`])
//! leaves that transcript to the attached path, which raises exactly as one-by-one
//! packing does.

use crate::node::{shape_of, text_of};
use contextfold_core::pack::{self, PackOptions, Packed};
use contextfold_core::tokens::CharsPerToken;
use contextfold_core::transcript::Transcript;
use contextfold_core::tree::{Arena, Leaf, Node};
use contextfold_core::{CoreError, Shape, Text};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyList, PyString};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, TrySendError};
use std::sync::Mutex;

/// Nesting extracted before a transcript is left to the attached path (which walks
/// without recursion).
const MAX_EXTRACT_DEPTH: usize = 256;

/// Transcripts extracted per chunk: enough to amortise a hand-over, few enough to keep
/// memory small and both threads busy.
const CHUNK: usize = 32;

/// A strong reference to a `str`, taken and released only by the attached thread.
struct StrRef(*mut ffi::PyObject);

// SAFETY: a `StrRef` is only created, and its reference only released, on the thread
// attached to Python; other threads merely carry it inside a `Chunk`.
unsafe impl Send for StrRef {}

/// Transcripts extracted together.
struct Chunk {
    arena: Arena<'static>,
    /// Each transcript's index and the arena positions of its messages.
    transcripts: Vec<(usize, Vec<usize>)>,
    /// References keeping the data the arena borrows alive.
    strings: Vec<StrRef>,
    outcomes: Vec<(usize, Result<Packed, CoreError>)>,
}

impl Chunk {
    fn new() -> Self {
        Chunk { arena: Arena::new(), transcripts: Vec::new(), strings: Vec::new(), outcomes: Vec::new() }
    }

    /// Releases the string references and empties the chunk for reuse, its outcomes
    /// moved to `results`. Must run attached.
    fn recycle(&mut self, _py: Python<'_>, results: &mut [Option<Result<Packed, CoreError>>]) {
        self.arena.truncate(0);
        self.transcripts.clear();
        for s in self.strings.drain(..) {
            // SAFETY: attached (the `Python` token proves it); `s` holds a reference we took.
            unsafe { ffi::Py_DECREF(s.0) };
        }
        for (i, outcome) in self.outcomes.drain(..) {
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(outcome);
            }
        }
    }
}

/// Copies `value` into the chunk's arena; `None` when it holds something an arena cannot.
fn extract(value: &Bound<'_, PyAny>, depth: usize, chunk: &mut Chunk) -> Option<()> {
    if depth > MAX_EXTRACT_DEPTH {
        return None;
    }
    let py = value.py();
    match shape_of(value) {
        Shape::Str => {
            // SAFETY: `shape_of` checked the type.
            let s = unsafe { value.cast_unchecked::<PyString>() };
            let text: Text<'_> = text_of(s)?;
            if let Some(leaf) = if let Text::Latin1(bytes) = text { Leaf::inline(bytes) } else { None } {
                chunk.arena.push(leaf);
                return Some(());
            }
            // SAFETY: the data belongs to `s`, an immutable str on which we take a
            // reference, released only after every arena borrowing from it is cleared.
            let text = unsafe { std::mem::transmute::<Text<'_>, Text<'static>>(text) };
            unsafe { ffi::Py_INCREF(s.as_ptr()) };
            chunk.strings.push(StrRef(s.as_ptr()));
            chunk.arena.push(Leaf::Str(text));
        }
        Shape::Object => {
            let at = chunk.arena.push(Leaf::Object { len: 0 });
            let (mut pos, mut k, mut v, mut len) = (0, std::ptr::null_mut(), std::ptr::null_mut(), 0);
            // SAFETY: a dict (checked); PyDict_Next lends references that stay valid while
            // the dict is unchanged, and nothing here runs Python code.
            while unsafe { ffi::PyDict_Next(value.as_ptr(), &mut pos, &mut k, &mut v) } != 0 {
                let (key, val) = unsafe { (Bound::from_borrowed_ptr(py, k), Bound::from_borrowed_ptr(py, v)) };
                if shape_of(&key) != Shape::Str {
                    return None;
                }
                extract(&key, depth + 1, chunk)?;
                extract(&val, depth + 1, chunk)?;
                len += 1;
            }
            chunk.arena.close(at, len);
        }
        Shape::Array => {
            // SAFETY: `shape_of` checked the type.
            let list = unsafe { value.cast_unchecked::<PyList>() };
            let at = chunk.arena.push(Leaf::Array { len: 0 });
            for item in list.iter() {
                extract(&item, depth + 1, chunk)?;
            }
            chunk.arena.close(at, list.len());
        }
        Shape::Null => {
            chunk.arena.push(Leaf::Null);
        }
        Shape::Bool => {
            chunk.arena.push(Leaf::Bool(value.is_truthy().ok()?));
        }
        Shape::Number => {
            let leaf = match value.cast::<PyFloat>() {
                Ok(f) => Leaf::Float(f.value()),
                Err(_) => match value.extract::<i64>() {
                    Ok(i) => Leaf::Int(i),
                    Err(_) => Leaf::Float(value.extract::<f64>().unwrap_or(f64::INFINITY)),
                },
            };
            chunk.arena.push(leaf);
        }
        Shape::Other => return None,
    }
    Some(())
}

/// Adds transcript `index` to the chunk, or leaves it out (for the attached path).
fn extract_transcript(index: usize, transcript: &Bound<'_, PyAny>, chunk: &mut Chunk) {
    let Ok(list) = transcript.cast::<PyList>() else { return };
    let mark = chunk.arena.len();
    let mut roots = Vec::with_capacity(list.len());
    for m in list.iter() {
        roots.push(chunk.arena.len());
        if extract(&m, 0, chunk).is_none() {
            // The strings already referenced stay in `strings` and are released with it.
            chunk.arena.truncate(mark);
            return;
        }
    }
    chunk.transcripts.push((index, roots));
}

/// Packs every transcript of the chunk into its outcomes.
fn pack_chunk(chunk: &mut Chunk, options: &[PackOptions]) {
    let Chunk { arena, transcripts, outcomes, .. } = chunk;
    for (i, roots) in transcripts.iter() {
        let Some(opts) = options.get(*i) else { continue };
        let messages: Vec<Node<'_, 'static>> = roots.iter().map(|&at| arena.node(at)).collect();
        outcomes.push((*i, Transcript::new(&messages, CharsPerToken).and_then(|mut t| pack::pack(&mut t, opts))));
    }
}

/// Packs chunks from the queue until it is closed and empty, sending each back.
fn work(queue: &Mutex<Receiver<Chunk>>, done: &Sender<Chunk>, options: &[PackOptions]) {
    loop {
        let next = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        let Ok(mut chunk) = next else { return };
        pack_chunk(&mut chunk, options);
        if done.send(chunk).is_err() {
            return;
        }
    }
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
    pub fn new(py: Python<'py>) -> Self {
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
    pub fn tick(&mut self) -> PyResult<()> {
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

/// Packs each transcript with `options[i]` on `threads` threads (the calling one
/// included); `None` where a transcript was left to the attached path.
pub fn pack_detached(
    transcripts: &Bound<'_, PyList>,
    options: &[PackOptions],
    threads: usize,
    fairness: &mut Fairness<'_>,
) -> PyResult<Vec<Option<Result<Packed, CoreError>>>> {
    let py = transcripts.py();
    let total = transcripts.len();
    let mut results: Vec<Option<Result<Packed, CoreError>>> = vec![None; total];
    let (queue_tx, queue_rx) = sync_channel::<Chunk>(threads.saturating_sub(1));
    let queue = Mutex::new(queue_rx);
    let (done_tx, done_rx) = channel::<Chunk>();
    std::thread::scope(|scope| -> PyResult<()> {
        for _ in 1..threads {
            let done = done_tx.clone();
            let queue = &queue;
            scope.spawn(move || work(queue, &done, options));
        }
        let mut chunk = Chunk::new();
        for (i, transcript) in transcripts.iter().enumerate() {
            extract_transcript(i, &transcript, &mut chunk);
            if chunk.transcripts.len() < CHUNK && i + 1 < total {
                continue;
            }
            let spare = done_rx.try_recv().unwrap_or_else(|_| Chunk::new());
            match queue_tx.try_send(std::mem::replace(&mut chunk, spare)) {
                Ok(()) => {}
                Err(TrySendError::Full(mut mine) | TrySendError::Disconnected(mut mine)) => {
                    // The workers are busy: pack this chunk here, without a GIL round
                    // trip per chunk (see `Fairness`).
                    pack_chunk(&mut mine, options);
                    mine.recycle(py, &mut results);
                    chunk.recycle(py, &mut results);
                    chunk = mine;
                }
            }
            chunk.recycle(py, &mut results);
            fairness.tick()?;
        }
        drop(queue_tx);
        py.detach(|| work(&queue, &done_tx, options));
        drop(done_tx);
        // Leaving the scope joins the workers; every chunk has been sent back by then.
        Ok(())
    })?;
    chunk_results(py, done_rx, &mut results);
    Ok(results)
}

/// Collects the chunks sent back after the workers finished.
fn chunk_results(py: Python<'_>, done: Receiver<Chunk>, results: &mut [Option<Result<Packed, CoreError>>]) {
    for mut chunk in done.try_iter() {
        chunk.recycle(py, results);
    }
}
