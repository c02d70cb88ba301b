//! Test mode's simulated chains (DECISIONS.md section 15): one
//! [`SimChain`] per (test project, EVM chain), kept in memory in [`SimChains`] and made
//! durable as an operation log (table `sim_ops`) written in the same store transaction as
//! the request that caused each change (a test deposit's transfer, `/v1/test/blocks`,
//! `/v1/test/reorg`), replayed when the chain is first used after a start. Empty blocks of
//! the timer cost no write each: they coalesce in memory and are written with the next
//! operation of the chain or by the timer's periodic flush ([`flush_all`]). The mempool is
//! not durable, like a node's: a restart loses pending transactions and the sender
//! rebroadcasts them.
//!
//! Test deposits do not hold the chain across their store commit (that would make one
//! project's deposits on one chain commit one per batch): each reserves its block number,
//! timestamp and operation sequence numbers under the chain lock
//! ([`SimHandle::reserve_block`]), queues its store job before releasing the lock (so the
//! writer runs the jobs, and the log is written, in sequence order), awaits its commit
//! without the lock, and settles ([`SimHandle::settle`]): settled reservations are applied
//! in memory in sequence order, whatever order their requests wake in. A refused request
//! writes an empty block under its reserved number (the job writes its operation whatever
//! the outcome), so the log stays contiguous. A job whose previous operation is not stored
//! (its batch did not commit) writes nothing, and the chain is rebuilt from the store
//! before its next change. Every other change of the chain (mining, a reorg, a flush) is
//! exclusive ([`SimHandle::exclusive`]): it waits for the deposits in flight to settle.
//!
//! Snapshots (without them a start replays the whole log, which grows with every test
//! deposit): an exclusive write (mining, the timer's flush) also writes a snapshot of the
//! chain ([`appliance_chains::sim::Snapshot`]) when the operations since the last one reach
//! max([`ChainPolicy::snapshot_min_ops`], the last snapshot's size in operations
//! ([`SNAPSHOT_BYTES_PER_OP`])), amortised O(1) per operation. The snapshot takes the sequence number of the last operation it covers and
//! the rows below it are deleted in the same transaction; a start loads it and replays only
//! the rows after it ([`load`]). A log without a snapshot (written before them) replays
//! from genesis as before and is snapshotted at its first exclusive write.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use appliance_chains::evm::{Address, B256, U256};
use tokio::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use uuid::Uuid;

use appliance_chains::sim::chain::BlockTx;
use appliance_chains::sim::{
    Genesis, Inject, Op, SimChain, SimClient, Snapshot, GENESIS_TREASURY_NATIVE,
    GENESIS_TREASURY_TOKENS,
};
use appliance_storage::codec::uuid_ms;
use appliance_storage::records::{Mode, Project};
use appliance_storage::{ChainStateOps, ReadOps, Store, StoreError, WriteCtx, WriteError};

use crate::registry::Registry;
use crate::services::error::Fault;

/// Most blocks `POST /v1/test/reorg` may replace at once.
pub const MAX_REORG_DEPTH: u64 = 1_000;

/// One test project's simulated chain: the shared chain (its client is the chain seam),
/// the sequence number of its next durable operation, and the lock that serialises whoever
/// drives it (the block timer, `/v1/test/blocks`), so their passes never interleave.
#[derive(Debug)]
pub struct SimHandle {
    pub project: Uuid,
    pub chain: &'static str,
    pub client: SimClient,
    /// Sequence number of the next operation reserved or written; changed only under the
    /// chain lock.
    next_seq: AtomicU64,
    /// Held by a driver for a whole pass (mine, then the work that follows).
    pub drive: Mutex<()>,
    /// Shared by the block reservations in flight (from [`SimHandle::reserve_block`] to
    /// [`SimHandle::settle`]), exclusive for every other change of the chain
    /// ([`SimHandle::exclusive`]). Fair: a waiting exclusive change keeps new
    /// reservations out, so mining is never starved by a stream of deposits.
    gate: RwLock<()>,
    /// The reservations in flight; used only under the chain lock.
    flight: std::sync::Mutex<Flight>,
    /// When the next snapshot is due; changed only under an exclusive hold.
    snap: std::sync::Mutex<SnapState>,
}

/// Where a chain's log begins and when it is next snapshotted.
#[derive(Debug, Clone, Copy)]
struct SnapState {
    /// Sequence number of the log's first row: its snapshot, or 0 (genesis).
    at: u64,
    /// That snapshot's size in operations: its encoded bytes / [`SNAPSHOT_BYTES_PER_OP`]
    /// (0 for genesis).
    size_ops: u64,
    /// Least operations between two snapshots.
    min_ops: u64,
    /// Weight of the operations since the snapshot beyond one each: [`SIGNED_WEIGHT`] per
    /// signed transaction in them ([`signed_weight`]).
    extra: u64,
}

impl SnapState {
    /// Whether a snapshot is due once the log's next sequence number is `next`: the
    /// operations since the last one, weighted ([`SnapState::extra`]), exceed
    /// max(`min_ops`, its size in operations), so writing one costs at most
    /// [`SNAPSHOT_BYTES_PER_OP`] bytes per operation amortised, and a start replays a
    /// bounded amount of work.
    fn due(&self, next: u64) -> bool {
        next.saturating_sub(self.at).saturating_add(self.extra)
            > self.min_ops.max(self.size_ops).max(1)
    }
}

/// Snapshot bytes one operation since the last snapshot may cost, amortised: the cadence
/// waits for max(min_ops, snapshot bytes / this) weighted operations. Counted in bytes, not
/// in entries: a state entry encodes in about 75 B (`snapshot_of_100k_addresses`), but a
/// held block with its transaction in about 300 B (a default loadgen deposits phase:
/// 3,071,959 B for 10,000 held blocks and 257 state entries), so a cadence by entries
/// would write four times the bytes per operation it means to.
pub const SNAPSHOT_BYTES_PER_OP: u64 = 75;

