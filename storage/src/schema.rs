//! Every redb table of the appliance, in one place (STYLE.md habit 6).
//!
//! Keys are chosen so that the natural scan order is the list order: resource ids are UUID v7
//! (time-ordered) stored as big-endian `u128`, so newest-first is a reverse range scan.
//! Values of record tables are [`crate::codec`] encodings (a version byte, then MessagePack
//! with named fields; JSON in stores older than schema version 4).
//!
//! ```text
//! meta              <&str, &[u8]>          schema_version, pepper presence ...
//! projects          <u128, &[u8]>          project id -> Project
//! api_keys          <u128, &[u8]>          key id -> ApiKey
//! customers         <u128, &[u8]>          customer id -> Customer
//! wallets           <u128, &[u8]>          wallet id -> Wallet
//! deposits          <u128, &[u8]>          deposit id -> Deposit
//! payouts           <u128, &[u8]>          payout id -> Payout
//! sweeps            <u128, &[u8]>          sweep id -> Sweep
//! conversion_rules  <u128, &[u8]>          rule id -> ConversionRule (unique key project ‖ chain)
//! conversions       <u128, &[u8]>          conversion row id -> Conversion
//! conversion_batches <u128, &[u8]>         batch id -> ConversionBatch
//! unique            <&[u8], u128>          unique secondary key -> row id (see index.rs)
//! index             <&[u8], ()>            tag ‖ project ‖ value ‖ row id  (list filters)
//! index_<tag name>  <&[u8], ()>            the same keys, one table per hot tag (schema 7;
//!                                          [`SPLIT_INDEXES`], [`index_table`])
//! id_runs           <&[u8], &[u8]>         prefix listed per customer ‖ first id -> later ids
//!                                          ([`crate::id_runs`]; schema 14)
//! runs_<list>       <&[u8], &[u8]>         a project's list prefix ‖ first id -> later ids,
//!                                          padded ([`RUN_INDEXES`]; schema 15)
//! event_type_runs   <&[u8], &[u8]>         project ‖ type hash ‖ first sequence -> later sequences
//!                                          as distances ([`crate::event_runs`]; schema 13)
//! events_by_type    <&[u8], ()>            project ‖ 0 ‖ type hash ‖ sequence, up to schema 12
//!                                          (moved to `event_type_runs` on open, then deleted)
//! event_resource_runs <&[u8], &[u8]>      resource ‖ first sequence -> later sequences as
//!                                          distances ([`crate::event_runs`]; schema 13)
//! events_by_resource <&[u8], ()>           resource ‖ sequence, up to schema 12 (moved to
//!                                          `event_resource_runs` on open, then deleted)
//! accounts          <&[u8], (u128, u128)>  ledger account key -> (debits, credits) posted;
//!                                          holding key -> (amount on the address, 0)
//! journal           <u128, &[u8]>          entry id (UUID v7) -> JournalEntry
//! events            <(u128, u64), &[u8]>   (project, sequence) -> Event
//! event_ids         <u128, (u128, u64)>    event ULID -> (project, sequence); events before
//!                                          schema 12 only (later ids name their sequence)
//! idempotency       <&[u8], &[u8]>         project ‖ digest of method, path, key, or UUID key ‖
//!                                          digest of method, path (schema 15; method ‖ path ‖
//!                                          key before) -> IdempotencyRecord
//! idempotency_exp   <&[u8], ()>            created_at_us (BE) ‖ idempotency key bytes
//! sim_balances      <&[u8], u128>          chain ‖ address ‖ asset -> simulated on-chain balance
//! address_quota     <(u128, u32), u32>     (project, UTC day number) -> addresses issued
//! counters          <&[u8], u64>           tag ‖ project -> number of keys of a counted index
//! webhook_endpoints <u128, &[u8]>          endpoint id (UUID v7) -> WebhookEndpoint
//! webhook_deliveries <u128, &[u8]>         delivery ULID (as u128) -> WebhookDelivery
//! evm_out_txs       <(&str, u64), &[u8]>   (chain, nonce) -> OutTx JSON, deflated (the sender's record)
//! evm_pending       <(&str, u64), ()>      (chain, nonce) of outgoing transactions not final
//! evm_nonces        <&str, u64>            chain -> next nonce the sender hands out
//! evm_watch         <&str, &[u8]>          chain -> WatchState JSON (cursor, recent hashes)
//! evm_block_deposits <(&str, u64, u128), ()> (chain, block, deposit id) found in that block
//! sim_heights       <&str, u64>            chain -> simulated block height (test mode)
//! sweep_requests    <u128, ()>             sweep id of a live sweep asked for by POST /v1/sweeps
//! sim_ops           <(u128, &str, u64), &[u8]> (project, chain, seq) -> simulated chain operation
//! invoices          <u128, &[u8]>          invoice id (UUID v7) -> Invoice
//! test_clocks       <u128, i64>            test project id -> clock offset (µs) from POST /v1/test/clock
//! test_senders      <&str, &str>           chain/sender address -> sender class claimed by a test transfer
//! billing_accounts  <u128, &[u8]>          project id -> BillingAccount (plan, running balance)
//! billing_entries   <u128, &[u8]>          entry id (UUID v7) -> BillingEntry (never rewritten)
//! funding_addresses <u128, &[u8]>          funding address id -> FundingAddress
//! ```
//!
//! The chain-adapter tables (`evm_*`, `sim_heights`) are written through
//! [`crate::chain_state`]; before schema version 2 their rows lived in `meta`.

