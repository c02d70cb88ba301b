//! Read and write contexts: typed access to the tables of [`crate::schema`].
//!
//! [`ReadOps`] holds every read, written once for both contexts. Writes exist only on
//! [`WriteCtx`]; each marks the running job dirty so the writer can tell a clean refusal from
//! a half-done change.

use std::collections::BTreeMap;

use redb::{
    Key, ReadTransaction, ReadableTable, TableDefinition, TableHandle, Value, WriteTransaction,
};
use uuid::Uuid;

use crate::codec::{decode, decode_keyed, encode, encode_record};
use crate::index::{self, IndexTag};
use crate::ledger::{self, Account, Balance, JournalEntry, LedgerError};
use crate::records::{Event, IdempotencyRecord, Row, Wallet};
use crate::schema::*;
use crate::table_reads::*;
use crate::{CommitNotice, StoreError, Touched};

/// One page of a list: rows newest first (or as asked) and whether more follow.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub has_more: bool,
}

/// Anything that can open a table for reading.
pub trait Reader {
    fn open<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<impl ReadableTable<K, V> + '_, StoreError>;
}

/// A read-only snapshot.
pub struct ReadCtx {
    txn: ReadTransaction,
    /// The tables this snapshot opened, each opened once ([`crate::read_tables`]). Shared
    /// through `Rc`, so a snapshot is used on the thread that began it (`ReadCtx` is
    /// neither `Send` nor `Sync`; every reader runs inside one blocking closure).
    pub(crate) tables: crate::read_tables::ReadTables,
}

impl ReadCtx {
    pub(crate) fn new(txn: ReadTransaction) -> Self {
        ReadCtx {
            txn,
            tables: Default::default(),
        }
    }

    pub(crate) fn txn(&self) -> &ReadTransaction {
        &self.txn
    }
}

impl Reader for ReadCtx {
    fn open<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<impl ReadableTable<K, V> + '_, StoreError> {
        self.tables.open(&self.txn, def)
    }
}

/// The write transaction of one batch, shared by the jobs in it.
pub struct WriteCtx<'t> {
    pub(crate) txn: &'t WriteTransaction,
    /// Handles kept open for the batch ([`crate::ctx_cache`]).
    pub(crate) open: std::cell::RefCell<crate::open_tables::OpenTables<'t>>,
    job_dirty: bool,
    storage_failed: bool,
    notice: CommitNotice,
    touched: Vec<Touched>,
    now: i64,
}

impl Reader for WriteCtx<'_> {
    fn open<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<impl ReadableTable<K, V> + '_, StoreError> {
        // One handle per table and transaction: a kept one is closed first.
        self.open.borrow_mut().close(def.name())?;
        Ok(self.txn.open_table(def)?)
    }
}

/// Reads shared by both contexts.
pub trait ReadOps: Reader {
    /// A row by id; `None` when absent.
    fn get<R: Row>(&self, id: Uuid) -> Result<Option<R>, StoreError> {
        row_of(&self.open(R::TABLE)?, id)
    }

    /// A row by id that must belong to `project` (another project's row reads as absent,
    /// SPEC.md section 1 convention 6).
    ///
    /// A row that cannot be decoded is [`StoreError::Corrupt`] only when it is `project`'s
    /// own (judged on its `project_id` field); another project's reads as absent, so the
    /// error never confirms that the row exists for someone else.
    fn get_in<R: Row>(&self, project: Uuid, id: Uuid) -> Result<Option<R>, StoreError> {
        row_in(&self.open(R::TABLE)?, project, id)
    }

    /// Row id under a unique key.
    fn unique_get(&self, key: &[u8]) -> Result<Option<Uuid>, StoreError> {
        let t = self.open(UNIQUE)?;
        let v = t.get(key)?;
        Ok(v.map(|g| Uuid::from_u128(g.value())))
    }

    /// Ids under an index prefix, newest first, strictly older than `before` when given.
    /// Stops after `limit` ids accepted by `keep`.
    fn scan_ids(
        &self,
        prefix: &[u8],
        before: Option<Uuid>,
        limit: usize,
        mut keep: impl FnMut(Uuid) -> Result<bool, StoreError>,
    ) -> Result<Page<Uuid>, StoreError> {
        let source = id_source(self, prefix)?;
        let mut items = Vec::new();
        let mut has_more = false;
        for id in source.ids_under(prefix, before)? {
            let id = id?;
            if keep(id)? {
                if items.len() == limit {
                    has_more = true;
                    break;
                }
                items.push(id);
            }
        }
        Ok(Page { items, has_more })
    }

    /// Rows under an index prefix, newest first, filtered by `keep`.
    fn list<R: Row>(
        &self,
        prefix: &[u8],
        before: Option<Uuid>,
        limit: usize,
        keep: impl Fn(&R) -> bool,
    ) -> Result<Page<R>, StoreError> {
        Ok(self
            .list_within(prefix, before, limit, keep, usize::MAX)?
            .unwrap_or(Page {
                items: Vec::new(),
                has_more: false,
            }))
    }

    /// [`ReadOps::list`] passing over at most `max_visits` index entries: `None` when the
    /// page is not complete by then (a filter that skips many rows), so that the caller
    /// can read it where a long scan is allowed.
    fn list_within<R: Row>(
        &self,
        prefix: &[u8],
        before: Option<Uuid>,
        limit: usize,
        keep: impl Fn(&R) -> bool,
        max_visits: usize,
    ) -> Result<Option<Page<R>>, StoreError> {
        let source = id_source(self, prefix)?;
        let rows = self.open(R::TABLE)?;
        let mut items = Vec::new();
        let mut has_more = false;
        for (visits, id) in source.ids_under(prefix, before)?.enumerate() {
            if visits == max_visits {
                return Ok(None);
            }
            let id = id?;
            let Some(v) = rows.get(id.as_u128())? else {
                return Err(StoreError::Corrupt(format!(
                    "index points at missing row {id}"
                )));
            };
            let Some(r) = decode_listed_row::<R>(id, v.value()) else {
                continue;
            };
            if keep(&r) {
                if items.len() == limit {
                    has_more = true;
                    break;
                }
                items.push(r);
            }
        }
        Ok(Some(Page { items, has_more }))
    }

    /// Number of keys of a counted index (`IndexTag::is_counted`) for a project.
    fn count_of(&self, tag: IndexTag, project: Uuid) -> Result<u64, StoreError> {
        count_in(&self.open(COUNTERS)?, tag, project)
    }

    /// Raw index keys in `[from, to)`, ascending unless `descending`, at most `limit` of
    /// them, from the table of `from`'s tag ([`index_table_of`]; `to` bounds that tag's
    /// keys). Not for a list kept as runs ([`crate::id_runs::is_run_prefix`]), whose
    /// table holds none: [`ReadOps::scan_ids`] reads those.
    fn index_range(
        &self,
        from: &[u8],
        to: &[u8],
        limit: usize,
        descending: bool,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        debug_assert!(!crate::id_runs::is_run_prefix(from), "a list kept as runs");
        index_keys_in(
            &self.open(index_table_of(from))?,
            from,
            to,
            limit,
            descending,
        )
    }

    /// Number of keys under an index prefix (bounded by `cap`); not for a list kept as
    /// runs ([`crate::id_runs::is_run_prefix`]).
    fn count_prefix(&self, prefix: &[u8], cap: usize) -> Result<usize, StoreError> {
        debug_assert!(
            !crate::id_runs::is_run_prefix(prefix),
            "a list kept as runs"
        );
        let t = self.open(index_table_of(prefix))?;
        let end = index::prefix_end(prefix);
        let mut n = 0;
        for e in t.range::<&[u8]>(prefix..end.as_slice())? {
            e?;
            n += 1;
            if n >= cap {
                break;
            }
        }
        Ok(n)
    }

    /// Posted totals of one account (zero when never posted to).
    fn balance(&self, account: &Account) -> Result<Balance, StoreError> {
        balance_in(&self.open(ACCOUNTS)?, account)
    }

    /// Every account of one customer (nil: the project's own accounts).
    fn accounts_of(
        &self,
        project: Uuid,
        customer: Uuid,
    ) -> Result<Vec<(Account, Balance)>, StoreError> {
        let t = self.open(ACCOUNTS)?;
        let prefix = Account::customer_prefix(project, customer);
        let end = index::prefix_end(&prefix);
        let mut out = Vec::new();
        for e in t.range::<&[u8]>(prefix.as_slice()..end.as_slice())? {
            let (k, v) = e?;
            if ledger::parse_holding_key(k.value()).is_some() {
                continue;
            }
            let a = Account::from_key(k.value())
                .ok_or_else(|| StoreError::Corrupt("bad account key".into()))?;
            let (debits, credits) = v.value();
            out.push((a, Balance { debits, credits }));
        }
        Ok(out)
    }

