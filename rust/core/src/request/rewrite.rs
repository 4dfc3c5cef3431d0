//! An edited message written as a splice of its input bytes: only the values an edit
//! replaces are written anew (as compact JSON), a removed content block leaves with its
//! separator, and every other byte (spacing, key order, escapes, numbers) is copied.
//!
//! The message's text was accepted by the scanner, so it is valid JSON: the walk here
//! only skips values (strings by their closing quote, containers by their brackets) to
//! find where each member and item lies. Where a key repeats, the last member is the
//! one `json.loads` keeps, and so the one replaced.

use super::scan::{decode, Decoded};
use super::write_json_string;
use crate::edits::{BlockEdit, MessageEdit, Substitute};

/// Appends message `text` (an object) to `out` as `edit` changes it.
pub fn write_edited(out: &mut Vec<u8>, text: &[u8], edit: &MessageEdit, placeholders: &[String]) {
    let mut changes: Vec<Change> = Vec::new();
    let message = members(text, skip_ws(text, 0));
    for &(field, replacement) in &edit.fields {
        if let Some(value) = last_member(text, &message, field.key()) {
            changes.push(Change::replace(value, replacement.resolve(placeholders)));
        }
    }
    if !edit.calls.is_empty() {
        let calls = last_member(text, &message, "tool_calls").map_or_else(Vec::new, |(at, _)| items(text, at));
        for call in edit.calls.iter().filter_map(|&j| calls.get(j)) {
            let function = last_member(text, &members(text, call.0), "function");
            let arguments = function.and_then(|(at, _)| last_member(text, &members(text, at), "arguments"));
            if let Some(value) = arguments {
                changes.push(Change::replace(value, Substitute::Str("{}")));
            }
        }
    }
    if !edit.blocks.is_empty() {
        let blocks = last_member(text, &message, "content").map_or_else(Vec::new, |(at, _)| items(text, at));
        changes.extend(block_changes(text, &blocks, edit, placeholders));
    }
    changes.sort_by_key(|c| c.start);
    let mut copied = 0;
    for change in changes {
        out.extend_from_slice(text.get(copied..change.start).unwrap_or_default());
        match change.with {
            Some(Substitute::Str(s)) => write_json_string(out, s),
            Some(Substitute::EmptyObject) => out.extend_from_slice(b"{}"),
            None => {}
        }
        copied = change.end;
    }
    out.extend_from_slice(text.get(copied..).unwrap_or_default());
}

/// A span of the text replaced by a value, or left out (`with: None`).
struct Change<'p> {
    start: usize,
    end: usize,
    with: Option<Substitute<'p>>,
}

impl<'p> Change<'p> {
    fn replace((start, end): (usize, usize), with: Substitute<'p>) -> Self {
        Change { start, end, with: Some(with) }
    }
}

/// The changes to a content list's blocks: results and inputs replaced; a run of removed
/// blocks left out with the separators that joined it to the rest.
fn block_changes<'p>(
    text: &[u8],
    blocks: &[(usize, usize)],
    edit: &MessageEdit,
    placeholders: &'p [String],
) -> Vec<Change<'p>> {
    let mut changes = Vec::new();
    let mut j = 0;
    while let Some(&(start, end)) = blocks.get(j) {
        match edit.block(j) {
            Some(BlockEdit::Removed) => {
                let mut last = j;
                while edit.block(last + 1) == Some(BlockEdit::Removed) && last + 1 < blocks.len() {
                    last += 1;
                }
                let run_end = blocks.get(last).map_or(end, |b| b.1);
                // With a block before the run, its separator goes with the run; else the
                // separator after the run does.
                let span = match (j.checked_sub(1).and_then(|p| blocks.get(p)), blocks.get(last + 1)) {
                    (Some(before), _) => (before.1, run_end),
                    (None, Some(after)) => (start, after.0),
                    (None, None) => (start, run_end),
                };
                changes.push(Change { start: span.0, end: span.1, with: None });
                j = last + 1;
                continue;
            }
            Some(BlockEdit::Content(k)) => {
                let placeholder = placeholders.get(k).map_or("", String::as_str);
                if let Some(value) = last_member(text, &members(text, start), "content") {
                    changes.push(Change::replace(value, Substitute::Str(placeholder)));
                }
            }
            Some(BlockEdit::EmptyInput) => {
                if let Some(value) = last_member(text, &members(text, start), "input") {
                    changes.push(Change::replace(value, Substitute::EmptyObject));
                }
            }
            None => {}
        }
        j += 1;
    }
    changes
}

/// A member: its key's span (inside the quotes) and its value's span.
type Member = ((usize, usize), (usize, usize));

/// The members of the object whose `{` is at `at` (empty for anything else).
fn members(text: &[u8], at: usize) -> Vec<Member> {
    let mut out = Vec::new();
    if text.get(at) != Some(&b'{') {
        return out;
    }
    let mut i = skip_ws(text, at + 1);
    while text.get(i) == Some(&b'"') {
        let key_end = string_end(text, i);
        let value = skip_ws(text, skip_ws(text, key_end) + 1); // past the ':'
        let value_end = value_end(text, value);
        out.push(((i + 1, key_end - 1), (value, value_end)));
        i = skip_ws(text, value_end);
        if text.get(i) == Some(&b',') {
            i = skip_ws(text, i + 1);
        }
    }
    out
}

/// The spans of the items of the array whose `[` is at `at` (empty for anything else).
fn items(text: &[u8], at: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    if text.get(at) != Some(&b'[') {
        return out;
    }
    let mut i = skip_ws(text, at + 1);
    while i < text.len() && text.get(i) != Some(&b']') {
        let end = value_end(text, i);
        out.push((i, end));
        i = skip_ws(text, end);
        if text.get(i) == Some(&b',') {
            i = skip_ws(text, i + 1);
        }
    }
    out
}

/// The value span of the last member named `name`.
fn last_member(text: &[u8], members: &[Member], name: &str) -> Option<(usize, usize)> {
    members.iter().rev().find(|((start, end), _)| key_is(text.get(*start..*end).unwrap_or_default(), name)).map(|m| m.1)
}

/// Whether a key's body (as written, escapes and all) spells `name`.
fn key_is(body: &[u8], name: &str) -> bool {
    if !body.contains(&b'\\') {
        return body == name.as_bytes();
    }
    let body = std::str::from_utf8(body).unwrap_or_default();
    matches!(decode(body), Decoded::Utf8(text) if text == name)
}

fn skip_ws(text: &[u8], mut i: usize) -> usize {
    while matches!(text.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// One past the closing quote of the string whose opening quote is at `at`.
fn string_end(text: &[u8], at: usize) -> usize {
    let mut i = at + 1;
    while let Some(&b) = text.get(i) {
        match b {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    text.len()
}

/// One past the end of the value starting at `at`.
fn value_end(text: &[u8], at: usize) -> usize {
    match text.get(at) {
        Some(b'"') => string_end(text, at),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut i = at;
            while let Some(&b) = text.get(i) {
                match b {
                    b'"' => {
                        i = string_end(text, i);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return i + 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            text.len()
        }
        _ => {
            let mut i = at;
            while text.get(i).is_some_and(|b| !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')) {
                i += 1;
            }
            i
        }
    }
}
