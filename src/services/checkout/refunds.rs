//! Checkout refunds (SPEC.md section 4, Checkout; DECISIONS.md sections 5 and 12): the
//! sender's classification, the excess held for each claim, the buyer's request (a refund
//! payout), and what the refund payout's moves (failed, reverted, canceled, settled again)
//! do to its claim.

use super::*;
use appliance_storage::ledger::JournalKind;

/// The first refund claim of `inv` that waits for its classification ([`classify`]): it
/// awaits an address and its sender class is not known yet.
pub fn to_classify(inv: &Invoice) -> Option<usize> {
    inv.refunds
        .iter()
        .position(|r| r.awaiting_address() && r.sender_class.is_none())
}

/// Whether a refund claim of `inv` waits for its classification ([`to_classify`]).
pub fn needs_classification(inv: &Invoice) -> bool {
    to_classify(inv).is_some()
}

/// What [`classify`] learnt about a refund.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classification {
    /// `personal`, `contract`, `exchange` or `unknown`.
    pub sender_class: &'static str,
    /// The network fee estimate in atomic units of the refund's coin.
    pub fee_atomic: u128,
}

/// Why a refund could not be classified now (it stays `refund_not_ready`; retried later).
#[derive(Debug, thiserror::Error)]
pub enum ClassifyError {
    #[error("the chain's fees could not be read: {0}")]
    Fees(String),
    #[error("no usable {0} price to value the network fee")]
    NoPrice(String),
    #[error("the refund's chain or coin is not in the registry")]
    Unknown,
}

/// Classifies the sender of a refund and estimates its network fee in the refund's coin
/// (DECISIONS.md section 12), through the chain's client: `contract` when the sender has
/// code, `exchange` when its nonce is at least 1,000, else `personal`; `unknown` when the
/// node cannot tell. The fee is gas x max fee per gas, in the native coin; for a token it
/// is converted at `native_usd` (the native coin's usable price) and the refund coin's
/// locked `rate`, rounded up. `claimed`: the class a test transfer claimed for its sender
/// (test mode, DECISIONS.md section 15), used instead of the node's answer.
pub async fn classify(
    client: &dyn ChainClient,
    reg: &Registry,
    refund: &InvoiceRefund,
    rate: &str,
    native_usd: Option<Decimal>,
    claimed: Option<&str>,
) -> Result<Classification, ClassifyError> {
    let chain = reg.chain(&refund.chain).ok_or(ClassifyError::Unknown)?;
    let asset = chain.asset(&refund.asset).ok_or(ClassifyError::Unknown)?;
    let claimed = claimed.and_then(|c| SENDER_CLASSES.iter().copied().find(|k| *k == c));
    let sender_class = match Address::from_str(&refund.from_address) {
        _ if claimed.is_some() => claimed.unwrap_or("unknown"),
        Err(_) => "unknown",
        Ok(a) => match client.code(a).await {
            Err(_) => "unknown",
            Ok(code) if !code.is_empty() => "contract",
            Ok(_) => match client.nonce(a, false).await {
                Err(_) => "unknown",
                Ok(n) if n >= EXCHANGE_NONCE => "exchange",
                Ok(_) => "personal",
            },
        },
    };
    let fees = client
        .fees()
        .await
        .map_err(|e| ClassifyError::Fees(e.to_string()))?;
    let gas = if asset.is_native {
        NATIVE_TRANSFER_GAS
    } else {
        TOKEN_TRANSFER_GAS
    };
    let fee_wei = U512::from(gas) * U512::from(fees.max_fee_per_gas);
    let fee_atomic = if asset.is_native {
        u128::try_from(fee_wei).unwrap_or(u128::MAX)
    } else {
        let native = &chain.info.native;
        let price = native_usd.ok_or_else(|| ClassifyError::NoPrice(native.symbol.into()))?;
        // fee (USD x 10^48) / value of one atomic unit of the coin (USD x 10^48), rounded up.
        let fee_value = value_scaled(
            u128::try_from(fee_wei).unwrap_or(u128::MAX),
            native.decimals,
            &price.to_string(),
        )
        .ok_or_else(|| ClassifyError::NoPrice(native.symbol.into()))?;
        let per = value_scaled(1, asset.decimals, rate)
            .filter(|p| !p.is_zero())
            .ok_or(ClassifyError::Unknown)?;
        u128::try_from(fee_value.div_ceil(per)).unwrap_or(u128::MAX)
    };
    Ok(Classification {
        sender_class,
        fee_atomic,
    })
}

