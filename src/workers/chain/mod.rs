//! The chain worker: ONE worker over the chain seam
//! ([`appliance_chains::client::ChainClient`]) that runs per (client, scope). For a live
//! chain the client is an [`EvmClient`] and the scope every live project; for test mode a
//! project's simulated chain and that one project ([`WorkScope`], DECISIONS.md section 15).
//!
//! * [`watcher`]: follows blocks, records, confirms and unwinds deposits.
//! * [`sender`]: the saga runner of payouts, sweeps and the factory deployment.
//! * [`convert`]: the chain steps of conversion batches (approve, swap), as send sagas.
//! * [`reconcile`]: each sender pass first reconciles the master wallet's stored
//!   transactions with the chain (reorgs, dropped sends, nonce gaps).
//! * [`store`]: their durable state in the store, under the worker's state key.
//!
//! The rules (what a deposit, payout or sweep does) are in `services`; this module only
//! decides when, from what the client reports.

pub mod convert;
pub mod reconcile;
pub mod send;
pub mod sender;
pub mod store;
pub mod waiting;
pub mod watcher;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use uuid::Uuid;

use appliance_chains::client::ChainClient;
use appliance_chains::evm::client::EvmClient;
use appliance_chains::evm::rpc::EvmRpc;
use appliance_chains::evm::{factory, Address, B256};
use appliance_signer::Signer;
use appliance_storage::records::{Mode, Project};
use appliance_storage::{ReadOps, WriteCtx, WriteError};

use crate::handles::Handles;
use crate::registry::Registry;
use crate::services::chains::AdapterHealth;
use crate::services::error::Fault;
use crate::services::Scope;

/// Longest back-off after node errors.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Which projects' resources one worker handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkScope {
    /// Every live project (a live chain's one client).
    Live,
    /// One test project (one of its simulated chains, DECISIONS.md section 15).
    Project(Uuid),
}

impl WorkScope {
    /// Whether this worker handles `p`'s resources.
    pub fn admits(&self, p: &Project) -> bool {
        match self {
            WorkScope::Live => p.mode == Mode::Live,
            WorkScope::Project(id) => p.id == *id,
        }
    }

    /// Whether this worker handles resources of project id `p` (without reading it: a
    /// live worker answers `true` and checks the row's mode with [`WorkScope::admits`]).
    pub fn may_admit(&self, p: Uuid) -> bool {
        match self {
            WorkScope::Live => true,
            WorkScope::Project(id) => p == *id,
        }
    }

    /// The key of the worker's own state in the chain-state tables (watcher position,
    /// outgoing transactions, nonces): the chain id for the live scope, `chain/project`
    /// for a test project's chain (its own heights and nonces).
    pub fn state_key(&self, chain: &str) -> String {
        match self {
            WorkScope::Live => chain.to_string(),
            WorkScope::Project(p) => format!("{chain}/{p}"),
        }
    }

    /// The `mode` label of the chain metrics.
    pub fn mode(&self) -> &'static str {
        match self {
            WorkScope::Live => "live",
            WorkScope::Project(_) => "test",
        }
    }
}

/// One chain worker's settings: the client, the scope and the chain's rules.
#[derive(Clone)]
pub struct ChainWorker {
    pub client: Arc<dyn ChainClient>,
    /// Registry id of the chain.
    pub chain: &'static str,
    pub scope: WorkScope,
    /// Key of the worker's rows in the chain-state tables ([`WorkScope::state_key`]).
    pub key: Arc<str>,
    /// EIP-155 chain id the sender signs for.
    pub chain_id: u64,
    pub poll: Duration,
    /// A transaction unmined this long is replaced with the same nonce and higher fees.
    pub replace_after_ms: u64,
    /// Block the watcher starts from on its first run (default: the head then).
    pub start_block: Option<u64>,
    /// Automatic sweeps of stablecoins below this value wait (explicit requests do not).
    pub sweep_threshold_usd_cents: u64,
    pub required_confirmations: u32,
    /// Token contract -> asset symbol.
    pub tokens: Vec<(Address, String)>,
    pub native_symbol: String,
    /// The sender's followed rows as its last reconciliation pass decoded them.
    pub(super) rows: Arc<reconcile::RowMemo>,
}

