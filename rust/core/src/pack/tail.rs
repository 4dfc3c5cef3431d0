//! Choosing the verbatim tail: greedy over the newest segments, or at fixed chunk cut points.

use super::note::{listing_tokens, note_for, NoteLimit};
use super::segments::{dropped_before, seg_tokens, Segment};
use super::PackOptions;
use crate::error::CoreError;
use crate::json::JsonNode;
use crate::tokens::Sizer;
use crate::transcript::Transcript;

pub(super) type TailChoice = (usize, i128, Option<(String, i128)>);

/// Greedy: extend the tail over the newest segments while core + tail + the smallest note
/// (its marker) fit; without room for even that, the tail alone decides and no note goes.
pub(super) fn greedy_tail<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    segs: &[Segment],
    room: i128,
    options: &PackOptions,
) -> Result<TailChoice, CoreError> {
    let total_dropped: usize = segs.iter().filter(|s| !s.core).map(|s| s.end - s.start).sum();
    let with_note = listing_tokens(t, &[], 0, total_dropped)? <= room;
    let mut start = segs.len();
    let mut tail = 0i128;
    let mut dropped = total_dropped;
    while let Some(&seg) = start.checked_sub(1).and_then(|i| segs.get(i)) {
        if seg.core {
            start -= 1;
            continue;
        }
        let cost = seg_tokens(t, seg)?;
        let left = dropped - (seg.end - seg.start);
        let reserve = if with_note && left > 0 { listing_tokens(t, &[], 0, left)? } else { 0 };
        if tail + cost + reserve > room {
            break;
        }
        tail += cost;
        dropped = left;
        start -= 1;
    }
    let note = if with_note {
        note_for(t, &dropped_before(segs, start), NoteLimit::Room(room - tail), options)?
    } else {
        None
    };
    Ok((start, tail, note))
}

/// Chunked: the tail starts at the earliest fixed cut point where core + note + tail fit
/// (`chunk` at least 1).
pub(super) fn chunked_tail<N: JsonNode, S: Sizer<N>>(
    t: &mut Transcript<'_, N, S>,
    segs: &[Segment],
    room: i128,
    chunk: u64,
    options: &PackOptions,
) -> Result<TailChoice, CoreError> {
    // Cut points: where the running total from the first non-system message crosses a
    // multiple of `chunk`, moved forward to the next segment start.
    let mut candidates = Vec::new();
    let mut running = 0u128;
    for (k, &seg) in segs.iter().enumerate() {
        let before = running;
        running += t.sum(seg.start..seg.end)?;
        if running / u128::from(chunk) > before / u128::from(chunk) {
            candidates.push(k + 1);
        }
    }
    candidates.push(segs.len());
    candidates.dedup();
    // Tail cost from each segment on (non-core segments only; the core is paid already).
    let mut suffix = vec![0i128; segs.len() + 1];
    for k in (0..segs.len()).rev() {
        let seg = segs.get(k).copied().ok_or_else(|| CoreError::argument("segment out of range"))?;
        let own = if seg.core { 0 } else { seg_tokens(t, seg)? };
        let next = suffix.get(k + 1).copied().unwrap_or(0);
        if let Some(slot) = suffix.get_mut(k) {
            *slot = next + own;
        }
    }
    for &c in &candidates {
        let tail = suffix.get(c).copied().unwrap_or(0);
        if tail > room {
            continue;
        }
        match note_for(t, &dropped_before(segs, c), NoteLimit::Chunk(chunk), options)? {
            Some((text, cost)) if tail + cost <= room => return Ok((c, tail, Some((text, cost)))),
            None => return Ok((c, tail, None)),
            Some(_) => {}
        }
    }
    // No cut leaves room for a note: the earliest cut whose tail fits, without one.
    let c = candidates.iter().copied().find(|&c| suffix.get(c).copied().unwrap_or(0) <= room).unwrap_or(segs.len());
    Ok((c, suffix.get(c).copied().unwrap_or(0), None))
}
