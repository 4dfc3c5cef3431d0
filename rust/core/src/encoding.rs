//! Exact token counts for OpenAI's `o200k_base` and `cl100k_base` encodings.
//!
//! A count equals `len(tiktoken.get_encoding(name).encode(text, disallowed_special=()))`:
//! the text is split by the encoding's pre-tokenisation pattern and every piece is
//! byte-pair encoded. The vocabularies are those of the `bpe-openai` crate (MIT; nothing is
//! downloaded at build or run time), whose backtracking encoder (the `bpe` crate) counts a
//! piece without building its tokens.
//!
//! The split patterns are tiktoken's own, not `bpe-openai`'s: that crate puts `\s+$`
//! after `\s*[\r\n]+` for cl100k, where tiktoken tries it first, so `"x \n "` splits into
//! different pieces. `regex-automata` has no look-around; like `bpe-openai`, the pattern
//! `\s+(?!\S)` is written as a separate pattern `\s+\s` whose last character is given back
//! after the match (leftmost-first order across the patterns keeps tiktoken's priority;
//! `\s+$`, tried before it, covers a run that reaches the end of the text).
//!
//! Text that is not valid UTF-8 (a Python `str` holding surrogate code points) is read as
//! tiktoken reads it: as UTF-16, a high surrogate followed by a low one making one
//! character and a lone surrogate becoming U+FFFD.
//!
//! Performance notes: Latin-1 text that is pure ASCII and UTF-8 text are counted in
//! place; other text is transcoded into a caller's reusable buffer. Each vocabulary is
//! embedded as `bpe-openai` prebuilds it less the two automata counting never reads,
//! deflated (build.rs says how, and how the build checks it): 8.3 MB for o200k and 3.9 MB
//! for cl100k, where `bpe-openai` embeds 32 and 15 MB, so the extension is 15 MB, not 50.
//! It is inflated and deserialised on first use of its encoding: `import contextfold` and
//! a first o200k count take about 100 ms in a fresh process (60 ms with the whole
//! vocabulary deserialised in place, 240 ms for tiktoken with its file cached); counting
//! itself reads the same structures as before. Zstandard would save about 1 MB more, for
//! a second compression crate. Most pieces are words that recur, so each thread keeps
//! the counts of recent short pieces in a small direct-mapped table (`PieceCache`): a
//! hit costs a multiply and a compare, where the encoder walks its automaton and
//! allocates. A hash set of the vocabulary's tokens (tiktoken's own shortcut) was tried
//! in its place and was no faster: its 200,000 entries miss the CPU caches.

use crate::count_cache;
use crate::error::CoreError;
use crate::json::{write_json_with, AsText, JsonNode, Visitor};
use crate::message::Checked;
use crate::provider::{Opaque, Sizing};
use crate::text::Text;
use crate::tokens::{MessageSizer, MESSAGE_OVERHEAD};
use bpe::byte_pair_encoding::BytePairEncoding;
use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};
use std::cell::RefCell;
use std::io::Read;
use std::sync::LazyLock;

/// An OpenAI encoding whose vocabulary is embedded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, o-series, GPT-5.
    O200kBase,
    /// GPT-4, GPT-3.5-turbo, text-embedding-3.
    Cl100kBase,
}

/// Encoding names, as tiktoken spells them.
pub const ENCODING_NAMES: [&str; 2] = ["o200k_base", "cl100k_base"];

/// A pre-tokenisation pattern split into the parts `regex-automata` runs as one
/// multi-pattern regex; `true` marks a part whose last matched character is look-ahead.
type Patterns = &'static [(&'static str, bool)];

const O200K_PATTERNS: Patterns = &[
    (
        concat!(
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"|\p{N}{1,3}",
            r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
            r"|\s*[\r\n]+",
            r"|\s+$",
        ),
        false,
    ),
    (r"\s+\s", true),
    (r"\s+", false),
];