use redb::{TableDefinition, TableHandle};

use crate::index::IndexTag;

pub const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub const PROJECTS: TableDefinition<u128, &[u8]> = TableDefinition::new("projects");
pub const API_KEYS: TableDefinition<u128, &[u8]> = TableDefinition::new("api_keys");
pub const CUSTOMERS: TableDefinition<u128, &[u8]> = TableDefinition::new("customers");
pub const WALLETS: TableDefinition<u128, &[u8]> = TableDefinition::new("wallets");
pub const DEPOSITS: TableDefinition<u128, &[u8]> = TableDefinition::new("deposits");
pub const PAYOUTS: TableDefinition<u128, &[u8]> = TableDefinition::new("payouts");
pub const SWEEPS: TableDefinition<u128, &[u8]> = TableDefinition::new("sweeps");
/// Conversion rules, rows and batches (SPEC.md section 2; DECISIONS.md section 14).
pub const CONVERSION_RULES: TableDefinition<u128, &[u8]> = TableDefinition::new("conversion_rules");
pub const CONVERSIONS: TableDefinition<u128, &[u8]> = TableDefinition::new("conversions");
pub const CONVERSION_BATCHES: TableDefinition<u128, &[u8]> =
    TableDefinition::new("conversion_batches");
pub const INVOICES: TableDefinition<u128, &[u8]> = TableDefinition::new("invoices");
/// Test project id -> how far `POST /v1/test/clock` moved its clock ahead of real time, in
/// microseconds (DECISIONS.md section 15). Absent: 0. Live projects never have a row.
pub const TEST_CLOCKS: TableDefinition<u128, i64> = TableDefinition::new("test_clocks");
/// `chain/sender address (lower case)` -> the sender class a test transfer claimed for that
/// sender (`POST /v1/test/transfers` `sender_class`, DECISIONS.md section 15).
pub const TEST_SENDERS: TableDefinition<&str, &str> = TableDefinition::new("test_senders");
pub const UNIQUE: TableDefinition<&[u8], u128> = TableDefinition::new("unique");
pub const INDEX: TableDefinition<&[u8], ()> = TableDefinition::new("index");

/// Index tags whose keys live in a table of their own instead of [`INDEX`] (schema 7), with
/// the same key layout (tag byte first). Each of these indexes is written by every resource
/// of its kind and its keys under one prefix sort by time (UUID v7 row ids), so a table of
/// its own is appended at its rightmost leaf, which redb leaves packed instead of splitting
/// it in halves (docs/performance.md, "Why pages, not rows, are the cost"). The tags left in [`INDEX`] are
/// cold or random (a customer's, a wallet's, a reference's) and share its pages.
pub const SPLIT_INDEXES: [(IndexTag, IndexDef); 17] = [
    split(IndexTag::Customers, "index_customers"),
    split(IndexTag::Wallets, "index_wallets"),
    split(IndexTag::WalletsByChain, "index_wallets_by_chain"),
    split(IndexTag::Deposits, "index_deposits"),
    split(IndexTag::DepositsByChain, "index_deposits_by_chain"),
    split(IndexTag::DepositsByStatus, "index_deposits_by_status"),
    split(IndexTag::DepositsPending, "index_deposits_pending"),
    split(IndexTag::Payouts, "index_payouts"),
    split(IndexTag::PayoutsByChain, "index_payouts_by_chain"),
    split(IndexTag::PayoutsByStatus, "index_payouts_by_status"),
    split(IndexTag::PayoutsOpen, "index_payouts_open"),
    split(IndexTag::PayoutsWork, "index_payouts_work"),
    split(IndexTag::Sweeps, "index_sweeps"),
    split(IndexTag::SweepsByStatus, "index_sweeps_by_status"),
    split(IndexTag::SweepsWork, "index_sweeps_work"),
    split(IndexTag::Invoices, "index_invoices"),
    split(IndexTag::InvoicesByStatus, "index_invoices_by_status"),
];

