//! A UTXO node's JSON-RPC (Bitcoin Core and its forks: dogecoind, litecoind): the calls
//! the watcher and the sender make, with their answers typed. Amounts are read from the
//! JSON number's text ([`super::parse_coin_amount`]), never through a float.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::client::ClientError;
use crate::redact::scrub_urls;

/// Longest a call may take before the node counts as unavailable.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read (a `getblock` with decoded transactions of a full block is a few MB).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// How the node authenticates its RPC callers.
#[derive(Clone, Debug)]
pub enum RpcAuth {
    /// `rpcuser` / `rpcpassword`.
    UserPass { user: String, password: String },
    /// The node's `.cookie` file, read at each call (the node rewrites it when it restarts).
    Cookie(PathBuf),
}

/// What `getblockchaininfo` says of the node's chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainInfo {
    /// `main`, `test`, `signet` or `regtest` (DECISIONS.md section 17 compares it with the
    /// configured `network`).
    pub chain: String,
    /// Height of the best block.
    pub blocks: u64,
    /// Hash of the best block, as nodes print it.
    pub best_block_hash: String,
}

/// A block with its transactions, as the node decoded it.
#[derive(Clone, Debug)]
pub struct UtxoBlock {
    /// Block hash as nodes print it (byte-reversed hex).
    pub hash: String,
    pub height: u64,
    /// `None` for the genesis block.
    pub previous_hash: Option<String>,
    /// Unix seconds (the header's time).
    pub time: u64,
    pub txs: Vec<UtxoTx>,
}

/// A transaction: what it spends and what it pays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UtxoTx {
    /// The txid as nodes print it (byte-reversed hex, no `0x`; DECISIONS.md section 17).
    pub txid: String,
    /// The outputs it spends; empty for a coinbase.
    pub inputs: Vec<OutPoint>,
    pub outputs: Vec<TxOut>,
}

/// One output of a transaction: `(txid, vout)` names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OutPoint {
    pub txid: String,
    pub vout: u32,
}

/// An output: its index, value and the script it locks to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxOut {
    /// The output index (`vout`): a deposit's `log_index` (DECISIONS.md section 17).
    pub n: u32,
    /// Atomic units (satoshis).
    pub value: u64,
    /// The locking script, hex.
    pub script_hex: String,
    /// The address the node reads in the script, if it is a standard one.
    pub address: Option<String>,
}

/// A UTXO node's JSON-RPC endpoint.
pub struct UtxoRpc {
    http: reqwest13::Client,
    url: String,
    auth: RpcAuth,
    next_id: AtomicU64,
}

#[derive(Deserialize)]
struct Envelope {
    result: Option<Box<RawValue>>,
    error: Option<RpcError>,
}

#[derive(Deserialize)]
struct RpcError {
    code: i64,
    message: String,
}

#[derive(Deserialize)]
struct RawChainInfo {
    chain: String,
    blocks: u64,
    bestblockhash: String,
}

#[derive(Deserialize)]
struct RawBlock {
    hash: String,
    height: u64,
    previousblockhash: Option<String>,
    time: u64,
    tx: Vec<RawTx>,
}

#[derive(Deserialize)]
struct RawTx {
    txid: String,
    vin: Vec<RawVin>,
    vout: Vec<RawVout>,
}

#[derive(Deserialize)]
struct RawVin {
    txid: Option<String>,
    vout: Option<u32>,
}

#[derive(Deserialize)]
struct RawVout {
    value: Box<RawValue>,
    n: u32,
    #[serde(rename = "scriptPubKey")]
    script: RawScript,
}

#[derive(Deserialize)]
struct RawScript {
    hex: String,
    /// Bitcoin Core 22 and later.
    address: Option<String>,
    /// Bitcoin Core before 22 (and its forks of that age): a list of one.
    addresses: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct RawFee {
    feerate: Option<Box<RawValue>>,
}

impl UtxoRpc {
    /// A client of the node at `url` (`http://host:port`).
    pub fn new(url: &str, auth: RpcAuth) -> Result<UtxoRpc, ClientError> {
        let http = reqwest13::Client::builder()
            .timeout(CALL_TIMEOUT)
            .redirect(reqwest13::redirect::Policy::none())
            .build()
            .map_err(|e| unavailable(&e))?;
        Ok(UtxoRpc {
            http,
            url: url.to_string(),
            auth,
            next_id: AtomicU64::new(1),
        })
    }

    /// `getblockchaininfo`.
    pub async fn chain_info(&self) -> Result<ChainInfo, ClientError> {
        let r: RawChainInfo = self.call("getblockchaininfo", json!([])).await?;
        Ok(ChainInfo {
            chain: r.chain,
            blocks: r.blocks,
            best_block_hash: r.bestblockhash,
        })
    }

    /// `getblockhash`: the hash of the best chain's block at `height`.
    pub async fn block_hash(&self, height: u64) -> Result<String, ClientError> {
        self.call("getblockhash", json!([height])).await
    }

