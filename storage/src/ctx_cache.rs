//! Tables a batch keeps open: the write transaction's handles to the tables that nearly
//! every write touches (rows by id, `index`, `unique`, `accounts`, `events`, `event_ids`,
//! `counters`; `sim_ops` and `evm_block_deposits`, which every test deposit writes), opened
//! at first use and kept until the batch ends.
//!
//! Why (docs/performance.md, "What the writer keeps for a batch"): opening a redb table
//! looks its definition up in the transaction's table tree and checks it against the
//! caller's types, and closing it stages its new root; with every read and write opening its
//! own handle that would be about a fifth of the store writer's instructions per test deposit
//! (callgrind). redb allows one open handle per table and transaction, so any other opening
//! of a table on [`WriteCtx`] (a generic read through [`crate::Reader::open`], a write to a
//! table kept here through [`WriteCtx::table`]) closes the kept handle first; what it wrote
//! is in the transaction either way. The handles are dropped with the [`WriteCtx`], before
//! the batch commits or aborts.
//!
//! The batch also holds the last run of each list and event index it appends to
//! ([`crate::id_runs::Tail`], [`crate::event_runs::Tail`]) ahead of its row: a run takes
//! its batch's appends in memory and is written once, when another opening of its table
//! closes the kept handle, when a read or a change other than an append reaches its
//! prefix, and in any case before the commit ([`WriteCtx::write_held_runs`]; a failure
//! there fails the batch). An aborted batch drops them with its transaction.

use redb::{Key, ReadableTable, Table, TableDefinition, TableHandle, Value, WriteTransaction};
use uuid::Uuid;

use crate::held::RunsTable;
use crate::index::IndexTag;
use crate::ledger::{Account, Balance, Holding};
use crate::open_tables::*;
use crate::records::{Row, Wallet};
use crate::schema::*;
use crate::table_reads;
use crate::{KeyRange, ReadOps, StoreError, WriteCtx};

