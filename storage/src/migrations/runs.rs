//! Steps to schemas 12 to 16: index keys kept as runs of sequences or ids, and unique keys
//! stored as digests.

use crate::{codec, event_runs, id_runs, index, schema, StoreError};

use super::rekey::{rekey, rekey_range, REKEY_PROGRESS_EVERY};

/// Schema 11 -> 12: every key of [`schema::EVENTS_BY_TYPE`] becomes its
/// [`index::event_type_key_from_7`] (the type's 4-byte hash instead of its text), by
/// [`rekey_range`], all in the opening transaction, so a crash leaves schema 11 whole. A
/// key of neither shape stays where it is (counted in `left`). A project's new keys sort before
/// its old ones (a 0 where an old key has the type's length), so the scan, which goes
/// forward from the last old key it read, never reads a key it wrote.
pub(super) fn migrate_to_12(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use redb::ReadableTableMetadata;
    let keys = txn.open_table(schema::EVENTS_BY_TYPE)?.len()?;
    if keys >= REKEY_PROGRESS_EVERY {
        tracing::info!(
            keys,
            "rekeying the event type index (schema version 12): once, before the server listens"
        );
    }
    rekey_range(
        txn,
        schema::EVENTS_BY_TYPE,
        &[],
        None,
        index::event_type_key_from_7,
    )
}

/// Schema 12 -> 13: the keys of [`schema::EVENTS_BY_TYPE`] (project ‖ 0 ‖ type hash ‖
/// sequence) and of [`schema::EVENTS_BY_RESOURCE`] (resource prefix ‖ sequence) become runs
/// of [`schema::EVENT_TYPE_RUNS`] and [`schema::EVENT_RESOURCE_RUNS`] ([`event_runs`]);
/// then the old tables are deleted. All in the opening transaction, so a crash leaves
/// schema 12 whole. `rows` counts the sequences moved; a key of another shape cannot be
/// listed by any build of schema 12 and is dropped with its table (counted in `left`).
pub(super) fn migrate_to_13(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    let by_type = keys_to_runs(
        txn,
        schema::EVENTS_BY_TYPE,
        schema::EVENT_TYPE_RUNS,
        "event type index",
        |k| {
            // project (16) ‖ 0 ‖ hash (4) ‖ sequence (8) -> project ‖ hash
            (k.len() == 29 && k[16] == 0).then(|| ([&k[..16], &k[17..21]].concat(), &k[21..]))
        },
    )?;
    let by_resource = keys_to_runs(
        txn,
        schema::EVENTS_BY_RESOURCE,
        schema::EVENT_RESOURCE_RUNS,
        "event resource index",
        |k| {
            let at = k.len().checked_sub(8).filter(|at| *at > 0)?;
            Some((k[..at].to_vec(), &k[at..]))
        },
    )?;
    Ok(codec::Migrated {
        rows: by_type.rows + by_resource.rows,
        left: by_type.left + by_resource.left,
    })
}

/// Schema 13 -> 14: the keys of `index` listed per customer ([`index::IndexTag::ByCustomer`]:
/// a customer's deposits and its wallets' sweeps; [`index::IndexTag::PayoutsByCustomer`])
/// become runs of [`schema::ID_RUNS`] ([`id_runs`]), filled in key order, and leave
/// `index`; all in the opening transaction, so a crash leaves schema 13 whole. `rows`
/// counts the keys moved; a key too short to hold an id is dropped (counted in `left`).
pub(super) fn migrate_to_14(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    let mut total = codec::Migrated::default();
    let mut index = txn.open_table(schema::INDEX)?;
    let mut runs = txn.open_table(schema::ID_RUNS)?;
    for tag in [
        index::IndexTag::ByCustomer,
        index::IndexTag::PayoutsByCustomer,
    ] {
        keys_into_id_runs(&mut index, &mut runs, tag as u8, false, &mut total)?;
    }
    Ok(total)
}

/// Schema 14 -> 15: the keys of a project's lists that schema 15 keeps as runs (each
/// [`schema::RunIndex`] of [`schema::RUN_INDEXES`] but [`schema::ID_RUNS`]'s) leave their
/// tag's index table ([`schema::index_table`]) for runs of their own table, full size
/// ([`schema::RunIndex::padded`]), filled in key order; all in the opening transaction, so
/// a crash leaves schema 14 whole. The emptied tables stay. `rows` and `left` as
/// [`migrate_to_14`]'s.
pub(super) fn migrate_to_15(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use redb::TableHandle;
    let mut total = codec::Migrated::default();
    for r in schema::RUN_INDEXES
        .iter()
        .filter(|r| r.table.name() != schema::ID_RUNS.name())
    {
        let mut keys = txn.open_table(schema::index_table(r.tag as u8))?;
        let mut runs = txn.open_table(r.table)?;
        keys_into_id_runs(&mut keys, &mut runs, r.tag as u8, r.padded, &mut total)?;
    }
    Ok(total)
}

