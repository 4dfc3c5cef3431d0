//! The core's accessor trait over a [`Tape`], read as `json.loads` would have built the
//! Python values: a repeated key holds its last value, type names are Python's.

use super::scan::{decode, decoded_chars, Decoded, Escaped, Slot, Tape};
use crate::error::Problem;
use crate::json::{JsonNode, JsonType, Key, MessageFields, Preorder, Siblings, View};
use crate::text::{Snippet, Text};

/// A value on a tape.
#[derive(Debug, Clone, Copy)]
pub struct Node<'t, 'a> {
    tape: &'t Tape<'a>,
    at: usize,
}

impl<'a> Tape<'a> {
    /// The value in slot `at`.
    pub fn node(&self, at: usize) -> Node<'_, 'a> {
        Node { tape: self, at }
    }

    /// The text of the string in slot `at`.
    pub(super) fn text(&self, at: usize) -> Option<Text<'_>> {
        #[cfg(test)]
        TEXT_READS.with(|reads| reads.set(reads.get() + 1));
        match *self.slots.get(at)? {
            Slot::Str { start, end, .. } => Some(Text::Utf8(self.str_at(start, end))),
            Slot::Escaped { id } => {
                let escaped = self.escaped.get(id)?;
                Some(match escaped.text.get_or_init(|| decode(self.str_at(escaped.start, escaped.end))) {
                    Decoded::Utf8(text) => Text::Utf8(text.as_str()),
                    Decoded::Wide(units) => Text::Ucs2(units.as_slice()),
                })
            }
            _ => None,
        }
    }

    /// The bytes of the messages (or `input`) array's item in slot `at`, when it is one.
    pub(super) fn item_source(&self, at: usize) -> Option<&'a [u8]> {
        let sources = self.item_sources.get_or_init(|| {
            let mut sources = Vec::new();
            for (list, layout) in [(self.messages, &self.layout), (self.input_items, &self.input_layout)] {
                // A layout belongs to the last array of its member, which the member's
                // slot names only when that last value is the array.
                let Some(list) = list else { continue };
                match self.slots.get(list) {
                    Some(Slot::Array { len, .. }) if *len == layout.items.len() => {}
                    _ => continue,
                }
                let mut item = list + 1;
                for span in &layout.items {
                    sources.push((item, *span));
                    item = self.end(item);
                }
            }
            sources.sort_unstable_by_key(|&(slot, _)| slot);
            sources
        });
        let found = sources.binary_search_by_key(&at, |&(slot, _)| slot).ok()?;
        let &(_, (start, end)) = sources.get(found)?;
        self.input.get(start..end)
    }

    /// Slot one past the subtree at `at`.
    fn end(&self, at: usize) -> usize {
        match self.slots.get(at) {
            Some(Slot::Array { end, .. } | Slot::Object { end, .. }) => *end,
            _ => at + 1,
        }
    }

    /// The `len` entries of the object at `at` as `json.loads` keeps them when a key
    /// repeats, or `None` when none does: a repeated key stays where it first appears,
    /// with the value of its last entry. For each entry, the slot of the value it holds
    /// (its own, or its key's last value at the key's first entry), `None` for a later
    /// entry of a key (dropped). Linear in the keys for a small object, `n log n` for a
    /// large one: a body is hostile input, and one repeated key among thousands must not
    /// cost a scan of the later keys for every key.
    pub(super) fn repeated_keys(&self, at: usize, len: usize) -> Option<Box<[Option<usize>]>> {
        let keys = Siblings::new(self, at + 1, 2 * len).step_by(2);
        if len <= 16 {
            // Messages and content parts have a handful of keys: compare them pairwise
            // (different lengths never match) and allocate only when one repeats.
            let mut seen = [Text::Utf8(""); 16];
            let mut repeated = false;
            for (i, key) in keys.clone().enumerate() {
                let text = self.text(key.at).unwrap_or(Text::Utf8(""));
                repeated |= seen.iter().take(i).any(|s| same_text(s, &text));
                if let Some(slot) = seen.get_mut(i) {
                    *slot = text;
                }
            }
            if !repeated {
                return None;
            }
        }
        // A key is one slot: its value is the next.
        let (texts, values): (Vec<Text<'_>>, Vec<usize>) =
            keys.map(|k| (self.text(k.at).unwrap_or(Text::Utf8("")), k.at + 1)).unzip();
        // Sorted by text, ties in entry order (the sort is stable): each run of equal keys
        // keeps its first entry, given the last one's value.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by(|&a, &b| match (texts.get(a), texts.get(b)) {
            (Some(a), Some(b)) => key_order(a, b),
            _ => std::cmp::Ordering::Equal,
        });
        let mut kept: Vec<Option<usize>> = values.iter().copied().map(Some).collect();
        let same =
            |a: &usize, b: &usize| matches!((texts.get(*a), texts.get(*b)), (Some(a), Some(b)) if same_text(a, b));
        for run in order.chunk_by(same) {
            for &later in run.get(1..).unwrap_or_default() {
                if let Some(slot) = kept.get_mut(later) {
                    *slot = None;
                }
            }
            if let (Some(&first), Some(&last)) = (run.first(), run.last()) {
                if let Some(slot) = kept.get_mut(first) {
                    *slot = values.get(last).copied();
                }
            }
        }
        kept.contains(&None).then(|| kept.into_boxed_slice())
    }
}

