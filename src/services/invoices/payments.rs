//! Payments to an invoice's addresses as the chain reports them: seen, credited (paid,
//! underpaid, overpaid, late; the excess held under the `refund` policy), failed, orphaned.

use super::*;
use crate::services::journal_entry;

pub(super) fn load_for(ctx: &WriteCtx<'_>, d: &Deposit) -> Result<Option<Invoice>, Fault> {
    let Some(id) = d.invoice_id else {
        return Ok(None);
    };
    Ok(ctx.get::<Invoice>(id)?)
}

/// A transfer to the invoice's address was seen, below finality (SPEC.md section 3,
/// Invoice). Called before the payment row `d` is first written: sets `d.late` when the
/// invoice had expired (judged on the project clock, expiring it first if the worker has
/// not yet) or was canceled. An on-time transfer makes an `open` or `underpaid` invoice
/// `pending` and emits `invoice.pending` (once per transfer).
pub fn payment_seen(ctx: &mut WriteCtx<'_>, s: &Scope, d: &mut Deposit) -> Result<(), Fault> {
    let Some(mut inv) = load_for(ctx, d)? else {
        return Ok(());
    };
    let now_p = clock::now(ctx, &s.project)?;
    expire_if_due(ctx, s, &mut inv, now_p)?;
    if matches!(inv.status, InvoiceStatus::Expired | InvoiceStatus::Canceled) {
        d.late = true;
        return Ok(());
    }
    inv.pending_payments = inv.pending_payments.saturating_add(1);
    let r = inv.received_mut(&d.chain, &d.asset);
    r.pending = r.pending.saturating_add(d.amount);
    let announce = matches!(
        inv.status,
        InvoiceStatus::Open | InvoiceStatus::Underpaid | InvoiceStatus::Pending
    );
    if announce {
        inv.status = InvoiceStatus::Pending;
    }
    inv.updated_at = ctx.now_us();
    ctx.put(&inv)?;
    if announce {
        emit_invoice(ctx, s, "invoice.pending", &inv)?;
    }
    Ok(())
}

/// Takes an on-time payment out of the pending figures.
pub(super) fn unpend(inv: &mut Invoice, d: &Deposit) {
    if d.late {
        return;
    }
    inv.pending_payments = inv.pending_payments.saturating_sub(1);
    let r = inv.received_mut(&d.chain, &d.asset);
    r.pending = r.pending.saturating_sub(d.amount);
}

/// The status an unpaid invoice returns to when nothing is pending any more.
pub(super) fn unpaid_status(inv: &Invoice) -> InvoiceStatus {
    if inv.received.iter().any(|r| r.confirmed > 0) {
        InvoiceStatus::Underpaid
    } else {
        InvoiceStatus::Open
    }
}

