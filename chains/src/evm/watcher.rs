//! Block scanning and reorg detection for one EVM chain.
//!
//! A scan of blocks `from..=to` ([`scan_watched`]) asks for blocks in JSON-RPC batches (native
//! transfers are top-level transactions with a value), for token transfers by `eth_getLogs`
//! over block windows (by recipient or by token contract: [`LogQuery`]), and for receipts
//! only of matched native candidates. Large ranges are split internally so each request
//! stays within node limits; a refused request is halved and retried.
//! Native coin moved by contracts (internal transfers) needs traces, which many hosted
//! nodes lack: it is not detected here and shows up as drift on a chain balance reading.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use alloy::primitives::{Address, B256, U256};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::rpc::{BlockInfo, EvmRpc, LogInfo, NativeTx, RpcError};
use crate::client::WatchSet;

/// `keccak256("Transfer(address,address,uint256)")`.
pub const TRANSFER_TOPIC: B256 = B256::new(crate::address::hex_array(
    "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef",
));

/// A transfer into some address, native or token: the seam's own type.
pub use crate::client::Transfer;

/// What a scan found: the blocks (in order) and every transfer in them.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub blocks: Vec<BlockInfo>,
    pub transfers: Vec<Transfer>,
}

/// Why a scan could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The node's answers disagree (a reorg happened during the scan): scan again.
    #[error("the chain changed during the scan: {0}")]
    Moving(&'static str),
}

/// Fetches blocks `from..=to` and every token transfer in them (to any recipient). Native
/// transfers whose transaction reverted are not dropped here ([`keep_successful`]).
/// Blocks come in JSON-RPC batches ([`BLOCK_BATCH`] per round trip); see [`scan_watched`]
/// for the scan that asks the node only for transfers to watched addresses.
pub async fn scan(rpc: &EvmRpc, from: u64, to: u64, tokens: &[Address]) -> Result<Scan, ScanError> {
    let tuning = Tuning::default();
    let blocks = fetch_blocks(rpc, from, to, true, &tuning).await?;
    let mut transfers = Vec::new();
    if !tokens.is_empty() {
        let q = LogFilter {
            tokens,
            recipients: None,
            rendered: None,
        };
        for log in fetch_logs(rpc, from, to, &[q], &tuning).await? {
            if let Some(t) = token_transfer(&log, &blocks, from)? {
                transfers.push(t);
            }
        }
    }
    for b in &blocks {
        for t in &b.native {
            transfers.push(native_transfer(b, t));
        }
    }
    Ok(Scan { blocks, transfers })
}

/// How token transfers to watched addresses are asked of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogQuery {
    /// `eth_getLogs` by token contract, `Transfer` topic and the watched addresses as the
    /// recipient (`to`) topic, at most `chunk` addresses per query (and at most
    /// [`MAX_RECIPIENT_CHUNK`]): the node matches, and only transfers to watched addresses
    /// cross the wire. Costs one query per chunk per window, each scanning every log of
    /// the window on the node and carrying its chunk of addresses.
    ByRecipient { chunk: usize },
    /// `eth_getLogs` by token contract and `Transfer` topic only; recipients are matched
    /// against the watched set here. Every transfer of the tokens crosses the wire.
    ByToken,
    /// [`LogQuery::ByRecipient`] when the watched set fits in at most
    /// [`AUTO_MAX_RECIPIENT_QUERIES`] chunks of `chunk` and the range is at least
    /// [`AUTO_MIN_RANGE`] blocks (catching up), else [`LogQuery::ByToken`].
    Auto { chunk: usize },
}

/// Largest number of recipient chunks [`LogQuery::Auto`] still asks by recipient.
pub const AUTO_MAX_RECIPIENT_QUERIES: usize = 16;
/// Shortest range [`LogQuery::Auto`] asks by recipient (near the head a block or two is
/// scanned per pass: sending the whole watched set each time costs more than the logs).
pub const AUTO_MIN_RANGE: u64 = 64;
/// Default recipient chunk. A node that refuses a query of that many addresses (geth-based
/// nodes accept about a thousand per topic position) gets them again in halves, and the
/// client remembers the smaller chunk.
pub const DEFAULT_RECIPIENT_CHUNK: usize = 25_000;
/// Most addresses one recipient query carries: about 1.75 MB of JSON (Anvil refuses request
/// bodies over 2 MB, geth over 5 MB; a body over the limit is cut as a transport failure,
/// not answered as a refusal).
pub const MAX_RECIPIENT_CHUNK: usize = 25_000;
/// Default most blocks one `eth_getLogs` covers (hosted nodes commonly refuse more than a
/// few thousand); halved for the life of the client whenever a node refuses a range.
pub const LOG_RANGE: u64 = 2_000;
/// Default most blocks one JSON-RPC batch of `eth_getBlockByNumber` asks for; halved
/// whenever a node refuses a batch.
pub const BLOCK_BATCH: u64 = 100;
/// Node requests of one scan in flight at once.
pub const CONCURRENCY: usize = 4;