impl ChainWorker {
    /// A worker of registry chain `chain` through `client` for `scope`, with the registry's
    /// confirmations and assets and default timings (callers adjust the public fields).
    pub fn new(
        reg: &Registry,
        chain: &str,
        client: Arc<dyn ChainClient>,
        scope: WorkScope,
    ) -> anyhow::Result<ChainWorker> {
        let c = reg
            .chain(chain)
            .ok_or_else(|| anyhow!("unknown chain {chain}"))?;
        let mut tokens = Vec::new();
        for a in c.assets.iter().filter(|a| !a.is_native) {
            match a.contract.parse::<Address>() {
                Ok(addr) => tokens.push((addr, a.symbol.clone())),
                Err(_) => tracing::warn!(chain, asset = %a.symbol, "bad token contract"),
            }
        }
        Ok(ChainWorker {
            client,
            chain: c.id(),
            scope,
            key: scope.state_key(c.id()).into(),
            chain_id: c.info.chain_id,
            poll: Duration::from_millis(1000),
            replace_after_ms: 120_000,
            start_block: None,
            sweep_threshold_usd_cents: 0,
            required_confirmations: c.required_confirmations.max(1),
            tokens,
            native_symbol: c.info.native.symbol.to_string(),
            rows: Default::default(),
        })
    }

    /// Whether health reports of this worker are the chain's (live scope only).
    fn reports_health(&self) -> bool {
        self.scope == WorkScope::Live
    }
}

/// What the sender needs besides the chain: the master key and the factory.
#[derive(Clone)]
pub struct Master {
    pub signer: Arc<Signer>,
    pub treasury: Address,
    pub factory: Address,
}

impl Master {
    /// The master wallet of `signer` and its forwarder factory.
    pub fn of(signer: Arc<Signer>) -> Master {
        let treasury = signer.evm_master_address();
        Master {
            signer,
            treasury,
            factory: factory::address_of(&treasury),
        }
    }
}

/// Builds the live chains' clients from config, checks every node's chain id (a mismatch
/// refuses the start; an unreachable node is checked again by its watcher) and spawns one
/// worker per chain over every live project.
pub async fn start(state: &Handles, signer: Arc<Signer>) -> anyhow::Result<()> {
    let reg = state.registry.clone();
    let master = Master::of(signer);
    let mut workers = Vec::new();
    for (id, cc) in &state.config.chains {
        let chain = reg
            .chain(id)
            .ok_or_else(|| anyhow!("[chains.{id}]: unknown chain"))?;
        if !chain.is_evm() {
            anyhow::bail!("[chains.{id}]: no live adapter for this chain family yet");
        }
        let urls = cc.urls();
        let shown = urls
            .iter()
            .map(|u| appliance_chains::redact::redact_url(u))
            .collect::<Vec<_>>()
            .join(", ");
        let rpc = EvmRpc::with_urls(id, &urls)
            .map_err(|e| anyhow!("[chains.{id}] rpc_url {shown}: {}", clean(&e)))?
            .expect_chain_id(chain.info.chain_id);
        // Every node must serve this chain: a node of another chain refuses the start; an
        // unreachable one is checked before it is first used (DECISIONS.md section 16).
        for (node, r) in rpc.chain_ids().await {
            match r {
                Ok(n) if n != chain.info.chain_id => anyhow::bail!(
                    "[chains.{id}]: the node at {node} reports chain id {n}, expected {}",
                    chain.info.chain_id
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(chain = id, node = %node, error = %clean(&e), "node unreachable at start")
                }
            }
        }
        let client: Arc<dyn ChainClient> = Arc::new(EvmClient::new(chain.id(), rpc));
        chain.set_client(client.clone());
        let mut w = ChainWorker::new(&reg, id, client, WorkScope::Live)?;
        w.poll = Duration::from_millis(cc.poll_interval_ms.max(50));
        w.replace_after_ms = cc.replace_after_ms;
        w.start_block = cc.start_block;
        w.sweep_threshold_usd_cents = cc.sweep_threshold_usd_cents.unwrap_or(0);
        workers.push(w);
    }
    for w in workers {
        spawn(state, w, master.clone());
    }
    Ok(())
}

