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
