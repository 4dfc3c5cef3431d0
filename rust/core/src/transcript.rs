//! A transcript read once: roles and shapes checked up front, sizes computed on first use
//! and remembered, so an algorithm that walks back from the newest message pays only for
//! the messages it reaches.

use crate::error::CoreError;
use crate::json::JsonNode;
use crate::tokens::{check_message, Checked, Role, Sizer, Sizes};

/// A transcript whose roles are read (and validated) up front and whose sizes are
/// computed on first use.
pub struct Transcript<'m, N, S> {
    messages: &'m [N],
    checked: Vec<Checked<N>>,
    /// Each message's size once computed.
    sizes: Vec<Option<u64>>,
    sizer: S,
}

impl<'m, N: JsonNode, S: Sizer<N>> Transcript<'m, N, S> {
    /// Reads every message's role and checks its shape ([`crate::tokens::check_message`]).
    ///
    /// # Errors
    /// The first malformed message.
    pub fn new(messages: &'m [N], sizer: S) -> Result<Self, CoreError> {
        let mut checked = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            checked.push(check_message(m).map_err(|e| e.at(i))?);
        }
        Ok(Self { messages, checked, sizes: vec![None; messages.len()], sizer })
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
