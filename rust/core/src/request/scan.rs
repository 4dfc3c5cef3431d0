//! One pass over a JSON text into a [`Tape`]: the values in preorder, strings borrowed
//! from the input when they hold no escape, decoded once when they do.
//!
//! The grammar is what Python's `json.loads` accepts (so a body packs exactly when the
//! object path can load it): RFC 8259 plus `NaN`, `Infinity` and `-Infinity`, duplicate
//! keys (the last one wins), integers of at most as many digits as Python converts at the
//! call ([`IntDigits`]). The input must be UTF-8 (a leading byte-order mark is skipped, as
//! `json.loads` skips it in bytes).
//!
//! While scanning, the scanner notes where the request's `messages` array (or a
//! Responses request's `input` array) and each of its items lie in the input, so a
//! packed body can be spliced from the input's bytes.
//!
//! Performance notes: the string scan works simdjson's way: bitmasks of `"`, `\` and
//! the rare bytes (control bytes and bytes above 0x7F, one signed compare; told apart
//! only in a block that holds one) a 64-byte block, the escaped bytes found from the
//! backslash mask without a branch, and the escapes counted by popcount, so the escapes
//! of a long tool output (a `\n` every line) cost no step of their own. Two versions
//! were dropped: a search for the next special byte from each escape (32-byte compares
//! behind run-time dispatch: the call dominated), and a step a special byte within a
//! block mask (a mispredicted branch an escape, and tool outputs escape every line).
//! Escape codes are classified (valid, `/`, `u`) only in a block holding a code other
//! than `n`, `\\` or `"`: classifying every block with an escape took a fifth of the scan
//! of the corpus bodies. The `n` bytes are masked only in a block with a code other than
//! `\\` or `"`. A string without an escape is never copied. Containers are walked with an
//! explicit stack: no recursion.
//!
//! Blocks are aligned to the input and their masks kept for the next string in the same
//! block (keys and roles are short: the corpus holds a string every 92 bytes), and
//! masked where they lie (copying each into a buffer first stalled the loads on store
//! forwarding). The whole scan is compiled twice, portable (SSE2) and for AVX2 with
//! POPCNT and BMI1, picked once a parse: with the mask builders behind a per-block call
//! to an AVX2 function, and popcounts done with bit tricks (POPCNT is not in the x86_64
//! baseline), packing a body took 37% longer (`multiversion` was not used: its
//! dispatch is per call). Escape codes are checked by two nibble lookups a half-block, not nine compares.
//! A string that closes in its first block with no backslash, control byte or byte
//! above 0x7F before its quote (most keys, roles and part types) is read from that
//! block's masks alone, without the escape arithmetic (with the `n` mask made only where
//! it is wanted, 8% fewer instructions a `pack_request` on the corpus bodies). A string
//! longer than its block keeps the masks of its later blocks in registers, and leaves
//! them for the strings after it only when it ends (16% fewer instructions a scan).
//!
//! Every JSON style at the same speed: a `\uXXXX` escape (`json.dumps` writes one for each
//! non-ASCII character) is measured from its four digits, read by table; only a surrogate
//! looks at the escape after it for its pair. Whitespace between tokens costs one test
//! when there is none (compact), two for a lone space (`", "`, `": "`), and a 16-byte
//! compare a step for a longer run (`indent=2`).
//!
//! UTF-8 is checked where it can fail: a text the scan accepts holds bytes above 0x7F
//! only inside strings, so only the strings that hold such a byte are validated
//! (from their first such byte to their last), and only a refused text is validated
//! whole, so its first error is reported as before. A pure-ASCII string (most of them)
//! is marked so on its slot, and its UTF-16 length is its byte length. Repeated keys are
//! looked for only in an object where two keys share a bit of a 64-bit set (of length
//! and last byte). A note line decodes an escaped string only as far as it shows it
//! ([`JsonNode::push_to`](crate::json::JsonNode::push_to)). Each of these steps paid on
//! `pack_request` over the corpus bodies, the AVX2-compiled scan most
//! (benches/bench_request.py measures the whole). `simdutf8` was not needed: the
//! validation left covers about 1% of the corpus's bytes.

use crate::error::MAX_DEPTH;

/// A string that holds escapes: where it lies in the input, and its text once decoded.
#[derive(Debug)]
pub struct Escaped {
    pub(super) start: usize,
    pub(super) end: usize,
    /// Input bytes the escapes take beyond the UTF-16 units they stand for, so the
    /// string's UTF-16 length is known without decoding it.
    pub(super) saved: usize,
    /// Input bytes the escapes take beyond what `JSON.stringify` writes for them, so the
    /// string's JSON length is known without decoding it.
    pub(super) json_saved: usize,
    /// All its input bytes are ASCII (its UTF-16 length is its byte length less `saved`).
    pub(super) ascii: bool,
    pub(super) text: std::cell::OnceCell<Decoded>,
}

/// An escaped string's text.
#[derive(Debug)]
pub enum Decoded {
    Utf8(String),
    /// The string holds a lone surrogate (`"\ud800"`), which UTF-8 cannot.
    Wide(Vec<u16>),
}

/// One value on the tape.
#[derive(Debug, Clone, Copy)]
pub enum Slot {
    Null,
    Bool(bool),
    /// An integer that fits an i64 (Python's `int`).
    Int(i64),
    /// A fraction or exponent, or an integer beyond i64 (as a double, as JavaScript holds
    /// it; too large for one is infinite).
    Float {
        value: f64,
        int: bool,
    },
    /// A string without escapes: `input[start..end]`; `ascii` when all its bytes are.
    Str {
        start: usize,
        end: usize,
        ascii: bool,
    },
    /// A string with escapes: `escaped[id]`.
    Escaped {
        id: usize,
    },
    /// `len` items; the subtree ends before slot `end`.
    Array {
        len: usize,
        end: usize,
    },
    /// `len` entries (key, value, key, value…); `duplicates` when a key repeats.
    Object {
        len: usize,
        end: usize,
        duplicates: bool,
    },
}

/// Byte positions of the array whose items are the messages.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// The `[` and the `]`.
    pub open: usize,
    pub close: usize,
    /// Each item's first byte and one past its last.
    pub items: Vec<(usize, usize)>,
}

/// A parsed JSON text. Dropped, it leaves its buffers to the next parse on its thread
/// (`spare`).
#[derive(Debug)]
pub struct Tape<'a> {
    /// The input; the bodies of its strings are UTF-8 (see [`Tape::str_at`]).
    pub(super) input: &'a [u8],
    pub(super) slots: Vec<Slot>,
    pub(super) escaped: Vec<Escaped>,
    /// The last `messages` member of a root object (slot), or the root array.
    pub(super) messages: Option<usize>,
    /// The last `system` member of a root object (slot).
    pub(super) system: Option<usize>,
    /// The last `input` member of a root object (slot): a Responses request's items.
    pub(super) input_items: Option<usize>,
    /// The last `instructions` member of a root object (slot).
    pub(super) instructions: Option<usize>,
    /// The last `tools` member of a root object (slot).
    pub(super) tools: Option<usize>,
    /// Where the items of the messages array lie (when it is one).
    pub(super) layout: Layout,
    /// Where the items of the `input` array lie (when it is one).
    pub(super) input_layout: Layout,
    /// For each object (slot) in which a key repeats, its entries as `json.loads` keeps
    /// them ([`Tape::repeated_keys`]).
    pub(super) repeated: rustc_hash::FxHashMap<usize, Box<[Option<usize>]>>,
    /// The slot and byte span of each item of the messages (or `input`) array, sorted
    /// by slot; made on first use (see [`Tape::item_source`]).
    pub(super) item_sources: std::cell::OnceCell<Vec<(usize, (usize, usize))>>,
}

