//! Online backup: every table of one read snapshot copied into a new store file.
//!
//! The snapshot is consistent (a redb read transaction) and the writer keeps running while
//! it is copied. A table present in the source but unknown to this list fails the backup,
//! so a table added later cannot be silently left out.

use std::collections::BTreeSet;
use std::path::Path;

use redb::{
    Database, Durability, Key, ReadTransaction, ReadableTable, TableDefinition, TableError,
    TableHandle, Value, WriteTransaction,
};

use crate::schema::*;
use crate::{ReadCtx, StoreError};

/// What a backup copied.
#[derive(Debug, Default)]
pub struct BackupReport {
    pub tables: usize,
    pub rows: u64,
}

fn copy<K: Key + 'static, V: Value + 'static>(
    src: &ReadTransaction,
    dst: &WriteTransaction,
    def: TableDefinition<K, V>,
    seen: &mut BTreeSet<String>,
    rep: &mut BackupReport,
) -> Result<(), StoreError> {
    seen.insert(def.name().to_string());
    let from = match src.open_table(def) {
        Ok(t) => t,
        Err(TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut to = dst.open_table(def)?;
    for e in from.iter()? {
        let (k, v) = e?;
        to.insert(k.value(), v.value())?;
        rep.rows += 1;
    }
    rep.tables += 1;
    Ok(())
}

/// Writes a copy of the snapshot `ctx` to a new store file at `dest` (which must not exist)
/// and syncs it.
pub fn backup(ctx: &ReadCtx, dest: &Path) -> Result<BackupReport, StoreError> {
    if dest.exists() {
        return Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} exists", dest.display()),
        )));
    }
    let src = ctx.txn();
    let db = Database::create(dest)?;
    let mut dst = db.begin_write()?;
    dst.set_durability(Durability::Immediate)?;
    let mut seen = BTreeSet::new();
    let mut rep = BackupReport::default();
    copy(src, &dst, META, &mut seen, &mut rep)?;
    copy(src, &dst, PROJECTS, &mut seen, &mut rep)?;
    copy(src, &dst, API_KEYS, &mut seen, &mut rep)?;
    copy(src, &dst, CUSTOMERS, &mut seen, &mut rep)?;
    copy(src, &dst, WALLETS, &mut seen, &mut rep)?;
    copy(src, &dst, DEPOSITS, &mut seen, &mut rep)?;
    copy(src, &dst, PAYOUTS, &mut seen, &mut rep)?;
    copy(src, &dst, SWEEPS, &mut seen, &mut rep)?;
    copy(src, &dst, CONVERSION_RULES, &mut seen, &mut rep)?;
    copy(src, &dst, CONVERSIONS, &mut seen, &mut rep)?;
    copy(src, &dst, CONVERSION_BATCHES, &mut seen, &mut rep)?;
    copy(src, &dst, UNIQUE, &mut seen, &mut rep)?;
    copy(src, &dst, INDEX, &mut seen, &mut rep)?;
    for (_, def) in SPLIT_INDEXES {
        copy(src, &dst, def, &mut seen, &mut rep)?;
    }
    copy(src, &dst, EVENT_TYPE_RUNS, &mut seen, &mut rep)?;
    copy(src, &dst, EVENT_RESOURCE_RUNS, &mut seen, &mut rep)?;
    for def in run_tables() {
        copy(src, &dst, def, &mut seen, &mut rep)?;
    }
    copy(src, &dst, ACCOUNTS, &mut seen, &mut rep)?;
    copy(src, &dst, JOURNAL, &mut seen, &mut rep)?;
    copy(src, &dst, EVENTS, &mut seen, &mut rep)?;
    copy(src, &dst, EVENT_IDS, &mut seen, &mut rep)?;
    copy(src, &dst, IDEMPOTENCY, &mut seen, &mut rep)?;
    copy(src, &dst, IDEMPOTENCY_EXP, &mut seen, &mut rep)?;
    copy(src, &dst, LEGACY_HOLDINGS, &mut seen, &mut rep)?;
    copy(src, &dst, SIM_BALANCES, &mut seen, &mut rep)?;
    copy(src, &dst, ADDRESS_QUOTA, &mut seen, &mut rep)?;
    copy(src, &dst, COUNTERS, &mut seen, &mut rep)?;
    copy(src, &dst, WEBHOOK_ENDPOINTS, &mut seen, &mut rep)?;
    copy(src, &dst, WEBHOOK_DELIVERIES, &mut seen, &mut rep)?;
    copy(src, &dst, EVM_OUT_TXS, &mut seen, &mut rep)?;
    copy(src, &dst, EVM_PENDING, &mut seen, &mut rep)?;
    copy(src, &dst, EVM_NONCES, &mut seen, &mut rep)?;
    copy(src, &dst, EVM_WATCH, &mut seen, &mut rep)?;
    copy(src, &dst, EVM_BLOCK_DEPOSITS, &mut seen, &mut rep)?;
    copy(src, &dst, SIM_HEIGHTS, &mut seen, &mut rep)?;
    copy(src, &dst, SWEEP_REQUESTS, &mut seen, &mut rep)?;
    copy(src, &dst, SIM_OPS, &mut seen, &mut rep)?;
    copy(src, &dst, SIM_SNAPSHOT_CHUNKS, &mut seen, &mut rep)?;
    copy(src, &dst, INVOICES, &mut seen, &mut rep)?;
    copy(src, &dst, TEST_CLOCKS, &mut seen, &mut rep)?;
    copy(src, &dst, TEST_SENDERS, &mut seen, &mut rep)?;
    copy(src, &dst, BILLING_ACCOUNTS, &mut seen, &mut rep)?;
    copy(src, &dst, BILLING_ENTRIES, &mut seen, &mut rep)?;
    copy(src, &dst, FUNDING_ADDRESSES, &mut seen, &mut rep)?;
    for t in src.list_tables()? {
        if !seen.contains(t.name()) {
            dst.abort()?;
            drop(db);
            let _ = std::fs::remove_file(dest);
            return Err(StoreError::Corrupt(format!(
                "table {:?} is not covered by the backup; refusing an incomplete copy",
                t.name()
            )));
        }
    }
    dst.commit()?;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Customer;
    use crate::{ReadOps, Store, StoreOptions};

    #[test]
    fn a_backup_holds_every_row_and_opens_as_a_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a.redb"), StoreOptions::default()).unwrap();
        let p = uuid::Uuid::now_v7();
        let ids: Vec<uuid::Uuid> = (0..20)
            .map(|i| {
                store
                    .write_blocking(move |ctx| {
                        let c = Customer {
                            id: uuid::Uuid::now_v7(),
                            project_id: p,
                            reference_id: Some(format!("r{i}")),
                            email: None,
                            status: "active".into(),
                            metadata: serde_json::json!({"i": i}),
                            created_at: ctx.now_us(),
                        };
                        ctx.put(&c)?;
                        ctx.append_event(
                            p,
                            false,
                            "customer.created",
                            &c.id.to_string(),
                            serde_json::json!({}),
                        )?;
                        Ok::<_, StoreError>(c.id)
                    })
                    .unwrap()
            })
            .collect();
        let dest = dir.path().join("b.redb");
        let rep = store.read_blocking(|r| backup(r, &dest)).unwrap();
        assert!(rep.rows >= 20 * 4, "{rep:?}");
        // The same path again is refused rather than overwritten.
        assert!(store.read_blocking(|r| backup(r, &dest)).is_err());
        let copy = Store::open(&dest, StoreOptions::default()).unwrap();
        for id in ids {
            let c: Customer = copy.read_blocking(|r| r.get(id)).unwrap().unwrap();
            assert_eq!(c.project_id, p);
        }
        assert_eq!(copy.read_blocking(|r| r.last_sequence(p)).unwrap(), 20);
        let v = copy.read_blocking(crate::verify::verify).unwrap();
        assert!(v.violations.is_empty(), "{:?}", v.violations);
    }
}
