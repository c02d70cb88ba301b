//! Request bodies, as the handlers read them (`api/extract.rs` checks them).

#![allow(dead_code)]

use super::*;

// ---------------------------------------------------------------------------------------
// Request bodies

/// `POST /v1/invoices`.
#[derive(ToSchema)]
pub struct NewInvoice {
    /// Integer cents, 1 to 10^12.
    #[schema(pattern = "^([1-9][0-9]{0,11}|1000000000000)$")]
    pub price_amount: String,
    /// Only `USD` is priced (anything else: 400 `unsupported_currency`).
    pub price_currency: Option<PriceCurrencyIn>,
    /// Makes creation idempotent: a retry returns the FIRST invoice with this reference.
    #[schema(max_length = 255)]
    pub reference_id: Option<String>,
    #[schema(max_length = 255)]
    pub title: Option<String>,
    #[schema(max_length = 2000)]
    pub description: Option<String>,
    pub metadata: Option<MetadataIn>,
    #[schema(max_length = 2048)]
    pub return_url: Option<String>,
    #[schema(max_length = 2048)]
    pub cancel_url: Option<String>,
    /// Seconds until expiry, 300-604800 (default 3600).
    #[schema(minimum = 300, maximum = 604800)]
    pub expires_in: Option<u64>,
    /// Only these chains (default: every chain taking payments now).
    #[schema(max_items = 32)]
    pub accepted_chains: Option<Vec<ChainIdIn>>,
    /// Only these asset symbols (default: every asset taking deposits).
    #[schema(max_items = 64)]
    pub accepted_assets: Option<Vec<SymbolIn>>,
    /// `keep` or `refund` (default: the project's).
    pub overpayment_policy: Option<OverpaymentPolicyIn>,
}

/// The currency of a price: only USD is priced.
#[derive(ToSchema)]
pub enum PriceCurrencyIn {
    USD,
}

/// What happens to an overpayment's excess.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum OverpaymentPolicyIn {
    Keep,
    Refund,
}

/// An invoice status a list may be filtered by.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum InvoiceStatusIn {
    Open,
    Pending,
    Paid,
    Underpaid,
    Overpaid,
    Expired,
    Canceled,
}

/// A customer status a request may set or filter by.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum CustomerStatusIn {
    Active,
    Disabled,
}

/// A key kind a request may name.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum KeyKindIn {
    Checkout,
    Payout,
    Wallet,
}

/// A delivery mode a request may set.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DeliveryModeIn {
    Unordered,
    Ordered,
}

/// An endpoint status a request may set.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum EndpointStatusIn {
    Active,
    Paused,
}
