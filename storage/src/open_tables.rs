//! The handles a write batch keeps open ([`OpenTables`]): which tables, and how a kept
//! handle is closed (with the runs held ahead of it written first) when another opening of
//! its table needs it. The batch's reads and writes through them are in [`crate::ctx_cache`].

use redb::{Table, TableDefinition, TableHandle};

use crate::held::RunsTable;
use crate::schema::*;
use crate::StoreError;

pub(crate) type RowDef = TableDefinition<'static, u128, &'static [u8]>;
/// Handles kept open of tables of one key and value type, each with its definition.
pub(crate) type Kept<'t, K, V> = Vec<(TableDefinition<'static, K, V>, Table<'t, K, V>)>;
pub(crate) type RowTable<'t> = Table<'t, u128, &'static [u8]>;
pub(crate) type IndexTable<'t> = Table<'t, &'static [u8], ()>;
pub(crate) type RunsDef = TableDefinition<'static, &'static [u8], &'static [u8]>;
/// What closing a kept handle forgets of it ([`OpenTables::close`]).
type Forget<T> = fn(&mut T);
/// Key of `sim_ops`: (test project, chain, sequence).
pub(crate) type SimOpKey = (u128, &'static str, u64);

/// The kept handles of one batch (see the module documentation).
#[derive(Default)]
pub(crate) struct OpenTables<'t> {
    /// Tables of `u128 -> &[u8]` (every [`Row`] table, `journal`), by name.
    pub(crate) rows: Vec<(RowDef, RowTable<'t>)>,
    /// `index` and the tables of [`SPLIT_INDEXES`], by name.
    pub(crate) index: Vec<(IndexDef, IndexTable<'t>)>,
    pub(crate) event_type_runs: Option<Table<'t, &'static [u8], &'static [u8]>>,
    pub(crate) event_resource_runs: Option<Table<'t, &'static [u8], &'static [u8]>>,
    /// The last runs of the event types and resources this batch appended to, ahead of
    /// their rows ([`crate::event_runs::Tail`]), one map per table, written like
    /// `run_tails`.
    pub(crate) event_type_tails: crate::event_runs::Tails,
    pub(crate) event_resource_tails: crate::event_runs::Tails,
    /// Whether writing held runs failed where no job's write tracked it (an opening of
    /// their table, [`OpenTables::close`]): the runs are lost to the transaction, so the
    /// batch must not commit ([`WriteCtx::write_held_runs`]).
    pub(crate) held_write_failed: bool,
    /// The tables of [`RUN_INDEXES`] ([`crate::id_runs`]), by name.
    pub(crate) runs: Vec<(RunsDef, RunsTable<'t>)>,
    /// The last runs of the lists this batch appended to, ahead of their rows
    /// ([`crate::id_runs::Tail`]): written into their table before any other opening of
    /// it closes its kept handle ([`OpenTables::close`]), and before the commit
    /// ([`WriteCtx::write_held_runs`]). A tail is only ever made through its table's kept
    /// handle, so a table with tails always has one.
    pub(crate) run_tails: crate::id_runs::Tails,
    pub(crate) unique: Option<Table<'t, &'static [u8], u128>>,
    pub(crate) accounts: Option<Table<'t, &'static [u8], (u128, u128)>>,
    pub(crate) events: Option<Table<'t, (u128, u64), &'static [u8]>>,
    pub(crate) event_ids: Option<Table<'t, u128, (u128, u64)>>,
    pub(crate) counters: Option<Table<'t, &'static [u8], u64>>,
    pub(crate) sim_ops: Option<Table<'t, SimOpKey, &'static [u8]>>,
    pub(crate) block_deposits: Option<Table<'t, (&'static str, u64, u128), ()>>,
    pub(crate) sim_heights: Option<Table<'t, &'static str, u64>>,
    /// The last operation of each (test project, chain) in `sim_ops` as this transaction
    /// holds it (`None`: none), once looked up ([`WriteCtx::sim_last_seq`]): a test
    /// deposit's check that its chain's log is in order without a range seek per deposit.
    /// [`WriteCtx::sim_op_put`] keeps it in step; any other handle opened on
    /// `sim_ops` drops it. Dies with the batch, like `last_seq`.
    pub(crate) sim_seq: std::collections::HashMap<(u128, Box<str>), Option<u64>>,
    /// Each project's last event sequence as this transaction holds it, once looked up
    /// ([`WriteCtx::last_sequence`]): the next event's number without a range seek of
    /// `events` per event. [`WriteCtx::append`](crate::WriteCtx) keeps it in
    /// step with what it writes; any other handle opened on `events` drops it. It lives and
    /// dies with the batch's [`WriteCtx`]: a failed job that wrote poisons its batch, which
    /// is aborted whole, so no number it counted survives into another transaction.
    pub(crate) last_seq: std::collections::HashMap<u128, u64>,
    /// Whether any index key starts with a (tag, project) prefix ([`index::prefix`] with no
    /// values, 17 bytes), once looked up ([`WriteCtx::index_has_any`]). Every index write
    /// of this context drops the entry of its key's prefix; any other handle opened on an
    /// index table drops them all.
    pub(crate) index_any: std::collections::HashMap<[u8; 17], bool>,
}

impl OpenTables<'_> {
    /// Closes the kept handle of table `name`, if any; the runs the batch holds of that
    /// table (a list's or an event index's) are written through it first (an error leaves
    /// it open, and fails the batch at its end).
    pub(crate) fn close(&mut self, name: &str) -> Result<(), StoreError> {
        let written = if name == EVENT_TYPE_RUNS.name() || name == EVENT_RESOURCE_RUNS.name() {
            self.write_event_tails(
                name == EVENT_TYPE_RUNS.name(),
                name == EVENT_RESOURCE_RUNS.name(),
            )
        } else {
            self.write_list_tails(Some(name))
        };
        if written.is_err() {
            self.held_write_failed = true;
        }
        written?;
        self.rows.retain(|(d, _)| d.name() != name);
        self.index.retain(|(d, _)| d.name() != name);
        self.runs.retain(|(d, _)| d.name() != name);
        if name == INDEX.name() || SPLIT_INDEXES.iter().any(|(_, d)| d.name() == name) {
            self.index_any.clear();
        }
        // The handles kept one per table, each with what it memoizes of its table.
        let singles: [(&str, Forget<Self>); 10] = [
            (EVENT_TYPE_RUNS.name(), |o| o.event_type_runs = None),
            (EVENT_RESOURCE_RUNS.name(), |o| o.event_resource_runs = None),
            (UNIQUE.name(), |o| o.unique = None),
            (ACCOUNTS.name(), |o| o.accounts = None),
            (EVENTS.name(), |o| {
                o.events = None;
                o.last_seq.clear();
            }),
            (EVENT_IDS.name(), |o| o.event_ids = None),
            (COUNTERS.name(), |o| o.counters = None),
            (SIM_OPS.name(), |o| {
                o.sim_ops = None;
                o.sim_seq.clear();
            }),
            (EVM_BLOCK_DEPOSITS.name(), |o| o.block_deposits = None),
            (SIM_HEIGHTS.name(), |o| o.sim_heights = None),
        ];
        if let Some((_, forget)) = singles.iter().find(|(n, _)| *n == name) {
            forget(self);
        }
        Ok(())
    }

    /// Writes the event run tails of the type table and (or) of the resource table through
    /// their kept handles.
    pub(crate) fn write_event_tails(
        &mut self,
        types: bool,
        resources: bool,
    ) -> Result<(), StoreError> {
        let OpenTables {
            event_type_runs,
            event_resource_runs,
            event_type_tails,
            event_resource_tails,
            ..
        } = self;
        for (on, handle, tails) in [
            (types, event_type_runs, event_type_tails),
            (resources, event_resource_runs, event_resource_tails),
        ] {
            if on && !tails.is_empty() {
                // Tails are made through their table's kept handle, which only `close`
                // drops, after writing them: never without one. Were it so, the batch
                // fails rather than commit without them.
                let t = handle.as_mut().ok_or_else(|| {
                    StoreError::Corrupt("event runs held without their table's handle".into())
                })?;
                crate::held::forget_all(t, tails, |_| true)?;
            }
        }
        Ok(())
    }

    /// Writes the run tails of table `only` (of every table: `None`) through the kept
    /// handles.
    pub(crate) fn write_list_tails(&mut self, only: Option<&str>) -> Result<(), StoreError> {
        if self.run_tails.is_empty() {
            return Ok(());
        }
        let OpenTables {
            runs, run_tails, ..
        } = self;
        for (def, t) in runs.iter_mut() {
            if only.is_none_or(|n| n == def.name()) {
                crate::id_runs::write_tails(t, run_tails, def.name())?;
            }
        }
        // As for the event runs (above): never left over, and the batch fails if one is.
        if only.is_none() && !run_tails.is_empty() {
            return Err(StoreError::Corrupt(
                "list runs held without their table's handle".into(),
            ));
        }
        Ok(())
    }
}
