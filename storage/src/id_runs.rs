//! Lists as runs of ids (schema 14).
//!
//! A list of rows under an index prefix was one key per row: `prefix ‖ id`, 33 to 70
//! bytes. The lists of [`crate::schema::RUN_INDEXES`] keep their ids in runs instead:
//!
//! ```text
//! key   = prefix ‖ first id (16, big-endian)
//! value = the run's later ids, ascending, 16 bytes each (at most RUN_IDS - 1), then, in a
//!         padded table, zero bytes up to RUN_IDS - 1 slots
//! ```
//!
//! so an id costs its 16 bytes and a share of its run's key.
//!
//! - Schema 14: a customer's deposits, its wallets' sweeps
//!   ([`crate::index::IndexTag::ByCustomer`]) and its payouts
//!   ([`crate::index::IndexTag::PayoutsByCustomer`]) in [`crate::schema::ID_RUNS`]. Each
//!   was a key of `index`, landing in the middle of the table (at the end of the
//!   customer's range), where redb splits a full leaf evenly and the left half keeps its
//!   free space.
//! - Schema 15: a project's lists of customers, wallets, deposits, payouts and sweeps (and
//!   by chain, and deposits by status), a table each, their runs padded to full size
//!   ([`crate::schema::RunIndex::padded`]): an append fills a free slot of the last run
//!   (same size, no split), and a new run is a new last key, for which redb starts a new
//!   leaf and leaves the full one packed.
//!
//! The prefix is the one the index key had ([`crate::index::prefix`] and the like): the
//! writer still computes `prefix ‖ id` as the row's index key
//! ([`crate::records::Row::index_keys`]) and this module stores it ([`run_of_key`]). A
//! prefix is never a prefix of another of the same tag (its values are length-prefixed), so
//! a range of `prefix ‖ 0` to `prefix ‖ u128::MAX` holds that prefix's runs only.
//!
//! Runs of one prefix never overlap: every id of a run is below the first of the next.
//! Readers are total: a run that does not decode is logged and skipped (`appliance verify`
//! reports the ids it loses), and a writer that lands in it starts a run of its own.

use redb::{ReadableTable, Table, TableHandle};

use crate::schema::{run_index, RunIndex};
use crate::StoreError;

/// Ids a run holds at most (its key's and the later ones): a value of 224 bytes, so an
/// append rewrites a small row.
pub const RUN_IDS: usize = 15;

/// The [`RunIndex`] that keeps index key `key` of a row rather than an index table
/// ([`run_of`]); `None` for a key of an index table (or one too short to hold an id).
pub fn run_of_key(key: &[u8]) -> Option<&'static RunIndex> {
    run_of(key).filter(|_| key.len() > 16)
}

/// Whether `prefix` (of a list) names runs ([`run_of`]).
pub fn is_run_prefix(prefix: &[u8]) -> bool {
    run_of(prefix).is_some()
}

/// The [`RunIndex`] of an index key or prefix (by its tag byte); `None` for one kept as
/// keys of an index table.
pub fn run_of(key_or_prefix: &[u8]) -> Option<&'static RunIndex> {
    key_or_prefix.first().and_then(|t| run_index(*t))
}

/// Key of the run of `prefix` that starts at `first`.
pub fn key(prefix: &[u8], first: u128) -> Vec<u8> {
    crate::index::run_key(prefix, first)
}

/// (prefix, id) of an index key or run key: its last 16 bytes are the id; `None` for a key
/// too short to hold a prefix and one.
pub fn split_key(k: &[u8]) -> Option<(&[u8], u128)> {
    crate::index::split_run_key(k)
}

