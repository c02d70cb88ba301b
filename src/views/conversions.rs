//! The shapes of conversion rules, conversions, batches and quotes (SPEC.md section 2,
//! Conversion rule, Conversion, Conversion batch, Conversion quote). Their fields are
//! declared in the order the OpenAPI document lists them; they reach the wire through a
//! `Value` or [`Sorted`](super::Sorted), so the keys are in byte order like every other
//! answer.

use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

/// A coin a rule can convert into.
#[derive(Serialize, ToSchema)]
#[schema(as = ConversionTarget)]
pub struct ConversionTargetView {
    pub symbol: String,
    pub stable: bool,
    pub is_native: bool,
    /// Token contract; empty for the native coin.
    pub contract: String,
}

/// A conversion rule (`object: conversion_rule`), one per chain the project lists.
#[derive(Serialize, ToSchema)]
#[schema(as = ConversionRule)]
pub struct ConversionRuleView {
    #[schema(pattern = "^conversion_rule$")]
    pub object: &'static str,
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
    pub targets: Vec<ConversionTargetView>,
    /// Null until the rule is first set.
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
}

/// A conversion quote (`object: conversion_quote`); read-only, not held.
#[derive(Serialize, ToSchema)]
#[schema(as = ConversionQuote)]
pub struct ConversionQuoteView {
    #[schema(pattern = "^conversion_quote$")]
    pub object: &'static str,
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
#[derive(Serialize, ToSchema)]
#[schema(as = Conversion)]
pub struct ConversionView {
    pub id: Uuid,
    #[schema(pattern = "^conversion$")]
    pub object: &'static str,
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
#[derive(Serialize, ToSchema)]
#[schema(as = ConversionBatch)]
pub struct ConversionBatchView {
    pub id: Uuid,
    #[schema(pattern = "^conversion_batch$")]
    pub object: &'static str,
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
#[derive(Serialize, ToSchema)]
#[schema(as = ConversionRequestAnswer)]
pub struct ConversionRequestView {
    #[schema(pattern = "^conversion_request$")]
    pub object: &'static str,
    pub rows: Vec<ConversionView>,
    pub batch: Option<ConversionBatchView>,
    /// Why no batch was planned at once; null when it was.
    pub pending_reason: Option<String>,
}
