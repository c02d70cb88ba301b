//! Conversions (SPEC.md sections 2, 3 and 4, Conversions; DECISIONS.md section 14): rules,
//! quotes, manual conversions, batches and their settlement.
//!
//! Ledger (per row; the customer is nil for the project's own funds):
//!
//! * planning locks the row's `amount_in`: `available` -> `locked` of `from_asset`;
//! * settlement (the swap has the chain's confirmations) moves the treasury between assets
//!   at the executed amounts: `locked` of `from_asset` -> `treasury` (the coins left the
//!   master wallet) and `treasury` -> `available` of `to_asset` (the coins the swap paid
//!   in). Each row's `amount_out` is its share of the batch's output pro rata to
//!   `amount_in`, the rounding remainder to the last row; both legs balance per asset;
//! * failure returns the locked amount to `available`: the money stays in its arrival coin.
//!
//! A batch is `approving` (an ERC-20 input whose router allowance is short) -> `swapping`
//! -> `settled` | `failed`. Its chain steps are the chain worker's send sagas
//! (`workers/chain/convert.rs`); this module holds every state change.

use std::collections::BTreeMap;
use std::sync::Arc;

use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;

use appliance_chains::evm::dex::{Coin, DexKind};
use appliance_chains::evm::U256;
use appliance_chains::format_decimal;
use appliance_storage::index::{self, IndexTag};
use appliance_storage::ledger::{Account, AccountKind, JournalEntry, Posting};
use appliance_storage::records::{
    BatchStatus, Conversion, ConversionBatch, ConversionKind, ConversionRule, ConversionStatus,
    Mode,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::market::Market;
use crate::registry::{Chain, Registry};
use crate::services::chains::{self, ChainError};
use crate::services::error::{fault_from, Fault, Invalid};
use crate::services::types::{Amount, AssetSymbol, ChainId};
use crate::services::{emit, Scope};
use crate::views::ts;

/// Swap attempts of a batch: a reverted swap is retried with a fresh quote until this many
/// were made, then the batch fails (DECISIONS.md section 14).
pub const MAX_ATTEMPTS: u32 = 3;

/// Default `slippage_bps` of a quote and a manual conversion (DECISIONS.md section 14).
pub const DEFAULT_SLIPPAGE_BPS: u32 = 50;

/// Highest `slippage_bps` accepted (50%).
pub const MAX_SLIPPAGE_BPS: u32 = 5_000;

/// Most symbols in a rule's `keep_assets`.
pub const MAX_KEEP_ASSETS: usize = 64;

/// Why a conversion request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// No such conversion in the project: 404 `not_found`.
    #[error("No such conversion.")]
    NotFound,
    /// No such batch in the project: 404 `not_found`.
    #[error("No such conversion batch.")]
    BatchNotFound,
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The chain has no DEX (or is not an EVM chain): 422 `conversion_unsupported_chain`.
    #[error("Conversions are not supported on {chain}: {reason}.")]
    UnsupportedChain { chain: String, reason: String },
    /// `target_asset` is not a coin of the chain: 400 `invalid_target`.
    #[error("target_asset {target:?} is not a coin listed on {chain}.")]
    InvalidTarget { target: String, chain: String },
    /// A `keep_assets` entry is not a coin of the chain: 400 `invalid_keep_asset`.
    #[error("keep_assets entry {asset:?} is not a coin listed on {chain}.")]
    InvalidKeepAsset { asset: String, chain: String },
    /// A test-mode project asked for an on-chain conversion: 422 `conversion_test_mode`.
    #[error(
        "Conversions are not executed in test mode; rules and quotes work on the simulated chain."
    )]
    TestMode,
    /// The DEX or its node cannot quote now: 503 `conversion_unavailable`.
    #[error("The DEX on {chain} cannot quote now; retry later.")]
    Unavailable { chain: String },
    /// The treasury (free of everything in flight) or the customers' balances lack the
    /// amount: 402 `insufficient_funds`. Atomic units of `asset`.
    #[error(
        "Insufficient funds: {} {asset} can be converted now ({available} atomic), requested {} {asset} ({requested} atomic).",
        format_decimal(*.available, *.decimals),
        format_decimal(*.requested, *.decimals)
    )]
    InsufficientFunds {
        available: u128,
        requested: u128,
        asset: String,
        decimals: u8,
    },
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(ConversionError);

// ---------------------------------------------------------------------------------------
// Rules

/// Whether conversions run on `chain` for a project in `mode`: `Err(reason)` names why not
/// (`no_dex_configured`). Test projects convert on the simulated chain of every EVM chain
/// (quotes from the test prices); live projects need `[chains.<id>.dex]`.
pub fn support(chain: &Chain, mode: Mode) -> Result<(), &'static str> {
    if !chain.is_evm() {
        return Err("no_dex_configured");
    }
    match mode {
        Mode::Test => Ok(()),
        Mode::Live if chain.dex.is_some() => Ok(()),
        Mode::Live => Err("no_dex_configured"),
    }
}

/// A chain's coins as conversion targets: stablecoins first, then every other coin, each in
/// registry order (SPEC.md section 2, Conversion rule).
fn targets(chain: &Chain) -> Vec<Value> {
    let mut v: Vec<&crate::registry::Asset> = chain.assets.iter().collect();
    v.sort_by_key(|a| !a.is_stable());
    v.into_iter()
        .map(|a| {
            json!({
                "symbol": a.symbol,
                "stable": a.is_stable(),
                "is_native": a.is_native,
                "contract": a.contract,
            })
        })
        .collect()
}

/// The unique key of a project's rule of `chain`.
fn rule_key(project: Uuid, chain: &str) -> Vec<u8> {
    index::unique(IndexTag::UniqueConversionRule, project, &[chain.as_bytes()])
}

/// The stored rule of `chain`, if any.
pub fn stored_rule(
    r: &impl ReadOps,
    project: Uuid,
    chain: &str,
) -> Result<Option<ConversionRule>, StoreError> {
    match r.unique_get(&rule_key(project, chain))? {
        Some(id) => r.get_in::<ConversionRule>(project, id),
        None => Ok(None),
    }
}

/// One `conversion_rule` object: the stored rule, or the default (off, the chain's first
/// stablecoin as target) when none was set.
pub fn rule_json(chain: &Chain, mode: Mode, rule: Option<&ConversionRule>) -> Value {
    let support = support(chain, mode);
    let default_target = chain
        .assets
        .iter()
        .find(|a| a.is_stable())
        .map(|a| a.symbol.clone());
    json!({
        "object": "conversion_rule",
        "chain": chain.id(),
        "name": chain.info.name,
        "supported": support.is_ok(),
        "unsupported_reason": support.err(),
        "enabled": rule.is_some_and(|r| r.enabled) && support.is_ok(),
        "target_asset": rule.map(|r| r.target_asset.clone()).or(default_target),
        "keep_assets": rule.map(|r| r.keep_assets.clone()).unwrap_or_default(),
        "targets": targets(chain),
        "updated_at": rule.map(|r| ts(r.updated_at)),
    })
}