/// The definition of an index table ([`INDEX`] or one of [`SPLIT_INDEXES`]).
pub type IndexDef = TableDefinition<'static, &'static [u8], ()>;

/// An entry of [`SPLIT_INDEXES`]: `tag`'s keys in table `name`.
const fn split(tag: IndexTag, name: &'static str) -> (IndexTag, IndexDef) {
    (tag, TableDefinition::new(name))
}

/// The table holding index keys that start with tag byte `tag`: its own table when the
/// tag is one of [`SPLIT_INDEXES`], else [`INDEX`]. Every reader and writer of index keys
/// goes through this (`ReadOps::list`, `WriteCtx::put`, ...), so a key and its prefix scans
/// always meet in the same table.
pub fn index_table(tag: u8) -> TableDefinition<'static, &'static [u8], ()> {
    SPLIT_INDEXES
        .iter()
        .find(|(t, _)| *t as u8 == tag)
        .map(|(_, def)| *def)
        .unwrap_or(INDEX)
}

/// [`index_table`] of a whole key or prefix (its first byte; [`INDEX`] for an empty one).
pub fn index_table_of(key: &[u8]) -> TableDefinition<'static, &'static [u8], ()> {
    key.first().map_or(INDEX, |t| index_table(*t))
}

/// Events by type (schema 7): [`crate::index::event_type_key`] (project ‖ 0 ‖ a 4-byte
/// hash of the type ‖ sequence since schema 12; the type's length and text instead of the
/// 0 and the hash before). Up to schema 6 these were [`IndexTag::EventsByType`] keys of
/// [`INDEX`].
/// Up to schema 12 only: opening such a store moves its keys into [`EVENT_TYPE_RUNS`] and
/// deletes the table (`migrate_to_13`).
pub const EVENTS_BY_TYPE: TableDefinition<&[u8], ()> = TableDefinition::new("events_by_type");
/// Events by type (schema 13): each (project, type)'s event sequences in runs of up to
/// [`crate::event_runs::RUN_MAX`] bytes, keyed by the run's first sequence
/// ([`crate::event_runs`]).
pub const EVENT_TYPE_RUNS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("event_type_runs");
/// Events by resource (schema 7): [`crate::index::event_resource_key`] (the resource's 16
/// bytes when its id is a UUID, else project ‖ text; then the sequence). Up to schema 6
/// these were [`IndexTag::EventsByResource`] keys of [`INDEX`] with the id as text.
/// Up to schema 12 only: opening such a store moves its keys into [`EVENT_RESOURCE_RUNS`]
/// and deletes the table (`migrate_to_13`).
pub const EVENTS_BY_RESOURCE: TableDefinition<&[u8], ()> =
    TableDefinition::new("events_by_resource");
/// Events by resource (schema 13): each resource's event sequences in runs, keyed by
/// [`crate::index::event_resource_prefix`] ‖ the run's first sequence
/// ([`crate::event_runs`]).
pub const EVENT_RESOURCE_RUNS: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("event_resource_runs");
/// A customer's deposits and its wallets' sweeps ([`crate::index::IndexTag::ByCustomer`])
/// and its payouts ([`crate::index::IndexTag::PayoutsByCustomer`]), schema 14: runs of up to
/// [`crate::id_runs::RUN_IDS`] ids, keyed by the index prefix ‖ the run's first id
/// ([`crate::id_runs`]). Up to schema 13 these were keys of [`INDEX`] (moved on open,
/// `migrate_to_14`).
pub const ID_RUNS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("id_runs");

