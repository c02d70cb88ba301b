//! Chain registry and chain adapters.
//!
//! * [`registry`]: every chain and asset the appliance knows, as data (decimals, confirmation
//!   defaults, contracts, explorer links).
//! * [`address`]: EVM address rules (EIP-55, CREATE2 deposit addresses of DECISIONS.md
//!   section 9).
//! * [`client`]: the chain seam, [`client::ChainClient`], that every adapter implements.
//! * [`evm`]: the live EVM adapter (JSON-RPC with alloy): watcher, sender rules, sweeper.
//!
//! ```
//! let eth = appliance_chains::registry::chain("ethereum").unwrap();
//! assert_eq!(eth.asset("USDT").unwrap().decimals, 6);
//! let bsc = appliance_chains::registry::chain("bsc").unwrap();
//! assert!(bsc.asset("USDT").unwrap().decimals_differ_from_default());
//! ```

pub mod address;
pub mod client;
pub mod evm;
pub mod redact;
pub mod registry;
pub mod sim;
pub mod utxo;

pub use registry::{
    chain, market_rank, AccountKind, AssetInfo, ChainInfo, ChainStatus, Family, CHAINS,
};

/// Formats an atomic amount as a decimal string with `decimals` places, trimming trailing
/// zeros (`1500000`, 6 → `"1.5"`; `0`, 6 → `"0"`). Exact: no floating point.
pub fn format_decimal(atomic: u128, decimals: u8) -> String {
    let s = atomic.to_string();
    let d = decimals as usize;
    if d == 0 {
        return s;
    }
    let (int, frac) = if s.len() > d {
        let (a, b) = s.split_at(s.len() - d);
        (a.to_string(), b.to_string())
    } else {
        ("0".to_string(), format!("{}{}", "0".repeat(d - s.len()), s))
    };
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        int
    } else {
        format!("{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::format_decimal;

    #[test]
    fn decimal_formatting_is_exact() {
        assert_eq!(format_decimal(1_500_000, 6), "1.5");
        assert_eq!(format_decimal(1, 18), "0.000000000000000001");
        assert_eq!(format_decimal(0, 6), "0");
        assert_eq!(format_decimal(1_000_000, 6), "1");
        assert_eq!(format_decimal(42, 0), "42");
        assert_eq!(
            format_decimal(u128::MAX, 18),
            "340282366920938463463.374607431768211455"
        );
    }
}