/// `GET /v1/conversion/rules`: one rule per chain the project lists, in registry order.
pub fn rules(r: &impl ReadOps, s: &Scope) -> Result<Value, StoreError> {
    let mut data = Vec::new();
    for c in &s.reg.chains {
        let eff = chains::effective(c, &s.project);
        if !eff.listed {
            continue;
        }
        let rule = stored_rule(r, s.project_id(), c.id())?;
        data.push(rule_json(c, s.project.mode, rule.as_ref()));
    }
    Ok(json!({"object": "list", "data": data, "has_more": false, "next_cursor": null}))
}

/// A parsed `PUT /v1/conversion/rules/{chain}` body.
pub struct RuleUpdate {
    pub enabled: bool,
    pub target_asset: String,
    pub keep_assets: Vec<String>,
}

/// Sets a project's rule of `chain` (SPEC.md section 4, Conversions): it applies to the
/// next payment; queued rows keep the target they were written with. Switching a rule off
/// is always accepted; switching it on where conversions are not supported is 422
/// `conversion_unsupported_chain`. Errors: 400 `invalid_target`, `invalid_keep_asset`.
pub fn put_rule(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    chain: &ChainId,
    u: RuleUpdate,
) -> Result<Value, ConversionError> {
    let eff = chains::resolve(&s.reg, &s.project, chain, "chain")?;
    let c = eff.chain;
    if u.enabled {
        if let Err(reason) = support(c, s.project.mode) {
            return Err(ConversionError::UnsupportedChain {
                chain: chain.to_string(),
                reason: reason.into(),
            });
        }
    }
    if c.asset(&u.target_asset).is_none() {
        return Err(ConversionError::InvalidTarget {
            target: u.target_asset,
            chain: chain.to_string(),
        });
    }
    let mut keep: Vec<String> = Vec::new();
    for k in u.keep_assets {
        if c.asset(&k).is_none() {
            return Err(ConversionError::InvalidKeepAsset {
                asset: k,
                chain: chain.to_string(),
            });
        }
        if !keep.contains(&k) {
            keep.push(k);
        }
    }
    let p = s.project_id();
    let now = ctx.now_us();
    let rule = match stored_rule(ctx, p, chain)? {
        Some(mut r) => {
            r.enabled = u.enabled;
            r.target_asset = u.target_asset;
            r.keep_assets = keep;
            r.updated_at = now;
            r
        }
        None => {
            let r = ConversionRule {
                id: appliance_storage::sources::new_id(),
                project_id: p,
                chain: chain.to_string(),
                enabled: u.enabled,
                target_asset: u.target_asset,
                keep_assets: keep,
                updated_at: now,
            };
            ctx.unique_put(&rule_key(p, chain), r.id)?;
            r
        }
    };
    ctx.put(&rule)?;
    Ok(rule_json(c, s.project.mode, Some(&rule)))
}

// ---------------------------------------------------------------------------------------
// Quotes

/// A parsed `POST /v1/conversions/quote` or `POST /v1/conversions` body.
#[derive(Debug, Clone)]
pub struct ConversionRequest {
    pub chain: ChainId,
    pub from_asset: AssetSymbol,
    pub to_asset: AssetSymbol,
    pub amount: Amount,
    pub slippage_bps: u32,
}

/// The coins of a request, checked: the chain is listed, both assets are its coins and
/// differ. Returns (from, to).
pub fn resolve_pair<'a>(
    reg: &'a Registry,
    s: &Scope,
    req: &ConversionRequest,
) -> Result<(&'a Chain, crate::registry::Asset, crate::registry::Asset), ConversionError> {
    let eff = chains::resolve(reg, &s.project, &req.chain, "chain")?;
    let from = chains::resolve_asset(&eff, &req.from_asset, "from_asset")?
        .asset
        .clone();
    let to = chains::resolve_asset(&eff, &req.to_asset, "to_asset")?
        .asset
        .clone();
    if from.symbol == to.symbol {
        return Err(Invalid::new("to_asset", "to_asset must differ from from_asset.").into());
    }
    if let Err(reason) = support(eff.chain, s.project.mode) {
        return Err(ConversionError::UnsupportedChain {
            chain: req.chain.to_string(),
            reason: reason.into(),
        });
    }
    Ok((eff.chain, from, to))
}

/// `expected_out x (1 - slippage_bps / 10,000)`, rounded down (DECISIONS.md section 14).
pub fn min_out(expected_out: u128, slippage_bps: u32) -> u128 {
    let bps = slippage_bps.min(10_000) as u128;
    let keep = 10_000 - bps;
    // expected_out * keep / 10_000 without overflow.
    (expected_out / 10_000) * keep + (expected_out % 10_000) * keep / 10_000
}

/// `amount` of a coin with `from_decimals` at `from_usd` per unit, in a coin with
/// `to_decimals` at `to_usd` per unit, rounded down; `None` when a price is not positive or
/// the result does not fit.
pub fn at_prices(
    amount: u128,
    from_decimals: u8,
    from_usd: Decimal,
    to_decimals: u8,
    to_usd: Decimal,
) -> Option<u128> {
    if from_usd <= Decimal::ZERO || to_usd <= Decimal::ZERO {
        return None;
    }
    let part = |d: Decimal| (U256::from(d.mantissa().unsigned_abs()), d.scale());
    let (mf, sf) = part(from_usd);
    let (mt, st) = part(to_usd);
    let ten = U256::from(10u8);
    // amount * mf / 10^sf * 10^to_dec  /  (mt / 10^st * 10^from_dec)
    let num = U256::from(amount)
        .checked_mul(mf)?
        .checked_mul(ten.checked_pow(U256::from(st as u64 + to_decimals as u64))?)?;
    let den = mt.checked_mul(ten.checked_pow(U256::from(sf as u64 + from_decimals as u64))?)?;
    u128::try_from(num / den).ok()
}

/// What a quote says, before it is shown (`conversion_quote`) or planned into a batch.
#[derive(Debug, Clone)]
pub struct Priced {
    pub expected_out: u128,
    pub min_out: u128,
    pub slippage_bps: u32,
    /// `test`, or the DEX kind (`uniswap_v2`, `uniswap_v3`).
    pub market: String,
    /// USD value of `amount_in` (null without a usable price).
    pub amount_usd: Option<Decimal>,
    /// Estimated network fee in USD of the approve (when needed) and the swap.
    pub gas_usd: Option<Decimal>,
    pub needs_approval: bool,
}

