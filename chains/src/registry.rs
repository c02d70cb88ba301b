//! The chain registry: every chain the appliance knows, with its assets and defaults.
//!
//! This is data, not logic. Decimals, confirmation counts and token contracts are read from
//! here (and from per-project or config overrides layered on top by the binary), never
//! hard-coded elsewhere. Sources: SPEC.md section 1 convention 8 (USDT/USDC decimals),
//! DECISIONS.md section 9 (required confirmations).

use serde::Serialize;

/// How deposit addresses are held on a chain (SPEC.md section 2, Chain `account_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountKind {
    /// Keyless smart account: CREATE2 forwarder, same address on every EVM chain.
    Contract,
    /// Keypair held by the platform signer.
    Eoa,
}

/// Registry default for a chain's listing status (SPEC.md section 2, Chain `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainStatus {
    Live,
    Paused,
    ComingSoon,
}

impl ChainStatus {
    /// The wire name (`live`, `paused`, `coming_soon`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChainStatus::Live => "live",
            ChainStatus::Paused => "paused",
            ChainStatus::ComingSoon => "coming_soon",
        }
    }

    /// Parses a wire name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "live" => Some(ChainStatus::Live),
            "paused" => Some(ChainStatus::Paused),
            "coming_soon" => Some(ChainStatus::ComingSoon),
            _ => None,
        }
    }
}

/// Address family: decides address format and derivation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Evm,
    Tron,
    Solana,
    Ton,
    Bitcoin,
    Dogecoin,
}

/// One asset on one chain. `decimals` is the on-chain scale: an atomic amount of
/// `10^decimals` is one whole unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssetInfo {
    pub symbol: &'static str,
    pub name: &'static str,
    pub decimals: u8,
    /// Token contract address; empty for the native coin.
    pub contract: &'static str,
    pub is_native: bool,
}

impl AssetInfo {
    /// SPEC.md section 2: `decimals_differ_from_default` flags assets whose scale deviates
    /// from 6 — meaningful for the stablecoins only (USDT and USDC on `bsc`).
    pub fn decimals_differ_from_default(&self) -> bool {
        matches!(self.symbol, "USDT" | "USDC") && self.decimals != 6
    }

    /// Stablecoins are valued at par (one unit = 100 US cents).
    pub fn is_stable(&self) -> bool {
        matches!(self.symbol, "USDT" | "USDC")
    }
}

/// A chain as the registry knows it.
#[derive(Debug, Clone, Copy)]
pub struct ChainInfo {
    /// Chain identifier as used on the wire (`ethereum`, `bsc`, ...).
    pub id: &'static str,
    pub name: &'static str,
    pub network_type: &'static str,
    pub chain_id: u64,
    pub family: Family,
    pub native: AssetInfo,
    pub tokens: &'static [AssetInfo],
    /// DECISIONS.md section 9 defaults.
    pub required_confirmations: u32,
    /// Explorer base, e.g. `https://etherscan.io`; transaction links are `{explorer}/tx/{hash}`.
    pub explorer_url: &'static str,
    pub account_kind: AccountKind,
    pub default_status: ChainStatus,
    pub supports_memo: bool,
}

impl ChainInfo {
    /// Native coin first, then tokens, in registry order.
    pub fn assets(&self) -> impl Iterator<Item = &AssetInfo> {
        std::iter::once(&self.native).chain(self.tokens.iter())
    }

    /// Looks up an asset by symbol (exact, upper case as listed).
    pub fn asset(&self, symbol: &str) -> Option<&AssetInfo> {
        self.assets().find(|a| a.symbol == symbol)
    }

    /// Explorer link for a transaction hash.
    pub fn tx_url(&self, tx_hash: &str) -> String {
        format!("{}/tx/{}", self.explorer_url, tx_hash)
    }
}

const fn native(symbol: &'static str, name: &'static str, decimals: u8) -> AssetInfo {
    AssetInfo {
        symbol,
        name,
        decimals,
        contract: "",
        is_native: true,
    }
}

