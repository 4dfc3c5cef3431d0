//! `pack_request`, `pack_requests`, `pack_lines`, `pack_rows` and `request_head`: request
//! bodies read and packed by the core with the GIL released for all of the work.
//!
//! A `bytes` object is immutable, so its buffer is borrowed as it lies while the calling
//! thread holds a reference to it; nothing else of Python is read once the work starts.
//! Any other body (bytearray, memoryview, str) goes through
//! `contextfold._contract.as_bytes` first, which copies it. A batch runs in rounds, so
//! Ctrl-C is seen between them; each body's outcome, a result or its exception, comes
//! back in input order.

use crate::args::{call_options, Options};
use crate::borrow::{before_python, MayRunPython};
use crate::errors;
use crate::strings;
use contextfold_core::pack::{Counting, PackOptions};
use contextfold_core::request::head::{self, Cap};
use contextfold_core::request::{self, arrow, scan, IntDigits, PackedBody, RequestError, Root, ScanError};
use contextfold_core::{JsonNode, Text};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyString, PyTuple};
use std::sync::Arc;

/// Bodies at least this long are packed with the GIL released (about 3 µs of work by
/// chars/4); shorter ones counted by chars/4 with it held: releasing it cost a twelfth
/// of packing a 1 kB body.
const DETACH_BYTES: usize = 8 * 1024;

/// The core's options for the bytes path. A custom estimator would run Python code in
/// the middle of the work: every public caller refuses one first
/// (`contextfold._contract.bytes_options`, the one place its error is worded).
fn bytes_options(options: Options<'_>) -> PyResult<(Arc<PackOptions>, Bound<'_, PyAny>)> {
    if options.runs_python() {
        return Err(errors::internal("a custom estimator reached the bytes path: bytes_options refuses it first"));
    }
    Ok((options.pack, options.budget))
}

/// [`bytes_options`] for a batch: its bodies held to Python's digit limit as it is at the
/// call ([`live_int_digits`], read once).
fn batch_options(options: Options<'_>) -> PyResult<(Arc<PackOptions>, Bound<'_, PyAny>)> {
    let (options, budget) = bytes_options(options)?;
    let int_digits = live_int_digits(budget.py())?;
    Ok((holding(options, int_digits), budget))
}

/// `options` with integers of at most `int_digits` digits (a copy only when they differ).
fn holding(options: Arc<PackOptions>, int_digits: IntDigits) -> Arc<PackOptions> {
    if options.int_digits == int_digits {
        options
    } else {
        Arc::new(PackOptions { int_digits, ..(*options).clone() })
    }
}

/// The most digits `json.loads` reads an integer with now: Python's limit on converting a
/// decimal string to an int (`sys.get_int_max_str_digits()`; 0, none), which a program
/// may set at any time. Python 3.10.0 to 3.10.6 have no limit (nor the function).
fn live_int_digits(py: Python<'_>) -> PyResult<IntDigits> {
    static GET: PyOnceLock<Option<Py<PyAny>>> = PyOnceLock::new();
    let get = GET.get_or_init(py, || {
        py.import("sys").and_then(|sys| sys.getattr("get_int_max_str_digits")).ok().map(Bound::unbind)
    });
    let Some(get) = get else { return Ok(IntDigits(None)) };
    let limit: usize = get.bind(py).call0()?.extract()?;
    Ok(IntDigits((limit > 0).then_some(limit)))
}

/// `read` of one body with at most [`IntDigits::FEWEST`] digits an integer, and again
/// with the live limit ([`live_int_digits`]) when that refuses a longer integer and the
/// live limit differs. Every other body reads the same under any limit Python allows, so
/// the limit, a call into Python (70-90 ns, 3% of packing a short body), is read only for
/// the rare body that needs it.
fn with_live_int_digits<T>(
    py: Python<'_>,
    read: impl Fn(IntDigits) -> Result<T, RequestError>,
) -> PyResult<Result<T, RequestError>> {
    let first = read(IntDigits::FEWEST);
    if !matches!(first, Err(RequestError::Scan(ScanError::LongInteger { .. }))) {
        return Ok(first);
    }
    let live = live_int_digits(py)?;
    Ok(if live == IntDigits::FEWEST { first } else { read(live) })
}

