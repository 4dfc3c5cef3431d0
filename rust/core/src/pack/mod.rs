//! Handoff packing: fit a transcript into a token budget without breaking it.
//!
//! The transcript is cut into *segments* that are kept or dropped whole (a tool call with
//! its results). The *core* — leading system messages, the latest directive and pinned
//! turns, with their segments — is always kept; if it alone overflows, it is returned
//! with `fits = false` (never a cut inside a message). Otherwise the newest segments form
//! the verbatim tail, everything between the core and the tail is dropped, and one *note*
//! placed after the system messages lists what was dropped. A trailing volatile tail
//! (`<run-state>` messages) is set aside, the history packed into what is left, and the
//! tail put back last; when the history needs the whole budget, the volatile tail goes.
//!
//! Performance notes: greedy packing reads only what its answer needs (docs/packing.md).
//! The transcript is read on demand ([`Transcript::read`]): the shape comes from the
//! newest entry that shows one; the over-budget check and the tail walk back from the
//! newest message, sizing (and so checking) only what they keep plus the segment the
//! tail stops at; chat segments are found around a message from its neighbours' roles,
//! never listed; the note writes lines for at most [`NOTE_MAX_LINES`] of the newest
//! dropped messages and counts the rest. What stays linear is the walk back to the
//! directive (one role read a message). Tried and dropped: reading the shape from the
//! messages back to the latest request (a Responses or Anthropic transcript that ends
//! with a plain user turn read as OpenAI chat). The chunked cut and Responses items
//! (paired by `call_id` anywhere after the call) list every segment.

mod note;
mod segments;
mod tail;

pub use note::{elision_marker, handoff_line, note_text, summary_note};
pub use segments::is_volatile_content;

use crate::edits::{Edit, EditContext, Edited, Plan};
use crate::encoding::{Encoding, ExactTokens};
use crate::error::{CoreError, Problem};
use crate::items::Format;
use crate::json::{JsonNode, JsonType, Key, View};
use crate::message::Role;
use crate::provider::Sizing;
use crate::request::scan::IntDigits;
use crate::tokens::{CharsPerToken, InputIndices, MessageSizer, SizedMessages};
use crate::transcript::Transcript;
use segments::{is_volatile, newest_shape, only_tool_results, seg_tokens, Segment, Segmenter};
use tail::{chunked_tail, greedy_tail, History};

/// Opens a volatile tail message (SPEC wire format).
pub const VOLATILE_TAIL_TAG: &str = "<run-state>";
/// Closes a volatile tail message.
pub const VOLATILE_TAIL_CLOSE: &str = "</run-state>";
/// First line of a note that lists dropped messages.
pub const NOTE_HEADER: &str = "Earlier conversation, folded to fit the context window (oldest first):";
/// First line of a note whose body is the caller's summary.
pub const SUMMARY_HEADER: &str = "Summary of the earlier conversation, folded to fit the context window:";
/// Dropped messages a note lists at most (the newest ones); the marker counts the rest.
pub const NOTE_MAX_LINES: usize = 40;
/// UTF-16 units of a message's text shown in its note line.
pub const LINE_SNIPPET_UNITS: usize = 80;

/// How tool exchanges are paired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `tool_calls` on an assistant message, answered by `tool` messages.
    OpenAi,
    /// `tool_use` blocks answered by `tool_result` blocks in the next user message.
    Anthropic,
    /// OpenAI Responses API items: `*_call` items answered by `*_call_output` items with
    /// the same `call_id`, with the `reasoning` items before them.
    Responses,
}

/// How the entries of a transcript packed in `dialect` are read (`None`: detected).
pub const fn format_for(dialect: Option<Dialect>) -> Format {
    match dialect {
        None => Format::Auto,
        Some(Dialect::Responses) => Format::Responses,
        Some(Dialect::OpenAi | Dialect::Anthropic) => Format::Chat,
    }
}

/// Where the verbatim tail may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cut {
    #[default]
    /// The longest run of newest segments that fits.
    Greedy,
    /// Only at fixed cut points, every `chunk` tokens from the first non-system message
    /// (`None`: a quarter of the budget; at least 1 either way).
    Chunked { chunk: Option<u64> },
}

impl Cut {
    /// The chunk size under `budget`, `None` for the greedy cut.
    pub fn chunk_size(self, budget: u64) -> Option<u64> {
        match self {
            Cut::Greedy => None,
            Cut::Chunked { chunk } => Some(chunk.unwrap_or(budget / 4).max(1)),
        }
    }
}

/// How messages, a separate system prompt and tools are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// Four UTF-16 units a token, by the seeds' rule or the provider's.
    Chars(Sizing),
    /// An embedded encoding's exact count, of the text the sizing reads.
    Exact(Encoding, Sizing),
}

impl Default for Counting {
    fn default() -> Self {
        Counting::Chars(Sizing::Seed)
    }
}

/// What to pack and how: the one value every entry point takes (`contextfold.PackOptions`
/// in Python, converted once by the binding).
#[derive(Debug, Clone, Default)]
pub struct PackOptions {
    /// Tokens available (target minus reserved output).
    pub budget: u64,
    /// Tokens of a separate system prompt (Anthropic's `system`), counted, never dropped:
    /// what [`crate::tokens::system_tokens`] gives for it.
    pub system_tokens: u64,
    /// Indices of messages to keep (user and assistant roles; others are ignored).
    pub pinned: Vec<usize>,
    /// The caller's summary of the history: the note's body when it fits.
    pub summary: Option<String>,
    /// Tool-exchange pairing; `None` detects it.
    pub dialect: Option<Dialect>,
    pub cut: Cut,
    /// How to count. A caller's own estimator (Python code) is the binding's to run: it
    /// hands the packer a sizer of its own, and this says `Chars(Seed)`.
    pub counting: Counting,
    /// Edits applied, in order, before folding ([`pack_edited`]).
    pub edits: Vec<Edit>,
    /// Where [`crate::edits::ClearToolUses`] may cut, whatever the cut: every `edit_step`
    /// tokens of tool results (`None`: the chunked cut's chunk, else a quarter of the
    /// budget; at least 1 either way).
    pub edit_step: Option<u64>,
    /// The most digits an integer in a request body may have (the bytes path refuses a
    /// body as `json.loads` would: the binding passes Python's setting at each call).
    pub int_digits: IntDigits,
}