/// How much of `asset` on `chain` the project's treasury holds free of everything in
/// flight, with every customer's `available` balance of it (customer nil: the project's
/// own). Free = the treasury account minus every `locked` amount of the coin (payouts and
/// conversions in flight are still in the master wallet until they settle).
pub fn holdings(
    r: &impl ReadOps,
    project: Uuid,
    chain: &str,
    asset: &str,
) -> Result<(u128, BTreeMap<Uuid, u128>), StoreError> {
    let treasury = r.balance(&Account::project(
        project,
        chain,
        asset,
        AccountKind::Treasury,
    ))?;
    let mut locked: u128 = 0;
    let mut available = BTreeMap::new();
    for (a, b) in r.project_accounts(project)? {
        if a.chain != chain || a.asset != asset {
            continue;
        }
        match a.kind {
            AccountKind::Locked => locked = locked.saturating_add(b.credit_balance()),
            AccountKind::Available if b.credit_balance() > 0 => {
                available.insert(a.customer_id, b.credit_balance());
            }
            _ => {}
        }
    }
    let held = treasury.debits.saturating_sub(treasury.credits);
    Ok((held.saturating_sub(locked), available))
}

/// The `conversion_quote` object (SPEC.md section 2, Conversion quote).
pub fn quote_json(
    reg: &Registry,
    req: &ConversionRequest,
    q: &Priced,
    available: u128,
    fee_cents: u64,
) -> Value {
    let fd = reg.decimals(&req.chain, &req.from_asset);
    let td = reg.decimals(&req.chain, &req.to_asset);
    let amount = req.amount.get();
    let rate = rate_string(amount, fd, q.expected_out, td);
    json!({
        "object": "conversion_quote",
        "chain": req.chain.as_str(),
        "from_asset": req.from_asset.as_str(),
        "to_asset": req.to_asset.as_str(),
        "amount_in": amount.to_string(),
        "amount_in_decimal": format_decimal(amount, fd),
        "expected_out": q.expected_out.to_string(),
        "expected_out_decimal": format_decimal(q.expected_out, td),
        "min_out": q.min_out.to_string(),
        "min_out_decimal": format_decimal(q.min_out, td),
        "slippage_bps": q.slippage_bps,
        "rate": rate,
        "amount_usd": q.amount_usd.map(usd_string),
        "gas_usd": q.gas_usd.map(usd_string),
        "fee_cents": fee_cents,
        "market": q.market,
        "available": available.to_string(),
        "available_decimal": format_decimal(available, fd),
        "needs_approval": q.needs_approval,
    })
}

fn usd_string(d: Decimal) -> String {
    d.round_dp_with_strategy(2, rust_decimal::RoundingStrategy::ToZero)
        .to_string()
}

/// Units of the output coin per unit of the input coin, as a decimal string (up to 18
/// places); `null` when the input is zero or a value does not fit.
fn rate_string(amount_in: u128, from_decimals: u8, amount_out: u128, to_decimals: u8) -> Value {
    if amount_in == 0 {
        return Value::Null;
    }
    // out / 10^td / (in / 10^fd) = out * 10^fd / (in * 10^td), to 18 places.
    let ten = U256::from(10u8);
    let num = U256::from(amount_out)
        .checked_mul(ten.pow(U256::from(from_decimals as u64 + 18)))
        .and_then(|n| n.checked_div(U256::from(amount_in)))
        .and_then(|n| n.checked_div(ten.pow(U256::from(to_decimals as u64))));
    match num.and_then(|n| u128::try_from(n).ok()) {
        Some(n) => {
            let s = format_decimal(n, 18);
            Value::String(s)
        }
        None => Value::Null,
    }
}

/// Gas of an ERC-20 approval, for the quote's `gas_usd` estimate.
pub const APPROVE_GAS: u64 = 60_000;

/// Gas of a swap by DEX kind, for the quote's `gas_usd` estimate (a single-hop swap
/// measured well under these on the published contracts).
pub fn swap_gas(kind: DexKind) -> u64 {
    match kind {
        DexKind::UniswapV2 => 160_000,
        DexKind::UniswapV3 => 200_000,
    }
}

/// The DEX side of a coin of the registry.
pub fn coin(a: &crate::registry::Asset) -> Option<Coin> {
    if a.is_native {
        return Some(Coin::Native);
    }
    a.contract.parse().ok().map(Coin::Token)
}

/// Prices a request (read-only): on a live project from the chain's DEX (503
/// `conversion_unavailable` when it or its node cannot answer), on a test project from the
/// test prices (`market: "test"`; DECISIONS.md section 14).
pub async fn price(
    reg: &Registry,
    market: &Arc<Market>,
    s: &Scope,
    req: &ConversionRequest,
) -> Result<Priced, ConversionError> {
    let (chain, from, to) = resolve_pair(reg, s, req)?;
    let amount = req.amount.get();
    let unavailable = || ConversionError::Unavailable {
        chain: req.chain.to_string(),
    };
    let livemode = s.livemode();
    let from_usd = market.usable_price(&from.symbol, livemode).await;
    let amount_usd = from_usd.and_then(|r| crate::market::usd_value(amount, from.decimals, r));
    if !livemode {
        let to_usd = market.usable_price(&to.symbol, false).await;
        let expected = match (from_usd, to_usd) {
            (Some(f), Some(t)) => at_prices(amount, from.decimals, f, to.decimals, t),
            _ => None,
        }
        .ok_or_else(unavailable)?;
        return Ok(Priced {
            expected_out: expected,
            min_out: min_out(expected, req.slippage_bps),
            slippage_bps: req.slippage_bps,
            market: "test".into(),
            amount_usd,
            gas_usd: Some(Decimal::ZERO),
            needs_approval: false,
        });
    }
    let (Some(dex), Some(client)) = (chain.dex.as_ref(), chain.client()) else {
        return Err(unavailable());
    };
    let (Some(fc), Some(tc)) = (coin(&from), coin(&to)) else {
        return Err(unavailable());
    };
    let out = dex
        .quote(client.as_ref(), fc, tc, U256::from(amount))
        .await
        .map_err(|e| {
            tracing::warn!(chain = %req.chain, error = %e, "DEX quote failed");
            unavailable()
        })?;
    let expected = u128::try_from(out).map_err(|_| unavailable())?;
    let needs_approval = match (dex.approval_token(fc), reg.live_treasury()) {
        (None, _) => false,
        (Some(token), Some(t)) => dex
            .allowance(client.as_ref(), token, t.into())
            .await
            .map(|a| a < U256::from(amount))
            .unwrap_or(true),
        (Some(_), None) => true,
    };
    let gas = swap_gas(dex.kind) + if needs_approval { APPROVE_GAS } else { 0 };
    let native = &chain.info.native;
    let gas_usd = match (
        client.fees().await,
        market.usable_price(native.symbol, true).await,
    ) {
        (Ok(f), Some(p)) => f
            .max_fee_per_gas
            .checked_mul(gas as u128)
            .and_then(|wei| crate::market::usd_value(wei, native.decimals, p)),
        _ => None,
    };
    Ok(Priced {
        expected_out: expected,
        min_out: min_out(expected, req.slippage_bps),
        slippage_bps: req.slippage_bps,
        market: dex.kind.as_str().into(),
        amount_usd,
        gas_usd,
        needs_approval,
    })
}

