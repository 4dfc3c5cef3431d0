//! Chunked history windowing and the compaction tail rules.
//!
//! The window's front moves in chunks at fixed cut points counted from the transcript's
//! start (a quarter of the message window, a quarter of the token budget), so it stays
//! put while messages are appended and a provider's prompt cache keeps hitting. The
//! window then starts on a user turn and never after the last one.
//!
//! Performance notes: the answer is decided walking back from the newest message, and
//! most transcripts decide it long before the oldest message is sized: when the last
//! user turn sits before the message-count front, or when a token cut point is proven
//! to lie at or before that front. Only when neither holds are all sizes read and the
//! cut points counted from the start, exactly as the definition says.

use crate::error::CoreError;
use crate::message::Role;
use crate::tokens::SizedMessages;

/// Messages kept verbatim by [`crate::window::window_start`] by default.
pub const HISTORY_WINDOW: usize = 80;
/// Tokens kept verbatim by default.
pub const HISTORY_TOKEN_BUDGET: u64 = 64_000;
/// Token budget of the tail a compaction keeps verbatim.
pub const COMPACT_TAIL_TOKEN_BUDGET: u64 = 40_000;
/// Messages a compaction tail keeps at least, budget permitting.
pub const COMPACT_TAIL_TURNS: usize = 8;
/// Messages a compaction tail keeps at most.
pub const COMPACT_TAIL_MAX_MESSAGES: usize = HISTORY_WINDOW / 2;

/// Window limits; each must be at least 4 so that its chunk (a quarter) is not empty.
#[derive(Debug, Clone, Copy)]
pub struct WindowLimits {
    pub messages: usize,
    pub tokens: u64,
}

impl WindowLimits {
    /// Checks both limits.
    ///
    /// # Errors
    /// When a limit is below 4.
    pub fn new(messages: usize, tokens: u64) -> Result<Self, CoreError> {
        if messages < 4 || tokens < 4 {
            return Err(CoreError::argument(format!(
                "window and token_budget must be at least 4 (got window={messages}, token_budget={tokens})"
            )));
        }
        Ok(Self { messages, tokens })
    }
}

impl Default for WindowLimits {
    fn default() -> Self {
        Self { messages: HISTORY_WINDOW, tokens: HISTORY_TOKEN_BUDGET }
    }
}

fn last_user<T: SizedMessages>(t: &T) -> Option<usize> {
    (0..t.len()).rev().find(|&i| t.role(i) == Role::User)
}

/// Where the chunked window starts: `convo[start..]` is what Python's `windowed` keeps.
///
/// # Errors
/// When a message reached while sizing is malformed.
pub fn window_start<T: SizedMessages>(t: &mut T, limits: WindowLimits) -> Result<usize, CoreError> {
    let n = t.len();
    let Some(last_user) = last_user(t) else {
        // No user turn: all of it when it fits the budget, else only the last message.
        return Ok(if suffix_exceeds(t, 0, limits.tokens)? { n - 1 } else { 0 });
    };
    let front = message_front(n, limits.messages);
    let start = if front >= last_user { last_user } else { token_front(t, limits, front, last_user)? };
    Ok((start..=last_user).find(|&i| t.role(i) == Role::User).unwrap_or(last_user))
}

/// The message-count front: 0 while `n` fits, else the first multiple of the chunk that
/// brings it back under the window.
fn message_front(n: usize, window: usize) -> usize {
    let chunk = window / 4;
    if n <= window {
        0
    } else {
        (n - window).div_ceil(chunk) * chunk
    }
}

