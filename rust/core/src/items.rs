//! OpenAI Responses API input items (what `/v1/responses` and the Agents SDK carry): what
//! each item is for packing, how it is checked, and how a transcript is recognised as one.
//!
//! An item whose `type` is absent or `"message"` is a message, read and sized like a chat
//! message (`developer` counts as `system`). Every other item is sized by its whole compact
//! JSON: `*_call` items (`function_call`, `custom_tool_call`, `computer_call`, …) are calls,
//! `*_call_output` items answer them by `call_id`, `reasoning` items belong to the item
//! after them, and an item of any other type is kept or dropped whole, never rejected.

use crate::error::{CoreError, Problem};
use crate::json::{JsonNode, JsonType, Key, MessageFields};
use crate::message::{check_fields, role_or_other, Checked, Item, Role};
use crate::text::Text;

/// How a transcript's entries are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Responses items when [`marks_responses`] holds for any entry, else chat messages.
    Auto,
    /// Chat messages (OpenAI or Anthropic shape): every entry needs a `role`.
    Chat,
    /// Responses API items.
    Responses,
}

/// Whether an entry marks its transcript as Responses items: a `type` and no `role`, or
/// a `message`, `function_call` or `function_call_output` item (no chat message has a
/// `type`; a `message` item marks too, so `developer` items at the front lead).
pub fn marks_responses<N: JsonNode>(fields: &MessageFields<N>) -> bool {
    match &fields.kind {
        None => false,
        Some(kind) => {
            fields.role.is_none()
                || kind.as_text().is_some_and(|t| {
                    t.eq_ascii("message") || t.eq_ascii("function_call") || t.eq_ascii("function_call_output")
                })
        }
    }
}

/// Whether an entry is an object that marks its transcript as Responses items
/// ([`marks_responses`]).
pub fn entry_marks_responses<N: JsonNode>(entry: &N) -> bool {
    entry.json_type() == JsonType::Object && marks_responses(&entry.message_fields())
}

fn item_of(kind: &Text<'_>) -> Item {
    if kind.eq_ascii("message") {
        Item::Message
    } else if kind.eq_ascii("reasoning") {
        Item::Reasoning
    } else if kind.ends_with("_call") {
        Item::Call
    } else if kind.ends_with("_call_output") {
        Item::Output
    } else {
        Item::Other
    }
}

/// Checks an entry read on its own: as a Responses item when it marks one
/// ([`marks_responses`]), else as a chat message.
///
/// # Errors
/// When the entry is malformed, naming the field.
pub fn check_entry<N: JsonNode>(entry: &N) -> Result<Checked<N>, CoreError> {
    if entry_marks_responses(entry) {
        check_item(entry)
    } else {
        crate::message::check_message(entry)
    }
}

/// Checks a Responses item: an object; its `type`, when present, a str; a message item
/// as a chat message (`developer` read as `system`); a call's or output's `call_id`,
/// when present, a str.
///
/// # Errors
/// The first field at fault.
pub fn check_item<N: JsonNode>(item: &N) -> Result<Checked<N>, CoreError> {
    if item.json_type() != JsonType::Object {
        return Err(CoreError::field(None, "", Problem::WrongType { expected: "a dict", got: item.type_name() }));
    }
    let fields = item.message_fields();
    let kind = match &fields.kind {
        None => Item::Message,
        Some(kind) => match kind.as_text() {
            Some(text) => item_of(&text),
            None => return Err(CoreError::wrong_type("type", "str", kind.type_name())),
        },
    };
    if kind == Item::Message {
        return check_fields(fields);
    }
    let call_id = match kind {
        Item::Call | Item::Output => match item.get(Key::CallId) {
            Some(id) if id.json_type() != JsonType::Str => {
                return Err(CoreError::wrong_type("call_id", "str", id.type_name()))
            }
            id => id,
        },
        _ => None,
    };
    let role = match kind {
        Item::Call | Item::Reasoning => Role::Assistant,
        Item::Output => Role::Tool,
        Item::Message | Item::Other => Role::Other,
    };
    // Kept for the note's line only (read as leniently as a line reads any message).
    let content = fields.content.filter(|c| matches!(c.json_type(), JsonType::Str | JsonType::Array));
    let tool_calls = fields.tool_calls.filter(|c| c.json_type() == JsonType::Array);
    Ok(Checked { role, content, tool_calls, item: kind, call_id })
}

/// A Responses item's fields read leniently, checking nothing: what [`check_item`] gives
/// for a well-formed item; otherwise a value that is not an object, or has a `type` that
/// is not a str, is an [`Item::Other`]; a role that is not a str reads as [`Role::Other`];
/// a `call_id` that is not a str, content that is not a str or list and tool_calls that
/// are not a list read as absent.
pub fn peek_item<N: JsonNode>(item: &N) -> Checked<N> {
    let other = |role| Checked { role, content: None, tool_calls: None, item: Item::Other, call_id: None };
    if item.json_type() != JsonType::Object {
        return other(Role::Other);
    }
    let fields = item.message_fields();
    let kind = kind_of(fields.kind.as_ref());
    let role = lenient_role(kind, fields.role);
    let call_id = match kind {
        Item::Call | Item::Output => item.get(Key::CallId).filter(|id| id.json_type() == JsonType::Str),
        _ => None,
    };
    let content = fields.content.filter(|c| matches!(c.json_type(), JsonType::Str | JsonType::Array));
    let tool_calls = fields.tool_calls.filter(|c| c.json_type() == JsonType::Array);
    Checked { role, content, tool_calls, item: kind, call_id }
}

/// What a Responses item is, with its role and (a call or output) its `call_id`, read
/// leniently as [`peek_item`] reads them, with a lookup a field (what segmenting every
/// item needs, cheaper than reading all of its fields).
pub fn peek_kind<N: JsonNode>(item: &N) -> (Item, Role, Option<N>) {
    if item.json_type() != JsonType::Object {
        return (Item::Other, Role::Other, None);
    }
    match kind_of(item.get(Key::Type).as_ref()) {
        Item::Message => (Item::Message, lenient_role(Item::Message, item.get(Key::Role)), None),
        kind @ (Item::Call | Item::Output) => {
            (kind, lenient_role::<N>(kind, None), item.get(Key::CallId).filter(|id| id.json_type() == JsonType::Str))
        }
        kind => (kind, lenient_role::<N>(kind, None), None),
    }
}

/// The role an item of `kind` plays, a message's read from its `role` field (not a str:
/// [`Role::Other`]).
fn lenient_role<N: JsonNode>(kind: Item, role: Option<N>) -> Role {
    match kind {
        Item::Message => role_or_other(role),
        Item::Call | Item::Reasoning => Role::Assistant,
        Item::Output => Role::Tool,
        Item::Other => Role::Other,
    }
}

/// The item a `type` field names (absent: a message; not a str: another item).
fn kind_of<N: JsonNode>(kind: Option<&N>) -> Item {
    match kind {
        None => Item::Message,
        Some(kind) => kind.as_text().map_or(Item::Other, |text| item_of(&text)),
    }
}
