//! Schema types of the OpenAPI document (issue 11): the JSON shapes `src/views.rs` and the
//! handlers write, and the bodies and query parameters the handlers read, described for
//! `GET /v1/openapi.json`. They describe; they are not used to serialize or parse (the
//! handlers' own readers in `api/extract.rs` stay the one place input is checked). Schemathesis
//! (`scripts/schemathesis.sh`) checks every answer against them, so a shape that drifts from
//! its view fails the test script.
//!
//! Conventions (docs/decisions.md, "OpenAPI document"):
//! - amounts are strings with a digits pattern ([`ATOMIC`], [`SIGNED_ATOMIC`], [`DECIMAL`]);
//! - enumerated values in ANSWERS are strings with the current values in the description,
//!   never a closed `enum` (SPEC.md section 1 rule 7: new values can appear); enumerations a
//!   REQUEST may carry are closed enums (the server refuses anything else);
//! - no schema forbids additional properties (SPEC.md section 9 rule 4);
//! - optional request fields are nullable: the server reads `null` as absent.

#![allow(dead_code)]

use serde_json::{json, Value};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{IntoParams, PartialSchema, ToSchema};
use uuid::Uuid;

/// An atomic (smallest-unit) amount: an integer string.
pub const ATOMIC: &str = "^(0|[1-9][0-9]*)$";
/// An atomic amount in a request: a positive integer string of at most 38 digits.
pub const ATOMIC_IN: &str = "^[1-9][0-9]{0,37}$";
/// A signed atomic amount (drift, surplus): an integer string, negative when short.
pub const SIGNED_ATOMIC: &str = "^-?(0|[1-9][0-9]*)$";
/// A decimal twin of an atomic amount, in whole coins (`"1.5"`).
pub const DECIMAL: &str = r"^-?[0-9]+(\.[0-9]+)?$";
/// A row cursor as this API returns it (base64url of a 16-byte id).
pub const ROW_CURSOR: &str = "^([A-Za-z0-9_-]{21}[AQgw])?$";
/// An event cursor as this API returns it (base64url of an 8-byte sequence).
pub const SEQ_CURSOR: &str = "^([A-Za-z0-9_-]{10}[AEIMQUYcgkosw048])?$";
/// An event id: `evt_` + ULID.
pub const EVENT_ID: &str = "^evt_[0-9A-HJKMNP-TV-Z]{26}$";
/// A webhook delivery id: `whd_` + ULID.
pub const DELIVERY_ID: &str = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$";
/// An `Idempotency-Key`: 1 to 255 printable ASCII characters, no surrounding spaces.
pub const IDEMPOTENCY_KEY: &str = "^[!-~]([ -~]{0,253}[!-~])?$";

// ---------------------------------------------------------------------------------------
// Errors

/// The error envelope of every failure (SPEC.md section 7). Clients branch on `code`; new
/// codes can appear.
#[derive(ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// Repeats `code`.
    pub error: String,
    /// Machine-readable reason, e.g. `invalid_request`, `invalid_api_key`, `wrong_key_kind`,
    /// `missing_scope`, `signing_disabled`, `test_mode_only`, `not_found`,
    /// `insufficient_funds`, `decimals_mismatch`, `idempotency_key_required`,
    /// `idempotency_key_reuse`, `idempotency_in_progress`, `rate_limited`, `internal_error`.
    pub code: String,
    /// `invalid_request_error` (400, 402, 404, 422), `authentication_error` (401, 403),
    /// `idempotency_error` (409), `rate_limit_error` (429), `api_error` (5xx).
    #[schema(rename = "type")]
    pub kind: String,
    /// Human-readable explanation; not for branching.
    pub message: String,
    /// The request field, query parameter or header at fault, when one is.
    pub param: Option<String>,
    /// `req_` + ULID, also sent as the `Request-Id` header.
    pub request_id: String,
}

// ---------------------------------------------------------------------------------------
// Shared parameters

/// Cursor pagination of a list (SPEC.md section 8): newest first.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Page size, 1-100 (default 25).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The previous page's `next_cursor` (empty: the first page).
    #[param(pattern = "^([A-Za-z0-9_-]{21}[AQgw])?$")]
    pub cursor: Option<String>,
}

/// A resource id in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct IdPath {
    /// The resource's id (UUID).
    pub id: Uuid,
}

/// The optional `Idempotency-Key` header of a creating `POST` (SPEC.md section 4): a retry
/// with the same key and body replays the first answer; another body is 409
/// `idempotency_key_reuse`. Kept 24 hours.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyHeader {
    #[param(
        rename = "Idempotency-Key",
        required = false,
        min_length = 1,
        max_length = 255,
        pattern = "^[!-~]([ -~]{0,253}[!-~])?$"
    )]
    pub idempotency_key: String,
}

