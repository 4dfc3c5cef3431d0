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
//! Performance notes: greedy packing sizes only what it keeps (plus the first segment
//! that does not fit): the over-budget check and the tail both walk back from the newest
//! message, and dropped messages are never sized, only summarised into note lines.

use crate::error::CoreError;
use crate::json::{JsonNode, Key, Shape, View};
use crate::text::{Snippet, Text};
use crate::tokens::{check_message, Checked, Role, Sizer, Sizes, Transcript, MESSAGE_OVERHEAD};

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
}

/// Where the verbatim tail may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The longest run of newest segments that fits.
    Greedy,
    /// Only at fixed cut points, every `chunk` tokens from the first non-system message.
    Chunked { chunk: u64 },
}

/// What to pack and how.
#[derive(Debug, Clone)]
pub struct PackOptions {
    /// Tokens available (target minus reserved output).
    pub budget: u64,
    /// Tokens of a separate system prompt (Anthropic's `system`), counted, never dropped.
    pub system_tokens: u64,
    /// Indices of messages to keep (user and assistant roles; others are ignored).
    pub pinned: Vec<usize>,
    /// The caller's summary of the history: the note's body when it fits.
    pub summary: Option<String>,
    /// Tool-exchange pairing; `None` detects it.
    pub dialect: Option<Dialect>,
    pub cut: Cut,
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
}

/// The packing decision, as indices into the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// Input indices kept, in output order (the note aside).
    pub kept: Vec<usize>,
    pub note: Option<Note>,
    pub fits: bool,
    /// Tokens of the output: kept messages, the note and the separate system prompt.
    pub tokens: u64,
}

// ---------------------------------------------------------------------------------------
// Reading messages

fn blocks<N: JsonNode>(message: &Checked<N>) -> Option<N::Items> {
    let content = message.content.as_ref().filter(|c| c.shape() == Shape::Array)?;
    match content.view() {
        Ok(View::Array { items, .. }) => Some(items),
        _ => None,
    }
}

fn block_is<N: JsonNode>(block: &N, kind: &str) -> bool {
    block.get(Key::Type).is_some_and(|t| t.as_text().is_some_and(|t| t.eq_ascii(kind)))
}

fn has_block<N: JsonNode>(message: &Checked<N>, kind: &str) -> bool {
    blocks(message).is_some_and(|mut it| it.any(|b| block_is(&b, kind)))
}

/// A user message made only of `tool_result` blocks answers a call; it is no directive.
fn only_tool_results<N: JsonNode>(message: &Checked<N>) -> bool {
    let mut seen = false;
    let all = blocks(message).is_some_and(|mut it| {
        it.all(|b| {
            seen = true;
            block_is(&b, "tool_result")
        })
    });
    all && seen
}

fn has_tool_calls<N: JsonNode>(message: &Checked<N>) -> bool {
    message.tool_calls.as_ref().is_some_and(|c| matches!(c.view(), Ok(View::Array { len, .. }) if len > 0))
}

/// Whether content (a str, or a list whose first part's `text` is one) opens with the tag.
pub fn is_volatile_content<N: JsonNode>(content: &N) -> bool {
    match content.view() {
        Ok(View::Str(t)) => t.starts_with(VOLATILE_TAIL_TAG),
        Ok(View::Array { mut items, .. }) => items
            .next()
            .and_then(|first| first.get(Key::Text))
            .is_some_and(|t| t.as_text().is_some_and(|t| t.starts_with(VOLATILE_TAIL_TAG))),
        _ => false,
    }
}

fn is_volatile<N: JsonNode>(message: &Checked<N>) -> bool {
    message.role == Role::User && message.content.as_ref().is_some_and(is_volatile_content)
}

/// Anthropic when any content block is a `tool_use` or `tool_result`, else OpenAI.
fn detect_dialect<'a, N: JsonNode + 'a>(mut messages: impl Iterator<Item = &'a Checked<N>>) -> Dialect {
    let anthropic = messages
        .any(|m| blocks(m).is_some_and(|mut it| it.any(|b| block_is(&b, "tool_use") || block_is(&b, "tool_result"))));
    if anthropic {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    }
}

/// One line for a dropped message: `role [tool, names]: first words…`.
pub fn handoff_line<N: JsonNode>(message: &N) -> String {
    // A malformed message still gets a line: its role and whatever else reads cleanly.
    let checked = check_message(message).unwrap_or(Checked { role: Role::Other, content: None, tool_calls: None });
    let mut line = String::new();
    write_handoff_line(&mut line, message, &checked);
    line
}

