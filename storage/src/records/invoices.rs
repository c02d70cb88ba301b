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

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::{self, IndexTag};

str_enum! {
    /// Invoice statuses (DECISIONS.md section 5): `open` -> `pending` (seen, not final) ->
    /// `paid` | `underpaid` | `overpaid`; `open`, `pending` and `underpaid` -> `expired`;
    /// `open` -> `canceled`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum InvoiceStatus {
        Open => "open",
        Pending => "pending",
        Paid => "paid",
        Underpaid => "underpaid",
        Overpaid => "overpaid",
        Expired => "expired",
        Canceled => "canceled",
    }
}

impl InvoiceStatus {
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

str_enum! {
    /// What happens to an overpayment's excess (DECISIONS.md section 5 and 12).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum OverpaymentPolicy {
        /// The merchant keeps it.
        #[default]
        Keep => "keep",
        /// It is offered back to the payer on the checkout; locked until refunded or skipped.
        Refund => "refund",
    }
}

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

str_enum! {
    /// A refund claim's status (DECISIONS.md section 5, Checkout refund; the lifecycle is on
    /// [`InvoiceRefund`]). Stored and sent as its name.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum RefundStatus {
        /// Waiting for the payer's address; the claim's excess is held in `locked`.
        AwaitingAddress => "awaiting_address",
        /// An address given, the refund payout queued.
        Pending => "pending",
        /// The refund payout's transaction is submitted.
        Sent => "sent",
        /// The refund payout confirmed.
        Confirmed => "confirmed",
        /// Not sent (`skip_reason` says why); the hold went back to the merchant.
        Skipped => "skipped",
        /// Found only in rows written before a failed refund payout returned its claim to
        /// `awaiting_address`: the payout failed and the funds went back to `available`.
        Failed => "failed",
    }
}

/// One refund claim under the `refund` policy (DECISIONS.md sections 5 and 12): excess of one coin held for the payer. Until the claim is sent or
/// skipped, [`InvoiceRefund::held_atomic`] of `asset` sits in the project's `locked`
/// account on `chain` (a `pending` or `sent` claim's net is its payout's lock there).
///
/// Lifecycle: `awaiting_address` -> `pending` (an address given, a payout queued) -> `sent`
/// -> `confirmed`, or `skipped` with `skip_reason`; a payout that fails, reverts (also by a
/// reorg after it confirmed) or is canceled returns the claim to `awaiting_address`, its
/// net held again, and lists that payout in `failed_payouts`. `failed` is only found in rows
/// written before that rule (the payout failed and the funds went back to `available`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceRefund {
    /// `awaiting_address` until the payer gives an address; then `pending`, `sent`,
    /// `confirmed`, or `skipped` with `skip_reason` (see the type's doc).
    pub status: RefundStatus,
    pub skip_reason: Option<String>,
    pub chain: String,
    pub asset: String,
    /// Gross excess of this claim, atomic units of `asset`.
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount_atomic: u128,
    /// The payment (deposit row) whose arrival opened this claim.
    pub payment_id: Uuid,
    /// That payment's sender.
    pub from_address: String,
    pub to_address: Option<String>,
    /// The payout that sends it, once asked for (cleared when that payout fails).
    pub payout_id: Option<Uuid>,
    /// `personal`, `contract`, `exchange` or `unknown`, once classified
    /// (`services::checkout::classify`); `None` until then.
    #[serde(default)]
    pub sender_class: Option<String>,
    /// The network fee estimate in atomic units of `asset`, once classified; the buyer gets
    /// back `amount_atomic` - `fee_atomic` (the hold may still grow while awaiting an address).
    #[serde(default)]
    pub fee_atomic: Option<u128>,
    /// Earlier payouts of this claim that failed, reverted or were canceled, oldest first;
    /// each returned the claim to `awaiting_address`.
    #[serde(default)]
    pub failed_payouts: Vec<Uuid>,
}

impl InvoiceRefund {
    /// Whether a refund of this claim was ever requested (an address given): it has a
    /// payout, or had one that failed. A requested claim takes no more excess, and the fee
    /// part of its gross went back to the merchant at the first request.
    pub fn requested(&self) -> bool {
        self.payout_id.is_some() || !self.failed_payouts.is_empty()
    }

    /// Whether the claim waits for an address.
    pub fn awaiting_address(&self) -> bool {
        self.status == RefundStatus::AwaitingAddress
    }

