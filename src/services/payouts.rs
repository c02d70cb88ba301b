//! Payouts (SPEC.md section 4, Payouts; DECISIONS.md section 5).
//!
//! Ledger: creation moves amount + fee from `available` to `locked`; confirmation removes it
//! from `locked` against the treasury; failure, cancel and rejection return it to `available`.

use uuid::Uuid;

use appliance_chains::ChainStatus;
use appliance_storage::index::IndexTag;
use appliance_storage::ledger::{Account, AccountKind, JournalEntry, JournalKind, Posting};
use appliance_storage::records::{Customer, Payout, PayoutStatus, RefundReference};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::services::chains::{self, ChainError};
use crate::services::error::{fault_from, Fault};
use crate::services::types::{Amount, ApiKeyId, AssetSymbol, ChainId, CustomerId, Id, PayoutId};
use crate::services::{deposits, emit_row, journal_entry, wallets, Scope};

/// Why a payout request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum PayoutError {
    /// No such payout in the project: 404 `not_found`.
    #[error("No such payout.")]
    NotFound,
    /// `customer_id` names no customer of the project: 404 `not_found`.
    #[error("No such customer.")]
    CustomerNotFound,
    /// The chain or asset cannot be used.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The chain is not live or its payouts are switched off: 422 `chain_unavailable`.
    #[error("Payouts on {chain} are not available: {note}")]
    ChainUnavailable { chain: String, note: String },
    /// The asset's payouts are switched off or it is archived: 422 `asset_payouts_disabled`.
    #[error("Payouts of {asset} on {chain} are switched off.")]
    AssetPayoutsDisabled { asset: String, chain: String },
    /// `to_address` does not parse on the chain: 422 `invalid_address`.
    #[error("to_address is not a valid address: {reason}.")]
    InvalidAddress { reason: String },
    /// `reference` starts with `refund:`, which names the appliance's own invoice refunds
    /// (no approval, no fee; DECISIONS.md section 12): 400 `invalid_request` on `reference`.
    #[error("reference may not start with refund: (reserved for invoice refunds).")]
    ReservedReference,
    /// `to_address` is custodied by this service: 422 `self_payout_forbidden`.
    #[error("to_address is an address this service custodies.")]
    SelfPayout,
    /// The project's in-flight ceiling is reached: 429 `too_many_pending_payouts`.
    #[error("This project already has {max} payouts in flight.")]
    TooManyPending { max: u32 },
    /// Amount plus fee exceed the available balance: 402 `insufficient_funds`. Amounts in
    /// atomic units of `asset` (`decimals` places).
    #[error(
        "Insufficient funds: available {} {asset} ({available} atomic), requested {} {asset} ({requested} atomic).",
        appliance_chains::format_decimal(*.available, *.decimals),
        appliance_chains::format_decimal(*.requested, *.decimals)
    )]
    InsufficientFunds {
        available: u128,
        requested: u128,
        asset: String,
        decimals: u8,
    },
    /// Approve or reject of a payout that is not pending approval: 409 `invalid_state`.
    #[error("Only a payout pending approval can be {action}; this one is {}.", .status.as_str())]
    NotPendingApproval {
        action: &'static str,
        status: PayoutStatus,
    },
    /// The creating key approves or rejects its own payout: 403 `approver_must_differ`.
    #[error("A payout must be {action} by a different key than the one that created it.")]
    ApproverMustDiffer { action: &'static str },
    /// Cancel after signing began: 409 `payout_not_cancelable`.
    #[error("A payout that is {} can no longer be canceled.", .status.as_str())]
    NotCancelable { status: PayoutStatus },
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(PayoutError);

/// `POST /v1/payouts`.
#[derive(utoipa::ToSchema)]
pub struct NewPayout {
    #[schema(value_type = crate::services::types::ChainIdIn)]
    pub chain: ChainId,
    /// Asset symbol as listed by `GET /v1/chains`, e.g. `USDT`.
    #[schema(value_type = String, min_length = 1)]
    pub asset: AssetSymbol,
    /// Must equal the asset's decimals (400 `decimals_mismatch` otherwise).
    #[schema(minimum = 0)]
    pub decimals: u64,
    /// Atomic units.
    #[schema(value_type = String, pattern = "^[1-9][0-9]{0,37}$")]
    pub amount: Amount,
    pub to_address: String,
    /// The customer whose balance pays; omitted for the project's own funds.
    #[schema(value_type = Option<Uuid>)]
    pub customer_id: Option<CustomerId>,
    /// Free text; `refund:` at its start is reserved for the appliance's invoice refunds
    /// (400 `invalid_request`).
    #[schema(max_length = 255, pattern = "^(?!refund:)")]
    pub reference: Option<String>,
    #[schema(max_length = 255)]
    pub memo: Option<String>,
    /// USD per whole unit of a non-stable asset, from a usable market price
    /// (`Market::usable_price`, read before the store transaction); `None` without one.
    /// Ignored for stablecoins (par).
    #[schema(ignore)]
    pub usd_rate: Option<rust_decimal::Decimal>,
}

fn owner(p: &Payout) -> Uuid {
    p.customer_id.unwrap_or(Uuid::nil())
}

fn lock_entry(
    p: &Payout,
    kind: JournalKind,
    from: AccountKind,
    to: AccountKind,
    now: i64,
) -> JournalEntry {
    let total = p.amount + p.fee_amount;
    journal_entry(
        p.project_id,
        kind,
        p.id,
        now,
        vec![
            Posting::debit(
                Account::customer(p.project_id, owner(p), &p.chain, &p.asset, from),
                total,
            ),
            Posting::credit(
                Account::customer(p.project_id, owner(p), &p.chain, &p.asset, to),
                total,
            ),
        ],
    )
}

/// What [`create`] checks of `to_address` without the store: whether it parses as an EVM
/// address (used on EVM chains; the reason when not) and whether it is the project's test
/// master wallet or the live treasury (self-payouts). A pure function of the scope and the
/// address, with up to three keccak-256 hashes (checksums, the master's CREATE2 address):
/// the handler computes it on the request's thread before the store job ([`create_with`]).
pub struct AddressFacts {
    evm: Result<(), String>,
    own: bool,
}

/// The [`AddressFacts`] of `to_address` under `s`.
pub fn address_facts(s: &Scope, to_address: &str) -> AddressFacts {
    AddressFacts {
        evm: appliance_chains::address::parse_evm_address(to_address)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        own: to_address.eq_ignore_ascii_case(&wallets::master_address(s.project.id))
            || wallets::is_live_treasury(&s.reg, to_address),
    }
}

/// Accepts a payout: checks every rule, locks the funds and queues it (or holds it for
/// approval above the project's threshold).
///
/// Errors: 400 `unknown_asset`, `decimals_mismatch`, `invalid_request`; 404 customer;
/// 422 `chain_not_enabled`, `chain_unavailable`, `asset_payouts_disabled`,
/// `invalid_address`, `self_payout_forbidden`; 402 `insufficient_funds`;
/// 429 `too_many_pending_payouts`.
pub fn create(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    key_id: ApiKeyId,
    req: NewPayout,
) -> Result<Payout, PayoutError> {
    let facts = address_facts(s, &req.to_address);
    create_with(ctx, s, key_id, req, facts)
}

/// [`create`] with the address checks computed beforehand by [`address_facts`] under the
/// same scope `s`, for the same `req.to_address`.
pub fn create_with(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    key_id: ApiKeyId,
    req: NewPayout,
    facts: AddressFacts,
) -> Result<Payout, PayoutError> {
    let p = s.project.id;
    let (decimals, stable) = check_allowed(ctx, s, &req, facts)?;
    // Stablecoins at par; other coins at the usable market rate the caller read (`None`:
    // no usable price, so no dollar value and never auto-approved; docs/decisions.md,
    // Market prices).
    let rate = match stable {
        true => Some(rust_decimal::Decimal::ONE),
        false => req.usd_rate,
    };
    let usd = rate.and_then(|r| crate::market::usd_value(req.amount.get(), decimals, r));
    let usd_cents = usd.and_then(crate::market::whole_cents);
    let now = ctx.now_us();
    let status = initial_status(s, usd);
    let payout = Payout {
        id: appliance_storage::sources::new_id(),
        project_id: p,
        customer_id: req.customer_id.map(Id::uuid),
        chain: req.chain.into_string(),
        asset: req.asset.into_string(),
        amount: req.amount.get(),
        fee_amount: 0,
        to_address: req.to_address,
        memo: req.memo,
        status,
        reference: req.reference,
        tx_hash: None,
        failure_reason: None,
        amount_usd_cents: usd_cents,
        created_by_key: key_id.uuid(),
        approved_by_key: None,
        queued_block: None,
        submitted_block: None,
        created_at: now,
        updated_at: now,
    };
    check_funds(ctx, &payout, decimals)?;
    let mut payout = payout;
    if status == PayoutStatus::Queued {
        payout.queued_block = Some(deposits::sim_height(ctx, &payout.chain)?);
    }
    let e = lock_entry(
        &payout,
        JournalKind::PayoutLock,
        AccountKind::Available,
        AccountKind::Locked,
        now,
    );
    ctx.post(&e)??;
    ctx.put(&payout)?;
    emit_row(ctx, s, "payout.created", &payout)?;
    Ok(payout)
}

/// Whether the project may pay `req` out (SPEC.md section 4, Payouts): its customer exists,
/// the chain is live with payouts on, the coin is listed with payouts on and `req`'s
/// decimals are its own, the destination is a valid address on an EVM chain and none of the
/// appliance's own (no self-payout), and the project has room for one more open payout.
/// Returns the coin's decimals and whether it is a stablecoin.
fn check_allowed(
    ctx: &WriteCtx<'_>,
    s: &Scope,
    req: &NewPayout,
    facts: AddressFacts,
) -> Result<(u8, bool), PayoutError> {
    let p = s.project.id;
    if req
        .reference
        .as_deref()
        .is_some_and(RefundReference::has_prefix)
    {
        return Err(PayoutError::ReservedReference);
    }
    if let Some(c) = req.customer_id {
        ctx.get_in::<Customer>(p, c.uuid())?
            .ok_or(PayoutError::CustomerNotFound)?;
    }
    let eff = chains::resolve(&s.reg, &s.project, &req.chain, "chain")?;
    let asset = chains::resolve_asset(&eff, &req.asset, "asset")?;
    chains::check_decimals(asset.asset, req.decimals)?;
    if eff.status != ChainStatus::Live || !eff.payouts_enabled {
        return Err(PayoutError::ChainUnavailable {
            chain: req.chain.to_string(),
            note: if eff.status_note.is_empty() {
                "switched off".into()
            } else {
                eff.status_note.clone()
            },
        });
    }
    if !asset.payouts_enabled || asset.archived {
        return Err(PayoutError::AssetPayoutsDisabled {
            asset: req.asset.to_string(),
            chain: req.chain.to_string(),
        });
    }
    if eff.chain.is_evm() {
        facts
            .evm
            .map_err(|reason| PayoutError::InvalidAddress { reason })?;
    }
    if ctx
        .unique_get(&wallets::address_key(&req.chain, &req.to_address))?
        .is_some()
        || facts.own
    {
        return Err(PayoutError::SelfPayout);
    }
    let max = s.project.settings.max_pending_payouts;
    if ctx.count_of(IndexTag::PayoutsOpen, p)? >= max as u64 {
        return Err(PayoutError::TooManyPending { max });
    }
    Ok((asset.asset.decimals, asset.asset.is_stable()))
}

/// A new payout's status: `queued` without an auto-approve threshold or at a dollar value
/// (`usd`) within it, otherwise `pending_approval` (one without a dollar value too).
fn initial_status(s: &Scope, usd: Option<rust_decimal::Decimal>) -> PayoutStatus {
    match (s.project.settings.auto_approve_threshold_cents, usd) {
        (None, _) => PayoutStatus::Queued,
        (Some(t), Some(v))
            if v <= rust_decimal::Decimal::from(t) / rust_decimal::Decimal::ONE_HUNDRED =>
        {
            PayoutStatus::Queued
        }
        _ => PayoutStatus::PendingApproval,
    }
}

/// The owner's `available` covers the payout's amount and fee (`decimals`: the coin's, for
/// the refusal).
fn check_funds(ctx: &WriteCtx<'_>, payout: &Payout, decimals: u8) -> Result<(), PayoutError> {
    let available = ctx
        .balance(&Account::customer(
            payout.project_id,
            owner(payout),
            &payout.chain,
            &payout.asset,
            AccountKind::Available,
        ))?
        .credit_balance();
    let needed = payout.amount.checked_add(payout.fee_amount);
    if needed.is_none_or(|n| n > available) {
        return Err(PayoutError::InsufficientFunds {
            available,
            requested: payout.amount,
            asset: payout.asset.clone(),
            decimals,
        });
    }
    Ok(())
}

fn load(ctx: &WriteCtx<'_>, s: &Scope, id: PayoutId) -> Result<Payout, PayoutError> {
    ctx.get_in::<Payout>(s.project.id, id.uuid())?
        .ok_or(PayoutError::NotFound)
}

/// `pending_approval` -> `queued`, by a key other than the creator's.
pub fn approve(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    key_id: ApiKeyId,
    id: PayoutId,
) -> Result<Payout, PayoutError> {
    let mut p = load(ctx, s, id)?;
    if p.status != PayoutStatus::PendingApproval {
        return Err(PayoutError::NotPendingApproval {
            action: "approved",
            status: p.status,
        });
    }
    if p.created_by_key == key_id.uuid() {
        return Err(PayoutError::ApproverMustDiffer { action: "approved" });
    }
    p.status = PayoutStatus::Queued;
    p.approved_by_key = Some(key_id.uuid());
    p.queued_block = Some(deposits::sim_height(ctx, &p.chain)?);
    p.updated_at = ctx.now_us();
    ctx.put(&p)?;
    emit_row(ctx, s, "payout.approved", &p)?;
    Ok(p)
}

/// `pending_approval` -> `rejected`; funds return to available.
pub fn reject(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    key_id: ApiKeyId,
    id: PayoutId,
) -> Result<Payout, PayoutError> {
    let p = load(ctx, s, id)?;
    if p.status != PayoutStatus::PendingApproval {
        return Err(PayoutError::NotPendingApproval {
            action: "rejected",
            status: p.status,
        });
    }
    if p.created_by_key == key_id.uuid() {
        return Err(PayoutError::ApproverMustDiffer { action: "rejected" });
    }
    Ok(release(
        ctx,
        s,
        p,
        PayoutStatus::Rejected,
        "payout.rejected",
        None,
    )?)
}

/// `pending_approval` or `queued` -> `canceled`; otherwise 409 `payout_not_cancelable`.
pub fn cancel(ctx: &mut WriteCtx<'_>, s: &Scope, id: PayoutId) -> Result<Payout, PayoutError> {
    let p = load(ctx, s, id)?;
    if !matches!(
        p.status,
        PayoutStatus::PendingApproval | PayoutStatus::Queued
    ) {
        return Err(PayoutError::NotCancelable { status: p.status });
    }
    Ok(release(
        ctx,
        s,
        p,
        PayoutStatus::Canceled,
        "payout.canceled",
        None,
    )?)
}

fn release(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    mut p: Payout,
    to: PayoutStatus,
    event: &str,
    reason: Option<String>,
) -> Result<Payout, Fault> {
    let e = lock_entry(
        &p,
        JournalKind::PayoutRelease,
        AccountKind::Locked,
        AccountKind::Available,
        ctx.now_us(),
    );
    ctx.post(&e)??;
    p.failure_reason = reason;
    store_moved(ctx, s, &mut p, to, event)?;
    Ok(p)
}

/// Stores payout `p` moved to `to`, emits `event` about it and lets the invoice refund it
/// carries follow it (`checkout::refund_payout_moved`): how every transition past
/// `signing` ends, after its journal entry and the fields it sets.
fn store_moved(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    p: &mut Payout,
    to: PayoutStatus,
    event: &str,
) -> Result<(), Fault> {
    p.status = to;
    p.updated_at = ctx.now_us();
    ctx.put(p)?;
    emit_row(ctx, s, event, p)?;
    crate::services::checkout::refund_payout_moved(ctx, s, p)?;
    Ok(())
}

/// `submitted` -> `confirmed`: the locked amount leaves against the treasury
/// (`payout_settle`) and `payout.confirmed` is emitted. Shared by the simulated and the
/// live chains.
fn settle(ctx: &mut WriteCtx<'_>, s: &Scope, mut p: Payout) -> Result<Payout, Fault> {
    let total = p.amount + p.fee_amount;
    let pid = p.project_id;
    let e = journal_entry(
        pid,
        JournalKind::PayoutSettle,
        p.id,
        ctx.now_us(),
        vec![
            Posting::debit(
                Account::customer(pid, owner(&p), &p.chain, &p.asset, AccountKind::Locked),
                total,
            ),
            Posting::credit(
                Account::project(pid, &p.chain, &p.asset, AccountKind::Treasury),
                total,
            ),
        ],
    );
    ctx.post(&e)??;
    store_moved(ctx, s, &mut p, PayoutStatus::Confirmed, "payout.confirmed")?;
    crate::services::billing::charge_payout_fee(ctx, s, PayoutId::of(&p), p.reference.as_deref())?;
    Ok(p)
}

/// `queued` -> `signing` (`payout.signing`). The one transition of both chains, taken by
/// the chain worker's sender in the store transaction that records the signed transaction
/// (or the reason it cannot be sent).
fn to_signing(ctx: &mut WriteCtx<'_>, s: &Scope, p: &mut Payout) -> Result<(), Fault> {
    p.status = PayoutStatus::Signing;
    p.updated_at = ctx.now_us();
    ctx.put(p)?;
    emit_row(ctx, s, "payout.signing", p)?;
    Ok(())
}

/// `signing` -> `submitted` with the transaction's hash and the block it was sent at
/// (`payout.submitted`). Test mode: a simulated hash; live: written with the signed
/// transaction, before the broadcast.
fn to_submitted(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    p: &mut Payout,
    tx_hash: String,
    block: u64,
) -> Result<(), Fault> {
    p.tx_hash = Some(tx_hash);
    p.submitted_block = Some(block);
    store_moved(ctx, s, p, PayoutStatus::Submitted, "payout.submitted")
}

/// -> `failed` with `reason` (`payout.failed`), the locked funds back in `available`: a
/// reverted transaction (`execution reverted`, both chains) or one the live sender cannot
/// send.
fn fail(ctx: &mut WriteCtx<'_>, s: &Scope, p: Payout, reason: &str) -> Result<Payout, Fault> {
    release(
        ctx,
        s,
        p,
        PayoutStatus::Failed,
        "payout.failed",
        Some(reason.into()),
    )
}

// ---------------------------------------------------------------------------------------
// The chain worker's saga steps, whatever the chain behind its client. `queued` ->
// `signing` -> `submitted` is written in one store transaction with the signed transaction
// and its nonce, before the broadcast (a payout cancelled before that transaction is not
// recorded and never sent); a payout that cannot be sent goes `queued` -> `signing` ->
// `failed` in one transaction.

/// `queued` -> `signing` (`payout.signing`). `None` when the payout is no longer queued.
pub fn begin_signing(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: PayoutId,
) -> Result<Option<Payout>, Fault> {
    let Some(mut p) = ctx.get::<Payout>(id.uuid())? else {
        return Ok(None);
    };
    match p.status {
        PayoutStatus::Queued => {}
        PayoutStatus::Signing => return Ok(Some(p)),
        _ => return Ok(None),
    }
    to_signing(ctx, s, &mut p)?;
    Ok(Some(p))
}

/// `signing` -> `submitted` with the transaction hash (`payout.submitted`).
pub fn submit_sent(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: PayoutId,
    tx_hash: &str,
    height: u64,
) -> Result<Option<Payout>, Fault> {
    let Some(mut p) = payout_in(ctx, id, PayoutStatus::Signing)? else {
        return Ok(None);
    };
    to_submitted(ctx, s, &mut p, tx_hash.to_string(), height)?;
    Ok(Some(p))
}

/// The payout's transaction was signed again with a new hash (a fee bump at the same nonce,
/// or a re-planned send at a new nonce after a filler took the old one): the payout follows
/// it. Its status never moves back (DECISIONS.md section 16); a `submitted` payout emits
/// `payout.submitted` again with the new hash; a `confirmed` one (its send removed by a
/// reorg deeper than the confirmations) only records the hash.
pub fn follow_hash(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: PayoutId,
    tx_hash: &str,
) -> Result<(), Fault> {
    if let Some(mut p) = ctx.get::<Payout>(id.uuid())? {
        if matches!(p.status, PayoutStatus::Submitted | PayoutStatus::Confirmed)
            && p.tx_hash.as_deref() != Some(tx_hash)
        {
            p.tx_hash = Some(tx_hash.to_string());
            p.updated_at = ctx.now_us();
            ctx.put(&p)?;
            if p.status == PayoutStatus::Submitted {
                emit_row(ctx, s, "payout.submitted", &p)?;
            }
        }
    }
    Ok(())
}

/// A `confirmed` payout whose one transaction a reorg undid (its nonce is final as a filler,
/// or the call was mined again and reverted): the money did not leave. `confirmed` ->
/// `failed` with `reason`, the amount back in `available` (`payout_unsettle`: treasury
/// debited, the owner's `available` credited) and `payout.failed`. A payout is
/// never sent at a second nonce, so it cannot be paid twice; if a later reorg lets its
/// transaction succeed after all, [`resettle`] takes it back.
pub fn unsettle(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: PayoutId,
    reason: &str,
) -> Result<(), Fault> {
    let Some(mut p) = payout_in(ctx, id, PayoutStatus::Confirmed)? else {
        return Ok(());
    };
    let total = p.amount + p.fee_amount;
    let pid = p.project_id;
    let e = journal_entry(
        pid,
        JournalKind::PayoutUnsettle,
        p.id,
        ctx.now_us(),
        vec![
            Posting::debit(
                Account::project(pid, &p.chain, &p.asset, AccountKind::Treasury),
                total,
            ),
            Posting::credit(
                Account::customer(pid, owner(&p), &p.chain, &p.asset, AccountKind::Available),
                total,
            ),
        ],
    );
    ctx.post(&e)??;
    p.failure_reason = Some(reason.into());
    store_moved(ctx, s, &mut p, PayoutStatus::Failed, "payout.failed")
}

/// A `failed` payout whose transaction a reorg let succeed after all (its one nonce now
/// carries the call): the money left. `failed` -> `confirmed` with `tx_hash`
/// (`payout_resettle`: the amount out of the owner's `available` as far as it goes, the
/// rest posted to the project's `receivable`, as a reorged credit is; the treasury
/// credited) and `payout.confirmed`.
pub fn resettle(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: PayoutId,
    tx_hash: &str,
) -> Result<(), Fault> {
    let Some(mut p) = payout_in(ctx, id, PayoutStatus::Failed)? else {
        return Ok(());
    };
    // A refund whose claim held the net again for the buyer gives it back first, so the
    // resettlement takes it from `available` (DECISIONS.md section 5).
    crate::services::checkout::refund_payout_resettling(ctx, &p)?;
    let total = p.amount + p.fee_amount;
    let pid = p.project_id;
    let available = Account::customer(pid, owner(&p), &p.chain, &p.asset, AccountKind::Available);
    let from_available = ctx.balance(&available)?.credit_balance().min(total);
    let mut postings = Vec::new();
    if from_available > 0 {
        postings.push(Posting::debit(available, from_available));
    }
    if total > from_available {
        postings.push(Posting::debit(
            Account::project(pid, &p.chain, &p.asset, AccountKind::Receivable),
            total - from_available,
        ));
    }
    postings.push(Posting::credit(
        Account::project(pid, &p.chain, &p.asset, AccountKind::Treasury),
        total,
    ));
    let e = journal_entry(
        pid,
        JournalKind::PayoutResettle,
        p.id,
        ctx.now_us(),
        postings,
    );
    ctx.post(&e)??;
    p.failure_reason = None;
    p.tx_hash = Some(tx_hash.to_string());
    store_moved(ctx, s, &mut p, PayoutStatus::Confirmed, "payout.confirmed")
}

/// A `submitted` payout whose transaction can never be mined (a filler holds its nonce with
/// the chain's confirmations) and whose call cannot succeed now: `failed` with `reason`,
/// funds back in `available`.
pub fn fail_replanned(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: PayoutId,
    reason: &str,
) -> Result<(), Fault> {
    let Some(p) = payout_in(ctx, id, PayoutStatus::Submitted)? else {
        return Ok(());
    };
    fail(ctx, s, p, reason)?;
    Ok(())
}

/// The payout's transaction is final: `confirmed` (locked -> treasury) when it succeeded,
/// `failed` with `failure_reason` and the funds back in `available` when it reverted.
pub fn settle_sent(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: PayoutId,
    tx_hash: &str,
    success: bool,
) -> Result<(), Fault> {
    let Some(mut p) = ctx.get::<Payout>(id.uuid())? else {
        return Ok(());
    };
    if !matches!(p.status, PayoutStatus::Submitted | PayoutStatus::Signing) {
        return Ok(());
    }
    p.tx_hash = Some(tx_hash.to_string());
    if !success {
        fail(ctx, s, p, "execution reverted")?;
        return Ok(());
    }
    settle(ctx, s, p)?;
    Ok(())
}

/// A payout that cannot be sent (signing switched off, the node refuses it in simulation):
/// `failed` with `reason`, funds back in `available`.
pub fn fail_unsent(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: PayoutId,
    reason: &str,
) -> Result<(), Fault> {
    let Some(p) = ctx.get::<Payout>(id.uuid())? else {
        return Ok(());
    };
    if !matches!(p.status, PayoutStatus::Queued | PayoutStatus::Signing) {
        return Ok(());
    }
    fail(ctx, s, p, reason)?;
    Ok(())
}

/// Payout `id` when it is `status`, else `None` (missing, or moved on by someone else).
fn payout_in(
    ctx: &WriteCtx<'_>,
    id: PayoutId,
    status: PayoutStatus,
) -> Result<Option<Payout>, StoreError> {
    Ok(ctx.get::<Payout>(id.uuid())?.filter(|r| r.status == status))
}
