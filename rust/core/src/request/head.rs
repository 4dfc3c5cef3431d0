//! What a gateway reads of a request body before packing it: the top-level members that
//! choose its window, its output reserve and the pins its transcript reaches, read as
//! `json.loads` reads them (a repeated key's last value) without loading the body into
//! objects.

use crate::json::{member, JsonNode, View};

/// The body's output caps, in the order a gateway takes the first count among them.
pub const CAPS: [&str; 3] = ["max_completion_tokens", "max_tokens", "max_output_tokens"];

/// What a cap holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// Absent, or not a count (not an integer, or negative).
    None,
    Count(u64),
    /// An integer count past `i64::MAX`: a tape holds it as a double, so its exact value
    /// is Python's to read.
    Beyond,
}

/// The members of a request body that decide how it is packed.
#[derive(Debug, Clone, PartialEq)]
pub struct Head<N> {
    /// `model`, when a string.
    pub model: Option<N>,
    /// The members named in [`CAPS`], in that order.
    pub caps: [Cap; 3],
    /// The length of `messages`, when an array.
    pub messages: Option<usize>,
    /// The length of `input`, when an array.
    pub input: Option<usize>,
}

/// The head of a body whose root is `root`; `None` when the root is not an object.
pub fn head<N: JsonNode>(root: &N) -> Option<Head<N>> {
    if !matches!(root.view(), Ok(View::Object { .. })) {
        return None;
    }
    let cap = |key: &str| {
        let Some(value) = member(root, key) else { return Cap::None };
        match value.view() {
            Ok(View::Int(n)) => u64::try_from(n).map_or(Cap::None, Cap::Count),
            // An integer literal past i64 (a fraction or an exponent is no count).
            Ok(View::Float(x)) if value.type_name() == "int" && x >= 0.0 => Cap::Beyond,
            _ => Cap::None,
        }
    };
    let length = |key: &str| match member(root, key)?.view() {
        Ok(View::Array { len, .. }) => Some(len),
        _ => None,
    };
    Some(Head {
        model: member(root, "model").filter(|model| model.as_text().is_some()),
        caps: CAPS.map(cap),
        messages: length("messages"),
        input: length("input"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::scan::{parse, IntDigits, Root};
    use serde_json::json;

    /// The head of `body`, its model as a `String`.
    fn head_of(body: &str) -> Option<Head<String>> {
        let tape = parse(body.as_bytes(), Root::Request, IntDigits::default()).unwrap();
        let found = head(&tape.node(0))?;
        let model = found
            .model
            .as_ref()
            .and_then(JsonNode::as_text)
            .map(|t| t.code_points().filter_map(char::from_u32).collect());
        Some(Head { model, caps: found.caps, messages: found.messages, input: found.input })
    }

    fn read(
        model: Option<&str>,
        caps: [Cap; 3],
        messages: Option<usize>,
        input: Option<usize>,
    ) -> Option<Head<String>> {
        Some(Head { model: model.map(String::from), caps, messages, input })
    }

    #[test]
    fn the_members_are_read_as_json_loads_reads_them() {
        let body = json!({"model": "gpt-4o", "max_tokens": 500, "messages": [1, 2, 3], "input": "hi"}).to_string();
        assert_eq!(head_of(&body), read(Some("gpt-4o"), [Cap::None, Cap::Count(500), Cap::None], Some(3), None));
        // The last of a repeated key; a cap that is no count is none.
        let repeated = r#"{"model": "a", "model": "b\u00e9", "max_completion_tokens": -1, "max_tokens": 7.0,
            "max_output_tokens": 0, "input": [{}], "messages": {}}"#;
        assert_eq!(head_of(repeated), read(Some("bé"), [Cap::None, Cap::None, Cap::Count(0)], None, Some(1)));
        let beyond = r#"{"model": 4, "max_tokens": 99999999999999999999, "max_output_tokens": -99999999999999999999}"#;
        assert_eq!(head_of(beyond), read(None, [Cap::None, Cap::Beyond, Cap::None], None, None));
        let no_counts = r#"{"max_tokens": 1e3, "max_output_tokens": true, "max_completion_tokens": "9"}"#;
        assert_eq!(head_of(no_counts), read(None, [Cap::None; 3], None, None));
        assert_eq!(head_of("[1, 2]"), None);
        assert_eq!(head_of("\"text\""), None);
    }
}
