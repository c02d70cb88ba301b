//! Steps to schemas 4 to 9: records re-encoded, and index and unique keys laid out anew.

use crate::{codec, index, ledger, records, schema, StoreError};

use super::rekey::{rekey, KeyChunks};

/// Schema 8 -> 9: every [`index::IndexTag::DepositsByCustomer`] key of `index` becomes its
/// [`index::deposit_by_customer_key`]; every [`index::IndexTag::SweepsByWallet`] key is
/// removed, and every sweep row is rewritten with its wallet's customer
/// (`Sweep::customer_id`, nil when the wallet is missing or does not decode) and given its
/// [`index::sweep_by_wallet_key`]. In chunks of 4096; all in the opening transaction, so a
/// crash leaves schema 8 whole. A key without the old shape, or a sweep row that does not
/// decode, stays as it is (counted in `left`; `verify` reports the row).
pub(super) fn migrate_to_9(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use redb::ReadableTable;
    const CHUNK: usize = 4096;
    let mut total = rekey(
        txn,
        schema::INDEX,
        index::IndexTag::DepositsByCustomer,
        index::deposit_by_customer_from_legacy,
    )?;
    let mut idx = txn.open_table(schema::INDEX)?;
    let lo = [index::IndexTag::SweepsByWallet as u8];
    let hi = [index::IndexTag::SweepsByWallet as u8 + 1];
    idx.retain_in::<&[u8], _>(lo.as_slice()..hi.as_slice(), |_, _| false)?;
    let wallets = txn.open_table(schema::WALLETS)?;
    let mut sweeps = txn.open_table(schema::SWEEPS)?;
    let mut from = Some(0u128);
    while let Some(start) = from {
        let chunk: Vec<(u128, Vec<u8>)> = sweeps
            .range(start..)?
            .take(CHUNK)
            .map(|e| e.map(|(k, v)| (k.value(), v.value().to_vec())))
            .collect::<Result<_, _>>()?;
        let Some((last, _)) = chunk.last() else {
            break;
        };
        // The chunk is rewritten below whatever its last key; none follows u128::MAX.
        from = last.checked_add(1);
        for (k, v) in chunk {
            let Ok(mut sw) = codec::decode_keyed::<records::Sweep>(k, &v) else {
                total.left += 1;
                continue;
            };
            sw.customer_id = match wallets.get(sw.wallet_id.as_u128())? {
                Some(row) => {
                    codec::decode_keyed::<records::Wallet>(sw.wallet_id.as_u128(), row.value())
                        .map(|w| w.customer_id)
                        .unwrap_or_default()
                }
                None => uuid::Uuid::nil(),
            };
            sweeps.insert(k, codec::encode_record(&sw).as_slice())?;
            let key =
                index::sweep_by_wallet_key(sw.project_id, sw.customer_id, sw.wallet_id, sw.id);
            idx.insert(key.as_slice(), ())?;
            total.rows += 1;
        }
    }
    Ok(total)
}

/// Schema 7 -> 8: every open-sweep key of `unique` ([`index::IndexTag::UniqueOpenSweep`]:
/// (project nil) ‖ wallet ‖ asset -> sweep) becomes the open sweep of its wallet's holding
/// row of that asset ([`ledger::Holding`]; a row with nothing held is written if there is
/// none) and is removed. A key that does not have that shape, or whose wallet is missing or
/// does not decode, stays (counted in `left`; `verify` names it). In chunks of 4096 keys;
/// all in the opening transaction, so a crash leaves schema 7 whole.
pub(super) fn migrate_to_8(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use redb::ReadableTable;
    let tag = index::IndexTag::UniqueOpenSweep as u8;
    let mut unique = txn.open_table(schema::UNIQUE)?;
    let wallets = txn.open_table(schema::WALLETS)?;
    let mut accounts = txn.open_table(schema::ACCOUNTS)?;
    let mut total = codec::Migrated::default();
    let mut chunks = KeyChunks::new(&[tag], Some(&[tag + 1]));
    loop {
        let chunk = chunks.next(&unique)?;
        if chunk.is_empty() {
            break;
        }
        for (k, sweep) in chunk {
            let Some((wallet, asset)) = parse_open_sweep_key(&k) else {
                total.left += 1;
                continue;
            };
            let w = match wallets.get(wallet.as_u128())? {
                Some(row) => {
                    codec::decode_keyed::<records::Wallet>(wallet.as_u128(), row.value()).ok()
                }
                None => None,
            };
            let Some(w) = w else {
                total.left += 1;
                continue;
            };
            let key = w.holding_key(&asset);
            let cur = accounts
                .get(key.as_slice())?
                .map(|g| ledger::Holding::from_value(g.value()))
                .unwrap_or_default();
            let next = ledger::Holding {
                open_sweep: Some(uuid::Uuid::from_u128(sweep)),
                ..cur
            };
            accounts.insert(key.as_slice(), next.to_value())?;
            unique.remove(k.as_slice())?;
            total.rows += 1;
        }
    }
    Ok(total)
}