    /// `getblock` with verbosity 2: the block and its decoded transactions.
    pub async fn block(&self, hash: &str) -> Result<UtxoBlock, ClientError> {
        let r: RawBlock = self.call("getblock", json!([hash, 2])).await?;
        let txs =
            r.tx.into_iter()
                .map(|t| tx_of(t, "getblock"))
                .collect::<Result<_, _>>()?;
        Ok(UtxoBlock {
            hash: r.hash,
            height: r.height,
            previous_hash: r.previousblockhash,
            time: r.time,
            txs,
        })
    }

    /// `getrawmempool`: the txids waiting in the node's mempool.
    pub async fn mempool(&self) -> Result<Vec<String>, ClientError> {
        self.call("getrawmempool", json!([])).await
    }

    /// `getrawtransaction` (verbose): a mempool transaction, or any with `-txindex`.
    pub async fn transaction(&self, txid: &str) -> Result<UtxoTx, ClientError> {
        let r: RawTx = self.call("getrawtransaction", json!([txid, true])).await?;
        tx_of(r, "getrawtransaction")
    }

    /// `estimatesmartfee` for confirmation within `target` blocks, in atomic units per
    /// 1,000 virtual bytes; `None` when the node has no estimate (regtest, a young node).
    pub async fn fee_per_kvb(&self, target: u16) -> Result<Option<u64>, ClientError> {
        let r: RawFee = self.call("estimatesmartfee", json!([target])).await?;
        match r.feerate {
            None => Ok(None),
            Some(v) => super::parse_coin_amount(v.get())
                .map(Some)
                .ok_or_else(|| malformed("estimatesmartfee", "feerate")),
        }
    }

    /// `sendrawtransaction`: broadcasts a signed transaction (hex); answers its txid. A
    /// transaction the node already has is refused by some nodes with "already in block
    /// chain" or "txn-already-known" ([`ClientError::Refused`] with the node's message).
    pub async fn broadcast(&self, raw_hex: &str) -> Result<String, ClientError> {
        self.call("sendrawtransaction", json!([raw_hex])).await
    }

    /// One call, its answer parsed as `T`.
    pub async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &'static str,
        params: Value,
    ) -> Result<T, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "1.0", "id": id, "method": method, "params": params});
        let (user, password) = self.credentials()?;
        let resp = self
            .http
            .post(&self.url)
            .basic_auth(user, Some(password))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| unavailable(&e))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| unavailable(&e))?;
        if bytes.len() > MAX_ANSWER_BYTES {
            return Err(malformed(method, "answer too large"));
        }
        // Bitcoin Core answers a refused call with HTTP 500 and the error in the body.
        let env: Envelope = match serde_json::from_slice(&bytes) {
            Ok(e) => e,
            Err(_) if !status.is_success() => {
                return Err(ClientError::Unavailable {
                    detail: format!("{method}: HTTP {status}"),
                })
            }
            Err(e) => return Err(malformed(method, &e.to_string())),
        };
        if let Some(e) = env.error {
            return Err(ClientError::Refused {
                method,
                detail: format!("{} ({})", e.message, e.code),
            });
        }
        // A call with nothing to answer (`invalidateblock`) answers `null`: parsed as such,
        // so only a `T` that accepts null takes it.
        let text = env.result.as_ref().map_or("null", |r| r.get());
        serde_json::from_str(text).map_err(|e| malformed(method, &e.to_string()))
    }

    fn credentials(&self) -> Result<(String, String), ClientError> {
        match &self.auth {
            RpcAuth::UserPass { user, password } => Ok((user.clone(), password.clone())),
            RpcAuth::Cookie(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ClientError::Unavailable {
                    detail: format!("cookie file {}: {e}", path.display()),
                })?;
                let (u, p) =
                    text.trim()
                        .split_once(':')
                        .ok_or_else(|| ClientError::Unavailable {
                            detail: format!(
                                "cookie file {} holds no user:password",
                                path.display()
                            ),
                        })?;
                Ok((u.to_string(), p.to_string()))
            }
        }
    }
}

fn tx_of(t: RawTx, method: &'static str) -> Result<UtxoTx, ClientError> {
    let inputs = t
        .vin
        .into_iter()
        .filter_map(|i| {
            Some(OutPoint {
                txid: i.txid?,
                vout: i.vout?,
            })
        })
        .collect();
    let outputs = t
        .vout
        .into_iter()
        .map(|o| {
            let value = super::parse_coin_amount(o.value.get())
                .ok_or_else(|| malformed(method, "output value"))?;
            let address = o
                .script
                .address
                .or_else(|| o.script.addresses.and_then(|a| a.into_iter().next()));
            Ok(TxOut {
                n: o.n,
                value,
                script_hex: o.script.hex,
                address,
            })
        })
        .collect::<Result<_, ClientError>>()?;
    Ok(UtxoTx {
        txid: t.txid,
        inputs,
        outputs,
    })
}

fn unavailable(e: &dyn std::fmt::Display) -> ClientError {
    ClientError::Unavailable {
        detail: scrub_urls(&e.to_string()),
    }
}

fn malformed(method: &'static str, detail: &str) -> ClientError {
    ClientError::Malformed {
        method,
        detail: detail.to_string(),
    }
}
