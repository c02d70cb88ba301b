//! Following a UTXO chain over its node's JSON-RPC: the head, blocks by height as
//! [`BlockRef`]s (hashes in the order nodes print them), ranges of blocks linked by
//! parent hash with what they do to the appliance's coins, and the mempool's new
//! transactions (deposits `detected` before they are mined).

use std::collections::HashSet;
use std::str::FromStr;

use alloy::primitives::B256;

use super::rpc::{OutPoint, UtxoBlock, UtxoRpc, UtxoTx};
use super::scan::{scan, CoinChanges, ScriptWatch};
use super::UtxoNode;
use crate::client::{BlockRef, ClientError};

/// Most new mempool transactions read per poll: the rest are read by the next polls, so a
/// flood of mempool transactions never holds a watcher pass for long.
pub const MEMPOOL_READS_PER_POLL: usize = 2_000;

/// What a range of blocks holds for the appliance: the blocks, in order and linked by
/// parent hash, and each block's changes to the coins (by height, blocks with none
/// left out).
#[derive(Clone, Debug, Default)]
pub struct UtxoRange {
    pub blocks: Vec<BlockRef>,
    pub changes: Vec<(u64, CoinChanges)>,
}

/// Why the node's network was not accepted at start (DECISIONS.md section 17: the node's
/// `getblockchaininfo.chain` against the configured `network`, never a genesis hash).
#[derive(Clone, Debug, thiserror::Error)]
pub enum NetworkCheck {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the node serves chain {got:?}; the configured network expects {expected:?}")]
    Mismatch { got: String, expected: String },
    #[error("unknown network {0:?}")]
    Unknown(String),
}

/// The node's chain name (`main`, `test`, `signet`, `regtest`) for a configured
/// `network` (bitcoin's `bitcoin`, `testnet`, `signet`, `regtest`; dogecoin's `dogecoin`,
/// `testnet`, `regtest`); `None` for an unknown network.
pub fn node_chain_name(network: &str) -> Option<&'static str> {
    match network {
        "bitcoin" | "dogecoin" | "mainnet" => Some("main"),
        "testnet" => Some("test"),
        "signet" => Some("signet"),
        "regtest" => Some("regtest"),
        _ => None,
    }
}

/// A block hash or txid as nodes print it, as 32 bytes in that order.
pub fn hash_of(printed: &str, method: &'static str) -> Result<B256, ClientError> {
    B256::from_str(printed).map_err(|_| ClientError::Malformed {
        method,
        detail: format!("not a 32-byte hash: {printed:.80}"),
    })
}

/// The [`BlockRef`] of a decoded block.
pub fn block_ref(b: &UtxoBlock) -> Result<BlockRef, ClientError> {
    linked(
        b.height,
        &b.hash,
        b.previous_hash.as_deref(),
        b.time,
        "getblock",
    )
}

/// A [`BlockRef`] from a node's printed hashes (the genesis block's parent is zero).
fn linked(
    number: u64,
    hash: &str,
    parent: Option<&str>,
    timestamp: u64,
    method: &'static str,
) -> Result<BlockRef, ClientError> {
    Ok(BlockRef {
        number,
        hash: hash_of(hash, method)?,
        parent_hash: parent.map_or(Ok(B256::ZERO), |p| hash_of(p, method))?,
        timestamp,
    })
}

/// A UTXO chain's node (its JSON-RPC, or the simulated chain of test mode), read for the
/// watcher.
pub struct UtxoFollower<N> {
    node: N,
}

impl<N: UtxoNode> UtxoFollower<N> {
    pub fn new(node: N) -> UtxoFollower<N> {
        UtxoFollower { node }
    }

    pub fn node(&self) -> &N {
        &self.node
    }

    /// Refuses a node of another network than `network` (the configured one).
    pub async fn check_network(&self, network: &str) -> Result<(), NetworkCheck> {
        let expected =
            node_chain_name(network).ok_or_else(|| NetworkCheck::Unknown(network.to_string()))?;
        let got = self.node.chain_name().await?;
        if got != expected {
            return Err(NetworkCheck::Mismatch {
                got,
                expected: expected.to_string(),
            });
        }
        Ok(())
    }

    /// Height of the best block.
    pub async fn head(&self) -> Result<u64, ClientError> {
        self.node.head().await
    }

    /// The best chain's block at `height`; `None` past the head.
    pub async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, ClientError> {
        self.node.block_ref(height).await
    }

