//! The public checkout (SPEC.md section 2, Checkout document; section 3, Checkout and refund;
//! section 4, Checkout; DECISIONS.md sections 5 and 12): the document a buyer's page polls,
//! the display preference (`select`) and the refund of an overpayment.
//!
//! The checkout token is the authorisation: every miss (malformed, unknown) is the same
//! [`CheckoutError::NotFound`]. The document carries no metadata, no reference id, no
//! internal id and no fee of the merchant (the refund's network `fee` is the buyer's).
//!
//! Refund lifecycle, per claim (DECISIONS.md section 5): an
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
use appliance_storage::records::{
    Deposit, DepositStatus, Invoice, InvoiceChoice, InvoiceRefund, InvoiceStatus,
    OverpaymentPolicy, Payout, PayoutStatus, Project, RefundReference, RefundStatus,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::registry::Registry;
use crate::services::error::{fault_from, Fault, Invalid};
use crate::services::invoices::{self, value_scaled};
use crate::services::types::{DepositId, InvoiceId};
use crate::services::{clock, deposits, emit_row, wallets, Scope};
use crate::views::ts;

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
    /// `status` is the refund's, `None` when none is offered (the policy is `keep`).
    #[error(
        "This checkout's refund cannot take an address: it is {}.",
        .status.map_or("not offered (the merchant keeps any excess)", RefundStatus::as_str)
    )]
    RefundClosed { status: Option<RefundStatus> },
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
pub fn load_id(
    r: &impl ReadOps,
    id: InvoiceId,
    real_now_us: i64,
) -> Result<Option<Loaded>, StoreError> {
    match r.get::<Invoice>(id.uuid())? {
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
/// (DECISIONS.md section 5).
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

mod classify;
mod refunds;
pub use classify::*;
pub use refunds::*;

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
