//! Context editing (SPEC §14): values replaced inside messages before folding.
//!
//! [`plan`] applies [`Edit`]s in order to a transcript as read, each over the previous
//! one's output (a [`ClearToolUses`] plans on the transcript as given), and returns a
//! [`Plan`]: for each message it changed, which values are replaced
//! (a tool result's content by a placeholder, a call's input by an empty one), which
//! content blocks are left out (thinking), and whether the entry is removed (a Responses
//! `reasoning` item: the only entry an edit removes). No JSON is built: [`Edited`] presents
//! a message as edited through [`JsonNode`], so the packer sizes, notes and copies the
//! edited transcript as it does any other, and a bytes path splices only the replaced
//! values. `python/contextfold/reference/edits.py` is the reference, with the full rules in
//! its docstring; in short:
//!
//! - Cost is the caller's [`MessageSizer`] (over [`Edited`] nodes) plus a fixed `base` for
//!   what no edit changes (system prompt, tools). What an edit frees is the cost of the
//!   messages it changed before, less after (a removed item's whole cost).
//! - [`ClearToolUses`] runs when the transcript as given costs more than its trigger
//!   (default: the budget); its cut points and `clear_at_least` are read there too, so an
//!   earlier edit in the list cannot move them as the transcript grows. A tool use is one
//!   result paired with the nearest earlier call with its id: an OpenAI `tool` message, an
//!   Anthropic `tool_result` block, a Responses `function_call_output` /
//!   `custom_tool_call_output` item. The newest `keep`, and those calling an excluded tool,
//!   are never edited. A value is replaced only when its replacement is shorter as sizing
//!   measures length (so a result already cleared is left as it is, and under chars/4 an
//!   edit never makes a message cost more; under an exact encoding or provider sizing a
//!   short result may cost a little more cleared, which the edit's total, at least
//!   `clear_at_least`, absorbs). Cache stability: walking the tool uses oldest first from
//!   the first one clearing would change, summing each one's result cost, cut points sit
//!   where the sum crosses a multiple of `step`; the boundary is the last cut point at or
//!   before the newest `keep`, and the eligible tool uses before it are cleared. The
//!   boundary only moves forward, by whole steps, as a transcript grows, and the edit
//!   re-run on its own output changes nothing. An edit that frees less than
//!   `clear_at_least` does nothing.
//! - [`ClearThinking`] removes Anthropic `thinking` / `redacted_thinking` blocks and
//!   Responses `reasoning` items from all but the newest `keep` turns holding some (a turn
//!   opens at each user-authored message), never from a turn with a call no later message
//!   answers; an assistant message made only of thinking keeps it, and a reasoning item
//!   that the next item (past reasoning) needs, sent with its `id`, stays.
//! - An edit is reported ([`Applied`]) only when it changed something.
//!
//! Messages are read leniently where only looked at (a role, a block's type, an id), as
//! packing reads them; every message is sized (and so checked) when a [`ClearToolUses`]
//! edit is given, since its trigger compares the whole transcript's cost.
//!
//! Performance notes: object members that [`Key`] does not name (`id`, `tool_call_id`,
//! `tool_use_id`, `arguments`, `input`) are found by a walk over the object's entries,
//! which for a call or block of a handful of keys costs about a lookup; each message's
//! cost is sized once and re-sized only when an edit changes it; ids are matched by a
//! keyed hash ([`Text::id_hash`]), compared whole on a match (none is copied), and a
//! call's tool name is read only when `exclude_tools` names some.

use crate::error::{CoreError, Problem};
use crate::items::{check_item, peek_kind};
use crate::json::{json_len, member, JsonNode, JsonType, Key, MessageFields, View};
use crate::message::{check_message, role_or_other, Checked, Item, Role};
use crate::text::{Snippet, Text};
use crate::tokens::MessageSizer;
use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;
use std::collections::BTreeMap;

/// What [`ClearToolUses`] writes in place of a result by default.
pub const DEFAULT_PLACEHOLDER: &str = "[cleared]";

/// Replace old tool results (and optionally their calls' inputs) once the transcript is
/// over `trigger` tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClearToolUses {
    /// Tokens (system and tools included) above which the edit runs; `None`: the budget.
    pub trigger: Option<u64>,
    /// Newest tool uses never edited.
    pub keep: usize,
    /// Fewest tokens worth an edit: one freeing fewer does nothing.
    pub clear_at_least: u64,
    /// Tool names whose uses are never edited.
    pub exclude_tools: Vec<String>,
    /// Whether the cleared tool uses' calls get an empty input too.
    pub clear_tool_inputs: bool,
    /// What replaces a cleared result.
    pub placeholder: String,
}

impl Default for ClearToolUses {
    fn default() -> Self {
        Self {
            trigger: None,
            keep: 3,
            clear_at_least: 0,
            exclude_tools: Vec::new(),
            clear_tool_inputs: false,
            placeholder: DEFAULT_PLACEHOLDER.to_owned(),
        }
    }
}

/// Remove thinking from all but the newest `keep` assistant turns holding some.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClearThinking {
    pub keep: usize,
}

impl Default for ClearThinking {
    fn default() -> Self {
        Self { keep: 1 }
    }
}

/// One context edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    ClearToolUses(ClearToolUses),
    ClearThinking(ClearThinking),
}

/// Which edit an [`Applied`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditKind {
    ClearToolUses,
    ClearThinking,
}

impl EditKind {
    /// The name Anthropic's `applied_edits` uses (without its version suffix).
    pub const fn as_str(self) -> &'static str {
        match self {
            EditKind::ClearToolUses => "clear_tool_uses",
            EditKind::ClearThinking => "clear_thinking",
        }
    }
}

/// An edit that changed the transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub kind: EditKind,
    /// Tool uses whose result, or call input, was replaced.
    pub cleared_tool_uses: usize,
    /// Turns whose thinking was removed.
    pub cleared_thinking_turns: usize,
    /// The transcript's cost before the edit less its cost after (exact; negative only
    /// for a custom estimator that counts a shorter text as more).
    pub cleared_input_tokens: i128,
}

/// What every edit of one [`plan`] call shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditContext {
    /// The packing budget: a [`ClearToolUses`] trigger by default.
    pub budget: u64,
    /// Tokens a [`ClearToolUses`] boundary moves by (read as at least 1).
    pub step: u64,
    /// Tokens counted with the messages that no edit changes (system prompt, tools).
    pub base: u64,
    /// Whether the entries are Responses items (else OpenAI or Anthropic chat messages,
    /// both read).
    pub responses: bool,
    /// Entries the provider does not read (what precedes its compaction, which go first
    /// when packing): left out of the edits, neither counted nor edited.
    pub hidden: std::ops::Range<usize>,
}

/// A message or item member whose value an edit replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// An OpenAI `tool` message's result.
    Content,
    /// A Responses output item's result.
    Output,
    /// A Responses `function_call`'s input.
    Arguments,
    /// A Responses `custom_tool_call`'s input.
    Input,
}

impl Field {
    /// The member's key.
    pub const fn key(self) -> &'static str {
        match self {
            Field::Content => "content",
            Field::Output => "output",
            Field::Arguments => "arguments",
            Field::Input => "input",
        }
    }
}

/// What replaces a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacement {
    /// The string `Plan::placeholders[k]`.
    Placeholder(usize),
    /// The string `"{}"` (emptied JSON arguments).
    EmptyArguments,
    /// The string `""` (an emptied custom tool input).
    EmptyText,
    /// The object `{}` (an emptied Anthropic tool input).
    EmptyObject,
}

/// A replacement value, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Substitute<'p> {
    Str(&'p str),
    EmptyObject,
}

impl Replacement {
    /// The value itself (a placeholder out of range reads as `""`).
    pub fn resolve(self, placeholders: &[String]) -> Substitute<'_> {
        match self {
            Replacement::Placeholder(k) => Substitute::Str(placeholders.get(k).map_or("", String::as_str)),
            Replacement::EmptyArguments => Substitute::Str("{}"),
            Replacement::EmptyText => Substitute::Str(""),
            Replacement::EmptyObject => Substitute::EmptyObject,
        }
    }
}

/// What becomes of one content block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockEdit {
    /// Left out (a thinking block).
    Removed,
    /// Its `content` replaced by `Plan::placeholders[k]` (a `tool_result` block).
    Content(usize),
    /// Its `input` replaced by `{}` (a `tool_use` block).
    EmptyInput,
}

/// Everything the edits change in one message or item.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageEdit {
    /// The message's index in the input.
    pub index: usize,
    /// Members replaced, each present in the input (an edit never adds one).
    pub fields: Vec<(Field, Replacement)>,
    /// `tool_calls` entries (ascending) whose `function.arguments` becomes `"{}"`.
    pub calls: Vec<usize>,
    /// Content blocks changed, by their index in the input's `content` (ascending).
    pub blocks: Vec<(usize, BlockEdit)>,
    /// The entry is removed (a Responses `reasoning` item).
    pub removed: bool,
}

impl MessageEdit {
    fn new(index: usize) -> Self {
        Self { index, ..Self::default() }
    }

    /// The replacement of `field`, if any.
    pub fn field(&self, field: Field) -> Option<Replacement> {
        self.fields.iter().find(|f| f.0 == field).map(|f| f.1)
    }

    /// What becomes of block `j`, if anything.
    pub fn block(&self, j: usize) -> Option<BlockEdit> {
        self.blocks.binary_search_by_key(&j, |b| b.0).ok().and_then(|k| self.blocks.get(k)).map(|b| b.1)
    }

    /// Content blocks left out.
    pub fn removed_blocks(&self) -> usize {
        self.blocks.iter().filter(|b| b.1 == BlockEdit::Removed).count()
    }

    fn set_field(&mut self, field: Field, to: Replacement) {
        match self.fields.iter_mut().find(|f| f.0 == field) {
            Some(slot) => slot.1 = to,
            None => self.fields.push((field, to)),
        }
    }

