//! The UTXO family (bitcoin, dogecoin): the node's JSON-RPC ([`rpc`]) and amounts in the
//! node's decimal form read exactly ([`parse_coin_amount`]).
//!
//! Blocks are read decoded by the node (`getblock` with verbosity 2), never decoded here:
//! dogecoin's mainnet headers carry AuxPoW, which a bitcoin block decoder refuses.

pub mod follow;
pub mod plan;
pub mod rpc;
pub mod scan;
pub mod sim;

use crate::client::{BlockRef, ClientError};

/// A UTXO chain's node as the follower and the sender use it: Bitcoin Core's JSON-RPC
/// ([`rpc::UtxoRpc`]) or the simulated chain of test mode ([`sim::SimUtxoChain`]). Hashes
/// and txids are strings as nodes print them.
#[async_trait::async_trait]
pub trait UtxoNode: Send + Sync {
    /// `main`, `test`, `signet` or `regtest` (`getblockchaininfo.chain`).
    async fn chain_name(&self) -> Result<String, ClientError>;
    /// Height of the best block.
    async fn head(&self) -> Result<u64, ClientError>;
    /// Hash of the best chain's block at `height`; `None` past the head.
    async fn block_hash(&self, height: u64) -> Result<Option<String>, ClientError>;
    /// The best chain's block at `height` as a [`BlockRef`]; `None` past the head.
    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, ClientError>;
    /// A block with its decoded transactions.
    async fn block(&self, hash: &str) -> Result<rpc::UtxoBlock, ClientError>;
    /// Txids in the mempool.
    async fn mempool(&self) -> Result<Vec<String>, ClientError>;
    /// A mempool (or, with an index, mined) transaction.
    async fn transaction(&self, txid: &str) -> Result<rpc::UtxoTx, ClientError>;
    /// Broadcasts a signed transaction; answers its txid.
    async fn broadcast(&self, raw: &[u8]) -> Result<String, ClientError>;
    /// The node's fee estimate in atomic units per 1,000 vbytes; `None` without one.
    async fn fee_per_kvb(&self, target: u16) -> Result<Option<u64>, ClientError>;
}

/// A coin amount as the node writes it (`0.00100000`, `12.5`, `1e-05`) in atomic units
/// (satoshis: 8 decimals), exactly: the JSON number's text is read, never a float.
/// `None` for a negative, malformed or out-of-range amount, or one with more than 8
/// decimals.
pub fn parse_coin_amount(text: &str) -> Option<u64> {
    const DECIMALS: usize = 8;
    let t = text.trim();
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(i) => (&t[..i], t[i + 1..].parse::<i32>().ok()?),
        None => (t, 0),
    };
    if mantissa.starts_with('-') || mantissa.is_empty() {
        return None;
    }
    let (int, frac) = match mantissa.split_once('.') {
        Some((a, b)) => (a, b),
        None => (mantissa, ""),
    };
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    // digits · 10^(exp - frac.len()) coins = digits · 10^(exp - frac.len() + 8) atomic units.
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let shift = exp + DECIMALS as i32 - frac.len() as i32;
    if digits.is_empty() {
        return Some(0);
    }
    if shift < 0 {
        let cut = (-shift) as usize;
        if cut > digits.len() {
            return None;
        }
        let (keep, dropped) = digits.split_at(digits.len() - cut);
        if dropped.bytes().any(|b| b != b'0') {
            return None;
        }
        return if keep.is_empty() {
            Some(0)
        } else {
            keep.parse().ok()
        };
    }
    let value: u64 = digits.parse().ok()?;
    value.checked_mul(10u64.checked_pow(shift as u32)?)
}

/// A node shared between tasks (the simulated chain of a test project is read by its
/// workers and driven by the test endpoints).
#[async_trait::async_trait]
impl<T: UtxoNode + ?Sized> UtxoNode for std::sync::Arc<T> {
    async fn chain_name(&self) -> Result<String, ClientError> {
        (**self).chain_name().await
    }
    async fn head(&self) -> Result<u64, ClientError> {
        (**self).head().await
    }
    async fn block_hash(&self, height: u64) -> Result<Option<String>, ClientError> {
        (**self).block_hash(height).await
    }
    async fn block_ref(&self, height: u64) -> Result<Option<BlockRef>, ClientError> {
        (**self).block_ref(height).await
    }
    async fn block(&self, hash: &str) -> Result<rpc::UtxoBlock, ClientError> {
        (**self).block(hash).await
    }
    async fn mempool(&self) -> Result<Vec<String>, ClientError> {
        (**self).mempool().await
    }
    async fn transaction(&self, txid: &str) -> Result<rpc::UtxoTx, ClientError> {
        (**self).transaction(txid).await
    }
    async fn broadcast(&self, raw: &[u8]) -> Result<String, ClientError> {
        (**self).broadcast(raw).await
    }
    async fn fee_per_kvb(&self, target: u16) -> Result<Option<u64>, ClientError> {
        (**self).fee_per_kvb(target).await
    }
}

#[cfg(test)]
mod tests {
    use super::parse_coin_amount;

    #[test]
    fn coin_amounts_are_read_exactly() {
        assert_eq!(parse_coin_amount("0.00100000"), Some(100_000));
        assert_eq!(parse_coin_amount("12.5"), Some(1_250_000_000));
        assert_eq!(parse_coin_amount("50"), Some(5_000_000_000));
        assert_eq!(parse_coin_amount("0"), Some(0));
        assert_eq!(parse_coin_amount("1e-05"), Some(1_000));
        assert_eq!(parse_coin_amount("2.1E+7"), Some(2_100_000_000_000_000));
        assert_eq!(
            parse_coin_amount("20999999.99999999"),
            Some(2_099_999_999_999_999)
        );
        assert_eq!(parse_coin_amount("0.00000001"), Some(1));
        assert_eq!(parse_coin_amount("0.000000001"), None);
        assert_eq!(parse_coin_amount("0.000000010"), Some(1));
        assert_eq!(parse_coin_amount("-1"), None);
        assert_eq!(parse_coin_amount("abc"), None);
        assert_eq!(parse_coin_amount("."), None);
        assert_eq!(parse_coin_amount("1e30"), None);
    }
}