/// A list kept as runs of ids ([`crate::id_runs`]) instead of a key per row: the index tag
/// whose keys it holds, its table, and whether its runs are written full size.
#[derive(Clone, Copy)]
pub struct RunIndex {
    pub tag: IndexTag,
    pub table: TableDefinition<'static, &'static [u8], &'static [u8]>,
    /// Runs written at [`crate::id_runs::RUN_IDS`] slots from the start, the free ones
    /// zero, so that an append rewrites a value of the same size (schema 15). For a
    /// project's list, appended at its table's rightmost leaf: a run that grew in place
    /// made redb split that full leaf in halves (it packs a leaf only for a new last key),
    /// and the left half kept its free space. Not for the per-customer lists of
    /// [`ID_RUNS`], most of whose runs hold one or two ids.
    pub padded: bool,
}

/// Every list kept as runs of ids ([`crate::id_runs`]): a customer's deposits, sweeps and
/// payouts in [`ID_RUNS`] (schema 14), and a project's lists, a table each (schema 15):
/// customers (all, by status), wallets (all, by chain), deposits (all, by chain, by
/// status), payouts (all, by chain, by status), sweeps (all, by status). Up to schema 14
/// the keys of the latter were in their tag's index table ([`index_table`]: one of
/// [`SPLIT_INDEXES`], or [`INDEX`] for customers by status), where they are moved from on
/// open (`migrate_to_15`); the tables stay. An id that arrives out of order (a payout that
/// reaches a status before an older one) goes in its place, splitting a full run. The
/// work queues (deposits pending, payouts open and to work on, sweeps to work on), whose
/// entries come and go, keep a key per row.
pub const RUN_INDEXES: [RunIndex; 14] = [
    run(IndexTag::ByCustomer, ID_RUNS, false),
    run(IndexTag::PayoutsByCustomer, ID_RUNS, false),
    run(
        IndexTag::Customers,
        TableDefinition::new("runs_customers"),
        true,
    ),
    run(
        IndexTag::CustomersByStatus,
        TableDefinition::new("runs_customers_by_status"),
        true,
    ),
    run(
        IndexTag::Wallets,
        TableDefinition::new("runs_wallets"),
        true,
    ),
    run(
        IndexTag::WalletsByChain,
        TableDefinition::new("runs_wallets_by_chain"),
        true,
    ),
    run(
        IndexTag::Deposits,
        TableDefinition::new("runs_deposits"),
        true,
    ),
    run(
        IndexTag::DepositsByChain,
        TableDefinition::new("runs_deposits_by_chain"),
        true,
    ),
    run(
        IndexTag::DepositsByStatus,
        TableDefinition::new("runs_deposits_by_status"),
        true,
    ),
    run(
        IndexTag::Payouts,
        TableDefinition::new("runs_payouts"),
        true,
    ),
    run(
        IndexTag::PayoutsByChain,
        TableDefinition::new("runs_payouts_by_chain"),
        true,
    ),
    run(
        IndexTag::PayoutsByStatus,
        TableDefinition::new("runs_payouts_by_status"),
        true,
    ),
    run(IndexTag::Sweeps, TableDefinition::new("runs_sweeps"), true),
    run(
        IndexTag::SweepsByStatus,
        TableDefinition::new("runs_sweeps_by_status"),
        true,
    ),
];

const fn run(
    tag: IndexTag,
    table: TableDefinition<'static, &'static [u8], &'static [u8]>,
    padded: bool,
) -> RunIndex {
    RunIndex { tag, table, padded }
}

/// The [`RunIndex`] of index keys (or a prefix) starting with tag byte `tag`; `None` for a
/// tag whose keys are keys of an index table ([`index_table`]).
pub fn run_index(tag: u8) -> Option<&'static RunIndex> {
    RUN_INDEXES.iter().find(|r| r.tag as u8 == tag)
}