    /// Every ledger account of a project, its customers' and its own (holdings left out).
    fn project_accounts(&self, project: Uuid) -> Result<Vec<(Account, Balance)>, StoreError> {
        let t = self.open(ACCOUNTS)?;
        let prefix = project.as_bytes().to_vec();
        let end = index::prefix_end(&prefix);
        let mut out = Vec::new();
        for e in t.range::<&[u8]>(prefix.as_slice()..end.as_slice())? {
            let (k, v) = e?;
            if ledger::parse_holding_key(k.value()).is_some() {
                continue;
            }
            let a = Account::from_key(k.value())
                .ok_or_else(|| StoreError::Corrupt("bad account key".into()))?;
            let (debits, credits) = v.value();
            out.push((a, Balance { debits, credits }));
        }
        Ok(out)
    }

    /// A journal entry by id.
    fn journal_entry(&self, id: Uuid) -> Result<Option<JournalEntry>, StoreError> {
        let t = self.open(JOURNAL)?;
        let v = t.get(id.as_u128())?;
        v.map(|g| decode_keyed(id.as_u128(), g.value())).transpose()
    }

    /// An event by its `evt_` id, within `project`. An id minted since schema 12 names
    /// its sequence ([`event_ulid`]): the event at that sequence is the one when its stored
    /// id is the same ULID. Any other id (an event of an earlier schema, or of a sequence
    /// too large to name) is looked up in `event_ids`.
    fn event(&self, project: Uuid, id: &str) -> Result<Option<Event>, StoreError> {
        let Some(ulid) = event_ulid_of(id) else {
            return Ok(None);
        };
        // The row at the sequence the id names may not decode: it is the event asked for
        // only if no `event_ids` row names another, and then its error is the answer (an
        // older id whose random bits happen to name a damaged row still reads).
        let (named, undecodable) = match event_ulid_sequence(ulid) {
            Some(seq) => {
                match self.event_where(project, seq, |e| event_ulid_of(&e.id) == Some(ulid)) {
                    Ok(ev) => (ev, None),
                    Err(StoreError::Corrupt(e)) => (None, Some(StoreError::Corrupt(e))),
                    Err(e) => return Err(e),
                }
            }
            None => (None, None),
        };
        let found = match named {
            Some(ev) => Some(ev),
            None => {
                let ids = self.open(EVENT_IDS)?;
                let Some(loc) = ids.get(ulid)? else {
                    return undecodable.map_or(Ok(None), Err);
                };
                let (p, seq) = loc.value();
                if p != project.as_u128() {
                    return Ok(None);
                }
                self.event_at(project, seq)?
            }
        };
        Ok(found.filter(|e| !e.is_billing_line()))
    }

    /// The event at (project, sequence), with its deposit's row when it is a deposit event
    /// of schema 6 ([`Event::deposit_row`]).
    fn event_at(&self, project: Uuid, seq: u64) -> Result<Option<Event>, StoreError> {
        self.event_where(project, seq, |_| true)
    }

    /// [`ReadOps::event_at`] when the decoded row passes `accept` (`None` when it does not).
    fn event_where(
        &self,
        project: Uuid,
        seq: u64,
        accept: impl Fn(&Event) -> bool,
    ) -> Result<Option<Event>, StoreError> {
        let t = self.open(EVENTS)?;
        let Some(v) = t.get((project.as_u128(), seq))? else {
            return Ok(None);
        };
        let mut ev = decode::<Event>(v.value())?;
        drop(v);
        drop(t);
        event_id_in_full(&mut ev, seq);
        if !accept(&ev) {
            return Ok(None);
        }
        self.complete_event(project, seq, ev).map(Some)
    }

    /// A decoded event row made whole: its key's project and sequence, and for an event
    /// stored in compact form (a deposit event of schema 6, a payout or wallet event of
    /// schema 10) its resource's row as it was at the event ([`Event::row`]; left `None`,
    /// and logged, when the row is missing or does not decode: the event still reads,
    /// `appliance verify` reports it).
    fn complete_event(&self, project: Uuid, seq: u64, mut ev: Event) -> Result<Event, StoreError> {
        use crate::records::{Customer, Deposit, Payout, ResourceRow, ResourceState, Wallet};
        ev.project_id = project;
        ev.sequence = seq;
        event_id_in_full(&mut ev, seq);
        ev.row = match (&ev.deposit, &ev.state) {
            (Some(st), _) => self
                .event_resource::<Deposit>(project, seq, &ev.resource_id)?
                .map(|d| ResourceRow::Deposit(Box::new(st.apply(d)))),
            (None, Some(ResourceState::Payout(st))) => self
                .event_resource::<Payout>(project, seq, &ev.resource_id)?
                .map(|p| ResourceRow::Payout(Box::new(st.apply(p)))),
            (None, Some(ResourceState::Wallet)) => self
                .event_resource::<Wallet>(project, seq, &ev.resource_id)?
                .map(|w| ResourceRow::Wallet(Box::new(w))),
            (None, Some(ResourceState::Customer)) => self
                .event_resource::<Customer>(project, seq, &ev.resource_id)?
                .map(|c| ResourceRow::Customer(Box::new(c))),
            (None, Some(ResourceState::CustomerAt(c))) => Some(ResourceRow::Customer(c.clone())),
            (None, None) => None,
        };
        // A credited deposit's entry is its row's (schema 14, `DepositState::ledger_tx_id`);
        // without the row, none is shown.
        if let Some(st) = &mut ev.deposit {
            if st.ledger_tx_id == Some(crate::records::DepositState::CREDITED) {
                st.ledger_tx_id = match &ev.row {
                    Some(ResourceRow::Deposit(d)) => d.ledger_tx_id,
                    _ => None,
                };
            }
        }
        Ok(ev)
    }

