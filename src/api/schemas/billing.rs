//! Billing schemas (SPEC.md section 2, Billing, Funding address, Billing entry).

#![allow(dead_code)]

use super::*;

// ---------------------------------------------------------------------------------------
// Billing (SPEC.md section 2, Billing, Funding address, Billing entry; DECISIONS.md
// section 13)

/// USD cents, signed (a balance can fall below zero; charges are negative).
pub const SIGNED_CENTS: &str = "^-?(0|[1-9][0-9]*)$";
/// USD cents, not negative.
pub const CENTS: &str = "^(0|[1-9][0-9]*)$";

/// The body of `POST /v1/billing/plan`.
#[derive(ToSchema)]
pub struct PlanChoice {
    /// A plan key from `plans[]` (`drift` is one); an enterprise plan cannot be self-selected.
    #[schema(min_length = 1, max_length = 64)]
    pub plan: String,
}

/// One onboarding step.
#[derive(ToSchema)]
pub struct OnboardingStep {
    /// `plan`, `funding`, `webhook` or `first_invoice` (new values may appear).
    pub step: String,
    pub done: bool,
    /// Hidden by the onboarding skip while not done.
    pub bypassed: bool,
    /// `done` or `bypassed`.
    pub complete: bool,
}

/// The onboarding panel.
#[derive(ToSchema)]
pub struct Onboarding {
    pub steps: Vec<OnboardingStep>,
    /// Steps bypassed by the skip.
    pub bypassed: Vec<String>,
    #[schema(format = DateTime)]
    pub skipped_at: Option<String>,
    pub can_skip: bool,
    /// Steps neither done nor bypassed.
    pub remaining: u32,
}

/// Whether live invoices may be created.
#[derive(ToSchema)]
pub struct LiveStatus {
    pub ok: bool,
    /// `plan_not_active` or `balance_negative` when not ok (new values may appear).
    pub reason: Option<String>,
}

/// What the requested plan still needs.
#[derive(ToSchema)]
pub struct Activation {
    pub plan: String,
    pub plan_name: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub onboarding_due_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub balance_required_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub shortfall_cents: String,
}

/// The active plan's fees.
#[derive(ToSchema)]
pub struct PlanFees {
    pub rate_bps: u32,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub fixed_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub cap_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub address_fee_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub payout_fee_cents: String,
    pub swap_rate_bps: u32,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub min_monthly_cents: String,
}

/// A plan on offer.
#[derive(ToSchema)]
pub struct Plan {
    pub key: String,
    pub name: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub onboarding_fee_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub min_monthly_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub operational_balance_cents: String,
    pub rate_bps: u32,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub fixed_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub cap_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub address_fee_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub payout_fee_cents: String,
    pub swap_rate_bps: u32,
    pub negotiated: bool,
    pub self_selectable: bool,
}

/// A project's billing (`object: billing`).
#[derive(ToSchema)]
pub struct Billing {
    #[schema(pattern = "^billing$")]
    pub object: String,
    /// The active plan's key.
    pub plan: Option<String>,
    pub plan_name: Option<String>,
    /// `pending` (no plan active yet) or `active` (new values may appear).
    pub plan_status: String,
    #[schema(format = DateTime)]
    pub plan_activated_at: Option<String>,
    pub requested_plan: Option<String>,
    pub requested_plan_name: Option<String>,
    /// The operational balance, USD cents (negative when fees exceeded it).
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub balance_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub onboarding_paid_cents: String,
    pub live: LiveStatus,
    pub onboarding: Onboarding,
    /// Null when no plan is requested.
    pub activation: Option<Activation>,
    /// Null without an active plan.
    pub fees: Option<PlanFees>,
    pub plans: Vec<Plan>,
}

list_schema! {
    BillingEntryList => BillingEntry;
    FundingAddressList => FundingAddress;
}

/// A coin a funding address credits.
#[derive(ToSchema)]
pub struct FundingAsset {
    pub symbol: String,
    pub decimals: u8,
    /// Credited at par (USDT, USDC); otherwise at the cached spot price (the native coin).
    pub par: bool,
}

/// A project's funding address on one chain (`object: funding_address`): created on the
/// first `GET /v1/billing/funding`, never changed. Only the coins of `assets` are credited.
#[derive(ToSchema)]
pub struct FundingAddress {
    #[schema(pattern = "^funding_address$")]
    pub object: String,
    pub chain: String,
    pub address: String,
    pub memo: Option<String>,
    /// `contract` (EVM forwarder) or `eoa`.
    pub account_kind: Option<String>,
    pub assets: Vec<FundingAsset>,
}

/// A billing entry kind filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum BillingEntryKindIn {
    Funding,
    OnboardingFee,
    PaymentFee,
    AddressFee,
    PayoutFee,
    WithdrawalFee,
    MonthlyMinimum,
    Refund,
    Adjustment,
    ConversionFee,
}