/// Sizes of a scan's requests. The range and batch limits shrink (never grow) when a node
/// refuses a request as too large: "halve and retry".
#[derive(Debug)]
pub struct Tuning {
    pub log_query: LogQuery,
    /// The watched addresses of the last scan asked by recipient, sorted, chunked and
    /// rendered as JSON topic lists: a watcher scans the same set pass after pass, so it is
    /// sorted and rendered once per change, not once per pass.
    recipients: std::sync::Mutex<Option<Arc<RecipientChunks>>>,
    /// Addresses per recipient query now (shrinks when a node refuses a chunk).
    recipient_chunk: AtomicU64,
    log_range: AtomicU64,
    block_batch: AtomicU64,
    pub concurrency: usize,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning::new(
            LogQuery::Auto {
                chunk: DEFAULT_RECIPIENT_CHUNK,
            },
            LOG_RANGE,
            BLOCK_BATCH,
            CONCURRENCY,
        )
    }
}

impl Tuning {
    pub fn new(
        log_query: LogQuery,
        log_range: u64,
        block_batch: u64,
        concurrency: usize,
    ) -> Tuning {
        let chunk = match log_query {
            LogQuery::ByRecipient { chunk } | LogQuery::Auto { chunk } => chunk,
            LogQuery::ByToken => DEFAULT_RECIPIENT_CHUNK,
        };
        Tuning {
            log_query,
            recipients: Default::default(),
            recipient_chunk: AtomicU64::new(chunk.clamp(1, MAX_RECIPIENT_CHUNK) as u64),
            log_range: AtomicU64::new(log_range.max(1)),
            block_batch: AtomicU64::new(block_batch.max(1)),
            concurrency: concurrency.max(1),
        }
    }

    /// Most blocks per `eth_getLogs` now.
    pub fn log_range(&self) -> u64 {
        self.log_range.load(Ordering::Relaxed)
    }

    /// Addresses per recipient query now.
    pub fn recipient_chunk(&self) -> usize {
        self.recipient_chunk.load(Ordering::Relaxed) as usize
    }

    /// Most blocks per batch now.
    pub fn block_batch(&self) -> u64 {
        self.block_batch.load(Ordering::Relaxed)
    }

    /// The query used for a range of `len` blocks and `watched` addresses.
    pub fn query_for(&self, len: u64, watched: usize) -> LogQuery {
        let chunk = self.recipient_chunk();
        match self.log_query {
            LogQuery::Auto { .. } => {
                if len >= AUTO_MIN_RANGE && watched.div_ceil(chunk) <= AUTO_MAX_RECIPIENT_QUERIES {
                    LogQuery::ByRecipient { chunk }
                } else {
                    LogQuery::ByToken
                }
            }
            LogQuery::ByRecipient { .. } => LogQuery::ByRecipient { chunk },
            LogQuery::ByToken => LogQuery::ByToken,
        }
    }
}

/// A watched set sorted and cut into recipient chunks, each rendered once as the JSON
/// array of its `to` topics.
#[derive(Debug)]
struct RecipientChunks {
    /// What set and chunk size this was made from ([`WatchSet::fingerprint`]; the set's
    /// size is `sorted.len()`).
    fingerprint: (u64, u64),
    chunk: usize,
    sorted: Vec<Address>,
    /// `rendered[i]`: the topics of `sorted.chunks(chunk)[i]`.
    rendered: Vec<String>,
}

impl Tuning {
    /// `set` sorted, in chunks of `chunk`, rendered (from the cache when the set is the
    /// one of the last call).
    fn recipient_chunks(&self, set: &WatchSet, chunk: usize) -> Arc<RecipientChunks> {
        let chunk = chunk.max(1);
        let fingerprint = set.fingerprint();
        let mut cached = self.recipients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cached.as_ref() {
            if c.sorted.len() == set.len() && c.fingerprint == fingerprint && c.chunk == chunk {
                return c.clone();
            }
        }
        let mut sorted: Vec<Address> = set.addresses().copied().collect();
        sorted.sort_unstable();
        let rendered = sorted.chunks(chunk).map(render_topics).collect();
        let c = Arc::new(RecipientChunks {
            fingerprint,
            chunk,
            sorted,
            rendered,
        });
        *cached = Some(c.clone());
        c
    }
}

