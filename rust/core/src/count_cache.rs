//! The count cache: exact token counts remembered across calls and threads.
//!
//! A gateway sees the same conversation again every turn (turn N resends turns 1..N-1
//! byte for byte), and hashing costs far less than byte-pair encoding. So every exact
//! count goes through one process-wide map from a 128-bit key of `(domain, some bytes)`
//! to the count, where the bytes and the [`Domain`] determine the count: the text's own
//! UTF-8 (a message's SPEC §3 text, a note, a system prompt, a `count_tokens` text), or,
//! on the bytes path, the message's JSON in the body, so a hit neither decodes nor builds
//! its text. The domain tells the encoding, which of the two the bytes are, whether a
//! message was sized whole, and a provider sizing's image cost (part of the count).
//! Sources shorter than [`MIN_CACHED_BYTES`] are counted every time.
//!
//! The map is a preallocated, sharded, set-associative table rather than a hash map with
//! an eviction policy: its memory is the table, so the bound holds by construction, and a
//! full set evicts its least recently used entry in place (no allocation, no list to
//! maintain). Each of 64 shards has its own lock, so threads rarely wait. A shard
//! allocates its whole table, zeroed (a 64th of the bound: 1 MiB by default), on its
//! first insert, so a process holds up to the bound once counts have reached every
//! shard; a failed allocation leaves that shard empty: a count then goes uncached, never
//! aborts.
//!
//! Keys: the [`keyed`] 128-bit hash of the domain and of the bytes' own keyed hash, under
//! a secret drawn at random on first use (`key`). Collisions: a lookup compares its key
//! with the 4 keys of one set, so a wrong count is returned only if another `(domain,
//! bytes)` has the same key: for inputs not chosen against the secret, about `8 / 2^128`
//! a lookup (the outer hash or the bytes' own colliding); the secret never leaves the
//! process, so no input can be written to collide with another's. (XXH3 is not a
//! cryptographic hash: a party that learned the secret could.)

use crate::keyed;
use std::alloc::Layout;
use std::convert::Infallible;
use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

/// The bound a process starts with: 64 MiB, room for about 2.8 million counts.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

/// Shorter sources are counted every time: a few pieces, mostly answered by the encoder's
/// per-thread piece cache, would only take slots from longer texts. From this length on
/// a lookup is several times cheaper than counting.
pub const MIN_CACHED_BYTES: usize = 16;

/// What a source's bytes are counted as: two words a caller keeps distinct for every
/// encoding, kind of source and sizing (see `Encoding`'s domains).
pub type Domain = [u64; 2];

/// The key of `source` in `domain`: the [`keyed::hash128`] of the domain's words and the
/// source's own keyed hash. The domain is hashed in whole, never given as XXH3's seed:
/// that seed only shifts the secret, so a source one bit from another, under the
/// neighbouring seed, hashed alike (a 16-byte text counted in one encoding gave its count
/// to its neighbour in the other).
fn key(domain: Domain, source: &[u8]) -> [u64; 2] {
    let mut outer = [0_u8; 32];
    let (words, inner) = outer.split_at_mut(16);
    let (first, second) = words.split_at_mut(8);
    first.copy_from_slice(&domain[0].to_le_bytes());
    second.copy_from_slice(&domain[1].to_le_bytes());
    inner.copy_from_slice(&keyed::hash128(source).to_le_bytes());
    let hash = keyed::hash128(&outer);
    [hash as u64, (hash >> 64) as u64]
}

/// Locks, each guarding an equal share of the table.
const SHARDS: usize = 64;

/// Entries a hash may sit in (one set).
const WAYS: usize = 4;

/// One remembered count; all zeros is an empty slot (a text whose hash is zero is never
/// stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
struct Slot {
    key: [u64; 2],
    count: u64,
}

/// Bytes a slot takes in the table.
pub const SLOT_BYTES: usize = size_of::<Slot>();

