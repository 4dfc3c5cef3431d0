//! Token estimation: what a message costs against a context window.
//!
//! The default estimate is ⌈UTF-16 length / 4⌉, and a message costs its text's estimate
//! plus 4. A message's text is its `content` (a string as is, anything else as compact
//! JSON, `None` as `""`) followed by the compact JSON of `tool_calls` when that is a list.
//! A Responses item other than a message ([`crate::items`]) is sized by its whole
//! compact JSON; [`crate::provider`] sizes opaque payloads otherwise.
//! [`crate::transcript::Transcript`] sizes messages lazily and remembers each size.
//!
//! Nothing wraps. One message's size is a `u64` (an estimate past that is refused where it
//! enters); every sum of sizes is a `u128`, which holds the exact total of any transcript
//! (fewer than 2^60 messages fit in memory, each below 2^64 tokens), so totals, cut points
//! and comparisons are the true figures, as Python's ints give them in the reference.
//! UTF-16 lengths are `usize` and saturate: only a value that repeats one object more often
//! than memory could hold it written out comes near `usize::MAX`.

use crate::error::CoreError;
use crate::json::{json_len, json_len_with, AsText, JsonNode, JsonType, Visitor};
use crate::message::{Checked, Role};
use crate::text::Text;

/// Per-message overhead in tokens (role and framing).
pub const MESSAGE_OVERHEAD: u64 = 4;

/// ⌈units / 4⌉: the default token estimate of a text `units` UTF-16 units long.
pub const fn estimate_units(units: usize) -> u64 {
    (units as u64).div_ceil(4)
}

/// UTF-16 length of a checked message's text (content, then tool_calls JSON).
///
/// # Errors
/// When nested content has no JSON form or nests too deep.
pub fn message_units<N: JsonNode>(message: &Checked<N>) -> Result<usize, CoreError> {
    message_units_with(message, &mut AsText)
}

/// [`message_units`], each object measured as `visitor` says.
///
/// # Errors
/// As [`message_units`].
pub fn message_units_with<N: JsonNode, V: Visitor<N>>(
    message: &Checked<N>,
    visitor: &mut V,
) -> Result<usize, CoreError> {
    let content = match &message.content {
        None => 2,
        Some(content) => match content.str_units() {
            Some(units) => units,
            None => json_len_with(content, visitor).map_err(|p| CoreError::field(None, "content", p))?,
        },
    };
    let calls = match &message.tool_calls {
        None => 0,
        Some(calls) => json_len_with(calls, visitor).map_err(|p| CoreError::field(None, "tool_calls", p))?,
    };
    Ok(content.saturating_add(calls))
}

/// How messages and note texts are sized.
pub trait MessageSizer<N> {
    /// Tokens of a message (overhead included), given its checked fields; `index` is its
    /// place in a transcript, `None` for a message sized on its own.
    ///
    /// # Errors
    /// When the message is malformed or a custom estimator fails.
    fn message_tokens(&mut self, index: Option<usize>, message: &N, checked: &Checked<N>) -> Result<u64, CoreError>;

    /// Tokens of a separate system prompt: a system message whose content is
    /// `checked.content` (see [`system_tokens`]).
    ///
    /// # Errors
    /// When nested content has no JSON form or a custom estimator fails.
    fn system_tokens(&mut self, checked: &Checked<N>) -> Result<u64, CoreError>;

    /// Tokens of a note's text (without the per-message overhead).
    ///
    /// # Errors
    /// When a custom estimator fails.
    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError>;

    /// Tokens of any text `units` UTF-16 units long, when the estimate depends on the
    /// length alone (`None` for an estimator that must see the text).
    fn units_tokens(&self, units: usize) -> Option<u64> {
        let _ = units;
        None
    }

    /// Whether sizing runs the caller's code (a custom estimator), so that sizing a
    /// message twice, or in another order, would show.
    fn calls_out(&self) -> bool {
        false
    }

    /// Whether a text's tokens are the sum of its parts' when it is cut right after a
    /// `\n` that precedes `-`: true for an exact encoding, whose pre-tokeniser never puts
    /// the two in one piece and never looks past them (see `pack::note`).
    fn splits_before_dash_lines(&self) -> bool {
        false
    }
}

/// A sizer lent: the caller keeps it (and what it holds, such as a callback's error).
impl<N, S: MessageSizer<N>> MessageSizer<N> for &mut S {
    fn message_tokens(&mut self, index: Option<usize>, message: &N, checked: &Checked<N>) -> Result<u64, CoreError> {
        (**self).message_tokens(index, message, checked)
    }

