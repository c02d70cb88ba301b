//! The event indexes as runs of sequences (schema 13).
//!
//! [`crate::schema::EVENT_TYPE_RUNS`] keeps, for each project and event type, and
//! [`crate::schema::EVENT_RESOURCE_RUNS`] for each resource, the sequences of their events
//! in rows of up to [`RUN_MAX`] bytes:
//!
//! ```text
//! key   = prefix ‖ first sequence (8, big-endian)
//! value = the run's later sequences, each as its LEB128 distance from the one before
//! ```
//!
//! The prefix is [`type_prefix`] (project (16) ‖ FNV-1a 32 of the type (4)) or
//! [`crate::index::event_resource_prefix`] (the resource's UUID, or project ‖ length ‖ id).
//! Neither kind of prefix is a prefix of another of its table, so a range of `prefix ‖ 0`
//! to `prefix ‖ u64::MAX` holds that prefix's runs only.
//!
//! An event's write appends a few bytes to the last run of its type and of its resource
//! instead of inserting a key of its own in each index: schema 12 kept one key per event in
//! each, about 65 and 50 bytes of pages, half of them free space (the key lands at the end
//! of its type's or resource's range, in the middle of the table, and redb splits such a
//! full leaf evenly; the left half is never written again). A type's run holds 150-250
//! events; a resource has one run unless it has very many events.
//!
//! Runs of one prefix never overlap: every sequence of a run is below the first of the
//! next. Two types with one hash share runs; a reader compares each event's own type (and
//! resource), so that costs reads, never a wrong answer. A run that does not decode is
//! skipped by readers (logged) and replaced by a writer that lands in it.

use redb::{ReadableTable, Table};
use uuid::Uuid;

use crate::StoreError;

/// Bytes of a run's value past which an append starts a new run: a run's rewrite on each
/// append stays small (redb copies the value into the leaf), and a run spans a few hundred
/// events.
pub const RUN_MAX: usize = 256;

/// Longest LEB128 encoding of a u64.
const VARINT_MAX: usize = 10;

/// Prefix of the runs of `project`'s events of type `event_type`: project (16) ‖ FNV-1a 32
/// of the type (4, big-endian; [`crate::index::event_type_hash`]).
pub fn type_prefix(project: Uuid, event_type: &str) -> [u8; 20] {
    let mut p = [0u8; 20];
    p[..16].copy_from_slice(project.as_bytes());
    p[16..].copy_from_slice(&crate::index::event_type_hash(event_type).to_be_bytes());
    p
}

/// Key of the run of `prefix` that starts at `first`: `prefix` ‖ `first` (8, big-endian).
pub fn key(prefix: &[u8], first: u64) -> Vec<u8> {
    crate::index::run_key(prefix, first)
}

/// (prefix, first sequence) of a run's key: its last 8 bytes are the sequence; `None` for a
/// key too short to hold a prefix and one.
pub fn split_key(k: &[u8]) -> Option<(&[u8], u64)> {
    crate::index::split_run_key(k)
}

/// Appends `seq` to the run whose value is `value` and whose last sequence is `last`
/// (`seq` above it), unless the run is full ([`RUN_MAX`]): whether it did.
pub(crate) fn push(value: &mut Vec<u8>, last: u64, seq: u64) -> bool {
    if seq <= last || value.len() + VARINT_MAX > RUN_MAX {
        return false;
    }
    put_varint(value, seq - last);
    true
}

/// Appends `v` to `out` as LEB128.
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The sequences of the run that starts at `first` with `value`, ascending; `None` when the
/// value does not decode to strictly increasing sequences (a cut or overlong varint, a
/// zero distance, an overflow).
pub fn decode(first: u64, value: &[u8]) -> Option<Vec<u64>> {
    let mut seqs = Vec::with_capacity(value.len() + 1);
    seqs.push(first);
    let (mut last, mut delta, mut shift) = (first, 0u64, 0u32);
    for (i, &b) in value.iter().enumerate() {
        if i + 1 == value.len() && b & 0x80 != 0 {
            return None;
        }
        let part = u64::from(b & 0x7f);
        if shift >= 64 || (shift > 0 && part >> (64 - shift) != 0) {
            return None;
        }
        delta |= part << shift;
        if b & 0x80 != 0 {
            shift += 7;
            continue;
        }
        if delta == 0 {
            return None;
        }
        last = last.checked_add(delta)?;
        seqs.push(last);
        (delta, shift) = (0, 0);
    }
    Some(seqs)
}

