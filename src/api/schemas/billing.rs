//! Billing schemas (SPEC.md section 2, Billing, Funding address, Billing entry).

#![allow(dead_code)]

use super::*;

// ---------------------------------------------------------------------------------------
// Billing (SPEC.md section 2, Billing, Funding address, Billing entry; DECISIONS.md
// section 13)

list_schema! {
    BillingEntryList => BillingEntry;
    FundingAddressList => FundingAddress;
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
