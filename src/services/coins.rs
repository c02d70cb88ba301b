//! The coin catalogue, `GET /v1/coins` (SPEC.md section 2, Coin catalogue; DECISIONS.md
//! sections 3 and 11).
//!
//! The catalogue is the whole registry in its mainnet view: names, contracts and decimals
//! come from `appliance_chains::CHAINS` (never a local node's override), so it reads the
//! same whichever mode the key is in. What is switched on comes from the project's view of
//! each chain ([`effective`]): a coin is `live` when its chain is listed for the project
//! and `live`, and the coin takes deposits or payouts there. Coins switched off are
//! listed with `live:false`.
//!
//! Order: live first, then native coins ahead of tokens, then market rank
//! (`appliance_chains::market_rank`), then registry order.

use std::collections::BTreeMap;

use appliance_chains::{market_rank, ChainStatus};
use appliance_storage::records::Project;
use serde_json::{json, Value};

use crate::registry::Registry;
use crate::services::chains::effective;

/// `group_by` of `GET /v1/coins`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    /// One entry per symbol (default): the symbol's first chain in catalogue order stands
    /// for it; `live`, `deposits_enabled` and `payouts_enabled` are true when true on any
    /// of its chains.
    Symbol,
    /// One entry per (chain, coin).
    Contract,
}

/// A parsed `GET /v1/coins` query.
#[derive(Debug, Clone)]
pub struct CoinQuery {
    /// `status=live`: live coins only.
    pub live_only: bool,
    /// `chain=`: coins of this chain only (a registry chain id).
    pub chain: Option<String>,
    pub group_by: GroupBy,
    /// 1-1000 (SPEC.md section 8).
    pub limit: usize,
}

/// One coin on one chain.
#[derive(Debug, Clone)]
pub struct Coin {
    pub chain: &'static str,
    pub chain_name: &'static str,
    /// Index of the chain in the registry (ties of the order).
    pub chain_order: usize,
    pub symbol: &'static str,
    pub name: &'static str,
    pub contract: &'static str,
    pub decimals: u8,
    pub is_native: bool,
    pub deposits_enabled: bool,
    pub payouts_enabled: bool,
    pub decimals_differ_from_default: bool,
    pub live: bool,
    pub chain_live: bool,
    pub rank: u16,
}

/// Every coin of every chain of the registry, as `project` sees it, in catalogue order.
pub fn all_coins(reg: &Registry, project: &Project) -> Vec<Coin> {
    let mut out = Vec::new();
    for (i, info) in appliance_chains::CHAINS.iter().enumerate() {
        let Some(chain) = reg.chain(info.id) else {
            continue;
        };
        let eff = effective(chain, project);
        let chain_live = eff.listed && eff.status == ChainStatus::Live;
        for a in info.assets() {
            let ea = eff.asset(a.symbol);
            let archived = ea.is_some_and(|x| x.archived);
            let deposits =
                eff.deposits_enabled && ea.is_some_and(|x| x.deposits_enabled) && !archived;
            let payouts = eff.payouts_enabled && ea.is_some_and(|x| x.payouts_enabled) && !archived;
            out.push(Coin {
                chain: info.id,
                chain_name: info.name,
                chain_order: i,
                symbol: a.symbol,
                name: a.name,
                contract: a.contract,
                decimals: a.decimals,
                is_native: a.is_native,
                deposits_enabled: deposits,
                payouts_enabled: payouts,
                decimals_differ_from_default: a.decimals_differ_from_default(),
                live: chain_live && (deposits || payouts),
                chain_live,
                rank: market_rank(a.symbol),
            });
        }
    }
    sort(&mut out);
    out
}

/// Catalogue order: live first, natives ahead of tokens, market rank, registry order.
pub fn sort(coins: &mut [Coin]) {
    coins.sort_by_key(|c| (!c.live, !c.is_native, c.rank, c.symbol, c.chain_order));
}