/// The JSON array of `addresses` as 32-byte topics.
fn render_topics(addresses: &[Address]) -> String {
    let mut s = String::with_capacity(2 + addresses.len() * 69);
    s.push('[');
    for (i, a) in addresses.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str("\"0x000000000000000000000000");
        s.push_str(&alloy::hex::encode(a.as_slice()));
        s.push('"');
    }
    s.push(']');
    s
}

/// One `eth_getLogs` filter without its block range.
#[derive(Clone, Copy)]
struct LogFilter<'a> {
    tokens: &'a [Address],
    /// The recipients (`None`: any recipient).
    recipients: Option<&'a [Address]>,
    /// `recipients` already rendered ([`render_topics`]), when they are a whole chunk.
    rendered: Option<&'a str>,
}

impl LogFilter<'_> {
    fn json(&self, from: u64, to: u64) -> Box<RawValue> {
        let tokens: Vec<String> = self
            .tokens
            .iter()
            .map(|t| format!("\"0x{}\"", alloy::hex::encode(t.as_slice())))
            .collect();
        let mut s = format!(
            "{{\"fromBlock\":\"0x{from:x}\",\"toBlock\":\"0x{to:x}\",\"address\":[{}],\"topics\":[\"{TRANSFER_TOPIC}\"",
            tokens.join(",")
        );
        if let Some(recipients) = self.recipients {
            let topics = self
                .rendered
                .map(Cow::Borrowed)
                .unwrap_or_else(|| Cow::Owned(render_topics(recipients)));
            s.push_str(",null,");
            s.push_str(&topics);
        }
        s.push_str("]}");
        RawValue::from_string(s).expect("a filter rendered as JSON")
    }
}

/// Consecutive sub-ranges of `from..=to` of at most `step` blocks.
pub fn split_range(from: u64, to: u64, step: u64) -> Vec<(u64, u64)> {
    let step = step.max(1);
    let mut out = Vec::new();
    let mut a = from;
    while a <= to {
        let b = to.min(a.saturating_add(step - 1));
        out.push((a, b));
        if b == u64::MAX {
            break;
        }
        a = b + 1;
    }
    out
}

/// Blocks `from..=to`, in order and linked by parent hash, in batches run concurrently.
async fn fetch_blocks(
    rpc: &EvmRpc,
    from: u64,
    to: u64,
    full: bool,
    tuning: &Tuning,
) -> Result<Vec<BlockInfo>, ScanError> {
    let parts = split_range(from, to, tuning.block_batch());
    let mut stream = futures_util::stream::iter(
        parts
            .into_iter()
            .map(|(a, b)| blocks_halving(rpc, a, b, full, tuning)),
    )
    .buffered(tuning.concurrency);
    let mut blocks: Vec<BlockInfo> = Vec::with_capacity((to + 1 - from) as usize);
    while let Some(part) = stream.next().await {
        for b in part? {
            let b = b.ok_or(ScanError::Moving("block vanished"))?;
            if let Some(prev) = blocks.last() {
                if b.parent_hash != prev.hash || b.number != prev.number + 1 {
                    return Err(ScanError::Moving("parent hash mismatch inside the range"));
                }
            }
            blocks.push(b);
        }
    }
    Ok(blocks)
}

