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

/// `POST /v1/webhook_deliveries/replay`.
#[derive(ToSchema)]
pub struct BulkReplay {
    pub endpoint_id: Uuid,
    /// Default: all three replayable statuses.
    pub status: Option<ReplayableStatus>,
    /// Only deliveries created at or after this time (RFC 3339).
    #[schema(format = DateTime, pattern = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")]
    pub since: Option<String>,
    /// The previous answer's `next_cursor`.
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    pub cursor: Option<String>,
}

/// A delivery status that can be replayed.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ReplayableStatus {
    Failed,
    Exhausted,
    Skipped,
}

/// `POST /v1/test/deposits`.
#[derive(ToSchema)]
pub struct NewTestDeposit {
    pub customer_id: Uuid,
    pub chain: ChainIdIn,
    #[schema(min_length = 1)]
    pub asset: String,
    /// Must equal the asset's decimals, as for payouts.
    #[schema(minimum = 0)]
    pub decimals: u64,
    #[schema(pattern = "^[1-9][0-9]{0,37}$")]
    pub amount: String,
    /// Credit at once (default true); false leaves it `detected`.
    pub confirm: Option<bool>,
}
