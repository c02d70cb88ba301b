//! The resources' answers (SPEC.md section 2), as `src/views.rs` writes them.

#![allow(dead_code)]

use super::*;

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
