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
    let mut t = txn.open_table(table)?;
    let mut total = codec::Migrated::default();
    let mut chunks = KeyChunks::new(start, end);
    let mut next_report = REKEY_PROGRESS_EVERY;
    loop {
        let chunk = chunks.next(&t)?;
        if chunk.is_empty() {
            break;
        }
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

/// The keys of a range of a table of byte keys with their values, read in chunks of 4096
/// keys so memory stays bounded on a large store. Each chunk resumes after the last key
/// of the one before, so a key left in place is not read again.
pub(super) struct KeyChunks {
    from: Vec<u8>,
    end: Option<Vec<u8>>,
}

impl KeyChunks {
    /// The keys from `start` up to `end` (excluded), or to the table's end.
    pub(super) fn new(start: &[u8], end: Option<&[u8]>) -> Self {
        KeyChunks {
            from: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
        }
    }

    /// The next chunk of `t`'s keys and values; empty once the range is read.
    pub(super) fn next<V>(
        &mut self,
        t: &impl redb::ReadableTable<&'static [u8], V>,
    ) -> Result<Vec<(Vec<u8>, V)>, StoreError>
    where
        V: for<'a> redb::Value<SelfType<'a> = V> + 'static,
    {
        use std::ops::Bound;
        const CHUNK: usize = 4096;
        let upper = self
            .end
            .as_deref()
            .map_or(Bound::Unbounded, Bound::Excluded);
        let chunk: Vec<(Vec<u8>, V)> = t
            .range::<&[u8]>((Bound::Included(self.from.as_slice()), upper))?
            .take(CHUNK)
            .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value())))
            .collect::<Result<_, _>>()?;
        if let Some((last, _)) = chunk.last() {
            self.from = [last.as_slice(), &[0]].concat();
        }
        Ok(chunk)
    }
}
