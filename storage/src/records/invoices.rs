//! Invoices: the price, the payment addresses, the locked quotes and what has been received
//! (SPEC.md sections 2 and 3, Invoice; DECISIONS.md sections 5 and 12).
//!
//! Where things live (docs/architecture.md, Invoices):
//!
//! - the row: table `invoices`, keyed by the invoice id (UUID v7);
//! - the checkout token: `checkout_token` on the row, sealed with the data key (the app's
//!   `sealing` module; the store alone cannot open it); `unique` maps
//!   [`IndexTag::UniqueCheckoutToken`] ‖ SHA-256(token) to the invoice id;
//! - each payment address: a [`super::Wallet`] row with `invoice_id` set (customer nil,
//!   role `invoice`), found by address through `unique` [`IndexTag::UniqueAddressDigest`] like a
//!   customer's; the chain watcher learns it like any wallet;
//! - each payment: a [`super::Deposit`] row with `invoice_id` set, listed under
//!   [`IndexTag::DepositsByInvoice`] and never in the customer deposit lists.

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Row;
use crate::index::{self, IndexTag};
use crate::schema;

/// Invoice statuses (DECISIONS.md section 5): `open` -> `pending` (seen, not final) ->
/// `paid` | `underpaid` | `overpaid`; `open`, `pending` and `underpaid` -> `expired`;
/// `open` -> `canceled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvoiceStatus {
    Open,
    Pending,
    Paid,
    Underpaid,
    Overpaid,
    Expired,
    Canceled,
}

str_enum!(InvoiceStatus {
    Open => "open",
    Pending => "pending",
    Paid => "paid",
    Underpaid => "underpaid",
    Overpaid => "overpaid",
    Expired => "expired",
    Canceled => "canceled",
});

impl InvoiceStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [InvoiceStatus; 7] = [
        InvoiceStatus::Open,
        InvoiceStatus::Pending,
        InvoiceStatus::Paid,
        InvoiceStatus::Underpaid,
        InvoiceStatus::Overpaid,
        InvoiceStatus::Expired,
        InvoiceStatus::Canceled,
    ];

    /// Whether the expiry worker may expire an invoice in this status (it waits for a
    /// `pending` one: a transfer first seen before `expires_at` counts as on time).
    pub fn expires(self) -> bool {
        matches!(self, InvoiceStatus::Open | InvoiceStatus::Underpaid)
    }

    /// Whether the invoice was settled (`paid_at` set).
    pub fn is_paid(self) -> bool {
        matches!(self, InvoiceStatus::Paid | InvoiceStatus::Overpaid)
    }
}

/// What happens to an overpayment's excess (DECISIONS.md section 5 and 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverpaymentPolicy {
    /// The merchant keeps it.
    #[default]
    Keep,
    /// It is offered back to the payer on the checkout; locked until refunded or skipped.
    Refund,
}

str_enum!(OverpaymentPolicy {
    Keep => "keep",
    Refund => "refund",
});

/// One payment address of an invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceAddress {
    pub chain: String,
    pub address: String,
    pub memo: Option<String>,
    /// The wallet row that makes the chain watcher watch the address.
    pub wallet_id: Uuid,
}

/// A rate locked for one (chain, asset) at creation (DECISIONS.md section 12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceQuote {
    pub chain: String,
    pub asset: String,
    /// Token contract; empty for a native coin.
    pub contract: String,
    pub decimals: u8,
    /// What the payer sends: ceil(price / rate x 10^decimals).
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount_atomic: u128,
    /// USD per whole coin, a plain decimal string (`"3000.00"`, `"1.00"`).
    pub rate: String,
    /// `par`, `kraken`, `chainlink` or `test`.
    pub rate_source: String,
}

/// What one (chain, asset) has brought to the invoice, in atomic units.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetReceived {
    pub chain: String,
    pub asset: String,
    /// Credited payments (confirmed and not orphaned), on time or late.
    #[serde(serialize_with = "crate::codec::amount")]
    pub confirmed: u128,
    /// Seen, not yet final.
    #[serde(serialize_with = "crate::codec::amount")]
    pub pending: u128,
}

/// The part of an overpayment held for the payer under the `refund` policy (DECISIONS.md
/// section 12): `amount_atomic` of `asset` sits in the project's `locked` account on
/// `chain` until the refund is sent or skipped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceRefund {
    /// `awaiting_address` until the payer gives an address; then `pending`, `sent`,
    /// `confirmed`, or `skipped` with `skip_reason`.
    pub status: String,
    pub skip_reason: Option<String>,
    pub chain: String,
    pub asset: String,
    /// Gross excess held, atomic units of `asset`.
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount_atomic: u128,
    /// The payment (deposit row) whose arrival made the invoice overpaid.
    pub payment_id: Uuid,
    /// That payment's sender.
    pub from_address: String,
    pub to_address: Option<String>,
    /// The payout that sends it, once asked for.
    pub payout_id: Option<Uuid>,
    /// `personal`, `contract`, `exchange` or `unknown`, once classified
    /// (`services::checkout::classify`); `None` until then.
    #[serde(default)]
    pub sender_class: Option<String>,
    /// The network fee estimate in atomic units of `asset`, once classified; the buyer gets
    /// back `amount_atomic` - `fee_atomic` (the hold may still grow while awaiting an address).
    #[serde(default)]
    pub fee_atomic: Option<u128>,
}

