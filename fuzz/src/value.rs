//! The fuzzer's values: JSON with strings as code points (lone surrogates included, as a
//! Python `str` may hold them), copied into a core [`Arena`] with each string in one of
//! the four text kinds the binding produces, and printed by an independent oracle of
//! JavaScript's `JSON.stringify`.

use crate::rng::Rng;
use contextfold_core::arena::{Arena, Entry, INLINE};
use contextfold_core::Text;

/// A JSON value as a host language holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Vec<u32>),
    Arr(Vec<V>),
    /// Entries in order; keys are unique (as in a `dict`).
    Obj(Vec<(Vec<u32>, V)>),
}

impl V {
    pub fn str(s: &str) -> V {
        V::Str(s.chars().map(u32::from).collect())
    }

    /// The value of `key` in an object.
    pub fn get(&self, key: &str) -> Option<&V> {
        match self {
            V::Obj(entries) => entries.iter().find(|(k, _)| eq(k, key)).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Sets `key` (replacing it in place, or appending it).
    pub fn set(&mut self, key: &str, value: V) {
        if let V::Obj(entries) = self {
            match entries.iter_mut().find(|(k, _)| eq(k, key)) {
                Some(slot) => slot.1 = value,
                None => entries.push((key.chars().map(u32::from).collect(), value)),
            }
        }
    }

    pub fn remove(&mut self, key: &str) {
        if let V::Obj(entries) = self {
            entries.retain(|(k, _)| !eq(k, key));
        }
    }

    /// Whether this is a string equal to `s`.
    pub fn is_str(&self, s: &str) -> bool {
        matches!(self, V::Str(cps) if eq(cps, s))
    }

    /// Whether this is a string starting with `s`.
    pub fn starts_with(&self, s: &str) -> bool {
        let prefix: Vec<u32> = s.chars().map(u32::from).collect();
        matches!(self, V::Str(cps) if cps.starts_with(&prefix))
    }

    /// Nesting depth: 0 for a scalar, 1 for a flat list or dict.
    pub fn depth(&self) -> usize {
        // Iterative: the fuzzer builds values deeper than any native stack allows.
        let mut deepest = 0;
        let mut stack = vec![(self, 0usize)];
        while let Some((v, d)) = stack.pop() {
            match v {
                V::Arr(items) => {
                    deepest = deepest.max(d + 1);
                    stack.extend(items.iter().map(|i| (i, d + 1)));
                }
                V::Obj(entries) => {
                    deepest = deepest.max(d + 1);
                    stack.extend(entries.iter().map(|(_, i)| (i, d + 1)));
                }
                _ => {}
            }
        }
        deepest
    }

    pub fn from_json(value: &serde_json::Value) -> V {
        use serde_json::Value as J;
        match value {
            J::Null => V::Null,
            J::Bool(b) => V::Bool(*b),
            J::Number(n) => n.as_i64().map_or_else(|| V::Float(n.as_f64().unwrap_or(0.0)), V::Int),
            J::String(s) => V::str(s),
            J::Array(a) => V::Arr(a.iter().map(V::from_json).collect()),
            J::Object(o) => {
                V::Obj(o.iter().map(|(k, v)| (k.chars().map(u32::from).collect(), V::from_json(v))).collect())
            }
        }
    }
}

impl Drop for V {
    // Dropping a deeply nested value without recursion.
    fn drop(&mut self) {
        let mut stack = Vec::new();
        match self {
            V::Arr(items) => stack.append(items),
            V::Obj(entries) => stack.extend(entries.drain(..).map(|(_, v)| v)),
            _ => return,
        }
        while let Some(mut v) = stack.pop() {
            match &mut v {
                V::Arr(items) => stack.append(items),
                V::Obj(entries) => stack.extend(entries.drain(..).map(|(_, v)| v)),
                _ => {}
            }
        }
    }
}

pub fn eq(cps: &[u32], s: &str) -> bool {
    cps.iter().copied().eq(s.chars().map(u32::from))
}

pub fn is_surrogate(cp: u32) -> bool {
    (0xD800..0xE000).contains(&cp)
}

/// UTF-16 length of a string of code points (a surrogate code point counts 1).
pub fn utf16_len(cps: &[u32]) -> usize {
    cps.iter().map(|&c| if c > 0xFFFF { 2 } else { 1 }).sum()
}

// ---------------------------------------------------------------------------------------
// The JSON.stringify oracle

/// `JSON.stringify(value)`, as UTF-16 code units; `None` past `max_depth` levels.
pub fn stringify(value: &V, max_depth: usize) -> Option<Vec<u16>> {
    if value.depth() > max_depth {
        return None;
    }
    let mut out = Vec::new();
    write(value, &mut out);
    Some(out)
}

fn write(value: &V, out: &mut Vec<u16>) {
    // Recursion is fine: callers check the depth first, and the fuzzer's thread has a
    // large stack.
    match value {
        V::Null => push(out, "null"),
        V::Bool(b) => push(out, if *b { "true" } else { "false" }),
        #[allow(clippy::cast_precision_loss)] // JavaScript holds every number as a double
        V::Int(i) => push(out, &js_number(*i as f64)),
        V::Float(f) => push(out, &js_number(*f)),
        V::Str(s) => write_str(s, out),
        V::Arr(items) => {
            push(out, "[");
            for (k, item) in items.iter().enumerate() {
                if k > 0 {
                    push(out, ",");
                }
                write(item, out);
            }
            push(out, "]");
        }
        V::Obj(entries) => {
            push(out, "{");
            for (k, (key, item)) in entries.iter().enumerate() {
                if k > 0 {
                    push(out, ",");
                }
                write_str(key, out);
                push(out, ":");
                write(item, out);
            }
            push(out, "}");
        }
    }
}

fn push(out: &mut Vec<u16>, s: &str) {
    out.extend(s.encode_utf16());
}

/// A string as JSON.stringify writes it: `"` `\` and controls escaped, lone surrogates as
/// `\udxxx`, everything else as is.
fn write_str(cps: &[u32], out: &mut Vec<u16>) {
    push(out, "\"");
    let units: Vec<u16> = cps.iter().flat_map(|&c| utf16_units(c)).collect();
    let mut k = 0;
    while let Some(&u) = units.get(k) {
        let next = units.get(k + 1).copied();
        match u {
            0x22 => push(out, "\\\""),
            0x5C => push(out, "\\\\"),
            0x08 => push(out, "\\b"),
            0x0C => push(out, "\\f"),
            0x0A => push(out, "\\n"),
            0x0D => push(out, "\\r"),
            0x09 => push(out, "\\t"),
            0..=0x1F => push(out, &format!("\\u{u:04x}")),
            0xD800..=0xDBFF if next.is_some_and(|n| (0xDC00..=0xDFFF).contains(&n)) => {
                out.push(u);
                out.extend(next);
                k += 1;
            }
            0xD800..=0xDFFF => push(out, &format!("\\u{u:04x}")),
            _ => out.push(u),
        }
        k += 1;
    }
    push(out, "\"");
}

fn utf16_units(cp: u32) -> Vec<u16> {
    match char::from_u32(cp) {
        Some(c) => c.encode_utf16(&mut [0; 2]).to_vec(),
        // A surrogate code point is one unit as it is.
        None => vec![u16::try_from(cp).unwrap_or(0xFFFD)],
    }
}

/// JavaScript's `Number#toString` (and `null` where JSON has no number), from Rust's
/// shortest round-trip digits.
pub fn js_number(x: f64) -> String {
    if !x.is_finite() {
        return "null".into();
    }
    if x == 0.0 {
        return "0".into();
    }
    let sci = format!("{:e}", x.abs()); // d[.ddd]e[-]n: the shortest digits
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = i64::try_from(digits.len()).unwrap_or(0);
    let n = exp.parse::<i64>().unwrap_or(0) + 1;
    let sign = if x < 0.0 { "-" } else { "" };
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat(usize::try_from(n - k).unwrap_or(0)))
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or(0));
        format!("{int}.{frac}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat(usize::try_from(-n).unwrap_or(0)))
    } else {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let e = n - 1;
        format!("{first}{dot}e{}{}", if e < 0 { "-" } else { "+" }, e.abs())
    };
    format!("{sign}{body}")
}

