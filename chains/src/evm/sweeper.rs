//! Calldata of the forwarder factory (`chains/contracts/Forwarder.sol`).

use alloy::primitives::{Address, Bytes};

use crate::address::{factory_init_code, keccak256, FACTORY_SALT};

fn selector(sig: &str) -> [u8; 4] {
    let h = keccak256(sig.as_bytes());
    [h[0], h[1], h[2], h[3]]
}

fn word_address(a: &Address) -> [u8; 32] {
    let mut w = [0u8; 32];
    w[12..].copy_from_slice(a.as_slice());
    w
}

/// `sweep(bytes32 salt, address[] tokens)`: deploys the forwarder of `salt` if needed and
/// flushes each token (`Address::ZERO`: the native coin) to the treasury.
pub fn sweep_calldata(salt: [u8; 32], tokens: &[Address]) -> Bytes {
    let mut d = selector("sweep(bytes32,address[])").to_vec();
    d.extend_from_slice(&salt);
    let mut off = [0u8; 32];
    off[31] = 0x40;
    d.extend_from_slice(&off);
    let mut len = [0u8; 32];
    len[24..].copy_from_slice(&(tokens.len() as u64).to_be_bytes());
    d.extend_from_slice(&len);
    for t in tokens {
        d.extend_from_slice(&word_address(t));
    }
    d.into()
}

/// `forwarderAddress(bytes32)`: the factory's own view of a forwarder address.
pub fn forwarder_address_calldata(salt: [u8; 32]) -> Bytes {
    let mut d = selector("forwarderAddress(bytes32)").to_vec();
    d.extend_from_slice(&salt);
    d.into()
}

/// Calldata for the deterministic deployment proxy that deploys the factory of `treasury`:
/// `salt ‖ init code` (CHAINS.md).
pub fn factory_deploy_calldata(treasury: &Address) -> Bytes {
    let mut d = FACTORY_SALT.to_vec();
    d.extend_from_slice(&factory_init_code(&treasury.0 .0));
    d.into()
}

/// ERC-20 `transfer(to, amount)`.
pub fn erc20_transfer_calldata(to: &Address, amount: alloy::primitives::U256) -> Bytes {
    let mut d = vec![0xa9, 0x05, 0x9c, 0xbb];
    d.extend_from_slice(&word_address(to));
    d.extend_from_slice(&amount.to_be_bytes::<32>());
    d.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_match_the_abi() {
        assert_eq!(
            selector("transfer(address,uint256)"),
            [0xa9, 0x05, 0x9c, 0xbb]
        );
        let d = sweep_calldata([7u8; 32], &[Address::ZERO, Address::repeat_byte(1)]);
        assert_eq!(d.len(), 4 + 32 * 5);
    }
}
