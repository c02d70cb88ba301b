//! The world outside the appliance in a simulation: one simulated EVM chain per live chain
//! (the node the appliance's chain worker talks to) and what goes wrong with it.
//!
//! The chains are [`SimChain`]s held by the harness, not by the appliance's store: a crash of
//! the appliance leaves them as they are, as a real chain is. The appliance reaches each one
//! through a [`FaultyClient`] (the chain seam, [`ChainClient`]) that the harness can make fail,
//! lag, change under a worker between two of its calls, or stop the process at a call (a
//! crash between a send's store write and its broadcast, say).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use appliance_chains::evm::{Address, Bytes, B256, U256};

use appliance_chains::client::{
    AssetRef, BlockRef, CallRequest, ChainClient, ClientError, Fees, RangeScan, Receipt, WatchSet,
};
use appliance_chains::sim::{Genesis, Inject, Op, SimChain, SimClient};
use appliance_storage::sources;

use super::rng;

/// Blocks a world chain holds below its head: the watcher remembers 256, the deepest reorg
/// a run makes is 80.
const RETAIN_BLOCKS: u64 = 512;

/// What a chain's node does wrong now (the harness sets it; [`FaultyClient`] applies it).
#[derive(Debug, Clone, Default)]
pub struct NodeFaults {
    /// Each call fails (`Unavailable`) with this chance, in parts per thousand.
    pub error_permille: u32,
    /// The node serves a view this many blocks behind its head.
    pub lag: u64,
    /// Before answering a call, the chain mines a block (with this chance, ‰).
    pub interleave_mine_permille: u32,
    /// Before answering a call, the chain reorganises (with this chance, ‰).
    pub interleave_reorg_permille: u32,
    /// Deepest reorg an interleaved change makes.
    pub interleave_reorg_depth: u64,
    /// A call stops the appliance (a crash at that point of a worker step), with this
    /// chance (‰): the store is halted and the call fails.
    pub crash_permille: u32,
    /// A read is answered from the chain as it was before its last reorg (a node of a pool
    /// behind a load balancer that has not seen the reorg), with this chance (‰).
    pub stale_permille: u32,
}

/// One simulated chain of the world.
pub struct WorldChain {
    pub id: &'static str,
    /// The chain itself (shared with the client the appliance holds).
    pub sim: SimClient,
    pub faults: Arc<Mutex<NodeFaults>>,
    /// Token contracts by asset symbol.
    pub tokens: BTreeMap<String, Address>,
    pub native_symbol: String,
    /// Chain events the world made (for the failure trace).
    pub log: Arc<Mutex<Vec<String>>>,
    /// The chain as it was before its last reorg: what a stale node serves.
    pub stale: Arc<Mutex<Option<Arc<SimChain>>>>,
    /// Reads answered from the stale view so far.
    pub stale_served: Arc<std::sync::atomic::AtomicU64>,
}

/// Every simulated chain, by registry id.
pub struct World {
    pub chains: BTreeMap<&'static str, WorldChain>,
    /// Set by a [`FaultyClient`] call that crashed the appliance; the harness restarts it.
    pub crashed: Arc<AtomicBool>,
    /// The appliance's store, halted when a call crashes it.
    halt: Arc<Mutex<Option<appliance_storage::Store>>>,
}

impl World {
    pub fn new() -> World {
        World {
            chains: BTreeMap::new(),
            crashed: Arc::default(),
            halt: Arc::default(),
        }
    }

    /// Adds chain `id` from `genesis` (its treasury: the appliance's master wallet).
    pub fn add_chain(
        &mut self,
        id: &'static str,
        genesis: Genesis,
        tokens: BTreeMap<String, Address>,
        native_symbol: String,
    ) {
        let mut chain = SimChain::new(genesis);
        // Enough for the deepest reorg a run makes and the watcher's memory, no more: a
        // reorg keeps a copy of the chain as the stale view.
        chain.set_retain_blocks(RETAIN_BLOCKS);
        let sim = SimClient::new(chain);
        self.chains.insert(
            id,
            WorldChain {
                id,
                sim,
                faults: Arc::default(),
                tokens,
                native_symbol,
                log: Arc::default(),
                stale: Arc::default(),
                stale_served: Arc::default(),
            },
        );
    }

    /// The store a crash halts (the running appliance's).
    pub fn set_store(&self, store: Option<appliance_storage::Store>) {
        *self.halt.lock().expect("lock") = store;
    }

    /// The client the appliance's worker of chain `id` uses.
    pub fn client(&self, id: &str) -> Arc<dyn ChainClient> {
        let c = &self.chains[id];
        Arc::new(FaultyClient {
            chain: c.id,
            inner: c.sim.clone(),
            faults: c.faults.clone(),
            crashed: self.crashed.clone(),
            halt: self.halt.clone(),
            log: c.log.clone(),
            stale: c.stale.clone(),
            stale_served: c.stale_served.clone(),
        })
    }
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}

