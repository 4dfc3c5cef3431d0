//! `pack_request` and `pack_requests`: request bodies (`bytes`) packed by the core with
//! the GIL released for all of the work.
//!
//! A `bytes` object is immutable, so its buffer is borrowed as it lies while the calling
//! thread holds a reference to it; nothing else of Python is read once the work starts.
//! (The Python layer turns a bytearray, memoryview or str into `bytes` first.) A batch
//! runs on up to `threads` scoped threads that take bodies one at a time from a shared
//! counter, in rounds, so Ctrl-C is seen between rounds; each body's outcome, a result
//! or its exception, comes back in input order.

use crate::errors;
use contextfold_core::pack::{Cut, PackOptions};
use contextfold_core::request::{self, PackedBody, RequestError, Root, ScanError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyString, PyTuple};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Threads a batch uses at most, whatever it is given.
const MAX_THREADS: usize = 64;

/// Bodies packed between two checks for a pending signal.
const ROUND: usize = 1024;

/// The options every body of a call is packed with.
fn options(
    budget: &Bound<'_, PyInt>,
    pinned: Vec<usize>,
    summary: Option<&Bound<'_, PyString>>,
    shape: &str,
    chunk_tokens: Option<&Bound<'_, PyInt>>,
) -> PyResult<PackOptions> {
    let dialect = crate::args::dialect(shape).ok_or_else(|| {
        errors::ArgumentError::new_err(format!("shape must be 'auto', 'openai' or 'anthropic', not {shape:?}"))
    })?;
    Ok(PackOptions {
        // Beyond u64 is beyond any transcript: the core sees "unlimited".
        budget: budget.extract::<u64>().unwrap_or(u64::MAX),
        system_tokens: 0,
        pinned,
        summary: summary.map(|s| crate::args::lossy(s).unwrap_or_default()),
        dialect,
        cut: chunk_tokens.map_or(Cut::Greedy, |c| Cut::Chunked { chunk: c.extract::<u64>().unwrap_or(u64::MAX) }),
    })
}

/// The Python exception for a body that could not be packed.
#[cold]
fn to_py(err: RequestError) -> PyErr {
    let text = err.to_string();
    match err {
        RequestError::Pack(e) => errors::to_py(e),
        RequestError::System { .. } => errors::MessageTypeError::new_err((text, None::<usize>, "system")),
        RequestError::MessagesNotAList { root: Root::Request, .. } => {
            errors::MessageTypeError::new_err((text, None::<usize>, ""))
        }
        RequestError::Scan(
            ScanError::NotUtf8 { offset } | ScanError::Syntax { offset, .. } | ScanError::TooDeep { offset },
        ) => errors::RequestError::new_err((text, offset)),
        _ => errors::RequestError::new_err((text, None::<usize>)),
    }
}

/// `(body, dropped, fits, tokens, note, kept, input_tokens)`; `body` is `input` itself
/// when nothing changed.
fn outcome<'py>(input: &Bound<'py, PyBytes>, packed: PackedBody) -> PyResult<Bound<'py, PyTuple>> {
    let py = input.py();
    let body = match &packed.body {
        Some(bytes) => PyBytes::new(py, bytes).into_any(),
        None => input.clone().into_any(),
    };
    let note = match &packed.packed.note {
        Some(note) => PyString::new(py, &note.text).into_any(),
        None => py.None().into_bound(py),
    };
    let fields: [Bound<'py, PyAny>; 7] = [
        body,
        packed.dropped.into_pyobject(py)?.into_any(),
        PyBool::new(py, packed.packed.fits).to_owned().into_any(),
        packed.packed.tokens.into_pyobject(py)?.into_any(),
        note,
        PyList::new(py, &packed.packed.kept)?.into_any(),
        packed.input_tokens.into_pyobject(py)?.into_any(),
    ];
    PyTuple::new(py, fields)
}