/// A snapshot's size in operations for the cadence ([`SNAPSHOT_BYTES_PER_OP`]).
fn size_ops(encoded_len: usize) -> u64 {
    encoded_len as u64 / SNAPSHOT_BYTES_PER_OP
}

/// Weight of a signed transaction in the snapshot cadence, in operations: a replay
/// recovers its sender from the signature (about 75 us, tens of times the cost of applying
/// a test deposit's operation), and one timer block can mine thousands of sweeps. Without
/// it a start after many sends replays seconds of recoveries (measured: 53 operations
/// holding the sweeps of 100,000 deposits take 1.5 s to load). With it the
/// recoveries a start replays are at most max(min_ops, size in operations) / 25 (0.33 s at
/// 110,000), and a snapshot costs at most 25 * [`SNAPSHOT_BYTES_PER_OP`] = 1.9 KB of writes
/// per signed transaction.
pub const SIGNED_WEIGHT: u64 = 25;

/// The cadence weight of `ops` beyond one per operation ([`SIGNED_WEIGHT`] per signed
/// transaction).
fn signed_weight(ops: &[Op]) -> u64 {
    ops.iter()
        .map(|op| match op {
            Op::Block { txs, .. } => txs
                .iter()
                .filter(|t| matches!(t, BlockTx::Signed { .. }))
                .count() as u64,
            _ => 0,
        })
        .sum::<u64>()
        .saturating_mul(SIGNED_WEIGHT)
}

/// How chains opened from now on are kept: snapshotted at least `snapshot_min_ops`
/// operations apart (config `test.snapshot_min_ops`, default [`crate::config::SNAPSHOT_MIN_OPS`]), and
/// holding `retain_blocks` blocks below the head once their worker read them (config
/// `test.retain_blocks`, default [`appliance_chains::sim::RETAIN_BLOCKS`];
/// `SimChain::set_retain_blocks`).
#[derive(Debug, Clone, Copy)]
pub struct ChainPolicy {
    pub snapshot_min_ops: u64,
    pub retain_blocks: u64,
}

/// Block reservations in flight on one chain (see the module documentation).
#[derive(Debug, Default)]
struct Flight {
    /// Sequence number of the next operation to apply in memory.
    applied: u64,
    /// Blocks reserved and not yet applied.
    blocks: u64,
    /// Timestamp (Unix ms) of the last block reserved.
    last_time_ms: u64,
    /// Settled reservations that wait for an earlier one, by first sequence number:
    /// (operations, the block's operation, `None` when nothing was written).
    settled: BTreeMap<u64, (u64, Option<Op>)>,
    /// An operation applied in memory, or reserved, was not written: the chain is rebuilt
    /// from the store before its next change.
    lost: bool,
}

/// One block of a chain reserved by a request (a test deposit's transfer): its number,
/// timestamp and the sequence numbers of the operations its store job writes (the
/// deferred empty blocks taken from the chain, then the block's own operation).
#[derive(Debug, Clone)]
pub struct Reservation {
    pub project: Uuid,
    pub chain: &'static str,
    /// Sequence number of the first operation written.
    pub seq: u64,
    /// Deferred empty blocks (already applied in memory), written first.
    pub unflushed: Vec<Op>,
    /// Number of the reserved block.
    pub block: u64,
    /// Its timestamp, Unix milliseconds.
    pub time_ms: u64,
}

impl Reservation {
    /// Inside the store transaction, before any write: whether the chain's operations
    /// before this reservation's are all stored (earlier in this transaction or before).
    /// `false` when an earlier one was lost (its batch did not commit): this one must not
    /// be written either, or the log would skip operations.
    pub fn in_order(&self, ctx: &WriteCtx<'_>) -> Result<bool, StoreError> {
        let last = ctx.sim_last_seq(self.project, self.chain)?;
        Ok(match last {
            None => self.seq == 0,
            Some(l) => l.checked_add(1) == Some(self.seq),
        })
    }

    /// Writes the deferred operations, then `op`: the block's own operation (a single
    /// block: the request's transfer, or [`Reservation::empty_block`]).
    pub fn write(&self, ctx: &mut WriteCtx<'_>, op: &Op) -> Result<(), StoreError> {
        for (seq, op) in (self.seq..).zip(self.unflushed.iter().chain(std::iter::once(op))) {
            ctx.sim_op_put(self.project, self.chain, seq, &encode_op(op))?;
        }
        Ok(())
    }

    /// The empty block that takes the reserved number when the request is refused.
    pub fn empty_block(&self) -> Op {
        Op::Empty {
            count: 1,
            t0_ms: self.time_ms,
            step_ms: 0,
        }
    }

    /// How many operations [`Reservation::write`] writes.
    fn count(&self) -> u64 {
        self.unflushed.len() as u64 + 1
    }
}

/// A change of a chain that excludes block reservations ([`SimHandle::exclusive`]): the
/// chain, with no reservation in flight.
pub struct Exclusive<'a> {
    _gate: RwLockWriteGuard<'a, ()>,
    pub chain: MutexGuard<'a, SimChain>,
}

/// What a store transaction needs to make a chain change durable, taken under the chain
/// lock: the operations already applied in memory but not yet written, the next sequence
/// number, and the next block's number and timestamp.
#[derive(Debug, Clone)]
pub struct SimCursor {
    pub project: Uuid,
    pub chain: &'static str,
    pub seq: u64,
    pub unflushed: Vec<Op>,
    /// Number of the next block.
    pub next_block: u64,
    /// Unix milliseconds the next block gets.
    pub next_time_ms: u64,
}

