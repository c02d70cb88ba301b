//! A conversion batch's send saga after planning: approve and swap recorded, approved,
//! refused, dropped, followed to a new hash, settled (the ledger moves of the swap) or failed.

use super::*;

/// The approve transaction of an `approving` batch was recorded: `false` when the batch
/// no longer waits for one (the caller records nothing).
pub fn approve_recorded(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: ConversionBatchId,
    hash: &str,
) -> Result<bool, Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Approving)? else {
        return Ok(false);
    };
    if b.approve_tx_hash.is_some() {
        return Ok(false);
    }
    b.approve_tx_hash = Some(hash.to_string());
    save(ctx, b)?;
    Ok(true)
}

/// The router may take the batch's input: `approving` -> `swapping` (the approval has the
/// chain's confirmations, or the allowance already sufficed).
pub fn approved(ctx: &mut WriteCtx<'_>, s: &Scope, id: ConversionBatchId) -> Result<(), Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Approving)? else {
        return Ok(());
    };
    b.status = BatchStatus::Swapping;
    save(ctx, b)
}

/// The approval was mined and reverted, or dropped for good: the batch asks again
/// (`reverted`: counts as an attempt).
pub fn approve_lost(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: ConversionBatchId,
    reverted: bool,
) -> Result<(), Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Approving)? else {
        return Ok(());
    };
    b.approve_tx_hash = None;
    match reverted {
        true => count_attempt(ctx, b, "approve_reverted"),
        false => save(ctx, b),
    }
}

/// The swap of a `swapping` batch was recorded with a fresh quote: `false` when the batch
/// no longer waits for one.
pub fn swap_recorded(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: ConversionBatchId,
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
pub fn swap_refused(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: ConversionBatchId,
    code: &str,
) -> Result<(), Fault> {
    let Some(b) = open_batch(ctx, s, id, BatchStatus::Swapping)? else {
        return Ok(());
    };
    if b.swap_tx_hash.is_some() {
        return Ok(());
    }
    count_attempt(ctx, b, code)
}

/// A batch step's transaction was replaced with higher fees: the batch shows the new hash
/// (`swap`: the swap, else the approval).
pub fn follow_hash(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: ConversionBatchId,
    swap: bool,
    hash: &str,
) -> Result<(), Fault> {
    let Some(mut b) = ctx
        .get_in::<ConversionBatch>(s.project.id, id.uuid())?
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
pub fn swap_dropped(ctx: &mut WriteCtx<'_>, s: &Scope, id: ConversionBatchId) -> Result<(), Fault> {
    let Some(mut b) = open_batch(ctx, s, id, BatchStatus::Swapping)? else {
        return Ok(());
    };
    if b.swap_tx_hash.is_none() {
        return Ok(());
    }
    b.swap_tx_hash = None;
    b.attempts = b.attempts.saturating_sub(1);
    save(ctx, b)
}

/// The swap `hash` has the chain's confirmations. Success with its executed output
/// `amount_out`: the batch and its rows settle (ledger, `conversion.completed` per row).
/// A revert: retried with a fresh quote until [`MAX_ATTEMPTS`], then `failed` with
/// `slippage` and the rows' coins stay where they were.
pub fn swap_settled(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: ConversionBatchId,
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
            return fail_batch(ctx, b, "slippage");
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
    let e = move_entry(b.project_id, JournalKind::ConversionSettle, b.id, now, legs);
    ctx.post(&e)??;
    b.status = BatchStatus::Settled;
    b.amount_out = amount_out;
    b.settled_at = Some(now);
    b.updated_at = now;
    // The plan's swap rate, charged on settlement (SPEC.md section 4, Conversions rule 4).
    if let Some(usd) = b.amount_usd_cents {
        b.fee_cents = crate::services::billing::charge_conversion_fee(
            ctx,
            s,
            ConversionBatchId::of(&b),
            usd,
        )?;
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
            crate::views::to_value(&conversion_view(&s.reg, &r)),
        )?;
    }
    Ok(())
}

/// Writes batch `b`, updated now.
fn save(ctx: &mut WriteCtx<'_>, mut b: ConversionBatch) -> Result<(), Fault> {
    b.updated_at = ctx.now_us();
    ctx.put(&b)?;
    Ok(())
}

/// Counts a failed attempt of batch `b`: after [`MAX_ATTEMPTS`] it fails with `code`.
fn count_attempt(ctx: &mut WriteCtx<'_>, mut b: ConversionBatch, code: &str) -> Result<(), Fault> {
    b.attempts += 1;
    if b.attempts >= MAX_ATTEMPTS {
        return fail_batch(ctx, b, code);
    }
    save(ctx, b)
}

/// Fails a batch: its rows are `failed`, their locked amounts return to `available`.
fn fail_batch(ctx: &mut WriteCtx<'_>, mut b: ConversionBatch, code: &str) -> Result<(), Fault> {
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
    let e = move_entry(
        b.project_id,
        JournalKind::ConversionRelease,
        b.id,
        now,
        legs,
    );
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
pub fn fail(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: ConversionBatchId,
    code: &str,
) -> Result<(), Fault> {
    let Some(b) = ctx
        .get_in::<ConversionBatch>(s.project.id, id.uuid())?
        .filter(|b| b.status.is_open())
    else {
        return Ok(());
    };
    fail_batch(ctx, b, code)
}

// ---------------------------------------------------------------------------------------
// Views