/// The value of a run holding `seqs` (ascending, strictly; the first is in the key).
pub fn encode(seqs: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(seqs.len() * 2);
    for w in seqs.windows(2) {
        put_varint(&mut out, w[1] - w[0]);
    }
    out
}

/// Records that event `seq` of `prefix` (a type or a resource) exists, in `runs`. Events come in
/// sequence order, so this is an append to the prefix's last run (or a new run when that one
/// is [`RUN_MAX`] bytes); a sequence below the last, which no writer of this build makes,
/// is inserted in its place all the same, and one already there is left as it is.
pub fn add(
    runs: &mut Table<'_, &'static [u8], &'static [u8]>,
    prefix: &[u8],
    seq: u64,
) -> Result<(), StoreError> {
    let at = key(prefix, seq);
    let found = runs
        .range::<&[u8]>(key(prefix, 0).as_slice()..=at.as_slice())?
        .next_back()
        .transpose()?
        .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()));
    let Some((run_key, value)) = found else {
        runs.insert(at.as_slice(), [].as_slice())?;
        return Ok(());
    };
    let first = split_key(&run_key).map_or(seq, |(_, first)| first);
    let Some(mut seqs) = decode(first, &value) else {
        // An undecodable run (readers skip it): the event starts a run of its own, which
        // replaces that one if it starts at the same sequence.
        runs.insert(at.as_slice(), [].as_slice())?;
        return Ok(());
    };
    let last = *seqs.last().expect("a run holds its first sequence");
    if seq > last {
        let mut value = value;
        if push(&mut value, last, seq) {
            runs.insert(run_key.as_slice(), value.as_slice())?;
        } else {
            runs.insert(at.as_slice(), [].as_slice())?;
        }
        return Ok(());
    }
    let Err(pos) = seqs.binary_search(&seq) else {
        return Ok(());
    };
    seqs.insert(pos, seq);
    // Out of order: the run is rewritten, in two when it outgrows RUN_MAX.
    let value = encode(&seqs);
    if value.len() <= RUN_MAX {
        runs.insert(run_key.as_slice(), value.as_slice())?;
    } else {
        let (lo, hi) = seqs.split_at(seqs.len() / 2);
        runs.insert(run_key.as_slice(), encode(lo).as_slice())?;
        runs.insert(key(prefix, hi[0]).as_slice(), encode(hi).as_slice())?;
    }
    Ok(())
}

/// The last run of a prefix (a type or a resource) as the batch's transaction holds it,
/// which may be ahead of its row: sequences appended since ([`add_to_tail`]) are written
/// once ([`crate::held`]) instead of rewriting the run's row on every event.
///
/// Why: every event appends to its type's run and its resource's run; a batch's
/// events of one type (a batch of test deposits: 20-30 `deposit.detected` and as many
/// `deposit.confirmed`) each sought, decoded and rewrote that type's last run, about 9 k
/// instructions of the store writer per append (callgrind, 4 per test deposit).
#[derive(Debug)]
pub(crate) struct Tail {
    first: u64,
    last: u64,
    /// The run's value ([`encode`] of its sequences). A held run always holds sequences
    /// its row does not (it is made by an append).
    value: Vec<u8>,
}

/// The batch's [`Tail`]s of one table, by prefix.
pub(crate) type Tails = crate::held::Held<Tail>;

