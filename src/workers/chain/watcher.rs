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
use crate::services::chains::AdapterHealth;
use crate::services::deposits;
use crate::services::error::Fault;
use crate::state::AppState;

/// Most blocks one watcher pass asks the client for. The client splits a range into the
/// node calls it needs (issue 8 item 5), so a watcher that is behind catches up in large
/// steps; deposits are still committed in slices ([`MAX_DEPOSITS_PER_COMMIT`]).
pub const MAX_RANGE: u64 = 2_000;

/// Blocks the first pass of a pipelined catch-up asks for ([`Watched::pipelined`]); each
/// following pass that is still behind asks for twice as many, up to [`MAX_RANGE`]. The
/// first range is scanned before anything commits, so it is kept short; later ones are
/// scanned while the previous one commits, and larger ones cost fewer node requests per
/// block (each log query carries its chunk of watched addresses).
pub const FIRST_RANGE: u64 = 100;

fn memory_blocks(w: &ChainWorker) -> usize {
    (w.required_confirmations as usize * 2).max(256)
}

/// The deposit addresses a watcher looks for, learnt incrementally: wallet ids are UUID v7
/// minted on the store's writer thread, so the rows above the last one seen are exactly
/// the wallets created since.
#[derive(Default)]
pub struct Watched {
    set: WatchSet,
    /// Address -> wallet id.
    wallets: std::collections::HashMap<Address, Uuid>,
    last: Option<Uuid>,
    /// Whether each project seen is in the worker's scope.
    projects: BTreeMap<Uuid, bool>,
    /// Whether a pass scans the next range while it commits the current one
    /// ([`Watched::pipelined`]).
    pipeline: bool,
    /// The range scanned ahead during the last pass's commits: at most one, so a watcher
    /// holds at most two ranges of blocks in memory.
    ahead: Option<Ahead>,
    /// Blocks the next pass asks for when behind (pipelined: grows from [`FIRST_RANGE`];
    /// otherwise always [`MAX_RANGE`]).
    range: u64,
}

/// A range scanned while the previous range committed. It is used by the next pass only
/// when it still continues the committed chain ([`Ahead::usable`]); otherwise it is
/// dropped and the range scanned again.
struct Ahead {
    from: u64,
    to: u64,
    scan: RangeScan,
}

/// Wallet rows read per store snapshot while learning addresses.
const WALLET_PAGE: usize = 10_000;

impl Watched {
    /// A watcher memory that scans range n+1 while range n commits (the live watch loop).
    /// The default does not (the simulated chain's driven passes, which must each read
    /// the chain as it is after the drive's action).
    pub fn pipelined() -> Watched {
        Watched {
            pipeline: true,
            range: FIRST_RANGE,
            ..Watched::default()
        }
    }

    /// Blocks the next pass asks for.
    fn pass_range(&self) -> u64 {
        if self.pipeline {
            self.range.clamp(1, MAX_RANGE)
        } else {
            MAX_RANGE
        }
    }

    /// Reads the wallets created since the last refresh and adds the addresses of those on
    /// the worker's chain and scope. Pages of [`WALLET_PAGE`] rows are read and sorted out
    /// on the blocking pool ([`wallet_page`]), the next page while this task adds the
    /// previous one's addresses (at start, 100,000 wallets: issue 8's catch-up).
    async fn refresh(&mut self, state: &AppState, w: &ChainWorker) -> anyhow::Result<()> {
        if self.set.tokens.is_empty() && !w.tokens.is_empty() {
            self.set.tokens = w.tokens.iter().map(|(a, _)| *a).collect();
        }
        let fetch = |after: Option<Uuid>, known: BTreeMap<Uuid, bool>| {
            let (store, chain, scope) = (state.store.clone(), w.chain, w.scope);
            tokio::spawn(async move {
                store
                    .read(move |r| wallet_page(r, chain, scope, after, known))
                    .await
            })
        };
        let mut next = fetch(self.last, self.projects.clone());
        loop {
            let page = next
                .await
                .map_err(|e| anyhow!("reading the deposit addresses: {e}"))??;
            let full = page.read == WALLET_PAGE;
            self.projects.extend(page.modes);
            if page.last.is_some() {
                self.last = page.last;
            }
            if !full {
                self.add(page.addresses);
                return Ok(());
            }
            next = fetch(page.last, self.projects.clone());
            self.add(page.addresses);
        }
    }

    fn add(&mut self, addresses: Vec<(Address, Uuid)>) {
        for (a, id) in addresses {
            self.set.addresses.insert(a);
            self.wallets.insert(a, id);
        }
    }
}

