//! A transcript and the sizes of its messages, computed on first use and remembered, so
//! an algorithm that walks back from the newest message pays only for the messages it
//! reaches.
//!
//! Two ways to read one. [`Transcript::read_all`] checks every entry up front (windowing
//! and token sums need every role). [`Transcript::read`] checks nothing up front: packing
//! reads an entry's fields leniently where it only looks (a role, a tool-call list) and
//! checks an entry when it sizes it or lists it in a note, so its cost follows what it
//! keeps (SPEC §5, last paragraph).

use std::cell::Cell;

use crate::error::CoreError;
use crate::items::{check_item, entry_marks_responses, marks_responses, peek_item, peek_kind, Format};
use crate::json::{JsonNode, JsonType, Key};
use crate::message::Item;
use crate::message::{check_fields, check_message, role_or_other, Checked, Role};
use crate::tokens::{MessageSizer, SizedMessages};

/// A transcript whose entries are read up front ([`Transcript::read_all`]) or on demand
/// ([`Transcript::read`]), and whose sizes are computed on first use.
pub struct Transcript<'m, N, S> {
    messages: &'m [N],
    /// Every entry's checked fields when read up front; empty when read on demand.
    checked: Vec<Checked<N>>,
    sizes: Sizes,
    sizer: S,
    /// Whether the entries are Responses items; `None` until decided (read on demand
    /// with [`Format::Auto`]: packing decides from the entries it reads).
    responses: Option<bool>,
    /// Sizes taken elsewhere, and whether of the entries read as Responses items.
    assumed: Option<(bool, Vec<Option<u64>>)>,
    /// Chat messages' roles and content kinds, when read on demand.
    glances: Glances,
}

impl<'m, N: JsonNode, S: MessageSizer<N>> Transcript<'m, N, S> {
    /// [`Transcript::read_all`] with [`Format::Auto`].
    ///
    /// # Errors
    /// The first malformed message.
    pub fn new(messages: &'m [N], sizer: S) -> Result<Self, CoreError> {
        Self::read_all(messages, sizer, Format::Auto)
    }

    /// Reads and checks every entry now, as `format` says ([`Format::Auto`]: Responses
    /// items when any entry marks them so, else chat messages).
    ///
    /// # Errors
    /// The first malformed message or item.
    pub fn read_all(messages: &'m [N], sizer: S, format: Format) -> Result<Self, CoreError> {
        let chat = match format {
            Format::Responses => None,
            Format::Chat | Format::Auto => check_chat(messages, format == Format::Auto)?,
        };
        let (checked, responses) = match chat {
            Some(checked) => (checked, false),
            None => (check_items(messages)?, true),
        };
        let sizes = Sizes::new(messages.len());
        let glances = Glances::new(0);
        Ok(Self { messages, checked, sizes, sizer, responses: Some(responses), assumed: None, glances })
    }

    /// Takes the entries to be read on demand, as `format` says ([`Format::Auto`]: the
    /// reader decides with [`Transcript::decide_responses`] before sizing any).
    ///
    /// # Errors
    /// None: nothing is checked until read. Fallible like [`Transcript::read_all`], so a
    /// caller can switch between the two.
    pub fn read(messages: &'m [N], sizer: S, format: Format) -> Result<Self, CoreError> {
        let responses = match format {
            Format::Auto => None,
            Format::Chat => Some(false),
            Format::Responses => Some(true),
        };
        let sizes = Sizes::new(messages.len());
        // A caller's estimator runs its code between reads: what a glance read may be gone.
        let remembered = if responses == Some(true) || sizer.calls_out() { 0 } else { messages.len() };
        let glances = Glances::new(remembered);
        Ok(Self { messages, checked: Vec::new(), sizes, sizer, responses, assumed: None, glances })
    }

    /// Takes `sizes` (by index; `None`: not known) as what sizing these entries read as
    /// Responses items (`responses`) or as chat messages gives, so that an entry read
    /// that way is not sized again. Each must be exactly that size.
    pub fn assume_sizes(&mut self, responses: bool, sizes: Vec<Option<u64>>) {
        self.assumed = Some((responses, sizes));
    }

