//! The invoice's shapes (SPEC.md section 2, Invoice): the full form of an answer and an
//! `invoice.*` event, and the list item.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use appliance_storage::records::{Invoice, InvoiceAddress, InvoiceQuote};

use super::{checkout_url, to_value, Atomic, Decimal, Hyphenated, OptTs, Ts};
use crate::registry::Registry;

/// A payment address of an invoice.
#[derive(Serialize, ToSchema)]
#[schema(as = InvoiceAddress)]
pub struct AddressView<'a> {
    address: &'a str,
    chain: &'a str,
    memo: &'a Option<String>,
}

impl<'a> From<&'a InvoiceAddress> for AddressView<'a> {
    fn from(a: &'a InvoiceAddress) -> Self {
        AddressView {
            address: &a.address,
            chain: &a.chain,
            memo: &a.memo,
        }
    }
}

/// A rate locked on an invoice for one (chain, asset) (DECISIONS.md section 12).
#[derive(Serialize, ToSchema)]
#[schema(as = InvoiceQuote)]
pub struct QuoteView<'a> {
    /// The same in whole coins (display only).
    #[schema(value_type = String, pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    amount: Decimal,
    /// What the payer sends, atomic units: ceil(price / rate x 10^decimals).
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    amount_atomic: Atomic,
    asset: &'a str,
    chain: &'a str,
    /// Token contract; empty for a native coin.
    contract: &'a str,
    decimals: u8,
    /// USD per whole coin.
    #[schema(pattern = r"^[0-9]+(\.[0-9]+)?$")]
    rate: &'a str,
    /// `par`, `kraken`, `chainlink` or `test` (new values may appear).
    rate_source: &'a str,
}

impl<'a> From<&'a InvoiceQuote> for QuoteView<'a> {
    fn from(q: &'a InvoiceQuote) -> Self {
        QuoteView {
            amount: Decimal(q.amount_atomic, q.decimals),
            amount_atomic: Atomic(q.amount_atomic),
            asset: &q.asset,
            chain: &q.chain,
            contract: &q.contract,
            decimals: q.decimals,
            rate: &q.rate,
            rate_source: &q.rate_source,
        }
    }
}

// Written straight to a serializer: the answer's JSON and an event's data
// (`appliance_storage::codec::EventData`) without a `serde_json::Value` tree in between.
// Money: `price_amount`, `received_amount`, `excess_amount` and the `fee_*_cents` are integer
// cents as strings; each quote's `amount_atomic` is what the payer sends. Beyond SPEC.md:
// `overpayment_policy`, `extensions`, `paid_at`, `canceled_at`, `expired_at`. Fields in byte
// order of their names, as `serde_json` sorts a `Value`'s keys.
/// An invoice (`object: invoice`), full form. Cents are integer strings.
#[derive(Serialize, ToSchema)]
#[schema(as = Invoice)]
pub struct InvoiceView<'a> {
    addresses: Vec<AddressView<'a>>,
    cancel_url: &'a Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    canceled_at: OptTs,
    /// `{public_base_url}/checkout/{token}`: the hosted checkout.
    checkout_url: String,
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    description: &'a Option<String>,
    /// USD cents beyond the price (overpaid).
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    excess_amount: Atomic,
    #[schema(value_type = Option<String>, format = DateTime)]
    expired_at: OptTs,
    #[schema(value_type = String, format = DateTime)]
    expires_at: Ts,
    /// Underpaid-window extensions so far (at most 3).
    extensions: u8,
    fee_bps: u32,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    fee_cap_cents: Atomic,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    fee_fixed_cents: Atomic,
    #[schema(value_type = uuid::Uuid)]
    id: Hyphenated,
    #[schema(value_type = Object)]
    metadata: &'a Value,
    #[schema(pattern = "^invoice$")]
    object: &'static str,
    /// `keep` or `refund`.
    overpayment_policy: &'static str,
    #[schema(value_type = Option<String>, format = DateTime)]
    paid_at: OptTs,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    price_amount: Atomic,
    /// `USD`.
    price_currency: &'a str,
    quotes: Vec<QuoteView<'a>>,
    /// USD cents received, valued at the locked rates.
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    received_amount: Atomic,
    reference_id: &'a Option<String>,
    return_url: &'a Option<String>,
    /// `open`, `pending`, `paid`, `underpaid`, `overpaid`, `expired` or `canceled` (new
    /// values may appear).
    status: &'static str,
    title: &'a Option<String>,
}