    fn set_block(&mut self, j: usize, to: BlockEdit) {
        match self.blocks.binary_search_by_key(&j, |b| b.0) {
            Ok(k) => {
                if let Some(slot) = self.blocks.get_mut(k) {
                    slot.1 = to;
                }
            }
            Err(k) => self.blocks.insert(k, (j, to)),
        }
    }

    fn empty_call(&mut self, j: usize) {
        if let Err(k) = self.calls.binary_search(&j) {
            self.calls.insert(k, j);
        }
    }
}

/// What [`plan`] decided: the messages it changed, and the edits that ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// One entry per message changed, by ascending index.
    pub messages: Vec<MessageEdit>,
    /// The edits that changed something, in the order applied.
    pub applied: Vec<Applied>,
    /// The placeholder strings [`Replacement::Placeholder`] and [`BlockEdit::Content`] name.
    pub placeholders: Vec<String>,
}

impl Plan {
    /// Whether no message changed.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// What the edits change in message `index`, if anything.
    pub fn edit(&self, index: usize) -> Option<&MessageEdit> {
        self.messages.binary_search_by_key(&index, |m| m.index).ok().and_then(|k| self.messages.get(k))
    }

    /// Input indices of the removed entries, ascending.
    pub fn removed(&self) -> impl Iterator<Item = usize> + '_ {
        self.messages.iter().filter(|m| m.removed).map(|m| m.index)
    }

    /// Message `index` (whose node is `node`) as edited.
    pub fn view<N>(&self, index: usize, node: N) -> Edited<'_, N> {
        Edited::message(node, self.edit(index), &self.placeholders)
    }

    /// The transcript as edited: the removed entries left out, each other one as
    /// [`Plan::view`] presents it.
    pub fn overlay<N: Clone>(&self, messages: &[N]) -> Overlay<'_, N> {
        let mut nodes = Vec::with_capacity(messages.len());
        let mut source = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            if !self.edit(i).is_some_and(|e| e.removed) {
                nodes.push(self.view(i, m.clone()));
                source.push(i);
            }
        }
        Overlay { nodes, source }
    }
}

/// An edited transcript, for the packer: `nodes[k]` is input message `source[k]`.
pub struct Overlay<'p, N> {
    pub nodes: Vec<Edited<'p, N>>,
    /// Ascending input indices.
    pub source: Vec<usize>,
}

impl<N> Overlay<'_, N> {
    /// What a pin on input message `input` pins: the message itself, or (a removed
    /// reasoning item, which belongs to the segment of the item after it) the next entry
    /// left; `None` when none is.
    pub fn pinned(&self, input: usize) -> Option<usize> {
        let k = self.source.partition_point(|&i| i < input);
        (k < self.source.len()).then_some(k)
    }
}

// The overlay ------------------------------------------------------------------------

/// A value as the edits present it: the value itself, or one with members replaced,
/// blocks left out, arguments emptied. Built by [`Plan::view`]; every accessor answers
/// as the edited JSON would.
#[derive(Clone)]
pub enum Edited<'p, N> {
    /// The value as it is, and all under it.
    Plain(N),
    /// A message or item with some of [`MessageEdit`]'s changes; with `alone`, its
    /// content holds only that block (its index and node): how a block's tool use is
    /// weighed, never in a plan's output.
    Message { node: N, edit: &'p MessageEdit, placeholders: &'p [String], alone: Option<(usize, N)> },
    /// A message's content blocks, some changed or left out (all but `alone`, if given).
    Blocks { node: N, blocks: &'p [(usize, BlockEdit)], alone: Option<(usize, N)>, placeholders: &'p [String] },
    /// A message's `tool_calls`, the listed entries' arguments emptied.
    Calls { node: N, calls: &'p [usize] },
    /// A tool call whose `function.arguments` is emptied.
    Call(N),
    /// An object whose member `key` is replaced.
    Patched { node: N, key: &'static str, value: Substitute<'p> },
    /// A replacement string.
    Str(&'p str),
    /// The replacement `{}`.
    EmptyObject,
}

/// The message members [`Edited::Message`] may present otherwise.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Member {
    Field(Field),
    ToolCalls,
}

impl Member {
    const ALL: [(&'static str, Member); 5] = [
        ("content", Member::Field(Field::Content)),
        ("tool_calls", Member::ToolCalls),
        ("output", Member::Field(Field::Output)),
        ("arguments", Member::Field(Field::Arguments)),
        ("input", Member::Field(Field::Input)),
    ];

    fn named(key: &Text<'_>) -> Option<Member> {
        Self::ALL.iter().find(|(name, _)| key.eq_ascii(name)).map(|m| m.1)
    }

    fn of(key: Key) -> Option<Member> {
        Self::ALL.iter().find(|(name, _)| *name == key.as_str()).map(|m| m.1)
    }
}

impl<'p, N> Edited<'p, N> {
    /// A message with `edit`'s changes (`None`: as it is).
    fn message(node: N, edit: Option<&'p MessageEdit>, placeholders: &'p [String]) -> Self {
        match edit {
            Some(edit) => Edited::Message { node, edit, placeholders, alone: None },
            None => Edited::Plain(node),
        }
    }

    fn substitute(value: Substitute<'p>) -> Self {
        match value {
            Substitute::Str(s) => Edited::Str(s),
            Substitute::EmptyObject => Edited::EmptyObject,
        }
    }

    /// `value`, a member of the message `edit` changes (its content only block `alone`,
    /// if given), as edited.
    fn member(
        edit: &'p MessageEdit,
        placeholders: &'p [String],
        alone: Option<&(usize, N)>,
        member: Option<Member>,
        value: N,
    ) -> Self
    where
        N: Clone,
    {
        let Some(member) = member else { return Edited::Plain(value) };
        if let Member::Field(field) = member {
            if let Some(to) = edit.field(field) {
                return Self::substitute(to.resolve(placeholders));
            }
        }
        match member {
            Member::Field(Field::Content) if !edit.blocks.is_empty() || alone.is_some() => {
                Edited::Blocks { node: value, blocks: &edit.blocks, alone: alone.cloned(), placeholders }
            }
            Member::ToolCalls if !edit.calls.is_empty() => Edited::Calls { node: value, calls: &edit.calls },
            _ => Edited::Plain(value),
        }
    }

    /// The input value under this one, if any.
    fn node(&self) -> Option<&N> {
        match self {
            Edited::Plain(node)
            | Edited::Message { node, .. }
            | Edited::Blocks { node, .. }
            | Edited::Calls { node, .. }
            | Edited::Call(node)
            | Edited::Patched { node, .. } => Some(node),
            Edited::Str(_) | Edited::EmptyObject => None,
        }
    }
}

/// An unchanged value's view, as the overlay's.
fn plain_view<'a, 'p, N: JsonNode + Clone>(view: View<'a, N>) -> View<'a, Edited<'p, N>> {
    match view {
        View::Null => View::Null,
        View::Bool(b) => View::Bool(b),
        View::Int(i) => View::Int(i),
        View::Float(f) => View::Float(f),
        View::Str(t) => View::Str(t),
        View::Array { items, len } => View::Array { items: EditedItems::Plain(items), len },
        View::Object { entries, len } => View::Object { entries: EditedEntries::Plain(entries), len },
    }
}

/// The items of an [`Edited`] array.
pub enum EditedItems<'p, N: JsonNode> {
    Plain(N::Items),
    /// One block, as edited (a block weighed alone).
    One(Option<Edited<'p, N>>),
    Blocks {
        items: N::Items,
        at: usize,
        blocks: &'p [(usize, BlockEdit)],
        placeholders: &'p [String],
    },
    Calls {
        items: N::Items,
        at: usize,
        calls: &'p [usize],
    },
}

impl<'p, N: JsonNode> Iterator for EditedItems<'p, N> {
    type Item = Edited<'p, N>;

    fn next(&mut self) -> Option<Edited<'p, N>> {
        match self {
            EditedItems::Plain(items) => items.next().map(Edited::Plain),
            EditedItems::One(item) => item.take(),
            EditedItems::Blocks { items, at, blocks, placeholders } => loop {
                let node = items.next()?;
                let j = *at;
                *at += 1;
                if let Some(block) = edited_block(node, j, blocks, placeholders) {
                    return Some(block);
                }
            },
            EditedItems::Calls { items, at, calls } => {
                let node = items.next()?;
                let j = *at;
                *at += 1;
                Some(if calls.binary_search(&j).is_ok() { Edited::Call(node) } else { Edited::Plain(node) })
            }
        }
    }
}

/// Block `j` of a content list, as `blocks` edit it (`None`: left out).
fn edited_block<'p, N>(
    node: N,
    j: usize,
    blocks: &'p [(usize, BlockEdit)],
    placeholders: &'p [String],
) -> Option<Edited<'p, N>> {
    let change = blocks.binary_search_by_key(&j, |b| b.0).ok().and_then(|k| blocks.get(k));
    Some(match change.map(|b| b.1) {
        Some(BlockEdit::Removed) => return None,
        Some(BlockEdit::Content(k)) => {
            let value = Replacement::Placeholder(k).resolve(placeholders);
            Edited::Patched { node, key: "content", value }
        }
        Some(BlockEdit::EmptyInput) => Edited::Patched { node, key: "input", value: Substitute::EmptyObject },
        None => Edited::Plain(node),
    })
}

/// The entries of an [`Edited`] object.
pub enum EditedEntries<'p, N: JsonNode> {
    Plain(N::Entries),
    Message { entries: N::Entries, edit: &'p MessageEdit, placeholders: &'p [String], alone: Option<(usize, N)> },
    Call(N::Entries),
    Patched { entries: N::Entries, key: &'static str, value: Substitute<'p> },
    Empty,
}

