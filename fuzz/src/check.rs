//! The checks: each entry point's result against an oracle written from the SPEC (not
//! from the core's code), or against the contract points it must keep.

use crate::rng::Rng;
use crate::value::{stringify, utf16_len, V};
use contextfold_core::arena::Node;
use contextfold_core::error::MAX_DEPTH;
use contextfold_core::json::json_len;
use contextfold_core::message::{Checked, Role};
use contextfold_core::pack::{self, Cut, Dialect, PackOptions, Packed, NOTE_HEADER, SUMMARY_HEADER};
use contextfold_core::tokens::{ArraySizes, CharsPerToken, MessageSizer, SizedMessages};
use contextfold_core::transcript::Transcript;
use contextfold_core::window::{self, WindowLimits};
use contextfold_core::{CoreError, JsonNode, Problem};

/// A broken invariant: what was expected and what came.
pub type Failure = String;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// SizedMessages every message as chars/4 times `scale` (a scale above 1 drives totals past 2^64).
pub struct Scaled(pub u64);

impl<N: JsonNode> MessageSizer<N> for Scaled {
    fn message_tokens(&mut self, index: Option<usize>, m: &N, c: &Checked<N>) -> Result<u64, CoreError> {
        Ok(CharsPerToken.message_tokens(index, m, c)?.saturating_mul(self.0))
    }

    fn system_tokens(&mut self, c: &Checked<N>) -> Result<u64, CoreError> {
        Ok(<CharsPerToken as MessageSizer<N>>::system_tokens(&mut CharsPerToken, c)?.saturating_mul(self.0))
    }

    fn text_tokens(&mut self, text: &str) -> Result<u64, CoreError> {
        Ok(<CharsPerToken as MessageSizer<N>>::text_tokens(&mut CharsPerToken, text)?.saturating_mul(self.0))
    }

    fn units_tokens(&self, units: usize) -> Option<u64> {
        (self.0 == 1).then(|| contextfold_core::tokens::estimate_units(units))
    }
}

/// What the SPEC says of one message: its role (checked shape) and its size, or the field
/// at fault. `None` for a size when nested content is past the core's depth.
struct Expected {
    role: String,
    size: Option<u64>,
}

fn expected(m: &V, scale: u64) -> Result<Expected, &'static str> {
    let V::Obj(_) = m else { return Err("") };
    let role = match m.get("role") {
        Some(V::Str(r)) => lossy(r),
        _ => return Err("role"),
    };
    let content = m.get("content").filter(|c| !matches!(c, V::Null));
    if content.is_some_and(|c| !matches!(c, V::Str(_) | V::Arr(_))) {
        return Err("content");
    }
    let calls = m.get("tool_calls").filter(|c| !matches!(c, V::Null));
    if calls.is_some_and(|c| !matches!(c, V::Arr(_))) {
        return Err("tool_calls");
    }
    let content_units = match content {
        None => Some(2),
        Some(V::Str(s)) => Some(utf16_len(s)),
        Some(c) => stringify(c, MAX_DEPTH - 1).map(|j| j.len()),
    };
    let calls_units = match calls {
        None => Some(0),
        Some(c) => stringify(c, MAX_DEPTH - 1).map(|j| j.len()),
    };
    let size = content_units.zip(calls_units).map(|(a, b)| (((a + b) as u64).div_ceil(4) + 4).saturating_mul(scale));
    Ok(Expected { role, size })
}

/// A string as the core prints it: UTF-16, pairs joined, lone surrogates as U+FFFD.
fn lossy(cps: &[u32]) -> String {
    let units: Vec<u16> = cps
        .iter()
        .flat_map(|&c| match char::from_u32(c) {
            Some(ch) => ch.encode_utf16(&mut [0; 2]).to_vec(),
            None => vec![u16::try_from(c).unwrap_or(0xFFFD)],
        })
        .collect();
    String::from_utf16_lossy(&units)
}

