//! The watcher of one chain worker: follows blocks through the client, records transfers
//! to the deposit addresses of its scope as `detected` deposits, counts confirmations,
//! credits at the threshold and unwinds deposits whose blocks leave the canonical chain.
//! Its position and the recent block hashes are written in the same transaction as the
//! deposits of each slice of blocks: after a restart it resumes exactly there.

use std::collections::BTreeMap;

use anyhow::anyhow;
use uuid::Uuid;

use appliance_chains::client::{BlockRef, ClientError, RangeScan, Transfer, WatchSet};
use appliance_chains::evm::watcher::Cursor;
use appliance_chains::evm::Address;
use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Deposit, Project, Wallet};
use appliance_storage::{ChainStateOps, ReadOps, ScanOps, WriteCtx};

use super::store::{load_watch, save_watch, WatchState};
use super::{
    clean, hex32, note, set_health, write, ChainIdMismatch, ChainWorker, Scopes, WorkScope,
    MAX_BACKOFF,
};
use crate::handles::Handles;
use crate::services::chains::AdapterHealth;
use crate::services::deposits;
use crate::services::error::Fault;

/// Most blocks one watcher pass asks the client for. The client splits a range into the
/// node calls it needs, so a watcher that is behind catches up in large
/// steps; deposits are still committed in slices ([`MAX_DEPOSITS_PER_COMMIT`]).
pub const MAX_RANGE: u64 = 2_000;

/// Blocks of the first range the scanner of a catch-up asks for ([`Watched::pipelined`]);
/// each following range is twice as large, up to [`MAX_RANGE`], and the last ones before
/// the head shrink again by halves down to this size ([`range_len`]). The first range is
/// scanned before anything commits, so it is kept short; later ones are scanned while
/// earlier ones commit, and larger ones cost fewer node requests per block (each log
/// query carries its chunk of watched addresses). A pipelined watcher behind the head by
/// more than this many blocks starts a scanner; otherwise it follows the head one pass at
/// a time.
pub const FIRST_RANGE: u64 = 100;

/// Blocks of the scanner's next range: `ramp` (the growing size: [`FIRST_RANGE`], doubled
/// per range, at most [`MAX_RANGE`]), but at most half of the `left` blocks up to the head
/// (and never under [`FIRST_RANGE`]), so the ranges shrink by halves towards the head.
/// Why: the catch-up ends with the commit of the last range, which the store writer does
/// alone (nothing is left to scan, the node and the scanner idle), so the last range is
/// kept short: 2,900 blocks left go as 1,450, 725, 362, 181, 100 and 82 instead of 2,000
/// and 900 (in the catch-up benchmark the last 900 blocks take the writer about 0.35 s
/// alone).
/// Each range costs a few fixed node requests (the head, each recipient chunk's log
/// query), so the shrinking stops at [`FIRST_RANGE`].
fn range_len(ramp: u64, left: u64) -> u64 {
    ramp.min((left / 2).max(FIRST_RANGE))
}

/// Last block of the scanner's range from block `from`, with the head at `head` and the
/// ramp at `ramp`: [`range_len`] blocks, the head at most.
fn range_end(from: u64, head: u64, ramp: u64) -> u64 {
    head.min(from + range_len(ramp, head + 1 - from) - 1)
}

/// Scanned ranges a scanner may hold ahead of the range committing (queued, or being
/// scanned): with ranges of at most [`MAX_RANGE`] blocks, a watcher holds at most three
/// ranges of blocks in memory (their block references and matched transfers; the node's
/// block bodies and logs are dropped when a scan ends).
const AHEAD_RANGES: usize = 2;

/// Most rows of `evm_block_deposits` one watcher commit forgets (the first commit on a
/// store written before they were forgotten takes its backlog in steps of this).
const FORGET_PER_COMMIT: usize = 4_096;

/// Blocks below its cursor whose hashes the watcher remembers to find a reorg's fork
/// point: twice the confirmations, at least 256.
pub(crate) fn memory_blocks(w: &ChainWorker) -> usize {
    (w.required_confirmations as usize * 2).max(256)
}

