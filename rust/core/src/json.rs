//! The accessor trait messages are read through, and a value as JavaScript's
//! `JSON.stringify` writes it: its length, computed without building the text, and the
//! text itself (what an exact tokenizer reads), from one walk.
//!
//! The walk is iterative with an explicit stack, so 10,000-deep content parts cannot
//! overflow the native stack; [`MAX_DEPTH`] bounds it, which also stops circular lists.

use crate::error::{Problem, MAX_DEPTH};
use crate::text::{Snippet, Text};
use std::fmt::Write;

/// The object keys the core looks up. An enum rather than `&str`, so a binding can keep
/// one interned key object per name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    Role,
    Content,
    ToolCalls,
    Type,
    Text,
    Name,
    Function,
    CallId,
    Output,
    Id,
    ToolCallId,
    ToolUseId,
}

impl Key {
    /// Every key, in declaration order (`Key::ALL[k as usize] == k`).
    pub const ALL: [Key; 12] = [
        Key::Role,
        Key::Content,
        Key::ToolCalls,
        Key::Type,
        Key::Text,
        Key::Name,
        Key::Function,
        Key::CallId,
        Key::Output,
        Key::Id,
        Key::ToolCallId,
        Key::ToolUseId,
    ];

    /// The key as written in a message.
    pub const fn as_str(self) -> &'static str {
        match self {
            Key::Role => "role",
            Key::Content => "content",
            Key::ToolCalls => "tool_calls",
            Key::Type => "type",
            Key::Text => "text",
            Key::Name => "name",
            Key::Function => "function",
            Key::CallId => "call_id",
            Key::Output => "output",
            Key::Id => "id",
            Key::ToolCallId => "tool_call_id",
            Key::ToolUseId => "tool_use_id",
        }
    }
}

/// One JSON value as the core sees it. Integers outside ±2^53 arrive as `Float`, since
/// JavaScript holds every number as a double.
pub enum View<'a, N: JsonNode> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Text<'a>),
    Array { items: N::Items, len: usize },
    Object { entries: N::Entries, len: usize },
}

/// A value's type, without its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonType {
    Null,
    Bool,
    Number,
    Str,
    Array,
    Object,
    /// No JSON form.
    Other,
}

/// The fields every message is read for (`type` tells a Responses item).
pub struct MessageFields<N> {
    pub role: Option<N>,
    pub content: Option<N>,
    pub tool_calls: Option<N>,
    pub kind: Option<N>,
}

/// Values stored flat in preorder, a container followed by its children (an object's as
/// key, value, key, value…), each knowing where its subtree ends: the batch arena and the
/// request tape.
pub trait Preorder: Copy {
    /// The value at a position.
    type Node;
    /// The value at `at`.
    fn node_at(self, at: usize) -> Self::Node;
    /// The position one past the subtree at `at` (`None` past the end).
    fn end_of(self, at: usize) -> Option<usize>;
}

/// Consecutive sibling values in a [`Preorder`] store.
#[derive(Clone, Copy)]
pub struct Siblings<P> {
    store: P,
    pos: usize,
    left: usize,
}

impl<P: Preorder> Siblings<P> {
    /// The `left` siblings from position `pos` on.
    pub fn new(store: P, pos: usize, left: usize) -> Self {
        Siblings { store, pos, left }
    }
}

impl<P: Preorder> Iterator for Siblings<P> {
    type Item = P::Node;

    fn next(&mut self) -> Option<P::Node> {
        if self.left == 0 {
            return None;
        }
        let node = self.store.node_at(self.pos);
        self.pos = self.store.end_of(self.pos)?;
        self.left -= 1;
        Some(node)
    }

    /// Sibling `n` from here: the ones before it are stepped over, not made nodes.
    fn nth(&mut self, n: usize) -> Option<P::Node> {
        if n >= self.left {
            self.left = 0;
            return None;
        }
        for _ in 0..n {
            self.pos = self.store.end_of(self.pos)?;
            self.left -= 1;
        }
        self.next()
    }
}

/// Read access to a JSON-like value: a message, its content, a content part.
pub trait JsonNode: Sized {
    /// Iterator over an array's items.
    type Items: Iterator<Item = Self>;
    /// Iterator over an object's `(key, value)` pairs.
    type Entries: Iterator<Item = (Self, Self)>;

    /// What this value is.
    ///
    /// # Errors
    /// [`Problem::WrongType`] when the value has no JSON form.
    fn view(&self) -> Result<View<'_, Self>, Problem>;

