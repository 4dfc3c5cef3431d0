//! Writes the vocabularies `src/encoding.rs` embeds: each of `bpe-openai`'s prebuilt
//! encoders without the two automata that counting never reads, deflated.
//!
//! `bpe-openai` embeds each encoder as its `BytePairEncoding` serialised by `rmp-serde`
//! (MessagePack: the struct as an array of its ten fields). Three of those fields are
//! Aho-Corasick automata of about 8 MB each for o200k: `longest_searcher`, which the
//! backtracking counter walks, and `overlapping_searcher` and `overlapping_searcher_rev`,
//! which only the other encoders (`encode_via_table`, `encode_minimal`, the appendable and
//! prependable ones) read. Those two are replaced by the automaton of a one-token
//! vocabulary, which deserialises like any other, so the struct is still built by `bpe`'s
//! own `Deserialize`; the rest is kept byte for byte. That halves the data (o200k 32 -> 16
//! MB, cl100k 15 -> 8 MB) and deflate halves it again: the extension is about 14 MB where
//! it was 50, and the first count inflates and deserialises 16 MB instead of 32.
//!
//! `bpe` is pinned (`=0.2.3` in the workspace): the fields are found by position. Before
//! anything is written the build checks the shape (ten fields, the three automata as
//! MessagePack binaries) and that the slim encoder counts exactly as the full one on every
//! token and on every pair of neighbouring tokens; a `bpe` that read the dropped automata
//! while counting, or moved its fields, fails the build instead of miscounting.

use bpe::byte_pair_encoding::BytePairEncoding;
use std::error::Error;
use std::io::Write;
use std::path::Path;

/// Positions of the automata in the serialised `BytePairEncoding`.
const LONGEST: usize = 5;
const UNUSED_BY_COUNT: [usize; 2] = [6, 7];
const FIELDS: usize = 10;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo::rerun-if-changed=build.rs");
    let out = std::env::var("OUT_DIR")?;
    let placeholder = automaton_of_one_token()?;
    for (name, full) in [("o200k_base", &bpe_openai::o200k_base().bpe), ("cl100k_base", &bpe_openai::cl100k_base().bpe)]
    {
        let slim = slim(full, &placeholder).map_err(|e| format!("{name}: {e}"))?;
        let mut deflated = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        deflated.write_all(&slim)?;
        std::fs::write(Path::new(&out).join(format!("{name}.bpe.deflate")), deflated.finish()?)?;
    }
    Ok(())
}

/// A valid serialised automaton, as small as one can be.
fn automaton_of_one_token() -> Result<rmpv::Value, Box<dyn Error>> {
    let tiny = BytePairEncoding::from_dictionary([vec![b'a']], None);
    let fields = fields(rmpv::decode::read_value(&mut rmp_serde::to_vec(&tiny)?.as_slice())?)?;
    fields.into_iter().nth(LONGEST).ok_or_else(|| "no automaton in a one-token encoder".into())
}

/// The serialised `full` with the automata counting never reads replaced by `placeholder`,
/// checked to count as `full` does.
fn slim(full: &BytePairEncoding, placeholder: &rmpv::Value) -> Result<Vec<u8>, Box<dyn Error>> {
    let mut fields = fields(rmpv::decode::read_value(&mut rmp_serde::to_vec(full)?.as_slice())?)?;
    for i in UNUSED_BY_COUNT {
        if let Some(field) = fields.get_mut(i) {
            *field = placeholder.clone();
        }
    }
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, &rmpv::Value::Array(fields))?;
    let slim: BytePairEncoding = rmp_serde::from_slice(&bytes)?;
    counts_agree(full, &slim)?;
    Ok(bytes)
}

/// The fields of a serialised `BytePairEncoding`, checked to have the expected shape.
fn fields(value: rmpv::Value) -> Result<Vec<rmpv::Value>, Box<dyn Error>> {
    let rmpv::Value::Array(fields) = value else { return Err("not a MessagePack array".into()) };
    if fields.len() != FIELDS {
        return Err(format!("{} fields where bpe 0.2.3 has {FIELDS}", fields.len()).into());
    }
    for i in [LONGEST, UNUSED_BY_COUNT[0], UNUSED_BY_COUNT[1]] {
        if !matches!(fields.get(i), Some(rmpv::Value::Binary(_))) {
            return Err(format!("field {i} is not a serialised automaton").into());
        }
    }
    Ok(fields)
}

/// Every token, and every pair of neighbouring tokens, counts the same on both encoders.
fn counts_agree(full: &BytePairEncoding, slim: &BytePairEncoding) -> Result<(), Box<dyn Error>> {
    let n = u32::try_from(full.num_tokens())?;
    if slim.num_tokens() != full.num_tokens() {
        return Err("the slim encoder has other tokens".into());
    }
    let mut pair = Vec::new();
    for id in 0..n {
        let token = full.token_bytes(id);
        pair.clear();
        pair.extend_from_slice(token);
        pair.extend_from_slice(full.token_bytes((id + 1) % n));
        for text in [token, pair.as_slice()] {
            if slim.count(text) != full.count(text) {
                return Err(format!("the slim encoder miscounts {text:?}").into());
            }
        }
    }
    Ok(())
}