// ---------------------------------------------------------------------------------------
// Into the core's arena

/// A string's storage, in the kind chosen for it.
enum Stored {
    Latin1(Vec<u8>),
    Ucs2(Vec<u16>),
    Ucs4(Vec<u32>),
    Utf8(String),
    Inline(Vec<u8>),
}

/// One step of a preorder walk without recursion.
enum Task<'v> {
    Value(&'v V),
    Key(&'v [u32]),
    Close(usize, usize),
}

/// Pushes `v`'s children (an object's as key, value, key, value…) to be walked next.
fn children<'v>(v: &'v V, stack: &mut Vec<Task<'v>>) {
    match v {
        V::Arr(items) => stack.extend(items.iter().rev().map(Task::Value)),
        V::Obj(entries) => {
            for (k, item) in entries.iter().rev() {
                stack.push(Task::Value(item));
                stack.push(Task::Key(k));
            }
        }
        _ => {}
    }
}

/// The strings of some values, each in a kind picked at random among those that can hold
/// it; they outlive the arena that borrows them.
pub struct Strings(Vec<Stored>);

impl Strings {
    pub fn new(values: &[V], rng: &mut Rng) -> Strings {
        let mut out = Vec::new();
        let mut stack: Vec<Task<'_>> = values.iter().rev().map(Task::Value).collect();
        while let Some(task) = stack.pop() {
            match task {
                Task::Value(V::Str(s)) => out.push(store(s, rng)),
                Task::Key(s) => out.push(store(s, rng)),
                Task::Value(v) => children(v, &mut stack),
                Task::Close(..) => {}
            }
        }
        Strings(out)
    }