/// One lock's share of the table.
struct Shard {
    /// Empty until the first insert; then the cache's shard capacity in slots, `WAYS` to
    /// a set, most recently used first.
    slots: Vec<Slot>,
    /// The allocator refused the slots: the shard stays empty until reconfigured.
    refused: bool,
    entries: usize,
}

impl Shard {
    const fn new() -> Self {
        Self { slots: Vec::new(), refused: false, entries: 0 }
    }

    /// The set `key` belongs to (multiply-shift: any number of sets, no modulo).
    fn set(&mut self, key: [u64; 2]) -> Option<&mut [Slot]> {
        let sets = (self.slots.len() / WAYS) as u64;
        let set = ((u128::from(key[0]) * u128::from(sets)) >> 64) as usize;
        self.slots.get_mut(set * WAYS..(set + 1) * WAYS)
    }

    fn get(&mut self, key: [u64; 2]) -> Option<u64> {
        let set = self.set(key)?;
        let way = set.iter().position(|slot| slot.key == key)?;
        let found = set.get(way)?.count;
        set.get_mut(..=way)?.rotate_right(1); // now the most recently used
        Some(found)
    }

    fn insert(&mut self, key: [u64; 2], count: u64, capacity: usize) {
        if self.slots.is_empty() && !self.refused {
            match zeroed_slots(capacity) {
                Some(slots) => self.slots = slots,
                None => self.refused = true,
            }
        }
        let Some(set) = self.set(key) else { return };
        if set.iter().any(|slot| slot.key == key) {
            return; // another thread counted the same text meanwhile
        }
        let evicted_empty = set.last().is_some_and(|slot| slot.key == [0, 0]);
        set.rotate_right(1);
        if let Some(first) = set.first_mut() {
            *first = Slot { key, count };
        }
        self.entries += usize::from(evicted_empty);
    }
}

/// `n` zeroed slots, or `None` when the allocator refuses them.
fn zeroed_slots(n: usize) -> Option<Vec<Slot>> {
    let layout = Layout::array::<Slot>(n).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the layout has a non-zero size; all-zero bytes are a valid `Slot` (plain
    // integers); the pointer comes from the global allocator with the layout of exactly
    // `n` slots, which is what `Vec::from_raw_parts` with length and capacity `n` needs.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<Slot>();
        (!ptr.is_null()).then(|| Vec::from_raw_parts(ptr, n, n))
    }
}

/// Slots a shard gets under a bound of `max_bytes`: whole sets only.
const fn shard_capacity(max_bytes: usize) -> usize {
    max_bytes / SLOT_BYTES / SHARDS / WAYS * WAYS
}

/// A count cache; the process has one, [`GLOBAL`], which [`crate::encoding::Encoding`]
/// counts through.
pub struct CountCache {
    first: Tables,
    /// The tables a forked child counts with (see [`CountCache::forget_after_fork`]);
    /// null until then. Each is leaked, so a reference to it lives as long as the process.
    forked: AtomicPtr<Tables>,
}

/// The cache's shards and counters.
struct Tables {
    shards: [Mutex<Shard>; SHARDS],
    /// Slots a shard allocates.
    shard_capacity: AtomicUsize,
    /// False when the shards have no capacity: counts skip hashing.
    enabled: AtomicBool,
    max_bytes: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Held by [`CountCache::configure`], so two of them never leave shards of different
    /// sizes.
    configuring: Mutex<()>,
}

/// The process's count cache.
pub static GLOBAL: CountCache = CountCache::new(DEFAULT_MAX_BYTES);

