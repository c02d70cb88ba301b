//! Rules for sending transactions from the master wallet: nonce choice, EIP-1559 fees and
//! replacement of a stuck transaction (CHAINS.md "Watching and sending").

use alloy::consensus::TxEip1559;
use alloy::primitives::{Address, Bytes, TxKind, U256};

/// The nonce to use next: the larger of what the store has handed out and what the node
/// counts including its mempool. The store never goes back (no reuse after a restart); the
/// node's count covers transactions sent by other means.
pub fn choose_nonce(stored_next: u64, node_pending: u64) -> u64 {
    stored_next.max(node_pending)
}

/// Fees of a replacement: at least +12.5% on both (the mempool's replacement rule; +25% is
/// used to clear it comfortably) and never below the node's current estimate.
pub fn bumped_fees(old: (u128, u128), estimate: (u128, u128)) -> (u128, u128) {
    let up = |x: u128| x.saturating_add(x.div_ceil(4)).max(x + 1);
    let tip = up(old.1).max(estimate.1);
    let max_fee = up(old.0).max(estimate.0).max(tip);
    (max_fee, tip)
}

/// Gas limit with a 20% margin over the estimate (estimates move with state).
pub fn gas_limit_with_margin(estimate: u64) -> u64 {
    estimate.saturating_add(estimate / 5).max(21_000)
}

/// An unsigned EIP-1559 transaction; `fees` are its `max_fee_per_gas` and
/// `max_priority_fee_per_gas` (wei), as [`bumped_fees`] gives them.
pub fn eip1559(
    chain_id: u64,
    nonce: u64,
    to: Address,
    value: U256,
    data: Bytes,
    gas_limit: u64,
    fees: (u128, u128),
) -> TxEip1559 {
    let (max_fee_per_gas, max_priority_fee_per_gas) = fees;
    TxEip1559 {
        chain_id,
        nonce,
        gas_limit,
        max_fee_per_gas,
        max_priority_fee_per_gas,
        to: TxKind::Call(to),
        value,
        access_list: Default::default(),
        input: data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_fees_rise_by_at_least_an_eighth() {
        let (f, t) = bumped_fees((1_000, 100), (0, 0));
        assert!(f * 8 >= 1_000 * 9 && t * 8 >= 100 * 9);
        let (f, t) = bumped_fees((1_000, 100), (5_000, 300));
        assert_eq!((f, t), (5_000, 300));
    }

    #[test]
    fn nonce_never_goes_back() {
        assert_eq!(choose_nonce(7, 5), 7);
        assert_eq!(choose_nonce(7, 9), 9);
    }
}