/// `json_len` of every content and tool_calls value against the oracle.
pub fn json_lengths(t: &[V], nodes: &[Node<'_, '_>]) -> Result<(), Failure> {
    for (m, node) in t.iter().zip(nodes) {
        for key in [contextfold_core::Key::Content, contextfold_core::Key::ToolCalls] {
            let (Some(value), Some(node)) = (m.get(key.as_str()), node.get(key)) else { continue };
            let got = json_len(&node);
            match stringify(value, MAX_DEPTH - 1) {
                Some(json) => ensure!(got == Ok(json.len()), "json_len {got:?}, oracle {}", json.len()),
                // Past the limit by far (the fuzzer never nests near it): too deep.
                None => ensure!(got == Err(Problem::TooDeep), "json_len of a too-deep value: {got:?}"),
            }
        }
    }
    Ok(())
}

/// The transcript as the core reads it, against the oracle: the first malformed message
/// named, else every size.
pub fn sizes(t: &[V], nodes: &[Node<'_, '_>], scale: u64) -> Result<Option<Vec<Option<u64>>>, Failure> {
    let oracle: Vec<Result<Expected, &str>> = t.iter().map(|m| expected(m, scale)).collect();
    let first_bad = oracle.iter().position(Result::is_err);
    match Transcript::new(nodes, Scaled(scale)) {
        Err(CoreError::Message { index, field, .. }) => {
            let want = first_bad.and_then(|i| oracle.get(i).map(|e| (i, e.as_ref().err().copied().unwrap_or("?"))));
            ensure!(want == index.map(|i| (i, field)), "transcript error at {index:?} {field:?}, oracle {want:?}");
            Ok(None)
        }
        Err(other) => Err(format!("transcript error {other:?}")),
        Ok(mut transcript) => {
            ensure!(first_bad.is_none(), "transcript accepted, oracle rejects message {first_bad:?}");
            let mut out = Vec::new();
            for (i, e) in oracle.iter().enumerate() {
                let want = e.as_ref().ok().and_then(|e| e.size);
                let got = transcript.tokens(i);
                match want {
                    Some(w) => ensure!(got == Ok(w), "message {i} size {got:?}, oracle {w}"),
                    None => ensure!(
                        matches!(got, Err(CoreError::Message { problem: Problem::TooDeep, .. })),
                        "message {i} past the depth limit: {got:?}"
                    ),
                }
                out.push(want);
            }
            Ok(Some(out))
        }
    }
}

fn roles(t: &[V]) -> Vec<String> {
    t.iter().map(|m| expected(m, 1).map(|e| e.role).unwrap_or_default()).collect()
}

/// The windowing functions against their definitions (SPEC §4).
pub fn windows(nodes: &[Node<'_, '_>], t: &[V], sizes: &[u64], scale: u64, rng: &mut Rng) -> Result<(), Failure> {
    let user: Vec<bool> = roles(t).iter().map(|r| r == "user").collect();
    let messages = 4 + rng.below(100);
    let total: u128 = sizes.iter().map(|&s| u128::from(s)).sum();
    let tokens = match rng.below(4) {
        0 => u64::MAX - rng.below(3) as u64,
        // A fraction of the total: cut points fall inside the transcript.
        1 => u64::try_from(total * (1 + rng.below(8) as u128) / 9).unwrap_or(u64::MAX).max(4),
        _ => (4 + rng.below(20_000) as u64).saturating_mul(scale),
    };
    let limits = WindowLimits::new(messages, tokens).map_err(|e| e.to_string())?;
    let want = window_by_definition(sizes, &user, messages, tokens);
    let mut transcript = Transcript::new(nodes, Scaled(scale)).map_err(|e| e.to_string())?;
    let got = window::window_start(&mut transcript, limits);
    ensure!(got == Ok(want), "window_start({messages}, {tokens}) = {got:?}, definition {want}");
    if let Ok(array) = sizes.iter().map(|&s| i64::try_from(s)).collect::<Result<Vec<_>, _>>() {
        let mut arrays = ArraySizes::new(&array, &user).map_err(|e| e.to_string())?;
        let got = window::window_start(&mut arrays, limits);
        ensure!(got == Ok(want), "window_start over arrays = {got:?}, definition {want}");
    }
    let budget = if rng.one_in(4) { u64::MAX } else { rng.below(50_000) as u64 * scale };
    let want = compact_tail_by_definition(sizes, &roles(t), budget);
    let got = window::compact_tail_start_for_budget(&mut transcript, budget);
    ensure!(got == Ok(want), "compact_tail_start_for_budget({budget}) = {got:?}, definition {want}");
    let i = rng.below(t.len() + 2);
    let want = (i.min(t.len())..t.len()).find(|&j| roles(t).get(j).is_none_or(|r| r != "tool")).unwrap_or(t.len());
    ensure!(window::verbatim_start(&transcript, i) == want, "verbatim_start({i})");
    Ok(())
}