/// One batch of blocks; a refused batch is halved and retried (and later batches are
/// smaller).
async fn blocks_halving(
    rpc: &EvmRpc,
    from: u64,
    to: u64,
    full: bool,
    tuning: &Tuning,
) -> Result<Vec<Option<BlockInfo>>, RpcError> {
    let mut out = Vec::with_capacity((to + 1 - from) as usize);
    let mut stack = vec![(from, to)];
    while let Some((a, b)) = stack.pop() {
        match rpc.blocks(a, b, full).await {
            Ok(v) => out.extend(v),
            Err(e) if e.is_refusal() && b > a => {
                let half = (b - a).div_ceil(2);
                tuning.block_batch.fetch_min(half.max(1), Ordering::Relaxed);
                tracing::debug!(from = a, to = b, "node refused a block batch; halving");
                let m = a + half - 1;
                stack.push((m + 1, b));
                stack.push((a, m));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Logs of `q` over `from..=to`, in windows of the tuning's log range run concurrently;
/// a refused window is halved and retried (and later windows are smaller).
async fn fetch_logs(
    rpc: &EvmRpc,
    from: u64,
    to: u64,
    filters: &[LogFilter<'_>],
    tuning: &Tuning,
) -> Result<Vec<LogInfo>, RpcError> {
    // Every (window, filter) pair is one job; jobs run concurrently.
    let mut jobs = Vec::new();
    for (a, b) in split_range(from, to, tuning.log_range()) {
        for f in filters {
            jobs.push(logs_halving(rpc, a, b, *f, tuning));
        }
    }
    let mut stream = futures_util::stream::iter(jobs).buffer_unordered(tuning.concurrency);
    let mut out = Vec::new();
    while let Some(part) = stream.next().await {
        out.extend(part?);
    }
    Ok(out)
}

async fn logs_halving(
    rpc: &EvmRpc,
    from: u64,
    to: u64,
    q: LogFilter<'_>,
    tuning: &Tuning,
) -> Result<Vec<LogInfo>, RpcError> {
    let mut out = Vec::new();
    let mut stack = vec![(from, to, q)];
    while let Some((a, b, f)) = stack.pop() {
        let e = match rpc.logs_raw(&f.json(a, b)).await {
            Ok(v) => {
                out.extend(v);
                continue;
            }
            Err(e) if e.is_refusal() => e,
            Err(e) => return Err(e),
        };
        // Refused: too many blocks, or too many addresses? One block with the same
        // addresses tells (a refusal of it is about the addresses).
        let chunk_refused = match f.recipients {
            Some(r) if r.len() > 1 => {
                b == a
                    || match rpc.logs_raw(&f.json(a, a)).await {
                        Ok(_) => false,
                        Err(e) if e.is_refusal() => true,
                        Err(e) => return Err(e),
                    }
            }
            _ => false,
        };
        if chunk_refused {
            let r = f.recipients.expect("checked");
            let half = r.len().div_ceil(2);
            tuning
                .recipient_chunk
                .fetch_min(half as u64, Ordering::Relaxed);
            tracing::debug!(
                addresses = r.len(),
                "node refused a recipient chunk; halving"
            );
            for part in r.chunks(half) {
                stack.push((
                    a,
                    b,
                    LogFilter {
                        tokens: f.tokens,
                        recipients: Some(part),
                        rendered: None,
                    },
                ));
            }
        } else if b > a {
            let half = (b - a).div_ceil(2);
            tuning.log_range.fetch_min(half.max(1), Ordering::Relaxed);
            tracing::debug!(from = a, to = b, "node refused a log range; halving");
            let m = a + half - 1;
            stack.push((m + 1, b, f));
            stack.push((a, m, f));
        } else {
            return Err(e);
        }
    }
    Ok(out)
}

/// The token transfer a log records, checked against the scanned blocks (`blocks[0]` is
/// block `from`). `None` for a log that is not an ERC-20 `Transfer` or is removed.
fn token_transfer(
    log: &LogInfo,
    blocks: &[BlockInfo],
    from: u64,
) -> Result<Option<Transfer>, ScanError> {
    if log.removed {
        return Ok(None);
    }
    // ERC-721 Transfer has the token id as a third indexed topic: not money.
    if log.topics.len() != 3 || log.topics[0] != TRANSFER_TOPIC || log.data.len() != 32 {
        return Ok(None);
    }
    let (Some(bn), Some(bh), Some(tx), Some(li)) = (
        log.block_number,
        log.block_hash,
        log.transaction_hash,
        log.log_index,
    ) else {
        return Ok(None);
    };
    let bn: u64 = bn.to();
    let Some(block) = bn
        .checked_sub(from)
        .and_then(|i| blocks.get(i as usize))
        .filter(|b| b.number == bn)
    else {
        return Err(ScanError::Moving("log outside the scanned range"));
    };
    if block.hash != bh {
        return Err(ScanError::Moving("log from another fork"));
    }
    let Ok(li) = u32::try_from(li) else {
        return Ok(None);
    };
    Ok(Some(Transfer {
        block_number: bn,
        block_hash: bh,
        block_time: block.timestamp,
        tx_hash: tx,
        log_index: Some(li),
        token: Some(log.address),
        from: Address::from_word(log.topics[1]),
        to: Address::from_word(log.topics[2]),
        value: U256::from_be_slice(&log.data),
    }))
}

fn native_transfer(b: &BlockInfo, t: &NativeTx) -> Transfer {
    Transfer {
        block_number: b.number,
        block_hash: b.hash,
        block_time: b.timestamp,
        tx_hash: t.hash,
        log_index: None,
        token: None,
        from: t.from,
        to: t.to,
        value: t.value,
    }
}

/// A scan of blocks `from..=to` for transfers to `watch` (the chain seam's range scan,
/// [`crate::client::ChainClient::transfers`]):
/// * blocks in JSON-RPC batches ([`Tuning::block_batch`] per round trip), with their
///   transactions only when some address is watched (native transfers are top-level
///   transactions with a value to a watched address);
/// * token transfers by `eth_getLogs` over windows of [`Tuning::log_range`] blocks, asked
///   by recipient or by token ([`LogQuery`]), matched against the watched set;
/// * receipts (one batch) only for the matched native candidates: reverted ones dropped;
/// * up to [`Tuning::concurrency`] requests in flight; a refused range or batch is halved;
/// * every request to one node ([`EvmRpc::pinned`]), which must have block `to` first.
///
/// Transfers come out ordered by block, then log index (native transfers after the logs
/// of their block). [`ScanError::Moving`] when the node's answers do not form one chain.
pub async fn scan_watched(
    rpc: &EvmRpc,
    from: u64,
    to: u64,
    watch: &WatchSet,
    tuning: &Tuning,
) -> Result<(Vec<BlockInfo>, Vec<Transfer>), ScanError> {
    if from > to {
        return Ok((Vec::new(), Vec::new()));
    }
    let rpc = &pinned_through(rpc, to).await?;
    let full = !watch.is_empty();
    let ask_logs = full && !watch.tokens.is_empty();
    let query = tuning.query_for(to + 1 - from, watch.len());
    let chunks = match query {
        LogQuery::ByRecipient { chunk } if ask_logs => Some(tuning.recipient_chunks(watch, chunk)),
        _ => None,
    };
    // `chunks` is only made when logs are asked for.
    let filters: Vec<LogFilter<'_>> = if !ask_logs {
        Vec::new()
    } else if let Some(c) = &chunks {
        c.sorted
            .chunks(c.chunk)
            .zip(&c.rendered)
            .map(|(part, rendered)| LogFilter {
                tokens: &watch.tokens,
                recipients: Some(part),
                rendered: Some(rendered),
            })
            .collect()
    } else {
        vec![LogFilter {
            tokens: &watch.tokens,
            recipients: None,
            rendered: None,
        }]
    };
    let (blocks, logs) = blocks_and_logs(rpc, from, to, full, &filters, tuning).await?;
    let mut transfers = token_transfers_in(&logs, &blocks, from, |t| {
        watch.watches(&t.to) && watch.tokens.contains(&t.token.unwrap_or_default())
    })?;
    let mut native = Vec::new();
    for b in &blocks {
        for t in b.native.iter().filter(|t| watch.watches(&t.to)) {
            native.push(native_transfer(b, t));
        }
    }
    transfers.extend(keep_successful_batched(rpc, native).await?);
    transfers.sort_by_key(|t| (t.block_number, t.log_index.unwrap_or(u32::MAX)));
    Ok((blocks, transfers))
}

/// One node for a whole scan ([`EvmRpc::pinned`]), which has block `to` already: a node
/// that does not have a block yet may answer `eth_getLogs` without its logs.
/// [`ScanError::Moving`] when it is behind.
async fn pinned_through(rpc: &EvmRpc, to: u64) -> Result<EvmRpc, ScanError> {
    let rpc = rpc.pinned();
    if rpc.block_number().await? < to {
        return Err(ScanError::Moving("the node is behind the range"));
    }
    Ok(rpc)
}

/// Blocks `from..=to` (with their transactions when `full`) and the logs of `filters` in
/// them, asked concurrently of `rpc`.
async fn blocks_and_logs(
    rpc: &EvmRpc,
    from: u64,
    to: u64,
    full: bool,
    filters: &[LogFilter<'_>],
    tuning: &Tuning,
) -> Result<(Vec<BlockInfo>, Vec<LogInfo>), ScanError> {
    let blocks_fut = fetch_blocks(rpc, from, to, full, tuning);
    let logs_fut = fetch_logs(rpc, from, to, filters, tuning);
    let (blocks, logs) = futures_util::future::join(blocks_fut, logs_fut).await;
    Ok((blocks?, logs?))
}

/// The token transfers among `logs` (of `blocks`, which start at `from`) that `keep`
/// accepts, in log order.
fn token_transfers_in(
    logs: &[LogInfo],
    blocks: &[BlockInfo],
    from: u64,
    keep: impl Fn(&Transfer) -> bool,
) -> Result<Vec<Transfer>, ScanError> {
    let mut transfers = Vec::new();
    for log in logs {
        if let Some(t) = token_transfer(log, blocks, from)? {
            if keep(&t) {
                transfers.push(t);
            }
        }
    }
    Ok(transfers)
}

/// Blocks `from..=to` (without their transactions) and every `Transfer` log of `tokens` in
/// them, whatever the recipient: logs asked by token ([`LogQuery::ByToken`]) over windows
/// of [`Tuning::log_range`] blocks, all from one node ([`EvmRpc::pinned`]) that has block
/// `to` first (the chain seam's [`crate::client::ChainClient::token_transfers`]). Transfers
/// come out ordered by block, then log index. [`ScanError::Moving`] when the node's
/// answers do not form one chain.
pub async fn scan_tokens(
    rpc: &EvmRpc,
    from: u64,
    to: u64,
    tokens: &[Address],
    tuning: &Tuning,
) -> Result<(Vec<BlockInfo>, Vec<Transfer>), ScanError> {
    if from > to {
        return Ok((Vec::new(), Vec::new()));
    }
    let rpc = &pinned_through(rpc, to).await?;
    let filters: Vec<LogFilter<'_>> = if tokens.is_empty() {
        Vec::new()
    } else {
        vec![LogFilter {
            tokens,
            recipients: None,
            rendered: None,
        }]
    };
    let (blocks, logs) = blocks_and_logs(rpc, from, to, false, &filters, tuning).await?;
    let mut transfers = token_transfers_in(&logs, &blocks, from, |t| {
        tokens.contains(&t.token.unwrap_or_default())
    })?;
    transfers.sort_by_key(|t| (t.block_number, t.log_index.unwrap_or(u32::MAX)));
    Ok((blocks, transfers))
}

/// Native candidates whose transaction succeeded, their receipts asked in batches.
async fn keep_successful_batched(
    rpc: &EvmRpc,
    native: Vec<Transfer>,
) -> Result<Vec<Transfer>, ScanError> {
    let mut out = Vec::with_capacity(native.len());
    for part in native.chunks(BLOCK_BATCH as usize) {
        let hashes: Vec<B256> = part.iter().map(|t| t.tx_hash).collect();
        let receipts = rpc.receipts(&hashes).await?;
        for (t, r) in part.iter().zip(receipts) {
            match r {
                // No receipt, or one from another block: the chain moved during the scan.
                None => return Err(ScanError::Moving("transaction left the scanned block")),
                Some(r) if r.block_hash != t.block_hash => {
                    return Err(ScanError::Moving("receipt from another fork"))
                }
                Some(r) if r.success => out.push(t.clone()),
                Some(_) => {} // reverted: no value moved
            }
        }
    }
    Ok(out)
}

/// Drops native transfers whose transaction reverted (one receipt per candidate: call this
/// after matching recipients, so only transfers to deposit addresses cost a call).
pub async fn keep_successful(
    rpc: &EvmRpc,
    transfers: Vec<Transfer>,
) -> Result<Vec<Transfer>, RpcError> {
    let mut out = Vec::with_capacity(transfers.len());
    for t in transfers {
        if t.token.is_none() {
            match rpc.receipt(t.tx_hash).await? {
                Some(r) if r.success => {}
                _ => continue,
            }
        }
        out.push(t);
    }
    Ok(out)
}

/// The watcher's durable position: the last processed block and the hashes of the recent
/// ones (newest last), enough to find the fork point of any reorg up to `capacity` deep.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Last processed block; `None` before the first scan.
    pub height: Option<u64>,
    pub recent: VecDeque<(u64, B256)>,
}

impl Cursor {
    /// Hash recorded for block `n`, if still remembered.
    pub fn hash_at(&self, n: u64) -> Option<B256> {
        self.recent
            .iter()
            .rev()
            .find(|(h, _)| *h == n)
            .map(|(_, x)| *x)
    }

    /// Records processed blocks, keeping at most `capacity`.
    pub fn push(&mut self, blocks: &[BlockInfo], capacity: usize) {
        for b in blocks {
            self.recent.push_back((b.number, b.hash));
            self.height = Some(b.number);
        }
        while self.recent.len() > capacity {
            self.recent.pop_front();
        }
    }

    /// Forgets blocks above `ancestor` (they left the canonical chain).
    pub fn rewind(&mut self, ancestor: u64) {
        while self.recent.back().is_some_and(|(n, _)| *n > ancestor) {
            self.recent.pop_back();
        }
        self.height = Some(ancestor);
    }
}

/// Whether `first` (the first block of a new scan) extends what `cursor` processed.
pub fn extends(cursor: &Cursor, first: &BlockInfo) -> bool {
    match cursor.hash_at(first.number.wrapping_sub(1)) {
        Some(h) => h == first.parent_hash,
        // Nothing remembered (first scan): nothing to contradict.
        None => true,
    }
}

/// Walks back from the cursor's height to the newest remembered block the node still has
/// with the same hash. `None`: the fork is deeper than the memory (operator attention).
pub async fn fork_point(rpc: &EvmRpc, cursor: &Cursor) -> Result<Option<u64>, RpcError> {
    for (n, h) in cursor.recent.iter().rev() {
        match rpc.block(*n, false).await? {
            Some(b) if b.hash == *h => return Ok(Some(*n)),
            _ => continue,
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn blk(n: u64, h: u8, p: u8) -> BlockInfo {
        BlockInfo {
            number: n,
            hash: B256::repeat_byte(h),
            parent_hash: B256::repeat_byte(p),
            timestamp: 0,
            native: vec![],
        }
    }

    #[test]
    fn a_range_splits_into_consecutive_parts_within_the_limit() {
        assert_eq!(split_range(5, 5, 100), vec![(5, 5)]);
        assert_eq!(split_range(1, 10, 4), vec![(1, 4), (5, 8), (9, 10)]);
        assert_eq!(split_range(0, 3, 0), vec![(0, 0), (1, 1), (2, 2), (3, 3)]);
        assert!(split_range(4, 3, 10).is_empty());
        assert_eq!(
            split_range(u64::MAX - 1, u64::MAX, 10),
            vec![(u64::MAX - 1, u64::MAX)]
        );
        let parts = split_range(100, 10_099, LOG_RANGE);
        assert_eq!(parts.len(), 5);
        assert!(parts.windows(2).all(|w| w[0].1 + 1 == w[1].0));
    }

    #[test]
    fn auto_asks_by_recipient_only_for_long_ranges_and_few_chunks() {
        let t = Tuning::default();
        let chunk = DEFAULT_RECIPIENT_CHUNK;
        let few = chunk * AUTO_MAX_RECIPIENT_QUERIES;
        assert_eq!(
            t.query_for(AUTO_MIN_RANGE, few),
            LogQuery::ByRecipient { chunk }
        );
        assert_eq!(t.query_for(AUTO_MIN_RANGE - 1, few), LogQuery::ByToken);
        assert_eq!(t.query_for(AUTO_MIN_RANGE, few + 1), LogQuery::ByToken);
        let fixed = Tuning::new(LogQuery::ByToken, 10, 10, 1);
        assert_eq!(fixed.query_for(10_000, 1), LogQuery::ByToken);
        // Limits shrink on refusal and never reach zero.
        fixed.log_range.fetch_min(1, Ordering::Relaxed);
        assert_eq!(fixed.log_range(), 1);
        assert_eq!(Tuning::new(LogQuery::ByToken, 0, 0, 0).block_batch(), 1);
    }

    fn log(block: u64, hash: u8, topics: Vec<B256>, data: Vec<u8>) -> LogInfo {
        LogInfo {
            address: Address::repeat_byte(0xee),
            topics,
            data: data.into(),
            block_number: Some(alloy::primitives::U64::from(block)),
            block_hash: Some(B256::repeat_byte(hash)),
            transaction_hash: Some(B256::repeat_byte(0x77)),
            log_index: Some(alloy::primitives::U64::from(3)),
            removed: false,
        }
    }

    #[test]
    fn a_log_becomes_a_transfer_only_on_the_scanned_chain() {
        let blocks = [blk(10, 1, 0), blk(11, 2, 1)];
        let to = Address::repeat_byte(0xaa);
        let from = Address::repeat_byte(0xbb);
        let topics = vec![TRANSFER_TOPIC, from.into_word(), to.into_word()];
        let value = U256::from(5u64).to_be_bytes::<32>().to_vec();
        let t = token_transfer(&log(11, 2, topics.clone(), value.clone()), &blocks, 10)
            .unwrap()
            .unwrap();
        assert_eq!((t.block_number, t.to, t.from), (11, to, from));
        assert_eq!((t.log_index, t.value), (Some(3), U256::from(5u64)));
        assert_eq!(t.token, Some(Address::repeat_byte(0xee)));
        // ERC-721 (token id as a fourth topic) and removed logs are not money.
        let mut nft = topics.clone();
        nft.push(B256::ZERO);
        assert!(token_transfer(&log(11, 2, nft, vec![]), &blocks, 10)
            .unwrap()
            .is_none());
        let mut removed = log(11, 2, topics.clone(), value.clone());
        removed.removed = true;
        assert!(token_transfer(&removed, &blocks, 10).unwrap().is_none());
        // Another fork, or outside the range: the chain moved.
        assert!(matches!(
            token_transfer(&log(11, 9, topics.clone(), value.clone()), &blocks, 10),
            Err(ScanError::Moving(_))
        ));
        assert!(matches!(
            token_transfer(&log(12, 3, topics, value), &blocks, 10),
            Err(ScanError::Moving(_))
        ));
    }

    #[test]
    fn a_rendered_filter_is_the_json_a_node_expects() {
        let token = Address::repeat_byte(0xee);
        let to = [Address::repeat_byte(0x01), Address::repeat_byte(0xab)];
        let rendered = render_topics(&to);
        let parse = |f: LogFilter<'_>| -> serde_json::Value {
            serde_json::from_str(f.json(16, 255).get()).unwrap()
        };
        let want = serde_json::json!({
            "fromBlock": "0x10",
            "toBlock": "0xff",
            "address": [format!("0x{}", "ee".repeat(20))],
            "topics": [
                format!("{TRANSFER_TOPIC:?}"),
                null,
                [format!("0x{}{}", "0".repeat(24), "01".repeat(20)),
                 format!("0x{}{}", "0".repeat(24), "ab".repeat(20))],
            ],
        });
        let by = |rendered| LogFilter {
            tokens: std::slice::from_ref(&token),
            recipients: Some(&to),
            rendered,
        };
        assert_eq!(parse(by(Some(&rendered))), want);
        assert_eq!(parse(by(None)), want);
        let any = parse(LogFilter {
            tokens: std::slice::from_ref(&token),
            recipients: None,
            rendered: None,
        });
        assert_eq!(
            any["topics"],
            serde_json::json!([format!("{TRANSFER_TOPIC:?}")])
        );
        assert_eq!(
            want["topics"][0].as_str().unwrap(),
            "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
        );
    }

    #[test]
    fn recipient_chunks_are_made_once_per_set() {
        let t = Tuning::default();
        let mut set = WatchSet::new(
            (1..=5u8).map(|b| (Address::repeat_byte(b), Uuid::nil())),
            Vec::new(),
        );
        let a = t.recipient_chunks(&set, 2);
        assert_eq!(a.sorted.len(), 5);
        assert!(a.sorted.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(a.rendered.len(), 3);
        assert_eq!(a.rendered[2], render_topics(&a.sorted[4..]));
        assert!(Arc::ptr_eq(&a, &t.recipient_chunks(&set, 2)));
        // Another chunk size, a grown set, a changed set of the same size: made again.
        assert_eq!(t.recipient_chunks(&set, 3).rendered.len(), 2);
        set.insert(Address::repeat_byte(9), Uuid::nil());
        assert_eq!(t.recipient_chunks(&set, 3).sorted.len(), 6);
        // The same size, other addresses (built as the watcher builds it, a page at a
        // time).
        let mut set = WatchSet::new(
            (2..=5u8).map(|b| (Address::repeat_byte(b), Uuid::nil())),
            Vec::new(),
        );
        set.insert(Address::repeat_byte(9), Uuid::nil());
        set.insert(Address::repeat_byte(10), Uuid::nil());
        let c = t.recipient_chunks(&set, 3);
        assert!(c.sorted.contains(&Address::repeat_byte(10)));
        assert!(!c.sorted.contains(&Address::repeat_byte(1)));
        // The fingerprint kept as addresses are added is the one of the set made anew,
        // whatever the order; a repeated insert changes nothing.
        set.insert(Address::repeat_byte(10), Uuid::max());
        assert_eq!(set.wallet(&Address::repeat_byte(10)), Some(Uuid::nil()));
        let anew = WatchSet::new(
            [10u8, 9, 5, 4, 3, 2].map(|b| (Address::repeat_byte(b), Uuid::nil())),
            Vec::new(),
        );
        assert_eq!(set.len(), anew.len());
        assert_eq!(set.fingerprint(), anew.fingerprint());
        assert_ne!(set.fingerprint(), WatchSet::default().fingerprint());
        assert!(
            Arc::ptr_eq(&c, &t.recipient_chunks(&anew, 3)),
            "the same set: cached"
        );
    }

    #[test]
    fn transfer_topic_is_the_keccak_of_the_signature() {
        assert_eq!(
            TRANSFER_TOPIC.0,
            crate::address::keccak256(b"Transfer(address,address,uint256)")
        );
    }

    #[test]
    fn cursor_keeps_a_bounded_memory_and_rewinds() {
        let mut c = Cursor::default();
        c.push(&[blk(1, 1, 0), blk(2, 2, 1), blk(3, 3, 2)], 2);
        assert_eq!(c.height, Some(3));
        assert_eq!(c.recent.len(), 2);
        assert!(extends(&c, &blk(4, 4, 3)));
        assert!(!extends(&c, &blk(4, 4, 9)));
        c.rewind(2);
        assert_eq!(c.height, Some(2));
        assert_eq!(c.hash_at(3), None);
        assert_eq!(c.hash_at(2), Some(B256::repeat_byte(2)));
    }
}
