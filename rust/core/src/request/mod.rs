//! Bytes in, bytes out: pack a request body (JSON) without building its values.
//!
//! [`scan::parse`] reads the body into a [`scan::Tape`] whose strings borrow the input;
//! the generic packer runs on it through the same accessor trait as on Python objects,
//! so the decision equals the object path's: `pack_handoff(req["messages"],
//! system=req.get("system"), tools=req.get("tools"))` for a chat body (OpenAI or
//! Anthropic), `pack_handoff(req["input"], shape="responses",
//! system=req.get("instructions"), tools=req.get("tools"))` for a Responses body (one with
//! an `input` and no `messages`). The packed body is then spliced from the input: the
//! bytes before the array, the kept items copied byte for byte (with the separators that
//! preceded them), the note as compact JSON, the bytes after the array. Provider prompt
//! caches keyed on bytes keep hitting, and only the note is ever serialised.
//!
//! A Responses `input` may be a plain string: one user message, nothing to pack. It is
//! counted (with `instructions` and `tools`) and the body comes back as it is, `kept`
//! `[0]`, `fits` whether the count is within the budget.

pub mod arrow;
pub mod head;
mod node;
mod rewrite;
pub mod scan;

pub use node::Node;
pub use scan::{IntDigits, Root, ScanError};

use crate::edits::Edited;
use crate::encoding::ExactTokens;
use crate::error::CoreError;
use crate::items::{entry_marks_responses, Format};
use crate::json::{JsonNode, JsonType};
use crate::pack::{self, Counting, Dialect, Note, PackOptions, Packed};
use crate::provider::Sizing;
use crate::tokens::{CharsPerToken, MessageSizer};
use crate::transcript::Transcript;
use crate::workers::Workers;
use scan::{Layout, Tape};
use std::fmt;

/// Why a body could not be packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// Not a JSON text `json.loads` would load.
    Scan(ScanError),
    /// The root is not what `root` accepts (`got`: its Python type name).
    NotAnObject { got: String, root: Root },
    /// The root object has neither a `messages` nor an `input` member.
    NoMessages { root: Root },
    /// `messages` is not an array (`input`: not an array or a string).
    MessagesNotAList { got: String, root: Root, responses: bool },
    /// What `pack_handoff` raises on the loaded value.
    Pack(CoreError),
}

/// The CLI's one wording for a line that holds no transcript.
const NO_TRANSCRIPT: &str = "expected a list of messages or an object with a 'messages' or 'input' list";

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Scan(e) => e.fmt(f),
            RequestError::NotAnObject { root: Root::RequestOrTranscript, .. }
            | RequestError::NoMessages { root: Root::RequestOrTranscript }
            | RequestError::MessagesNotAList { root: Root::RequestOrTranscript, .. } => f.write_str(NO_TRANSCRIPT),
            RequestError::NotAnObject { got, .. } => write!(f, "request body: expected a JSON object, got {got}"),
            RequestError::NoMessages { .. } => f.write_str("request body: no 'messages' or 'input' member"),
            RequestError::MessagesNotAList { got, responses: false, .. } => {
                write!(f, "messages: expected a list, got {got}")
            }
            RequestError::MessagesNotAList { got, responses: true, .. } => {
                write!(f, "input: expected a list or str, got {got}")
            }
            RequestError::Pack(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RequestError {}

/// A packed body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedBody {
    pub packed: Packed,
    /// Input messages left out.
    pub dropped: usize,
    /// The packed body; `None` when it is the input unchanged (everything fits).
    pub body: Option<Vec<u8>>,
    /// Tokens of all input messages (the separate system prompt aside), when asked for
    /// and known: `None` when a message packing dropped unread is one no reader can size
    /// (the body still packs, as the object path packs it).
    pub input_tokens: Option<u128>,
}

/// Packs the request body `input` under `options` (whose `system_tokens` is replaced by
/// the size of the body's own `system` or `instructions` and `tools` members).
///
/// # Errors
/// In the order the object path meets them: the body is not JSON (or not UTF-8), not an
/// object, has no `messages` (nor `input`); `system` (`instructions`) or `tools` has the
/// wrong type; `messages` is not an array (`input`: nor a string); then what packing
/// raises (a malformed message, a pinned index out of range).
pub fn pack_body(
    input: &[u8],
    options: &PackOptions,
    root: Root,
    count_input: bool,
) -> Result<PackedBody, RequestError> {
    let tape = scan::parse(input, root, options.int_digits).map_err(RequestError::Scan)?;
    let body = Body { input, tape: &tape, root, count_input };
    match options.counting {
        Counting::Chars(Sizing::Seed) => body.pack(options, CharsPerToken),
        Counting::Chars(sizing) => body.pack(options, sizing),
        Counting::Exact(encoding, sizing) => body.pack(options, ExactTokens::new(encoding, sizing)),
    }
}