/// Packs one request body: `(body, dropped, fits, tokens, note, kept, input_tokens)`.
#[pyfunction]
#[pyo3(signature = (body, budget, pinned, summary, shape, chunk_tokens, transcripts=false))]
pub fn pack_request<'py>(
    body: &Bound<'py, PyBytes>,
    budget: &Bound<'py, PyInt>,
    pinned: Vec<usize>,
    summary: Option<&Bound<'py, PyString>>,
    shape: &str,
    chunk_tokens: Option<&Bound<'py, PyInt>>,
    transcripts: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let options = options(budget, pinned, summary, shape, chunk_tokens)?;
    let root = if transcripts { Root::RequestOrTranscript } else { Root::Request };
    let input = body.as_bytes();
    let packed = body.py().detach(|| request::pack_body(input, &options, root, transcripts)).map_err(to_py)?;
    outcome(body, packed)
}

/// Packs each body on up to `threads` threads: a list holding, for each body in order,
/// what `pack_request` returns or the exception it raises.
#[pyfunction]
#[pyo3(signature = (bodies, budget, pinned, summary, shape, chunk_tokens, threads, transcripts=false))]
#[allow(clippy::too_many_arguments)] // mirrors pack_request's options, plus the batch's own
pub fn pack_requests<'py>(
    bodies: &Bound<'py, PyList>,
    budget: &Bound<'py, PyInt>,
    pinned: Vec<usize>,
    summary: Option<&Bound<'py, PyString>>,
    shape: &str,
    chunk_tokens: Option<&Bound<'py, PyInt>>,
    threads: usize,
    transcripts: bool,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = bodies.py();
    let options = options(budget, pinned, summary, shape, chunk_tokens)?;
    let root = if transcripts { Root::RequestOrTranscript } else { Root::Request };
    let held: Vec<Bound<'py, PyBytes>> =
        bodies.iter().map(|b| b.cast_into::<PyBytes>().map_err(PyErr::from)).collect::<PyResult<_>>()?;
    let mut out = Vec::with_capacity(held.len());
    for round in held.chunks(ROUND) {
        let inputs: Vec<&[u8]> = round.iter().map(|b| b.as_bytes()).collect();
        let results = py.detach(|| pack_all(&inputs, &options, root, transcripts, threads));
        for (input, result) in round.iter().zip(results) {
            out.push(match result {
                Ok(packed) => outcome(input, packed)?.into_any(),
                Err(err) => to_py(err).into_value(py).into_bound(py).into_any(),
            });
        }
        py.check_signals()?;
    }
    Ok(out)
}

/// Every body's outcome, in order, packed on up to `threads` threads (the calling thread
/// among them; fewer when the system refuses more).
fn pack_all(
    inputs: &[&[u8]],
    options: &PackOptions,
    root: Root,
    count_input: bool,
    threads: usize,
) -> Vec<Result<PackedBody, RequestError>> {
    let one = |input: &[u8]| request::pack_body(input, options, root, count_input);
    let threads = threads.clamp(1, MAX_THREADS).min(inputs.len());
    if threads <= 1 {
        return inputs.iter().map(|input| one(input)).collect();
    }
    let next = AtomicUsize::new(0);
    let mut slots: Vec<Option<Result<PackedBody, RequestError>>> = Vec::new();
    slots.resize_with(inputs.len(), || None);
    std::thread::scope(|scope| {
        let indexed = || {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(input) = inputs.get(i) else { break };
                done.push((i, one(input)));
            }
            done
        };
        let workers: Vec<_> =
            (1..threads).filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, indexed).ok()).collect();
        let mut finished = indexed();
        for worker in workers {
            // A worker cannot panic (the core denies it); were one to, its bodies are
            // reported below instead of lost silently.
            finished.extend(worker.join().unwrap_or_default());
        }
        for (i, result) in finished {
            if let Some(slot) = slots.get_mut(i) {
                *slot = Some(result);
            }
        }
    });
    slots
        .into_iter()
        .map(|slot| {
            slot.unwrap_or_else(|| {
                Err(RequestError::Pack(contextfold_core::CoreError::argument("a packing thread failed")))
            })
        })
        .collect()
}