/// The REQUIRED `Idempotency-Key` header (payouts): missing is 400 `idempotency_key_required`.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
pub struct RequiredIdempotencyHeader {
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = "^[!-~]([ -~]{0,253}[!-~])?$"
    )]
    pub idempotency_key: String,
}

// ---------------------------------------------------------------------------------------
// Lists

macro_rules! list_schema {
    ($($name:ident => $item:ty;)*) => {$(
        #[doc = concat!("A page of `", stringify!($item), "` (`object: list`), newest first.")]
        #[derive(ToSchema)]
        pub struct $name {
            /// Always `list`.
            #[schema(pattern = "^list$")]
            pub object: String,
            pub data: Vec<$item>,
            /// More items follow; pass `next_cursor` as `cursor`.
            pub has_more: bool,
            /// The cursor of the next page; null at the end.
            pub next_cursor: Option<String>,
        }
    )*};
}

list_schema! {
    CustomerList => Customer;
    WalletList => Wallet;
    DepositList => Deposit;
    PayoutList => Payout;
    SweepList => Sweep;
    ConversionList => Conversion;
    ConversionRuleList => ConversionRule;
    EventList => Event;
    DeliveryList => WebhookDelivery;
    ChainList => Chain;
    InvoiceList => InvoiceItem;
}

// ---------------------------------------------------------------------------------------
// Resources (SPEC.md section 2)