/// A parsed body, to be packed.
struct Body<'t, 'a> {
    input: &'a [u8],
    tape: &'t Tape<'a>,
    root: Root,
    count_input: bool,
}

impl<'t, 'a> Body<'t, 'a> {
    fn pack<S>(&self, options: &PackOptions, mut sizer: S) -> Result<PackedBody, RequestError>
    where
        S: Clone + MessageSizer<Node<'t, 'a>> + for<'p> MessageSizer<Edited<'p, Node<'t, 'a>>>,
    {
        let (tape, root) = (self.tape, self.root);
        let (at, layout, responses) = match (tape.messages, tape.input_items) {
            (Some(at), _) => (at, &tape.layout, false),
            (None, Some(at)) => (at, &tape.input_layout, true),
            (None, None) => {
                let top = tape.node(0);
                return Err(if top.json_type() == JsonType::Object {
                    RequestError::NoMessages { root }
                } else {
                    RequestError::NotAnObject { got: top.type_name(), root }
                });
            }
        };
        let mut options = options.clone();
        if responses && options.dialect.is_none() {
            options.dialect = Some(Dialect::Responses);
        }
        let (prompt, field) = if responses { (tape.instructions, "instructions") } else { (tape.system, "system") };
        let (prompt, tools) = (prompt.map(|at| tape.node(at)), tape.tools.map(|at| tape.node(at)));
        options.system_tokens = pack::prompt_tokens(&mut sizer, prompt, field, tools).map_err(RequestError::Pack)?;
        let list = tape.node(at);
        let items = match list.view() {
            Ok(crate::View::Array { items, .. }) => items,
            Ok(crate::View::Str(_)) if responses => return self.one_message(list, &options, sizer),
            _ => return Err(RequestError::MessagesNotAList { got: list.type_name(), root, responses }),
        };
        let nodes: Vec<Node<'t, 'a>> = items.collect();
        let n = nodes.len();
        let format = pack::format_for(options.dialect);
        let spare = self.count_input.then(|| sizer.clone());
        let (packed, input_tokens) = if options.edits.is_empty() {
            let mut transcript = Transcript::read(&nodes, sizer, format).map_err(RequestError::Pack)?;
            let packed = pack::pack(&mut transcript, &options).map_err(RequestError::Pack)?;
            (packed, spare.and_then(|sizer| input_tokens(&nodes, Some(&mut transcript), sizer, format)))
        } else {
            let input = spare.and_then(|sizer| input_tokens(&nodes, None, sizer, format));
            (pack::pack_edited(&nodes, sizer, &options).map_err(RequestError::Pack)?, input)
        };
        let unchanged = packed.note.is_none() && packed.edits.is_empty() && packed.kept.iter().copied().eq(0..n);
        let body = (!unchanged).then(|| splice(self.input, layout, &packed));
        Ok(PackedBody { dropped: n - packed.kept.len().min(n), packed, body, input_tokens })
    }

    /// A Responses body whose `input` is a string: one user message, counted, never
    /// packed (the body comes back as it is).
    fn one_message<S: MessageSizer<Node<'t, 'a>>>(
        &self,
        text: Node<'t, 'a>,
        options: &PackOptions,
        mut sizer: S,
    ) -> Result<PackedBody, RequestError> {
        options.check_pinned(1).map_err(RequestError::Pack)?;
        // A user message costs what a system message with the same content costs.
        let own = crate::tokens::system_tokens(&mut sizer, text).map_err(RequestError::Pack)?;
        let tokens = u128::from(own) + u128::from(options.system_tokens);
        let fits = tokens <= u128::from(options.budget);
        let packed = Packed { kept: vec![0], note: None, fits, tokens, edits: crate::edits::Plan::default() };
        Ok(PackedBody { packed, dropped: 0, body: None, input_tokens: self.count_input.then_some(u128::from(own)) })
    }
}

