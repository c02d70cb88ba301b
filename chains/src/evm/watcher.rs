//! Block scanning and reorg detection for one EVM chain.
//!
//! A scan of blocks `from..=to` costs one `eth_getBlockByNumber` per block (native
//! transfers are top-level transactions with a value) and one `eth_getLogs` for the whole
//! range filtered by the token contracts and the `Transfer` topic. Matching the recipients
//! against the deposit addresses is the caller's set lookup, never one call per address.
//! Native coin moved by contracts (internal transfers) needs traces, which many hosted
//! nodes lack: it is not detected here and shows up as drift on a chain balance reading.

use std::collections::VecDeque;

use alloy::primitives::{Address, B256, U256};
use alloy::rpc::types::Filter;
use serde::{Deserialize, Serialize};

use super::rpc::{BlockInfo, EvmRpc, RpcError};

/// `keccak256("Transfer(address,address,uint256)")`.
pub const TRANSFER_TOPIC: B256 = B256::new(hex_literal(
    "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef",
));

const fn hex_literal(s: &str) -> [u8; 32] {
    let b = s.as_bytes();
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = (nib(b[2 * i]) << 4) | nib(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nib(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("hex"),
    }
}

/// A transfer into some address, native or token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub block_number: u64,
    pub block_hash: B256,
    /// Unix seconds.
    pub block_time: u64,
    pub tx_hash: B256,
    /// Token transfers: the log's index in its block. Native transfers: `None`.
    pub log_index: Option<u32>,
    /// Token contract; `None` for the native coin.
    pub token: Option<Address>,
    pub from: Address,
    pub to: Address,
    pub value: U256,
}

/// What a scan found: the blocks (in order) and every transfer in them.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub blocks: Vec<BlockInfo>,
    pub transfers: Vec<Transfer>,
}

/// Why a scan could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The node's answers disagree (a reorg happened during the scan): scan again.
    #[error("the chain changed during the scan: {0}")]
    Moving(&'static str),
}

/// Fetches blocks `from..=to` and the token transfers in them. Native transfers whose
/// transaction reverted are dropped (their receipts are checked).
pub async fn scan(rpc: &EvmRpc, from: u64, to: u64, tokens: &[Address]) -> Result<Scan, ScanError> {
    let mut blocks = Vec::with_capacity((to + 1 - from) as usize);
    for n in from..=to {
        let b = rpc
            .block(n, true)
            .await?
            .ok_or(ScanError::Moving("block vanished"))?;
        if let Some(prev) = blocks.last() {
            let prev: &BlockInfo = prev;
            if b.parent_hash != prev.hash {
                return Err(ScanError::Moving("parent hash mismatch inside the range"));
            }
        }
        blocks.push(b);
    }
    let mut transfers = Vec::new();
    if !tokens.is_empty() {
        let filter = Filter::new()
            .from_block(from)
            .to_block(to)
            .address(tokens.to_vec())
            .event_signature(TRANSFER_TOPIC);
        for log in rpc.logs(&filter).await? {
            if log.removed {
                continue;
            }
            let topics = log.topics();
            // ERC-721 Transfer has the token id as a third indexed topic: not money.
            if topics.len() != 3 || log.data().data.len() != 32 {
                continue;
            }
            let (Some(bn), Some(bh), Some(tx), Some(li)) = (
                log.block_number,
                log.block_hash,
                log.transaction_hash,
                log.log_index,
            ) else {
                continue;
            };
            let Some(block) = blocks.iter().find(|b| b.number == bn) else {
                return Err(ScanError::Moving("log outside the scanned range"));
            };
            if block.hash != bh {
                return Err(ScanError::Moving("log from another fork"));
            }
            transfers.push(Transfer {
                block_number: bn,
                block_hash: bh,
                block_time: block.timestamp,
                tx_hash: tx,
                log_index: Some(li as u32),
                token: Some(log.address()),
                from: Address::from_word(topics[1]),
                to: Address::from_word(topics[2]),
                value: U256::from_be_slice(&log.data().data),
            });
        }
    }
    for b in &blocks {
        for t in &b.native {
            transfers.push(Transfer {
                block_number: b.number,
                block_hash: b.hash,
                block_time: b.timestamp,
                tx_hash: t.hash,
                log_index: None,
                token: None,
                from: t.from,
                to: t.to,
                value: t.value,
            });
        }
    }
    Ok(Scan { blocks, transfers })
}