/// Stores the classification of claim `claim` (its index in `Invoice::refunds`, opened by
/// payment `payment_id`): `sender_class`, `fee` and `net` (= excess minus fee); a net worth
/// at most 1.00 USD at the locked rate makes the claim `skipped` with `dust` and releases
/// its held excess to the merchant's `available`. Does nothing when the claim was
/// classified or moved on meanwhile.
pub fn apply_classification(
    ctx: &mut WriteCtx<'_>,
    invoice_id: InvoiceId,
    claim: usize,
    payment_id: DepositId,
    c: &Classification,
) -> Result<(), Fault> {
    let Some(mut inv) = ctx.get::<Invoice>(invoice_id.uuid())? else {
        return Ok(());
    };
    let rate = match inv.refunds.get(claim) {
        Some(r)
            if r.payment_id == payment_id.uuid()
                && r.awaiting_address()
                && r.sender_class.is_none() =>
        {
            inv.quote(&r.chain, &r.asset)
                .map(|q| (q.decimals, q.rate.clone()))
        }
        _ => return Ok(()),
    };
    let r = &mut inv.refunds[claim];
    let net = r.amount_atomic.saturating_sub(c.fee_atomic);
    r.sender_class = Some(c.sender_class.to_string());
    r.fee_atomic = Some(c.fee_atomic);
    let net_value = rate
        .and_then(|(d, rate)| value_scaled(net, d, &rate))
        .unwrap_or(U512::ZERO);
    if net_value <= price_value(DUST_CENTS) {
        r.status = RefundStatus::Skipped;
        r.skip_reason = Some("dust".into());
        let (chain, asset, gross) = (r.chain.clone(), r.asset.clone(), r.amount_atomic);
        release_hold(
            ctx,
            &inv,
            &chain,
            &asset,
            gross,
            JournalKind::InvoiceRefundSkip,
        )?;
    }
    inv.updated_at = ctx.now_us();
    ctx.put(&inv)?;
    Ok(())
}

/// Moves `amount` of the held excess from the project's `locked` back to `available`.
fn release_hold(
    ctx: &mut WriteCtx<'_>,
    inv: &Invoice,
    chain: &str,
    asset: &str,
    amount: u128,
    kind: JournalKind,
) -> Result<(), Fault> {
    if amount == 0 {
        return Ok(());
    }
    ctx.post(&invoices::refund_hold_entry(
        inv,
        chain,
        asset,
        amount,
        kind,
        false,
        ctx.now_us(),
    ))??;
    Ok(())
}