impl Tape<'_> {
    /// `input[start..end]` as text, where it is the body of a string the scan read (which
    /// it checked is UTF-8 when it holds a byte above 0x7F: not validating the whole input
    /// up front saves a pass over it).
    #[inline]
    pub(super) fn str_at(&self, start: usize, end: usize) -> &str {
        let body = self.input.get(start..end).unwrap_or_default();
        debug_assert!(std::str::from_utf8(body).is_ok());
        // SAFETY: `start..end` are the bounds of a string's body from a slot or
        // `Escaped`, which `Scanner::string` only records after that check.
        unsafe { std::str::from_utf8_unchecked(body) }
    }

    /// The layout recorded for a tracked array.
    fn layout_of(&mut self, member: Member) -> &mut Layout {
        if member == Member::Input {
            &mut self.input_layout
        } else {
            &mut self.layout
        }
    }
}

/// Why a text is not JSON that `json.loads` would load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanError {
    /// Nothing but whitespace.
    Empty,
    /// Not UTF-8 from byte `offset` on.
    NotUtf8 { offset: usize },
    /// A syntax error at byte `offset`.
    Syntax { offset: usize, expected: &'static str },
    /// Containers nested deeper than [`MAX_DEPTH`], at byte `offset`.
    TooDeep { offset: usize },
    /// An integer of more than `limit` digits ([`IntDigits`]) at byte `offset`.
    LongInteger { offset: usize, limit: usize },
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Empty => f.write_str("not JSON: the body is empty"),
            ScanError::NotUtf8 { offset } => write!(f, "not UTF-8: invalid byte at byte {offset}"),
            ScanError::Syntax { offset, expected } => write!(f, "not JSON: {expected} at byte {offset}"),
            ScanError::LongInteger { offset, limit } => {
                write!(f, "not JSON: an integer of more than {limit} digits at byte {offset}")
            }
            ScanError::TooDeep { offset } => {
                write!(f, "not JSON that can be loaded: nested deeper than {MAX_DEPTH} levels at byte {offset}")
            }
        }
    }
}

/// Which root member a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Messages,
    System,
    Input,
    Instructions,
    Tools,
    Other,
}

struct Frame {
    slot: usize,
    object: bool,
    len: usize,
    /// Items of this array are messages (`Messages`) or Responses items (`Input`): their
    /// spans are recorded.
    tracked: Option<Member>,
    /// First byte of the item being read (tracked arrays).
    item_start: usize,
    /// Key of the member being read (the root object).
    member: Member,
    /// A bit a key read so far (objects), from its length and last byte; all bits once
    /// a key holds an escape. Only an object with two keys on the same bit is checked
    /// for duplicates when it closes (comparing every pair of keys was a twentieth of
    /// packing a body).
    key_bits: u64,
    /// Two keys fell on the same bit.
    maybe_duplicates: bool,
}

/// Whether the scan looks for messages in a root object only, or also takes a root
/// array as the messages themselves (a transcript line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    Request,
    RequestOrTranscript,
}

/// The most digits an integer may have: Python's limit on converting a decimal string to
/// an int (`sys.get_int_max_str_digits()`), which `json.loads` applies at the time it is
/// called. `None`: no limit (the setting 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntDigits(pub Option<usize>);

impl IntDigits {
    /// The fewest digits Python's limit can be set to (`sys.int_info`'s
    /// `str_digits_check_threshold`; 0 is no limit): a text whose integers are no longer
    /// loads the same whatever the setting.
    pub const FEWEST: IntDigits = IntDigits(Some(640));
}

impl Default for IntDigits {
    /// Python's default, 4,300 digits.
    fn default() -> Self {
        IntDigits(Some(4300))
    }
}

/// Parses `input` with at most `int_digits` digits an integer.
///
/// # Errors
/// The first reason, by position, that `json.loads` would refuse the text.
pub fn parse(input: &[u8], root: Root, int_digits: IntDigits) -> Result<Tape<'_>, ScanError> {
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("popcnt")
        && std::arch::is_x86_feature_detected!("bmi1");
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    parse_with(input, root, int_digits, avx2)
}

/// The buffers of a dropped tape, kept for the next parse on the same thread: a gateway
/// packs body after body, and allocating each tape's slots afresh took about 5% of
/// `pack_request` on the corpus bodies (the allocator hands a large block back as each
/// tape is dropped and prepares a fresh one for the next).
mod spare {
    use super::{Escaped, Slot, Tape};
    use std::cell::Cell;

    /// The most bytes a kept buffer may hold: a thread that once parsed a huge body does
    /// not hold on to its tape's memory.
    const MAX_BYTES: usize = 1 << 20;

    thread_local! {
        static SLOTS: Cell<Vec<Slot>> = const { Cell::new(Vec::new()) };
        static ESCAPED: Cell<Vec<Escaped>> = const { Cell::new(Vec::new()) };
    }

    /// An empty slot buffer with room for at least `capacity`.
    pub(super) fn slots(capacity: usize) -> Vec<Slot> {
        let mut slots = SLOTS.try_with(Cell::take).unwrap_or_default();
        slots.reserve(capacity);
        slots
    }

    /// An empty buffer of escaped strings.
    pub(super) fn escaped() -> Vec<Escaped> {
        ESCAPED.try_with(Cell::take).unwrap_or_default()
    }

    /// `buffer`, emptied, kept in `spare` unless it is over the bound (or the thread is
    /// ending).
    fn keep<T: 'static>(spare: &'static std::thread::LocalKey<Cell<Vec<T>>>, mut buffer: Vec<T>) {
        if buffer.capacity() * size_of::<T>() <= MAX_BYTES {
            buffer.clear();
            let _ = spare.try_with(|cell| cell.set(buffer));
        }
    }

    impl Drop for Tape<'_> {
        fn drop(&mut self) {
            keep(&SLOTS, std::mem::take(&mut self.slots));
            keep(&ESCAPED, std::mem::take(&mut self.escaped));
        }
    }
}

/// [`parse`], with AVX2 (and POPCNT and BMI1) used or not: `avx2` only when the CPU has them.
pub(super) fn parse_with(input: &[u8], root: Root, int_digits: IntDigits, avx2: bool) -> Result<Tape<'_>, ScanError> {
    let mut scanner = Scanner {
        int_digits,
        bytes: input,
        pos: usize::from(input.starts_with(b"\xEF\xBB\xBF")) * 3,
        tape: Tape {
            input,
            slots: spare::slots(input.len() / 32 + 8),
            escaped: spare::escaped(),
            messages: None,
            system: None,
            input_items: None,
            instructions: None,
            tools: None,
            layout: Layout::default(),
            input_layout: Layout::default(),
            repeated: rustc_hash::FxHashMap::default(),
            item_sources: std::cell::OnceCell::new(),
        },
        stack: Vec::with_capacity(16),
        root,
        avx2,
        block: Block { at: usize::MAX, masks: Masks::default(), tail: [b' '; 64] },
        item_runs: [0; PREDICTED_DEPTHS],
    };
    // A text the scan accepts is UTF-8: outside strings it took only ASCII, and it checked
    // every string that holds a byte above 0x7F. A text it refuses may hold invalid UTF-8
    // before the reason it stopped, which `json.loads` reports first.
    match scanner.scan() {
        Ok(()) => Ok(scanner.tape),
        Err(err) => Err(match std::str::from_utf8(input) {
            Err(bad) => ScanError::NotUtf8 { offset: bad.valid_up_to() },
            Ok(_) => err,
        }),
    }
}

struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
    tape: Tape<'a>,
    stack: Vec<Frame>,
    root: Root,
    int_digits: IntDigits,
    /// The CPU has AVX2, POPCNT and BMI1 (every AVX2 CPU has the other two).
    avx2: bool,
    /// The last 64-byte block masked, kept for the next string in it.
    block: Block,
    /// By depth: the whitespace run from a newline before the last item that started
    /// there (after `[`, `{` or `,`); 0 for none learnt yet, or for a run past 255 bytes
    /// (not remembered). See [`Scanner::skip_item_ws`].
    item_runs: [u8; PREDICTED_DEPTHS],
}

