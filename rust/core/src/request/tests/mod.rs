// Test-only module: its unwraps are test assertions and never reach Python.
#![cfg(test)]

use super::*;
use crate::encoding::Encoding;
use crate::json::{json_len, View};
use crate::Text;
use proptest::prelude::*;
use serde_json::{json, Value};

/// The tape's value at `at` rebuilt as a serde_json value (numbers as f64 when not i64).
fn value(node: Node<'_, '_>) -> Value {
    match node.view().unwrap() {
        View::Null => Value::Null,
        View::Bool(b) => Value::Bool(b),
        View::Int(i) => json!(i),
        View::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        View::Str(t) => {
            // The length known without decoding is the decoded text's.
            assert_eq!(node.str_units(), Some(t.utf16_len()));
            assert_eq!(node.str_json_len(), Some(t.json_len()));
            Value::String(t.to_string_lossy())
        }
        View::Array { items, .. } => Value::Array(items.map(value).collect()),
        View::Object { entries, .. } => {
            Value::Object(entries.map(|(k, v)| (k.as_text().unwrap().to_string_lossy(), value(v))).collect())
        }
    }
}

fn parsed(text: &str) -> Result<Value, ScanError> {
    scan::parse(text.as_bytes(), Root::Request, IntDigits::default()).map(|tape| value(tape.node(0)))
}

fn options(budget: u64) -> PackOptions {
    PackOptions { budget, ..PackOptions::default() }
}