/// A total order on keys that puts equal texts together. A decoded key holding a lone
/// surrogate (`Ucs2`) never equals a UTF-8 one, so the two kinds sort apart; mixing
/// code-point and UTF-16 comparisons in one sort would not be a total order.
fn key_order(a: &Text<'_>, b: &Text<'_>) -> std::cmp::Ordering {
    match (a, b) {
        (Text::Utf8(a), Text::Utf8(b)) => a.cmp(b),
        (Text::Utf8(_), _) => std::cmp::Ordering::Less,
        (_, Text::Utf8(_)) => std::cmp::Ordering::Greater,
        _ => a.utf16_units().cmp(b.utf16_units()),
    }
}

#[cfg(test)]
thread_local! {
    /// Strings read off the tape, for the tests that hold that work linear in the input.
    pub(super) static TEXT_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether two texts hold the same characters.
fn same_text(a: &Text<'_>, b: &Text<'_>) -> bool {
    match (a, b) {
        (Text::Utf8(a), Text::Utf8(b)) => a.len() == b.len() && a == b,
        _ => a.utf16_units().eq(b.utf16_units()),
    }
}

impl<'t, 'a> Preorder for &'t Tape<'a> {
    type Node = Node<'t, 'a>;

    fn node_at(self, at: usize) -> Node<'t, 'a> {
        Node { tape: self, at }
    }

    fn end_of(self, at: usize) -> Option<usize> {
        Some(self.end(at))
    }
}

/// An object's entries as `json.loads` keeps them: a repeated key once, where it first
/// appears, with its last value.
pub struct Entries<'t, 'a> {
    items: Siblings<&'t Tape<'a>>,
    /// Per entry, the slot of its value or `None` when dropped (see
    /// [`Tape::repeated_keys`]); `None` when no key repeats.
    kept: Option<&'t [Option<usize>]>,
    index: usize,
}

impl<'t, 'a> Iterator for Entries<'t, 'a> {
    type Item = (Node<'t, 'a>, Node<'t, 'a>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let key = self.items.next()?;
            let value = self.items.next()?;
            let index = self.index;
            self.index += 1;
            match self.kept.map(|kept| kept.get(index).copied().flatten()) {
                None => return Some((key, value)),
                Some(Some(at)) => return Some((key, Node { tape: value.tape, at })),
                Some(None) => {}
            }
        }
    }
}

impl<'t, 'a> Node<'t, 'a> {
    fn slot(&self) -> Slot {
        self.tape.slots.get(self.at).copied().unwrap_or(Slot::Null)
    }

    fn children(&self, left: usize) -> Siblings<&'t Tape<'a>> {
        Siblings::new(self.tape, self.at + 1, left)
    }

    /// The UTF-16 length of a string's input bytes (its byte length when they are all
    /// ASCII, as the scan noted), and its escapes when it has any.
    fn raw_units(&self) -> Option<(usize, Option<&'t Escaped>)> {
        let (start, end, ascii, escaped) = match self.slot() {
            Slot::Str { start, end, ascii } => (start, end, ascii, None),
            Slot::Escaped { id } => {
                let e = self.tape.escaped.get(id)?;
                (e.start, e.end, e.ascii, Some(e))
            }
            _ => return None,
        };
        let units = if ascii { end - start } else { Text::Utf8(self.tape.str_at(start, end)).utf16_len() };
        Some((units, escaped))
    }

    /// Each entry's key and value, every repeat included (cheaper than [`Entries`] when
    /// the caller keeps the last match itself).
    fn all_entries(&self) -> Option<impl Iterator<Item = (Node<'t, 'a>, Node<'t, 'a>)>> {
        let Slot::Object { len, .. } = self.slot() else { return None };
        let mut items = self.children(2 * len);
        Some(std::iter::from_fn(move || Some((items.next()?, items.next()?))))
    }
}

impl<'t, 'a> JsonNode for Node<'t, 'a> {
    type Items = Siblings<&'t Tape<'a>>;
    type Entries = Entries<'t, 'a>;