/// A customer (`object: customer`).
#[derive(ToSchema)]
pub struct Customer {
    pub id: Uuid,
    #[schema(pattern = "^customer$")]
    pub object: String,
    /// The merchant's own user id; unique in the project.
    pub reference_id: Option<String>,
    pub email: Option<String>,
    /// `active` or `disabled` (new values may appear).
    pub status: String,
    /// The merchant's key-value data.
    #[schema(value_type = Object)]
    pub metadata: Value,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// A deposit address (`object: wallet`), one per (customer, chain).
#[derive(ToSchema)]
pub struct Wallet {
    pub id: Uuid,
    #[schema(pattern = "^wallet$")]
    pub object: String,
    pub customer_id: Uuid,
    /// Chain identifier (`ethereum`, `bsc`, ...).
    pub chain: String,
    /// `customer` (new values may appear).
    pub role: String,
    /// `active` (new values may appear).
    pub status: String,
    pub address: String,
    /// On TON, when non-null the sender must include it.
    pub memo: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// An asset embedded in a resource.
#[derive(ToSchema)]
pub struct Asset {
    pub chain: String,
    pub symbol: String,
    pub decimals: u32,
    /// Token contract address; empty for a native coin.
    pub contract: String,
}

/// An asset embedded in a sweep.
#[derive(ToSchema)]
pub struct SweepAsset {
    pub symbol: String,
    pub decimals: u32,
    pub contract: String,
}

/// A deposit (`object: deposit`).
#[derive(ToSchema)]
pub struct Deposit {
    pub id: Uuid,
    #[schema(pattern = "^deposit$")]
    pub object: String,
    pub customer_id: Uuid,
    pub wallet_id: Uuid,
    pub chain: String,
    pub asset: Asset,
    /// Atomic units.
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub amount: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub amount_decimal: String,
    pub tx_hash: String,
    pub log_index: u64,
    pub from_address: String,
    pub to_address: String,
    pub block_number: u64,
    pub confirmations: u64,
    pub required_confirmations: u64,
    /// `detected`, `confirmed`, `failed` or `orphaned` (new values may appear).
    pub status: String,
    /// Why a `failed` deposit was not money.
    pub failure_reason: Option<String>,
    #[schema(format = DateTime)]
    pub block_time: String,
    pub explorer_url: Option<String>,
    /// The ledger transaction of the credit, once confirmed.
    pub ledger_tx_id: Option<Uuid>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// A payment address of an invoice.
#[derive(ToSchema)]
pub struct InvoiceAddress {
    pub chain: String,
    pub address: String,
    pub memo: Option<String>,
}

/// A rate locked on an invoice for one (chain, asset) (DECISIONS.md section 12).
#[derive(ToSchema)]
pub struct InvoiceQuote {
    pub chain: String,
    pub asset: String,
    /// Token contract; empty for a native coin.
    pub contract: String,
    /// What the payer sends, atomic units: ceil(price / rate x 10^decimals).
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub amount_atomic: String,
    /// The same in whole coins (display only).
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub amount: String,
    pub decimals: u32,
    /// USD per whole coin.
    #[schema(pattern = r"^[0-9]+(\.[0-9]+)?$")]
    pub rate: String,
    /// `par`, `kraken`, `chainlink` or `test` (new values may appear).
    pub rate_source: String,
}

/// An invoice (`object: invoice`), full form. Cents are integer strings.
#[derive(ToSchema)]
pub struct Invoice {
    pub id: Uuid,
    #[schema(pattern = "^invoice$")]
    pub object: String,
    pub reference_id: Option<String>,
    pub title: Option<String>,
    pub description: Option<String>,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub price_amount: String,
    /// `USD`.
    pub price_currency: String,
    /// `open`, `pending`, `paid`, `underpaid`, `overpaid`, `expired` or `canceled` (new
    /// values may appear).
    pub status: String,
    pub fee_bps: u32,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub fee_fixed_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub fee_cap_cents: String,
    #[schema(value_type = Object)]
    pub metadata: Value,
    pub return_url: Option<String>,
    pub cancel_url: Option<String>,
    /// `keep` or `refund`.
    pub overpayment_policy: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
    /// Underpaid-window extensions so far (at most 3).
    pub extensions: u32,
    /// USD cents received, valued at the locked rates.
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub received_amount: String,
    /// USD cents beyond the price (overpaid).
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub excess_amount: String,
    /// `{public_base_url}/checkout/{token}`: the hosted checkout.
    pub checkout_url: String,
    pub addresses: Vec<InvoiceAddress>,
    pub quotes: Vec<InvoiceQuote>,
    #[schema(format = DateTime)]
    pub paid_at: Option<String>,
    #[schema(format = DateTime)]
    pub canceled_at: Option<String>,
    #[schema(format = DateTime)]
    pub expired_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// An invoice as a list item.
#[derive(ToSchema)]
pub struct InvoiceItem {
    #[schema(pattern = "^invoice$")]
    pub object: String,
    pub id: Uuid,
    pub reference_id: Option<String>,
    pub title: Option<String>,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub price_amount: String,
    pub price_currency: String,
    pub status: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub received_amount: String,
    pub fee_bps: u32,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub fee_fixed_cents: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub fee_cap_cents: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime)]
    pub paid_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// A payout (`object: payout`).
#[derive(ToSchema)]
pub struct Payout {
    pub id: Uuid,
    #[schema(pattern = "^payout$")]
    pub object: String,
    /// Null for a payout of the project's own funds.
    pub customer_id: Option<Uuid>,
    pub chain: String,
    /// Asset symbol, e.g. `USDT`.
    pub asset: String,
    pub asset_id: Uuid,
    pub decimals: u32,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub amount: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub amount_decimal: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub fee_amount: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub fee_amount_decimal: String,
    pub to_address: String,
    pub memo: Option<String>,
    /// `pending_approval`, `queued`, `signing`, `submitted`, `confirmed`, `failed`,
    /// `canceled` or `rejected` (new values may appear).
    pub status: String,
    pub reference: Option<String>,
    pub tx_hash: Option<String>,
    pub explorer_url: Option<String>,
    pub failure_reason: Option<String>,
    /// USD value at acceptance: stablecoins at par (exact), other coins at the market price
    /// then (whole cents); null when no usable price existed.
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub amount_usd: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// A sweep (`object: sweep`): coins moved from a deposit address to the master wallet.
#[derive(ToSchema)]
pub struct Sweep {
    pub id: Uuid,
    #[schema(pattern = "^sweep$")]
    pub object: String,
    pub wallet_id: Uuid,
    pub chain: String,
    /// `open`, `submitted`, `confirmed`, `failed` or `skipped` (new values may appear).
    pub status: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub amount: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub amount_decimal: String,
    pub asset: SweepAsset,
    /// `below_threshold`, `nothing_to_sweep`, `gas_too_expensive` for a `skipped` sweep.
    pub skip_reason: Option<String>,
    pub tx_hash: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// An API key (`object: api_key`). The creation and roll answers add `token`.
#[derive(ToSchema)]
pub struct ApiKey {
    pub id: Uuid,
    #[schema(pattern = "^api_key$")]
    pub object: String,
    /// Display handle: the key's prefix plus the first 8 hex characters of its random part.
    pub key_id: String,
    /// `live` or `test`.
    pub env: String,
    /// `checkout`, `payout` or `wallet`.
    pub kind: String,
    pub name: String,
    pub last4: String,
    pub scopes: Vec<String>,
    pub ip_allowlist: Vec<String>,
    pub signing_enabled: bool,
    /// `merchant`, or `service_staff`, or the operator's label.
    pub created_by: String,
    pub rotated_from: Option<Uuid>,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    #[schema(format = DateTime)]
    pub revoked_at: Option<String>,
    #[schema(format = DateTime)]
    pub last_used_at: Option<String>,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub use_count: String,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// An API key with its token, shown once (creation and roll answers). An idempotent replay
/// answers `token: null`.
#[derive(ToSchema)]
pub struct ApiKeyWithToken {
    #[serde(flatten)]
    pub key: ApiKey,
    /// The full key: prefix + 64 lowercase hex. Null in an idempotent replay.
    #[schema(pattern = "^[0-9a-z]+$")]
    pub token: Option<String>,
    /// Roll answers only: when the rolled key stops working.
    #[schema(format = DateTime)]
    pub old_key_expires_at: Option<String>,
}

/// A page of API keys plus the per-kind limit and default scopes.
#[derive(ToSchema)]
pub struct ApiKeyList {
    #[schema(pattern = "^list$")]
    pub object: String,
    pub data: Vec<ApiKey>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
    /// Enabled keys allowed per kind.
    pub limit_per_kind: u32,
    /// Scopes a new key of each kind gets when `scopes` is omitted.
    #[schema(value_type = Object)]
    pub default_scopes: Value,
}

/// A webhook endpoint (`object: webhook_endpoint`).
#[derive(ToSchema)]
pub struct WebhookEndpoint {
    pub id: Uuid,
    #[schema(pattern = "^webhook_endpoint$")]
    pub object: String,
    pub tenant_id: Uuid,
    pub url: String,
    pub description: Option<String>,
    /// Subscribed types; empty means every type, including types added later.
    pub event_types: Vec<String>,
    /// `active`, `paused` or `disabled` (new values may appear).
    pub status: String,
    /// `unordered` or `ordered`.
    pub delivery_mode: String,
    pub consecutive_failures: u32,
    /// `consecutive_failures` or `gone` for a disabled endpoint.
    pub disabled_reason: Option<String>,
    #[schema(format = DateTime)]
    pub disabled_at: Option<String>,
    #[schema(format = DateTime)]
    pub secret_overlap_until: Option<String>,
    #[schema(format = DateTime)]
    pub last_success_at: Option<String>,
    #[schema(format = DateTime)]
    pub last_failure_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
}

/// A webhook endpoint with its signing secret, shown once (creation and rotation answers).
#[derive(ToSchema)]
pub struct WebhookEndpointWithSecret {
    #[serde(flatten)]
    pub endpoint: WebhookEndpoint,
    /// `whsec_` + 43 base64url characters. Null in an idempotent replay.
    #[schema(pattern = "^whsec_[A-Za-z0-9_-]{43}$")]
    pub secret: Option<String>,
    /// Until when the previous secret also signs.
    #[schema(format = DateTime)]
    pub overlap_until: Option<String>,
}

/// Every endpoint of the project (never paginated) and the event catalogue.
#[derive(ToSchema)]
pub struct WebhookEndpointList {
    #[schema(pattern = "^list$")]
    pub object: String,
    pub data: Vec<WebhookEndpoint>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
    /// Every event type.
    pub event_catalog: Vec<String>,
}

/// `{deleted: true, id}` of a removed endpoint.
#[derive(ToSchema)]
pub struct DeletedEndpoint {
    pub id: Uuid,
    #[schema(pattern = "^webhook_endpoint$")]
    pub object: String,
    pub deleted: bool,
}

/// The queued `endpoint.test` event and its delivery.
#[derive(ToSchema)]
pub struct WebhookTest {
    #[schema(pattern = "^webhook_test$")]
    pub object: String,
    #[schema(pattern = "^evt_[0-9A-HJKMNP-TV-Z]{26}$")]
    pub event_id: String,
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    pub delivery_id: String,
}

/// A webhook delivery (`object: webhook_delivery`); the single read adds `response_body`.
#[derive(ToSchema)]
pub struct WebhookDelivery {
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    pub id: String,
    #[schema(pattern = "^webhook_delivery$")]
    pub object: String,
    pub tenant_id: Uuid,
    #[schema(pattern = "^evt_[0-9A-HJKMNP-TV-Z]{26}$")]
    pub event_id: String,
    pub endpoint_id: Uuid,
    pub event_type: String,
    pub endpoint_url: String,
    /// `pending`, `succeeded`, `failed`, `exhausted`, `skipped` or `canceled`.
    pub status: String,
    pub attempt: u32,
    pub max_attempts: u32,
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    pub response_status: Option<u16>,
    pub resolved_ip: Option<String>,
    pub duration_ms: Option<u64>,
    pub error_detail: Option<String>,
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    pub replay_of: Option<String>,
    #[schema(format = DateTime)]
    pub delivered_at: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// The receiver's answer (single read only), truncated.
    pub response_body: Option<String>,
}

/// An event (`object: event`); `data` is the resource as its REST read returns it.
#[derive(ToSchema)]
pub struct Event {
    #[schema(pattern = "^evt_[0-9A-HJKMNP-TV-Z]{26}$")]
    pub id: String,
    #[schema(pattern = "^event$")]
    pub object: String,
    /// Event type, e.g. `deposit.confirmed`; new types can appear.
    #[schema(rename = "type")]
    pub kind: String,
    /// `2026-08-01`.
    pub api_version: String,
    #[schema(format = DateTime)]
    pub created: String,
    pub livemode: bool,
    pub tenant: Uuid,
    /// Monotonic per tenant; gaps are normal.
    pub sequence: u64,
    pub resource_id: Option<String>,
    #[schema(value_type = Object)]
    pub data: Value,
}

/// Who am I (`object: ping`).
#[derive(ToSchema)]
pub struct Ping {
    #[schema(pattern = "^ping$")]
    pub object: String,
    pub tenant_id: Uuid,
    pub tenant_slug: String,
    pub key_id: String,
    /// `live` or `test`.
    pub env: String,
    /// `checkout`, `payout` or `wallet`.
    pub kind: String,
    pub scopes: Vec<String>,
    pub signing_enabled: bool,
    /// Any of `service`, `project`, `key`.
    pub signing_blocked_by: Vec<String>,
    /// `mainnet` or `testnet`.
    pub network: String,
    pub enabled_chains: Vec<String>,
}

/// A chain's native coin.
#[derive(ToSchema)]
pub struct NativeCurrency {
    pub name: String,
    pub symbol: String,
    pub decimals: u32,
}

/// An asset of a chain, with its switches.
#[derive(ToSchema)]
pub struct ChainAsset {
    pub symbol: String,
    pub name: String,
    pub decimals: u32,
    pub contract: String,
    pub is_native: bool,
    pub deposits_enabled: bool,
    pub payouts_enabled: bool,
    /// The scale deviates from 6 (USDT and USDC on `bsc`).
    pub decimals_differ_from_default: bool,
}

/// A chain listed for the project (items of `GET /v1/chains`).
#[derive(ToSchema)]
pub struct Chain {
    pub chain: String,
    pub name: String,
    pub network_type: String,
    pub chain_id: u64,
    pub native_currency: NativeCurrency,
    pub required_confirmations: u64,
    pub explorer_url: String,
    pub enabled_for_tenant: bool,
    /// `contract` (keyless smart account) or `eoa`.
    pub account_kind: String,
    /// `live`, `paused` or `coming_soon`.
    pub status: String,
    pub status_note: Option<String>,
    pub deposits_enabled: bool,
    pub payouts_enabled: bool,
    pub supports_memo: bool,
    pub assets: Vec<ChainAsset>,
}

/// One (chain, asset) balance. `onchain`, `onchain_decimal` and `drift` only with an
/// on-chain reading (`source=chain|both`).
#[derive(ToSchema)]
pub struct Balance {
    pub chain: String,
    pub asset: String,
    pub decimals: u32,
    /// Spendable.
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub available: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub available_decimal: String,
    /// Reserved against in-flight payouts.
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub locked: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub locked_decimal: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub total: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub total_decimal: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub onchain: Option<String>,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub onchain_decimal: Option<String>,
    /// On-chain balance minus what the ledger expects on the address.
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub drift: Option<String>,
}

/// A customer's balances (`object: balance_list`).
#[derive(ToSchema)]
pub struct CustomerBalances {
    #[schema(pattern = "^balance_list$")]
    pub object: String,
    pub customer_id: Uuid,
    pub data: Vec<Balance>,
}

/// A wallet's balances (`object: balance_list`).
#[derive(ToSchema)]
pub struct WalletBalances {
    #[schema(pattern = "^balance_list$")]
    pub object: String,
    pub wallet_id: Uuid,
    /// `ledger`, `chain` or `both`.
    pub source: String,
    pub data: Vec<Balance>,
}

/// The treasury of one (chain, asset). `surplus` = assets minus liabilities; negative means
/// more is owed to customers than is held.
#[derive(ToSchema)]
pub struct TreasuryLine {
    pub chain: String,
    pub asset: String,
    pub decimals: u32,
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub deposits: String,
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub in_transit: String,
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub treasury: String,
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub held: String,
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub liability: String,
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub surplus: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub deposits_decimal: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub in_transit_decimal: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub treasury_decimal: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub held_decimal: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub liability_decimal: String,
    #[schema(pattern = r"^-?[0-9]+(\.[0-9]+)?$")]
    pub surplus_decimal: String,
}

/// The project's treasury (`object: treasury`).
#[derive(ToSchema)]
pub struct Treasury {
    #[schema(pattern = "^treasury$")]
    pub object: String,
    pub data: Vec<TreasuryLine>,
}

/// Blocks mined on the simulated chain.
#[derive(ToSchema)]
pub struct TestBlocks {
    #[schema(pattern = "^test_blocks$")]
    pub object: String,
    pub mined: u64,
    /// Height of each simulated chain after mining.
    #[schema(value_type = Object)]
    pub heights: Value,
}

/// A reorg of a simulated chain (`object: test_reorg`).
#[derive(ToSchema)]
pub struct TestReorg {
    #[schema(pattern = "^test_reorg$")]
    pub object: String,
    pub chain: String,
    pub depth: u64,
    pub drop: bool,
    /// The chain's height after the reorg (unchanged: the replaced blocks are re-mined empty).
    pub height: u64,
}

/// A pending transaction dropped from a simulated chain's mempool (`object: test_dropped_tx`).
#[derive(ToSchema)]
pub struct TestDroppedTx {
    #[schema(pattern = "^test_dropped_tx$")]
    pub object: String,
    pub chain: String,
    #[schema(pattern = "^0x[0-9a-f]{64}$")]
    pub tx_hash: String,
}

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
    pub accepted_assets: Option<Vec<String>>,
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
    #[schema(max_length = 255)]
    pub reference: Option<String>,
    #[schema(max_length = 255)]
    pub memo: Option<String>,
}

/// `POST /v1/sweeps`.
#[derive(ToSchema)]
pub struct NewSweep {
    pub wallet_id: Uuid,
    /// Sweep only this asset (default: every asset with a balance).
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
    pub ip_allowlist: Option<Vec<String>>,
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
    pub ip_allowlist: Option<Vec<String>>,
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
    pub url: String,
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
    pub url: Option<String>,
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

// ---------------------------------------------------------------------------------------
// Enumerations a request may carry (closed: anything else is 400 `invalid_request`).

/// Which balances `GET /v1/wallets/{id}/balances` reports.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum BalanceSource {
    Ledger,
    Chain,
    Both,
}

/// A deposit status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DepositStatusIn {
    Detected,
    Confirmed,
    Failed,
    Orphaned,
}

/// A sweep status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum SweepStatusIn {
    Open,
    Submitted,
    Confirmed,
    Failed,
    Skipped,
}

/// A payout status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum PayoutStatusIn {
    PendingApproval,
    Queued,
    Signing,
    Submitted,
    Confirmed,
    Failed,
    Canceled,
    Rejected,
}

/// A webhook delivery status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DeliveryStatusIn {
    Pending,
    Succeeded,
    Failed,
    Exhausted,
    Skipped,
    Canceled,
}

/// Order of `GET /v1/events`.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum EventOrder {
    Asc,
    Desc,
}