macro_rules! kept {
    ($(#[$doc:meta])* $method:ident, $field:ident, $def:ident, $k:ty, $v:ty) => {
        $(#[$doc])*
        pub(crate) fn $method<T>(
            &self,
            f: impl FnOnce(&mut Table<'t, $k, $v>) -> Result<T, StoreError>,
        ) -> Result<T, StoreError> {
            let mut open = self.open.borrow_mut();
            if open.$field.is_none() {
                open.$field = Some(self.txn.open_table($def)?);
            }
            f(open.$field.as_mut().expect("opened above"))
        }
    };
}

/// The kept handle of table `def` in `handles`, opened in `txn` and kept first when none
/// is.
fn kept<'h, 't, K: Key + 'static, V: Value + 'static>(
    handles: &'h mut Kept<'t, K, V>,
    txn: &'t WriteTransaction,
    def: TableDefinition<'static, K, V>,
) -> Result<&'h mut Table<'t, K, V>, StoreError> {
    let i = match handles.iter().position(|(d, _)| d.name() == def.name()) {
        Some(i) => i,
        None => {
            handles.push((def, txn.open_table(def)?));
            handles.len() - 1
        }
    };
    Ok(&mut handles[i].1)
}

impl<'t> WriteCtx<'t> {
    /// A fresh handle to `def` for this job's use, closing a kept one first. For tables
    /// this module does not keep; drop it before the next access to the same table.
    pub(crate) fn table<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<Table<'t, K, V>, StoreError> {
        self.open.borrow_mut().close(def.name())?;
        Ok(self.txn.open_table(def)?)
    }

    /// Runs `f` on the kept handle of a `u128 -> &[u8]` table (a [`Row`] table, `journal`).
    /// `f` must not use the context (the handles are borrowed while it runs).
    pub(crate) fn with_rows<T>(
        &self,
        def: TableDefinition<'static, u128, &'static [u8]>,
        f: impl FnOnce(&mut RowTable<'t>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        f(kept(&mut self.open.borrow_mut().rows, self.txn, def)?)
    }

    /// Runs `f` on the kept handle of the index table that holds `key` (`index` or one of
    /// [`SPLIT_INDEXES`], by its tag byte: [`index_table_of`]). `f` must not use the
    /// context.
    pub(crate) fn with_index<T>(
        &self,
        key: &[u8],
        f: impl FnOnce(&mut IndexTable<'t>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        f(kept(
            &mut self.open.borrow_mut().index,
            self.txn,
            index_table_of(key),
        )?)
    }
    /// [`WriteCtx::with_index`] for a write of `key` (an insert or a removal): first
    /// forgets what [`WriteCtx::index_has_any`] knew of `key`'s (tag, project) prefix.
    pub(crate) fn with_index_write<T>(
        &self,
        key: &[u8],
        f: impl FnOnce(&mut IndexTable<'t>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        {
            let mut open = self.open.borrow_mut();
            if !open.index_any.is_empty() {
                match key.get(..17) {
                    Some(p) => {
                        open.index_any.remove(p);
                    }
                    // A key shorter than a prefix: forget everything rather than reason.
                    None => open.index_any.clear(),
                }
            }
        }
        self.with_index(key, f)
    }

    /// Runs `f` on the kept handle of `table`, one of [`RUN_INDEXES`]' tables, and the
    /// batch's run tails (`f` must not use the context, and must leave every tail it does
    /// not write to its prefix's last run: [`crate::id_runs::add_to_tail`],
    /// [`crate::held::forget`]).
    pub(crate) fn with_runs<T>(
        &self,
        table: RunsDef,
        f: impl FnOnce(&mut RunsTable<'t>, &mut crate::id_runs::Tails) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut open = self.open.borrow_mut();
        let OpenTables {
            runs, run_tails, ..
        } = &mut *open;
        f(kept(runs, self.txn, table)?, run_tails)
    }

    /// Writes the batch's run tails into their tables: before the commit (a failure fails
    /// the batch).
    pub(crate) fn write_held_runs(&self) -> Result<(), StoreError> {
        let mut open = self.open.borrow_mut();
        if open.held_write_failed {
            return Err(StoreError::BatchAborted);
        }
        open.write_list_tails(None)?;
        open.write_event_tails(true, true)
    }

    /// Whether any index key of `tag` exists for `project` (one seek, then remembered for
    /// the batch until an index write under that prefix). For checks that every event or
    /// row of a job repeats and whose answer the job rarely changes, such as "has this
    /// project any webhook endpoint" (4.8 % of the writer per caught-up deposit).
    pub fn index_has_any(&self, tag: IndexTag, project: Uuid) -> Result<bool, StoreError> {
        let prefix = crate::index::prefix(tag, project, &[]);
        let key: [u8; 17] = prefix
            .as_slice()
            .try_into()
            .expect("a prefix without values is a tag byte and 16 bytes");
        if let Some(&any) = self.open.borrow().index_any.get(&key) {
            return Ok(any);
        }
        let end = crate::index::prefix_end(&prefix);
        let any = !self.index_range(&prefix, &end, 1, false)?.is_empty();
        self.open.borrow_mut().index_any.insert(key, any);
        Ok(any)
    }

    /// The project's last event sequence in this transaction (0: none), remembered for
    /// the batch ([`OpenTables::last_seq`](OpenTables)).
    pub(crate) fn last_sequence_memo(&self, project: Uuid) -> Result<u64, StoreError> {
        if let Some(&seq) = self.open.borrow().last_seq.get(&project.as_u128()) {
            return Ok(seq);
        }
        let seq = self.with_events(|t| table_reads::last_sequence_in(&*t, project))?;
        self.open
            .borrow_mut()
            .last_seq
            .insert(project.as_u128(), seq);
        Ok(seq)
    }

    /// Notes that event `seq` of `project` is written in this transaction.
    pub(crate) fn last_sequence_wrote(&self, project: Uuid, seq: u64) {
        self.open
            .borrow_mut()
            .last_seq
            .insert(project.as_u128(), seq);
    }

    /// Runs `f` on the kept handle of `event_type_runs` and the batch's tails of it (`f`
    /// must not use the context, and must leave every tail it does not write to its
    /// prefix's last run: [`crate::event_runs::add_to_tail`], [`crate::held::forget`]).
    pub(crate) fn with_event_type_runs<T>(
        &self,
        f: impl FnOnce(&mut RunsTable<'t>, &mut crate::event_runs::Tails) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.with_event_runs(false, f)
    }

    /// [`WriteCtx::with_event_type_runs`] of `event_resource_runs`.
    pub(crate) fn with_event_resource_runs<T>(
        &self,
        f: impl FnOnce(&mut RunsTable<'t>, &mut crate::event_runs::Tails) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.with_event_runs(true, f)
    }

    fn with_event_runs<T>(
        &self,
        resources: bool,
        f: impl FnOnce(&mut RunsTable<'t>, &mut crate::event_runs::Tails) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut open = self.open.borrow_mut();
        let OpenTables {
            event_type_runs,
            event_resource_runs,
            event_type_tails,
            event_resource_tails,
            ..
        } = &mut *open;
        let (handle, tails, def) = if resources {
            (
                event_resource_runs,
                event_resource_tails,
                EVENT_RESOURCE_RUNS,
            )
        } else {
            (event_type_runs, event_type_tails, EVENT_TYPE_RUNS)
        };
        if handle.is_none() {
            *handle = Some(self.txn.open_table(def)?);
        }
        f(handle.as_mut().expect("opened above"), tails)
    }

    kept!(
        /// Runs `f` on the kept handle of `unique` (`f` must not use the context).
        with_unique, unique, UNIQUE, &'static [u8], u128
    );
    kept!(
        /// Runs `f` on the kept handle of `accounts` (`f` must not use the context).
        with_accounts, accounts, ACCOUNTS, &'static [u8], (u128, u128)
    );
    kept!(
        /// Runs `f` on the kept handle of `events` (`f` must not use the context).
        with_events, events, EVENTS, (u128, u64), &'static [u8]
    );
    kept!(
        /// Runs `f` on the kept handle of `event_ids` (`f` must not use the context).
        with_event_ids, event_ids, EVENT_IDS, u128, (u128, u64)
    );
    kept!(
        /// Runs `f` on the kept handle of `counters` (`f` must not use the context).
        with_counters, counters, COUNTERS, &'static [u8], u64
    );
    kept!(
        /// Runs `f` on the kept handle of `sim_ops` (`f` must not use the context).
        with_sim_ops, sim_ops, SIM_OPS, SimOpKey, &'static [u8]
    );
    kept!(
        /// Runs `f` on the kept handle of `evm_block_deposits` (`f` must not use the
        /// context).
        with_block_deposits, block_deposits, EVM_BLOCK_DEPOSITS, (&'static str, u64, u128), ()
    );

    kept!(
        /// Runs `f` on the kept handle of `sim_heights` (`f` must not use the context).
        with_sim_heights, sim_heights, SIM_HEIGHTS, &'static str, u64
    );

    /// [`crate::ChainStateOps::sim_last_seq`] on the kept handle, remembered for the batch
    /// ([`OpenTables`]'s `sim_seq`; a test deposit asks it before writing its chain
    /// operation).
    pub fn sim_last_seq(&self, project: Uuid, chain: &str) -> Result<Option<u64>, StoreError> {
        let key = (project.as_u128(), Box::<str>::from(chain));
        if let Some(&seq) = self.open.borrow().sim_seq.get(&key) {
            return Ok(seq);
        }
        let seq = self.with_sim_ops(|t| table_reads::sim_last_seq_in(&*t, project, chain))?;
        self.open.borrow_mut().sim_seq.insert(key, seq);
        Ok(seq)
    }

    /// Notes that operation `seq` of (`project`, `chain`) is written in this transaction.
    pub(crate) fn sim_op_wrote(&self, project: Uuid, chain: &str, seq: u64) {
        let mut open = self.open.borrow_mut();
        // Only a remembered answer is moved on; one not looked up yet is read when asked.
        if let Some(last) = open
            .sim_seq
            .get_mut(&(project.as_u128(), Box::<str>::from(chain)))
        {
            *last = Some(last.map_or(seq, |l| l.max(seq)));
        }
    }

    /// [`crate::ChainStateOps::sim_height`] on the kept handle: the same answer without
    /// opening `sim_heights` per call (a test deposit asks it for its sweep's block; issue
    /// 16: about 2 % of the writer per test deposit). Inherent, so it is what a call on a
    /// `WriteCtx` resolves to.
    pub fn sim_height(&self, chain: &str) -> Result<u64, StoreError> {
        self.with_sim_heights(|t| Ok(t.get(chain)?.map(|v| v.value()).unwrap_or(0)))
    }

    /// The key of the ledger's holding of `wallet` in `asset` (`None`: no such wallet).
    pub(crate) fn holding_key_of(
        &self,
        wallet: Uuid,
        asset: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.get::<Wallet>(wallet)?.map(|w| w.holding_key(asset)))
    }

    /// The holding row under `key` (nothing held and no open sweep when absent).
    pub(crate) fn holding_at(&self, key: &[u8]) -> Result<Holding, StoreError> {
        self.with_accounts(|t| {
            Ok(t.get(key)?
                .map(|g| Holding::from_value(g.value()))
                .unwrap_or_default())
        })
    }

    /// The holding row of a wallet the caller has just read (`w`) in `asset`: the amount
    /// [`ReadOps::holding`] gives and the wallet's open sweep of `asset`. Its row is not
    /// read and decoded again for the key.
    pub fn holding_of(&self, w: &Wallet, asset: &str) -> Result<Holding, StoreError> {
        self.holding_at(&w.holding_key(asset))
    }

    /// [`WriteCtx::holding_of`] of a wallet known by id (default for a missing wallet).
    pub fn holding_row(&self, wallet: Uuid, asset: &str) -> Result<Holding, StoreError> {
        match self.holding_key_of(wallet, asset)? {
            Some(key) => self.holding_at(&key),
            None => Ok(Holding::default()),
        }
    }
}

/// The reads of [`ReadOps`] that every write makes, on the kept handles. Same results as
/// the default methods (which [`crate::ReadCtx`] uses).
impl ReadOps for WriteCtx<'_> {
    fn get<R: Row>(&self, id: Uuid) -> Result<Option<R>, StoreError> {
        self.with_rows(R::TABLE, |t| table_reads::row_of(&*t, id))
    }

    fn get_in<R: Row>(&self, project: Uuid, id: Uuid) -> Result<Option<R>, StoreError> {
        self.with_rows(R::TABLE, |t| table_reads::row_in(&*t, project, id))
    }

    fn unique_get(&self, key: &[u8]) -> Result<Option<Uuid>, StoreError> {
        self.with_unique(|t| Ok(t.get(key)?.map(|g| Uuid::from_u128(g.value()))))
    }

    fn count_of(&self, tag: IndexTag, project: Uuid) -> Result<u64, StoreError> {
        self.with_counters(|t| table_reads::count_in(&*t, tag, project))
    }

    fn index_keys(&self, range: &KeyRange) -> Result<Vec<Vec<u8>>, StoreError> {
        self.with_index(range.from, |t| table_reads::index_keys_in(&*t, range))
    }

    fn balance(&self, account: &Account) -> Result<Balance, StoreError> {
        self.with_accounts(|t| table_reads::balance_in(&*t, account))
    }

    fn last_sequence(&self, project: Uuid) -> Result<u64, StoreError> {
        self.last_sequence_memo(project)
    }

    fn holding(&self, wallet: Uuid, asset: &str) -> Result<u128, StoreError> {
        Ok(self.holding_row(wallet, asset)?.amount)
    }
}
