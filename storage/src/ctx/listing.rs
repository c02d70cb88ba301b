//! How the readers of many rows (lists, pages, scans) read: a row that cannot be decoded is
//! logged and passed over, and the ids under an index prefix come from its index table or
//! its runs.

use super::*;

/// Decodes a row for a reader of many rows (lists, pages, scans): a row that cannot be
/// decoded is logged and passed over, never the end of the whole read (`appliance verify`
/// reports it).
pub(super) fn decode_listed<T: serde::de::DeserializeOwned>(
    table: &str,
    key: &dyn std::fmt::Display,
    bytes: &[u8],
) -> Option<T> {
    match decode(bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            log_undecodable(table, key, &e.to_string());
            None
        }
    }
}

/// [`decode_listed`] of a [`Row`] stored under `id` ([`decode_keyed`]).
pub(super) fn decode_listed_row<R: Row>(id: Uuid, bytes: &[u8]) -> Option<R> {
    match decode_keyed(id.as_u128(), bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            log_undecodable(R::TABLE.name(), &id, &e.to_string());
            None
        }
    }
}

pub(super) fn log_undecodable(table: &str, key: &dyn std::fmt::Display, error: &str) {
    tracing::error!(
        table,
        key = %key,
        error,
        "a stored row cannot be decoded; passed over (appliance verify reports it)"
    );
}

/// Where the ids under an index prefix are: the keys of its tag's index table, or the
/// runs of its tag's table of [`crate::schema::RUN_INDEXES`] ([`crate::id_runs::run_of`],
/// schema 14 and 15). [`id_source`] opens the one table it reads.
pub(super) enum IdSource<K, R> {
    Keys(K),
    Runs(R),
}

/// The [`IdSource`] of `prefix`, its table opened. (Its type names the `impl Trait` tables
/// of [`Reader::open`], which no type alias can.)
#[allow(clippy::type_complexity)]
pub(super) fn id_source<'a, Rd: Reader + ?Sized>(
    r: &'a Rd,
    prefix: &[u8],
) -> Result<
    IdSource<
        impl ReadableTable<&'static [u8], ()> + 'a,
        impl ReadableTable<&'static [u8], &'static [u8]> + 'a,
    >,
    StoreError,
> {
    Ok(if let Some(runs) = crate::id_runs::run_of(prefix) {
        IdSource::Runs(r.open(runs.table)?)
    } else {
        IdSource::Keys(r.open(index_table_of(prefix))?)
    })
}

impl<K, R> IdSource<K, R>
where
    K: ReadableTable<&'static [u8], ()>,
    R: ReadableTable<&'static [u8], &'static [u8]>,
{
    /// The ids under `prefix`, newest first, strictly older than `before` when given.
    pub(super) fn ids_under(
        &self,
        prefix: &[u8],
        before: Option<Uuid>,
    ) -> Result<Box<dyn Iterator<Item = Result<Uuid, StoreError>> + '_>, StoreError> {
        match self {
            IdSource::Runs(runs) => {
                let ids = crate::id_runs::ids_desc(runs, prefix, before.map(|b| b.as_u128()))?;
                Ok(Box::new(ids.map(|id| id.map(Uuid::from_u128))))
            }
            IdSource::Keys(index) => {
                let upper = upper_bound(prefix, before);
                let keys = index.range::<&[u8]>(prefix..upper.as_slice())?.rev();
                Ok(Box::new(keys.map(|e| {
                    e.map(|(k, _)| index::id_of(k.value()))
                        .map_err(StoreError::from)
                })))
            }
        }
    }
}

/// Exclusive upper bound of a newest-first scan under `prefix`: just below the cursor row,
/// or the end of the prefix.
pub(super) fn upper_bound(prefix: &[u8], before: Option<Uuid>) -> Vec<u8> {
    match before {
        Some(c) => [prefix, c.as_bytes().as_slice()].concat(),
        None => index::prefix_end(prefix),
    }
}