fn window_by_definition(sizes: &[u64], user: &[bool], window: usize, budget: u64) -> usize {
    let n = sizes.len();
    let total: u128 = sizes.iter().map(|&s| u128::from(s)).sum();
    let budget = u128::from(budget);
    let Some(last_user) = user.iter().rposition(|&u| u) else {
        return if total > budget { n - 1 } else { 0 };
    };
    let chunk = window / 4;
    let front = if n <= window { 0 } else { (n - window).div_ceil(chunk) * chunk };
    let token_chunk = budget / 4;
    let cut = if total <= budget {
        0
    } else {
        let mut dropped = 0u128;
        let mut cut = n;
        for (i, &s) in sizes.iter().enumerate() {
            let before = dropped;
            dropped += u128::from(s);
            if dropped / token_chunk > before / token_chunk && total - dropped <= budget {
                cut = i + 1;
                break;
            }
        }
        cut
    };
    let start = front.max(cut).min(last_user);
    (start..=last_user).find(|&i| user.get(i) == Some(&true)).unwrap_or(last_user)
}

fn compact_tail_by_definition(sizes: &[u64], roles: &[String], budget: u64) -> usize {
    let n = sizes.len();
    let mut start = n;
    let mut sum = 0u128;
    while start > 0 && n - start < 40 {
        let cost = u128::from(sizes.get(start - 1).copied().unwrap_or(0));
        if n - start >= 8 && sum + cost > u128::from(budget) {
            break;
        }
        sum += cost;
        start -= 1;
    }
    (start..n).find(|&j| roles.get(j).is_none_or(|r| r != "tool")).unwrap_or(n)
}

// ---------------------------------------------------------------------------------------
// Packing

fn blocks(m: &V) -> &[V] {
    match m.get("content") {
        Some(V::Arr(items)) => items,
        _ => &[],
    }
}

/// Whether a message shows the Anthropic shape (`Some(true)`), another shape
/// (`Some(false)`: Responses items, OpenAI tool calls or a `tool` message) or none.
fn shows_anthropic(m: &V) -> Option<bool> {
    let kind = m.get("type");
    let marks = kind.is_some_and(|k| {
        m.get("role").is_none() || ["message", "function_call", "function_call_output"].iter().any(|&t| k.is_str(t))
    });
    if marks {
        return Some(false);
    }
    if has_block(m, "tool_use") || has_block(m, "tool_result") {
        return Some(true);
    }
    let calls = matches!(m.get("tool_calls"), Some(V::Arr(c)) if !c.is_empty());
    (calls || m.get("role").is_some_and(|r| r.is_str("tool"))).then_some(false)
}

fn has_block(m: &V, kind: &str) -> bool {
    blocks(m).iter().any(|b| b.get("type").is_some_and(|t| t.is_str(kind)))
}

fn is_volatile(m: &V, role: &str) -> bool {
    role == "user"
        && match m.get("content") {
            Some(s @ V::Str(_)) => s.starts_with(pack::VOLATILE_TAIL_TAG),
            Some(V::Arr(items)) => {
                items.first().and_then(|b| b.get("text")).is_some_and(|t| t.starts_with(pack::VOLATILE_TAIL_TAG))
            }
            _ => false,
        }
}