impl PackOptions {
    /// Checks that every pinned index is one of `n` messages.
    ///
    /// # Errors
    /// The first pinned index out of range.
    pub fn check_pinned(&self, n: usize) -> Result<(), CoreError> {
        match self.pinned.iter().find(|&&p| p >= n) {
            Some(bad) => Err(CoreError::argument(format!("pinned index {bad} is out of range for {n} messages"))),
            None => Ok(()),
        }
    }
}

/// What a separate system prompt (`system`, or a Responses request's `instructions`:
/// `field` names it) and the tool definitions cost: each what a system message with that
/// content costs, the sum saturating past u64 (nothing that large fits). Each is checked
/// first: the prompt null, a string or an array; the tools null or an array of objects.
///
/// # Errors
/// [`CoreError::Prompt`] for a prompt or tools of the wrong type, and for what sizing
/// either raises about its content (no JSON form, nested too deep); what else sizing
/// raises (a callback's error).
pub fn prompt_tokens<N: JsonNode, S: MessageSizer<N>>(
    sizer: &mut S,
    system: Option<N>,
    field: &'static str,
    tools: Option<N>,
) -> Result<u64, CoreError> {
    let wrong = |field, index, expected, got: &N| CoreError::Prompt {
        field,
        index,
        problem: Problem::WrongType { expected, got: got.type_name() },
    };
    if let Some(system) = &system {
        if !matches!(system.json_type(), JsonType::Null | JsonType::Str | JsonType::Array) {
            return Err(wrong(field, None, "str, list or None", system));
        }
    }
    if let Some(tools) = &tools {
        match tools.view() {
            Ok(View::Null) => {}
            Ok(View::Array { items, .. }) => {
                if let Some((i, tool)) = items.enumerate().find(|(_, t)| t.json_type() != JsonType::Object) {
                    return Err(wrong("tools", Some(i), "a dict", &tool));
                }
            }
            _ => return Err(wrong("tools", None, "a list or None", tools)),
        }
    }
    let mut total = 0u64;
    for (name, content) in [(field, system), ("tools", tools)] {
        if let Some(content) = content {
            let tokens = crate::tokens::system_tokens(sizer, content).map_err(|e| e.in_prompt(name))?;
            total = total.saturating_add(tokens);
        }
    }
    Ok(total)
}

/// [`pack_edited`] of `messages`, counted as `options.counting` says.
///
/// # Errors
/// What [`pack_edited`] raises.
pub fn pack_messages<N: JsonNode + Clone>(messages: &[N], options: &PackOptions) -> Result<Packed, CoreError> {
    match options.counting {
        Counting::Chars(Sizing::Seed) => pack_edited(messages, CharsPerToken, options),
        Counting::Chars(sizing) => pack_edited(messages, sizing, options),
        Counting::Exact(encoding, sizing) => pack_edited(messages, ExactTokens::new(encoding, sizing), options),
    }
}