/// `POST /v1/conversions/quote`: the priced request with what the treasury can convert
/// now; `fee_cents` is the active plan's swap rate of its USD value (charged to the
/// operational balance when the batch settles).
pub async fn quote(
    store: &appliance_storage::Store,
    reg: &Registry,
    market: &Arc<Market>,
    s: &Scope,
    req: &ConversionRequest,
) -> Result<Value, ConversionError> {
    let q = price(reg, market, s, req).await?;
    let (p, chain, asset) = (
        s.project_id(),
        req.chain.to_string(),
        req.from_asset.to_string(),
    );
    let s2 = s.clone();
    let ((free, _), fee_rate) = store
        .read(move |r| {
            let held = holdings(r, p, &chain, &asset)?;
            let rate = crate::services::billing::swap_rate_bps(r, &s2)
                .map_err(|e| appliance_storage::StoreError::Corrupt(e.to_string()))?;
            Ok((held, rate))
        })
        .await
        .map_err(Fault::from)?;
    let fee = q
        .amount_usd
        .and_then(crate::market::whole_cents)
        .map(|usd| crate::services::billing::bps_of(usd, fee_rate))
        .unwrap_or(0);
    Ok(quote_json(reg, req, &q, free, fee))
}

// ---------------------------------------------------------------------------------------
// Manual conversions

/// Splits `amount` over `holders` pro rata to their balances, largest remainder first for
/// the rounding (DECISIONS.md section 14); holders whose share is zero are left out. The
/// shares sum to `amount` when `amount` is at most the holders' total.
pub fn pro_rata(amount: u128, holders: &BTreeMap<Uuid, u128>) -> Vec<(Uuid, u128)> {
    let total: u128 = holders.values().fold(0u128, |a, b| a.saturating_add(*b));
    if total == 0 || amount == 0 {
        return Vec::new();
    }
    let amount = amount.min(total);
    let mut shares: Vec<(Uuid, u128, U256)> = holders
        .iter()
        .map(|(c, b)| {
            let prod = U256::from(amount) * U256::from(*b);
            let q = prod / U256::from(total);
            let r = prod % U256::from(total);
            (*c, u128::try_from(q).unwrap_or(0), r)
        })
        .collect();
    let assigned: u128 = shares.iter().map(|s| s.1).sum();
    let mut left = amount - assigned;
    let mut order: Vec<usize> = (0..shares.len()).collect();
    // Largest remainder first; ties by customer id (deterministic).
    order.sort_by(|a, b| {
        shares[*b]
            .2
            .cmp(&shares[*a].2)
            .then(shares[*a].0.cmp(&shares[*b].0))
    });
    for i in order {
        if left == 0 {
            break;
        }
        if shares[i].1 < holders[&shares[i].0] {
            shares[i].1 += 1;
            left -= 1;
        }
    }
    shares
        .into_iter()
        .filter(|s| s.1 > 0)
        .map(|s| (s.0, s.1))
        .collect()
}

fn move_entry(
    project: Uuid,
    kind: &str,
    ref_id: Uuid,
    now: i64,
    legs: Vec<(Account, Account, u128)>,
) -> JournalEntry {
    let mut postings = Vec::new();
    for (from, to, amount) in legs {
        if amount == 0 {
            continue;
        }
        postings.push(Posting::debit(from, amount));
        postings.push(Posting::credit(to, amount));
    }
    JournalEntry {
        id: appliance_storage::sources::new_id(),
        project_id: project,
        kind: kind.into(),
        ref_id,
        created_at: now,
        postings,
    }
}

fn owner(c: &Conversion) -> Uuid {
    c.customer_id.unwrap_or(Uuid::nil())
}

fn acct(c: &Conversion, asset: &str, kind: AccountKind) -> Account {
    Account::customer(c.project_id, owner(c), &c.chain, asset, kind)
}

/// What `POST /v1/conversions` answers (202 `conversion_request`).
pub fn request_json(reg: &Registry, rows: &[Conversion], batch: &ConversionBatch) -> Value {
    json!({
        "object": "conversion_request",
        "rows": rows.iter().map(|r| conversion_json(reg, r)).collect::<Vec<_>>(),
        "batch": batch_json(reg, batch),
        "pending_reason": null,
    })
}

/// A new batch converting `rows` (one project, chain and coin pair; at least one row) of
/// `amount_in` atomic units of `from`, with the quote's (`expected_out`, `min_out`) in atomic
/// units of the target: `swapping` at once for a native coin, else `approving` first
/// (SPEC.md section 3, Conversion batch states). With it, the journal entry that moves each
/// row's `amount_in` from its owner's `available` to `locked` (DECISIONS.md section 14).
fn new_batch(
    id: Uuid,
    from: &crate::registry::Asset,
    rows: &[Conversion],
    amount_in: u128,
    (expected_out, min_out): (u128, u128),
    q: &Priced,
    now: i64,
) -> (ConversionBatch, JournalEntry) {
    let first = &rows[0];
    let batch = ConversionBatch {
        id,
        project_id: first.project_id,
        chain: first.chain.clone(),
        from_asset: first.from_asset.clone(),
        to_asset: first.to_asset.clone(),
        amount_in,
        amount_out: 0,
        expected_out,
        min_out,
        slippage_bps: q.slippage_bps,
        amount_usd_cents: q.amount_usd.and_then(crate::market::whole_cents),
        fee_cents: 0,
        market: q.market.clone(),
        status: if from.is_native {
            BatchStatus::Swapping
        } else {
            BatchStatus::Approving
        },
        error_code: None,
        approve_tx_hash: None,
        swap_tx_hash: None,
        rows: rows.iter().map(|r| r.id).collect(),
        attempts: 0,
        created_at: now,
        updated_at: now,
        settled_at: None,
    };
    let legs = rows
        .iter()
        .map(|r| {
            (
                acct(r, &r.from_asset, AccountKind::Available),
                acct(r, &r.from_asset, AccountKind::Locked),
                r.amount_in,
            )
        })
        .collect();
    let lock = move_entry(first.project_id, "conversion_lock", id, now, legs);
    (batch, lock)
}