impl<'p, N: JsonNode + Clone> Iterator for EditedEntries<'p, N> {
    type Item = (Edited<'p, N>, Edited<'p, N>);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            EditedEntries::Plain(entries) => entries.next().map(|(k, v)| (Edited::Plain(k), Edited::Plain(v))),
            EditedEntries::Message { entries, edit, placeholders, alone } => {
                let (k, v) = entries.next()?;
                let member = k.as_text().and_then(|t| Member::named(&t));
                Some((Edited::Plain(k), Edited::member(edit, placeholders, alone.as_ref(), member, v)))
            }
            EditedEntries::Call(entries) => {
                let (k, v) = entries.next()?;
                let function = k.as_text().is_some_and(|t| t.eq_ascii(Key::Function.as_str()));
                Some((Edited::Plain(k), if function { emptied_function(v) } else { Edited::Plain(v) }))
            }
            EditedEntries::Patched { entries, key, value } => {
                let (k, v) = entries.next()?;
                let hit = k.as_text().is_some_and(|t| t.eq_ascii(key));
                Some((Edited::Plain(k), if hit { Edited::substitute(*value) } else { Edited::Plain(v) }))
            }
            EditedEntries::Empty => None,
        }
    }
}

/// A call's `function` with its `arguments` emptied.
fn emptied_function<'p, N>(function: N) -> Edited<'p, N> {
    Edited::Patched { node: function, key: "arguments", value: Substitute::Str("{}") }
}

impl<'p, N: JsonNode + Clone> JsonNode for Edited<'p, N> {
    type Items = EditedItems<'p, N>;
    type Entries = EditedEntries<'p, N>;

    fn view(&self) -> Result<View<'_, Self>, Problem> {
        Ok(match self {
            Edited::Plain(node) => plain_view(node.view()?),
            Edited::Message { node, edit, placeholders, alone } => match node.view()? {
                View::Object { entries, len } => {
                    let alone = alone.clone();
                    View::Object { entries: EditedEntries::Message { entries, edit, placeholders, alone }, len }
                }
                other => plain_view(other),
            },
            Edited::Blocks { node, blocks, alone: Some((j, block)), placeholders } => match node.view()? {
                View::Array { .. } => {
                    let one = edited_block(block.clone(), *j, blocks, placeholders);
                    View::Array { len: usize::from(one.is_some()), items: EditedItems::One(one) }
                }
                other => plain_view(other),
            },
            Edited::Blocks { node, blocks, alone: None, placeholders } => match node.view()? {
                View::Array { items, len } => {
                    let gone = blocks.iter().filter(|b| b.1 == BlockEdit::Removed && b.0 < len).count();
                    View::Array { items: EditedItems::Blocks { items, at: 0, blocks, placeholders }, len: len - gone }
                }
                other => plain_view(other),
            },
            Edited::Calls { node, calls } => match node.view()? {
                View::Array { items, len } => View::Array { items: EditedItems::Calls { items, at: 0, calls }, len },
                other => plain_view(other),
            },
            Edited::Call(node) => match node.view()? {
                View::Object { entries, len } => View::Object { entries: EditedEntries::Call(entries), len },
                other => plain_view(other),
            },
            Edited::Patched { node, key, value } => match node.view()? {
                View::Object { entries, len } => {
                    View::Object { entries: EditedEntries::Patched { entries, key, value: *value }, len }
                }
                other => plain_view(other),
            },
            Edited::Str(s) => View::Str(Text::Utf8(s)),
            Edited::EmptyObject => View::Object { entries: EditedEntries::Empty, len: 0 },
        })
    }

    fn get(&self, key: Key) -> Option<Self> {
        match self {
            Edited::Plain(node) | Edited::Blocks { node, .. } | Edited::Calls { node, .. } => {
                node.get(key).map(Edited::Plain)
            }
            Edited::Message { node, edit, placeholders, alone } => {
                node.get(key).map(|v| Edited::member(edit, placeholders, alone.as_ref(), Member::of(key), v))
            }
            Edited::Call(node) => {
                node.get(key).map(|v| if key == Key::Function { emptied_function(v) } else { Edited::Plain(v) })
            }
            Edited::Patched { node, key: replaced, value } => {
                node.get(key)
                    .map(|v| if key.as_str() == *replaced { Edited::substitute(*value) } else { Edited::Plain(v) })
            }
            Edited::Str(_) | Edited::EmptyObject => None,
        }
    }

    fn message_fields(&self) -> MessageFields<Self> {
        let wrap = |f: MessageFields<N>, content: &dyn Fn(N) -> Self, calls: &dyn Fn(N) -> Self| MessageFields {
            role: f.role.map(Edited::Plain),
            content: f.content.map(content),
            tool_calls: f.tool_calls.map(calls),
            kind: f.kind.map(Edited::Plain),
        };
        match self {
            Edited::Plain(node) => wrap(node.message_fields(), &Edited::Plain, &Edited::Plain),
            Edited::Message { node, edit, placeholders, alone } => wrap(
                node.message_fields(),
                &|v| Edited::member(edit, placeholders, alone.as_ref(), Some(Member::Field(Field::Content)), v),
                &|v| Edited::member(edit, placeholders, alone.as_ref(), Some(Member::ToolCalls), v),
            ),
            _ => MessageFields {
                role: self.get(Key::Role),
                content: self.get(Key::Content),
                tool_calls: self.get(Key::ToolCalls),
                kind: self.get(Key::Type),
            },
        }
    }

    fn foreign_code_runs() -> u64 {
        N::foreign_code_runs()
    }

    fn type_name(&self) -> String {
        match self {
            Edited::Str(_) => "str".to_owned(),
            Edited::EmptyObject => "dict".to_owned(),
            other => other.node().map_or_else(String::new, |node| node.type_name()),
        }
    }

    fn prefetch(&self) {
        if let Some(node) = self.node() {
            node.prefetch();
        }
    }

    fn json_type(&self) -> JsonType {
        match self {
            Edited::Str(_) => JsonType::Str,
            Edited::EmptyObject => JsonType::Object,
            other => other.node().map_or(JsonType::Other, JsonNode::json_type),
        }
    }

    fn as_text(&self) -> Option<Text<'_>> {
        match self {
            Edited::Plain(node) => node.as_text(),
            Edited::Str(s) => Some(Text::Utf8(s)),
            _ => None,
        }
    }

    fn push_to(&self, snippet: &mut Snippet<'_>) -> Option<bool> {
        match self {
            Edited::Plain(node) => node.push_to(snippet),
            Edited::Str(s) => Some(snippet.push(Text::Utf8(s))),
            _ => None,
        }
    }

    fn str_units(&self) -> Option<usize> {
        match self {
            Edited::Plain(node) => node.str_units(),
            Edited::Str(s) => Some(Text::Utf8(s).utf16_len()),
            _ => None,
        }
    }

    fn str_json_len(&self) -> Option<usize> {
        match self {
            Edited::Plain(node) => node.str_json_len(),
            _ => None,
        }
    }
}

// Planning ----------------------------------------------------------------------------

/// Applies `edits` in order to `messages` (each over the previous one's output; a
/// [`ClearToolUses`] plans on `messages` as given) and says what changed; `sizer` sizes
/// messages as packing does (through the overlay).
/// `known` holds sizes already taken of messages as they are in the input, by index
/// (`None`, or past its end: not taken), and `checked` each message's fields as checked
/// up front as chat messages or Responses items, as `context` says (empty: read here,
/// leniently). Also each message's cost as edited, where taken.
///
/// # Errors
/// When a message that must be sized is malformed (naming its index), or the sizer fails.
pub fn plan<N, S>(
    messages: &[N],
    edits: &[Edit],
    sizer: &mut S,
    context: &EditContext,
    mut known: Vec<Option<u64>>,
    checked: &[Checked<N>],
) -> Result<(Plan, Vec<Option<u64>>), CoreError>
where
    N: JsonNode + Clone,
    S: for<'p> MessageSizer<Edited<'p, N>>,
{
    known.resize(messages.len(), None);
    let mut editor = Editor {
        messages,
        checked,
        lists: FxHashMap::default(),
        sizer,
        responses: context.responses,
        edits: Vec::new(),
        placeholders: Vec::new(),
        hidden: context.hidden.clone(),
        given_costs: FxHashMap::default(),
        costs: known,
    };
    let mut applied = Vec::new();
    for edit in edits {
        let done = match edit {
            Edit::ClearToolUses(edit) => editor.clear_tool_uses(edit, context)?,
            Edit::ClearThinking(edit) => editor.clear_thinking(*edit)?,
        };
        applied.extend(done);
    }
    let plan =
        Plan { messages: editor.edits.into_iter().flatten().collect(), applied, placeholders: editor.placeholders };
    Ok((plan, editor.costs))
}

/// Message `i`'s edit in `edits` (by index), if any: borrowing the edits alone, so a
/// caller can size through the sizer meanwhile.
fn edit_in(edits: &[Option<MessageEdit>], i: usize) -> Option<&MessageEdit> {
    edits.get(i).and_then(Option::as_ref)
}

/// One [`plan`] call: the transcript as edited so far, and each message's cost.
struct Editor<'m, 's, N, S> {
    messages: &'m [N],
    /// Each message's fields as checked up front (empty: none were).
    checked: &'m [Checked<N>],
    /// The lists [`Editor::item_of`] has read, by message and key.
    lists: FxHashMap<(usize, Key), Vec<N>>,
    sizer: &'s mut S,
    responses: bool,
    /// Each message's edit so far, by index (empty until an edit changes one).
    edits: Vec<Option<MessageEdit>>,
    placeholders: Vec<String>,
    /// Entries left out of the edits ([`EditContext::hidden`]).
    hidden: std::ops::Range<usize>,
    costs: Vec<Option<u64>>,
    /// The cost as given of each message an edit changed or removed, kept from `costs`
    /// when it is committed (an edit of tool uses plans on the transcript as given; an
    /// unchanged message's is its cost in `costs`).
    given_costs: FxHashMap<usize, u64>,
}

/// Where a call sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// A Responses call item.
    Item,
    /// An OpenAI `tool_calls` entry.
    ToolCall(usize),
    /// An Anthropic `tool_use` block.
    Block(usize),
}

#[derive(Debug, Clone, Copy)]
struct CallSite {
    at: usize,
    slot: Slot,
    excluded: bool,
}

/// One tool use: a result (a whole message, or block `block` of it) and its call.
#[derive(Debug, Clone, Copy)]
struct ToolUse {
    at: usize,
    block: Option<usize>,
    call: Option<CallSite>,
}

impl ToolUse {
    fn excluded(&self) -> bool {
        self.call.is_some_and(|c| c.excluded)
    }
}

