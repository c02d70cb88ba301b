//! [`EvmClient`]: the chain seam ([`crate::client::ChainClient`]) over one EVM node's
//! JSON-RPC ([`super::rpc::EvmRpc`]).

use alloy::primitives::{Address, Bytes, B256, U256};
use async_trait::async_trait;

use super::rpc::{EvmRpc, RpcError};
use std::sync::Arc;

use super::watcher::{self, ScanError, Tuning};
use crate::client::{
    AssetRef, BlockRef, CallRequest, ChainClient, ClientError, Fees, RangeScan, Receipt, WatchSet,
};

/// A live EVM chain reached through its nodes ([`EvmRpc`]: one, or several with failover).
#[derive(Debug, Clone)]
pub struct EvmClient {
    chain: String,
    rpc: EvmRpc,
    /// Request sizes of range scans, shared by clones (they shrink when a node refuses).
    tuning: Arc<Tuning>,
}

impl EvmClient {
    /// A client of chain `chain` (registry id) through `rpc`, with the default scan
    /// [`Tuning`].
    pub fn new(chain: impl Into<String>, rpc: EvmRpc) -> EvmClient {
        EvmClient::with_tuning(chain, rpc, Tuning::default())
    }

    /// A client with explicit scan request sizes (benchmarks, nodes with tight limits).
    pub fn with_tuning(chain: impl Into<String>, rpc: EvmRpc, tuning: Tuning) -> EvmClient {
        EvmClient {
            chain: chain.into(),
            rpc,
            tuning: Arc::new(tuning),
        }
    }

    /// The scan request sizes in use.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The node client underneath (chain-id checks, factory deployment).
    pub fn rpc(&self) -> &EvmRpc {
        &self.rpc
    }
}

impl From<RpcError> for ClientError {
    fn from(e: RpcError) -> ClientError {
        match e {
            RpcError::Transport {
                method,
                detail,
                refused: true,
            } => ClientError::Refused { method, detail },
            RpcError::Transport { detail, .. } => ClientError::Unavailable { detail },
            RpcError::Timeout(method) => ClientError::Unavailable {
                detail: format!("node call {method} timed out"),
            },
            RpcError::Malformed { method, detail } => ClientError::Malformed { method, detail },
            RpcError::BadUrl(u) => ClientError::Unavailable {
                detail: format!("invalid RPC URL {u:?}"),
            },
        }
    }
}

impl From<ScanError> for ClientError {
    fn from(e: ScanError) -> ClientError {
        match e {
            ScanError::Rpc(e) => e.into(),
            ScanError::Moving(why) => ClientError::Moving(why),
        }
    }
}

#[async_trait]
impl ChainClient for EvmClient {
    fn chain(&self) -> &str {
        &self.chain
    }

    async fn chain_id(&self) -> Result<Option<u64>, ClientError> {
        Ok(Some(self.rpc.chain_id().await?))
    }

    async fn head(&self) -> Result<u64, ClientError> {
        Ok(self.rpc.block_number().await?)
    }

    async fn block(&self, n: u64) -> Result<Option<BlockRef>, ClientError> {
        Ok(self.rpc.block(n, false).await?.as_ref().map(BlockRef::from))
    }

    async fn transfers(
        &self,
        from: u64,
        to: u64,
        watch: &WatchSet,
    ) -> Result<RangeScan, ClientError> {
        let (blocks, transfers) =
            watcher::scan_watched(&self.rpc, from, to, watch, &self.tuning).await?;
        Ok(RangeScan {
            blocks: blocks.iter().map(BlockRef::from).collect(),
            transfers,
        })
    }

    async fn token_transfers(
        &self,
        from: u64,
        to: u64,
        tokens: &[Address],
    ) -> Result<Option<RangeScan>, ClientError> {
        let (blocks, transfers) =
            watcher::scan_tokens(&self.rpc, from, to, tokens, &self.tuning).await?;
        Ok(Some(RangeScan {
            blocks: blocks.iter().map(BlockRef::from).collect(),
            transfers,
        }))
    }

    fn health_note(&self) -> Option<String> {
        self.rpc.note()
    }

    async fn balance(&self, owner: Address, asset: AssetRef) -> Result<U256, ClientError> {
        Ok(match asset {
            AssetRef::Native => self.rpc.balance(owner).await?,
            AssetRef::Token(t) => self.rpc.token_balance(t, owner).await?,
        })
    }

    async fn nonce(&self, a: Address, pending: bool) -> Result<u64, ClientError> {
        if pending {
            Ok(self.rpc.pending_nonce(a).await?)
        } else {
            Ok(self.rpc.latest_nonce(a).await?)
        }
    }

    async fn fees(&self) -> Result<Fees, ClientError> {
        let (max_fee_per_gas, max_priority_fee_per_gas) = self.rpc.fees().await?;
        Ok(Fees {
            max_fee_per_gas,
            max_priority_fee_per_gas,
        })
    }

    async fn estimate_gas(&self, c: &CallRequest) -> Result<u64, ClientError> {
        Ok(self.rpc.estimate_gas(c).await?)
    }

    async fn estimate_gas_latest(&self, c: &CallRequest) -> Result<u64, ClientError> {
        Ok(self.rpc.estimate_gas_latest(c).await?)
    }

    async fn call(&self, to: Address, data: Bytes) -> Result<Bytes, ClientError> {
        Ok(self.rpc.call(to, data).await?)
    }

    async fn code(&self, a: Address) -> Result<Bytes, ClientError> {
        Ok(self.rpc.code(a).await?)
    }

    async fn broadcast(&self, raw: &[u8]) -> Result<B256, ClientError> {
        let hash = alloy::primitives::keccak256(raw);
        match self.rpc.send_raw(raw).await {
            Ok(h) => Ok(h),
            // A node that already holds the transaction answers with an error; it is the
            // same transaction, so the broadcast succeeded.
            Err(RpcError::Transport {
                refused: true,
                detail,
                ..
            }) if detail.to_ascii_lowercase().contains("already known")
                || detail.to_ascii_lowercase().contains("already imported") =>
            {
                Ok(hash)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn receipt(&self, hash: B256) -> Result<Option<Receipt>, ClientError> {
        Ok(self.rpc.receipt(hash).await?.map(|r| Receipt {
            success: r.success,
            block_number: r.block_number,
            block_hash: r.block_hash,
            gas_used: r.gas_used,
        }))
    }

    async fn knows_tx(&self, hash: B256) -> Result<bool, ClientError> {
        Ok(self.rpc.knows_tx(hash).await?)
    }

    async fn receipt_logs(
        &self,
        hash: B256,
    ) -> Result<Option<Vec<crate::client::TxLog>>, ClientError> {
        Ok(self.rpc.receipt_logs(hash).await?.map(|logs| {
            logs.into_iter()
                .map(|l| crate::client::TxLog {
                    address: l.address,
                    topics: l.topics,
                    data: l.data,
                })
                .collect()
        }))
    }
}