    /// What the buyer gets back, `amount_atomic` - `fee_atomic`, once classified.
    pub fn net_atomic(&self) -> Option<u128> {
        self.fee_atomic
            .map(|f| self.amount_atomic.saturating_sub(f))
    }

    /// What of this claim sits in the project's `locked` outside a payout, atomic units:
    /// while `awaiting_address`, the gross before any request and the net after a failed
    /// payout (the fee part went back to `available` at the first request); otherwise 0
    /// (a `pending` or `sent` claim's net is its payout's own lock).
    pub fn held_atomic(&self) -> u128 {
        match (self.awaiting_address(), self.requested()) {
            (false, _) => 0,
            (true, false) => self.amount_atomic,
            (true, true) => self.net_atomic().unwrap_or(self.amount_atomic),
        }
    }

    /// The status a claim takes when its payout reaches `status`; `None` for a status that
    /// changes nothing (`pending_approval`, `queued`, `signing`: the claim stays `pending`).
    /// A payout that failed, was canceled or rejected returns the claim to
    /// `awaiting_address` (DECISIONS.md section 5).
    pub fn status_following(status: super::PayoutStatus) -> Option<RefundStatus> {
        use super::PayoutStatus as P;
        match status {
            P::Submitted => Some(RefundStatus::Sent),
            P::Confirmed => Some(RefundStatus::Confirmed),
            P::Failed | P::Canceled | P::Rejected => Some(RefundStatus::AwaitingAddress),
            P::PendingApproval | P::Queued | P::Signing => None,
        }
    }

    /// Whether excess of (`chain`, `asset`) arriving now joins this claim rather than
    /// opening a new one: it awaits an address and was never requested, in that coin.
    pub fn takes_more(&self, chain: &str, asset: &str) -> bool {
        self.awaiting_address() && !self.requested() && self.chain == chain && self.asset == asset
    }
}

/// [`Invoice::open_refund`] of `claims`: the oldest awaiting an address, else the newest.
pub fn open_claim(claims: &[InvoiceRefund]) -> Option<usize> {
    claims
        .iter()
        .position(InvoiceRefund::awaiting_address)
        .or_else(|| claims.len().checked_sub(1))
}

/// Reads an invoice's claims: the list written now (`refunds`), or what a row of the one-claim
/// form holds under `refund` (null, or one claim).
fn read_claims<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<InvoiceRefund>, D::Error> {
    struct Claims;
    impl<'de> serde::de::Visitor<'de> for Claims {
        type Value = Vec<InvoiceRefund>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of refund claims, one claim, or null")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_some<D2: serde::Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_any(Claims)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut v = Vec::new();
            while let Some(c) = seq.next_element::<InvoiceRefund>()? {
                v.push(c);
            }
            Ok(v)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            InvoiceRefund::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                .map(|c| vec![c])
        }
    }
    d.deserialize_any(Claims)
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
    /// (`sealed:v1:...`, bound to the invoice id). A row written before
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
    /// Every refund claim under the `refund` policy, oldest first (DECISIONS.md section 5): excess that arrives while no claim takes more
    /// ([`InvoiceRefund::takes_more`]) opens a new one. Stored as `refunds`; a row of the
    /// one-claim form holds at most one claim under `refund` and reads as that one claim.
    #[serde(
        rename = "refunds",
        alias = "refund",
        default,
        deserialize_with = "read_claims"
    )]
    pub refunds: Vec<InvoiceRefund>,
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

    /// Index in `refunds` of the open claim, the one the checkout document shows as
    /// `refund` and `POST /v1/checkout/{token}/refund` acts on: the oldest claim awaiting
    /// an address, else the newest; `None` without claims.
    pub fn open_refund(&self) -> Option<usize> {
        open_claim(&self.refunds)
    }

    /// The received entry of (chain, asset), created empty when absent.
    pub fn received_mut(&mut self, chain: &str, asset: &str) -> &mut AssetReceived {
        let is = |r: &AssetReceived| r.chain == chain && r.asset == asset;
        super::entry(&mut self.received, is, || AssetReceived {
            chain: chain.to_string(),
            asset: asset.to_string(),
            ..Default::default()
        })
    }
}

