//! Hashes keyed by a secret drawn at random when the process starts: for keys that input
//! chooses (message texts in the count cache, tool-call ids in hash maps), so no input
//! can be written to collide with another's, or to pile its ids into one bucket, without
//! the secret, which never leaves the process. XXH3 under that secret: fast on short and
//! long inputs alike, though not a cryptographic hash (one who learned the secret could
//! write collisions).

use std::sync::LazyLock;
use xxhash_rust::xxh3::{xxh3_128_with_secret, xxh3_64_with_secret};

/// The secret: XXH3's default size, from the standard library's random state (which,
/// unlike a crate's own source of randomness, cannot fail).
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