impl SimCursor {
    /// Writes the deferred operations then `ops` under consecutive sequence numbers.
    pub fn write(&self, ctx: &mut WriteCtx<'_>, ops: &[Op]) -> Result<(), StoreError> {
        for (seq, op) in (self.seq..).zip(self.unflushed.iter().chain(ops)) {
            ctx.sim_op_put(self.project, self.chain, seq, &encode_op(op))?;
        }
        Ok(())
    }

    /// How many operations [`SimCursor::write`] writes with `ops`.
    fn count(&self, ops: &[Op]) -> u64 {
        (self.unflushed.len() + ops.len()) as u64
    }
}

/// A snapshot to write with an exclusive write ([`SimHandle::plan_snapshot`]).
#[derive(Debug, Clone)]
pub struct PlannedSnapshot {
    project: Uuid,
    chain: &'static str,
    /// Sequence number of the last operation it covers (the row it replaces).
    at: u64,
    bytes: Vec<u8>,
    /// State entries and held blocks (for the log line).
    entries: u64,
    /// Milliseconds taken to build and encode it (under the chain's exclusive hold).
    encode_ms: u64,
}

impl PlannedSnapshot {
    /// Inside the transaction, after the operations it covers are written: the snapshot
    /// in place of the last one, and the rows below it deleted.
    pub fn write(&self, ctx: &mut WriteCtx<'_>) -> Result<(), StoreError> {
        ctx.sim_snapshot_put(self.project, self.chain, self.at, &self.bytes)?;
        ctx.sim_ops_delete_below(self.project, self.chain, self.at)?;
        Ok(())
    }

    /// Its encoded size, bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it is empty (never: a snapshot has at least its header).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Every test project's simulated chains known to this process, by (project, chain), and
/// the queue of requests to drive them (served by `workers::sim_chain`).
#[derive(Debug)]
pub struct SimChains {
    chains: std::sync::Mutex<HashMap<(Uuid, &'static str), Arc<SimHandle>>>,
    /// Least operations between two snapshots of a chain ([`ChainPolicy`]).
    snapshot_min_ops: AtomicU64,
    /// Blocks a chain holds below its head once read ([`ChainPolicy`]).
    retain_blocks: AtomicU64,
    /// Held while a chain is loaded, so callers that ask for a chain not yet open (the
    /// start-up's `open_stored` and the first requests) load it once, not each.
    opening: Mutex<()>,
    drive_tx: tokio::sync::mpsc::UnboundedSender<Drive>,
    drive_rx: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Drive>>>,
}

impl Default for SimChains {
    fn default() -> Self {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        SimChains {
            chains: Default::default(),
            snapshot_min_ops: AtomicU64::new(crate::config::SNAPSHOT_MIN_OPS),
            retain_blocks: AtomicU64::new(appliance_chains::sim::RETAIN_BLOCKS),
            opening: Mutex::new(()),
            drive_tx: tx,
            drive_rx: std::sync::Mutex::new(Some(rx)),
        }
    }
}

/// What a request asks the chain driver to do on one chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriveAction {
    /// Mine this many blocks.
    Mine(u64),
    /// Replace the last `depth` blocks ([`reorg`]).
    Reorg { depth: u64, drop: bool },
}

/// A request to the chain driver (`workers::sim_chain`): under the chain's drive lock it
/// lets the chain's worker catch up, does `action`, and lets the worker catch up again, so
/// the answer reflects what the chain did (deposits confirmed or unwound, sends tracked).
#[derive(Debug)]
pub struct Drive {
    pub handle: Arc<SimHandle>,
    pub action: DriveAction,
    /// The chain's height afterwards, or why the action was refused.
    pub reply: tokio::sync::oneshot::Sender<Result<u64, SimOpenError>>,
}

impl SimChains {
    /// Sets how chains opened from now on are kept (at start-up, from the `test` config;
    /// `snapshot_min_ops` at least 1, `retain_blocks` as `SimChain::set_retain_blocks`
    /// clamps it).
    pub fn set_policy(&self, p: ChainPolicy) {
        self.snapshot_min_ops
            .store(p.snapshot_min_ops.max(1), Ordering::Relaxed);
        self.retain_blocks.store(p.retain_blocks, Ordering::Relaxed);
    }

    /// Asks the driver to do `action` on `handle`'s chain and waits for the new height.
    pub async fn drive(
        &self,
        handle: Arc<SimHandle>,
        action: DriveAction,
    ) -> Result<u64, SimOpenError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.drive_tx
            .send(Drive {
                handle,
                action,
                reply,
            })
            .map_err(|_| SimOpenError::Write("the chain driver is not running".into()))?;
        rx.await
            .map_err(|_| SimOpenError::Write("the chain driver stopped".into()))?
    }

    /// The driver's end of the queue (taken once, by `workers::sim_chain::run`).
    pub fn take_drive_queue(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Drive>> {
        self.drive_rx.lock().expect("lock").take()
    }
}

/// Key of a test project's chain worker state in the chain-state tables: `chain/project`
/// (the same as `workers::chain::WorkScope::state_key`).
pub fn state_key(chain: &str, project: Uuid) -> String {
    format!("{chain}/{project}")
}

/// Why a simulated chain could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SimOpenError {
    #[error("no test project {0}")]
    NoProject(Uuid),
    #[error("{0} is not a simulated chain")]
    NotSimulated(String),
    #[error("replaying the simulated chain {chain} of project {project}: {detail}")]
    Replay {
        project: Uuid,
        chain: String,
        detail: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("writing the simulated chain: {0}")]
    Write(String),
    /// An earlier operation of the chain was not written (its store batch failed): the
    /// request wrote nothing and may be retried (503, the chain is rebuilt meanwhile).
    #[error("the simulated chain is being rebuilt after a failed write; retry")]
    Rebuilding,
    /// A reorg deeper than the blocks the chain holds (its height, less what it pruned,
    /// `SimChain::check_reorg`): 400 with `param` `depth`.
    #[error("depth must be from 1 to the blocks the chain holds ({most}).")]
    Depth { most: u64 },
}