// tiktoken's possessive quantifiers (`?+`, `++`, `*+`) match what the greedy ones match
// here: no later part of their alternative could use what they would give back.
const CL100K_PATTERNS: Patterns = &[
    (
        concat!(
            r"'(?i:[sdmt]|ll|ve|re)",
            r"|[^\r\n\p{L}\p{N}]?\p{L}+",
            r"|\p{N}{1,3}",
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*",
            r"|\s+$",
            r"|\s*[\r\n]",
        ),
        false,
    ),
    (r"\s+\s", true),
    (r"\s", false),
];

/// Slots of a [`PieceCache`] (a power of two): 96 KiB, within a core's L2 cache.
const PIECE_SLOTS: usize = 4096;

/// Pieces longer than this skip the cache (a key holds the bytes and the length).
const MAX_CACHED_PIECE: usize = 15;

/// The counts of recently seen short pieces.
struct PieceCache {
    /// `(key, count)`: the piece's bytes zero-padded with its length in the last byte,
    /// so the all-zero key of an empty slot matches no piece.
    slots: Box<[([u64; 2], u32)]>,
}

impl PieceCache {
    fn new() -> Self {
        Self { slots: vec![([0, 0], 0); PIECE_SLOTS].into_boxed_slice() }
    }

    /// The piece's count, computed by `count` on a miss.
    fn count(&mut self, piece: &[u8], count: impl FnOnce(&[u8]) -> usize) -> usize {
        let mut key = [0u8; 16];
        let (Some(head), Some(last)) = (key.get_mut(..piece.len()), u8::try_from(piece.len()).ok()) else {
            return count(piece);
        };
        if piece.len() > MAX_CACHED_PIECE {
            return count(piece);
        }
        head.copy_from_slice(piece);
        if let Some(length) = key.last_mut() {
            *length = last;
        }
        let (low, high) = key.split_at(8);
        let key = [
            u64::from_le_bytes(low.try_into().unwrap_or_default()),
            u64::from_le_bytes(high.try_into().unwrap_or_default()),
        ];
        let hash = (key[0] ^ key[1].rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let Some(slot) = self.slots.get_mut((hash >> 52) as usize & (PIECE_SLOTS - 1)) else {
            return count(piece);
        };
        if slot.0 == key {
            return slot.1 as usize;
        }
        let n = count(piece);
        *slot = (key, u32::try_from(n).unwrap_or(u32::MAX));
        n
    }
}

/// What counting with one encoding keeps per thread: the piece counts, and the split
/// regex's search state (which `Regex::find` would otherwise take from a pool shared by
/// all threads on every piece).
struct Scratch {
    pieces: PieceCache,
    split: Option<regex_automata::meta::Cache>,
}

impl Scratch {
    fn new(tokenizer: &Tokenizer) -> Self {
        Self { pieces: PieceCache::new(), split: tokenizer.split.as_ref().map(Regex::create_cache) }
    }
}

thread_local! {
    static SCRATCH: RefCell<[Option<Scratch>; 2]> = const { RefCell::new([None, None]) };
}

/// An encoding's vocabulary and split pattern, built on first use.
struct Tokenizer {
    /// `None` only if the embedded vocabulary failed to load, which a test rules out.
    bpe: Option<BytePairEncoding>,
    /// `None` only if the pattern failed to compile, which a test rules out.
    split: Option<Regex>,
    lookahead: Vec<bool>,
}

impl Tokenizer {
    fn new(deflated: &[u8], patterns: Patterns) -> Self {
        let (sources, lookahead): (Vec<&str>, Vec<bool>) = patterns.iter().copied().unzip();
        Self { bpe: inflate(deflated), split: Regex::new_many(&sources).ok(), lookahead }
    }