/// `POST /v1/checkout/{token}/refund` (SPEC.md section 4, rules for refund): sends the
/// open refund claim ([`Invoice::open_refund`]) to `address`. Only under the `refund`
/// policy with that claim `awaiting_address` and classified (else 409 `refund_not_ready`,
/// or `invalid_state` once skipped); the address must parse on the claim's chain (422
/// `invalid_address`) and not be one the service custodies (422 `self_payout_forbidden`).
/// When no claim awaits an address, the SAME address as the newest claim's is idempotent; a
/// different one 409 `refund_address_mismatch`. A claim whose payout failed awaits an
/// address again and takes any valid one.
///
/// One transaction: the payout (merchant funds, `reference` `refund:<invoice id>`, queued
/// without approval, no fee) takes the net from the held excess, at the claim's first
/// request the fee part returns to `available`, `payout.created` is emitted and the claim
/// becomes `pending`.
pub fn request_refund(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    invoice_id: InvoiceId,
    address: &str,
) -> Result<(), CheckoutError> {
    let mut inv = ctx
        .get::<Invoice>(invoice_id.uuid())?
        .ok_or(CheckoutError::NotFound)?;
    let Some(i) = inv.open_refund() else {
        return Err(match inv.overpayment_policy {
            OverpaymentPolicy::Refund => CheckoutError::RefundNotReady,
            OverpaymentPolicy::Keep => CheckoutError::RefundClosed { status: None },
        });
    };
    let r = inv.refunds[i].clone();
    let chain = s
        .reg
        .chain(&r.chain)
        .ok_or_else(|| Fault::Invariant(format!("refund on unknown chain {}", r.chain)))?;
    let same = |to: &str| {
        if chain.is_evm() {
            to.eq_ignore_ascii_case(address)
        } else {
            to == address
        }
    };
    match r.status {
        RefundStatus::AwaitingAddress => {}
        RefundStatus::Pending | RefundStatus::Sent | RefundStatus::Confirmed => {
            return match r.to_address.as_deref() {
                Some(to) if same(to) => Ok(()),
                _ => Err(CheckoutError::AddressMismatch),
            };
        }
        other => {
            return Err(CheckoutError::RefundClosed {
                status: Some(other),
            })
        }
    }
    let (Some(_), Some(net)) = (r.sender_class.as_ref(), r.net_atomic()) else {
        return Err(CheckoutError::RefundNotReady);
    };
    // The hold may have grown since the classification (a second overpayment in the same
    // coin before any request): the net is taken now.
    if !chain.is_evm() {
        return Err(CheckoutError::InvalidAddress {
            chain: r.chain.clone(),
            reason: "refunds are sent on EVM chains only".into(),
        });
    }
    let parsed = appliance_chains::address::parse_evm_address(address).map_err(|e| {
        CheckoutError::InvalidAddress {
            chain: r.chain.clone(),
            reason: e.to_string(),
        }
    })?;
    let to = format!("0x{}", hex::encode(parsed));
    let p = s.project.id;
    if ctx
        .unique_get(&wallets::address_key(&r.chain, &to))?
        .is_some()
        || to.eq_ignore_ascii_case(&wallets::master_address(p))
        || wallets::is_live_treasury(&s.reg, &to)
    {
        return Err(CheckoutError::Custodied);
    }
    let now = ctx.now_us();
    let payout = Payout {
        id: appliance_storage::sources::new_id(),
        project_id: p,
        customer_id: None,
        chain: r.chain.clone(),
        asset: r.asset.clone(),
        amount: net,
        fee_amount: 0,
        to_address: to.clone(),
        memo: None,
        status: PayoutStatus::Queued,
        reference: Some(RefundReference::new(inv.id).to_string()),
        tx_hash: None,
        failure_reason: None,
        amount_usd_cents: inv
            .quote(&r.chain, &r.asset)
            .and_then(|q| value_scaled(net, q.decimals, &q.rate))
            .and_then(|v| u64::try_from(v / price_value(1)).ok()),
        created_by_key: Uuid::nil(),
        approved_by_key: None,
        queued_block: Some(deposits::sim_height(ctx, &r.chain)?),
        submitted_block: None,
        created_at: now,
        updated_at: now,
    };
    // The claim's excess is in `locked` already: the net stays there as the payout's lock.
    // At the first request the fee part returns to the merchant's `available`; after a
    // failed payout only the net was held again.
    release_hold(
        ctx,
        &inv,
        &r.chain,
        &r.asset,
        r.held_atomic().saturating_sub(net),
        JournalKind::InvoiceRefundFee,
    )?;
    ctx.put(&payout)?;
    emit_row(ctx, s, "payout.created", &payout)?;
    let c = &mut inv.refunds[i];
    c.status = RefundStatus::Pending;
    c.to_address = Some(to);
    c.payout_id = Some(payout.id);
    inv.updated_at = now;
    ctx.put(&inv)?;
    Ok(())
}

/// The invoice whose refund `p` is (`reference` `refund:<invoice id>`), if it still exists.
fn refund_invoice(ctx: &WriteCtx<'_>, p: &Payout) -> Result<Option<Invoice>, Fault> {
    let Some(r) = p.refund() else {
        return Ok(None);
    };
    Ok(ctx.get_in::<Invoice>(p.project_id, r.invoice_id)?)
}