    /// The value under `key` when this is an object holding it, else `None`.
    fn get(&self, key: Key) -> Option<Self>;

    /// `role`, `content`, `tool_calls` and `type` of an object; a binding may read them
    /// in one pass over the object instead of four lookups.
    fn message_fields(&self) -> MessageFields<Self> {
        MessageFields {
            role: self.get(Key::Role),
            content: self.get(Key::Content),
            tool_calls: self.get(Key::ToolCalls),
            kind: self.get(Key::Type),
        }
    }

    /// `role` of an object and, read in the same walk (a binding may stop it once it has
    /// both), its `content`: the outer `None` when not read, where reading it could run
    /// code that reading `role` alone would not (a Python key's `__eq__`).
    fn role_and_content(&self) -> (Option<Self>, Option<Option<Self>>) {
        (self.get(Key::Role), Some(self.get(Key::Content)))
    }

    /// How many reads of values so far may have run code that changes values already
    /// read (a Python dict key's `__eq__`): what was read of a value is still what it
    /// holds while this count stays the same. Values nothing changes: 0.
    fn foreign_code_runs() -> u64 {
        0
    }

    /// The value's type name, for error messages.
    fn type_name(&self) -> String;

    /// A hint that this value will be read soon, so a binding whose values lie
    /// scattered in memory can start loading it (nothing by default).
    fn prefetch(&self) {}

    /// The value's type; implementations override it with a check cheaper than `view`.
    fn json_type(&self) -> JsonType {
        match self.view() {
            Ok(View::Null) => JsonType::Null,
            Ok(View::Bool(_)) => JsonType::Bool,
            Ok(View::Int(_) | View::Float(_)) => JsonType::Number,
            Ok(View::Str(_)) => JsonType::Str,
            Ok(View::Array { .. }) => JsonType::Array,
            Ok(View::Object { .. }) => JsonType::Object,
            Err(_) => JsonType::Other,
        }
    }

    /// The string this value holds, if it is one.
    fn as_text(&self) -> Option<Text<'_>> {
        match self.view() {
            Ok(View::Str(t)) => Some(t),
            _ => None,
        }
    }

    /// Appends the string this value holds to `snippet` ([`Snippet::push`]: `false` once
    /// it is full); `None` when this is not a string. A node that decodes its strings
    /// overrides it to decode only what the snippet takes (a note line shows 80 units of
    /// what may be a long tool output).
    fn push_to(&self, snippet: &mut Snippet<'_>) -> Option<bool> {
        self.as_text().map(|text| snippet.push(text))
    }

    /// Whether this is a string that opens with `prefix` (ASCII). A node that decodes its
    /// strings overrides it to decode only the prefix's length (the volatile-tail check
    /// reads the start of what may be a long tool output).
    fn starts_with_ascii(&self, prefix: &str) -> bool {
        self.as_text().is_some_and(|t| t.starts_with(prefix))
    }

    /// UTF-16 length of the string this value holds, if it is one. A node that can tell
    /// it without the text (a request scanner that has not decoded an escaped string)
    /// overrides it.
    fn str_units(&self) -> Option<usize> {
        self.as_text().map(|t| t.utf16_len())
    }

    /// The JSON text this value was read from, when the node has it at hand (`None` by
    /// default): two values with the same source are equal, so it can stand for the
    /// value in a cache key.
    fn source(&self) -> Option<&[u8]> {
        None
    }

    /// [`Text::json_len`] of the string this value holds, when the node knows it without
    /// the text; `None` (the default) sends [`json_len`] to the text.
    fn str_json_len(&self) -> Option<usize> {
        None
    }
}

enum Frame<N: JsonNode, E> {
    Items {
        items: N::Items,
        first: bool,
    },
    /// An object's entries (as the sink takes them), and the key whose entry is left out.
    Entries {
        entries: E,
        first: bool,
        skip: Option<&'static str>,
    },
}

/// An object's entries in JavaScript's order (array-index keys first, ascending; then
/// the rest as given), for a sink that writes the text.
struct Ordered<N>(smallvec::IntoIter<[(N, N); 8]>);

impl<N: JsonNode> Ordered<N> {
    fn new(entries: N::Entries) -> Self {
        let index = |key: &N| key.as_text().and_then(|k| k.array_index());
        let mut pairs: smallvec::SmallVec<[(N, N); 8]> = entries.collect();
        if pairs.iter().any(|(key, _)| index(key).is_some()) {
            // Stable: the other keys keep their order.
            pairs.sort_by_key(|(key, _)| index(key).map_or((1, 0), |i| (0, i)));
        }
        Ordered(pairs.into_iter())
    }
}

