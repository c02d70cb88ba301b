//! The resources' answers (SPEC.md section 2), as `src/views.rs` writes them.

#![allow(dead_code)]

use super::*;

// ---------------------------------------------------------------------------------------
// Resources (SPEC.md section 2)

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