/// Tokens of every entry as `tokens_of` reads them, the format decided over all of them
/// (a packing read decides from the entries it reads); `None` when one cannot be sized.
/// The sizes `packing` took serve when it read the entries in that same format.
fn input_tokens<'m, N: JsonNode, S: MessageSizer<N>>(
    nodes: &'m [N],
    packing: Option<&mut Transcript<'m, N, S>>,
    sizer: S,
    format: Format,
) -> Option<u128> {
    let responses = match format {
        Format::Responses => true,
        Format::Chat => false,
        Format::Auto => nodes.iter().any(entry_marks_responses),
    };
    if let Some(read) = packing.filter(|t| !t.is_undecided() && t.is_responses() == responses) {
        return read.sum(0..nodes.len()).ok();
    }
    Transcript::read_all(nodes, sizer, format).ok()?.sum(0..nodes.len()).ok()
}

/// Bodies [`pack_bodies_with`] hands over at once, at least (the last run aside).
const RUN: usize = 32;

/// Bodies waiting a worker: a worker should find the next one queued, not sleep, while
/// the calling thread packs a body of its own and turns a run of results into the
/// caller's values. Body sizes vary a thousandfold, so a queue of a few bodies ran dry:
/// at 8, two threads kept the two cores 91-93% busy over a 10,000-body batch; at 32, 64
/// and 128 about 98%.
const WAITING: usize = 2 * RUN;

/// A body for [`pack_bodies_with`]'s workers, and what packing it gave.
struct BodyJob<'i> {
    index: usize,
    input: &'i [u8],
    result: Option<Result<PackedBody, RequestError>>,
}

/// [`pack_body`] of each input on up to `threads` threads (the calling thread among
/// them; see [`Workers`]), handed to `ready` in input order, a run at a time, on the
/// calling thread, which packs between runs: a caller can turn results into its own
/// values while the other threads pack. When `ready` returns `false`, no body is started
/// after it and nothing more is handed over.
pub fn pack_bodies_with(
    inputs: &[&[u8]],
    options: &PackOptions,
    root: Root,
    count_input: bool,
    threads: usize,
    mut ready: impl FnMut(Vec<Result<PackedBody, RequestError>>) -> bool,
) {
    let pack = |job: &mut BodyJob<'_>| job.result = Some(pack_body(job.input, options, root, count_input));
    // Results wait in their slots until every one before them is done.
    let mut slots: Vec<Option<Result<PackedBody, RequestError>>> =
        std::iter::repeat_with(|| None).take(inputs.len()).collect();
    let mut handed = 0;
    let mut wanted = true;
    std::thread::scope(|scope| {
        let workers = Workers::start(scope, threads.min(inputs.len()), WAITING, &pack);
        for (index, input) in inputs.iter().enumerate() {
            if let Err(mut mine) = workers.offer(BodyJob { index, input, result: None }) {
                pack(&mut mine);
                put(&mut slots, mine);
            }
            workers.done().for_each(|job| put(&mut slots, job));
            wanted = hand_over(&mut slots, &mut handed, RUN, &mut ready);
            if !wanted {
                workers.stop();
                break;
            }
        }
        // The bodies still queued are packed here too, and every last one is handed over
        // as it comes: the caller turns them into its values while a long one packs.
        workers.finish(|job| {
            put(&mut slots, job);
            wanted = wanted && hand_over(&mut slots, &mut handed, RUN, &mut ready);
            wanted
        });
    });
    if wanted {
        // Packing cannot panic (the crate denies it); were a worker to, its body is
        // reported here.
        for slot in slots.iter_mut().skip(handed).filter(|slot| slot.is_none()) {
            *slot = Some(Err(RequestError::Pack(CoreError::argument("a packing thread failed"))));
        }
        hand_over(&mut slots, &mut handed, 0, &mut ready);
    }
}

/// Keeps a done job's result in its slot.
fn put(slots: &mut [Option<Result<PackedBody, RequestError>>], job: BodyJob<'_>) {
    if let (Some(result), Some(slot)) = (job.result, slots.get_mut(job.index)) {
        *slot = Some(result);
    }
}