/// Depths whose item runs [`Scanner::skip_item_ws`] predicts: an indented body's
/// deepest lines are far shallower.
const PREDICTED_DEPTHS: usize = 32;

/// An input block (64-byte aligned) and its masks.
struct Block {
    at: usize,
    masks: Masks,
    /// The last block of the input, padded with spaces (a full block is read in place).
    tail: [u8; 64],
}

/// Masks of the bytes of a 64-byte block a string scan needs: bit `i` for byte `i`.
#[derive(Debug, Clone, Copy, Default)]
struct Masks {
    quote: u64,
    backslash: u64,
    /// Control bytes (an error in a string) and bytes above 0x7F (UTF-8 to check): one
    /// signed compare finds both, and a string holds either rarely, so a block that does
    /// is told apart only then ([`high_mask`]).
    rare: u64,
}

/// Masks of the bytes that may follow a backslash, and of the two the scan measures.
#[derive(Debug, Clone, Copy)]
struct EscapeMasks {
    /// `"` `\` `/` `b` `f` `n` `r` `t` `u`.
    valid: u64,
    slash: u64,
    unicode: u64,
}

/// The bytes a valid escape code may be.
const ESCAPE_CODES: [u8; 9] = [b'"', b'\\', b'/', b'b', b'f', b'n', b'r', b't', b'u'];

/// The block masks, computed the widest way the CPU allows (`avx2`, detected once a
/// parse: a per-block branch that always goes the same way costs nothing).
#[inline(always)]
fn block_masks(block: &[u8; 64], avx2: bool) -> Masks {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is only true when the CPU was detected to support AVX2.
        return unsafe { wide::masks(block) };
    }
    let _ = avx2;
    Masks { quote: byte_mask(block, b'"'), backslash: byte_mask(block, b'\\'), rare: rare_mask(block) }
}

/// Bit `i` set when byte `i` of `block` is `n`, the code of the commonest escape (`\n`):
/// needed only in a block with an escape other than `\"` and `\\`, so not a block mask.
#[inline(always)]
fn n_mask(block: &[u8; 64], avx2: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as in `block_masks`.
        return unsafe { wide::byte_mask(block, b'n') };
    }
    let _ = avx2;
    byte_mask(block, b'n')
}

/// [`EscapeMasks`] of a block that holds escapes (the valid codes ORed before one
/// movemask a lane, not one movemask a code).
#[inline(always)]
fn escape_masks(block: &[u8; 64], avx2: bool) -> EscapeMasks {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as in `block_masks`.
        return unsafe { wide::escape_masks(block) };
    }
    let _ = avx2;
    EscapeMasks {
        valid: any_byte_mask(block, &ESCAPE_CODES),
        slash: byte_mask(block, b'/'),
        unicode: byte_mask(block, b'u'),
    }
}

/// Bit `i` set when byte `i` of `block` is one of `wanted`.
#[cfg(target_arch = "x86_64")]
#[inline]
fn any_byte_mask(block: &[u8; 64], wanted: &[u8]) -> u64 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8, _mm_setzero_si128,
    };
    let mut mask = 0u64;
    // SAFETY: as in `byte_mask`.
    unsafe {
        for (k, part) in block.chunks_exact(16).enumerate() {
            let v = _mm_loadu_si128(part.as_ptr().cast());
            let hits = wanted
                .iter()
                .fold(_mm_setzero_si128(), |acc, &b| _mm_or_si128(acc, _mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8))));
            mask |= u64::from(_mm_movemask_epi8(hits) as u16) << (16 * k);
        }
    }
    mask
}

/// The mask builders a byte at a time: the scan's own on CPUs other than x86_64, and on
/// x86_64 (in tests) what the SSE2 versions are held to, so the code other CPUs run is
/// tested wherever the tests run.
#[cfg(any(test, not(target_arch = "x86_64")))]
mod portable {
    use super::is_whitespace;

    /// Bit `i` set when byte `i` of `block` is one of `wanted`.
    pub(super) fn any_byte_mask(block: &[u8; 64], wanted: &[u8]) -> u64 {
        block.iter().enumerate().fold(0, |mask, (i, b)| mask | (u64::from(wanted.contains(b)) << i))
    }

    /// Bit `i` set when byte `i` of `block` is above 0x7F.
    pub(super) fn high_mask(block: &[u8; 64]) -> u64 {
        block.iter().enumerate().fold(0, |mask, (i, &b)| mask | (u64::from(b > 0x7f) << i))
    }

    /// Bit `i` set when byte `i` of `block` is `byte`.
    pub(super) fn byte_mask(block: &[u8; 64], byte: u8) -> u64 {
        block.iter().enumerate().fold(0, |mask, (i, &b)| mask | (u64::from(b == byte) << i))
    }

    /// Bit `i` set when byte `i` of `block` is a control byte (below 0x20) or above 0x7F.
    pub(super) fn rare_mask(block: &[u8; 64]) -> u64 {
        block.iter().enumerate().fold(0, |mask, (i, &b)| mask | (u64::from(!(0x20..=0x7f).contains(&b)) << i))
    }

    /// Bit `i` set when byte `i` of `chunk` is whitespace.
    pub(super) fn whitespace_mask16(chunk: &[u8; 16]) -> u32 {
        chunk.iter().enumerate().fold(0, |mask, (i, &b)| mask | (u32::from(is_whitespace(b)) << i))
    }
}

#[cfg(not(target_arch = "x86_64"))]
use portable::{any_byte_mask, byte_mask, high_mask, rare_mask, whitespace_mask16};

