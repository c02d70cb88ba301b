//! Rewriting the keys of a table in place, in bounded chunks, for the steps that change a
//! key's layout.

use crate::{codec, index, StoreError};

/// Rewrites every key of `tag` in `table` (`unique`, `index`) as `convert` gives it
/// ([`rekey_range`] over the tag's keys).
pub(super) fn rekey<V>(
    txn: &redb::WriteTransaction,
    table: redb::TableDefinition<&'static [u8], V>,
    tag: index::IndexTag,
    convert: fn(&[u8]) -> Option<Vec<u8>>,
) -> Result<codec::Migrated, StoreError>
where
    V: for<'a> redb::Value<SelfType<'a> = V> + 'static,
{
    let tag = tag as u8;
    rekey_range(txn, table, &[tag], Some(&[tag + 1]), convert)
}

/// Keys a migration rewrites between two progress lines in the log: a store of 10M
/// deposits has about 22M event-type keys, which took 6.8 minutes on a slow machine of this
/// kind (docs/performance.md).
pub(super) const REKEY_PROGRESS_EVERY: u64 = 1_000_000;

/// Rewrites every key of `table` from `start` (up to `end`, or the table's end) as
/// `convert` gives it, with the same value, in chunks of 4096 keys so memory stays bounded,
/// logging its progress every [`REKEY_PROGRESS_EVERY`] keys. `convert` returns the new key
/// (the same key: left as it is, not counted) or `None` for a key without the old shape
/// (left in place and counted in `left`).
pub(super) fn rekey_range<V>(
    txn: &redb::WriteTransaction,
    table: redb::TableDefinition<&'static [u8], V>,
    start: &[u8],
    end: Option<&[u8]>,
    convert: fn(&[u8]) -> Option<Vec<u8>>,
) -> Result<codec::Migrated, StoreError>
where
    V: for<'a> redb::Value<SelfType<'a> = V> + 'static,
{
    use redb::ReadableTable;
    use std::ops::Bound;
    const CHUNK: usize = 4096;
    let mut t = txn.open_table(table)?;
    let mut total = codec::Migrated::default();
    let mut from = start.to_vec();
    let mut next_report = REKEY_PROGRESS_EVERY;
    loop {
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let chunk: Vec<(Vec<u8>, V)> = t
            .range::<&[u8]>((Bound::Included(from.as_slice()), upper))?
            .take(CHUNK)
            .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value())))
            .collect::<Result<_, _>>()?;
        let Some((last, _)) = chunk.last() else {
            break;
        };
        // Resume after the last key seen (a key left in place is not read again).
        from = [last.as_slice(), &[0]].concat();
        for (k, v) in chunk {
            match convert(&k) {
                Some(new) if new == k => {}
                Some(new) => {
                    t.insert(new.as_slice(), v)?;
                    t.remove(k.as_slice())?;
                    total.rows += 1;
                }
                None => total.left += 1,
            }
        }
        let done = total.rows + total.left;
        if done >= next_report {
            tracing::info!(table = redb::TableHandle::name(&table), done, "rekeying");
            next_report = done + REKEY_PROGRESS_EVERY;
        }
    }
    Ok(total)
}