    /// Whether the sizes taken so far are of Responses items (`None`: the format is still
    /// undecided, and they are not to be used elsewhere).
    pub fn sizes_format(&self) -> Option<bool> {
        self.responses
    }

    /// Every entry's size as taken so far (`None`: not sized).
    pub fn sizes(&self) -> Vec<Option<u64>> {
        (0..self.messages.len()).map(|i| self.known(i)).collect()
    }

    /// Entry `i`'s size, computed or assumed, in the format it is read in.
    fn known(&self, i: usize) -> Option<u64> {
        self.sizes.get(i).or_else(|| match &self.assumed {
            Some((responses, sizes)) if *responses == self.is_responses() => sizes.get(i).copied().flatten(),
            _ => None,
        })
    }

    /// Whether the entries are read as Responses items (`false` while undecided).
    pub fn is_responses(&self) -> bool {
        self.responses == Some(true)
    }

    /// Whether the format is still to be decided.
    pub fn is_undecided(&self) -> bool {
        self.responses.is_none()
    }

    /// Decides the format of a transcript read on demand with [`Format::Auto`]; a
    /// decided format stays. Sizes taken as chat messages before (see
    /// [`Transcript::chat_tokens`]) are dropped when the entries are Responses items.
    pub fn decide_responses(&mut self, responses: bool) {
        if self.responses.is_none() && responses {
            self.sizes.forget();
        }
        self.responses.get_or_insert(responses);
    }

    /// While the format is undecided: entry `i`'s size read as a chat message, `None`
    /// when it is not a well-formed one, marks Responses items, or cannot be sized (the
    /// caller then decides the format and reads it again, to raise what it raises).
    pub fn chat_tokens(&mut self, i: usize) -> Option<u64> {
        if let Some(size) = self.known(i) {
            return Some(size);
        }
        let m = self.messages.get(i)?;
        if m.json_type() != JsonType::Object {
            return None;
        }
        let fields = m.message_fields();
        if marks_responses(&fields) {
            return None;
        }
        let checked = check_fields(fields).ok()?;
        let size = self.sizer.message_tokens(Some(i), m, &checked).ok()?;
        self.sizes.remember(i, size);
        Some(size)
    }

    /// The messages.
    pub fn messages(&self) -> &'m [N] {
        self.messages
    }

    /// Message `i`'s checked fields, when the entries were read up front.
    pub fn checked(&self, i: usize) -> Option<&Checked<N>> {
        self.checked.get(i)
    }

    /// Every entry's checked fields, when they were read up front (else empty).
    pub fn into_checked(self) -> Vec<Checked<N>> {
        self.checked
    }

    /// Entry `i`'s fields read leniently, checking nothing: a role that is not a str
    /// reads as [`Role::Other`], content that is not a str or list and tool_calls that
    /// are not a list as absent (see [`peek_item`] for items). A well-formed entry reads
    /// as checking it gives.
    pub fn peek(&self, i: usize) -> Option<Checked<N>> {
        let m = self.messages.get(i)?;
        if self.is_responses() {
            return Some(peek_item(m));
        }
        let object = m.json_type() == JsonType::Object;
        let fields = object.then(|| m.message_fields());
        let (role, content, tool_calls) = match fields {
            Some(f) => (
                role_or_other(f.role),
                f.content.filter(|c| matches!(c.json_type(), JsonType::Str | JsonType::Array)),
                f.tool_calls.filter(|c| c.json_type() == JsonType::Array),
            ),
            None => (Role::Other, None, None),
        };
        Some(Checked { role, content, tool_calls, item: Item::Message, call_id: None })
    }

    /// Entry `i`'s fields, checked (the error names the index).
    ///
    /// # Errors
    /// When the entry is malformed.
    pub fn check(&self, i: usize) -> Result<Checked<N>, CoreError> {
        let m = self.messages.get(i).ok_or_else(|| CoreError::internal("message index out of range"))?;
        let checked = if self.is_responses() { check_item(m) } else { check_message(m) };
        checked.map_err(|e| e.at(i))
    }

    /// Whether chat message `i`'s content is a list, when a walk over it for its role
    /// found out and nothing can have changed it since (else `None`: not known).
    pub fn content_is_list(&self, i: usize) -> Option<bool> {
        if self.is_responses() {
            return None;
        }
        self.glances.current::<N>(i)?.list
    }

    /// Hints that message `i` will be read soon (see [`JsonNode::prefetch`]).
    pub fn prefetch(&self, i: usize) {
        if let Some(m) = self.messages.get(i) {
            m.prefetch();
        }
    }

    /// The sizer, for sizing texts that are not messages (a note).
    pub fn sizer(&mut self) -> &mut S {
        &mut self.sizer
    }

    /// Sum of the sizes of messages in `range`: exact (see [`crate::tokens`]).
    ///
    /// # Errors
    /// As [`SizedMessages::tokens`].
    pub fn sum(&mut self, range: std::ops::Range<usize>) -> Result<u128, CoreError> {
        let mut total = 0u128;
        for i in range {
            total += u128::from(self.tokens(i)?);
        }
        Ok(total)
    }
}

