//! Reading messages for packing, and cutting a transcript into segments kept or dropped whole.

use super::{Dialect, VOLATILE_TAIL_TAG};
use crate::error::CoreError;
use crate::items::{marks_responses, peek_kind};
use crate::json::{JsonNode, JsonType, Key, View};
use crate::message::Item;
use crate::message::{Checked, Role};
use crate::text::Text;
use crate::tokens::{MessageSizer, SizedMessages};
use crate::transcript::Transcript;

pub(super) fn blocks<N: JsonNode>(message: &Checked<N>) -> Option<N::Items> {
    let content = message.content.as_ref().filter(|c| c.json_type() == JsonType::Array)?;
    match content.view() {
        Ok(View::Array { items, .. }) => Some(items),
        _ => None,
    }
}

pub(super) fn block_is<N: JsonNode>(block: &N, kind: &str) -> bool {
    block.get(Key::Type).is_some_and(|t| t.as_text().is_some_and(|t| t.eq_ascii(kind)))
}

pub(super) fn has_block<N: JsonNode>(message: &Checked<N>, kind: &str) -> bool {
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
    match content.json_type() {
        JsonType::Str => content.starts_with_ascii(VOLATILE_TAIL_TAG),
        JsonType::Array => match content.view() {
            Ok(View::Array { mut items, .. }) => items
                .next()
                .and_then(|first| first.get(Key::Text))
                .is_some_and(|t| t.starts_with_ascii(VOLATILE_TAIL_TAG)),
            _ => false,
        },
        _ => false,
    }
}

pub(super) fn is_volatile<N: JsonNode>(message: &Checked<N>) -> bool {
    message.role == Role::User && message.content.as_ref().is_some_and(is_volatile_content)
}

/// The shape `shape="auto"` packs in: that of the newest entry that shows one, read
/// from the newest back ([`Dialect::Responses`] when it marks Responses items,
/// [`Dialect::Anthropic`] when a content block is a `tool_use` or `tool_result`,
/// [`Dialect::OpenAi`] when its `tool_calls` is a non-empty list or its role is `tool`);
/// `None` when no entry shows one (OpenAI chat). A transcript in one shape reads as
/// reading all of it would; only the entries after its newest tool exchange are read.
pub(super) fn newest_shape<N: JsonNode>(messages: &[N]) -> Option<Dialect> {
    messages.iter().rev().filter(|m| m.json_type() == JsonType::Object).find_map(|m| {
        let fields = m.message_fields();
        if marks_responses(&fields) {
            return Some(Dialect::Responses);
        }
        let blocks = fields.content.filter(|c| c.json_type() == JsonType::Array).and_then(|c| match c.view() {
            Ok(View::Array { mut items, .. }) => {
                // A provider's compaction block is Anthropic's too.
                Some(
                    items
                        .any(|b| block_is(&b, "tool_use") || block_is(&b, "tool_result") || block_is(&b, "compaction")),
                )
            }
            _ => None,
        });
        if blocks == Some(true) {
            return Some(Dialect::Anthropic);
        }
        let calls = fields.tool_calls.is_some_and(|c| matches!(c.view(), Ok(View::Array { len, .. }) if len > 0));
        let tool = fields.role.as_ref().and_then(JsonNode::as_text).is_some_and(|r| r.eq_ascii("tool"));
        (calls || tool).then_some(Dialect::OpenAi)
    })
}

/// A run of messages kept or dropped whole.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    pub(super) start: usize,
    pub(super) end: usize,
}

/// The chat segments of messages `from..to` in `dialect` (Responses items have [`item_segments`]).
pub(super) fn segments<N: JsonNode, S: MessageSizer<N>>(
    t: &Transcript<'_, N, S>,
    from: usize,
    to: usize,
    dialect: Dialect,
) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        let Some(m) = t.peek(i) else { break };
        let mut end = i + 1;
        if m.role == Role::Assistant {
            match dialect {
                Dialect::OpenAi if has_tool_calls(&m) => {
                    while end < to && t.role(end) == Role::Tool {
                        end += 1;
                    }
                }
                Dialect::Anthropic
                    if has_block(&m, "tool_use")
                        && end < to
                        && t.role(end) == Role::User
                        && t.peek(end).is_some_and(|n| has_block(&n, "tool_result")) =>
                {
                    end += 1;
                }
                _ => {}
            }
        }
        out.push(Segment { start: i, end });
        i = end;
    }
    out
}

