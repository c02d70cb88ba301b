//! Read and write contexts: typed access to the tables of [`crate::schema`].
//!
//! [`ReadOps`] holds every read, written once for both contexts. Writes exist only on
//! [`WriteCtx`]; each marks the running job dirty so the writer can tell a clean refusal from
//! a half-done change.

use std::borrow::Borrow;
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
/// Which entries of a project's log [`ReadOps::list_log`] lists: of `types` (all when
/// empty), about `resource_id` (any when `None`), and the billing lines too when `lines`.
#[derive(Debug, Clone, Copy)]
pub struct LogFilter<'a> {
    pub types: &'a [String],
    pub resource_id: Option<&'a str>,
    pub lines: bool,
}

/// Raw index keys in `[from, to)`, ascending unless `descending`, at most `limit` of them
/// ([`ReadOps::index_range`]).
#[derive(Debug, Clone, Copy)]
pub struct KeyRange<'a> {
    pub from: &'a [u8],
    pub to: &'a [u8],
    pub limit: usize,
    pub descending: bool,
}

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
        self.index_keys(&KeyRange {
            from,
            to,
            limit,
            descending,
        })
    }

    /// The read behind [`ReadOps::index_range`], once its range is checked: a context
    /// that keeps table handles open reads through them.
    fn index_keys(&self, range: &KeyRange) -> Result<Vec<Vec<u8>>, StoreError> {
        index_keys_in(&self.open(index_table_of(range.from))?, range)
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
        accounts_under(self, Account::customer_prefix(project, customer))
    }

    /// Every ledger account of a project, its customers' and its own (holdings left out).
    fn project_accounts(&self, project: Uuid) -> Result<Vec<(Account, Balance)>, StoreError> {
        accounts_under(self, project.as_bytes().to_vec())
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
        let filter = LogFilter {
            types,
            resource_id,
            lines: false,
        };
        self.list_log(project, filter, cursor, limit, ascending)
    }

    /// The event stream's view of the log: a project's events and billing lines after
    /// sequence `after`, oldest first, at most `limit`.
    fn log_after(
        &self,
        project: Uuid,
        after: u64,
        limit: usize,
    ) -> Result<Page<Event>, StoreError> {
        let filter = LogFilter {
            types: &[],
            resource_id: None,
            lines: true,
        };
        self.list_log(project, filter, Some(after), limit, true)
    }

    /// [`ReadOps::list_events`] through `filter`, which may also take the billing lines.
    fn list_log(
        &self,
        project: Uuid,
        filter: LogFilter<'_>,
        cursor: Option<u64>,
        limit: usize,
        ascending: bool,
    ) -> Result<Page<Event>, StoreError> {
        let LogFilter {
            types,
            resource_id,
            lines,
        } = filter;
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

/// Every ledger account whose key starts with `prefix` (holdings left out).
fn accounts_under(
    r: &(impl Reader + ?Sized),
    prefix: Vec<u8>,
) -> Result<Vec<(Account, Balance)>, StoreError> {
    let t = r.open(ACCOUNTS)?;
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

mod listing;
use listing::*;

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

    /// Inserts `key -> value` into `def` as one tracked write of the job
    /// ([`WriteCtx::track`]).
    pub(crate) fn insert_tracked<'k, 'v, K: Key + 'static, V: Value + 'static>(
        &mut self,
        def: TableDefinition<K, V>,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<(), StoreError> {
        let r = (|| {
            self.table(def)?.insert(key, value)?;
            Ok(())
        })();
        self.track(r)
    }
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

mod events;
pub use events::{Compact, CompactRow};
mod rows;
mod scan;

use events::*;
pub(crate) use events::{encode_event, event_id_in_full};
pub use scan::ScanOps;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod event_id_tests;

#[cfg(test)]
mod customer_event_tests;