/// The AVX2 versions: two 32-byte compares a block where SSE2 takes four 16-byte ones.
#[cfg(target_arch = "x86_64")]
mod wide {
    use super::{EscapeMasks, Masks};
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_cmpeq_epi8, _mm256_cmpgt_epi8, _mm256_loadu_si256, _mm256_movemask_epi8,
        _mm256_set1_epi8, _mm256_setr_epi8, _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_slli_epi16,
        _mm256_srli_epi16,
    };

    #[inline]
    #[target_feature(enable = "avx2")]
    fn halves(block: &[u8; 64]) -> [__m256i; 2] {
        let (lo, hi) = block.split_at(32);
        // SAFETY: each load reads the 32 bytes of its half, unaligned.
        unsafe { [_mm256_loadu_si256(lo.as_ptr().cast()), _mm256_loadu_si256(hi.as_ptr().cast())] }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn bits(lo: __m256i, hi: __m256i) -> u64 {
        u64::from(_mm256_movemask_epi8(lo) as u32) | u64::from(_mm256_movemask_epi8(hi) as u32) << 32
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn eq(v: [__m256i; 2], byte: u8) -> u64 {
        let wanted = _mm256_set1_epi8(byte as i8);
        bits(_mm256_cmpeq_epi8(v[0], wanted), _mm256_cmpeq_epi8(v[1], wanted))
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn masks(block: &[u8; 64]) -> Masks {
        let v = halves(block);
        // Signed, the bytes above 0x7F are negative: below 0x20 are they and the controls.
        let space = _mm256_set1_epi8(0x20);
        let [lo, hi] = v;
        let rare = bits(_mm256_cmpgt_epi8(space, lo), _mm256_cmpgt_epi8(space, hi));
        Masks { quote: eq(v, b'"'), backslash: eq(v, b'\\'), rare }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn byte_mask(block: &[u8; 64], byte: u8) -> u64 {
        eq(halves(block), byte)
    }

    /// Each byte classified by two table lookups, one by its high nibble and one by its
    /// low, ANDed (simdjson's way): a bit a group of valid codes sharing a high nibble,
    /// and bits of their own for `/` (6) and `u` (7), read by movemask (bit 7) and by
    /// movemask after a shift (bit 6). Nine compares and ORs a half before.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) fn escape_masks(block: &[u8; 64]) -> EscapeMasks {
        const SLASH: i8 = 0x40;
        const U: i8 = -0x80;
        // High nibble 2: `"` `/`; 5: `\`; 6: `b` `f` `n`; 7: `r` `t` `u`.
        #[rustfmt::skip]
        let by_high = _mm256_setr_epi8(
            0, 0, 0x01 | SLASH, 0, 0, 0x02, 0x04, 0x08 | U, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0x01 | SLASH, 0, 0, 0x02, 0x04, 0x08 | U, 0, 0, 0, 0, 0, 0, 0, 0,
        );
        // Low nibble 2: `"` `b` `r`; 4: `t`; 5: `u`; 6: `f`; C: `\`; E: `n`; F: `/`.
        #[rustfmt::skip]
        let by_low = _mm256_setr_epi8(
            0, 0, 0x01 | 0x04 | 0x08, 0, 0x08, U, 0x04, 0, 0, 0, 0, 0, 0x02, 0, 0x04, SLASH,
            0, 0, 0x01 | 0x04 | 0x08, 0, 0x08, U, 0x04, 0, 0, 0, 0, 0, 0x02, 0, 0x04, SLASH,
        );
        let nibble = _mm256_set1_epi8(0x0f);
        // A closure called twice, not `array::map`: the map is not always inlined.
        let classify = |v: __m256i| {
            let high = _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble);
            let low = _mm256_and_si256(v, nibble);
            _mm256_and_si256(_mm256_shuffle_epi8(by_high, high), _mm256_shuffle_epi8(by_low, low))
        };
        let [lo, hi] = halves(block);
        let (lo, hi) = (classify(lo), classify(hi));
        let zero = _mm256_setzero_si256();
        EscapeMasks {
            valid: !bits(_mm256_cmpeq_epi8(lo, zero), _mm256_cmpeq_epi8(hi, zero)),
            slash: bits(_mm256_slli_epi16::<1>(lo), _mm256_slli_epi16::<1>(hi)),
            unicode: bits(lo, hi),
        }
    }
}

/// Bit `i` set when byte `i` of `block` is `byte`.
#[cfg(target_arch = "x86_64")]
#[inline]
fn byte_mask(block: &[u8; 64], byte: u8) -> u64 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8};
    let mut mask = 0u64;
    // SAFETY: SSE2 is part of the x86_64 baseline, so these intrinsics are always
    // available; each load reads the 16 bytes of `part`, unaligned.
    unsafe {
        let wanted = _mm_set1_epi8(byte as i8);
        for (k, part) in block.chunks_exact(16).enumerate() {
            let hits = _mm_cmpeq_epi8(_mm_loadu_si128(part.as_ptr().cast()), wanted);
            mask |= u64::from(_mm_movemask_epi8(hits) as u16) << (16 * k);
        }
    }
    mask
}

/// Bit `i` set when byte `i` of `block` is a control byte (below 0x20) or above 0x7F.
#[cfg(target_arch = "x86_64")]
#[inline]
fn rare_mask(block: &[u8; 64]) -> u64 {
    use std::arch::x86_64::{_mm_cmpgt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8};
    let mut mask = 0u64;
    // SAFETY: as in `byte_mask`.
    unsafe {
        let space = _mm_set1_epi8(0x20);
        for (k, part) in block.chunks_exact(16).enumerate() {
            // Signed, as in `wide::masks`.
            let hits = _mm_cmpgt_epi8(space, _mm_loadu_si128(part.as_ptr().cast()));
            mask |= u64::from(_mm_movemask_epi8(hits) as u16) << (16 * k);
        }
    }
    mask
}

/// Bit `i` set when byte `i` of `block` is above 0x7F.
#[cfg(target_arch = "x86_64")]
#[inline]
fn high_mask(block: &[u8; 64]) -> u64 {
    use std::arch::x86_64::{_mm_loadu_si128, _mm_movemask_epi8};
    let mut mask = 0u64;
    // SAFETY: as in `byte_mask`.
    unsafe {
        for (k, part) in block.chunks_exact(16).enumerate() {
            mask |= u64::from(_mm_movemask_epi8(_mm_loadu_si128(part.as_ptr().cast())) as u16) << (16 * k);
        }
    }
    mask
}

/// The 64 bytes from `at` (spaces past the end, which are nothing special).
#[inline]
fn block_at(bytes: &[u8], at: usize) -> [u8; 64] {
    match bytes.get(at..at + 64).and_then(|b| <[u8; 64]>::try_from(b).ok()) {
        Some(block) => block,
        None => {
            let mut block = [b' '; 64];
            let rest = bytes.get(at..).unwrap_or_default();
            if let Some(head) = block.get_mut(..rest.len()) {
                head.copy_from_slice(rest);
            }
            block
        }
    }
}

/// Bit `i` set when byte `at + i` of `bytes` is `byte`; the block is read in place when
/// it is whole (see [`Scanner::block_bytes`]).
#[inline]
fn mask_at(bytes: &[u8], at: usize, byte: u8) -> u64 {
    match bytes.get(at..at + 64).and_then(|b| <&[u8; 64]>::try_from(b).ok()) {
        Some(block) => byte_mask(block, byte),
        None => byte_mask(&block_at(bytes, at), byte),
    }
}

/// The positions of the backslashes in `bytes`, found a 64-byte mask at a time.
fn backslashes(bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    (0..bytes.len()).step_by(64).flat_map(move |at| {
        let mut mask = mask_at(bytes, at, b'\\');
        std::iter::from_fn(move || {
            let bit = mask.trailing_zeros() as usize;
            mask &= mask.checked_sub(1)?;
            Some(at + bit)
        })
    })
}

/// The lines of `block` (split at `\n`, as `bytes.split(b"\n")` splits), found a
/// 64-byte mask at a time: a byte-by-byte split was a fifth of the CLI's time.
pub fn lines(block: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    let mut at = 0;
    let mut mask = 0u64;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        while mask == 0 {
            if at >= block.len() {
                done = true;
                return block.get(start..);
            }
            mask = mask_at(block, at, b'\n');
            at += 64;
        }
        let end = at - 64 + mask.trailing_zeros() as usize;
        mask &= mask - 1;
        let line = block.get(start..end);
        start = end + 1;
        line
    })
}

/// The bytes a backslash escapes, and the escaping backslashes, of a block whose
/// `backslash` mask is given; `carry` says whether the block's first byte is escaped
/// (a backslash ended the previous block) and is updated for the next block.
///
/// simdjson's branch-free method: runs of backslashes alternate escaping and escaped,
/// and a subtraction tells the runs that start on an odd bit from those on an even one.
#[inline(always)]
fn escaped_bytes(backslash: u64, carry: &mut u64) -> (u64, u64) {
    const ODD: u64 = 0xAAAA_AAAA_AAAA_AAAA;
    let potential = backslash & !*carry;
    let escape_and_code = ((potential << 1) | ODD).wrapping_sub(potential) ^ ODD;
    let escaped = escape_and_code ^ (backslash | *carry);
    let escape = escape_and_code & backslash;
    *carry = escape >> 63;
    (escaped, escape)
}

/// The whitespace `json.loads` skips between tokens.
#[inline(always)]
const fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\n' | b'\r' | b'\t')
}

/// Where the whitespace run from `at` ends: 16 bytes a step (an indented line is a
/// newline and a space a level), byte by byte over the last 15 bytes of the input.
#[inline]
fn whitespace_end(bytes: &[u8], mut at: usize) -> usize {
    while let Some(chunk) = bytes.get(at..at + 16).and_then(|c| <&[u8; 16]>::try_from(c).ok()) {
        let other = !whitespace_mask16(chunk) & 0xffff;
        if other != 0 {
            return at + other.trailing_zeros() as usize;
        }
        at += 16;
    }
    while bytes.get(at).copied().is_some_and(is_whitespace) {
        at += 1;
    }
    at
}