/// Responses items: a run of `reasoning` items goes with the item after it; a call also
/// takes its output (the first `*_call_output` after it with the same `call_id`) and all
/// that lies between, so parallel calls and their outputs form one segment. Also each
/// item's role, as read.
///
/// Performance: each item is read once; outputs are found by the keyed hash of their
/// `call_id` ([`Text::id_hash`]) in a sorted list (no string built or map allocated per
/// id), the ids compared whole on a hash match.
fn item_segments<N: JsonNode, S: MessageSizer<N>>(
    t: &Transcript<'_, N, S>,
    from: usize,
    to: usize,
) -> (Vec<Segment>, Vec<Role>) {
    let messages = t.messages().get(from..to).unwrap_or_default();
    let read: Vec<(Item, Role, Option<N>)> = messages.iter().map(peek_kind).collect();
    let ids: Vec<Option<Text<'_>>> = read.iter().map(|r| r.2.as_ref().and_then(JsonNode::as_text)).collect();
    let item = |i: usize| read.get(i - from).map_or(Item::Other, |r| r.0);
    let id = |i: usize| ids.get(i - from).copied().flatten();
    // Outputs by (id hash, index).
    let mut outputs: Vec<(u64, usize)> =
        (from..to).filter(|&i| item(i) == Item::Output).filter_map(|i| Some((id(i)?.id_hash(), i))).collect();
    outputs.sort_unstable();
    let answer = |call: usize| {
        let key = id(call)?;
        let hash = key.id_hash();
        let first = outputs.partition_point(|&o| o < (hash, call + 1));
        outputs
            .get(first..)?
            .iter()
            .take_while(|o| o.0 == hash)
            .find(|o| id(o.1).is_some_and(|other| other.cmp_code_points(&key).is_eq()))
            .map(|o| o.1)
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
        out.push(Segment { start: i, end });
        i = end;
    }
    (out, read.into_iter().map(|r| r.1).collect())
}

/// Where segments lie between `prefix` and `end`: listed up front (Responses items, whose
/// pairing by `call_id` is read forwards, and the chunked cut, which walks them all), or
/// found around a message on demand (chat shapes: a segment's bounds depend only on its
/// neighbours, so the greedy tail and the core read only the messages they keep).
pub(super) enum Segmenter {
    /// All segments, and (Responses items) each item's role from `prefix` on, as read.
    Listed { segs: Vec<Segment>, prefix: usize, roles: Vec<Role> },
    Local {
        dialect: Dialect,
        prefix: usize,
        end: usize,
        /// The lowest index of the run of orphan `tool` messages the walk back is in
        /// (OpenAI shape), so a long run is scanned once.
        orphans_from: Option<usize>,
    },
}

impl Segmenter {
    /// Segments between `prefix` and `end` in `dialect`, all of them when `listed`.
    pub(super) fn new<N: JsonNode, S: MessageSizer<N>>(
        t: &Transcript<'_, N, S>,
        prefix: usize,
        end: usize,
        dialect: Dialect,
        listed: bool,
    ) -> Self {
        if dialect == Dialect::Responses {
            let (segs, roles) = item_segments(t, prefix, end);
            Segmenter::Listed { segs, prefix, roles }
        } else if listed {
            Segmenter::Listed { segs: segments(t, prefix, end, dialect), prefix, roles: Vec::new() }
        } else {
            Segmenter::Local { dialect, prefix, end, orphans_from: None }
        }
    }

    /// Message `i`'s role (`prefix <= i < end`), as read for the segments when it was.
    pub(super) fn role<N: JsonNode, S: MessageSizer<N>>(&self, t: &Transcript<'_, N, S>, i: usize) -> Role {
        match self {
            Segmenter::Listed { prefix, roles, .. } => {
                i.checked_sub(*prefix).and_then(|k| roles.get(k)).copied().unwrap_or_else(|| t.role(i))
            }
            Segmenter::Local { .. } => t.role(i),
        }
    }