/// Keeps a refund claim in step with its payout (called by `services::payouts` on every
/// state change of a payout whose `reference` is `refund:<invoice id>`, after the payout's
/// own journal entry): `submitted` -> `sent`, `confirmed` -> `confirmed` with
/// `invoice.refunded`, `failed` / `canceled` / `rejected` (also a confirmed payout a reorg
/// undid, `payouts::unsettle`) -> `awaiting_address`: the payout's funds, just returned to
/// the merchant's `available`, are held in `locked` again for the claim (`invoice_refund_hold`),
/// the payout is listed in the claim's `failed_payouts` and its address is forgotten, so the
/// buyer may give one again (DECISIONS.md section 5).
pub fn refund_payout_moved(ctx: &mut WriteCtx<'_>, s: &Scope, p: &Payout) -> Result<(), Fault> {
    let Some(mut inv) = refund_invoice(ctx, p)? else {
        return Ok(());
    };
    let Some(i) = inv.refunds.iter().position(|c| c.payout_id == Some(p.id)) else {
        return Ok(());
    };
    let Some(to) = InvoiceRefund::status_following(p.status) else {
        return Ok(());
    };
    if inv.refunds[i].status == to {
        return Ok(());
    }
    let now = ctx.now_us();
    if to == RefundStatus::AwaitingAddress {
        let (chain, asset) = (inv.refunds[i].chain.clone(), inv.refunds[i].asset.clone());
        let amount = p.amount.saturating_add(p.fee_amount);
        let e = invoices::refund_hold_entry(
            &inv,
            &chain,
            &asset,
            amount,
            JournalKind::InvoiceRefundHold,
            true,
            now,
        );
        let c = &mut inv.refunds[i];
        if amount > 0 && ctx.post(&e)?.is_err() {
            // Unreachable (the payout's funds were just returned to `available`); should it
            // happen, the claim ends as before the rule: `failed`, the funds the merchant's.
            tracing::error!(invoice = %inv.id, payout = %p.id, "a failed refund's net could not be held again");
            c.status = RefundStatus::Failed;
        } else {
            c.status = to;
            c.to_address = None;
        }
        c.payout_id = None;
        c.failed_payouts.push(p.id);
    } else {
        inv.refunds[i].status = to;
    }
    inv.updated_at = now;
    ctx.put(&inv)?;
    if to == RefundStatus::Confirmed {
        crate::services::invoices::emit_invoice(ctx, s, "invoice.refunded", &inv)?;
    }
    Ok(())
}

/// A refund payout that had failed is about to be confirmed after all (a reorg let its
/// transaction succeed: `payouts::resettle`). If its claim still awaits an address, the
/// net held again for it ([`refund_payout_moved`]) is released to `available`, from where
/// the resettlement takes it (`invoice_refund_release`), and the claim follows that payout
/// again (`sent`, then `confirmed` by [`refund_payout_moved`]). A claim already requested
/// again keeps its new payout: the buyer is then paid twice, which the ledger records as
/// any resettled payout (docs/decisions.md, Refund claims).
pub fn refund_payout_resettling(ctx: &mut WriteCtx<'_>, p: &Payout) -> Result<(), Fault> {
    let Some(mut inv) = refund_invoice(ctx, p)? else {
        return Ok(());
    };
    let Some(i) = inv
        .refunds
        .iter()
        .position(|c| c.awaiting_address() && c.failed_payouts.contains(&p.id))
    else {
        return Ok(());
    };
    let (chain, asset) = (inv.refunds[i].chain.clone(), inv.refunds[i].asset.clone());
    let held = inv.refunds[i].held_atomic();
    release_hold(
        ctx,
        &inv,
        &chain,
        &asset,
        held,
        JournalKind::InvoiceRefundRelease,
    )?;
    let c = &mut inv.refunds[i];
    c.failed_payouts.retain(|id| *id != p.id);
    c.payout_id = Some(p.id);
    c.to_address = Some(p.to_address.clone());
    c.status = RefundStatus::Sent;
    inv.updated_at = ctx.now_us();
    ctx.put(&inv)?;
    Ok(())
}