/// Hands `ready` the results done from `handed` on, in order up to the first not done,
/// when there are at least `least` of them; false when `ready` wants no more.
fn hand_over<T>(
    slots: &mut [Option<T>],
    handed: &mut usize,
    least: usize,
    ready: &mut impl FnMut(Vec<T>) -> bool,
) -> bool {
    let tail = slots.get_mut(*handed..).unwrap_or_default();
    if tail.is_empty() || tail.iter().take_while(|slot| slot.is_some()).count() < least {
        return true;
    }
    let run: Vec<T> = tail.iter_mut().map_while(Option::take).collect();
    *handed += run.len();
    ready(run)
}

/// What a batch of rows (JSONL lines, an Arrow column's values) adds up to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RowTotals {
    /// Rows packed (the bad ones aside).
    pub packed: usize,
    pub tokens_before: u128,
    pub tokens_after: u128,
    /// Messages left out, over every row.
    pub dropped: usize,
    /// Rows that do not fit even packed.
    pub unfit: usize,
    /// Packed rows whose tokens before are unknown (see [`PackedBody::input_tokens`]):
    /// `tokens_before` leaves them out.
    pub uncounted: usize,
}

/// What packing a batch of rows gives.
#[derive(Debug, Default)]
pub struct PackedRows {
    /// Each packed row's bytes followed by the row end asked for, in input order; a bad
    /// row writes nothing.
    pub output: Vec<u8>,
    /// Where each row ends in `output`, its row end included (a bad row's end is the
    /// previous row's).
    pub ends: Vec<usize>,
    pub totals: RowTotals,
    /// Each bad row's index and error.
    pub errors: Vec<(usize, RequestError)>,
}

/// Packs each row (a request body or a bare array of messages, as a JSONL line holds)
/// on up to `threads` threads, writing each packed row followed by `end`. A row comes
/// out byte for byte when nothing of it is dropped.
pub fn pack_rows(rows: &[&[u8]], end: &[u8], options: &PackOptions, threads: usize) -> PackedRows {
    let mut results = Vec::with_capacity(rows.len());
    pack_bodies_with(rows, options, Root::RequestOrTranscript, true, threads, |run| {
        results.extend(run);
        true
    });
    let size = results
        .iter()
        .zip(rows)
        .filter_map(|(r, row)| r.as_ref().ok().map(|p| p.body.as_ref().map_or(row.len(), Vec::len) + end.len()))
        .sum();
    let mut out =
        PackedRows { output: Vec::with_capacity(size), ends: Vec::with_capacity(rows.len()), ..PackedRows::default() };
    for (index, (row, result)) in rows.iter().zip(results).enumerate() {
        match result {
            Ok(packed) => {
                out.output.extend_from_slice(packed.body.as_deref().unwrap_or(row));
                out.output.extend_from_slice(end);
                let totals = &mut out.totals;
                totals.packed += 1;
                match packed.input_tokens {
                    Some(tokens) => totals.tokens_before += tokens,
                    None => totals.uncounted += 1,
                }
                totals.tokens_after += packed.packed.tokens;
                totals.dropped += packed.dropped;
                totals.unfit += usize::from(!packed.packed.fits);
            }
            Err(err) => out.errors.push((index, err)),
        }
        out.ends.push(out.output.len());
    }
    out
}

/// What packing a block of JSONL lines (one transcript or request a line) gives.
#[derive(Debug, Default)]
pub struct PackedLines {
    /// The packed lines, each ended by `\n`, in input order; bad lines left out.
    pub output: Vec<u8>,
    /// The newlines read: how far the line numbers of the next block start on.
    pub newlines: usize,
    pub totals: RowTotals,
    /// Each bad line's index in the block (0-based) and error.
    pub errors: Vec<(usize, RequestError)>,
}

/// Packs every non-blank line of `block` followed by `rest` (lines end with `\n`; a line
/// is a request body or a bare array of messages), on up to `threads` threads. `rest` is
/// what a reader gets for the end of the block's last line when a large read stops in
/// the middle of it; only that line is copied, to join it (the whole block, when one
/// line spans it).
pub fn pack_lines(block: &[u8], rest: &[u8], options: &PackOptions, threads: usize) -> PackedLines {
    let whole = block.iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1);
    let (block, cut) = block.split_at(whole);
    let joined = [cut, rest].concat();
    // `block` ends at a newline (or is empty), so its last piece is empty: the joined
    // line stands in for it.
    let mut lines: Vec<&[u8]> = scan::lines(block).collect();
    lines.pop();
    lines.extend(scan::lines(&joined));
    let newlines = lines.len() - 1;
    let (indices, inputs): (Vec<usize>, Vec<&[u8]>) = lines
        .into_iter()
        .enumerate()
        .filter(|(_, line)| !line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r' | 0x0b | 0x0c)))
        .unzip();
    let rows = pack_rows(&inputs, b"\n", options, threads);
    let errors = rows.errors.into_iter().filter_map(|(row, err)| Some((*indices.get(row)?, err))).collect();
    PackedLines { output: rows.output, newlines, totals: rows.totals, errors }
}