/// Bit `i` set when byte `i` of `chunk` is whitespace.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn whitespace_mask16(chunk: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8};
    // SAFETY: as in `byte_mask`; the load reads the 16 bytes of `chunk`, unaligned.
    unsafe {
        let v = _mm_loadu_si128(chunk.as_ptr().cast());
        let is = |byte: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(byte as i8));
        let spaces = _mm_or_si128(_mm_or_si128(is(b' '), is(b'\n')), _mm_or_si128(is(b'\r'), is(b'\t')));
        _mm_movemask_epi8(spaces) as u32
    }
}

/// Each byte's value as a hex digit; 0x10 and above when it is none.
// Built at compile time, where an index out of bounds stops the build.
#[allow(clippy::indexing_slicing)]
const HEX_DIGITS: [u8; 256] = {
    let mut table = [0xFF; 256];
    let mut i = 0;
    while i < 16 {
        table[b"0123456789abcdef"[i] as usize] = i as u8;
        table[b"0123456789ABCDEF"[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// The four hex digits that start `bytes` (either case), by table: one lookup a digit
/// and one test for all four.
#[inline]
fn hex4(bytes: &[u8]) -> Option<u16> {
    let digit = |d: u8| HEX_DIGITS.get(usize::from(d)).copied().unwrap_or(0xFF);
    let &[a, b, c, d] = bytes.first_chunk::<4>()?;
    let (a, b, c, d) = (digit(a), digit(b), digit(c), digit(d));
    if (a | b | c | d) > 0x0F {
        return None;
    }
    Some(u16::from(a) << 12 | u16::from(b) << 8 | u16::from(c) << 4 | u16::from(d))
}

const fn is_surrogate(u: u16) -> bool {
    matches!(u, 0xD800..=0xDFFF)
}

const fn is_high(u: u16) -> bool {
    matches!(u, 0xD800..=0xDBFF)
}

const fn is_low(u: u16) -> bool {
    matches!(u, 0xDC00..=0xDFFF)
}

/// One escape after its `\`: the UTF-16 units it stands for (two for an escaped pair)
/// and the bytes it takes, backslash included. `None` when malformed.
fn escape(bytes: &[u8], at: usize) -> Option<([u16; 2], usize, usize)> {
    let unit = match bytes.get(at + 1)? {
        b'"' => u16::from(b'"'),
        b'\\' => u16::from(b'\\'),
        b'/' => u16::from(b'/'),
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => u16::from(b'\n'),
        b'r' => u16::from(b'\r'),
        b't' => u16::from(b'\t'),
        b'u' => {
            let u = hex4(bytes.get(at + 2..)?)?;
            // A high surrogate escape followed by a low one is one character, as Python
            // joins them; anything else leaves it alone.
            if is_high(u) && bytes.get(at + 6..at + 8) == Some(b"\\u") {
                if let Some(low) = bytes.get(at + 8..).and_then(hex4).filter(|&l| is_low(l)) {
                    return Some(([u, low], 2, 12));
                }
            }
            return Some(([u, 0], 1, 6));
        }
        _ => return None,
    };
    Some(([unit, 0], 1, 2))
}

impl<'a> Scanner<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// Skips the whitespace at `pos`: none (compact JSON) and one space (`json.dumps`'s
    /// `", "` and `": "`) without a loop, a longer run (an indented line) 16 bytes a step.
    #[inline(always)]
    fn skip_ws(&mut self) {
        if !self.peek().is_some_and(is_whitespace) {
            return;
        }
        self.pos += 1;
        if self.peek().is_some_and(is_whitespace) {
            self.pos = whitespace_end(self.bytes, self.pos);
        }
    }

    /// [`Scanner::skip_ws`] where an item or member starts (after `[`, `{` or `,`), in an
    /// indented body (`INDENTED`) from a prediction. Such a body puts the same run (a
    /// newline and the depth's indent) before each item at a depth, so the run is taken
    /// to be as long as the last one there, and checked beside: the next read needs only
    /// the predicted end, not the 16-byte scan that finds the real one, which sat on the
    /// chain of dependent loads through the body (an eighth of the time of packing an
    /// indented body, for 6% of its instructions). A wrong guess is mended at once, and
    /// learnt. A body that is not indented is scanned without it (inline, the prediction
    /// cost compact JSON 3% more instructions and time; out of line, it gained nothing).
    #[inline(always)]
    fn skip_item_ws<const INDENTED: bool>(&mut self) {
        if !INDENTED || self.peek() != Some(b'\n') {
            return self.skip_ws();
        }
        let depth = self.stack.len();
        let start = self.pos;
        let predicted = usize::from(self.item_runs.get(depth).copied().unwrap_or(0));
        self.pos = start + predicted;
        // Nothing learnt (0) never matches: the run holds the newline at least.
        let end = whitespace_end(self.bytes, start);
        if end != self.pos {
            self.mend_item_run(depth, start, end);
        }
    }

    /// Ends the item run from `start` where it ends (`end`), and takes it as the
    /// prediction at `depth`.
    #[cold]
    #[inline(never)]
    fn mend_item_run(&mut self, depth: usize, start: usize, end: usize) {
        self.pos = end;
        if let Some(run) = self.item_runs.get_mut(depth) {
            *run = u8::try_from(end - start).unwrap_or(0);
        }
    }

    #[cold]
    fn error(&self, expected: &'static str) -> ScanError {
        ScanError::Syntax { offset: self.pos, expected }
    }

    fn push(&mut self, slot: Slot) -> usize {
        self.tape.slots.push(slot);
        self.tape.slots.len() - 1
    }

    /// [`Scanner::run`], compiled for AVX2 when the CPU has it, and for an indented body
    /// when the first bracket is followed by a newline (see [`Scanner::skip_item_ws`]).
    fn scan(&mut self) -> Result<(), ScanError> {
        self.pos = whitespace_end(self.bytes, self.pos);
        let indented = matches!(self.bytes.get(self.pos..self.pos + 2), Some(b"{\n" | b"[\n"));
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is only true when the CPU was detected to have these features.
            return unsafe {
                if indented {
                    self.run_avx2::<true>()
                } else {
                    self.run_avx2::<false>()
                }
            };
        }
        if indented {
            self.run::<true>()
        } else {
            self.run::<false>()
        }
    }

    /// The whole scan compiled with AVX2, POPCNT and BMI1: the mask builders inline
    /// into the string scan (no call a block, masks kept in registers), and popcounts and
    /// trailing-zero counts are one instruction each instead of bit tricks.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,popcnt,bmi1")]
    fn run_avx2<const INDENTED: bool>(&mut self) -> Result<(), ScanError> {
        self.run::<INDENTED>()
    }

    /// The scan from the first value ([`Scanner::scan`] skipped the whitespace before it).
    #[inline(always)]
    fn run<const INDENTED: bool>(&mut self) -> Result<(), ScanError> {
        if self.pos >= self.bytes.len() {
            return Err(ScanError::Empty);
        }
        'value: loop {
            // A value starts at `pos`.
            let slot = self.tape.slots.len();
            let depth = self.stack.len();
            if let Some(top) = self.stack.last_mut() {
                if top.tracked.is_some() {
                    top.item_start = self.pos;
                }
                if depth == 1 && top.object {
                    let member = match top.member {
                        Member::Messages => Some(&mut self.tape.messages),
                        Member::System => Some(&mut self.tape.system),
                        Member::Input => Some(&mut self.tape.input_items),
                        Member::Instructions => Some(&mut self.tape.instructions),
                        Member::Tools => Some(&mut self.tape.tools),
                        Member::Other => None,
                    };
                    if let Some(member) = member {
                        *member = Some(slot);
                    }
                }
            }
            match self.peek() {
                Some(open @ (b'{' | b'[')) => {
                    if self.stack.len() >= MAX_DEPTH {
                        return Err(ScanError::TooDeep { offset: self.pos });
                    }
                    let object = open == b'{';
                    let at = if object {
                        self.push(Slot::Object { len: 0, end: 0, duplicates: false })
                    } else {
                        self.push(Slot::Array { len: 0, end: 0 })
                    };
                    let tracked = if object { None } else { self.tracked_array() };
                    if let Some(member) = tracked {
                        *self.tape.layout_of(member) = Layout { open: self.pos, close: 0, items: Vec::new() };
                        if self.stack.is_empty() {
                            self.tape.messages = Some(at);
                        }
                    }
                    self.stack.push(Frame {
                        slot: at,
                        object,
                        len: 0,
                        tracked,
                        item_start: 0,
                        member: Member::Other,
                        key_bits: 0,
                        maybe_duplicates: false,
                    });
                    self.pos += 1;
                    self.skip_item_ws::<INDENTED>();
                    let close = if object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.close()?;
                    } else if object {
                        self.key()?;
                        continue 'value;
                    } else {
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    let slot = self.string()?;
                    self.push(slot);
                }
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal("true", Slot::Bool(true))?,
                Some(b'f') => self.literal("false", Slot::Bool(false))?,
                Some(b'n') => self.literal("null", Slot::Null)?,
                Some(b'N') => self.literal("NaN", Slot::Float { value: f64::NAN, int: false })?,
                Some(b'I') => self.literal("Infinity", Slot::Float { value: f64::INFINITY, int: false })?,
                _ => return Err(self.error("expecting a value")),
            }
            // After a value: close containers, or move to the next item or member.
            loop {
                let Some(top) = self.stack.last_mut() else { break 'value };
                top.len += 1;
                if let Some(member) = top.tracked {
                    let span = (top.item_start, self.pos);
                    self.tape.layout_of(member).items.push(span);
                }
                let object = top.object;
                self.skip_ws();
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        self.skip_item_ws::<INDENTED>();
                        if object {
                            self.key()?;
                        }
                        continue 'value;
                    }
                    Some(b'}') if object => self.close()?,
                    Some(b']') if !object => self.close()?,
                    _ => return Err(self.error(if object { "expecting ',' or '}'" } else { "expecting ',' or ']'" })),
                }
            }
        }
        self.skip_ws();
        if self.pos < self.bytes.len() {
            return Err(self.error("extra data after the value"));
        }
        Ok(())
    }

    /// Whether the array starting now holds the messages (`Messages`) or a Responses
    /// request's items (`Input`).
    fn tracked_array(&self) -> Option<Member> {
        match self.stack.last() {
            None => (self.root == Root::RequestOrTranscript).then_some(Member::Messages),
            Some(top) if self.stack.len() == 1 && top.object => {
                matches!(top.member, Member::Messages | Member::Input).then_some(top.member)
            }
            Some(_) => None,
        }
    }

    /// The escape codes among `codes` (bits of the block at `block`) that are errors: a
    /// code no escape takes, and the `u` of a `\uXXXX` that does not parse (or whose
    /// digits end the text, which json.loads refuses too). Only on the way to an error.
    #[cold]
    fn bad_codes(&self, block: usize, codes: u64) -> u64 {
        let EscapeMasks { valid, unicode, .. } = escape_masks(self.block_bytes(block), self.avx2);
        let mut bad = codes & !valid;
        let mut unicode = unicode & codes;
        while unicode != 0 {
            let u = block + unicode.trailing_zeros() as usize;
            if escape(self.bytes, u - 1).filter(|_| u + 5 < self.bytes.len()).is_none() {
                bad |= unicode & unicode.wrapping_neg();
            }
            unicode &= unicode - 1;
        }
        bad
    }

    /// Where json.loads reports a bad escape whose code is at `code`: a `u` at itself,
    /// any other at its backslash (in the previous block for bit 0).
    fn escape_error_at(&self, code: usize) -> usize {
        if self.bytes.get(code) == Some(&b'u') {
            code
        } else {
            code - 1
        }
    }

    /// Reads `"key" :` of an object member, leaving `pos` at the value.
    #[inline(always)]
    fn key(&mut self) -> Result<(), ScanError> {
        if self.peek() != Some(b'"') {
            return Err(self.error("expecting a property name in double quotes"));
        }
        let slot = self.string()?;
        let at = self.push(slot);
        let bit = match slot {
            Slot::Str { start, end, .. } => {
                let last = self.bytes.get(end.wrapping_sub(1)).copied().unwrap_or(0);
                1u64 << ((end - start).wrapping_mul(7).wrapping_add(usize::from(last)) & 63)
            }
            _ => u64::MAX,
        };
        if let Some(top) = self.stack.last_mut() {
            top.maybe_duplicates |= top.key_bits & bit != 0;
            top.key_bits |= bit;
        }
        if self.stack.len() == 1 {
            let member = match self.tape.text(at) {
                Some(crate::Text::Utf8("messages")) => Member::Messages,
                Some(crate::Text::Utf8("system")) => Member::System,
                Some(crate::Text::Utf8("input")) => Member::Input,
                Some(crate::Text::Utf8("instructions")) => Member::Instructions,
                Some(crate::Text::Utf8("tools")) => Member::Tools,
                _ => Member::Other,
            };
            if let Some(top) = self.stack.last_mut() {
                top.member = member;
            }
        }
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.error("expecting ':'"));
        }
        self.pos += 1;
        self.skip_ws();
        Ok(())
    }

    /// Closes the container on top of the stack at its closing bracket.
    #[inline(always)]
    fn close(&mut self) -> Result<(), ScanError> {
        let Some(frame) = self.stack.pop() else { return Err(self.error("unbalanced brackets")) };
        let end = self.tape.slots.len();
        if let Some(member) = frame.tracked {
            self.tape.layout_of(member).close = self.pos;
        }
        let repeated = if frame.maybe_duplicates { self.tape.repeated_keys(frame.slot, frame.len) } else { None };
        let duplicates = repeated.is_some();
        if let Some(kept) = repeated {
            self.tape.repeated.insert(frame.slot, kept);
        }
        if let Some(slot) = self.tape.slots.get_mut(frame.slot) {
            *slot = if frame.object {
                Slot::Object { len: frame.len, end, duplicates }
            } else {
                Slot::Array { len: frame.len, end }
            };
        }
        self.pos += 1;
        Ok(())
    }

    fn literal(&mut self, word: &'static str, slot: Slot) -> Result<(), ScanError> {
        if !self.bytes.get(self.pos..).is_some_and(|rest| rest.starts_with(word.as_bytes())) {
            return Err(self.error("expecting a value"));
        }
        self.pos += word.len();
        self.push(slot);
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<(), ScanError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
            // Anything else after the sign (`-Inf` too) is refused at the sign, below.
            if self.bytes.get(self.pos..).is_some_and(|rest| rest.starts_with(b"Infinity")) {
                return self.literal("Infinity", Slot::Float { value: f64::NEG_INFINITY, int: false });
            }
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => {
                self.pos = start;
                return Err(self.error("expecting a value"));
            }
        }
        let int_digits = self.pos - int_start;
        let mut integer = true;
        if self.peek() == Some(b'.') && matches!(self.bytes.get(self.pos + 1), Some(b'0'..=b'9')) {
            self.pos += 1;
            self.digits();
            integer = false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            let sign = usize::from(matches!(self.bytes.get(self.pos + 1), Some(b'+' | b'-')));
            if matches!(self.bytes.get(self.pos + 1 + sign), Some(b'0'..=b'9')) {
                self.pos += 1 + sign;
                self.digits();
                integer = false;
            }
        }
        // Signs, digits, `.` and exponents: ASCII.
        let literal = self.bytes.get(start..self.pos).and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("0");
        let slot = if integer && int_digits <= 18 {
            // At most 18 digits always fit.
            let magnitude = literal.bytes().filter(u8::is_ascii_digit).fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
            Slot::Int(if literal.starts_with('-') { -magnitude } else { magnitude })
        } else if integer {
            if let IntDigits(Some(limit)) = self.int_digits {
                if int_digits > limit {
                    return Err(ScanError::LongInteger { offset: start, limit });
                }
            }
            match literal.parse::<i64>() {
                Ok(i) => Slot::Int(i),
                Err(_) => Slot::Float { value: literal.parse::<f64>().unwrap_or(f64::INFINITY), int: true },
            }
        } else {
            Slot::Float { value: literal.parse::<f64>().unwrap_or(f64::NAN), int: false }
        };
        self.push(slot);
        Ok(())
    }

    /// The masks of the aligned block at `at`, computed once for all the strings in it.
    #[inline(always)]
    fn masks_at(&mut self, at: usize) -> Masks {
        if self.block.at != at {
            self.block.masks = self.fresh_masks(at);
            self.block.at = at;
        }
        self.block.masks
    }

    /// The masks of the block at `at`, computed (a long string's scan keeps them in
    /// registers, not in `block`, until it ends).
    #[inline(always)]
    fn fresh_masks(&mut self, at: usize) -> Masks {
        if self.bytes.len() < at + 64 {
            // The one partial block there is: the tail holds it whoever fills it.
            self.block.tail = block_at(self.bytes, at);
        }
        block_masks(self.block_bytes(at), self.avx2)
    }

    /// The aligned block at `at`: read in place (a copy would be stored and read back
    /// at once, which stalls the loads), or the padded tail.
    #[inline]
    fn block_bytes(&self, at: usize) -> &[u8; 64] {
        self.bytes.get(at..at + 64).and_then(|b| <&[u8; 64]>::try_from(b).ok()).unwrap_or(&self.block.tail)
    }

    /// Reads a string from its opening quote: its slot. Escapes are checked and
    /// measured, not decoded (see [`decode`]).
    ///
    /// One step a 64-byte block: masks of quotes, backslashes and rare bytes, the
    /// escaped bytes from the backslash mask, and the escapes counted by popcount; only
    /// `\u` escapes (rare) are looked at one by one. Blocks are aligned to the input, so
    /// the short strings that share one (keys, roles) share its masks; the first block's
    /// bits before the string are cleared. (Blocks from each string's first byte, as
    /// before, computed the masks afresh for every string: the corpus has a string every
    /// 92 bytes, so most blocks were masked twice or more.)
    #[inline(always)]
    fn string(&mut self) -> Result<Slot, ScanError> {
        let quote = self.pos;
        let first = quote + 1;
        let mut block = first & !63;
        // The first block's bits before the string are cleared.
        let from_first = u64::MAX << (first & 63);
        let shared = self.masks_at(block);
        let mut masks = Masks {
            quote: shared.quote & from_first,
            backslash: shared.backslash & from_first,
            rare: shared.rare & from_first,
        };
        // Most strings (keys, roles, part types) end in their first block with no
        // backslash, control byte or byte above 0x7F before the closing quote: that quote
        // is the end, and the string is plain ASCII.
        let before_quote = (masks.quote & masks.quote.wrapping_neg()).wrapping_sub(1);
        if masks.quote != 0 && (masks.backslash | masks.rare) & before_quote == 0 {
            let end = block + masks.quote.trailing_zeros() as usize;
            self.pos = end + 1;
            return Ok(Slot::Str { start: first, end, ascii: true });
        }
        let mut carry = 0u64;
        // Bytes the escapes save over their decoded text, as UTF-8 (`saved`) and as
        // `JSON.stringify` writes it (`json_saved`); an escape saves at least one.
        let (mut saved, mut json_saved) = (0usize, 0usize);
        // The first byte above 0x7F and one past the last (none: `usize::MAX..0`).
        let (mut high_from, mut high_to) = (usize::MAX, 0);
        // Escapes before this position are counted (the second half of a `\u` pair).
        let mut counted = first;
        loop {
            let (escaped, _) = escaped_bytes(masks.backslash, &mut carry);
            let ends = masks.quote & !escaped;
            // Bits before the closing quote (all of them when it is not in this block).
            let inside = (ends & ends.wrapping_neg()).wrapping_sub(1);
            let at = |mask: u64| block + mask.trailing_zeros() as usize;
            if masks.rare & inside != 0 {
                let high = high_mask(self.block_bytes(block)) & masks.rare & inside;
                if high != 0 {
                    high_from = high_from.min(at(high));
                    high_to = block + 64 - high.leading_zeros() as usize;
                }
                let control = masks.rare & inside & !high;
                if control != 0 {
                    let control_at = at(control);
                    // An invalid escape before it is the first error, as json.loads reports.
                    let bad = self.bad_codes(block, escaped & inside);
                    if bad != 0 && at(bad) - 1 < control_at {
                        self.pos = self.escape_error_at(at(bad));
                        return Err(self.error("an invalid escape"));
                    }
                    self.pos = control_at;
                    return Err(self.error("an unescaped control character in a string"));
                }
            }
            let codes = escaped & inside;
            saved += codes.count_ones() as usize;
            // Most escapes are `\n`, `\\` and `\"` (of the corpus's blocks that hold any,
            // nineteen in twenty hold only these): valid, a UTF-16 unit each, and written
            // as they are. Only a block with another code has its codes classified.
            let not_quotes = codes & !(masks.quote | masks.backslash);
            if not_quotes != 0 && not_quotes & !n_mask(self.block_bytes(block), self.avx2) != 0 {
                let EscapeMasks { valid, slash, unicode } = escape_masks(self.block_bytes(block), self.avx2);
                if codes & !valid != 0 {
                    // The first error by position, a bad `\uXXXX` before it included.
                    let code = at(self.bad_codes(block, codes));
                    if code >= self.bytes.len() {
                        // A backslash that ends the text escapes nothing: as json.loads
                        // words it, the string is unterminated.
                        self.pos = quote;
                        return Err(self.error("an unterminated string"));
                    }
                    self.pos = self.escape_error_at(code);
                    return Err(self.error("an invalid escape"));
                }
                json_saved += (codes & slash).count_ones() as usize;
                let mut unicode = codes & unicode;
                while unicode != 0 {
                    let backslash_at = at(unicode) - 1;
                    unicode &= unicode - 1;
                    if backslash_at < counted {
                        saved -= 1; // the low half of a pair, counted with its high half
                        continue;
                    }
                    // json.loads also refuses a `\uXXXX` whose digits end the text. Only a
                    // surrogate may pair with the next escape: any other unit is measured
                    // from its digits alone (`json.dumps` writes one escape a non-ASCII
                    // character). A pair whose second digits end the text is no pair to
                    // json.loads: the second escape is then read, and refused, on its own.
                    let unit = self.bytes.get(backslash_at + 2..).and_then(hex4);
                    let parsed = match unit.filter(|_| backslash_at + 6 < self.bytes.len()) {
                        Some(unit) if !is_surrogate(unit) || backslash_at + 12 >= self.bytes.len() => {
                            Some(([unit, 0], 1, 6))
                        }
                        Some(_) => escape(self.bytes, backslash_at),
                        None => None,
                    };
                    let Some((units, count, taken)) = parsed else {
                        // At the `u`, where json.loads reports a bad `\uXXXX`.
                        self.pos = backslash_at + 1;
                        return Err(self.error("an invalid escape"));
                    };
                    saved += taken - count - 1;
                    json_saved += taken - written_len(units, count);
                    counted = backslash_at + taken;
                }
            }
            if ends != 0 {
                let end = at(ends);
                let ascii = high_to == 0;
                // ASCII around the bytes above 0x7F cannot complete or break a sequence.
                if !ascii {
                    if let Err(bad) = std::str::from_utf8(self.bytes.get(high_from..high_to).unwrap_or_default()) {
                        return Err(ScanError::NotUtf8 { offset: high_from + bad.valid_up_to() });
                    }
                }
                self.pos = end + 1;
                if self.block.at != block {
                    // A later block's masks, whole: kept for the strings that follow.
                    self.block.at = block;
                    self.block.masks = masks;
                }
                if saved == 0 {
                    return Ok(Slot::Str { start: first, end, ascii });
                }
                self.tape.escaped.push(Escaped {
                    start: first,
                    end,
                    saved,
                    json_saved,
                    ascii,
                    text: std::cell::OnceCell::new(),
                });
                return Ok(Slot::Escaped { id: self.tape.escaped.len() - 1 });
            }
            block += 64;
            if block >= self.bytes.len() {
                self.pos = quote;
                return Err(self.error("an unterminated string"));
            }
            masks = self.fresh_masks(block);
        }
    }
}