/// Index key of an expirable invoice: `InvoicesDue ‖ project ‖ expires_at (8 bytes BE) ‖ id`,
/// so the due invoices of a project are a forward range scan up to its clock's now.
pub fn invoice_due_key(project: Uuid, expires_at: i64, id: Uuid) -> Vec<u8> {
    let at = u64::try_from(expires_at).unwrap_or(0).to_be_bytes();
    index::key(IndexTag::InvoicesDue, project, &[&at], id)
}

row!(Invoice, INVOICES, |i, k| {
    k.list(IndexTag::Invoices)
        .by(IndexTag::InvoicesByStatus, i.status.as_str());
    if i.status.expires() {
        k.push(invoice_due_key(i.project_id, i.expires_at, i.id));
    }
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode, encode_json_v1};

    fn claim(status: &str, amount: u128) -> InvoiceRefund {
        InvoiceRefund {
            status: RefundStatus::parse(status).unwrap(),
            skip_reason: None,
            chain: "ethereum".into(),
            asset: "USDT".into(),
            amount_atomic: amount,
            payment_id: Uuid::from_u128(7),
            from_address: "0x11".into(),
            to_address: None,
            payout_id: None,
            sender_class: Some("personal".into()),
            fee_atomic: Some(1_000),
            failed_payouts: Vec::new(),
        }
    }

    /// A row of the one-claim form: the one claim under `refund`.
    #[derive(Serialize)]
    struct Before {
        refund: Option<InvoiceRefund>,
    }

    #[derive(Debug, Deserialize)]
    struct Now {
        #[serde(
            rename = "refunds",
            alias = "refund",
            default,
            deserialize_with = "read_claims"
        )]
        refunds: Vec<InvoiceRefund>,
    }

    #[test]
    fn rows_written_before_refund_claims_read_as_zero_or_one_claim() {
        let one = claim("pending", 20_000_000);
        for bytes in [
            encode(&Before {
                refund: Some(one.clone()),
            }),
            encode_json_v1(&Before {
                refund: Some(one.clone()),
            }),
        ] {
            let got: Now = decode(&bytes).unwrap();
            assert_eq!(got.refunds, vec![one.clone()]);
        }
        for bytes in [
            encode(&Before { refund: None }),
            encode_json_v1(&Before { refund: None }),
        ] {
            let got: Now = decode(&bytes).unwrap();
            assert!(got.refunds.is_empty(), "{got:?}");
        }
        // A row without the key at all (as a named row may be) has no claim either.
        #[derive(Serialize)]
        struct Nothing {}
        let got: Now = decode(&encode(&Nothing {})).unwrap();
        assert!(got.refunds.is_empty());
    }

    /// A JSON tree written as the store's MessagePack writes a row: a UUID as its 16 bytes
    /// (as `Uuid` serializes in a binary format), everything else as it is.
    struct Packed<'a>(&'a serde_json::Value);

    impl Serialize for Packed<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::{SerializeMap, SerializeSeq};
            use serde_json::Value;
            match self.0 {
                Value::Null => s.serialize_none(),
                Value::Bool(b) => s.serialize_bool(*b),
                Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                    (Some(u), _) => s.serialize_u64(u),
                    (_, Some(i)) => s.serialize_i64(i),
                    _ => s.serialize_f64(n.as_f64().unwrap_or_default()),
                },
                Value::String(t) => match Uuid::parse_str(t) {
                    Ok(u) => s.serialize_bytes(u.as_bytes()),
                    Err(_) => s.serialize_str(t),
                },
                Value::Array(a) => {
                    let mut seq = s.serialize_seq(Some(a.len()))?;
                    for v in a {
                        seq.serialize_element(&Packed(v))?;
                    }
                    seq.end()
                }
                Value::Object(o) => {
                    let mut m = s.serialize_map(Some(o.len()))?;
                    for (k, v) in o {
                        m.serialize_entry(k, &Packed(v))?;
                    }
                    m.end()
                }
            }
        }
    }

    /// A whole invoice row in the one-claim form (its one claim
    /// under `refund`), in JSON (schema 3) and MessagePack: it reads as one claim and is
    /// written back as `refunds`.
    #[test]
    fn an_invoice_row_of_before_reads_its_refund_as_its_one_claim() {
        let claim = serde_json::to_value(claim("sent", 20_000_000)).unwrap();
        let mut row = serde_json::json!({
            "id": Uuid::from_u128(1), "project_id": Uuid::from_u128(2),
            "checkout_token": "ck_x", "reference_id": null, "title": null,
            "description": null, "price_cents": 4000, "price_currency": "USD",
            "status": "overpaid", "fee_bps": 0, "fee_fixed_cents": 0, "fee_cap_cents": 0,
            "metadata": {}, "return_url": null, "cancel_url": null,
            "overpayment_policy": "refund", "addresses": [], "quotes": [], "received": [],
            "received_cents": 6000, "excess_cents": 2000, "pending_payments": 0,
            "extensions": 0, "refund": claim, "expires_at": 1, "paid_at": 1,
            "canceled_at": null, "expired_at": null, "created_at": 1, "updated_at": 1,
        });
        for bytes in [encode_json_v1(&row), encode(&Packed(&row))] {
            let inv: Invoice = decode(&bytes).unwrap();
            assert_eq!(inv.refunds.len(), 1);
            assert_eq!(inv.refunds[0].amount_atomic, 20_000_000);
            assert_eq!(inv.refunds[0].status, RefundStatus::Sent);
            assert!(inv.refunds[0].failed_payouts.is_empty());
            let again: Invoice = decode(&encode(&inv)).unwrap();
            assert_eq!(again.refunds, inv.refunds);
            let written = serde_json::to_value(&inv).unwrap();
            assert!(written.get("refund").is_none() && written["refunds"].is_array());
        }
        row["refund"] = serde_json::Value::Null;
        let inv: Invoice = decode(&encode_json_v1(&row)).unwrap();
        assert!(inv.refunds.is_empty());
    }

    #[test]
    fn claims_are_written_as_a_list_and_read_back() {
        let mut second = claim("awaiting_address", 30_000_000);
        second.failed_payouts = vec![Uuid::from_u128(9)];
        #[derive(Serialize)]
        struct Written {
            refunds: Vec<InvoiceRefund>,
        }
        let w = Written {
            refunds: vec![claim("confirmed", 1), second],
        };
        let got: Now = decode(&encode(&w)).unwrap();
        assert_eq!(got.refunds, w.refunds);
        let got: Now = decode(&encode_json_v1(&w)).unwrap();
        assert_eq!(got.refunds, w.refunds);
    }

    #[test]
    fn the_open_claim_is_the_oldest_awaiting_an_address_else_the_newest() {
        let mut claims = vec![claim("sent", 1), claim("confirmed", 2)];
        assert_eq!(open_claim(&[]), None);
        assert_eq!(open_claim(&claims), Some(1));
        claims.push(claim("awaiting_address", 3));
        assert_eq!(open_claim(&claims), Some(2));
        // An older claim whose payout failed waits for an address again: it comes first.
        claims[0].status = RefundStatus::AwaitingAddress;
        assert_eq!(open_claim(&claims), Some(0));
    }

    #[test]
    fn what_a_claim_holds_follows_its_state() {
        let mut c = claim("awaiting_address", 20_000_000);
        c.sender_class = None;
        c.fee_atomic = None;
        // Before the classification and the request: the whole gross, and it grows.
        assert_eq!(c.held_atomic(), 20_000_000);
        assert!(c.takes_more("ethereum", "USDT"));
        assert!(!c.takes_more("ethereum", "USDC"));
        c.fee_atomic = Some(1_000);
        assert_eq!(c.held_atomic(), 20_000_000);
        assert_eq!(c.net_atomic(), Some(19_999_000));
        // Requested: its payout holds the net; it takes no more.
        c.status = RefundStatus::Pending;
        c.payout_id = Some(Uuid::from_u128(1));
        assert_eq!(c.held_atomic(), 0);
        assert!(!c.takes_more("ethereum", "USDT"));
        // Its payout failed: back to awaiting an address with the net held, still taking
        // no more (more excess opens a new claim).
        c.status = RefundStatus::AwaitingAddress;
        c.payout_id = None;
        c.failed_payouts.push(Uuid::from_u128(1));
        assert!(c.requested());
        assert_eq!(c.held_atomic(), 19_999_000);
        assert!(!c.takes_more("ethereum", "USDT"));
        for done in [
            RefundStatus::Confirmed,
            RefundStatus::Skipped,
            RefundStatus::Failed,
        ] {
            c.status = done;
            assert_eq!(c.held_atomic(), 0, "{done:?}");
        }
    }
}
