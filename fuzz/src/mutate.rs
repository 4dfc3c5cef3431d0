//! Mutations of a transcript: the shapes the SPEC names (tool exchanges in both dialects,
//! volatile tails, system prefixes) and what a hostile caller sends (wrong types, lone
//! surrogates, huge and odd numbers, deep nesting).

use crate::rng::Rng;
use crate::value::V;

const ROLES: [&str; 6] = ["system", "user", "assistant", "tool", "developer", ""];

/// Code points that exercise escaping, UTF-16 lengths and the text kinds.
const SPICE: [u32; 16] =
    [0x22, 0x5C, 0x0A, 0x01, 0x1F, 0x7F, 0xE9, 0xFF, 0x2028, 0xD800, 0xDC00, 0xDBFF, 0xFFFD, 0x1F600, 0x10FFFF, 0x20];

/// Applies one to a few random mutations to `t`, splicing from `other` at times.
pub fn mutate(t: &mut Vec<V>, other: &[V], rng: &mut Rng) {
    for _ in 0..=rng.below(4) {
        one(t, other, rng);
    }
}

fn one(t: &mut Vec<V>, other: &[V], rng: &mut Rng) {
    let i = rng.below(t.len().max(1));
    match rng.below(16) {
        0 => {
            // Splice a run from another transcript.
            let from = rng.below(other.len().max(1));
            let run: Vec<V> = other.iter().skip(from).take(1 + rng.below(6)).cloned().collect();
            let at = rng.below(t.len() + 1);
            t.splice(at..at, run);
        }
        1 if !t.is_empty() => {
            t.remove(i);
        }
        2 if !t.is_empty() => {
            let m = t.get(i).cloned().unwrap_or(V::Null);
            t.insert(i, m);
        }
        3 => t.insert(rng.below(t.len() + 1), message(rng)),
        4 => t.push(volatile(rng)),
        5 => t.insert(0, msg("system", V::Str(text(rng)))),
        6 => {
            let at = rng.below(t.len() + 1);
            t.splice(at..at, tool_exchange(rng));
        }
        7 => {
            if let Some(m) = t.get_mut(i) {
                let role = match rng.below(8) {
                    0 => V::Int(5),
                    1 => V::Null,
                    _ => V::str(rng.pick(&ROLES).copied().unwrap_or("user")),
                };
                if rng.one_in(10) {
                    m.remove("role");
                } else {
                    m.set("role", role);
                }
            }
        }
        8 => {
            if let Some(m) = t.get_mut(i) {
                m.set("content", content(rng));
            }
        }
        9 => {
            if let Some(m) = t.get_mut(i) {
                let calls = match rng.below(6) {
                    0 => V::Null,
                    1 => V::Arr(vec![]),
                    2 => V::Obj(vec![]),
                    _ => V::Arr((0..=rng.below(3)).map(|_| call(rng)).collect()),
                };
                m.set("tool_calls", calls);
            }
        }
        10 => {
            if let Some(m) = t.get_mut(i) {
                m.set("name", if rng.one_in(3) { V::Int(1) } else { V::Str(text(rng)) });
            }
        }
        11 => {
            if let Some(slot) = t.get_mut(i) {
                *slot = scalar(rng); // not a dict at all
            }
        }
        12 => {
            if let Some(m) = t.get_mut(i) {
                if let Some(V::Str(s)) = content_mut(m) {
                    let at = rng.below(s.len() + 1);
                    let extra: Vec<u32> = (0..=rng.below(8)).map(|_| spice(rng)).collect();
                    s.splice(at..at, extra);
                }
            }
        }
        13 => {
            // Deep nesting: mostly within the core's limit, now and then far past it.
            let depth = if rng.one_in(20) { contextfold_core::error::MAX_DEPTH + 100 } else { 1 + rng.below(3_000) };
            if let Some(m) = t.get_mut(i) {
                let mut v = scalar(rng);
                for _ in 0..depth {
                    v = if rng.one_in(2) { V::Arr(vec![v]) } else { V::Obj(vec![(text(rng), v)]) };
                }
                m.set("content", V::Arr(vec![v]));
            }
        }
        14 => t.truncate(rng.below(t.len() + 1)),
        _ => {
            if let Some(m) = t.get_mut(i) {
                if let Some(V::Arr(blocks)) = content_mut(m) {
                    let at = rng.below(blocks.len() + 1);
                    blocks.insert(at, block(rng));
                }
            }
        }
    }
}

fn content_mut(m: &mut V) -> Option<&mut V> {
    match m {
        V::Obj(entries) => entries.iter_mut().find(|(k, _)| crate::value::eq(k, "content")).map(|(_, v)| v),
        _ => None,
    }
}

fn msg(role: &str, content: V) -> V {
    V::Obj(vec![(chars("role"), V::str(role)), (chars("content"), content)])
}

fn chars(s: &str) -> Vec<u32> {
    s.chars().map(u32::from).collect()
}