fn write_error(e: WriteError<StoreError>) -> String {
    match e {
        WriteError::Store(s) => s.to_string(),
        WriteError::Rejected(s) => s.to_string(),
    }
}

/// The genesis of `project`'s chain `chain`: fixed by the project and the registry, so a
/// replay starts from the same block 0. Block hashes are the project's own (seed), the
/// test treasury holds native coin for gas, the registry's tokens have code.
pub fn genesis(reg: &Registry, project: &Project, chain: &str) -> Option<Genesis> {
    let c = reg.chain(chain).filter(|c| c.is_evm())?;
    let mut seed = Vec::with_capacity(16 + 16 + chain.len());
    seed.extend_from_slice(b"appliance-sim:");
    seed.extend_from_slice(project.id.as_bytes());
    seed.extend_from_slice(chain.as_bytes());
    let tokens = c
        .assets
        .iter()
        .filter(|a| !a.is_native)
        .filter_map(|a| a.contract.parse::<Address>().ok())
        .collect();
    Some(Genesis {
        chain: c.id().to_string(),
        chain_id: c.info.chain_id,
        seed: B256::from(appliance_chains::address::keccak256(&seed)),
        time_ms: u64::try_from(project.created_at / 1000).unwrap_or(0),
        treasury: Address::from(appliance_chains::address::test_treasury()),
        treasury_native: U256::from(GENESIS_TREASURY_NATIVE),
        treasury_tokens: U256::from(GENESIS_TREASURY_TOKENS),
        tokens,
    })
}

/// A chain loaded from its stored rows.
struct Loaded {
    chain: SimChain,
    /// Sequence number of the next operation.
    next_seq: u64,
    snap: SnapState,
    /// Rows read (its snapshot and the operations after it).
    rows: usize,
}

