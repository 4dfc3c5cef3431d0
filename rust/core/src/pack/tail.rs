//! Choosing the verbatim tail: greedy over the newest segments, or at fixed chunk cut points.

use super::note::{listing_tokens, newest_dropped, note_for, NoteLimit};
use super::segments::{seg_tokens, Segment, Segmenter};
use super::PackOptions;
use crate::error::CoreError;
use crate::json::JsonNode;
use crate::tokens::MessageSizer;
use crate::transcript::Transcript;

/// Where the tail starts (a message index), its tokens, and the note with its tokens.
pub(super) type TailChoice = (usize, i128, Option<(String, i128)>);

/// The history between the leading system messages and the volatile tail, and its core.
pub(super) struct History<'c> {
    /// The first message after the leading system messages.
    pub(super) prefix: usize,
    /// Where the history ends (the volatile tail, if any, starts).
    pub(super) end: usize,
    /// The core segments (the directive's and the pinned ones), sorted, distinct.
    pub(super) core: &'c [Segment],
}

impl History<'_> {
    /// Messages dropped when the tail starts at `stop` (a segment boundary): those
    /// before it outside the core.
    fn dropped_before(&self, stop: usize) -> usize {
        let core: usize = self.core.iter().filter(|c| c.end <= stop).map(|c| c.end - c.start).sum();
        stop - self.prefix - core
    }

    fn is_core(&self, start: usize) -> bool {
        self.core.binary_search_by_key(&start, |c| c.start).is_ok()
    }
}

/// Greedy: extend the tail over the newest segments, walking back from the end, while
/// core + tail + the smallest note (its marker) fit; without room for even that, the
/// tail alone decides and no note goes. Only the segments walked are read.
pub(super) fn greedy_tail<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    segments: &mut Segmenter,
    history: &History<'_>,
    room: i128,
    options: &PackOptions,
) -> Result<TailChoice, CoreError> {
    let total_dropped = history.dropped_before(history.end);
    let with_note = listing_tokens(t, &[], 0, total_dropped)? <= room;
    let mut start = history.end;
    let mut tail = 0i128;
    let mut dropped = total_dropped;
    while start > history.prefix {
        let from = segments.start_before(t, start);
        if history.is_core(from) {
            start = from;
            continue;
        }
        let seg = Segment { start: from, end: start };
        let cost = seg_tokens(t, seg)?;
        let left = dropped - (start - from);
        let reserve = if with_note && left > 0 { listing_tokens(t, &[], 0, left)? } else { 0 };
        if tail + cost + reserve > room {
            break;
        }
        tail += cost;
        dropped = left;
        start = from;
    }
    let note = if with_note {
        let newest = newest_dropped(history.core, history.prefix, start);
        note_for(t, dropped, &newest, NoteLimit::Room(room - tail), options)?
    } else {
        None
    };
    Ok((start, tail, note))
}

/// Chunked: the tail starts at the earliest fixed cut point where core + note + tail fit
/// (`chunk` at least 1). `segs` are all the history's segments, the core ones marked.
pub(super) fn chunked_tail<N: JsonNode, S: MessageSizer<N>>(
    t: &mut Transcript<'_, N, S>,
    segs: &[Segment],
    history: &History<'_>,
    room: i128,
    chunk: u64,
    options: &PackOptions,
) -> Result<TailChoice, CoreError> {
    // Cut points: where the running total from the first non-system message crosses a
    // multiple of `chunk`, moved forward to the next segment start.
    let mut candidates = Vec::new();
    let mut costs = Vec::with_capacity(segs.len());
    let mut running = 0u128;
    for (k, &seg) in segs.iter().enumerate() {
        let cost = seg_tokens(t, seg)?;
        costs.push(cost);
        let before = running;
        running += cost.unsigned_abs();
        if running / u128::from(chunk) > before / u128::from(chunk) {
            candidates.push(k + 1);
        }
    }
    candidates.push(segs.len());
    candidates.dedup();
    // Tail cost from each segment on (non-core segments only; the core is paid already).
    let mut suffix = vec![0i128; segs.len() + 1];
    let mut tail = 0i128;
    for (k, (seg, cost)) in segs.iter().zip(&costs).enumerate().rev() {
        if !history.is_core(seg.start) {
            tail += cost;
        }
        if let Some(slot) = suffix.get_mut(k) {
            *slot = tail;
        }
    }
    let start_of = |c: usize| segs.get(c).map_or(history.end, |s| s.start);
    for &c in &candidates {
        let tail = suffix.get(c).copied().unwrap_or(0);
        if tail > room {
            continue;
        }
        let stop = start_of(c);
        let newest = newest_dropped(history.core, history.prefix, stop);
        match note_for(t, history.dropped_before(stop), &newest, NoteLimit::Chunk(chunk), options)? {
            Some((text, cost)) if tail + cost <= room => return Ok((stop, tail, Some((text, cost)))),
            None => return Ok((stop, tail, None)),
            Some(_) => {}
        }
    }
    // No cut leaves room for a note: the earliest cut whose tail fits, without one.
    let c = candidates.iter().copied().find(|&c| suffix.get(c).copied().unwrap_or(0) <= room).unwrap_or(segs.len());
    Ok((start_of(c), suffix.get(c).copied().unwrap_or(0), None))
}