/// The deposit addresses a watcher looks for and its scanner, if one runs.
#[derive(Default)]
pub struct Watched {
    /// The addresses learnt; moved into the scanner while one runs ([`Scanner`]), and
    /// back when it stops.
    learnt: Learnt,
    /// Whether a catch-up runs a scanner ahead of the commits ([`Watched::pipelined`]).
    pipeline: bool,
    scanner: Option<Scanner>,
    /// A range scanned ahead was dropped (it no longer continued the cursor or the chain):
    /// the next pass scans from the cursor itself, where a reorg is found and unwound
    /// ([`reorg`]), before a scanner runs again.
    resync: bool,
}

/// The deposit addresses learnt incrementally: wallet ids are UUID v7 minted on the store's
/// writer thread, so the rows above the last one seen are exactly the wallets created since.
#[derive(Default)]
struct Learnt {
    /// The learnt addresses, each with its wallet's id.
    set: WatchSet,
    last: Option<Uuid>,
    /// Whether each project seen is in the worker's scope.
    projects: BTreeMap<Uuid, bool>,
}

/// A range the scanner read: its blocks (in order, linked by parent hash) and the
/// transfers in them to the addresses it was scanned for, with their wallets.
struct Scanned {
    from: u64,
    to: u64,
    /// The head read before this range was scanned (the watched set was refreshed after).
    head: u64,
    blocks: Vec<BlockRef>,
    kept: Vec<(Transfer, Uuid)>,
}

/// A task scanning the ranges after the cursor while the watcher's passes commit them
/// ([`scan_ahead`]), at most [`AHEAD_RANGES`] ranges ahead.
struct Scanner {
    queue: tokio::sync::mpsc::Receiver<anyhow::Result<Scanned>>,
    task: Option<tokio::task::JoinHandle<Learnt>>,
}

