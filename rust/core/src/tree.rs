//! An owned copy of JSON values whose strings borrow their data: what a binding extracts
//! while it may read its host's objects, so the core can then run without touching them
//! (on other threads, with Python's GIL released).
//!
//! Values live in one flat [`Arena`] in preorder: a container is followed by its
//! children (an object's as key, value, key, value…) and records where its subtree ends,
//! so walking needs no per-node allocation.

use crate::error::Problem;
use crate::json::{JsonNode, Key, Shape, View};
use crate::text::Text;

/// One value in an [`Arena`].
#[derive(Debug, Clone, Copy)]
pub enum Leaf<'a> {
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

impl Leaf<'_> {
    /// A Latin-1 string held in place, when it is short enough.
    pub fn inline(latin1: &[u8]) -> Option<Self> {
        let mut bytes = [0u8; INLINE];
        bytes.get_mut(..latin1.len())?.copy_from_slice(latin1);
        Some(Leaf::Inline { len: u8::try_from(latin1.len()).ok()?, bytes })
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot<'a> {
    leaf: Leaf<'a>,
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
    pub fn push(&mut self, leaf: Leaf<'a>) -> usize {
        let at = self.slots.len();
        self.slots.push(Slot { leaf, end: at + 1 });
        at
    }

    /// Ends the container at `at` after its children, recording `len` of them (entries
    /// for an object).
    pub fn close(&mut self, at: usize, len: usize) {
        let end = self.slots.len();
        if let Some(slot) = self.slots.get_mut(at) {
            slot.end = end;
            slot.leaf = match slot.leaf {
                Leaf::Array { .. } => Leaf::Array { len },
                Leaf::Object { .. } => Leaf::Object { len },
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

/// Consecutive sibling values.
pub struct Siblings<'t, 'a> {
    arena: &'t [Slot<'a>],
    pos: usize,
    left: usize,
}

impl<'t, 'a> Iterator for Siblings<'t, 'a> {
    type Item = Node<'t, 'a>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let node = Node { arena: self.arena, at: self.pos };
        self.pos = node.slot()?.end;
        self.left -= 1;
        Some(node)
    }
}

/// An object's entries: its children taken two at a time.
pub struct Pairs<'t, 'a>(Siblings<'t, 'a>);

impl<'t, 'a> Iterator for Pairs<'t, 'a> {
    type Item = (Node<'t, 'a>, Node<'t, 'a>);

    fn next(&mut self) -> Option<Self::Item> {
        Some((self.0.next()?, self.0.next()?))
    }
}

impl<'t, 'a> JsonNode for Node<'t, 'a> {
    type Items = Siblings<'t, 'a>;
    type Entries = Pairs<'t, 'a>;

    fn view(&self) -> Result<View<'_, Self>, Problem> {
        let Some(slot) = self.slot() else { return Ok(View::Null) };
        let children = |left| Siblings { arena: self.arena, pos: self.at + 1, left };
        Ok(match &slot.leaf {
            Leaf::Null => View::Null,
            Leaf::Bool(b) => View::Bool(*b),
            Leaf::Int(i) => View::Int(*i),
            Leaf::Float(f) => View::Float(*f),
            Leaf::Str(t) => View::Str(*t),
            Leaf::Inline { len, bytes } => View::Str(Text::Latin1(bytes.get(..usize::from(*len)).unwrap_or_default())),
            Leaf::Array { len } => View::Array { items: children(*len), len: *len },
            Leaf::Object { len } => View::Object { entries: Pairs(children(2 * len)), len: *len },
        })
    }

    fn shape(&self) -> Shape {
        match self.slot().map(|s| s.leaf) {
            None | Some(Leaf::Null) => Shape::Null,
            Some(Leaf::Bool(_)) => Shape::Bool,
            Some(Leaf::Int(_) | Leaf::Float(_)) => Shape::Number,
            Some(Leaf::Str(_) | Leaf::Inline { .. }) => Shape::Str,
            Some(Leaf::Array { .. }) => Shape::Array,
            Some(Leaf::Object { .. }) => Shape::Object,
        }
    }

    fn get(&self, key: Key) -> Option<Self> {
        let Some(Leaf::Object { len }) = self.slot().map(|s| s.leaf) else { return None };
        let mut entries = Pairs(Siblings { arena: self.arena, pos: self.at + 1, left: 2 * len });
        entries.find(|(k, _)| k.as_text().is_some_and(|t| t.eq_ascii(key.as_str()))).map(|(_, v)| v)
    }

    fn type_name(&self) -> String {
        match self.shape() {
            Shape::Null => "NoneType",
            Shape::Bool => "bool",
            Shape::Number => "number",
            Shape::Str => "str",
            Shape::Array => "list",
            Shape::Object => "dict",
            Shape::Other => "object",
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
        let list = arena.push(Leaf::Array { len: 0 });
        let obj = arena.push(Leaf::Object { len: 0 });
        arena.push(Leaf::Str(Text::Utf8("a")));
        arena.push(Leaf::Str(Text::Utf8("x\n")));
        arena.push(Leaf::Str(Text::Utf8("b")));
        let inner = arena.push(Leaf::Array { len: 0 });
        arena.push(Leaf::Int(1));
        arena.push(Leaf::Bool(true));
        arena.push(Leaf::Null);
        arena.close(inner, 3);
        arena.close(obj, 2);
        arena.push(Leaf::Str(Text::Utf8("é")));
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