const fn token(symbol: &'static str, decimals: u8, contract: &'static str) -> AssetInfo {
    let name = match symbol.as_bytes() {
        b"USDT" => "Tether USD",
        b"USDC" => "USD Coin",
        _ => symbol,
    };
    AssetInfo {
        symbol,
        name,
        decimals,
        contract,
        is_native: false,
    }
}

/// What a chain of [`CHAINS`] states; [`listed`] adds what its family decides.
struct ChainSpec {
    id: &'static str,
    name: &'static str,
    network_type: &'static str,
    chain_id: u64,
    family: Family,
    native: AssetInfo,
    tokens: &'static [AssetInfo],
    required_confirmations: u32,
    explorer_url: &'static str,
    default_status: ChainStatus,
}

/// A chain of the registry. EVM chains take contract (forwarder) accounts; the other
/// families keypair accounts held by the signer. Of them all only TON's transfers carry a
/// memo.
const fn listed(c: ChainSpec) -> ChainInfo {
    ChainInfo {
        id: c.id,
        name: c.name,
        network_type: c.network_type,
        chain_id: c.chain_id,
        family: c.family,
        native: c.native,
        tokens: c.tokens,
        required_confirmations: c.required_confirmations,
        explorer_url: c.explorer_url,
        account_kind: match c.family {
            Family::Evm => AccountKind::Contract,
            _ => AccountKind::Eoa,
        },
        default_status: c.default_status,
        supports_memo: matches!(c.family, Family::Ton),
    }
}