/// What clearing a tool use would change: its result (the placeholder is shorter), its
/// call's input (emptying it is shorter). A tool use it would change nothing in is settled.
#[derive(Debug, Clone, Copy)]
struct Gate {
    result: bool,
    input: bool,
}

impl Gate {
    fn changes(self) -> bool {
        self.result || self.input
    }
}

/// What an edit of tool uses changes: how many tool uses, each changed message's edit and
/// new cost, and the tokens freed.
type Cleared = (usize, BTreeMap<usize, MessageEdit>, Vec<u64>, i128);

/// A call or a result, as [`Editor::exchanges`] reads it.
enum Exchange<N> {
    Call {
        at: usize,
        slot: Slot,
        id: Option<N>,
        name: Option<N>,
    },
    /// A result: a whole message, or block `block` of it; `tool_use` when it is one (any
    /// Responses output answers a call, but only a function's or custom tool's is a tool use).
    Result {
        at: usize,
        block: Option<usize>,
        id: Option<N>,
        tool_use: bool,
    },
}

/// Thinking found in one message.
enum Thinking {
    /// A Responses `reasoning` item.
    Item,
    /// Thinking blocks of an assistant message (input indices), and how many blocks it holds.
    Blocks(Vec<usize>, usize),
}

/// Values by id: ids hashed by [`Text::id_hash`] and compared whole on a hash match, so
/// no id is copied; an id that is not a str is never found.
struct ById<N, V> {
    buckets: FxHashMap<u64, SmallVec<[(N, V); 1]>>,
    /// [`Text::id_hash`], but for a test that makes ids collide.
    hash: fn(&Text<'_>) -> u64,
}

impl<N: JsonNode, V: Copy> ById<N, V> {
    fn new() -> Self {
        Self { buckets: FxHashMap::default(), hash: |text| text.id_hash() }
    }

    /// Sets the value of `id` (replacing an equal id's).
    fn insert(&mut self, id: Option<N>, value: V) {
        let Some(id) = id else { return };
        let Some(text) = id.as_text() else { return };
        let bucket = self.buckets.entry((self.hash)(&text)).or_default();
        let same =
            bucket.iter().position(|(other, _)| other.as_text().is_some_and(|o| o.cmp_code_points(&text).is_eq()));
        match same.and_then(|k| bucket.get_mut(k)) {
            Some(entry) => entry.1 = value,
            None => bucket.push((id, value)),
        }
    }

    fn get(&self, id: Option<&N>) -> Option<V> {
        let text = id?.as_text()?;
        let bucket = self.buckets.get(&(self.hash)(&text))?;
        bucket.iter().find(|(other, _)| other.as_text().is_some_and(|o| o.cmp_code_points(&text).is_eq())).map(|e| e.1)
    }
}

fn items<N: JsonNode>(node: Option<N>) -> Option<N::Items> {
    match node?.view() {
        Ok(View::Array { items, .. }) => Some(items),
        _ => None,
    }
}

fn kind_is<N: JsonNode>(node: &N, kind: &str) -> bool {
    node.get(Key::Type).is_some_and(|t| t.as_text().is_some_and(|t| t.eq_ascii(kind)))
}

fn is_thinking<N: JsonNode>(block: &N) -> bool {
    kind_is(block, "thinking") || kind_is(block, "redacted_thinking")
}

/// A message's own `content` as sizing measures it: a str by its UTF-16 length, null as 2,
/// anything else by its compact JSON.
fn top_units<N: JsonNode>(value: &N) -> Result<usize, Problem> {
    match value.json_type() {
        JsonType::Null => Ok(2),
        JsonType::Str => Ok(value.str_units().unwrap_or_default()),
        _ => json_len(value),
    }
}

/// How a value's length is measured.
type Measure<N> = fn(&N) -> Result<usize, Problem>;

/// Whether a present value (`measure` of it) is longer than its replacement's.
fn longer<N: JsonNode>(value: Option<N>, measure: Measure<N>, than: usize) -> Result<bool, Problem> {
    value.map_or(Ok(false), |v| measure(&v).map(|units| units > than))
}

fn str_json_units(s: &str) -> usize {
    Text::Utf8(s).json_len()
}

/// Fields checked up front, as an unedited message's in the overlay.
fn plain_checked<'p, N: Clone>(checked: &Checked<N>) -> Checked<Edited<'p, N>> {
    Checked {
        role: checked.role,
        content: checked.content.clone().map(Edited::Plain),
        tool_calls: checked.tool_calls.clone().map(Edited::Plain),
        item: checked.item,
        call_id: checked.call_id.clone().map(Edited::Plain),
    }
}

/// Sizes message `i` (read as edited).
fn size<'p, N, S>(sizer: &mut S, i: usize, node: &Edited<'p, N>, responses: bool) -> Result<u64, CoreError>
where
    N: JsonNode + Clone,
    S: MessageSizer<Edited<'p, N>>,
{
    let checked = if responses { check_item(node) } else { check_message(node) }.map_err(|e| e.at(i))?;
    sizer.message_tokens(Some(i), node, &checked).map_err(|e| e.at(i))
}