/// Appends [`handoff_line`] of `message` (whose fields are `checked`) to `out`.
fn write_handoff_line<N: JsonNode>(out: &mut String, message: &N, checked: &Checked<N>) {
    match checked.role.as_str() {
        Some(role) => out.push_str(role),
        None => {
            if let Some(t) = message.get(Key::Role).as_ref().and_then(JsonNode::as_text) {
                t.push_lossy(out);
            }
        }
    }
    let mut names = NameList { out, any: false };
    if let Some(calls) = &checked.tool_calls {
        if let Ok(View::Array { items, .. }) = calls.view() {
            for call in items {
                if let Some(name) = call.get(Key::Function).and_then(|f| f.get(Key::Name)) {
                    names.add(&name);
                }
            }
        }
    }
    if let Some(items) = blocks(checked) {
        for block in items.filter(|b| block_is(b, "tool_use")) {
            if let Some(name) = block.get(Key::Name) {
                names.add(&name);
            }
        }
    }
    if let Some(name) = message.get(Key::Name) {
        names.add(&name);
    }
    let out = names.close();
    let before = out.len();
    out.push_str(": ");
    let mut snippet = Snippet::new(out, LINE_SNIPPET_UNITS);
    match checked.content.as_ref().map(JsonNode::view) {
        Some(Ok(View::Str(text))) => {
            snippet.push(text);
        }
        Some(Ok(View::Array { items, .. })) => {
            'blocks: for block in items {
                for key in [Key::Text, Key::Content] {
                    if let Some(part) = block.get(key) {
                        if part.as_text().is_some_and(|text| !snippet.push(text)) {
                            break 'blocks;
                        }
                    }
                }
            }
        }
        _ => {}
    }
    if snippet.is_empty() {
        out.truncate(before);
    }
}

/// Writes ` [a, b]` for the string names added, nothing when there are none.
struct NameList<'o> {
    out: &'o mut String,
    any: bool,
}

impl<'o> NameList<'o> {
    fn add<N: JsonNode>(&mut self, name: &N) {
        if let Some(text) = name.as_text() {
            self.out.push_str(if self.any { ", " } else { " [" });
            text.push_lossy(self.out);
            self.any = true;
        }
    }

    fn close(self) -> &'o mut String {
        if self.any {
            self.out.push(']');
        }
        self.out
    }
}

/// The note's count of dropped messages it does not list.
pub fn elision_marker(n: usize) -> String {
    format!("[… {n} earlier message{} not shown]", if n == 1 { "" } else { "s" })
}

/// UTF-16 length of [`elision_marker`]`(n)`, without building it: the one-digit,
/// singular marker's length, plus further digits, plus the plural `s`.
fn elision_marker_units(n: usize) -> usize {
    const ONE_DIGIT_SINGULAR: usize = "[… 1 earlier message not shown]".len() - ("…".len() - 1);
    let digits = n.checked_ilog10().map_or(1, |d| d as usize + 1);
    ONE_DIGIT_SINGULAR + (digits - 1) + usize::from(n != 1)
}

/// UTF-16 length of [`NOTE_HEADER`] (ASCII).
const NOTE_HEADER_UNITS: usize = NOTE_HEADER.len();
const _: () = assert!(NOTE_HEADER.is_ascii());

/// A note listing `lines` (oldest first) after a marker for `unlisted` more.
pub fn note_text<'a>(lines: impl IntoIterator<Item = &'a str>, unlisted: usize) -> String {
    let mut text = String::from(NOTE_HEADER);
    if unlisted > 0 {
        text.push('\n');
        text.push_str(&elision_marker(unlisted));
    }
    for line in lines {
        text.push_str("\n- ");
        text.push_str(line);
    }
    text
}

/// A note whose body is the caller's summary.
pub fn summary_note(summary: &str) -> String {
    format!("{SUMMARY_HEADER}\n{summary}")
}

// ---------------------------------------------------------------------------------------
// Packing

/// A run of messages kept or dropped whole.
#[derive(Debug, Clone, Copy)]
struct Segment {
    start: usize,
    end: usize,
    core: bool,
}

fn segments<N: JsonNode, S: Sizer<N>>(
    t: &Transcript<'_, N, S>,
    from: usize,
    to: usize,
    dialect: Dialect,
) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        let Some(m) = t.checked(i) else { break };
        let mut end = i + 1;
        if t.role(i) == Role::Assistant {
            match dialect {
                Dialect::OpenAi if has_tool_calls(m) => {
                    while end < to && t.role(end) == Role::Tool {
                        end += 1;
                    }
                }
                Dialect::Anthropic
                    if has_block(m, "tool_use")
                        && end < to
                        && t.role(end) == Role::User
                        && t.checked(end).is_some_and(|n| has_block(n, "tool_result")) =>
                {
                    end += 1;
                }
                _ => {}
            }
        }
        out.push(Segment { start: i, end, core: false });
        i = end;
    }
    out
}

