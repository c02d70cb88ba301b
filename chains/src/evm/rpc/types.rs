//! What the RPC client reads from a node, in the node's JSON (`Raw*`) and as the chain
//! seam takes it (blocks, native transfers, receipts, logs).

use super::*;

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

impl From<&BlockInfo> for crate::client::BlockRef {
    fn from(b: &BlockInfo) -> crate::client::BlockRef {
        crate::client::BlockRef {
            number: b.number,
            hash: b.hash,
            parent_hash: b.parent_hash,
            timestamp: b.timestamp,
        }
    }
}

/// A transaction receipt reduced to what the sender needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiptInfo {
    pub success: bool,
    pub block_number: u64,
    pub block_hash: B256,
    pub gas_used: u64,
}

/// One log of `eth_getLogs`, the fields the watcher reads.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogInfo {
    /// The contract that emitted it.
    pub address: Address,
    pub topics: Vec<B256>,
    pub data: Bytes,
    /// `None` for a pending log.
    pub block_number: Option<U64>,
    pub block_hash: Option<B256>,
    pub transaction_hash: Option<B256>,
    pub log_index: Option<U64>,
    #[serde(default)]
    pub removed: bool,
}

/// `eth_getBlockByNumber` answer, header fields only (transactions are ignored unparsed).
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawHeader {
    number: U64,
    hash: B256,
    parent_hash: B256,
    timestamp: U64,
}

/// `eth_getBlockByNumber(_, true)` answer: the header and each transaction's value fields
/// (calldata is skipped by the parser, never copied).
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RawBlock {
    number: U64,
    hash: B256,
    parent_hash: B256,
    timestamp: U64,
    #[serde(default)]
    transactions: Vec<RawTx>,
}

#[derive(Debug, serde::Deserialize)]
pub(super) struct RawTx {
    hash: B256,
    from: Address,
    /// `None` for a contract creation.
    to: Option<Address>,
    value: U256,
}

impl From<RawHeader> for BlockInfo {
    fn from(h: RawHeader) -> BlockInfo {
        BlockInfo {
            number: h.number.to(),
            hash: h.hash,
            parent_hash: h.parent_hash,
            timestamp: h.timestamp.to(),
            native: Vec::new(),
        }
    }
}

impl From<RawBlock> for BlockInfo {
    fn from(b: RawBlock) -> BlockInfo {
        BlockInfo {
            number: b.number.to(),
            hash: b.hash,
            parent_hash: b.parent_hash,
            timestamp: b.timestamp.to(),
            native: b
                .transactions
                .into_iter()
                .filter_map(|t| {
                    let to = t.to?; // contract creation
                    (!t.value.is_zero()).then_some(NativeTx {
                        hash: t.hash,
                        from: t.from,
                        to,
                        value: t.value,
                    })
                })
                .collect(),
        }
    }
}