/// Segments of `from..to` by the SPEC's definition.
fn segments(t: &[V], roles: &[String], from: usize, to: usize, anthropic: bool) -> Vec<(usize, usize)> {
    let role = |i: usize| roles.get(i).map_or("", String::as_str);
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        let mut end = i + 1;
        let Some(m) = t.get(i) else { break };
        if role(i) == "assistant" {
            if !anthropic && matches!(m.get("tool_calls"), Some(V::Arr(c)) if !c.is_empty()) {
                while end < to && role(end) == "tool" {
                    end += 1;
                }
            } else if anthropic
                && has_block(m, "tool_use")
                && end < to
                && role(end) == "user"
                && t.get(end).is_some_and(|n| has_block(n, "tool_result"))
            {
                end += 1;
            }
        }
        out.push((i, end));
        i = end;
    }
    out
}

/// Packs with random options and checks the contract points of SPEC §5.
pub fn packing(nodes: &[Node<'_, '_>], t: &[V], sizes: &[u64], scale: u64, rng: &mut Rng) -> Result<(), Failure> {
    let n = t.len();
    let roles = roles(t);
    let role = |i: usize| roles.get(i).map_or("", String::as_str);
    let total: u128 = sizes.iter().map(|&s| u128::from(s)).sum();
    let budget = match rng.below(5) {
        0 => u64::MAX - rng.below(2) as u64,
        1 => u64::try_from(total).unwrap_or(u64::MAX).saturating_add(rng.below(3) as u64),
        _ => (rng.below(12_000) as u64).saturating_mul(scale),
    };
    let system_tokens = if rng.one_in(4) { (rng.below(400) as u64).saturating_mul(scale) } else { 0 };
    let pinned: Vec<usize> =
        if n > 0 && rng.one_in(3) { (0..rng.below(6)).map(|_| rng.below(n)).collect() } else { vec![] };
    let summary = rng.one_in(5).then(|| "the story so far".repeat(1 + rng.below(40)));
    let dialect = *rng.pick(&[None, Some(Dialect::OpenAi), Some(Dialect::Anthropic)]).unwrap_or(&None);
    let cut = match rng.below(4) {
        0 => Cut::Chunked { chunk: None },
        1 => Cut::Chunked { chunk: Some((1 + rng.below(5_000) as u64).saturating_mul(scale)) },
        _ => Cut::Greedy,
    };
    let options = PackOptions {
        budget,
        system_tokens,
        pinned: pinned.clone(),
        summary: summary.clone(),
        dialect,
        cut,
        ..PackOptions::default()
    };
    let run = || -> Result<Packed, CoreError> { pack::pack(&mut Transcript::new(nodes, Scaled(scale))?, &options) };
    let p = run().map_err(|e| format!("pack failed: {e:?} ({options:?})"))?;
    ensure!(run().as_ref() == Ok(&p), "pack is not deterministic");
    let ctx = format!("budget {budget}, system {system_tokens}, pins {pinned:?}, {cut:?}, {dialect:?}: {p:?}");

    // Output order is input order.
    ensure!(p.kept.windows(2).all(|w| w.first() < w.get(1)) && p.kept.iter().all(|&k| k < n), "kept order: {ctx}");
    // Tokens: the kept messages, the note and the system prompt, exactly.
    let note_cost = match &p.note {
        Some(note) => {
            let mut s = Scaled(scale);
            u128::from(
                <Scaled as MessageSizer<Node<'_, '_>>>::text_tokens(&mut s, &note.text).map_err(|e| e.to_string())?,
            ) + 4
        }
        None => 0,
    };
    let kept_cost: u128 = p.kept.iter().map(|&k| u128::from(sizes.get(k).copied().unwrap_or(0))).sum();
    ensure!(p.tokens == kept_cost + note_cost + u128::from(system_tokens), "tokens: {ctx}");
    if p.fits {
        ensure!(p.tokens <= u128::from(budget), "fits but over budget: {ctx}");
    }
    if total + u128::from(system_tokens) <= u128::from(budget) {
        ensure!(p.kept == (0..n).collect::<Vec<_>>() && p.note.is_none() && p.fits, "under budget but changed: {ctx}");
        return Ok(());
    }
    // `developer` counts as `system` (docs/packing.md).
    let prefix = (0..n).find(|&i| !matches!(role(i), "system" | "developer")).unwrap_or(n);
    ensure!(p.kept.get(..prefix) == Some(&(0..prefix).collect::<Vec<_>>()[..]), "leading systems: {ctx}");
    // The volatile tail: the trailing run of run-state messages after the last pin.
    let last_pin = pinned.iter().max().map_or(0, |&q| q + 1);
    let mut history = n;
    while history > last_pin && t.get(history - 1).is_some_and(|m| is_volatile(m, role(history - 1))) {
        history -= 1;
    }
    // The volatile tail: all kept, last, or all dropped.
    let tail_kept = (history..n).filter(|k| p.kept.contains(k)).count();
    ensure!(tail_kept == 0 || tail_kept == n - history, "part of the volatile tail: {ctx}");
    let anthropic = match dialect {
        Some(d) => d == Dialect::Anthropic,
        // `shape="auto"`: the shape of the newest message that shows one (SPEC §5).
        None => t.iter().rev().find_map(shows_anthropic).unwrap_or(false),
    };
    let only_results = |m: &V| {
        let b = blocks(m);
        !b.is_empty() && b.iter().all(|x| x.get("type").is_some_and(|t| t.is_str("tool_result")))
    };
    let directive = (prefix..history).rev().find(|&i| {
        role(i) == "user" && t.get(i).is_some_and(|m| !(is_volatile(m, "user") || anthropic && only_results(m)))
    });
    let segs = segments(t, &roles, prefix, history, anthropic);
    let seg_of = |i: usize| segs.iter().copied().find(|&(s, e)| s <= i && i < e);
    let mut core: Vec<usize> = directive.into_iter().collect();
    core.extend(
        pinned.iter().copied().filter(|&q| q >= prefix && q < history && matches!(role(q), "user" | "assistant")),
    );
    for &c in &core {
        let (s, e) = seg_of(c).ok_or_else(|| format!("no segment for {c}: {ctx}"))?;
        ensure!((s..e).all(|k| p.kept.contains(&k)), "core segment {s}..{e} not kept: {ctx}");
    }
    for &(s, e) in &segs {
        let kept = (s..e).filter(|k| p.kept.contains(k)).count();
        ensure!(kept == 0 || kept == e - s, "segment {s}..{e} cut: {ctx}");
    }
    if !p.fits {
        let mut want: Vec<usize> = (0..prefix).collect();
        for &(s, e) in &segs {
            if core.iter().any(|&c| s <= c && c < e) {
                want.extend(s..e);
            }
        }
        ensure!(p.kept == want && p.note.is_none(), "an overflowing core is returned alone: {ctx}");
        ensure!(p.tokens > u128::from(budget), "does not fit, yet within budget: {ctx}");
        return Ok(());
    }
    if let Some(note) = &p.note {
        ensure!(note.at == prefix, "note placed at {}: {ctx}", note.at);
        ensure!((prefix..history).any(|k| !p.kept.contains(&k)), "a note with nothing dropped: {ctx}");
        let header =
            if summary.is_some() && note.text.starts_with(SUMMARY_HEADER) { SUMMARY_HEADER } else { NOTE_HEADER };
        ensure!(note.text.starts_with(header), "note text: {ctx}");
        let next = p.kept.get(note.at).map(|&k| role(k));
        let want = if matches!(next, None | Some("assistant")) { Role::User } else { Role::Assistant };
        ensure!(note.role == want, "note role: {ctx}");
    }
    Ok(())
}

/// `handoff_line`: the core's error for a malformed message, else a line opening with the
/// role.
pub fn lines(nodes: &[Node<'_, '_>], t: &[V]) -> Result<(), Failure> {
    for (node, m) in nodes.iter().zip(t) {
        let got = pack::handoff_line(node);
        match expected(m, 1) {
            Ok(e) => {
                let line = got.map_err(|e| format!("handoff_line failed: {e}"))?;
                ensure!(line.starts_with(&e.role), "line {line:?} for role {:?}", e.role);
            }
            Err(field) => ensure!(
                matches!(&got, Err(CoreError::Message { index: None, field: f, .. }) if *f == field),
                "handoff_line of a malformed message: {got:?}"
            ),
        }
    }
    Ok(())
}
