//! The billing checks of `verify` (DECISIONS.md section 13): balances and running sums,
//! each fee against its source, each funding entry against its transfer.

use super::*;

/// Billing (DECISIONS.md section 13): per project, the account's `balance_cents` and
/// `entries` equal the sum and the number of its entries, and each entry's
/// `balance_after_cents` is the running sum in entry order; each entry's sign fits its kind;
/// each fee names its source, which exists (a payout fee's payout is confirmed, or was
/// until a reorg undid it) and carries
/// no other fee of that kind; each entry's billing line is on the log at its sequence.
pub(super) fn check_billing(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    // Per project: (sum, count, running sum ok).
    let mut totals: BTreeMap<Uuid, (i128, u64)> = BTreeMap::new();
    each_row(ctx, rep, |rep, e: BillingEntry| {
        check_indexed(ctx, &e, rep)?;
        let t = totals.entry(e.project_id).or_default();
        t.0 += i128::from(e.amount_cents);
        t.1 += 1;
        if t.0 != i128::from(e.balance_after_cents) {
            rep.violations.push(format!(
                "billing entry {} says the balance became {} but the entries before it and it \
                 sum to {}",
                e.id, e.balance_after_cents, t.0
            ));
        }
        let sign_ok = match e.kind {
            EntryKind::Funding => e.amount_cents > 0,
            // A 0-cent adjustment records a funding transfer that credited nothing.
            EntryKind::Adjustment => e.amount_cents != 0 || is_funding_record(&e),
            EntryKind::OnboardingFee => e.amount_cents <= 0,
            _ => e.amount_cents < 0,
        };
        if !sign_ok {
            rep.violations.push(format!(
                "billing entry {} of kind {} has amount {}",
                e.id,
                e.kind.as_str(),
                e.amount_cents
            ));
        }
        match ctx.event_at(e.project_id, e.sequence) {
            Ok(Some(ev)) if ev.is_billing_line() && ev.resource_id == e.id.to_string() => {}
            Err(StoreError::Corrupt(_)) => {}
            Err(err) => return Err(err),
            _ => rep.violations.push(format!(
                "billing entry {} has no billing line at sequence {}",
                e.id, e.sequence
            )),
        }
        check_fee_source(ctx, &e, rep)?;
        check_funding(ctx, &e, rep)?;
        Ok(())
    })?;
    each_row(ctx, rep, |rep, a: BillingAccount| {
        let (sum, n) = totals.remove(&a.project_id).unwrap_or_default();
        if i128::from(a.balance_cents) != sum || a.entries != n {
            rep.violations.push(format!(
                "project {} billing balance is {} over {} entries, but its entries sum to {sum} \
                 over {n}",
                a.project_id, a.balance_cents, a.entries
            ));
        }
        Ok(())
    })?;
    for (p, (sum, n)) in totals {
        rep.violations.push(format!(
            "project {p} has {n} billing entries summing to {sum} but no billing account"
        ));
    }
    Ok(())
}

/// Whether `e` is about a transfer to a funding address (`ref_type` `deposit`, with the
/// transfer).
pub(super) fn is_funding_record(e: &BillingEntry) -> bool {
    e.ref_type.as_deref() == Some("deposit") && e.transfer.is_some()
}

pub(super) fn once_key(e: &BillingEntry, reference: &str) -> Vec<u8> {
    crate::index::unique(
        crate::index::IndexTag::UniqueBillingRef,
        e.project_id,
        &[e.kind.as_str().as_bytes(), reference.as_bytes()],
    )
}