/// Plans a manual conversion at once (SPEC.md section 4, Conversions rule 2): one row per
/// customer holding the coin, pro rata to their available balances, each locked; one batch
/// with the quote `q`. 402 `insufficient_funds` when the free treasury or the customers'
/// balances lack the amount.
pub fn create_manual(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    req: &ConversionRequest,
    q: &Priced,
) -> Result<(Vec<Conversion>, ConversionBatch), ConversionError> {
    if s.project.mode == Mode::Test {
        return Err(ConversionError::TestMode);
    }
    let (_, from, to) = resolve_pair(&s.reg, s, req)?;
    let p = s.project_id();
    let amount = req.amount.get();
    let (free, mut holders) = holdings(ctx, p, &req.chain, &from.symbol)?;
    // Manual conversions draw on customers' balances only (the project's own funds convert
    // automatically, by rule).
    holders.remove(&Uuid::nil());
    let held: u128 = holders.values().fold(0u128, |a, b| a.saturating_add(*b));
    let can = free.min(held);
    if amount > can {
        return Err(ConversionError::InsufficientFunds {
            available: can,
            requested: amount,
            asset: from.symbol.clone(),
            decimals: from.decimals,
        });
    }
    let now = ctx.now_us();
    let batch_id = appliance_storage::sources::new_id();
    let mut rows = Vec::new();
    for (customer, share) in pro_rata(amount, &holders) {
        rows.push(Conversion {
            id: appliance_storage::sources::new_id(),
            project_id: p,
            kind: ConversionKind::Manual,
            payment_id: None,
            receipt_no: None,
            customer_id: Some(customer),
            chain: req.chain.to_string(),
            from_asset: from.symbol.clone(),
            to_asset: to.symbol.clone(),
            amount_in: share,
            amount_out: 0,
            status: ConversionStatus::Converting,
            reason: None,
            batch_id: Some(batch_id),
            tx_hash: None,
            attempts: 0,
            created_at: now,
            updated_at: now,
            settled_at: None,
        });
    }
    let (batch, e) = new_batch(
        batch_id,
        &from,
        &rows,
        amount,
        (q.expected_out, q.min_out),
        q,
        now,
    );
    ctx.post(&e)??;
    for r in &rows {
        ctx.put(r)?;
    }
    ctx.put(&batch)?;
    Ok((rows, batch))
}

// ---------------------------------------------------------------------------------------
// Automatic conversions of invoice payments

/// Most rows one automatic batch takes.
pub const MAX_BATCH_ROWS: usize = 500;

/// Why an automatic row is `skipped` (SPEC.md section 2, Conversion `reason`), or `None`
/// when it queues: the project's rule of the chain as it is now (a later change does not
/// touch the row).
fn skip_reason(
    s: &Scope,
    chain: &Chain,
    asset: &str,
    rule: Option<&ConversionRule>,
) -> Option<&'static str> {
    if s.project.mode == Mode::Test {
        return Some("test_mode");
    }
    if support(chain, s.project.mode).is_err() {
        return Some("unsupported_chain");
    }
    let Some(rule) = rule.filter(|r| r.enabled) else {
        return Some("rule_off");
    };
    if rule.target_asset == asset {
        return Some("already_target");
    }
    if rule.keep_assets.iter().any(|k| k == asset) {
        return Some("kept");
    }
    if chain.asset(&rule.target_asset).is_none() {
        return Some("target_unlisted");
    }
    None
}

/// Writes the automatic row of an invoice payment when it is credited to the project's own
/// funds (DECISIONS.md section 14): `queued` with the rule's target, or `skipped` with the
/// reason. Never refuses: a payment is never delayed or refused because of it.
pub fn queue_payment(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    payment_id: Uuid,
    receipt_no: Option<String>,
    chain: &str,
    asset: &str,
    amount: u128,
) -> Result<Conversion, Fault> {
    let Some(c) = s.reg.chain(chain) else {
        return Err(Fault::invariant(format!(
            "payment on unknown chain {chain}"
        )));
    };
    let rule = stored_rule(ctx, s.project_id(), chain)?;
    let reason = skip_reason(s, c, asset, rule.as_ref());
    let now = ctx.now_us();
    let row = Conversion {
        id: appliance_storage::sources::new_id(),
        project_id: s.project_id(),
        kind: ConversionKind::Auto,
        payment_id: Some(payment_id),
        receipt_no,
        customer_id: None,
        chain: chain.to_string(),
        from_asset: asset.to_string(),
        to_asset: match (&rule, reason) {
            (Some(r), None) => r.target_asset.clone(),
            (Some(r), Some(_)) if !r.target_asset.is_empty() => r.target_asset.clone(),
            _ => asset.to_string(),
        },
        amount_in: amount,
        amount_out: 0,
        status: match reason {
            None => ConversionStatus::Queued,
            Some(_) => ConversionStatus::Skipped,
        },
        reason: reason.map(str::to_string),
        batch_id: None,
        tx_hash: None,
        attempts: 0,
        created_at: now,
        updated_at: now,
        settled_at: None,
    };
    ctx.put(&row)?;
    Ok(row)
}

/// A credited payment was reversed (a reorg): its row, while still `queued`, is
/// `skipped` (`payment_reversed`).
pub fn payment_reversed(ctx: &mut WriteCtx<'_>, s: &Scope, payment_id: Uuid) -> Result<(), Fault> {
    let p = s.project_id();
    let page = ctx.list::<Conversion>(
        &index::prefix(IndexTag::ConversionsByStatus, p, &[b"queued"]),
        None,
        MAX_BATCH_ROWS * 10,
        move |r: &Conversion| r.payment_id == Some(payment_id),
    )?;
    let now = ctx.now_us();
    for mut r in page.items {
        r.status = ConversionStatus::Skipped;
        r.reason = Some("payment_reversed".into());
        r.updated_at = now;
        ctx.put(&r)?;
    }
    Ok(())
}