#[test]
fn values_read_as_json_loads_reads_them() {
    assert_eq!(
        parsed(r#" {"a": [1, -2.5, true, null, "x\ny", {}], "b": "é😀"} "#),
        Ok(json!({"a": [1, -2.5, true, null, "x\ny", {}], "b": "é😀"}))
    );
    // Escapes, an escaped pair joined, the last of repeated keys.
    assert_eq!(parsed(r#"{"k":"\u0041\/\ud83d\ude00\"","k":2}"#), Ok(json!({"k": 2})));
    assert_eq!(parsed(r#"["\u0041\/\ud83d\ude00\"\\\b\f\n\r\t"]"#), Ok(json!(["A/😀\"\\\u{8}\u{c}\n\r\t"])));
    // Python's extra literals; big integers become doubles.
    let tape = scan::parse(
        b"[NaN, Infinity, -Infinity, 123456789012345678901, -0, 1e400]",
        Root::Request,
        IntDigits::default(),
    )
    .unwrap();
    let items: Vec<String> = match tape.node(0).view().unwrap() {
        View::Array { items, .. } => items.map(|n| n.type_name()).collect(),
        _ => vec![],
    };
    assert_eq!(items, ["float", "float", "float", "int", "int", "float"]);
}

#[test]
fn an_item_is_reached_by_its_index_past_nested_ones() {
    let tape =
        scan::parse(br#"{"a": [1, [2, [3]], {"b": [4]}, "five", 6]}"#, Root::Request, IntDigits::default()).unwrap();
    let View::Object { mut entries, .. } = tape.node(0).view().unwrap() else { panic!("an object") };
    let (_, array) = entries.next().unwrap();
    let all: Vec<Value> = match array.view().unwrap() {
        View::Array { items, .. } => items.map(value).collect(),
        _ => panic!("an array"),
    };
    for j in 0..all.len() + 2 {
        let View::Array { mut items, .. } = array.view().unwrap() else { panic!("an array") };
        assert_eq!(items.nth(j).map(value), all.get(j).cloned(), "{j}");
        // What follows the item reached is the rest, in order.
        assert_eq!(items.map(value).collect::<Vec<_>>(), all.get(j + 1..).unwrap_or_default().to_vec());
    }
}

#[test]
fn lone_surrogates_stay_utf16() {
    let tape = scan::parse(br#"["a\ud800b", "\udc00", "\ud83d\u0041"]"#, Root::Request, IntDigits::default()).unwrap();
    let units: Vec<Vec<u16>> = match tape.node(0).view().unwrap() {
        View::Array { items, .. } => items.map(|n| n.as_text().unwrap().utf16_units().collect()).collect(),
        _ => vec![],
    };
    assert_eq!(units, [vec![0x61, 0xD800, 0x62], vec![0xDC00], vec![0xD83D, 0x41]]);
    let first = tape.node(1);
    assert!(matches!(first.as_text(), Some(Text::Ucs2(_))));
    assert_eq!(first.as_text().unwrap().json_len(), 2 + 1 + 6 + 1);
}

#[test]
fn repeated_keys_are_found_however_they_are_written() {
    // Each object's keys as json.loads keeps them: a repeated key where it first appears,
    // with its last value.
    let keys = |text: &str| {
        let tape = scan::parse(text.as_bytes(), Root::Request, IntDigits::default()).unwrap();
        let View::Object { entries, len } = tape.node(0).view().unwrap() else { unreachable!() };
        let kept: Vec<String> =
            entries.map(|(k, v)| format!("{}={}", k.as_text().unwrap().to_string_lossy(), value(v))).collect();
        assert_eq!(kept.len(), len);
        kept
    };
    assert_eq!(keys(r#"{"a":1,"b":2,"a":3}"#), ["a=3", "b=2"]);
    assert_eq!(keys(r#"{"a":1,"b":2,"a":3,"c":4,"b":5,"a":6}"#), ["a=6", "b=5", "c=4"]);
    // Same length and last byte (the same bit), different keys.
    assert_eq!(keys(r#"{"ab":1,"xb":2,"":3,"yb":4}"#), ["ab=1", "xb=2", "=3", "yb=4"]);
    assert_eq!(keys(r#"{"":1,"":2}"#), ["=2"]);
    // An escaped key equals the plain one it spells, before or after it.
    assert_eq!(keys(r#"{"\u0061":1,"a":2}"#), ["a=2"]);
    assert_eq!(keys(r#"{"a":1,"b":0,"\u0061":2}"#), ["a=2", "b=0"]);
    assert_eq!(keys(r#"{"\u0061":1,"b":2}"#), ["a=1", "b=2"]);
    let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
    assert_eq!(keys(&format!("{{{},\"k7\":0}}", many.join(","))).len(), 40);
}

/// An object of `n` keys whose first key comes again last.
fn wide_object(n: usize) -> String {
    let keys: Vec<String> = (0..n).map(|i| format!("\"k{i}\":{i}")).collect();
    format!("{{{},\"k0\":\"last\"}}", keys.join(","))
}

#[test]
fn a_repeated_key_among_many_costs_reads_linear_in_the_keys() {
    // A hostile body: one repeated key in a wide object in each place a body may hold one
    // (a content part, a tool definition, a Responses item). Scanning and packing read each
    // key a bounded number of times, where a rescan of the later keys for every key read
    // n²/2 of them (35 s for 64,000 keys).
    let n = 20_000;
    let wide = wide_object(n);
    let bodies = [
        format!(
            r#"{{"messages":[{{"role":"user","content":[{{"type":"text","text":"hi",{}}}]}}]}}"#,
            &wide[1..wide.len() - 1]
        ),
        format!(r#"{{"tools":[{wide}],"messages":[{{"role":"user","content":"hi"}}]}}"#),
        format!(r#"{{"input":[{{"type":"message","role":"user","content":"hi",{}}}]}}"#, &wide[1..wide.len() - 1]),
    ];
    for body in &bodies {
        node::TEXT_READS.with(|reads| reads.set(0));
        let packed = pack_body(body.as_bytes(), &options(1_000_000), Root::Request, false).unwrap();
        assert!(packed.packed.fits);
        let reads = node::TEXT_READS.with(std::cell::Cell::get);
        assert!(reads <= 4 * (n + 8), "{reads} strings read for {n} keys");
    }
    // The repeat is still resolved as json.loads resolves it.
    let tape = scan::parse(wide.as_bytes(), Root::Request, IntDigits::default()).unwrap();
    let View::Object { entries, len } = tape.node(0).view().unwrap() else { unreachable!() };
    assert_eq!(len, n);
    let first = entries.into_iter().next().map(|(k, v)| (k.as_text().unwrap().to_string_lossy(), value(v)));
    assert_eq!(first, Some(("k0".to_string(), json!("last"))));
}

#[test]
fn bad_input_is_reported_with_its_offset() {
    let err = |s: &[u8]| scan::parse(s, Root::Request, IntDigits::default()).err();
    assert_eq!(err(b"  "), Some(ScanError::Empty));
    assert_eq!(err(b"{\"a\":\xff}"), Some(ScanError::NotUtf8 { offset: 5 }));
    assert!(matches!(err(b"{\"a\" 1}"), Some(ScanError::Syntax { offset: 5, .. })));
    assert!(matches!(err(b"[1,]"), Some(ScanError::Syntax { offset: 3, .. })));
    assert!(matches!(err(b"{} x"), Some(ScanError::Syntax { offset: 3, .. })));
    assert!(matches!(err(b"[\"a\x01\"]"), Some(ScanError::Syntax { offset: 3, .. })));
    assert!(matches!(err(b"[\"a\\x\"]"), Some(ScanError::Syntax { offset: 3, .. })));
    // A backslash ending the text leaves its string unterminated, as json.loads says.
    assert_eq!(err(b"[\"ab\\"), Some(ScanError::Syntax { offset: 1, expected: "an unterminated string" }));
    // The first error by position, as json.loads reports it: an invalid escape before a
    // control byte in the same block.
    assert_eq!(err(b"[\"a\\ b\x01\"]"), Some(ScanError::Syntax { offset: 3, expected: "an invalid escape" }));
    assert_eq!(err(b"[\"a\\u1\x01\"]"), Some(ScanError::Syntax { offset: 4, expected: "an invalid escape" }));
    assert_eq!(err(b"[\"ab\\u2192"), Some(ScanError::Syntax { offset: 5, expected: "an invalid escape" }));
    // A surrogate pair whose second escape's digits end the text is no pair to json.loads:
    // that escape is refused as any other there.
    assert_eq!(err(b"[\"\\ud83d\\ude00"), Some(ScanError::Syntax { offset: 9, expected: "an invalid escape" }));
    assert_eq!(err(b"[\"\\ud83d\\ude00x"), Some(ScanError::Syntax { offset: 1, expected: "an unterminated string" }));
    assert_eq!(err(b"[\"a\\u00\\1b\"]"), Some(ScanError::Syntax { offset: 4, expected: "an invalid escape" }));
    // A bad `\uXXXX` at its `u`, as json.loads reports it.
    assert!(matches!(err(b"[\"a\\u12\"]"), Some(ScanError::Syntax { offset: 4, .. })));
    assert!(matches!(err(b"[\"abc"), Some(ScanError::Syntax { offset: 1, .. })));
    assert!(matches!(err(b"[01]"), Some(ScanError::Syntax { offset: 2, .. })));
    assert!(matches!(err(b"[-]"), Some(ScanError::Syntax { offset: 1, .. })));
    assert!(matches!(err(b"[1.]"), Some(ScanError::Syntax { offset: 2, .. })));
    assert!(matches!(err(b"[tru]"), Some(ScanError::Syntax { offset: 1, .. })));
    // A sign that does not begin `-Infinity` is refused where it stands, as json.loads
    // refuses it.
    for cut in [&b"[-I]"[..], b"[-Inf]", b"[-Infinit]", b"[-I:nfinity]", b"[-x]"] {
        assert_eq!(err(cut), Some(ScanError::Syntax { offset: 1, expected: "expecting a value" }), "{cut:?}");
    }
    assert!(err(b"[-Infinity]").is_none());
    let long = format!("[{}]", "1".repeat(4301));
    assert_eq!(err(long.as_bytes()), Some(ScanError::LongInteger { offset: 1, limit: 4300 }));
    assert!(err(format!("[{}]", "1".repeat(4300)).as_bytes()).is_none());
    let deep = "[".repeat(crate::error::MAX_DEPTH + 1);
    assert_eq!(err(deep.as_bytes()), Some(ScanError::TooDeep { offset: crate::error::MAX_DEPTH }));
    assert!(err(b"\xEF\xBB\xBF{}").is_none());
}

#[test]
fn integers_are_held_to_the_digit_limit_given() {
    let err = |s: &str, digits: IntDigits| scan::parse(s.as_bytes(), Root::Request, digits).err();
    let ones = |n: usize| "1".repeat(n);
    assert!(err(&format!("[{}]", ones(1000)), IntDigits(Some(1000))).is_none());
    assert_eq!(
        err(&format!("[2, -{}]", ones(1001)), IntDigits(Some(1000))),
        Some(ScanError::LongInteger { offset: 4, limit: 1000 })
    );
    // The first refusal by position: the integer before a syntax error after it.
    assert_eq!(
        err(&format!("[{}, ]", ones(1001)), IntDigits(Some(1000))),
        Some(ScanError::LongInteger { offset: 1, limit: 1000 })
    );
    // No limit (Python's setting 0); a fraction or exponent is no integer.
    assert!(err(&format!("[{}]", ones(100_000)), IntDigits(None)).is_none());
    assert!(err(&format!("[{}.5, {}e1]", ones(5000), ones(5000)), IntDigits::default()).is_none());
    assert_eq!(
        ScanError::LongInteger { offset: 4, limit: 1000 }.to_string(),
        "not JSON: an integer of more than 1000 digits at byte 4"
    );
}

#[test]
fn utf8_is_checked_where_it_lies_and_reported_before_any_syntax_error() {
    let err = |s: &[u8]| {
        let ours = scan::parse(s, Root::Request, IntDigits::default()).err();
        assert_eq!(ours, scan::parse_with(s, Root::Request, IntDigits::default(), false).err(), "{s:?}");
        ours
    };
    // Invalid UTF-8 outside strings, or after a syntax error, is still what is reported.
    assert_eq!(err(b"[1,] \xff"), Some(ScanError::NotUtf8 { offset: 5 }));
    assert_eq!(err(b"[1] \xe2\x82\xac"), Some(ScanError::Syntax { offset: 4, expected: "extra data after the value" }));
    assert_eq!(err(b"[\xc3\xa9]"), Some(ScanError::Syntax { offset: 1, expected: "expecting a value" }));
    assert_eq!(err(b"[\"a\", \"\xe2\x82\"]"), Some(ScanError::NotUtf8 { offset: 7 }));
    // A multi-byte character (or a bad byte) at every position around a block boundary.
    for pad in 0..140 {
        let head = format!("[\"{}", "a".repeat(pad));
        for (text, units) in [("\u{e9}", 1), ("\u{20ac}\\n", 2), ("\u{1f600}", 2)] {
            let body = format!("{head}{text}\"]");
            let tape = scan::parse(body.as_bytes(), Root::Request, IntDigits::default()).unwrap();
            let string = tape.node(0).view().ok().and_then(|v| match v {
                crate::View::Array { mut items, .. } => items.next(),
                _ => None,
            });
            assert_eq!(string.and_then(|s| s.str_units()), Some(pad + units), "{body:?}");
        }
        for bad in [&b"\xff"[..], b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\xa0\x80"] {
            let mut body = head.clone().into_bytes();
            body.extend_from_slice(bad);
            body.extend_from_slice(b"bc\"]");
            assert_eq!(err(&body), Some(ScanError::NotUtf8 { offset: 2 + pad }), "{body:?}");
        }
    }
}

#[test]
fn a_string_ends_at_its_first_unescaped_quote_wherever_it_lies() {
    // What comes last in a string (the scan reads one that closes in its first block with
    // nothing to look at from the block's masks alone), followed by a string holding what
    // that shortcut must not see, starting at every offset around two block boundaries.
    let lasts = ["", "\\n", "\\\"", "\u{e9}", "\\\\", "\u{1}", "\u{7f}"];
    for pad in 0..140 {
        for last in lasts {
            for next in ["\\\\\u{e9}\u{1}", "\\\"\u{e9}\\n"] {
                let body = format!("[\"{}{last}\",\"{next}\"]", "a".repeat(pad));
                let ours = parsed(&body);
                let portable = scan::parse_with(body.as_bytes(), Root::Request, IntDigits::default(), false)
                    .map(|tape| value(tape.node(0)));
                assert_eq!(ours, portable, "{body:?}");
                match serde_json::from_str::<Value>(&body) {
                    Ok(theirs) => assert_eq!(ours, Ok(theirs), "{body:?}"),
                    Err(_) => assert!(ours.is_err(), "{body:?}"),
                }
                // A control byte is reported where the first one lies, in whichever string.
                if let Some(offset) = body.find('\u{1}') {
                    let expected = "an unescaped control character in a string";
                    assert_eq!(ours, Err(ScanError::Syntax { offset, expected }), "{body:?}");
                }
            }
        }
    }
}

#[test]
fn request_errors_come_in_the_object_paths_order() {
    let pack = |s: &str| pack_body(s.as_bytes(), &options(100), Root::Request, false).err().map(|e| e.to_string());
    assert_eq!(pack("[1]").as_deref(), Some("request body: expected a JSON object, got list"));
    assert_eq!(pack("{}").as_deref(), Some("request body: no 'messages' or 'input' member"));
    assert_eq!(
        pack(r#"{"messages": {}, "system": 1}"#).as_deref(),
        Some("system: expected str, list or None, got int")
    );
    assert_eq!(pack(r#"{"messages": {}}"#).as_deref(), Some("messages: expected a list, got dict"));
    assert_eq!(pack(r#"{"messages": [{"role": "user"}, 3]}"#).as_deref(), Some("message 1: expected a dict, got int"));
    assert_eq!(
        pack(r#"{"messages": [{"role": "user", "content": 1.5}]}"#).as_deref(),
        Some("message 0, field 'content': expected str, list or None, got float")
    );
    let transcript = |s: &str| pack_body(s.as_bytes(), &options(100), Root::RequestOrTranscript, false);
    assert!(transcript(r#"[{"role": "user", "content": "hi"}]"#).is_ok());
    assert_eq!(transcript("3").err().map(|e| e.to_string()).as_deref(), Some(NO_TRANSCRIPT));
}

fn message(role: &str, text: &str) -> Value {
    json!({"role": role, "content": text})
}

#[test]
fn a_body_that_fits_is_unchanged_and_a_packed_one_keeps_its_bytes() {
    let body = r#"{"model": "m",  "messages" : [ {"role":"system","content":"s"} ,
        {"content": "old", "role": "user"}, {"role":"assistant","content":"LONG"},
        {"role":"user",  "content":"now \u00e9"} ], "stream": true}"#
        .replace("LONG", &"y".repeat(400));
    let fits = pack_body(body.as_bytes(), &options(1000), Root::Request, true).unwrap();
    assert_eq!((fits.body, fits.dropped, fits.input_tokens), (None, 0, Some(fits.packed.tokens)));
    let packed = pack_body(body.as_bytes(), &options(60), Root::Request, false).unwrap();
    let out = String::from_utf8(packed.body.unwrap()).unwrap();
    assert_eq!(packed.packed.kept, [0, 3]);
    let note = packed.packed.note.as_ref().unwrap();
    let mut note_json = Vec::new();
    write_note(&mut note_json, note);
    let note_json = String::from_utf8(note_json).unwrap();
    assert_eq!(
        out,
        format!(
            "{{\"model\": \"m\",  \"messages\" : [ {{\"role\":\"system\",\"content\":\"s\"}} ,\n        {note_json},\n        {{\"role\":\"user\",  \"content\":\"now \\u00e9\"}} ], \"stream\": true}}"
        )
    );
    let value: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(value["messages"][1]["content"], note.text.as_str());
}

#[test]
fn note_strings_are_escaped_as_json_stringify_does() {
    let mut out = Vec::new();
    write_json_string(&mut out, "a\"\\\n\u{1}é\u{7f}\u{2028}");
    assert_eq!(String::from_utf8(out).unwrap(), "\"a\\\"\\\\\\n\\u0001é\u{7f}\u{2028}\"");
}

/// Any JSON value, with tricky strings and numbers.
fn any_value() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        any::<String>(),
        proptest::collection::vec(
            proptest::sample::select(vec!["a", "\"", "\\", "\n", "\u{1}", "é", "😀", "/", "\u{2028}"]),
            0..8
        )
        .prop_map(|parts| parts.concat()),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<u64>().prop_map(|i| json!(i)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        text.clone().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(text.clone(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// serde_json's value with every number as JavaScript holds it (a double beyond ±2^53).
fn as_doubles(v: &Value) -> Value {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => json!(i),
            None => serde_json::Number::from_f64(n.as_f64().unwrap_or(0.0)).map_or(Value::Null, Value::Number),
        },
        Value::Array(a) => Value::Array(a.iter().map(as_doubles).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), as_doubles(v))).collect()),
        other => other.clone(),
    }
}

/// The UTF-16 length and JSON length of the one string of `["{body}"]`, known without
/// decoding, after `pad` bytes of whitespace (to move it across block boundaries).
fn measured(body: &str, pad: usize) -> (usize, usize) {
    let text = format!("{}[\"{body}\"]", " ".repeat(pad));
    let tape = scan::parse(text.as_bytes(), Root::Request, IntDigits::default()).unwrap();
    let node = tape.node(1);
    // `value` checks both against the decoded text.
    value(node);
    (node.str_units().unwrap(), node.str_json_len().unwrap())
}

#[test]
fn unicode_escapes_are_measured_from_their_digits() {
    // (body, UTF-16 units, JSON.stringify length with its quotes)
    let cases = [
        (r"\u0041", 1, 3),
        (r"\u00e9\u4E2D", 2, 4),
        (r"\u001f\u0000", 2, 14),
        (r"\u0008\u000a\u0022\u005c", 4, 10),
        (r"\ud83d\ude00", 2, 4),
        (r"\uD83D\uDE00\ud83d\ude00", 4, 6),
        (r"\ud800", 1, 8),
        (r"\udc00", 1, 8),
        (r"\udc00\ud800", 2, 14),
        (r"\ud83d\u0041", 2, 9),
        (r"\ud83d\ud83d\ude00", 3, 10),
        (r"a\ud83d", 2, 9),
        (r"\\u0041", 6, 9),
    ];
    for (body, units, json) in cases {
        for pad in [0, 40, 50, 55, 57, 60, 62] {
            assert_eq!(measured(body, pad), (units, json), "{body} after {pad} bytes");
        }
    }
}

#[test]
fn the_volatile_tag_is_found_without_decoding_the_whole_string() {
    let text = r#"["\u003crun-state>\n", "<run-state>", "<run-stat\u0065>\nx", "\ud800<run-state>", "<run\n", "\n<run-state>", "<run-state\ud83d\ude00", [{"text": "<run-\u0073tate>\n"}], 7]"#;
    let tape = scan::parse(text.as_bytes(), Root::Request, IntDigits::default()).unwrap();
    let View::Array { items, .. } = tape.node(0).view().unwrap() else { panic!("an array") };
    let found: Vec<bool> = items.map(|item| crate::pack::is_volatile_content(&item)).collect();
    assert_eq!(found, [true, true, true, false, false, false, false, true, false]);
    // Once decoded, the decoded text answers the same.
    let decoded: Vec<bool> = match tape.node(0).view().unwrap() {
        View::Array { items, .. } => items
            .map(|item| {
                let _ = item.as_text();
                crate::pack::is_volatile_content(&item)
            })
            .collect(),
        _ => vec![],
    };
    assert_eq!(decoded, found);
}

#[test]
fn whitespace_runs_are_skipped_wherever_they_end() {
    for run in
        ["", " ", "\n", " \t", "\r\n", "\n  ", &format!("\n{}", " ".repeat(15)), &format!("\n{}\t", " ".repeat(40))]
    {
        let text =
            format!("{run}{{{run}\"a\"{run}:{run}[{run}1{run},{run}{{}}{run}]{run},{run}\"b\"{run}:{run}2{run}}}{run}");
        assert_eq!(parsed(&text), Ok(json!({"a": [1, {}], "b": 2})), "{run:?}");
        // A byte that only looks like whitespace ends the run where it stands.
        let bad = format!("[1{run}\u{b}]");
        let at = 2 + run.len();
        assert_eq!(parsed(&bad), Err(ScanError::Syntax { offset: at, expected: "expecting ',' or ']'" }), "{run:?}");
    }
}

#[test]
fn indented_bodies_deeper_than_the_predicted_depths_read_as_written() {
    // 40 arrays deep, each line indented by its depth (past `PREDICTED_DEPTHS`, nothing is
    // predicted), and a last item indented 300 columns (a run too long to remember).
    let depth = 40;
    let mut text = String::new();
    for d in 0..depth {
        text += &format!("{}[\n", " ".repeat(2 * d));
    }
    text += &format!("{}1,\n{}2\n", " ".repeat(2 * depth), " ".repeat(300));
    for d in (0..depth).rev() {
        text += &format!("{}]\n", " ".repeat(2 * d));
    }
    let mut expected = json!([1, 2]);
    for _ in 1..depth {
        expected = json!([expected]);
    }
    assert_eq!(parsed(&text), Ok(expected));
}

#[test]
fn a_tape_leaves_its_buffers_to_the_next_parse_on_its_thread_unless_they_are_large() {
    let body = br#"{"messages": [{"role": "user", "content": "line\nline"}]}"#;
    let first = scan::parse(body, Root::Request, IntDigits::default()).unwrap();
    let buffers = (first.slots.as_ptr(), first.escaped.as_ptr());
    let bytes =
        (first.slots.capacity() * size_of::<scan::Slot>(), first.escaped.capacity() * size_of::<scan::Escaped>());
    drop(first);
    // Blocks of the buffers' sizes, held meanwhile: an allocator handing a freed block
    // back to the next request of its size is not what makes the buffers the same.
    let decoys = (vec![1u8; bytes.0], vec![1u8; bytes.1]);
    let second = scan::parse(body, Root::Request, IntDigits::default()).unwrap();
    assert_eq!((second.slots.as_ptr(), second.escaped.as_ptr()), buffers);
    drop(decoys);
    assert_eq!((second.slots.len(), second.escaped.len()), (8, 1));
    drop(second);
    // A body of a million values: its tape's slots are over the bound, and let go.
    let huge = format!("[{}]", vec!["0"; 1 << 20].join(","));
    let large = scan::parse(huge.as_bytes(), Root::RequestOrTranscript, IntDigits::default()).unwrap();
    let large_capacity = large.slots.capacity();
    drop(large);
    let after = scan::parse(body, Root::Request, IntDigits::default()).unwrap();
    assert!(after.slots.capacity() < large_capacity / 100, "{} kept", after.slots.capacity());
}

proptest! {
    #[test]
    fn scanner_agrees_with_serde_json(v in any_value(), pretty in any::<bool>()) {
        let text = if pretty { serde_json::to_string_pretty(&v).unwrap() } else { serde_json::to_string(&v).unwrap() };
        let tape = scan::parse(text.as_bytes(), Root::Request, IntDigits::default()).unwrap();
        prop_assert_eq!(value(tape.node(0)), as_doubles(&v));
        prop_assert_eq!(json_len(&tape.node(0)), json_len(&&v));
        // The portable scan reads the same values (the AVX2 one is the default here).
        let portable = scan::parse_with(text.as_bytes(), Root::Request, IntDigits::default(), false).unwrap();
        prop_assert_eq!(value(portable.node(0)), as_doubles(&v));
    }

    // An indented body whose lines are indented irregularly now and then (shallower,
    // deeper, past 255 columns, with a tab or a carriage return): each item's run is
    // predicted from the last at its depth (`skip_item_ws`), and a wrong guess is mended.
    #[test]
    fn irregularly_indented_bodies_read_as_written(
        v in any_value(),
        shifts in proptest::collection::vec(prop_oneof![8 => Just(0i32), 2 => -3i32..4, 1 => Just(300), 1 => Just(-1000)], 1..40),
    ) {
        let root = json!({"v": v, "w": [v.clone(), [[[v]]]]});
        let pretty = serde_json::to_string_pretty(&root).unwrap();
        let lines = pretty.split('\n').enumerate().map(|(i, line)| {
            let body = line.trim_start_matches(' ');
            let indent = (line.len() - body.len()) as i32;
            let run = match shifts[i % shifts.len()] {
                -1000 => "\t\r ".to_string(),
                shift => " ".repeat((indent + shift).max(0) as usize),
            };
            format!("{run}{body}")
        });
        let text = lines.collect::<Vec<_>>().join("\n");
        prop_assert!(text.trim_start().starts_with("{\n"), "not read as indented");
        for avx2 in [true, false] {
            let tape = scan::parse_with(text.as_bytes(), Root::Request, IntDigits::default(), avx2 && std::arch::is_x86_feature_detected!("avx2")).unwrap();
            prop_assert_eq!(value(tape.node(0)), as_doubles(&root));
        }
    }

    #[test]
    fn escaped_lengths_are_the_decoded_ones(parts in proptest::collection::vec(proptest::sample::select(vec![
        "a", "é", "😀", "\\n", "\\t", "\\r", "\\b", "\\f", "\\/", "\\\"", "\\\\", "\\u0041", "\\u00e9", "\\u4e2d", "\\uFFFF", "\\u001f",
        "\\u0009", "\\ud800", "\\udbff", "\\udc00", "\\udfff", "\\ud83d\\ude00", "\\uD83D\\uDE00",
    ]), 0..60), pad in 0usize..64) {
        // `measured` checks both lengths against the decoded text's.
        measured(&parts.concat(), pad);
    }

    #[test]
    fn scanner_never_panics_and_agrees_on_validity(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let ours = scan::parse(&bytes, Root::Request, IntDigits::default());
        let portable = scan::parse_with(&bytes, Root::Request, IntDigits::default(), false);
        prop_assert_eq!(ours.as_ref().err(), portable.as_ref().err());
        // serde_json refuses NaN/Infinity and accepts big integers: compare where both apply.
        let plain = !bytes.iter().any(|&b| matches!(b, b'N' | b'I' | b'\xEF' | b'e' | b'E' | b'\\')) && !bytes.iter().all(u8::is_ascii_whitespace);
        if plain && bytes.iter().filter(|b| b.is_ascii_digit()).count() < 19 {
            prop_assert_eq!(ours.is_ok(), serde_json::from_slice::<Value>(&bytes).is_ok(), "{:?}", String::from_utf8_lossy(&bytes));
        }
    }

    #[test]
    fn packing_a_body_equals_packing_its_values(
        sizes in proptest::collection::vec((0u8..3, 0usize..300), 1..20),
        budget in 0u64..600,
        pretty in any::<bool>(),
    ) {
        let mut messages = vec![message("system", "sys")];
        for (kind, size) in sizes {
            let text = "w ".repeat(size);
            messages.push(match kind {
                0 => message("user", &text),
                1 => message("assistant", &text),
                _ => json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": text}}]}),
            });
        }
        let request = json!({"model": "x", "messages": messages, "n": 1});
        let text = if pretty { serde_json::to_string_pretty(&request).unwrap() } else { serde_json::to_string(&request).unwrap() };
        let out = pack_body(text.as_bytes(), &options(budget), Root::Request, false).unwrap();
        let refs: Vec<&Value> = messages.iter().collect();
        let mut t = Transcript::new(&refs, CharsPerToken).unwrap();
        let expected = pack::pack(&mut t, &options(budget)).unwrap();
        prop_assert_eq!(&out.packed, &expected);
        let body: Value = match &out.body {
            Some(b) => serde_json::from_slice(b).unwrap(),
            None => request.clone(),
        };
        let mut kept: Vec<Value> = expected.kept.iter().map(|&i| messages[i].clone()).collect();
        if let Some(note) = &expected.note {
            kept.insert(note.at, json!({"role": note.role.as_str(), "content": note.text}));
        }
        prop_assert_eq!(&body["messages"], &Value::Array(kept));
        prop_assert_eq!(&body["model"], &request["model"]);
    }
}

#[test]
fn batches_equal_one_by_one_on_any_number_of_threads() {
    let bodies: Vec<String> = (0..40)
        .map(|k| {
            let messages: Vec<Value> = (0..k % 7 + 1).map(|i| message("user", &"z ".repeat(37 * i + k))).collect();
            if k % 9 == 0 {
                "{not json".to_string()
            } else {
                json!({"messages": messages}).to_string()
            }
        })
        .collect();
    let inputs: Vec<&[u8]> = bodies.iter().map(|b| b.as_bytes()).collect();
    let one: Vec<_> = inputs.iter().map(|b| pack_body(b, &options(50), Root::Request, false)).collect();
    for threads in [1, 2, 8, 1000] {
        let mut all = Vec::new();
        pack_bodies_with(&inputs, &options(50), Root::Request, false, threads, |run| {
            all.extend(run);
            true
        });
        assert_eq!(all, one, "{threads}");
    }
}

#[test]
fn runs_are_handed_over_in_order_and_a_refusal_stops_the_batch() {
    let bodies: Vec<String> =
        (0..200).map(|k| json!({"messages": [message("user", &"w ".repeat(k))]}).to_string()).collect();
    let inputs: Vec<&[u8]> = bodies.iter().map(|b| b.as_bytes()).collect();
    let one: Vec<_> = inputs.iter().map(|b| pack_body(b, &options(50), Root::Request, false)).collect();
    for threads in [1, 2, 8] {
        let mut runs = Vec::new();
        pack_bodies_with(&inputs, &options(50), Root::Request, false, threads, |run| {
            runs.push(run);
            true
        });
        let (last, whole) = runs.split_last().unwrap();
        assert!(whole.iter().all(|run| run.len() >= 32) && !last.is_empty(), "{threads}");
        assert_eq!(runs.concat(), one, "{threads}");
        // A refusal is the last call. (On several threads, the first run may already
        // hold every body: it is all that was done, in order, when it was handed over.)
        let (mut calls, mut handed) = (0, 0);
        pack_bodies_with(&inputs, &options(50), Root::Request, false, threads, |run| {
            calls += 1;
            handed += run.len();
            false
        });
        assert_eq!(calls, 1, "{threads}");
        assert!((32..=200).contains(&handed), "{threads}: {handed}");
        if threads == 1 {
            assert_eq!(handed, 32, "one thread packs no body past the refused run");
        }
    }
}

#[test]
fn lines_are_packed_in_order_with_bad_ones_reported() {
    let long = json!([message("user", &"q ".repeat(300)), message("assistant", "a"), message("user", "now")]);
    let block = format!("{long}\n\n  \r\n[1]\n{{\"id\": 7, \"messages\": []}}\n{{bad\n");
    let lines = pack_lines(block.as_bytes(), b"", &options(20), 2);
    let output = String::from_utf8(lines.output).unwrap();
    let out: Vec<&str> = output.lines().collect();
    assert_eq!(out.len(), 2);
    assert_eq!(out[1], "{\"id\": 7, \"messages\": []}");
    assert!(out[0].len() < long.to_string().len());
    assert_eq!((lines.totals.packed, lines.totals.dropped, lines.totals.unfit), (2, 1, 0));
    let errors: Vec<(usize, String)> = lines.errors.iter().map(|(i, e)| (*i, e.to_string())).collect();
    assert_eq!(errors[0], (3, "message 0: expected a dict, got int".to_string()));
    assert_eq!(errors[1].0, 5);
    assert!(errors[1].1.starts_with("not JSON"));
}

#[test]
fn rows_are_packed_in_order_each_with_its_end() {
    let long = json!([message("user", &"q ".repeat(300)), message("assistant", "a"), message("user", "now")]);
    let long = long.to_string();
    let body = r#"{"id": 7, "messages": []}"#;
    let rows: Vec<&[u8]> = vec![long.as_bytes(), b"{bad", body.as_bytes(), b"", b"[1]"];
    for threads in [1, 2] {
        let packed = pack_rows(&rows, b"", &options(20), threads);
        let one = pack_body(long.as_bytes(), &options(20), Root::RequestOrTranscript, true).unwrap();
        let first = one.body.unwrap();
        assert_eq!(
            packed.ends,
            [first.len(), first.len(), first.len() + body.len(), first.len() + body.len(), first.len() + body.len()]
        );
        assert_eq!(packed.output, [first.as_slice(), body.as_bytes()].concat());
        let errors: Vec<usize> = packed.errors.iter().map(|(row, _)| *row).collect();
        assert_eq!(errors, [1, 3, 4], "a bad row, an empty one, one not a transcript");
        assert_eq!(
            packed.totals,
            RowTotals {
                packed: 2,
                tokens_before: one.input_tokens.unwrap(),
                tokens_after: one.packed.tokens,
                dropped: one.dropped,
                unfit: 0,
                uncounted: 0,
            }
        );
        let lines = pack_rows(&rows, b"\n", &options(20), threads);
        assert_eq!(lines.output, [first.as_slice(), b"\n", body.as_bytes(), b"\n"].concat());
        assert_eq!(lines.ends.last(), Some(&lines.output.len()));
    }
}

#[test]
fn a_row_that_drops_a_message_no_reader_sizes_packs_with_its_count_before_unknown() {
    let run = |middle: serde_json::Value| {
        let mut messages = vec![message("system", "s"), message("user", "task")];
        messages.extend((0..200).map(|i| message("assistant", &format!("step {i} {}", "x".repeat(400)))));
        messages[60] = middle;
        messages.push(message("user", "go on"));
        serde_json::Value::Array(messages).to_string()
    };
    let (bad, good) = (run(json!({"content": "no role"})), run(message("assistant", "fine")));
    let rows: Vec<&[u8]> = vec![bad.as_bytes(), good.as_bytes()];
    let packed = pack_rows(&rows, b"\n", &options(3_000), 1);
    let one = pack_body(good.as_bytes(), &options(3_000), Root::RequestOrTranscript, true).unwrap();
    let unread = pack_body(bad.as_bytes(), &options(3_000), Root::RequestOrTranscript, true).unwrap();
    assert_eq!((unread.input_tokens, unread.body.as_ref(), unread.dropped), (None, one.body.as_ref(), 174));
    assert!(packed.errors.is_empty());
    assert_eq!((packed.totals.packed, packed.totals.uncounted), (2, 1));
    assert_eq!(packed.totals.tokens_before, one.input_tokens.unwrap());
}

#[test]
fn the_tokens_a_row_came_with_are_read_in_the_format_every_entry_decides() {
    // The pack reads chat messages only (the reasoning item sits in the dropped middle);
    // the count, as tokens_of, reads Responses items, as the reasoning item marks them.
    let mut entries = vec![message("user", "task"), json!({"type": "reasoning", "id": "r", "summary": []})];
    entries.extend((0..20).map(|i| message(if i % 2 == 1 { "assistant" } else { "user" }, &"m".repeat(400))));
    entries.push(message("user", "go"));
    let row = Value::Array(entries).to_string();
    let everything = pack_body(row.as_bytes(), &options(1_000_000), Root::RequestOrTranscript, true).unwrap();
    let whole = everything.packed.tokens; // nothing dropped: every entry read, as Responses items
    assert_eq!((everything.dropped, everything.input_tokens), (0, Some(whole)));
    for edits in [vec![], vec![crate::edits::Edit::ClearToolUses(crate::edits::ClearToolUses::default())]] {
        let options = PackOptions { edits, ..options(500) };
        let packed = pack_body(row.as_bytes(), &options, Root::RequestOrTranscript, true).unwrap();
        assert!(packed.dropped > 0);
        assert_eq!(packed.input_tokens, Some(whole));
    }
}

#[test]
fn a_block_cut_anywhere_and_its_rest_pack_as_the_whole_text() {
    let long = json!([message("user", &"q ".repeat(300)), message("assistant", "a"), message("user", "now")]);
    let text = format!("{long}\n \n{{bad\n{{\"messages\": [], \"id\": 2}}\n\n{long}");
    let whole = pack_lines(text.as_bytes(), b"", &options(20), 1);
    let errors = |lines: &PackedLines| lines.errors.iter().map(|(i, e)| (*i, e.to_string())).collect::<Vec<_>>();
    assert_eq!((whole.newlines, whole.totals.packed, errors(&whole).len()), (5, 3, 1));
    for at in 0..=text.len() {
        // A reader's large read stops at `at`; `rest` runs to the end of that line.
        let (block, after) = text.as_bytes().split_at(at);
        let rest = after.iter().position(|&b| b == b'\n').map_or(after, |end| after.get(..=end).unwrap_or(after));
        let cut = pack_lines(block, rest, &options(20), 2);
        let tail = after.get(rest.len()..).unwrap_or_default();
        let next = pack_lines(tail, b"", &options(20), 2);
        let mut output = cut.output.clone();
        output.extend_from_slice(&next.output);
        assert_eq!(output, whole.output, "cut at {at}");
        assert_eq!(cut.newlines + next.newlines, whole.newlines, "cut at {at}");
        let shifted: Vec<_> = errors(&next).into_iter().map(|(i, e)| (i + cut.newlines, e)).collect();
        assert_eq!([errors(&cut), shifted].concat(), errors(&whole), "cut at {at}");
    }
}

#[test]
fn tools_and_prompts_are_checked_in_the_object_paths_order() {
    let pack = |s: &str| pack_body(s.as_bytes(), &options(100), Root::Request, false).err().map(|e| e.to_string());
    assert_eq!(pack(r#"{"messages": {}, "tools": 1}"#).as_deref(), Some("tools: expected a list or None, got int"));
    assert_eq!(pack(r#"{"messages": [], "tools": [{}, []]}"#).as_deref(), Some("tools[1]: expected a dict, got list"));
    assert_eq!(
        pack(r#"{"tools": 1, "messages": [], "system": 2}"#).as_deref(),
        Some("system: expected str, list or None, got int")
    );
    assert_eq!(
        pack(r#"{"input": [], "instructions": {}}"#).as_deref(),
        Some("instructions: expected str, list or None, got dict")
    );
    assert_eq!(pack(r#"{"input": 3}"#).as_deref(), Some("input: expected a list or str, got int"));
    // Null tools and a chat body's instructions (or a Responses body's system) cost nothing.
    let plain = pack_body(br#"{"messages": []}"#, &options(100), Root::Request, false).unwrap();
    for other in [r#"{"messages": [], "tools": null}"#, r#"{"messages": [], "instructions": "abcdefgh"}"#] {
        let packed = pack_body(other.as_bytes(), &options(100), Root::Request, false).unwrap();
        assert_eq!(packed.packed, plain.packed);
    }
}

#[test]
fn tools_count_as_a_system_message_with_their_json() {
    let tools = r#"[{"type": "function", "name": "f", "parameters": {"a": 1.0}}]"#;
    let compact = r#"[{"type":"function","name":"f","parameters":{"a":1}}]"#;
    let cost = crate::tokens::estimate_units(compact.len()) + crate::tokens::MESSAGE_OVERHEAD;
    let body = format!(r#"{{"messages": [{{"role": "user", "content": "abcd"}}], "tools": {tools}}}"#);
    let packed = pack_body(body.as_bytes(), &options(1000), Root::Request, false).unwrap();
    assert_eq!(packed.packed.tokens, u128::from(cost + 1 + 4));
    let exact = PackOptions { counting: Counting::Exact(Encoding::O200kBase, Sizing::Seed), ..options(1000) };
    let counted = pack_body(body.as_bytes(), &exact, Root::Request, false).unwrap();
    let o200k = |t: &str| u128::try_from(Encoding::O200kBase.count_str(t)).unwrap() + 4;
    assert_eq!(counted.packed.tokens, o200k(compact) + o200k("abcd"));
}

#[test]
fn responses_bodies_pack_their_input_items() {
    let call = |i: usize| {
        format!(
            r#"{{"type":"function_call","call_id":"c{i}","name":"f","arguments":"{{}}"}},
            {{"type":"function_call_output","call_id":"c{i}","output":"{}"}}"#,
            "z".repeat(200)
        )
    };
    let calls: Vec<String> = (0..6).map(call).collect();
    let body = format!(
        r#"{{"model":"m","instructions":"Be brief.","input":[{{"role":"user","content":"go"}},{},
        {{"type":"message","role":"user","content":"now"}}],"store":false}}"#,
        calls.join(",")
    );
    let packed = pack_body(body.as_bytes(), &options(300), Root::Request, false).unwrap();
    let out: Value = serde_json::from_slice(&packed.body.unwrap()).unwrap();
    let items = out["input"].as_array().unwrap();
    assert_eq!(packed.packed.kept.len() + 1, items.len());
    assert_eq!(items[0]["type"], "message", "the note is a message item");
    assert_eq!(out["instructions"], "Be brief.");
    assert_eq!(out["store"], false);
    // Calls stay with their outputs.
    let partner = |i: usize| if i % 2 == 1 { i + 1 } else { i - 1 };
    assert!(packed.packed.kept.iter().all(|&i| i == 0 || i == 13 || packed.packed.kept.contains(&partner(i))));
    assert!(packed.packed.kept.contains(&13));
    // A string input is one user message: counted, never changed.
    let text = r#"{"input": "hello there", "instructions": "abcd"}"#;
    let one = pack_body(text.as_bytes(), &options(100), Root::Request, true).unwrap();
    assert_eq!((one.body, one.packed.kept, one.packed.fits, one.packed.tokens), (None, vec![0], true, 3 + 4 + 1 + 4));
    let over = pack_body(text.as_bytes(), &options(10), Root::Request, false).unwrap();
    assert!(!over.packed.fits);
    let pinned = PackOptions { pinned: vec![1], ..options(100) };
    let err = pack_body(text.as_bytes(), &pinned, Root::Request, false).err().map(|e| e.to_string());
    assert_eq!(err.as_deref(), Some("pinned index 1 is out of range for 1 messages"));
}

#[test]
fn message_items_know_their_source_bytes() {
    let body = r#"{"messages": "no", "messages": [ {"role": "user", "content": "a\nb"} ,{"role":"tool","content":[1.0]}],
        "input": [{"type": "reasoning"}], "other": [{"role": "user"}]}"#;
    let tape = scan::parse(body.as_bytes(), Root::Request, IntDigits::default()).unwrap();
    let sources = |list: Option<usize>| -> Vec<Option<String>> {
        let View::Array { items, .. } = tape.node(list.unwrap()).view().unwrap() else { panic!("not a list") };
        items.map(|item| item.source().map(|s| String::from_utf8(s.to_vec()).unwrap())).collect()
    };
    let messages = sources(tape.messages);
    assert_eq!(messages[0].as_deref(), Some(r#"{"role": "user", "content": "a\nb"}"#));
    assert_eq!(messages[1].as_deref(), Some(r#"{"role":"tool","content":[1.0]}"#));
    assert_eq!(sources(tape.input_items), [Some(r#"{"type": "reasoning"}"#.to_string())]);
    // Other values have none: the fields of a message, and items of untracked lists.
    assert_eq!(tape.node(tape.messages.unwrap() + 2).source(), None);
    // A messages member that is not the last array: its layout is not the member's.
    let stale = r#"{"messages": [{"role": "user", "content": "x"}], "messages": "no"}"#;
    let tape = scan::parse(stale.as_bytes(), Root::Request, IntDigits::default()).unwrap();
    assert!((0..8).all(|at| tape.node(at).source().is_none()));
}

#[test]
fn exact_counts_by_source_equal_counts_of_the_text() {
    // Escaped strings, parts, tool calls and Responses items sized whole, all long enough
    // to be cached by their source.
    let long = "word ".repeat(30);
    let body = format!(
        r#"{{"messages": [{{"role": "user", "content": "{long}\n\u00e9\ud83d\ude00"}},
        {{"role": "user", "content": [{{"type": "text", "text": "{long}"}}]}},
        {{"role": "assistant", "content": null, "tool_calls": [{{"id": "c1", "function": {{"arguments": "{long}"}}}}]}},
        {{"role": "tool", "tool_call_id": "c1", "content": "{long}"}}]}}"#
    );
    let responses = format!(
        r#"{{"input": [{{"role": "user", "content": "{long}"}}, {{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{long}"}},
        {{"type": "function_call_output", "call_id": "c", "output": "{long}"}}]}}"#
    );
    for body in [body, responses] {
        let exact = PackOptions { counting: Counting::Exact(Encoding::O200kBase, Sizing::Seed), ..options(100_000) };
        // Counted, then (the sources remembered) looked up.
        let first = pack_body(body.as_bytes(), &exact, Root::Request, true).unwrap();
        assert_eq!(pack_body(body.as_bytes(), &exact, Root::Request, true).unwrap(), first);
        let Value::Object(request) = serde_json::from_str(&body).unwrap() else { panic!("not an object") };
        let items = request.get("messages").or_else(|| request.get("input")).unwrap().as_array().unwrap();
        let by_text: u128 = items
            .iter()
            .map(|m| {
                let checked = crate::items::check_entry(&m).unwrap();
                let mut buffer = String::new();
                let text = crate::encoding::message_text(&m, &checked, &mut buffer).unwrap();
                u128::try_from(Encoding::O200kBase.count_uncached(&text.to_string_lossy())).unwrap() + 4
            })
            .sum();
        assert_eq!(first.input_tokens, Some(by_text));
    }
}

/// Control bytes and bytes above 0x7F in one block, first or later, full or the padded
/// tail; and a string that ends in a later full block, its masks left to the strings
/// after it (helper-83's review of the rare-byte mask).
#[test]
fn control_and_high_bytes_share_a_block_wherever_it_lies() {
    let err = |s: &[u8]| {
        let ours = scan::parse(s, Root::Request, IntDigits::default()).err();
        assert_eq!(ours, scan::parse_with(s, Root::Request, IntDigits::default(), false).err(), "{s:?}");
        ours
    };
    let control = "an unescaped control character in a string";
    for pad in 0..200 {
        let head = format!("[\"{}", "a".repeat(pad));
        let at = head.len();
        for (rest, off, expected) in [
            (&b"\xc3\xa9\x01\"]"[..], 2, control),
            (b"\x01\xc3\xa9\"]", 0, control),
            (b"\xe2\x82\xac\\x\x01\"]", 3, "an invalid escape"),
            (b"\xe2\x82\xac\x01\\x\"]", 3, control),
            (b"\xc3\xa9\\u12\x01\"]", 3, "an invalid escape"),
        ] {
            let mut body = head.clone().into_bytes();
            body.extend_from_slice(rest);
            assert_eq!(err(&body), Some(ScanError::Syntax { offset: at + off, expected }), "{body:?}");
        }
        let mut body = head.clone().into_bytes();
        body.extend_from_slice(b"\x01\xff\"]");
        assert_eq!(err(&body), Some(ScanError::NotUtf8 { offset: at + 1 }));
        for next in ["\\\\\u{e9}", "\u{1}", "\u{e9}\\n", "ok"] {
            let text = format!("{head}\u{e9}\",\"{next}\",\"b\"]{}", " ".repeat(130));
            let ours = parsed(&text);
            let portable =
                scan::parse_with(text.as_bytes(), Root::Request, IntDigits::default(), false).map(|t| value(t.node(0)));
            assert_eq!(ours, portable, "{text:?}");
            assert_eq!(ours.is_ok(), serde_json::from_str::<Value>(&text).is_ok(), "{text:?}");
            if let Some(offset) = text.find('\u{1}') {
                assert_eq!(ours, Err(ScanError::Syntax { offset, expected: control }));
            }
        }
    }
}