impl<N: JsonNode> Iterator for Ordered<N> {
    type Item = (N, N);

    fn next(&mut self) -> Option<(N, N)> {
        self.0.next()
    }
}

/// A walk's open containers. Performance: a frame is moved on every push and pop, so a
/// length's frames hold the node's own entries iterator, not the ordered one's inline
/// buffer (which made each frame 184 bytes, copied by `memmove`).
type Stack<N, E> = smallvec::SmallVec<[Frame<N, E>; 8]>;

/// How a walk measures an object (the seam for provider sizing).
pub enum Visit {
    /// As JSON text.
    Text,
    /// As JSON text, the entry under this key left out (its comma and colon still count).
    Without(&'static str),
    /// Not at all: an opaque block (an image), counted by the caller.
    Opaque,
}

/// Decides, object by object, how [`json_len_with`] measures them.
pub trait Visitor<N> {
    /// How to measure `object`.
    fn visit(&mut self, object: &N) -> Visit;
}

/// Measures every object as text: [`json_len`].
pub struct AsText;

impl<N> Visitor<N> for AsText {
    #[inline(always)]
    fn visit(&mut self, _object: &N) -> Visit {
        Visit::Text
    }
}

/// Where [`walk`] puts what it reads: the output's length, or the output itself.
trait Sink {
    /// How it takes an object's entries: as the node gives them, unless the output
    /// depends on their order (a length does not).
    type Entries<N: JsonNode>: Iterator<Item = (N, N)>;
    /// An object's entries, as the node gives them, made what the sink takes.
    fn entries<N: JsonNode>(entries: N::Entries) -> Self::Entries<N>;
    /// ASCII punctuation and literals (`[`, `,`, `null`, …).
    fn ascii(&mut self, s: &'static str);
    /// Takes a string by its JSON length alone, when the sink needs no more (`false`:
    /// it needs the text).
    fn string_len(&mut self, json_len: usize) -> bool;
    fn string(&mut self, text: Text<'_>);
    fn number(&mut self, x: f64);
    fn int(&mut self, i: i64);
}

/// Counts UTF-16 units, saturating at `usize::MAX` (see [`crate::tokens`]: only a value
/// repeating one object past what memory could hold written out gets there).
struct Length(usize);

impl Sink for Length {
    type Entries<N: JsonNode> = N::Entries;
    fn entries<N: JsonNode>(entries: N::Entries) -> N::Entries {
        entries
    }
    fn ascii(&mut self, s: &'static str) {
        self.0 = self.0.saturating_add(s.len());
    }
    fn string_len(&mut self, json_len: usize) -> bool {
        self.0 = self.0.saturating_add(json_len);
        true
    }
    fn string(&mut self, text: Text<'_>) {
        self.0 = self.0.saturating_add(text.json_len());
    }
    fn number(&mut self, x: f64) {
        self.0 = self.0.saturating_add(js_number_len(x));
    }
    fn int(&mut self, i: i64) {
        self.0 = self.0.saturating_add(int_len(i));
    }
}

impl Sink for String {
    type Entries<N: JsonNode> = Ordered<N>;
    fn entries<N: JsonNode>(entries: N::Entries) -> Ordered<N> {
        Ordered::new(entries)
    }
    fn ascii(&mut self, s: &'static str) {
        self.push_str(s);
    }
    fn string_len(&mut self, _json_len: usize) -> bool {
        false
    }
    fn string(&mut self, text: Text<'_>) {
        text.write_json(self);
    }
    fn number(&mut self, x: f64) {
        write_js_number(x, self);
    }
    fn int(&mut self, i: i64) {
        write_int(i, self);
    }
}

/// Output length, in UTF-16 units, of `JSON.stringify(value)` (compact).
///
/// # Errors
/// [`Problem::WrongType`] for a value with no JSON form or a non-string object key;
/// [`Problem::TooDeep`] past [`MAX_DEPTH`] levels.
pub fn json_len<N: JsonNode>(value: &N) -> Result<usize, Problem> {
    json_len_with(value, &mut AsText)
}

/// [`json_len`], each object measured as `visitor` says.
///
/// # Errors
/// As [`json_len`].
pub fn json_len_with<N: JsonNode, V: Visitor<N>>(value: &N, visitor: &mut V) -> Result<usize, Problem> {
    let mut length = Length(0);
    walk(value, &mut length, visitor)?;
    Ok(length.0)
}

/// Appends `JSON.stringify(value)` (compact) to `out`; on error `out` holds a prefix.
///
/// # Errors
/// As [`json_len`].
pub fn write_json<N: JsonNode>(value: &N, out: &mut String) -> Result<(), Problem> {
    walk(value, out, &mut AsText)
}

/// [`write_json`], each object written as `visitor` says: an opaque one as nothing, an
/// entry left out as its colon alone (commas kept), so the text's UTF-16 length is what
/// [`json_len_with`] measures.
///
/// # Errors
/// As [`json_len`].
pub fn write_json_with<N: JsonNode, V: Visitor<N>>(
    value: &N,
    out: &mut String,
    visitor: &mut V,
) -> Result<(), Problem> {
    walk(value, out, visitor)
}

/// The one walk behind [`json_len`] and [`write_json`].
fn walk<N: JsonNode, S: Sink, V: Visitor<N>>(value: &N, sink: &mut S, visitor: &mut V) -> Result<(), Problem> {
    // Messages nest a few levels deep: their frames stay on the native stack.
    let mut stack: Stack<N, S::Entries<N>> = Stack::new();
    open(value, &mut stack, sink, visitor)?;
    while let Some(top) = stack.last_mut() {
        let child = match top {
            Frame::Items { items, first } => match items.next() {
                Some(child) => {
                    if !std::mem::replace(first, false) {
                        sink.ascii(",");
                    }
                    Some(child)
                }
                None => {
                    sink.ascii("]");
                    None
                }
            },
            Frame::Entries { entries, first, skip } => match entries.next() {
                Some((key, child)) => {
                    if !std::mem::replace(first, false) {
                        sink.ascii(",");
                    }
                    if skip.is_some_and(|s| key.as_text().is_some_and(|k| k.eq_ascii(s))) {
                        sink.ascii(":");
                        continue;
                    }
                    if !key.str_json_len().is_some_and(|len| sink.string_len(len)) {
                        // By its type first: a key that is no JSON value is named as a key.
                        let not_a_key = || Problem::WrongType { expected: "str object keys", got: key.type_name() };
                        if key.json_type() != JsonType::Str {
                            return Err(not_a_key());
                        }
                        let View::Str(k) = key.view()? else { return Err(not_a_key()) };
                        sink.string(k);
                    }
                    sink.ascii(":");
                    Some(child)
                }
                None => {
                    sink.ascii("}");
                    None
                }
            },
        };
        match child {
            Some(child) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(Problem::TooDeep);
                }
                open(&child, &mut stack, sink, visitor)?;
            }
            None => {
                stack.pop();
            }
        }
    }
    Ok(())
}

/// Writes a scalar, or a container's opening bracket (its children are pushed for the
/// caller to walk).
fn open<N: JsonNode, S: Sink, V: Visitor<N>>(
    value: &N,
    stack: &mut Stack<N, S::Entries<N>>,
    sink: &mut S,
    visitor: &mut V,
) -> Result<(), Problem> {
    if value.str_json_len().is_some_and(|len| sink.string_len(len)) {
        return Ok(());
    }
    match value.view()? {
        View::Null => sink.ascii("null"),
        View::Bool(b) => sink.ascii(if b { "true" } else { "false" }),
        View::Int(i) => sink.int(i),
        View::Float(f) => sink.number(f),
        View::Str(t) => sink.string(t),
        View::Array { items, .. } => {
            stack.push(Frame::Items { items, first: true });
            sink.ascii("[");
        }
        View::Object { entries, .. } => {
            let skip = match visitor.visit(value) {
                Visit::Opaque => return Ok(()),
                Visit::Text => None,
                Visit::Without(key) => Some(key),
            };
            let entries = S::entries(entries);
            stack.push(Frame::Entries { entries, first: true, skip });
            sink.ascii("{");
        }
    }
    Ok(())
}

/// Largest integer a double holds exactly; beyond it JavaScript prints the rounded double.
const MAX_SAFE: u64 = 1 << 53;

fn int_len(i: i64) -> usize {
    let mut count = Counter(0);
    write_int(i, &mut count);
    count.0
}

fn write_int(i: i64, out: &mut impl Write) {
    if i.unsigned_abs() > MAX_SAFE {
        #[allow(clippy::cast_precision_loss)] // the rounding is what JavaScript does
        return write_js_number(i as f64, out);
    }
    let _ = write!(out, "{i}");
}

/// Counts the bytes written to it (the output is ASCII: bytes are UTF-16 units).
struct Counter(usize);

impl Write for Counter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// A fixed buffer for formatting one float.
struct NumberBuf {
    bytes: [u8; 40],
    len: usize,
}

impl Write for NumberBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let slot = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The shortest round-trip digits of a finite, non-zero `|x|` and the decimal exponent
/// `n` with value = 0.d₁d₂… × 10ⁿ (ECMAScript's `Number::toString` terms).
fn shortest_digits(x: f64) -> Option<(NumberBuf, usize, i32)> {
    let mut buf = NumberBuf { bytes: [0; 40], len: 0 };
    write!(buf, "{:e}", x.abs()).ok()?;
    let text = std::str::from_utf8(buf.bytes.get(..buf.len)?).ok()?;
    let (mantissa, exp) = text.split_once('e')?;
    let exp: i32 = exp.parse().ok()?;
    let mut digits = NumberBuf { bytes: [0; 40], len: 0 };
    for c in mantissa.chars().filter(char::is_ascii_digit) {
        digits.write_char(c).ok()?;
    }
    let k = digits.len;
    Some((digits, k, exp + 1))
}

/// Length of `Number.prototype.toString(x)`; `NaN` and the infinities are `null` in JSON.
pub fn js_number_len(x: f64) -> usize {
    let mut count = Counter(0);
    write_js_number(x, &mut count);
    count.0
}

/// Writes `Number.prototype.toString(x)` (ECMAScript's rules); `NaN` and the infinities
/// as `null`, as JSON has them.
fn write_js_number(x: f64, out: &mut impl Write) {
    if !x.is_finite() {
        let _ = out.write_str("null");
        return;
    }
    if x == 0.0 {
        let _ = out.write_char('0');
        return;
    }
    let Some((digits, k, n)) = shortest_digits(x) else {
        let _ = out.write_str("null");
        return;
    };
    let digits = digits.bytes.get(..k).and_then(|d| std::str::from_utf8(d).ok()).unwrap_or("0");
    let k_i = i32::try_from(k).unwrap_or(i32::MAX);
    if x < 0.0 {
        let _ = out.write_char('-');
    }
    let zeros = |out: &mut dyn Write, count: i32| {
        for _ in 0..count {
            let _ = out.write_char('0');
        }
    };
    if k_i <= n && n <= 21 {
        let _ = out.write_str(digits);
        zeros(out, n - k_i);
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at_checked(n.unsigned_abs() as usize).unwrap_or((digits, ""));
        let _ = write!(out, "{int}.{frac}");
    } else if -6 < n && n <= 0 {
        let _ = out.write_str("0.");
        zeros(out, -n);
        let _ = out.write_str(digits);
    } else {
        let e = n - 1;
        let (first, rest) = digits.split_at_checked(1).unwrap_or((digits, ""));
        let _ = out.write_str(first);
        if !rest.is_empty() {
            let _ = write!(out, ".{rest}");
        }
        let _ = write!(out, "e{}{}", if e < 0 { '-' } else { '+' }, e.unsigned_abs());
    }
}

/// Member `key` (ASCII) of an object, the last if repeated (as `json.loads` keeps it), for
/// keys [`Key`] does not name; `None` when `node` is no object or has no such member.
pub fn member<N: JsonNode>(node: &N, key: &str) -> Option<N> {
    let Ok(View::Object { entries, .. }) = node.view() else { return None };
    entries.filter(|(k, _)| k.as_text().is_some_and(|t| t.eq_ascii(key))).last().map(|(_, v)| v)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::Value;

    impl<'v> JsonNode for &'v Value {
        type Items = std::slice::Iter<'v, Value>;
        type Entries = std::iter::Map<serde_json::map::Iter<'v>, fn((&'v String, &'v Value)) -> (&'v Value, &'v Value)>;

        fn view(&self) -> Result<View<'_, Self>, Problem> {
            Ok(match self {
                Value::Null => View::Null,
                Value::Bool(b) => View::Bool(*b),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => View::Int(i),
                    None => View::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
                Value::String(s) => View::Str(Text::Utf8(s)),
                Value::Array(a) => View::Array { items: a.iter(), len: a.len() },
                Value::Object(o) => View::Object { entries: o.iter().map(key_value), len: o.len() },
            })
        }

        fn get(&self, key: Key) -> Option<Self> {
            self.as_object().and_then(|o| o.get(key.as_str()))
        }

        fn type_name(&self) -> String {
            "value".into()
        }
    }