/// The ids of the run that starts at `first` with `value`, ascending; `None` when the
/// value is not a whole number of ids strictly above `first` and each other, followed by
/// zero (free) slots only.
pub fn decode(first: u128, value: &[u8]) -> Option<Vec<u128>> {
    // A whole number of ids, and a bounded one (this build writes at most RUN_IDS).
    if !value.len().is_multiple_of(16) || value.len() > 16 * 255 {
        return None;
    }
    let mut ids = Vec::with_capacity(value.len() / 16 + 1);
    ids.push(first);
    let mut chunks = value.chunks_exact(16);
    for c in chunks.by_ref() {
        let id = u128::from_be_bytes(c.try_into().ok()?);
        if id == 0 {
            break;
        }
        if id <= *ids.last()? {
            return None;
        }
        ids.push(id);
    }
    chunks.all(|c| c.iter().all(|b| *b == 0)).then_some(ids)
}

/// The value of a run holding `ids` (ascending; the first is in the key), `padded` with
/// zero slots up to [`RUN_IDS`] ids ([`RunIndex::padded`]).
pub(crate) fn encode(ids: &[u128], padded: bool) -> Vec<u8> {
    let mut v: Vec<u8> = ids.iter().skip(1).flat_map(|i| i.to_be_bytes()).collect();
    if padded {
        v.resize(v.len().max(16 * (RUN_IDS - 1)), 0);
    }
    v
}

/// The run of `prefix` that holds `id` or would: the last one starting at or below it.
fn run_at(
    runs: &impl ReadableTable<&'static [u8], &'static [u8]>,
    prefix: &[u8],
    id: u128,
) -> Result<Option<(u128, Vec<u8>)>, StoreError> {
    Ok(runs
        .range::<&[u8]>(key(prefix, 0).as_slice()..=key(prefix, id).as_slice())?
        .next_back()
        .transpose()?
        .and_then(|(k, v)| Some((split_key(k.value())?.1, v.value().to_vec()))))
}

/// Index key `prefix ‖ id` as found in `runs`: its prefix and id, and the run that holds
/// it or would ([`run_at`]) as (first id, its ids; `None` when the run does not decode).
struct Located<'k> {
    prefix: &'k [u8],
    id: u128,
    run: Option<(u128, Option<Vec<u128>>)>,
}

/// [`Located`] of `index_key`; `None` for a key too short to hold an id.
fn locate<'k>(
    runs: &impl ReadableTable<&'static [u8], &'static [u8]>,
    index_key: &'k [u8],
) -> Result<Option<Located<'k>>, StoreError> {
    let Some((prefix, id)) = split_key(index_key) else {
        return Ok(None);
    };
    let run = run_at(runs, prefix, id)?.map(|(first, value)| (first, decode(first, &value)));
    Ok(Some(Located { prefix, id, run }))
}

/// Stores index key `prefix ‖ id` ([`run_of_key`]) in `runs`; whether it was not there.
/// Ids come mostly in ascending order (UUID v7 minted by the writer), so this is an append
/// to the prefix's last run, or a new run when that one is full; an id below the last is
/// inserted in its place, the run split in two when it outgrows [`RUN_IDS`].
pub fn add(
    runs: &mut Table<'_, &'static [u8], &'static [u8]>,
    index_key: &[u8],
) -> Result<bool, StoreError> {
    let Some(Located { prefix, id, run }) = locate(runs, index_key)? else {
        return Ok(false);
    };
    let padded = run_of(index_key).is_some_and(|r| r.padded);
    // No run at or below the id, or an undecodable one (readers skip it): the id starts a
    // run of its own (which replaces an undecodable one starting at the same id).
    let Some((first, Some(mut ids))) = run else {
        runs.insert(key(prefix, id).as_slice(), encode(&[id], padded).as_slice())?;
        return Ok(true);
    };
    let Err(pos) = ids.binary_search(&id) else {
        return Ok(false);
    };
    if pos == ids.len() && ids.len() == RUN_IDS {
        runs.insert(key(prefix, id).as_slice(), encode(&[id], padded).as_slice())?;
        return Ok(true);
    }
    ids.insert(pos, id);
    if ids.len() <= RUN_IDS {
        runs.insert(
            key(prefix, first).as_slice(),
            encode(&ids, padded).as_slice(),
        )?;
    } else {
        let (lo, hi) = ids.split_at(ids.len() / 2);
        runs.insert(key(prefix, first).as_slice(), encode(lo, padded).as_slice())?;
        runs.insert(key(prefix, hi[0]).as_slice(), encode(hi, padded).as_slice())?;
    }
    Ok(true)
}

