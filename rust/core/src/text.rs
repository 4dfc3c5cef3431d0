//! Text as CPython stores it, measured the way JavaScript measures it.
//!
//! A Python `str` is one of three fixed-width arrays (Latin-1, UCS-2, UCS-4). [`Text`]
//! borrows whichever one a string uses, so the binding never copies or transcodes a
//! string to size it. Lengths are UTF-16 code units (JavaScript's `.length`), and
//! [`Text::json_len`] is the length of the string as `JSON.stringify` writes it.
//!
//! Performance notes: Latin-1 and UCS-2 strings cannot hold a code point above U+FFFF,
//! so their UTF-16 length is their length (O(1)). The escape count is a branch-free
//! pass over small chunks that LLVM vectorises; only strings holding surrogate code
//! points take the code-point-by-code-point path.

/// Borrowed string data in one of CPython's representations (or UTF-8, for Rust callers).
#[derive(Debug, Clone, Copy)]
pub enum Text<'a> {
    /// One byte a code point (CPython's `PyUnicode_1BYTE_KIND`).
    Latin1(&'a [u8]),
    /// Two bytes a code point; may hold surrogate code points.
    Ucs2(&'a [u16]),
    /// Four bytes a code point; may hold surrogate code points.
    Ucs4(&'a [u32]),
    /// A Rust string.
    Utf8(&'a str),
}

/// Extra output characters JSON adds for an ASCII code unit: `\"`, `\\`, `\n` and the
/// other two-character escapes add 1, the remaining control characters (`\u00XX`) add 5.
const fn ascii_escape_extra(c: u32) -> usize {
    match c {
        0x08 | 0x09 | 0x0a | 0x0c | 0x0d | 0x22 | 0x5c => 1,
        0x00..=0x1f => 5,
        _ => 0,
    }
}

/// JSON body length (UTF-16 units plus escape extras) of code points, one by one.
fn measured(points: impl Iterator<Item = u32>) -> usize {
    let (units, extra) = measure_code_points(points);
    units + extra
}

/// UTF-16 units and JSON escape extras of a sequence of code points, pairing a high
/// surrogate code point with a following low one as JavaScript would see them.
fn measure_code_points(points: impl Iterator<Item = u32>) -> (usize, usize) {
    let mut units = 0usize;
    let mut extra = 0usize;
    let mut pending_high = false;
    for c in points {
        if pending_high {
            pending_high = false;
            if (0xDC00..=0xDFFF).contains(&c) {
                units += 1;
                continue;
            }
            extra += 5; // the high surrogate was alone: written as \udxxx
        }
        match c {
            0..=0x7f => {
                units += 1;
                extra += ascii_escape_extra(c);
            }
            0xD800..=0xDBFF => {
                units += 1;
                pending_high = true;
            }
            0xDC00..=0xDFFF => {
                units += 1;
                extra += 5;
            }
            0x80..=0xFFFF => units += 1,
            _ => units += 2,
        }
    }
    if pending_high {
        extra += 5;
    }
    (units, extra)
}

/// [`ascii_escape_extra`] for every byte value (0 from 0x7f up: JSON escapes no more).
// Indexing in a const block cannot panic at run time: out of bounds fails the build.
#[allow(clippy::indexing_slicing)]
const ESCAPE_EXTRA: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut c = 0;
    while c < 0x80 {
        table[c] = ascii_escape_extra(c as u32) as u8;
        c += 1;
    }
    table
};

/// Below this many units a table lookup per unit beats the vector loop's setup and tail.
const SHORT: usize = 64;

/// What one pass over a string's units finds when it holds no surrogate code point.
struct Scan {
    /// Characters JSON escaping adds.
    escape_extra: usize,
    /// Code points above U+FFFF (two UTF-16 units each).
    astral: usize,
}

/// [`Scan::escape_extra`] of one-byte text: Latin-1, or UTF-8, whose bytes above 0x7F
/// JSON never escapes (neither holds a surrogate). A short one, most often a key or an
/// id, is tested 8 bytes a step for a byte JSON escapes, and only a word holding one is
/// counted byte by byte: a lookup a byte cost twice as much, and the vector loop's setup
/// more still.
#[inline(always)]
fn byte_escape_extra(bytes: &[u8]) -> usize {
    if bytes.len() >= SHORT {
        return scan(bytes).map_or(0, |s| s.escape_extra);
    }
    let counted = |word: &[u8]| word.iter().map(|&c| escape_extra_of(usize::from(c))).sum::<usize>();
    let words = bytes.chunks_exact(8);
    let rest = words.remainder();
    let mut extra = 0;
    for word in words {
        if <[u8; 8]>::try_from(word).is_ok_and(|w| escapes_any(u64::from_le_bytes(w))) {
            extra += counted(word);
        }
    }
    extra + counted(rest)
}

/// [`ascii_escape_extra`] of any code point, by table (inlined, so that a byte's lookup
/// needs no bounds check).
#[inline(always)]
fn escape_extra_of(c: usize) -> usize {
    ESCAPE_EXTRA.get(c).map_or(0, |&e| usize::from(e))
}

/// Whether any byte of `word` is one JSON escapes: below 0x20, `"` or `\` (each test
/// exact for "any byte": a borrow only follows a byte that matched).
fn escapes_any(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |word: u64, n: u64| word.wrapping_sub(ONES * n) & !word & HIGH;
    (below(word, 0x20) | below(word ^ (ONES * 0x22), 1) | below(word ^ (ONES * 0x5c), 1)) != 0
}

/// Escape extras and astral code points of `units` in one pass; `None` when a surrogate
/// code point appears (the caller then pairs surrogates one by one). Long runs go
/// through chunks small enough for counters of the unit's own width (so a vector lane
/// holds a unit and its counts alike), with no early exit, so the loop vectorises; for
/// Latin-1 the astral and surrogate tests fold away.
#[multiversion::multiversion(targets("x86_64+avx2", "x86_64+sse4.1"))]
fn scan<T>(units: &[T]) -> Option<Scan>
where
    T: Copy + Into<u32> + From<bool> + std::ops::Add<Output = T>,
{
    let mut out = Scan { escape_extra: 0, astral: 0 };
    if units.len() < SHORT {
        for &unit in units {
            let c: u32 = unit.into();
            if (c & 0xFFFF_F800) == 0xD800 {
                return None;
            }
            out.escape_extra += escape_extra_of(c as usize);
            out.astral += usize::from(c > 0xFFFF);
        }
        return Some(out);
    }
    let mut surrogate = false;
    for chunk in units.chunks(128) {
        let zero = T::from(false);
        let (mut special, mut long_control, mut astral) = (zero, zero, zero);
        for &unit in chunk {
            let c: u32 = unit.into();
            let control = c < 0x20;
            special = special + T::from(control | (c == 0x22) | (c == 0x5c));
            long_control = long_control + T::from(control & !matches!(c, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d));
            astral = astral + T::from(c > 0xFFFF);
            surrogate |= (c & 0xFFFF_F800) == 0xD800;
        }
        let count = |n: T| Into::<u32>::into(n) as usize;
        out.escape_extra += count(special) + 4 * count(long_control);
        out.astral += count(astral);
    }
    (!surrogate).then_some(out)
}

/// UTF-16 length of UTF-8 `bytes`: one unit a character, two from four-byte sequences on,
/// so the bytes that start a character plus the four-byte leads. Summed in bytes a
/// 64-byte chunk (at most 128, so no overflow): a loop that vectorises to byte adds,
/// where a `usize` sum widened every byte (a tenth of packing a body with one `—` in a
/// long tool output).
fn utf8_units(bytes: &[u8]) -> usize {
    let units = |b: u8| u8::from((b as i8) >= -0x40) + u8::from(b >= 0xF0);
    let chunks = bytes.chunks_exact(64);
    let rest: usize = chunks.remainder().iter().map(|&b| usize::from(units(b))).sum();
    chunks.map(|chunk| usize::from(chunk.iter().fold(0u8, |n, &b| n + units(b)))).sum::<usize>() + rest
}

impl Text<'_> {
    /// Length in UTF-16 code units: one per code point, two above U+FFFF.
    pub fn utf16_len(&self) -> usize {
        match *self {
            Text::Latin1(b) => b.len(),
            Text::Ucs2(u) => u.len(),
            Text::Ucs4(u) => u.len() + u.iter().filter(|&&c| c > 0xFFFF).count(),
            Text::Utf8(s) if s.is_ascii() => s.len(),
            Text::Utf8(s) => utf8_units(s.as_bytes()),
        }
    }

    /// Length of the string as JSON text (quotes included), as `JSON.stringify` writes it:
    /// non-ASCII kept, `"` `\` and control characters escaped, lone surrogates as `\udxxx`.
    pub fn json_len(&self) -> usize {
        let body = match *self {
            Text::Latin1(b) => b.len() + byte_escape_extra(b),
            Text::Ucs2(u) => match scan(u) {
                Some(s) => u.len() + s.escape_extra,
                None => measured(u.iter().map(|&c| u32::from(c))),
            },
            Text::Ucs4(u) => match scan(u) {
                Some(s) => u.len() + s.astral + s.escape_extra,
                None => measured(u.iter().copied()),
            },
            // UTF-8 holds no surrogate, and only ASCII bytes are escaped.
            Text::Utf8(s) => Text::Utf8(s).utf16_len() + byte_escape_extra(s.as_bytes()),
        };
        body + 2
    }

    /// Appends the text as `JSON.stringify` writes it (the text [`Text::json_len`]
    /// measures): quoted, `"` `\` and control characters escaped, non-ASCII kept, a high
    /// surrogate code point followed by a low one written as the character they pair
    /// into, a lone surrogate as `\udxxx`.
    pub fn write_json(&self, out: &mut String) {
        use std::fmt::Write;
        out.push('"');
        let mut pending_high: Option<u32> = None;
        for c in self.code_points() {
            if let Some(high) = pending_high.take() {
                if (0xDC00..=0xDFFF).contains(&c) {
                    let paired = 0x10000 + ((high - 0xD800) << 10) + (c - 0xDC00);
                    out.push(char::from_u32(paired).unwrap_or('\u{FFFD}'));
                    continue;
                }
                let _ = write!(out, "\\u{high:04x}");
            }
            match c {
                0xD800..=0xDBFF => pending_high = Some(c),
                0x22 => out.push_str("\\\""),
                0x5c => out.push_str("\\\\"),
                0x08 => out.push_str("\\b"),
                0x09 => out.push_str("\\t"),
                0x0a => out.push_str("\\n"),
                0x0c => out.push_str("\\f"),
                0x0d => out.push_str("\\r"),
                0x00..=0x1f | 0xDC00..=0xDFFF => {
                    let _ = write!(out, "\\u{c:04x}");
                }
                _ => out.push(char::from_u32(c).unwrap_or('\u{FFFD}')),
            }
        }
        if let Some(high) = pending_high {
            let _ = write!(out, "\\u{high:04x}");
        }
        out.push('"');
    }

    /// Whether the text opens with `prefix` (ASCII).
    pub fn starts_with(&self, prefix: &str) -> bool {
        let p = prefix.as_bytes();
        match *self {
            Text::Latin1(b) => b.starts_with(p),
            Text::Ucs2(u) => u.len() >= p.len() && u.iter().zip(p).all(|(&a, &b)| a == u16::from(b)),
            Text::Ucs4(u) => u.len() >= p.len() && u.iter().zip(p).all(|(&a, &b)| a == u32::from(b)),
            Text::Utf8(s) => s.as_bytes().starts_with(p),
        }
    }

    /// Whether the text closes with `suffix` (ASCII).
    pub fn ends_with(&self, suffix: &str) -> bool {
        let p = suffix.as_bytes();
        match *self {
            Text::Latin1(b) => b.ends_with(p),
            Text::Ucs2(u) => u.len() >= p.len() && u.iter().rev().zip(p.iter().rev()).all(|(&a, &b)| a == u16::from(b)),
            Text::Ucs4(u) => u.len() >= p.len() && u.iter().rev().zip(p.iter().rev()).all(|(&a, &b)| a == u32::from(b)),
            Text::Utf8(s) => s.as_bytes().ends_with(p),
        }
    }

    /// Whether the text equals `other` (ASCII).
    pub fn eq_ascii(&self, other: &str) -> bool {
        let len = match *self {
            Text::Latin1(b) => b.len(),
            Text::Ucs2(u) => u.len(),
            Text::Ucs4(u) => u.len(),
            Text::Utf8(s) => s.len(),
        };
        len == other.len() && self.starts_with(other)
    }

    /// Compares two texts by code point, whatever their representations (Python's `str`
    /// order).
    #[inline]
    pub fn cmp_code_points(&self, other: &Text<'_>) -> std::cmp::Ordering {
        // Inline for the common case (sorting ranks thousands of paths, nearly all
        // Latin-1); the rest out of line, so the inlined part stays small.
        match (self, other) {
            (Text::Latin1(a), Text::Latin1(b)) => cmp_bytes(a, b),
            _ => self.cmp_code_points_rest(other),
        }
    }

    /// [`Text::cmp_code_points`] for every pair but two Latin-1 texts.
    #[inline(never)]
    fn cmp_code_points_rest(&self, other: &Text<'_>) -> std::cmp::Ordering {
        match (self, other) {
            (Text::Ucs2(a), Text::Ucs2(b)) => a.cmp(b),
            (Text::Ucs4(a), Text::Ucs4(b)) => a.cmp(b),
            // UTF-8's byte order is its code points' order.
            (Text::Utf8(a), Text::Utf8(b)) => cmp_bytes(a.as_bytes(), b.as_bytes()),
            _ => self.code_points().cmp(other.code_points()),
        }
    }

    /// Whether two texts hold the same representation and the same data: CPython's own
    /// `str` equality (kind, then bytes), for texts read from Python strs. Not text
    /// equality in general: `Latin1(b"ab")` and `Utf8("ab")` differ here.
    pub fn same_data(&self, other: &Text<'_>) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other) && self.raw_bytes() == other.raw_bytes()
    }

    /// A [`keyed`](crate::keyed) hash of the whole text, for matching ids in hash maps
    /// (ids come from input, so an unkeyed hash would let a transcript pile them into one
    /// bucket): equal texts hash equal whatever their storage. ASCII is hashed as its
    /// bytes; other text as a byte no ASCII holds (0x80) and then its code points, four
    /// bytes each, so no two texts give the same bytes.
    pub fn id_hash(&self) -> u64 {
        match *self {
            Text::Latin1(b) if b.is_ascii() => crate::keyed::hash64(b),
            Text::Utf8(s) if s.is_ascii() => crate::keyed::hash64(s.as_bytes()),
            // ASCII held wide (never so in a Python str, whose storage is its narrowest):
            // hashed as the bytes it would be held in.
            _ if self.code_points().all(|c| c < 0x80) => {
                let narrow: smallvec::SmallVec<[u8; 64]> = self.code_points().map(|c| c as u8).collect();
                crate::keyed::hash64(&narrow)
            }
            _ => {
                let mut bytes: smallvec::SmallVec<[u8; 128]> = smallvec::smallvec![0x80];
                bytes.extend(self.code_points().flat_map(u32::to_le_bytes));
                crate::keyed::hash64(&bytes)
            }
        }
    }

    /// The array index this text names, by which JavaScript puts an object's key first:
    /// a canonical decimal below 2^32 − 1 (`"0"`, `"7"`; not `"07"`, `"-1"` or `"4294967295"`).
    pub fn array_index(&self) -> Option<u32> {
        let mut value: u64 = 0;
        let mut digits = 0;
        for c in self.code_points() {
            let digit = c.wrapping_sub(u32::from(b'0'));
            if digit > 9 || digits == 10 || (digits == 1 && value == 0) {
                return None;
            }
            value = value * 10 + u64::from(digit);
            digits += 1;
        }
        u32::try_from(value).ok().filter(|&index| digits > 0 && index < u32::MAX)
    }

    /// The text's storage as bytes (two or four a code unit for UCS-2 and UCS-4, in the
    /// machine's order): equal texts of one representation have equal bytes.
    pub fn raw_bytes(&self) -> &[u8] {
        match *self {
            Text::Latin1(b) => b,
            // SAFETY: a u16 slice's memory is readable as its bytes, for the same lifetime.
            Text::Ucs2(u) => unsafe { std::slice::from_raw_parts(u.as_ptr().cast::<u8>(), std::mem::size_of_val(u)) },
            // SAFETY: as above, for u32.
            Text::Ucs4(u) => unsafe { std::slice::from_raw_parts(u.as_ptr().cast::<u8>(), std::mem::size_of_val(u)) },
            Text::Utf8(s) => s.as_bytes(),
        }
    }

    /// The text's code points (surrogate code points as they are stored).
    pub fn code_points(&self) -> impl Iterator<Item = u32> + '_ {
        let (latin1, ucs2, ucs4, utf8): (&[u8], &[u16], &[u32], &str) = match *self {
            Text::Latin1(b) => (b, &[], &[], ""),
            Text::Ucs2(u) => (&[], u, &[], ""),
            Text::Ucs4(u) => (&[], &[], u, ""),
            Text::Utf8(s) => (&[], &[], &[], s),
        };
        latin1
            .iter()
            .map(|&c| u32::from(c))
            .chain(ucs2.iter().map(|&c| u32::from(c)))
            .chain(ucs4.iter().copied())
            .chain(utf8.chars().map(u32::from))
    }

    /// The text's UTF-16 code units (a code point above U+FFFF becomes a surrogate pair).
    pub fn utf16_units(&self) -> Utf16Units<'_> {
        Utf16Units { text: *self, pos: 0, low: None, utf8: None }
    }

    /// The text as a Rust string; unpaired surrogates become U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        let mut out = String::new();
        self.push_lossy(&mut out);
        out
    }

    /// Appends the text to `out`; unpaired surrogates become U+FFFD.
    pub fn push_lossy(&self, out: &mut String) {
        match *self {
            Text::Latin1(b) => out.extend(b.iter().map(|&c| char::from(c))),
            Text::Utf8(s) => out.push_str(s),
            _ => out.extend(char::decode_utf16(self.utf16_units()).map(|r| r.unwrap_or('\u{FFFD}'))),
        }
    }
}