/// SPEC.md's `totals`: over the whole catalogue (every chain and coin, before any filter
/// and the limit). `coins`/`live` count (chain, coin) pairs; `symbols` distinct symbols;
/// `chains`/`chains_live` chains (live: listed for the project and `live`).
pub fn totals(coins: &[Coin]) -> Value {
    let mut by_chain: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut chains_live: BTreeMap<&str, bool> = BTreeMap::new();
    let mut symbols: Vec<&str> = Vec::new();
    for c in coins {
        let e = by_chain.entry(c.chain).or_default();
        e.0 += 1;
        e.1 += c.live as u64;
        chains_live.insert(c.chain, c.chain_live);
        if !symbols.contains(&c.symbol) {
            symbols.push(c.symbol);
        }
    }
    json!({
        "coins": coins.len(),
        "live": coins.iter().filter(|c| c.live).count(),
        "symbols": symbols.len(),
        "chains": by_chain.len(),
        "chains_live": chains_live.values().filter(|l| **l).count(),
        "by_chain": by_chain
            .iter()
            .map(|(k, (n, l))| (k.to_string(), json!({"coins": n, "live": l})))
            .collect::<serde_json::Map<String, Value>>(),
    })
}

/// `logo_url` of a symbol under `base` (`{public_base_url}`, no trailing `/`).
pub fn logo_url(base: &str, symbol: &str) -> String {
    format!("{base}/assets/coins/{symbol}.svg")
}

/// The `coin_list` answer of `q` for `project`; logos under `base`.
pub fn catalogue(reg: &Registry, project: &Project, q: &CoinQuery, base: &str) -> Value {
    let coins = all_coins(reg, project);
    let totals = totals(&coins);
    // How many chains carry each symbol (the `chains` of an entry, whatever the grouping).
    let mut chains_of: BTreeMap<&str, u64> = BTreeMap::new();
    for c in &coins {
        *chains_of.entry(c.symbol).or_default() += 1;
    }
    let in_scope: Vec<&Coin> = coins
        .iter()
        .filter(|c| q.chain.as_deref().is_none_or(|ch| c.chain == ch))
        .collect();
    // Group: coins are in catalogue order, so a group's first member is its best.
    let mut entries: Vec<(Coin, bool, bool, bool)> = Vec::new();
    for c in in_scope {
        let existing = match q.group_by {
            GroupBy::Symbol => entries.iter_mut().find(|(e, ..)| e.symbol == c.symbol),
            GroupBy::Contract => None,
        };
        match existing {
            Some((_, live, dep, pay)) => {
                *live |= c.live;
                *dep |= c.deposits_enabled;
                *pay |= c.payouts_enabled;
            }
            None => entries.push((c.clone(), c.live, c.deposits_enabled, c.payouts_enabled)),
        }
    }
    let data: Vec<Value> = entries
        .iter()
        .filter(|(_, live, ..)| !q.live_only || *live)
        .take(q.limit)
        .map(|(c, live, dep, pay)| {
            json!({
                "chain": c.chain,
                "chain_name": c.chain_name,
                "chains": chains_of.get(c.symbol).copied().unwrap_or(1),
                "symbol": c.symbol,
                "name": c.name,
                "contract": c.contract,
                "decimals": c.decimals,
                "is_native": c.is_native,
                "logo_url": logo_url(base, c.symbol),
                "deposits_enabled": dep,
                "payouts_enabled": pay,
                "decimals_differ_from_default": c.decimals_differ_from_default,
                "live": live,
                "market_rank": c.rank,
            })
        })
        .collect();
    json!({
        "object": "coin_list",
        "totals": totals,
        "returned": data.len(),
        "data": data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coin(symbol: &'static str, native: bool, live: bool, order: usize) -> Coin {
        Coin {
            chain: "x",
            chain_name: "X",
            chain_order: order,
            symbol,
            name: symbol,
            contract: "",
            decimals: 6,
            is_native: native,
            deposits_enabled: live,
            payouts_enabled: live,
            decimals_differ_from_default: false,
            live,
            chain_live: live,
            rank: market_rank(symbol),
        }
    }

    #[test]
    fn order_is_live_then_natives_then_rank() {
        let mut v = vec![
            coin("USDT", false, true, 0),
            coin("BTC", true, false, 9),
            coin("POL", true, true, 2),
            coin("ETH", true, true, 3),
            coin("USDC", false, true, 0),
            coin("ETH", true, true, 1),
        ];
        sort(&mut v);
        let got: Vec<(&str, usize)> = v.iter().map(|c| (c.symbol, c.chain_order)).collect();
        assert_eq!(
            got,
            vec![
                ("ETH", 1),
                ("ETH", 3),
                ("POL", 2),
                ("USDT", 0),
                ("USDC", 0),
                ("BTC", 9)
            ]
        );
    }
}