/// Each message's size once computed, by index (`None`: not yet). A slot a message, also
/// for the ones packing never reaches: filling it costs about what copying the list's
/// item pointers does, and an index costs less than a map of the reached ones, which
/// took 3% of packing the corpus.
struct Sizes(Vec<Option<u64>>);

impl Sizes {
    fn new(messages: usize) -> Self {
        Sizes(vec![None; messages])
    }

    /// Forgets every size (the entries are read in another format).
    fn forget(&mut self) {
        self.0.fill(None);
    }

    fn get(&self, i: usize) -> Option<u64> {
        self.0.get(i).copied().flatten()
    }

    fn remember(&mut self, i: usize, size: u64) {
        if let Some(slot) = self.0.get_mut(i) {
            *slot = Some(size);
        }
    }
}

/// What one walk over a chat message read on demand finds: its role and whether its
/// content is a list. Folding reads every role back to the directive, and the check for
/// a provider compaction every content (a tenth of packing the corpus, where two
/// messages of 1,800 have list content): one walk serves both. Remembered while nothing
/// can have changed a message since: not with a caller's estimator, and each only while
/// no read has run the caller's code since it was taken ([`JsonNode::foreign_code_runs`];
/// a read that runs it, as a Python key's `__eq__` does, leaves its own glance stale).
struct Glances(Box<[Cell<Option<Glance>>]>);

#[derive(Clone, Copy)]
struct Glance {
    role: Role,
    /// `None`: not read (reading it could have run the caller's code).
    list: Option<bool>,
    /// [`JsonNode::foreign_code_runs`] before it was taken.
    runs: u64,
}

impl Glances {
    fn new(messages: usize) -> Self {
        Glances((0..messages).map(|_| Cell::new(None)).collect())
    }

    /// Entry `i`'s glance if still current, else `None` (also when none are remembered).
    fn current<N: JsonNode>(&self, i: usize) -> Option<Glance> {
        self.0.get(i)?.get().filter(|glance| glance.runs == N::foreign_code_runs())
    }

    /// Entry `i`'s glance, taken now unless current (`None` when none are remembered).
    fn take<N: JsonNode>(&self, i: usize, m: &N) -> Option<Glance> {
        let slot = self.0.get(i)?;
        let runs = N::foreign_code_runs();
        if let Some(glance) = slot.get().filter(|glance| glance.runs == runs) {
            return Some(glance);
        }
        let (role, content) = m.role_and_content();
        let list = content.map(|content| content.is_some_and(|c| c.json_type() == JsonType::Array));
        let glance = Glance { role: role_or_other(role), list, runs };
        slot.set(Some(glance));
        Some(glance)
    }
}