/// Drops native transfers whose transaction reverted (one receipt per candidate: call this
/// after matching recipients, so only transfers to deposit addresses cost a call).
pub async fn keep_successful(
    rpc: &EvmRpc,
    transfers: Vec<Transfer>,
) -> Result<Vec<Transfer>, RpcError> {
    let mut out = Vec::with_capacity(transfers.len());
    for t in transfers {
        if t.token.is_none() {
            match rpc.receipt(t.tx_hash).await? {
                Some(r) if r.success => {}
                _ => continue,
            }
        }
        out.push(t);
    }
    Ok(out)
}

/// The watcher's durable position: the last processed block and the hashes of the recent
/// ones (newest last), enough to find the fork point of any reorg up to `capacity` deep.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Last processed block; `None` before the first scan.
    pub height: Option<u64>,
    pub recent: VecDeque<(u64, B256)>,
}

impl Cursor {
    /// Hash recorded for block `n`, if still remembered.
    pub fn hash_at(&self, n: u64) -> Option<B256> {
        self.recent
            .iter()
            .rev()
            .find(|(h, _)| *h == n)
            .map(|(_, x)| *x)
    }

    /// Records processed blocks, keeping at most `capacity`.
    pub fn push(&mut self, blocks: &[BlockInfo], capacity: usize) {
        for b in blocks {
            self.recent.push_back((b.number, b.hash));
            self.height = Some(b.number);
        }
        while self.recent.len() > capacity {
            self.recent.pop_front();
        }
    }

    /// Forgets blocks above `ancestor` (they left the canonical chain).
    pub fn rewind(&mut self, ancestor: u64) {
        while self.recent.back().is_some_and(|(n, _)| *n > ancestor) {
            self.recent.pop_back();
        }
        self.height = Some(ancestor);
    }
}

/// Whether `first` (the first block of a new scan) extends what `cursor` processed.
pub fn extends(cursor: &Cursor, first: &BlockInfo) -> bool {
    match cursor.hash_at(first.number.wrapping_sub(1)) {
        Some(h) => h == first.parent_hash,
        // Nothing remembered (first scan): nothing to contradict.
        None => true,
    }
}

/// Walks back from the cursor's height to the newest remembered block the node still has
/// with the same hash. `None`: the fork is deeper than the memory (operator attention).
pub async fn fork_point(rpc: &EvmRpc, cursor: &Cursor) -> Result<Option<u64>, RpcError> {
    for (n, h) in cursor.recent.iter().rev() {
        match rpc.block(*n, false).await? {
            Some(b) if b.hash == *h => return Ok(Some(*n)),
            _ => continue,
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blk(n: u64, h: u8, p: u8) -> BlockInfo {
        BlockInfo {
            number: n,
            hash: B256::repeat_byte(h),
            parent_hash: B256::repeat_byte(p),
            timestamp: 0,
            native: vec![],
        }
    }

    #[test]
    fn transfer_topic_is_the_keccak_of_the_signature() {
        assert_eq!(
            TRANSFER_TOPIC.0,
            crate::address::keccak256(b"Transfer(address,address,uint256)")
        );
    }

    #[test]
    fn cursor_keeps_a_bounded_memory_and_rewinds() {
        let mut c = Cursor::default();
        c.push(&[blk(1, 1, 0), blk(2, 2, 1), blk(3, 3, 2)], 2);
        assert_eq!(c.height, Some(3));
        assert_eq!(c.recent.len(), 2);
        assert!(extends(&c, &blk(4, 4, 3)));
        assert!(!extends(&c, &blk(4, 4, 9)));
        c.rewind(2);
        assert_eq!(c.height, Some(2));
        assert_eq!(c.hash_at(3), None);
        assert_eq!(c.hash_at(2), Some(B256::repeat_byte(2)));
    }
}
