//! Tables a read snapshot keeps open: each table a [`crate::ReadCtx`] opens is opened once
//! and its handle shared by every later read of that snapshot.
//!
//! Why (docs/performance.md, "The read path"): opening a
//! redb table looks its definition up in the transaction's table tree and checks it against
//! the caller's types. A reader that loops over many rows in one snapshot would open its
//! table once per row: the webhook resolver per new event (its deliveries by event), the
//! sender per sweep (the address's holding). In a catch-up that would be about 5 % of the
//! background runtime. The write context keeps its handles the same way ([`crate::ctx_cache`]); a
//! read transaction may hold any number of handles to one table, so nothing here is ever
//! closed early.
//!
//! A handle reads the snapshot its transaction opened, whether it was opened first or
//! shared, so what a read returns does not change.

use std::any::Any;
use std::borrow::Borrow;
use std::cell::RefCell;
use std::ops::{Bound, RangeBounds};
use std::rc::Rc;

use redb::{
    AccessGuard, Cursor, Key, Range, ReadOnlyTable, ReadTransaction, ReadableTable,
    ReadableTableMetadata, TableDefinition, TableHandle, TableStats, Value,
};

use crate::StoreError;

/// Tables per snapshot kept at most: more than any reader opens (a list reads its index
/// or runs table, its rows' table, and perhaps a counter); a table beyond it is opened
/// for its caller alone.
const KEPT_MAX: usize = 16;

/// The handles one read snapshot opened, by table name.
#[derive(Default)]
pub(crate) struct ReadTables {
    kept: RefCell<Vec<(String, Rc<dyn Any>)>>,
}

impl ReadTables {
    /// The handle of `def` in `txn`: the kept one when this snapshot opened the table with
    /// these types before, else a new one (kept for the next read).
    ///
    /// Errors: those of [`ReadTransaction::open_table`] (a table that does not exist, or
    /// exists with other types).
    pub(crate) fn open<K: Key + 'static, V: Value + 'static>(
        &self,
        txn: &ReadTransaction,
        def: TableDefinition<K, V>,
    ) -> Result<KeptTable<K, V>, StoreError> {
        let name = def.name();
        let found = self
            .kept
            .borrow()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone());
        // A table opened with other types (never done by this crate) is opened again.
        if let Some(t) = found.and_then(|t| t.downcast::<ReadOnlyTable<K, V>>().ok()) {
            return Ok(KeptTable(t));
        }
        let t = Rc::new(txn.open_table(def)?);
        let mut kept = self.kept.borrow_mut();
        if kept.len() < KEPT_MAX && !kept.iter().any(|(n, _)| n == name) {
            kept.push((name.to_string(), t.clone()));
        }
        Ok(KeptTable(t))
    }
}

/// A shared handle of a table of a read snapshot ([`ReadTables::open`]): reads exactly as
/// the [`ReadOnlyTable`] it shares.
pub struct KeptTable<K: Key + 'static, V: Value + 'static>(Rc<ReadOnlyTable<K, V>>);

impl<K: Key + 'static, V: Value + 'static> ReadableTableMetadata for KeptTable<K, V> {
    fn stats(&self) -> redb::Result<TableStats> {
        self.0.stats()
    }

    fn len(&self) -> redb::Result<u64> {
        self.0.len()
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTable<K, V> for KeptTable<K, V> {
    fn get<'a>(
        &self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> redb::Result<Option<AccessGuard<'_, V>>> {
        self.0.get(key)
    }

    fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> redb::Result<Range<'_, K, V>>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        self.0.range(range)
    }

    fn first(&self) -> redb::Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        self.0.first()
    }

    fn last(&self) -> redb::Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        self.0.last()
    }

    fn lower_bound<'a>(
        &self,
        bound: Bound<impl Borrow<K::SelfType<'a>>>,
    ) -> redb::Result<Cursor<'_, K, V>> {
        self.0.lower_bound(bound)
    }

    fn upper_bound<'a>(
        &self,
        bound: Bound<impl Borrow<K::SelfType<'a>>>,
    ) -> redb::Result<Cursor<'_, K, V>> {
        self.0.upper_bound(bound)
    }
}

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

    use crate::ctx::{ReadCtx, Reader};
    use crate::test_support::memory_db;

    const ROWS: TableDefinition<u128, u64> = TableDefinition::new("rows");
    const SAME_NAME: TableDefinition<&[u8], u64> = TableDefinition::new("rows");

    fn put(db: &redb::Database, k: u128, v: u64) {
        let w = db.begin_write().unwrap();
        w.open_table(ROWS).unwrap().insert(k, v).unwrap();
        w.commit().unwrap();
    }

    #[test]
    fn a_kept_handle_reads_its_snapshot_and_is_shared() {
        let db = memory_db();
        put(&db, 1, 10);
        let r = ReadCtx::new(db.begin_read().unwrap());
        let first = r.open(ROWS).unwrap();
        assert_eq!(first.get(1).unwrap().unwrap().value(), 10);
        // Written after the snapshot began: no handle of the snapshot sees it, the kept one
        // or a later opening.
        put(&db, 2, 20);
        let again = r.open(ROWS).unwrap();
        assert!(again.get(2).unwrap().is_none());
        assert_eq!(again.len().unwrap(), 1);
        let all: Vec<(u128, u64)> = again
            .range(0..u128::MAX)
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.value(), v.value())
            })
            .collect();
        assert_eq!(all, vec![(1, 10)]);
        assert_eq!(
            r.tables.kept.borrow().len(),
            1,
            "the second opening shared the first handle"
        );
        // A new snapshot sees the later write.
        let r2 = ReadCtx::new(db.begin_read().unwrap());
        assert_eq!(r2.open(ROWS).unwrap().get(2).unwrap().unwrap().value(), 20);
    }

    #[test]
    fn a_table_asked_for_with_other_types_is_refused_as_redb_refuses_it() {
        let db = memory_db();
        put(&db, 1, 10);
        let r = ReadCtx::new(db.begin_read().unwrap());
        r.open(ROWS).unwrap();
        // The kept handle is of other types: the opening goes to redb, which refuses it.
        assert!(r.open(SAME_NAME).is_err());
        assert_eq!(r.open(ROWS).unwrap().get(1).unwrap().unwrap().value(), 10);
    }

    #[test]
    fn a_missing_table_is_an_error_and_nothing_is_kept() {
        let db = memory_db();
        let r = ReadCtx::new(db.begin_read().unwrap());
        assert!(r.open(ROWS).is_err());
        assert!(r.tables.kept.borrow().is_empty());
    }
}