/// Packs `messages` (read on demand) under `options`, its edits applied first (SPEC §14):
/// the transcript is read as [`crate::edits::plan`] edits it, through the
/// [`Plan::overlay`], and folded as any other. `kept` names input messages (an entry an
/// edit removes is neither kept nor noted), pinned indices name them too, and `edits`
/// says what each kept message the edits changed becomes.
///
/// # Errors
/// What [`Transcript::read`], [`crate::edits::plan`] and [`pack`] raise, a message named
/// by its input index.
pub fn pack_edited<N, S>(messages: &[N], mut sizer: S, options: &PackOptions) -> Result<Packed, CoreError>
where
    N: JsonNode + Clone,
    S: MessageSizer<N> + for<'p> MessageSizer<Edited<'p, N>>,
{
    let format = format_for(options.dialect);
    if options.edits.is_empty() {
        return pack(&mut Transcript::read(messages, sizer, format)?, options);
    }
    // A size taken in one pass serves the next ones (the fit, the edits, the fold), unless
    // sizing runs the caller's code, which then sees each message as each pass reads it.
    let share = !MessageSizer::<N>::calls_out(&sizer);
    let mut fitted_sizes = None;
    // Edits that run only over the budget leave a transcript that fits it as it is: the
    // fit is found as packing finds it (sizing no more than that takes). Not with the
    // caller's estimator, which sees the entries only once they are checked, and as
    // many times and in the order the plan and the fold size them (an exception it
    // raises, Ctrl-C among them, is then never put off until the checks).
    let over_budget_only = share
        && options.edits.iter().all(|edit| match edit {
            Edit::ClearToolUses(clear) => clear.trigger.is_none_or(|trigger| trigger >= options.budget),
            Edit::ClearThinking(_) => false,
        });
    // First, as the reference checks them: an error the caller's code raises while the
    // fit reads the entries (kept to be raised when the call ends) must not hide it.
    options.check_pinned(messages.len())?;
    if over_budget_only {
        let mut t = Transcript::read(messages, &mut sizer, format)?;
        // (An error here is raised below, where the entries are checked in order.)
        if let Ok((Some(tokens), _)) = fits_whole(&mut t, options) {
            return Ok(Packed::all(messages.len(), tokens + u128::from(options.system_tokens)));
        }
        fitted_sizes = t.sizes_format().map(|format| (format, t.sizes()));
    }
    let responses = match options.dialect {
        Some(dialect) => dialect == Dialect::Responses,
        None => newest_shape(messages) == Some(Dialect::Responses),
    };
    let known = match fitted_sizes {
        Some((format, sizes)) if format == responses => sizes,
        _ => Vec::new(),
    };
    // The edits read the whole transcript, each in its own order: every entry is checked
    // first, in order, so the first malformed one is the one named; the plan reads the
    // fields so checked when they were read in its format.
    let checked = {
        let read = Transcript::read_all(messages, &mut sizer, format)?;
        if read.sizes_format() == Some(responses) {
            read.into_checked()
        } else {
            Vec::new()
        }
    };
    // What precedes a provider compaction goes first when packing, unread by the
    // provider: the edits neither count nor edit it (else a trigger it passes could clear
    // what follows, and the transcript then fit with it). It is looked for in the format
    // the edits read, which can differ from the one checking took (an entry marks
    // Responses items in a transcript whose newest entry is a chat message).
    let edit_format = if responses { Format::Responses } else { Format::Chat };
    let hidden = newest_compaction(&mut Transcript::read(messages, &mut sizer, edit_format)?, options)
        .map_or(0..0, |(prefix, compaction)| prefix..compaction.start);
    let step = options.edit_step.or(options.cut.chunk_size(options.budget)).unwrap_or(options.budget / 4).max(1);
    let context = EditContext { budget: options.budget, step, base: options.system_tokens, responses, hidden };
    let (plan, costs) = crate::edits::plan(messages, &options.edits, &mut sizer, &context, known, &checked)?;
    if plan.is_empty() {
        let mut t = Transcript::read(messages, sizer, format)?;
        if share {
            t.assume_sizes(responses, costs);
        }
        let mut packed = pack(&mut t, options)?;
        packed.edits = plan;
        return Ok(packed);
    }
    let overlay = plan.overlay(messages);
    let source = |k: usize| overlay.source.get(k).copied().unwrap_or(k);
    let in_input = |err: CoreError| match err {
        CoreError::Message { index: Some(k), field, problem } => {
            CoreError::Message { index: Some(source(k)), field, problem }
        }
        other => other,
    };
    let pinned = options.pinned.iter().filter_map(|&p| overlay.pinned(p)).collect();
    let edited = PackOptions { pinned, edits: Vec::new(), ..options.clone() };
    let mut t = Transcript::read(&overlay.nodes, InputIndices { sizer, input: source }, format).map_err(in_input)?;
    if share {
        t.assume_sizes(responses, overlay.source.iter().map(|&i| costs.get(i).copied().flatten()).collect());
    }
    let mut packed = pack(&mut t, &edited).map_err(in_input)?;
    packed.kept = packed.kept.iter().map(|&k| source(k)).collect();
    drop(t);
    drop(overlay);
    packed.edits = plan;
    Ok(packed)
}

/// The note that replaces dropped history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub text: String,
    /// `user` when the next kept message is an assistant's (or there is none), so roles
    /// keep alternating; else `assistant`.
    pub role: Role,
    /// Position in the output (the number of leading system messages kept).
    pub at: usize,
    /// Written as a Responses `message` item (`{"type": "message", "role", "content"}`).
    pub message_item: bool,
}

/// The packing decision, as indices into the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// Input indices kept, in output order (the note aside).
    pub kept: Vec<usize>,
    pub note: Option<Note>,
    pub fits: bool,
    /// Tokens of the output: kept messages, the note and the separate system prompt
    /// (exact: see [`crate::tokens`]).
    pub tokens: u128,
    /// What the edits changed: each kept message they changed is written as
    /// [`Plan::view`] presents it (empty without edits, or when none ran).
    pub edits: Plan,
}

impl Packed {
    /// The first `count` messages kept whole, `tokens` in all: what fits needs no note.
    fn all(count: usize, tokens: u128) -> Self {
        Packed { kept: (0..count).collect(), note: None, fits: true, tokens, edits: Plan::default() }
    }
}

/// Packs `t` under `options`.
///
/// # Errors
/// When a message that must be sized is malformed, a pinned index is out of range, or a
/// custom estimator fails.
pub fn pack<N: JsonNode + Clone, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    options: &PackOptions,
) -> Result<Packed, CoreError> {
    options.check_pinned(t.len())?;
    let mut packed = match pack_transcript(t, options, true) {
        Ok(whole) if whole.fits && whole.kept.len() == t.len() => whole,
        // Anything but the whole transcript fitting (a note means something was dropped):
        // a must-keep part over budget may hold pins before the compaction, which go with
        // what precedes it.
        Ok(folded) => pack_after_compaction(t, options)?.unwrap_or(folded),
        // A malformed message the fold sized may precede a compaction, which leaves it
        // unread (malformed as the caller's estimator reads it too).
        Err(malformed @ (CoreError::Message { .. } | CoreError::Callback { malformed: true })) => {
            pack_after_compaction(t, options)?.ok_or(malformed)?
        }
        Err(other) => return Err(other),
    };
    packed.tokens += u128::from(options.system_tokens);
    // The note's role is decided on the final output, the volatile tail put back.
    if let Some(note) = packed.note.as_mut() {
        let next = packed.kept.get(note.at).map(|&i| t.role(i));
        note.role = if matches!(next, None | Some(Role::Assistant)) { Role::User } else { Role::Assistant };
    }
    Ok(packed)
}

