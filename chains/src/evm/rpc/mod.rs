//! A bounded JSON-RPC client for one EVM chain's nodes, with failover between them.

use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy::eips::BlockId;
use alloy::primitives::{Address, Bytes, TxKind, B256, U256, U64};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::types::{Filter, TransactionRequest};
use serde_json::Value;

use super::nodes::{Change, NodeChoice, Skip};
use crate::client::CallRequest;

/// Most time one RPC call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a node call failed. The watcher backs off and reports it; it never panics.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// The call failed in transport or the node answered with an error.
    #[error("node call {method} failed: {detail}")]
    Transport {
        method: &'static str,
        /// The error and its causes as one line, every URL in it cut to scheme and host
        /// ([`crate::redact::scrub_urls`]; node URLs carry account keys).
        detail: String,
        /// The node answered with a JSON-RPC error (it refused the call), as opposed to a
        /// transport failure.
        refused: bool,
    },
    #[error("node call {0} timed out")]
    Timeout(&'static str),
    #[error("node answer to {method} is malformed: {detail}")]
    Malformed {
        method: &'static str,
        detail: String,
    },
    /// The URL, redacted to scheme and host ([`crate::redact::redact_url`]).
    #[error("invalid RPC URL {0:?}")]
    BadUrl(String),
}

mod types;
pub use types::*;

/// Client of a chain's nodes: one node, or several with failover in configuration order
/// (DECISIONS.md section 16; the rules are in [`super::nodes`]). Every call goes to the
/// preferred node; a transport failure or timeout marks that node down and the same call
/// is tried on the next one. Refusals (JSON-RPC errors) are the answer, not a failure.
#[derive(Clone)]
pub struct EvmRpc {
    inner: Arc<Inner>,
    /// Set on a pinned view ([`EvmRpc::pinned`]): every call goes to this node only.
    only: Option<usize>,
}

struct Inner {
    nodes: Vec<Node>,
    choice: Mutex<NodeChoice>,
    /// When set, every node's chain id is checked before it is used for anything else
    /// (a backup node of another chain must never feed the watcher).
    expected_chain_id: Option<u64>,
    /// Chain name for log lines.
    chain: String,
}