    /// Blocks `from..=to` with their coin changes for `watch` and `held` (outputs received
    /// earlier in the range count as held for the blocks after). [`ClientError::Moving`]
    /// when the node's blocks do not form one chain while read (a reorg under way) or the
    /// range reaches past the head.
    pub async fn scan(
        &self,
        from: u64,
        to: u64,
        watch: &ScriptWatch,
        held: &HashSet<OutPoint>,
    ) -> Result<UtxoRange, ClientError> {
        let mut range = UtxoRange::default();
        let mut held_now: Option<HashSet<OutPoint>> = None;
        for height in from..=to {
            let hash = self
                .node
                .block_hash(height)
                .await?
                .ok_or(ClientError::Moving("the range reaches past the head"))?;
            let block = self.node.block(&hash).await?;
            let r = block_ref(&block)?;
            if r.number != height {
                return Err(ClientError::Moving("block at another height"));
            }
            if let Some(prev) = range.blocks.last() {
                if r.parent_hash != prev.hash {
                    return Err(ClientError::Moving("parent hash mismatch inside the range"));
                }
            }
            let changes = scan(&block.txs, watch, held_now.as_ref().unwrap_or(held));
            if !changes.received.is_empty() {
                held_now
                    .get_or_insert_with(|| held.clone())
                    .extend(changes.received.iter().map(|c| c.outpoint.clone()));
            }
            if changes != CoinChanges::default() {
                range.changes.push((height, changes));
            }
            range.blocks.push(r);
        }
        Ok(range)
    }
}

/// The mempool transactions already read, so each poll reads only the new ones.
#[derive(Clone, Debug, Default)]
pub struct MempoolWatch {
    seen: HashSet<String>,
}

impl MempoolWatch {
    /// Reads the mempool transactions not read before (at most
    /// [`MEMPOOL_READS_PER_POLL`]) and answers what they do to the coins. Transactions
    /// that left the mempool are forgotten (mined, replaced or evicted: a block scan
    /// takes the mined ones); one that leaves between the listing and its read is passed
    /// over.
    pub async fn poll(
        &mut self,
        node: &impl UtxoNode,
        watch: &ScriptWatch,
        held: &HashSet<OutPoint>,
    ) -> Result<CoinChanges, ClientError> {
        let listed: HashSet<String> = node.mempool().await?.into_iter().collect();
        self.seen.retain(|t| listed.contains(t));
        let mut new: Vec<&String> = listed.iter().filter(|t| !self.seen.contains(*t)).collect();
        new.sort();
        new.truncate(MEMPOOL_READS_PER_POLL);
        let mut txs: Vec<UtxoTx> = Vec::with_capacity(new.len());
        for txid in new {
            match node.transaction(txid).await {
                Ok(t) => txs.push(t),
                Err(ClientError::Refused { .. }) => {}
                Err(e) => return Err(e),
            }
            self.seen.insert(txid.clone());
        }
        Ok(scan(&txs, watch, held))
    }

    /// How many mempool transactions are remembered as read.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[async_trait::async_trait]
impl UtxoNode for UtxoRpc {
    async fn chain_name(&self) -> Result<String, ClientError> {
        Ok(self.chain_info().await?.chain)
    }

    async fn head(&self) -> Result<u64, ClientError> {
        Ok(self.chain_info().await?.blocks)
    }

    async fn block_hash(&self, height: u64) -> Result<Option<String>, ClientError> {
        match UtxoRpc::block_hash(self, height).await {
            Ok(h) => Ok(Some(h)),
            // The node refuses a height past its head.
            Err(ClientError::Refused { detail, .. }) if detail.contains("out of range") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Read from the header (`getblockheader`), not the whole block.
    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, ClientError> {
        let Some(hash) = UtxoNode::block_hash(self, height).await? else {
            return Ok(None);
        };
        #[derive(serde::Deserialize)]
        struct Header {
            hash: String,
            height: u64,
            previousblockhash: Option<String>,
            time: u64,
        }
        let h: Header = self
            .call("getblockheader", serde_json::json!([hash, true]))
            .await?;
        if h.height != height {
            return Err(ClientError::Moving("header at another height"));
        }
        let parent = h.previousblockhash.as_deref();
        linked(h.height, &h.hash, parent, h.time, "getblockheader").map(Some)
    }

    async fn block(&self, hash: &str) -> Result<UtxoBlock, ClientError> {
        UtxoRpc::block(self, hash).await
    }

    async fn mempool(&self) -> Result<Vec<String>, ClientError> {
        UtxoRpc::mempool(self).await
    }

    async fn transaction(&self, txid: &str) -> Result<UtxoTx, ClientError> {
        UtxoRpc::transaction(self, txid).await
    }

    async fn broadcast(&self, raw: &[u8]) -> Result<String, ClientError> {
        UtxoRpc::broadcast(self, &hex::encode(raw)).await
    }

    async fn fee_per_kvb(&self, target: u16) -> Result<Option<u64>, ClientError> {
        UtxoRpc::fee_per_kvb(self, target).await
    }
}
