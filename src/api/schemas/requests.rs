//! Request bodies, as the handlers read them (`api/extract.rs` checks them).

#![allow(dead_code)]

use super::*;

// ---------------------------------------------------------------------------------------
// Request bodies

/// `POST /v1/customers`: every field optional; `{}` is accepted.
#[derive(ToSchema)]
pub struct NewCustomer {
    /// The merchant's own user id; re-posting an existing one answers 200 with that customer.
    #[schema(max_length = 255)]
    pub reference_id: Option<String>,
    #[schema(max_length = 320)]
    pub email: Option<String>,
    pub metadata: Option<MetadataIn>,
}

/// `PATCH /v1/customers/{id}`: only the fields present change; `null` clears `email` and
/// `reference_id`; `metadata` is merged (a `null` value removes a key).
#[derive(ToSchema)]
pub struct CustomerPatch {
    #[schema(max_length = 255)]
    pub reference_id: Option<String>,
    #[schema(max_length = 320)]
    pub email: Option<String>,
    pub metadata: Option<MetadataPatchIn>,
    pub status: Option<CustomerStatusIn>,
}

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

/// `POST /v1/test/transfers` (DECISIONS.md section 15).
#[derive(ToSchema)]
pub struct NewTestTransfer {
    pub chain: EvmChainIn,
    #[schema(min_length = 1)]
    pub asset: String,
    /// Must equal the asset's decimals (as for payouts).
    pub decimals: u64,
    #[schema(pattern = "^[1-9][0-9]{0,37}$")]
    pub amount: String,
    /// An address the project custodies (a customer's or an invoice's).
    pub to_address: String,
    /// The sender (default: a synthetic one).
    pub from_address: Option<String>,
    /// Default true: the transfer is mined and confirmed before the answer.
    pub confirm: Option<bool>,
}

/// A simulated transfer (`object: test_transfer`).
#[derive(ToSchema)]
pub struct TestTransfer {
    #[schema(pattern = "^test_transfer$")]
    pub object: String,
    pub chain: String,
    pub asset: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub amount: String,
    pub tx_hash: String,
    pub from_address: String,
    pub to_address: String,
    pub block_number: u64,
    /// `customer` or `invoice` (new values may appear).
    pub owner: String,
    /// The customer's or the invoice's id.
    pub owner_id: Uuid,
    pub confirm: bool,
}

/// `POST /v1/test/clock`.
#[derive(ToSchema)]
pub struct AdvanceClock {
    /// Seconds to move the test project's clock forward, 1 to 31,622,400.
    #[schema(minimum = 1, maximum = 31622400)]
    pub advance_seconds: u64,
}

/// A test project's clock (`object: test_clock`).
#[derive(ToSchema)]
pub struct TestClock {
    #[schema(pattern = "^test_clock$")]
    pub object: String,
    #[schema(format = DateTime)]
    pub now: String,
}

/// A customer status a request may set or filter by.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum CustomerStatusIn {
    Active,
    Disabled,
}

/// `POST /v1/wallets`.
#[derive(ToSchema)]
pub struct NewWallet {
    pub customer_id: Uuid,
    pub chain: ChainIdIn,
}

/// `POST /v1/payouts`.
#[derive(ToSchema)]
pub struct NewPayout {
    pub chain: ChainIdIn,
    /// Asset symbol as listed by `GET /v1/chains`, e.g. `USDT`.
    #[schema(min_length = 1)]
    pub asset: String,
    /// Must equal the asset's decimals (400 `decimals_mismatch` otherwise).
    #[schema(minimum = 0)]
    pub decimals: u64,
    /// Atomic units.
    #[schema(pattern = "^[1-9][0-9]{0,37}$")]
    pub amount: String,
    pub to_address: String,
    /// The customer whose balance pays; omitted for the project's own funds.
    pub customer_id: Option<Uuid>,
    /// Free text; `refund:` at its start is reserved for the appliance's invoice refunds
    /// (400 `invalid_request`).
    #[schema(max_length = 255, pattern = "^(?!refund:)")]
    pub reference: Option<String>,
    #[schema(max_length = 255)]
    pub memo: Option<String>,
}