/// A lock that a panicking holder poisoned still guards a consistent table: no shard
/// method leaves one half-written.
fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The lock, unless another thread holds it (see [`locked`] on poisoning).
fn untaken<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl CountCache {
    /// An empty cache bounded by `max_bytes` (see [`CountCache::configure`]).
    pub const fn new(max_bytes: usize) -> Self {
        Self { first: Tables::new(max_bytes), forked: AtomicPtr::new(std::ptr::null_mut()) }
    }

    fn tables(&self) -> &Tables {
        let forked = self.forked.load(Acquire);
        // SAFETY: a non-null pointer here is a leaked box (`forget_after_fork`), never freed.
        unsafe { forked.as_ref() }.unwrap_or(&self.first)
    }

    /// `count(text)`, remembered in `domain` (one per encoding) when the text is long
    /// enough and the cache is on.
    pub fn count(&self, domain: Domain, text: &str, count: impl FnOnce(&str) -> usize) -> usize {
        match self.remembered(domain, text.as_bytes(), || Ok::<_, Infallible>(count(text))) {
            Ok(counted) => counted,
            Err(never) => match never {},
        }
    }

    /// `count()`, remembered in `domain` under `source` (bytes that, in that domain,
    /// determine the count) when the source is long enough and the cache is on.
    ///
    /// # Errors
    /// What `count` returns; an error is not remembered.
    pub fn remembered<E>(
        &self,
        domain: Domain,
        source: &[u8],
        count: impl FnOnce() -> Result<usize, E>,
    ) -> Result<usize, E> {
        self.tables().remembered(domain, source, count)
    }

    /// Empties the cache, zeroes its counters and bounds its table by `max_bytes` (0
    /// turns it off, and so does anything under one slot a set in every shard: 6 KiB).
    pub fn configure(&self, max_bytes: usize) {
        self.tables().configure(max_bytes);
    }

    /// The cache's counters and size now.
    pub fn stats(&self) -> CountCacheStats {
        self.tables().stats()
    }

    /// For a child process just forked, before it runs anything else: counts go on in new,
    /// empty tables under the same bound. A thread of the parent that held a shard's lock
    /// at the fork does not exist in the child, so that lock would never be released, and
    /// [`CountCache::stats`] and [`CountCache::configure`], which wait for every shard,
    /// would wait forever. The old tables are left as they are: their pages are the
    /// parent's until written.
    pub fn forget_after_fork(&self) {
        let max_bytes = self.tables().max_bytes.load(Relaxed);
        self.forked.store(Box::leak(Box::new(Tables::new(max_bytes))), Release);
    }
}

impl Tables {
    const fn new(max_bytes: usize) -> Self {
        Self {
            shards: [const { Mutex::new(Shard::new()) }; SHARDS],
            shard_capacity: AtomicUsize::new(shard_capacity(max_bytes)),
            enabled: AtomicBool::new(shard_capacity(max_bytes) > 0),
            max_bytes: AtomicUsize::new(max_bytes),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            configuring: Mutex::new(()),
        }
    }

    fn remembered<E>(
        &self,
        domain: Domain,
        source: &[u8],
        count: impl FnOnce() -> Result<usize, E>,
    ) -> Result<usize, E> {
        if source.len() < MIN_CACHED_BYTES || !self.enabled.load(Relaxed) {
            return count();
        }
        let key = key(domain, source);
        let Some(shard) = self.shards.get((key[1] >> 58) as usize % SHARDS) else { return count() };
        if key == [0, 0] {
            return count();
        }
        // A shard another thread holds is passed by, never waited for: counting beats
        // waiting, and a child forked while a parent's thread held the lock never blocks.
        if let Some(found) = untaken(shard).and_then(|mut shard| shard.get(key)) {
            self.hits.fetch_add(1, Relaxed);
            return Ok(usize::try_from(found).unwrap_or(usize::MAX));
        }
        self.misses.fetch_add(1, Relaxed);
        // Counted without the lock: other threads use the shard meanwhile.
        let counted = count()?;
        if let Some(mut shard) = untaken(shard) {
            shard.insert(key, counted as u64, self.shard_capacity.load(Relaxed));
        }
        Ok(counted)
    }

