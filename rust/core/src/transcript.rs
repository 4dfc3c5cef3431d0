//! A transcript read once: roles and shapes checked up front, sizes computed on first use
//! and remembered, so an algorithm that walks back from the newest message pays only for
//! the messages it reaches.

use crate::error::CoreError;
use crate::items::{check_item, marks_responses, Format};
use crate::json::{JsonNode, Shape};
use crate::tokens::{check_fields, check_message, Checked, Role, Sizer, Sizes};

/// A transcript whose roles are read (and validated) up front and whose sizes are
/// computed on first use.
pub struct Transcript<'m, N, S> {
    messages: &'m [N],
    checked: Vec<Checked<N>>,
    /// Each message's size once computed.
    sizes: Vec<Option<u64>>,
    sizer: S,
    responses: bool,
}

impl<'m, N: JsonNode, S: Sizer<N>> Transcript<'m, N, S> {
    /// Reads every entry's role and checks its shape, as chat messages or, when any
    /// entry marks them so, as Responses items ([`Format::Auto`]).
    ///
    /// # Errors
    /// The first malformed message.
    pub fn new(messages: &'m [N], sizer: S) -> Result<Self, CoreError> {
        Self::read(messages, sizer, Format::Auto)
    }

    /// Reads every entry as `format` says.
    ///
    /// # Errors
    /// The first malformed message or item.
    pub fn read(messages: &'m [N], sizer: S, format: Format) -> Result<Self, CoreError> {
        let chat = match format {
            Format::Responses => None,
            Format::Chat | Format::Auto => check_chat(messages, format == Format::Auto)?,
        };
        let (checked, responses) = match chat {
            Some(checked) => (checked, false),
            None => (check_items(messages)?, true),
        };
        Ok(Self { messages, checked, sizes: vec![None; messages.len()], sizer, responses })
    }

    /// Whether the entries were read as Responses items.
    pub fn is_responses(&self) -> bool {
        self.responses
    }

    /// The messages.
    pub fn messages(&self) -> &'m [N] {
        self.messages
    }

    /// Message `i`'s checked fields.
    pub fn checked(&self, i: usize) -> Option<&Checked<N>> {
        self.checked.get(i)
    }

    /// The sizer, for sizing texts that are not messages (a note).
    pub fn sizer(&mut self) -> &mut S {
        &mut self.sizer
    }

    /// Sum of the sizes of messages in `range`: exact (see [`crate::tokens`]).
    ///
    /// # Errors
    /// As [`Sizes::tokens`].
    pub fn sum(&mut self, range: std::ops::Range<usize>) -> Result<u128, CoreError> {
        let mut total = 0u128;
        for i in range {
            total += u128::from(self.tokens(i)?);
        }
        Ok(total)
    }
}

/// Checks chat messages; with `detect`, `None` when any entry marks the transcript as
/// Responses items (seen before any error is raised, as if detected first).
fn check_chat<N: JsonNode>(messages: &[N], detect: bool) -> Result<Option<Vec<Checked<N>>>, CoreError> {
    let marks = |m: &N| m.shape() == Shape::Object && marks_responses(&m.message_fields());
    let mut checked = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let fields = (m.shape() == Shape::Object).then(|| m.message_fields());
        if detect && fields.as_ref().is_some_and(marks_responses) {
            return Ok(None);
        }
        let result = match fields {
            Some(fields) => check_fields(fields),
            None => check_message(m),
        };
        match result {
            Ok(c) => checked.push(c),
            Err(_) if detect && messages.iter().skip(i + 1).any(marks) => return Ok(None),
            Err(e) => return Err(e.at(i)),
        }
    }
    Ok(Some(checked))
}

fn check_items<N: JsonNode>(messages: &[N]) -> Result<Vec<Checked<N>>, CoreError> {
    messages.iter().enumerate().map(|(i, m)| check_item(m).map_err(|e| e.at(i))).collect()
}

impl<N: JsonNode, S: Sizer<N>> Sizes for Transcript<'_, N, S> {
    fn len(&self) -> usize {
        self.messages.len()
    }

    fn role(&self, i: usize) -> Role {
        self.checked.get(i).map_or(Role::Other, |c| c.role)
    }

    fn tokens(&mut self, i: usize) -> Result<u64, CoreError> {
        let (Some(slot), Some(message), Some(checked)) =
            (self.sizes.get_mut(i), self.messages.get(i), self.checked.get(i))
        else {
            return Err(CoreError::internal("message index out of range"));
        };
        match *slot {
            Some(size) => Ok(size),
            None => {
                let size = self.sizer.message_tokens(Some(i), message, checked).map_err(|e| e.at(i))?;
                *slot = Some(size);
                Ok(size)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Problem;
    use crate::tokens::CharsPerToken;
    use serde_json::{json, Value};

    #[test]
    fn the_first_malformed_message_is_named() {
        let list = [json!({"role": "user"}), json!({"content": "x"})];
        let refs: Vec<&Value> = list.iter().collect();
        let err = Transcript::new(&refs, CharsPerToken).err();
        assert_eq!(err, Some(CoreError::Message { index: Some(1), field: "role", problem: Problem::Missing }));
    }
}
