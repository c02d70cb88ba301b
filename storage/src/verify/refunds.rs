//! The refund checks of `verify` (DECISIONS.md sections 5 and 12): every refund claim agrees with its payout, and the project's own `locked`
//! holds exactly what its open payouts, open conversions and refund claims hold.

use super::*;
use crate::records::{InvoiceRefund, RefundReference, RefundStatus};

/// Refund claims and the project's own `locked` account:
///
/// - a claim names a payout exactly when it is `pending`, `sent` or `confirmed` (or, in a row
///   of the one-claim form, `failed`); that payout is the invoice's refund
///   (`reference` `refund:<invoice id>`) in the claim's coin, of its net, in the status the
///   claim follows (`pending`: not yet submitted; `sent`: submitted; `confirmed`:
///   confirmed; `failed`: failed, canceled or rejected); each of `failed_payouts` is such a
///   refund payout too;
/// - per project and (chain, asset), the project's own `locked` (customer nil) equals the
///   amount and fee of its open payouts without a customer (refunds among them), plus what
///   its open conversion batches locked of its own funds, plus what the invoices' claims
///   hold outside a payout ([`InvoiceRefund::held_atomic`]). A hold that leaked to
///   `available` (a later overpayment kept silently) or was released twice shows here.
pub(super) fn check_refund_holds(
    ctx: &ReadCtx,
    stored: &BTreeMap<Account, Balance>,
    conv_entries: &BTreeMap<Uuid, Vec<JournalEntry>>,
    rep: &mut Report,
) -> Result<(), StoreError> {
    use crate::records::{BatchStatus, ConversionBatch};
    // What the project's own `locked` should hold, by (project, chain, asset).
    let mut want: BTreeMap<(Uuid, String, String), u128> = BTreeMap::new();
    let mut add = |p: Uuid, chain: &str, asset: &str, v: u128| {
        let e = want
            .entry((p, chain.to_string(), asset.to_string()))
            .or_default();
        *e = e.saturating_add(v);
    };
    decoded_rows(ctx, |p: Payout| {
        if p.customer_id.is_none() && p.status.is_open() {
            add(
                p.project_id,
                &p.chain,
                &p.asset,
                p.amount.saturating_add(p.fee_amount),
            );
        }
        Ok(())
    })?;
    decoded_rows(ctx, |b: ConversionBatch| {
        if !matches!(b.status, BatchStatus::Approving | BatchStatus::Swapping) {
            return Ok(());
        }
        for entry in conv_entries.get(&b.id).into_iter().flatten() {
            if entry.kind != JournalKind::ConversionLock {
                continue;
            }
            for p in &entry.postings {
                let a = &p.account;
                if a.kind == AccountKind::Locked && a.customer_id.is_nil() {
                    add(
                        a.project_id,
                        &a.chain,
                        &a.asset,
                        p.credit.saturating_sub(p.debit),
                    );
                }
            }
        }
        Ok(())
    })?;
    decoded_rows(ctx, |inv: Invoice| {
        for (i, c) in inv.refunds.iter().enumerate() {
            add(inv.project_id, &c.chain, &c.asset, c.held_atomic());
            check_claim(ctx, &inv, i, c, rep)?;
        }
        Ok(())
    })?;
    let mut keys: BTreeMap<(Uuid, String, String), u128> = BTreeMap::new();
    for (a, b) in stored {
        if a.kind == AccountKind::Locked && a.customer_id.is_nil() {
            keys.insert(
                (a.project_id, a.chain.clone(), a.asset.clone()),
                b.credit_balance(),
            );
        }
    }
    for k in want.keys() {
        keys.entry(k.clone()).or_default();
    }
    for (k, have) in keys {
        let w = want.get(&k).copied().unwrap_or(0);
        if have != w {
            rep.violations.push(format!(
                "project {} own locked {} {} holds {have}, but its open payouts, conversions and \
                 refund claims hold {w}",
                k.0, k.1, k.2
            ));
        }
    }
    Ok(())
}

/// The claim-against-payout half of [`check_refund_holds`] for claim `i` of `inv`.
fn check_claim(
    ctx: &ReadCtx,
    inv: &Invoice,
    i: usize,
    c: &InvoiceRefund,
    rep: &mut Report,
) -> Result<(), StoreError> {
    let reference = RefundReference::new(inv.id);
    let load = |id: Uuid| -> Result<Option<Payout>, StoreError> {
        match ctx.get_in::<Payout>(inv.project_id, id) {
            Ok(p) => Ok(p.filter(|p| {
                p.refund() == Some(reference)
                    && p.chain == c.chain
                    && p.asset == c.asset
                    && p.customer_id.is_none()
            })),
            // Reported by `check_decodable`.
            Err(StoreError::Corrupt(_)) => Ok(None),
            Err(e) => Err(e),
        }
    };
    let what = format!(
        "invoice {} refund claim {i} ({})",
        inv.id,
        c.status.as_str()
    );
    for id in &c.failed_payouts {
        if load(*id)?.is_none() {
            rep.violations.push(format!(
                "{what} lists failed payout {id}, which is not its refund payout"
            ));
        }
    }
    let requested = matches!(
        c.status,
        RefundStatus::Pending | RefundStatus::Sent | RefundStatus::Confirmed
    );
    let Some(id) = c.payout_id else {
        if requested {
            rep.violations.push(format!("{what} names no payout"));
        }
        return Ok(());
    };
    if !requested && c.status != RefundStatus::Failed {
        rep.violations.push(format!("{what} names payout {id}"));
        return Ok(());
    }
    let Some(p) = load(id)? else {
        rep.violations.push(format!(
            "{what} names payout {id}, which is not its refund payout"
        ));
        return Ok(());
    };
    // The status the payout's asks of its claim; a claim of the one-claim form that
    // ended `failed` follows a payout that failed, was canceled or rejected.
    let expected = InvoiceRefund::status_following(p.status).unwrap_or(RefundStatus::Pending);
    let follows = match c.status {
        RefundStatus::Failed => expected == RefundStatus::AwaitingAddress,
        s => s == expected,
    };
    if !follows {
        rep.violations.push(format!(
            "{what} follows payout {id}, which is {}",
            p.status.as_str()
        ));
    }
    if Some(p.amount) != c.net_atomic() {
        rep.violations.push(format!(
            "{what} nets {:?} but its payout {id} sends {}",
            c.net_atomic(),
            p.amount
        ));
    }
    Ok(())
}