/// `include_revoked` of `GET /v1/api_keys`.
#[derive(ToSchema)]
pub enum IncludeRevoked {
    #[schema(rename = "0")]
    No,
    #[schema(rename = "1")]
    Yes,
    #[schema(rename = "false")]
    False,
    #[schema(rename = "true")]
    True,
}

/// A page of webhook deliveries as `POST /v1/webhook_deliveries/replay` answers it: the new
/// deliveries, oldest first; `next_cursor` continues the replay.
#[derive(ToSchema)]
pub struct ReplayedList {
    #[schema(pattern = "^list$")]
    pub object: String,
    pub data: Vec<WebhookDelivery>,
    pub has_more: bool,
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    pub next_cursor: Option<String>,
}

/// An RFC 3339 timestamp, as the server parses it.
pub const RFC3339: &str = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";

// ---------------------------------------------------------------------------------------
// Schemas built from the server's own tables (chains, scopes) and rules (metadata).

fn from_json(v: Value) -> RefOr<Schema> {
    RefOr::T(serde_json::from_value(v).expect("a valid schema"))
}

/// A chain identifier a request may name (SPEC.md section 2: the enumerated chains). Whether
/// the project may use it now is answered with 422 (`chain_not_enabled`, ...).
pub struct ChainIdIn;