/// Iterator over a [`Text`]'s UTF-16 code units.
pub struct Utf16Units<'a> {
    text: Text<'a>,
    pos: usize,
    low: Option<u16>,
    utf8: Option<std::str::EncodeUtf16<'a>>,
}

impl Iterator for Utf16Units<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        if let Some(low) = self.low.take() {
            return Some(low);
        }
        let pos = self.pos;
        self.pos += 1;
        match self.text {
            Text::Latin1(b) => b.get(pos).map(|&c| u16::from(c)),
            Text::Ucs2(u) => u.get(pos).copied(),
            Text::Ucs4(u) => {
                let c = *u.get(pos)?;
                match u16::try_from(c) {
                    Ok(unit) => Some(unit),
                    Err(_) => {
                        let v = c.wrapping_sub(0x10000);
                        self.low = u16::try_from(0xDC00 | (v & 0x3FF)).ok();
                        u16::try_from(0xD800 | ((v >> 10) & 0x3FF)).ok()
                    }
                }
            }
            Text::Utf8(s) => self.utf8.get_or_insert_with(|| s.encode_utf16()).next(),
        }
    }
}

/// JavaScript's `\s` (and `String#trim`) whitespace set, which differs from Python's:
/// it includes U+FEFF and excludes U+001C–U+001F and U+0085.
pub const fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}' | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}' | '\u{FEFF}'
    )
}