/// The distinct tables of [`RUN_INDEXES`].
pub fn run_tables() -> impl Iterator<Item = TableDefinition<'static, &'static [u8], &'static [u8]>>
{
    RUN_INDEXES
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            !RUN_INDEXES[..*i]
                .iter()
                .any(|o| o.table.name() == r.table.name())
        })
        .map(|(_, r)| r.table)
}
pub const ACCOUNTS: TableDefinition<&[u8], (u128, u128)> = TableDefinition::new("accounts");
pub const JOURNAL: TableDefinition<u128, &[u8]> = TableDefinition::new("journal");
pub const EVENTS: TableDefinition<(u128, u64), &[u8]> = TableDefinition::new("events");
/// Event ULID -> (project, sequence) of the events written before schema 12 (and of any
/// event whose sequence is too large for its id to name, `ctx::event_ulid`).
pub const EVENT_IDS: TableDefinition<u128, (u128, u64)> = TableDefinition::new("event_ids");
/// Project -> last event sequence, up to schema version 3. The last key of the project's
/// range of [`EVENTS`] says the same, so schema 4 drops the table (one row less per event).
pub const LEGACY_SEQUENCES: TableDefinition<u128, u64> = TableDefinition::new("sequences");
pub const IDEMPOTENCY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idempotency");
pub const IDEMPOTENCY_EXP: TableDefinition<&[u8], ()> = TableDefinition::new("idempotency_exp");
/// Wallet ‖ asset -> the ledger's holding of a deposit address, up to schema version 3.
/// Schema 4 keeps holdings in [`ACCOUNTS`] beside the customer's accounts
/// ([`crate::ledger::holding_key`]) and moves these rows there on open; a row whose wallet
/// is missing stays here and `verify` reports it.
pub const LEGACY_HOLDINGS: TableDefinition<&[u8], u128> = TableDefinition::new("holdings");
pub const SIM_BALANCES: TableDefinition<&[u8], u128> = TableDefinition::new("sim_balances");
pub const ADDRESS_QUOTA: TableDefinition<(u128, u32), u32> = TableDefinition::new("address_quota");
pub const COUNTERS: TableDefinition<&[u8], u64> = TableDefinition::new("counters");
pub const WEBHOOK_ENDPOINTS: TableDefinition<u128, &[u8]> =
    TableDefinition::new("webhook_endpoints");
pub const WEBHOOK_DELIVERIES: TableDefinition<u128, &[u8]> =
    TableDefinition::new("webhook_deliveries");

/// Outgoing transactions of the live EVM sender: (chain id, nonce) -> the sender's `OutTx`
/// as JSON (intent, signed raw transactions per fee level, hashes, `done`), deflated since
/// schema 12 ([`crate::codec::stored_doc`] reads either). Kept after the transaction is
/// final.
pub const EVM_OUT_TXS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("evm_out_txs");
/// (chain id, nonce) of every outgoing transaction not yet final; the sender's tracker walks
/// these in nonce order.
pub const EVM_PENDING: TableDefinition<(&str, u64), ()> = TableDefinition::new("evm_pending");
/// Chain id -> the next nonce the sender hands out on it.
pub const EVM_NONCES: TableDefinition<&str, u64> = TableDefinition::new("evm_nonces");
/// Chain id -> the live watcher's `WatchState` as JSON: its cursor (last processed height
/// and the hashes of the recent blocks that detect a reorg).
pub const EVM_WATCH: TableDefinition<&str, &[u8]> = TableDefinition::new("evm_watch");
/// (chain id, block number, deposit id as u128) of each deposit the watcher found in a
/// block, read back when a reorg removes the block. Rows exist only for blocks with
/// deposits, and only while a reorg the watcher can detect may reach the block: the
/// watcher forgets the older ones as it advances (`evm_block_deposits_forget_through`).
pub const EVM_BLOCK_DEPOSITS: TableDefinition<(&str, u64, u128), ()> =
    TableDefinition::new("evm_block_deposits");
/// Chain id -> simulated block height (test mode's chain).
pub const SIM_HEIGHTS: TableDefinition<&str, u64> = TableDefinition::new("sim_heights");

/// Test mode's simulated chains (DECISIONS.md section 15): (test project id,
/// chain id, sequence number from 0) -> one operation of that project's chain
/// (`appliance_chains::sim::Op`: a block with its transactions, a run of empty blocks, a
/// reorg) as a [`crate::codec`] value (version 3: the binary's positional `StoredOp`, with
/// hashes and amounts as bytes; version 2: named with hex strings); rows written before
/// that are bare JSON (first byte `{`) and stay readable. Replayed in order at start-up; written in the same transaction
/// as the request that caused it. The first row of a chain may instead be a snapshot of
/// the chain (`appliance_chains::sim::Snapshot`, a codec value `{snapshot: ...}`,
/// [`crate::chain_state::sim_row_is_snapshot`]): the state after every operation up to its
/// sequence number, written over the last operation it covers in the same transaction that
/// deletes the rows below it (the log and a start stay bounded). A start loads it
/// and replays the rows after it. Operation rows are never rewritten.
pub const SIM_OPS: TableDefinition<(u128, &str, u64), &[u8]> = TableDefinition::new("sim_ops");