/// A payment was credited (the deposit machinery posted Dr deposits / Cr the project's
/// `available`). Late payments emit `invoice.late_payment` and change no status; on-time
/// ones are judged at the locked rates: `paid`, `overpaid` (with the excess locked for the
/// payer under the `refund` policy) or, once nothing else is pending, `underpaid` (window
/// extended by 30 minutes, at most three times).
pub fn payment_credited(ctx: &mut WriteCtx<'_>, s: &Scope, d: &Deposit) -> Result<(), Fault> {
    let Some(mut inv) = load_for(ctx, d)? else {
        return Ok(());
    };
    // The payment fee, frozen on the invoice, once at its first credit (SPEC.md section 4,
    // Invoices rule 2; DECISIONS.md section 13); later credits write nothing.
    crate::services::billing::charge_payment_fee(
        ctx,
        s,
        InvoiceId::of(&inv),
        inv.price_cents,
        crate::services::billing::FeeTerms {
            rate_bps: inv.fee_bps,
            fixed_cents: inv.fee_fixed_cents,
            cap_cents: inv.fee_cap_cents,
        },
    )?;
    unpend(&mut inv, d);
    let r = inv.received_mut(&d.chain, &d.asset);
    r.confirmed = r.confirmed.saturating_add(d.amount);
    let before_excess = inv.excess_cents;
    let v = refresh_amounts(&mut inv);
    let now = ctx.now_us();
    inv.updated_at = now;
    if d.late || matches!(inv.status, InvoiceStatus::Expired | InvoiceStatus::Canceled) {
        ctx.put(&inv)?;
        emit_invoice(ctx, s, "invoice.late_payment", &inv)?;
        conversions::queue_payment(ctx, s, DepositId::of(d), None, &d.chain, &d.asset, d.amount)?;
        return Ok(());
    }
    let event = match (judge(v, inv.price_cents), inv.status) {
        (Judgement::Over, InvoiceStatus::Overpaid) if inv.excess_cents > before_excess => {
            Some("invoice.overpaid")
        }
        (Judgement::Over, InvoiceStatus::Overpaid) => None,
        (Judgement::Over, _) => {
            inv.status = InvoiceStatus::Overpaid;
            inv.paid_at.get_or_insert(now);
            Some("invoice.overpaid")
        }
        (Judgement::Paid, st) if st.is_paid() => None,
        (Judgement::Paid, _) => {
            inv.status = InvoiceStatus::Paid;
            inv.paid_at = Some(now);
            Some("invoice.paid")
        }
        (Judgement::Under, st) if st.is_paid() => None,
        (Judgement::Under, _) if inv.pending_payments > 0 => None,
        (Judgement::Under, _) => {
            inv.status = InvoiceStatus::Underpaid;
            if inv.extensions < MAX_EXTENSIONS {
                inv.extensions += 1;
                let now_p = clock::now(ctx, &s.project)?;
                inv.expires_at = inv.expires_at.max(now_p).saturating_add(EXTENSION_US);
            }
            Some("invoice.underpaid")
        }
    };
    let mut held = 0;
    if inv.status == InvoiceStatus::Overpaid
        && inv.overpayment_policy == OverpaymentPolicy::Refund
        && event.is_some()
    {
        held = hold_excess(ctx, &mut inv, d, v)?;
    }
    ctx.put(&inv)?;
    if let Some(e) = event {
        emit_invoice(ctx, s, e, &inv)?;
    }
    // Merchant money converts automatically by the project's rule (DECISIONS.md section
    // 14), except the excess held for the payer.
    let convertible = d.amount.saturating_sub(held);
    if convertible > 0 {
        conversions::queue_payment(
            ctx,
            s,
            DepositId::of(d),
            None,
            &d.chain,
            &d.asset,
            convertible,
        )?;
    }
    Ok(())
}

/// Under the `refund` policy, moves the new excess (in the coin of payment `d`, at most its
/// amount) from the project's `available` to its `locked` on that chain, where it stays
/// until its refund is sent or skipped (DECISIONS.md section 12). The new excess is the
/// invoice's excess at the locked rates less what its claims already took (every claim,
/// whatever its state, valued at its coin's locked rate). It joins the claim that awaits
/// an address in the same coin and was never requested ([`InvoiceRefund::takes_more`]);
/// otherwise it opens a new claim (DECISIONS.md section 5:
/// excess arriving after a refund was requested, or in another coin, is a claim of its
/// own). Returns how much of `d` it held.
pub(super) fn hold_excess(
    ctx: &mut WriteCtx<'_>,
    inv: &mut Invoice,
    d: &Deposit,
    value: U512,
) -> Result<u128, Fault> {
    let Some(q) = inv.quote(&d.chain, &d.asset) else {
        return Ok(0);
    };
    let Some(per_atomic) = value_scaled(1, q.decimals, &q.rate).filter(|u| !u.is_zero()) else {
        return Ok(0);
    };
    let claimed = inv.refunds.iter().fold(U512::ZERO, |acc, c| {
        let v = inv
            .quote(&c.chain, &c.asset)
            .and_then(|q| value_scaled(c.amount_atomic, q.decimals, &q.rate))
            .unwrap_or(U512::ZERO);
        acc.saturating_add(v)
    });
    let excess = value
        .saturating_sub(price_scaled(inv.price_cents))
        .saturating_sub(claimed);
    let add = u128::try_from(excess / per_atomic)
        .unwrap_or(u128::MAX)
        .min(d.amount);
    if add == 0 {
        return Ok(0);
    }
    let e = refund_hold_entry(
        inv,
        &d.chain,
        &d.asset,
        add,
        JournalKind::InvoiceRefundHold,
        true,
        ctx.now_us(),
    );
    // The payment was just credited to `available`, so the hold fits unless the merchant
    // already spent it; then nothing is held (the ledger never goes negative).
    if ctx.post(&e)?.is_err() {
        tracing::warn!(invoice = %inv.id, "overpayment excess not held: the project's available balance is short");
        return Ok(0);
    }
    match inv
        .refunds
        .iter_mut()
        .find(|c| c.takes_more(&d.chain, &d.asset))
    {
        Some(c) => c.amount_atomic = c.amount_atomic.saturating_add(add),
        None => inv.refunds.push(InvoiceRefund {
            status: RefundStatus::AwaitingAddress,
            skip_reason: None,
            chain: d.chain.clone(),
            asset: d.asset.clone(),
            amount_atomic: add,
            payment_id: d.id,
            from_address: d.from_address.clone(),
            to_address: None,
            payout_id: None,
            sender_class: None,
            fee_atomic: None,
            failed_payouts: Vec::new(),
        }),
    }
    Ok(add)
}