    fn system_tokens(&mut self, checked: &Checked<N>) -> Result<u64, CoreError> {
        (**self).system_tokens(checked)
    }

    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
        (**self).text_tokens(text)
    }

    fn units_tokens(&self, units: usize) -> Option<u64> {
        (**self).units_tokens(units)
    }

    fn splits_before_dash_lines(&self) -> bool {
        (**self).splits_before_dash_lines()
    }

    fn calls_out(&self) -> bool {
        (**self).calls_out()
    }
}

/// A sizer lent to a view of a transcript (an edit overlay, the part after a compaction):
/// the view's indices are handed on as the caller's, `input` of each, so what a custom
/// estimator raises names the caller's message.
pub struct InputIndices<S, F> {
    pub sizer: S,
    pub input: F,
}

impl<N, S: MessageSizer<N>, F: Fn(usize) -> usize> MessageSizer<N> for InputIndices<S, F> {
    fn message_tokens(&mut self, index: Option<usize>, message: &N, checked: &Checked<N>) -> Result<u64, CoreError> {
        self.sizer.message_tokens(index.map(&self.input), message, checked)
    }

    fn system_tokens(&mut self, checked: &Checked<N>) -> Result<u64, CoreError> {
        self.sizer.system_tokens(checked)
    }

    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
        self.sizer.text_tokens(text)
    }

    fn units_tokens(&self, units: usize) -> Option<u64> {
        self.sizer.units_tokens(units)
    }

    fn calls_out(&self) -> bool {
        self.sizer.calls_out()
    }

    fn splits_before_dash_lines(&self) -> bool {
        self.sizer.splits_before_dash_lines()
    }
}

/// Tokens of one message (or Responses item) sized on its own: errors name its field,
/// not an index.
///
/// # Errors
/// When the message is malformed or a custom estimator fails.
pub fn message_tokens<N: JsonNode, S: MessageSizer<N>>(sizer: &mut S, message: &N) -> Result<u64, CoreError> {
    let checked = crate::items::check_entry(message)?;
    sizer.message_tokens(None, message, &checked)
}

/// Tokens of a separate system prompt (Anthropic's `system`): it costs what a system
/// message with it as content costs. It is a str, a list of blocks, or null for none
/// (0 tokens).
///
/// # Errors
/// When it is none of those (field `system`), nested content has no JSON form, or a
/// custom estimator fails.
pub fn system_tokens<N: JsonNode, S: MessageSizer<N>>(sizer: &mut S, system: N) -> Result<u64, CoreError> {
    match system.json_type() {
        JsonType::Null => Ok(0),
        JsonType::Str | JsonType::Array => sizer.system_tokens(&Checked {
            role: Role::System,
            content: Some(system),
            tool_calls: None,
            item: crate::message::Item::Message,
            call_id: None,
        }),
        _ => Err(CoreError::wrong_type("system", "str, list or None", system.type_name())),
    }
}

/// The default estimator: four UTF-16 units a token.
#[derive(Debug, Clone, Copy, Default)]
pub struct CharsPerToken;

impl<N: JsonNode> MessageSizer<N> for CharsPerToken {
    fn message_tokens(&mut self, _index: Option<usize>, message: &N, checked: &Checked<N>) -> Result<u64, CoreError> {
        let units = if checked.item.sized_whole() {
            json_len(message).map_err(|p| CoreError::field(None, "", p))?
        } else {
            message_units(checked)?
        };
        Ok(estimate_units(units) + MESSAGE_OVERHEAD)
    }

    fn system_tokens(&mut self, checked: &Checked<N>) -> Result<u64, CoreError> {
        Ok(estimate_units(message_units(checked)?) + MESSAGE_OVERHEAD)
    }

    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
        Ok(estimate_units(Text::Utf8(text).utf16_len()))
    }

    fn units_tokens(&self, units: usize) -> Option<u64> {
        Some(estimate_units(units))
    }
}

/// Anything an algorithm can ask for roles and sizes: a transcript of messages, or
/// plain arrays of sizes and roles.
pub trait SizedMessages {
    /// Number of messages.
    fn len(&self) -> usize;
    /// Whether there are no messages.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Role of message `i` (`Role::Other` past the end).
    fn role(&self, i: usize) -> Role;
    /// Tokens of message `i`.
    ///
    /// # Errors
    /// When the message is malformed or the estimator fails, naming message `i`.
    fn tokens(&mut self, i: usize) -> Result<u64, CoreError>;
}