fn spice(rng: &mut Rng) -> u32 {
    if rng.one_in(3) {
        u32::try_from(rng.below(0x11_0000)).unwrap_or(0x41)
    } else {
        SPICE.get(rng.below(SPICE.len())).copied().unwrap_or(0x41)
    }
}

/// Text of a few words, spiced now and then; long at times (sizes near budgets).
fn text(rng: &mut Rng) -> Vec<u32> {
    let len = if rng.one_in(8) { rng.below(5_000) } else { rng.below(40) };
    (0..len).map(|_| if rng.one_in(6) { spice(rng) } else { u32::from(b'a') + (rng.below(26) as u32) }).collect()
}

fn scalar(rng: &mut Rng) -> V {
    match rng.below(9) {
        0 => V::Null,
        1 => V::Bool(rng.one_in(2)),
        2 => V::Int(*rng.pick(&[0, -1, 1 << 53, (1 << 53) + 1, i64::MIN, i64::MAX, 1_000_000]).unwrap_or(&0)),
        #[allow(clippy::cast_possible_wrap)] // any bit pattern will do
        3 => V::Int(rng.next() as i64),
        4 => V::Float(
            *rng.pick(&[0.1, -0.0, 1e21, 1e-7, 5e-324, f64::MAX, f64::NAN, f64::INFINITY, 123.456]).unwrap_or(&0.5),
        ),
        5 => V::Float(f64::from_bits(rng.next())),
        _ => V::Str(text(rng)),
    }
}

fn block(rng: &mut Rng) -> V {
    let kind = *rng.pick(&["text", "tool_use", "tool_result", "image", "thinking"]).unwrap_or(&"text");
    let mut b = V::Obj(vec![(chars("type"), V::str(kind))]);
    match kind {
        "text" => b.set("text", if rng.one_in(10) { V::Int(3) } else { V::Str(text(rng)) }),
        "tool_use" => {
            b.set("id", V::str("toolu_1"));
            b.set("name", V::Str(text(rng)));
            b.set("input", V::Obj(vec![(chars("q"), scalar(rng))]));
        }
        "tool_result" => {
            b.set("tool_use_id", V::str("toolu_1"));
            b.set("content", if rng.one_in(2) { V::Str(text(rng)) } else { V::Arr(vec![block(rng)]) });
        }
        _ => b.set("data", scalar(rng)),
    }
    if rng.one_in(20) {
        return scalar(rng); // a block that is not a dict
    }
    b
}

fn content(rng: &mut Rng) -> V {
    match rng.below(7) {
        0 => V::Null,
        1 => scalar(rng),
        2 | 3 => V::Arr((0..rng.below(4)).map(|_| block(rng)).collect()),
        _ => V::Str(text(rng)),
    }
}

fn call(rng: &mut Rng) -> V {
    if rng.one_in(15) {
        return scalar(rng);
    }
    V::Obj(vec![
        (chars("id"), V::str("call_1")),
        (chars("type"), V::str("function")),
        (chars("function"), V::Obj(vec![(chars("name"), V::Str(text(rng))), (chars("arguments"), V::Str(text(rng)))])),
    ])
}

fn message(rng: &mut Rng) -> V {
    let role = *rng.pick(&["user", "assistant", "tool", "system"]).unwrap_or(&"user");
    msg(role, content(rng))
}

fn volatile(rng: &mut Rng) -> V {
    let mut body = chars("<run-state>\n");
    body.extend(text(rng));
    body.extend(chars("\n</run-state>"));
    if rng.one_in(3) {
        msg("user", V::Arr(vec![V::Obj(vec![(chars("type"), V::str("text")), (chars("text"), V::Str(body))])]))
    } else {
        msg("user", V::Str(body))
    }
}

/// An assistant call and its answers, in either dialect, sometimes broken.
fn tool_exchange(rng: &mut Rng) -> Vec<V> {
    if rng.one_in(2) {
        let mut call_msg = msg("assistant", V::Null);
        call_msg.set("tool_calls", V::Arr((0..=rng.below(2)).map(|_| call(rng)).collect()));
        let mut out = vec![call_msg];
        for _ in 0..rng.below(4) {
            let mut answer = msg("tool", V::Str(text(rng)));
            answer.set("tool_call_id", V::str("call_1"));
            out.push(answer);
        }
        out
    } else {
        let use_block = {
            let mut b = V::Obj(vec![(chars("type"), V::str("tool_use"))]);
            b.set("id", V::str("toolu_1"));
            b.set("name", V::Str(text(rng)));
            b
        };
        let mut out = vec![msg(
            "assistant",
            V::Arr(vec![V::Obj(vec![(chars("type"), V::str("text")), (chars("text"), V::Str(text(rng)))]), use_block]),
        )];
        if !rng.one_in(4) {
            let mut result = V::Obj(vec![(chars("type"), V::str("tool_result"))]);
            result.set("content", V::Str(text(rng)));
            out.push(msg("user", V::Arr(vec![result])));
        }
        out
    }
}