/// The body as `bytes`: itself, or what `as_bytes` makes of it (or raises).
fn as_bytes<'py>(_: MayRunPython, body: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    static AS_BYTES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    if let Ok(bytes) = body.cast_exact::<PyBytes>() {
        return Ok(bytes.clone());
    }
    let converted = AS_BYTES.import(body.py(), "contextfold._contract", "as_bytes")?.call1((body,))?;
    Ok(converted.cast_into::<PyBytes>()?)
}

/// The Python exception for a body that could not be packed.
#[cold]
fn to_py(err: RequestError) -> PyErr {
    let text = err.to_string();
    match err {
        RequestError::Pack(e) => errors::to_py(e),
        RequestError::MessagesNotAList { root: Root::Request, .. } => errors::message_type(text, ""),
        RequestError::Scan(
            ScanError::NotUtf8 { offset }
            | ScanError::Syntax { offset, .. }
            | ScanError::TooDeep { offset }
            | ScanError::LongInteger { offset, .. },
        ) => errors::request(text, Some(offset)),
        _ => errors::request(text, None),
    }
}

/// The `PackedRequest` for a packed body; its `body` is `input` itself when unchanged.
fn packed_request<'py>(
    _: MayRunPython,
    input: &Bound<'py, PyBytes>,
    packed: PackedBody,
    budget: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = input.py();
    let body = match &packed.body {
        Some(bytes) => PyBytes::new(py, bytes).into_any(),
        None => input.clone().into_any(),
    };
    let note = match &packed.packed.note {
        Some(note) => PyString::new(py, &note.text).into_any(),
        None => py.None().into_bound(py),
    };
    let fields = [
        body,
        PyBool::new(py, packed.packed.fits).to_owned().into_any(),
        crate::result::count(py, packed.packed.tokens)?,
        budget.clone(),
        packed.dropped.into_pyobject(py)?.into_any(),
        note,
        PyList::new(py, &packed.packed.kept)?.into_any(),
        crate::result::applied_edits(before_python(), py, &packed.packed.edits)?,
    ];
    crate::result::named_tuple(before_python(), py, crate::result::Class::PackedRequest.get(py)?, fields)
}

/// Packs one request body into a `PackedRequest`, under the call's options
/// ([`call_options`]: None when they are still to be made).
#[pyfunction]
pub fn pack_request<'py>(
    body: &Bound<'py, PyAny>,
    options: &Bound<'py, PyAny>,
    keywords: &Bound<'py, PyDict>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let Some(options) = call_options(options, keywords)? else { return Ok(None) };
    let (options, budget) = bytes_options(options)?;
    let body = as_bytes(before_python(), body)?;
    let input = body.as_bytes();
    // A short body counted by chars/4 packs in little more than releasing and retaking
    // the GIL takes (an exact count of one takes milliseconds).
    let short = input.len() < DETACH_BYTES && matches!(options.counting, Counting::Chars(_));
    let packed = with_live_int_digits(body.py(), |int_digits| {
        let options = holding(Arc::clone(&options), int_digits);
        let pack = || request::pack_body(input, &options, Root::Request, false);
        if short {
            pack()
        } else {
            body.py().detach(pack)
        }
    })?
    .map_err(to_py)?;
    packed_request(before_python(), &body, packed, &budget).map(Some)
}