/// Every chain identifier of SPEC.md section 2, in listing order.
pub static CHAINS: &[ChainInfo] = &[
    listed(ChainSpec {
        id: "ethereum",
        name: "Ethereum",
        network_type: "ERC20",
        chain_id: 1,
        family: Family::Evm,
        native: native("ETH", "Ether", 18),
        tokens: &[
            token("USDT", 6, "0xdAC17F958D2ee523a2206206994597C13D831ec7"),
            token("USDC", 6, "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"),
        ],
        required_confirmations: 12,
        explorer_url: "https://etherscan.io",
        default_status: ChainStatus::Live,
    }),
    listed(ChainSpec {
        id: "bsc",
        name: "BNB Smart Chain",
        network_type: "BEP20",
        chain_id: 56,
        family: Family::Evm,
        native: native("BNB", "BNB", 18),
        tokens: &[
            token("USDT", 18, "0x55d398326f99059fF775485246999027B3197955"),
            token("USDC", 18, "0x8AC76a51cc950d9822D68b83fE1Ad97B32Cd580d"),
        ],
        required_confirmations: 15,
        explorer_url: "https://bscscan.com",
        default_status: ChainStatus::Live,
    }),
    listed(ChainSpec {
        id: "polygon",
        name: "Polygon PoS",
        network_type: "Polygon",
        chain_id: 137,
        family: Family::Evm,
        native: native("POL", "Polygon Ecosystem Token", 18),
        tokens: &[
            token("USDT", 6, "0xc2132D05D31c914a87C6611C10748AEb04B58e8F"),
            token("USDC", 6, "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"),
        ],
        required_confirmations: 128,
        explorer_url: "https://polygonscan.com",
        default_status: ChainStatus::Live,
    }),
    listed(ChainSpec {
        id: "arbitrum",
        name: "Arbitrum One",
        network_type: "Arbitrum",
        chain_id: 42161,
        family: Family::Evm,
        native: native("ETH", "Ether", 18),
        tokens: &[
            token("USDT", 6, "0xFd086bC7CD5C481DCC9C85ebE478A1C0b69FCbb9"),
            token("USDC", 6, "0xaf88d065e77c8cC2239327C5EDb3A432268e5831"),
        ],
        required_confirmations: 20,
        explorer_url: "https://arbiscan.io",
        default_status: ChainStatus::Live,
    }),
    listed(ChainSpec {
        id: "base",
        name: "Base",
        network_type: "Base",
        chain_id: 8453,
        family: Family::Evm,
        native: native("ETH", "Ether", 18),
        tokens: &[token(
            "USDC",
            6,
            "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        )],
        required_confirmations: 20,
        explorer_url: "https://basescan.org",
        default_status: ChainStatus::Live,
    }),
    listed(ChainSpec {
        id: "avalanche",
        name: "Avalanche C-Chain",
        network_type: "AVAX C-Chain",
        chain_id: 43114,
        family: Family::Evm,
        native: native("AVAX", "Avalanche", 18),
        tokens: &[
            token("USDT", 6, "0x9702230A8Ea53601f5cD2dc00fDBc13d4dF4A8c7"),
            token("USDC", 6, "0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E"),
        ],
        required_confirmations: 12,
        explorer_url: "https://snowtrace.io",
        default_status: ChainStatus::Live,
    }),
    listed(ChainSpec {
        id: "optimism",
        name: "OP Mainnet",
        network_type: "Optimism",
        chain_id: 10,
        family: Family::Evm,
        native: native("ETH", "Ether", 18),
        tokens: &[
            token("USDT", 6, "0x94b008aA00579c1307B0EF2c499aD98a8ce58e58"),
            token("USDC", 6, "0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85"),
        ],
        required_confirmations: 20,
        explorer_url: "https://optimistic.etherscan.io",
        default_status: ChainStatus::Live,
    }),
    listed(ChainSpec {
        id: "linea",
        name: "Linea",
        network_type: "Linea",
        chain_id: 59144,
        family: Family::Evm,
        native: native("ETH", "Ether", 18),
        tokens: &[
            token("USDT", 6, "0xA219439258ca9da29E9Cc4cE5596924745e12B93"),
            token("USDC", 6, "0x176211869cA2b568f2A7D4EE941E073a821EE1ff"),
        ],
        required_confirmations: 20,
        explorer_url: "https://lineascan.build",
        default_status: ChainStatus::Live,
    }),
    listed(ChainSpec {
        id: "scroll",
        name: "Scroll",
        network_type: "Scroll",
        chain_id: 534352,
        family: Family::Evm,
        native: native("ETH", "Ether", 18),
        tokens: &[
            token("USDT", 6, "0xf55BEC9cafDbE8730f096Aa55dad6D22d44099Df"),
            token("USDC", 6, "0x06eFdBFf2a14a7c8E15944D1F4A48F9F95F663A4"),
        ],
        required_confirmations: 20,
        explorer_url: "https://scrollscan.com",
        default_status: ChainStatus::Live,
    }),
    // DECISIONS.md section 9: zkSync uses a different CREATE2 rule; listed until handled.
    listed(ChainSpec {
        id: "zksync",
        name: "zkSync Era",
        network_type: "zkSync",
        chain_id: 324,
        family: Family::Evm,
        native: native("ETH", "Ether", 18),
        tokens: &[
            token("USDT", 6, "0x493257fD37EDB34451f62EDf8D2a0C418852bA4C"),
            token("USDC", 6, "0x1d17CBcF0D6D143135aE902365D2E5e2A16538D4"),
        ],
        required_confirmations: 20,
        explorer_url: "https://explorer.zksync.io",
        default_status: ChainStatus::ComingSoon,
    }),
    listed(ChainSpec {
        id: "tron",
        name: "Tron",
        network_type: "TRC20",
        chain_id: 728126428,
        family: Family::Tron,
        native: native("TRX", "Tron", 6),
        tokens: &[
            token("USDT", 6, "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t"),
            token("USDC", 6, "TEkxiTehnzSmSe2XqrBj4w32RUN966rdz8"),
        ],
        required_confirmations: 19,
        explorer_url: "https://tronscan.org/#",
        default_status: ChainStatus::Paused,
    }),
    listed(ChainSpec {
        id: "solana",
        name: "Solana",
        network_type: "SPL",
        chain_id: 0,
        family: Family::Solana,
        native: native("SOL", "Solana", 9),
        tokens: &[
            token("USDT", 6, "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB"),
            token("USDC", 6, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"),
        ],
        required_confirmations: 32,
        explorer_url: "https://solscan.io",
        default_status: ChainStatus::Paused,
    }),
    listed(ChainSpec {
        id: "ton",
        name: "TON",
        network_type: "Jetton",
        chain_id: 0,
        family: Family::Ton,
        native: native("TON", "Toncoin", 9),
        tokens: &[token(
            "USDT",
            6,
            "EQCxE6mUtQJKFnGfaROTKOt1lZbDiiX1kCixRv7Nw2Id_sDs",
        )],
        required_confirmations: 1,
        explorer_url: "https://tonviewer.com",
        default_status: ChainStatus::Paused,
    }),
    listed(ChainSpec {
        id: "bitcoin",
        name: "Bitcoin",
        network_type: "BTC",
        chain_id: 0,
        family: Family::Bitcoin,
        native: native("BTC", "Bitcoin", 8),
        tokens: &[],
        required_confirmations: 3,
        explorer_url: "https://mempool.space",
        default_status: ChainStatus::Paused,
    }),
    listed(ChainSpec {
        id: "dogecoin",
        name: "Dogecoin",
        network_type: "DOGE",
        chain_id: 0,
        family: Family::Dogecoin,
        native: native("DOGE", "Dogecoin", 8),
        tokens: &[],
        required_confirmations: 40,
        explorer_url: "https://dogechain.info",
        default_status: ChainStatus::Paused,
    }),
];

/// Market rank of every symbol the registry lists (1 = the largest market capitalisation),
/// the order of `GET /v1/coins` after `live` (SPEC.md section 2, Coin catalogue). Data kept
/// by hand with the registry; a symbol missing here sorts after every ranked one.
pub static MARKET_RANK: &[(&str, u16)] = &[
    ("BTC", 1),
    ("ETH", 2),
    ("USDT", 3),
    ("BNB", 4),
    ("SOL", 5),
    ("USDC", 6),
    ("TRX", 7),
    ("DOGE", 8),
    ("TON", 9),
    ("AVAX", 10),
    ("POL", 11),
];

/// The market rank of `symbol` ([`MARKET_RANK`]); `u16::MAX` for a symbol without one.
pub fn market_rank(symbol: &str) -> u16 {
    MARKET_RANK
        .iter()
        .find(|(s, _)| *s == symbol)
        .map(|(_, r)| *r)
        .unwrap_or(u16::MAX)
}

/// Looks up a chain by its wire identifier.
pub fn chain(id: &str) -> Option<&'static ChainInfo> {
    CHAINS.iter().find(|c| c.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stablecoin_decimals_follow_spec_convention_8() {
        for c in CHAINS {
            for a in c.tokens {
                if a.is_stable() {
                    let want = if c.id == "bsc" { 18 } else { 6 };
                    assert_eq!(a.decimals, want, "{} {}", c.id, a.symbol);
                    assert_eq!(a.decimals_differ_from_default(), c.id == "bsc");
                }
            }
        }
    }

    #[test]
    fn every_listed_symbol_has_one_market_rank() {
        for c in CHAINS {
            for a in c.assets() {
                assert!(market_rank(a.symbol) < u16::MAX, "{} has no rank", a.symbol);
            }
        }
        let mut ranks: Vec<u16> = MARKET_RANK.iter().map(|(_, r)| *r).collect();
        ranks.sort();
        ranks.dedup();
        assert_eq!(ranks.len(), MARKET_RANK.len(), "ranks are distinct");
        assert!(market_rank("BTC") < market_rank("ETH"));
        assert_eq!(market_rank("NOPE"), u16::MAX);
    }

    #[test]
    fn every_spec_chain_is_listed_once() {
        let ids = [
            "ethereum",
            "bsc",
            "polygon",
            "arbitrum",
            "base",
            "avalanche",
            "tron",
            "solana",
            "ton",
            "bitcoin",
            "dogecoin",
            "optimism",
            "linea",
            "zksync",
            "scroll",
        ];
        assert_eq!(CHAINS.len(), ids.len());
        for id in ids {
            assert!(chain(id).is_some(), "{id}");
        }
        assert!(chain("Ethereum").is_none());
    }
}