/// The journal entry that holds (`hold`: `available` -> `locked`) or releases (`locked` ->
/// `available`) `amount` of the project's own `asset` on `chain` for invoice `inv`.
pub fn refund_hold_entry(
    inv: &Invoice,
    chain: &str,
    asset: &str,
    amount: u128,
    kind: JournalKind,
    hold: bool,
    now_us: i64,
) -> JournalEntry {
    let p = inv.project_id;
    let (from, to) = if hold {
        (AccountKind::Available, AccountKind::Locked)
    } else {
        (AccountKind::Locked, AccountKind::Available)
    };
    journal_entry(
        p,
        kind,
        inv.id,
        now_us,
        vec![
            Posting::debit(Account::project(p, chain, asset, from), amount),
            Posting::credit(Account::project(p, chain, asset, to), amount),
        ],
    )
}

/// A seen payment turned out not to be money (reverted, reorged before finality, an
/// archived coin). A `pending` invoice with nothing else pending returns to `open` or
/// `underpaid` (and the expiry worker expires it if its deadline passed meanwhile).
pub fn payment_failed(ctx: &mut WriteCtx<'_>, _s: &Scope, d: &Deposit) -> Result<(), Fault> {
    let Some(mut inv) = load_for(ctx, d)? else {
        return Ok(());
    };
    if d.late {
        return Ok(());
    }
    unpend(&mut inv, d);
    if inv.status == InvoiceStatus::Pending && inv.pending_payments == 0 {
        inv.status = unpaid_status(&inv);
    }
    inv.updated_at = ctx.now_us();
    ctx.put(&inv)?;
    Ok(())
}

/// A credited payment was orphaned by a reorg (its credit reversed by the deposit
/// machinery, the shortfall following the ledger's `receivable` rule): the invoice keeps its
/// status, `received_amount` drops, and `invoice.payment_orphaned` is emitted
/// (DECISIONS.md section 12).
pub fn payment_orphaned(ctx: &mut WriteCtx<'_>, s: &Scope, d: &Deposit) -> Result<(), Fault> {
    let Some(mut inv) = load_for(ctx, d)? else {
        return Ok(());
    };
    let r = inv.received_mut(&d.chain, &d.asset);
    r.confirmed = r.confirmed.saturating_sub(d.amount);
    refresh_amounts(&mut inv);
    inv.updated_at = ctx.now_us();
    ctx.put(&inv)?;
    conversions::payment_reversed(ctx, s, DepositId::of(d))?;
    emit_invoice(ctx, s, "invoice.payment_orphaned", &inv)?;
    Ok(())
}