/// Writes a one-line summary of text: whitespace runs (JavaScript's set) become one
/// space, the ends are trimmed, and at most `max_units` UTF-16 units are written,
/// followed by `…` when text was left out. Parts are read as if joined by a space; a cut
/// never splits a surrogate pair, and unpaired surrogates read as U+FFFD.
pub struct Snippet<'o> {
    out: &'o mut String,
    start: usize,
    used: usize,
    max_units: usize,
    pending_space: bool,
    full: bool,
}

impl<'o> Snippet<'o> {
    /// A snippet appended to `out`.
    pub fn new(out: &'o mut String, max_units: usize) -> Self {
        let start = out.len();
        Snippet { out, start, used: 0, max_units, pending_space: false, full: false }
    }

    /// Whether anything has been written.
    pub fn is_empty(&self) -> bool {
        self.out.len() == self.start
    }

    /// Adds the next part; `false` once the snippet is full (later parts would be cut).
    pub fn push(&mut self, part: Text<'_>) -> bool {
        // One loop per representation: the common Latin-1 and UTF-8 cases decode nothing.
        match part {
            Text::Latin1(b) => self.push_runs(b, |at| b.get(at).map(|&c| (char::from(c), 1))),
            Text::Ucs2(u) => self.push_chars(char::decode_utf16(u.iter().copied()).map(|r| r.unwrap_or('\u{FFFD}'))),
            Text::Ucs4(_) => self.push_chars(char::decode_utf16(part.utf16_units()).map(|r| r.unwrap_or('\u{FFFD}'))),
            Text::Utf8(s) => self.push_runs(s.as_bytes(), |at| s.get(at..)?.chars().next().map(|c| (c, c.len_utf8()))),
        }
    }