/// Provider compaction (SPEC §14): a transcript over budget whose newest entry holding a
/// compaction (a Responses `compaction` item, or a message with an Anthropic `compaction`
/// block, whichever way its tool calls pair: a framework's transcript converted to the
/// OpenAI pairing carries Anthropic's blocks) follows the leading system messages is
/// packed as the system messages, the compaction with its own segment, and what follows
/// folded into the rest of the budget: what precedes the compaction is the first to go,
/// unlisted (the provider ignores it, or the compaction carries it), and the compaction
/// is never dropped or folded. `None` without one.
fn pack_after_compaction<N: JsonNode + Clone, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    options: &PackOptions,
) -> Result<Option<Packed>, CoreError> {
    let responses = t.is_responses();
    let Some((prefix, Segment { start: at, end })) = newest_compaction(t, options) else { return Ok(None) };
    // The compaction's own segment is kept whatever happens: counted like a system prompt.
    let fixed = t.sum(0..prefix)? + t.sum(at..end)?;
    let after: Vec<N> = t.messages().get(end..).unwrap_or_default().to_vec();
    let format = if responses { Format::Responses } else { Format::Chat };
    let rest = PackOptions {
        system_tokens: options.system_tokens.saturating_add(u64::try_from(fixed).unwrap_or(u64::MAX)),
        pinned: options.pinned.iter().filter_map(|&p| p.checked_sub(end)).collect(),
        ..options.clone()
    };
    let shift = |err: CoreError| match err {
        CoreError::Message { index: Some(k), field, problem } => {
            CoreError::Message { index: Some(k + end), field, problem }
        }
        other => other,
    };
    let mut sub =
        Transcript::read(&after, InputIndices { sizer: t.sizer(), input: |k| k + end }, format).map_err(shift)?;
    // What follows the compaction has no leading system messages of its own: one right
    // after it is folded like any other message.
    let mut packed = pack_transcript(&mut sub, &rest, false).map_err(shift)?;
    let mut kept: Vec<usize> = (0..prefix).chain(at..end).collect();
    kept.extend(packed.kept.iter().map(|&k| k + end));
    packed.kept = kept;
    if let Some(note) = packed.note.as_mut() {
        note.at += prefix + end - at;
    }
    packed.tokens += fixed;
    Ok(Some(packed))
}

/// The newest provider compaction that follows the leading system messages: how many
/// those are, and the compaction's own segment (a message that goes on to call a tool,
/// with the answers; an item between a call and its output, with both). `None` without
/// one.
fn newest_compaction<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    options: &PackOptions,
) -> Option<(usize, Segment)> {
    let n = t.len();
    let responses = t.is_responses();
    // A message whose content is known not to be a list holds no compaction block.
    let found = t
        .messages()
        .iter()
        .enumerate()
        .rev()
        .find(|&(i, m)| t.content_is_list(i) != Some(false) && is_compaction(m, responses))?
        .0;
    let prefix = (0..n).find(|&i| t.role(i) != Role::System).unwrap_or(n);
    if found < prefix {
        return None;
    }
    let dialect = if responses {
        Dialect::Responses
    } else {
        options.dialect.or_else(|| newest_shape(t.messages())).unwrap_or(Dialect::OpenAi)
    };
    Some((prefix, Segmenter::new(t, prefix, n, dialect, false).containing(t, found)))
}

/// Whether an entry holds a provider's compaction: a message with an Anthropic
/// `compaction` content block, or (`responses`) a Responses `compaction` item.
///
/// Performance: a chat message's `content` alone is read (one lookup, a list's blocks
/// only when it is one): an over-budget chat transcript, and every transcript edits run
/// on, is walked whole for this, though folding reads only the messages it keeps. The
/// fold reads every role back to the directive, and with it whether the content is a
/// list ([`Transcript::content_is_list`]): those messages are not read again.
fn is_compaction<N: JsonNode>(entry: &N, responses: bool) -> bool {
    if responses && entry.get(Key::Type).and_then(|k| k.as_text().map(|k| k.eq_ascii("compaction"))) == Some(true) {
        return true;
    }
    let content = entry.get(Key::Content).filter(|c| c.json_type() == JsonType::Array);
    match content.as_ref().map(JsonNode::view) {
        Some(Ok(View::Array { mut items, .. })) => items.any(|b| segments::block_is(&b, "compaction")),
        _ => false,
    }
}

/// Packs `t`; with `system_prefix`, its leading system messages are kept whatever happens.
fn pack_transcript<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    options: &PackOptions,
    system_prefix: bool,
) -> Result<Packed, CoreError> {
    let n = t.len();
    let budget = i128::from(options.budget) - i128::from(options.system_tokens);
    let (fits, shown) = fits_whole(t, options)?;
    if let Some(tokens) = fits {
        return Ok(Packed::all(n, tokens));
    }
    let dialect = if t.is_responses() {
        Dialect::Responses
    } else {
        options.dialect.unwrap_or(if shown == Some(Dialect::Anthropic) { Dialect::Anthropic } else { Dialect::OpenAi })
    };
    // A pinned message is kept as any pin: the volatile tail is what follows the last one.
    let last_pin = options.pinned.iter().max().map_or(0, |&p| p + 1);
    let mut volatile = n;
    while volatile > last_pin
        && t.role(volatile - 1) == Role::User
        && t.peek(volatile - 1).is_some_and(|m| is_volatile(&m))
    {
        volatile -= 1;
    }
    if volatile < n {
        let tail_tokens = t.sum(volatile..n)?;
        let mut with_tail = pack_history(t, volatile, budget - signed(tail_tokens)?, dialect, options, system_prefix)?;
        if with_tail.fits {
            with_tail.kept.extend(volatile..n);
            with_tail.tokens += tail_tokens;
            return Ok(with_tail);
        }
    }
    pack_history(t, volatile, budget, dialect, options, system_prefix)
}