impl WorldChain {
    /// The simulated chain itself, locked.
    pub async fn state(&self) -> tokio::sync::MutexGuard<'_, SimChain> {
        self.sim.chain_state().lock().await
    }

    /// Mines one block with what the mempool holds, at the simulation's clock.
    pub async fn mine(&self, n: u64) {
        let now_ms = u64::try_from(sources::now_us() / 1000).unwrap_or(0);
        let mut c = self.state().await;
        c.mine(n, now_ms, 1_000);
        c.hold_from(None);
    }

    /// Replaces the last `depth` blocks (at most what the chain holds): their transactions are
    /// dropped or go back to the mempool. Returns the depth done (0: none).
    pub async fn reorg(&self, depth: u64, drop: bool) -> u64 {
        let now_ms = u64::try_from(sources::now_us() / 1000).unwrap_or(0);
        let mut c = self.state().await;
        reorg_locked(&mut c, depth, drop, now_ms, &self.stale)
    }

    /// Puts a payer's transfer into the mempool.
    pub async fn inject(&self, t: Inject) {
        self.state().await.inject_pending(t);
    }

    /// Drops one pending transaction (the `pick`-th, wrapping); its hash, if any.
    pub async fn drop_pending(&self, pick: u64) -> Option<B256> {
        let mut c = self.state().await;
        let p = c.pending();
        if p.is_empty() {
            return None;
        }
        let h = p[(pick % p.len() as u64) as usize];
        c.drop_pending(h).then_some(h)
    }

    pub async fn head(&self) -> u64 {
        self.state().await.head()
    }
}

/// A reorg of `c` (at most what it holds); the chain before it is kept as the stale view.
fn reorg_locked(
    c: &mut SimChain,
    depth: u64,
    drop: bool,
    now_ms: u64,
    stale: &Mutex<Option<Arc<SimChain>>>,
) -> u64 {
    let depth = depth.min(c.reorg_depth_held());
    if depth == 0 {
        return 0;
    }
    *stale.lock().expect("lock") = Some(Arc::new(c.clone()));
    match c.apply(&Op::Reorg {
        depth,
        drop,
        t_ms: now_ms,
    }) {
        Ok(()) => depth,
        Err(_) => 0,
    }
}

/// The chain seam over a world chain, with the node's faults applied to every call.
pub struct FaultyClient {
    chain: &'static str,
    inner: SimClient,
    faults: Arc<Mutex<NodeFaults>>,
    crashed: Arc<AtomicBool>,
    halt: Arc<Mutex<Option<appliance_storage::Store>>>,
    log: Arc<Mutex<Vec<String>>>,
    stale: Arc<Mutex<Option<Arc<SimChain>>>>,
    stale_served: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for FaultyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyClient")
            .field("chain", &self.chain)
            .finish_non_exhaustive()
    }
}

impl FaultyClient {
    /// Applies the faults before a call: maybe a crash, maybe a change of the chain, maybe a
    /// failure. `Err` when the call must fail.
    async fn before(&self, method: &'static str) -> Result<NodeFaults, ClientError> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(ClientError::Unavailable {
                detail: "the process is stopping".into(),
            });
        }
        let f = self.faults.lock().expect("lock").clone();
        if f.crash_permille > 0 && rng::below(1000) < u64::from(f.crash_permille) {
            self.crashed.store(true, Ordering::SeqCst);
            if let Some(s) = self.halt.lock().expect("lock").as_ref() {
                s.halt();
            }
            self.note(format!("crash at {method}"));
            return Err(ClientError::Unavailable {
                detail: "the process is stopping".into(),
            });
        }
        if f.interleave_mine_permille > 0
            && rng::below(1000) < u64::from(f.interleave_mine_permille)
        {
            let now_ms = u64::try_from(sources::now_us() / 1000).unwrap_or(0);
            let mut c = self.inner.chain_state().lock().await;
            c.mine(1, now_ms, 1_000);
            let head = c.head();
            drop(c);
            self.note(format!("block {head} mined before {method}"));
        }
        if f.interleave_reorg_permille > 0
            && rng::below(1000) < u64::from(f.interleave_reorg_permille)
        {
            let depth = 1 + rng::below(f.interleave_reorg_depth.max(1));
            let dropped = rng::below(2) == 0;
            let now_ms = u64::try_from(sources::now_us() / 1000).unwrap_or(0);
            let mut c = self.inner.chain_state().lock().await;
            let done = reorg_locked(&mut c, depth, dropped, now_ms, &self.stale);
            let head = c.head();
            drop(c);
            if done > 0 {
                self.note(format!(
                    "reorg of {done} at head {head} (drop {dropped}) before {method}"
                ));
            }
        }
        if f.error_permille > 0 && rng::below(1000) < u64::from(f.error_permille) {
            return Err(ClientError::Unavailable {
                detail: format!("simulated node error on {method}"),
            });
        }
        Ok(f)
    }

    fn note(&self, s: String) {
        self.log.lock().expect("lock").push(s);
    }

    /// Runs a read on the chain this call is answered from: the stale view (with
    /// `f.stale_permille`, when there is one) or the chain itself, lagging by `f.lag`
    /// (`g` gets the view and the head it serves).
    async fn read<R>(&self, f: &NodeFaults, g: impl FnOnce(&SimChain, u64) -> R) -> R {
        if f.stale_permille > 0 && rng::below(1000) < u64::from(f.stale_permille) {
            let stale = self.stale.lock().expect("lock").clone();
            if let Some(old) = stale {
                self.stale_served.fetch_add(1, Ordering::SeqCst);
                let head = old.head().saturating_sub(f.lag);
                return g(&old, head);
            }
        }
        let c = self.inner.chain_state().lock().await;
        let head = c.head().saturating_sub(f.lag);
        g(&c, head)
    }
}

