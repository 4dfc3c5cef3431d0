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

/// Escape extras of units known to hold no surrogate. Short runs use a table; long runs
/// go through chunks small enough for 8-bit counters, so the comparisons vectorise.
fn escape_extra_no_surrogates<T: Copy + Into<u32>>(units: &[T]) -> usize {
    if units.len() < SHORT {
        return units
            .iter()
            .map(|&u| {
                let c: u32 = u.into();
                ESCAPE_EXTRA.get(c as usize).map_or(0, |&e| usize::from(e))
            })
            .sum();
    }
    let mut total = 0usize;
    for chunk in units.chunks(128) {
        let mut special: u8 = 0;
        let mut long_control: u8 = 0;
        for &unit in chunk {
            let c: u32 = unit.into();
            let control = c < 0x20;
            special += u8::from(control | (c == 0x22) | (c == 0x5c));
            long_control += u8::from(control & !matches!(c, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d));
        }
        total += usize::from(special) + 4 * usize::from(long_control);
    }
    total
}

/// Whether UCS-2 units hold a surrogate, without an early exit (so the loop vectorises).
fn has_surrogate(units: &[u16]) -> bool {
    units.iter().fold(false, |seen, &c| seen | ((c & 0xF800) == 0xD800))
}

impl Text<'_> {
    /// Length in UTF-16 code units: one per code point, two above U+FFFF.
    pub fn utf16_len(&self) -> usize {
        match *self {
            Text::Latin1(b) => b.len(),
            Text::Ucs2(u) => u.len(),
            Text::Ucs4(u) => u.len() + u.iter().filter(|&&c| c > 0xFFFF).count(),
            Text::Utf8(s) => s.encode_utf16().count(),
        }
    }

    /// Length of the string as JSON text (quotes included), as `JSON.stringify` writes it:
    /// non-ASCII kept, `"` `\` and control characters escaped, lone surrogates as `\udxxx`.
    pub fn json_len(&self) -> usize {
        let body = match *self {
            Text::Latin1(b) => b.len() + escape_extra_no_surrogates(b),
            Text::Ucs2(u) => {
                if has_surrogate(u) {
                    let (units, extra) = measure_code_points(u.iter().map(|&c| u32::from(c)));
                    units + extra
                } else {
                    u.len() + escape_extra_no_surrogates(u)
                }
            }
            Text::Ucs4(u) => {
                let (units, extra) = measure_code_points(u.iter().copied());
                units + extra
            }
            Text::Utf8(s) => {
                let (units, extra) = measure_code_points(s.chars().map(u32::from));
                units + extra
            }
        };
        body + 2
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
    pub fn cmp_code_points(&self, other: &Text<'_>) -> std::cmp::Ordering {
        match (self, other) {
            (Text::Latin1(a), Text::Latin1(b)) => a.cmp(b),
            (Text::Ucs2(a), Text::Ucs2(b)) => a.cmp(b),
            (Text::Ucs4(a), Text::Ucs4(b)) => a.cmp(b),
            (Text::Utf8(a), Text::Utf8(b)) => a.cmp(b),
            _ => self.code_points().cmp(other.code_points()),
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
        match *self {
            Text::Latin1(b) => b.iter().map(|&c| char::from(c)).collect(),
            Text::Utf8(s) => s.to_owned(),
            _ => char::decode_utf16(self.utf16_units()).map(|r| r.unwrap_or('\u{FFFD}')).collect(),
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

/// Shortens text for a one-line summary: whitespace runs (JavaScript's set) become one
/// space, the ends are trimmed, and the result holds at most `max_units` UTF-16 units,
/// followed by `…` when text was left out. Parts are read as if joined by a space; a cut
/// never splits a surrogate pair, and unpaired surrogates read as U+FFFD.
pub fn snippet<'a>(parts: impl IntoIterator<Item = Text<'a>>, max_units: usize) -> String {
    let mut out = String::new();
    let mut used = 0usize;
    let mut pending_space = false;
    for part in parts {
        pending_space |= !out.is_empty();
        for decoded in char::decode_utf16(part.utf16_units()) {
            let c = decoded.unwrap_or('\u{FFFD}');
            if is_js_space(c) {
                pending_space |= !out.is_empty();
                continue;
            }
            let need = usize::from(pending_space) + c.len_utf16();
            if used + need > max_units {
                out.push('…');
                return out;
            }
            if pending_space {
                out.push(' ');
                pending_space = false;
            }
            out.push(c);
            used += need;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_len_reference(s: &str) -> usize {
        serde_json::to_string(s).map(|j| j.encode_utf16().count()).unwrap_or_default()
    }

    #[test]
    fn utf16_length_counts_astral_twice() {
        assert_eq!(Text::Utf8("a😀").utf16_len(), 3);
        assert_eq!(Text::Ucs4(&[0x61, 0x1F600]).utf16_len(), 3);
        assert_eq!(Text::Ucs2(&[0xD800, 0x61]).utf16_len(), 2);
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
    }

    #[test]
    fn lone_surrogates_are_escaped_and_pairs_are_not() {
        assert_eq!(Text::Ucs2(&[0xD83D]).json_len(), 2 + 6);
        assert_eq!(Text::Ucs2(&[0xDE00, 0x61]).json_len(), 2 + 6 + 1);
        assert_eq!(Text::Ucs2(&[0xD83D, 0xDE00]).json_len(), 2 + 2);
        assert_eq!(Text::Ucs4(&[0xD83D, 0xDE00, 0x1F600, 0xD800]).json_len(), 2 + 2 + 2 + 6);
    }

    #[test]
    fn snippet_collapses_whitespace_and_marks_the_cut() {
        assert_eq!(snippet([Text::Utf8("  a \n\t b  ")], 80), "a b");
        assert_eq!(snippet([Text::Utf8("one"), Text::Utf8("two")], 80), "one two");
        assert_eq!(snippet([Text::Utf8("abcdef")], 3), "abc…");
        assert_eq!(snippet([Text::Utf8("ab😀")], 3), "ab…");
        assert_eq!(snippet([Text::Ucs2(&[0xD800, 0x61])], 80), "\u{FFFD}a");
        assert_eq!(snippet([Text::Utf8("\u{FEFF}x\u{1c}")], 80), "x\u{1c}");
    }
}