/// The messages' tokens when they all fit in the budget beside the separate prompt
/// (`None` when not: sized from the newest, and no further once over), and the shape the
/// newest entries show (`None` when they show none, or it was not needed). The format is
/// decided on the way.
fn fits_whole<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    options: &PackOptions,
) -> Result<(Option<u128>, Option<Dialect>), CoreError> {
    let budget = i128::from(options.budget) - i128::from(options.system_tokens);
    if let Some(tokens) = fits_as_chat(t, budget) {
        return Ok((Some(tokens), None));
    }
    // `shape="auto"` reads back to the newest entry that shows a shape only.
    let shown = if t.is_undecided() || options.dialect.is_none() { newest_shape(t.messages()) } else { None };
    t.decide_responses(shown == Some(Dialect::Responses));
    Ok((cost_within(0, t.len(), budget, |i| t.tokens(i))?, shown))
}

/// `shape="auto"` on a transcript of chat messages that fits: its tokens, read once,
/// newest first (the shape matters only to a cut, and no entry marks Responses items).
/// `None` when the format is decided, the sizer runs the caller's code (which must see
/// each message once, as read in the format decided first), or an entry is not a chat
/// message that could be sized, or the messages do not fit.
fn fits_as_chat<N: JsonNode, S: MessageSizer<N>>(t: &mut Transcript<'_, N, S>, budget: i128) -> Option<u128> {
    if !t.is_undecided() || t.sizer().calls_out() {
        return None;
    }
    let tokens = cost_within(0, t.len(), budget, |i| t.chat_tokens(i).ok_or(())).ok()??;
    t.decide_responses(false);
    Some(tokens)
}

/// What messages `from..to` cost when it is at most `budget` (`None` when not), sized
/// by `size` from the newest and no further once over.
fn cost_within<E>(
    from: usize,
    to: usize,
    budget: i128,
    mut size: impl FnMut(usize) -> Result<u64, E>,
) -> Result<Option<u128>, E> {
    // An empty range over budget too: nothing to pack under a separate prompt that is over.
    let fits = |sum: u128| i128::try_from(sum).is_ok_and(|sum| sum <= budget);
    let mut sum = 0u128;
    for i in (from..to).rev() {
        sum += u128::from(size(i)?);
        if !fits(sum) {
            return Ok(None);
        }
    }
    Ok(fits(sum).then_some(sum))
}

/// How many messages ahead of the one read a walk asks to be loaded.
const PREFETCH_AHEAD: usize = 8;

fn pack_history<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    end: usize,
    budget: i128,
    dialect: Dialect,
    options: &PackOptions,
    system_prefix: bool,
) -> Result<Packed, CoreError> {
    if let Some(tokens) = cost_within(0, end, budget, |i| t.tokens(i))? {
        return Ok(Packed::all(end, tokens));
    }
    let prefix = if system_prefix { (0..end).find(|&i| t.role(i) != Role::System).unwrap_or(end) } else { 0 };
    let chunk = options.cut.chunk_size(options.budget);
    let mut segments = Segmenter::new(t, prefix, end, dialect, chunk.is_some());
    // Every role back to the directive is read: the messages ahead are loaded meanwhile.
    let directive = (prefix..end).rev().find(|&i| {
        t.prefetch(i.wrapping_sub(PREFETCH_AHEAD));
        segments.role(t, i) == Role::User
            && t.peek(i).is_some_and(|m| !(is_volatile(&m) || dialect == Dialect::Anthropic && only_tool_results(&m)))
    });
    let pinned = options
        .pinned
        .iter()
        .copied()
        .filter(|&p| p >= prefix && p < end && matches!(segments.role(t, p), Role::User | Role::Assistant));
    let mut core: Vec<Segment> = directive.into_iter().chain(pinned).map(|i| segments.containing(t, i)).collect();
    core.sort_unstable_by_key(|s| s.start);
    core.dedup_by_key(|s| s.start);
    let mut core_tokens = signed(t.sum(0..prefix)?)?;
    for &s in &core {
        core_tokens += seg_tokens(t, s)?;
    }
    let core_messages = core.iter().flat_map(|s| s.start..s.end);
    if core_tokens > budget {
        let kept = (0..prefix).chain(core_messages).collect();
        return Ok(Packed { kept, note: None, fits: false, tokens: unsigned(core_tokens)?, edits: Plan::default() });
    }
    let room = budget - core_tokens;
    let history = History { prefix, end, core: &core };
    let (tail_start, tail_tokens, note) = match (chunk, &mut segments) {
        (Some(chunk), Segmenter::Listed { segs, .. }) => chunked_tail(t, segs, &history, room, chunk, options)?,
        _ => greedy_tail(t, &mut segments, &history, room, options)?,
    };
    let kept_core = core.iter().filter(|s| s.end <= tail_start).flat_map(|s| s.start..s.end);
    let kept = (0..prefix).chain(kept_core).chain(tail_start..end).collect();
    let mut tokens = core_tokens + tail_tokens;
    let note = match note {
        None => None,
        Some((text, cost)) => {
            tokens += cost;
            Some(Note { text, role: Role::User, at: prefix, message_item: dialect == Dialect::Responses })
        }
    };
    Ok(Packed { kept, note, fits: true, tokens: unsigned(tokens)?, edits: Plan::default() })
}

/// A total as a signed figure, for budgets less what is set aside (which may go
/// negative): exact, since totals stay far below 2^127 (see [`crate::tokens`]).
fn signed(total: u128) -> Result<i128, CoreError> {
    i128::try_from(total).map_err(|_| CoreError::internal("a token total past 2^127"))
}

