//! Provider sizing (`sizing="provider"`): opaque payloads are not sized by their length.
//!
//! A provider bills an image by its pixels, not by the length of its base64 text, and
//! never bills a thinking block's signature or an encrypted reasoning payload as input
//! text. Sized as the seeds do (by JSON length), one 400 KB screenshot costs 100,000
//! tokens and a transcript with a few of them looks 10x over budget. Here an image or
//! document block (OpenAI `image_url` / `file` parts, Anthropic `image` / `document`
//! blocks, Responses `input_image` / `input_file` parts) costs a flat `image_tokens`
//! instead of its JSON, and a `thinking` block's `signature`, a `redacted_thinking`
//! block's `data` and a Responses `reasoning` item's `encrypted_content` cost nothing
//! (the comma and colon around a left-out entry still count). Everything else is sized as
//! [`CharsPerToken`] sizes it.

use crate::error::CoreError;
use crate::json::{json_len_with, JsonNode, Key, Visit, Visitor};
use crate::message::Checked;
use crate::text::Text;
use crate::tokens::{estimate_units, message_units_with, CharsPerToken, MessageSizer, MESSAGE_OVERHEAD};

/// Tokens an image or document block costs by default: what a provider bills for a large
/// image (Anthropic: about width × height / 750, capped near 1,600 for the 1.15-megapixel
/// images it keeps; OpenAI: 85 + 170 a 512-pixel tile, 1,105 for a 1024 × 1024 image), so
/// the estimate stays on the safe side for a screenshot.
pub const DEFAULT_IMAGE_TOKENS: u64 = 1_600;

/// Block types sized as a flat `image_tokens` (`computer_screenshot`: a Responses
/// computer-use call's output).
const OPAQUE_BLOCKS: [&str; 7] =
    ["image_url", "file", "image", "document", "input_image", "input_file", "computer_screenshot"];

/// How messages are sized when no custom estimator is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    /// The seeds' rule: everything by its length ([`CharsPerToken`]).
    Seed,
    /// Opaque payloads not by their length (this module).
    Provider { image_tokens: u64 },
}

/// How provider sizing reads an object: an opaque block not at all, counted in `blocks`;
/// a block with a left-out entry without it.
#[derive(Default)]
pub struct Opaque {
    pub blocks: u64,
}

impl Opaque {
    /// `tokens` of the text read, plus `image_tokens` for each opaque block, saturating.
    pub fn billed(&self, tokens: u64, image_tokens: u64) -> u64 {
        tokens.saturating_add(self.blocks.saturating_mul(image_tokens))
    }
}

impl<N: JsonNode> Visitor<N> for Opaque {
    fn visit(&mut self, object: &N) -> Visit {
        let Some(kind) = object.get(Key::Type) else { return Visit::Text };
        let Some(kind) = kind.as_text() else { return Visit::Text };
        visit_kind(&kind, &mut self.blocks)
    }
}

fn visit_kind(kind: &Text<'_>, blocks: &mut u64) -> Visit {
    if OPAQUE_BLOCKS.iter().any(|b| kind.eq_ascii(b)) {
        *blocks += 1;
        Visit::Opaque
    } else if kind.eq_ascii("thinking") {
        Visit::Without("signature")
    } else if kind.eq_ascii("redacted_thinking") {
        Visit::Without("data")
    } else if kind.eq_ascii("reasoning") {
        Visit::Without("encrypted_content")
    } else {
        Visit::Text
    }
}

impl<N: JsonNode> MessageSizer<N> for Sizing {
    fn message_tokens(&mut self, index: Option<usize>, message: &N, checked: &Checked<N>) -> Result<u64, CoreError> {
        let Sizing::Provider { image_tokens } = *self else {
            return CharsPerToken.message_tokens(index, message, checked);
        };
        let mut opaque = Opaque::default();
        let units = if checked.item.sized_whole() {
            json_len_with(message, &mut opaque).map_err(|p| CoreError::field(None, "", p))?
        } else {
            message_units_with(checked, &mut opaque)?
        };
        Ok(opaque.billed(estimate_units(units) + MESSAGE_OVERHEAD, image_tokens))
    }

