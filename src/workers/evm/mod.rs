//! Live EVM chains (issue 4): one watcher and one sender task per `[chains.<id>]` table.
//!
//! * [`watcher`]: follows blocks, records, confirms and unwinds deposits.
//! * [`sender`]: the saga runner of payouts, sweeps and the factory deployment.
//! * [`store`]: their durable state in the store.
//!
//! The chain side (node client, scanning, transaction building, factory deployment) is in
//! `appliance_chains::evm`; the rules (what a deposit, payout or sweep does) in `services`.

pub mod sender;
pub mod store;
pub mod watcher;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use uuid::Uuid;

use appliance_chains::evm::rpc::EvmRpc;
use appliance_chains::evm::{factory, Address, B256};
use appliance_signer::Signer;
use appliance_storage::records::{Mode, Project};
use appliance_storage::{ReadOps, WriteCtx, WriteError};

use crate::config::ChainConfig;
use crate::registry::Registry;
use crate::services::chains::AdapterHealth;
use crate::services::error::Fault;
use crate::services::Scope;
use crate::state::AppState;

/// Most blocks one watcher batch covers (one `eth_getLogs` for all of them).
pub const MAX_RANGE: u64 = 50;
/// Longest back-off after node errors.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

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

/// Builds the live chains from config, checks every node's chain id (a mismatch refuses
/// the start; an unreachable node is checked again by its watcher) and spawns the tasks.
pub async fn start(state: &AppState, signer: Arc<Signer>) -> anyhow::Result<()> {
    let reg = state.registry.clone();
    let treasury = signer.evm_master_address();
    let factory = factory::address_of(&treasury);
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
        // unreachable one is checked again before it is first used.
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
        let mut tokens = Vec::new();
        for a in chain.assets.iter().filter(|a| !a.is_native) {
            match a.contract.parse::<Address>() {
                Ok(addr) => tokens.push((addr, a.symbol.clone())),
                Err(_) => tracing::warn!(chain = id, asset = %a.symbol, "bad token contract"),
            }
        }
        chain.set_rpc(rpc.clone());
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
    for c in chains {
        tokio::spawn(watcher::watch_loop(state.clone(), c.clone()));
        tokio::spawn(sender::send_loop(state.clone(), c, master.clone()));
    }
    Ok(())
}

pub(crate) async fn write<T, F>(state: &AppState, f: F) -> anyhow::Result<T>
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
pub(crate) struct Scopes {
    reg: Arc<Registry>,
    /// `WebhooksConfig::max_attempts` of the running appliance.
    attempts: u32,
    cache: BTreeMap<Uuid, Option<Scope>>,
}

impl Scopes {
    pub(crate) fn new(reg: Arc<Registry>, attempts: u32) -> Self {
        Scopes {
            reg,
            attempts,
            cache: BTreeMap::new(),
        }
    }

    pub(crate) fn live(
        &mut self,
        ctx: &impl ReadOps,
        project: Uuid,
    ) -> Result<Option<Scope>, Fault> {
        if let Some(s) = self.cache.get(&project) {
            return Ok(s.clone());
        }
        let s = ctx
            .get::<Project>(project)?
            .filter(|p| p.mode == Mode::Live)
            .map(|p| Scope {
                reg: self.reg.clone(),
                project: Arc::new(p),
                delivery_attempts: self.attempts,
            });
        self.cache.insert(project, s.clone());
        Ok(s)
    }
}

pub(crate) fn hex32(h: &B256) -> String {
    format!("{h:#x}")
}

/// An error as one line for logs and answers, every URL in it cut to scheme and host
/// (node URLs carry account keys: issue 10 point 2).
pub fn clean(e: &dyn std::fmt::Display) -> String {
    appliance_chains::redact::scrub_urls(&format!("{e:#}"))
}

/// `status_note` for a failing node: one plain sentence, never an error chain (issue 10
/// point 7); the error itself goes to the WARN log through [`clean`].
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
/// chain's status in `GET /v1/chains`).
pub(crate) fn set_health(state: &AppState, chain: &str, h: AdapterHealth) {
    if let Some(c) = state.registry.chain(chain) {
        c.set_health(h);
    }
}
