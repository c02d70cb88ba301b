//! Pricing a conversion: the pair, what the project holds, the DEX quote at market
//! prices, the minimum out at the allowed slippage, and the gas a swap takes.

use super::*;

/// `POST /v1/conversions/quote` and `POST /v1/conversions`.
#[derive(Debug, Clone, utoipa::ToSchema)]
#[schema(as = ConversionQuoteRequest)]
pub struct ConversionRequest {
    #[schema(value_type = crate::services::types::ChainIdIn)]
    pub chain: ChainId,
    #[schema(value_type = String, min_length = 1)]
    pub from_asset: AssetSymbol,
    #[schema(value_type = String, min_length = 1)]
    pub to_asset: AssetSymbol,
    /// Atomic units of `from_asset`.
    #[schema(value_type = String, pattern = "^[1-9][0-9]{0,37}$")]
    pub amount: Amount,
    /// Default 50 (0.5%).
    #[schema(value_type = Option<u32>, minimum = 0, maximum = 5000)]
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
pub fn quote_view(
    reg: &Registry,
    req: &ConversionRequest,
    q: &Priced,
    available: u128,
    fee_cents: u64,
) -> ConversionQuoteView {
    let fd = reg.decimals(&req.chain, &req.from_asset);
    let td = reg.decimals(&req.chain, &req.to_asset);
    let amount = req.amount.get();
    ConversionQuoteView {
        object: "conversion_quote",
        chain: req.chain.as_str().into(),
        from_asset: req.from_asset.as_str().into(),
        to_asset: req.to_asset.as_str().into(),
        amount_in: amount.to_string(),
        amount_in_decimal: format_decimal(amount, fd),
        expected_out: q.expected_out.to_string(),
        expected_out_decimal: format_decimal(q.expected_out, td),
        min_out: q.min_out.to_string(),
        min_out_decimal: format_decimal(q.min_out, td),
        slippage_bps: q.slippage_bps,
        rate: rate_string(amount, fd, q.expected_out, td),
        amount_usd: q.amount_usd.map(usd_string),
        gas_usd: q.gas_usd.map(usd_string),
        fee_cents,
        market: q.market.to_string(),
        available: available.to_string(),
        available_decimal: format_decimal(available, fd),
        needs_approval: q.needs_approval,
    }
}

pub(super) fn usd_string(d: Decimal) -> String {
    d.round_dp_with_strategy(2, rust_decimal::RoundingStrategy::ToZero)
        .to_string()
}

/// Units of the output coin per unit of the input coin, as a decimal string (up to 18
/// places); `null` when the input is zero or a value does not fit.
pub(super) fn rate_string(
    amount_in: u128,
    from_decimals: u8,
    amount_out: u128,
    to_decimals: u8,
) -> Option<String> {
    if amount_in == 0 {
        return None;
    }
    // out / 10^td / (in / 10^fd) = out * 10^fd / (in * 10^td), to 18 places.
    let ten = U256::from(10u8);
    let num = U256::from(amount_out)
        .checked_mul(ten.pow(U256::from(from_decimals as u64 + 18)))
        .and_then(|n| n.checked_div(U256::from(amount_in)))
        .and_then(|n| n.checked_div(ten.pow(U256::from(to_decimals as u64))));
    num.and_then(|n| u128::try_from(n).ok())
        .map(|n| format_decimal(n, 18))
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
) -> Result<ConversionQuoteView, ConversionError> {
    let q = price(reg, market, s, req).await?;
    let (p, chain, asset) = (
        s.project.id,
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
    Ok(quote_view(reg, req, &q, free, fee))
}

// ---------------------------------------------------------------------------------------
// Manual conversions