    /// [`Snippet::push`] of a part given as its characters (a lone surrogate as U+FFFD),
    /// read only as far as the snippet takes them.
    pub fn push_chars(&mut self, chars: impl Iterator<Item = char>) -> bool {
        if self.full {
            return false;
        }
        self.pending_space |= !self.is_empty();
        self.feed(chars)
    }

    /// [`Snippet::push`] of one-byte text (Latin-1, or UTF-8), its `bytes`: each run of
    /// printable ASCII and single spaces (most of a note's text: words) is appended at
    /// once, as far as it fits; any other character (`char_at` an offset: the character
    /// there and its length in bytes) is fed alone. (Fed a character at a time, a note
    /// line cost 28 instructions a character.)
    fn push_runs(&mut self, bytes: &[u8], char_at: impl Fn(usize) -> Option<(char, usize)>) -> bool {
        if self.full {
            return false;
        }
        self.pending_space |= !self.is_empty();
        let mut at = 0;
        while let Some(&first) = bytes.get(at) {
            if !first.is_ascii_graphic() {
                let Some((c, len)) = char_at(at) else { break };
                if !self.feed(std::iter::once(c)) {
                    return false;
                }
                at += len;
                continue;
            }
            // A unit a byte, after the pending space's; read one byte past the room.
            let pending = usize::from(self.pending_space);
            let room = self.max_units.saturating_sub(self.used + pending);
            let rest = bytes.get(at..).unwrap_or_default();
            let seen = rest.get(..room.saturating_add(1)).unwrap_or(rest);
            let mut run = 1;
            while let Some(&c) = seen.get(run) {
                // A space stays in the run only between two printable characters.
                if !(c.is_ascii_graphic() || c == b' ' && seen.get(run + 1).is_some_and(u8::is_ascii_graphic)) {
                    break;
                }
                run += 1;
            }
            let mut fits = run.min(room);
            if fits < run && fits > 0 && seen.get(fits - 1) == Some(&b' ') {
                fits -= 1; // a space before a character that does not fit is not written
            }
            if fits > 0 {
                if self.pending_space {
                    self.out.push(' ');
                    self.pending_space = false;
                }
                // (Printable ASCII and spaces: UTF-8 as they are, never the default.)
                self.out.push_str(std::str::from_utf8(seen.get(..fits).unwrap_or_default()).unwrap_or_default());
                self.used += pending + fits;
            }
            if fits < run {
                self.out.push('…');
                self.full = true;
                return false;
            }
            at += run;
        }
        true
    }