/// (wallet, asset) of a schema 7 open-sweep key: tag ‖ nil project (16) ‖ len (2) ‖ wallet
/// (16) ‖ len (2) ‖ asset ([`index::unique`]); `None` for any other shape.
pub(super) fn parse_open_sweep_key(k: &[u8]) -> Option<(uuid::Uuid, String)> {
    let rest = k.strip_prefix(&[index::IndexTag::UniqueOpenSweep as u8])?;
    let rest = rest.strip_prefix(uuid::Uuid::nil().as_bytes().as_slice())?;
    let rest = rest.strip_prefix(&16u16.to_be_bytes())?;
    let (wallet, rest) = rest.split_at_checked(16)?;
    let (len, asset) = rest.split_at_checked(2)?;
    if usize::from(u16::from_be_bytes([len[0], len[1]])) != asset.len() {
        return None;
    }
    let asset = std::str::from_utf8(asset).ok()?.to_string();
    Some((uuid::Uuid::from_slice(wallet).ok()?, asset))
}

/// Schema 6 -> 7: the keys of each tag of [`schema::SPLIT_INDEXES`] move from `index` to
/// the tag's own table, unchanged; the event index keys ([`index::IndexTag::EventsByType`],
/// [`index::IndexTag::EventsByResource`]) move to [`schema::EVENTS_BY_TYPE`] and
/// [`schema::EVENTS_BY_RESOURCE`] in their schema 7 layout
/// ([`index::event_key_from_legacy`]). In chunks of 4096 keys, so memory stays bounded on a
/// large store; all in the opening transaction, so a crash leaves schema 6 whole. A key that
/// does not have its tag's shape stays in `index` (counted in `left`) and `appliance
/// verify` reports it. Every [`index::IndexTag::UniqueDepositTx`] key of `unique` becomes its
/// [`index::transfer_key`] as well.
pub(super) fn migrate_to_7(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    let mut total = codec::Migrated::default();
    let event_tags = [
        index::IndexTag::EventsByType as u8,
        index::IndexTag::EventsByResource as u8,
    ];
    let split_tags = schema::SPLIT_INDEXES.iter().map(|(t, _)| *t as u8);
    for tag in split_tags.chain(event_tags) {
        let mut chunks = KeyChunks::new(&[tag], Some(&[tag + 1]));
        loop {
            let chunk: Vec<Vec<u8>> = chunks
                .next(&txn.open_table(schema::INDEX)?)?
                .into_iter()
                .map(|(k, ())| k)
                .collect();
            if chunk.is_empty() {
                break;
            }
            let mut moved: Vec<&[u8]> = Vec::with_capacity(chunk.len());
            if event_tags.contains(&tag) {
                let mut by_type = txn.open_table(schema::EVENTS_BY_TYPE)?;
                let mut by_resource = txn.open_table(schema::EVENTS_BY_RESOURCE)?;
                for k in &chunk {
                    match index::event_key_from_legacy(k) {
                        Some((true, new)) => {
                            by_type.insert(new.as_slice(), ())?;
                            moved.push(k);
                        }
                        Some((false, new)) => {
                            by_resource.insert(new.as_slice(), ())?;
                            moved.push(k);
                        }
                        None => total.left += 1,
                    }
                }
            } else {
                let mut own = txn.open_table(schema::index_table(tag))?;
                for k in &chunk {
                    own.insert(k.as_slice(), ())?;
                    moved.push(k);
                }
            }
            let mut idx = txn.open_table(schema::INDEX)?;
            for k in moved {
                idx.remove(k)?;
                total.rows += 1;
            }
        }
    }
    // Every `UniqueDepositTx` key of `unique` becomes its transfer key, with the same
    // deposit id, in the current layout (schema 16's, not the 32 bytes of hash schema 7
    // wrote); one without the old shape stays, counted in `left` (`verify` names it).
    total += rekey(
        txn,
        schema::UNIQUE,
        index::IndexTag::UniqueDepositTx,
        index::transfer_key_from_legacy,
    )?;
    Ok(total)
}