    /// The values in an arena (each string from `self`, in the same walk order), and each
    /// value's root position.
    pub fn arena<'s>(&'s self, values: &[V]) -> (Arena<'s>, Vec<usize>) {
        let mut arena = Arena::new();
        let mut roots = Vec::with_capacity(values.len());
        let mut strings = self.0.iter();
        for value in values {
            roots.push(arena.len());
            let mut stack = vec![Task::Value(value)];
            while let Some(task) = stack.pop() {
                match task {
                    Task::Value(V::Str(_)) | Task::Key(_) => {
                        arena.push(strings.next().map_or(Entry::Null, leaf));
                    }
                    Task::Value(V::Null) => {
                        arena.push(Entry::Null);
                    }
                    Task::Value(V::Bool(b)) => {
                        arena.push(Entry::Bool(*b));
                    }
                    Task::Value(V::Int(i)) => {
                        arena.push(Entry::Int(*i));
                    }
                    Task::Value(V::Float(f)) => {
                        arena.push(Entry::Float(*f));
                    }
                    Task::Value(v @ V::Arr(items)) => {
                        let at = arena.push(Entry::Array { len: 0 });
                        stack.push(Task::Close(at, items.len()));
                        children(v, &mut stack);
                    }
                    Task::Value(v @ V::Obj(entries)) => {
                        let at = arena.push(Entry::Object { len: 0 });
                        stack.push(Task::Close(at, entries.len()));
                        children(v, &mut stack);
                    }
                    Task::Close(at, len) => arena.close(at, len),
                }
            }
        }
        (arena, roots)
    }
}

fn store(cps: &[u32], rng: &mut Rng) -> Stored {
    let mut kinds = vec![4u8];
    if cps.iter().all(|&c| c < 0x100) {
        kinds.push(1);
        if cps.len() <= INLINE {
            kinds.push(0);
        }
    }
    if cps.iter().all(|&c| c < 0x1_0000) {
        kinds.push(2);
    }
    if !cps.iter().any(|&c| is_surrogate(c)) {
        kinds.push(8);
    }
    let narrow = |c: &u32| u8::try_from(*c).unwrap_or(b'?');
    match kinds.get(rng.below(kinds.len())).copied().unwrap_or(4) {
        0 => Stored::Inline(cps.iter().map(narrow).collect()),
        1 => Stored::Latin1(cps.iter().map(narrow).collect()),
        2 => Stored::Ucs2(cps.iter().map(|&c| u16::try_from(c).unwrap_or(0xFFFD)).collect()),
        8 => Stored::Utf8(cps.iter().filter_map(|&c| char::from_u32(c)).collect()),
        _ => Stored::Ucs4(cps.to_vec()),
    }
}

fn leaf(stored: &Stored) -> Entry<'_> {
    match stored {
        Stored::Latin1(b) => Entry::Str(Text::Latin1(b)),
        Stored::Ucs2(u) => Entry::Str(Text::Ucs2(u)),
        Stored::Ucs4(u) => Entry::Str(Text::Ucs4(u)),
        Stored::Utf8(s) => Entry::Str(Text::Utf8(s)),
        Stored::Inline(b) => Entry::inline(b).unwrap_or(Entry::Str(Text::Latin1(b))),
    }
}