    fn feed(&mut self, chars: impl Iterator<Item = char>) -> bool {
        for c in chars {
            // Most characters are printable ASCII, which no whitespace test need look at.
            if !c.is_ascii_graphic() && is_js_space(c) {
                self.pending_space |= !self.is_empty();
                continue;
            }
            let need = usize::from(self.pending_space) + c.len_utf16();
            if self.used + need > self.max_units {
                self.out.push('…');
                self.full = true;
                return false;
            }
            if self.pending_space {
                self.out.push(' ');
                self.pending_space = false;
            }
            self.out.push(c);
            self.used += need;
        }
        true
    }
}

/// Byte order of two byte strings, eight bytes at a time, inline: on the short keys that
/// are ranked and matched (paths, ids) a call into the C library's `memcmp` cost more than
/// the comparison.
#[inline]
fn cmp_bytes(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let common = a.len().min(b.len());
    let (a_head, b_head) = (a.split_at(common).0, b.split_at(common).0);
    let (a_words, b_words) = (a_head.chunks_exact(8), b_head.chunks_exact(8));
    let (a_tail, b_tail) = (a_words.remainder(), b_words.remainder());
    let word = |w: &[u8]| <[u8; 8]>::try_from(w).map_or(0, u64::from_be_bytes);
    for (x, y) in a_words.zip(b_words) {
        let (x, y) = (word(x), word(y));
        if x != y {
            return x.cmp(&y);
        }
    }
    // The tails are the same length (the heads are): zero-padded, one word each.
    let padded = |tail: &[u8]| {
        let mut word = [0u8; 8];
        word.iter_mut().zip(tail).for_each(|(w, &t)| *w = t);
        u64::from_be_bytes(word)
    };
    padded(a_tail).cmp(&padded(b_tail)).then(a.len().cmp(&b.len()))
}

