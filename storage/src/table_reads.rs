//! The reads both store contexts make on one open table handle: the default
//! [`crate::ReadOps`] methods on a handle they open ([`crate::ReadCtx`]), the write batch's
//! on the handle it keeps (`crate::ctx_cache`). One function per read, so both give the
//! same answer.

use redb::ReadableTable;
use uuid::Uuid;

use crate::codec::{decode_keyed, raw_project_id};
use crate::index::{self, IndexTag};
use crate::ledger::{Account, Balance};
use crate::records::Row;
use crate::{KeyRange, StoreError};

/// [`crate::ReadOps::get`] on `t`, a [`Row`] table.
pub(crate) fn row_of<R: Row>(
    t: &impl ReadableTable<u128, &'static [u8]>,
    id: Uuid,
) -> Result<Option<R>, StoreError> {
    t.get(id.as_u128())?
        .map(|g| decode_keyed(id.as_u128(), g.value()))
        .transpose()
}

/// [`crate::ReadOps::get_in`] on `t`, a [`Row`] table.
pub(crate) fn row_in<R: Row>(
    t: &impl ReadableTable<u128, &'static [u8]>,
    project: Uuid,
    id: Uuid,
) -> Result<Option<R>, StoreError> {
    let Some(v) = t.get(id.as_u128())? else {
        return Ok(None);
    };
    match decode_keyed::<R>(id.as_u128(), v.value()) {
        Ok(r) => Ok(Some(r).filter(|r| r.project_id() == project)),
        Err(e) if raw_project_id(v.value()) == Some(project) => Err(e),
        Err(_) => Ok(None),
    }
}

/// [`crate::ReadOps::count_of`] on `t`, the `counters` table.
pub(crate) fn count_in(
    t: &impl ReadableTable<&'static [u8], u64>,
    tag: IndexTag,
    project: Uuid,
) -> Result<u64, StoreError> {
    let key = index::prefix(tag, project, &[]);
    Ok(t.get(key.as_slice())?.map(|g| g.value()).unwrap_or(0))
}

/// [`crate::ReadOps::index_range`] on `t`, the `index` table.
pub(crate) fn index_keys_in(
    t: &impl ReadableTable<&'static [u8], ()>,
    range: &KeyRange,
) -> Result<Vec<Vec<u8>>, StoreError> {
    let KeyRange {
        from,
        to,
        limit,
        descending,
    } = *range;
    let range = t.range::<&[u8]>(from..to)?;
    let iter: Box<dyn Iterator<Item = _>> = if descending {
        Box::new(range.rev())
    } else {
        Box::new(range)
    };
    let mut out = Vec::new();
    for e in iter.take(limit) {
        let (k, _) = e?;
        out.push(k.value().to_vec());
    }
    Ok(out)
}

/// [`crate::ReadOps::balance`] on `t`, the `accounts` table.
pub(crate) fn balance_in(
    t: &impl ReadableTable<&'static [u8], (u128, u128)>,
    account: &Account,
) -> Result<Balance, StoreError> {
    let v = t.get(account.key().as_slice())?;
    Ok(v.map(|g| {
        let (debits, credits) = g.value();
        Balance { debits, credits }
    })
    .unwrap_or_default())
}

/// [`crate::ReadOps::last_sequence`] on `t`, the `events` table.
pub(crate) fn last_sequence_in(
    t: &impl ReadableTable<(u128, u64), &'static [u8]>,
    project: Uuid,
) -> Result<u64, StoreError> {
    let p = project.as_u128();
    let last = t.range((p, 0)..=(p, u64::MAX))?.next_back().transpose()?;
    Ok(last.map(|(k, _)| k.value().1).unwrap_or(0))
}

/// [`crate::ChainStateOps::sim_last_seq`] on `t`, the `sim_ops` table (also the write batch's kept
/// handle, `crate::ctx_cache`).
pub(crate) fn sim_last_seq_in(
    t: &impl ReadableTable<(u128, &'static str, u64), &'static [u8]>,
    project: Uuid,
    chain: &str,
) -> Result<Option<u64>, StoreError> {
    let p = project.as_u128();
    match t
        .range((p, chain, 0u64)..=(p, chain, u64::MAX))?
        .next_back()
    {
        Some(e) => Ok(Some(e?.0.value().2)),
        None => Ok(None),
    }
}