    fn system_tokens(&mut self, checked: &Checked<N>) -> Result<u64, CoreError> {
        let Sizing::Provider { image_tokens } = *self else {
            return <CharsPerToken as MessageSizer<N>>::system_tokens(&mut CharsPerToken, checked);
        };
        let mut opaque = Opaque::default();
        let units = message_units_with(checked, &mut opaque)?;
        Ok(opaque.billed(estimate_units(units) + MESSAGE_OVERHEAD, image_tokens))
    }

    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
        <CharsPerToken as MessageSizer<N>>::text_tokens(&mut CharsPerToken, text)
    }

    fn units_tokens(&self, units: usize) -> Option<u64> {
        Some(estimate_units(units))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::{Encoding, ExactTokens};
    use crate::json::write_json_with;
    use crate::message::check_message;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn tokens(sizing: Sizing, v: &Value) -> u64 {
        let checked = check_message(&v).unwrap();
        let mut sizing = sizing;
        sizing.message_tokens(Some(0), &v, &checked).unwrap()
    }

    const PROVIDER: Sizing = Sizing::Provider { image_tokens: 1_000 };

    #[test]
    fn images_cost_a_flat_count_in_every_shape() {
        let data = "A".repeat(400_000);
        for block in [
            json!({"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{data}")}}),
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}),
            json!({"type": "input_image", "image_url": format!("data:image/png;base64,{data}")}),
        ] {
            let m = json!({"role": "user", "content": [{"type": "text", "text": "abcd"}, block]});
            // [{"type":"text","text":"abcd"},] is 31 units: 8 tokens, + 4, + one image.
            assert_eq!(tokens(PROVIDER, &m), 8 + 4 + 1_000);
            assert!(tokens(Sizing::Seed, &m) > 100_000);
        }
    }

    #[test]
    fn signatures_and_encrypted_payloads_cost_nothing() {
        let sig = "s".repeat(4_000);
        let m = json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": sig}]});
        // [{"type":"thinking","thinking":"hm",}]: the signature's entry left out, 38 units.
        assert_eq!(tokens(PROVIDER, &m), 10 + 4);
        let m = json!({"role": "assistant", "content": [{"type": "redacted_thinking", "data": sig}]});
        assert_eq!(tokens(PROVIDER, &m), 8 + 4);
        let item = json!({"type": "reasoning", "encrypted_content": sig});
        let checked = crate::items::check_item(&&item).unwrap();
        assert_eq!(PROVIDER.clone().message_tokens(Some(0), &&item, &checked), Ok(6 + 4));
    }

    #[test]
    fn an_encoding_counts_the_text_chars_per_token_measures() {
        let data = "A".repeat(40_000);
        let m = json!({"role": "user", "content": [
            {"type": "image", "source": {"data": data}},
            {"type": "text", "text": "what is it?"},
            {"type": "thinking", "thinking": "hm", "signature": data},
        ]});
        // serde_json's objects keep their keys sorted.
        let text = r#"[,{"text":"what is it?","type":"text"},{:,"thinking":"hm","type":"thinking"}]"#;
        let checked = check_message(&&m).unwrap();
        let sizing = Sizing::Provider { image_tokens: 85 };
        let chars = (text.len() as u64).div_ceil(4);
        assert_eq!(sizing.clone().message_tokens(Some(0), &&m, &checked), Ok(chars + 4 + 85));
        for encoding in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let exact = ExactTokens::new(encoding, sizing).message_tokens(Some(0), &&m, &checked);
            assert_eq!(exact, Ok(encoding.count_str(text) as u64 + 4 + 85));
        }
    }

    fn block() -> impl Strategy<Value = Value> {
        let kinds = ["text", "image", "image_url", "input_file", "thinking", "redacted_thinking", "reasoning", "x"];
        let keys = ["signature", "data", "encrypted_content", "text"];
        (prop::sample::select(kinds.to_vec()), prop::sample::select(keys.to_vec()), "[a-z\u{e9}\u{1F600}]{0,4}")
            .prop_map(
                |(kind, key, text)| json!({"type": kind, key: text.clone(), "parts": [{"type": kind, "t": text}]}),
            )
    }

    proptest! {
        #[test]
        fn what_is_written_is_what_is_measured(parts in prop::collection::vec(block(), 0..5)) {
            let value = Value::Array(parts);
            let (mut measured, mut written) = (Opaque::default(), Opaque::default());
            let units = crate::json::json_len_with(&&value, &mut measured).unwrap();
            let mut text = String::new();
            write_json_with(&&value, &mut text, &mut written).unwrap();
            prop_assert_eq!(text.encode_utf16().count(), units);
            prop_assert_eq!(written.blocks, measured.blocks);
        }
    }
}