/// The text of the (already validated) escaped string body `body`: UTF-8, unless a lone
/// surrogate makes it UTF-16.
///
/// The backslashes come from block masks: a search from each escape (a `\n` every line
/// of a tool output) spent more on starting the search than on searching.
pub(super) fn decode(body: &str) -> Decoded {
    let mut out = String::with_capacity(body.len());
    // Bytes of `body` before `copied` are in `out`.
    let mut copied = 0;
    for at in backslashes(body.as_bytes()) {
        if at < copied {
            continue; // the code of an escape already read (`\\`)
        }
        out.push_str(body.get(copied..at).unwrap_or_default());
        let Some((units, count, taken)) = escape(body.as_bytes(), at) else { break };
        match units.get(..count).and_then(|u| char::decode_utf16(u.iter().copied()).next()) {
            Some(Ok(c)) => out.push(c),
            _ => {
                let mut wide = Vec::with_capacity(body.len());
                decode_wide(body.as_bytes(), &mut wide);
                return Decoded::Wide(wide);
            }
        }
        copied = at + taken;
    }
    out.push_str(body.get(copied..).unwrap_or_default());
    Decoded::Utf8(out)
}

/// The characters of the (already validated) escaped string body `body`, decoded as
/// they are read (a lone surrogate as U+FFFD), for a reader that may stop early.
pub(super) fn decoded_chars(body: &str) -> impl Iterator<Item = char> + '_ {
    let bytes = body.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        if *bytes.get(at)? != b'\\' {
            let c = body.get(at..)?.chars().next()?;
            at += c.len_utf8();
            return Some(c);
        }
        let (units, count, taken) = escape(bytes, at)?;
        at += taken;
        Some(units.get(..count).and_then(|u| char::decode_utf16(u.iter().copied()).next()?.ok()).unwrap_or('\u{FFFD}'))
    })
}

