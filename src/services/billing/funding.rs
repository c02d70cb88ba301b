//! Funding the operational balance (SPEC.md section 4, Billing; DECISIONS.md section 13):
//! the funding addresses, and crediting, recording, failing and reversing the transfers
//! that arrive on them.

use super::*;
use crate::services::types::DepositId;
use appliance_storage::records::DepositFailure;
use serde::Serialize;
use utoipa::ToSchema;

// `assets[]` of a Funding address: USDT and USDC at par (1 USD per whole coin), the
// chain's native coin at the cached spot price.
/// A coin a funding address credits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct FundingAsset {
    pub symbol: String,
    pub decimals: u8,
    /// Credited at par (USDT, USDC); otherwise at the cached spot price (the native coin).
    pub par: bool,
}

/// A project's funding address on one chain (`object: funding_address`): created on the
/// first `GET /v1/billing/funding`, never changed. Only the coins of `assets` are credited.
#[derive(Serialize, ToSchema)]
#[schema(as = FundingAddress)]
pub struct FundingAddressView<'a> {
    #[schema(pattern = "^funding_address$")]
    pub object: &'static str,
    pub chain: &'a str,
    pub address: &'a str,
    pub memo: Option<&'a str>,
    /// `contract` (EVM forwarder) or `eoa`.
    pub account_kind: Option<&'static str>,
    pub assets: Vec<FundingAsset>,
}

/// The coins a funding address on `eff`'s chain credits, exactly (SPEC.md section 2:
/// "Only the assets listed for that chain are credited"): the stablecoins (par) and the
/// native coin (spot), less any the operator archived for the project. Any other coin
/// (an extra token of the configuration) is recorded but not credited
/// ([`funding_confirmed`]).
pub fn funding_assets(eff: &EffChain<'_>) -> Vec<FundingAsset> {
    eff.assets
        .iter()
        .filter(|a| !a.archived && (a.asset.is_stable() || a.asset.is_native))
        .map(|a| FundingAsset {
            symbol: a.asset.symbol.clone(),
            decimals: a.asset.decimals,
            par: a.asset.is_stable(),
        })
        .collect()
}

/// Whether the project gets a funding address on `eff`'s chain: a listed account-based
/// (contract) EVM chain that is not `coming_soon`, and on a live project one with a node
/// configured (the chain worker watches it). Health and pauses do not count: money sent
/// to an address is credited whenever the watcher sees it.
pub(super) fn funding_chain(eff: &EffChain<'_>, mode: Mode) -> bool {
    eff.listed
        && eff.chain.is_evm()
        && eff.chain.info.account_kind == AccountKind::Contract
        && eff.status != ChainStatus::ComingSoon
        && (mode == Mode::Test || eff.chain.configured)
}

pub(super) fn funding_chain_key(project: Uuid, chain: &str) -> Vec<u8> {
    index::unique(IndexTag::UniqueFundingChain, project, &[chain.as_bytes()])
}

/// The project's funding addresses that exist, in the registry's chain order.
pub fn funding_addresses(r: &impl ReadOps, s: &Scope) -> Result<Vec<FundingAddress>, Fault> {
    let p = s.project.id;
    let mut out = Vec::new();
    for c in &s.reg.chains {
        if let Some(id) = r.unique_get(&funding_chain_key(p, c.id()))? {
            // A row that does not decode is passed over (readers are total).
            if let Ok(Some(fa)) = r.get::<FundingAddress>(id) {
                out.push(fa);
            }
        }
    }
    Ok(out)
}

/// Chains the project should have a funding address on and has none yet.
pub fn missing_funding_chains(r: &impl ReadOps, s: &Scope) -> Result<Vec<String>, Fault> {
    let p = s.project.id;
    let mut out = Vec::new();
    for c in &s.reg.chains {
        let eff = chains::effective(c, &s.project);
        if funding_chain(&eff, s.project.mode)
            && r.unique_get(&funding_chain_key(p, c.id()))?.is_none()
        {
            out.push(c.id().to_string());
        }
    }
    Ok(out)
}