impl<N, S> Editor<'_, '_, N, S>
where
    N: JsonNode + Clone,
    S: for<'p> MessageSizer<Edited<'p, N>>,
{
    fn node(&self, i: usize) -> Result<N, CoreError> {
        self.messages.get(i).cloned().ok_or(CoreError::internal("an edited message index out of range"))
    }

    /// Message `i`'s edit so far.
    fn edit(&self, i: usize) -> Option<&MessageEdit> {
        edit_in(&self.edits, i)
    }

    fn removed(&self, i: usize) -> bool {
        self.edit(i).is_some_and(|e| e.removed)
    }

    /// Indices of the entries not removed (nor hidden).
    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.messages.len()).filter(|&i| !self.removed(i) && !self.hidden.contains(&i))
    }

    /// Message `i`'s cost as edited so far.
    fn cost(&mut self, i: usize) -> Result<u64, CoreError> {
        if let Some(Some(cost)) = self.costs.get(i) {
            return Ok(*cost);
        }
        let node = self.node(i)?;
        let edit = edit_in(&self.edits, i);
        let view = Edited::message(node, edit, &self.placeholders);
        // Unedited and checked up front: sized on those fields, not read again.
        let cost = match self.checked.get(i).filter(|_| edit.is_none()) {
            Some(checked) => self.sizer.message_tokens(Some(i), &view, &plain_checked(checked)).map_err(|e| e.at(i))?,
            None => size(&mut *self.sizer, i, &view, self.responses)?,
        };
        if let Some(slot) = self.costs.get_mut(i) {
            *slot = Some(cost);
        }
        Ok(cost)
    }

    /// Message `i`'s cost as given (as the edits found it).
    fn given_cost(&mut self, i: usize) -> Result<u64, CoreError> {
        if self.edit(i).is_none() {
            return self.cost(i);
        }
        if let Some(&cost) = self.given_costs.get(&i) {
            return Ok(cost);
        }
        let cost = self.cost_with(i, None)?;
        self.given_costs.insert(i, cost);
        Ok(cost)
    }

    /// Whether `base` and the transcript as given cost more than `limit`: summed from the
    /// newest, so no more are sized than it takes (as folding sizes only what it reaches).
    fn given_costs_more_than(&mut self, base: u64, limit: u64) -> Result<bool, CoreError> {
        let (mut total, limit) = (u128::from(base), u128::from(limit));
        let hidden = self.hidden.clone();
        for i in (0..self.messages.len()).rev().filter(|i| !hidden.contains(i)) {
            if total > limit {
                return Ok(true);
            }
            total += u128::from(self.given_cost(i)?);
        }
        Ok(total > limit)
    }

    /// Message `i`'s cost with `edit` (`None`: as it is in the input).
    fn cost_with(&mut self, i: usize, edit: Option<&MessageEdit>) -> Result<u64, CoreError> {
        let view = Edited::message(self.node(i)?, edit, &self.placeholders);
        size(&mut *self.sizer, i, &view, self.responses)
    }

    /// What putting `changed` in place of the edits of the messages at their indices (of
    /// the messages as `given`), and removing `gone`, frees; each message sized before its
    /// replacement, by index. Also the new costs.
    fn freed(
        &mut self,
        changed: &BTreeMap<usize, MessageEdit>,
        gone: &[usize],
        given: bool,
    ) -> Result<(Vec<u64>, i128), CoreError> {
        let mut at: Vec<usize> = changed.keys().chain(gone).copied().collect();
        at.sort_unstable();
        let mut after = Vec::with_capacity(changed.len());
        let mut freed = 0i128;
        for i in at {
            freed += i128::from(if given { self.given_cost(i)? } else { self.cost(i)? });
            if let Some(edit) = changed.get(&i) {
                let cost = self.cost_with(i, Some(edit))?;
                freed -= i128::from(cost);
                after.push(cost);
            }
        }
        Ok((after, freed))
    }

    fn commit(&mut self, changed: BTreeMap<usize, MessageEdit>, after: &[u64], gone: &[usize]) {
        if self.edits.is_empty() {
            self.edits = vec![None; self.messages.len()];
        }
        // A message edited or removed for the first time keeps its cost as given for what
        // later edits ask of the transcript as given: sized again, a custom estimator saw
        // it twice where the reference asks once.
        for &i in changed.keys().chain(gone) {
            if let (Some(Some(given)), Some(None)) = (self.costs.get(i), self.edits.get(i)) {
                self.given_costs.entry(i).or_insert(*given);
            }
        }
        for ((i, edit), &cost) in changed.into_iter().zip(after) {
            if let Some(slot) = self.costs.get_mut(i) {
                *slot = Some(cost);
            }
            if let Some(slot) = self.edits.get_mut(i) {
                *slot = Some(edit);
            }
        }
        for &i in gone {
            if let Some(slot) = self.edits.get_mut(i) {
                slot.get_or_insert_with(|| MessageEdit::new(i)).removed = true;
            }
        }
    }

    /// The edit of message `i` to change: its current one, or none (`given`).
    fn edit_of<'c>(&self, changed: &'c mut BTreeMap<usize, MessageEdit>, i: usize, given: bool) -> &'c mut MessageEdit {
        let current = if given { None } else { self.edit(i) };
        changed.entry(i).or_insert_with(|| current.cloned().unwrap_or_else(|| MessageEdit::new(i)))
    }

    // ClearToolUses ------------------------------------------------------------------

    /// Every call and every result, in order (a message's `tool_calls` before its blocks),
    /// read leniently: what pairing tool uses and finding unanswered calls both read. A
    /// call's tool name is read only when `names` asks (for `exclude_tools`).
    fn exchanges(&self, names: bool, mut found: impl FnMut(Exchange<N>)) {
        let name_in = |node: &N| if names { node.get(Key::Name) } else { None };
        // Hidden entries too: a result after the compaction pairs with its call before it.
        for i in (0..self.messages.len()).filter(|&i| !self.removed(i)) {
            let Some(m) = self.messages.get(i) else { continue };
            if self.responses {
                let (item, id) = match self.checked.get(i) {
                    Some(c) => (c.item, c.call_id.clone()),
                    None => {
                        let (item, _, id) = peek_kind(m);
                        (item, id)
                    }
                };
                match item {
                    Item::Call => found(Exchange::Call { at: i, slot: Slot::Item, id, name: name_in(m) }),
                    Item::Output => found(Exchange::Result { at: i, block: None, id, tool_use: is_tool_output(m) }),
                    _ => {}
                }
                continue;
            }
            // The fields as checked up front, else as read leniently.
            let (role, content, tool_calls) = match self.checked.get(i) {
                Some(c) => (c.role, c.content.clone(), c.tool_calls.clone()),
                None if m.json_type() == JsonType::Object => {
                    let fields = m.message_fields();
                    (role_or_other(fields.role), fields.content, fields.tool_calls)
                }
                None => continue,
            };
            if role == Role::Tool {
                found(Exchange::Result { at: i, block: None, id: m.get(Key::ToolCallId), tool_use: true });
                continue;
            }
            if role == Role::Assistant {
                for (j, c) in items(tool_calls).into_iter().flatten().enumerate() {
                    if c.json_type() == JsonType::Object {
                        let name = if names { c.get(Key::Function).and_then(|f| f.get(Key::Name)) } else { None };
                        found(Exchange::Call { at: i, slot: Slot::ToolCall(j), id: c.get(Key::Id), name });
                    }
                }
            }
            for (j, block) in items(content).into_iter().flatten().enumerate() {
                if kind_is(&block, "tool_use") {
                    let (id, name) = (block.get(Key::Id), name_in(&block));
                    found(Exchange::Call { at: i, slot: Slot::Block(j), id, name });
                } else if kind_is(&block, "tool_result") {
                    let id = block.get(Key::ToolUseId);
                    found(Exchange::Result { at: i, block: Some(j), id, tool_use: true });
                }
            }
        }
    }

    /// Every tool use not hidden, in its result's order, each paired with the nearest
    /// earlier call (a hidden one too, whose input is then left as it is).
    fn tool_uses(&self, exclude: &[String]) -> Vec<ToolUse> {
        let excluded = |name: Option<N>| {
            name.is_some_and(|n| {
                n.as_text().is_some_and(|t| exclude.iter().any(|x| t.cmp_code_points(&Text::Utf8(x)).is_eq()))
            })
        };
        let mut calls = ById::new();
        let mut uses = Vec::new();
        self.exchanges(!exclude.is_empty(), |found| match found {
            Exchange::Call { at, slot, id, name } => calls.insert(id, CallSite { at, slot, excluded: excluded(name) }),
            Exchange::Result { at, block, id, tool_use: true } if !self.hidden.contains(&at) => {
                uses.push(ToolUse { at, block, call: calls.get(id.as_ref()) });
            }
            Exchange::Result { .. } => {}
        });
        uses
    }

    /// Item `j` of message `i`'s `key` list (content blocks, tool calls). Each list read is
    /// kept, so a message of many tool uses is read once, not once a use.
    fn item_of(&mut self, i: usize, key: Key, j: usize) -> Result<Option<N>, CoreError> {
        if let Some(list) = self.lists.get(&(i, key)) {
            return Ok(list.get(j).cloned());
        }
        let list: Vec<N> = items(self.node(i)?.get(key)).map(Iterator::collect).unwrap_or_default();
        let item = list.get(j).cloned();
        self.lists.insert((i, key), list);
        Ok(item)
    }

    /// Whether replacing the use's result by `placeholder` makes it shorter: as it is now,
    /// or as `given`.
    fn result_shorter(&mut self, u: &ToolUse, placeholder: &str, given: bool) -> Result<bool, CoreError> {
        let m = self.node(u.at)?;
        let edit = if given { None } else { self.edit(u.at) };
        let placeholder_of = |k: usize| self.placeholders.get(k).map_or("", String::as_str);
        let field = |p| CoreError::field(Some(u.at), "content", p);
        if let Some(j) = u.block {
            if let Some(BlockEdit::Content(k)) = edit.and_then(|e| e.block(j)) {
                return Ok(str_json_units(placeholder_of(k)) > str_json_units(placeholder));
            }
            let block = self.item_of(u.at, Key::Content, j)?;
            let content = block.and_then(|b| b.get(Key::Content));
            return longer(content, json_len, str_json_units(placeholder)).map_err(field);
        }
        let (key, measure, units): (Field, Measure<N>, fn(&str) -> usize) = if self.responses {
            (Field::Output, json_len, str_json_units)
        } else {
            (Field::Content, top_units, |s| Text::Utf8(s).utf16_len())
        };
        if let Some(Replacement::Placeholder(k)) = edit.and_then(|e| e.field(key)) {
            return Ok(units(placeholder_of(k)) > units(placeholder));
        }
        let value = m.get(if self.responses { Key::Output } else { Key::Content });
        longer(value, measure, units(placeholder)).map_err(|p| CoreError::field(Some(u.at), key.key(), p))
    }

    /// Whether the call has an input longer than emptying it leaves: now, or as `given`.
    fn input_longer(&mut self, call: Option<CallSite>, given: bool) -> Result<bool, CoreError> {
        let Some(c) = call else { return Ok(false) };
        let m = self.node(c.at)?;
        let edit = if given { None } else { self.edit(c.at) };
        let problem = |p| CoreError::field(Some(c.at), "input", p);
        match c.slot {
            Slot::Item => {
                let Some((field, empty)) = call_input(&m) else { return Ok(false) };
                if edit.and_then(|e| e.field(field)).is_some() {
                    return Ok(false);
                }
                longer(member(&m, field.key()), json_len, empty).map_err(problem)
            }
            Slot::ToolCall(j) => {
                if edit.is_some_and(|e| e.calls.binary_search(&j).is_ok()) {
                    return Ok(false);
                }
                let function = self.item_of(c.at, Key::ToolCalls, j)?.and_then(|c| c.get(Key::Function));
                let arguments =
                    function.filter(|f| f.json_type() == JsonType::Object).and_then(|f| member(&f, "arguments"));
                longer(arguments, json_len, str_json_units("{}")).map_err(problem)
            }
            Slot::Block(j) => {
                if edit.and_then(|e| e.block(j)) == Some(BlockEdit::EmptyInput) {
                    return Ok(false);
                }
                let block = self.item_of(c.at, Key::Content, j)?;
                longer(block.and_then(|b| member(&b, "input")), json_len, 2).map_err(problem)
            }
        }
    }

    /// What a use's result costs in the transcript as given: its message's cost, or (a
    /// block) what its message costs holding that block alone.
    fn weight(&mut self, u: &ToolUse) -> Result<u64, CoreError> {
        let Some(j) = u.block else { return self.given_cost(u.at) };
        let Some(block) = self.item_of(u.at, Key::Content, j)? else {
            return Err(CoreError::message_changed());
        };
        let edit = MessageEdit::new(u.at);
        let node = self.node(u.at)?;
        let view = Edited::Message { node, edit: &edit, placeholders: &self.placeholders, alone: Some((j, block)) };
        size(&mut *self.sizer, u.at, &view, self.responses)
    }

    /// Where the cleared tool uses end: the last cut point at or before the newest `keep`,
    /// walking from the first tool use clearing would change.
    fn boundary(&mut self, uses: &[(ToolUse, Gate)], keep: usize, step: u64) -> Result<usize, CoreError> {
        let start = uses.iter().position(|(_, gate)| gate.changes()).unwrap_or(uses.len());
        let protected = uses.len().saturating_sub(keep);
        let step = u128::from(step.max(1));
        let mut boundary = start.min(protected);
        let mut running = 0u128;
        for (k, (u, _)) in uses.iter().enumerate().take(protected).skip(start) {
            let before = running;
            running += u128::from(self.weight(u)?);
            if running / step > before / step {
                boundary = k + 1;
            }
        }
        Ok(boundary)
    }

    /// The edits of the messages that clearing `cleared` changes, each on top of what
    /// earlier edits did to it (`given`: of the message as given).
    fn clearing(
        &self,
        cleared: &[(ToolUse, Gate)],
        placeholder: usize,
        given: bool,
    ) -> Result<BTreeMap<usize, MessageEdit>, CoreError> {
        let mut changed = BTreeMap::new();
        for (u, gate) in cleared {
            if gate.result {
                let target = self.edit_of(&mut changed, u.at, given);
                match u.block {
                    Some(j) => target.set_block(j, BlockEdit::Content(placeholder)),
                    None if self.responses => target.set_field(Field::Output, Replacement::Placeholder(placeholder)),
                    None => target.set_field(Field::Content, Replacement::Placeholder(placeholder)),
                }
            }
            let Some(c) = u.call.filter(|_| gate.input) else { continue };
            let input = match c.slot {
                Slot::Item => call_input(&self.node(c.at)?),
                Slot::ToolCall(_) | Slot::Block(_) => None,
            };
            let target = self.edit_of(&mut changed, c.at, given);
            match (c.slot, input) {
                (Slot::Item, Some((Field::Arguments, _))) => {
                    target.set_field(Field::Arguments, Replacement::EmptyArguments)
                }
                (Slot::Item, Some((field, _))) => target.set_field(field, Replacement::EmptyText),
                (Slot::Item, None) => {}
                (Slot::ToolCall(j), _) => target.empty_call(j),
                (Slot::Block(j), _) => target.set_block(j, BlockEdit::EmptyInput),
            }
        }
        Ok(changed)
    }

    /// Plans on the transcript as given (its trigger, cut points and `clear_at_least` read
    /// there, so neither an earlier edit nor what a grown transcript lets it clear can
    /// move them) and clears over the earlier edits' output.
    fn clear_tool_uses(&mut self, edit: &ClearToolUses, context: &EditContext) -> Result<Option<Applied>, CoreError> {
        if !self.given_costs_more_than(context.base, edit.trigger.unwrap_or(context.budget))? {
            return Ok(None);
        }
        let mut uses = Vec::new();
        for u in self.tool_uses(&edit.exclude_tools) {
            let eligible = !u.excluded();
            let result = eligible && self.result_shorter(&u, &edit.placeholder, true)?;
            let visible = u.call.is_some_and(|c| !self.hidden.contains(&c.at));
            let input = eligible && edit.clear_tool_inputs && visible && self.input_longer(u.call, true)?;
            uses.push((u, Gate { result, input }));
        }
        let boundary = self.boundary(&uses, edit.keep, context.step)?;
        let planned: Vec<(ToolUse, Gate)> = uses.into_iter().take(boundary).filter(|(_, g)| g.changes()).collect();
        if planned.is_empty() {
            return Ok(None);
        }
        let (placeholder, pushed) = match self.placeholders.iter().position(|p| *p == edit.placeholder) {
            Some(k) => (k, false),
            None => {
                self.placeholders.push(edit.placeholder.clone());
                (self.placeholders.len() - 1, true)
            }
        };
        let changed = self.clearing(&planned, placeholder, true)?;
        let (after, freed) = self.freed(&changed, &[], true)?;
        let done = if freed < i128::from(edit.clear_at_least) {
            None
        } else if self.edits.is_empty() {
            // No earlier edit changed anything: the plan is the change.
            Some((planned.len(), changed, after, freed))
        } else {
            self.over_earlier_edits(&planned, placeholder, &edit.placeholder)?
        };
        let Some((cleared, changed, after, freed)) = done else {
            if pushed {
                self.placeholders.pop();
            }
            return Ok(None);
        };
        self.commit(changed, &after, &[]);
        Ok(Some(Applied {
            kind: EditKind::ClearToolUses,
            cleared_tool_uses: cleared,
            cleared_thinking_turns: 0,
            cleared_input_tokens: freed,
        }))
    }

    /// What clearing `planned` changes over the earlier edits' output (the values they
    /// left to change): how many tool uses, the edits, their costs and what they free.
    fn over_earlier_edits(
        &mut self,
        planned: &[(ToolUse, Gate)],
        placeholder: usize,
        text: &str,
    ) -> Result<Option<Cleared>, CoreError> {
        let mut now = Vec::with_capacity(planned.len());
        for (u, gate) in planned {
            let result = gate.result && self.result_shorter(u, text, false)?;
            let input = gate.input && self.input_longer(u.call, false)?;
            if result || input {
                now.push((*u, Gate { result, input }));
            }
        }
        if now.is_empty() {
            return Ok(None);
        }
        let changed = self.clearing(&now, placeholder, false)?;
        let (after, freed) = self.freed(&changed, &[], false)?;
        Ok(Some((now.len(), changed, after, freed)))
    }

    // ClearThinking ------------------------------------------------------------------

    /// Whether message `m` opens a turn: a user message not made only of `tool_result`
    /// blocks (Responses: a `message` item with role `user`).
    fn user_authored(&self, m: &N) -> bool {
        if self.responses {
            return matches!(peek_kind(m), (Item::Message, Role::User, _));
        }
        if m.json_type() != JsonType::Object || role_or_other(m.get(Key::Role)) != Role::User {
            return false;
        }
        let mut seen = false;
        let only_results = items(m.get(Key::Content)).is_some_and(|mut it| {
            it.all(|b| {
                seen = true;
                kind_is(&b, "tool_result")
            })
        });
        !(only_results && seen)
    }

    /// The thinking in message `i` as edited so far.
    fn thinking(&self, i: usize, m: &N) -> Option<Thinking> {
        if self.responses {
            return (peek_kind(m).0 == Item::Reasoning).then_some(Thinking::Item);
        }
        if m.json_type() != JsonType::Object || role_or_other(m.get(Key::Role)) != Role::Assistant {
            return None;
        }
        let edit = self.edit(i);
        let mut found = Vec::new();
        let mut held = 0;
        for (j, block) in items(m.get(Key::Content)).into_iter().flatten().enumerate() {
            if edit.and_then(|e| e.block(j)) == Some(BlockEdit::Removed) {
                continue;
            }
            held += 1;
            if is_thinking(&block) {
                found.push(j);
            }
        }
        (!found.is_empty()).then_some(Thinking::Blocks(found, held))
    }

    /// Whether reasoning item `i` is required by the item its segment holds (the first
    /// after it that is no reasoning): one sent with its `id` (`fc_…`, `msg_…`), which
    /// OpenAI refuses without the reasoning item before it.
    fn reasoning_required(&self, i: usize) -> bool {
        let next = self.messages.iter().skip(i + 1).find(|m| peek_kind(*m).0 != Item::Reasoning);
        next.is_some_and(|m| m.get(Key::Id).is_some_and(|id| id.as_text().is_some()))
    }

    /// Messages holding a call no later message answers.
    fn unanswered(&self) -> Vec<usize> {
        let mut calls: Vec<(usize, N)> = Vec::new();
        let mut answered = ById::new();
        self.exchanges(false, |found| match found {
            Exchange::Call { at, id, .. } => calls.extend(id.filter(|id| id.as_text().is_some()).map(|id| (at, id))),
            Exchange::Result { at, id, .. } => answered.insert(id, at),
        });
        calls.into_iter().filter(|(i, id)| answered.get(Some(id)).is_none_or(|at| at <= *i)).map(|c| c.0).collect()
    }

    fn clear_thinking(&mut self, edit: ClearThinking) -> Result<Option<Applied>, CoreError> {
        let mut turn = 0usize;
        let mut turns_of: FxHashMap<usize, usize> = FxHashMap::default();
        let mut found: Vec<(usize, usize, Thinking)> = Vec::new();
        for i in self.live() {
            let Some(m) = self.messages.get(i) else { continue };
            if self.user_authored(m) {
                turn += 1;
            }
            turns_of.insert(i, turn);
            if let Some(thinking) = self.thinking(i, m) {
                found.push((i, turn, thinking));
            }
        }
        let mut with_thinking: Vec<usize> = found.iter().map(|f| f.1).collect();
        with_thinking.dedup();
        let mut held: FxHashSet<usize> = with_thinking.iter().rev().take(edit.keep).copied().collect();
        held.extend(self.unanswered().iter().filter_map(|i| turns_of.get(i)));
        let mut changed = BTreeMap::new();
        let mut gone = Vec::new();
        let mut turns: Vec<usize> = Vec::new();
        for (i, t, thinking) in found {
            if held.contains(&t) {
                continue;
            }
            match thinking {
                Thinking::Item if self.reasoning_required(i) => continue,
                Thinking::Item => gone.push(i),
                Thinking::Blocks(blocks, count) if blocks.len() < count => {
                    let target = self.edit_of(&mut changed, i, false);
                    for j in blocks {
                        target.set_block(j, BlockEdit::Removed);
                    }
                }
                Thinking::Blocks(..) => continue,
            }
            if turns.last() != Some(&t) {
                turns.push(t);
            }
        }
        if turns.is_empty() {
            return Ok(None);
        }
        let (after, freed) = self.freed(&changed, &gone, false)?;
        self.commit(changed, &after, &gone);
        Ok(Some(Applied {
            kind: EditKind::ClearThinking,
            cleared_tool_uses: 0,
            cleared_thinking_turns: turns.len(),
            cleared_input_tokens: freed,
        }))
    }
}