    /// The row of a compact event's resource (see [`ReadOps::complete_event`]): `None`,
    /// logged, when it is missing, not the project's, or does not decode.
    fn event_resource<R: Row>(
        &self,
        project: Uuid,
        seq: u64,
        resource_id: &str,
    ) -> Result<Option<R>, StoreError> {
        let missing = || {
            tracing::error!(
                %project,
                sequence = seq,
                resource = %resource_id,
                table = R::TABLE.name(),
                "an event's resource row is missing; its data is rendered from the event alone (appliance verify reports it)"
            )
        };
        let Ok(id) = Uuid::parse_str(resource_id) else {
            missing();
            return Ok(None);
        };
        match self.get_in::<R>(project, id) {
            Ok(Some(row)) => Ok(Some(row)),
            Ok(None) => {
                missing();
                Ok(None)
            }
            // Logged once, as undecodable (not also as missing).
            Err(StoreError::Corrupt(e)) => {
                log_undecodable(R::TABLE.name(), &id, &e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Latest event sequence of a project (0 when none): the key of its last event. Events
    /// are never deleted, so this is exact without a counter row of its own (schema 4).
    fn last_sequence(&self, project: Uuid) -> Result<u64, StoreError> {
        last_sequence_in(&self.open(EVENTS)?, project)
    }

    /// Events of a project ordered by sequence (descending unless `ascending`), after
    /// `cursor` in that order, with optional type and resource filters. Billing lines
    /// ([`crate::records::BILLING_LINE`]) are not events and are left out.
    fn list_events(
        &self,
        project: Uuid,
        types: &[String],
        resource_id: Option<&str>,
        cursor: Option<u64>,
        limit: usize,
        ascending: bool,
    ) -> Result<Page<Event>, StoreError> {
        self.list_log(project, types, resource_id, cursor, limit, ascending, false)
    }

    /// [`ReadOps::list_events`], with the billing lines among the events when `lines` (the
    /// event stream's view of the log).
    #[allow(clippy::too_many_arguments)]
    fn list_log(
        &self,
        project: Uuid,
        types: &[String],
        resource_id: Option<&str>,
        cursor: Option<u64>,
        limit: usize,
        ascending: bool,
        lines: bool,
    ) -> Result<Page<Event>, StoreError> {
        let p = project.as_u128();
        let (lo, hi) = match (cursor, ascending) {
            (Some(c), true) => (c.saturating_add(1), u64::MAX),
            (Some(c), false) => (0, c),
            (None, _) => (0, u64::MAX),
        };
        let mut items = Vec::new();
        let mut has_more = false;
        let mut push = |e: Event, items: &mut Vec<Event>| -> bool {
            if items.len() == limit {
                has_more = true;
                return false;
            }
            items.push(e);
            true
        };
        // The sequences an index names, in list order; every event read is checked
        // against the filters all the same (a type hash or a UUID resource key may name
        // another type's or another project's event).
        let indexed = if let Some(r) = resource_id {
            Some((
                EVENT_RESOURCE_RUNS,
                index::event_resource_prefix(project, r),
            ))
        } else if types.len() == 1 {
            Some((
                EVENT_TYPE_RUNS,
                crate::event_runs::type_prefix(project, &types[0]).to_vec(),
            ))
        } else {
            None
        };
        if let Some((table, prefix)) = indexed {
            let runs = self.open(table)?;
            let seqs = crate::event_runs::seqs(&runs, &prefix, lo, hi, ascending)?;
            for seq in seqs {
                let seq = seq?;
                let ev = match self.event_at(project, seq) {
                    Ok(Some(ev)) => ev,
                    Ok(None) => continue,
                    Err(StoreError::Corrupt(e)) => {
                        log_undecodable("events", &format_args!("{project}/{seq}"), &e);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                // A UUID resource's key holds no project: the sequence may be another
                // project's event, so the event read must be about that resource.
                if (lines || !ev.is_billing_line())
                    && (types.is_empty() || types.contains(&ev.event_type))
                    && resource_id.is_none_or(|r| ev.resource_id == r)
                    && !push(ev, &mut items)
                {
                    break;
                }
            }
        } else {
            let t = self.open(EVENTS)?;
            let range = t.range((p, lo)..(p, hi))?;
            let iter: Box<dyn Iterator<Item = _>> = if ascending {
                Box::new(range)
            } else {
                Box::new(range.rev())
            };
            for e in iter {
                let (k, v) = e?;
                let (_, seq) = k.value();
                let Some(ev) =
                    decode_listed::<Event>("events", &format_args!("{project}/{seq}"), v.value())
                else {
                    continue;
                };
                let ev = self.complete_event(project, seq, ev)?;
                if (lines || !ev.is_billing_line())
                    && (types.is_empty() || types.contains(&ev.event_type))
                    && !push(ev, &mut items)
                {
                    break;
                }
            }
        }
        Ok(Page { items, has_more })
    }

    /// The stored answer of an idempotent request, if any (expired or not: see caller).
    fn idempotency_get(&self, key: &[u8]) -> Result<Option<IdempotencyRecord>, StoreError> {
        let t = self.open(IDEMPOTENCY)?;
        let v = t.get(key)?;
        v.map(|g| decode(g.value())).transpose()
    }

    /// Ledger's view of what sits on a deposit address: confirmed deposits less sweeps (0
    /// for a wallet that does not exist). Kept beside the customer's accounts
    /// ([`ledger::holding_key`]).
    fn holding(&self, wallet: Uuid, asset: &str) -> Result<u128, StoreError> {
        let Some(w) = self.get::<Wallet>(wallet)? else {
            return Ok(0);
        };
        let t = self.open(ACCOUNTS)?;
        let key = w.holding_key(asset);
        let v = t.get(key.as_slice())?;
        Ok(v.map(|g| g.value().0).unwrap_or(0))
    }

    /// Simulated on-chain balance of an address (test mode's chain).
    fn sim_balance(&self, chain: &str, address: &str, asset: &str) -> Result<u128, StoreError> {
        let t = self.open(SIM_BALANCES)?;
        let v = t.get(sim_key(chain, address, asset).as_slice())?;
        Ok(v.map(|g| g.value()).unwrap_or(0))
    }

    /// A value of the `meta` table.
    fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let t = self.open(META)?;
        let v = t.get(key)?;
        Ok(v.map(|g| g.value().to_vec()))
    }

    /// Whether the live sweep `sweep` was requested through `POST /v1/sweeps` (it goes out
    /// whatever the chain's automatic threshold says).
    fn sweep_requested(&self, sweep: Uuid) -> Result<bool, StoreError> {
        let t = self.open(SWEEP_REQUESTS)?;
        let v = t.get(sweep.as_u128())?.is_some();
        Ok(v)
    }

    /// How far a test project's clock runs ahead of real time, in microseconds (0 when
    /// never moved; DECISIONS.md section 15).
    fn test_clock_offset(&self, project: Uuid) -> Result<i64, StoreError> {
        let t = self.open(TEST_CLOCKS)?;
        let v = t.get(project.as_u128())?;
        Ok(v.map(|g| g.value()).unwrap_or(0))
    }

    /// The sender class a test transfer claimed for `from` on `chain`, if any.
    fn test_sender_class(&self, chain: &str, from: &str) -> Result<Option<String>, StoreError> {
        let t = self.open(TEST_SENDERS)?;
        let key = format!("{chain}/{}", from.to_ascii_lowercase());
        let v = t.get(key.as_str())?;
        Ok(v.map(|g| g.value().to_string()))
    }

    /// New addresses issued by `project` on UTC day `day` (days since the Unix epoch).
    fn addresses_issued(&self, project: Uuid, day: u32) -> Result<u32, StoreError> {
        let t = self.open(ADDRESS_QUOTA)?;
        let v = t.get((project.as_u128(), day))?;
        Ok(v.map(|g| g.value()).unwrap_or(0))
    }
}

/// Typed values of any table of `K -> &[u8]` through [`crate::codec`], for tables that are
/// not [`Row`]s (chain-adapter state, queues, documents keyed by something other than an
/// id): a table added later stores its values with [`WriteCtx::value_put`] and reads them
/// here, and so gets the current encoding, the old-encoding reads and the version byte for
/// free. List it in [`crate::schema::for_each_record_table`] so that `verify` decodes it.
pub trait ValueOps: Reader {
    /// The value under `key`, decoded as `T`; `None` when absent, [`StoreError::Corrupt`]
    /// when it does not decode.
    fn value_get<K, T>(
        &self,
        def: TableDefinition<K, &'static [u8]>,
        key: K::SelfType<'_>,
    ) -> Result<Option<T>, StoreError>
    where
        K: Key + 'static,
        T: serde::de::DeserializeOwned,
    {
        let t = self.open(def)?;
        let v = t.get(key)?;
        v.map(|g| decode(g.value())).transpose()
    }
}

impl<R: Reader> ValueOps for R {}

impl ReadOps for ReadCtx {}
// `impl ReadOps for WriteCtx` is in `ctx_cache`: the hot reads use the kept handles.

/// Decodes a row for a reader of many rows (lists, pages, scans): a row that cannot be
/// decoded is logged and passed over, never the end of the whole read (`appliance verify`
/// reports it).
fn decode_listed<T: serde::de::DeserializeOwned>(
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
fn decode_listed_row<R: Row>(id: Uuid, bytes: &[u8]) -> Option<R> {
    match decode_keyed(id.as_u128(), bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            log_undecodable(R::TABLE.name(), &id, &e.to_string());
            None
        }
    }
}

fn log_undecodable(table: &str, key: &dyn std::fmt::Display, error: &str) {
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
enum IdSource<K, R> {
    Keys(K),
    Runs(R),
}

/// The [`IdSource`] of `prefix`, its table opened. (Its type names the `impl Trait` tables
/// of [`Reader::open`], which no type alias can.)
#[allow(clippy::type_complexity)]
fn id_source<'a, Rd: Reader + ?Sized>(
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
    fn ids_under(
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
fn upper_bound(prefix: &[u8], before: Option<Uuid>) -> Vec<u8> {
    match before {
        Some(c) => [prefix, c.as_bytes().as_slice()].concat(),
        None => index::prefix_end(prefix),
    }
}

pub(crate) fn sim_key(chain: &str, address: &str, asset: &str) -> Vec<u8> {
    index::prefix(
        IndexTag::Projects,
        Uuid::nil(),
        &[
            chain.as_bytes(),
            address.to_ascii_lowercase().as_bytes(),
            asset.as_bytes(),
        ],
    )
}

impl<'t> WriteCtx<'t> {
    pub(crate) fn new(txn: &'t WriteTransaction) -> Self {
        WriteCtx {
            txn,
            open: Default::default(),
            job_dirty: false,
            storage_failed: false,
            notice: CommitNotice::default(),
            touched: Vec::new(),
            now: crate::now_us(),
        }
    }

    pub(crate) fn begin_job(&mut self) {
        self.job_dirty = false;
        self.now = crate::now_us();
    }
    pub(crate) fn job_dirty(&self) -> bool {
        self.job_dirty
    }

    /// Whether the current job (the closure passed to [`crate::Store::write`]) has written
    /// anything yet. A job that refuses after writing poisons its batch; one that wants to
    /// write something whatever its outcome (test mode's chain operation) checks this first.
    pub fn job_wrote(&self) -> bool {
        self.job_dirty
    }
    pub(crate) fn storage_failed(&self) -> bool {
        self.storage_failed
    }
    pub(crate) fn take_notice(&mut self) -> CommitNotice {
        std::mem::take(&mut self.notice)
    }
    pub(crate) fn take_touched(&mut self) -> Vec<Touched> {
        std::mem::take(&mut self.touched)
    }
    /// Notes that a row (or a project's test clock, [`Touched::is_test_clock`]) changed, for
    /// the [`crate::Store::on_commit`] hooks.
    pub(crate) fn touch(&mut self, t: Touched) {
        self.touched.push(t);
    }

    /// The transaction's clock (Unix microseconds), fixed when the job starts.
    pub fn now_us(&self) -> i64 {
        self.now
    }

    pub(crate) fn track<T>(&mut self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        self.job_dirty = true;
        if r.is_err() {
            self.storage_failed = true;
        }
        r
    }

    /// Inserts or replaces a row and keeps its index entries in step with its fields.
    pub fn put<R: Row + 'static>(&mut self, row: &R) -> Result<(), StoreError> {
        let old = self.get::<R>(row.id());
        let old = self.track(old)?;
        self.put_replacing(old.as_ref(), row)
    }

    /// [`WriteCtx::put`] of a row whose stored version the caller has just read (`old`,
    /// `None` when absent): the row is not read and decoded again to find the index
    /// entries it had. `old` must be what the store holds under `row`'s id.
    pub fn put_replacing<R: Row + 'static>(
        &mut self,
        old: Option<&R>,
        row: &R,
    ) -> Result<(), StoreError> {
        self.touched
            .push(Touched::row(row, old.and_then(Row::parent_id)));
        let r = self
            .before_rewrite(old)
            .and_then(|()| self.put_over_encoded(old, row, &encode_record(row)));
        self.track(r)
    }

    /// What must happen before stored row `old` is rewritten or removed: a customer's
    /// compact `customer.created` takes the row as it is ([`WriteCtx::pin_customer_created`]).
    fn before_rewrite<R: Row + 'static>(&self, old: Option<&R>) -> Result<(), StoreError> {
        let old = old.map(|o| o as &dyn std::any::Any);
        match old.and_then(|o| o.downcast_ref::<crate::records::Customer>()) {
            Some(c) => self.pin_customer_created(c),
            None => Ok(()),
        }
    }

    /// [`WriteCtx::put_replacing`]`(None, row)` of a row with a new id (nothing stored
    /// under it), its value encoded beforehand off the writer thread ([`EncodedRow::of`]
    /// of this very `row`: debug builds check it).
    pub fn put_new_encoded<R: Row + 'static>(
        &mut self,
        row: &R,
        encoded: &EncodedRow<R>,
    ) -> Result<(), StoreError> {
        debug_assert!(
            encode_record(row) == encoded.bytes,
            "an encoded row is the encoding of the row it is written with"
        );
        self.touched.push(Touched::row(row, None));
        let r = self.put_over_encoded(None, row, &encoded.bytes);
        self.track(r)
    }

    fn put_over_encoded<R: Row>(
        &self,
        old: Option<&R>,
        row: &R,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let new_keys = row.index_keys();
        let old_keys = old.map(|o| o.index_keys()).unwrap_or_default();
        let mut counted: Vec<(Vec<u8>, bool)> = Vec::new();
        for k in &old_keys {
            if !new_keys.contains(k) && self.row_index_remove(k)? {
                if let Some(c) = index::counter_key(k) {
                    counted.push((c.to_vec(), false));
                }
            }
        }
        for k in &new_keys {
            // An entry the stored row already has is in the index: inserting it again
            // would rewrite (dirty) its page for nothing (issue 16: pages per commit).
            if old_keys.contains(k) {
                continue;
            }
            if self.row_index_insert(k)? {
                if let Some(c) = index::counter_key(k) {
                    counted.push((c.to_vec(), true));
                }
            }
        }
        if !counted.is_empty() {
            self.with_counters(|counters| {
                for (c, up) in counted {
                    let cur = counters.get(c.as_slice())?.map(|g| g.value()).unwrap_or(0);
                    let next = if up { cur + 1 } else { cur.saturating_sub(1) };
                    counters.insert(c.as_slice(), next)?;
                }
                Ok(())
            })?;
        }
        self.with_rows(R::TABLE, |t| {
            t.insert(row.id().as_u128(), bytes)?;
            Ok(())
        })
    }

    /// Writes index key `k` of a row: into its tag's index table, or into its run
    /// ([`crate::id_runs::run_of_key`], schema 14 and 15). Whether it was not there.
    fn row_index_insert(&self, k: &[u8]) -> Result<bool, StoreError> {
        if let Some(runs) = crate::id_runs::run_of_key(k) {
            return self.with_runs(runs.table, |t, tails| {
                crate::id_runs::add_to_tail(t, tails, k)
            });
        }
        self.with_index_write(k, |idx| Ok(idx.insert(k, ())?.is_none()))
    }

    /// Removes index key `k` of a row, wherever [`WriteCtx::row_index_insert`] writes it.
    /// Whether it was there.
    fn row_index_remove(&self, k: &[u8]) -> Result<bool, StoreError> {
        if let Some(runs) = crate::id_runs::run_of_key(k) {
            return self.with_runs(runs.table, |t, tails| {
                if let Some((prefix, _)) = crate::id_runs::split_key(k) {
                    crate::held::forget(t, tails, prefix)?;
                }
                crate::id_runs::remove(t, k)
            });
        }
        self.with_index_write(k, |idx| Ok(idx.remove(k)?.is_some()))
    }

    /// Removes a row and all its index entries; returns it (`None` when absent, nothing
    /// written).
    pub fn delete<R: Row + 'static>(&mut self, id: Uuid) -> Result<Option<R>, StoreError> {
        let Some(old) = self.get::<R>(id)? else {
            return Ok(None);
        };
        self.touched.push(Touched::row(&old, None));
        let r = (|| {
            self.before_rewrite(Some(&old))?;
            let mut counted: Vec<Vec<u8>> = Vec::new();
            for k in old.index_keys() {
                if self.row_index_remove(&k)? {
                    if let Some(c) = index::counter_key(&k) {
                        counted.push(c.to_vec());
                    }
                }
            }
            if !counted.is_empty() {
                self.with_counters(|counters| {
                    for c in counted {
                        let cur = counters.get(c.as_slice())?.map(|g| g.value()).unwrap_or(0);
                        counters.insert(c.as_slice(), cur.saturating_sub(1))?;
                    }
                    Ok(())
                })?;
            }
            self.with_rows(R::TABLE, |t| {
                t.remove(id.as_u128())?;
                Ok(())
            })
        })();
        self.track(r)?;
        Ok(Some(old))
    }

    /// Stores `value` under `key` in `def` through [`crate::codec::encode`] (see
    /// [`ValueOps`]).
    pub fn value_put<K, T>(
        &mut self,
        def: TableDefinition<K, &'static [u8]>,
        key: K::SelfType<'_>,
        value: &T,
    ) -> Result<(), StoreError>
    where
        K: Key + 'static,
        T: serde::Serialize + ?Sized,
    {
        let bytes = encode(value);
        let r = (|| {
            let mut t = self.table(def)?;
            t.insert(key, bytes.as_slice())?;
            Ok(())
        })();
        self.track(r)
    }

    /// Adds a bare index key (markers that belong to no row), to the table of its tag
    /// ([`index_table_of`]).
    pub fn index_insert(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let r = self.with_index_write(key, |t| {
            t.insert(key, ())?;
            Ok(())
        });
        self.track(r)
    }

    /// Removes a bare index key.
    pub fn index_remove(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let r = self.with_index_write(key, |t| {
            t.remove(key)?;
            Ok(())
        });
        self.track(r)
    }

    /// Claims a unique key for `id`.
    pub fn unique_put(&mut self, key: &[u8], id: Uuid) -> Result<(), StoreError> {
        let r = self.with_unique(|t| {
            t.insert(key, id.as_u128())?;
            Ok(())
        });
        self.track(r)
    }

    /// Releases a unique key.
    pub fn unique_remove(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let r = self.with_unique(|t| {
            t.remove(key)?;
            Ok(())
        });
        self.track(r)
    }

    /// Posts a journal entry. Checks balance and the no-negative rule before writing
    /// anything, so an `Err` leaves the job clean.
    pub fn post(&mut self, entry: &JournalEntry) -> Result<Result<(), LedgerError>, StoreError> {
        let mut balances = BTreeMap::new();
        for p in &entry.postings {
            balances.insert(p.account.clone(), self.balance(&p.account)?);
        }
        if let Err(e) = ledger::apply(entry, &mut balances) {
            return Ok(Err(e));
        }
        let r = (|| {
            self.with_accounts(|acc| {
                for (a, b) in &balances {
                    acc.insert(a.key().as_slice(), (b.debits, b.credits))?;
                }
                Ok(())
            })?;
            let bytes = encode_record(entry);
            self.with_rows(JOURNAL, |j| {
                j.insert(entry.id.as_u128(), bytes.as_slice())?;
                Ok(())
            })
        })();
        self.track(r).map(Ok)
    }

    /// Appends an event to the project's log with the next sequence number.
    pub fn append_event(
        &mut self,
        project: Uuid,
        livemode: bool,
        event_type: &str,
        resource_id: &str,
        data: serde_json::Value,
    ) -> Result<Event, StoreError> {
        self.append(project, livemode, event_type, resource_id, Body::Data(data))
    }

    /// Appends an event of a customer's deposit (`deposit.*`) in its compact form (schema
    /// 6, [`Event::deposit`]): the deposit's changing fields as they are in `d`, which must
    /// be the row as this transaction writes it (before or after this call). The returned
    /// event leaves [`Event::deposit_row`] empty: the caller has the row at hand, and the
    /// outbox keeps only the event's reference (`services::emit_deposit`), so the writer
    /// does not clone the deposit per event (issue 16). A reader of the stored event gets
    /// the row.
    pub fn append_deposit_event(
        &mut self,
        livemode: bool,
        event_type: &str,
        d: &crate::records::Deposit,
    ) -> Result<Event, StoreError> {
        self.append(
            d.project_id,
            livemode,
            event_type,
            &d.id.to_string(),
            Body::Deposit(crate::records::DepositState::of(d)),
        )
    }

    /// Appends a payout event (`payout.*`) in its compact form (schema 10,
    /// [`crate::records::ResourceState::Payout`]): the payout's changing fields as they are
    /// in `p`, which must be the row as this transaction writes it. Like
    /// [`WriteCtx::append_deposit_event`], the returned event's [`Event::row`] is empty.
    pub fn append_payout_event(
        &mut self,
        livemode: bool,
        event_type: &str,
        p: &crate::records::Payout,
    ) -> Result<Event, StoreError> {
        self.append(
            p.project_id,
            livemode,
            event_type,
            &p.id.to_string(),
            Body::State(crate::records::ResourceState::Payout(
                crate::records::PayoutState::of(p),
            )),
        )
    }

    /// Appends `wallet.created` for `w` in its compact form (schema 10,
    /// [`crate::records::ResourceState::Wallet`]): no data, the wallet's row (never
    /// rewritten) renders it. `w` must be the row this transaction writes.
    pub fn append_wallet_event(
        &mut self,
        livemode: bool,
        event_type: &str,
        w: &crate::records::Wallet,
    ) -> Result<Event, StoreError> {
        self.append(
            w.project_id,
            livemode,
            event_type,
            &w.id.to_string(),
            Body::State(crate::records::ResourceState::Wallet),
        )
    }

    /// Appends `customer.created` for `c` in its compact form (schema 13,
    /// [`crate::records::ResourceState::Customer`]): no data, the customer's row renders it
    /// until the row changes ([`WriteCtx::put`] keeps the event exact then). `c` must be the
    /// row this transaction writes.
    pub fn append_customer_event(
        &mut self,
        livemode: bool,
        event_type: &str,
        c: &crate::records::Customer,
    ) -> Result<Event, StoreError> {
        self.append(
            c.project_id,
            livemode,
            event_type,
            &c.id.to_string(),
            Body::State(crate::records::ResourceState::Customer),
        )
    }

    /// Before customer `old`'s row is rewritten or removed: its `customer.created` event,
    /// when stored in the compact form that renders from that row
    /// ([`crate::records::ResourceState::Customer`]), is rewritten to hold the row as it
    /// is, so it renders the same afterwards ([`crate::records::ResourceState::CustomerAt`]).
    /// That event is the only compact one about a customer and its first (it is written
    /// with the row), so one event is read whatever the customer's number of events. An
    /// event row that does not decode is left as it is (`appliance verify` reports it).
    fn pin_customer_created(&self, old: &crate::records::Customer) -> Result<(), StoreError> {
        use crate::records::ResourceState;
        let resource = old.id.to_string();
        let prefix = index::event_resource_prefix(old.project_id, &resource);
        let first = self.with_event_resource_runs(|t, tails| {
            crate::held::forget(t, tails, &prefix)?;
            crate::event_runs::seqs(&*t, &prefix, 0, u64::MAX, true)?
                .next()
                .transpose()
        })?;
        let Some(seq) = first else {
            return Ok(());
        };
        let p = old.project_id.as_u128();
        let stored = self.with_events(|t| Ok(t.get((p, seq))?.map(|g| g.value().to_vec())))?;
        let Some(Ok(mut ev)) = stored.map(|b| decode::<Event>(&b)) else {
            return Ok(());
        };
        ev.sequence = seq;
        event_id_in_full(&mut ev, seq);
        // A UUID resource's key holds no project: the sequence may be another project's.
        if ev.resource_id != resource || ev.state != Some(ResourceState::Customer) {
            return Ok(());
        }
        ev.state = Some(ResourceState::CustomerAt(Box::new(old.clone())));
        let bytes = encode_event(&mut ev, None);
        self.with_events(|t| {
            t.insert((p, seq), bytes.as_slice())?;
            Ok(())
        })
    }

    /// [`WriteCtx::append_event`] with `data` encoded beforehand (off the writer thread,
    /// typically): the row holds the same bytes as if `data` were the equivalent
    /// `serde_json::Value`. The event returned has every field but `data`, which is `Null`
    /// (the stored row has it; `ReadOps` returns it).
    pub fn append_event_data(
        &mut self,
        project: Uuid,
        livemode: bool,
        event_type: &str,
        resource_id: &str,
        data: &crate::codec::EventData,
    ) -> Result<Event, StoreError> {
        self.append(
            project,
            livemode,
            event_type,
            resource_id,
            Body::Encoded(data),
        )
    }

    fn append(
        &mut self,
        project: Uuid,
        livemode: bool,
        event_type: &str,
        resource_id: &str,
        body: Body<'_>,
    ) -> Result<Event, StoreError> {
        let (data, deposit, state, encoded) = match body {
            Body::Data(data) => (data, None, None, None),
            Body::Encoded(data) => (serde_json::Value::Null, None, None, Some(data)),
            Body::Deposit(st) => (serde_json::Value::Null, Some(st), None, None),
            Body::State(st) => (serde_json::Value::Null, None, Some(st), None),
        };
        let r = (|| {
            // Remembered for the batch after the first event of the project (ctx_cache).
            let seq = self.last_sequence_memo(project)? + 1;
            // Schema 12: the id names the sequence, so no `event_ids` row is needed to find
            // it; a sequence too large to name gets a random ULID and the row.
            let (ulid, named) = match event_ulid(seq, self.now) {
                Some(u) => (u, true),
                None => (
                    crate::sources::new_ulid(self.now.max(0) as u64 / 1000),
                    false,
                ),
            };
            let mut ev = Event {
                id: format!("evt_{ulid}"),
                project_id: project,
                sequence: seq,
                event_type: event_type.to_string(),
                resource_id: resource_id.to_string(),
                created_at: self.now,
                livemode,
                data,
                deposit,
                state,
                row: None,
            };
            let bytes = encode_event(&mut ev, encoded);
            self.with_events(|events| {
                events.insert((project.as_u128(), seq), bytes.as_slice())?;
                Ok(())
            })?;
            if !named {
                self.with_event_ids(|ids| {
                    ids.insert(u128::from(ulid), (project.as_u128(), seq))?;
                    Ok(())
                })?;
            }
            let by_type = crate::event_runs::type_prefix(project, event_type);
            let by_resource = index::event_resource_prefix(project, resource_id);
            self.with_event_type_runs(|t, tails| {
                crate::event_runs::add_to_tail(t, tails, &by_type, seq)
            })?;
            self.with_event_resource_runs(|t, tails| {
                crate::event_runs::add_to_tail(t, tails, &by_resource, seq)
            })?;
            self.last_sequence_wrote(project, seq);
            Ok(ev)
        })();
        let ev = self.track(r)?;
        self.notice.events.push((project, ev.sequence));
        Ok(ev)
    }
}

/// Bits of an event ULID's 80-bit random part that carry the event's sequence (schema 12).
const EVENT_SEQ_BITS: u32 = 40;
/// Bits of an event ULID's random part left random: an id stays unique across projects
/// (two projects' events of one sequence in one millisecond differ here).
const EVENT_RANDOM_BITS: u32 = 40;

/// The ULID of the event at `seq` created at `created_at` (Unix microseconds; schema 12):
/// its millisecond (48 bits), then `seq` (40 bits), then 40 random bits, so
/// [`ReadOps::event`] finds the event from its id alone and no `event_ids` row is written
/// (issue 16: one table less per event); and, from schema 14, the row stores only the
/// random bits ([`event_id_in_short`]). `None` for a sequence of 0 or of 2^40 and more, or
/// a time outside the ULID's (such an event gets a random ULID and an `event_ids` row, as
/// before schema 12).
pub(crate) fn event_ulid(seq: u64, created_at: i64) -> Option<ulid::Ulid> {
    let random = crate::sources::random_u128() & ((1u128 << EVENT_RANDOM_BITS) - 1);
    named_ulid(seq, created_at, random)
}

/// The ULID named by (time of `created_at`, `seq`, `random`); `None` outside their ranges.
fn named_ulid(seq: u64, created_at: i64, random: u128) -> Option<ulid::Ulid> {
    let ms = u128::try_from(created_at.div_euclid(1000)).ok()?;
    if seq == 0 || seq >> EVENT_SEQ_BITS != 0 || ms >> 48 != 0 || random >> EVENT_RANDOM_BITS != 0 {
        return None;
    }
    Some(ulid::Ulid::from(
        ms << (EVENT_SEQ_BITS + EVENT_RANDOM_BITS) | u128::from(seq) << EVENT_RANDOM_BITS | random,
    ))
}

/// The random bits `ev`'s id is stored as (schema 14, [`crate::codec::short_event_id`]),
/// when its ULID is [`named_ulid`] of the event's time and sequence; `None` when it is not
/// (an id of an earlier schema, or a random one).
fn event_id_in_short(ev: &Event) -> Option<[u8; crate::codec::SHORT_EVENT_ID_BYTES]> {
    let ulid = event_ulid_of(&ev.id)?;
    let random = ulid & ((1u128 << EVENT_RANDOM_BITS) - 1);
    (named_ulid(ev.sequence, ev.created_at, random).map(u128::from) == Some(ulid)).then(|| {
        random.to_be_bytes()[16 - crate::codec::SHORT_EVENT_ID_BYTES..]
            .try_into()
            .expect("the last 5 of 16 bytes")
    })
}

/// The millisecond of a resource id that is a UUID in its canonical text (a UUID v7's
/// time), in microseconds.
fn resource_base_us(resource_id: &str) -> Option<i64> {
    // 48 bits of milliseconds: at most 2^48 * 1000 < 2^58, no overflow.
    crate::codec::canonical_uuid(resource_id).map(|u| crate::codec::uuid_ms(u) as i64 * 1000)
}

/// Makes a short id read from event row `seq` whole again ([`event_id_in_short`]'s
/// inverse), and a [`crate::codec::SHORT_EVENT_ID_REL`] row's `created_at` absolute; any
/// other id is left as it is (as is a relative one whose time does not add up, which no
/// build writes).
pub(crate) fn event_id_in_full(ev: &mut Event, seq: u64) {
    let Some((b, relative)) = crate::codec::short_event_id_parts(&ev.id) else {
        return;
    };
    let created = if relative {
        let Some(created) =
            resource_base_us(&ev.resource_id).and_then(|base| ev.created_at.checked_add(base))
        else {
            return;
        };
        created
    } else {
        ev.created_at
    };
    let mut r = [0u8; 16];
    r[16 - b.len()..].copy_from_slice(&b);
    if let Some(u) = named_ulid(seq, created, u128::from_be_bytes(r)) {
        ev.id = format!("evt_{u}");
        ev.created_at = created;
    }
}

/// The stored value of event `ev` (its `sequence` set): its id in short form when it has
/// one ([`event_id_in_short`]), and `tail` as its `data` when given
/// ([`crate::codec::encode_with_tail`]).
///
/// Schema 15: with a short id and a resource that is a UUID, `created_at` is stored as its
/// distance from the resource's millisecond (the resource was made by the same job or
/// before: a few bytes instead of 9), the id marked so ([`crate::codec::SHORT_EVENT_ID_REL`]).
pub(crate) fn encode_event(ev: &mut Event, tail: Option<&crate::codec::EventData>) -> Vec<u8> {
    let full = event_id_in_short(ev).map(|random| {
        let rel = resource_base_us(&ev.resource_id).and_then(|b| ev.created_at.checked_sub(b));
        let short = crate::codec::short_event_id(random, rel.is_some());
        let created = rel.map(|rel| std::mem::replace(&mut ev.created_at, rel));
        (std::mem::replace(&mut ev.id, short), created)
    });
    let bytes = match tail {
        Some(data) => crate::codec::encode_with_tail(&EventRow::of(ev), data),
        None => encode_record(&*ev),
    };
    if let Some((id, created)) = full {
        ev.id = id;
        if let Some(created) = created {
            ev.created_at = created;
        }
    }
    bytes
}

/// The ULID of an `evt_` id (either case), as a number; `None` for anything else.
fn event_ulid_of(id: &str) -> Option<u128> {
    let u = ulid::Ulid::from_string(id.strip_prefix("evt_")?).ok()?;
    Some(u128::from(u))
}

/// The sequence an event ULID of schema 12 names ([`event_ulid`]); `None` when its bits
/// there are 0. Any ULID yields a number: the reader checks the event it names has that id.
fn event_ulid_sequence(ulid: u128) -> Option<u64> {
    let seq = (ulid >> EVENT_RANDOM_BITS) & ((1u128 << EVENT_SEQ_BITS) - 1);
    u64::try_from(seq).ok().filter(|s| *s != 0)
}

/// A row's value encoded ahead of its write ([`crate::codec::encode_record`]), so the store
/// writer only copies it: [`WriteCtx::put_new_encoded`].
pub struct EncodedRow<R> {
    bytes: Vec<u8>,
    _row: std::marker::PhantomData<fn() -> R>,
}

impl<R: Row> EncodedRow<R> {
    /// Encodes `row`; write it with that same row, unchanged.
    pub fn of(row: &R) -> Self {
        EncodedRow {
            bytes: encode_record(row),
            _row: std::marker::PhantomData,
        }
    }
}

/// What an appended event stores of its resource (one of [`Event`]'s stored forms).
enum Body<'a> {
    /// `data` whole.
    Data(serde_json::Value),
    /// `data` whole, encoded beforehand ([`crate::codec::encode_with_tail`]).
    Encoded(&'a crate::codec::EventData),
    /// A deposit's changing fields ([`Event::deposit`], schema 6).
    Deposit(crate::records::DepositState),
    /// A payout's changing fields, or nothing for a wallet ([`Event::state`], schema 10).
    State(crate::records::ResourceState),
}

/// How an [`Event`] with `data` is stored when its `data` comes already encoded: the
/// stored fields of `Event` in its order, `data` a placeholder that
/// [`crate::codec::encode_with_tail`] replaces by the encoded bytes. Positional, like every
/// event row; it lacks `Event::deposit` and `Event::state`, the last fields, so the array is
/// two shorter and reads them as their default (`None`).
#[derive(serde::Serialize)]
struct EventRow<'a> {
    #[serde(serialize_with = "crate::codec::event_id")]
    id: &'a str,
    #[serde(rename = "type", serialize_with = "crate::codec::event_type")]
    event_type: &'a str,
    #[serde(serialize_with = "crate::codec::uuid_text")]
    resource_id: &'a str,
    created_at: i64,
    livemode: bool,
    data: (),
}

impl<'a> EventRow<'a> {
    fn of(e: &'a Event) -> Self {
        EventRow {
            id: &e.id,
            event_type: &e.event_type,
            resource_id: &e.resource_id,
            created_at: e.created_at,
            livemode: e.livemode,
            data: (),
        }
    }
}

/// Whole-table reads, for start-up caches and operator listings.
pub trait ScanOps: Reader {
    /// Every row of a table, in id order; a row that cannot be decoded is logged and passed
    /// over (`appliance verify` reports it).
    fn all<R: Row>(&self) -> Result<Vec<R>, StoreError> {
        let t = self.open(R::TABLE)?;
        let mut out = Vec::new();
        for e in t.iter()? {
            let (k, v) = e?;
            let id = Uuid::from_u128(k.value());
            if let Some(r) = decode_listed_row::<R>(id, v.value()) {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Rows of a table with an id above `after` (all of them for `None`), in id order, at
    /// most `limit`; an undecodable row is passed over as in [`ScanOps::all`]. Lets a reader
    /// follow a table whose ids only grow (UUID v7 minted on the writer thread), e.g. a
    /// chain watcher learning new deposit addresses.
    fn after<R: Row>(&self, after: Option<Uuid>, limit: usize) -> Result<Vec<R>, StoreError> {
        let t = self.open(R::TABLE)?;
        let mut out = Vec::new();
        let iter = match after {
            Some(a) if a.as_u128() == u128::MAX => return Ok(out),
            Some(a) => t.range(a.as_u128() + 1..)?,
            None => t.range(0u128..)?,
        };
        for e in iter.take(limit) {
            let (k, v) = e?;
            let id = Uuid::from_u128(k.value());
            if let Some(r) = decode_listed_row::<R>(id, v.value()) {
                out.push(r);
            }
        }
        Ok(out)
    }
}

impl ScanOps for ReadCtx {}
impl ScanOps for WriteCtx<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{encode_with_tail, EventData};

    #[test]
    fn an_event_with_encoded_data_is_the_same_row() {
        let data = serde_json::json!({
            "id": "0190f3d2-3b7a-7cc0-8a1e-0c7d1f6b2a11",
            "list": [1, "x", null, {"b": true, "n": -5}],
            "big": u64::MAX,
            "f": 1.5,
            "s": "é\"\\",
            "empty": {},
        });
        let ev = Event {
            id: "evt_01J0000000000000000000000".into(),
            project_id: Uuid::now_v7(),
            sequence: 7,
            event_type: "invoice.created".into(),
            resource_id: "r".into(),
            created_at: 1_700_000_000_000_000,
            livemode: true,
            data: data.clone(),
            deposit: None,
            state: None,
            row: None,
        };
        // The whole event positionally: the spliced row is the same array without its
        // last two elements (`deposit` and `state`, nil here), so its header counts two
        // fewer.
        let mut whole = crate::codec::encode_record(&ev);
        assert_eq!(whole.pop(), Some(0xc0));
        assert_eq!(whole.pop(), Some(0xc0));
        whole[1] -= 2;
        let spliced = encode_with_tail(&EventRow::of(&ev), &EventData::encode(&data));
        assert_eq!(spliced[0], crate::codec::POSITIONAL_VERSION);
        assert_eq!(whole, spliced);
        let back: Event = crate::codec::decode(&spliced).unwrap();
        assert_eq!(back.data, data);
    }
}

#[cfg(test)]
mod event_id_tests {
    use super::*;
    use crate::schema::EVENTS;
    use crate::{Store, StoreOptions};

    /// The stored bytes of `project`'s event `seq`.
    fn raw_event(store: &Store, project: Uuid, seq: u64) -> Vec<u8> {
        store
            .read_blocking(move |r| {
                Ok::<_, StoreError>(
                    r.open(EVENTS)?
                        .get((project.as_u128(), seq))?
                        .unwrap()
                        .value()
                        .to_vec(),
                )
            })
            .unwrap()
    }

    /// An event's id names its millisecond and sequence (schema 12), so its row stores only
    /// the id's 40 random bits (schema 14): 11 bytes less than the whole ULID. Every read
    /// (by id, by sequence, in lists, after a pin rewrite) gives the id as appended; an id
    /// that does not name its event (an older, random one) is stored whole.
    #[test]
    fn an_events_row_stores_only_the_random_bits_of_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let p = Uuid::now_v7();
        let (ev, pre) = store
            .write_blocking(move |ctx| {
                let ev = ctx.append_event(
                    p,
                    false,
                    "customer.updated",
                    "r",
                    serde_json::json!({"a": 1}),
                )?;
                let pre = crate::codec::EventData::encode(&serde_json::json!({"b": 2}));
                let pre = ctx.append_event_data(p, false, "customer.updated", "r", &pre)?;
                Ok::<_, StoreError>((ev, pre))
            })
            .unwrap();
        for e in [&ev, &pre] {
            let u = event_ulid_of(&e.id).unwrap();
            assert_eq!(event_ulid_sequence(u), Some(e.sequence));
            assert_eq!(
                u >> 80,
                (e.created_at / 1000) as u128,
                "the id's time is the event's"
            );
        }
        let raw = |seq: u64| raw_event(&store, p, seq);
        let mut stored: Event = crate::codec::decode(&raw(ev.sequence)).unwrap();
        assert!(
            stored.id.starts_with(crate::codec::SHORT_EVENT_ID),
            "{}",
            stored.id
        );
        let mut whole = stored.clone();
        whole.id = ev.id.clone();
        assert_eq!(raw(ev.sequence).len() + 11, encode_record(&whole).len());
        event_id_in_full(&mut stored, ev.sequence);
        assert_eq!(stored.id, ev.id);
        for e in [&ev, &pre] {
            let (id, seq) = (e.id.clone(), e.sequence);
            let by_id = store
                .read_blocking(move |r| r.event(p, &id))
                .unwrap()
                .unwrap();
            assert_eq!((by_id.id.as_str(), by_id.sequence), (e.id.as_str(), seq));
            let at = store
                .read_blocking(move |r| r.event_at(p, seq))
                .unwrap()
                .unwrap();
            assert_eq!(at.id, e.id);
        }
        let listed = store
            .read_blocking(move |r| r.list_events(p, &[], None, None, 10, true))
            .unwrap();
        let ids: Vec<_> = listed.items.iter().map(|e| e.id.clone()).collect();
        assert_eq!(ids, [ev.id.clone(), pre.id.clone()]);
        // The same id read from another sequence is not taken for this event's.
        let mut moved: Event = crate::codec::decode(&raw(ev.sequence)).unwrap();
        event_id_in_full(&mut moved, ev.sequence + 1);
        assert_ne!(moved.id, ev.id);

        // An id that does not name its event is stored whole and reads as written.
        let mut other = whole.clone();
        other.sequence = ev.sequence;
        other.id = format!("evt_{}", ulid::Ulid::new());
        assert_eq!(event_id_in_short(&other), None);
        let bytes = encode_event(&mut other, None);
        let mut back: Event = crate::codec::decode(&bytes).unwrap();
        event_id_in_full(&mut back, ev.sequence);
        assert_eq!(back.id, other.id);
        // Stored ids: 16 bytes or 5, nothing else.
        let parts = crate::codec::short_event_id_parts;
        assert_eq!(parts("evt~0102030405"), Some(([1, 2, 3, 4, 5], false)));
        assert!(parts("evt~01020304").is_none());
        assert!(parts(&ev.id).is_none());
    }

    /// An event about a resource whose id is a UUID (v7, minted by the same job or before)
    /// stores its `created_at` as its distance from that id's millisecond (schema 15), a
    /// few bytes instead of 9, its id marked so; every read gives the id and time as
    /// appended. A resource id that is not a canonical UUID keeps the time whole.
    #[test]
    fn an_events_row_stores_its_time_from_its_resources_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let p = Uuid::now_v7();
        let resource = Uuid::now_v7().to_string();
        let upper = Uuid::now_v7().to_string().to_uppercase();
        let (r1, r2) = (resource.clone(), upper.clone());
        let evs = store
            .write_blocking(move |ctx| {
                let mut out = Vec::new();
                for r in [&r1, &r2] {
                    out.push(ctx.append_event(
                        p,
                        false,
                        "customer.updated",
                        r,
                        serde_json::json!({"a": 1}),
                    )?);
                }
                Ok::<_, StoreError>(out)
            })
            .unwrap();
        let raw = |seq: u64| raw_event(&store, p, seq);
        let stored: Event = crate::codec::decode(&raw(evs[0].sequence)).unwrap();
        assert!(
            stored.id.starts_with(crate::codec::SHORT_EVENT_ID_REL),
            "{}",
            stored.id
        );
        let base = ((Uuid::parse_str(&resource).unwrap().as_u128() >> 80) as i64) * 1000;
        assert_eq!(stored.created_at, evs[0].created_at - base);
        // The same row with its time whole (schema 14's form) is longer: 9 bytes for the
        // time against 1, 2, 3 or 5 for its distance (under 128 µs, 256, 65,536, or more),
        // less the id's marker byte.
        let mut whole = stored.clone();
        whole.id = whole.id.replace(
            crate::codec::SHORT_EVENT_ID_REL,
            crate::codec::SHORT_EVENT_ID,
        );
        whole.created_at = evs[0].created_at;
        let saved = encode_record(&whole).len() - raw(evs[0].sequence).len();
        assert!([3, 5, 6, 7].contains(&saved), "{saved}");
        let mut back = stored.clone();
        event_id_in_full(&mut back, evs[0].sequence);
        assert_eq!(
            (back.id.as_str(), back.created_at),
            (evs[0].id.as_str(), evs[0].created_at)
        );
        // Not a canonical UUID: the time whole.
        let other: Event = crate::codec::decode(&raw(evs[1].sequence)).unwrap();
        assert!(
            other.id.starts_with(crate::codec::SHORT_EVENT_ID),
            "{}",
            other.id
        );
        assert_eq!(other.created_at, evs[1].created_at);
        for e in &evs {
            let (id, seq) = (e.id.clone(), e.sequence);
            let by_id = store
                .read_blocking(move |r| r.event(p, &id))
                .unwrap()
                .unwrap();
            assert_eq!((&by_id.id, by_id.created_at), (&e.id, e.created_at));
            let at = store
                .read_blocking(move |r| r.event_at(p, seq))
                .unwrap()
                .unwrap();
            assert_eq!((&at.id, at.created_at), (&e.id, e.created_at));
        }
        let listed = store
            .read_blocking(move |r| r.list_events(p, &[], None, None, 10, true))
            .unwrap();
        let got: Vec<_> = listed
            .items
            .iter()
            .map(|e| (e.id.clone(), e.created_at))
            .collect();
        let want: Vec<_> = evs.iter().map(|e| (e.id.clone(), e.created_at)).collect();
        assert_eq!(got, want);
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    }