/// Loads a chain from its `sim_ops` rows: its snapshot if it has one, then the operations
/// after it in order (the whole log from `g` when it has none). The chain holds
/// `retain_blocks` below its head once read, and is loaded with its worker's hold at
/// `Some(0)` (`SimChain::hold_from`: its worker has not said what it still needs), so
/// the replay holds at least what the run that wrote the log held. Errors name the row.
fn load(
    r: &impl ChainStateOps,
    g: Genesis,
    project: Uuid,
    chain: &str,
    min_ops: u64,
    retain_blocks: u64,
) -> Result<Loaded, SimOpenError> {
    let bad = |detail: String| SimOpenError::Replay {
        project,
        chain: chain.to_string(),
        detail,
    };
    let keep = |c: &mut SimChain| {
        c.set_retain_blocks(retain_blocks);
        c.hold_from(Some(0));
    };
    let mut c = SimChain::new(g.clone());
    keep(&mut c);
    let mut snap = SnapState {
        at: 0,
        size_ops: 0,
        min_ops,
        extra: 0,
    };
    let (mut next_seq, mut n_rows) = (0, 0);
    let mut failed = None;
    let read = r.sim_ops_each(project, chain, &mut |seq, bytes| {
        let step = match decode_row(bytes) {
            Ok(StoredRow::Snapshot(s)) => SimChain::restore(g.clone(), *s).map(|restored| {
                c = restored;
                keep(&mut c);
                snap.at = seq;
                snap.size_ops = size_ops(bytes.len());
                snap.extra = 0;
            }),
            Ok(StoredRow::Op(op)) => {
                snap.extra = snap
                    .extra
                    .saturating_add(signed_weight(std::slice::from_ref(&op)));
                c.apply(&op)
            }
            Err(e) => Err(appliance_chains::sim::SimError::Replay(e)),
        };
        match step {
            Ok(()) => {
                next_seq = seq + 1;
                n_rows += 1;
                Ok(())
            }
            Err(e) => {
                failed = Some(bad(format!("row {seq}: {e}")));
                Err(StoreError::Corrupt(
                    "a simulated chain row does not load".into(),
                ))
            }
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    read?;
    Ok(Loaded {
        chain: c,
        next_seq,
        snap,
        rows: n_rows,
    })
}

/// What a snapshot of `c` holds: state entries and held blocks (logged; the cadence counts
/// bytes, [`SNAPSHOT_BYTES_PER_OP`]).
fn snapshot_entries(c: &SimChain) -> u64 {
    (c.state_entries() + c.blocks_held()) as u64
}

/// Loads the stored chain of `project`'s `chain` ([`load`]).
fn replay(
    r: &impl ChainStateOps,
    reg: &Registry,
    project: &Project,
    chain: &str,
    min_ops: u64,
    retain_blocks: u64,
) -> Result<Loaded, SimOpenError> {
    let g = genesis(reg, project, chain).ok_or_else(|| SimOpenError::NotSimulated(chain.into()))?;
    load(r, g, project.id, chain, min_ops, retain_blocks)
}

/// Wall clock, Unix milliseconds.
pub fn now_ms() -> u64 {
    u64::try_from(appliance_storage::now_us() / 1000).unwrap_or(0)
}

impl SimChains {
    /// The chain `chain` of test project `project`, opened (replayed from the store) on
    /// first use.
    pub async fn get(
        &self,
        store: &Store,
        reg: &Arc<Registry>,
        project: Uuid,
        chain: &str,
    ) -> Result<Arc<SimHandle>, SimOpenError> {
        let c = reg
            .chain(chain)
            .filter(|c| c.is_evm())
            .ok_or_else(|| SimOpenError::NotSimulated(chain.into()))?;
        let id = c.id();
        if let Some(h) = self.chains.lock().expect("lock").get(&(project, id)) {
            return Ok(h.clone());
        }
        let _opening = self.opening.lock().await;
        if let Some(h) = self.chains.lock().expect("lock").get(&(project, id)) {
            return Ok(h.clone());
        }
        let reg2 = reg.clone();
        let min_ops = self.snapshot_min_ops.load(Ordering::Relaxed);
        let retain = self.retain_blocks.load(Ordering::Relaxed);
        let t0 = std::time::Instant::now();
        let loaded = store
            .read(move |r| {
                let p = r.get::<Project>(project)?.filter(|p| p.mode == Mode::Test);
                Ok(p.map(|p| replay(r, &reg2, &p, id, min_ops, retain)))
            })
            .await?
            .ok_or(SimOpenError::NoProject(project))??;
        tracing::info!(chain = id, project = %project, rows = loaded.rows, from_snapshot = loaded.snap.at > 0,
            head = loaded.chain.head(), ms = t0.elapsed().as_millis() as u64, "simulated chain loaded");
        let mut m = self.chains.lock().expect("lock");
        // Another caller may have opened it meanwhile: the first one stays.
        let h = m
            .entry((project, id))
            .or_insert_with(|| {
                let seq = loaded.next_seq;
                Arc::new(SimHandle {
                    project,
                    chain: id,
                    client: SimClient::new(loaded.chain),
                    next_seq: AtomicU64::new(seq),
                    drive: Mutex::new(()),
                    gate: RwLock::new(()),
                    flight: std::sync::Mutex::new(Flight {
                        applied: seq,
                        ..Flight::default()
                    }),
                    snap: std::sync::Mutex::new(loaded.snap),
                })
            })
            .clone();
        Ok(h)
    }

    /// Every chain opened so far.
    pub fn all(&self) -> Vec<Arc<SimHandle>> {
        self.chains
            .lock()
            .expect("lock")
            .values()
            .cloned()
            .collect()
    }

    /// Opens every chain that has stored operations (at start-up, so the timer and the
    /// workers carry on where they were). Chains that fail to replay are logged and left.
    pub async fn open_stored(&self, store: &Store, reg: &Arc<Registry>) -> Vec<Arc<SimHandle>> {
        let stored = match store.read(|r| r.sim_chains()).await {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "listing simulated chains failed");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for (p, c) in stored {
            match self.get(store, reg, p, &c).await {
                Ok(h) => out.push(h),
                Err(e) => tracing::error!(error = %e, "opening a simulated chain failed"),
            }
        }
        out
    }
}

/// The simulated transfer of test deposit `d`, mined alone in a block at `t_ms`: from the
/// deposit's synthetic sender to its address, of its token (registry contract) or the
/// native coin, under its tx hash.
pub fn deposit_transfer(
    reg: &Registry,
    d: &appliance_storage::records::Deposit,
    t_ms: u64,
) -> Result<Op, Fault> {
    let asset = reg
        .asset(&d.chain, &d.asset)
        .ok_or_else(|| Fault::invariant("test deposit of an unknown asset"))?;
    let token = if asset.is_native {
        None
    } else {
        Some(
            asset
                .contract
                .parse::<Address>()
                .map_err(|_| Fault::invariant("registry token contract does not parse"))?,
        )
    };
    let parse = |a: &str| {
        a.parse::<Address>()
            .map_err(|_| Fault::invariant("deposit address does not parse"))
    };
    let hash = parse_tx_hash(&d.tx_hash).ok_or_else(|| Fault::invariant("deposit tx hash"))?;
    Ok(Op::Block {
        t_ms,
        txs: vec![appliance_chains::sim::chain::BlockTx::Injected(
            appliance_chains::sim::Inject {
                hash,
                from: parse(&d.from_address)?,
                to: parse(&d.to_address)?,
                token,
                value: U256::from(d.amount),
            },
        )],
    })
}

/// A transaction hash: `0x` and 64 hex digits (either case).
pub fn parse_tx_hash(s: &str) -> Option<B256> {
    let hex = s.strip_prefix("0x")?;
    if hex.len() != 64 {
        return None;
    }
    hex.parse::<B256>().ok()
}

/// Replaces the last `depth` blocks of `h`'s chain (see `SimChain`), durably: the reorg
/// is written, then applied. Returns the head (unchanged by a reorg).
pub async fn reorg(
    store: &Store,
    h: &SimHandle,
    depth: u64,
    drop: bool,
) -> Result<u64, SimOpenError> {
    let mut x = h.exclusive(store).await?;
    if x.chain.check_reorg(depth).is_err() {
        return Err(SimOpenError::Depth {
            most: x.chain.reorg_depth_held(),
        });
    }
    let cursor = h.cursor(&mut x, now_ms());
    let c = &mut *x.chain;
    let op = Op::Reorg {
        depth,
        drop,
        t_ms: cursor.next_time_ms,
    };
    let (cur, ops) = (cursor.clone(), [op.clone()]);
    match store.write(move |ctx| cur.write(ctx, &ops)).await {
        Ok(()) => {
            let ops = [op];
            h.committed(c, &cursor, &ops, &ops)
                .map_err(|e| SimOpenError::Replay {
                    project: h.project,
                    chain: h.chain.into(),
                    detail: e.to_string(),
                })?;
            Ok(c.head())
        }
        Err(e) => {
            h.failed(c, cursor);
            Err(SimOpenError::Write(write_error(e)))
        }
    }
}

/// Most blocks one call may mine.
pub const MAX_BLOCKS: u64 = 10_000;

mod codec;
mod handle;
pub use codec::*;

#[cfg(test)]
mod op_codec_tests {
    use appliance_chains::evm::{Address, B256, U256};
    use appliance_chains::sim::chain::BlockTx;
    use appliance_chains::sim::{Inject, Op};

    /// An ethereum chain's genesis for tests: one token (`0x33..`), treasury `0x77..`
    /// holding 1,000 ETH and `treasury_tokens` of the token.
    pub(super) fn genesis(treasury_tokens: U256) -> appliance_chains::sim::Genesis {
        appliance_chains::sim::Genesis {
            chain: "ethereum".into(),
            chain_id: 1,
            seed: B256::repeat_byte(7),
            time_ms: 1_700_000_000_000,
            treasury: Address::repeat_byte(0x77),
            treasury_native: U256::from(10u64).pow(U256::from(21u64)),
            treasury_tokens,
            tokens: vec![Address::repeat_byte(0x33)],
        }
    }

    use super::{decode_op, encode_op};

    fn every_kind() -> Vec<Op> {
        let inject = |token: Option<Address>, value: U256| {
            BlockTx::Injected(Inject {
                hash: B256::repeat_byte(0xab),
                from: Address::repeat_byte(0x11),
                to: Address::repeat_byte(0x22),
                token,
                value,
            })
        };
        vec![
            Op::Empty {
                count: 3,
                t0_ms: 1_700_000_000_000,
                step_ms: 1000,
            },
            Op::Block {
                t_ms: 1_700_000_001_000,
                txs: vec![
                    inject(Some(Address::repeat_byte(0x33)), U256::from(100_000_000u64)),
                    inject(None, U256::MAX),
                    inject(None, U256::ZERO),
                    BlockTx::Signed {
                        raw: vec![0x02, 0xf8, 0x6f, 0x01, 0x80].into(),
                    },
                ],
            },
            Op::Block {
                t_ms: 5,
                txs: vec![],
            },
            Op::Reorg {
                depth: 6,
                drop: true,
                t_ms: 9,
            },
        ]
    }

    /// Every kind of operation, with the alloy types inside (hashes, addresses, `U256` up
    /// to its maximum, raw bytes), reads back equal from the codec. Internally tagged enums
    /// are buffered by serde before they are decoded, which is where a binary format could
    /// go wrong.
    #[test]
    fn every_operation_round_trips_through_the_codec() {
        for op in every_kind() {
            let bytes = encode_op(&op);
            assert_eq!(bytes[0], appliance_storage::codec::POSITIONAL_VERSION);
            let named = appliance_storage::codec::encode_readable(&op);
            assert!(
                bytes.len() < named.len() || bytes.len() <= 8,
                "{} !< {}",
                bytes.len(),
                named.len()
            );
            assert_eq!(decode_op(&bytes).unwrap(), op);
            assert!(appliance_storage::chain_state::sim_op_readable(&bytes));
        }
    }

    /// A test deposit's operation (a block with one injected token transfer) as bytes: the
    /// hashes, addresses and amount raw, not hex strings.
    #[test]
    fn a_test_deposits_operation_is_stored_as_bytes() {
        let op = Op::Block {
            t_ms: 1_700_000_001_000,
            txs: vec![BlockTx::Injected(Inject {
                hash: B256::repeat_byte(0xab),
                from: Address::repeat_byte(0x11),
                to: Address::repeat_byte(0x22),
                token: Some(Address::repeat_byte(0x33)),
                value: U256::from(25_000_000u64),
            })],
        };
        let bytes = encode_op(&op);
        let named = appliance_storage::codec::encode_readable(&op);
        assert!(bytes.len() <= 140, "{} B", bytes.len());
        assert!(named.len() >= 250, "{} B", named.len());
        assert_eq!(decode_op(&bytes).unwrap(), op);
    }

    /// A test deposit's transfer (hash and sender made from a seed, `deposits::Minted`) is
    /// stored as its seed (schema 14): 40 bytes less than the same transfer with a hash and
    /// sender of no seed, and it reads back whole; the hash and sender are exactly what the
    /// deposit shows (`services::sim_transfer_hash`, `deposits::Minted::fresh`).
    #[test]
    fn a_test_deposits_transfer_is_stored_as_its_seed() {
        let minted = crate::services::deposits::Minted::fresh();
        let hash: B256 = minted.tx_hash.parse().unwrap();
        let from: Address = minted.from_address.parse().unwrap();
        let seed = uuid::Uuid::from_slice(&hash[..16]).unwrap();
        assert_eq!(super::codec::minted_transfer(seed), (hash, from));
        let t_ms = super::uuid_ms(seed) + 3;
        let tx = |hash: B256, from: Address| {
            BlockTx::Injected(Inject {
                hash,
                from,
                to: Address::repeat_byte(0x22),
                token: Some(Address::repeat_byte(0x33)),
                value: U256::from(25_000_000u64),
            })
        };
        let block = |txs: Vec<BlockTx>| Op::Block { t_ms, txs };
        // A block of the deposit's transfer alone (schema 15): 74 bytes, which read back.
        let op = block(vec![tx(hash, from)]);
        let bytes = encode_op(&op);
        assert_eq!(bytes.len(), 74);
        assert_eq!(decode_op(&bytes).unwrap(), op);
        assert!(appliance_storage::chain_state::sim_op_readable(&bytes));
        // A block time long before the seed's reads back too.
        let early = Op::Block {
            t_ms: 1_700_000_001_000,
            txs: vec![tx(hash, from)],
        };
        assert_eq!(decode_op(&encode_op(&early)).unwrap(), early);
        // In a block of two, each is stored as its seed (schema 14): 40 bytes less than
        // whole.
        let two = block(vec![tx(hash, from), tx(hash, from)]);
        let seeds = encode_op(&two);
        assert_eq!(decode_op(&seeds).unwrap(), two);
        // Another sender (or hash) is not a seed's: stored whole, and it reads as written.
        let other = Address::repeat_byte(0x11);
        let whole = encode_op(&block(vec![tx(hash, from), tx(hash, other)]));
        assert_eq!(
            decode_op(&whole).unwrap(),
            block(vec![tx(hash, from), tx(hash, other)])
        );
        assert_eq!(seeds.len() + 40, whole.len());
        let mut h = hash;
        h.0[31] ^= 1;
        let other = block(vec![tx(h, from)]);
        let alone = encode_op(&other);
        assert_eq!(decode_op(&alone).unwrap(), other);
        assert!(
            bytes.len() + 60 < alone.len(),
            "{} {}",
            bytes.len(),
            alone.len()
        );
        // A stored time that does not add up to a u64 is refused, not wrapped.
        let bad =
            appliance_storage::codec::encode_positional(&super::codec::StoredOp::DepositBlock {
                dt_ms: i64::MIN,
                seed,
                to: Address::repeat_byte(0x22),
                token: None,
                value: U256::from(1u8),
            });
        assert!(decode_op(&bad).is_err());
    }

    /// Rows of codec version 2 (MessagePack with named fields and hex strings, written
    /// before operations were stored as bytes) still read and verify.
    #[test]
    fn operations_stored_named_still_read() {
        for op in every_kind() {
            let bytes = appliance_storage::codec::encode_readable(&op);
            assert_eq!(bytes[0], appliance_storage::codec::VALUE_VERSION);
            assert_eq!(decode_op(&bytes).unwrap(), op);
            assert!(appliance_storage::chain_state::sim_op_readable(&bytes));
        }
        assert!(decode_op(&[appliance_storage::codec::POSITIONAL_VERSION, 0xc1]).is_err());
        assert!(decode_op(&[appliance_storage::codec::POSITIONAL_VERSION, 0x80]).is_err());
    }

    /// A snapshot of a chain with state and held blocks reads back equal from its stored
    /// row, is recognised as a snapshot (and operations are not), and loads to the chain.
    #[test]
    fn a_snapshot_row_round_trips_and_is_told_from_operations() {
        use appliance_chains::sim::SimChain;
        let g = genesis(U256::MAX >> 4);
        let mut c = SimChain::new(g.clone());
        for op in every_kind().into_iter().take(1) {
            c.apply(&op).unwrap();
        }
        for i in 0..300u64 {
            let mut h = [0u8; 32];
            h[..8].copy_from_slice(&i.to_be_bytes());
            let (op, _, _) = c.inject_op(
                Inject {
                    hash: B256::from(h),
                    from: Address::repeat_byte(0xee),
                    to: Address::from_word(B256::from(U256::from(i + 1))),
                    token: (i % 2 == 0).then(|| Address::repeat_byte(0x33)),
                    value: U256::from(1_000_000 + i),
                },
                1_700_000_001_000 + i,
            );
            c.apply(&op).unwrap();
        }
        let snap = c.snapshot();
        let row = super::encode_snapshot(&snap);
        assert_eq!(row[0], appliance_storage::codec::POSITIONAL_VERSION);
        assert!(appliance_storage::chain_state::sim_row_is_snapshot(&row));
        assert!(appliance_storage::chain_state::sim_op_readable(&row));
        assert!(decode_op(&row).is_err(), "a snapshot is not an operation");
        let super::StoredRow::Snapshot(back) = super::decode_row(&row).unwrap() else {
            panic!("read as an operation")
        };
        assert_eq!(*back, snap);
        let r = SimChain::restore(g, *back).unwrap();
        assert_eq!(r.snapshot(), snap);
        assert_eq!(r.block(c.head()), c.block(c.head()));
        // About 300 B per injected block held (transfer, result, state change) with its
        // balance: bytes, not hex (hex strings would double it).
        assert!(row.len() < 300 * 350, "{} B", row.len());
        for op in every_kind() {
            for bytes in [
                encode_op(&op),
                appliance_storage::codec::encode_readable(&op),
                serde_json::to_vec(&op).unwrap(),
            ] {
                assert!(!appliance_storage::chain_state::sim_row_is_snapshot(&bytes));
                assert!(matches!(
                    super::decode_row(&bytes),
                    Ok(super::StoredRow::Op(o)) if o == op
                ));
            }
        }
    }

    /// Every kind of held transaction reads back from the stored row.
    #[test]
    fn held_transactions_of_every_kind_round_trip() {
        use appliance_chains::sim::chain::snapshot::{Amount, SnapBlock, SnapTx, Snapshot};
        let txs = vec![
            SnapTx::Signed(vec![2, 3].into()),
            SnapTx::Injected(
                B256::repeat_byte(1),
                Address::repeat_byte(2),
                Address::repeat_byte(3),
                None,
                Amount(U256::from(5u64)),
            ),
            SnapTx::SignedBy(vec![2, 4].into(), Address::repeat_byte(9)),
        ];
        let snap = Snapshot {
            seed: B256::ZERO,
            head: 1,
            floor: (0, B256::ZERO, 0),
            forks: vec![],
            runs: vec![],
            nonces: vec![],
            native: vec![],
            tokens: vec![],
            code: vec![],
            blocks: vec![SnapBlock {
                number: 1,
                t_ms: 1,
                hash: B256::ZERO,
                txs,
                results: vec![],
                undo: vec![],
            }],
        };
        let row = super::encode_snapshot(&snap);
        match super::decode_row(&row) {
            Ok(super::StoredRow::Snapshot(back)) => assert_eq!(*back, snap),
            Ok(_) => panic!("an operation"),
            Err(e) => panic!("{e}"),
        }
    }

    /// The cadence: due when the operations since the snapshot exceed max(min_ops, its
    /// size in operations), a signed transaction weighing `SIGNED_WEIGHT` operations.
    #[test]
    fn signed_transactions_weigh_in_the_snapshot_cadence() {
        use super::{signed_weight, SnapState, SIGNED_WEIGHT};
        let st = SnapState {
            at: 100,
            size_ops: 20_000,
            min_ops: 10_000,
            extra: 0,
        };
        assert!(!st.due(100 + 20_000) && st.due(100 + 20_001));
        // A snapshot's size in operations is its bytes over 75: the 3 MB snapshot of 10,000
        // held blocks waits for 40,959 operations, not for its 10,257 entries.
        assert_eq!(super::size_ops(3_071_959), 40_959);
        let small = SnapState { size_ops: 5, ..st };
        assert!(!small.due(100 + 10_000) && small.due(100 + 10_001));
        assert_eq!(
            signed_weight(&every_kind()),
            SIGNED_WEIGHT,
            "one signed transaction"
        );
        let sends = SnapState {
            extra: 300 * SIGNED_WEIGHT,
            ..st
        };
        assert!(!sends.due(100 + 20_000 - 300 * SIGNED_WEIGHT));
        assert!(sends.due(100 + 20_001 - 300 * SIGNED_WEIGHT));
    }

    /// Rows written before the codec (bare JSON) still read, and still verify.
    #[test]
    fn operations_stored_as_bare_json_still_read() {
        for op in every_kind() {
            let json = serde_json::to_vec(&op).unwrap();
            assert_eq!(json[0], b'{');
            assert_eq!(decode_op(&json).unwrap(), op);
            assert!(appliance_storage::chain_state::sim_op_readable(&json));
        }
        assert!(decode_op(b"{\"op\":\"nope\"}").is_err());
        assert!(decode_op(&[2, 0xc1]).is_err());
        assert!(!appliance_storage::chain_state::sim_op_readable(&[2, 0xc1]));
    }
}

/// Benchmark (`#[ignore]`; run with `cargo test --release -p appliance --lib
/// snapshot_of_100k_addresses -- --ignored --nocapture`): the snapshot of a chain with
/// 100,000 funded addresses (one injected token transfer each, as test deposits make):
/// its bytes, the time to build and encode it, the time to commit it with the deletion of
/// the 100,000 operations it covers, and the time to load it back.
#[cfg(test)]
mod snapshot_bench {
    use std::time::Instant;

    use appliance_chains::evm::{Address, B256, U256};
    use appliance_chains::sim::{Inject, SimChain};
    use appliance_storage::{ChainStateOps, Store, StoreError, StoreOptions};

    #[test]
    #[ignore]
    fn snapshot_of_100k_addresses() {
        const N: u64 = 100_000;
        let token = Address::repeat_byte(0x33);
        let g = super::op_codec_tests::genesis(U256::from(10u64).pow(U256::from(30u64)));
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let project = uuid::Uuid::now_v7();
        let mut c = SimChain::new(g.clone());
        let mut batch = Vec::new();
        for i in 0..N {
            let mut h = [0u8; 32];
            h[..8].copy_from_slice(&i.to_be_bytes());
            let (op, _, _) = c.inject_op(
                Inject {
                    hash: B256::from(h),
                    from: Address::repeat_byte(0xee),
                    to: Address::from_word(B256::from(U256::from(i + 1) << 80)),
                    token: Some(token),
                    value: U256::from(25_000_000u64 + i),
                },
                1_700_000_001_000 + i,
            );
            c.apply(&op).unwrap();
            batch.push((i, super::encode_op(&op)));
            if batch.len() == 5_000 {
                let b = std::mem::take(&mut batch);
                store
                    .write_blocking(move |ctx| {
                        for (seq, bytes) in &b {
                            ctx.sim_op_put(project, "ethereum", *seq, bytes)?;
                        }
                        Ok::<_, StoreError>(())
                    })
                    .unwrap();
            }
        }
        let t = Instant::now();
        let snap = c.snapshot();
        let built = t.elapsed();
        let bytes = super::encode_snapshot(&snap);
        let encoded = t.elapsed();
        let size = bytes.len();
        let t = Instant::now();
        let deleted = store
            .write_blocking(move |ctx| {
                ctx.sim_snapshot_put(project, "ethereum", N - 1, &bytes)?;
                ctx.sim_ops_delete_below(project, "ethereum", N - 1)
            })
            .unwrap();
        let commit = t.elapsed();
        assert_eq!(deleted, N - 1);
        let t = Instant::now();
        let rows = store
            .read_blocking(move |r| r.sim_ops_from(project, "ethereum"))
            .unwrap();
        assert_eq!(rows.len(), 1);
        let super::StoredRow::Snapshot(s) = super::decode_row(&rows[0].1).unwrap() else {
            panic!("not a snapshot")
        };
        let r = SimChain::restore(g, *s).unwrap();
        let load = t.elapsed();
        assert_eq!(r.head(), c.head());
        println!(
            "snapshot of {N} funded addresses: {} state entries, {} blocks held, {size} B \
             ({:.0} B per entry); built in {built:?}, encoded by {encoded:?}; commit with \
             {deleted} operations deleted {commit:?}; read and restored in {load:?}",
            c.state_entries(),
            c.blocks_held(),
            size as f64 / (c.state_entries() + c.blocks_held()) as f64,
        );
    }
}