    fn count(&self, text: &str, scratch: &mut Scratch) -> usize {
        let (Some(bpe), Some(split), Some(search)) = (&self.bpe, &self.split, &mut scratch.split) else { return 0 };
        let cache = &mut scratch.pieces;
        let mut count = 0;
        let mut start = 0;
        while let Some(rest) = text.get(start..) {
            let Some(found) = split.search_with(search, &Input::new(rest).anchored(Anchored::Yes)) else { break };
            let mut end = start + found.end();
            if self.lookahead.get(found.pattern().as_usize()).copied().unwrap_or(false) {
                // Give back the look-ahead character; `\s+\s` keeps at least one.
                end -= rest.get(..found.end()).and_then(|m| m.chars().next_back()).map_or(0, char::len_utf8);
            }
            if end == start {
                break; // no pattern matches an empty piece, so this is unreachable
            }
            count += text.get(start..end).map_or(0, |piece| cache.count(piece.as_bytes(), |p| bpe.count(p)));
            start = end;
        }
        count
    }
}

/// An encoder that build.rs serialised and deflated.
fn inflate(deflated: &[u8]) -> Option<BytePairEncoding> {
    let mut serialised = Vec::new();
    flate2::read::DeflateDecoder::new(deflated).read_to_end(&mut serialised).ok()?;
    rmp_serde::from_slice(&serialised).ok()
}

static O200K: LazyLock<Tokenizer> = LazyLock::new(|| {
    Tokenizer::new(include_bytes!(concat!(env!("OUT_DIR"), "/o200k_base.bpe.deflate")), O200K_PATTERNS)
});
static CL100K: LazyLock<Tokenizer> = LazyLock::new(|| {
    Tokenizer::new(include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_base.bpe.deflate")), CL100K_PATTERNS)
});

impl Encoding {
    /// The encoding named `name` (`"o200k_base"` or `"cl100k_base"`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "o200k_base" => Some(Encoding::O200kBase),
            "cl100k_base" => Some(Encoding::Cl100kBase),
            _ => None,
        }
    }

    /// The encoding's name, as tiktoken spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }

    fn tokenizer(self) -> &'static Tokenizer {
        match self {
            Encoding::O200kBase => &O200K,
            Encoding::Cl100kBase => &CL100K,
        }
    }

    /// Loads the vocabulary now, so the first count does not pay for it.
    pub fn load(self) {
        LazyLock::force(match self {
            Encoding::O200kBase => &O200K,
            Encoding::Cl100kBase => &CL100K,
        });
    }

    /// Which scratch slot the encoding uses.
    const fn index(self) -> usize {
        match self {
            Encoding::O200kBase => 0,
            Encoding::Cl100kBase => 1,
        }
    }

    /// The count-cache domain of a text: its encoding.
    const fn text_domain(self) -> count_cache::Domain {
        [self.index() as u64, 0]
    }

    /// The count-cache domain of a message's source: apart from every text's, and for a
    /// message sized whole (whose text is another function of it) and for provider sizing
    /// (another text, with each image's cost in the count: its word is that cost).
    fn source_domain(self, sized_whole: bool, sizing: Sizing) -> count_cache::Domain {
        let kind = 2 + 2 * self.index() as u64 + u64::from(sized_whole);
        match sizing {
            Sizing::Seed => [kind, 0],
            Sizing::Provider { image_tokens } => [kind | 1 << 8, image_tokens],
        }
    }

    /// Tokens in a Rust string, remembered by the process's [`count_cache`].
    pub fn count_str(self, text: &str) -> usize {
        count_cache::GLOBAL.count(self.text_domain(), text, |text| self.count_uncached(text))
    }

    /// Tokens in a Rust string, counted by the encoder.
    pub fn count_uncached(self, text: &str) -> usize {
        let slot = self.index();
        let tokenizer = self.tokenizer();
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => match scratch.get_mut(slot) {
                Some(mine) => tokenizer.count(text, mine.get_or_insert_with(|| Scratch::new(tokenizer))),
                None => tokenizer.count(text, &mut Scratch::new(tokenizer)),
            },
            Err(_) => tokenizer.count(text, &mut Scratch::new(tokenizer)),
        })
    }

    /// Tokens in `text`, transcoding it into `buffer` when it is not UTF-8 already.
    pub fn count(self, text: Text<'_>, buffer: &mut String) -> usize {
        Self::as_utf8(text, buffer, |s| self.count_str(s))
    }

    /// `count` of `text` as UTF-8, transcoded into `buffer` when it is not already.
    fn as_utf8(text: Text<'_>, buffer: &mut String, count: impl FnOnce(&str) -> usize) -> usize {
        match text {
            Text::Utf8(s) => count(s),
            Text::Latin1(bytes) if bytes.is_ascii() => std::str::from_utf8(bytes).map_or(0, count),
            _ => {
                buffer.clear();
                text.push_lossy(buffer);
                count(buffer)
            }
        }
    }
}