    /// `(key, value)` with the key as a JSON string value (leaked: test data only).
    fn key_value<'v>((k, v): (&'v String, &'v Value)) -> (&'v Value, &'v Value) {
        (Box::leak(Box::new(Value::String(k.clone()))), v)
    }

    #[test]
    fn every_key_is_listed_once_in_order() {
        let spelled: std::collections::HashSet<&str> = Key::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(spelled.len(), Key::ALL.len());
        assert!(Key::ALL.iter().enumerate().all(|(i, &k)| k as usize == i));
        // Every variant at its place, with no wildcard: a new one does not compile until
        // it is placed here and counted in `placed`, and then `ALL` is one short until it
        // is listed there too.
        let place = |k: Key| match k {
            Key::Role => 0,
            Key::Content => 1,
            Key::ToolCalls => 2,
            Key::Type => 3,
            Key::Text => 4,
            Key::Name => 5,
            Key::Function => 6,
            Key::CallId => 7,
            Key::Output => 8,
            Key::Id => 9,
            Key::ToolCallId => 10,
            Key::ToolUseId => 11,
        };
        let placed = 12;
        assert_eq!(Key::ALL.len(), placed);
        assert!(Key::ALL.iter().enumerate().all(|(i, &k)| place(k) == i));
    }

    #[test]
    fn json_length_matches_serialisation() {
        let v: Value =
            serde_json::from_str(r#"[{"a":"x\ny","b":[1,-2,true,false,null]},{},[],"é😀"]"#).unwrap_or_default();
        assert_eq!(json_len(&&v), Ok(serde_json::to_string(&v).unwrap_or_default().encode_utf16().count()));
    }

    fn written(v: &Value) -> String {
        let mut out = String::new();
        write_json(&v, &mut out).unwrap();
        out
    }

    #[test]
    fn written_json_is_compact_serialisation() {
        let source = r#"[{"a":"x\ny\u0001\"\\","b":[1,-2,true,false,null,1.5,1e21]},{},[],"é😀\u007f",{"c":{"d":[]}}]"#;
        let v: Value = serde_json::from_str(source).unwrap();
        let js = "[{\"a\":\"x\\ny\\u0001\\\"\\\\\",\"b\":[1,-2,true,false,null,1.5,1e+21]},{},[],\"é😀\u{7f}\",{\"c\":{\"d\":[]}}]";
        assert_eq!(written(&v), js);
        assert_eq!(json_len(&&v), Ok(js.encode_utf16().count()));
    }

    #[test]
    fn array_index_keys_are_written_first_ascending_as_javascript_does() {
        // serde_json's objects hold their keys sorted: "0", "01", "1", "4294967294", ...
        let v: Value = serde_json::from_str(
            r#"{"b":1,"1":2,"0":3,"01":4,"4294967295":5,"4294967294":6,"a":{"10":7,"9":8},"-1":9}"#,
        )
        .unwrap();
        let js = r#"{"0":3,"1":2,"4294967294":6,"-1":9,"01":4,"4294967295":5,"a":{"9":8,"10":7},"b":1}"#;
        assert_eq!(written(&v), js);
        assert_eq!(json_len(&&v), Ok(js.len()));
    }

    #[test]
    fn numbers_print_as_javascript_does() {
        for (x, js) in [
            (1.0, "1"),
            (1.5, "1.5"),
            (-0.25, "-0.25"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (1e-6, "0.000001"),
            (123456.789, "123456.789"),
            (-1.2345e-10, "-1.2345e-10"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
        ] {
            assert_eq!(js_number_len(x), js.len(), "{x}");
            let mut out = String::new();
            write_js_number(x, &mut out);
            assert_eq!(out, js, "{x}");
        }
        assert_eq!(js_number_len(f64::NAN), 4);
        assert_eq!(int_len(-42), 3);
        assert_eq!(int_len(9_007_199_254_740_993), "9007199254740992".len());
        assert_eq!(int_len(i64::MIN), "-9223372036854776000".len());
    }

    #[test]
    fn deep_nesting_is_reported_not_overflowed() {
        let mut v = Value::Null;
        for _ in 0..(MAX_DEPTH + 5) {
            v = Value::Array(vec![v]);
        }
        assert_eq!(json_len(&&v), Err(Problem::TooDeep));
        // serde_json's drop of this value recurses; keep the test's stack safe.
        std::mem::forget(v);
    }
}
