//! An owned copy of JSON values whose strings borrow their data: what a binding extracts
//! while it may read its host's objects, so the core can then run without touching them
//! (on other threads, with Python's GIL released).
//!
//! Values live in one flat [`Arena`] in preorder: a container is followed by its
//! children (an object's as key, value, key, value…) and records where its subtree ends,
//! so walking needs no per-node allocation.

use crate::error::Problem;
use crate::json::{JsonNode, JsonType, Key, Preorder, Siblings, View};
use crate::text::Text;

/// One value in an [`Arena`].
#[derive(Debug, Clone, Copy)]
pub enum Entry<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Text<'a>),
    /// A short Latin-1 string held in place (no borrow to keep alive, no cache line
    /// shared with its owner): `bytes[..len]`.
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    /// A list of `len` items.
    Array {
        len: usize,
    },
    /// A dict of `len` entries.
    Object {
        len: usize,
    },
}

/// Longest Latin-1 string an [`Arena`] holds in place.
pub const INLINE: usize = 22;

impl Entry<'_> {
    /// A Latin-1 string held in place, when it is short enough.
    pub fn inline(latin1: &[u8]) -> Option<Self> {
        let mut bytes = [0u8; INLINE];
        bytes.get_mut(..latin1.len())?.copy_from_slice(latin1);
        Some(Entry::Inline { len: u8::try_from(latin1.len()).ok()?, bytes })
    }
}

/// An entry and where its subtree ends.
#[derive(Debug, Clone, Copy)]
pub struct Slot<'a> {
    entry: Entry<'a>,
    /// Index one past this value's subtree.
    end: usize,
}

/// Values in preorder.
#[derive(Debug, Default)]
pub struct Arena<'a> {
    slots: Vec<Slot<'a>>,
}

impl<'a> Arena<'a> {
    /// An empty arena.
    pub fn new() -> Self {
        Self { slots: Vec::new() }
    }

    /// Number of slots used (a mark to [`Arena::truncate`] back to).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing has been pushed.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Drops everything pushed since `mark`.
    pub fn truncate(&mut self, mark: usize) {
        self.slots.truncate(mark);
    }

    /// Pushes a value; for a container, push its children next and then [`Arena::close`] it.
    pub fn push(&mut self, entry: Entry<'a>) -> usize {
        let at = self.slots.len();
        self.slots.push(Slot { entry, end: at + 1 });
        at
    }

    /// Ends the container at `at` after its children, recording `len` of them (entries
    /// for an object).
    pub fn close(&mut self, at: usize, len: usize) {
        let end = self.slots.len();
        if let Some(slot) = self.slots.get_mut(at) {
            slot.end = end;
            slot.entry = match slot.entry {
                Entry::Array { .. } => Entry::Array { len },
                Entry::Object { .. } => Entry::Object { len },
                other => other,
            };
        }
    }

    /// The value at `at`.
    pub fn node(&self, at: usize) -> Node<'_, 'a> {
        Node { arena: &self.slots, at }
    }
}

/// A value in an [`Arena`].
#[derive(Debug, Clone, Copy)]
pub struct Node<'t, 'a> {
    arena: &'t [Slot<'a>],
    at: usize,
}

impl<'t, 'a> Node<'t, 'a> {
    fn slot(&self) -> Option<&'t Slot<'a>> {
        self.arena.get(self.at)
    }
}

impl<'t, 'a> Preorder for &'t [Slot<'a>] {
    type Node = Node<'t, 'a>;

    fn node_at(self, at: usize) -> Node<'t, 'a> {
        Node { arena: self, at }
    }

    fn end_of(self, at: usize) -> Option<usize> {
        self.get(at).map(|slot| slot.end)
    }
}

/// An object's entries: its children taken two at a time.
pub struct Pairs<'t, 'a>(Siblings<&'t [Slot<'a>]>);

impl<'t, 'a> Iterator for Pairs<'t, 'a> {
    type Item = (Node<'t, 'a>, Node<'t, 'a>);

    fn next(&mut self) -> Option<Self::Item> {
        Some((self.0.next()?, self.0.next()?))
    }
}

impl<'t, 'a> JsonNode for Node<'t, 'a> {
    type Items = Siblings<&'t [Slot<'a>]>;
    type Entries = Pairs<'t, 'a>;

    fn view(&self) -> Result<View<'_, Self>, Problem> {
        let Some(slot) = self.slot() else { return Ok(View::Null) };
        let children = |left| Siblings::new(self.arena, self.at + 1, left);
        Ok(match &slot.entry {
            Entry::Null => View::Null,
            Entry::Bool(b) => View::Bool(*b),
            Entry::Int(i) => View::Int(*i),
            Entry::Float(f) => View::Float(*f),
            Entry::Str(t) => View::Str(*t),
            Entry::Inline { len, bytes } => View::Str(Text::Latin1(bytes.get(..usize::from(*len)).unwrap_or_default())),
            Entry::Array { len } => View::Array { items: children(*len), len: *len },
            Entry::Object { len } => View::Object { entries: Pairs(children(2 * len)), len: *len },
        })
    }

    fn json_type(&self) -> JsonType {
        match self.slot().map(|s| s.entry) {
            None | Some(Entry::Null) => JsonType::Null,
            Some(Entry::Bool(_)) => JsonType::Bool,
            Some(Entry::Int(_) | Entry::Float(_)) => JsonType::Number,
            Some(Entry::Str(_) | Entry::Inline { .. }) => JsonType::Str,
            Some(Entry::Array { .. }) => JsonType::Array,
            Some(Entry::Object { .. }) => JsonType::Object,
        }
    }

    fn get(&self, key: Key) -> Option<Self> {
        let Some(Entry::Object { len }) = self.slot().map(|s| s.entry) else { return None };
        let mut entries = Pairs(Siblings::new(self.arena, self.at + 1, 2 * len));
        entries.find(|(k, _)| k.as_text().is_some_and(|t| t.eq_ascii(key.as_str()))).map(|(_, v)| v)
    }

    fn type_name(&self) -> String {
        match self.json_type() {
            JsonType::Null => "NoneType",
            JsonType::Bool => "bool",
            JsonType::Number => "number",
            JsonType::Str => "str",
            JsonType::Array => "list",
            JsonType::Object => "dict",
            JsonType::Other => "object",
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::json_len;

    #[test]
    fn arena_values_measure_like_their_json() {
        // [{"a":"x\\n","b":[1,true,null]},"é"]
        let mut arena = Arena::new();
        let list = arena.push(Entry::Array { len: 0 });
        let obj = arena.push(Entry::Object { len: 0 });
        arena.push(Entry::Str(Text::Utf8("a")));
        arena.push(Entry::Str(Text::Utf8("x\n")));
        arena.push(Entry::Str(Text::Utf8("b")));
        let inner = arena.push(Entry::Array { len: 0 });
        arena.push(Entry::Int(1));
        arena.push(Entry::Bool(true));
        arena.push(Entry::Null);
        arena.close(inner, 3);
        arena.close(obj, 2);
        arena.push(Entry::Str(Text::Utf8("é")));
        arena.close(list, 2);
        let root = arena.node(list);
        assert_eq!(json_len(&root), Ok(r#"[{"a":"x\n","b":[1,true,null]},"é"]"#.len() - 1));
        let object = root.view().ok().and_then(|v| match v {
            View::Array { mut items, .. } => items.next(),
            _ => None,
        });
        assert!(object.and_then(|o| o.get(Key::Text)).is_none());
    }
}