/// Whole cents of `amount` atomic units of a coin of `decimals` at `rate` USD per whole
/// coin (a decimal string), rounded down, as `services::billing::funding_cents` computes
/// them. `None` when the rate does not parse or the product leaves `u128` (no credit of
/// that size can have been written: the service values in 96-bit decimals).
pub fn funding_cents(amount: u128, decimals: u8, rate: &str) -> Option<u128> {
    let (int, frac) = rate.split_once('.').unwrap_or((rate, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mantissa: u128 = format!("{int}{frac}").parse().ok()?;
    let scale = u32::from(decimals) + u32::try_from(frac.len()).ok()?;
    let den = 10u128.checked_pow(scale)?;
    amount
        .checked_mul(mantissa)?
        .checked_mul(100)
        .map(|n| n / den)
}

/// A funding credit (`funding`) or a record about a funding transfer (`adjustment` with
/// `ref_type` `deposit`: a 0-cent record of a transfer not credited, or the reversal of an
/// orphaned one's credit) matches its transfer (DECISIONS.md section 13): the deposit
/// exists, is a funding transfer of the project in the state the entry needs, chain, asset,
/// amount and tx hash agree, a credit is its amount at the entry's rate in whole cents
/// rounded down, a reversal takes back exactly the credit, and each is the one its
/// once-only key names.
pub(super) fn check_funding(
    ctx: &ReadCtx,
    e: &BillingEntry,
    rep: &mut Report,
) -> Result<(), StoreError> {
    let about_transfer = match e.kind {
        EntryKind::Funding => true,
        EntryKind::Adjustment => e.ref_type.as_deref() == Some("deposit"),
        _ => false,
    };
    if !about_transfer {
        return Ok(());
    }
    let mut bad = |p: String| {
        rep.violations.push(format!(
            "billing entry {} ({} of a funding transfer): {p}",
            e.id,
            e.kind.as_str()
        ))
    };
    let Some(id) = e.ref_id.as_deref().and_then(|r| Uuid::parse_str(r).ok()) else {
        bad("names no deposit".into());
        return Ok(());
    };
    let Some(t) = &e.transfer else {
        bad("carries no transfer".into());
        return Ok(());
    };
    let d = match ctx.get_in::<Deposit>(e.project_id, id) {
        Ok(Some(d)) => d,
        Ok(None) => {
            bad(format!("its deposit {id} does not exist"));
            return Ok(());
        }
        Err(StoreError::Corrupt(_)) => return Ok(()),
        Err(err) => return Err(err),
    };
    if !d.funding {
        bad(format!("deposit {id} is not a funding transfer"));
    }
    if e.chain.as_deref() != Some(d.chain.as_str())
        || e.asset.as_deref() != Some(d.asset.as_str())
        || e.amount_atomic != Some(d.amount)
        || t.tx_hash != d.tx_hash
    {
        bad(format!(
            "it says {:?} {:?} {:?} in {}, its deposit {} {} {} in {}",
            e.chain, e.asset, e.amount_atomic, t.tx_hash, d.chain, d.asset, d.amount, d.tx_hash
        ));
    }
    let reversal = e.kind == EntryKind::Adjustment && e.amount_cents < 0;
    let reference = if reversal {
        format!("orphan:{id}")
    } else {
        id.to_string()
    };
    if ctx.unique_get(&once_key(e, &reference))? != Some(e.id) {
        bad(format!("it is not the one entry recorded for {reference}"));
    }
    match e.kind {
        EntryKind::Funding => {
            if !matches!(d.status, DepositStatus::Confirmed | DepositStatus::Orphaned) {
                bad(format!("its deposit is {}", d.status.as_str()));
            }
            let want = t
                .decimals
                .zip(e.rate.as_deref())
                .and_then(|(dec, rate)| funding_cents(d.amount, dec, rate));
            match want {
                Some(c) if i128::try_from(c).ok() == Some(i128::from(e.amount_cents)) => {}
                Some(c) => bad(format!(
                    "{} at {:?} is {c} cents, the entry credits {}",
                    d.amount, e.rate, e.amount_cents
                )),
                None => bad(format!(
                    "its credit cannot be recomputed (rate {:?}, decimals {:?})",
                    e.rate, t.decimals
                )),
            }
        }
        _ if reversal => {
            if d.status != DepositStatus::Orphaned {
                bad(format!(
                    "it reverses a deposit that is {}",
                    d.status.as_str()
                ));
            }
            let credit = ctx
                .unique_get(&crate::index::unique(
                    crate::index::IndexTag::UniqueBillingRef,
                    e.project_id,
                    &[
                        EntryKind::Funding.as_str().as_bytes(),
                        id.to_string().as_bytes(),
                    ],
                ))?
                .map(|c| ctx.get::<BillingEntry>(c))
                .transpose();
            match credit {
                Ok(Some(Some(c))) if c.amount_cents == -e.amount_cents => {}
                Ok(Some(Some(c))) => bad(format!(
                    "it reverses {} cents of a credit of {}",
                    -e.amount_cents, c.amount_cents
                )),
                Err(StoreError::Corrupt(_)) => {}
                Err(err) => return Err(err),
                _ => bad("it reverses a credit that does not exist".into()),
            }
        }
        _ => {
            if e.amount_cents != 0 {
                bad("a record of a transfer not credited moves the balance".into());
            }
        }
    }
    Ok(())
}

/// The source of a fee entry exists, is in the state that earns the fee, and the entry is
/// the one its once-only key names.
pub(super) fn check_fee_source(
    ctx: &ReadCtx,
    e: &BillingEntry,
    rep: &mut Report,
) -> Result<(), StoreError> {
    let source = match e.kind {
        EntryKind::PaymentFee
        | EntryKind::AddressFee
        | EntryKind::PayoutFee
        | EntryKind::ConversionFee => e.ref_id.as_deref().and_then(|r| Uuid::parse_str(r).ok()),
        _ => return Ok(()),
    };
    let Some(id) = source else {
        rep.violations.push(format!(
            "billing entry {} ({}) names no source",
            e.id,
            e.kind.as_str()
        ));
        return Ok(());
    };
    let once = crate::index::unique(
        crate::index::IndexTag::UniqueBillingRef,
        e.project_id,
        &[e.kind.as_str().as_bytes(), id.to_string().as_bytes()],
    );
    if ctx.unique_get(&once)? != Some(e.id) {
        rep.violations.push(format!(
            "billing entry {} is not the one {} fee recorded for {id}",
            e.id,
            e.kind.as_str()
        ));
    }
    let problem = match e.kind {
        // The fee frozen on the invoice, recomputed from its terms and price
        // (DECISIONS.md section 13; `services::billing::FeeTerms::payment_fee_cents`).
        EntryKind::PaymentFee => match ctx.get_in::<Invoice>(e.project_id, id) {
            Ok(Some(inv)) => {
                let want = payment_fee_cents(
                    inv.price_cents,
                    inv.fee_bps,
                    inv.fee_fixed_cents,
                    inv.fee_cap_cents,
                );
                (i128::from(want) != -i128::from(e.amount_cents)).then(|| {
                    format!(
                        "its invoice's terms ({} bps + {} cents, cap {}) on {} cents give {want} cents",
                        inv.fee_bps, inv.fee_fixed_cents, inv.fee_cap_cents, inv.price_cents
                    )
                })
            }
            Err(StoreError::Corrupt(_)) => None,
            Ok(None) => Some("its invoice does not exist".to_string()),
            Err(err) => return Err(err),
        },
        EntryKind::AddressFee => match ctx.get_in::<Wallet>(e.project_id, id) {
            Ok(Some(_)) | Err(StoreError::Corrupt(_)) => None,
            Ok(None) => Some("its wallet does not exist".to_string()),
            Err(err) => return Err(err),
        },
        EntryKind::PayoutFee => match ctx.get_in::<Payout>(e.project_id, id) {
            Ok(Some(p)) if p.status == PayoutStatus::Confirmed => None,
            // Confirmed, then undone by a reorg (`payouts::unsettle`): the fee stays.
            Ok(Some(p)) if p.undone_by_reorg() => None,
            Ok(Some(p)) => Some(format!("its payout is {}", p.status.as_str())),
            Err(StoreError::Corrupt(_)) => None,
            Ok(None) => Some("its payout does not exist".to_string()),
            Err(err) => return Err(err),
        },
        EntryKind::ConversionFee => match ctx.get_in::<ConversionBatch>(e.project_id, id) {
            Ok(Some(b)) if b.status == BatchStatus::Settled => {
                (u64::try_from(-e.amount_cents).ok() != Some(b.fee_cents))
                    .then(|| format!("its batch records a fee of {} cents", b.fee_cents))
            }
            Ok(Some(b)) => Some(format!("its batch is {:?}", b.status)),
            Err(StoreError::Corrupt(_)) => None,
            Ok(None) => Some("its conversion batch does not exist".to_string()),
            Err(err) => return Err(err),
        },
        _ => None,
    };
    if let Some(p) = problem {
        rep.violations.push(format!(
            "billing entry {} ({} for {id}): {p}",
            e.id,
            e.kind.as_str()
        ));
    }
    Ok(())
}

/// The payment fee of an invoice priced `price_cents` under frozen terms: `min(cap, price x
/// bps / 10,000 rounded half up + fixed)` (DECISIONS.md section 13).
pub fn payment_fee_cents(price_cents: u64, bps: u32, fixed_cents: u64, cap_cents: u64) -> u64 {
    let rate = (u128::from(price_cents) * u128::from(bps) + 5_000) / 10_000;
    let fee = rate.saturating_add(u128::from(fixed_cents));
    u64::try_from(fee).unwrap_or(u64::MAX).min(cap_cents)
}