    /// The segment holding message `i` (`prefix <= i < end`).
    pub(super) fn containing<N: JsonNode, S: MessageSizer<N>>(&self, t: &Transcript<'_, N, S>, i: usize) -> Segment {
        let one = Segment { start: i, end: i + 1 };
        match *self {
            Segmenter::Listed { ref segs, .. } => {
                let k = segs.partition_point(|s| s.end <= i);
                segs.get(k).copied().unwrap_or(one)
            }
            Segmenter::Local { dialect: Dialect::Anthropic, prefix, end, .. } => {
                if i > prefix && answers_call(t, i) {
                    Segment { start: i - 1, end: i + 1 }
                } else if i + 1 < end && answers_call(t, i + 1) {
                    Segment { start: i, end: i + 2 }
                } else {
                    one
                }
            }
            Segmenter::Local { prefix, end, .. } => {
                let caller = match t.role(i) {
                    Role::Tool => caller_before(t, prefix, i),
                    Role::Assistant if t.peek(i).is_some_and(|m| has_tool_calls(&m)) => Some(i),
                    _ => None,
                };
                match caller {
                    Some(start) => {
                        let mut stop = start + 1;
                        while stop < end && t.role(stop) == Role::Tool {
                            stop += 1;
                        }
                        Segment { start, end: stop }
                    }
                    None => one,
                }
            }
        }
    }

    /// The start of the segment that ends at `stop` (`prefix < stop <= end`, `stop` a
    /// segment boundary); called with `stop` falling, as the tail walks back.
    pub(super) fn start_before<N: JsonNode, S: MessageSizer<N>>(
        &mut self,
        t: &Transcript<'_, N, S>,
        stop: usize,
    ) -> usize {
        let last = stop - 1;
        match self {
            Segmenter::Listed { segs, .. } => {
                let k = segs.partition_point(|s| s.end < stop);
                segs.get(k).map_or(last, |s| s.start)
            }
            Segmenter::Local { dialect: Dialect::Anthropic, prefix, .. } => {
                if last > *prefix && answers_call(t, last) {
                    last - 1
                } else {
                    last
                }
            }
            Segmenter::Local { prefix, orphans_from, .. } => {
                if t.role(last) != Role::Tool || orphans_from.is_some_and(|from| last >= from) {
                    return last;
                }
                match caller_before(t, *prefix, last) {
                    Some(caller) => caller,
                    None => {
                        let mut from = last;
                        while from > *prefix && t.role(from - 1) == Role::Tool {
                            from -= 1;
                        }
                        *orphans_from = Some(from);
                        last
                    }
                }
            }
        }
    }
}

/// OpenAI shape: the assistant message with tool calls whose run of `tool` messages holds
/// `tool` message `i`, if any (the nearest message before the run, at or after `prefix`).
fn caller_before<N: JsonNode, S: MessageSizer<N>>(t: &Transcript<'_, N, S>, prefix: usize, i: usize) -> Option<usize> {
    let mut p = i;
    while p > prefix && t.role(p - 1) == Role::Tool {
        p -= 1;
    }
    let p = p.checked_sub(1).filter(|&p| p >= prefix)?;
    (t.role(p) == Role::Assistant && t.peek(p).is_some_and(|m| has_tool_calls(&m))).then_some(p)
}

/// Anthropic shape: whether message `i` is a user message with `tool_result` blocks right
/// after an assistant message with `tool_use` blocks (the two are one segment).
fn answers_call<N: JsonNode, S: MessageSizer<N>>(t: &Transcript<'_, N, S>, i: usize) -> bool {
    i > 0
        && t.role(i) == Role::User
        && t.role(i - 1) == Role::Assistant
        && t.peek(i).is_some_and(|m| has_block(&m, "tool_result"))
        && t.peek(i - 1).is_some_and(|m| has_block(&m, "tool_use"))
}

pub(super) fn seg_tokens<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    s: Segment,
) -> Result<i128, CoreError> {
    i128::try_from(t.sum(s.start..s.end)?).map_err(|_| CoreError::internal("a segment's tokens past 2^127"))
}