/// Schema 5 -> 6: the index entries of deposits by wallet are removed (a wallet's deposits
/// are listed under its customer). Event rows are not rewritten: a deposit event of schema
/// 5 keeps its whole `data` and reads as it did. Returns the entries removed.
pub(super) fn migrate_to_6(txn: &redb::WriteTransaction) -> Result<u64, StoreError> {
    let lo = [index::IndexTag::DepositsByWallet as u8];
    let hi = [index::IndexTag::DepositsByWallet as u8 + 1];
    let mut idx = txn.open_table(schema::INDEX)?;
    let mut removed = 0u64;
    idx.retain_in::<&[u8], _>(lo.as_slice()..hi.as_slice(), |_, _| {
        removed += 1;
        false
    })?;
    Ok(removed)
}

/// Schema 3 -> 4: every record rewritten from JSON to MessagePack ([`codec`]), and the
/// `sequences` table dropped (the last event key of a project gives its sequence). Rows
/// that do not decode stay as they are, for `appliance verify` to report.
pub(super) fn migrate_to_4(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    let mut total = codec::Migrated::default();
    macro_rules! migrate {
        ($def:ident, $ty:ty) => {{
            total += codec::migrate_table::<_, $ty>(txn, schema::$def)?;
        }};
    }
    schema::for_each_record_table!(migrate);
    match txn.delete_table(schema::LEGACY_SEQUENCES) {
        Ok(_) => {}
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    total.rows += move_holdings(txn)?;
    Ok(total)
}

/// Schema 4: each row of the old `holdings` table (wallet ‖ asset -> amount) moves into
/// `accounts` under [`ledger::holding_key`], found through its wallet. A row whose wallet
/// is missing or undecodable stays where it is, for `verify` to report; the table is
/// dropped once empty. Returns the rows moved.
pub(super) fn move_holdings(txn: &redb::WriteTransaction) -> Result<u64, StoreError> {
    use redb::{ReadableTable, ReadableTableMetadata};
    let rows: Vec<(Vec<u8>, u128)> = match txn.open_table(schema::LEGACY_HOLDINGS) {
        Ok(t) => t
            .iter()?
            .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value())))
            .collect::<Result<_, _>>()?,
        Err(e) => return Err(e.into()),
    };
    let wallets = txn.open_table(schema::WALLETS)?;
    let mut accounts = txn.open_table(schema::ACCOUNTS)?;
    let mut legacy = txn.open_table(schema::LEGACY_HOLDINGS)?;
    let mut moved = 0;
    for (k, amount) in rows {
        let Some((w, asset)) = k.split_at_checked(16) else {
            continue;
        };
        let Ok(wallet) = uuid::Uuid::from_slice(w) else {
            continue;
        };
        let Some(row) = wallets.get(wallet.as_u128())? else {
            continue;
        };
        let Ok(w) = codec::decode_keyed::<records::Wallet>(wallet.as_u128(), row.value()) else {
            continue;
        };
        let asset = String::from_utf8_lossy(asset);
        let key = w.holding_key(&asset);
        accounts.insert(key.as_slice(), (amount, 0))?;
        legacy.remove(k.as_slice())?;
        moved += 1;
    }
    let empty = legacy.is_empty()?;
    drop(legacy);
    if empty {
        txn.delete_table(schema::LEGACY_HOLDINGS)?;
    }
    Ok(moved)
}