/// Packs `t` under `options`.
///
/// # Errors
/// When a message that must be sized is malformed, a pinned index is out of range, or a
/// custom estimator fails.
pub fn pack<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    options: &PackOptions,
) -> Result<Packed, CoreError> {
    let n = t.len();
    if let Some(&bad) = options.pinned.iter().find(|&&p| p >= n) {
        return Err(CoreError::argument(format!("pinned index {bad} is out of range for {n} messages")));
    }
    let mut packed = pack_transcript(t, options)?;
    packed.tokens += options.system_tokens;
    // The note's role is decided on the final output, the volatile tail put back.
    if let Some(note) = packed.note.as_mut() {
        let next = packed.kept.get(note.at).map(|&i| t.role(i));
        note.role = if matches!(next, None | Some(Role::Assistant)) { Role::User } else { Role::Assistant };
    }
    Ok(packed)
}

fn pack_transcript<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    options: &PackOptions,
) -> Result<Packed, CoreError> {
    let n = t.len();
    let budget = i128::from(options.budget) - i128::from(options.system_tokens);
    if fits_within(t, 0, n, budget)? {
        let tokens = t.sum(0..n)?;
        return Ok(Packed { kept: (0..n).collect(), note: None, fits: true, tokens });
    }
    let dialect = options.dialect.unwrap_or_else(|| detect_dialect((0..n).filter_map(|i| t.checked(i))));
    let mut volatile = n;
    while volatile > 0 && t.checked(volatile - 1).is_some_and(is_volatile) {
        volatile -= 1;
    }
    if volatile < n {
        let tail_tokens = t.sum(volatile..n)?;
        let mut with_tail = pack_history(t, volatile, budget - i128::from(tail_tokens), dialect, options)?;
        if with_tail.fits {
            with_tail.kept.extend(volatile..n);
            with_tail.tokens += tail_tokens;
            return Ok(with_tail);
        }
    }
    pack_history(t, volatile, budget, dialect, options)
}

/// Whether messages `from..to` cost at most `budget`, sizing from the newest and stopping
/// once they do not.
fn fits_within<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    from: usize,
    to: usize,
    budget: i128,
) -> Result<bool, CoreError> {
    let mut sum = 0i128;
    for i in (from..to).rev() {
        sum += i128::from(t.tokens(i)?);
        if sum > budget {
            return Ok(false);
        }
    }
    Ok(sum <= budget)
}

fn seg_tokens<N: JsonNode, S: Sizer<N>>(t: &mut Transcript<'_, N, S>, s: Segment) -> Result<i128, CoreError> {
    Ok(i128::from(t.sum(s.start..s.end)?))
}

fn note_tokens<N: JsonNode, S: Sizer<N>>(t: &mut Transcript<'_, N, S>, text: &str) -> Result<i128, CoreError> {
    Ok(i128::from(t.sizer().text_tokens(text)? + MESSAGE_OVERHEAD))
}

fn pack_history<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    end: usize,
    budget: i128,
    dialect: Dialect,
    options: &PackOptions,
) -> Result<Packed, CoreError> {
    if fits_within(t, 0, end, budget)? {
        let tokens = t.sum(0..end)?;
        return Ok(Packed { kept: (0..end).collect(), note: None, fits: true, tokens });
    }
    let prefix = (0..end).find(|&i| t.role(i) != Role::System).unwrap_or(end);
    let mut segs = segments(t, prefix, end, dialect);
    let directive = (prefix..end).rev().find(|&i| {
        t.role(i) == Role::User
            && t.checked(i).is_some_and(|m| !(is_volatile(m) || dialect == Dialect::Anthropic && only_tool_results(m)))
    });
    let pinned = options
        .pinned
        .iter()
        .copied()
        .filter(|&p| p >= prefix && p < end && matches!(t.role(p), Role::User | Role::Assistant));
    for i in directive.into_iter().chain(pinned) {
        if let Some(s) = segs.iter_mut().find(|s| s.start <= i && i < s.end) {
            s.core = true;
        }
    }
    let mut core = i128::from(t.sum(0..prefix)?);
    for s in segs.iter().filter(|s| s.core).copied().collect::<Vec<_>>() {
        core += seg_tokens(t, s)?;
    }
    let kept_core = |segs: &[Segment], before: usize| -> Vec<usize> {
        segs.iter().take(before).filter(|s| s.core).flat_map(|s| s.start..s.end).collect()
    };
    if core > budget {
        let mut kept: Vec<usize> = (0..prefix).collect();
        kept.extend(kept_core(&segs, segs.len()));
        return Ok(Packed { kept, note: None, fits: false, tokens: u64::try_from(core).unwrap_or(0) });
    }
    let room = budget - core;
    let (tail_seg, tail_tokens, note) = match options.cut {
        Cut::Greedy => greedy_tail(t, &segs, room, options)?,
        Cut::Chunked { chunk } => chunked_tail(t, &segs, room, chunk, options)?,
    };
    let mut kept: Vec<usize> = (0..prefix).collect();
    kept.extend(kept_core(&segs, tail_seg));
    kept.extend(segs.get(tail_seg..).unwrap_or_default().iter().flat_map(|s| s.start..s.end));
    let mut tokens = core + tail_tokens;
    let note = match note {
        None => None,
        Some((text, cost)) => {
            tokens += cost;
            Some(Note { text, role: Role::User, at: prefix })
        }
    };
    Ok(Packed { kept, note, fits: true, tokens: u64::try_from(tokens).unwrap_or(0) })
}

