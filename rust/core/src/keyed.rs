//! Hashes keyed by a secret drawn at random on first use in a process, for keys that input
//! chooses (message texts in the count cache, tool-call ids in hash maps, the strings
//! `rank_by_count` counts): no input can be written to collide with another's, or to pile
//! its keys into one bucket, without the secret, which never leaves the process (a forked
//! child shares its parent's). XXH3 under that secret: fast on short and long inputs
//! alike, though not a cryptographic hash (one who learned the secret could write
//! collisions).

use std::sync::LazyLock;
use xxhash_rust::xxh3::{xxh3_128_with_secret, xxh3_64_with_secret};

/// The secret: XXH3's default size, from the standard library's random state (the OS's
/// random source, read as std's own `HashMap` keys are).
static SECRET: LazyLock<[u8; 192]> = LazyLock::new(|| {
    use std::hash::BuildHasher;
    let random = std::hash::RandomState::new();
    let mut secret = [0_u8; 192];
    for (i, word) in secret.chunks_exact_mut(8).enumerate() {
        word.copy_from_slice(&random.hash_one(i).to_le_bytes());
    }
    secret
});

/// 64-bit keyed hash of `bytes`.
pub fn hash64(bytes: &[u8]) -> u64 {
    xxh3_64_with_secret(bytes, &*SECRET)
}

/// 128-bit keyed hash of `bytes`.
pub fn hash128(bytes: &[u8]) -> u128 {
    xxh3_128_with_secret(bytes, &*SECRET)
}
