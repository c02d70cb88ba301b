//! The live adapters' durable state: the watcher's position and the deposits of each
//! recent block, and the sender's outgoing transactions, pending list and next nonce.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use appliance_chains::evm::watcher::Cursor;
use appliance_chains::evm::Address;
use appliance_storage::{ReadOps, WriteCtx};

use crate::error::ApiError;

/// The watcher's durable state (`meta["evm_watch:<chain>"]`, JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WatchState {
    pub cursor: Cursor,
    /// Chain id verified against the node.
    #[serde(default)]
    pub chain_id_checked: bool,
}

pub(super) fn watch_key(chain: &str) -> String {
    format!("evm_watch:{chain}")
}

/// Deposits found in one block (`meta["evm_block:<chain>:<number>"]`, JSON ids), read back
/// when a reorg removes the block. Written only for blocks with deposits.
pub(super) fn block_key(chain: &str, n: u64) -> String {
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

pub(super) fn save_watch(
    ctx: &mut WriteCtx<'_>,
    chain: &str,
    w: &WatchState,
) -> Result<(), ApiError> {
    let bytes = serde_json::to_vec(w).map_err(|e| ApiError::internal(&e))?;
    ctx.meta_put(&watch_key(chain), &bytes)?;
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

pub(super) fn nonce_key(chain: &str) -> String {
    format!("evm_nonce:{chain}")
}
pub(super) fn pending_key(chain: &str) -> String {
    format!("evm_txs:{chain}")
}
pub(super) fn tx_key(chain: &str, nonce: u64) -> String {
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

pub(super) fn put_tx(ctx: &mut WriteCtx<'_>, chain: &str, tx: &OutTx) -> Result<(), ApiError> {
    let b = serde_json::to_vec(tx).map_err(|e| ApiError::internal(&e))?;
    ctx.meta_put(&tx_key(chain, tx.nonce), &b)?;
    Ok(())
}

pub(super) fn put_pending(
    ctx: &mut WriteCtx<'_>,
    chain: &str,
    list: &[u64],
) -> Result<(), ApiError> {
    let b = serde_json::to_vec(list).map_err(|e| ApiError::internal(&e))?;
    ctx.meta_put(&pending_key(chain), &b)?;
    Ok(())
}