/// Whether `bytes` hold `word` at `at`, its four bytes compared as one: how the short
/// names read most often (roles, message keys) are told apart once their length has
/// narrowed them down (a byte-string `match` compares each pattern in turn, through
/// `memcmp`).
#[inline(always)]
pub fn holds_at(bytes: &[u8], at: usize, word: &[u8; 4]) -> bool {
    let held: Option<[u8; 4]> = bytes.get(at..at + 4).and_then(|w| w.try_into().ok());
    held.is_some_and(|w| u32::from_le_bytes(w) == u32::from_le_bytes(*word))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Short one-byte text (Latin-1, and the same as UTF-8) of every length around the
        // word size and the short-text bound, its bytes mostly plain and now and then one
        // JSON escapes, anywhere.
        #[test]
        fn latin1_json_length_is_json_text_length(
            bytes in proptest::collection::vec(
                prop_oneof![6 => 0x20u8..0x7f, 1 => any::<u8>(), 1 => prop_oneof![Just(b'"'), Just(b'\\'), 0u8..0x20]],
                0..80,
            ),
        ) {
            let text: String = bytes.iter().map(|&b| char::from(b)).collect();
            prop_assert_eq!(Text::Latin1(&bytes).json_len(), json_len_reference(&text));
            prop_assert_eq!(Text::Utf8(&text).json_len(), json_len_reference(&text));
        }

        // Pairs that share a prefix of any length, so every word and tail position decides.
        #[test]
        fn byte_order_is_the_slices_order(
            prefix in proptest::collection::vec(any::<u8>(), 0..40),
            a in proptest::collection::vec(any::<u8>(), 0..12),
            b in proptest::collection::vec(any::<u8>(), 0..12),
        ) {
            let (a, b) = ([prefix.as_slice(), &a].concat(), [prefix.as_slice(), &b].concat());
            prop_assert_eq!(cmp_bytes(&a, &b), a.cmp(&b));
            prop_assert_eq!(cmp_bytes(&a, &a), std::cmp::Ordering::Equal);
            prop_assert_eq!(Text::Latin1(&a).same_data(&Text::Latin1(&b)), a == b);
        }
    }

    #[test]
    fn same_data_needs_the_same_representation() {
        // "ab" as Latin-1 and U+6261 as UCS-2 hold the same bytes on a little-endian machine.
        let wide = [u16::from_ne_bytes([b'a', b'b'])];
        assert!(!Text::Latin1(b"ab").same_data(&Text::Ucs2(&wide)));
        assert!(Text::Ucs2(&wide).same_data(&Text::Ucs2(&wide)));
        assert!(!Text::Latin1(b"ab").same_data(&Text::Latin1(b"abc")));
    }

    fn json_len_reference(s: &str) -> usize {
        serde_json::to_string(s).map(|j| j.encode_utf16().count()).unwrap_or_default()
    }

    #[test]
    fn utf16_length_counts_astral_twice() {
        assert_eq!(Text::Utf8("a😀").utf16_len(), 3);
        assert_eq!(Text::Ucs4(&[0x61, 0x1F600]).utf16_len(), 3);
        assert_eq!(Text::Ucs2(&[0xD800, 0x61]).utf16_len(), 2);
        // Chunks of 64 bytes, each up to 128 units' worth of counting, and a remainder.
        for n in [1, 15, 16, 17, 40, 100] {
            let s = "😀é—a".repeat(n) + &"😀".repeat(n);
            assert_eq!(Text::Utf8(&s).utf16_len(), s.encode_utf16().count(), "{n}");
        }
    }

    #[test]
    fn json_length_matches_escaping_rules() {
        for s in ["", "plain", "q\"b\\s", "\n\t\r\u{8}\u{c}", "\u{1}\u{1f}", "é😀\u{7f}", "\u{2028}"] {
            assert_eq!(Text::Utf8(s).json_len(), json_len_reference(s), "{s:?}");
        }
        let latin: Vec<u8> = (0u8..=255).collect();
        let as_str: String = latin.iter().map(|&b| char::from(b)).collect();
        assert_eq!(Text::Latin1(&latin).json_len(), json_len_reference(&as_str));
        let wide: Vec<u16> = as_str.encode_utf16().chain("ĀΩ\"".encode_utf16()).collect();
        assert_eq!(Text::Ucs2(&wide).json_len(), json_len_reference(&as_str) + 4);
        // Long and short, with astral code points and escapes, on every representation.
        for n in [1, 63, 64, 200, 1000] {
            let s: String = "a\"😀\u{1}é\\Ω\n".chars().cycle().take(n).collect();
            let ucs4: Vec<u32> = s.chars().map(u32::from).collect();
            assert_eq!(Text::Ucs4(&ucs4).json_len(), json_len_reference(&s), "{n}");
            let ucs2: Vec<u16> = s.chars().filter(|&c| u32::from(c) <= 0xFFFF).map(|c| c as u16).collect();
            let bmp: String = s.chars().filter(|&c| u32::from(c) <= 0xFFFF).collect();
            assert_eq!(Text::Ucs2(&ucs2).json_len(), json_len_reference(&bmp), "{n}");
        }
    }

    #[test]
    fn id_hashes_read_the_whole_id_whatever_its_storage() {
        // Ids that share their ends hash apart (a hash of the last characters let a
        // transcript of such ids pile them into one bucket, each lookup walking all).
        let ids: Vec<String> = (0..2_000).map(|i| format!("call_{i}_SAME_SUFFIX")).collect();
        let hashes: std::collections::HashSet<u64> = ids.iter().map(|id| Text::Utf8(id).id_hash()).collect();
        assert_eq!(hashes.len(), ids.len());
        // Equal texts hash equal in every storage.
        // Distinct texts give distinct hashed bytes: a wide character is not the ASCII
        // bytes of its code point.
        assert_ne!(Text::Ucs2(&[0x100]).id_hash(), Text::Utf8("\0\u{1}\0\0").id_hash());
        for s in ["call_1", "é-call", "Ω😀"] {
            let points: Vec<u32> = s.chars().map(u32::from).collect();
            let expected = Text::Utf8(s).id_hash();
            assert_eq!(Text::Ucs4(&points).id_hash(), expected, "{s:?}");
            if points.iter().all(|&c| c <= 0xFFFF) {
                let wide: Vec<u16> = points.iter().map(|&c| c as u16).collect();
                assert_eq!(Text::Ucs2(&wide).id_hash(), expected, "{s:?}");
            }
            if points.iter().all(|&c| c <= 0xFF) {
                let narrow: Vec<u8> = points.iter().map(|&c| c as u8).collect();
                assert_eq!(Text::Latin1(&narrow).id_hash(), expected, "{s:?}");
            }
        }
    }

    #[test]
    fn lone_surrogates_are_escaped_and_pairs_are_not() {
        assert_eq!(Text::Ucs2(&[0xD83D]).json_len(), 2 + 6);
        assert_eq!(Text::Ucs2(&[0xDE00, 0x61]).json_len(), 2 + 6 + 1);
        assert_eq!(Text::Ucs2(&[0xD83D, 0xDE00]).json_len(), 2 + 2);
        assert_eq!(Text::Ucs4(&[0xD83D, 0xDE00, 0x1F600, 0xD800]).json_len(), 2 + 2 + 2 + 6);
        // A surrogate deep in a long string sends it down the pairing path.
        let mut long = vec![0x61u16; 300];
        long[150] = 0xD800;
        assert_eq!(Text::Ucs2(&long).json_len(), 2 + 299 + 6);
        let mut long = vec![0x1F600u32; 300];
        long[299] = 0xDC00;
        assert_eq!(Text::Ucs4(&long).json_len(), 2 + 2 * 299 + 6);
    }

    fn written(text: Text<'_>) -> String {
        let mut out = String::new();
        text.write_json(&mut out);
        assert_eq!(out.encode_utf16().count(), text.json_len(), "{out:?}");
        out
    }

    #[test]
    fn written_json_escapes_as_javascript_does() {
        for s in ["", "plain", "q\"b\\s", "\n\t\r\u{8}\u{c}", "\u{1}\u{1f}", "é😀\u{7f}", "\u{2028}"] {
            assert_eq!(written(Text::Utf8(s)), serde_json::to_string(s).unwrap(), "{s:?}");
        }
        assert_eq!(written(Text::Latin1(b"caf\xe9\x01")), "\"café\\u0001\"");
        assert_eq!(written(Text::Ucs2(&[0xD83D, 0xDE00, 0xD83D, 0x61, 0xDE00])), "\"😀\\ud83da\\ude00\"");
        assert_eq!(written(Text::Ucs4(&[0x1F600, 0xDBFF])), "\"😀\\udbff\"");
    }

    fn snippet<'a>(parts: impl IntoIterator<Item = Text<'a>>, max_units: usize) -> String {
        let mut out = String::from("> ");
        let mut snippet = Snippet::new(&mut out, max_units);
        for part in parts {
            snippet.push(part);
        }
        out.split_off(2)
    }

    #[test]
    fn snippet_collapses_whitespace_and_marks_the_cut() {
        assert_eq!(snippet([Text::Utf8("  a \n\t b  ")], 80), "a b");
        assert_eq!(snippet([Text::Utf8("one"), Text::Utf8("two")], 80), "one two");
        assert_eq!(snippet([Text::Utf8("abcdef")], 3), "abc…");
        assert_eq!(snippet([Text::Utf8("ab😀")], 3), "ab…");
        assert_eq!(snippet([Text::Ucs2(&[0xD800, 0x61])], 80), "\u{FFFD}a");
        assert_eq!(snippet([Text::Utf8("\u{FEFF}x\u{1c}")], 80), "x\u{1c}");
        assert_eq!(snippet([Text::Latin1(b"  caf\xe9 \xa0 x")], 80), "café x");
        assert_eq!(snippet([Text::Ucs2(&[0xD83D, 0xDE00, 0x20, 0x61])], 3), "😀…");
        assert_eq!(snippet([Text::Ucs4(&[0x1F600, 0xD83D, 0xDE00])], 80), "😀😀");
        assert_eq!(snippet([Text::Utf8("")], 80), "");
    }

    proptest! {
        /// One-byte parts (Latin-1, and the same characters as UTF-8), whose runs of
        /// printable ASCII are appended at once, give what feeding their characters one
        /// by one gives: the cut, the spaces, the mark.
        #[test]
        fn a_one_byte_snippet_is_its_characters_snippet(
            parts in prop::collection::vec(
                prop::collection::vec(prop::sample::select(b"ab  Z~!\t\n\x0b\x1c\x85\xa0\xe9\x00".to_vec()), 0..40),
                0..4,
            ),
            max_units in 0usize..50,
        ) {
            let by_chars = {
                let mut out = String::from("> ");
                let mut snippet = Snippet::new(&mut out, max_units);
                for part in &parts {
                    snippet.push_chars(part.iter().map(|&c| char::from(c)));
                }
                out
            };
            let utf8: Vec<String> = parts.iter().map(|p| p.iter().map(|&c| char::from(c)).collect()).collect();
            prop_assert_eq!(snippet(parts.iter().map(|p| Text::Latin1(p)), max_units), by_chars.split_at(2).1);
            prop_assert_eq!(snippet(utf8.iter().map(|p| Text::Utf8(p)), max_units), by_chars.split_at(2).1);
        }
    }
}