#[async_trait::async_trait]
impl ChainClient for FaultyClient {
    fn chain(&self) -> &str {
        self.chain
    }

    async fn head(&self) -> Result<u64, ClientError> {
        let f = self.before("eth_blockNumber").await?;
        Ok(self.read(&f, |_, head| head).await)
    }

    async fn block(&self, n: u64) -> Result<Option<BlockRef>, ClientError> {
        let f = self.before("eth_getBlockByNumber").await?;
        Ok(self
            .read(&f, |c, head| if n > head { None } else { c.block(n) })
            .await)
    }

    async fn transfers(
        &self,
        from: u64,
        to: u64,
        watch: &WatchSet,
    ) -> Result<RangeScan, ClientError> {
        let f = self.before("eth_getLogs").await?;
        self.read(&f, |c, head| {
            if to > head {
                return Err(ClientError::Moving("the range reaches past the head"));
            }
            c.transfers(from, to, watch)
                .map_err(|e| ClientError::Refused {
                    method: "eth_getLogs",
                    detail: e.to_string(),
                })
        })
        .await
    }

    async fn balance(&self, owner: Address, asset: AssetRef) -> Result<U256, ClientError> {
        let f = self.before("eth_getBalance").await?;
        let token = match asset {
            AssetRef::Native => None,
            AssetRef::Token(t) => Some(t),
        };
        Ok(self.read(&f, |c, _| c.balance(owner, token)).await)
    }

    async fn nonce(&self, a: Address, pending: bool) -> Result<u64, ClientError> {
        let f = self.before("eth_getTransactionCount").await?;
        Ok(self.read(&f, |c, _| c.nonce(a, pending)).await)
    }

    async fn fees(&self) -> Result<Fees, ClientError> {
        self.before("eth_feeHistory").await?;
        self.inner.fees().await
    }

    async fn estimate_gas(&self, call: &CallRequest) -> Result<u64, ClientError> {
        self.before("eth_estimateGas").await?;
        self.inner.estimate_gas(call).await
    }

    async fn call(&self, to: Address, data: Bytes) -> Result<Bytes, ClientError> {
        self.before("eth_call").await?;
        self.inner.call(to, data).await
    }

    async fn code(&self, a: Address) -> Result<Bytes, ClientError> {
        self.before("eth_getCode").await?;
        self.inner.code(a).await
    }

    async fn broadcast(&self, raw: &[u8]) -> Result<B256, ClientError> {
        self.before("eth_sendRawTransaction").await?;
        self.inner.broadcast(raw).await
    }

    async fn broadcast_signed_by(&self, raw: &[u8], sender: Address) -> Result<B256, ClientError> {
        self.before("eth_sendRawTransaction").await?;
        self.inner.broadcast_signed_by(raw, sender).await
    }

    async fn receipt(&self, hash: B256) -> Result<Option<Receipt>, ClientError> {
        let f = self.before("eth_getTransactionReceipt").await?;
        Ok(self
            .read(&f, |c, head| {
                c.receipt(hash).filter(|r| r.block_number <= head)
            })
            .await)
    }

    async fn knows_tx(&self, hash: B256) -> Result<bool, ClientError> {
        let f = self.before("eth_getTransactionByHash").await?;
        Ok(self.read(&f, |c, _| c.knows_tx(hash)).await)
    }
}