/// Schema 10 only, read by its migration: (test project id, chain id, sequence number) ->
/// a simulated chain's snapshot in one row. From schema 11 in [`SIM_SNAPSHOT_CHUNKS`].
pub const SIM_SNAPSHOTS: TableDefinition<(u128, &str, u64), &[u8]> =
    TableDefinition::new("sim_snapshots");

/// Test mode's simulated chains: (test project id, chain id, sequence number, chunk
/// number from 0) -> the bytes of the chain's snapshot written at that operation (the
/// binary's `services::sim_chain::encode_snapshot`, megabytes for a large chain: 53 MB
/// for 1M addresses) cut into chunks of at most [`SIM_SNAPSHOT_CHUNK`] bytes, numbered
/// without gaps; [`SIM_OPS`] holds [`SIM_SNAPSHOT_REF`] at that sequence number. One
/// snapshot per chain: writing one removes the older ones (schema 11).
///
/// In chunks because a value of many pages, once replaced and freed, makes every later
/// commit of the store write up to 20 times its bytes (measured with
/// `storage/examples/large_value_probe.rs`; docs/performance.md, "Large values and quick
/// repair"), while rows under a page
/// cost nothing more.
pub const SIM_SNAPSHOT_CHUNKS: TableDefinition<(u128, &str, u64, u32), &[u8]> =
    TableDefinition::new("sim_snapshot_chunks");

/// Most bytes of a snapshot in one row of [`SIM_SNAPSHOT_CHUNKS`]: a chunk with its key
/// fits a 4 KiB page.
pub const SIM_SNAPSHOT_CHUNK: usize = 3_000;

/// The row [`SIM_OPS`] holds where a chain's snapshot is (in [`SIM_SNAPSHOT_CHUNKS`]):
/// not a codec value (no version 0xff), so never taken for an operation.
pub const SIM_SNAPSHOT_REF: &[u8] = &[0xff, b's', b'n', b'a', b'p'];

/// Sweep id (as u128) of each live sweep requested through `POST /v1/sweeps`: it is sent
/// whatever the chain's automatic threshold says. Rows are never removed (one per request).
pub const SWEEP_REQUESTS: TableDefinition<u128, ()> = TableDefinition::new("sweep_requests");

/// Billing (DECISIONS.md section 13): project id -> `BillingAccount` (plan, requested plan,
/// running balance and entry count, onboarding, the last month whose minimum is settled).
pub const BILLING_ACCOUNTS: TableDefinition<u128, &[u8]> = TableDefinition::new("billing_accounts");
/// Entry id -> `BillingEntry`, the journal of each project's operational balance. Rows are
/// never rewritten or removed.
pub const BILLING_ENTRIES: TableDefinition<u128, &[u8]> = TableDefinition::new("billing_entries");
/// Funding address id -> `FundingAddress` (one per project and chain, never changed).
pub const FUNDING_ADDRESSES: TableDefinition<u128, &[u8]> =
    TableDefinition::new("funding_addresses");

