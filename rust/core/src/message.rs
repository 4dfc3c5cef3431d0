//! The message model every rule reads: a message's role, what an entry is (a chat
//! message or a Responses item), and a message's checked fields.

use crate::error::{CoreError, Problem};
use crate::json::{JsonNode, JsonType, Key, MessageFields};

/// What an entry is, as far as packing cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// A chat message, or a Responses `message` item: sized by its content and tool calls.
    Message,
    /// A `*_call` item, paired with its output by `call_id`.
    Call,
    /// A `*_call_output` item.
    Output,
    /// A `reasoning` item: it belongs to the item after it.
    Reasoning,
    /// Any other item type: kept or dropped whole.
    Other,
}

impl Item {
    /// Whether the item is sized by its whole compact JSON rather than as a message.
    pub const fn sized_whole(self) -> bool {
        !matches!(self, Item::Message)
    }
}

/// A message's role, as far as the core's rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
    /// Any other string (`function`, …): kept and sized, never special.
    Other,
}

impl Role {
    /// The role as written, for the four roles the core knows.
    pub const fn as_str(self) -> Option<&'static str> {
        match self {
            Role::System => Some("system"),
            Role::User => Some("user"),
            Role::Assistant => Some("assistant"),
            Role::Tool => Some("tool"),
            Role::Other => None,
        }
    }
}

/// Reads and validates a message's role.
///
/// # Errors
/// When the message is not an object, or its role is missing or not a string.
pub fn role_of<N: JsonNode>(message: &N) -> Result<Role, CoreError> {
    if message.json_type() != JsonType::Object {
        return Err(CoreError::field(None, "", Problem::WrongType { expected: "a dict", got: message.type_name() }));
    }
    parse_role(message.get(Key::Role))
}

pub(crate) fn parse_role<N: JsonNode>(role: Option<N>) -> Result<Role, CoreError> {
    let Some(role) = role else {
        return Err(CoreError::field(None, "role", Problem::Missing));
    };
    role_named(&role).ok_or_else(|| CoreError::wrong_type("role", "str", role.type_name()))
}

/// The role a `role` member reads as where nothing is checked: [`Role::Other`] when it
/// is missing or not a str. Packing reads every role back to the directive.
pub(crate) fn role_or_other<N: JsonNode>(role: Option<N>) -> Role {
    role.as_ref().and_then(role_named).unwrap_or(Role::Other)
}

/// The role a str names (`None`: not a str). Inlined into both callers: the text is read
/// where it is returned (handed on by reference, it was copied through the stack in a
/// way the loads could not forward, and reading roles was measurably slower).
#[inline(always)]
fn role_named<N: JsonNode>(role: &N) -> Option<Role> {
    let text = role.as_text()?;
    Some(if text.eq_ascii("user") {
        Role::User
    } else if text.eq_ascii("assistant") {
        Role::Assistant
    } else if text.eq_ascii("tool") {
        Role::Tool
    } else if text.eq_ascii("system") || text.eq_ascii("developer") {
        // OpenAI's `developer` is its `system` for newer models, in chat and Responses.
        Role::System
    } else {
        Role::Other
    })
}

/// A message whose shape has been checked: its role, and its content and tool_calls
/// (`None` when absent or null); for a Responses item, what it is and its `call_id`.
pub struct Checked<N> {
    pub role: Role,
    pub content: Option<N>,
    pub tool_calls: Option<N>,
    pub item: Item,
    pub call_id: Option<N>,
}

/// Checks a message's shape without sizing it: an object with a string role, content a
/// str, list or None, tool_calls a list or None. Nested values are checked when sized.
///
/// # Errors
/// The first field at fault.
pub fn check_message<N: JsonNode>(message: &N) -> Result<Checked<N>, CoreError> {
    if message.json_type() != JsonType::Object {
        return Err(CoreError::field(None, "", Problem::WrongType { expected: "a dict", got: message.type_name() }));
    }
    check_fields(message.message_fields())
}

/// [`check_message`] on fields already read from an object.
///
/// # Errors
/// The first field at fault.
pub fn check_fields<N: JsonNode>(fields: MessageFields<N>) -> Result<Checked<N>, CoreError> {
    let role = parse_role(fields.role)?;
    let content = match fields.content {
        Some(content) => match content.json_type() {
            JsonType::Null => None,
            JsonType::Str | JsonType::Array => Some(content),
            _ => return Err(CoreError::wrong_type("content", "str, list or None", content.type_name())),
        },
        None => None,
    };
    let tool_calls = match fields.tool_calls {
        Some(calls) => match calls.json_type() {
            JsonType::Null => None,
            JsonType::Array => Some(calls),
            _ => return Err(CoreError::wrong_type("tool_calls", "list or None", calls.type_name())),
        },
        None => None,
    };
    Ok(Checked { role, content, tool_calls, item: Item::Message, call_id: None })
}

/// A message's content: `None` when absent or null.
///
/// # Errors
/// When content is not a str, list or None.
pub fn content_of<N: JsonNode>(message: &N) -> Result<Option<N>, CoreError> {
    check_message(message).map(|c| c.content)
}

/// The `tool_calls` list of a message, `None` when absent or null.
///
/// # Errors
/// When the message is malformed.
pub fn tool_calls_of<N: JsonNode>(message: &N) -> Result<Option<N>, CoreError> {
    check_message(message).map(|c| c.tool_calls)
}
