//! The shapes of the chains, the treasury, the test mode's answers and the small webhook
//! answers (SPEC.md section 2; DECISIONS.md section 15). Their fields are declared in the
//! order the OpenAPI document lists them; they reach the wire through [`Sorted`], so the
//! keys are in byte order like every other answer.
//!
//! [`Sorted`]: super::Sorted

use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

/// A chain's native coin.
#[derive(Serialize, ToSchema)]
#[schema(as = NativeCurrency)]
pub struct NativeCurrencyView {
    pub name: &'static str,
    pub symbol: &'static str,
    pub decimals: u32,
}

/// An asset of a chain, with its switches.
#[derive(Serialize, ToSchema)]
#[schema(as = ChainAsset)]
pub struct ChainAssetView<'a> {
    pub symbol: &'a str,
    pub name: &'a str,
    pub decimals: u32,
    pub contract: &'a str,
    pub is_native: bool,
    pub deposits_enabled: bool,
    pub payouts_enabled: bool,
    /// The scale deviates from 6 (USDT and USDC on `bsc`).
    pub decimals_differ_from_default: bool,
}

/// A chain listed for the project (items of `GET /v1/chains`).
#[derive(Serialize, ToSchema)]
#[schema(as = Chain)]
pub struct ChainView<'a> {
    pub chain: &'static str,
    pub name: &'static str,
    pub network_type: &'static str,
    pub chain_id: u64,
    pub native_currency: NativeCurrencyView,
    pub required_confirmations: u64,
    pub explorer_url: &'static str,
    pub enabled_for_tenant: bool,
    /// `contract` (keyless smart account) or `eoa`.
    pub account_kind: &'static str,
    /// `live`, `paused` or `coming_soon`.
    pub status: &'static str,
    #[schema(value_type = Option<String>)]
    pub status_note: &'a str,
    pub deposits_enabled: bool,
    pub payouts_enabled: bool,
    pub supports_memo: bool,
    pub assets: Vec<ChainAssetView<'a>>,
}

/// The treasury of one (chain, asset). `surplus` = assets minus liabilities; negative means
/// more is owed to customers than is held.
#[derive(Serialize, ToSchema)]
#[schema(as = TreasuryLine)]
pub struct TreasuryLineView {
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
#[derive(Serialize, ToSchema)]
#[schema(as = Treasury)]
pub struct TreasuryView {
    #[schema(pattern = "^treasury$")]
    pub object: &'static str,
    pub data: Vec<TreasuryLineView>,
}

/// Blocks mined on the simulated chain.
#[derive(Serialize, ToSchema)]
#[schema(as = TestBlocks)]
pub struct TestBlocksView {
    #[schema(pattern = "^test_blocks$")]
    pub object: &'static str,
    pub mined: u64,
    /// Height of each simulated chain after mining.
    #[schema(value_type = Object)]
    pub heights: std::collections::BTreeMap<String, u64>,
}

/// A reorg of a simulated chain (`object: test_reorg`).
#[derive(Serialize, ToSchema)]
#[schema(as = TestReorg)]
pub struct TestReorgView {
    #[schema(pattern = "^test_reorg$")]
    pub object: &'static str,
    pub chain: &'static str,
    pub depth: u64,
    pub drop: bool,
    /// The chain's height after the reorg (unchanged: the replaced blocks are re-mined empty).
    pub height: u64,
}

/// A pending transaction dropped from a simulated chain's mempool (`object: test_dropped_tx`).
#[derive(Serialize, ToSchema)]
#[schema(as = TestDroppedTx)]
pub struct TestDroppedTxView {
    #[schema(pattern = "^test_dropped_tx$")]
    pub object: &'static str,
    pub chain: &'static str,
    #[schema(pattern = "^0x[0-9a-f]{64}$")]
    pub tx_hash: String,
}

/// A simulated transfer (`object: test_transfer`).
#[derive(Serialize, ToSchema)]
#[schema(as = TestTransfer)]
pub struct TestTransferView<'a> {
    #[schema(pattern = "^test_transfer$")]
    pub object: &'static str,
    pub chain: &'a str,
    pub asset: &'a str,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub amount: String,
    pub tx_hash: &'a str,
    pub from_address: &'a str,
    pub to_address: &'a str,
    pub block_number: u64,
    /// `customer` or `invoice` (new values may appear).
    pub owner: &'static str,
    /// The customer's or the invoice's id.
    pub owner_id: Uuid,
    pub confirm: bool,
}

/// A test project's clock (`object: test_clock`).
#[derive(Serialize, ToSchema)]
#[schema(as = TestClock)]
pub struct TestClockView {
    #[schema(pattern = "^test_clock$")]
    pub object: &'static str,
    #[schema(format = DateTime)]
    pub now: String,
}

/// `{deleted: true, id}` of a removed endpoint.
#[derive(Serialize, ToSchema)]
#[schema(as = DeletedEndpoint)]
pub struct DeletedEndpointView {
    pub id: Uuid,
    #[schema(pattern = "^webhook_endpoint$")]
    pub object: &'static str,
    pub deleted: bool,
}

/// The queued `endpoint.test` event and its delivery.
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookTest)]
pub struct WebhookTestView {
    #[schema(pattern = "^webhook_test$")]
    pub object: &'static str,
    #[schema(pattern = "^evt_[0-9A-HJKMNP-TV-Z]{26}$")]
    pub event_id: String,
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    pub delivery_id: String,
}