/// The last run of a prefix as the batch's transaction holds it, which may be ahead of its
/// row in the table: ids appended to it since ([`add_to_tail`]) are written once, by
/// [`write_tails`] ([`crate::held`]), instead of rewriting the run's row on every append.
///
/// Why: a project's lists take an id on each new row (a test deposit adds five:
/// the project's deposits, by chain and by status, its sweeps and sweeps by status), and
/// each append sought the prefix's last run, decoded it and rewrote its row, about 10 k
/// instructions of the store writer per id (callgrind, 7 per test deposit). In a batch the
/// same tails take every append.
#[derive(Debug)]
pub(crate) struct Tail {
    /// Its first id (in its key).
    first: u128,
    /// Its ids, ascending (`first` included); never empty. A held run always holds ids its
    /// row does not (it is made by an append).
    ids: Vec<u128>,
}

impl Tail {
    /// A new run of `id` alone, not yet written.
    fn new(id: u128) -> Tail {
        Tail {
            first: id,
            ids: vec![id],
        }
    }
}

/// The batch's [`Tail`]s, by prefix (whose tag byte names the table: [`run_of`]).
pub(crate) type Tails = crate::held::Held<Tail>;

/// [`add`] through the batch's `tails`: an id above the last of its prefix's last run is
/// appended there in memory (a full run gives way to a new tail starting at the id, as
/// [`add`] does); any other id goes through [`add`], its prefix's tail written first and
/// forgotten. Whether the id was not there. Every tail of `runs`' table must be written
/// ([`write_tails`]) before anything else reads or writes that table, and before the
/// transaction commits.
pub(crate) fn add_to_tail(
    runs: &mut Table<'_, &'static [u8], &'static [u8]>,
    tails: &mut Tails,
    index_key: &[u8],
) -> Result<bool, StoreError> {
    let Some((prefix, id)) = split_key(index_key) else {
        return Ok(false);
    };
    if let Some(t) = tails.get_mut(prefix) {
        let last = *t.ids.last().expect("a tail holds an id");
        if id > last {
            if t.ids.len() < RUN_IDS {
                t.ids.push(id);
            } else {
                crate::held::write(runs, prefix, t)?;
                *t = Tail::new(id);
            }
            return Ok(true);
        }
        if t.ids.binary_search(&id).is_ok() {
            return Ok(false);
        }
        crate::held::forget(runs, tails, prefix)?;
        return add(runs, index_key);
    }
    // The prefix's last run, if the id belongs after its last id.
    let last_run = runs
        .range::<&[u8]>(key(prefix, 0).as_slice()..=key(prefix, u128::MAX).as_slice())?
        .next_back()
        .transpose()?
        .and_then(|(k, v)| Some((split_key(k.value())?.1, v.value().to_vec())));
    let tail = match last_run {
        None => Tail::new(id),
        Some((first, value)) if first <= id => match decode(first, &value) {
            Some(mut ids) if id > *ids.last().expect("a decoded run holds its first id") => {
                if ids.len() < RUN_IDS {
                    ids.push(id);
                    Tail { first, ids }
                } else {
                    Tail::new(id)
                }
            }
            // At or below the last id (there already, or out of order), or an undecodable
            // run: as before.
            _ => return add(runs, index_key),
        },
        Some(_) => return add(runs, index_key),
    };
    tails.insert(prefix.into(), tail);
    Ok(true)
}

impl crate::held::HeldRun for Tail {
    fn row(&self, prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let padded = run_of(prefix).is_some_and(|r| r.padded);
        (key(prefix, self.first), encode(&self.ids, padded))
    }
}