/// One item of the packed messages array.
#[derive(Clone, Copy)]
enum Item<'n> {
    Message(usize),
    Note(&'n Note),
}

/// The body with the messages array holding `kept` (input indices) and the note.
fn splice(input: &[u8], layout: &Layout, packed: &Packed) -> Vec<u8> {
    let (kept, note) = (&packed.kept, packed.note.as_ref());
    let bytes = |from: usize, to: usize| input.get(from..to).unwrap_or_default();
    let spans = &layout.items;
    // What preceded item i in the input (its comma and spacing); the note, and message
    // 0 when it follows the note, take the input's second separator.
    let separator = |i: usize| match (i.checked_sub(1).and_then(|p| spans.get(p)), spans.get(i)) {
        (Some(&(_, prev_end)), Some(&(start, _))) => bytes(prev_end, start),
        _ => match (spans.first(), spans.get(1)) {
            (Some(&(_, end)), Some(&(start, _))) => bytes(end, start),
            _ => b",",
        },
    };
    let mut items: Vec<Item<'_>> = kept.iter().map(|&i| Item::Message(i)).collect();
    if let Some(note) = note {
        items.insert(note.at.min(items.len()), Item::Note(note));
    }
    let first_start = spans.first().map_or(layout.close, |&(start, _)| start);
    let last_end = spans.last().map_or(layout.open + 1, |&(_, end)| end);
    let mut out = Vec::with_capacity(input.len());
    out.extend_from_slice(bytes(0, layout.open + 1));
    for (k, item) in items.iter().enumerate() {
        out.extend_from_slice(match (k, item) {
            (0, _) => bytes(layout.open + 1, first_start),
            (_, Item::Message(i)) => separator(*i),
            (_, Item::Note(_)) => separator(0),
        });
        match item {
            Item::Message(i) => {
                if let Some(&(start, end)) = spans.get(*i) {
                    match packed.edits.edit(*i) {
                        Some(edit) => {
                            rewrite::write_edited(&mut out, bytes(start, end), edit, &packed.edits.placeholders)
                        }
                        None => out.extend_from_slice(bytes(start, end)),
                    }
                }
            }
            Item::Note(note) => write_note(&mut out, note),
        }
    }
    out.extend_from_slice(bytes(last_end, layout.close));
    out.extend_from_slice(bytes(layout.close, input.len()));
    out
}

/// The note message as compact JSON: `{"role":"user","content":"…"}`, or as a Responses
/// message item `{"type":"message","role":…}`.
pub fn write_note(out: &mut Vec<u8>, note: &Note) {
    if note.message_item {
        out.extend_from_slice(b"{\"type\":\"message\",\"role\":\"");
    } else {
        out.extend_from_slice(b"{\"role\":\"");
    }
    out.extend_from_slice(note.role.as_str().unwrap_or("user").as_bytes());
    out.extend_from_slice(b"\",\"content\":");
    write_json_string(out, &note.text);
    out.push(b'}');
}

/// `text` as a JSON string the way `JSON.stringify` (and Python's `json.dumps` with
/// `ensure_ascii=False`) writes it: non-ASCII as is, `"` `\` and control characters
/// escaped, short escapes where JSON has them, else `\u00xx` in lowercase hex.
pub fn write_json_string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0x00..=0x1f => 0,
            _ => continue,
        };
        out.extend_from_slice(bytes.get(run..i).unwrap_or_default());
        run = i + 1;
        if short == 0 {
            out.extend_from_slice(b"\\u00");
            out.push(HEX.get(usize::from(b >> 4)).copied().unwrap_or(b'0'));
            out.push(HEX.get(usize::from(b & 0xf)).copied().unwrap_or(b'0'));
        } else {
            out.push(b'\\');
            out.push(short);
        }
    }
    out.extend_from_slice(bytes.get(run..).unwrap_or_default());
    out.push(b'"');
}

#[cfg(test)]
mod tests;
