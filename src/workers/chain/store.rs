//! The live adapters' durable state, kept in their tables of the store
//! (`appliance_storage::schema`: `evm_watch`, `evm_block_deposits`, `evm_out_txs`,
//! `evm_pending`, `evm_nonces`): the watcher's position and the deposits of each recent
//! block, and the sender's outgoing transactions, pending set and next nonce. This module
//! owns the JSON shapes of the watcher state and of an outgoing transaction.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use appliance_chains::evm::watcher::Cursor;
use appliance_chains::evm::Address;
use appliance_storage::{ChainStateOps, StoreError, WriteCtx};

use crate::services::error::Fault;

/// The watcher's durable state (table `evm_watch`, JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WatchState {
    pub cursor: Cursor,
    /// Chain id verified against the node.
    #[serde(default)]
    pub chain_id_checked: bool,
}

/// The watcher's stored state of `chain` (the default before its first batch; a value
/// that does not parse reads as the default too).
pub fn load_watch(r: &impl ChainStateOps, chain: &str) -> Result<WatchState, StoreError> {
    Ok(r.evm_watch(chain)?
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default())
}

pub(super) fn save_watch(ctx: &mut WriteCtx<'_>, chain: &str, w: &WatchState) -> Result<(), Fault> {
    let bytes = serde_json::to_vec(w).map_err(Fault::invariant)?;
    ctx.evm_watch_put(chain, &bytes)?;
    Ok(())
}

/// What an outgoing transaction is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutKind {
    Payout,
    Sweep,
    Factory,
}

/// An outgoing transaction of the master wallet, recorded before its first broadcast
/// (table `evm_out_txs`, JSON).
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

/// Next nonce the store will hand out (0 when never used).
pub fn stored_nonce(r: &impl ChainStateOps, chain: &str) -> Result<u64, StoreError> {
    r.evm_next_nonce(chain)
}

/// Nonces of the transactions not yet final, ascending.
pub fn pending_nonces(r: &impl ChainStateOps, chain: &str) -> Result<Vec<u64>, StoreError> {
    r.evm_pending(chain)
}

/// A recorded outgoing transaction (`None` when absent or unreadable).
pub fn out_tx(
    r: &impl ChainStateOps,
    chain: &str,
    nonce: u64,
) -> Result<Option<OutTx>, StoreError> {
    Ok(r.evm_out_tx(chain, nonce)?
        .and_then(|b| serde_json::from_slice(&b).ok()))
}

pub(super) fn put_tx(ctx: &mut WriteCtx<'_>, chain: &str, tx: &OutTx) -> Result<(), Fault> {
    let b = serde_json::to_vec(tx).map_err(Fault::invariant)?;
    ctx.evm_out_tx_put(chain, tx.nonce, &b)?;
    Ok(())
}
