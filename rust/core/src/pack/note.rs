//! The note that replaces dropped history: one line a dropped message, or the caller's summary.

use super::segments::{block_is, blocks, Segment};
use super::{PackOptions, LINE_SNIPPET_UNITS, NOTE_HEADER, NOTE_MAX_LINES, SUMMARY_HEADER};
use crate::error::CoreError;
use crate::items::check_entry;
use crate::json::{JsonNode, JsonType, Key, View};
use crate::message::Checked;
use crate::text::{Snippet, Text};
use crate::tokens::{MessageSizer, MESSAGE_OVERHEAD};
use crate::transcript::Transcript;

/// One line for a dropped message: `role [tool, names]: first words…`; an item with no
/// role (a Responses call, output or reasoning item) is named by its `type`.
///
/// # Errors
/// When the message is malformed as packing would find it: the same error, naming the
/// field (a line made of whatever reads cleanly would differ between readers). An entry
/// is read as a Responses item when it marks one, as `message_tokens` reads it.
pub fn handoff_line<N: JsonNode>(message: &N) -> Result<String, CoreError> {
    let checked = check_entry(message)?;
    let mut line = String::new();
    write_handoff_line(&mut line, message, &checked);
    Ok(line)
}

/// Appends [`handoff_line`] of `message` (whose fields are `checked`) to `out`.
fn write_handoff_line<N: JsonNode>(out: &mut String, message: &N, checked: &Checked<N>) {
    let label = message.get(Key::Role).filter(|r| r.json_type() == JsonType::Str).or_else(|| message.get(Key::Type));
    if let Some(t) = label.as_ref().and_then(JsonNode::as_text) {
        t.push_lossy(out);
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
    // The content's text; an item without content (a call's output) shows its `output`.
    let output;
    let text = match &checked.content {
        Some(content) => Some(content),
        None => {
            output = message.get(Key::Output);
            output.as_ref()
        }
    };
    match text {
        Some(text) if text.json_type() == JsonType::Str => {
            text.push_to(&mut snippet);
        }
        Some(text) => {
            if let Ok(View::Array { items, .. }) = text.view() {
                'blocks: for block in items {
                    for key in [Key::Text, Key::Content] {
                        if block.get(key).and_then(|part| part.push_to(&mut snippet)) == Some(false) {
                            break 'blocks;
                        }
                    }
                }
            }
        }
        None => {}
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
pub(super) fn elision_marker_units(n: usize) -> usize {
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

fn note_tokens<N: JsonNode, S: MessageSizer<N>>(t: &mut Transcript<'_, N, S>, text: &str) -> Result<i128, CoreError> {
    Ok(i128::from(t.sizer().text_tokens(text)?) + i128::from(MESSAGE_OVERHEAD))
}

/// Tokens of a listing note: `newest` lines (newest first, `lines_units` UTF-16 units
/// with their `\n- ` prefixes) after a marker for `unlisted` more. From the length alone
/// when the estimate allows (no text built per candidate), else from the text.
pub(super) fn listing_tokens<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    newest: &[String],
    lines_units: usize,
    unlisted: usize,
) -> Result<i128, CoreError> {
    growing_listing_tokens(t, newest, lines_units, unlisted, &mut CountedLines::default())
}

/// The parts of a listing's lines counted so far, for a sizer that counts them apart.
#[derive(Default)]
struct CountedLines {
    lines: usize,
    tokens: u64,
}

/// [`listing_tokens`] of a listing whose lines only grow (older ones added) between
/// calls with the same `counted`: where the encoding allows it (see [`listing_head`]),
/// each line is counted once for all the candidate notes that list it.
fn growing_listing_tokens<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    newest: &[String],
    lines_units: usize,
    unlisted: usize,
    counted: &mut CountedLines,
) -> Result<i128, CoreError> {
    let marker = if unlisted > 0 { 1 + elision_marker_units(unlisted) } else { 0 };
    match t.sizer().units_tokens(NOTE_HEADER_UNITS + marker + lines_units) {
        Some(tokens) => Ok(i128::from(tokens) + i128::from(MESSAGE_OVERHEAD)),
        None if t.sizer().splits_before_dash_lines() => {
            for (i, line) in newest.iter().enumerate().skip(counted.lines) {
                counted.tokens = counted.tokens.saturating_add(t.sizer().text_tokens(&listing_part(i, line))?);
            }
            counted.lines = newest.len();
            let head = t.sizer().text_tokens(&listing_head(unlisted, !newest.is_empty()))?;
            Ok(i128::from(counted.tokens) + i128::from(head) + i128::from(MESSAGE_OVERHEAD))
        }
        None => note_tokens(t, &listing(newest, unlisted)),
    }
}

/// The start of the note [`listing`] writes, up to its first line's `- `: the header,
/// the marker, and a `\n` when a line follows. The note is that head then each line's
/// [`listing_part`], oldest first: cut right after each `\n` that precedes a line's
/// `- `. An exact encoding's pre-tokeniser never puts that `\n` and `-` in one piece (no
/// pattern matches a newline and then a `-`), and matches a piece ending at the cut
/// whether the text goes on or not (the one pattern that reads the end of the text,
/// `\s+$`, takes a whitespace run ending in `\n` as `\s*[\r\n]+` does), so the note's
/// count is the sum of its parts' counts: each line is counted once, not once per
/// candidate note, and remembered by the count cache from one call to the next.
fn listing_head(unlisted: usize, lines: bool) -> String {
    let mut head = note_text([], unlisted);
    if lines {
        head.push('\n');
    }
    head
}

/// The part of [`listing`] that shows `newest[i]`: `- line`, and the `\n` before the
/// next (newer) line's part when there is one.
fn listing_part(i: usize, line: &str) -> String {
    if i == 0 {
        format!("- {line}")
    } else {
        format!("- {line}\n")
    }
}

/// The note text listing `newest` (newest first) after a marker for `unlisted` more.
fn listing(newest: &[String], unlisted: usize) -> String {
    note_text(newest.iter().rev().map(String::as_str), unlisted)
}

/// The note listing as many of the newest dropped messages as fit `room` tokens, with
/// its cost; `None` when not even the marker does. `total` messages are dropped;
/// `newest` are the newest of them, newest first (each checked as its line is written).
fn listing_note<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    total: usize,
    newest_dropped: &[usize],
    room: i128,
) -> Result<Option<(String, i128)>, CoreError> {
    let mut counted = CountedLines::default();
    let mut best_cost = growing_listing_tokens(t, &[], 0, total, &mut counted)?;
    if best_cost > room {
        return Ok(None);
    }
    let mut newest: Vec<String> = Vec::new();
    let mut lines_units = 0usize;
    for &i in newest_dropped.iter().take(NOTE_MAX_LINES) {
        let Some(message) = t.messages().get(i) else { break };
        let checked = t.check(i)?;
        let mut line = String::with_capacity(LINE_SNIPPET_UNITS + 32);
        write_handoff_line(&mut line, message, &checked);
        let units = lines_units + 3 + Text::Utf8(&line).utf16_len();
        newest.push(line);
        let cost = growing_listing_tokens(t, &newest, units, total - newest.len(), &mut counted)?;
        if cost > room {
            newest.pop();
            break;
        }
        best_cost = cost;
        lines_units = units;
    }
    Ok(Some((listing(&newest, total - newest.len()), best_cost)))
}