/// Whether queued rows worth `usd` (None: no usable price) whose oldest was written at
/// `oldest_us` are due for a batch at `now_us` (DECISIONS.md section 14: worth at least
/// `min_batch_usd_cents`, or the oldest waited `max_wait_s`).
pub fn batch_due(
    usd: Option<Decimal>,
    oldest_us: i64,
    now_us: i64,
    min_batch_usd_cents: u64,
    max_wait_s: u64,
) -> bool {
    let waited = now_us.saturating_sub(oldest_us) >= (max_wait_s as i64).saturating_mul(1_000_000);
    let worth = usd.is_some_and(|v| !crate::market::below_threshold(Some(v), min_batch_usd_cents));
    waited || worth
}

/// Plans queued automatic rows `ids` (one project, chain, coin pair) into one batch with
/// the quote `q`, once the treasury holds their amount free (the payments are swept):
/// `None` while it does not, or when no row is still queued. Rows are taken oldest first
/// as far as the project's own `available` covers them; a row larger than all of it is
/// `skipped` (`funds_spent`). Each planned row's amount moves from the project's
/// `available` to its `locked`.
pub fn plan_auto(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    ids: &[Uuid],
    quoted_in: u128,
    q: &Priced,
) -> Result<Option<ConversionBatch>, Fault> {
    let p = s.project_id();
    let mut rows = Vec::new();
    for id in ids.iter().take(MAX_BATCH_ROWS) {
        if let Some(r) = ctx
            .get_in::<Conversion>(p, *id)?
            .filter(|r| r.status == ConversionStatus::Queued)
        {
            rows.push(r);
        }
    }
    let Some(first) = rows.first().cloned() else {
        return Ok(None);
    };
    rows.retain(|r| {
        r.chain == first.chain && r.from_asset == first.from_asset && r.to_asset == first.to_asset
    });
    let (free, holders) = holdings(ctx, p, &first.chain, &first.from_asset)?;
    let own = holders.get(&Uuid::nil()).copied().unwrap_or(0);
    // A row larger than everything the project still has of the coin can never be
    // converted (the merchant paid it out, or it is held for a refund): skipped.
    let now = ctx.now_us();
    let mut kept = Vec::with_capacity(rows.len());
    for mut r in rows {
        if r.amount_in > own {
            r.status = ConversionStatus::Skipped;
            r.reason = Some("funds_spent".into());
            r.updated_at = now;
            ctx.put(&r)?;
        } else {
            kept.push(r);
        }
    }
    // Oldest first, as many as the project's own funds cover.
    let mut total: u128 = 0;
    let mut rows = Vec::with_capacity(kept.len());
    for r in kept {
        if total + r.amount_in <= own {
            total += r.amount_in;
            rows.push(r);
        }
    }
    if rows.is_empty() || total > free {
        return Ok(None);
    }
    let Some(from) = s.reg.asset(&first.chain, &first.from_asset) else {
        return Ok(None);
    };
    let batch_id = appliance_storage::sources::new_id();
    // The quote was read for the rows then queued; fewer planned scale it (the swap is
    // quoted afresh when it is sent).
    let scale = |v: u128| {
        if quoted_in == 0 || quoted_in == total {
            return v;
        }
        u128::try_from(U256::from(v) * U256::from(total) / U256::from(quoted_in)).unwrap_or(v)
    };
    let (batch, e) = new_batch(
        batch_id,
        from,
        &rows,
        total,
        (scale(q.expected_out), scale(q.min_out)),
        q,
        now,
    );
    if ctx.post(&e)?.is_err() {
        return Ok(None);
    }
    for mut r in rows {
        r.status = ConversionStatus::Converting;
        r.batch_id = Some(batch_id);
        r.updated_at = now;
        ctx.put(&r)?;
    }
    ctx.put(&batch)?;
    Ok(Some(batch))
}

// ---------------------------------------------------------------------------------------
// Batch steps (called by the chain worker inside its store transactions)

fn open_batch(
    ctx: &WriteCtx<'_>,
    s: &Scope,
    id: Uuid,
    status: BatchStatus,
) -> Result<Option<ConversionBatch>, Fault> {
    Ok(ctx
        .get_in::<ConversionBatch>(s.project_id(), id)?
        .filter(|b| b.status == status))
}

fn rows_of(ctx: &WriteCtx<'_>, b: &ConversionBatch) -> Result<Vec<Conversion>, Fault> {
    let mut v = Vec::with_capacity(b.rows.len());
    for id in &b.rows {
        let r = ctx
            .get_in::<Conversion>(b.project_id, *id)?
            .ok_or_else(|| {
                Fault::invariant(format!("conversion row {id} of batch {} is missing", b.id))
            })?;
        v.push(r);
    }
    Ok(v)
}

/// The approve transaction of an `approving` batch was recorded: `false` when the batch
/// no longer waits for one (the caller records nothing).
pub fn approve_recorded(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: Uuid,
    hash: &str,
) -> Result<bool, Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Approving)? else {
        return Ok(false);
    };
    if b.approve_tx_hash.is_some() {
        return Ok(false);
    }
    b.approve_tx_hash = Some(hash.to_string());
    b.updated_at = ctx.now_us();
    ctx.put(&b)?;
    Ok(true)
}

/// The router may take the batch's input: `approving` -> `swapping` (the approval has the
/// chain's confirmations, or the allowance already sufficed).
pub fn approved(ctx: &mut WriteCtx<'_>, s: &Scope, id: Uuid) -> Result<(), Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Approving)? else {
        return Ok(());
    };
    b.status = BatchStatus::Swapping;
    b.updated_at = ctx.now_us();
    ctx.put(&b)?;
    Ok(())
}

/// The approval was mined and reverted, or dropped for good: the batch asks again
/// (`reverted`: counts as an attempt).
pub fn approve_lost(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: Uuid,
    reverted: bool,
) -> Result<(), Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Approving)? else {
        return Ok(());
    };
    b.approve_tx_hash = None;
    if reverted {
        b.attempts += 1;
        if b.attempts >= MAX_ATTEMPTS {
            return fail_batch(ctx, s, b, "approve_reverted");
        }
    }
    b.updated_at = ctx.now_us();
    ctx.put(&b)?;
    Ok(())
}

/// The swap of a `swapping` batch was recorded with a fresh quote: `false` when the batch
/// no longer waits for one.
pub fn swap_recorded(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: Uuid,
    hash: &str,
    expected_out: u128,
    min_out: u128,
) -> Result<bool, Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Swapping)? else {
        return Ok(false);
    };
    if b.swap_tx_hash.is_some() {
        return Ok(false);
    }
    let now = ctx.now_us();
    b.swap_tx_hash = Some(hash.to_string());
    b.expected_out = expected_out;
    b.min_out = min_out;
    b.attempts += 1;
    b.updated_at = now;
    for mut r in rows_of(ctx, &b)? {
        r.tx_hash = Some(hash.to_string());
        r.attempts = b.attempts;
        r.updated_at = now;
        ctx.put(&r)?;
    }
    ctx.put(&b)?;
    Ok(true)
}