/// Packs each body on up to `threads` threads: a list holding, for each body in order,
/// its `PackedRequest` or the exception `pack_request` raises for it.
#[pyfunction]
#[pyo3(signature = (bodies, options, threads=1))]
pub fn pack_requests<'py>(
    bodies: &Bound<'py, PyList>,
    options: Options<'py>,
    threads: usize,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let py = bodies.py();
    let (options, budget) = batch_options(options)?;
    // A body that cannot be read as bytes keeps its exception; the others are packed. An
    // interrupt (KeyboardInterrupt, SystemExit: not an Exception) is no body's: it stops
    // the batch.
    let held = bodies
        .iter()
        .map(|b| match as_bytes(before_python(), &b) {
            Ok(bytes) => Ok(Ok(bytes.unbind())),
            Err(err) if err.is_instance_of::<PyException>(py) => Ok(Err(err)),
            Err(interrupt) => Err(interrupt),
        })
        .collect::<PyResult<Vec<Result<Py<PyBytes>, PyErr>>>>()?;
    let inputs: Vec<&[u8]> = held.iter().map(|b| b.as_ref().map_or(&b""[..], |b| b.as_bytes(py))).collect();
    let budget = budget.unbind();
    let mut out: Vec<Py<PyAny>> = Vec::with_capacity(held.len());
    let mut failed = None;
    // The results are made here, a run at a time as they are packed in order, with the
    // GIL taken back for each run while the other threads go on packing.
    py.detach(|| {
        request::pack_bodies_with(&inputs, &options, Root::Request, false, threads, |run| {
            Python::attach(|py| {
                let start = out.len();
                for (input, result) in held.iter().skip(start).zip(run) {
                    let made = match (input, result) {
                        (Err(err), _) => Ok(err.clone_ref(py).into_value(py).into_any()),
                        (Ok(input), Ok(packed)) => {
                            packed_request(before_python(), input.bind(py), packed, budget.bind(py)).map(Bound::unbind)
                        }
                        (Ok(_), Err(err)) => Ok(to_py(err).into_value(py).into_any()),
                    };
                    match made {
                        Ok(made) => out.push(made),
                        Err(err) => {
                            failed = Some(err);
                            return false;
                        }
                    }
                }
                failed = py.check_signals().err();
                failed.is_none()
            })
        });
    });
    match failed {
        Some(err) => Err(err),
        None => Ok(out.into_iter().map(|made| made.into_bound(py)).collect()),
    }
}

/// Packs the non-blank lines of a JSONL block followed by `rest` (the end of its last
/// line; each line a request body or a bare list of messages) on up to `threads` threads:
/// `(output, newlines, packed, tokens_before, tokens_after, dropped, unfit, uncounted,
/// errors)`, where `output` holds the packed lines in order, each ended by a newline,
/// `uncounted` the packed lines whose tokens before are unknown (left out of
/// `tokens_before`), and `errors` each bad line's index in the block and its message.
#[pyfunction]
#[pyo3(signature = (block, rest, options, threads=1))]
pub fn pack_lines<'py>(
    block: &Bound<'py, PyBytes>,
    rest: &Bound<'py, PyBytes>,
    options: Options<'py>,
    threads: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = block.py();
    let (options, _) = batch_options(options)?;
    let (input, rest) = (block.as_bytes(), rest.as_bytes());
    let lines = py.detach(|| request::pack_lines(input, rest, &options, threads));
    let errors: Vec<(usize, String)> = lines.errors.iter().map(|(i, e)| (*i, e.to_string())).collect();
    (
        PyBytes::new(py, &lines.output),
        lines.newlines,
        lines.totals.packed,
        lines.totals.tokens_before,
        lines.totals.tokens_after,
        lines.totals.dropped,
        lines.totals.unfit,
        lines.totals.uncounted,
        errors,
    )
        .into_pyobject(py)
}