/// `GET /v1/billing/funding`: creates the funding addresses the project lacks (one per
/// chain it can use, [`funding_chain`]) and returns them all. An address, once created, is
/// never changed or removed: on EVM chains it is the CREATE2 forwarder address of the
/// project's funding salt (`address::funding_salt`, domain-separated from customer, invoice
/// and project salts, DECISIONS.md section 13), the same on every EVM chain. Each is a
/// watched wallet row of role `funding` (customer nil; in no wallet list), so the chain
/// worker sees transfers to it and sweeps them like any other address. Refused with
/// [`BillingError::NoMasterKey`] when a live project lacks one and no master key is
/// unlocked.
pub fn ensure_funding_addresses(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
) -> Result<Vec<FundingAddress>, BillingError> {
    let p = s.project.id;
    let missing = missing_funding_chains(ctx, s)?;
    if !missing.is_empty() {
        let factory = s
            .reg
            .factory_for(&s.project)
            .ok_or(BillingError::NoMasterKey)?;
        let address = appliance_chains::address::funding_address_under(&factory, p);
        let now = ctx.now_us();
        for chain in missing {
            let akey = appliance_storage::index::address_key(&chain, &address);
            if ctx.unique_get(&akey)?.is_some() {
                return Err(Fault::invariant("a new funding address is already taken").into());
            }
            let w = Wallet {
                id: appliance_storage::sources::new_id(),
                project_id: p,
                customer_id: Uuid::nil(),
                invoice_id: None,
                chain: chain.clone(),
                role: FUNDING_ROLE.into(),
                status: "active".into(),
                address: address.clone(),
                memo: None,
                created_at: now,
            };
            let fa = FundingAddress {
                id: w.id,
                project_id: p,
                chain: chain.clone(),
                address: address.clone(),
                memo: None,
                created_at: now,
            };
            ctx.unique_put(&akey, w.id)?;
            ctx.unique_put(&funding_chain_key(p, &chain), fa.id)?;
            ctx.put(&w)?;
            ctx.put(&fa)?;
        }
    }
    Ok(funding_addresses(ctx, s)?)
}

/// A Funding address (SPEC.md section 2): `chain`, `address`, `memo`, `account_kind`,
/// `assets[]` of `{symbol, decimals, par}`.
pub fn funding_view<'a>(s: &Scope, fa: &'a FundingAddress) -> FundingAddressView<'a> {
    let (kind, assets) = match s.reg.chain(&fa.chain) {
        Some(c) => {
            let eff = chains::effective(c, &s.project);
            let kind = match c.info.account_kind {
                AccountKind::Contract => "contract",
                AccountKind::Eoa => "eoa",
            };
            (Some(kind), funding_assets(&eff))
        }
        None => (None, Vec::new()),
    };
    FundingAddressView {
        object: "funding_address",
        chain: &fa.chain,
        address: &fa.address,
        memo: fa.memo.as_deref(),
        account_kind: kind,
        assets,
    }
}

/// Whole cents a funding transfer credits: its USD value at `rate`, rounded down (`None`
/// when it does not fit).
pub fn funding_cents(amount_atomic: u128, decimals: u8, rate: Decimal) -> Option<i64> {
    let v = crate::market::usd_value(amount_atomic, decimals, rate)?;
    crate::market::whole_cents(v).and_then(|c| i64::try_from(c).ok())
}

/// The transfer behind a funding entry, as `status` saw it.
pub(super) fn funding_transfer(reg: &Registry, d: &Deposit, status: &str) -> FundingTransfer {
    let decimals = reg.decimals(&d.chain, &d.asset);
    FundingTransfer {
        decimals: Some(decimals),
        amount_decimal: appliance_chains::format_decimal(d.amount, decimals),
        tx_hash: d.tx_hash.clone(),
        log_index: u64::from(d.log_index),
        from_address: Some(d.from_address.clone()),
        confirmations: u64::from(d.confirmations),
        required_confirmations: u64::from(d.required_confirmations),
        block_time: Some(d.block_time),
        status: Some(status.to_string()),
    }
}

/// A funding transfer's entry, before its kind and cents.
pub(super) fn funding_entry(
    reg: &Registry,
    d: &Deposit,
    kind: EntryKind,
    cents: i64,
    status: &str,
) -> NewEntry {
    let mut e = NewEntry::new(kind, cents, Some("deposit"), Some(d.id.to_string()));
    e.chain = Some(d.chain.clone());
    e.asset = Some(d.asset.clone());
    e.amount_atomic = Some(d.amount);
    e.transfer = Some(funding_transfer(reg, d, status));
    e
}

/// The rate a funding transfer of `symbol` is credited at now, without waiting: 1 (`par`)
/// for a stablecoin, else the market's spot price (`test` table for a test project, the
/// cached live value otherwise). `None`: no usable price now.
pub(super) fn funding_rate(s: &Scope, asset: &FundingAsset) -> Option<(Decimal, String)> {
    if asset.par {
        return Some((Decimal::ONE, "par".into()));
    }
    let q = s.reg.market()?.spot_now(&asset.symbol, s.livemode())?;
    Some((q.usd, q.source.to_string()))
}

/// The funding asset `symbol` is on the deposit's chain for the project (`None`: not
/// credited there).
pub(super) fn funding_asset_of(s: &Scope, chain: &str, symbol: &str) -> Option<FundingAsset> {
    let c = s.reg.chain(chain)?;
    let eff = chains::effective(c, &s.project);
    funding_assets(&eff)
        .into_iter()
        .find(|a| a.symbol == symbol)
}