    /// A credited deposit's event stores `true` for its journal entry, which its row names
    /// (schema 14): 17 bytes less; the event reads with the row's entry, a state of schema
    /// 13 (the entry's 16 bytes) reads as it is, JSON keeps the id, and without its row the
    /// event shows no entry rather than a made-up one.
    #[test]
    fn a_credited_deposit_events_entry_is_its_rows() {
        use crate::records::DepositState;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let mut d = crate::codec::tests::deposit();
        let entry = d.ledger_tx_id.unwrap();
        d.project_id = Uuid::now_v7();
        let p = d.project_id;
        let dw = d.clone();
        let ev = store
            .write_blocking(move |ctx| {
                ctx.put(&dw)?;
                ctx.append_deposit_event(false, "deposit.confirmed", &dw)
            })
            .unwrap();
        let seq = ev.sequence;
        let raw = store
            .read_blocking(move |r| {
                Ok::<_, StoreError>(
                    r.open(EVENTS)?
                        .get((p.as_u128(), seq))?
                        .unwrap()
                        .value()
                        .to_vec(),
                )
            })
            .unwrap();
        let stored: Event = crate::codec::decode(&raw).unwrap();
        assert_eq!(
            stored.deposit.as_ref().unwrap().ledger_tx_id,
            Some(DepositState::CREDITED)
        );
        let st = DepositState::of(&d);
        let mut with_id = Vec::new();
        rmp_serde::encode::write(&mut with_id, &(st.status, st.confirmations, (), entry)).unwrap();
        let mut credited = Vec::new();
        rmp_serde::encode::write(&mut credited, &st).unwrap();
        assert_eq!(credited.len() + 17, with_id.len());
        // Schema 13's form reads as it is; JSON keeps the id.
        assert_eq!(rmp_serde::from_slice::<DepositState>(&with_id).unwrap(), st);
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(json["ledger_tx_id"], serde_json::json!(entry));
        assert_eq!(serde_json::from_value::<DepositState>(json).unwrap(), st);
        let read = store
            .read_blocking(move |r| r.event_at(p, seq))
            .unwrap()
            .unwrap();
        assert_eq!(read.deposit, Some(st.clone()));
        assert!(
            matches!(&read.row, Some(crate::records::ResourceRow::Deposit(r)) if r.ledger_tx_id == Some(entry))
        );
        // (This store has no journal: verify reports that, and nothing about the event.)
        let names_none = |v: &String| v.contains("names no journal entry");
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert!(
            !rep.violations.iter().any(names_none),
            "{:?}",
            rep.violations
        );
        // A row that names no entry under a credited event: verify says so.
        let mut uncredited = d.clone();
        uncredited.ledger_tx_id = None;
        store
            .write_blocking(move |ctx| ctx.put(&uncredited))
            .unwrap();
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert!(
            rep.violations.iter().any(names_none),
            "{:?}",
            rep.violations
        );
        // Without its row: no entry shown.
        let id = d.id;
        store
            .write_blocking(move |ctx| {
                ctx.with_rows(crate::schema::DEPOSITS, |t| {
                    t.remove(id.as_u128())?;
                    Ok(())
                })
            })
            .unwrap();
        let read = store
            .read_blocking(move |r| r.event_at(p, seq))
            .unwrap()
            .unwrap();
        assert!(read.row.is_none());
        assert_eq!(read.deposit.unwrap().ledger_tx_id, None);
    }
}

#[cfg(test)]
mod customer_event_tests {
    use crate::records::{Customer, Event, ResourceRow, ResourceState};
    use crate::schema::EVENTS;
    use crate::{ReadOps, Reader, Store, StoreError, StoreOptions};
    use redb::ReadableTable;
    use uuid::Uuid;