/// `POST /v1/sweeps`.
#[derive(ToSchema)]
pub struct NewSweep {
    pub wallet_id: Uuid,
    /// Sweep only this asset (default: every asset with a balance).
    #[schema(min_length = 1)]
    pub asset: Option<String>,
}

/// `POST /v1/api_keys`.
#[derive(ToSchema)]
pub struct NewApiKey {
    #[schema(max_length = 100)]
    pub name: String,
    pub kind: KeyKindIn,
    /// Default: the kind's read and write scopes (never `payouts:create`).
    pub scopes: Option<Vec<ScopeIn>>,
    /// Exact IPs or CIDR blocks, IPv4 or IPv6, at most 32; empty means any source.
    #[schema(max_items = 32)]
    pub ip_allowlist: Option<Vec<AllowEntryIn>>,
    pub signing_enabled: Option<bool>,
}

/// A key kind a request may name.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum KeyKindIn {
    Checkout,
    Payout,
    Wallet,
}

/// `PATCH /v1/api_keys/{id}`.
#[derive(ToSchema)]
pub struct ApiKeyPatch {
    #[schema(max_length = 100)]
    pub name: Option<String>,
    pub scopes: Option<Vec<ScopeIn>>,
    /// Empty clears the restriction.
    #[schema(max_items = 32)]
    pub ip_allowlist: Option<Vec<AllowEntryIn>>,
    pub signing_enabled: Option<bool>,
}

/// `POST /v1/api_keys/{id}/roll`.
#[derive(ToSchema)]
pub struct RollApiKey {
    /// Hours the old key keeps working (default 24).
    #[schema(minimum = 0, maximum = 168)]
    pub grace_hours: Option<u64>,
}

/// `POST /v1/webhooks`.
#[derive(ToSchema)]
pub struct NewWebhookEndpoint {
    /// https, port 443 or 8443, no credentials, resolving to public addresses only.
    pub url: WebhookUrlIn,
    #[schema(max_length = 255)]
    pub description: Option<String>,
    /// Empty or omitted: every event type, including types added later.
    pub event_types: Option<Vec<String>>,
    pub delivery_mode: Option<DeliveryModeIn>,
}

/// A delivery mode a request may set.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DeliveryModeIn {
    Unordered,
    Ordered,
}

/// `PATCH /v1/webhooks/{id}`.
#[derive(ToSchema)]
pub struct WebhookEndpointPatch {
    /// `active` also re-enables a disabled endpoint and resets `consecutive_failures`.
    pub status: Option<EndpointStatusIn>,
    pub url: Option<WebhookUrlIn>,
    #[schema(max_length = 255)]
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub delivery_mode: Option<DeliveryModeIn>,
}

/// An endpoint status a request may set.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum EndpointStatusIn {
    Active,
    Paused,
}

/// `POST /v1/webhooks/{id}/rotate_secret`.
#[derive(ToSchema)]
pub struct RotateSecret {
    /// Hours the old secret keeps signing (default 24; 0 for a leaked secret).
    #[schema(minimum = 0, maximum = 168)]
    pub overlap_hours: Option<u64>,
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

/// `POST /v1/test/blocks`.
#[derive(ToSchema)]
pub struct MineBlocks {
    /// Blocks to mine (default 1).
    #[schema(minimum = 1, maximum = 10000)]
    pub count: Option<u64>,
    /// One simulated chain (default: every one).
    pub chain: Option<EvmChainIn>,
}

/// `POST /v1/test/reorg`.
#[derive(ToSchema)]
pub struct ReorgRequest {
    /// A simulated EVM chain of the project.
    pub chain: EvmChainIn,
    /// Blocks replaced (1 to the blocks the chain holds: its height, or fewer once it
    /// pruned older blocks; at most 1000).
    #[schema(minimum = 1, maximum = 1000)]
    pub depth: u64,
    /// Drop the removed transactions (default true, as Anvil does); false returns them to the
    /// mempool.
    pub drop: Option<bool>,
}

/// `POST /v1/test/drop_tx`.
#[derive(ToSchema)]
pub struct DropTxRequest {
    /// A simulated EVM chain of the project.
    pub chain: EvmChainIn,
    /// A pending transaction's hash.
    #[schema(pattern = "^0x[0-9a-fA-F]{64}$")]
    pub tx_hash: String,
}
