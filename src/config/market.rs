//! `[market]`: where market prices come from, how long they live, and what stands in
//! when a source fails.

use super::*;

/// The market price source (`provider`) of `[market]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MarketProvider {
    /// Kraken's public ticker API (`GET {base_url}/0/public/Ticker?pair=...`, no key).
    #[default]
    Kraken,
}

/// The fallback source of `[market]` (`fallback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MarketFallback {
    /// Chainlink AggregatorV3 feeds read with `eth_call` through `[chains.ethereum]`.
    #[default]
    Chainlink,
    /// No fallback: a failed provider read leaves the symbol without a fresh price.
    None,
}

/// `[market]` (DECISIONS.md section 11).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MarketConfig {
    pub provider: MarketProvider,
    /// Provider base URL (default Kraken's public API, `https://api.kraken.com`).
    pub base_url: String,
    /// A price older than this is served as it is and refreshed in the background (default 60).
    pub ttl_seconds: u64,
    /// A price older than this is never served, never prices a payout or a sweep and never
    /// locks an invoice rate (default 3600).
    pub max_age_seconds: u64,
    pub fallback: MarketFallback,
    /// Chainlink feed (AggregatorV3 address on the `ethereum` chain) per symbol; merged over
    /// the mainnet defaults for ETH, BTC and BNB.
    pub chainlink_feeds: BTreeMap<String, String>,
    /// Provider pair per symbol (e.g. `ETH = "XETHZUSD"`); merged over the built-in names.
    pub pairs: BTreeMap<String, String>,
    /// Longest wait for one upstream answer, milliseconds (default 5000).
    pub timeout_ms: u64,
}

/// Kraken's public REST API.
pub const KRAKEN_BASE_URL: &str = "https://api.kraken.com";

impl Default for MarketConfig {
    fn default() -> Self {
        MarketConfig {
            provider: MarketProvider::Kraken,
            base_url: KRAKEN_BASE_URL.into(),
            ttl_seconds: 60,
            max_age_seconds: 3600,
            fallback: MarketFallback::Chainlink,
            chainlink_feeds: BTreeMap::new(),
            pairs: BTreeMap::new(),
            timeout_ms: 5000,
        }
    }
}

impl MarketConfig {
    /// Refuses values the price cache cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err("market.base_url must be an http:// or https:// URL".into());
        }
        if !(1..=86_400).contains(&self.ttl_seconds) {
            return Err("market.ttl_seconds must be 1 to 86400".into());
        }
        if !(self.ttl_seconds..=7 * 86_400).contains(&self.max_age_seconds) {
            return Err("market.max_age_seconds must be from market.ttl_seconds to 604800".into());
        }
        if !(100..=60_000).contains(&self.timeout_ms) {
            return Err("market.timeout_ms must be 100 to 60000".into());
        }
        for (sym, feed) in &self.chainlink_feeds {
            if appliance_chains::address::parse_evm_address(feed).is_err() {
                return Err(format!(
                    "market.chainlink_feeds.{sym}: {feed:?} is not an EVM address"
                ));
            }
        }
        for (sym, pair) in &self.pairs {
            if pair.is_empty()
                || pair.len() > 32
                || !pair.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.')
            {
                return Err(format!("market.pairs.{sym}: {pair:?} is not a pair name"));
            }
        }
        Ok(())
    }
}