    fn configure(&self, max_bytes: usize) {
        let _one_at_a_time = locked(&self.configuring);
        let capacity = shard_capacity(max_bytes);
        self.enabled.store(false, Relaxed);
        self.shard_capacity.store(capacity, Relaxed);
        for shard in &self.shards {
            *locked(shard) = Shard::new();
        }
        self.max_bytes.store(max_bytes, Relaxed);
        self.hits.store(0, Relaxed);
        self.misses.store(0, Relaxed);
        self.enabled.store(capacity > 0, Relaxed);
    }

    fn stats(&self) -> CountCacheStats {
        let (mut entries, mut bytes) = (0, 0);
        for shard in &self.shards {
            let shard = locked(shard);
            entries += shard.entries;
            bytes += shard.slots.capacity() * SLOT_BYTES;
        }
        CountCacheStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            entries,
            bytes,
            max_bytes: self.max_bytes.load(Relaxed),
        }
    }
}

/// What a cache holds and has done since it was last configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountCacheStats {
    /// Counts answered from the cache.
    pub hits: u64,
    /// Counts computed: not found (then stored), or passed by while another thread held
    /// their shard.
    pub misses: u64,
    /// Counts held.
    pub entries: usize,
    /// Bytes of the tables allocated: all the cache's memory but its fixed shard headers
    /// (about 3 KiB). Never above `max_bytes`.
    pub bytes: usize,
    /// The configured bound.
    pub max_bytes: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::Encoding;

    fn text(i: usize) -> String {
        format!("message {i}: the quick brown fox jumps over the lazy dog, again and again.")
    }

    fn o200k(cache: &CountCache, text: &str) -> usize {
        cache.count([0, 0], text, |t| Encoding::O200kBase.count_uncached(t))
    }

    fn nothing_held(max_bytes: usize) -> CountCacheStats {
        CountCacheStats { hits: 0, misses: 0, entries: 0, bytes: 0, max_bytes }
    }

    #[test]
    fn same_counts_on_and_off_and_hits_on_repeat() {
        let texts: Vec<String> = (0..200).map(text).collect();
        let uncached: Vec<usize> = texts.iter().map(|t| Encoding::O200kBase.count_uncached(t)).collect();
        let cache = CountCache::new(1 << 20);
        let first: Vec<usize> = texts.iter().map(|t| o200k(&cache, t)).collect();
        let again: Vec<usize> = texts.iter().map(|t| o200k(&cache, t)).collect();
        assert_eq!(first, uncached);
        assert_eq!(again, uncached);
        let seen = cache.stats();
        assert_eq!((seen.misses, seen.hits, seen.entries), (200, 200, 200));
        // Another seed (encoding) is another key.
        cache.count([1, 0], &text(0), |t| Encoding::Cl100kBase.count_uncached(t));
        assert_eq!(cache.stats().misses, 201);
        cache.configure(1 << 20);
        assert_eq!(cache.stats(), nothing_held(1 << 20));
    }

    #[test]
    fn encodings_count_through_the_global_cache() {
        // Other tests count meanwhile, so only growth is certain.
        let long = text(usize::MAX);
        let before = GLOBAL.stats().hits;
        let first = Encoding::O200kBase.count_str(&long);
        assert_eq!(Encoding::O200kBase.count_str(&long), first);
        assert_eq!(first, Encoding::O200kBase.count_uncached(&long));
        assert!(GLOBAL.stats().hits > before);
        assert!(GLOBAL.stats().bytes <= DEFAULT_MAX_BYTES);
    }

    #[test]
    fn sources_of_other_seeds_never_share_a_count() {
        // XXH3's seed only shifts its secret, so with the seed as the domain a source one
        // bit away from another, under the neighbouring seed, hashed alike: a text of 16
        // bytes counted in o200k_base gave its count to its neighbour counted in
        // cl100k_base. Each pair below collided that way; none may share a count.
        let relations: [(u64, u64, u8, u8); 7] =
            [(0, 1, 0, 1), (2, 3, 0, 1), (4, 5, 0, 1), (0, 2, 0xc, 2), (1, 3, 0xc, 2), (0, 4, 8, 4), (1, 5, 8, 4)];
        let cache = CountCache::new(1 << 20);
        for i in 0..500_u32 {
            let mut first = format!("{i:0>8}-count-{i:>4}").into_bytes();
            first.truncate(16);
            for &(a, b, low, high) in &relations {
                let mut second = first.clone();
                second[0] ^= low;
                second[8] ^= high;
                let (Ok(x), Ok(y)) = (std::str::from_utf8(&first), std::str::from_utf8(&second)) else { continue };
                cache.count([a, 0], x, |_| 1);
                assert_eq!(cache.count([b, 0], y, |_| 2), 2, "{x:?} under {a}, {y:?} under {b}");
            }
        }
        // The texts the collision was found with: 16 UTF-8 bytes, one bit apart at byte 8.
        let cache = CountCache::new(1 << 20);
        cache.count([0, 0], "00中000crt\r\n\r\n@", |_| 6);
        assert_eq!(cache.count([1, 0], "00中000brt\r\n\r\n@", |_| 7), 7);
    }

    #[test]
    fn short_texts_are_not_cached() {
        let cache = CountCache::new(1 << 20);
        let short = "x".repeat(MIN_CACHED_BYTES - 1);
        assert_eq!(o200k(&cache, &short), o200k(&cache, &short));
        assert_eq!(cache.stats(), nothing_held(1 << 20));
    }

    #[test]
    fn the_bound_holds_over_many_distinct_texts() {
        let max_bytes = 100_000;
        let cache = CountCache::new(max_bytes);
        for i in 0..100_000 {
            cache.count([0, 0], &text(i), str::len);
        }
        let seen = cache.stats();
        assert!(seen.bytes <= max_bytes && seen.bytes > max_bytes * 9 / 10, "{seen:?}");
        assert_eq!(seen.entries * SLOT_BYTES, seen.bytes, "every slot filled: {seen:?}");
        assert_eq!(seen.misses, 100_000);
    }

    #[test]
    fn off_stores_nothing() {
        for max_bytes in [0, SHARDS * WAYS * SLOT_BYTES - 1] {
            let cache = CountCache::new(DEFAULT_MAX_BYTES);
            cache.configure(max_bytes);
            for _ in 0..3 {
                assert_eq!(cache.count([0, 0], &text(1), str::len), text(1).len());
            }
            assert_eq!(cache.stats(), nothing_held(max_bytes));
        }
    }

    #[test]
    fn a_forked_child_never_waits_for_a_lock_its_parent_held() {
        let cache = CountCache::new(1 << 20);
        o200k(&cache, &text(1));
        // What a child forked while a parent's thread held a shard's lock inherits: that
        // lock held, by a thread the child does not have.
        let held = locked(cache.first.shards.first().expect("shards"));
        cache.forget_after_fork();
        assert_eq!(cache.stats(), nothing_held(1 << 20));
        assert_eq!(o200k(&cache, &text(1)), o200k(&cache, &text(1)));
        assert_eq!((cache.stats().hits, cache.stats().entries), (1, 1));
        cache.configure(1 << 21);
        assert_eq!(cache.stats(), nothing_held(1 << 21));
        drop(held);
    }

    #[test]
    fn threads_share_it() {
        let cache = CountCache::new(1 << 20);
        let expected: Vec<usize> = (0..500).map(|i| Encoding::O200kBase.count_uncached(&text(i))).collect();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for (i, want) in expected.iter().enumerate() {
                        assert_eq!(o200k(&cache, &text(i)), *want);
                    }
                });
            }
        });
        let seen = cache.stats();
        // Two threads may both miss a text before either stores it, and a thread passes a
        // shard another holds by: every lookup is a hit or a miss, and once alone, every
        // text is stored.
        assert_eq!(seen.hits + seen.misses, 2000);
        assert!(seen.misses >= 500 && seen.entries <= 500);
        for (i, want) in expected.iter().enumerate() {
            assert_eq!(o200k(&cache, &text(i)), *want);
        }
        assert_eq!(cache.stats().entries, 500);
    }
}
