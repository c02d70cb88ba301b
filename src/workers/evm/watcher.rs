//! The watcher of a live EVM chain: follows blocks, records transfers to deposit addresses
//! as `detected` deposits, counts confirmations, credits at the threshold and unwinds
//! deposits whose blocks leave the canonical chain. Its position and the recent block
//! hashes are written in the same transaction as the deposits of each slice of blocks:
//! after a restart it resumes exactly there.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::anyhow;
use uuid::Uuid;

use appliance_chains::evm::watcher::{self, ScanError, Transfer};
use appliance_chains::evm::Address;
use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Deposit, Wallet};
use appliance_storage::{ChainStateOps, ReadOps, WriteCtx};

use super::store::{load_watch, save_watch, WatchState};
use super::{
    clean, hex32, note, set_health, write, ChainIdMismatch, LiveChain, Scopes, MAX_BACKOFF,
    MAX_RANGE,
};
use crate::services::chains::AdapterHealth;
use crate::services::error::Fault;
use crate::services::{deposits, wallets};
use crate::state::AppState;

fn memory_blocks(c: &LiveChain) -> usize {
    (c.required_confirmations as usize * 2).max(256)
}

pub(super) async fn watch_loop(state: AppState, c: LiveChain) {
    let poll = Duration::from_millis(c.cfg.poll_interval_ms.max(50));
    let mut backoff = poll;
    let mut checked = false;
    // Until the node is first reached the chain is `paused` (issue 10 point 7).
    let mut reached = false;
    loop {
        let step = std::panic::AssertUnwindSafe(watch_step(&state, &c, &mut checked));
        let r = match futures_util::FutureExt::catch_unwind(step).await {
            Ok(r) => r,
            Err(_) => Err(anyhow!("the watcher step panicked (a bug); retrying")),
        };
        match r {
            Ok(caught_up) => {
                reached = true;
                let h = match c.rpc.note() {
                    Some(n) => AdapterHealth::Degraded(n),
                    None => AdapterHealth::Healthy,
                };
                set_health(&state, c.id, h);
                backoff = poll;
                if caught_up {
                    tokio::time::sleep(poll).await;
                }
            }
            Err(e) => {
                tracing::warn!(chain = c.id, error = %clean(&e), "watcher step failed");
                let h = if reached {
                    AdapterHealth::Failing(note(&e))
                } else if e.chain().any(|x| x.is::<ChainIdMismatch>()) {
                    AdapterHealth::Unreached(note(&e))
                } else {
                    AdapterHealth::Unreached(crate::services::chains::CONNECTING.into())
                };
                set_health(&state, c.id, h);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One batch: scan up to [`MAX_RANGE`] blocks, record and confirm deposits, move the
/// cursor. `Ok(true)` when caught up with the node's head.
pub async fn watch_step(
    state: &AppState,
    c: &LiveChain,
    checked: &mut bool,
) -> anyhow::Result<bool> {
    if !*checked {
        let n = c.rpc.chain_id().await?;
        if n != c.chain_id {
            return Err(ChainIdMismatch {
                got: n,
                expected: c.chain_id,
            }
            .into());
        }
        *checked = true;
    }
    let chain = c.id;
    let ws = state.store.read(move |r| load_watch(r, chain)).await?;
    let head = c.rpc.block_number().await?;
    let from = match ws.cursor.height {
        Some(h) => h + 1,
        None => c.cfg.start_block.unwrap_or(head),
    };
    if from > head {
        // The node may have rewound below our position (a reorg to a shorter chain).
        if let Some(h) = ws.cursor.height {
            if let Some(b) = c.rpc.block(h, false).await? {
                if ws.cursor.hash_at(h).is_some_and(|x| x != b.hash) {
                    return reorg(state, c, ws).await.map(|_| false);
                }
            } else {
                return reorg(state, c, ws).await.map(|_| false);
            }
        }
        crate::ops::metrics::chain_position(c.id, "live", head, from.saturating_sub(1));
        return Ok(true);
    }
    let to = head.min(from + MAX_RANGE - 1);
    let tokens: Vec<Address> = c.tokens.iter().map(|(a, _)| *a).collect();
    let scan = match watcher::scan(&c.rpc, from, to, &tokens).await {
        Ok(s) => s,
        Err(ScanError::Moving(why)) => {
            tracing::debug!(chain, why, "chain moved during scan; rescanning");
            return Ok(false);
        }
        Err(ScanError::Rpc(e)) => return Err(e.into()),
        Err(e) => return Err(e.into()),
    };
    if !watcher::extends(&ws.cursor, &scan.blocks[0]) {
        return reorg(state, c, ws).await.map(|_| false);
    }
    // Set lookup of every recipient against the issued addresses (one B-tree probe each,
    // on a read snapshot: the writer thread only sees the matches).
    let transfers = scan.transfers;
    let matched: Vec<(Transfer, Wallet)> = state
        .store
        .read(move |r| {
            let mut out = Vec::new();
            for t in transfers {
                let key = wallets::address_key(chain, &format!("{:#x}", t.to));
                let Some(wid) = r.unique_get(&key)? else {
                    continue;
                };
                if wid.is_nil() {
                    continue; // a master wallet
                }
                if let Some(w) = r.get::<Wallet>(wid)? {
                    out.push((t, w));
                }
            }
            Ok(out)
        })
        .await?;
    let mut kept = Vec::with_capacity(matched.len());
    for (t, w) in matched {
        if t.token.is_none() {
            match c.rpc.receipt(t.tx_hash).await? {
                Some(r) if r.success => {}
                _ => continue,
            }
        }
        kept.push((t, w));
    }
    // Commit in slices of at most MAX_DEPOSITS_PER_COMMIT deposits (whole blocks), so a
    // burst of transfers never holds the store writer for long.
    kept.sort_by_key(|(t, _)| (t.block_number, t.log_index.unwrap_or(u32::MAX)));
    let mut expected = ws.cursor.height;
    let mut blocks = scan.blocks.into_iter().peekable();
    let mut kept = kept.into_iter().peekable();
    while blocks.peek().is_some() {
        let mut slice_blocks = Vec::new();
        let mut slice_kept = Vec::new();
        while let Some(b) = blocks.peek() {
            let n = b.number;
            let in_block = kept_in_block(&mut kept, n);
            if !slice_blocks.is_empty()
                && slice_kept.len() + in_block.len() > MAX_DEPOSITS_PER_COMMIT
            {
                // This block starts the next slice.
                commit_slice(state, c, expected, slice_blocks, slice_kept).await?;
                expected = Some(n - 1);
                slice_blocks = Vec::new();
                slice_kept = Vec::new();
            }
            slice_kept.extend(in_block);
            slice_blocks.push(blocks.next().expect("peeked"));
        }
        let last = slice_blocks.last().map(|b| b.number);
        commit_slice(state, c, expected, slice_blocks, slice_kept).await?;
        expected = last;
    }
    crate::ops::metrics::chain_position(c.id, "live", head, to);
    Ok(to == head)
}

/// Most deposits written by one watcher commit.
const MAX_DEPOSITS_PER_COMMIT: usize = 1_000;

fn kept_in_block(
    kept: &mut std::iter::Peekable<std::vec::IntoIter<(Transfer, Wallet)>>,
    block: u64,
) -> Vec<(Transfer, Wallet)> {
    let mut out = Vec::new();
    while kept.peek().is_some_and(|(t, _)| t.block_number == block) {
        out.push(kept.next().expect("peeked"));
    }
    out
}

/// Records the deposits of consecutive blocks, advances confirmations and moves the cursor
/// past them, in one transaction. `expected`: the cursor height this slice follows.
async fn commit_slice(
    state: &AppState,
    c: &LiveChain,
    expected: Option<u64>,
    blocks: Vec<appliance_chains::evm::rpc::BlockInfo>,
    kept: Vec<(Transfer, Wallet)>,
) -> anyhow::Result<()> {
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let lc = c.clone();
    let started = std::time::Instant::now();
    let (from, to, n) = (
        blocks.first().map(|b| b.number).unwrap_or(0),
        blocks.last().map(|b| b.number).unwrap_or(0),
        kept.len(),
    );
    write(state, move |ctx| {
        let mut ws = load_watch(ctx, lc.id)?;
        if ws.cursor.height != expected {
            // Another pass moved the cursor meanwhile: drop this slice.
            return Ok(());
        }
        let mut scopes = Scopes::new(reg, attempts);
        let mut by_block: BTreeMap<u64, Vec<Uuid>> = BTreeMap::new();
        for (t, w) in &kept {
            let Some(s) = scopes.live(ctx, w.project_id)? else {
                continue;
            };
            let asset = match t.token {
                None => lc.native_symbol.clone(),
                Some(a) => match lc.tokens.iter().find(|(x, _)| *x == a) {
                    Some((_, sym)) => sym.clone(),
                    None => continue,
                },
            };
            let Ok(amount) = u128::try_from(t.value) else {
                continue;
            };
            if amount == 0 {
                continue;
            }
            let ct = deposits::ChainTransfer {
                chain: lc.id.to_string(),
                asset,
                amount,
                tx_hash: hex32(&t.tx_hash),
                log_index: t.log_index,
                from_address: appliance_chains::address::to_checksum(&t.from.0 .0),
                to_address: w.address.clone(),
                block_number: t.block_number,
                block_time: (t.block_time as i64).saturating_mul(1_000_000),
            };
            if let Some(d) = deposits::detect_live(ctx, &s, w, &ct, lc.required_confirmations)? {
                by_block.entry(t.block_number).or_default().push(d.id);
            }
        }
        for (n, ids) in &by_block {
            for id in ids {
                ctx.evm_block_deposit_add(lc.id, *n, *id)?;
            }
        }
        let height = blocks.last().map(|b| b.number).unwrap_or(0);
        advance_pending(ctx, &mut scopes, lc.id, height)?;
        ws.cursor.push(&blocks, memory_blocks(&lc));
        save_watch(ctx, lc.id, &ws)?;
        Ok(())
    })
    .await?;
    tracing::debug!(
        chain = c.id,
        from,
        to,
        deposits = n,
        commit_ms = started.elapsed().as_millis() as u64,
        "watched blocks"
    );
    Ok(())
}

/// Counts confirmations of the chain's detected deposits at `height` and credits those at
/// their threshold.
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
        let Some(s) = scopes.live(ctx, d.project_id)? else {
            continue;
        };
        deposits::advance_live(ctx, &s, d, height)?;
    }
    Ok(())
}

/// The cursor's last block is no longer canonical: find the fork point, unwind the
/// deposits above it (failed or orphaned, with events) and rewind the cursor.
async fn reorg(state: &AppState, c: &LiveChain, ws: WatchState) -> anyhow::Result<()> {
    let fork = watcher::fork_point(&c.rpc, &ws.cursor)
        .await?
        .ok_or_else(|| {
            anyhow!(
                "a reorg deeper than the {} remembered blocks: operator attention needed",
                ws.cursor.recent.len()
            )
        })?;
    tracing::warn!(chain = c.id, fork, height = ?ws.cursor.height, "reorg: rewinding");
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let chain = c.id;
    write(state, move |ctx| {
        let mut ws = load_watch(ctx, chain)?;
        let mut scopes = Scopes::new(reg, attempts);
        let top = ws.cursor.height.unwrap_or(fork);
        for n in fork + 1..=top {
            let ids = ctx.evm_block_deposits(chain, n)?;
            if ids.is_empty() {
                continue;
            }
            for id in ids {
                let Some(d) = ctx.get::<Deposit>(id)? else {
                    continue;
                };
                if let Some(s) = scopes.live(ctx, d.project_id)? {
                    deposits::unwind_live(ctx, &s, d)?;
                }
            }
            ctx.evm_block_deposits_clear(chain, n)?;
        }
        ws.cursor.rewind(fork);
        save_watch(ctx, chain, &ws)?;
        Ok(())
    })
    .await
}
