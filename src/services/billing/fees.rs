//! The fees billing charges when they are earned (DECISIONS.md section 13): per new
//! address, per confirmed payout, per credited invoice payment, per settled conversion.

use super::*;
use crate::services::types::{ConversionBatchId, InvoiceId, PayoutId, WalletId};
use appliance_storage::records::RefundReference;

/// Charges a usage fee of the active plan, once per (`kind`, `ref_id`). `cents` of 0 writes
/// nothing. No active plan: no fee.
pub(super) fn charge(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    kind: EntryKind,
    ref_type: &'static str,
    ref_id: Uuid,
    cents: u64,
    note: Option<String>,
) -> Result<Option<BillingEntry>, Fault> {
    if cents == 0 {
        return Ok(None);
    }
    let amount = i64::try_from(cents).map_err(|_| Fault::invariant("fee out of range"))?;
    let mut e = NewEntry::new(kind, -amount, Some(ref_type), Some(ref_id.to_string()));
    e.note = note;
    let r = ref_id.to_string();
    post(ctx, s, e, Some(&r))
}

/// `address_fee` for a new customer deposit address (DECISIONS.md section 13).
pub fn charge_address_fee(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    wallet: WalletId,
    chain: &str,
) -> Result<(), Fault> {
    let cents = plan_fee(ctx, s, |p| p.address_fee_cents)?;
    charge(
        ctx,
        s,
        EntryKind::AddressFee,
        "wallet",
        wallet.uuid(),
        cents,
        Some(format!("new {chain} address")),
    )?;
    Ok(())
}

/// `payout_fee` for a confirmed payout (DECISIONS.md section 13). Refunds of invoice
/// overpayments (`reference` `refund:<invoice id>`) charge no fee (DECISIONS.md section 12).
pub fn charge_payout_fee(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    payout: PayoutId,
    reference: Option<&str>,
) -> Result<(), Fault> {
    if reference.is_some_and(RefundReference::has_prefix) {
        return Ok(());
    }
    let cents = plan_fee(ctx, s, |p| p.payout_fee_cents)?;
    charge(
        ctx,
        s,
        EntryKind::PayoutFee,
        "payout",
        payout.uuid(),
        cents,
        None,
    )?;
    Ok(())
}

/// `payment_fee` of an invoice at its first credit (SPEC.md section 4, Invoices rule 2;
/// DECISIONS.md section 13): the fee frozen on the invoice (`terms`) applied to its price,
/// charged once per invoice whatever plan is active now (a later credit to the same
/// invoice writes nothing).
pub fn charge_payment_fee(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    invoice: InvoiceId,
    price_cents: u64,
    terms: FeeTerms,
) -> Result<(), Fault> {
    let cents = terms.payment_fee_cents(price_cents);
    charge(
        ctx,
        s,
        EntryKind::PaymentFee,
        "invoice",
        invoice.uuid(),
        cents,
        None,
    )?;
    Ok(())
}

/// `bps` basis points of `cents`, rounded half up.
pub fn bps_of(cents: u64, bps: u32) -> u64 {
    let v = (u128::from(cents) * u128::from(bps) + 5_000) / 10_000;
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// The active plan's `swap_rate_bps` (0 without a plan).
pub fn swap_rate_bps(r: &impl ReadOps, s: &Scope) -> Result<u32, Fault> {
    plan_fee(r, s, |p| p.swap_rate_bps)
}

/// What `fee` reads from the project's active plan; 0 without one (a fee of 0 charges
/// nothing).
fn plan_fee<T: Default>(
    r: &impl ReadOps,
    s: &Scope,
    fee: impl FnOnce(&PlanConfig) -> T,
) -> Result<T, Fault> {
    let acct = account(r, s.project_id())?;
    Ok(active_plan(&s.reg.billing, &acct)
        .map(fee)
        .unwrap_or_default())
}

/// `conversion_fee` of a settled conversion batch worth `usd_cents` (DECISIONS.md section
/// 13): the active plan's `swap_rate_bps` of it, rounded half up, once per batch. Returns
/// the cents charged (0 without a plan, or on a repeat).
pub fn charge_conversion_fee(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    batch: ConversionBatchId,
    usd_cents: u64,
) -> Result<u64, Fault> {
    let rate = swap_rate_bps(ctx, s)?;
    let cents = bps_of(usd_cents, rate);
    let e = charge(
        ctx,
        s,
        EntryKind::ConversionFee,
        "conversion_batch",
        batch.uuid(),
        cents,
        None,
    )?;
    Ok(e.map(|e| e.amount_cents.unsigned_abs()).unwrap_or(0))
}

// ---------------------------------------------------------------------------------------
// Funding addresses and funding credits (SPEC.md section 2, Funding address; section 4,
// Billing; DECISIONS.md section 13).