/// Whether the messages from `from` on cost more than `budget`, sizing from the newest
/// and stopping as soon as they do.
fn suffix_exceeds<T: SizedMessages>(t: &mut T, from: usize, budget: u64) -> Result<bool, CoreError> {
    let mut sum = 0u128;
    for i in (from..t.len()).rev() {
        sum += u128::from(t.tokens(i)?);
        if sum > u128::from(budget) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `min(max(front, token cut), last_user)`, reading as few sizes as the answer needs.
fn token_front<T: SizedMessages>(
    t: &mut T,
    limits: WindowLimits,
    front: usize,
    last_user: usize,
) -> Result<usize, CoreError> {
    let n = t.len();
    let budget = u128::from(limits.tokens);
    let chunk = budget / 4;
    let mut suffix = 0u128;
    let mut suffix_at_front = None;
    for p in (0..n).rev() {
        suffix += u128::from(t.tokens(p)?);
        if suffix > budget {
            // No cut before p + 1 leaves the rest within budget: the token cut is at or
            // after p + 1, and past the last user turn the answer is the last user turn.
            if p + 1 >= last_user {
                return Ok(last_user);
            }
            break;
        }
        if p == front {
            suffix_at_front = Some(suffix);
        }
        // A whole chunk of tokens between p and the front puts a cut point in (p, front],
        // where the rest fits: the token cut is no later than the front.
        if let Some(at_front) = suffix_at_front {
            if p < front && suffix - at_front >= chunk {
                return Ok(front);
            }
        }
        if p == 0 {
            return Ok(front); // the whole transcript fits: no token cut
        }
    }
    let cut = token_cut_from_start(t, budget, chunk)?;
    Ok(front.max(cut).min(last_user))
}

/// The token cut by its definition: the first cut point (where the running total from
/// the start crosses a multiple of `chunk`) after which the rest fits `budget`; 0 when
/// everything fits, `len` when no cut point does.
fn token_cut_from_start<T: SizedMessages>(t: &mut T, budget: u128, chunk: u128) -> Result<usize, CoreError> {
    let n = t.len();
    let mut remaining = 0u128;
    for i in 0..n {
        remaining += u128::from(t.tokens(i)?);
    }
    if remaining <= budget {
        return Ok(0);
    }
    let mut dropped = 0u128;
    for i in 0..n {
        let size = u128::from(t.tokens(i)?);
        let crossed = (dropped + size) / chunk > dropped / chunk;
        dropped += size;
        remaining -= size;
        if crossed && remaining <= budget {
            return Ok(i + 1);
        }
    }
    Ok(n)
}

/// `i` clamped to the transcript, then moved forward past `tool` messages, so a verbatim
/// part never opens on a tool result whose call it lost.
pub fn verbatim_start<T: SizedMessages>(t: &T, i: usize) -> usize {
    let n = t.len();
    (i.min(n)..n).find(|&j| t.role(j) != Role::Tool).unwrap_or(n)
}

/// Start of a compaction tail under `budget` tokens: walking back from the newest
/// message, stop at [`COMPACT_TAIL_MAX_MESSAGES`], or once [`COMPACT_TAIL_TURNS`] are
/// taken and the next would overflow; then [`verbatim_start`] of that point.
///
/// # Errors
/// When a message reached while sizing is malformed.
pub fn compact_tail_start_for_budget<T: SizedMessages>(t: &mut T, budget: u64) -> Result<usize, CoreError> {
    let n = t.len();
    let mut start = n;
    let mut sum = 0u128;
    while start > 0 {
        let taken = n - start;
        if taken >= COMPACT_TAIL_MAX_MESSAGES {
            break;
        }
        let cost = u128::from(t.tokens(start - 1)?);
        if taken >= COMPACT_TAIL_TURNS && sum + cost > u128::from(budget) {
            break;
        }
        sum += cost;
        start -= 1;
    }
    Ok(verbatim_start(t, start))
}

/// Index of the last user message when it lies before `tail_start`, else `None`.
pub fn pinned_directive_index<T: SizedMessages>(t: &T, tail_start: usize) -> Option<usize> {
    last_user(t).filter(|&i| i < tail_start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::ArraySizes;
    use proptest::prelude::*;

    /// The definition, literally: every size read, cut points counted from the start.
    fn window_start_by_definition(sizes: &[i64], user: &[bool], limits: WindowLimits) -> usize {
        let n = sizes.len();
        let total: i64 = sizes.iter().sum();
        let Some(last_user) = user.iter().rposition(|&u| u) else {
            return if total <= limits.tokens as i64 { 0 } else { n - 1 };
        };
        let chunk = limits.tokens as i64 / 4;
        let mut tok = 0;
        if total > limits.tokens as i64 {
            tok = n;
            let (mut dropped, mut remaining, mut next_cut) = (0i64, total, chunk);
            for (i, &s) in sizes.iter().enumerate() {
                dropped += s;
                remaining -= s;
                if dropped < next_cut {
                    continue;
                }
                while dropped >= next_cut {
                    next_cut += chunk;
                }
                if remaining <= limits.tokens as i64 {
                    tok = i + 1;
                    break;
                }
            }
        }
        let mut start = message_front(n, limits.messages).max(tok).min(last_user);
        while !user[start] {
            start += 1;
        }
        start
    }

    fn start(sizes: &[i64], user: &[bool], limits: WindowLimits) -> usize {
        ArraySizes::new(sizes, user).and_then(|mut a| window_start(&mut a, limits)).unwrap_or(usize::MAX)
    }

    #[test]
    fn front_stays_put_then_jumps_a_chunk() {
        let limits = WindowLimits::default();
        let user: Vec<bool> = (0..200).map(|i| i % 2 == 0).collect();
        let sizes = vec![10i64; 200];
        let starts: Vec<usize> = (1..=200).map(|n| start(&sizes[..n], &user[..n], limits)).collect();
        assert_eq!(starts.get(79), Some(&0));
        assert_eq!(starts.get(80), Some(&20)); // 81 messages: the front jumps 20
        assert_eq!(starts.get(99), Some(&20)); // and stays put through 100
        assert_eq!(starts.get(100), Some(&40));
    }

    #[test]
    fn no_user_turn_keeps_all_or_only_the_last() {
        let limits = WindowLimits::new(80, 100).unwrap_or_default();
        assert_eq!(start(&[30, 30, 30], &[false; 3], limits), 0);
        assert_eq!(start(&[50, 30, 30], &[false; 3], limits), 2);
        assert_eq!(start(&[], &[], limits), 0);
    }

    proptest! {
        #[test]
        fn early_stop_equals_the_definition(
            cells in proptest::collection::vec((0i64..3000, proptest::bool::weighted(0.3)), 0..400),
            window in 4usize..120,
            budget in 4u64..20_000,
        ) {
            let sizes: Vec<i64> = cells.iter().map(|c| c.0).collect();
            let user: Vec<bool> = cells.iter().map(|c| c.1).collect();
            let limits = WindowLimits::new(window, budget).unwrap_or_default();
            prop_assert_eq!(start(&sizes, &user, limits), window_start_by_definition(&sizes, &user, limits));
        }
    }
}
