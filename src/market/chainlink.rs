//! The fallback market source: Chainlink AggregatorV3 feeds read with `eth_call` through the
//! `ethereum` chain's node (DECISIONS.md section 11).
//!
//! A feed answers `decimals()` (uint8) and `latestRoundData()` (roundId uint80, answer
//! int256, startedAt uint256, updatedAt uint256, answeredInRound uint80). The price is
//! `answer / 10^decimals`; a zero or negative answer, an `updatedAt` of zero, in the future
//! or older than `max_age_seconds` is refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use appliance_chains::client::ChainClient;
use appliance_chains::evm::{Address, Bytes};
use rust_decimal::Decimal;

use super::PriceError;

/// `decimals()`.
const DECIMALS: [u8; 4] = [0x31, 0x3c, 0xe5, 0x67];
/// `latestRoundData()`.
const LATEST_ROUND_DATA: [u8; 4] = [0xfe, 0xaf, 0x96, 0x8c];
/// An `updatedAt` this far ahead of the local clock is refused (clock skew allowance).
const FUTURE_SKEW_S: u64 = 300;

/// Mainnet feeds (`[market.chainlink_feeds]` overrides and adds): ETH/USD, BTC/USD, BNB/USD.
pub const DEFAULT_FEEDS: &[(&str, &str)] = &[
    ("ETH", "0x5f4ec3df9cbd43714fe2740f5e3616155c5b8419"),
    ("BTC", "0xf4030086522a5beea4988f8ca5b36dbc97bee88c"),
    ("BNB", "0x14e613ac84a31f709eadbdf89c6cc390fdc9540a"),
];

/// Feeds of one node.
#[derive(Debug, Clone)]
pub struct Chainlink {
    client: Arc<dyn ChainClient>,
    feeds: BTreeMap<String, Address>,
}

impl Chainlink {
    /// Feeds read through `client`: the defaults with `overrides` (symbol to address, any
    /// case) on top. Addresses are checked by the configuration already; a bad one is
    /// left out.
    pub fn new(client: Arc<dyn ChainClient>, overrides: &BTreeMap<String, String>) -> Chainlink {
        let mut feeds = BTreeMap::new();
        let given = DEFAULT_FEEDS
            .iter()
            .map(|(s, a)| (s.to_string(), a.to_string()))
            .chain(
                overrides
                    .iter()
                    .map(|(s, a)| (s.to_ascii_uppercase(), a.clone())),
            );
        for (sym, addr) in given {
            if let Ok(a) = appliance_chains::address::parse_evm_address(&addr) {
                feeds.insert(sym, Address::from(a));
            }
        }
        Chainlink { client, feeds }
    }

    /// Whether a feed is configured for `symbol`.
    pub fn has(&self, symbol: &str) -> bool {
        self.feeds.contains_key(symbol)
    }

    /// The symbols with a feed.
    pub fn symbols(&self) -> impl Iterator<Item = &str> {
        self.feeds.keys().map(String::as_str)
    }

    /// The feed's latest answer for `symbol` and its `updatedAt` (Unix seconds), refused
    /// when older than `max_age_s` at `now` (Unix seconds).
    pub async fn fetch(
        &self,
        symbol: &str,
        now: u64,
        max_age_s: u64,
    ) -> Result<(Decimal, u64), PriceError> {
        let feed = *self
            .feeds
            .get(symbol)
            .ok_or_else(|| PriceError::NoFeed(symbol.to_string()))?;
        let call = |sel: [u8; 4]| {
            let c = self.client.clone();
            async move {
                c.call(feed, Bytes::from(sel.to_vec()))
                    .await
                    .map_err(|e| PriceError::Transport(e.to_string()))
            }
        };
        let d = call(DECIMALS).await?;
        let decimals = parse_decimals(&d)?;
        let round = call(LATEST_ROUND_DATA).await?;
        parse_round(&round, decimals, now, max_age_s)
    }
}

/// The uint8 answer of `decimals()`; a feed scale above 28 cannot be held exactly.
pub fn parse_decimals(out: &[u8]) -> Result<u32, PriceError> {
    if out.len() < 32 || out[..31].iter().any(|b| *b != 0) || out[31] > 28 {
        return Err(PriceError::Malformed(
            "decimals() answer out of range".into(),
        ));
    }
    Ok(out[31] as u32)
}

