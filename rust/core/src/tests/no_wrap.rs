//! SizedMessages near and past 2^64 (a custom estimator can return any u64): every total,
//! comparison and cut point is the exact figure, never a wrapped one.
// Test-only module: its unwraps are test assertions and never reach Python.
#![cfg(test)]

use crate::json::JsonNode;
use crate::message::Checked;
use crate::pack::{pack, Cut, PackOptions};
use crate::tokens::{ArraySizes, MessageSizer};
use crate::transcript::Transcript;
use crate::window::{compact_tail_start_for_budget, window_start, WindowLimits};
use crate::CoreError;
use serde_json::{json, Value};

const E62: u64 = 1 << 62;
const E63: u64 = 1 << 63;

/// An estimator that gives every message and every note text the same size.
struct Flat(u64);

impl<N: JsonNode> MessageSizer<N> for Flat {
    fn message_tokens(&mut self, _: Option<usize>, _: &N, _: &Checked<N>) -> Result<u64, CoreError> {
        Ok(self.0)
    }

    fn system_tokens(&mut self, _: &Checked<N>) -> Result<u64, CoreError> {
        Ok(self.0)
    }

    fn text_tokens(&mut self, _: &str) -> Result<u64, CoreError> {
        Ok(self.0)
    }
}

/// `roles` as messages with short text.
fn messages(roles: &[&str]) -> Vec<Value> {
    roles.iter().map(|r| json!({"role": r, "content": "hi"})).collect()
}

fn options(budget: u64, cut: Cut) -> PackOptions {
    PackOptions { budget, cut, ..PackOptions::default() }
}

#[test]
fn sums_are_exact_past_2_to_the_64() {
    for size in [E62, E63, u64::MAX] {
        let values = messages(&["user"; 8]);
        let refs: Vec<&Value> = values.iter().collect();
        let mut t = Transcript::new(&refs, Flat(size)).unwrap();
        assert_eq!(t.sum(0..8), Ok(8 * u128::from(size)), "{size}");
    }
}

#[test]
fn window_cut_points_are_found_past_2_to_the_64() {
    // Five turns of 2^62: from the second on they pass 2^64 - 1, so the cut is at 2
    // (a wrapping sum would see 2^64 as 0 and keep everything).
    let sizes = [E62 as i64; 5];
    let user = [true; 5];
    let mut arrays = ArraySizes::new(&sizes, &user).unwrap();
    assert_eq!(window_start(&mut arrays, WindowLimits::new(80, u64::MAX).unwrap()), Ok(2));
    let mut arrays = ArraySizes::new(&sizes, &user).unwrap();
    assert_eq!(window_start(&mut arrays, WindowLimits::new(80, 3 * E62).unwrap()), Ok(2));
}

#[test]
fn compaction_tail_stops_at_the_budget_past_2_to_the_64() {
    let values = messages(&["user"; 12]);
    let refs: Vec<&Value> = values.iter().collect();
    let mut t = Transcript::new(&refs, Flat(E63)).unwrap();
    // Eight turns are taken whatever they cost; the ninth would pass u64::MAX.
    assert_eq!(compact_tail_start_for_budget(&mut t, u64::MAX), Ok(4));
}

#[test]
fn an_overflowing_core_reports_its_exact_total() {
    let values = messages(&["system", "user"]);
    let refs: Vec<&Value> = values.iter().collect();
    let mut t = Transcript::new(&refs, Flat(E63)).unwrap();
    let p = pack(&mut t, &options(u64::MAX, Cut::Greedy)).unwrap();
    assert!(!p.fits);
    assert_eq!(p.tokens, 1u128 << 64);
    assert_eq!(p.kept, vec![0, 1]);
}

#[test]
fn a_note_that_costs_past_2_to_the_64_is_not_kept() {
    // Messages cost 10, a note text u64::MAX (+4 overhead): no note fits, ever.
    struct CheapMessages;
    impl<N: JsonNode> MessageSizer<N> for CheapMessages {
        fn message_tokens(&mut self, _: Option<usize>, _: &N, _: &Checked<N>) -> Result<u64, CoreError> {
            Ok(10)
        }
        fn system_tokens(&mut self, _: &Checked<N>) -> Result<u64, CoreError> {
            Ok(10)
        }
        fn text_tokens(&mut self, _: &str) -> Result<u64, CoreError> {
            Ok(u64::MAX)
        }
    }
    let values = messages(&["user", "assistant", "user", "assistant", "user"]);
    let refs: Vec<&Value> = values.iter().collect();
    for cut in [Cut::Greedy, Cut::Chunked { chunk: None }] {
        let mut t = Transcript::new(&refs, CheapMessages).unwrap();
        let p = pack(&mut t, &options(30, cut)).unwrap();
        assert_eq!(p.note, None, "{cut:?}");
        assert!(p.fits && p.tokens <= 30, "{cut:?}: {p:?}");
    }
}

#[test]
fn chunk_cut_points_past_2_to_the_64_are_counted() {
    // Six messages of 2^62, chunks of 2^63: cut points after messages 2, 4 and 6. The
    // tail from 4 (the directive, then one more) fits with the note; a running total
    // that wrapped at 2^64 would miss the cut at 4 and keep only the directive.
    let values = messages(&["user", "assistant", "user", "assistant", "user", "assistant"]);
    let refs: Vec<&Value> = values.iter().collect();
    let mut t = Transcript::new(&refs, Flat(E62)).unwrap();
    let p = pack(&mut t, &options(u64::MAX, Cut::Chunked { chunk: Some(E63) })).unwrap();
    assert_eq!(p.kept, vec![4, 5]);
    assert!(p.fits && p.note.is_some());
    assert_eq!(p.tokens, 3 * u128::from(E62) + 4);
}