impl Drop for Scanner {
    fn drop(&mut self) {
        // The watcher was dropped (shutdown) with its scanner running.
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Scanner {
    /// Drops the queued ranges, stops the scan (at its next await: a scan under way is
    /// abandoned) and returns the addresses learnt. A scanner that panicked (a bug) leaves
    /// nothing: the addresses are learnt again from the first wallet.
    async fn stop(mut self) -> Learnt {
        let task = self.task.take();
        // Closing the queue is the scanner's signal to stop.
        self.queue.close();
        drop(self);
        match task {
            Some(t) => t.await.unwrap_or_default(),
            None => Learnt::default(),
        }
    }
}

/// Wallet rows read per store snapshot while learning addresses.
const WALLET_PAGE: usize = 10_000;

impl Watched {
    /// A watcher memory whose catch-up runs a scanner ahead of the commits (the live watch
    /// loop, [`scan_ahead`]). The default does not (the simulated chain's driven passes,
    /// which must each read the chain as it is after the drive's action).
    pub fn pipelined() -> Watched {
        Watched {
            pipeline: true,
            ..Watched::default()
        }
    }

    /// Stops the scanner, if one runs ([`Scanner::stop`]), and takes back the addresses it
    /// learnt.
    async fn stop_scanner(&mut self) {
        if let Some(s) = self.scanner.take() {
            self.learnt = s.stop().await;
        }
    }
}

pub(super) async fn watch_loop(state: Handles, w: ChainWorker) {
    let mut backoff = w.poll;
    let mut checked = false;
    let mut watched = Watched::pipelined();
    // Until the node is first reached the chain is `paused`.
    let mut reached = false;
    loop {
        let step = std::panic::AssertUnwindSafe(watch_step(&state, &w, &mut checked, &mut watched));
        let r = match futures_util::FutureExt::catch_unwind(step).await {
            Ok(r) => r,
            Err(_) => Err(anyhow!("the watcher step panicked (a bug); retrying")),
        };
        match r {
            Ok(caught_up) => {
                reached = true;
                // A node skipped by the client's failover is said in the status_note.
                let h = match w.client.health_note() {
                    Some(n) => AdapterHealth::Degraded(n),
                    None => AdapterHealth::Healthy,
                };
                set_health(&state, &w, h);
                backoff = w.poll;
                if caught_up {
                    tokio::time::sleep(w.poll).await;
                }
            }
            Err(e) => {
                tracing::warn!(chain = w.chain, key = %w.key, error = %clean(&e), "watcher step failed");
                let h = if reached {
                    AdapterHealth::Failing(note(&e))
                } else if e.chain().any(|x| x.is::<ChainIdMismatch>()) {
                    AdapterHealth::Unreached(note(&e))
                } else {
                    AdapterHealth::Unreached(crate::services::chains::CONNECTING.into())
                };
                set_health(&state, &w, h);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Whether `first` (the first block of a new scan) extends what `cursor` processed.
fn extends(cursor: &Cursor, first: &BlockRef) -> bool {
    match cursor.hash_at(first.number.wrapping_sub(1)) {
        Some(h) => h == first.parent_hash,
        // Nothing remembered (first scan): nothing to contradict.
        None => true,
    }
}

/// Whether `blocks` may be appended to `cursor` (a range is committed only when
/// it hangs from the stored head): consecutive numbers from the block after the cursor's,
/// each block's parent the block before it, the first one's parent the hash stored for the
/// cursor's block. Checked in the transaction that appends them, against the cursor as
/// stored then, so the stored hashes always form one chain.
fn continues(cursor: &Cursor, blocks: &[BlockRef]) -> bool {
    let Some(first) = blocks.first() else {
        return true;
    };
    if cursor.height.is_some_and(|h| h + 1 != first.number) || !extends(cursor, first) {
        return false;
    }
    blocks
        .windows(2)
        .all(|p| p[1].number == p[0].number + 1 && p[1].parent_hash == p[0].hash)
}

/// Records processed blocks in the cursor, keeping at most `capacity`.
fn push(cursor: &mut Cursor, blocks: &[BlockRef], capacity: usize) {
    for b in blocks {
        cursor.recent.push_back((b.number, b.hash));
        cursor.height = Some(b.number);
    }
    while cursor.recent.len() > capacity {
        cursor.recent.pop_front();
    }
}

/// One pass. While a scanner runs ([`Watched::pipelined`], behind the head by more than
/// [`FIRST_RANGE`] blocks): commit the next range it scanned, when that range still
/// continues the committed chain ([`Scanned::usable`]). Otherwise: scan up to
/// [`MAX_RANGE`] blocks after the cursor, record and confirm deposits, move the cursor.
/// Deposits are committed in slices ([`commit_range`]). `Ok(true)` when caught up with
/// the head.
pub async fn watch_step(
    state: &Handles,
    w: &ChainWorker,
    checked: &mut bool,
    watched: &mut Watched,
) -> anyhow::Result<bool> {
    if !*checked {
        if let Some(n) = w.client.chain_id().await? {
            if n != w.chain_id {
                return Err(ChainIdMismatch {
                    got: n,
                    expected: w.chain_id,
                }
                .into());
            }
        }
        *checked = true;
    }
    if let Some(done) = commit_scanned(state, w, watched).await {
        return done;
    }
    let key = w.key.clone();
    let ws = state.store.read(move |r| load_watch(r, &key)).await?;
    let head = w.client.head().await?;
    let from = match ws.cursor.height {
        Some(h) => h + 1,
        None => w.start_block.unwrap_or(head),
    };
    if from > head {
        // Nothing new. The block at the node's head (our last block, or an older one when
        // the node is behind us: a lagging node, or one of a pool that serves an older
        // view) must still be the one we processed there; a different one is a reorg. A
        // node that is merely behind changes nothing: a block it does not have yet is no
        // evidence that ours left the chain.
        if let Some(h) = ws.cursor.height {
            let at = h.min(head);
            if let (Some(b), Some(ours)) = (w.client.block(at).await?, ws.cursor.hash_at(at)) {
                if b.hash != ours {
                    return reorg(state, w, ws).await.map(|_| false);
                }
            }
        }
        crate::ops::metrics::chain_position(w.chain, w.scope.mode(), head, from.saturating_sub(1));
        return Ok(true);
    }
    if watched.pipeline && !std::mem::take(&mut watched.resync) && head - from >= FIRST_RANGE {
        // Catching up: a scanner reads the ranges ahead while the passes commit them. It
        // learns the addresses itself (the first range waits for them, nothing else does).
        let (tx, queue) = tokio::sync::mpsc::channel(AHEAD_RANGES);
        let learnt = std::mem::take(&mut watched.learnt);
        let task = tokio::spawn(scan_ahead(state.clone(), w.clone(), learnt, from, tx));
        watched.scanner = Some(Scanner {
            queue,
            task: Some(task),
        });
        return match commit_scanned(state, w, watched).await {
            Some(done) => done,
            // It stopped at once (the head moved back): the next pass looks again.
            None => Ok(false),
        };
    }
    // After the head is read: every wallet that can have received a transfer in blocks up
    // to `head` was created before it. (The scanner keeps the same rule for each range.)
    let learnt = &mut watched.learnt;
    learnt.refresh_logged(state, w).await?;
    let to = head.min(from + MAX_RANGE - 1);
    let scan = match w.client.transfers(from, to, &learnt.set).await {
        Ok(s) => s,
        Err(ClientError::Moving(why)) => {
            tracing::debug!(chain = w.chain, why, "chain moved during scan; rescanning");
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    };
    let Some(first) = scan.blocks.first() else {
        return Err(anyhow!("the client returned no blocks for {from}..={to}"));
    };
    if !extends(&ws.cursor, first) {
        return reorg(state, w, ws).await.map(|_| false);
    }
    let kept = learnt.keep(scan.transfers);
    commit_range(state, w, ws.cursor.height, scan.blocks, kept).await?;
    crate::ops::metrics::chain_position(w.chain, w.scope.mode(), head, to);
    Ok(to == head)
}

/// The scanner of a catch-up: from block `from` on, scans ranges (growing from
/// [`FIRST_RANGE`] to [`MAX_RANGE`], shrinking again near the head: [`range_len`]) and
/// queues them for the watcher's passes, at most [`AHEAD_RANGES`] ahead of the range
/// committing. Returns the addresses learnt when it stops: caught up (a range reached the
/// head it read), its queue closed by the watcher ([`Scanner::stop`]), or after queueing an
/// error.
///
/// The rules a pass keeps hold for each range:
/// * addresses: the watched set is refreshed after each head is read, and a range ends
///   at or below that head, so every wallet that can have received a transfer in the range
///   (one created before the head was read) is in the set it is scanned and matched with;
/// * [`ClientError::Moving`] (the chain changed during the scan): the range is scanned
///   again (set refreshed, head read again); nothing of the failed scan is queued;
/// * any other scan error is queued as the range's outcome and the scanner stops: the
///   pass reports it as a failed pass does (backoff, chain health), and the next pass
///   scans from the cursor again. The client's node failover is inside `transfers`;
/// * nothing here decides whether a range may be committed: the pass checks each against
///   the cursor and the chain when it takes it ([`Scanned::usable`]).
async fn scan_ahead(
    state: Handles,
    w: ChainWorker,
    mut learnt: Learnt,
    mut from: u64,
    tx: tokio::sync::mpsc::Sender<anyhow::Result<Scanned>>,
) -> Learnt {
    let mut range = FIRST_RANGE;
    // Nothing learnt yet: the watcher's first scanner since it started.
    let mut learning = learnt.last.is_none() && !w.tokens.is_empty();
    loop {
        // Room in the queue first, so the range is scanned against the newest head and set.
        let Ok(slot) = tx.reserve().await else {
            return learnt;
        };
        let head = match w.client.head().await {
            Ok(h) => h,
            Err(e) => {
                slot.send(Err(e.into()));
                return learnt;
            }
        };
        if from > head {
            return learnt;
        }
        let to = range_end(from, head, range);
        // At the watcher's start the addresses are still to learn (100,000 take a few
        // hundred ms): the first range's token transfers are read meanwhile.
        let early = if learning {
            learning = false;
            match scan_while_learning(&state, &w, &mut learnt, from, to).await {
                Ok(s) => s,
                Err(e) => {
                    slot.send(Err(e));
                    return learnt;
                }
            }
        } else {
            None
        };
        let scan = match early {
            Some(s) => Ok(s),
            None => {
                // After the head is read (as a single pass does): the set then holds every
                // wallet that can have received a transfer in blocks up to `head`.
                if let Err(e) = learnt.refresh_logged(&state, &w).await {
                    slot.send(Err(e));
                    return learnt;
                }
                tokio::select! {
                    s = w.client.transfers(from, to, &learnt.set) => s,
                    _ = tx.closed() => return learnt,
                }
            }
        };
        match scan {
            Ok(s) => {
                let kept = learnt.keep(s.transfers);
                slot.send(Ok(Scanned {
                    from,
                    to,
                    head,
                    blocks: s.blocks,
                    kept,
                }));
                if to >= head {
                    // Caught up: the passes follow the head one at a time again.
                    return learnt;
                }
                from = to + 1;
                range = (range * 2).min(MAX_RANGE);
            }
            Err(ClientError::Moving(why)) => {
                tracing::debug!(
                    chain = w.chain,
                    from,
                    to,
                    why,
                    "chain moved during scan; rescanning"
                );
            }
            Err(e) => {
                slot.send(Err(e.into()));
                return learnt;
            }
        }
    }
}

/// The first range of a watcher that has learnt no address yet: its token transfers are
/// read by token, to any recipient
/// ([`appliance_chains::client::ChainClient::token_transfers`]), while the addresses
/// are learnt (the refresh starts after the caller read the head the range ends at or
/// below, so the addresses rule holds), then the native transfers with the learnt set
/// (block bodies; no log query). Returns every transfer of the range that may concern a
/// watched address; the caller keeps those to learnt ones ([`Learnt::keep`]). `Ok(None)`
/// when the client does not read by token, or the chain moved (either read says so, or
/// the two saw different blocks): the caller scans the range as any other, with the set
/// now learnt.
async fn scan_while_learning(
    state: &Handles,
    w: &ChainWorker,
    learnt: &mut Learnt,
    from: u64,
    to: u64,
) -> anyhow::Result<Option<RangeScan>> {
    let tokens: Vec<Address> = w.tokens.iter().map(|(a, _)| *a).collect();
    let (learn, by_token) = futures_util::future::join(
        learnt.refresh_logged(state, w),
        w.client.token_transfers(from, to, &tokens),
    )
    .await;
    learn?;
    let by_token = match by_token {
        Ok(Some(s)) => s,
        Ok(None) | Err(ClientError::Moving(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    // The set is read for the native transfers without its tokens (no log query); a
    // refresh gives them back should this future be dropped before the end.
    let tokens = std::mem::take(&mut learnt.set.tokens);
    let natives = w.client.transfers(from, to, &learnt.set).await;
    learnt.set.tokens = tokens;
    let natives = match natives {
        Ok(s) => s,
        Err(ClientError::Moving(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if natives.blocks != by_token.blocks {
        return Ok(None);
    }
    let mut transfers = by_token.transfers;
    transfers.extend(natives.transfers);
    transfers.sort_by_key(|t| (t.block_number, t.log_index.unwrap_or(u32::MAX)));
    Ok(Some(RangeScan {
        blocks: natives.blocks,
        transfers,
    }))
}

/// While a scanner runs: takes its next range and commits it when it still continues the
/// committed chain. `None` when no scanner runs, or it stopped (caught up): the pass goes
/// on as a single pass. A range that does not continue the cursor, or whose last block
/// left the chain, stops the scanner and drops every queued range; the next pass scans
/// from the cursor itself ([`Watched::resync`]) and finds a reorg the way every pass does
/// (`extends`, then [`reorg`]).
async fn commit_scanned(
    state: &Handles,
    w: &ChainWorker,
    watched: &mut Watched,
) -> Option<anyhow::Result<bool>> {
    let scanner = watched.scanner.as_mut()?;
    let scanned = match scanner.queue.recv().await {
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            watched.stop_scanner().await;
            return Some(Err(e));
        }
        None => {
            watched.stop_scanner().await;
            return None;
        }
    };
    let r = async {
        let key = w.key.clone();
        let ws = state.store.read(move |r| load_watch(r, &key)).await?;
        if !scanned.usable(w, &ws.cursor).await? {
            tracing::debug!(
                chain = w.chain,
                from = scanned.from,
                to = scanned.to,
                "range scanned ahead no longer continues the chain; rescanning"
            );
            return Ok(None);
        }
        let (to, head) = (scanned.to, scanned.head);
        commit_range(state, w, ws.cursor.height, scanned.blocks, scanned.kept).await?;
        crate::ops::metrics::chain_position(w.chain, w.scope.mode(), head, to);
        Ok(Some(()))
    }
    .await;
    match r {
        Ok(Some(())) => Some(Ok(false)),
        // Dropped (and so are the ranges queued after it): the next pass scans from the
        // cursor itself (and finds a reorg there, if that is why).
        Ok(None) => {
            watched.stop_scanner().await;
            watched.resync = true;
            Some(Ok(false))
        }
        // A failed commit or check: the queued ranges stay; the next pass takes them only
        // if they continue the cursor the failure left.
        Err(e) => Some(Err(e)),
    }
}

impl Scanned {
    /// Whether this range may be committed after `cursor`: it starts right after the
    /// cursor, its first block extends the cursor's last one (else a reorg came between
    /// the scans: the scanner is stopped and the next pass rescans, finding the reorg as
    /// any pass does), and its last block is still the node's block at that height (the
    /// range is one linked chain, so the whole range is still canonical: as fresh as a
    /// scan made now).
    async fn usable(&self, w: &ChainWorker, cursor: &Cursor) -> anyhow::Result<bool> {
        let (Some(first), Some(last)) = (self.blocks.first(), self.blocks.last()) else {
            return Ok(false);
        };
        if first.number != self.from
            || last.number != self.to
            || cursor.height.is_some_and(|h| h + 1 != self.from)
            || !extends(cursor, first)
        {
            return Ok(false);
        }
        Ok(w.client
            .block(self.to)
            .await?
            .is_some_and(|b| b.hash == last.hash))
    }
}

/// Commits a scanned range's blocks and kept transfers in slices of at most
/// [`MAX_DEPOSITS_PER_COMMIT`] deposits (whole blocks), in order, so a burst of transfers
/// never holds the store writer for long. `expected`: the cursor height the range follows.
async fn commit_range(
    state: &Handles,
    w: &ChainWorker,
    mut expected: Option<u64>,
    blocks: Vec<BlockRef>,
    mut kept: Vec<(Transfer, Uuid)>,
) -> anyhow::Result<()> {
    kept.sort_by_key(|(t, _)| (t.block_number, t.log_index.unwrap_or(u32::MAX)));
    let mut blocks = blocks.into_iter().peekable();
    let mut kept = kept.into_iter().peekable();
    while blocks.peek().is_some() {
        let mut slice_blocks = Vec::new();
        let mut slice_kept = Vec::new();
        while let Some(b) = blocks.peek() {
            let n = b.number;
            let mut in_block = Vec::new();
            while kept.peek().is_some_and(|(t, _)| t.block_number == n) {
                in_block.push(kept.next().expect("peeked"));
            }
            if !slice_blocks.is_empty()
                && slice_kept.len() + in_block.len() > MAX_DEPOSITS_PER_COMMIT
            {
                // This block starts the next slice.
                commit_slice(state, w, expected, slice_blocks, slice_kept).await?;
                expected = Some(n - 1);
                slice_blocks = Vec::new();
                slice_kept = Vec::new();
            }
            slice_kept.extend(in_block);
            slice_blocks.push(blocks.next().expect("peeked"));
        }
        let last = slice_blocks.last().map(|b| b.number);
        commit_slice(state, w, expected, slice_blocks, slice_kept).await?;
        expected = last;
    }
    Ok(())
}

/// Most deposits written by one watcher commit.
const MAX_DEPOSITS_PER_COMMIT: usize = 1_000;

/// Records the deposits of consecutive blocks, advances confirmations and moves the cursor
/// past them, in one transaction. `expected`: the cursor height this slice follows.
async fn commit_slice(
    state: &Handles,
    w: &ChainWorker,
    expected: Option<u64>,
    blocks: Vec<BlockRef>,
    kept: Vec<(Transfer, Uuid)>,
) -> anyhow::Result<()> {
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let lw = w.clone();
    let started = std::time::Instant::now();
    // Rendered here, on the watcher's task: the store writer, which every commit of the
    // appliance waits for, only looks up and writes.
    let kept = chain_transfers(w, kept);
    let (from, to, n) = (
        blocks.first().map(|b| b.number).unwrap_or(0),
        blocks.last().map(|b| b.number).unwrap_or(0),
        kept.len(),
    );
    write(state, move |ctx| {
        let key = &*lw.key;
        let mut ws = load_watch(ctx, key)?;
        if ws.cursor.height != expected || !continues(&ws.cursor, &blocks) {
            // Another pass moved the cursor meanwhile, or the slice does not hang from the
            // block stored at its height: drop it; the next pass scans from the
            // cursor and finds a reorg there, if that is why.
            return Ok(());
        }
        let mut scopes = Scopes::new(reg, lw.scope, attempts);
        let height = blocks.last().map(|b| b.number).unwrap_or(0);
        let mut by_block: BTreeMap<u64, Vec<Uuid>> = BTreeMap::new();
        for (ct, wid) in &kept {
            let Some(wallet) = ctx.get::<Wallet>(*wid)? else {
                continue;
            };
            let Some(s) = scopes.of(ctx, wallet.project_id)? else {
                continue;
            };
            if let Some(id) =
                deposits::detect(ctx, &s, &wallet, ct, lw.required_confirmations, height)?
            {
                by_block.entry(ct.block_number).or_default().push(id.uuid());
            }
        }
        for (n, ids) in &by_block {
            for id in ids {
                ctx.evm_block_deposit_add(key, *n, *id)?;
            }
        }
        advance_pending(ctx, &mut scopes, lw.chain, height)?;
        push(&mut ws.cursor, &blocks, memory_blocks(&lw));
        // A block's deposits are read back only by a reorg the cursor can detect, i.e. of a
        // remembered block; kept for twice that, so a raised `confirmations` (a longer
        // memory) still finds them.
        if let Some(through) = height.checked_sub(2 * memory_blocks(&lw) as u64) {
            ctx.evm_block_deposits_forget_through(key, through, FORGET_PER_COMMIT)?;
        }
        save_watch(ctx, key, &ws)?;
        Ok(())
    })
    .await?;
    tracing::debug!(
        chain = w.chain,
        from,
        to,
        deposits = n,
        commit_ms = started.elapsed().as_millis() as u64,
        "watched blocks"
    );
    Ok(())
}

/// The kept transfers of a slice as the deposit service takes them (asset symbol, atomic
/// amount, hashes and addresses as text), in order. Dropped: a token the worker does not
/// list, and an amount of 0 or beyond `u128` (never a deposit).
fn chain_transfers(
    w: &ChainWorker,
    kept: Vec<(Transfer, Uuid)>,
) -> Vec<(deposits::ChainTransfer, Uuid)> {
    kept.into_iter()
        .filter_map(|(t, wid)| {
            let asset = match t.token {
                None => w.native_symbol.clone(),
                Some(a) => w.tokens.iter().find(|(x, _)| *x == a)?.1.clone(),
            };
            let amount = u128::try_from(t.value).ok().filter(|a| *a > 0)?;
            let ct = deposits::ChainTransfer {
                chain: w.chain.to_string(),
                asset,
                amount,
                tx_hash: hex32(&t.tx_hash),
                log_index: t.log_index,
                from_address: appliance_chains::address::to_checksum(&t.from.0 .0),
                block_number: t.block_number,
                block_time: (t.block_time as i64).saturating_mul(1_000_000),
            };
            Some((ct, wid))
        })
        .collect()
}

/// Counts confirmations of the chain's detected deposits (of the worker's scope) at
/// `height` and credits those at their threshold.
fn advance_pending(
    ctx: &mut WriteCtx<'_>,
    scopes: &mut Scopes,
    chain: &str,
    height: u64,
) -> Result<(), Fault> {
    let ids = ctx.scan_ids(
        &index::prefix(IndexTag::DepositsPending, Uuid::nil(), &[]),
        None,
        usize::MAX,
        |_| Ok(true),
    )?;
    for id in ids.items.into_iter().rev() {
        let Some(d) = ctx.get::<Deposit>(id)? else {
            continue;
        };
        if d.chain != chain || d.manual || d.block_number > height {
            continue;
        }
        let Some(s) = scopes.of(ctx, d.project_id)? else {
            continue;
        };
        deposits::count_confirmations(ctx, &s, d, height)?;
    }
    Ok(())
}

mod learn;
mod reorg;

use reorg::reorg;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scanner_ranges_grow_then_shrink_by_halves_towards_the_head() {
        // The catch-up benchmark's: blocks 2..=10001, the head read as 10001.
        let (mut from, head, mut ramp) = (2u64, 10_001u64, FIRST_RANGE);
        let mut lens = Vec::new();
        while from <= head {
            let to = range_end(from, head, ramp);
            lens.push(to + 1 - from);
            from = to + 1;
            ramp = (ramp * 2).min(MAX_RANGE);
        }
        assert_eq!(
            lens,
            [100, 200, 400, 800, 1600, 2000, 2000, 1450, 725, 362, 181, 100, 82]
        );
        assert_eq!(lens.iter().sum::<u64>(), 10_000);
        // Never more than the ramp, never under the first range's size unless the head
        // is nearer.
        assert_eq!(range_len(FIRST_RANGE, 1_000_000), FIRST_RANGE);
        assert_eq!(range_len(MAX_RANGE, 1_000_000), MAX_RANGE);
        assert_eq!(range_len(MAX_RANGE, 150), FIRST_RANGE);
        assert_eq!(range_len(MAX_RANGE, 1), FIRST_RANGE);
    }
}