struct Node {
    p: RootProvider,
    url: String,
    shown: String,
    /// The node's chain id was checked against `expected_chain_id`.
    verified: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for EvmRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvmRpc")
            .field(
                "urls",
                &self
                    .inner
                    .nodes
                    .iter()
                    .map(|n| n.shown.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Most time a head probe of a node that is not preferred may take: a hung backup node
/// must not hold the watcher for the whole [`CALL_TIMEOUT`].
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

async fn bounded<T, E>(
    method: &'static str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, RpcError>
where
    E: Into<alloy::transports::TransportError>,
{
    bounded_for(CALL_TIMEOUT, method, f).await
}

async fn bounded_for<T, E>(
    limit: Duration,
    method: &'static str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, RpcError>
where
    E: Into<alloy::transports::TransportError>,
{
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(transport_error(method, e.into())),
        Err(_) => Err(RpcError::Timeout(method)),
    }
}

fn transport_error(method: &'static str, e: alloy::transports::TransportError) -> RpcError {
    RpcError::Transport {
        method,
        refused: e.as_error_resp().is_some(),
        detail: crate::redact::scrub_urls(&error_chain(&e)),
    }
}

impl RpcError {
    /// The node did not answer (transport failure, timeout): another node may.
    pub fn is_node_failure(&self) -> bool {
        matches!(
            self,
            RpcError::Transport { refused: false, .. } | RpcError::Timeout(_)
        )
    }

    /// The node refused the call with a JSON-RPC error.
    pub fn is_refusal(&self) -> bool {
        matches!(self, RpcError::Transport { refused: true, .. })
    }
}

/// `e` and its causes, `: `-separated.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

fn malformed(method: &'static str, detail: impl Into<String>) -> RpcError {
    RpcError::Malformed {
        method,
        detail: detail.into(),
    }
}

fn hex_u64(v: &Value, method: &'static str, field: &str) -> Result<u64, RpcError> {
    let s = v[field]
        .as_str()
        .ok_or_else(|| malformed(method, format!("missing {field}")))?;
    u64::from_str_radix(s.trim_start_matches("0x"), 16)
        .map_err(|_| malformed(method, format!("bad {field}")))
}

fn parse<T: std::str::FromStr>(
    v: &Value,
    method: &'static str,
    field: &str,
) -> Result<T, RpcError> {
    v[field]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| malformed(method, format!("bad {field}")))
}

/// A block number as a JSON-RPC quantity.
fn qty(n: u64) -> String {
    format!("0x{n:x}")
}

impl EvmRpc {
    /// A client of the node at `url` (`http://` or `https://`).
    pub fn new(url: &str) -> Result<EvmRpc, RpcError> {
        EvmRpc::with_urls("", &[url.to_string()])
    }

    /// A client of chain `chain` (a name for log lines) through `urls`, tried in order
    /// (DECISIONS.md section 16). At least one URL.
    pub fn with_urls(chain: &str, urls: &[String]) -> Result<EvmRpc, RpcError> {
        if urls.is_empty() {
            return Err(RpcError::BadUrl("<none>".into()));
        }
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            let shown = crate::redact::redact_url(url);
            let u = url.parse().map_err(|_| RpcError::BadUrl(shown.clone()))?;
            nodes.push(Node {
                p: RootProvider::new_http(u),
                url: url.clone(),
                shown,
                verified: std::sync::atomic::AtomicBool::new(false),
            });
        }
        let choice = NodeChoice::new(nodes.iter().map(|n| n.shown.clone()).collect());
        Ok(EvmRpc {
            inner: Arc::new(Inner {
                nodes,
                choice: Mutex::new(choice),
                expected_chain_id: None,
                chain: chain.to_string(),
            }),
            only: None,
        })
    }

    /// The same client, checking every node's chain id against `id` before using it: a
    /// node of another chain is skipped ([`super::nodes::WRONG_CHAIN_FOR`]). Call before
    /// cloning.
    pub fn expect_chain_id(mut self, id: u64) -> EvmRpc {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.expected_chain_id = Some(id);
        }
        self
    }

    /// A view of this client whose calls all go to the node preferred now, without
    /// failover: a multi-call read (a range scan) must see one node's chain, never blocks
    /// of one node and logs of another that may not have them yet. A failure still marks
    /// the node down, so the next read goes elsewhere.
    pub fn pinned(&self) -> EvmRpc {
        EvmRpc {
            inner: self.inner.clone(),
            only: Some(self.only.unwrap_or_else(|| self.choice().preferred())),
        }
    }

    /// The first node's URL, unredacted (never log it: [`crate::redact::redact_url`]).
    pub fn url(&self) -> &str {
        &self.inner.nodes[0].url
    }

    /// Every node, redacted to scheme, host and port, in configuration order.
    pub fn shown_urls(&self) -> Vec<String> {
        self.inner.nodes.iter().map(|n| n.shown.clone()).collect()
    }

    /// One sentence for the chain's `status_note` while a node is skipped and another
    /// serves (DECISIONS.md section 16); `None` when all is well (or nothing answers).
    pub fn note(&self) -> Option<String> {
        self.choice().note()
    }

    fn choice(&self) -> std::sync::MutexGuard<'_, NodeChoice> {
        self.inner.choice.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Logs every change of the skipped set once (WARN when a node is skipped).
    fn log_changes(&self) {
        let changes = self.choice().changes();
        for c in changes {
            match c {
                Change::Skipped { node, why } => match &why {
                    Skip::Down { detail } => tracing::warn!(
                        chain = %self.inner.chain, node = %node, error = %detail,
                        "node skipped: its calls fail; using the next node"
                    ),
                    Skip::WrongChain { got, expected } => tracing::warn!(
                        chain = %self.inner.chain, node = %node, got, expected,
                        "node skipped: it reports another chain id"
                    ),
                    Skip::Lagging { behind } => tracing::warn!(
                        chain = %self.inner.chain, node = %node, behind,
                        "node skipped: it lags the other nodes"
                    ),
                },
                Change::Restored { node } => {
                    tracing::info!(chain = %self.inner.chain, node = %node, "node back in use")
                }
            }
        }
    }

    /// Checks node `i`'s chain id when an expected one is set and it is not checked yet.
    /// `Ok(false)`: the node is of another chain (marked so).
    async fn verify(&self, i: usize, limit: Duration) -> Result<bool, RpcError> {
        let Some(expected) = self.inner.expected_chain_id else {
            return Ok(true);
        };
        let node = &self.inner.nodes[i];
        if node.verified.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(true);
        }
        let got = bounded_for(limit, "eth_chainId", node.p.get_chain_id().into_future()).await?;
        if got != expected {
            self.choice()
                .wrong_chain(i, got, expected, std::time::Instant::now());
            return Ok(false);
        }
        node.verified
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    /// Runs one call on the preferred node, and on the next ones while nodes fail in
    /// transport. The last failure is returned when every node failed.
    async fn run<T, F, Fut>(&self, f: F) -> Result<T, RpcError>
    where
        F: Fn(RootProvider) -> Fut,
        Fut: std::future::Future<Output = Result<T, RpcError>>,
    {
        let order = match self.only {
            Some(i) => vec![i],
            None => self.choice().order(),
        };
        let single = self.inner.nodes.len() == 1;
        let mut last = None;
        for i in order {
            if !single {
                match self.verify(i, CALL_TIMEOUT).await {
                    Ok(true) => {}
                    Ok(false) => {
                        last.get_or_insert(RpcError::Transport {
                            method: "eth_chainId",
                            detail: format!("{} serves another chain", self.inner.nodes[i].shown),
                            refused: false,
                        });
                        continue;
                    }
                    Err(e) if e.is_node_failure() => {
                        self.node_failed(i, &e);
                        last = Some(e);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            match f(self.inner.nodes[i].p.clone()).await {
                Ok(v) => {
                    self.choice().answered(i, None);
                    self.log_changes();
                    return Ok(v);
                }
                Err(e) if e.is_node_failure() => {
                    self.node_failed(i, &e);
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or(RpcError::BadUrl("<none>".into())))
    }

    fn node_failed(&self, i: usize, e: &RpcError) {
        self.choice()
            .failed(i, e.to_string(), std::time::Instant::now());
        self.log_changes();
    }

    /// The chain id of the preferred node. With an expected chain id set, every node not
    /// checked yet is asked, and nodes of another chain are skipped from then on; the
    /// answer is then the expected id when any node has it, else the first node's.
    pub async fn chain_id(&self) -> Result<u64, RpcError> {
        let Some(expected) = self.inner.expected_chain_id else {
            return self
                .run(
                    |p| async move { bounded("eth_chainId", p.get_chain_id().into_future()).await },
                )
                .await;
        };
        let mut first = None;
        let mut last_err = None;
        for i in 0..self.inner.nodes.len() {
            let node = &self.inner.nodes[i];
            match bounded("eth_chainId", node.p.get_chain_id().into_future()).await {
                Ok(got) if got == expected => {
                    node.verified
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    self.choice().answered(i, None);
                    self.log_changes();
                    return Ok(got);
                }
                Ok(got) => {
                    self.choice()
                        .wrong_chain(i, got, expected, std::time::Instant::now());
                    self.log_changes();
                    first.get_or_insert(got);
                }
                Err(e) if e.is_node_failure() => {
                    self.node_failed(i, &e);
                    last_err = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        match (first, last_err) {
            (Some(got), _) => Ok(got),
            (None, Some(e)) => Err(e),
            (None, None) => Err(RpcError::BadUrl("<none>".into())),
        }
    }

    /// Every node's chain id, asked once each (start-up checks): (redacted URL, answer).
    /// Nodes answering the expected chain id are marked checked.
    pub async fn chain_ids(&self) -> Vec<(String, Result<u64, RpcError>)> {
        let asks = self.inner.nodes.iter().map(|n| async move {
            let r = bounded("eth_chainId", n.p.get_chain_id().into_future()).await;
            if let (Ok(got), Some(want)) = (&r, self.inner.expected_chain_id) {
                if *got == want {
                    n.verified.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            (n.shown.clone(), r)
        });
        futures_util::future::join_all(asks).await
    }

    /// The head block number. With several nodes this is the head probe of the failover
    /// rules: every node not skipped (and skipped ones whose time is up) is asked at once,
    /// heads are compared, a node that fails or lags is skipped, and the answer is the head
    /// of the node calls go to next.
    pub async fn block_number(&self) -> Result<u64, RpcError> {
        const M: &str = "eth_blockNumber";
        if self.inner.nodes.len() == 1 || self.only.is_some() {
            return self
                .run(|p| async move { bounded(M, p.get_block_number().into_future()).await })
                .await;
        }
        let probe = self.choice().to_probe(std::time::Instant::now());
        let preferred = self.choice().preferred();
        let asks = probe.iter().map(|&i| {
            let limit = if i == preferred {
                CALL_TIMEOUT
            } else {
                PROBE_TIMEOUT
            };
            async move {
                if !self.verify(i, limit).await? {
                    return Ok(None);
                }
                let p = &self.inner.nodes[i].p;
                bounded_for(limit, M, p.get_block_number().into_future())
                    .await
                    .map(Some)
            }
        });
        let results = futures_util::future::join_all(asks).await;
        let mut last_err = None;
        {
            let mut c = self.choice();
            let now = std::time::Instant::now();
            for (&i, r) in probe.iter().zip(results) {
                match r {
                    Ok(Some(h)) => c.answered(i, Some(h)),
                    Ok(None) => {} // another chain: marked by verify
                    Err(e) => {
                        if e.is_node_failure() {
                            c.failed(i, e.to_string(), now);
                        }
                        last_err = Some(e);
                    }
                }
            }
        }
        self.log_changes();
        let best = self.choice().preferred();
        // The head of the node calls go to next, when it answered this round.
        let c = self.choice();
        match c.skip(best) {
            None => Ok(c.head(best).expect("a usable node answered the probe")),
            Some(_) => Err(last_err.unwrap_or(RpcError::Transport {
                method: M,
                detail: "no node answered".into(),
                refused: false,
            })),
        }
    }

    /// Block `n` with its value-carrying transactions when `full`; `None` past the head.
    pub async fn block(&self, n: u64, full: bool) -> Result<Option<BlockInfo>, RpcError> {
        const M: &str = "eth_getBlockByNumber";
        self.run(|p| async move {
            if full {
                let b: Option<RawBlock> =
                    bounded(M, p.raw_request(M.into(), (qty(n), true))).await?;
                Ok(b.map(BlockInfo::from))
            } else {
                let b: Option<RawHeader> =
                    bounded(M, p.raw_request(M.into(), (qty(n), false))).await?;
                Ok(b.map(BlockInfo::from))
            }
        })
        .await
    }

    /// Blocks `from..=to` in one JSON-RPC batch request (one round trip), in order;
    /// `None` for a block past the head. Value-carrying transactions when `full`.
    pub async fn blocks(
        &self,
        from: u64,
        to: u64,
        full: bool,
    ) -> Result<Vec<Option<BlockInfo>>, RpcError> {
        const M: &str = "eth_getBlockByNumber";
        self.run(|p| async move {
            if full {
                bounded(M, batch_blocks::<RawBlock>(&p, from, to, true)).await
            } else {
                bounded(M, batch_blocks::<RawHeader>(&p, from, to, false)).await
            }
        })
        .await
    }

    /// Logs of `filter` (one `eth_getLogs`).
    pub async fn logs(&self, filter: &Filter) -> Result<Vec<alloy::rpc::types::Log>, RpcError> {
        self.run(|p| async move { bounded("eth_getLogs", p.get_logs(filter)).await })
            .await
    }

    /// `eth_getLogs` with a filter given as JSON (`fromBlock`, `toBlock`, `address`,
    /// `topics`), answered as the watcher's lean [`LogInfo`]. The filter is sent as it is
    /// written (a range scan renders its large recipient lists once, not per request).
    pub async fn logs_raw(
        &self,
        filter: &serde_json::value::RawValue,
    ) -> Result<Vec<LogInfo>, RpcError> {
        const M: &str = "eth_getLogs";
        self.run(|p| async move { bounded(M, p.raw_request(M.into(), (filter,))).await })
            .await
    }

    pub async fn balance(&self, a: Address) -> Result<U256, RpcError> {
        self.run(|p| async move {
            bounded("eth_getBalance", p.get_balance(a).latest().into_future()).await
        })
        .await
    }

    /// ERC-20 `balanceOf(owner)`.
    pub async fn token_balance(&self, token: Address, owner: Address) -> Result<U256, RpcError> {
        let mut data = vec![0x70, 0xa0, 0x82, 0x31];
        data.extend_from_slice(&[0u8; 12]);
        data.extend_from_slice(owner.as_slice());
        let out = self.call(token, data.into()).await?;
        if out.is_empty() {
            // No contract at that address on this node (a registry token a local chain
            // lacks): it holds nothing.
            return Ok(U256::ZERO);
        }
        if out.len() < 32 {
            return Err(malformed(
                "eth_call",
                "balanceOf returned fewer than 32 bytes",
            ));
        }
        Ok(U256::from_be_slice(&out[..32]))
    }

    /// `eth_call` at the latest block.
    pub async fn call(&self, to: Address, data: Bytes) -> Result<Bytes, RpcError> {
        self.run(|p| {
            let req = TransactionRequest {
                to: Some(TxKind::Call(to)),
                input: data.clone().into(),
                ..Default::default()
            };
            // An explicit `latest`: a node's default may be its pending block (Anvil's is).
            async move {
                bounded(
                    "eth_call",
                    p.call(req)
                        .block(alloy::eips::BlockId::latest())
                        .into_future(),
                )
                .await
            }
        })
        .await
    }

    pub async fn code(&self, a: Address) -> Result<Bytes, RpcError> {
        self.run(|p| async move { bounded("eth_getCode", p.get_code_at(a).into_future()).await })
            .await
    }

    /// Nonce including pending transactions.
    pub async fn pending_nonce(&self, a: Address) -> Result<u64, RpcError> {
        self.nonce_at(a, BlockId::pending()).await
    }

    /// Nonce counting only mined transactions (the `latest` block).
    pub async fn latest_nonce(&self, a: Address) -> Result<u64, RpcError> {
        self.nonce_at(a, BlockId::latest()).await
    }

    /// `eth_getTransactionCount` of `a` at block `at`.
    async fn nonce_at(&self, a: Address, at: BlockId) -> Result<u64, RpcError> {
        self.run(|p| async move {
            bounded(
                "eth_getTransactionCount",
                p.get_transaction_count(a).block_id(at).into_future(),
            )
            .await
        })
        .await
    }

    /// Gas a call would use, simulated at the node's default block.
    pub async fn estimate_gas(&self, call: &CallRequest) -> Result<u64, RpcError> {
        self.estimate_gas_at(call, None).await
    }

    /// Gas a call would use, simulated against the `latest` (mined) block, whatever the
    /// node's default (Anvil simulates against its pending block, geth and most providers
    /// against `latest`): the payout sender checks the master wallet's funds at the same
    /// state (docs/decisions.md, Payouts).
    pub async fn estimate_gas_latest(&self, call: &CallRequest) -> Result<u64, RpcError> {
        self.estimate_gas_at(call, Some(BlockId::latest())).await
    }

    /// `eth_estimateGas` for a call, at `block` or, when `None`, with no block given (the
    /// node's default).
    async fn estimate_gas_at(
        &self,
        call: &CallRequest,
        block: Option<BlockId>,
    ) -> Result<u64, RpcError> {
        let CallRequest {
            from,
            to,
            value,
            data,
        } = call.clone();
        self.run(|p| {
            let req = TransactionRequest {
                from: Some(from),
                to: Some(TxKind::Call(to)),
                value: Some(value),
                input: data.clone().into(),
                ..Default::default()
            };
            async move {
                let call = p.estimate_gas(req);
                let call = match block {
                    Some(b) => call.block(b),
                    None => call,
                };
                bounded("eth_estimateGas", call.into_future()).await
            }
        })
        .await
    }

    /// (max_fee_per_gas, max_priority_fee_per_gas) from the node's fee history.
    pub async fn fees(&self) -> Result<(u128, u128), RpcError> {
        let f = self
            .run(|p| async move { bounded("eth_feeHistory", p.estimate_eip1559_fees()).await })
            .await?;
        Ok((f.max_fee_per_gas, f.max_priority_fee_per_gas))
    }

    /// Broadcasts a signed transaction. "already known" and "nonce too low" answers are
    /// reported as errors; the caller decides (a rebroadcast of a known tx is harmless).
    pub async fn send_raw(&self, raw: &[u8]) -> Result<B256, RpcError> {
        let pending =
            self.run(|p| async move {
                bounded("eth_sendRawTransaction", p.send_raw_transaction(raw)).await
            })
            .await?;
        Ok(*pending.tx_hash())
    }

    pub async fn receipt(&self, hash: B256) -> Result<Option<ReceiptInfo>, RpcError> {
        const M: &str = "eth_getTransactionReceipt";
        let v: Value = self
            .run(|p| async move { bounded(M, p.raw_request::<_, Value>(M.into(), (hash,))).await })
            .await?;
        receipt_info(&v)
    }

    /// The logs of a mined transaction's receipt; `None` while it is not mined.
    pub async fn receipt_logs(&self, hash: B256) -> Result<Option<Vec<LogInfo>>, RpcError> {
        const M: &str = "eth_getTransactionReceipt";
        let v: Value = self
            .run(|p| async move { bounded(M, p.raw_request::<_, Value>(M.into(), (hash,))).await })
            .await?;
        if v.is_null() || v["blockNumber"].is_null() {
            return Ok(None);
        }
        serde_json::from_value(v["logs"].clone())
            .map(Some)
            .map_err(|e| RpcError::Malformed {
                method: M,
                detail: format!("logs: {e}"),
            })
    }

    /// Receipts of `hashes` in one JSON-RPC batch request, in order (`None`: not mined).
    pub async fn receipts(&self, hashes: &[B256]) -> Result<Vec<Option<ReceiptInfo>>, RpcError> {
        const M: &str = "eth_getTransactionReceipt";
        if hashes.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<Value> = self
            .run(|p| async move {
                let fut = async {
                    let mut batch = alloy::rpc::client::BatchRequest::new(p.client());
                    let mut waiters = Vec::with_capacity(hashes.len());
                    for h in hashes {
                        waiters.push(batch.add_call::<_, Value>(M, &(h,))?);
                    }
                    batch.send().await?;
                    let mut out = Vec::with_capacity(waiters.len());
                    for w in waiters {
                        out.push(w.await?);
                    }
                    Ok::<_, alloy::transports::TransportError>(out)
                };
                bounded(M, fut).await
            })
            .await?;
        values.iter().map(receipt_info).collect()
    }

    /// Whether the node knows the transaction (pending or mined).
    pub async fn knows_tx(&self, hash: B256) -> Result<bool, RpcError> {
        const M: &str = "eth_getTransactionByHash";
        let v: Value = self
            .run(|p| async move { bounded(M, p.raw_request::<_, Value>(M.into(), (hash,))).await })
            .await?;
        Ok(!v.is_null())
    }
}

fn receipt_info(v: &Value) -> Result<Option<ReceiptInfo>, RpcError> {
    const M: &str = "eth_getTransactionReceipt";
    if v.is_null() || v["blockNumber"].is_null() {
        return Ok(None);
    }
    Ok(Some(ReceiptInfo {
        success: hex_u64(v, M, "status")? == 1,
        block_number: hex_u64(v, M, "blockNumber")?,
        block_hash: parse(v, M, "blockHash")?,
        gas_used: hex_u64(v, M, "gasUsed").unwrap_or(0),
    }))
}

/// `eth_getBlockByNumber` of every block `from..=to` (with its transactions when `full`)
/// in one batch request, read as `R`, in order; `None` for a block past the head.
async fn batch_blocks<R>(
    p: &RootProvider,
    from: u64,
    to: u64,
    full: bool,
) -> Result<Vec<Option<BlockInfo>>, alloy::transports::TransportError>
where
    R: serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + Unpin + 'static,
    BlockInfo: From<R>,
{
    let mut batch = alloy::rpc::client::BatchRequest::new(p.client());
    let mut waiters = Vec::with_capacity((to + 1 - from) as usize);
    for n in from..=to {
        waiters.push(batch.add_call::<_, Option<R>>("eth_getBlockByNumber", &(qty(n), full))?);
    }
    batch.send().await?;
    let mut out = Vec::with_capacity(waiters.len());
    for w in waiters {
        out.push(w.await?.map(BlockInfo::from));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_call_shows_no_part_of_the_node_url_but_its_host() {
        // Nothing listens on port 1.
        let rpc = EvmRpc::new("http://user:pw@127.0.0.1:1/v3/SECRETKEY").unwrap();
        let e = rpc.chain_id().await.unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(
            matches!(e, RpcError::Transport { refused: false, .. }),
            "{shown}"
        );
        for secret in ["SECRETKEY", "pw"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
}
