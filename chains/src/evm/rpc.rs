//! A bounded JSON-RPC client for one EVM node.

use std::future::IntoFuture;
use std::time::Duration;

use alloy::primitives::{Address, Bytes, TxKind, B256, U256};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::types::{Filter, TransactionRequest};
use serde_json::Value;

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
        /// ([`crate::redact::scrub_urls`]; node URLs carry account keys: issue 10 point 2).
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

/// A native-coin transfer made by a top-level transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeTx {
    pub hash: B256,
    pub from: Address,
    pub to: Address,
    pub value: U256,
}

/// One block's header fields and (optionally) its value-carrying transactions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockInfo {
    pub number: u64,
    pub hash: B256,
    pub parent_hash: B256,
    /// Unix seconds.
    pub timestamp: u64,
    pub native: Vec<NativeTx>,
}

/// A transaction receipt reduced to what the sender needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiptInfo {
    pub success: bool,
    pub block_number: u64,
    pub block_hash: B256,
    pub gas_used: u64,
}

/// Client of one node.
#[derive(Clone)]
pub struct EvmRpc {
    p: RootProvider,
    url: String,
}

impl std::fmt::Debug for EvmRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvmRpc")
            .field("url", &crate::redact::redact_url(&self.url))
            .finish()
    }
}

async fn bounded<T, E>(
    method: &'static str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, RpcError>
where
    E: Into<alloy::transports::TransportError>,
{
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            let e: alloy::transports::TransportError = e.into();
            Err(RpcError::Transport {
                method,
                refused: e.as_error_resp().is_some(),
                detail: crate::redact::scrub_urls(&error_chain(&e)),
            })
        }
        Err(_) => Err(RpcError::Timeout(method)),
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

impl EvmRpc {
    /// A client of the node at `url` (`http://` or `https://`).
    pub fn new(url: &str) -> Result<EvmRpc, RpcError> {
        let u = url
            .parse()
            .map_err(|_| RpcError::BadUrl(crate::redact::redact_url(url)))?;
        Ok(EvmRpc {
            p: RootProvider::new_http(u),
            url: url.to_string(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn chain_id(&self) -> Result<u64, RpcError> {
        bounded("eth_chainId", self.p.get_chain_id().into_future()).await
    }

    pub async fn block_number(&self) -> Result<u64, RpcError> {
        bounded("eth_blockNumber", self.p.get_block_number().into_future()).await
    }

    /// Block `n` with its value-carrying transactions when `full`; `None` past the head.
    pub async fn block(&self, n: u64, full: bool) -> Result<Option<BlockInfo>, RpcError> {
        const M: &str = "eth_getBlockByNumber";
        let v: Value = bounded(
            M,
            self.p
                .raw_request::<_, Value>(M.into(), (format!("0x{n:x}"), full)),
        )
        .await?;
        if v.is_null() {
            return Ok(None);
        }
        let mut native = Vec::new();
        if full {
            for t in v["transactions"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                let Some(to) = t["to"].as_str().and_then(|s| s.parse::<Address>().ok()) else {
                    continue; // contract creation
                };
                let value: U256 = parse(t, M, "value")?;
                if value.is_zero() {
                    continue;
                }
                native.push(NativeTx {
                    hash: parse(t, M, "hash")?,
                    from: parse(t, M, "from")?,
                    to,
                    value,
                });
            }
        }
        Ok(Some(BlockInfo {
            number: hex_u64(&v, M, "number")?,
            hash: parse(&v, M, "hash")?,
            parent_hash: parse(&v, M, "parentHash")?,
            timestamp: hex_u64(&v, M, "timestamp")?,
            native,
        }))
    }

    /// Logs of `filter` (one `eth_getLogs`).
    pub async fn logs(&self, filter: &Filter) -> Result<Vec<alloy::rpc::types::Log>, RpcError> {
        bounded("eth_getLogs", self.p.get_logs(filter)).await
    }

    pub async fn balance(&self, a: Address) -> Result<U256, RpcError> {
        bounded("eth_getBalance", self.p.get_balance(a).into_future()).await
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
        let req = TransactionRequest {
            to: Some(TxKind::Call(to)),
            input: data.into(),
            ..Default::default()
        };
        bounded("eth_call", self.p.call(req).into_future()).await
    }

    pub async fn code(&self, a: Address) -> Result<Bytes, RpcError> {
        bounded("eth_getCode", self.p.get_code_at(a).into_future()).await
    }

    /// Nonce including pending transactions.
    pub async fn pending_nonce(&self, a: Address) -> Result<u64, RpcError> {
        bounded(
            "eth_getTransactionCount",
            self.p.get_transaction_count(a).pending().into_future(),
        )
        .await
    }

    /// Nonce counting only mined transactions (the `latest` block).
    pub async fn latest_nonce(&self, a: Address) -> Result<u64, RpcError> {
        bounded(
            "eth_getTransactionCount",
            self.p.get_transaction_count(a).latest().into_future(),
        )
        .await
    }

    /// Gas a call would use.
    pub async fn estimate_gas(
        &self,
        from: Address,
        to: Address,
        value: U256,
        data: Bytes,
    ) -> Result<u64, RpcError> {
        let req = TransactionRequest {
            from: Some(from),
            to: Some(TxKind::Call(to)),
            value: Some(value),
            input: data.into(),
            ..Default::default()
        };
        bounded("eth_estimateGas", self.p.estimate_gas(req).into_future()).await
    }

    /// (max_fee_per_gas, max_priority_fee_per_gas) from the node's fee history.
    pub async fn fees(&self) -> Result<(u128, u128), RpcError> {
        let f = bounded("eth_feeHistory", self.p.estimate_eip1559_fees()).await?;
        Ok((f.max_fee_per_gas, f.max_priority_fee_per_gas))
    }

    /// Broadcasts a signed transaction. "already known" and "nonce too low" answers are
    /// reported as errors; the caller decides (a rebroadcast of a known tx is harmless).
    pub async fn send_raw(&self, raw: &[u8]) -> Result<B256, RpcError> {
        let pending = bounded("eth_sendRawTransaction", self.p.send_raw_transaction(raw)).await?;
        Ok(*pending.tx_hash())
    }

    pub async fn receipt(&self, hash: B256) -> Result<Option<ReceiptInfo>, RpcError> {
        const M: &str = "eth_getTransactionReceipt";
        let v: Value = bounded(M, self.p.raw_request::<_, Value>(M.into(), (hash,))).await?;
        if v.is_null() || v["blockNumber"].is_null() {
            return Ok(None);
        }
        Ok(Some(ReceiptInfo {
            success: hex_u64(&v, M, "status")? == 1,
            block_number: hex_u64(&v, M, "blockNumber")?,
            block_hash: parse(&v, M, "blockHash")?,
            gas_used: hex_u64(&v, M, "gasUsed").unwrap_or(0),
        }))
    }

    /// Whether the node knows the transaction (pending or mined).
    pub async fn knows_tx(&self, hash: B256) -> Result<bool, RpcError> {
        const M: &str = "eth_getTransactionByHash";
        let v: Value = bounded(M, self.p.raw_request::<_, Value>(M.into(), (hash,))).await?;
        Ok(!v.is_null())
    }
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
