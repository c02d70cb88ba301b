//! The public checkout (SPEC.md section 2, Checkout document; section 3, Checkout and refund;
//! section 4, Checkout; DECISIONS.md sections 5 and 12): the document a buyer's page polls,
//! the display preference (`select`) and the refund of an overpayment.
//!
//! The checkout token is the authorisation: every miss (malformed, unknown) is the same
//! [`CheckoutError::NotFound`]. The document carries no metadata, no reference id, no
//! internal id and no fee of the merchant (the refund's network `fee` is the buyer's).
//!
//! Refund lifecycle, per claim (DECISIONS.md section 5, amended by issue 41 point 5): an
//! invoice has a list of refund claims (`Invoice::refunds`, oldest first); each is
//! `awaiting_address` (its excess held in the project's `locked`, by `services::invoices`)
//! -> `pending` (the buyer gave an address; a payout from the merchant's funds with
//! `reference` `refund:<invoice id>`, no approval, no fee) -> `sent` (its transaction
//! submitted) -> `confirmed` (`invoice.refunded`); or `skipped` with `skip_reason` `dust`
//! (the net is at most 1.00 USD: the merchant keeps the excess). A payout that fails,
//! reverts (also when a reorg undoes its confirmation) or is canceled returns its claim to
//! `awaiting_address` with the net held again, and any valid address may be given anew.
//! Excess that arrives once a claim was requested opens a new claim, refunded by its own
//! payout. The document's `refund` is the open claim ([`Invoice::open_refund`]) and
//! `refunds` lists them all. Before the buyer may give an address a claim is classified
//! once ([`classify`]): the sender's class and the network fee estimate, read through the
//! chain's client.

use std::str::FromStr;

use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;