/// A total of sizes back as an unsigned figure.
fn unsigned(total: i128) -> Result<u128, CoreError> {
    u128::try_from(total).map_err(|_| CoreError::internal("a negative token total"))
}

#[cfg(test)]
mod tests {
    use super::note::elision_marker_units;
    use super::*;
    use crate::edits::{ClearThinking, ClearToolUses};
    use crate::message::Checked;
    use crate::text::Text;
    use crate::tokens::CharsPerToken;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// One step: 0 user, 1 assistant, 2 tool exchange (k results of 2 calls), 3 volatile.
    fn build(steps: &[(u8, usize, usize)]) -> Vec<Value> {
        let mut out = vec![json!({"role": "system", "content": "s".repeat(20)})];
        for &(kind, size, answered) in steps {
            let text = "x".repeat(size);
            match kind {
                0 => out.push(json!({"role": "user", "content": text})),
                1 => out.push(json!({"role": "assistant", "content": text})),
                2 => {
                    let call = json!({"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}});
                    out.push(json!({"role": "assistant", "content": null, "tool_calls": [call.clone(), call]}));
                    for _ in 0..answered.min(2) {
                        out.push(json!({"role": "tool", "tool_call_id": "c", "content": text.clone()}));
                    }
                }
                _ => out.push(json!({"role": "user", "content": format!("<run-state>\n{text}\n</run-state>")})),
            }
        }
        out
    }

    #[test]
    fn marker_length_is_counted_without_building_it() {
        for n in [0, 1, 2, 9, 10, 11, 99, 100, 12_345, usize::MAX] {
            assert_eq!(elision_marker_units(n), Text::Utf8(&elision_marker(n)).utf16_len(), "{n}");
        }
    }

    #[test]
    fn lines_name_the_role_the_tools_and_the_first_words() {
        let call = json!({"id": "a", "type": "function", "function": {"name": "grep", "arguments": "{}"}});
        let m = json!({"role": "assistant", "content": "  Looking\n\tfirst ", "tool_calls": [call.clone(), call]});
        assert_eq!(handoff_line(&&m).unwrap(), "assistant [grep, grep]: Looking first");
        let m = json!({"role": "tool", "name": "read", "content": [{"type": "text", "text": "a"}, {"content": "b"}]});
        assert_eq!(handoff_line(&&m).unwrap(), "tool [read]: a b");
        assert_eq!(handoff_line(&&json!({"role": "user", "content": " \n "})).unwrap(), "user");
        assert_eq!(handoff_line(&&json!({"role": "developer", "content": "x"})).unwrap(), "developer: x");
    }

    #[test]
    fn a_malformed_message_gets_no_line_but_the_error_packing_gives() {
        let error = |m: Value| handoff_line(&&m).unwrap_err().to_string();
        assert_eq!(error(json!({"role": 5, "content": "hello"})), "message, field 'role': expected str, got value");
        assert_eq!(error(json!({"content": "hello"})), "message, field 'role': missing");
        assert_eq!(
            error(json!({"role": "user", "content": 3})),
            "message, field 'content': expected str, list or None, got value"
        );
    }

    #[test]
    fn responses_items_pair_calls_by_call_id_with_their_reasoning() {
        let big = "x".repeat(400);
        let items = vec![
            json!({"role": "developer", "content": "be brief"}),
            json!({"role": "user", "content": big}),
            json!({"type": "reasoning", "summary": []}),
            json!({"type": "function_call", "call_id": "a", "name": "grep", "arguments": "{}"}),
            json!({"type": "function_call", "call_id": "b", "name": "read", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "b", "output": "b"}),
            json!({"type": "function_call_output", "call_id": "a", "output": "a"}),
            json!({"type": "function_call_output", "call_id": "zzz", "output": "o"}),
            json!({"type": "message", "role": "user", "content": "go"}),
        ];
        let refs: Vec<&Value> = items.iter().collect();
        let mut t = Transcript::new(&refs, CharsPerToken).unwrap();
        assert!(t.is_responses());
        let options = PackOptions { budget: 170, ..PackOptions::default() };
        let p = pack(&mut t, &options).unwrap();
        // The parallel exchange is whole, its reasoning with it; the old request is
        // dropped into a message-item note.
        assert_eq!(p.kept, vec![0, 2, 3, 4, 5, 6, 7, 8]);
        assert!(p.note.is_some_and(|n| n.message_item && n.at == 1));
    }

    #[test]
    fn the_newest_compaction_is_kept_and_what_precedes_it_goes_first() {
        let text = |n: usize| "w ".repeat(n);
        let mut items = vec![json!({"type": "message", "role": "developer", "content": "brief"})];
        items.extend(
            (0..4).map(|i| json!({"type": "message", "role": "user", "content": format!("old {i} {}", text(200))})),
        );
        items.push(json!({"type": "compaction", "encrypted_content": text(100)}));
        for i in 0..6 {
            items.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "read", "arguments": "{}"}));
            items.push(json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": text(300)}));
        }
        let refs: Vec<&Value> = items.iter().collect();
        let total = Transcript::new(&refs, CharsPerToken).unwrap().sum(0..refs.len()).unwrap();
        for budget in [total / 4, total / 2, total - 50] {
            let budget = u64::try_from(budget).unwrap();
            let mut t = Transcript::new(&refs, CharsPerToken).unwrap();
            let p = pack(&mut t, &PackOptions { budget, ..PackOptions::default() }).unwrap();
            // The developer message, the compaction, then only what followed it.
            assert_eq!(p.kept[..2], [0, 5], "{budget}: {:?}", p.kept);
            assert!(p.fits && p.tokens <= u128::from(budget));
            assert!(p.note.is_none_or(|n| n.at == 2 && !n.text.contains("old ")));
        }
    }