/// A checked message's text as SPEC §3 has an estimator read it: its content (a string as
/// is, anything else as compact JSON, `None` as `""`), then the compact JSON of its
/// `tool_calls` when that is a list. A lone string content is borrowed; anything else is
/// written into `buffer`.
///
/// # Errors
/// When content or tool_calls hold a value with no JSON form or nest too deep.
pub fn message_text<'a, N: JsonNode>(
    message: &N,
    checked: &'a Checked<N>,
    buffer: &'a mut String,
) -> Result<Text<'a>, CoreError> {
    message_text_with(message, checked, buffer, &mut AsText)
}

/// [`message_text`], its JSON written as `visitor` says (provider sizing: [`Opaque`]).
///
/// # Errors
/// As [`message_text`].
pub fn message_text_with<'a, N: JsonNode, V: Visitor<N>>(
    message: &N,
    checked: &'a Checked<N>,
    buffer: &'a mut String,
    visitor: &mut V,
) -> Result<Text<'a>, CoreError> {
    if checked.item.sized_whole() {
        // A Responses item other than a message: its whole compact JSON.
        buffer.clear();
        write_json_with(message, buffer, visitor).map_err(|p| CoreError::field(None, "", p))?;
        return Ok(Text::Utf8(buffer));
    }
    let content = checked.content.as_ref();
    if checked.tool_calls.is_none() {
        if let Some(text) = content.and_then(JsonNode::as_text) {
            return Ok(text);
        }
    }
    buffer.clear();
    match content {
        None => buffer.push_str("\"\""),
        Some(content) => match content.as_text() {
            // Lone surrogates become U+FFFD here, as when the whole text is read as UTF-16:
            // the JSON that follows opens with `[`, never a low surrogate.
            Some(text) => text.push_lossy(buffer),
            None => write_json_with(content, buffer, visitor).map_err(|p| CoreError::field(None, "content", p))?,
        },
    }
    if let Some(calls) = &checked.tool_calls {
        write_json_with(calls, buffer, visitor).map_err(|p| CoreError::field(None, "tool_calls", p))?;
    }
    Ok(Text::Utf8(buffer))
}

/// Sizes messages by an encoding's exact count: a message costs the count of its
/// [`message_text`] plus [`MESSAGE_OVERHEAD`]. With provider sizing the text is the one
/// chars/4 would measure (opaque blocks and left-out entries written as nothing) and each
/// opaque block adds its flat cost.
#[derive(Debug, Clone)]
pub struct ExactTokens {
    pub encoding: Encoding,
    pub sizing: Sizing,
    /// A message's text, when it has to be built.
    pub text: String,
    /// A text transcoded to UTF-8.
    pub transcoded: String,
}

impl ExactTokens {
    /// A sizer counting with `encoding`, reading messages as `sizing` says.
    pub fn new(encoding: Encoding, sizing: Sizing) -> Self {
        Self { encoding, sizing, text: String::new(), transcoded: String::new() }
    }