/// Whether a Responses output item is a tool use's result.
fn is_tool_output<N: JsonNode>(item: &N) -> bool {
    kind_is(item, "function_call_output") || kind_is(item, "custom_tool_call_output")
}

/// A Responses call's input member and the JSON length of what emptying it writes.
fn call_input<N: JsonNode>(item: &N) -> Option<(Field, usize)> {
    if kind_is(item, "function_call") {
        Some((Field::Arguments, str_json_units("{}")))
    } else if kind_is(item, "custom_tool_call") {
        Some((Field::Input, str_json_units("")))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::{Encoding, ExactTokens};
    use crate::items::Format;
    use crate::json::write_json;
    use crate::message::Checked;
    use crate::pack::{handoff_line, pack, Cut, PackOptions};
    use crate::provider::Sizing;
    use crate::tokens::CharsPerToken;
    use crate::transcript::Transcript;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// The edited transcript, built by applying `plan` to a copy of the JSON (the overlay's
    /// twin, written independently of it).
    fn materialize(plan: &Plan, messages: &[Value]) -> Vec<Value> {
        let mut out = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let Some(edit) = plan.edit(i) else {
                out.push(m.clone());
                continue;
            };
            if edit.removed {
                continue;
            }
            let mut m = m.clone();
            for &(field, to) in &edit.fields {
                m[field.key()] = match to.resolve(&plan.placeholders) {
                    Substitute::Str(s) => json!(s),
                    Substitute::EmptyObject => json!({}),
                };
            }
            for &j in &edit.calls {
                m["tool_calls"][j]["function"]["arguments"] = json!("{}");
            }
            if let Some(blocks) = m.get_mut("content").and_then(Value::as_array_mut) {
                let mut kept = Vec::new();
                for (j, mut block) in blocks.drain(..).enumerate() {
                    match edit.block(j) {
                        Some(BlockEdit::Removed) => continue,
                        Some(BlockEdit::Content(k)) => block["content"] = json!(plan.placeholders[k]),
                        Some(BlockEdit::EmptyInput) => block["input"] = json!({}),
                        None => {}
                    }
                    kept.push(block);
                }
                *blocks = kept;
            }
            out.push(m);
        }
        out
    }

    /// The overlay written out and read back.
    fn written(plan: &Plan, messages: &[Value]) -> Vec<Value> {
        let refs: Vec<&Value> = messages.iter().collect();
        let overlay = plan.overlay(&refs);
        overlay
            .nodes
            .iter()
            .map(|node| {
                let mut text = String::new();
                write_json(node, &mut text).unwrap();
                serde_json::from_str(&text).unwrap()
            })
            .collect()
    }

    #[test]
    fn ids_in_one_bucket_keep_their_own_values() {
        // Every id hashed alike: the map must still tell them apart, and an equal id
        // (reused) replaces the value of the one before it.
        let ids = [json!("call_a"), json!("call_b"), json!("call_a"), json!(7)];
        let asked = [json!("call_a"), json!("call_b"), json!("call_c"), json!(7)];
        let mut by_id: ById<&Value, usize> = ById { hash: |_| 42, ..ById::new() };
        for (at, id) in ids.iter().enumerate() {
            by_id.insert(Some(id), at);
        }
        let found: Vec<Option<usize>> = asked.iter().map(|id| by_id.get(Some(&id))).collect();
        assert_eq!(found, [Some(2), Some(1), None, None]);
        assert_eq!(by_id.buckets.get(&42).map(|bucket| bucket.len()), Some(2));
    }

    fn run(messages: &[Value], edits: &[Edit], context: &EditContext) -> Plan {
        let refs: Vec<&Value> = messages.iter().collect();
        plan(&refs, edits, &mut CharsPerToken, context, Vec::new(), &[]).unwrap().0
    }

    fn edit_of(v: &Value) -> Edit {
        let count = |key: &str| v[key].as_u64().unwrap();
        match v["type"].as_str() {
            Some("clear_tool_uses") => Edit::ClearToolUses(ClearToolUses {
                trigger: v["trigger"].as_u64(),
                keep: count("keep") as usize,
                clear_at_least: count("clear_at_least"),
                exclude_tools: v["exclude_tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().into())
                    .collect(),
                clear_tool_inputs: v["clear_tool_inputs"].as_bool().unwrap(),
                placeholder: v["placeholder"].as_str().unwrap().into(),
            }),
            _ => Edit::ClearThinking(ClearThinking { keep: count("keep") as usize }),
        }
    }

    /// One case of `tests/edits_cases.json`.
    struct Case {
        messages: Vec<Value>,
        edits: Vec<Edit>,
        context: EditContext,
        json: Value,
    }

    /// The cases `tests/test_edits.py` generates, with the Python reference's answers.
    fn cases() -> Vec<Case> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/edits_cases.json");
        let cases: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let cases = cases["cases"].as_array().unwrap();
        assert!(cases.len() >= 30);
        cases
            .iter()
            .map(|case| Case {
                messages: case["messages"].as_array().unwrap().clone(),
                edits: case["edits"].as_array().unwrap().iter().map(edit_of).collect(),
                context: EditContext {
                    budget: case["budget"].as_u64().unwrap(),
                    step: case["step"].as_u64().unwrap(),
                    base: case["base"].as_u64().unwrap(),
                    responses: case["responses"].as_bool().unwrap(),
                    hidden: 0..0,
                },
                json: case.clone(),
            })
            .collect()
    }

    #[test]
    fn plans_equal_the_python_reference() {
        for (n, Case { messages, edits, context, json: case }) in cases().iter().enumerate() {
            let plan = run(messages, edits, context);
            let applied: Vec<Value> = plan
                .applied
                .iter()
                .map(|a| {
                    let tokens = i64::try_from(a.cleared_input_tokens).unwrap();
                    json!([a.kind.as_str(), a.cleared_tool_uses, a.cleared_thinking_turns, tokens])
                })
                .collect();
            assert_eq!(Value::from(applied), case["applied"], "case {n}");
            assert_eq!(Value::from(plan.removed().collect::<Vec<_>>()), case["removed"], "case {n}");
            // Null stands for a message the edits left as it was.
            let source = plan.overlay(messages).source;
            let expected: Vec<Value> = case["expected"]
                .as_array()
                .unwrap()
                .iter()
                .zip(&source)
                .map(|(m, &i)| if m.is_null() { messages[i].clone() } else { m.clone() })
                .collect();
            assert_eq!(written(&plan, messages), expected, "case {n}");
            assert_eq!(materialize(&plan, messages), expected, "case {n}");
        }
    }

    /// Checks an entry as packing would in this format.
    fn checked<N: JsonNode>(node: &N, responses: bool) -> Checked<N> {
        if responses { check_item(node) } else { check_message(node) }.unwrap()
    }

    /// Sizes every entry of the overlay and of the materialised JSON with `sizer`; they agree.
    fn sizes_agree<S>(plan: &Plan, messages: &[Value], responses: bool, sizer: &mut S)
    where
        S: for<'p> MessageSizer<Edited<'p, &'p Value>> + for<'v> MessageSizer<&'v Value>,
    {
        let refs: Vec<&Value> = messages.iter().collect();
        let overlay = plan.overlay(&refs);
        let built = materialize(plan, messages);
        assert_eq!(overlay.nodes.len(), built.len());
        for (node, value) in overlay.nodes.iter().zip(&built) {
            let edited = sizer.message_tokens(None, node, &checked(node, responses)).unwrap();
            let plain = sizer.message_tokens(None, &value, &checked(&value, responses)).unwrap();
            assert_eq!(edited, plain, "{value}");
            assert_eq!(handoff_line(node).unwrap(), handoff_line(&value).unwrap());
        }
    }

    #[test]
    fn an_overlaid_message_sizes_and_reads_as_the_edited_json() {
        let mut exact = ExactTokens::new(Encoding::O200kBase, crate::provider::Sizing::Seed);
        for Case { messages, edits, context, .. } in cases() {
            let plan = run(&messages, &edits, &context);
            sizes_agree(&plan, &messages, context.responses, &mut CharsPerToken);
            sizes_agree(&plan, &messages, context.responses, &mut Sizing::Provider { image_tokens: 1_000 });
            sizes_agree(&plan, &messages, context.responses, &mut exact);
        }
    }

    #[test]
    fn the_packer_packs_the_overlay_as_it_packs_the_edited_json() {
        let mut packed = 0;
        for Case { messages, edits, context, .. } in cases() {
            let plan = run(&messages, &edits, &context);
            let refs: Vec<&Value> = messages.iter().collect();
            let overlay = plan.overlay(&refs);
            let built = materialize(&plan, &messages);
            let built: Vec<&Value> = built.iter().collect();
            for cut in [Cut::Greedy, Cut::Chunked { chunk: None }] {
                let options = PackOptions { budget: context.budget, cut, ..PackOptions::default() };
                let mut t = Transcript::read(&overlay.nodes, CharsPerToken, Format::Auto).unwrap();
                let through = pack(&mut t, &options).unwrap();
                let mut t = Transcript::read(&built, CharsPerToken, Format::Auto).unwrap();
                assert_eq!(through, pack(&mut t, &options).unwrap());
                packed += usize::from(through.note.is_some());
            }
        }
        assert!(packed > 10);
    }

    #[test]
    fn fields_checked_up_front_plan_as_fields_read_here() {
        // What `pack_edited` hands the plan (each entry checked by `read_all`, in the
        // plan's format) plans, sizes and reports as the plan reading them itself.
        let mut exact = ExactTokens::new(Encoding::O200kBase, crate::provider::Sizing::Seed);
        for Case { messages, edits, context, .. } in cases() {
            let refs: Vec<&Value> = messages.iter().collect();
            let format = if context.responses { Format::Responses } else { Format::Chat };
            let checked = Transcript::read_all(&refs, CharsPerToken, format).unwrap().into_checked();
            assert_eq!(checked.len(), refs.len());
            agree(&refs, &edits, &context, &checked, &mut CharsPerToken);
            agree(&refs, &edits, &context, &checked, &mut exact);
        }

        fn agree<'v, S: for<'p> MessageSizer<Edited<'p, &'v Value>>>(
            refs: &[&'v Value],
            edits: &[Edit],
            context: &EditContext,
            checked: &[Checked<&'v Value>],
            sizer: &mut S,
        ) {
            let read_here = plan(refs, edits, sizer, context, Vec::new(), &[]).unwrap();
            let up_front = plan(refs, edits, sizer, context, Vec::new(), checked).unwrap();
            assert_eq!(read_here, up_front);
        }
    }

    #[test]
    fn removed_items_are_mapped_out_of_the_overlay() {
        let items = [
            json!({"type": "message", "role": "user", "content": "a"}),
            json!({"type": "reasoning", "summary": []}),
            json!({"type": "message", "role": "assistant", "content": "b"}),
            json!({"type": "message", "role": "user", "content": "c"}),
            json!({"type": "reasoning", "summary": []}),
            json!({"type": "message", "role": "assistant", "content": "d"}),
        ];
        let context = EditContext { budget: 0, step: 1, base: 0, responses: true, hidden: 0..0 };
        let plan = run(&items, &[Edit::ClearThinking(ClearThinking::default())], &context);
        assert_eq!(plan.removed().collect::<Vec<_>>(), vec![1]);
        let refs: Vec<&Value> = items.iter().collect();
        let overlay = plan.overlay(&refs);
        assert_eq!(overlay.source, vec![0, 2, 3, 4, 5]);
        // A pin on the removed item pins the item after it; on a kept one, itself; past
        // the last entry left, nothing.
        assert_eq!((overlay.pinned(1), overlay.pinned(4), overlay.pinned(6)), (Some(1), Some(3), None));
        // The item removed is its whole cost: {"type":"reasoning","summary":[]} is 33 units.
        let applied = plan.applied[0];
        assert_eq!((applied.cleared_thinking_turns, applied.cleared_input_tokens), (1, 9 + 4));
    }

    #[test]
    fn a_message_that_cannot_be_sized_is_named() {
        let messages = [json!({"role": "user", "content": "x"}), json!({"role": "tool", "content": 5})];
        let refs: Vec<&Value> = messages.iter().collect();
        let context = EditContext { budget: 0, step: 1, base: 0, responses: false, hidden: 0..0 };
        let edits = [Edit::ClearToolUses(ClearToolUses::default())];
        let err = plan(&refs, &edits, &mut CharsPerToken, &context, Vec::new(), &[]).unwrap_err();
        assert!(matches!(err, CoreError::Message { index: Some(1), field: "content", .. }), "{err:?}");
        // Under its trigger a ClearThinking edit sizes nothing, so reads no further.
        assert!(plan(
            &refs,
            &[Edit::ClearThinking(ClearThinking::default())],
            &mut CharsPerToken,
            &context,
            Vec::new(),
            &[]
        )
        .is_ok());
    }

    // Generated transcripts, in the core's own terms -----------------------------------

    /// One step of a transcript: (what, size, flags). What: 0 a user turn, 1 an assistant
    /// reply (with thinking or reasoning when flag 1), 2 a tool exchange of one or two calls
    /// (flag 2: two; flag 4: the last unanswered; flag 8: the second call is `bash`),
    /// 3 an assistant message made only of thinking (Responses: a lone reasoning item).
    type Step = (u8, usize, u8);

    fn build(shape: u8, steps: &[Step]) -> Vec<Value> {
        let mut out = Vec::new();
        let mut n = 0;
        for &(what, size, flags) in steps {
            let text = "é".repeat(size % 7) + &"x".repeat(size);
            let thinking = json!({"type": "thinking", "thinking": text.clone(), "signature": "s".repeat(size % 50)});
            let reasoning = json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": text.clone()}]});
            match (what, shape) {
                (0, 2) => out.push(json!({"type": "message", "role": "user", "content": text})),
                (0, _) => out.push(json!({"role": "user", "content": text})),
                (1, 0) => out.push(json!({"role": "assistant", "content": text})),
                (1, 1) => {
                    let reply = json!({"type": "text", "text": text});
                    let blocks = if flags & 1 == 1 { vec![thinking, reply] } else { vec![reply] };
                    out.push(json!({"role": "assistant", "content": blocks}));
                }
                (1, _) => {
                    if flags & 1 == 1 {
                        out.push(reasoning);
                    }
                    out.push(json!({"type": "message", "role": "assistant", "content": text}));
                }
                (2, _) => {
                    let calls = if flags & 2 == 2 { 2 } else { 1 };
                    let names: Vec<&str> =
                        (0..calls).map(|k| if k == 1 && flags & 8 == 8 { "bash" } else { "read" }).collect();
                    let ids: Vec<String> = (0..calls).map(|k| format!("call_{}", n + k)).collect();
                    n += calls;
                    let answered = if flags & 4 == 4 { calls - 1 } else { calls };
                    let args = json!({"path": text.chars().take(size % 40).collect::<String>()});
                    match shape {
                        0 => {
                            let calls: Vec<Value> = ids.iter().zip(&names).map(|(id, name)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})).collect();
                            out.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
                            for id in ids.iter().take(answered) {
                                out.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
                            }
                        }
                        1 => {
                            let mut blocks = if flags & 1 == 1 { vec![thinking] } else { vec![] };
                            blocks.extend(
                                ids.iter().zip(&names).map(
                                    |(id, name)| json!({"type": "tool_use", "id": id, "name": name, "input": args}),
                                ),
                            );
                            out.push(json!({"role": "assistant", "content": blocks}));
                            let results: Vec<Value> = ids.iter().take(answered).map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": text}]})).collect();
                            if !results.is_empty() {
                                out.push(json!({"role": "user", "content": results}));
                            }
                        }
                        _ => {
                            if flags & 1 == 1 {
                                out.push(reasoning);
                            }
                            for (k, (id, name)) in ids.iter().zip(&names).enumerate() {
                                out.push(if k == 0 {
                                    json!({"type": "function_call", "call_id": id, "name": name, "arguments": args.to_string()})
                                } else {
                                    json!({"type": "custom_tool_call", "call_id": id, "name": name, "input": text})
                                });
                            }
                            for (k, id) in ids.iter().enumerate().take(answered) {
                                let kind = if k == 0 { "function_call_output" } else { "custom_tool_call_output" };
                                out.push(json!({"type": kind, "call_id": id, "output": text}));
                            }
                        }
                    }
                }
                (_, 0) => out.push(json!({"role": "assistant", "content": text})),
                (_, 1) => out.push(json!({"role": "assistant", "content": [thinking]})),
                _ => out.push(reasoning),
            }
        }
        out
    }

    /// (trigger, keep, clear_at_least, exclude bash, clear inputs, placeholder) and a thinking keep.
    type EditChoice = (Option<u64>, usize, u64, bool, bool, usize, usize, u8);

    fn edits_of(choice: EditChoice) -> Vec<Edit> {
        let (trigger, keep, clear_at_least, exclude, inputs, placeholder, thinking_keep, order) = choice;
        let tools = Edit::ClearToolUses(ClearToolUses {
            trigger,
            keep,
            clear_at_least,
            exclude_tools: if exclude { vec!["bash".into()] } else { vec![] },
            clear_tool_inputs: inputs,
            placeholder: ["[cleared]", "", "[gelöscht 🧹]"][placeholder % 3].into(),
        });
        let thinking = Edit::ClearThinking(ClearThinking { keep: thinking_keep });
        match order % 3 {
            0 => vec![tools],
            1 => vec![thinking, tools],
            _ => vec![tools, thinking],
        }
    }

    fn total(messages: &[Value], responses: bool) -> i128 {
        messages
            .iter()
            .map(|m| i128::from(CharsPerToken.message_tokens(None, &m, &checked(&m, responses)).unwrap()))
            .sum()
    }

    /// A shape, the steps of a transcript in it, edits, and a step.
    fn generated() -> impl Strategy<Value = (u8, Vec<Step>, EditChoice, u64)> {
        let steps = proptest::collection::vec((0u8..4, 0usize..300, 0u8..16), 0..24);
        let tools = (proptest::option::of(0u64..600), 0usize..4, prop_oneof![Just(0u64), 0u64..200]);
        let flags = (any::<bool>(), any::<bool>(), 0usize..3, 0usize..3, 0u8..3);
        let choice = (tools, flags).prop_map(|((t, k, c), (x, i, p, tk, o))| (t, k, c, x, i, p, tk, o));
        (0u8..3, steps, choice, 1u64..200)
    }

    proptest! {
        #[test]
        fn plans_hold_their_invariants((shape, steps, choice, step) in generated(), budget in 0u64..800) {
            let responses = shape == 2;
            let messages = build(shape, &steps);
            let edits = edits_of(choice);
            let context = EditContext { budget, step, base: 0, responses, hidden: 0..0 };
            let plan = run(&messages, &edits, &context);
            let built = materialize(&plan, &messages);
            // The overlay writes what applying the plan builds, and sizes as it does.
            prop_assert_eq!(&written(&plan, &messages), &built);
            sizes_agree(&plan, &messages, responses, &mut CharsPerToken);
            // What the edits report is the cost difference they made.
            let freed: i128 = plan.applied.iter().map(|a| a.cleared_input_tokens).sum();
            prop_assert_eq!(freed, total(&messages, responses) - total(&built, responses));
            prop_assert!(plan.applied.iter().all(|a| a.cleared_tool_uses + a.cleared_thinking_turns > 0));
            // Run again on their own output, the edits change nothing.
            prop_assert!(run(&built, &edits, &context).is_empty());
        }

        #[test]
        fn a_growing_transcript_keeps_its_cleared_values((shape, steps, choice, step) in generated()) {
            let messages = build(shape, &steps);
            let edits = edits_of((choice.0, choice.1, choice.2, choice.3, choice.4, choice.5, 0, 0));
            let context = EditContext { budget: 100, step, base: 0, responses: shape == 2, hidden: 0..0 };
            let mut previous = Plan::default();
            for n in 0..=messages.len() {
                let plan = run(&messages[..n], &edits, &context);
                // Every value cleared before is cleared still: each message's edit only grows.
                for before in &previous.messages {
                    let now = plan.edit(before.index).cloned().unwrap_or_default();
                    prop_assert!(before.fields.iter().all(|f| now.fields.contains(f)), "{n}");
                    prop_assert!(before.calls.iter().all(|c| now.calls.contains(c)), "{n}");
                    prop_assert!(before.blocks.iter().all(|b| now.blocks.contains(b)), "{n}");
                }
                previous = plan;
            }
        }
    }

    #[test]
    fn a_request_body_is_edited_as_its_values_are() {
        use crate::request::{pack_body, Root};
        // Each case's transcript as a request body (indented, so copied bytes show), packed
        // with its edits, reads as the same body of the edited values packed without them.
        let mut edited = 0;
        for Case { messages, edits, context, .. } in cases() {
            let key = if context.responses { "input" } else { "messages" };
            let body = serde_json::to_string_pretty(&json!({ "model": "m", key: messages })).unwrap();
            for cut in [Cut::Greedy, Cut::Chunked { chunk: Some(context.step) }] {
                let options =
                    PackOptions { budget: context.budget, cut, edits: edits.clone(), ..PackOptions::default() };
                let packed = pack_body(body.as_bytes(), &options, Root::Request, false).unwrap();
                let plan = &packed.packed.edits;
                edited += usize::from(!plan.is_empty());
                let twin = json!({ "model": "m", key: materialize(plan, &messages) }).to_string();
                let plain = PackOptions { edits: vec![], ..options };
                let expected = pack_body(twin.as_bytes(), &plain, Root::Request, false).unwrap();
                let read = |p: &crate::request::PackedBody, input: &str| -> Value {
                    serde_json::from_slice(p.body.as_deref().unwrap_or(input.as_bytes())).unwrap()
                };
                assert_eq!(read(&packed, &body), read(&expected, &twin));
                assert_eq!(
                    (packed.packed.fits, packed.packed.tokens, &packed.packed.note),
                    (expected.packed.fits, expected.packed.tokens, &expected.packed.note)
                );
            }
        }
        assert!(edited > 10, "{edited} bodies edited");
    }
}