/// A transfer to the project's funding address reached its confirmations (the deposit
/// machinery has posted Dr deposits / Cr the project's `operator` account, and sweeps it):
/// credits the operational balance with a `funding` entry (SPEC.md section 4, Billing;
/// DECISIONS.md section 13), once per transfer, valued at par or at the spot price now. A
/// credit closing a requested plan's gap activates it ([`post`]).
///
/// Not credited, and never silently: a coin not in the chain's `assets[]` writes a 0-cent
/// `adjustment` recording the transfer (and logs it), so the merchant sees it in the
/// journal and the operator can credit it by hand; a native coin without a usable price
/// now is marked `awaiting_price` and credited by the billing worker once there is one
/// ([`credit_awaiting_price`]).
pub fn funding_confirmed(ctx: &mut WriteCtx<'_>, s: &Scope, d: &mut Deposit) -> Result<(), Fault> {
    let Some(asset) = funding_asset_of(s, &d.chain, &d.asset) else {
        tracing::warn!(
            project = %d.project_id, chain = %d.chain, asset = %d.asset, amount = d.amount,
            tx = %d.tx_hash,
            "a transfer to a funding address is of a coin funding does not credit; recorded, not credited"
        );
        let note = format!(
            "{}, not credited: {} is not a funding asset there (GET /v1/billing/funding lists them); ask the operator",
            received(d, s.reg.decimals(&d.chain, &d.asset)),
            d.asset
        );
        record_uncredited(ctx, s, d, "confirmed", note)?;
        return Ok(());
    };
    match funding_rate(s, &asset) {
        Some((rate, source)) => {
            credit_funding(ctx, s, d, &asset, rate, source)?;
        }
        None => {
            tracing::warn!(
                project = %d.project_id, chain = %d.chain, asset = %d.asset, tx = %d.tx_hash,
                "no usable price for a funding transfer; credited once there is one"
            );
            d.awaiting_price = true;
            ctx.put(d)?;
        }
    }
    Ok(())
}

/// Largest funding credit written on its own, cents (10 trillion USD): a transfer worth more,
/// or one whose value does not fit the exact decimal arithmetic, is recorded for the
/// operator instead (such a credit would write nothing at all, or overflow the balance),
/// far below where a balance of such credits could overflow.
pub const MAX_FUNDING_CREDIT_CENTS: i64 = 1_000_000_000_000_000;

/// Writes the `funding` entry of confirmed funding transfer `d` at `rate` (once per
/// deposit: a replay writes nothing). A transfer worth less than a cent, or more than
/// [`MAX_FUNDING_CREDIT_CENTS`] (or too large to value exactly), is recorded with a 0-cent
/// `adjustment` instead, saying why, for the operator to credit by hand.
pub(super) fn credit_funding(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    d: &Deposit,
    asset: &FundingAsset,
    rate: Decimal,
    source: String,
) -> Result<Option<BillingEntry>, Fault> {
    let cents = funding_cents(d.amount, asset.decimals, rate);
    if cents.is_none_or(|c| c > MAX_FUNDING_CREDIT_CENTS) {
        tracing::warn!(
            project = %d.project_id, chain = %d.chain, asset = %d.asset, amount = d.amount,
            tx = %d.tx_hash,
            "a funding transfer is too large to credit automatically; recorded, not credited"
        );
        let note = format!(
            "{} is worth more than {} USD at {} USD (or too much to value exactly): not credited automatically; ask the operator",
            received(d, asset.decimals),
            MAX_FUNDING_CREDIT_CENTS / 100,
            crate::market::format_usd(rate)
        );
        return record_uncredited(ctx, s, d, "confirmed", note);
    }
    let Some(cents) = cents.filter(|c| *c > 0) else {
        let note = format!(
            "{} is worth less than a cent at {} USD: not credited",
            received(d, asset.decimals),
            crate::market::format_usd(rate)
        );
        return record_uncredited(ctx, s, d, "confirmed", note);
    };
    let mut e = funding_entry(&s.reg, d, EntryKind::Funding, cents, "confirmed");
    e.rate = Some(crate::market::format_usd(rate));
    e.rate_source = Some(source);
    e.note = Some(format!("funding on {}", d.chain));
    let r = d.id.to_string();
    post(ctx, s, e, Some(&r))
}

/// A 0-cent `adjustment` recording a transfer to a funding address that credits nothing
/// (once per deposit).
/// "`amount` `asset` received on the `chain` funding address", how a note on a transfer
/// begins; `amount` in whole units of `decimals`.
fn received(d: &Deposit, decimals: u8) -> String {
    format!(
        "{} {} received on the {} funding address",
        appliance_chains::format_decimal(d.amount, decimals),
        d.asset,
        d.chain
    )
}

