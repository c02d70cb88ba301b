//! [`SimClient`]: the chain seam ([`ChainClient`]) over one shared [`SimChain`].

use std::sync::Arc;

use alloy::primitives::{Address, Bytes, B256, U256};
use tokio::sync::Mutex;

use super::chain::{SimChain, SimError};
use crate::client::{
    AssetRef, CallRequest, ChainClient, ClientError, Fees, RangeScan, Receipt, WatchSet,
};

/// A simulated chain as a [`ChainClient`]. Cloning shares the chain. Broadcasts go to the
/// mempool; blocks are produced by whoever owns the chain's durability (the binary's test
/// mode), through [`SimClient::chain_state`].
#[derive(Debug, Clone)]
pub struct SimClient {
    chain: String,
    inner: Arc<Mutex<SimChain>>,
}

impl SimClient {
    /// A client over `chain` (its genesis names the registry chain).
    pub fn new(chain: SimChain) -> SimClient {
        SimClient {
            chain: chain.genesis().chain.clone(),
            inner: Arc::new(Mutex::new(chain)),
        }
    }

    /// The shared chain, for producing blocks and scripted faults (lock it; hold the lock
    /// across the write that makes a change durable so changes apply in log order).
    pub fn chain_state(&self) -> &Arc<Mutex<SimChain>> {
        &self.inner
    }
}

fn refused(method: &'static str, e: SimError) -> ClientError {
    match e {
        SimError::Rejected(d) | SimError::Invalid(d) => ClientError::Refused { method, detail: d },
        SimError::Reverted(_) => ClientError::Refused {
            method,
            detail: e.to_string(),
        },
        SimError::Replay(d) => ClientError::Malformed { method, detail: d },
    }
}

#[async_trait::async_trait]
impl ChainClient for SimClient {
    fn chain(&self) -> &str {
        &self.chain
    }

    async fn head(&self) -> Result<u64, ClientError> {
        Ok(self.inner.lock().await.head())
    }

    async fn block(&self, n: u64) -> Result<Option<crate::client::BlockRef>, ClientError> {
        Ok(self.inner.lock().await.block(n))
    }

    async fn transfers(
        &self,
        from: u64,
        to: u64,
        watch: &WatchSet,
    ) -> Result<RangeScan, ClientError> {
        let c = self.inner.lock().await;
        if to > c.head() {
            // The head moved back (a reorg) between the caller's head() and this read.
            return Err(ClientError::Moving("the range reaches past the head"));
        }
        c.transfers(from, to, watch)
            .map_err(|e| refused("eth_getLogs", e))
    }

    async fn balance(&self, owner: Address, asset: AssetRef) -> Result<U256, ClientError> {
        let token = match asset {
            AssetRef::Native => None,
            AssetRef::Token(t) => Some(t),
        };
        Ok(self.inner.lock().await.balance(owner, token))
    }

    async fn nonce(&self, a: Address, pending: bool) -> Result<u64, ClientError> {
        Ok(self.inner.lock().await.nonce(a, pending))
    }

    async fn fees(&self) -> Result<Fees, ClientError> {
        Ok(self.inner.lock().await.fees())
    }

    async fn estimate_gas(&self, call: &CallRequest) -> Result<u64, ClientError> {
        self.inner
            .lock()
            .await
            .estimate_gas(call)
            .map_err(|e| refused("eth_estimateGas", e))
    }

    async fn call(&self, to: Address, data: Bytes) -> Result<Bytes, ClientError> {
        self.inner
            .lock()
            .await
            .call(to, &data)
            .map_err(|e| refused("eth_call", e))
    }

    async fn code(&self, a: Address) -> Result<Bytes, ClientError> {
        Ok(self.inner.lock().await.code(a))
    }

    async fn broadcast(&self, raw: &[u8]) -> Result<B256, ClientError> {
        self.inner
            .lock()
            .await
            .submit(raw)
            .map_err(|e| refused("eth_sendRawTransaction", e))
    }

    async fn broadcast_signed_by(&self, raw: &[u8], sender: Address) -> Result<B256, ClientError> {
        self.inner
            .lock()
            .await
            .submit_vouched(raw, sender)
            .map_err(|e| refused("eth_sendRawTransaction", e))
    }

    async fn receipt(&self, hash: B256) -> Result<Option<Receipt>, ClientError> {
        Ok(self.inner.lock().await.receipt(hash))
    }

    async fn knows_tx(&self, hash: B256) -> Result<bool, ClientError> {
        Ok(self.inner.lock().await.knows_tx(hash))
    }
}