    fn customer(project: Uuid, email: &str) -> Customer {
        Customer {
            id: Uuid::now_v7(),
            project_id: project,
            reference_id: None,
            email: Some(email.into()),
            status: "active".into(),
            metadata: serde_json::json!({}),
            created_at: 1,
        }
    }

    /// `customer.created` is stored compact and reads the customer's row; the first
    /// rewrite of the row pins the row as it was into the event, later ones leave it; a
    /// removal pins too; another project's event at the same sequence, about another
    /// customer, is not touched; `verify` stays clean throughout.
    #[test]
    fn a_customers_created_event_keeps_the_row_it_was_created_with() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let (p, q) = (Uuid::now_v7(), Uuid::now_v7());
        let (a, b) = (customer(p, "a@x.co"), customer(q, "b@x.co"));
        let (a2, b2) = (a.clone(), b.clone());
        let (ea, eb) = store
            .write_blocking(move |ctx| {
                ctx.put(&a2)?;
                let ea = ctx.append_customer_event(false, "customer.created", &a2)?;
                ctx.put(&b2)?;
                let eb = ctx.append_customer_event(false, "customer.created", &b2)?;
                Ok::<_, StoreError>((ea.id, eb.id))
            })
            .unwrap();
        let read = |project: Uuid, id: String| {
            store
                .read_blocking(move |r| {
                    let ev = r.event(project, &id)?.unwrap();
                    let raw = r.open(EVENTS)?;
                    let stored: Event = crate::codec::decode(
                        raw.get((project.as_u128(), ev.sequence))?.unwrap().value(),
                    )?;
                    Ok::<_, StoreError>((ev, stored.state))
                })
                .unwrap()
        };
        let shown = |ev: &Event| match &ev.row {
            Some(ResourceRow::Customer(c)) => (**c).clone(),
            other => panic!("no customer row: {other:?}"),
        };
        let clean = || {
            let rep = store.read_blocking(crate::verify::verify).unwrap();
            assert!(rep.violations.is_empty(), "{:?}", rep.violations);
        };
        let (ev, state) = read(p, ea.clone());
        assert_eq!(state, Some(ResourceState::Customer));
        assert_eq!(shown(&ev), a);
        clean();

        for email in ["second@x.co", "third@x.co"] {
            let mut changed = a.clone();
            changed.email = Some(email.into());
            store.write_blocking(move |ctx| ctx.put(&changed)).unwrap();
            let (ev, state) = read(p, ea.clone());
            assert_eq!(state, Some(ResourceState::CustomerAt(Box::new(a.clone()))));
            assert_eq!(shown(&ev), a);
            clean();
        }
        let (ev, state) = read(q, eb.clone());
        assert_eq!(state, Some(ResourceState::Customer));
        assert_eq!(shown(&ev), b);

        let id = b.id;
        store
            .write_blocking(move |ctx| ctx.delete::<Customer>(id))
            .unwrap()
            .unwrap();
        let (ev, state) = read(q, eb);
        assert_eq!(state, Some(ResourceState::CustomerAt(Box::new(b.clone()))));
        assert_eq!(shown(&ev), b);
        clean();
    }
}