impl<'a> InvoiceView<'a> {
    fn new(inv: &'a Invoice, checkout_url: String) -> Self {
        InvoiceView {
            addresses: inv.addresses.iter().map(AddressView::from).collect(),
            cancel_url: &inv.cancel_url,
            canceled_at: OptTs(inv.canceled_at),
            checkout_url,
            created_at: Ts(inv.created_at),
            description: &inv.description,
            excess_amount: Atomic(u128::from(inv.excess_cents)),
            expired_at: OptTs(inv.expired_at),
            expires_at: Ts(inv.expires_at),
            extensions: inv.extensions,
            fee_bps: inv.fee_bps,
            fee_cap_cents: Atomic(u128::from(inv.fee_cap_cents)),
            fee_fixed_cents: Atomic(u128::from(inv.fee_fixed_cents)),
            id: Hyphenated(inv.id),
            metadata: &inv.metadata,
            object: "invoice",
            overpayment_policy: inv.overpayment_policy.as_str(),
            paid_at: OptTs(inv.paid_at),
            price_amount: Atomic(u128::from(inv.price_cents)),
            price_currency: &inv.price_currency,
            quotes: inv.quotes.iter().map(QuoteView::from).collect(),
            received_amount: Atomic(u128::from(inv.received_cents)),
            reference_id: &inv.reference_id,
            return_url: &inv.return_url,
            status: inv.status.as_str(),
            title: &inv.title,
        }
    }
}

/// The [`InvoiceView`] of `inv`, as an answer shows it: `checkout_url` made of the token
/// opened from the row's sealed form.
pub fn invoice_view<'a>(reg: &'a Registry, inv: &'a Invoice) -> InvoiceView<'a> {
    InvoiceView::new(inv, checkout_url(reg, inv))
}

/// The [`InvoiceView`] of a new invoice whose token (`ck_...`) is still at hand in clear.
pub fn new_invoice_view<'a>(
    reg: &'a Registry,
    inv: &'a Invoice,
    token: &'a str,
) -> InvoiceView<'a> {
    InvoiceView::new(inv, format!("{}/checkout/{token}", reg.public_base_url))
}

/// The [`InvoiceView`] of `inv` as an `invoice.*` event stores it: `checkout_url` is the
/// row's sealed token, never the token in clear; [`super::event_data`] renders it into the
/// URL when the event is read or sent.
pub fn invoice_event_view<'a>(_reg: &'a Registry, inv: &'a Invoice) -> InvoiceView<'a> {
    InvoiceView::new(inv, inv.checkout_token.clone())
}

// An item of `GET /v1/invoices` (SPEC.md section 2, Invoice).
/// An invoice as a list item.
#[derive(Serialize, ToSchema)]
#[schema(as = InvoiceItem)]
pub struct InvoiceItemView<'a> {
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    #[schema(value_type = String, format = DateTime)]
    expires_at: Ts,
    fee_bps: u32,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    fee_cap_cents: Atomic,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    fee_fixed_cents: Atomic,
    id: uuid::Uuid,
    #[schema(pattern = "^invoice$")]
    object: &'static str,
    #[schema(value_type = Option<String>, format = DateTime)]
    paid_at: OptTs,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    price_amount: Atomic,
    price_currency: &'a str,
    #[schema(value_type = String, pattern = "^(0|[1-9][0-9]*)$")]
    received_amount: Atomic,
    reference_id: &'a Option<String>,
    status: &'static str,
    title: &'a Option<String>,
}

/// [`InvoiceItemView`] as a JSON value.
pub fn invoice_item(inv: &Invoice) -> Value {
    to_value(&InvoiceItemView {
        created_at: Ts(inv.created_at),
        expires_at: Ts(inv.expires_at),
        fee_bps: inv.fee_bps,
        fee_cap_cents: Atomic(u128::from(inv.fee_cap_cents)),
        fee_fixed_cents: Atomic(u128::from(inv.fee_fixed_cents)),
        id: inv.id,
        object: "invoice",
        paid_at: OptTs(inv.paid_at),
        price_amount: Atomic(u128::from(inv.price_cents)),
        price_currency: &inv.price_currency,
        received_amount: Atomic(u128::from(inv.received_cents)),
        reference_id: &inv.reference_id,
        status: inv.status.as_str(),
        title: &inv.title,
    })
}