/// Checks chat messages; with `detect`, `None` when any entry marks the transcript as
/// Responses items (seen before any error is raised, as if detected first).
fn check_chat<N: JsonNode>(messages: &[N], detect: bool) -> Result<Option<Vec<Checked<N>>>, CoreError> {
    let mut checked = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let fields = (m.json_type() == JsonType::Object).then(|| m.message_fields());
        if detect && fields.as_ref().is_some_and(marks_responses) {
            return Ok(None);
        }
        let result = match fields {
            Some(fields) => check_fields(fields),
            None => check_message(m),
        };
        match result {
            Ok(c) => checked.push(c),
            Err(_) if detect && messages.iter().skip(i + 1).any(entry_marks_responses) => return Ok(None),
            Err(e) => return Err(e.at(i)),
        }
    }
    Ok(Some(checked))
}

fn check_items<N: JsonNode>(messages: &[N]) -> Result<Vec<Checked<N>>, CoreError> {
    messages.iter().enumerate().map(|(i, m)| check_item(m).map_err(|e| e.at(i))).collect()
}

impl<N: JsonNode, S: MessageSizer<N>> SizedMessages for Transcript<'_, N, S> {
    fn len(&self) -> usize {
        self.messages.len()
    }

    /// The checked role when read up front; else read leniently (see [`Transcript::peek`]).
    fn role(&self, i: usize) -> Role {
        if let Some(c) = self.checked.get(i) {
            return c.role;
        }
        match self.messages.get(i) {
            Some(m) if !self.is_responses() => match self.glances.take(i, m) {
                Some(glance) => glance.role,
                None => role_or_other(m.get(Key::Role)),
            },
            Some(m) => peek_kind(m).1,
            None => Role::Other,
        }
    }

    fn tokens(&mut self, i: usize) -> Result<u64, CoreError> {
        if let Some(size) = self.known(i) {
            return Ok(size);
        }
        let message = self.messages.get(i).ok_or_else(|| CoreError::internal("message index out of range"))?;
        let size = match self.checked.get(i) {
            Some(checked) => self.sizer.message_tokens(Some(i), message, checked),
            None => {
                let checked = self.check(i)?;
                self.sizer.message_tokens(Some(i), message, &checked)
            }
        }
        .map_err(|e| e.at(i))?;
        self.sizes.remember(i, size);
        Ok(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Problem;
    use crate::tokens::CharsPerToken;
    use serde_json::{json, Value};

    #[test]
    fn a_role_read_on_demand_tells_whether_the_content_is_a_list() {
        let list = [json!({"role": "user", "content": "x"}), json!({"content": [{"type": "text"}], "role": "tool"})];
        let refs: Vec<&Value> = list.iter().collect();
        let t = Transcript::read(&refs, CharsPerToken, Format::Chat).unwrap();
        assert_eq!((t.content_is_list(0), t.content_is_list(1)), (None, None));
        assert_eq!((t.role(0), t.role(1)), (Role::User, Role::Tool));
        assert_eq!((t.content_is_list(0), t.content_is_list(1)), (Some(false), Some(true)));
        // Items, or a sizer that runs the caller's code between reads: nothing remembered.
        let items = Transcript::read(&refs, CharsPerToken, Format::Responses).unwrap();
        let _ = items.role(1);
        assert_eq!(items.content_is_list(1), None);
        let calls_out = Transcript::read(&refs, CallsOut, Format::Chat).unwrap();
        assert_eq!(calls_out.role(1), Role::Tool);
        assert_eq!(calls_out.content_is_list(1), None);
    }

    struct CallsOut;

    impl MessageSizer<&Value> for CallsOut {
        fn message_tokens(&mut self, _: Option<usize>, _: &&Value, _: &Checked<&Value>) -> Result<u64, CoreError> {
            Ok(1)
        }

        fn system_tokens(&mut self, _: &Checked<&Value>) -> Result<u64, CoreError> {
            Ok(1)
        }

        fn text_tokens(&mut self, _: &str) -> Result<u64, CoreError> {
            Ok(1)
        }

        fn calls_out(&self) -> bool {
            true
        }
    }

    #[test]
    fn the_first_malformed_message_is_named() {
        let list = [json!({"role": "user"}), json!({"content": "x"})];
        let refs: Vec<&Value> = list.iter().collect();
        let err = Transcript::new(&refs, CharsPerToken).err();
        assert_eq!(err, Some(CoreError::Message { index: Some(1), field: "role", problem: Problem::Missing }));
    }
}