/// Length of what `JSON.stringify` writes for the character(s) an escape stands for.
fn written_len(units: [u16; 2], count: usize) -> usize {
    match units {
        _ if count == 2 => 2,
        [0x08 | 0x09 | 0x0a | 0x0c | 0x0d | 0x22 | 0x5c, _] => 2,
        [0x00..=0x1f | 0xD800..=0xDFFF, _] => 6,
        _ => 1,
    }
}

/// Decodes the (already validated) string body `body` as UTF-16 units.
#[inline]
fn decode_wide(body: &[u8], out: &mut Vec<u16>) {
    let mut i = 0;
    while i < body.len() {
        let next = body.get(i..).and_then(|r| r.iter().position(|&b| b == b'\\')).map_or(body.len(), |p| i + p);
        if let Some(run) = body.get(i..next).and_then(|r| std::str::from_utf8(r).ok()) {
            out.extend(run.encode_utf16());
        }
        if next >= body.len() {
            break;
        }
        match escape(body, next) {
            Some((units, count, taken)) => {
                out.extend(units.iter().take(count));
                i = next + taken;
            }
            None => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wide_escape_masks_equal_the_sse2_ones() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let all: Vec<u8> = (0..=255).collect();
            for chunk in all.chunks(64) {
                let block: [u8; 64] = chunk.try_into().unwrap();
                // SAFETY: the CPU has AVX2.
                let wide = unsafe { wide::escape_masks(&block) };
                let EscapeMasks { valid, slash, unicode } = escape_masks(&block, false);
                assert_eq!((wide.valid, wide.slash, wide.unicode), (valid, slash, unicode), "{chunk:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn the_mask_builders_equal_the_portable_ones(bytes in proptest::collection::vec(proptest::sample::select(vec![
            b' ', b'\n', b'\r', b'\t', b'"', b'\\', b'/', b'b', b'f', b'n', b'r', b't', b'u', b'a', 0x00, 0x1f, 0x20,
            0x7f, 0x80, 0xc3, 0xff,
        ]), 64)) {
            let block: [u8; 64] = bytes.as_slice().try_into().unwrap();
            for byte in [b'"', b'\\', b'n', b'a', 0x00, 0xff] {
                prop_assert_eq!(byte_mask(&block, byte), portable::byte_mask(&block, byte));
            }
            prop_assert_eq!(rare_mask(&block), portable::rare_mask(&block));
            prop_assert_eq!(high_mask(&block), portable::high_mask(&block));
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2.
                let (wide, n) = unsafe { (wide::masks(&block), wide::byte_mask(&block, b'n')) };
                let portable_masks = [b'"', b'\\'].map(|byte| portable::byte_mask(&block, byte));
                prop_assert_eq!([wide.quote, wide.backslash], portable_masks);
                prop_assert_eq!(wide.rare, portable::rare_mask(&block));
                prop_assert_eq!(n, portable::byte_mask(&block, b'n'));
            }
            prop_assert_eq!(any_byte_mask(&block, &ESCAPE_CODES), portable::any_byte_mask(&block, &ESCAPE_CODES));
            for chunk in block.chunks_exact(16) {
                let chunk: &[u8; 16] = chunk.try_into().unwrap();
                prop_assert_eq!(whitespace_mask16(chunk), portable::whitespace_mask16(chunk));
            }
        }

        #[test]
        fn decoded_chars_are_the_decoded_text(parts in proptest::collection::vec(proptest::sample::select(vec![
            "a", " ", "é", "😀", "\\n", "\\\"", "\\\\", "\\/", "\\u0041", "\\u00e9", "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\ud83d",
        ]), 0..40)) {
            let body = parts.concat();
            let whole = match decode(&body) {
                Decoded::Utf8(text) => text,
                Decoded::Wide(units) => String::from_utf16_lossy(&units),
            };
            prop_assert_eq!(decoded_chars(&body).collect::<String>(), whole);
        }

        #[test]
        fn whitespace_ends_where_a_byte_walk_ends(text in proptest::collection::vec(proptest::sample::select(vec![
            b' ', b' ', b' ', b'\n', b'\r', b'\t', b'a', 0x0b, 0x0c, 0xa0,
        ]), 0..120)) {
            for start in 0..=text.len() {
                let walked = start + text[start..].iter().take_while(|&&b| matches!(b, b' ' | b'\n' | b'\r' | b'\t')).count();
                prop_assert_eq!(whitespace_end(&text, start), walked, "from {}", start);
            }
        }

        #[test]
        fn lines_split_as_slices_split(text in proptest::collection::vec(proptest::sample::select(vec![b'\n', b'a', b' ']), 0..300)) {
            let ours: Vec<&[u8]> = lines(&text).collect();
            let theirs: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
            prop_assert_eq!(ours, theirs);
        }

        #[test]
        fn escaped_bytes_match_a_byte_by_byte_walk(text in proptest::collection::vec(proptest::sample::select(vec![b'\\', b'a', b'"']), 0..200)) {
            let (mut carry, mut naive_escaped) = (0u64, false);
            for (k, chunk) in text.chunks(64).enumerate() {
                let mut block = [b' '; 64];
                block[..chunk.len()].copy_from_slice(chunk);
                let (escaped, escape) = escaped_bytes(byte_mask(&block, b'\\'), &mut carry);
                for (i, &b) in chunk.iter().enumerate() {
                    let is_escaped = naive_escaped;
                    naive_escaped = !is_escaped && b == b'\\';
                    prop_assert_eq!(escaped >> i & 1 == 1, is_escaped, "block {} byte {}", k, i);
                    prop_assert_eq!(escape >> i & 1 == 1, naive_escaped, "block {} byte {}", k, i);
                }
            }
        }
    }
}