/// Precomputed sizes and a user-turn mask (the numpy entry points).
pub struct ArraySizes<'a> {
    sizes: &'a [i64],
    user: &'a [bool],
}

impl<'a> ArraySizes<'a> {
    /// Checks that the arrays have one entry a message and no negative size.
    ///
    /// # Errors
    /// When the lengths differ or a size is negative.
    pub fn new(sizes: &'a [i64], user: &'a [bool]) -> Result<Self, CoreError> {
        if sizes.len() != user.len() {
            return Err(CoreError::argument(format!(
                "sizes and user_mask differ in length ({} and {})",
                sizes.len(),
                user.len()
            )));
        }
        if let Some(i) = sizes.iter().position(|&s| s < 0) {
            let size = sizes.get(i).copied().unwrap_or_default();
            return Err(CoreError::argument(format!("sizes[{i}] is negative ({size})")));
        }
        Ok(Self { sizes, user })
    }
}

impl SizedMessages for ArraySizes<'_> {
    fn len(&self) -> usize {
        self.sizes.len()
    }

    fn role(&self, i: usize) -> Role {
        if self.user.get(i).copied().unwrap_or(false) {
            Role::User
        } else {
            Role::Other
        }
    }

    fn tokens(&mut self, i: usize) -> Result<u64, CoreError> {
        self.sizes.get(i).map(|&s| s.unsigned_abs()).ok_or(CoreError::internal("size index out of range"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A sizer whose every answer differs from the trait's defaults, and which records
    /// the index it is handed.
    #[derive(Default)]
    struct Marked {
        index: Option<usize>,
    }

    impl MessageSizer<&Value> for Marked {
        fn message_tokens(&mut self, index: Option<usize>, _: &&Value, _: &Checked<&Value>) -> Result<u64, CoreError> {
            self.index = index;
            Ok(11)
        }
        fn system_tokens(&mut self, _: &Checked<&Value>) -> Result<u64, CoreError> {
            Ok(12)
        }
        fn text_tokens(&mut self, _: &str) -> Result<u64, CoreError> {
            Ok(13)
        }
        fn units_tokens(&self, _: usize) -> Option<u64> {
            Some(14)
        }
        fn calls_out(&self) -> bool {
            true
        }
        fn splits_before_dash_lines(&self) -> bool {
            true
        }
    }

    #[test]
    fn lent_and_renamed_sizers_answer_as_the_one_they_wrap() {
        let v = json!({"role": "user", "content": "x"});
        let checked = crate::message::check_message(&&v).unwrap();
        let mut inner = Marked::default();
        let mut renamed = InputIndices { sizer: &mut inner, input: |k| k + 5 };
        assert_eq!(renamed.message_tokens(Some(2), &&v, &checked), Ok(11));
        assert_eq!(renamed.system_tokens(&checked), Ok(12));
        assert_eq!(MessageSizer::<&Value>::text_tokens(&mut renamed, "t"), Ok(13));
        assert_eq!(MessageSizer::<&Value>::units_tokens(&renamed, 1), Some(14));
        assert!(MessageSizer::<&Value>::calls_out(&renamed));
        assert!(MessageSizer::<&Value>::splits_before_dash_lines(&renamed));
        assert_eq!(inner.index, Some(7));
    }

    fn tokens(v: &Value) -> Result<u64, CoreError> {
        message_tokens(&mut CharsPerToken, &v)
    }

    #[test]
    fn string_none_list_and_tool_calls_are_sized() {
        assert_eq!(tokens(&json!({"role": "user", "content": "abcde"})), Ok(2 + 4));
        assert_eq!(tokens(&json!({"role": "user", "content": null})), Ok(1 + 4));
        assert_eq!(tokens(&json!({"role": "user"})), Ok(1 + 4));
        // [{"type":"text","text":"hi"}] is 27 units; `[]` tool_calls adds 2.
        assert_eq!(
            tokens(&json!({"role": "user", "content": [{"type": "text", "text": "hi"}], "tool_calls": []})),
            Ok(8 + 4)
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let bad = json!({"role": "user", "content": 3});
        assert!(matches!(tokens(&bad), Err(CoreError::Message { field: "content", .. })));
        let bad = json!({"role": "user", "content": "x", "tool_calls": {}});
        assert!(matches!(tokens(&bad), Err(CoreError::Message { field: "tool_calls", .. })));
    }
}
