//! The chain registry as this appliance runs it: the static registry of `appliance-chains`
//! with the operator's config overrides (confirmations, extra or replaced token contracts).

use appliance_chains::{AccountKind, ChainInfo};

use crate::config::Config;

/// One asset as configured.
#[derive(Debug, Clone)]
pub struct Asset {
    pub symbol: String,
    pub name: String,
    pub decimals: u8,
    pub contract: String,
    pub is_native: bool,
}

impl Asset {
    /// SPEC.md section 2: stablecoins whose scale is not 6.
    pub fn decimals_differ_from_default(&self) -> bool {
        self.is_stable() && self.decimals != 6
    }

    pub fn is_stable(&self) -> bool {
        matches!(self.symbol.as_str(), "USDT" | "USDC")
    }

    /// Value in US cents of `amount` atomic units, stablecoins at par; `None` without a price.
    pub fn usd_cents(&self, amount: u128) -> Option<u128> {
        if !self.is_stable() {
            return None;
        }
        let scale = 10u128.checked_pow(self.decimals as u32)?;
        Some(amount.checked_mul(100)? / scale)
    }
}

/// One chain as configured.
#[derive(Debug, Clone)]
pub struct Chain {
    pub info: &'static ChainInfo,
    pub required_confirmations: u32,
    pub assets: Vec<Asset>,
    /// A `[chains.<id>]` table exists in config (an RPC endpoint is configured).
    pub configured: bool,
}

impl Chain {
    pub fn id(&self) -> &'static str {
        self.info.id
    }

    pub fn asset(&self, symbol: &str) -> Option<&Asset> {
        self.assets.iter().find(|a| a.symbol == symbol)
    }

    pub fn is_evm(&self) -> bool {
        self.info.account_kind == AccountKind::Contract
    }
}

/// Every chain, in registry order.
#[derive(Debug, Clone)]
pub struct Registry {
    pub chains: Vec<Chain>,
}

impl Registry {
    pub fn from_config(cfg: &Config) -> Registry {
        let chains = appliance_chains::CHAINS
            .iter()
            .map(|info| {
                let cc = cfg.chains.get(info.id);
                let mut assets: Vec<Asset> = info
                    .assets()
                    .map(|a| Asset {
                        symbol: a.symbol.to_string(),
                        name: a.name.to_string(),
                        decimals: a.decimals,
                        contract: a.contract.to_string(),
                        is_native: a.is_native,
                    })
                    .collect();
                for o in cc.map(|c| c.assets.as_slice()).unwrap_or(&[]) {
                    let a = Asset {
                        symbol: o.symbol.clone(),
                        name: o.symbol.clone(),
                        decimals: o.decimals,
                        contract: o.contract.clone(),
                        is_native: false,
                    };
                    match assets.iter_mut().find(|x| x.symbol == o.symbol) {
                        Some(x) => {
                            x.contract = a.contract;
                            x.decimals = a.decimals;
                        }
                        None => assets.push(a),
                    }
                }
                Chain {
                    info,
                    required_confirmations: cc
                        .and_then(|c| c.confirmations)
                        .unwrap_or(info.required_confirmations),
                    assets,
                    configured: cc.is_some(),
                }
            })
            .collect();
        Registry { chains }
    }

    pub fn chain(&self, id: &str) -> Option<&Chain> {
        self.chains.iter().find(|c| c.info.id == id)
    }

    /// Asset of a chain; `None` when either is unknown.
    pub fn asset(&self, chain: &str, symbol: &str) -> Option<&Asset> {
        self.chain(chain)?.asset(symbol)
    }

    /// Decimals of an asset (0 for an unknown pair, which stored rows never hold).
    pub fn decimals(&self, chain: &str, symbol: &str) -> u8 {
        self.asset(chain, symbol).map(|a| a.decimals).unwrap_or(0)
    }
}