    #[test]
    fn edits_leave_what_precedes_the_compaction_to_go_first() {
        let exchange = |k: usize, size: usize| {
            [
                json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{k}"), "name": "read", "input": {}}]}),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{k}"), "content": "x".repeat(size)}]}),
            ]
        };
        let mut items = vec![json!({"role": "user", "content": "start"})];
        items.extend(exchange(0, 2_000));
        items.push(json!({"role": "assistant", "content": [{"type": "compaction", "content": "the work so far"}]}));
        items.push(json!({"role": "user", "content": "continue"}));
        items.extend(exchange(1, 400));
        items.extend(exchange(2, 400));
        let refs: Vec<&Value> = items.iter().collect();
        let options = |edits: Vec<Edit>| PackOptions { budget: 400, edits, ..PackOptions::default() };
        let folded = pack_edited(&refs, CharsPerToken, &options(Vec::new())).unwrap();
        assert_eq!(folded.kept, (3..9).collect::<Vec<_>>());
        // What follows the compaction is under the trigger (the budget): nothing to clear.
        let clear = |trigger| Edit::ClearToolUses(ClearToolUses { trigger, keep: 1, ..ClearToolUses::default() });
        let edited = pack_edited(&refs, CharsPerToken, &options(vec![clear(None)])).unwrap();
        assert_eq!((edited.kept, edited.edits.is_empty()), (folded.kept.clone(), true));
        // Over a lower trigger, only the older result after the compaction is cleared.
        let edited = pack_edited(&refs, CharsPerToken, &options(vec![clear(Some(100))])).unwrap();
        assert_eq!(edited.kept, folded.kept);
        assert_eq!(edited.edits.messages.iter().map(|m| m.index).collect::<Vec<_>>(), vec![6]);
    }

    #[test]
    fn a_malformed_message_before_the_compaction_goes_unread() {
        let items = [
            json!({"role": "user", "content": 5}),
            json!({"role": "assistant", "content": [{"type": "compaction", "content": "all so far"}]}),
            json!({"role": "user", "content": "latest"}),
        ];
        let refs: Vec<&Value> = items.iter().collect();
        for budget in [10_000, 20] {
            let mut t = Transcript::read(&refs, CharsPerToken, Format::Auto).unwrap();
            let p = pack(&mut t, &PackOptions { budget, ..PackOptions::default() }).unwrap();
            assert_eq!((p.kept, p.note), (vec![1, 2], None), "{budget}");
        }
        // Without the compaction, the fold that sizes it says so.
        let without = [refs[0], refs[2]];
        let mut t = Transcript::read(&without, CharsPerToken, Format::Auto).unwrap();
        let err = pack(&mut t, &PackOptions { budget: 10_000, ..PackOptions::default() }).unwrap_err();
        assert!(matches!(err, CoreError::Message { index: Some(0), .. }), "{err:?}");
    }

    #[test]
    fn a_compaction_block_in_the_openai_pairing_is_kept_with_its_answers() {
        // How a framework's messages (LangChain's, from ChatAnthropic) convert: the block
        // in an assistant message whose calls are answered by `tool` messages.
        let text = |n: usize| "y ".repeat(n);
        let call = |id: &str| json!([{"id": id, "type": "function", "function": {"name": "read", "arguments": "{}"}}]);
        let mut messages: Vec<Value> =
            (0..4).map(|i| json!({"role": "user", "content": format!("old {i} {}", text(200))})).collect();
        messages.push(json!({"role": "assistant", "content": [{"type": "compaction", "content": "all"}], "tool_calls": call("c0")}));
        messages.push(json!({"role": "tool", "tool_call_id": "c0", "content": text(50)}));
        for i in 1..6 {
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": call(&format!("c{i}"))}));
            messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": text(300)}));
        }
        let refs: Vec<&Value> = messages.iter().collect();
        let total = Transcript::new(&refs, CharsPerToken).unwrap().sum(0..refs.len()).unwrap();
        for dialect in [None, Some(Dialect::OpenAi)] {
            let budget = u64::try_from(total / 3).unwrap();
            let mut t = Transcript::new(&refs, CharsPerToken).unwrap();
            let p = pack(&mut t, &PackOptions { budget, dialect, ..PackOptions::default() }).unwrap();
            assert_eq!(p.kept[..2], [4, 5], "{dialect:?}: {:?}", p.kept);
            assert!(p.fits && p.note.is_none_or(|n| !n.text.contains("old ")));
        }
    }

    #[test]
    fn responses_items_are_detected_and_checked() {
        let chat = [json!({"role": "user", "content": "x"})];
        let refs: Vec<&Value> = chat.iter().collect();
        assert!(!Transcript::new(&refs, CharsPerToken).unwrap().is_responses());
        let bad = [json!({"role": "user", "content": "x"}), json!({"type": "function_call", "call_id": 3})];
        let refs: Vec<&Value> = bad.iter().collect();
        let err = Transcript::new(&refs, CharsPerToken).err();
        assert!(matches!(err, Some(CoreError::Message { index: Some(1), field: "call_id", .. })));
        // Read as chat messages, an item without a role is an error.
        let err = Transcript::read_all(&refs, CharsPerToken, Format::Chat).err();
        assert!(matches!(err, Some(CoreError::Message { index: Some(1), field: "role", .. })));
    }

    proptest! {
        #[test]
        fn packing_invariants(
            steps in proptest::collection::vec((0u8..4, 0usize..600, 0usize..3), 0..40),
            budget in 0u64..2_000,
            chunked in any::<bool>(),
        ) {
            let values = build(&steps);
            let refs: Vec<&Value> = values.iter().collect();
            let mut t = Transcript::new(&refs, CharsPerToken).unwrap();
            let cut = if chunked { Cut::Chunked { chunk: None } } else { Cut::Greedy };
            let options = PackOptions { budget, cut, ..PackOptions::default() };
            let p = pack(&mut t, &options).unwrap();
            // Output order is input order; the system prompt is always kept first.
            prop_assert!(p.kept.windows(2).all(|w| w[0] < w[1]));
            prop_assert_eq!(p.kept.first(), Some(&0));
            // Within budget when it fits, the note counted.
            if p.fits {
                prop_assert!(p.tokens <= u128::from(budget));
            }
            // Tool exchanges are whole: a tool result is kept only with its call.
            for &k in &p.kept {
                if t.role(k) == Role::Tool {
                    let call = (0..k).rev().find(|&i| t.role(i) != Role::Tool).unwrap();
                    prop_assert!(p.kept.contains(&call));
                }
            }
            // The latest directive is kept.
            let n = values.len();
            let mut history = n;
            while history > 0 && is_volatile(t.checked(history - 1).unwrap()) {
                history -= 1;
            }
            let directive = (0..history).rev().find(|&i| t.role(i) == Role::User && !is_volatile(t.checked(i).unwrap()));
            if let Some(d) = directive {
                prop_assert!(p.kept.contains(&d));
            }
        }
    }

    /// A caller's estimator, as a binding's sizer stands for one (it calls out): chars/4,
    /// each message it is asked recorded, and `fail` deciding, by the count of calls so
    /// far and the message's index, what a call raises instead.
    struct Caller {
        asked: Vec<Option<usize>>,
        fail: fn(usize, Option<usize>) -> Option<CoreError>,
    }

    impl<N: JsonNode> MessageSizer<N> for Caller {
        fn message_tokens(
            &mut self,
            index: Option<usize>,
            message: &N,
            checked: &Checked<N>,
        ) -> Result<u64, CoreError> {
            self.asked.push(index);
            match (self.fail)(self.asked.len(), index) {
                Some(err) => Err(err),
                None => CharsPerToken.message_tokens(index, message, checked),
            }
        }

        fn system_tokens(&mut self, checked: &Checked<N>) -> Result<u64, CoreError> {
            CharsPerToken.system_tokens(checked)
        }

        fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
            MessageSizer::<N>::text_tokens(&mut CharsPerToken, text)
        }

        fn calls_out(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_callers_estimator_failing_while_edits_wait_for_the_budget_ends_the_pack() {
        // Edits that run only over the budget: the first question's error (Ctrl-C, say) is
        // the pack's, not put off until the entries are checked and then dropped.
        let messages = build(&[(0, 40, 0), (2, 400, 2), (1, 40, 0)]);
        let refs: Vec<&Value> = messages.iter().collect();
        let edits = vec![Edit::ClearToolUses(ClearToolUses::default())];
        let options = PackOptions { budget: 1_000_000, edits, ..PackOptions::default() };
        let first = |calls, _| (calls == 1).then_some(CoreError::Callback { malformed: false });
        let mut caller = Caller { asked: Vec::new(), fail: first };
        assert_eq!(pack_edited(&refs, &mut caller, &options), Err(CoreError::Callback { malformed: false }));
        assert_eq!(caller.asked.len(), 1);
    }

    #[test]
    fn an_entry_an_edit_removed_is_not_sized_again_as_given() {
        // ClearThinking sizes the reasoning item it removes; ClearToolUses then sums the
        // transcript as given from that size (the caller's estimator asked once, as the
        // reference asks it).
        let items = [
            json!({"type": "message", "role": "user", "content": "q".repeat(100)}),
            json!({"type": "reasoning", "id": "r1", "summary": [{"type": "summary_text", "text": "think"}]}),
            json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "c1", "output": "o".repeat(200)}),
            json!({"type": "message", "role": "user", "content": "next"}),
        ];
        let refs: Vec<&Value> = items.iter().collect();
        let edits = vec![
            Edit::ClearThinking(ClearThinking { keep: 0 }),
            Edit::ClearToolUses(ClearToolUses { keep: 2, ..ClearToolUses::default() }),
        ];
        let options = PackOptions { budget: 1_000, edits, ..PackOptions::default() };
        let mut caller = Caller { asked: Vec::new(), fail: |_, _| None };
        let packed = pack_edited(&refs, &mut caller, &options).unwrap();
        assert_eq!(packed.kept, vec![0, 2, 3, 4]);
        assert_eq!(caller.asked.iter().filter(|&&i| i == Some(1)).count(), 1, "{:?}", caller.asked);
    }

    #[test]
    fn a_message_the_caller_finds_malformed_before_a_compaction_goes_unread() {
        let items = [
            json!({"role": "user", "content": "x"}),
            json!({"role": "assistant", "content": [{"type": "compaction", "content": "all so far"}]}),
            json!({"role": "user", "content": "latest"}),
        ];
        let refs: Vec<&Value> = items.iter().collect();
        let options = PackOptions { budget: 10_000, ..PackOptions::default() };
        let malformed = |_, index| (index == Some(0)).then_some(CoreError::Callback { malformed: true });
        let mut t = Transcript::read(&refs, Caller { asked: Vec::new(), fail: malformed }, Format::Auto).unwrap();
        let packed = pack(&mut t, &options).unwrap();
        assert_eq!((packed.kept, packed.note), (vec![1, 2], None));
        // Any other failure of the caller's is the pack's.
        let failed = |_, index| (index == Some(0)).then_some(CoreError::Callback { malformed: false });
        let mut t = Transcript::read(&refs, Caller { asked: Vec::new(), fail: failed }, Format::Auto).unwrap();
        assert_eq!(pack(&mut t, &options), Err(CoreError::Callback { malformed: false }));
    }
}