/// Current layout version, stored under `meta["schema_version"]`.
///
/// * 1: first release.
/// * 2: chain-adapter state moved from `meta` keys to its own tables
///   ([`crate::chain_state::migrate_meta`]).
/// * 3: the sweep request flags moved from `meta` to `sweep_requests` (same migration).
/// * 4: record values MessagePack instead of JSON ([`crate::codec`], every table of
///   [`for_each_record_table`] rewritten on open); the `sequences` table dropped; holdings
///   moved from `holdings` into `accounts`.
/// * 5: the unique key of an issued address laid out address ‖ chain instead of chain ‖
///   address ([`crate::index::address_key`]; the keys of one address on every EVM chain
///   share a leaf): every `UniqueAddress` key of `unique` moved on open.
/// * 6: deposit events store the deposit's changing fields instead of its whole view
///   ([`crate::records::Event::deposit`]), and no event row stores its key's project and
///   sequence again; no index of deposits by wallet (its entries removed on open,
///   [`crate::index::IndexTag::DepositsByWallet`]). Rows of schema 5 read as they are.
/// * 7: the keys of the hot index tags moved from `index` to a table each
///   ([`SPLIT_INDEXES`]); the event index keys moved to [`EVENTS_BY_TYPE`] and
///   [`EVENTS_BY_RESOURCE`] in a shorter layout (a UUID resource id as 16 bytes, no tag, no
///   project where the resource id scopes it); the unique key of a transfer with an EVM hash
///   holds the hash's 32 bytes ([`crate::index::transfer_key`]). Moved on open
///   (`migrate_to_7`).
/// * 8: a wallet's open sweep of an asset is named by its holding row in [`ACCOUNTS`]
///   ([`crate::ledger::Holding`]) instead of a key of its own in [`UNIQUE`]
///   ([`crate::index::IndexTag::UniqueOpenSweep`]): moved on open (`migrate_to_8`).
/// * 9: a customer's deposits and its wallets' sweeps are indexed in one range per customer
///   ([`crate::index::IndexTag::ByCustomer`]) instead of by customer and by wallet apart;
///   sweep rows carry their wallet's customer (`Sweep::customer_id`). Moved and rewritten
///   on open (`migrate_to_9`).
/// * 10: payout events store the payout's changing fields and `wallet.created` stores
///   nothing instead of the resource's whole view ([`crate::records::Event::state`]); the
///   data is rendered from the resource's row, as for deposit events since schema 6. Rows
///   of schema 9 read as they are (no migration); a build of schema 9 refuses the store,
///   whose new events it would render without data. Also from schema 10, `0x` hex text
///   (transaction hashes, EVM addresses) of deposits, wallets, payouts and sweeps is
///   written as its bytes ([`crate::codec::hex_text`]); text rows read as before.
/// * 11: a simulated chain's snapshot is stored in rows of at most [`SIM_SNAPSHOT_CHUNK`]
///   bytes ([`SIM_SNAPSHOT_CHUNKS`]) instead of one row of [`SIM_SNAPSHOTS`]: moved on open
///   (`migrate_to_11`), and `sim_snapshots` deleted. A build of schema 10 refuses the store,
///   whose snapshots it would not find.
/// * 12: a new event's id names its sequence (`ctx::event_ulid`: the ULID's
///   random part holds it), so no [`EVENT_IDS`] row is written for it; the rows of older
///   events stay and are read as before (no migration). A build of schema 11 refuses the
///   store, whose new events it would not find by id. Also from schema 12, a key of
///   [`EVENTS_BY_TYPE`] holds a 4-byte hash of the event type instead of its text
///   ([`crate::index::event_type_key`]): moved on open (`migrate_to_12`). And a journal
///   entry writes the accounts of its own project without the project
///   ([`crate::ledger::JournalEntry`]); entries written before read as they are. And an
///   idempotency record's answer body is stored deflated with a fixed dictionary when that
///   is shorter ([`crate::codec::answer_body`]); text bodies read as they are. And the
///   live sender's rows of [`EVM_OUT_TXS`] are stored as their JSON deflated with a fixed
///   dictionary ([`crate::codec::deflate_doc`]); JSON rows read as they are.
/// * 13: the event indexes are [`EVENT_TYPE_RUNS`] and [`EVENT_RESOURCE_RUNS`], each type's
///   and each resource's sequences in runs of a few bytes per event
///   ([`crate::event_runs`]), instead of a key per event in [`EVENTS_BY_TYPE`] and
///   [`EVENTS_BY_RESOURCE`]: moved on open (`migrate_to_13`), and the old tables deleted.
///   A build of schema 12 refuses the store, whose lists it would not find. Also
///   from schema 13, an event row stores its type as a number of
///   [`crate::codec::EVENT_TYPE_CODES`] (one byte) instead of its text, and a deposit's,
///   payout's or sweep's status (in its row and in its events' states) and a journal
///   entry's kind ([`crate::codec::JOURNAL_KIND_CODES`]) as a number
///   (`coded_serde!` in [`crate::records`]); rows written before read as they are. And
///   `customer.created` stores no data ([`crate::records::ResourceState::Customer`]): the
///   customer's row renders it, and is pinned into the event before the row changes.
/// * 14: a deposit's, payout's, sweep's, customer's or wallet's row and a journal entry are
///   stored without their id, which is their key ([`crate::codec::KEYED_VERSION`], 18
///   bytes less per row); rows of version 3 read as they are (no migration). A build of
///   schema 13 refuses the store, whose rows it would not read. Also from schema 14, the
///   index keys listed per customer (a customer's deposits, its wallets' sweeps, its
///   payouts) are runs of ids in [`ID_RUNS`] ([`crate::id_runs`]) instead of a key each in
///   [`INDEX`]: moved on open (`migrate_to_14`). And a journal entry writes an account of
///   the chain and asset of the posting before as `[customer, kind]`
///   ([`crate::ledger::JournalEntry`]); entries written before read as they are. And an
///   event's id names the event's millisecond as well as its sequence, so its row stores
///   only the id's 40 random bits ([`crate::codec::SHORT_EVENT_ID`]); rows written before
///   keep their whole id. And a credited deposit's event stores `true` for its journal
///   entry, which its row names ([`crate::records::DepositState::ledger_tx_id`]). And a
///   test deposit's transfer in [`SIM_OPS`] is stored as the seed its hash and sender
///   derive from (the binary's `services::sim_chain`, `StoredTx::Minted`).
/// * 15: a project's lists of customers (all, by status), wallets (all, by chain),
///   deposits (all, by chain, by status), payouts (all, by chain, by status) and sweeps
///   (all, by status) are runs of ids, a table each
///   ([`RUN_INDEXES`], `runs_<list>`), written full size ([`RunIndex::padded`]), instead
///   of a key each in their tag's index table: moved on open
///   (`migrate_to_15`); the emptied tables stay. A build of schema 14 refuses the store,
///   whose lists it would not find. Also from schema 15, a keyed row stores its times
///   relative to its id and to its `created_at` ([`crate::codec::KEYED_TIMES_VERSION`]);
///   rows written before read as they are. And an idempotency record is keyed by its
///   project and a 16-byte digest of its method, path and key
///   ([`crate::index::IndexTag::IdempotencyDigest`]; a UUID key as its bytes and a digest
///   of the method and path, [`crate::index::IndexTag::IdempotencyUuid`]), and stores its
///   request fingerprint
///   as the digest's bytes ([`crate::codec::fingerprint_text`]); records keyed the old way
///   are read until they expire (no migration). And an event about a resource whose id
///   is a UUID stores its time from that id's millisecond
///   ([`crate::codec::SHORT_EVENT_ID_REL`]); rows written before read as they are. And a
///   test chain's block of one test
///   deposit's transfer is one short operation in [`SIM_OPS`] (the binary's
///   `StoredOp::DepositBlock`); operations written before read as they are.
/// * 16: a transfer's unique key is its tx hash's first 16 bytes and 8 bytes of a SHA-256
///   digest of chain, hash and log index ([`crate::index::transfer_key`], 25 bytes instead
///   of 45), and an address's is 16 bytes of a SHA-256 digest of the address followed by
///   the chain ([`crate::index::address_key`], 25 bytes on `ethereum` instead of 72):
///   moved on open (`migrate_to_16`). A build of schema 15
///   refuses the store, whose transfers it would detect again.
pub const SCHEMA_VERSION: u32 = 16;