    /// What `message` costs without the overhead: its text counted by `count(encoding,
    /// text, transcoding buffer)`, plus its opaque blocks' flat cost.
    ///
    /// # Errors
    /// As [`message_text`].
    pub fn counted<N: JsonNode>(
        &mut self,
        message: &N,
        checked: &Checked<N>,
        count: impl FnOnce(Encoding, Text<'_>, &mut String) -> usize,
    ) -> Result<u64, CoreError> {
        let Self { encoding, sizing, text, transcoded } = self;
        let Sizing::Provider { image_tokens } = *sizing else {
            return Ok(count(*encoding, message_text(message, checked, text)?, transcoded) as u64);
        };
        let mut opaque = Opaque::default();
        let counted = count(*encoding, message_text_with(message, checked, text, &mut opaque)?, transcoded) as u64;
        Ok(opaque.billed(counted, image_tokens))
    }
}

impl<N: JsonNode> MessageSizer<N> for ExactTokens {
    fn message_tokens(&mut self, _index: Option<usize>, message: &N, checked: &Checked<N>) -> Result<u64, CoreError> {
        let count = match message.source() {
            // The text is a function of the message, of whether it is sized whole and of
            // the sizing, so the message's source stands for it: a hit neither decodes nor
            // builds it.
            Some(source) => {
                let domain = self.encoding.source_domain(checked.item.sized_whole(), self.sizing);
                let remembered = count_cache::GLOBAL.remembered(domain, source, || {
                    let count = |encoding: Encoding, text: Text<'_>, transcoded: &mut String| {
                        Encoding::as_utf8(text, transcoded, |s| encoding.count_uncached(s))
                    };
                    self.counted(message, checked, count).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                })?;
                remembered as u64
            }
            None => self.counted(message, checked, |encoding, text, transcoded| encoding.count(text, transcoded))?,
        };
        Ok(count.saturating_add(MESSAGE_OVERHEAD))
    }

    fn system_tokens(&mut self, checked: &Checked<N>) -> Result<u64, CoreError> {
        // A system prompt is a message, never sized whole, so only its content is read.
        let Some(content) = checked.content.as_ref() else {
            return Err(CoreError::Internal("a system prompt sized without content"));
        };
        let count = self.counted(content, checked, |encoding, text, transcoded| encoding.count(text, transcoded))?;
        Ok(count.saturating_add(MESSAGE_OVERHEAD))
    }

    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
        Ok(self.encoding.count_str(text) as u64)
    }

    fn splits_before_dash_lines(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_compile_and_vocabularies_load() {
        assert!(O200K.split.is_some());
        assert!(CL100K.split.is_some());
        assert_eq!(O200K.bpe.as_ref().map(BytePairEncoding::num_tokens), Some(199_998));
        assert_eq!(CL100K.bpe.as_ref().map(BytePairEncoding::num_tokens), Some(100_256));
    }

    #[test]
    fn known_counts() {
        // Values from tiktoken 0.14.
        let o200k = Encoding::O200kBase;
        let cl100k = Encoding::Cl100kBase;
        assert_eq!(o200k.count_str(""), 0);
        assert_eq!(o200k.count_str("hello world"), 2);
        assert_eq!(cl100k.count_str("hello world"), 2);
        assert_eq!(cl100k.count_str("<|endoftext|>"), 7);
    }

    #[test]
    fn surrogates_read_as_utf16() {
        let mut buffer = String::new();
        let enc = Encoding::O200kBase;
        let pair = enc.count(Text::Ucs2(&[0xD83D, 0xDE00]), &mut buffer);
        assert_eq!(pair, enc.count_str("😀"));
        let lone = enc.count(Text::Ucs4(&[0x61, 0xD800, 0x62]), &mut buffer);
        assert_eq!(lone, enc.count_str("a\u{FFFD}b"));
        assert_eq!(enc.count(Text::Latin1(b"caf\xe9"), &mut buffer), enc.count_str("café"));
    }

    fn message_cost(message: &serde_json::Value) -> Result<u64, CoreError> {
        let checked = crate::message::check_message(&message)?;
        ExactTokens::new(Encoding::O200kBase, Sizing::Seed).message_tokens(None, &message, &checked)
    }

    #[test]
    fn a_message_costs_its_text_plus_overhead() {
        use serde_json::json;
        let enc = Encoding::O200kBase;
        assert_eq!(message_cost(&json!({"role": "user", "content": "hello world"})), Ok(2 + 4));
        assert_eq!(message_cost(&json!({"role": "user"})), Ok(enc.count_str("\"\"") as u64 + 4));
        let calls = json!({"role": "assistant", "content": "done.", "tool_calls": [{"id": "c1", "n": 1.0}]});
        let text = "done.[{\"id\":\"c1\",\"n\":1}]";
        assert_eq!(message_cost(&calls), Ok(enc.count_str(text) as u64 + 4));
        let parts = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
        assert_eq!(message_cost(&parts), Ok(enc.count_str("[{\"type\":\"text\",\"text\":\"hi\"}]") as u64 + 4));
    }
}
