//! Ranking by frequency: each distinct item with its count, most frequent first, ties in
//! plain code-point order (locale-independent, unlike the host's `localeCompare`).

use rustc_hash::FxHashMap;
use std::hash::Hash;

/// Each distinct item of `items` with how often it occurs: most frequent first, ties by
/// the items' order (`Ord`), each item represented by its first occurrence.
pub fn rank_by_count<K: Hash + Eq + Ord>(items: impl IntoIterator<Item = K>) -> Vec<(K, usize)> {
    // FxHash: a binding's keys hash by an already well-mixed, keyed value (the Python
    // binding's keyed hash of each string's data), which FxHash passes through cheaply.
    let mut counts: FxHashMap<K, usize> = FxHashMap::default();
    for item in items {
        *counts.entry(item).or_insert(0) += 1;
    }
    let mut ranked: Vec<(K, usize)> = counts.into_iter().collect();
    ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_frequent_first_then_code_point_order() {
        let items = ["b", "a", "B", "b", "é", "a", "z"];
        assert_eq!(rank_by_count(items), vec![("a", 2), ("b", 2), ("B", 1), ("z", 1), ("é", 1)]);
        assert!(rank_by_count(Vec::<&str>::new()).is_empty());
    }
}