/// A swap that would revert (refused by the node's estimate, without spending a nonce)
/// counts as an attempt; after [`MAX_ATTEMPTS`] the batch fails with `code`.
pub fn swap_refused(ctx: &mut WriteCtx<'_>, s: &Scope, id: Uuid, code: &str) -> Result<(), Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Swapping)? else {
        return Ok(());
    };
    if b.swap_tx_hash.is_some() {
        return Ok(());
    }
    b.attempts += 1;
    if b.attempts >= MAX_ATTEMPTS {
        return fail_batch(ctx, s, b, code);
    }
    b.updated_at = ctx.now_us();
    ctx.put(&b)?;
    Ok(())
}

/// A batch step's transaction was replaced with higher fees: the batch shows the new hash
/// (`swap`: the swap, else the approval).
pub fn follow_hash(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: Uuid,
    swap: bool,
    hash: &str,
) -> Result<(), Fault> {
    let Some(mut b) = ctx
        .get_in::<ConversionBatch>(s.project_id(), id)?
        .filter(|b| b.status.is_open())
    else {
        return Ok(());
    };
    let now = ctx.now_us();
    if swap {
        b.swap_tx_hash = Some(hash.to_string());
        for mut r in rows_of(ctx, &b)? {
            r.tx_hash = Some(hash.to_string());
            r.updated_at = now;
            ctx.put(&r)?;
        }
    } else {
        b.approve_tx_hash = Some(hash.to_string());
    }
    b.updated_at = now;
    ctx.put(&b)?;
    Ok(())
}

/// A recorded swap will never be mined (a filler holds its nonce): the batch quotes and
/// sends again (not an attempt: nothing ran).
pub fn swap_dropped(ctx: &mut WriteCtx<'_>, s: &Scope, id: Uuid) -> Result<(), Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Swapping)? else {
        return Ok(());
    };
    if b.swap_tx_hash.is_none() {
        return Ok(());
    }
    b.swap_tx_hash = None;
    b.attempts = b.attempts.saturating_sub(1);
    b.updated_at = ctx.now_us();
    ctx.put(&b)?;
    Ok(())
}

/// The swap `hash` has the chain's confirmations. Success with its executed output
/// `amount_out`: the batch and its rows settle (ledger, `conversion.completed` per row).
/// A revert: retried with a fresh quote until [`MAX_ATTEMPTS`], then `failed` with
/// `slippage` and the rows' coins stay where they were.
pub fn swap_settled(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: Uuid,
    hash: &str,
    outcome: Option<u128>,
) -> Result<(), Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Swapping)? else {
        return Ok(());
    };
    if b.swap_tx_hash.is_none() {
        return Ok(());
    }
    // The mined version (a fee bump has its own hash); one swap per batch is in flight.
    b.swap_tx_hash = Some(hash.to_string());
    let now = ctx.now_us();
    let Some(amount_out) = outcome else {
        b.swap_tx_hash = None;
        if b.attempts >= MAX_ATTEMPTS {
            return fail_batch(ctx, s, b, "slippage");
        }
        b.updated_at = now;
        ctx.put(&b)?;
        return Ok(());
    };
    let mut rows = rows_of(ctx, &b)?;
    // Shares of the output pro rata to amount_in; the remainder to the last row.
    let total_in = b.amount_in.max(1);
    let mut given: u128 = 0;
    let n = rows.len();
    for (i, r) in rows.iter_mut().enumerate() {
        let share = if i + 1 == n {
            amount_out - given
        } else {
            let v = U256::from(amount_out) * U256::from(r.amount_in) / U256::from(total_in);
            u128::try_from(v).unwrap_or(0).min(amount_out - given)
        };
        given += share;
        r.amount_out = share;
    }
    let mut legs = Vec::new();
    for r in &rows {
        legs.push((
            acct(r, &r.from_asset, AccountKind::Locked),
            Account::project(r.project_id, &r.chain, &r.from_asset, AccountKind::Treasury),
            r.amount_in,
        ));
        legs.push((
            Account::project(r.project_id, &r.chain, &r.to_asset, AccountKind::Treasury),
            acct(r, &r.to_asset, AccountKind::Available),
            r.amount_out,
        ));
    }
    let e = move_entry(b.project_id, "conversion_settle", b.id, now, legs);
    ctx.post(&e)??;
    b.status = BatchStatus::Settled;
    b.amount_out = amount_out;
    b.settled_at = Some(now);
    b.updated_at = now;
    // The plan's swap rate, charged on settlement (SPEC.md section 4, Conversions rule 4).
    if let Some(usd) = b.amount_usd_cents {
        b.fee_cents = crate::services::billing::charge_conversion_fee(ctx, s, b.id, usd)?;
    }
    ctx.put(&b)?;
    for mut r in rows {
        r.status = ConversionStatus::Converted;
        r.settled_at = Some(now);
        r.updated_at = now;
        r.tx_hash = Some(hash.to_string());
        ctx.put(&r)?;
        emit(
            ctx,
            s,
            "conversion.completed",
            r.id,
            conversion_json(&s.reg, &r),
        )?;
    }
    Ok(())
}

/// Fails a batch: its rows are `failed`, their locked amounts return to `available`.
fn fail_batch(
    ctx: &mut WriteCtx<'_>,
    _s: &Scope,
    mut b: ConversionBatch,
    code: &str,
) -> Result<(), Fault> {
    let now = ctx.now_us();
    let rows = rows_of(ctx, &b)?;
    let legs = rows
        .iter()
        .map(|r| {
            (
                acct(r, &r.from_asset, AccountKind::Locked),
                acct(r, &r.from_asset, AccountKind::Available),
                r.amount_in,
            )
        })
        .collect();
    let e = move_entry(b.project_id, "conversion_release", b.id, now, legs);
    ctx.post(&e)??;
    b.status = BatchStatus::Failed;
    b.error_code = Some(code.to_string());
    b.updated_at = now;
    ctx.put(&b)?;
    for mut r in rows {
        r.status = ConversionStatus::Failed;
        r.reason = Some(code.to_string());
        r.attempts = b.attempts;
        r.updated_at = now;
        ctx.put(&r)?;
    }
    Ok(())
}