/// [`add`] through the batch's `tails` of `runs`' table: a sequence above the last of its
/// prefix's last run is appended there in memory (a full run gives way to a new tail
/// starting at it, as [`add`] does); any other goes through [`add`], its prefix's tail
/// written first and forgotten. Every tail must be written ([`crate::held::forget_all`]) before
/// anything else reads or writes the table, and before the transaction commits.
pub(crate) fn add_to_tail(
    runs: &mut Table<'_, &'static [u8], &'static [u8]>,
    tails: &mut Tails,
    prefix: &[u8],
    seq: u64,
) -> Result<(), StoreError> {
    if let Some(t) = tails.get_mut(prefix) {
        if seq > t.last {
            if push(&mut t.value, t.last, seq) {
                t.last = seq;
            } else {
                crate::held::write(runs, prefix, t)?;
                *t = Tail::new(seq);
            }
            return Ok(());
        }
        crate::held::forget(runs, tails, prefix)?;
        return add(runs, prefix, seq);
    }
    let last_run = runs
        .range::<&[u8]>(key(prefix, 0).as_slice()..=key(prefix, u64::MAX).as_slice())?
        .next_back()
        .transpose()?
        .and_then(|(k, v)| Some((split_key(k.value())?.1, v.value().to_vec())));
    let tail = match last_run {
        None => Tail::new(seq),
        Some((first, mut value)) if first <= seq => {
            let Some(last) = decode(first, &value).and_then(|s| s.last().copied()) else {
                // An undecodable run: as before.
                return add(runs, prefix, seq);
            };
            if seq <= last {
                return add(runs, prefix, seq);
            }
            if push(&mut value, last, seq) {
                Tail {
                    first,
                    last: seq,
                    value,
                }
            } else {
                Tail::new(seq)
            }
        }
        Some(_) => return add(runs, prefix, seq),
    };
    tails.insert(prefix.into(), tail);
    Ok(())
}

impl Tail {
    /// A new run of `seq` alone, not yet written.
    fn new(seq: u64) -> Tail {
        Tail {
            first: seq,
            last: seq,
            value: Vec::new(),
        }
    }
}

impl crate::held::HeldRun for Tail {
    fn row(&self, prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
        (key(prefix, self.first), self.value.clone())
    }
}

/// The sequences of `prefix`'s runs in `[lo, hi)`, ascending or descending, read run by run
/// as the caller takes them. A run that does not decode is logged and skipped.
pub fn seqs<'a, T: ReadableTable<&'static [u8], &'static [u8]>>(
    runs: &'a T,
    prefix: &[u8],
    lo: u64,
    hi: u64,
    ascending: bool,
) -> Result<Seqs<'a>, StoreError> {
    // The run holding `lo` starts at or before it.
    let start = if ascending {
        runs.range::<&[u8]>(key(prefix, 0).as_slice()..=key(prefix, lo).as_slice())?
            .next_back()
            .transpose()?
            .map_or(lo, |(k, _)| split_key(k.value()).map_or(lo, |(_, f)| f))
    } else {
        0
    };
    let range = runs.range::<&[u8]>(key(prefix, start).as_slice()..key(prefix, hi).as_slice())?;
    Ok(Seqs {
        range,
        buffered: Vec::new(),
        lo,
        hi,
        ascending,
        done: false,
    })
}

/// Iterator of [`seqs`].
pub struct Seqs<'a> {
    range: redb::Range<'a, &'static [u8], &'static [u8]>,
    /// The current run's sequences still to give, in reverse of the order given.
    buffered: Vec<u64>,
    lo: u64,
    hi: u64,
    ascending: bool,
    done: bool,
}

/// What the log says of a run [`Seqs`] passes over.
const UNDECODABLE: &str =
    "undecodable run of an event index; its events are left out of the lists it serves";

impl Iterator for Seqs<'_> {
    type Item = Result<u64, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(seq) = self.buffered.pop() {
                return Some(Ok(seq));
            }
            if self.done {
                return None;
            }
            let entry = if self.ascending {
                self.range.next()
            } else {
                self.range.next_back()
            };
            let (first, mut seqs) = match crate::index::read_run(entry?, decode, UNDECODABLE) {
                Some(Ok(run)) => run,
                Some(Err(e)) => return Some(Err(e)),
                None => continue,
            };
            if !self.ascending && first < self.lo {
                self.done = true;
            }
            let (lo, hi) = (self.lo, self.hi);
            seqs.retain(|s| (lo..hi).contains(s));
            if self.ascending {
                seqs.reverse();
            }
            self.buffered = seqs;
        }
    }
}

#[cfg(test)]
mod tests;