/// The price and `updatedAt` of a `latestRoundData()` answer.
pub fn parse_round(
    out: &[u8],
    decimals: u32,
    now: u64,
    max_age_s: u64,
) -> Result<(Decimal, u64), PriceError> {
    if out.len() < 160 {
        return Err(PriceError::Malformed(
            "latestRoundData() answer too short".into(),
        ));
    }
    let answer = &out[32..64];
    if answer[0] & 0x80 != 0 {
        return Err(PriceError::Refused(
            "negative".into(),
            "a price must be above zero",
        ));
    }
    // Decimal holds 96 bits of mantissa.
    if answer[..20].iter().any(|b| *b != 0) {
        return Err(PriceError::Refused(
            "too large".into(),
            "the answer does not fit a decimal",
        ));
    }
    let mut m = [0u8; 16];
    m[4..].copy_from_slice(&answer[20..]);
    let mantissa = i128::from_be_bytes(m);
    if mantissa == 0 {
        return Err(PriceError::Refused(
            "0".into(),
            "a price must be above zero",
        ));
    }
    let updated = &out[96..128];
    if updated[..24].iter().any(|b| *b != 0) {
        return Err(PriceError::Malformed("updatedAt out of range".into()));
    }
    let mut u = [0u8; 8];
    u.copy_from_slice(&updated[24..]);
    let updated_at = u64::from_be_bytes(u);
    if updated_at == 0 {
        return Err(PriceError::Malformed("the round has no updatedAt".into()));
    }
    if updated_at > now.saturating_add(FUTURE_SKEW_S) {
        return Err(PriceError::Malformed("updatedAt is in the future".into()));
    }
    let age = now.saturating_sub(updated_at);
    if age > max_age_s {
        return Err(PriceError::Stale(age));
    }
    let price = Decimal::from_i128_with_scale(mantissa, decimals);
    Ok((price, updated_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(v: u128) -> [u8; 32] {
        let mut w = [0u8; 32];
        w[16..].copy_from_slice(&v.to_be_bytes());
        w
    }

    fn round(answer: [u8; 32], updated_at: u64) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&word(7));
        out.extend_from_slice(&answer);
        out.extend_from_slice(&word(updated_at as u128));
        out.extend_from_slice(&word(updated_at as u128));
        out.extend_from_slice(&word(7));
        out
    }

    #[test]
    fn reads_a_fresh_round() {
        let now = 1_800_000_000;
        let (p, at) = parse_round(&round(word(300_012_345_678), now - 30), 8, now, 3600).unwrap();
        assert_eq!(p.to_string(), "3000.12345678");
        assert_eq!(at, now - 30);
    }

    #[test]
    fn refuses_stale_zero_negative_and_future_rounds() {
        let now = 1_800_000_000;
        let e = parse_round(&round(word(3), now - 3601), 8, now, 3600).unwrap_err();
        assert!(matches!(e, PriceError::Stale(3601)), "{e:?}");
        let e = parse_round(&round(word(0), now), 8, now, 3600).unwrap_err();
        assert!(matches!(e, PriceError::Refused(..)), "{e:?}");
        let e = parse_round(&round([0xff; 32], now), 8, now, 3600).unwrap_err();
        assert!(matches!(e, PriceError::Refused(..)), "{e:?}");
        let e = parse_round(&round(word(5), 0), 8, now, 3600).unwrap_err();
        assert!(matches!(e, PriceError::Malformed(_)), "{e:?}");
        let e = parse_round(&round(word(5), now + 3600), 8, now, 3600).unwrap_err();
        assert!(matches!(e, PriceError::Malformed(_)), "{e:?}");
        let e = parse_round(&[0u8; 64], 8, now, 3600).unwrap_err();
        assert!(matches!(e, PriceError::Malformed(_)), "{e:?}");
        let mut huge = [0u8; 32];
        huge[5] = 1;
        let e = parse_round(&round(huge, now), 8, now, 3600).unwrap_err();
        assert!(matches!(e, PriceError::Refused(..)), "{e:?}");
    }

    #[test]
    fn decimals_are_bounded() {
        assert_eq!(parse_decimals(&word(8)).unwrap(), 8);
        assert!(parse_decimals(&word(29)).is_err());
        assert!(parse_decimals(&word(1 << 70)).is_err());
        assert!(parse_decimals(&[8]).is_err());
    }
}