/// Calls `$m!(TABLE, RecordType)` for every table whose values are [`crate::codec`]
/// encodings of one record type: the schema 4 migration rewrites them and `verify` decodes
/// every row of them. A table of records added later belongs here (its rows are written
/// through `codec::encode` whether or not it is listed; the list is what checks them).
#[macro_export]
macro_rules! for_each_record_table {
    ($m:ident) => {
        $m!(PROJECTS, $crate::records::Project);
        $m!(API_KEYS, $crate::records::ApiKey);
        $m!(CUSTOMERS, $crate::records::Customer);
        $m!(WALLETS, $crate::records::Wallet);
        $m!(DEPOSITS, $crate::records::Deposit);
        $m!(PAYOUTS, $crate::records::Payout);
        $m!(SWEEPS, $crate::records::Sweep);
        $m!(CONVERSION_RULES, $crate::records::ConversionRule);
        $m!(CONVERSIONS, $crate::records::Conversion);
        $m!(CONVERSION_BATCHES, $crate::records::ConversionBatch);
        $m!(INVOICES, $crate::records::Invoice);
        $m!(WEBHOOK_ENDPOINTS, $crate::records::WebhookEndpoint);
        $m!(WEBHOOK_DELIVERIES, $crate::records::WebhookDelivery);
        $m!(JOURNAL, $crate::ledger::JournalEntry);
        $m!(EVENTS, $crate::records::Event);
        $m!(IDEMPOTENCY, $crate::records::IdempotencyRecord);
        $m!(BILLING_ACCOUNTS, $crate::records::BillingAccount);
        $m!(BILLING_ENTRIES, $crate::records::BillingEntry);
        $m!(FUNDING_ADDRESSES, $crate::records::FundingAddress);
    };
}
pub use for_each_record_table;