/// Schema 15 -> 16: every transfer key of `unique` (schema 7's
/// [`index::IndexTag::UniqueDepositTxHash`], and schema 6's `UniqueDepositTx` a hash that
/// was not lower-case hex kept) becomes its [`index::transfer_key`], and every address key
/// ([`index::IndexTag::UniqueAddressChain`]) its [`index::address_key`], with the same
/// deposit or wallet id, by [`rekey`]; all in the opening transaction, so a crash leaves
/// schema 15 whole. A key of neither shape stays (counted in `left`; `verify` names it).
/// The new tags sort after the old ones', so no scan reads a key it wrote.
pub(super) fn migrate_to_16(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use index::IndexTag;
    let mut total = codec::Migrated::default();
    for (tag, convert) in [
        (
            IndexTag::UniqueDepositTx,
            index::transfer_key_from_legacy as fn(&[u8]) -> Option<Vec<u8>>,
        ),
        (
            IndexTag::UniqueDepositTxHash,
            index::transfer_key_from_legacy,
        ),
        (IndexTag::UniqueAddressChain, index::address_key_from_legacy),
    ] {
        total += rekey(txn, schema::UNIQUE, tag, convert)?;
    }
    Ok(total)
}

/// Moves the keys of tag byte `tag` from index table `keys` into runs of `runs` ([`id_runs`],
/// `padded` or not), each prefix's ids in runs of [`id_runs::RUN_IDS`] in key order; adds
/// to `total` the keys moved (`rows`) and those too short to hold an id, dropped (`left`).
/// Logs progress every [`REKEY_PROGRESS_EVERY`] keys.
pub(super) fn keys_into_id_runs(
    keys: &mut redb::Table<&'static [u8], ()>,
    runs: &mut redb::Table<&'static [u8], &'static [u8]>,
    tag: u8,
    padded: bool,
    total: &mut codec::Migrated,
) -> Result<(), StoreError> {
    use redb::ReadableTable;
    let (lo, hi) = ([tag], [tag + 1]);
    let range = lo.as_slice()..hi.as_slice();
    // The run being filled: its prefix and ids (ascending, as the keys come).
    let mut run: Option<(Vec<u8>, Vec<u128>)> = None;
    let mut flush = |run: &mut Option<(Vec<u8>, Vec<u128>)>| {
        run.take().map_or(Ok(()), |(prefix, ids)| {
            let value = id_runs::encode(&ids, padded);
            runs.insert(id_runs::key(&prefix, ids[0]).as_slice(), value.as_slice())
                .map(|_| ())
        })
    };
    for e in keys.range::<&[u8]>(range.clone())? {
        let (k, _) = e?;
        let Some((prefix, id)) = id_runs::split_key(k.value()) else {
            total.left += 1;
            continue;
        };
        match &mut run {
            Some((p, ids))
                if p.as_slice() == prefix
                    && ids.len() < id_runs::RUN_IDS
                    && ids.last().is_some_and(|l| *l < id) =>
            {
                ids.push(id)
            }
            _ => {
                flush(&mut run)?;
                run = Some((prefix.to_vec(), vec![id]));
            }
        }
        total.rows += 1;
        if total.rows.is_multiple_of(REKEY_PROGRESS_EVERY) {
            tracing::info!(moved = total.rows, tag, "index keys: moving into runs");
        }
    }
    flush(&mut run)?;
    keys.retain_in::<&[u8], _>(range, |_, _| false)?;
    Ok(())
}

/// Moves every key of `old` (an event index of schema 12, read in key order, so each
/// prefix's sequences come ascending) into runs of `runs` filled to
/// [`event_runs::RUN_MAX`] bytes, then deletes `old`. `parse` gives a key's run prefix and
/// its 8 sequence bytes, `None` for a key of another shape (counted in `left`, dropped).
/// Logs the size first and progress every [`REKEY_PROGRESS_EVERY`] keys when large.
pub(super) fn keys_to_runs(
    txn: &redb::WriteTransaction,
    old: redb::TableDefinition<&[u8], ()>,
    runs: redb::TableDefinition<&[u8], &[u8]>,
    what: &str,
    parse: impl Fn(&[u8]) -> Option<(Vec<u8>, &[u8])>,
) -> Result<codec::Migrated, StoreError> {
    use redb::{ReadableTable, ReadableTableMetadata};
    let mut total = codec::Migrated::default();
    {
        let old = txn.open_table(old)?;
        let keys = old.len()?;
        if keys >= REKEY_PROGRESS_EVERY {
            tracing::info!(
                keys,
                "moving the {what} into runs (schema version 13): once, before the server listens"
            );
        }
        let mut runs = txn.open_table(runs)?;
        // The run being filled: its prefix, first sequence, last sequence and value.
        let mut run: Option<(Vec<u8>, u64, u64, Vec<u8>)> = None;
        let mut flush = |run: &mut Option<(Vec<u8>, u64, u64, Vec<u8>)>| {
            run.take().map_or(Ok(()), |(prefix, first, _, value)| {
                runs.insert(event_runs::key(&prefix, first).as_slice(), value.as_slice())
                    .map(|_| ())
            })
        };
        for e in old.iter()? {
            let (k, _) = e?;
            let parsed = parse(k.value())
                .and_then(|(prefix, seq)| Some((prefix, u64::from_be_bytes(seq.try_into().ok()?))));
            let Some((prefix, seq)) = parsed else {
                total.left += 1;
                continue;
            };
            let appended = match &mut run {
                Some((p, _, last, value)) if *p == prefix => {
                    let pushed = event_runs::push(value, *last, seq);
                    if pushed {
                        *last = seq;
                    }
                    pushed
                }
                _ => false,
            };
            if !appended {
                flush(&mut run)?;
                run = Some((prefix, seq, seq, Vec::new()));
            }
            total.rows += 1;
            if total.rows.is_multiple_of(REKEY_PROGRESS_EVERY) {
                tracing::info!(moved = total.rows, "{what}: moving into runs");
            }
        }
        flush(&mut run)?;
    }
    txn.delete_table(old)?;
    Ok(total)
}