/// Writes and forgets the tails of `table` (those whose prefix's tag names it), through
/// `runs`, its open handle.
pub(crate) fn write_tails(
    runs: &mut Table<'_, &'static [u8], &'static [u8]>,
    tails: &mut Tails,
    table: &str,
) -> Result<(), StoreError> {
    crate::held::forget_all(runs, tails, |p| {
        run_of(p).is_some_and(|r| r.table.name() == table)
    })
}

/// Removes index key `prefix ‖ id` from `runs`; whether it was there. The run is rewritten
/// without it, or removed when it was its only id, or moved to its next id when it was
/// its first.
pub fn remove(
    runs: &mut Table<'_, &'static [u8], &'static [u8]>,
    index_key: &[u8],
) -> Result<bool, StoreError> {
    let Some(Located {
        prefix,
        id,
        run: Some((first, Some(mut ids))),
    }) = locate(runs, index_key)?
    else {
        return Ok(false);
    };
    let Ok(pos) = ids.binary_search(&id) else {
        return Ok(false);
    };
    let padded = run_of(index_key).is_some_and(|r| r.padded);
    ids.remove(pos);
    if pos == 0 {
        runs.remove(key(prefix, first).as_slice())?;
        if let Some(&next) = ids.first() {
            runs.insert(
                key(prefix, next).as_slice(),
                encode(&ids, padded).as_slice(),
            )?;
        }
    } else {
        runs.insert(
            key(prefix, first).as_slice(),
            encode(&ids, padded).as_slice(),
        )?;
    }
    Ok(true)
}

/// Whether `runs` holds index key `prefix ‖ id`.
pub fn contains(
    runs: &impl ReadableTable<&'static [u8], &'static [u8]>,
    index_key: &[u8],
) -> Result<bool, StoreError> {
    Ok(matches!(
        locate(runs, index_key)?,
        Some(Located { id, run: Some((_, Some(ids))), .. }) if ids.binary_search(&id).is_ok()
    ))
}

/// The ids of `prefix`'s runs below `before` (all for `None`), newest (highest) first,
/// read run by run as the caller takes them. A run that does not decode is logged and
/// skipped.
pub fn ids_desc<'a>(
    runs: &'a impl ReadableTable<&'static [u8], &'static [u8]>,
    prefix: &[u8],
    before: Option<u128>,
) -> Result<IdsDesc<'a>, StoreError> {
    let lo = key(prefix, 0);
    let range = match before {
        // The run holding ids just below `before` starts below it.
        Some(b) => runs.range::<&[u8]>(lo.as_slice()..key(prefix, b).as_slice())?,
        None => runs.range::<&[u8]>(lo.as_slice()..=key(prefix, u128::MAX).as_slice())?,
    };
    Ok(IdsDesc {
        range,
        buffered: Vec::new(),
        before,
    })
}

/// Iterator of [`ids_desc`].
pub struct IdsDesc<'a> {
    range: redb::Range<'a, &'static [u8], &'static [u8]>,
    /// The current run's ids still to give, ascending (given from the end).
    buffered: Vec<u128>,
    before: Option<u128>,
}

/// What the log says of a run [`IdsDesc`] passes over.
const UNDECODABLE: &str =
    "undecodable run of a customer's index; its ids are left out of the lists it serves";

impl Iterator for IdsDesc<'_> {
    type Item = Result<u128, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(id) = self.buffered.pop() {
                return Some(Ok(id));
            }
            let row = self.range.next_back()?;
            let (_, mut ids) = match crate::index::read_run(row, decode, UNDECODABLE) {
                Some(Ok(run)) => run,
                Some(Err(e)) => return Some(Err(e)),
                None => continue,
            };
            if let Some(b) = self.before {
                ids.retain(|i| *i < b);
            }
            self.buffered = ids;
        }
    }
}

#[cfg(test)]
mod tests;