impl PartialSchema for ChainIdIn {
    fn schema() -> RefOr<Schema> {
        let ids: Vec<&str> = appliance_chains::registry::CHAINS
            .iter()
            .map(|c| c.id)
            .collect();
        from_json(json!({"type": "string", "enum": ids, "description": "A chain identifier."}))
    }
}
impl ToSchema for ChainIdIn {}

/// A chain the test mode simulates (the EVM chains).
pub struct EvmChainIn;

impl PartialSchema for EvmChainIn {
    fn schema() -> RefOr<Schema> {
        let ids: Vec<&str> = appliance_chains::registry::CHAINS
            .iter()
            .filter(|c| c.account_kind == appliance_chains::AccountKind::Contract)
            .map(|c| c.id)
            .collect();
        from_json(json!({"type": "string", "enum": ids, "description": "A simulated (EVM) chain."}))
    }
}
impl ToSchema for EvmChainIn {}

/// A scope a key may hold: a known scope, `*`, or `<group>:*`.
pub struct ScopeIn;

impl PartialSchema for ScopeIn {
    fn schema() -> RefOr<Schema> {
        let mut all: Vec<String> = vec!["*".into()];
        let mut groups: Vec<&str> = Vec::new();
        for s in crate::auth::ALL_SCOPES {
            all.push((*s).to_string());
            let g = s.split(':').next().unwrap_or(s);
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        all.extend(groups.iter().map(|g| format!("{g}:*")));
        from_json(
            json!({"type": "string", "enum": all, "description": "A scope (SPEC.md section 5 rule 6, DECISIONS.md section 4)."}),
        )
    }
}
impl ToSchema for ScopeIn {}

fn metadata_schema(patch: bool) -> Value {
    let values = vec![
        json!({"type": "string", "maxLength": crate::services::metadata::MAX_VALUE_CHARS}),
        json!({"type": "number"}),
        json!({"type": "boolean"}),
        json!({"type": "null"}),
    ];
    let description = if patch {
        "Merged into the customer's metadata; a key set to null is removed; the result holds at most 50 keys."
    } else {
        "The merchant's key-value data; null values are left out."
    };
    json!({
        "type": "object",
        "description": format!("{description} At most {} keys of 1-{} characters; each value a string of at most {} characters, a number or a boolean.",
            crate::services::metadata::MAX_KEYS, crate::services::metadata::MAX_KEY_CHARS, crate::services::metadata::MAX_VALUE_CHARS),
        "maxProperties": crate::services::metadata::MAX_KEYS,
        "propertyNames": {"type": "string", "minLength": 1, "maxLength": crate::services::metadata::MAX_KEY_CHARS},
        "additionalProperties": {"anyOf": values},
    })
}

/// `metadata` of a request that sets it whole.
pub struct MetadataIn;

impl PartialSchema for MetadataIn {
    fn schema() -> RefOr<Schema> {
        from_json(metadata_schema(false))
    }
}
impl ToSchema for MetadataIn {}

/// `metadata` of a patch: merged, null removes a key.
pub struct MetadataPatchIn;

impl PartialSchema for MetadataPatchIn {
    fn schema() -> RefOr<Schema> {
        from_json(metadata_schema(true))
    }
}
impl ToSchema for MetadataPatchIn {}

// ---------------------------------------------------------------------------------------
// Conversions (SPEC.md section 2, Conversion rule, Conversion, Conversion batch, Conversion
// quote)

/// A coin a rule can convert into.
#[derive(ToSchema)]
pub struct ConversionTarget {
    pub symbol: String,
    pub stable: bool,
    pub is_native: bool,
    /// Token contract; empty for the native coin.
    pub contract: String,
}

/// A conversion rule (`object: conversion_rule`), one per chain the project lists.
#[derive(ToSchema)]
pub struct ConversionRule {
    #[schema(pattern = "^conversion_rule$")]
    pub object: String,
    pub chain: String,
    pub name: String,
    /// Whether conversions run on this chain (a DEX is configured; every EVM chain in test
    /// mode).
    pub supported: bool,
    /// Why not (`no_dex_configured`); null when supported.
    pub unsupported_reason: Option<String>,
    pub enabled: bool,
    /// The coin payments convert into; null when the chain lists no stablecoin and no rule
    /// was set.
    pub target_asset: Option<String>,
    /// Coins never converted.
    pub keep_assets: Vec<String>,
    /// Stablecoins first, then every other coin of the chain.
    pub targets: Vec<ConversionTarget>,
    /// Null until the rule is first set.
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
}

/// `PUT /v1/conversion/rules/{chain}`.
#[derive(ToSchema)]
pub struct ConversionRuleUpdate {
    pub enabled: bool,
    /// A coin of the chain (400 `invalid_target` otherwise).
    pub target_asset: String,
    /// Coins of the chain never converted (400 `invalid_keep_asset` for another).
    #[schema(max_items = 64)]
    pub keep_assets: Option<Vec<String>>,
}

/// `POST /v1/conversions/quote` and `POST /v1/conversions`.
#[derive(ToSchema)]
pub struct ConversionQuoteRequest {
    pub chain: ChainIdIn,
    pub from_asset: String,
    pub to_asset: String,
    /// Atomic units of `from_asset`.
    #[schema(pattern = "^[1-9][0-9]{0,37}$")]
    pub amount: String,
    /// Default 50 (0.5%).
    #[schema(minimum = 0, maximum = 5000)]
    pub slippage_bps: Option<u32>,
}

/// A conversion quote (`object: conversion_quote`); read-only, not held.
#[derive(ToSchema)]
pub struct ConversionQuote {
    #[schema(pattern = "^conversion_quote$")]
    pub object: String,
    pub chain: String,
    pub from_asset: String,
    pub to_asset: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub amount_in: String,
    pub amount_in_decimal: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub expected_out: String,
    pub expected_out_decimal: String,
    /// The least the swap accepts: `expected_out x (1 - slippage_bps / 10,000)`.
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub min_out: String,
    pub min_out_decimal: String,
    pub slippage_bps: u32,
    /// Units of `to_asset` per unit of `from_asset`.
    pub rate: Option<String>,
    /// USD value of `amount_in`; null without a usable price.
    pub amount_usd: Option<String>,
    /// Estimated network fee in USD; null without a price of the native coin.
    pub gas_usd: Option<String>,
    pub fee_cents: u64,
    /// `test` or the DEX kind (`uniswap_v2`, `uniswap_v3`).
    pub market: String,
    /// What the treasury can convert now (free of everything in flight), atomic units.
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub available: String,
    pub available_decimal: String,
    /// An ERC-20 input needs the router's allowance first.
    pub needs_approval: bool,
}

/// A conversion row (`object: conversion`).
#[derive(ToSchema)]
pub struct Conversion {
    pub id: Uuid,
    #[schema(pattern = "^conversion$")]
    pub object: String,
    /// `auto` or `manual`.
    pub kind: String,
    pub payment_id: Option<Uuid>,
    pub receipt_no: Option<String>,
    /// The customer whose balance a manual conversion draws on.
    pub customer_id: Option<Uuid>,
    pub chain: String,
    pub from_asset: String,
    pub to_asset: String,
    pub amount_in: String,
    pub amount_in_decimal: String,
    /// Null until converted.
    pub amount_out: Option<String>,
    pub amount_out_decimal: Option<String>,
    pub rate: Option<String>,
    /// `queued`, `converting`, `converted`, `skipped` or `failed` (new values may appear).
    pub status: String,
    pub reason: Option<String>,
    pub batch_id: Option<Uuid>,
    pub tx_hash: Option<String>,
    pub explorer_url: Option<String>,
    pub attempts: u32,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    #[schema(format = DateTime)]
    pub settled_at: Option<String>,
}

/// A conversion batch (`object: conversion_batch`): one swap for rows of one project.
#[derive(ToSchema)]
pub struct ConversionBatch {
    pub id: Uuid,
    #[schema(pattern = "^conversion_batch$")]
    pub object: String,
    pub chain: String,
    pub from_asset: String,
    pub to_asset: String,
    pub amount_in: String,
    pub amount_in_decimal: String,
    /// Null until settled.
    pub amount_out: Option<String>,
    pub amount_out_decimal: Option<String>,
    pub expected_out: String,
    pub expected_out_decimal: String,
    pub min_out: String,
    pub min_out_decimal: String,
    pub slippage_bps: u32,
    pub rate: Option<String>,
    pub amount_usd: Option<String>,
    pub fee_cents: u64,
    pub market: String,
    /// `approving`, `swapping`, `settled` or `failed` (new values may appear).
    pub status: String,
    /// Why a batch failed (`slippage`, ...).
    pub error_code: Option<String>,
    pub approve_tx_hash: Option<String>,
    pub approve_explorer_url: Option<String>,
    pub swap_tx_hash: Option<String>,
    pub swap_explorer_url: Option<String>,
    /// Number of conversion rows.
    pub rows: u64,
    pub attempts: u32,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    #[schema(format = DateTime)]
    pub settled_at: Option<String>,
}

/// The answer of `POST /v1/conversions` (`object: conversion_request`).
#[derive(ToSchema)]
pub struct ConversionRequestAnswer {
    #[schema(pattern = "^conversion_request$")]
    pub object: String,
    pub rows: Vec<Conversion>,
    pub batch: Option<ConversionBatch>,
    /// Why no batch was planned at once; null when it was.
    pub pending_reason: Option<String>,
}

/// A conversion row status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ConversionStatusIn {
    Queued,
    Converting,
    Converted,
    Skipped,
    Failed,
}

