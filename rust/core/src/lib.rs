//! contextfold-core: the pure-Rust logic behind contextfold.
//!
//! Everything here is deterministic and free of Python. Algorithms read messages through
//! the small [`json::JsonNode`] accessor trait, so the same code runs on plain Rust values
//! in `cargo test` and on borrowed Python objects in the extension module. Lengths are
//! UTF-16 code units and JSON is JavaScript's `JSON.stringify`, because the estimates and
//! cut points must match the TypeScript host byte for byte.

// Tests may index and unwrap: a panic there is a test failure, not a crash in production.
#![cfg_attr(test, allow(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod arena;
pub mod count_cache;
pub mod edits;
pub mod encoding;
pub mod error;
pub mod items;
pub mod json;
pub mod keyed;
pub mod message;
pub mod pack;
pub mod paths;
pub mod provider;
pub mod rank;
pub mod request;
pub mod text;
pub mod tokens;
pub mod transcript;
pub mod window;
pub mod workers;

#[cfg(test)]
#[path = "tests/no_wrap.rs"]
mod no_wrap_tests;

pub use error::{CoreError, Problem};
pub use json::{JsonNode, JsonType, Key, MessageFields, View};
pub use text::Text;