use appliance_chains::client::{AssetRef, ChainClient};
use appliance_chains::evm::{Address, U512};
use appliance_chains::{format_decimal, Family};
use appliance_storage::index::{self, IndexTag};
use appliance_storage::ledger::{Account, AccountKind, JournalEntry, Posting};
use appliance_storage::records::{
    Deposit, DepositStatus, Invoice, InvoiceChoice, InvoiceRefund, InvoiceStatus,
    OverpaymentPolicy, Payout, PayoutStatus, Project,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::registry::Registry;
use crate::services::error::{fault_from, Fault, Invalid};
use crate::services::invoices::{self, value_scaled};
use crate::services::{clock, deposits, emit_payout, emit_view, wallets, Scope};
use crate::views::{self, ts};

/// Requests per minute one checkout token may make to the public checkout endpoints and
/// the hosted page (DECISIONS.md section 12); not under the per-IP unauthenticated budget.
pub const CHECKOUT_PER_MINUTE: u32 = 120;
/// `POST /v1/checkout/{token}/refund` per token per minute (SPEC.md section 8).
pub const REFUND_PER_MINUTE: u32 = 10;
/// A refund whose net is worth at most this many US cents is `skipped` with `dust`
/// (DECISIONS.md section 12).
pub const DUST_CENTS: u64 = 100;
/// An EVM sender whose nonce is at least this is an `exchange` (DECISIONS.md section 12).
pub const EXCHANGE_NONCE: u64 = 1000;
/// The sender classes (DECISIONS.md section 5).
pub const SENDER_CLASSES: &[&str] = &["personal", "contract", "exchange", "unknown"];
/// Most payments a document lists (newest first).
pub const MAX_PAYMENTS: usize = 100;
/// Longest `address` a refund request may carry.
pub const MAX_ADDRESS_LEN: usize = 128;
/// Gas a refund transfer is estimated at: a native send, and an ERC-20 `transfer` with
/// margin (the live sender estimates the real figure when it sends).
pub const NATIVE_TRANSFER_GAS: u64 = 21_000;
pub const TOKEN_TRANSFER_GAS: u64 = 100_000;

/// Why a checkout request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// Malformed, unknown or deleted token, alike: 404 `not_found`.
    #[error("No such checkout.")]
    NotFound,
    /// A field breaks a rule: 400 `invalid_request` with `param`.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// `select` of a (chain, asset) the checkout does not offer: 400 `invalid_request` on
    /// `chain`.
    #[error("{asset} on {chain} is not offered by this checkout.")]
    NotOffered { chain: String, asset: String },
    /// No refund to give an address for yet, or its sender class and net are not known
    /// yet: 409 `refund_not_ready` (SPEC.md section 4, Checkout).
    #[error("The refund is not ready; try again in a few seconds.")]
    RefundNotReady,
    /// The refund cannot take an address (the policy is `keep`, or it was skipped or
    /// failed): 409 `invalid_state`.
    #[error("This checkout's refund cannot take an address: it is {status}.")]
    RefundClosed { status: String },
    /// A refund to another address was already requested: 409 `refund_address_mismatch`
    /// on `address` (SPEC.md section 4: a DIFFERENT address is refused).
    #[error("A refund to another address was already requested.")]
    AddressMismatch,
    /// The address does not parse on the refund's chain: 422 `invalid_address`.
    #[error("address is not a valid {chain} address: {reason}.")]
    InvalidAddress { chain: String, reason: String },
    /// The address is one this service custodies: 422 `self_payout_forbidden`.
    #[error("address belongs to this payment service; give the address of your own wallet.")]
    Custodied,
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(CheckoutError);

/// Everything the document of one token needs, read in one read transaction.
pub struct Loaded {
    pub invoice: Invoice,
    pub project: Project,
    /// Payments to the invoice's addresses, newest first (at most [`MAX_PAYMENTS`]).
    pub payments: Vec<Deposit>,
    /// The payouts of the refund claims that have one (`InvoiceRefund::payout_id`), in
    /// the claims' order.
    pub refund_payouts: Vec<Payout>,
    /// The project's clock (test projects follow `POST /v1/test/clock`), Unix µs.
    pub now_us: i64,
}

/// The invoice `token` opens, with its project, payments and refund payout; `None` for
/// every miss. `real_now_us` is the wall clock.
pub fn load(r: &impl ReadOps, token: &str, real_now_us: i64) -> Result<Option<Loaded>, StoreError> {
    let Some(invoice) = invoices::by_token(r, token)? else {
        return Ok(None);
    };
    load_invoice(r, invoice, real_now_us)
}

/// [`load`] of invoice `id`, known to be the one a token opens (a token never moves: the
/// caller learnt `id` from [`load`] of the same token); `None` when it is gone.
pub fn load_id(r: &impl ReadOps, id: Uuid, real_now_us: i64) -> Result<Option<Loaded>, StoreError> {
    match r.get::<Invoice>(id)? {
        Some(inv) => load_invoice(r, inv, real_now_us),
        None => Ok(None),
    }
}

fn load_invoice(
    r: &impl ReadOps,
    invoice: Invoice,
    real_now_us: i64,
) -> Result<Option<Loaded>, StoreError> {
    let Some(project) = r.get::<Project>(invoice.project_id)? else {
        return Ok(None);
    };
    let payments = r
        .list::<Deposit>(
            &index::prefix(
                IndexTag::DepositsByInvoice,
                project.id,
                &[invoice.id.as_bytes()],
            ),
            None,
            MAX_PAYMENTS,
            |_| true,
        )?
        .items;
    let mut refund_payouts = Vec::new();
    for id in invoice.refunds.iter().filter_map(|c| c.payout_id) {
        if let Some(p) = r.get_in::<Payout>(project.id, id)? {
            refund_payouts.push(p);
        }
    }
    let now_us = clock::now_at(r, &project, real_now_us)?;
    Ok(Some(Loaded {
        invoice,
        project,
        payments,
        refund_payouts,
        now_us,
    }))
}

/// US cents as a decimal string with two places (`4000` -> `"40.00"`).
pub fn cents_decimal(cents: u64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// USD x 10^48 of `price_cents`.
fn price_value(price_cents: u64) -> U512 {
    value_scaled(u128::from(price_cents), 2, "1").unwrap_or(U512::ZERO)
}

/// Value of everything confirmed on `inv` at its locked rates (USD x 10^48).
fn confirmed_value(inv: &Invoice) -> U512 {
    let mut v = U512::ZERO;
    for r in &inv.received {
        if let Some(q) = inv.quote(&r.chain, &r.asset) {
            v += value_scaled(r.confirmed, q.decimals, &q.rate).unwrap_or(U512::ZERO);
        }
    }
    v
}

/// What is still to pay in the quote's coin, rounded up: `None` once the confirmed value
/// reaches the price (or for an unusable rate).
fn remaining_atomic(inv: &Invoice, decimals: u8, rate: &str) -> Option<u128> {
    let price = price_value(inv.price_cents);
    let got = confirmed_value(inv);
    if got >= price {
        return None;
    }
    let per = value_scaled(1, decimals, rate).filter(|p| !p.is_zero())?;
    u128::try_from((price - got).div_ceil(per)).ok()
}

/// The payment URI of `amount_atomic` of (chain, asset) to `to` (DECISIONS.md section 12):
/// EVM token `ethereum:{contract}@{chain_id}/transfer?address={to}&uint256={amount}`, EVM
/// native `ethereum:{to}@{chain_id}?value={wei}`, BIP21 for bitcoin and dogecoin, `tron:`
/// and Solana Pay with decimal amounts. Addresses of EVM chains lower case.
pub fn payment_uri(
    reg: &Registry,
    chain: &str,
    asset: &str,
    to: &str,
    amount_atomic: u128,
) -> Option<String> {
    let c = reg.chain(chain)?;
    let a = c.asset(asset)?;
    let decimal = format_decimal(amount_atomic, a.decimals);
    Some(match c.info.family {
        Family::Evm if a.is_native => format!(
            "ethereum:{}@{}?value={}",
            to.to_ascii_lowercase(),
            c.info.chain_id,
            amount_atomic
        ),
        Family::Evm => format!(
            "ethereum:{}@{}/transfer?address={}&uint256={}",
            a.contract.to_ascii_lowercase(),
            c.info.chain_id,
            to.to_ascii_lowercase(),
            amount_atomic
        ),
        Family::Bitcoin => format!("bitcoin:{to}?amount={decimal}"),
        Family::Dogecoin => format!("dogecoin:{to}?amount={decimal}"),
        Family::Tron if a.is_native => format!("tron:{to}?amount={decimal}"),
        Family::Tron => format!("tron:{to}?amount={decimal}&token={}", a.contract),
        Family::Solana if a.is_native => format!("solana:{to}?amount={decimal}"),
        Family::Solana => format!("solana:{to}?amount={decimal}&spl-token={}", a.contract),
        Family::Ton => format!("ton://transfer/{to}?amount={amount_atomic}"),
    })
}

/// The options of the document: one per locked quote, in the invoice's order. They depend on
/// the invoice alone (not on the clock, payments or refund), so the QR route reads them here.
pub fn options(reg: &Registry, inv: &Invoice) -> Vec<Value> {
    let underpaid = inv.status == InvoiceStatus::Underpaid;
    inv.quotes
        .iter()
        .filter_map(|q| {
            let addr = inv.addresses.iter().find(|a| a.chain == q.chain)?;
            let chain = reg.chain(&q.chain)?;
            let stable = chain.asset(&q.asset).is_some_and(|a| a.is_stable());
            let uri = payment_uri(reg, &q.chain, &q.asset, &addr.address, q.amount_atomic);
            let remaining = underpaid
                .then(|| remaining_atomic(inv, q.decimals, &q.rate))
                .flatten();
            Some(json!({
                "chain": q.chain,
                "asset": q.asset,
                "name": chain.info.name,
                "decimals": q.decimals,
                "address": addr.address,
                "memo": addr.memo,
                "amount": format_decimal(q.amount_atomic, q.decimals),
                "amount_atomic": q.amount_atomic.to_string(),
                "rate": q.rate,
                "stable": stable,
                "refresh_at": ts(inv.expires_at),
                "uri": uri,
                "remaining_amount": remaining.map(|r| format_decimal(r, q.decimals)),
                "remaining_amount_atomic": remaining.map(|r| r.to_string()),
                "remaining_uri": remaining
                    .and_then(|r| payment_uri(reg, &q.chain, &q.asset, &addr.address, r)),
            }))
        })
        .collect()
}

fn payment_json(reg: &Registry, d: &Deposit) -> Value {
    let chain = reg.chain(&d.chain);
    let decimals = reg.decimals(&d.chain, &d.asset);
    json!({
        "chain": d.chain,
        "asset": d.asset,
        "amount": format_decimal(d.amount, decimals),
        "tx_hash": d.tx_hash,
        "explorer_url": chain.map(|c| c.info.tx_url(&d.tx_hash)),
        "confirmations": d.confirmations,
        "required_confirmations": d.required_confirmations,
        "status": match d.status {
            DepositStatus::Detected => "pending",
            DepositStatus::Confirmed => "confirmed",
            DepositStatus::Failed => "failed",
            DepositStatus::Orphaned => "orphaned",
        },
        "late": d.late,
        "at": ts(d.created_at),
    })
}

/// One claim as the document shows it (`refund` and each of `refunds`); `payouts` are the
/// claims' payouts ([`Loaded::refund_payouts`]).
fn refund_json(reg: &Registry, r: &InvoiceRefund, payouts: &[Payout]) -> Value {
    let payout = r
        .payout_id
        .and_then(|id| payouts.iter().find(|p| p.id == id));
    let decimals = reg.decimals(&r.chain, &r.asset);
    let dec = |v: Option<u128>| v.map(|v| format_decimal(v, decimals));
    let tx_hash = payout.and_then(|p| p.tx_hash.clone());
    let explorer_url = tx_hash
        .as_ref()
        .and_then(|h| reg.chain(&r.chain).map(|c| c.info.tx_url(h)));
    json!({
        "status": r.status,
        "skip_reason": r.skip_reason,
        "chain": r.chain,
        "asset": r.asset,
        "gross": format_decimal(r.amount_atomic, decimals),
        "fee": dec(r.fee_atomic),
        "net": dec(r.net_atomic()),
        "sender_class": r.sender_class,
        "suggested_address": (r.sender_class.as_deref() == Some("personal"))
            .then(|| r.from_address.clone()),
        "to_address": r.to_address,
        "tx_hash": tx_hash,
        "explorer_url": explorer_url,
    })
}

/// The checkout document (SPEC.md section 2; amounts per DECISIONS.md section 12). Also
/// `now` (the project's clock, for the page's countdown) and, per option,
/// `remaining_amount`, `remaining_amount_atomic` and `remaining_uri` (the underpaid
/// remainder's own QR; null otherwise). `refund` is the open claim (the oldest awaiting an
/// address, else the newest; null without any) and `refunds` every claim, oldest first
/// (DECISIONS.md section 5, amended by issue 41 point 5).
pub fn document(reg: &Registry, l: &Loaded) -> Value {
    let inv = &l.invoice;
    let st = &l.project.settings;
    let remaining = inv.price_cents.saturating_sub(inv.received_cents);
    json!({
        "object": "checkout",
        "status": inv.status.as_str(),
        "merchant": {
            "name": st.merchant_name,
            "logo_url": st.merchant_logo_url,
        },
        "title": inv.title,
        "description": inv.description,
        "currency": inv.price_currency,
        "price": cents_decimal(inv.price_cents),
        "received": cents_decimal(inv.received_cents),
        "remaining": cents_decimal(if inv.status.is_paid() { 0 } else { remaining }),
        "excess": cents_decimal(inv.excess_cents),
        "expires_at": ts(inv.expires_at),
        "extended": inv.extensions > 0,
        "overpayment_policy": inv.overpayment_policy.as_str(),
        "selected": inv.selected.as_ref().map(|s| json!({"chain": s.chain, "asset": s.asset})),
        "options": options(reg, inv),
        "payments": l.payments.iter().map(|d| payment_json(reg, d)).collect::<Vec<_>>(),
        "refund": inv
            .open_refund()
            .map(|i| refund_json(reg, &inv.refunds[i], &l.refund_payouts)),
        "refunds": inv
            .refunds
            .iter()
            .map(|r| refund_json(reg, r, &l.refund_payouts))
            .collect::<Vec<_>>(),
        "return_url": inv.return_url,
        "now": ts(l.now_us),
    })
}

/// `POST /v1/checkout/{token}/select`: records (chain, asset) as the display preference.
/// It locks nothing and starts no clock (SPEC.md section 4). 400 on `chain` for a pair the
/// checkout does not offer.
pub fn select(
    ctx: &mut WriteCtx<'_>,
    token: &str,
    chain: &str,
    asset: &str,
) -> Result<(), CheckoutError> {
    let mut inv = invoices::by_token(ctx, token)?.ok_or(CheckoutError::NotFound)?;
    if inv.quote(chain, asset).is_none() {
        return Err(CheckoutError::NotOffered {
            chain: chain.to_string(),
            asset: asset.to_string(),
        });
    }
    let choice = InvoiceChoice {
        chain: chain.to_string(),
        asset: asset.to_string(),
    };
    if inv.selected.as_ref() != Some(&choice) {
        inv.selected = Some(choice);
        ctx.put(&inv)?;
    }
    Ok(())
}

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
    invoice_id: Uuid,
    claim: usize,
    payment_id: Uuid,
    c: &Classification,
) -> Result<(), Fault> {
    let Some(mut inv) = ctx.get::<Invoice>(invoice_id)? else {
        return Ok(());
    };
    let rate = match inv.refunds.get(claim) {
        Some(r)
            if r.payment_id == payment_id && r.awaiting_address() && r.sender_class.is_none() =>
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
        r.status = "skipped".into();
        r.skip_reason = Some("dust".into());
        let (chain, asset, gross) = (r.chain.clone(), r.asset.clone(), r.amount_atomic);
        release_hold(ctx, &inv, &chain, &asset, gross, "invoice_refund_skip")?;
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
    kind: &str,
) -> Result<(), Fault> {
    if amount == 0 {
        return Ok(());
    }
    ctx.post(&hold_entry(
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

/// The journal entry that holds (`hold`: `available` -> `locked`) or releases (`locked` ->
/// `available`) `amount` of the project's own `asset` on `chain` for invoice `inv`.
fn hold_entry(
    inv: &Invoice,
    chain: &str,
    asset: &str,
    amount: u128,
    kind: &str,
    hold: bool,
    now_us: i64,
) -> JournalEntry {
    let p = inv.project_id;
    let (from, to) = if hold {
        (AccountKind::Available, AccountKind::Locked)
    } else {
        (AccountKind::Locked, AccountKind::Available)
    };
    JournalEntry {
        id: appliance_storage::sources::new_id(),
        project_id: p,
        kind: kind.into(),
        ref_id: inv.id,
        created_at: now_us,
        postings: vec![
            Posting::debit(Account::project(p, chain, asset, from), amount),
            Posting::credit(Account::project(p, chain, asset, to), amount),
        ],
    }
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
    invoice_id: Uuid,
    address: &str,
) -> Result<(), CheckoutError> {
    let mut inv = ctx
        .get::<Invoice>(invoice_id)?
        .ok_or(CheckoutError::NotFound)?;
    let Some(i) = inv.open_refund() else {
        return Err(match inv.overpayment_policy {
            OverpaymentPolicy::Refund => CheckoutError::RefundNotReady,
            OverpaymentPolicy::Keep => CheckoutError::RefundClosed {
                status: "not offered (the merchant keeps any excess)".into(),
            },
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
    match r.status.as_str() {
        InvoiceRefund::AWAITING_ADDRESS => {}
        "pending" | "sent" | "confirmed" => {
            return match r.to_address.as_deref() {
                Some(to) if same(to) => Ok(()),
                _ => Err(CheckoutError::AddressMismatch),
            };
        }
        other => {
            return Err(CheckoutError::RefundClosed {
                status: other.to_string(),
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
    let p = s.project_id();
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
        reference: Some(format!("refund:{}", inv.id)),
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
        "invoice_refund_fee",
    )?;
    ctx.put(&payout)?;
    emit_payout(ctx, s, "payout.created", &payout)?;
    let c = &mut inv.refunds[i];
    c.status = "pending".into();
    c.to_address = Some(to);
    c.payout_id = Some(payout.id);
    inv.updated_at = now;
    ctx.put(&inv)?;
    Ok(())
}

/// The invoice whose refund `p` is (`reference` `refund:<invoice id>`), if it still exists.
fn refund_invoice(ctx: &WriteCtx<'_>, p: &Payout) -> Result<Option<Invoice>, Fault> {
    let Some(id) = p
        .reference
        .as_deref()
        .and_then(|r| r.strip_prefix("refund:"))
        .and_then(|id| Uuid::parse_str(id).ok())
    else {
        return Ok(None);
    };
    Ok(ctx.get_in::<Invoice>(p.project_id, id)?)
}

/// The refund state a claim takes when its payout reaches `status`; `None` for a status
/// that changes nothing (`queued`, `signing`: the claim stays `pending`). A payout that
/// failed, was canceled or rejected returns the claim to `awaiting_address` (DECISIONS.md
/// section 5).
pub fn claim_status_for(status: PayoutStatus) -> Option<&'static str> {
    match status {
        PayoutStatus::Submitted => Some("sent"),
        PayoutStatus::Confirmed => Some("confirmed"),
        PayoutStatus::Failed | PayoutStatus::Canceled | PayoutStatus::Rejected => {
            Some(InvoiceRefund::AWAITING_ADDRESS)
        }
        PayoutStatus::PendingApproval | PayoutStatus::Queued | PayoutStatus::Signing => None,
    }
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
    let Some(to) = claim_status_for(p.status) else {
        return Ok(());
    };
    if inv.refunds[i].status == to {
        return Ok(());
    }
    let now = ctx.now_us();
    if to == InvoiceRefund::AWAITING_ADDRESS {
        let (chain, asset) = (inv.refunds[i].chain.clone(), inv.refunds[i].asset.clone());
        let amount = p.amount.saturating_add(p.fee_amount);
        let e = hold_entry(
            &inv,
            &chain,
            &asset,
            amount,
            "invoice_refund_hold",
            true,
            now,
        );
        let c = &mut inv.refunds[i];
        if amount > 0 && ctx.post(&e)?.is_err() {
            // Unreachable (the payout's funds were just returned to `available`); should it
            // happen, the claim ends as before the rule: `failed`, the funds the merchant's.
            tracing::error!(invoice = %inv.id, payout = %p.id, "a failed refund's net could not be held again");
            c.status = "failed".into();
        } else {
            c.status = to.into();
            c.to_address = None;
        }
        c.payout_id = None;
        c.failed_payouts.push(p.id);
    } else {
        inv.refunds[i].status = to.into();
    }
    inv.updated_at = now;
    ctx.put(&inv)?;
    if to == "confirmed" {
        emit_view(
            ctx,
            s,
            "invoice.refunded",
            inv.id,
            &views::invoice_event_view(&s.reg, &inv),
        )?;
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
    release_hold(ctx, &inv, &chain, &asset, held, "invoice_refund_release")?;
    let c = &mut inv.refunds[i];
    c.failed_payouts.retain(|id| *id != p.id);
    c.payout_id = Some(p.id);
    c.to_address = Some(p.to_address.clone());
    c.status = "sent".into();
    inv.updated_at = ctx.now_us();
    ctx.put(&inv)?;
    Ok(())
}

/// The native coin's symbol of `chain` (the coin a refund's network fee is paid in).
pub fn native_symbol(reg: &Registry, chain: &str) -> Option<&'static str> {
    reg.chain(chain).map(|c| c.info.native.symbol)
}

/// The `AssetRef` of a registry asset (native or token contract).
pub fn asset_ref(reg: &Registry, chain: &str, asset: &str) -> Option<AssetRef> {
    let a = reg.asset(chain, asset)?;
    if a.is_native {
        Some(AssetRef::Native)
    } else {
        a.contract.parse().ok().map(AssetRef::Token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cents_have_two_places() {
        assert_eq!(cents_decimal(4000), "40.00");
        assert_eq!(cents_decimal(5), "0.05");
        assert_eq!(cents_decimal(123456), "1234.56");
        assert_eq!(cents_decimal(0), "0.00");
    }

    #[test]
    fn payment_uris_follow_decisions_12() {
        let reg = Registry::from_config(&crate::config::Config::default());
        let to = "0xABCDEF0000000000000000000000000000000001";
        let usdt = reg
            .asset("ethereum", "USDT")
            .unwrap()
            .contract
            .to_ascii_lowercase();
        assert_eq!(
            payment_uri(&reg, "ethereum", "USDT", to, 40_000_000).unwrap(),
            format!("ethereum:{usdt}@1/transfer?address=0xabcdef0000000000000000000000000000000001&uint256=40000000")
        );
        assert_eq!(
            payment_uri(&reg, "polygon", "POL", to, 5).unwrap(),
            "ethereum:0xabcdef0000000000000000000000000000000001@137?value=5"
        );
        assert!(payment_uri(&reg, "ethereum", "NOPE", to, 1).is_none());
    }
}