/// Runs one worker (its watcher and its sender) until the process ends.
pub fn spawn(state: &Handles, w: ChainWorker, master: Master) {
    tokio::spawn(watcher::watch_loop(state.clone(), w.clone()));
    tokio::spawn(sender::send_loop(state.clone(), w, master));
}

pub(crate) async fn write<T, F>(state: &Handles, f: F) -> anyhow::Result<T>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, Fault> + Send + 'static,
    T: Send + 'static,
{
    state.store.write(f).await.map_err(|e| match e {
        WriteError::Rejected(f) => anyhow!("store: {f}"),
        WriteError::Store(s) => anyhow!("store: {s}"),
    })
}

/// The projects of a worker's scope seen by one transaction, as service scopes.
pub(crate) struct Scopes {
    reg: Arc<Registry>,
    scope: WorkScope,
    /// `WebhooksConfig::max_attempts` of the running appliance.
    attempts: u32,
    cache: BTreeMap<Uuid, Option<Scope>>,
}

impl Scopes {
    pub(crate) fn new(reg: Arc<Registry>, scope: WorkScope, attempts: u32) -> Self {
        Scopes {
            reg,
            scope,
            attempts,
            cache: BTreeMap::new(),
        }
    }

    /// The service scope of `project` when the worker's scope admits it.
    pub(crate) fn of(&mut self, ctx: &impl ReadOps, project: Uuid) -> Result<Option<Scope>, Fault> {
        if let Some(s) = self.cache.get(&project) {
            return Ok(s.clone());
        }
        let s = if self.scope.may_admit(project) {
            ctx.get::<Project>(project)?
                .filter(|p| self.scope.admits(p))
                .map(|p| Scope {
                    reg: self.reg.clone(),
                    project: Arc::new(p),
                    delivery_attempts: self.attempts,
                })
        } else {
            None
        };
        self.cache.insert(project, s.clone());
        Ok(s)
    }
}

pub(crate) fn hex32(h: &B256) -> String {
    format!("{h:#x}")
}

/// An error as one line for logs and answers, every URL in it cut to scheme and host
/// (node URLs carry account keys).
pub use appliance_chains::redact::clean_error as clean;

/// `status_note` for a failing node: one plain sentence, never an error chain; the
/// error itself goes to the WARN log through [`clean`].
pub(crate) fn note(e: &anyhow::Error) -> String {
    if let Some(m) = e.chain().find_map(|c| c.downcast_ref::<ChainIdMismatch>()) {
        return format!(
            "The node reports chain id {}, expected {}; check rpc_url.",
            m.got, m.expected
        );
    }
    "Node calls are failing; retrying with back-off.".into()
}

/// The node answered `eth_chainId` with another chain.
#[derive(Debug, thiserror::Error)]
#[error("the node reports chain id {got}, expected {expected}")]
pub(crate) struct ChainIdMismatch {
    pub got: u64,
    pub expected: u64,
}

/// Records the live adapter's health of `chain` in the state's registry (shown as the
/// chain's status in `GET /v1/chains`); a test project's worker reports nothing.
pub(crate) fn set_health(state: &Handles, w: &ChainWorker, h: AdapterHealth) {
    if !w.reports_health() {
        return;
    }
    if let Some(c) = state.registry.chain(w.chain) {
        c.set_health(h);
    }
}