/// The (chain, asset) a buyer picked on the checkout page (`POST
/// /v1/checkout/{token}/select`): a display preference only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceChoice {
    pub chain: String,
    pub asset: String,
}

/// An invoice (SPEC.md section 2). Money fields: `price_cents`, `received_cents` and
/// `excess_cents` are US cents; received atomic amounts per asset are in `received`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Invoice {
    pub id: Uuid,
    pub project_id: Uuid,
    /// The checkout token, a bearer credential of the public checkout endpoints: `ck_` + 43
    /// base64url characters (DECISIONS.md section 2), stored sealed with the data key
    /// (`sealed:v1:...`, bound to the invoice id; issue 41 point 4). A row written before
    /// tokens were sealed holds it in clear until the start-up migration seals it.
    pub checkout_token: String,
    pub reference_id: Option<String>,
    pub title: Option<String>,
    pub description: Option<String>,
    /// Minor units of `price_currency` (1 to 10^12).
    pub price_cents: u64,
    /// `USD` (the only priced currency).
    pub price_currency: String,
    pub status: InvoiceStatus,
    /// Fee terms frozen from the plan at creation (SPEC.md section 4, Invoices rule 2).
    pub fee_bps: u32,
    pub fee_fixed_cents: u64,
    pub fee_cap_cents: u64,
    pub metadata: serde_json::Value,
    pub return_url: Option<String>,
    pub cancel_url: Option<String>,
    pub overpayment_policy: OverpaymentPolicy,
    pub addresses: Vec<InvoiceAddress>,
    pub quotes: Vec<InvoiceQuote>,
    /// One entry per (chain, asset) that received anything.
    pub received: Vec<AssetReceived>,
    /// Value of the confirmed on-time and late payments at the locked rates, whole cents
    /// rounded down.
    pub received_cents: u64,
    /// How much the confirmed payments exceed the price, whole cents (0 unless overpaid).
    pub excess_cents: u64,
    /// On-time transfers seen and not yet final or failed.
    pub pending_payments: u32,
    /// Underpaid-window extensions granted so far (at most 3).
    pub extensions: u8,
    pub refund: Option<InvoiceRefund>,
    /// The buyer's (chain, asset) on the checkout page; a display preference only.
    #[serde(default)]
    pub selected: Option<InvoiceChoice>,
    /// Project clock (Unix µs; test projects follow `POST /v1/test/clock`).
    pub expires_at: i64,
    pub paid_at: Option<i64>,
    pub canceled_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Invoice {
    /// The quote of (chain, asset), if the invoice offered it.
    pub fn quote(&self, chain: &str, asset: &str) -> Option<&InvoiceQuote> {
        self.quotes
            .iter()
            .find(|q| q.chain == chain && q.asset == asset)
    }

    /// The received entry of (chain, asset), created empty when absent.
    pub fn received_mut(&mut self, chain: &str, asset: &str) -> &mut AssetReceived {
        let i = match self
            .received
            .iter()
            .position(|r| r.chain == chain && r.asset == asset)
        {
            Some(i) => i,
            None => {
                self.received.push(AssetReceived {
                    chain: chain.to_string(),
                    asset: asset.to_string(),
                    ..Default::default()
                });
                self.received.len() - 1
            }
        };
        &mut self.received[i]
    }
}

/// Index key of an expirable invoice: `InvoicesDue ‖ project ‖ expires_at (8 bytes BE) ‖ id`,
/// so the due invoices of a project are a forward range scan up to its clock's now.
pub fn invoice_due_key(project: Uuid, expires_at: i64, id: Uuid) -> Vec<u8> {
    let at = u64::try_from(expires_at).unwrap_or(0).to_be_bytes();
    index::key(IndexTag::InvoicesDue, project, &[&at], id)
}

impl Row for Invoice {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::INVOICES;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        let mut k = vec![
            index::key(IndexTag::Invoices, p, &[], self.id),
            index::key(
                IndexTag::InvoicesByStatus,
                p,
                &[self.status.as_str().as_bytes()],
                self.id,
            ),
        ];
        if self.status.expires() {
            k.push(invoice_due_key(p, self.expires_at, self.id));
        }
        k
    }
}
