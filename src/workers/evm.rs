//! Live EVM chains (issue 4): one watcher and one sender task per `[chains.<id>]` table.
//!
//! The watcher follows blocks, records transfers to deposit addresses as `detected`
//! deposits, counts confirmations, credits at the threshold and unwinds deposits whose
//! blocks leave the canonical chain. Its position and the recent block hashes live in
//! `meta["evm_watch:<chain>"]` (the deposit ids of each block in `evm_block:<chain>:<n>`),
//! written in the same transaction as the deposits of each slice of blocks: after a
//! restart it resumes exactly there.
//!
//! The sender is a saga runner (STYLE.md habit 9). For each queued payout and each open
//! sweep it writes the intent, the nonce and the signed raw transaction in one store
//! transaction (`meta["evm_tx:<chain>:<nonce>"]`, the pending list `evm_txs:<chain>`, the
//! next nonce `evm_nonce:<chain>`), then broadcasts outside it, and finalises in a later
//! transaction once the receipt has the chain's confirmations. Every pass first walks the
//! pending list: a transaction the node does not know is rebroadcast (this is also the
//! start-up recovery pass), one stuck longer than `replace_after_ms` is replaced with the
//! same nonce and higher fees.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use appliance_chains::evm::rpc::{EvmRpc, RpcError};
use appliance_chains::evm::watcher::{self, Cursor, ScanError, Transfer};
use appliance_chains::evm::{sender, sweeper, Address, B256, U256};
use appliance_signer::{SignError, Signer, SigningPolicy};
use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    ApiKey, Deposit, Mode, Payout, PayoutStatus, Project, Sweep, SweepStatus, Wallet,
};
use appliance_storage::{ReadOps, WriteCtx, WriteError};

use crate::config::ChainConfig;
use crate::registry::Registry;
use crate::services::chains::{set_adapter_health, AdapterHealth};
use crate::services::error::Fault;
use crate::services::{deposits, payouts, sweeps, wallets, Scope};
use crate::state::AppState;

/// Most blocks one watcher batch covers (one `eth_getLogs` for all of them).
pub const MAX_RANGE: u64 = 50;
/// Most payouts or sweeps one sender pass signs.
const MAX_NEW_PER_PASS: usize = 64;
/// Longest back-off after node errors.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One configured live chain.
#[derive(Clone)]
pub struct LiveChain {
    pub id: &'static str,
    pub chain_id: u64,
    pub rpc: EvmRpc,
    pub cfg: ChainConfig,
    pub required_confirmations: u32,
    /// Token contract -> asset symbol.
    pub tokens: Vec<(Address, String)>,
    pub native_symbol: String,
}

/// What the sender needs besides the chain: the master key and the factory.
#[derive(Clone)]
pub struct Master {
    pub signer: Arc<Signer>,
    pub treasury: Address,
    pub factory: Address,
}

static RPCS: OnceLock<BTreeMap<String, EvmRpc>> = OnceLock::new();

/// The node client of a configured live chain (for on-chain balance readings).
pub fn rpc_for(chain: &str) -> Option<EvmRpc> {
    RPCS.get().and_then(|m| m.get(chain).cloned())
}