/// Messages dropped when the tail starts at segment `from`: non-core segments before it.
fn dropped_before(segs: &[Segment], from: usize) -> Vec<usize> {
    segs.iter().take(from).filter(|s| !s.core).flat_map(|s| s.start..s.end).collect()
}

/// Tokens of a listing note: `newest` lines (newest first, `lines_units` UTF-16 units
/// with their `\n- ` prefixes) after a marker for `unlisted` more. From the length alone
/// when the estimate allows (no text built per candidate), else from the text.
fn listing_tokens<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    newest: &[String],
    lines_units: usize,
    unlisted: usize,
) -> Result<i128, CoreError> {
    let marker = if unlisted > 0 { 1 + elision_marker_units(unlisted) } else { 0 };
    match t.sizer().units_tokens(NOTE_HEADER_UNITS + marker + lines_units) {
        Some(tokens) => Ok(i128::from(tokens + MESSAGE_OVERHEAD)),
        None => note_tokens(t, &listing(newest, unlisted)),
    }
}

/// The note text listing `newest` (newest first) after a marker for `unlisted` more.
fn listing(newest: &[String], unlisted: usize) -> String {
    note_text(newest.iter().rev().map(String::as_str), unlisted)
}

/// The note listing as many of the newest dropped messages as fit `room` tokens, with
/// its cost; `None` when not even the marker does.
fn listing_note<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    dropped: &[usize],
    room: i128,
) -> Result<Option<(String, i128)>, CoreError> {
    let total = dropped.len();
    let mut best_cost = listing_tokens(t, &[], 0, total)?;
    if best_cost > room {
        return Ok(None);
    }
    let mut newest: Vec<String> = Vec::new();
    let mut lines_units = 0usize;
    for &i in dropped.iter().rev().take(NOTE_MAX_LINES) {
        let (Some(message), Some(checked)) = (t.messages().get(i), t.checked(i)) else { break };
        let mut line = String::with_capacity(LINE_SNIPPET_UNITS + 32);
        write_handoff_line(&mut line, message, checked);
        let units = lines_units + 3 + Text::Utf8(&line).utf16_len();
        newest.push(line);
        let cost = listing_tokens(t, &newest, units, total - newest.len())?;
        if cost > room {
            newest.pop();
            break;
        }
        best_cost = cost;
        lines_units = units;
    }
    Ok(Some((listing(&newest, total - newest.len()), best_cost)))
}

/// How much room a note may take.
#[derive(Debug, Clone, Copy)]
enum NoteLimit {
    /// Greedy: whatever room the core and the tail leave; the summary only when it fits.
    Room(i128),
    /// Chunked: a fixed allowance (a quarter of the chunk), so the note depends only on
    /// the dropped set; the summary always (the caller checks the fit).
    Chunk(u64),
}

/// The note for `dropped`: the caller's summary, or else a listing of as many of the
/// newest dropped messages as fit; `None` when nothing is dropped or no note fits.
fn note_for<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    dropped: &[usize],
    limit: NoteLimit,
    options: &PackOptions,
) -> Result<Option<(String, i128)>, CoreError> {
    if dropped.is_empty() {
        return Ok(None);
    }
    if let Some(summary) = &options.summary {
        let text = summary_note(summary);
        let cost = note_tokens(t, &text)?;
        if matches!(limit, NoteLimit::Chunk(_)) || matches!(limit, NoteLimit::Room(room) if cost <= room) {
            return Ok(Some((text, cost)));
        }
    }
    let room = match limit {
        NoteLimit::Room(room) => room,
        NoteLimit::Chunk(chunk) => i128::from(chunk / 4).max(listing_tokens(t, &[], 0, dropped.len())?),
    };
    listing_note(t, dropped, room)
}