/// One page of wallet rows as the watcher learns them ([`Watched::refresh`]).
struct WalletPage {
    /// Rows read (a full page: there may be more).
    read: usize,
    /// The last row's id.
    last: Option<Uuid>,
    /// Deposit addresses on the worker's chain, of projects in its scope, with their
    /// wallet ids.
    addresses: Vec<(Address, Uuid)>,
    /// Whether each project first seen in this page is in the worker's scope.
    modes: BTreeMap<Uuid, bool>,
}

/// Reads up to [`WALLET_PAGE`] wallets after `after` and keeps the addresses a watcher of
/// `chain` and `scope` looks for; `known`: the scope's verdict on projects seen before.
fn wallet_page(
    r: &(impl ReadOps + ScanOps),
    chain: &str,
    scope: WorkScope,
    after: Option<Uuid>,
    known: BTreeMap<Uuid, bool>,
) -> Result<WalletPage, appliance_storage::StoreError> {
    let rows = r.after::<Wallet>(after, WALLET_PAGE)?;
    let mut verdicts = known;
    let mut modes = BTreeMap::new();
    let mut addresses = Vec::new();
    for x in &rows {
        let ok = match verdicts.get(&x.project_id) {
            Some(ok) => *ok,
            None => {
                let ok = scope.may_admit(x.project_id)
                    && r.get::<Project>(x.project_id)?
                        .is_some_and(|p| scope.admits(&p));
                verdicts.insert(x.project_id, ok);
                modes.insert(x.project_id, ok);
                ok
            }
        };
        if !ok || x.chain != chain {
            continue;
        }
        let Ok(a) = x.address.parse::<Address>() else {
            continue;
        };
        addresses.push((a, x.id));
    }
    Ok(WalletPage {
        read: rows.len(),
        last: rows.last().map(|x| x.id),
        addresses,
        modes,
    })
}