    fn view(&self) -> Result<View<'_, Self>, Problem> {
        Ok(match self.slot() {
            Slot::Null => View::Null,
            Slot::Bool(b) => View::Bool(b),
            Slot::Int(i) => View::Int(i),
            Slot::Float { value, .. } => View::Float(value),
            Slot::Str { .. } | Slot::Escaped { .. } => View::Str(self.tape.text(self.at).unwrap_or(Text::Utf8(""))),
            Slot::Array { len, .. } => View::Array { items: self.children(len), len },
            Slot::Object { len, duplicates, .. } => {
                // json.loads keeps one entry a key.
                let kept = if duplicates { self.tape.repeated.get(&self.at).map(|k| &**k) } else { None };
                let unique = len - kept.map_or(0, |k| k.iter().filter(|slot| slot.is_none()).count());
                View::Object { entries: Entries { items: self.children(2 * len), kept, index: 0 }, len: unique }
            }
        })
    }

    fn json_type(&self) -> JsonType {
        match self.slot() {
            Slot::Null => JsonType::Null,
            Slot::Bool(_) => JsonType::Bool,
            Slot::Int(_) | Slot::Float { .. } => JsonType::Number,
            Slot::Str { .. } | Slot::Escaped { .. } => JsonType::Str,
            Slot::Array { .. } => JsonType::Array,
            Slot::Object { .. } => JsonType::Object,
        }
    }

    fn as_text(&self) -> Option<Text<'_>> {
        self.tape.text(self.at)
    }

    fn push_to(&self, snippet: &mut Snippet<'_>) -> Option<bool> {
        match self.slot() {
            Slot::Escaped { id } => {
                let escaped = self.tape.escaped.get(id)?;
                Some(match escaped.text.get() {
                    Some(_) => snippet.push(self.as_text()?),
                    None => snippet.push_chars(decoded_chars(self.tape.str_at(escaped.start, escaped.end))),
                })
            }
            _ => self.as_text().map(|text| snippet.push(text)),
        }
    }

    fn starts_with_ascii(&self, prefix: &str) -> bool {
        match self.slot() {
            Slot::Escaped { id } => self.tape.escaped.get(id).is_some_and(|escaped| match escaped.text.get() {
                Some(_) => self.as_text().is_some_and(|t| t.starts_with(prefix)),
                // A lone surrogate reads as U+FFFD, which no ASCII prefix holds.
                None => {
                    let mut chars = decoded_chars(self.tape.str_at(escaped.start, escaped.end));
                    prefix.chars().all(|c| chars.next() == Some(c))
                }
            }),
            _ => self.as_text().is_some_and(|t| t.starts_with(prefix)),
        }
    }

    fn source(&self) -> Option<&[u8]> {
        self.tape.item_source(self.at)
    }

    fn str_units(&self) -> Option<usize> {
        self.raw_units().map(|(units, escaped)| units - escaped.map_or(0, |e| e.saved))
    }

    fn str_json_len(&self) -> Option<usize> {
        // Unescaped input holds no byte JSON escapes: its JSON is itself, quoted.
        self.raw_units().map(|(units, escaped)| units - escaped.map_or(0, |e| e.json_saved) + 2)
    }

    fn get(&self, key: Key) -> Option<Self> {
        let name = key.as_str();
        let mut found = self.all_entries()?.filter(|(k, _)| k.as_text().is_some_and(|t| t.eq_ascii(name)));
        // The last entry of a repeated key wins; in an object where no key repeats, the
        // first match is the only one.
        let repeats = matches!(self.slot(), Slot::Object { duplicates: true, .. });
        if repeats { found.last() } else { found.next() }.map(|(_, v)| v)
    }

    fn message_fields(&self) -> MessageFields<Self> {
        let mut out = MessageFields { role: None, content: None, tool_calls: None, kind: None };
        for (k, v) in self.all_entries().into_iter().flatten() {
            let Some(Text::Utf8(name)) = k.as_text() else { continue };
            match name {
                "role" => out.role = Some(v),
                "content" => out.content = Some(v),
                "tool_calls" => out.tool_calls = Some(v),
                "type" => out.kind = Some(v),
                _ => {}
            }
        }
        out
    }

    fn type_name(&self) -> String {
        match self.slot() {
            Slot::Null => "NoneType",
            Slot::Bool(_) => "bool",
            Slot::Int(_) | Slot::Float { int: true, .. } => "int",
            Slot::Float { .. } => "float",
            Slot::Str { .. } | Slot::Escaped { .. } => "str",
            Slot::Array { .. } => "list",
            Slot::Object { .. } => "dict",
        }
        .into()
    }
}
