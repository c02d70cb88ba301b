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
    let mut k = Vec::with_capacity(prefix.len() + 16);
    k.extend_from_slice(prefix);
    k.extend_from_slice(&first.to_be_bytes());
    k
}

/// (prefix, id) of an index key or run key: its last 16 bytes are the id; `None` for a key
/// too short to hold a prefix and one.
pub fn split_key(k: &[u8]) -> Option<(&[u8], u128)> {
    let at = k.len().checked_sub(16).filter(|at| *at > 0)?;
    let id: [u8; 16] = k[at..].try_into().ok()?;
    Some((&k[..at], u128::from_be_bytes(id)))
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

impl Iterator for IdsDesc<'_> {
    type Item = Result<u128, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(id) = self.buffered.pop() {
                return Some(Ok(id));
            }
            let (k, v) = match self.range.next_back()? {
                Ok(e) => e,
                Err(e) => return Some(Err(e.into())),
            };
            let Some((_, first)) = split_key(k.value()) else {
                continue;
            };
            let Some(mut ids) = decode(first, v.value()) else {
                tracing::error!(
                    key = %hex::encode(k.value()),
                    "undecodable run of a customer's index; its ids are left out of the lists it serves"
                );
                continue;
            };
            if let Some(b) = self.before {
                ids.retain(|i| *i < b);
            }
            self.buffered = ids;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::IndexTag;
    use crate::schema::ID_RUNS;
    use crate::{Reader, Store, StoreOptions};
    use uuid::Uuid;

    fn listed(store: &Store, prefix: &[u8], before: Option<u128>) -> Vec<u128> {
        let prefix = prefix.to_vec();
        store
            .read_blocking(move |r| {
                let t = r.open(ID_RUNS)?;
                ids_desc(&t, &prefix, before)?.collect::<Result<Vec<_>, _>>()
            })
            .unwrap()
    }

    fn rows(store: &Store) -> Vec<(Vec<u8>, Vec<u8>)> {
        store
            .read_blocking(|r| {
                let t = r.open(ID_RUNS)?;
                t.iter()?
                    .map(|e| {
                        let (k, v) = e?;
                        Ok((k.value().to_vec(), v.value().to_vec()))
                    })
                    .collect::<Result<Vec<_>, StoreError>>()
            })
            .unwrap()
    }

    /// Appends fill runs of RUN_IDS; an id out of order lands in its place (splitting a
    /// full run), a repeated one is not doubled, a removed one leaves (a run's first moves
    /// its key); lists give every id newest first from any cursor, per prefix; a run that
    /// does not decode leaves out its own ids only, `verify` names it, and the next id is
    /// listed.
    #[test]
    fn runs_hold_each_id_once_and_list_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let p = Uuid::now_v7();
        let (c1, c2) = (Uuid::now_v7(), Uuid::now_v7());
        let (a, b) = (
            crate::index::deposits_of_customer(p, c1),
            crate::index::deposits_of_customer(p, c2),
        );
        assert!(is_run_prefix(&a) && is_run_prefix(&[IndexTag::Deposits as u8]));
        assert!(!is_run_prefix(&[IndexTag::PayoutsOpen as u8]));
        let ids: Vec<u128> = (0..100u128).map(|i| 1_000 + i * 10).collect();
        let (ia, ib) = (ids.clone(), ids.clone());
        let (pa, pb) = (a.clone(), b.clone());
        store
            .write_blocking(move |ctx| {
                ctx.with_runs(ID_RUNS, |t, _| {
                    for (x, y) in ia.iter().zip(&ib) {
                        assert!(add(t, &key(&pa, *x))?);
                        assert!(add(t, &key(&pb, *y + 1))?);
                    }
                    Ok(())
                })
            })
            .unwrap();
        // 100 ids: 7 runs of 15 ids at most, per prefix.
        assert_eq!(rows(&store).len(), 2 * 7);
        assert!(rows(&store)
            .iter()
            .all(|(_, v)| v.len() <= 16 * (RUN_IDS - 1)));
        let mut want: Vec<u128> = ids.iter().rev().copied().collect();
        assert_eq!(listed(&store, &a, None), want);
        for cut in [0usize, 1, 14, 15, 16, 57, 99] {
            let before = want[cut];
            assert_eq!(listed(&store, &a, Some(before)), want[cut + 1..]);
        }
        assert_eq!(
            listed(&store, &b, None),
            want.iter().map(|i| i + 1).collect::<Vec<_>>()
        );

        // Out of order into a full run, repeated, removed (a run's first, a middle one).
        let pa = a.clone();
        store
            .write_blocking(move |ctx| {
                ctx.with_runs(ID_RUNS, |t, _| {
                    assert!(add(t, &key(&pa, 1_005))?);
                    assert!(!add(t, &key(&pa, 1_005))?);
                    assert!(!add(t, &key(&pa, 1_010))?);
                    assert!(remove(t, &key(&pa, 1_000))?);
                    assert!(remove(t, &key(&pa, 1_500))?);
                    assert!(!remove(t, &key(&pa, 1_500))?);
                    assert!(contains(t, &key(&pa, 1_005))?);
                    assert!(!contains(t, &key(&pa, 1_000))?);
                    Ok(())
                })
            })
            .unwrap();
        want.retain(|i| *i != 1_000 && *i != 1_500);
        want.push(1_005);
        want.sort_by(|x, y| y.cmp(x));
        assert_eq!(listed(&store, &a, None), want);
        assert!(rows(&store)
            .iter()
            .all(|(_, v)| v.len() <= 16 * (RUN_IDS - 1)));

        // A damaged run: only its ids leave; verify names it; the next id is listed.
        let (bad_key, lost) = rows(&store)
            .into_iter()
            .filter(|(k, _)| k.starts_with(&b))
            .map(|(k, v)| (k.clone(), decode(split_key(&k).unwrap().1, &v).unwrap()))
            .nth(2)
            .unwrap();
        store
            .write_blocking(move |ctx| {
                ctx.with_runs(ID_RUNS, |t, _| {
                    t.insert(bad_key.as_slice(), [1u8; 7].as_slice())?;
                    Ok(())
                })
            })
            .unwrap();
        let left = listed(&store, &b, None);
        assert_eq!(left.len(), 100 - lost.len());
        assert!(lost.iter().all(|i| !left.contains(i)));
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
        assert!(rep.violations[0].contains("does not decode"));
        let pb = b.clone();
        store
            .write_blocking(move |ctx| ctx.with_runs(ID_RUNS, |t, _| add(t, &key(&pb, 5_000))))
            .unwrap();
        assert_eq!(listed(&store, &b, None)[0], 5_000);
    }

    /// A project's list (schema 15) is written in full-size runs: every value is RUN_IDS - 1
    /// slots whether the run holds 1 id or 15, through appends, an out-of-order id that
    /// splits a full run, and removals; the list reads every id newest first.
    #[test]
    fn a_projects_runs_are_written_full_size() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let p = Uuid::now_v7();
        let prefix = crate::index::prefix(IndexTag::Deposits, p, &[]);
        let runs = run_of(&prefix).unwrap();
        assert!(
            runs.padded
                && run_of(&crate::index::deposits_of_customer(p, p)).is_some_and(|r| !r.padded)
        );
        let table = runs.table;
        let mut want: Vec<u128> = (0..40u128).map(|i| 1_000 + i * 10).collect();
        let pr = prefix.clone();
        let ids = want.clone();
        store
            .write_blocking(move |ctx| {
                ctx.with_runs(table, |t, _| {
                    for id in &ids {
                        assert!(add(t, &key(&pr, *id))?);
                    }
                    // Into a full run, out of order; removals of a first and a middle id.
                    assert!(add(t, &key(&pr, 1_005))?);
                    assert!(remove(t, &key(&pr, 1_000))?);
                    assert!(remove(t, &key(&pr, 1_200))?);
                    Ok(())
                })
            })
            .unwrap();
        want.retain(|i| *i != 1_000 && *i != 1_200);
        want.push(1_005);
        want.sort_by(|x, y| y.cmp(x));
        let pr = prefix.clone();
        let rows = store
            .read_blocking(move |r| {
                let t = r.open(table)?;
                let listed = ids_desc(&t, &pr, None)?.collect::<Result<Vec<_>, _>>()?;
                let lens = t
                    .iter()?
                    .map(|e| e.map(|(_, v)| v.value().len()))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok::<_, StoreError>((listed, lens))
            })
            .unwrap();
        assert_eq!(rows.0, want);
        // 40 ids in 3 runs, the first split in two by the out-of-order id.
        assert_eq!(rows.1.len(), 4);
        assert!(
            rows.1.iter().all(|l| *l == 16 * (RUN_IDS - 1)),
            "{:?}",
            rows.1
        );
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    }

    #[test]
    fn runs_refuse_values_that_are_not_ascending_ids() {
        let v: Vec<u8> = [5u128, 9].iter().flat_map(|i| i.to_be_bytes()).collect();
        assert_eq!(decode(1, &v).unwrap(), [1, 5, 9]);
        assert_eq!(decode(1, &[]).unwrap(), [1]);
        assert_eq!(decode(5, &v), None, "not above the first");
        assert_eq!(decode(1, &v[..20]), None, "not whole ids");
        let down: Vec<u8> = [9u128, 5].iter().flat_map(|i| i.to_be_bytes()).collect();
        assert_eq!(decode(1, &down), None);
        // Padded: free (zero) slots after the ids, and only after them.
        assert_eq!(encode(&[1, 5, 9], true).len(), 16 * (RUN_IDS - 1));
        assert_eq!(decode(1, &encode(&[1, 5, 9], true)).unwrap(), [1, 5, 9]);
        assert_eq!(decode(1, &encode(&[1], true)).unwrap(), [1]);
        assert_eq!(encode(&[1, 5, 9], false), v);
        let mut gap = encode(&[1, 5], true);
        gap[16 * 2 + 15] = 9;
        assert_eq!(decode(1, &gap), None, "an id after a free slot");
        let p = crate::index::deposits_of_customer(Uuid::now_v7(), Uuid::now_v7());
        assert_eq!(split_key(&key(&p, 42)), Some((&p[..], 42)));
        assert_eq!(split_key(&[7; 16]), None);
        assert!(run_of_key(&key(&p, 42)).is_some() && run_of_key(&p[..1]).is_none());
    }

    /// One step of [`the_batchs_tails_write_what_the_plain_runs_do`].
    #[derive(Debug, Clone)]
    enum Op {
        /// Adds id `base + n` under prefix `p` (mostly ascending: `base` grows).
        Add(usize, u128),
        /// Adds an id below those so far (out of order).
        AddBelow(usize, u128),
        Remove(usize, u128),
        /// Another reader or writer of the table: the tails are written first.
        Close,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            12 => (0..3usize, 1..4u128).prop_map(|(p, n)| Op::Add(p, n)),
            1 => (0..3usize, 0..400u128).prop_map(|(p, n)| Op::AddBelow(p, n)),
            2 => (0..3usize, 0..400u128).prop_map(|(p, n)| Op::Remove(p, n)),
            1 => Just(Op::Close),
        ]
    }

    proptest::proptest! {
        /// The same operations through the batch's tails ([`add_to_tail`], written at
        /// random points and at the end) and straight on the table ([`add`], [`remove`])
        /// answer the same and leave the same rows, for padded and unpadded runs (three
        /// prefixes, two tables, one of them shared by two prefixes).
        #[test]
        fn the_batchs_tails_write_what_the_plain_runs_do(ops in proptest::collection::vec(op(), 1..300)) {
            let project = Uuid::from_u128(7);
            let prefixes = [
                crate::index::prefix(IndexTag::Deposits, project, &[]),
                crate::index::deposits_of_customer(project, Uuid::from_u128(8)),
                crate::index::deposits_of_customer(project, Uuid::from_u128(9)),
            ];
            let db = crate::test_support::memory_db();
            let txn = db.begin_write().unwrap();
            let plain_defs = [
                redb::TableDefinition::<&[u8], &[u8]>::new("plain_padded"),
                redb::TableDefinition::<&[u8], &[u8]>::new("plain"),
            ];
            let table_of = |p: usize| run_of(&prefixes[p]).unwrap().table;
            let plain_of = |p: usize| plain_defs[usize::from(p > 0)];
            let mut tails = Tails::new();
            let mut next = 1_000u128;
            for op in ops {
                match op {
                    Op::Close => {
                        for def in [table_of(0), table_of(1)] {
                            let mut t = txn.open_table(def).unwrap();
                            write_tails(&mut t, &mut tails, def.name()).unwrap();
                        }
                        proptest::prop_assert!(tails.is_empty());
                    }
                    Op::Add(p, n) | Op::AddBelow(p, n) => {
                        let id = if matches!(op, Op::Add(..)) {
                            next += n;
                            next
                        } else {
                            1_000 + n
                        };
                        let k = key(&prefixes[p], id);
                        let a = add_to_tail(&mut txn.open_table(table_of(p)).unwrap(), &mut tails, &k).unwrap();
                        let b = add(&mut txn.open_table(plain_of(p)).unwrap(), &k).unwrap();
                        proptest::prop_assert_eq!(a, b, "add {}", id);
                    }
                    Op::Remove(p, n) => {
                        let k = key(&prefixes[p], 1_000 + n);
                        let mut t = txn.open_table(table_of(p)).unwrap();
                        crate::held::forget(&mut t, &mut tails, &prefixes[p]).unwrap();
                        let a = remove(&mut t, &k).unwrap();
                        let b = remove(&mut txn.open_table(plain_of(p)).unwrap(), &k).unwrap();
                        proptest::prop_assert_eq!(a, b, "remove {}", 1_000 + n);
                    }
                }
            }
            for def in [table_of(0), table_of(1)] {
                write_tails(&mut txn.open_table(def).unwrap(), &mut tails, def.name()).unwrap();
            }
            proptest::prop_assert!(tails.is_empty());
            // Prefix 0's table is the padded runs_deposits; 1 and 2 share ID_RUNS.
            proptest::prop_assert_eq!(
                crate::test_support::table_rows(&txn.open_table(table_of(0)).unwrap()),
                crate::test_support::table_rows(&txn.open_table(plain_defs[0]).unwrap())
            );
            proptest::prop_assert_eq!(
                crate::test_support::table_rows(&txn.open_table(table_of(1)).unwrap()),
                crate::test_support::table_rows(&txn.open_table(plain_defs[1]).unwrap())
            );
        }
    }
}