/// Fails an open batch from outside the chain steps (signing switched off, a coin the
/// registry no longer lists): the money stays in its arrival coin.
pub fn fail(ctx: &mut WriteCtx<'_>, s: &Scope, id: Uuid, code: &str) -> Result<(), Fault> {
    let Some(b) = ctx
        .get_in::<ConversionBatch>(s.project_id(), id)?
        .filter(|b| b.status.is_open())
    else {
        return Ok(());
    };
    fail_batch(ctx, s, b, code)
}

// ---------------------------------------------------------------------------------------
// Views

/// A conversion row as the API shows it (SPEC.md section 2, Conversion).
pub fn conversion_json(reg: &Registry, c: &Conversion) -> Value {
    let fd = reg.decimals(&c.chain, &c.from_asset);
    let td = reg.decimals(&c.chain, &c.to_asset);
    let settled = c.status == ConversionStatus::Converted;
    json!({
        "id": c.id,
        "object": "conversion",
        "kind": c.kind.as_str(),
        "payment_id": c.payment_id,
        "receipt_no": c.receipt_no,
        "customer_id": c.customer_id,
        "chain": c.chain,
        "from_asset": c.from_asset,
        "to_asset": c.to_asset,
        "amount_in": c.amount_in.to_string(),
        "amount_in_decimal": format_decimal(c.amount_in, fd),
        "amount_out": settled.then(|| c.amount_out.to_string()),
        "amount_out_decimal": settled.then(|| format_decimal(c.amount_out, td)),
        "rate": if settled { rate_string(c.amount_in, fd, c.amount_out, td) } else { Value::Null },
        "status": c.status.as_str(),
        "reason": c.reason,
        "batch_id": c.batch_id,
        "tx_hash": c.tx_hash,
        "explorer_url": c.tx_hash.as_ref().and_then(|h| reg.chain(&c.chain).map(|x| x.info.tx_url(h))),
        "attempts": c.attempts,
        "created_at": ts(c.created_at),
        "updated_at": ts(c.updated_at),
        "settled_at": c.settled_at.map(ts),
    })
}

/// A batch as the API shows it (SPEC.md section 2, Conversion batch).
pub fn batch_json(reg: &Registry, b: &ConversionBatch) -> Value {
    let fd = reg.decimals(&b.chain, &b.from_asset);
    let td = reg.decimals(&b.chain, &b.to_asset);
    let settled = b.status == BatchStatus::Settled;
    let url = |h: &Option<String>| {
        h.as_ref()
            .and_then(|h| reg.chain(&b.chain).map(|x| x.info.tx_url(h)))
    };
    json!({
        "id": b.id,
        "object": "conversion_batch",
        "chain": b.chain,
        "from_asset": b.from_asset,
        "to_asset": b.to_asset,
        "amount_in": b.amount_in.to_string(),
        "amount_in_decimal": format_decimal(b.amount_in, fd),
        "amount_out": settled.then(|| b.amount_out.to_string()),
        "amount_out_decimal": settled.then(|| format_decimal(b.amount_out, td)),
        "expected_out": b.expected_out.to_string(),
        "expected_out_decimal": format_decimal(b.expected_out, td),
        "min_out": b.min_out.to_string(),
        "min_out_decimal": format_decimal(b.min_out, td),
        "slippage_bps": b.slippage_bps,
        "rate": rate_string(b.amount_in, fd, if settled { b.amount_out } else { b.expected_out }, td),
        "amount_usd": b.amount_usd_cents.map(|c| format_decimal(c as u128, 2)),
        "fee_cents": b.fee_cents,
        "market": b.market,
        "status": b.status.as_str(),
        "error_code": b.error_code,
        "approve_tx_hash": b.approve_tx_hash,
        "approve_explorer_url": url(&b.approve_tx_hash),
        "swap_tx_hash": b.swap_tx_hash,
        "swap_explorer_url": url(&b.swap_tx_hash),
        "rows": b.rows.len(),
        "attempts": b.attempts,
        "created_at": ts(b.created_at),
        "updated_at": ts(b.updated_at),
        "settled_at": b.settled_at.map(ts),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pro_rata_shares_sum_to_the_amount_with_largest_remainders() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        let c = Uuid::from_u128(3);
        let h: BTreeMap<Uuid, u128> = [(a, 1), (b, 1), (c, 1)].into_iter().collect();
        let s = pro_rata(2, &h);
        assert_eq!(s.iter().map(|x| x.1).sum::<u128>(), 2);
        assert_eq!(s.len(), 2);
        let h: BTreeMap<Uuid, u128> = [(a, 700), (b, 200), (c, 100)].into_iter().collect();
        let s = pro_rata(500, &h);
        assert_eq!(s, vec![(a, 350), (b, 100), (c, 50)]);
        let s = pro_rata(10, &h);
        // 7, 2, 1 exactly.
        assert_eq!(s.iter().map(|x| x.1).sum::<u128>(), 10);
        // Never more than a holder has.
        let h: BTreeMap<Uuid, u128> = [(a, 1), (b, u128::MAX / 2)].into_iter().collect();
        let s = pro_rata(u128::MAX / 2 + 1, &h);
        assert_eq!(s.iter().map(|x| x.1).sum::<u128>(), u128::MAX / 2 + 1);
    }

    #[test]
    fn a_batch_is_due_when_worth_enough_or_waited_long_enough() {
        let m = 60_000_000;
        assert!(batch_due(Some(Decimal::new(2000, 2)), 0, 0, 2_000, 900));
        assert!(!batch_due(Some(Decimal::new(1999, 2)), 0, 0, 2_000, 900));
        assert!(!batch_due(None, 0, 14 * m, 2_000, 900));
        assert!(batch_due(None, 0, 15 * m, 2_000, 900));
    }

    #[test]
    fn min_out_takes_the_slippage_off_rounding_down() {
        assert_eq!(min_out(10_000, 50), 9_950);
        assert_eq!(min_out(1, 50), 0);
        assert_eq!(min_out(u128::MAX, 0), u128::MAX);
        assert_eq!(min_out(123_456_789, 10_000), 0);
    }

    #[test]
    fn test_prices_convert_between_scales() {
        // 1 ETH (18) at 3000 into USDT (6) at 1: 3000 USDT.
        let out = at_prices(10u128.pow(18), 18, Decimal::new(300000, 2), 6, Decimal::ONE);
        assert_eq!(out, Some(3_000_000_000));
        // 1500 USDT into ETH at 3000: 0.5 ETH.
        let out = at_prices(1_500_000_000, 6, Decimal::ONE, 18, Decimal::new(3000, 0));
        assert_eq!(out, Some(5 * 10u128.pow(17)));
        assert_eq!(at_prices(1, 6, Decimal::ZERO, 6, Decimal::ONE), None);
    }
}
