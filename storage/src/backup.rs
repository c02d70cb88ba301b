//! Online backup: every table of one read snapshot copied into a new store file; and the
//! content digest of a snapshot ([`content_digest`]), from the same walk over the tables.
//!
//! The snapshot is consistent (a redb read transaction) and the writer keeps running while
//! it is copied. A table present in the source but unknown to this list fails the backup,
//! so a table added later cannot be silently left out.

use std::collections::BTreeSet;
use std::path::Path;

use redb::{
    Database, Durability, Key, ReadOnlyTable, ReadTransaction, ReadableTable, TableDefinition,
    TableError, TableHandle, Value, WriteTransaction,
};

use crate::schema::*;
use crate::{ReadCtx, StoreError};

/// What a backup copied.
#[derive(Debug, Default)]
pub struct BackupReport {
    pub tables: usize,
    pub rows: u64,
}

/// Something done to every table of a snapshot, in a fixed order ([`visit_tables`]): to
/// `t`, the snapshot's table `def` (a table the snapshot does not hold is passed over).
trait TableVisitor {
    fn visit<K: Key + 'static, V: Value + 'static>(
        &mut self,
        def: TableDefinition<K, V>,
        t: ReadOnlyTable<K, V>,
    ) -> Result<(), StoreError>;
}

/// Runs `v` on every table this build knows, in a fixed order, and returns their names; a
/// table of the snapshot missing from this list fails ([`StoreError::Corrupt`]), so a table
/// added later cannot be silently left out.
fn visit_tables(src: &ReadTransaction, v: &mut impl TableVisitor) -> Result<(), StoreError> {
    let mut seen = BTreeSet::new();
    let mut one = |name: &str| {
        seen.insert(name.to_string());
    };
    macro_rules! visit {
        ($def:expr) => {{
            let def = $def;
            one(def.name());
            match src.open_table(def) {
                Ok(t) => v.visit(def, t)?,
                Err(TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }};
    }
    visit!(META);
    visit!(PROJECTS);
    visit!(API_KEYS);
    visit!(CUSTOMERS);
    visit!(WALLETS);
    visit!(DEPOSITS);
    visit!(PAYOUTS);
    visit!(SWEEPS);
    visit!(CONVERSION_RULES);
    visit!(CONVERSIONS);
    visit!(CONVERSION_BATCHES);
    visit!(UNIQUE);
    visit!(INDEX);
    for (_, def) in SPLIT_INDEXES {
        visit!(def);
    }
    visit!(EVENT_TYPE_RUNS);
    visit!(EVENT_RESOURCE_RUNS);
    for def in run_tables() {
        visit!(def);
    }
    visit!(ACCOUNTS);
    visit!(JOURNAL);
    visit!(EVENTS);
    visit!(EVENT_IDS);
    visit!(IDEMPOTENCY);
    visit!(IDEMPOTENCY_EXP);
    visit!(LEGACY_HOLDINGS);
    visit!(SIM_BALANCES);
    visit!(ADDRESS_QUOTA);
    visit!(COUNTERS);
    visit!(WEBHOOK_ENDPOINTS);
    visit!(WEBHOOK_DELIVERIES);
    visit!(EVM_OUT_TXS);
    visit!(EVM_PENDING);
    visit!(EVM_NONCES);
    visit!(EVM_WATCH);
    visit!(EVM_BLOCK_DEPOSITS);
    visit!(SIM_HEIGHTS);
    visit!(SWEEP_REQUESTS);
    visit!(SIM_OPS);
    visit!(SIM_SNAPSHOT_CHUNKS);
    visit!(INVOICES);
    visit!(TEST_CLOCKS);
    visit!(TEST_SENDERS);
    visit!(BILLING_ACCOUNTS);
    visit!(BILLING_ENTRIES);
    visit!(FUNDING_ADDRESSES);
    for t in src.list_tables()? {
        if !seen.contains(t.name()) {
            return Err(StoreError::Corrupt(format!(
                "table {:?} is not known to this build; refusing an incomplete walk",
                t.name()
            )));
        }
    }
    Ok(())
}

/// Copies each table into `dst`.
struct Copy<'a> {
    dst: &'a WriteTransaction,
    rep: BackupReport,
}

impl TableVisitor for Copy<'_> {
    fn visit<K: Key + 'static, V: Value + 'static>(
        &mut self,
        def: TableDefinition<K, V>,
        from: ReadOnlyTable<K, V>,
    ) -> Result<(), StoreError> {
        let mut to = self.dst.open_table(def)?;
        for e in from.iter()? {
            let (k, v) = e?;
            to.insert(k.value(), v.value())?;
            self.rep.rows += 1;
        }
        self.rep.tables += 1;
        Ok(())
    }
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
    let mut copy = Copy {
        dst: &dst,
        rep: BackupReport::default(),
    };
    if let Err(e) = visit_tables(src, &mut copy) {
        let _ = dst.abort();
        drop(db);
        let _ = std::fs::remove_file(dest);
        return Err(e);
    }
    let rep = copy.rep;
    dst.commit()?;
    Ok(rep)
}

/// Hashes each table's name, then its rows' key and value bytes in key order.
struct Digest {
    hash: sha2::Sha256,
    rows: u64,
}

impl TableVisitor for Digest {
    fn visit<K: Key + 'static, V: Value + 'static>(
        &mut self,
        def: TableDefinition<K, V>,
        t: ReadOnlyTable<K, V>,
    ) -> Result<(), StoreError> {
        use sha2::Digest as _;
        let name = def.name().as_bytes();
        self.hash.update((name.len() as u64).to_be_bytes());
        self.hash.update(name);
        for e in t.iter()? {
            let (k, v) = e?;
            let (k, v) = (k.value(), v.value());
            let (k, v) = (K::as_bytes(&k), V::as_bytes(&v));
            let (k, v) = (k.as_ref(), v.as_ref());
            self.hash.update((k.len() as u64).to_be_bytes());
            self.hash.update(k);
            self.hash.update((v.len() as u64).to_be_bytes());
            self.hash.update(v);
            self.rows += 1;
        }
        Ok(())
    }
}

/// SHA-256 of everything the snapshot `ctx` holds (every table's name and rows, bytes as
/// stored, in key order) and the number of rows: two stores with the same digest hold the
/// same data. `appliance simulate` ends with it (the same seed gives the same
/// digest).
pub fn content_digest(ctx: &ReadCtx) -> Result<([u8; 32], u64), StoreError> {
    use sha2::Digest as _;
    let mut d = Digest {
        hash: sha2::Sha256::new(),
        rows: 0,
    };
    visit_tables(ctx.txn(), &mut d)?;
    Ok((d.hash.finalize().into(), d.rows))
}

#[cfg(test)]
mod tests;
