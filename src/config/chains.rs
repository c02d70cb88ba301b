//! `[chains.<id>]`: a chain's node, confirmations, polling and fee settings, its assets and
//! its DEX.

use super::*;

/// One live chain (DECISIONS.md section 10).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainConfig {
    /// The chain's node. Exactly one of `rpc_url` and `rpc_urls` is set.
    #[serde(default)]
    pub rpc_url: Option<String>,
    /// Several nodes, tried in order: a node that fails or lags the others by more than a
    /// few blocks is skipped and said so (DECISIONS.md section 16). A list, or a
    /// comma-separated string (for the environment).
    #[serde(default, deserialize_with = "url_list")]
    pub rpc_urls: Vec<String>,
    pub confirmations: Option<u32>,
    #[serde(default = "default_poll_ms")]
    pub poll_interval_ms: u64,
    #[serde(default)]
    pub sweep_threshold_usd_cents: Option<u64>,
    #[serde(default)]
    pub assets: Vec<AssetConfig>,
    /// A transaction of the master wallet unmined this long is replaced with the same
    /// nonce and higher fees.
    #[serde(default = "default_replace_ms")]
    pub replace_after_ms: u64,
    /// Block the watcher starts from on its first run (default: the node's head then).
    #[serde(default)]
    pub start_block: Option<u64>,
    /// `[chains.<id>.dex]`: the DEX conversions swap on (DECISIONS.md section 14). Absent:
    /// the chain's conversion rule is `supported:false` (`no_dex_configured`).
    #[serde(default)]
    pub dex: Option<DexConfig>,
}

/// `kind` of `[chains.<id>.dex]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DexKindConfig {
    /// A Uniswap-V2-compatible Router02 (`getAmountsOut`, `swapExact*`).
    UniswapV2,
    /// Uniswap V3: QuoterV2 and SwapRouter, one fee tier.
    UniswapV3,
}

/// `[chains.<id>.dex]` (DECISIONS.md section 14). Addresses are `0x` + 40 hex digits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DexConfig {
    pub kind: DexKindConfig,
    /// V2: the Router02. V3: the SwapRouter.
    pub router: String,
    /// V2: the pair factory (required for `uniswap_v2`; recorded, quotes go through the
    /// router).
    #[serde(default)]
    pub factory: Option<String>,
    /// V3: the QuoterV2 (required for `uniswap_v3`).
    #[serde(default)]
    pub quoter: Option<String>,
    /// V3: the pool fee tier (100, 500, 3000 or 10000; default 3000).
    #[serde(default)]
    pub fee_tier: Option<u32>,
    /// The DEX's wrapped native token (WETH9, WBNB, ...).
    pub weth: String,
}

impl DexConfig {
    /// The DEX as the chain adapter uses it; `Err` names the key at fault.
    pub fn dex(&self, id: &str) -> Result<appliance_chains::evm::dex::Dex, String> {
        use appliance_chains::evm::dex::{Dex, DexKind};
        let addr = |key: &str, v: &str| {
            appliance_chains::address::parse_evm_address(v)
                .map(appliance_chains::evm::Address::from)
                .map_err(|e| format!("[chains.{id}.dex] {key}: {e}"))
        };
        let router = addr("router", &self.router)?;
        let weth = addr("weth", &self.weth)?;
        match self.kind {
            DexKindConfig::UniswapV2 => {
                let f = self
                    .factory
                    .as_deref()
                    .ok_or_else(|| format!("[chains.{id}.dex] kind uniswap_v2 needs factory"))?;
                addr("factory", f)?;
                if self.quoter.is_some() || self.fee_tier.is_some() {
                    return Err(format!(
                        "[chains.{id}.dex] quoter and fee_tier are for kind uniswap_v3"
                    ));
                }
                Ok(Dex {
                    kind: DexKind::UniswapV2,
                    router,
                    quoter: None,
                    fee_tier: 0,
                    weth,
                })
            }
            DexKindConfig::UniswapV3 => {
                let q = self
                    .quoter
                    .as_deref()
                    .ok_or_else(|| format!("[chains.{id}.dex] kind uniswap_v3 needs quoter"))?;
                let quoter = addr("quoter", q)?;
                let fee_tier = self.fee_tier.unwrap_or(3000);
                if ![100, 500, 3000, 10_000].contains(&fee_tier) {
                    return Err(format!(
                        "[chains.{id}.dex] fee_tier {fee_tier}: use 100, 500, 3000 or 10000"
                    ));
                }
                Ok(Dex {
                    kind: DexKind::UniswapV3,
                    router,
                    quoter: Some(quoter),
                    fee_tier,
                    weth,
                })
            }
        }
    }
}

impl ChainConfig {
    /// The configured node URLs in order (`rpc_url` alone, or `rpc_urls`).
    pub fn urls(&self) -> Vec<String> {
        match &self.rpc_url {
            Some(u) => vec![u.clone()],
            None => self.rpc_urls.clone(),
        }
    }

    /// The node URL rules: exactly one of `rpc_url` and `rpc_urls`, at most
    /// [`MAX_RPC_URLS`] URLs, each non-empty, `http://` or `https://`, none twice. Messages
    /// show URLs redacted to scheme and host (they carry account keys).
    pub fn check_urls(&self, id: &str) -> Result<(), String> {
        if self.rpc_url.is_some() && !self.rpc_urls.is_empty() {
            return Err(format!(
                "[chains.{id}] sets both rpc_url and rpc_urls; use one"
            ));
        }
        let urls = self.urls();
        if urls.is_empty() {
            return Err(format!(
                "[chains.{id}] needs rpc_url (one node) or rpc_urls (several, in order)"
            ));
        }
        if urls.len() > MAX_RPC_URLS {
            return Err(format!(
                "[chains.{id}] rpc_urls lists {} nodes; at most {MAX_RPC_URLS}",
                urls.len()
            ));
        }
        let key = if self.rpc_url.is_some() {
            "rpc_url"
        } else {
            "rpc_urls"
        };
        for (i, u) in urls.iter().enumerate() {
            let u = u.trim();
            if u.is_empty() {
                return Err(format!("[chains.{id}] {key} is empty"));
            }
            let shown = appliance_chains::redact::redact_url(u);
            let lower = u.to_ascii_lowercase();
            if !(lower.starts_with("http://") || lower.starts_with("https://"))
                || u.parse::<reqwest13::Url>().is_err()
            {
                return Err(format!(
                    "[chains.{id}] {key}: {shown} is not an http:// or https:// URL"
                ));
            }
            if urls[..i].iter().any(|x| x.trim() == u) {
                return Err(format!("[chains.{id}] rpc_urls lists {shown} twice"));
            }
        }
        Ok(())
    }
}

/// Most nodes one chain may list in `rpc_urls`.
pub const MAX_RPC_URLS: usize = 8;

/// A list of strings, or one comma-separated string (environment variables).
pub(super) fn url_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrString {
        List(Vec<String>),
        Text(String),
    }
    Ok(match ListOrString::deserialize(d)? {
        ListOrString::List(v) => v,
        ListOrString::Text(s) => s
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect(),
    })
}

pub(super) fn default_poll_ms() -> u64 {
    1000
}

pub(super) fn default_replace_ms() -> u64 {
    120_000
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssetConfig {
    pub symbol: String,
    pub contract: String,
    pub decimals: u8,
}
