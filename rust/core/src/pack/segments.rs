//! Reading messages for packing, and cutting a transcript into segments kept or dropped whole.

use super::{Dialect, VOLATILE_TAIL_TAG};
use crate::error::CoreError;
use crate::items::Item;
use crate::json::{JsonNode, Key, Shape, View};
use crate::tokens::{Checked, Role, Sizer, Sizes};
use crate::transcript::Transcript;
use std::collections::HashMap;

pub(super) fn blocks<N: JsonNode>(message: &Checked<N>) -> Option<N::Items> {
    let content = message.content.as_ref().filter(|c| c.shape() == Shape::Array)?;
    match content.view() {
        Ok(View::Array { items, .. }) => Some(items),
        _ => None,
    }
}

pub(super) fn block_is<N: JsonNode>(block: &N, kind: &str) -> bool {
    block.get(Key::Type).is_some_and(|t| t.as_text().is_some_and(|t| t.eq_ascii(kind)))
}

fn has_block<N: JsonNode>(message: &Checked<N>, kind: &str) -> bool {
    blocks(message).is_some_and(|mut it| it.any(|b| block_is(&b, kind)))
}

/// A user message made only of `tool_result` blocks answers a call; it is no directive.
pub(super) fn only_tool_results<N: JsonNode>(message: &Checked<N>) -> bool {
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

pub(super) fn is_volatile<N: JsonNode>(message: &Checked<N>) -> bool {
    message.role == Role::User && message.content.as_ref().is_some_and(is_volatile_content)
}

/// Anthropic when any content block is a `tool_use` or `tool_result`, else OpenAI.
pub(super) fn detect_dialect<'a, N: JsonNode + 'a>(mut messages: impl Iterator<Item = &'a Checked<N>>) -> Dialect {
    let anthropic = messages
        .any(|m| blocks(m).is_some_and(|mut it| it.any(|b| block_is(&b, "tool_use") || block_is(&b, "tool_result"))));
    if anthropic {
        Dialect::Anthropic
    } else {
        Dialect::OpenAi
    }
}

/// A run of messages kept or dropped whole.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) core: bool,
}

pub(super) fn segments<N: JsonNode, S: Sizer<N>>(
    t: &Transcript<'_, N, S>,
    from: usize,
    to: usize,
    dialect: Dialect,
) -> Vec<Segment> {
    if dialect == Dialect::Responses {
        return item_segments(t, from, to);
    }
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

/// Responses items: a run of `reasoning` items goes with the item after it; a call also
/// takes its output (the first `*_call_output` after it with the same `call_id`) and all
/// that lies between, so parallel calls and their outputs form one segment.
fn item_segments<N: JsonNode, S: Sizer<N>>(t: &Transcript<'_, N, S>, from: usize, to: usize) -> Vec<Segment> {
    let item = |i: usize| t.checked(i).map_or(Item::Other, |c| c.item);
    let id = |i: usize| {
        t.checked(i)
            .and_then(|c| c.call_id.as_ref())
            .and_then(|id| id.as_text().map(|t| t.code_points().collect::<Vec<u32>>()))
    };
    // Each call_id's outputs, in order.
    let mut outputs: HashMap<Vec<u32>, Vec<usize>> = HashMap::new();
    for i in (from..to).filter(|&i| item(i) == Item::Output) {
        if let Some(key) = id(i) {
            outputs.entry(key).or_default().push(i);
        }
    }
    let answer = |call: usize| {
        let answers = outputs.get(&id(call)?)?;
        answers.get(answers.partition_point(|&o| o < call)).copied()
    };
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        let mut end = i;
        while end < to && item(end) == Item::Reasoning {
            end += 1;
        }
        end = (end + 1).min(to);
        let mut k = i;
        while k < end {
            if item(k) == Item::Call {
                if let Some(o) = answer(k) {
                    end = end.max(o + 1);
                }
            }
            k += 1;
        }
        out.push(Segment { start: i, end, core: false });
        i = end;
    }
    out
}

pub(super) fn seg_tokens<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    s: Segment,
) -> Result<i128, CoreError> {
    i128::try_from(t.sum(s.start..s.end)?).map_err(|_| CoreError::internal("a segment's tokens past 2^127"))
}

/// Messages dropped when the tail starts at segment `from`: non-core segments before it.
pub(super) fn dropped_before(segs: &[Segment], from: usize) -> Vec<usize> {
    segs.iter().take(from).filter(|s| !s.core).flat_map(|s| s.start..s.end).collect()
}
