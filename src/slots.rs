//! Counted slots: at most a given number of holders per key at once, each giving its slot
//! back when dropped (keyless body reads per source address, event streams per project).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// How many slots each key has taken now; a key with none is not kept.
pub struct Slots<K: Eq + Hash>(Arc<Mutex<HashMap<K, usize>>>);

impl<K: Eq + Hash> Default for Slots<K> {
    fn default() -> Self {
        Slots(Arc::default())
    }
}

impl<K: Eq + Hash + Copy> Slots<K> {
    /// One of `key`'s slots, or `None` when `max` are taken.
    pub fn take(&self, key: K, max: usize) -> Option<Slot<K>> {
        let mut m = self.0.lock().expect("lock");
        let n = m.entry(key).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Slot {
            counts: self.0.clone(),
            key,
        })
    }
}

/// One slot taken ([`Slots::take`]); given back when dropped.
pub struct Slot<K: Eq + Hash> {
    counts: Arc<Mutex<HashMap<K, usize>>>,
    key: K,
}

impl<K: Eq + Hash> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut m = self.counts.lock().expect("lock");
        if let Some(n) = m.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}
