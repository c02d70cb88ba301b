//! Where the appliance takes the time, new ids and random bytes from.
//!
//! Every process reads them from the system: the wall clock ([`now_us`]), UUID v7 ids
//! ([`new_id`]), ULIDs ([`new_ulid`]) and the operating system's CSPRNG ([`fill_random`]).
//! `appliance simulate` installs ONE seeded source instead ([`install`]) before it
//! opens anything, so that a seed replays the same run: the clock moves only when the
//! simulation moves it ([`advance_us`]), and ids, tokens, secrets and nonces come from the
//! seeded generator (ChaCha8, the same stream on every machine).
//!
//! The seeded source is for the simulation's throw-away data dir only: tokens and secrets
//! drawn from it are predictable. Nothing but `appliance simulate` calls [`install`], and it
//! can be installed once per process, never removed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use uuid::Uuid;

/// Whether [`install`] ran (read on every call: one relaxed load when it did not).
static INSTALLED: AtomicBool = AtomicBool::new(false);
static SOURCE: OnceLock<Mutex<Seeded>> = OnceLock::new();

/// The simulation's source: its clock and its generator.
struct Seeded {
    /// Unix microseconds.
    now_us: i64,
    rng: ChaCha8Rng,
    /// The last UUID v7 handed out (ids are strictly increasing, as the system's are within a
    /// process: the chain watcher learns new wallets as the ids above the last one it saw).
    last_id: u128,
    /// The last ULID handed out (strictly increasing, as `ulid::Generator`'s).
    last_ulid: u128,
}

/// [`install`] was called twice.
#[derive(Debug, thiserror::Error)]
#[error("a deterministic source is already installed in this process")]
pub struct AlreadyInstalled;

/// Replaces the system's time, ids and randomness for the rest of the process by a source
/// seeded with `seed`, whose clock starts at `start_us` (Unix microseconds). For
/// `appliance simulate` only (see the module docs).
pub fn install(seed: u64, start_us: i64) -> Result<(), AlreadyInstalled> {
    let seeded = Seeded {
        now_us: start_us,
        rng: ChaCha8Rng::seed_from_u64(seed),
        last_id: 0,
        last_ulid: 0,
    };
    SOURCE
        .set(Mutex::new(seeded))
        .map_err(|_| AlreadyInstalled)?;
    INSTALLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// Whether the deterministic source is installed.
pub fn is_deterministic() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

fn seeded() -> Option<std::sync::MutexGuard<'static, Seeded>> {
    if !INSTALLED.load(Ordering::Relaxed) {
        return None;
    }
    SOURCE
        .get()
        .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Current time as Unix microseconds: the wall clock, or the deterministic source's clock.
pub fn now_us() -> i64 {
    match seeded() {
        Some(s) => s.now_us,
        None => chrono::Utc::now().timestamp_micros(),
    }
}

/// Moves the deterministic clock `us` microseconds ahead (never back). Returns the new time;
/// `None` when no deterministic source is installed (the wall clock is not moved).
pub fn advance_us(us: u64) -> Option<i64> {
    let mut s = seeded()?;
    s.now_us = s
        .now_us
        .saturating_add(i64::try_from(us).unwrap_or(i64::MAX));
    Some(s.now_us)
}

/// A new UUID v7: the system's (`Uuid::now_v7`), or one of the deterministic source's (its
/// clock's milliseconds, then 74 bits from its generator; strictly above the last one).
pub fn new_id() -> Uuid {
    let Some(mut s) = seeded() else {
        return Uuid::now_v7();
    };
    let ms = (s.now_us.max(0) / 1000) as u128 & ((1 << 48) - 1);
    // 74 bits of sequence: rand_a (12) and rand_b (62). A fresh millisecond starts at a
    // random point in the lower half, so increments never run out within it.
    let last_ms = s.last_id >> 80;
    let seq: u128 = if ms > last_ms || s.last_id == 0 {
        ((s.rng.next_u64() as u128) << 64 | s.rng.next_u64() as u128) & ((1 << 73) - 1)
    } else {
        let last_seq = ((s.last_id >> 64) & 0xfff) << 62 | (s.last_id & ((1 << 62) - 1));
        last_seq + 1
    };
    let ms = ms.max(last_ms);
    let id = ms << 80 | 0x7 << 76 | (seq >> 62) << 64 | 0b10 << 62 | (seq & ((1 << 62) - 1));
    s.last_id = id;
    Uuid::from_u128(id)
}

/// A new ULID at `at_ms` (Unix milliseconds): from `ulid`'s monotonic generator, or from the
/// deterministic source (strictly above the last one it gave).
pub fn new_ulid(at_ms: u64) -> ulid::Ulid {
    let Some(mut s) = seeded() else {
        static GEN: Mutex<ulid::Generator> = Mutex::new(ulid::Generator::new());
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(at_ms);
        return GEN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .generate_from_datetime(at)
            .unwrap_or_else(|_| ulid::Ulid::from_datetime(at));
    };
    let ms = (at_ms as u128) & ((1 << 48) - 1);
    let random = ((s.rng.next_u64() as u128) << 64 | s.rng.next_u64() as u128) & ((1 << 79) - 1);
    let candidate = ms << 80 | random;
    let u = if candidate > s.last_ulid {
        candidate
    } else {
        s.last_ulid + 1
    };
    s.last_ulid = u;
    ulid::Ulid(u)
}

/// 128 random bits for ids (not secrets): `rand`'s thread-local generator (no system call
/// per value), or the deterministic source.
pub fn random_u128() -> u128 {
    match seeded() {
        Some(mut s) => (s.rng.next_u64() as u128) << 64 | s.rng.next_u64() as u128,
        None => rand::random(),
    }
}

/// 64 random bits for ids and choices (not secrets), as [`random_u128`].
pub fn random_u64() -> u64 {
    match seeded() {
        Some(mut s) => s.rng.next_u64(),
        None => rand::random(),
    }
}

/// Fills `buf` from the operating system's CSPRNG (tokens, secrets, nonces), or from the
/// deterministic source.
pub fn fill_random(buf: &mut [u8]) {
    match seeded() {
        Some(mut s) => s.rng.fill_bytes(buf),
        None => rand::rngs::OsRng.fill_bytes(buf),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The process-wide source cannot be installed in a unit test without changing every other
    // test of this crate; the id layout is checked on values built the same way.
    #[test]
    fn system_ids_and_ulids_increase() {
        let a = new_id();
        let b = new_id();
        assert!(b > a);
        assert_eq!(a.get_version_num(), 7);
        let u1 = new_ulid(1_000);
        let u2 = new_ulid(1_000);
        assert!(u2 > u1);
        let mut x = [0u8; 32];
        fill_random(&mut x);
        assert_ne!(x, [0u8; 32]);
    }
}