/// A conversion kind filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ConversionKindIn {
    Auto,
    Manual,
}

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

/// The on-chain transfer behind a funding entry.
#[derive(ToSchema)]
pub struct BillingTransfer {
    pub amount_decimal: String,
    pub tx_hash: String,
    pub explorer_url: Option<String>,
    pub from_address: Option<String>,
    pub confirmations: u64,
    pub required_confirmations: u64,
    /// `confirmed` (a credit), `failed` (recorded, refused at confirmation) or `orphaned`
    /// (on the entry reversing a credit); new values may appear.
    pub status: String,
    #[schema(format = DateTime)]
    pub block_time: Option<String>,
}

/// A line of the operational balance's journal (`object: billing_entry`).
#[derive(ToSchema)]
pub struct BillingEntry {
    pub id: Uuid,
    #[schema(pattern = "^billing_entry$")]
    pub object: String,
    /// `funding`, `onboarding_fee`, `payment_fee`, `address_fee`, `payout_fee`,
    /// `withdrawal_fee`, `monthly_minimum`, `refund`, `adjustment`, `conversion_fee` (new values
    /// may appear).
    pub kind: String,
    /// Signed USD cents: credits positive, charges negative.
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub amount_cents: String,
    /// The balance right after this entry.
    #[schema(pattern = "^-?(0|[1-9][0-9]*)$")]
    pub balance_after_cents: String,
    /// `invoice`, `wallet`, `payout`, `conversion`, `plan`, `month`, `deposit`, `operator`.
    pub ref_type: Option<String>,
    pub ref_id: Option<String>,
    pub chain: Option<String>,
    pub asset: Option<String>,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub amount_atomic: Option<String>,
    /// USD per whole coin.
    pub rate: Option<String>,
    /// `par`, `test`, `kraken`, `chainlink`.
    pub rate_source: Option<String>,
    pub note: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    pub transfer: Option<BillingTransfer>,
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
