//! The harness's choices, drawn from the one seeded source the whole simulation uses
//! (`appliance_storage::sources`): the appliance's ids and the harness's dice come from the
//! same stream, so one seed fixes both.

use appliance_storage::sources;

/// 64 random bits.
pub fn u64() -> u64 {
    sources::random_u64()
}

/// A number in `0..n` (0 when `n` is 0).
pub fn below(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        u64() % n
    }
}

/// A number in `lo..=hi`.
pub fn between(lo: u64, hi: u64) -> u64 {
    lo + below(hi.saturating_sub(lo) + 1)
}

/// True with a chance of `permille` in 1,000.
pub fn chance(permille: u32) -> bool {
    below(1000) < u64::from(permille)
}

/// One of `items` (`None` when empty).
pub fn pick<T>(items: &[T]) -> Option<&T> {
    if items.is_empty() {
        None
    } else {
        Some(&items[below(items.len() as u64) as usize])
    }
}

/// A copy of one of `items` (`None` when there are none): [`pick`] over what an iterator
/// yields.
pub fn pick_cloned<'a, T: Clone + 'a>(items: impl IntoIterator<Item = &'a T>) -> Option<T> {
    let all: Vec<&T> = items.into_iter().collect();
    pick(&all).map(|t| (*t).clone())
}

/// 32 random bytes.
pub fn bytes32() -> [u8; 32] {
    let mut b = [0u8; 32];
    for c in b.chunks_mut(8) {
        c.copy_from_slice(&u64().to_le_bytes());
    }
    b
}

/// 20 random bytes.
pub fn bytes20() -> [u8; 20] {
    let mut b = [0u8; 20];
    b.copy_from_slice(&bytes32()[..20]);
    b
}