/// Builds the live chains from config, checks every node's chain id (a mismatch refuses
/// the start; an unreachable node is checked again by its watcher) and spawns the tasks.
pub async fn start(state: &AppState, signer: Arc<Signer>) -> anyhow::Result<()> {
    let reg = crate::api::registry(state);
    let treasury = signer.evm_master_address();
    let factory = Address::from(appliance_chains::address::factory_address(&treasury.0 .0));
    let master = Master {
        signer,
        treasury,
        factory,
    };
    let mut chains = Vec::new();
    for (id, cc) in &state.config.chains {
        let chain = reg
            .chain(id)
            .ok_or_else(|| anyhow!("[chains.{id}]: unknown chain"))?;
        if !chain.is_evm() {
            anyhow::bail!("[chains.{id}]: no live adapter for this chain family yet");
        }
        let rpc = EvmRpc::new(&cc.rpc_url).with_context(|| format!("[chains.{id}] rpc_url"))?;
        match rpc.chain_id().await {
            Ok(n) if n != chain.info.chain_id => anyhow::bail!(
                "[chains.{id}]: the node at {} reports chain id {n}, expected {}",
                cc.rpc_url,
                chain.info.chain_id
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(chain = id, error = %e, "node unreachable at start"),
        }
        let mut tokens = Vec::new();
        for a in chain.assets.iter().filter(|a| !a.is_native) {
            match a.contract.parse::<Address>() {
                Ok(addr) => tokens.push((addr, a.symbol.clone())),
                Err(_) => tracing::warn!(chain = id, asset = %a.symbol, "bad token contract"),
            }
        }
        chains.push(LiveChain {
            id: chain.id(),
            chain_id: chain.info.chain_id,
            rpc,
            cfg: cc.clone(),
            required_confirmations: chain.required_confirmations.max(1),
            tokens,
            native_symbol: chain.info.native.symbol.to_string(),
        });
    }
    let _ = RPCS.set(
        chains
            .iter()
            .map(|c| (c.id.to_string(), c.rpc.clone()))
            .collect(),
    );
    for c in chains {
        tokio::spawn(watch_loop(state.clone(), c.clone()));
        tokio::spawn(send_loop(state.clone(), c, master.clone()));
    }
    Ok(())
}

async fn write<T, F>(state: &AppState, f: F) -> anyhow::Result<T>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, Fault> + Send + 'static,
    T: Send + 'static,
{
    state.store.write(f).await.map_err(|e| match e {
        WriteError::Rejected(f) => anyhow!("store: {f}"),
        WriteError::Store(s) => anyhow!("store: {s}"),
    })
}

/// Live projects seen by one transaction, as service scopes.
struct Scopes {
    reg: Arc<Registry>,
    cache: BTreeMap<Uuid, Option<Scope>>,
}

impl Scopes {
    fn new(reg: Arc<Registry>) -> Self {
        Scopes {
            reg,
            cache: BTreeMap::new(),
        }
    }

    fn live(&mut self, ctx: &impl ReadOps, project: Uuid) -> Result<Option<Scope>, Fault> {
        if let Some(s) = self.cache.get(&project) {
            return Ok(s.clone());
        }
        let s = ctx
            .get::<Project>(project)?
            .filter(|p| p.mode == Mode::Live)
            .map(|p| Scope {
                reg: self.reg.clone(),
                project: Arc::new(p),
            });
        self.cache.insert(project, s.clone());
        Ok(s)
    }
}

fn hex32(h: &B256) -> String {
    format!("{h:#x}")
}

fn note(e: &anyhow::Error) -> String {
    let mut s = format!("Node calls are failing; retrying with back-off: {e:#}");
    if s.len() > 300 {
        let mut cut = 300;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

// ------------------------------------------------------------------------------ watcher

/// The watcher's durable state (`meta["evm_watch:<chain>"]`, JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WatchState {
    pub cursor: Cursor,
    /// Chain id verified against the node.
    #[serde(default)]
    pub chain_id_checked: bool,
}

fn watch_key(chain: &str) -> String {
    format!("evm_watch:{chain}")
}

/// Deposits found in one block (`meta["evm_block:<chain>:<number>"]`, JSON ids), read back
/// when a reorg removes the block. Written only for blocks with deposits.
fn block_key(chain: &str, n: u64) -> String {
    format!("evm_block:{chain}:{n:020}")
}

/// The watcher's stored state of `chain`.
pub fn load_watch(
    r: &impl ReadOps,
    chain: &str,
) -> Result<WatchState, appliance_storage::StoreError> {
    Ok(r.meta_get(&watch_key(chain))?
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default())
}

fn save_watch(ctx: &mut WriteCtx<'_>, chain: &str, w: &WatchState) -> Result<(), Fault> {
    let bytes = serde_json::to_vec(w).map_err(Fault::invariant)?;
    ctx.meta_put(&watch_key(chain), &bytes)?;
    Ok(())
}

fn memory_blocks(c: &LiveChain) -> usize {
    (c.required_confirmations as usize * 2).max(256)
}

async fn watch_loop(state: AppState, c: LiveChain) {
    let poll = Duration::from_millis(c.cfg.poll_interval_ms.max(50));
    let mut backoff = poll;
    let mut checked = false;
    loop {
        let step = std::panic::AssertUnwindSafe(watch_step(&state, &c, &mut checked));
        let r = match futures_util::FutureExt::catch_unwind(step).await {
            Ok(r) => r,
            Err(_) => Err(anyhow!("the watcher step panicked (a bug); retrying")),
        };
        match r {
            Ok(caught_up) => {
                crate::ops::metrics::chain_reached(c.id);
                set_adapter_health(c.id, AdapterHealth::Healthy);
                backoff = poll;
                if caught_up {
                    tokio::time::sleep(poll).await;
                }
            }
            Err(e) => {
                tracing::warn!(chain = c.id, error = %format!("{e:#}"), "watcher step failed");
                crate::ops::metrics::chain_error(c.id);
                set_adapter_health(c.id, AdapterHealth::Failing(note(&e)));
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
            anyhow::bail!("the node reports chain id {n}, expected {}", c.chain_id);
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
    let reg = crate::api::registry(state);
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
        let mut scopes = Scopes::new(reg);
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
            let b = serde_json::to_vec(ids).map_err(Fault::invariant)?;
            ctx.meta_put(&block_key(lc.id, *n), &b)?;
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
    let reg = crate::api::registry(state);
    let chain = c.id;
    write(state, move |ctx| {
        let mut ws = load_watch(ctx, chain)?;
        let mut scopes = Scopes::new(reg);
        let top = ws.cursor.height.unwrap_or(fork);
        for n in fork + 1..=top {
            let key = block_key(chain, n);
            let ids: Vec<Uuid> = ctx
                .meta_get(&key)?
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
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
            ctx.meta_put(&key, b"[]")?;
        }
        ws.cursor.rewind(fork);
        save_watch(ctx, chain, &ws)?;
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------- sender

/// What an outgoing transaction is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutKind {
    Payout,
    Sweep,
    Factory,
}

/// An outgoing transaction of the master wallet, recorded before its first broadcast.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutTx {
    pub nonce: u64,
    pub kind: OutKind,
    pub ref_id: Uuid,
    pub project_id: Uuid,
    pub to: Address,
    /// Decimal.
    pub value: String,
    /// Hex calldata.
    pub data: String,
    pub gas_limit: u64,
    /// Decimal wei.
    pub max_fee_per_gas: String,
    pub max_priority_fee_per_gas: String,
    /// Signed raw transactions, one per fee level (the last is the current one).
    pub raws: Vec<String>,
    pub hashes: Vec<String>,
    /// When the current version was signed (Unix microseconds).
    pub sent_at: i64,
    pub done: bool,
}

fn nonce_key(chain: &str) -> String {
    format!("evm_nonce:{chain}")
}
fn pending_key(chain: &str) -> String {
    format!("evm_txs:{chain}")
}
fn tx_key(chain: &str, nonce: u64) -> String {
    format!("evm_tx:{chain}:{nonce:020}")
}

/// Next nonce the store will hand out (0 when never used).
pub fn stored_nonce(r: &impl ReadOps, chain: &str) -> Result<u64, appliance_storage::StoreError> {
    Ok(r.meta_get(&nonce_key(chain))?
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0))
}

/// Nonces of the transactions not yet final.
pub fn pending_nonces(
    r: &impl ReadOps,
    chain: &str,
) -> Result<Vec<u64>, appliance_storage::StoreError> {
    Ok(r.meta_get(&pending_key(chain))?
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default())
}

/// A recorded outgoing transaction.
pub fn out_tx(
    r: &impl ReadOps,
    chain: &str,
    nonce: u64,
) -> Result<Option<OutTx>, appliance_storage::StoreError> {
    Ok(r.meta_get(&tx_key(chain, nonce))?
        .and_then(|b| serde_json::from_slice(&b).ok()))
}

fn put_tx(ctx: &mut WriteCtx<'_>, chain: &str, tx: &OutTx) -> Result<(), Fault> {
    let b = serde_json::to_vec(tx).map_err(Fault::invariant)?;
    ctx.meta_put(&tx_key(chain, tx.nonce), &b)?;
    Ok(())
}

fn put_pending(ctx: &mut WriteCtx<'_>, chain: &str, list: &[u64]) -> Result<(), Fault> {
    let b = serde_json::to_vec(list).map_err(Fault::invariant)?;
    ctx.meta_put(&pending_key(chain), &b)?;
    Ok(())
}

async fn send_loop(state: AppState, c: LiveChain, m: Master) {
    let poll = Duration::from_millis(c.cfg.poll_interval_ms.max(50));
    let mut backoff = poll;
    loop {
        let step = std::panic::AssertUnwindSafe(send_step(&state, &c, &m));
        let r = match futures_util::FutureExt::catch_unwind(step).await {
            Ok(r) => r,
            Err(_) => Err(anyhow!("the sender step panicked (a bug); retrying")),
        };
        match r {
            Ok(()) => {
                backoff = poll;
                tokio::time::sleep(poll).await;
            }
            Err(e) => {
                tracing::warn!(chain = c.id, error = %format!("{e:#}"), "sender step failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One sender pass: follow pending transactions, then sign new payouts and sweeps.
pub async fn send_step(state: &AppState, c: &LiveChain, m: &Master) -> anyhow::Result<()> {
    track_pending(state, c, m).await?;
    send_payouts(state, c, m).await?;
    send_sweeps(state, c, m).await?;
    Ok(())
}

fn is_refusal(e: &RpcError) -> bool {
    matches!(e, RpcError::Transport { source, .. } if source.as_error_resp().is_some())
}

fn policy(state: &AppState, project: &Project, key: bool) -> SigningPolicy {
    SigningPolicy {
        service: state.config.signing.enabled,
        project: project.settings.signing_enabled,
        key,
    }
}

/// Signs, records (with the saga step `record`) and broadcasts one transaction.
#[allow(clippy::too_many_arguments)]
async fn send_new<F>(
    state: &AppState,
    c: &LiveChain,
    m: &Master,
    pol: SigningPolicy,
    kind: OutKind,
    ref_id: Uuid,
    project_id: Uuid,
    to: Address,
    value: U256,
    data: appliance_chains::evm::Bytes,
    gas_limit: u64,
    record: F,
) -> anyhow::Result<Result<Option<B256>, SignError>>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>, &str) -> Result<bool, Fault> + Send + 'static,
{
    let chain = c.id;
    let stored = state.store.read(move |r| stored_nonce(r, chain)).await?;
    let node = c.rpc.pending_nonce(m.treasury).await?;
    let nonce = sender::choose_nonce(stored, node);
    let (max_fee, tip) = c.rpc.fees().await?;
    let tx = sender::eip1559(
        c.chain_id,
        nonce,
        to,
        value,
        data.clone(),
        gas_limit,
        max_fee,
        tip,
    );
    let signed = match m.signer.sign_evm(pol, tx) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let hash = B256::from(signed.hash);
    let raw_hex = hex::encode(&signed.raw);
    let out = OutTx {
        nonce,
        kind,
        ref_id,
        project_id,
        to,
        value: value.to_string(),
        data: hex::encode(&data),
        gas_limit,
        max_fee_per_gas: max_fee.to_string(),
        max_priority_fee_per_gas: tip.to_string(),
        raws: vec![raw_hex],
        hashes: vec![hex32(&hash)],
        sent_at: appliance_storage::now_us(),
        done: false,
    };
    let recorded = write(state, move |ctx| {
        if stored_nonce(ctx, chain)? != stored {
            return Err(Fault::invariant("nonce moved under the sender"));
        }
        if !record(ctx, &out.hashes[0])? {
            return Ok(false);
        }
        put_tx(ctx, chain, &out)?;
        let mut list = pending_nonces(ctx, chain)?;
        list.push(nonce);
        put_pending(ctx, chain, &list)?;
        ctx.meta_put(&nonce_key(chain), &(nonce + 1).to_be_bytes())?;
        Ok(true)
    })
    .await?;
    if !recorded {
        return Ok(Ok(None));
    }
    if let Err(e) = c.rpc.send_raw(&signed.raw).await {
        // Recorded: the tracker rebroadcasts it.
        tracing::warn!(chain, nonce, error = %e, "broadcast failed; will retry");
    }
    Ok(Ok(Some(hash)))
}

async fn track_pending(state: &AppState, c: &LiveChain, m: &Master) -> anyhow::Result<()> {
    let chain = c.id;
    let txs: Vec<OutTx> = state
        .store
        .read(move |r| {
            let mut v = Vec::new();
            for n in pending_nonces(r, chain)? {
                if let Some(t) = out_tx(r, chain, n)? {
                    v.push(t);
                }
            }
            Ok(v)
        })
        .await?;
    if txs.is_empty() {
        return Ok(());
    }
    let head = c.rpc.block_number().await?;
    for tx in txs {
        let mut mined = None;
        for h in tx.hashes.iter().rev() {
            let hash: B256 = h.parse().map_err(|_| anyhow!("bad stored hash {h}"))?;
            if let Some(r) = c.rpc.receipt(hash).await? {
                mined = Some((h.clone(), r));
                break;
            }
        }
        match mined {
            Some((h, r)) => {
                if head + 1 >= r.block_number + c.required_confirmations as u64 {
                    finalise(state, c, tx, h, r.success).await?;
                }
            }
            None => {
                let age_ms = (appliance_storage::now_us() - tx.sent_at) / 1000;
                if age_ms > c.cfg.replace_after_ms as i64 {
                    replace(state, c, m, tx).await?;
                } else {
                    let last: B256 = tx
                        .hashes
                        .last()
                        .and_then(|h| h.parse().ok())
                        .unwrap_or_default();
                    if !c.rpc.knows_tx(last).await? {
                        let raw = hex::decode(tx.raws.last().map(String::as_str).unwrap_or(""))?;
                        if let Err(e) = c.rpc.send_raw(&raw).await {
                            tracing::debug!(chain, nonce = tx.nonce, error = %e, "rebroadcast refused");
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

async fn finalise(
    state: &AppState,
    c: &LiveChain,
    tx: OutTx,
    hash: String,
    success: bool,
) -> anyhow::Result<()> {
    let reg = crate::api::registry(state);
    let chain = c.id;
    write(state, move |ctx| {
        let mut scopes = Scopes::new(reg);
        match tx.kind {
            OutKind::Sweep => {
                if let Some(s) = scopes.live(ctx, tx.project_id)? {
                    sweeps::settle_live(ctx, &s, tx.ref_id, success)?;
                }
            }
            OutKind::Payout => {
                if let Some(s) = scopes.live(ctx, tx.project_id)? {
                    payouts::settle_live(ctx, &s, tx.ref_id, &hash, success)?;
                }
            }
            OutKind::Factory => {}
        }
        let mut done = tx.clone();
        done.done = true;
        put_tx(ctx, chain, &done)?;
        let mut list = pending_nonces(ctx, chain)?;
        list.retain(|n| *n != tx.nonce);
        put_pending(ctx, chain, &list)?;
        Ok(())
    })
    .await
}

/// Replaces a stuck transaction: same nonce, same call, fees up by at least 12.5%.
async fn replace(state: &AppState, c: &LiveChain, m: &Master, mut tx: OutTx) -> anyhow::Result<()> {
    let old = (
        tx.max_fee_per_gas.parse::<u128>().unwrap_or(0),
        tx.max_priority_fee_per_gas.parse::<u128>().unwrap_or(0),
    );
    let (max_fee, tip) = sender::bumped_fees(old, c.rpc.fees().await?);
    let project_id = tx.project_id;
    let project = state
        .store
        .read(move |r| r.get::<Project>(project_id))
        .await?;
    let pol = SigningPolicy {
        service: state.config.signing.enabled,
        project: project.as_ref().is_none_or(|p| p.settings.signing_enabled),
        key: true,
    };
    let unsigned = sender::eip1559(
        c.chain_id,
        tx.nonce,
        tx.to,
        tx.value.parse().unwrap_or(U256::ZERO),
        hex::decode(&tx.data)?.into(),
        tx.gas_limit,
        max_fee,
        tip,
    );
    let signed = match m.signer.sign_evm(pol, unsigned) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(chain = c.id, nonce = tx.nonce, error = %e, "cannot replace a stuck transaction");
            return Ok(());
        }
    };
    let hash = hex32(&B256::from(signed.hash));
    tx.raws.push(hex::encode(&signed.raw));
    tx.hashes.push(hash.clone());
    tx.max_fee_per_gas = max_fee.to_string();
    tx.max_priority_fee_per_gas = tip.to_string();
    tx.sent_at = appliance_storage::now_us();
    let chain = c.id;
    let t2 = tx.clone();
    write(state, move |ctx| {
        put_tx(ctx, chain, &t2)?;
        if t2.kind == OutKind::Payout {
            payouts::retarget_live(ctx, t2.ref_id, &hash)?;
        }
        Ok(())
    })
    .await?;
    tracing::info!(
        chain,
        nonce = tx.nonce,
        max_fee,
        tip,
        "replaced a stuck transaction"
    );
    if let Err(e) = c.rpc.send_raw(&signed.raw).await {
        tracing::warn!(chain, nonce = tx.nonce, error = %e, "replacement broadcast failed");
    }
    Ok(())
}

/// Work items of the global queue `tag` on this chain, oldest first.
async fn work_ids(state: &AppState, tag: IndexTag) -> anyhow::Result<Vec<Uuid>> {
    let page = state
        .store
        .read(move |r| {
            r.scan_ids(
                &index::prefix(tag, Uuid::nil(), &[]),
                None,
                usize::MAX,
                |_| Ok(true),
            )
        })
        .await?;
    let mut ids = page.items;
    ids.reverse();
    Ok(ids)
}

async fn send_payouts(state: &AppState, c: &LiveChain, m: &Master) -> anyhow::Result<()> {
    let reg = crate::api::registry(state);
    let mut done = 0;
    for id in work_ids(state, IndexTag::PayoutsWork).await? {
        if done >= MAX_NEW_PER_PASS {
            break;
        }
        let chain = c.id;
        let item = state
            .store
            .read(move |r| {
                let Some(p) = r.get::<Payout>(id)? else {
                    return Ok(None);
                };
                if p.chain != chain
                    || !matches!(p.status, PayoutStatus::Queued | PayoutStatus::Signing)
                {
                    return Ok(None);
                }
                let Some(project) = r
                    .get::<Project>(p.project_id)?
                    .filter(|x| x.mode == Mode::Live)
                else {
                    return Ok(None);
                };
                let key = r.get::<ApiKey>(p.created_by_key)?;
                Ok(Some((p, project, key)))
            })
            .await?;
        let Some((p, project, key)) = item else {
            continue;
        };
        done += 1;
        let scope = Scope {
            reg: reg.clone(),
            project: Arc::new(project.clone()),
        };
        let s2 = scope.clone();
        if write(state, move |ctx| payouts::begin_signing(ctx, &s2, id))
            .await?
            .is_none()
        {
            continue;
        }
        let pol = policy(
            state,
            &project,
            key.as_ref().is_some_and(|k| k.signing_enabled),
        );
        if !pol.blocked_by().is_empty() {
            let reason = format!("signing_disabled: {}", pol.blocked_by().join(","));
            let s2 = scope.clone();
            write(state, move |ctx| payouts::fail_live(ctx, &s2, id, &reason)).await?;
            continue;
        }
        let Some(asset) = reg.asset(&p.chain, &p.asset).cloned() else {
            continue;
        };
        let dest: Address = match p.to_address.parse() {
            Ok(a) => a,
            Err(_) => {
                let s2 = scope.clone();
                write(state, move |ctx| {
                    payouts::fail_live(ctx, &s2, id, "invalid_address")
                })
                .await?;
                continue;
            }
        };
        let (to, value, data) = if asset.is_native {
            (dest, U256::from(p.amount), Default::default())
        } else {
            let token: Address = asset
                .contract
                .parse()
                .map_err(|_| anyhow!("bad contract"))?;
            (
                token,
                U256::ZERO,
                sweeper::erc20_transfer_calldata(&dest, U256::from(p.amount)),
            )
        };
        let gas = match c
            .rpc
            .estimate_gas(m.treasury, to, value, data.clone())
            .await
        {
            Ok(g) => sender::gas_limit_with_margin(g),
            Err(e) if is_refusal(&e) => {
                // The node says the transfer cannot succeed now (the master wallet lacks
                // the funds or gas): fail it without spending a nonce.
                let reason = format!("execution reverted: {e}");
                let s2 = scope.clone();
                write(state, move |ctx| payouts::fail_live(ctx, &s2, id, &reason)).await?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let s2 = scope.clone();
        let head = c.rpc.block_number().await?;
        let sent = send_new(
            state,
            c,
            m,
            pol,
            OutKind::Payout,
            id,
            p.project_id,
            to,
            value,
            data,
            gas,
            move |ctx, hash| Ok(payouts::submit_live(ctx, &s2, id, hash, head)?.is_some()),
        )
        .await?;
        if let Err(e) = sent {
            let reason = format!("signing refused: {e}");
            let s2 = scope.clone();
            write(state, move |ctx| payouts::fail_live(ctx, &s2, id, &reason)).await?;
        }
    }
    Ok(())
}

/// Deploys the factory through the deterministic deployment proxy when the chain lacks it.
/// `Ok(true)` once its code is on chain.
async fn ensure_factory(state: &AppState, c: &LiveChain, m: &Master) -> anyhow::Result<bool> {
    if !c.rpc.code(m.factory).await?.is_empty() {
        return Ok(true);
    }
    let chain = c.id;
    let pending = state
        .store
        .read(move |r| {
            for n in pending_nonces(r, chain)? {
                if out_tx(r, chain, n)?.is_some_and(|t| t.kind == OutKind::Factory) {
                    return Ok(true);
                }
            }
            Ok(false)
        })
        .await?;
    if pending {
        return Ok(false);
    }
    let proxy = Address::from(appliance_chains::address::DEPLOYMENT_PROXY);
    let data = sweeper::factory_deploy_calldata(&m.treasury);
    let gas = sender::gas_limit_with_margin(
        c.rpc
            .estimate_gas(m.treasury, proxy, U256::ZERO, data.clone())
            .await?,
    );
    let pol = SigningPolicy {
        service: state.config.signing.enabled,
        project: true,
        key: true,
    };
    let r = send_new(
        state,
        c,
        m,
        pol,
        OutKind::Factory,
        Uuid::nil(),
        Uuid::nil(),
        proxy,
        U256::ZERO,
        data,
        gas,
        |_, _| Ok(true),
    )
    .await?;
    if let Err(e) = r {
        tracing::warn!(chain = c.id, error = %e, "cannot deploy the forwarder factory");
    }
    Ok(false)
}

async fn send_sweeps(state: &AppState, c: &LiveChain, m: &Master) -> anyhow::Result<()> {
    let reg = crate::api::registry(state);
    let chain = c.id;
    let threshold = c.cfg.sweep_threshold_usd_cents.unwrap_or(0) as u128;
    let mut factory_ready: Option<bool> = None;
    let mut done = 0;
    for id in work_ids(state, IndexTag::SweepsWork).await? {
        if done >= MAX_NEW_PER_PASS {
            break;
        }
        let item = state
            .store
            .read(move |r| {
                let Some(sw) = r.get::<Sweep>(id)? else {
                    return Ok(None);
                };
                if sw.chain != chain || sw.status != SweepStatus::Open {
                    return Ok(None);
                }
                let Some(project) = r
                    .get::<Project>(sw.project_id)?
                    .filter(|x| x.mode == Mode::Live)
                else {
                    return Ok(None);
                };
                let Some(w) = r.get::<Wallet>(sw.wallet_id)? else {
                    return Ok(None);
                };
                let amount = sweeps::live_amount(r, &sw).unwrap_or(0);
                let requested = r.meta_get(&sweeps::requested_key(sw.id))?.is_some();
                Ok(Some((sw, project, w, amount, requested)))
            })
            .await?;
        let Some((sw, project, w, amount, requested)) = item else {
            continue;
        };
        let Some(asset) = reg.asset(chain, &sw.asset).cloned() else {
            continue;
        };
        // Natives have no price source yet: any confirmed amount is swept.
        if !requested
            && amount > 0
            && asset.is_stable()
            && asset.usd_cents(amount).unwrap_or(0) < threshold
        {
            continue;
        }
        done += 1;
        let scope = Scope {
            reg: reg.clone(),
            project: Arc::new(project.clone()),
        };
        if amount == 0 {
            let s2 = scope.clone();
            write(state, move |ctx| {
                sweeps::submit_live(ctx, &s2, id, "", 0).map(|_| ())
            })
            .await?;
            continue;
        }
        if factory_ready.is_none() {
            factory_ready = Some(ensure_factory(state, c, m).await?);
        }
        if factory_ready != Some(true) {
            return Ok(());
        }
        let pol = policy(state, &project, true);
        if !pol.blocked_by().is_empty() {
            continue; // stays open until signing is switched back on
        }
        let token = if asset.is_native {
            Address::ZERO
        } else {
            asset
                .contract
                .parse()
                .map_err(|_| anyhow!("bad contract"))?
        };
        let salt = appliance_chains::address::deposit_salt(w.project_id, w.customer_id);
        let data = sweeper::sweep_calldata(salt, &[token]);
        let gas = match c
            .rpc
            .estimate_gas(m.treasury, m.factory, U256::ZERO, data.clone())
            .await
        {
            Ok(g) => sender::gas_limit_with_margin(g),
            Err(e) if is_refusal(&e) => {
                tracing::warn!(chain, sweep = %id, error = %e, "sweep would revert; left open");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let head = c.rpc.block_number().await?;
        let s2 = scope.clone();
        let r = send_new(
            state,
            c,
            m,
            pol,
            OutKind::Sweep,
            id,
            sw.project_id,
            m.factory,
            U256::ZERO,
            data,
            gas,
            move |ctx, hash| {
                Ok(sweeps::submit_live(ctx, &s2, id, hash, head)?
                    .is_some_and(|s| s.status == SweepStatus::Submitted))
            },
        )
        .await?;
        if let Err(e) = r {
            tracing::warn!(chain, sweep = %id, error = %e, "sweep not signed");
        }
    }
    Ok(())
}

/// On-chain balances of `address` for every asset of `chain` (atomic units), for
/// `GET /v1/wallets/{id}/balances?source=chain|both`.
pub async fn onchain_balances(
    reg: &Registry,
    chain: &str,
    address: &str,
) -> anyhow::Result<BTreeMap<String, u128>> {
    let rpc = rpc_for(chain).ok_or_else(|| anyhow!("no node is configured for {chain}"))?;
    let owner: Address = address.parse().map_err(|_| anyhow!("bad address"))?;
    let mut out = BTreeMap::new();
    if let Some(c) = reg.chain(chain) {
        for a in &c.assets {
            let v = if a.is_native {
                rpc.balance(owner).await?
            } else {
                let token: Address = a.contract.parse().map_err(|_| anyhow!("bad contract"))?;
                rpc.token_balance(token, owner).await?
            };
            out.insert(a.symbol.clone(), u128::try_from(v).unwrap_or(u128::MAX));
        }
    }
    Ok(out)
}