pub(super) async fn watch_loop(state: AppState, w: ChainWorker) {
    let mut backoff = w.poll;
    let mut checked = false;
    let mut watched = Watched::pipelined();
    // Until the node is first reached the chain is `paused` (issue 10 point 7).
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

/// One pass: scan up to [`MAX_RANGE`] blocks (or take the range the last pass scanned
/// ahead, when it still continues the committed chain), record and confirm deposits, move
/// the cursor. With [`Watched::pipelined`], the next range is scanned while this one
/// commits. `Ok(true)` when caught up with the head.
pub async fn watch_step(
    state: &AppState,
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
    // A range scanned ahead is used at most once: taken now, whatever happens below.
    let ahead = watched.ahead.take();
    let key = w.key.clone();
    let ws = state.store.read(move |r| load_watch(r, &key)).await?;
    let head = w.client.head().await?;
    let from = match ws.cursor.height {
        Some(h) => h + 1,
        None => w.start_block.unwrap_or(head),
    };
    if from > head {
        // The node may have rewound below our position (a reorg to a shorter chain).
        if let Some(h) = ws.cursor.height {
            match w.client.block(h).await? {
                Some(b) if ws.cursor.hash_at(h).is_some_and(|x| x != b.hash) => {
                    return reorg(state, w, ws).await.map(|_| false);
                }
                Some(_) => {}
                None => return reorg(state, w, ws).await.map(|_| false),
            }
        }
        crate::ops::metrics::chain_position(w.chain, w.scope.mode(), head, from.saturating_sub(1));
        return Ok(true);
    }
    // After the head is read: every wallet that can have received a transfer in blocks up
    // to `head` was created before it. (A range scanned ahead ends at or below the head
    // read by the pass that scanned it, after that pass's refresh: it is covered too.)
    let (known, started) = (watched.wallets.len(), std::time::Instant::now());
    watched.refresh(state, w).await?;
    if watched.wallets.len() > known {
        tracing::debug!(
            chain = w.chain,
            added = watched.wallets.len() - known,
            watched = watched.wallets.len(),
            ms = started.elapsed().as_millis() as u64,
            "learnt deposit addresses"
        );
    }
    let (to, scan) = match ahead {
        Some(a) if a.from == from && a.usable(w, &ws.cursor).await? => (a.to, a.scan),
        _ => {
            let to = head.min(from + watched.pass_range() - 1);
            match w.client.transfers(from, to, &watched.set).await {
                Ok(s) => (to, s),
                Err(ClientError::Moving(why)) => {
                    tracing::debug!(chain = w.chain, why, "chain moved during scan; rescanning");
                    return Ok(false);
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let Some(first) = scan.blocks.first() else {
        return Err(anyhow!("the client returned no blocks for {from}..={to}"));
    };
    if !extends(&ws.cursor, first) {
        return reorg(state, w, ws).await.map(|_| false);
    }
    let kept: Vec<(Transfer, Uuid)> = scan
        .transfers
        .into_iter()
        .filter_map(|t| watched.wallets.get(&t.to).map(|id| (t.clone(), *id)))
        .collect();
    let commits = commit_range(state, w, ws.cursor.height, scan.blocks, kept);
    // Scan the next range while this one commits (at most one range ahead). Its use is
    // decided by the next pass, against the cursor this commit leaves.
    // Still behind: the next range may be larger; caught up: start small again.
    watched.range = if to < head {
        (watched.pass_range() * 2).min(MAX_RANGE)
    } else {
        FIRST_RANGE
    };
    let next =
        (watched.pipeline && to < head).then(|| (to + 1, head.min(to + watched.pass_range())));
    let set = &watched.set;
    let prefetch = async move {
        let (a, b) = next?;
        match w.client.transfers(a, b, set).await {
            Ok(scan) => Some(Ahead {
                from: a,
                to: b,
                scan,
            }),
            Err(e) => {
                // The next pass scans the range again and reports what fails then.
                tracing::debug!(chain = w.chain, from = a, to = b, error = %e, "scan ahead dropped");
                None
            }
        }
    };
    let (committed, ahead) = futures_util::future::join(commits, prefetch).await;
    committed?;
    watched.ahead = ahead;
    crate::ops::metrics::chain_position(w.chain, w.scope.mode(), head, to);
    Ok(to == head)
}

impl Ahead {
    /// Whether this range may be committed after `cursor`: its first block extends the
    /// cursor's last one (else a reorg came between the two scans: the pass rescans, and
    /// finds the reorg as any pass does), and its last block is still the node's block at
    /// that height (the range is one linked chain, so the whole range is still
    /// canonical: as fresh as a scan made now).
    async fn usable(&self, w: &ChainWorker, cursor: &Cursor) -> anyhow::Result<bool> {
        let (Some(first), Some(last)) = (self.scan.blocks.first(), self.scan.blocks.last()) else {
            return Ok(false);
        };
        if first.number != self.from || last.number != self.to || !extends(cursor, first) {
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
    state: &AppState,
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
    state: &AppState,
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
        if ws.cursor.height != expected {
            // Another pass moved the cursor meanwhile: drop this slice.
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
            if let Some(d) =
                deposits::detect(ctx, &s, &wallet, ct, lw.required_confirmations, height)?
            {
                by_block.entry(ct.block_number).or_default().push(d.id);
            }
        }
        for (n, ids) in &by_block {
            for id in ids {
                ctx.evm_block_deposit_add(key, *n, *id)?;
            }
        }
        advance_pending(ctx, &mut scopes, lw.chain, height)?;
        push(&mut ws.cursor, &blocks, memory_blocks(&lw));
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
                to_address: appliance_chains::address::to_checksum(&t.to.0 .0),
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

/// Walks back from the cursor's height to the newest remembered block the chain still has
/// with the same hash. `None`: the fork is deeper than the memory (operator attention).
async fn fork_point(w: &ChainWorker, cursor: &Cursor) -> anyhow::Result<Option<u64>> {
    for (n, h) in cursor.recent.iter().rev() {
        match w.client.block(*n).await? {
            Some(b) if b.hash == *h => return Ok(Some(*n)),
            _ => continue,
        }
    }
    Ok(None)
}

/// The cursor's last block is no longer canonical: find the fork point, unwind the
/// deposits above it (failed or orphaned, with events) and rewind the cursor. The sender
/// learns of the reorg from its receipts on its next pass.
async fn reorg(state: &AppState, w: &ChainWorker, ws: WatchState) -> anyhow::Result<()> {
    let fork = fork_point(w, &ws.cursor).await?.ok_or_else(|| {
        anyhow!(
            "a reorg deeper than the {} remembered blocks: operator attention needed",
            ws.cursor.recent.len()
        )
    })?;
    tracing::warn!(chain = w.chain, key = %w.key, fork, height = ?ws.cursor.height, "reorg: rewinding");
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let key = w.key.clone();
    let scope = w.scope;
    write(state, move |ctx| {
        let mut ws = load_watch(ctx, &key)?;
        let mut scopes = Scopes::new(reg, scope, attempts);
        let top = ws.cursor.height.unwrap_or(fork);
        for n in fork + 1..=top {
            let ids = ctx.evm_block_deposits(&key, n)?;
            if ids.is_empty() {
                continue;
            }
            for id in ids {
                let Some(d) = ctx.get::<Deposit>(id)? else {
                    continue;
                };
                if let Some(s) = scopes.of(ctx, d.project_id)? {
                    deposits::unwind(ctx, &s, d)?;
                }
            }
            ctx.evm_block_deposits_clear(&key, n)?;
        }
        ws.cursor.rewind(fork);
        save_watch(ctx, &key, &ws)?;
        Ok(())
    })
    .await
}