/// Packs rows `start..start + count` of an Arrow binary or string column, read from its
/// `data` and `offsets` buffers (64-bit offsets when `wide`), on up to `threads` threads:
/// `(data, offsets, packed, tokens_before, tokens_after, dropped, unfit, uncounted,
/// errors)`: the packed column's buffers (offsets as wide as the input's, from 0; a bad
/// row empty), the totals as `pack_lines` has them, and each bad row's index among the
/// rows and its message.
#[pyfunction]
#[pyo3(signature = (data, offsets, wide, start, count, options, threads=1))]
#[allow(clippy::needless_pass_by_value)] // pyo3 hands over the buffers; dropping them releases them
pub fn pack_rows<'py>(
    data: PyBuffer<u8>,
    offsets: PyBuffer<u8>,
    wide: bool,
    start: usize,
    count: usize,
    options: Options<'py>,
    threads: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = options.budget.py();
    let (options, _) = batch_options(options)?;
    let (data, offsets) = (bytes_of(&data)?, bytes_of(&offsets)?);
    let spans = arrow::rows(data.len(), offsets, wide, start, count).map_err(errors::to_py)?;
    // An Arrow buffer may be writable (pyarrow's own are; one may wrap a bytearray), so the
    // rows' bytes are copied out at once, attached, before the GIL is released: nothing
    // can change them while they are packed.
    let from = spans.first().map_or(0, |span| span.start);
    let held = data.get(from..spans.last().map_or(from, |span| span.end)).unwrap_or_default().to_vec();
    let rows: Vec<&[u8]> = spans.iter().map(|s| held.get(s.start - from..s.end - from).unwrap_or_default()).collect();
    let packed = py.detach(|| request::pack_rows(&rows, b"", &options, threads));
    let offsets = arrow::offsets(&packed.ends, wide).map_err(errors::to_py)?;
    let errors: Vec<(usize, String)> = packed.errors.iter().map(|(i, e)| (*i, e.to_string())).collect();
    let totals = packed.totals;
    (
        PyBytes::new(py, &packed.output),
        PyBytes::new(py, &offsets),
        totals.packed,
        totals.tokens_before,
        totals.tokens_after,
        totals.dropped,
        totals.unfit,
        totals.uncounted,
        errors,
    )
        .into_pyobject(py)
}

/// The bytes a buffer holds, borrowed: to be read only while attached (another Python
/// thread may write to it once the GIL is released).
fn bytes_of(buffer: &PyBuffer<u8>) -> PyResult<&[u8]> {
    if !buffer.is_c_contiguous() {
        return Err(errors::argument("a buffer of rows must be contiguous".into()));
    }
    // SAFETY: a contiguous buffer of `len_bytes` bytes at `buf_ptr`, kept alive while the
    // `PyBuffer` is held, which outlives the slice; read only while attached.
    Ok(unsafe { std::slice::from_raw_parts(buffer.buf_ptr().cast::<u8>(), buffer.len_bytes()) })
}

/// What a gateway reads of a request body before packing it, as `json.loads` reads it:
/// `(model, caps, messages, input)` (see `contextfold.reference.request_head`); `None`
/// when a cap is an integer past 2**63 - 1, which only `json.loads` reads exactly. The
/// body is read with the GIL released.
#[pyfunction]
pub fn request_head<'py>(body: &Bound<'py, PyBytes>) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let py = body.py();
    let input = body.as_bytes();
    let nothing =
        || (None::<Bound<'py, PyString>>, (None::<u64>, None::<u64>, None::<u64>), None::<usize>, None::<usize>);
    let read = |int_digits| py.detach(|| scan::parse(input, Root::Request, int_digits)).map_err(RequestError::Scan);
    let Ok(tape) = with_live_int_digits(py, read)? else {
        return nothing().into_pyobject(py).map(Some);
    };
    let Some(found) = head::head(&tape.node(0)) else {
        return nothing().into_pyobject(py).map(Some);
    };
    let mut caps = [None; 3];
    for (cap, found) in caps.iter_mut().zip(found.caps) {
        *cap = match found {
            Cap::None => None,
            Cap::Count(n) => Some(n),
            Cap::Beyond => return Ok(None),
        };
    }
    let model = match found.model.as_ref().and_then(JsonNode::as_text) {
        Some(Text::Utf8(text)) => Some(PyString::new(py, text)),
        Some(text) => Some(strings::from_code_points(py, &text.code_points().collect::<Vec<_>>())?),
        None => None,
    };
    let [first, second, third] = caps;
    (model, (first, second, third), found.messages, found.input).into_pyobject(py).map(Some)
}