/// The messages a note may list when the tail starts at `stop`: the newest
/// [`NOTE_MAX_LINES`] before it (back to `prefix`) outside the `core` segments (sorted),
/// newest first.
pub(super) fn newest_dropped(core: &[Segment], prefix: usize, stop: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(NOTE_MAX_LINES);
    let mut i = stop;
    while i > prefix && out.len() < NOTE_MAX_LINES {
        let j = i - 1;
        let k = core.partition_point(|c| c.start <= j);
        match k.checked_sub(1).and_then(|k| core.get(k)).filter(|c| j < c.end) {
            Some(c) => i = c.start,
            None => {
                out.push(j);
                i = j;
            }
        }
    }
    out
}

/// How much room a note may take.
#[derive(Debug, Clone, Copy)]
pub(super) enum NoteLimit {
    /// Greedy: whatever room the core and the tail leave; the summary only when it fits.
    Room(i128),
    /// Chunked: a fixed allowance (a quarter of the chunk), so the note depends only on
    /// the dropped set; the summary always (the caller checks the fit).
    Chunk(u64),
}

/// The note for `dropped` messages (`newest` of them, newest first, as
/// [`newest_dropped`] gives): the caller's summary, or else a listing of as many of the
/// newest as fit; `None` when nothing is dropped or no note fits.
pub(super) fn note_for<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    dropped: usize,
    newest: &[usize],
    limit: NoteLimit,
    options: &PackOptions,
) -> Result<Option<(String, i128)>, CoreError> {
    if dropped == 0 {
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
        NoteLimit::Chunk(chunk) => i128::from(chunk / 4).max(listing_tokens(t, &[], 0, dropped)?),
    };
    listing_note(t, dropped, newest, room)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::Encoding;
    use proptest::prelude::*;

    /// Lines made of what could move a piece boundary: whitespace and newlines of every
    /// kind, punctuation (`-` and `/` among it), letters, digits, contractions, marks.
    fn line() -> impl Strategy<Value = String> {
        let atoms = vec![
            " ", "  ", "\n", "\r\n", "\t", "\u{a0}", "\u{2028}", "-", "- ", "/", "'s", "'", ")", "…", "a", "Word",
            "x1", "123", "é", "\u{301}", "😀", "[", "]", ":", "_",
        ];
        proptest::collection::vec(proptest::sample::select(atoms), 0..10).prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        #[test]
        fn a_listing_counts_as_its_parts(newest in proptest::collection::vec(line(), 0..5), unlisted in 0usize..3) {
            for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
                let head = encoding.count_uncached(&listing_head(unlisted, !newest.is_empty()));
                let lines: usize = newest.iter().enumerate().map(|(i, l)| encoding.count_uncached(&listing_part(i, l))).sum();
                prop_assert_eq!(head + lines, encoding.count_uncached(&listing(&newest, unlisted)), "{:?}", newest);
            }
        }
    }
}
