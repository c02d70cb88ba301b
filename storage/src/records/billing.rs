//! Billing (SPEC.md section 2, Billing, Funding address, Billing entry; DECISIONS.md
//! section 13): a project's plan and operational balance, the journal of billing entries
//! that makes up the balance, and the funding addresses that feed it.
//!
//! Amounts are USD cents as `i64`: a credit (funding, a positive adjustment) is positive, a
//! charge (every fee, a refund paid out, a negative adjustment) is negative, and the balance
//! is the sum of a project's entries. Entries are never edited or removed; a correction is
//! a new `adjustment` or `refund` entry.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::IndexTag;

str_enum! {
    /// What a billing entry is for (SPEC.md section 2, Billing entry `kind`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum EntryKind {
        /// A confirmed transfer to a funding address (credit).
        Funding => "funding",
        /// A plan's onboarding fee, or an upgrade's difference (charge).
        OnboardingFee => "onboarding_fee",
        /// An invoice's fee, once, at its first credit (charge).
        PaymentFee => "payment_fee",
        /// A new customer deposit address (charge).
        AddressFee => "address_fee",
        /// A confirmed payout (charge).
        PayoutFee => "payout_fee",
        /// Reserved by SPEC.md; no rule writes it yet.
        WithdrawalFee => "withdrawal_fee",
        /// The shortfall of a UTC month's fees below the plan's minimum (charge).
        MonthlyMinimum => "monthly_minimum",
        /// Balance paid back to the merchant (charge).
        Refund => "refund",
        /// An operator's correction, either sign.
        Adjustment => "adjustment",
        /// A settled conversion (charge).
        ConversionFee => "conversion_fee",
    }
}

impl EntryKind {
    /// Fees earned by use, which count toward the plan's monthly minimum.
    pub fn is_usage_fee(self) -> bool {
        matches!(
            self,
            EntryKind::PaymentFee
                | EntryKind::AddressFee
                | EntryKind::PayoutFee
                | EntryKind::WithdrawalFee
                | EntryKind::ConversionFee
        )
    }
}

/// A project's billing state (one row per project, keyed by the project id; created on its
/// first billing write). `balance_cents` and `entries` are running totals of the project's
/// [`BillingEntry`] rows, updated in the transaction that writes each entry, so reading the
/// balance is one row; `appliance verify` checks them against the entries.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BillingAccount {
    pub project_id: Uuid,
    /// Key of the active plan.
    pub plan: Option<String>,
    pub plan_activated_at: Option<i64>,
    /// Key of a plan asked for and not yet active (the balance fell short).
    pub requested_plan: Option<String>,
    pub requested_at: Option<i64>,
    /// Sum of the project's entries, cents.
    pub balance_cents: i64,
    /// Number of the project's entries.
    pub entries: u64,
    /// Onboarding fees paid so far, cents (an upgrade pays only what exceeds it).
    pub onboarding_paid_cents: i64,
    /// When `POST /v1/billing/onboarding/skip` first hid the onboarding panel.
    pub onboarding_skipped_at: Option<i64>,
    /// Months (UTC, counted from January 1970 as 0) whose minimum is settled up to and
    /// including this one: the monthly-minimum worker charges each month once.
    pub minimum_settled_month: Option<u32>,
}

row!(
    BillingAccount,
    BILLING_ACCOUNTS,
    key = project_id,
    project = project_id,
    |_, _no_keys| {}
);

/// The on-chain transfer behind a `funding` entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FundingTransfer {
    pub amount_decimal: String,
    pub tx_hash: String,
    pub log_index: u64,
    pub from_address: Option<String>,
    pub confirmations: u64,
    pub required_confirmations: u64,
    pub block_time: Option<i64>,
    /// The transfer's status as the entry saw it: `confirmed` for a credit (absent in
    /// entries written before it existed), `orphaned` on the entry reversing one, `failed`
    /// on the record of a refused one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Decimals of the coin (what `amount_decimal` and the credit were computed with), so
    /// `appliance verify` recomputes the credit without the chain registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decimals: Option<u8>,
}

/// One line of a project's billing journal (SPEC.md section 2, Billing entry). Never
/// rewritten.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BillingEntry {
    pub id: Uuid,
    pub project_id: Uuid,
    pub kind: EntryKind,
    /// Signed cents: positive credits the balance, negative charges it.
    pub amount_cents: i64,
    /// The balance right after this entry.
    pub balance_after_cents: i64,
    /// What the entry is about (`invoice`, `wallet`, `payout`, `conversion`, `plan`,
    /// `month`, `deposit`, `operator`) and its id.
    pub ref_type: Option<String>,
    pub ref_id: Option<String>,
    pub chain: Option<String>,
    pub asset: Option<String>,
    /// The coins behind a funding credit, atomic units.
    pub amount_atomic: Option<u128>,
    /// USD per whole coin used to value them (`1` at par).
    pub rate: Option<String>,
    /// `par`, `test`, `kraken`, `chainlink`.
    pub rate_source: Option<String>,
    pub note: Option<String>,
    pub transfer: Option<FundingTransfer>,
    /// The event sequence of the entry's billing line on the event stream.
    pub sequence: u64,
    pub created_at: i64,
}

row!(BillingEntry, BILLING_ENTRIES, |e, k| {
    k.list(IndexTag::BillingEntries)
        .by(IndexTag::BillingEntriesByKind, e.kind.as_str());
});

/// A project's funding address on one chain (SPEC.md section 2, Funding address): created
/// on the first `GET /v1/billing/funding`, never changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FundingAddress {
    pub id: Uuid,
    pub project_id: Uuid,
    pub chain: String,
    pub address: String,
    pub memo: Option<String>,
    pub created_at: i64,
}

row!(FundingAddress, FUNDING_ADDRESSES, |_, k| {
    k.list(IndexTag::FundingAddresses);
});