type TailChoice = (usize, i128, Option<(String, i128)>);

/// Greedy: extend the tail over the newest segments while core + tail + the smallest note
/// (its marker) fit; without room for even that, the tail alone decides and no note goes.
fn greedy_tail<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    segs: &[Segment],
    room: i128,
    options: &PackOptions,
) -> Result<TailChoice, CoreError> {
    let total_dropped: usize = segs.iter().filter(|s| !s.core).map(|s| s.end - s.start).sum();
    let with_note = listing_tokens(t, &[], 0, total_dropped)? <= room;
    let mut start = segs.len();
    let mut tail = 0i128;
    let mut dropped = total_dropped;
    while let Some(&seg) = start.checked_sub(1).and_then(|i| segs.get(i)) {
        if seg.core {
            start -= 1;
            continue;
        }
        let cost = seg_tokens(t, seg)?;
        let left = dropped - (seg.end - seg.start);
        let reserve = if with_note && left > 0 { listing_tokens(t, &[], 0, left)? } else { 0 };
        if tail + cost + reserve > room {
            break;
        }
        tail += cost;
        dropped = left;
        start -= 1;
    }
    let note = if with_note {
        note_for(t, &dropped_before(segs, start), NoteLimit::Room(room - tail), options)?
    } else {
        None
    };
    Ok((start, tail, note))
}

/// Chunked: the tail starts at the earliest fixed cut point where core + note + tail fit.
fn chunked_tail<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    segs: &[Segment],
    room: i128,
    chunk: u64,
    options: &PackOptions,
) -> Result<TailChoice, CoreError> {
    let chunk = chunk.max(1);
    // Cut points: where the running total from the first non-system message crosses a
    // multiple of `chunk`, moved forward to the next segment start.
    let mut candidates = Vec::new();
    let mut running = 0u64;
    for (k, &seg) in segs.iter().enumerate() {
        let before = running;
        running += t.sum(seg.start..seg.end)?;
        if running / chunk > before / chunk {
            candidates.push(k + 1);
        }
    }
    candidates.push(segs.len());
    candidates.dedup();
    // Tail cost from each segment on (non-core segments only; the core is paid already).
    let mut suffix = vec![0i128; segs.len() + 1];
    for k in (0..segs.len()).rev() {
        let seg = segs.get(k).copied().ok_or_else(|| CoreError::argument("segment out of range"))?;
        let own = if seg.core { 0 } else { seg_tokens(t, seg)? };
        let next = suffix.get(k + 1).copied().unwrap_or(0);
        if let Some(slot) = suffix.get_mut(k) {
            *slot = next + own;
        }
    }
    for &c in &candidates {
        let tail = suffix.get(c).copied().unwrap_or(0);
        if tail > room {
            continue;
        }
        match note_for(t, &dropped_before(segs, c), NoteLimit::Chunk(chunk), options)? {
            Some((text, cost)) if tail + cost <= room => return Ok((c, tail, Some((text, cost)))),
            None => return Ok((c, tail, None)),
            Some(_) => {}
        }
    }
    // No cut leaves room for a note: the earliest cut whose tail fits, without one.
    let c = candidates.iter().copied().find(|&c| suffix.get(c).copied().unwrap_or(0) <= room).unwrap_or(segs.len());
    Ok((c, suffix.get(c).copied().unwrap_or(0), None))
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(handoff_line(&&m), "assistant [grep, grep]: Looking first");
        let m = json!({"role": "tool", "name": "read", "content": [{"type": "text", "text": "a"}, {"content": "b"}]});
        assert_eq!(handoff_line(&&m), "tool [read]: a b");
        assert_eq!(handoff_line(&&json!({"role": "user", "content": " \n "})), "user");
        assert_eq!(handoff_line(&&json!({"role": "user", "content": 3})), "user");
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
            let cut = if chunked { Cut::Chunked { chunk: (budget / 4).max(1) } } else { Cut::Greedy };
            let options = PackOptions { budget, system_tokens: 0, pinned: vec![], summary: None, dialect: None, cut };
            let p = pack(&mut t, &options).unwrap();
            // Output order is input order; the system prompt is always kept first.
            prop_assert!(p.kept.windows(2).all(|w| w[0] < w[1]));
            prop_assert_eq!(p.kept.first(), Some(&0));
            // Within budget when it fits, the note counted.
            if p.fits {
                prop_assert!(p.tokens <= budget);
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
}