pub(super) fn record_uncredited(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    d: &Deposit,
    status: &str,
    note: String,
) -> Result<Option<BillingEntry>, Fault> {
    let mut e = funding_entry(&s.reg, d, EntryKind::Adjustment, 0, status);
    e.note = Some(note);
    let r = d.id.to_string();
    post(ctx, s, e, Some(&r))
}

/// A transfer to a funding address that is not money after all (`failed`): reverted or
/// reorged before its confirmations credit nothing; one refused at confirmation (an
/// archived coin, a credit that overflows the ledger) is recorded like a coin that is not
/// credited ([`funding_confirmed`]).
pub fn funding_failed(ctx: &mut WriteCtx<'_>, s: &Scope, d: &mut Deposit) -> Result<(), Fault> {
    if d.failure() == Some(DepositFailure::Reorg) {
        return Ok(());
    }
    let reason = d.failure_reason.as_deref().unwrap_or("");
    tracing::warn!(
        project = %d.project_id, chain = %d.chain, asset = %d.asset, tx = %d.tx_hash, reason,
        "a transfer to a funding address was refused; recorded, not credited"
    );
    let note = format!(
        "{}, not credited: {reason}",
        received(d, s.reg.decimals(&d.chain, &d.asset))
    );
    record_uncredited(ctx, s, d, "failed", note)?;
    Ok(())
}

/// A credited funding transfer orphaned by a reorganisation (the deposit machinery has
/// taken the coins back out of the `operator` account): its credit is reversed by an
/// `adjustment` of the same cents, once, under the rule for orphaned deposits (the credit
/// goes, whatever was spent from it: the balance may fall below zero and pause live
/// invoices; a plan it activated stays active). Nothing was credited yet: nothing to
/// reverse, and an `awaiting_price` mark is dropped.
pub fn funding_orphaned(ctx: &mut WriteCtx<'_>, s: &Scope, d: &mut Deposit) -> Result<(), Fault> {
    if d.awaiting_price {
        d.awaiting_price = false;
        ctx.put(d)?;
    }
    let p = s.project.id;
    let Some(id) = ctx.unique_get(&once_key(p, EntryKind::Funding, &d.id.to_string()))? else {
        return Ok(());
    };
    let Some(credit) = ctx.get::<BillingEntry>(id)? else {
        return Err(Fault::invariant("a funding credit's key names no entry"));
    };
    let mut e = funding_entry(
        &s.reg,
        d,
        EntryKind::Adjustment,
        -credit.amount_cents,
        "orphaned",
    );
    e.rate = credit.rate.clone();
    e.rate_source = credit.rate_source.clone();
    e.note = Some(format!(
        "funding transfer {} orphaned by a chain reorganisation: its credit of {} cents reversed",
        d.tx_hash, credit.amount_cents
    ));
    post(ctx, s, e, Some(&orphan_ref(d.id)))?;
    Ok(())
}

/// The once-only reference of the entry reversing funding transfer `deposit`'s credit.
pub fn orphan_ref(deposit: Uuid) -> String {
    format!("orphan:{deposit}")
}

/// Credits funding transfer `deposit` if it still awaits a price, at `rate` (`source`) for
/// the billing worker, which reads the price outside the transaction. `Ok(false)`: nothing
/// to do (credited meanwhile, orphaned, or not awaiting).
pub fn credit_awaiting_price(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    deposit: DepositId,
    rate: Decimal,
    source: &str,
) -> Result<bool, Fault> {
    let Some(mut d) = ctx.get_in::<Deposit>(s.project.id, deposit.uuid())? else {
        return Ok(false);
    };
    if !d.funding || !d.awaiting_price || d.status != DepositStatus::Confirmed {
        return Ok(false);
    }
    d.awaiting_price = false;
    ctx.put(&d)?;
    match funding_asset_of(s, &d.chain, &d.asset) {
        Some(asset) => {
            credit_funding(ctx, s, &d, &asset, rate, source.to_string())?;
        }
        None => {
            let note = format!(
                "{}, not credited: {} is no longer a funding asset there",
                received(&d, s.reg.decimals(&d.chain, &d.asset)),
                d.asset
            );
            record_uncredited(ctx, s, &d, "confirmed", note)?;
        }
    }
    Ok(true)
}

/// Ids of confirmed funding transfers awaiting a price (any project), oldest first.
pub fn awaiting_price(r: &impl ReadOps, limit: usize) -> Result<Vec<DepositId>, Fault> {
    let page = r.scan_ids(
        &index::prefix(IndexTag::FundingAwaitingPrice, Uuid::nil(), &[]),
        None,
        limit,
        |_| Ok(true),
    )?;
    Ok(page.items.into_iter().map(DepositId::from).collect())
}
