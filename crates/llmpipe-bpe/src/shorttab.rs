//! An open-addressing hash table keyed by short pieces: their bytes and length as two words (see
//! `model::short_key`), never all zero. One slot holds the key and the value, so a lookup touches
//! one place in memory, and a caller that knows the next keys a few steps ahead can prefetch their
//! slots ([`ShortTable::prefetch`]): on real text most lookups into a table larger than the cache
//! were waits on memory.

/// A key: the piece's bytes 0..8 and 8..15 with its length in the top byte (never `[0, 0]`).
pub(crate) type Key = [u64; 2];

#[derive(Debug, Clone)]
pub(crate) struct ShortTable<V> {
    slots: Vec<(Key, V)>,
    len: usize,
}

impl<V: Copy + Default> Default for ShortTable<V> {
    fn default() -> Self {
        ShortTable { slots: Vec::new(), len: 0 }
    }
}

/// Random seeds, one pair per process (the hash of text from strangers must not be predictable),
/// shared by every table: a key's hash serves each table it is looked up in.
fn seed() -> &'static [u64; 2] {
    static SEED: std::sync::OnceLock<[u64; 2]> = std::sync::OnceLock::new();
    SEED.get_or_init(|| {
        let rs = ahash::RandomState::new();
        [rs.hash_one(1u64) | 1, rs.hash_one(2u64) | 1]
    })
}

/// The hash of a key (a folded multiply of its words with the seeds).
#[inline(always)]
pub(crate) fn hash(k: Key) -> u64 {
    let s = seed();
    let m = ((k[0] ^ s[0]) as u128).wrapping_mul((k[1] ^ s[1]) as u128);
    (m as u64) ^ ((m >> 64) as u64)
}

impl<V: Copy + Default> ShortTable<V> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        ShortTable { slots: vec![([0, 0], V::default()); (n * 2).next_power_of_two().max(16)], len: 0 }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Ask for the slot of hash `h` to be brought into the cache (a hint).
    #[inline(always)]
    pub(crate) fn prefetch(&self, h: u64) {
        if !self.slots.is_empty() {
            let i = h as usize & (self.slots.len() - 1);
            crate::prefetch(self.slots.as_ptr().wrapping_add(i).cast());
        }
    }

    #[inline]
    pub(crate) fn get(&self, k: Key, h: u64) -> Option<&V> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let s = &self.slots[i];
            if s.0 == k {
                return Some(&s.1);
            }
            if s.0 == [0, 0] {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// The value of `k` (hash `h`), inserted as `V::default()` if absent.
    #[inline]
    pub(crate) fn entry(&mut self, k: Key, h: u64) -> &mut V {
        debug_assert!(k != [0, 0]);
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let s = &self.slots[i];
            if s.0 == k {
                break;
            }
            if s.0 == [0, 0] {
                self.slots[i].0 = k;
                self.len += 1;
                break;
            }
            i = (i + 1) & mask;
        }
        &mut self.slots[i].1
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![([0, 0], V::default()); cap]);
        let mask = cap - 1;
        for (k, v) in old {
            if k != [0, 0] {
                let mut i = hash(k) as usize & mask;
                while self.slots[i].0 != [0, 0] {
                    i = (i + 1) & mask;
                }
                self.slots[i] = (k, v);
            }
        }
    }

    pub(crate) fn clear(&mut self) {
        if self.len > 0 {
            self.slots.fill(([0, 0], V::default()));
            self.len = 0;
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (Key, V)> + '_ {
        self.slots.iter().copied().filter(|s| s.0 != [0, 0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn agrees_with_a_hash_map() {
        let mut t: ShortTable<u64> = ShortTable::default();
        let mut m: HashMap<Key, u64> = HashMap::new();
        let mut x = 0x1234_5678_9abc_def1u64;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // few distinct keys at first, then many (growth), some sharing a word
            let k = [x % (1 + step / 8), (x % 5) << 56 | 2 << 56];
            let h = hash(k);
            t.prefetch(h);
            *t.entry(k, h) += step;
            *m.entry(k).or_default() += step;
            let probe = [x.rotate_left(7) % 1000, 3 << 56];
            assert_eq!(t.get(probe, hash(probe)), m.get(&probe));
        }
        assert_eq!(t.len(), m.len());
        let got: HashMap<Key, u64> = t.iter().collect();
        assert_eq!(got, m);
        t.clear();
        assert_eq!((t.len(), t.iter().count()), (0, 0));
    }
}
