//! Conversion schemas (SPEC.md section 2, Conversion rule, Conversion, Conversion batch,
//! Conversion quote).

#![allow(dead_code)]

use super::*;

// ---------------------------------------------------------------------------------------
// Conversions (SPEC.md section 2, Conversion rule, Conversion, Conversion batch, Conversion
// quote)

/// `PUT /v1/conversion/rules/{chain}`.
#[derive(ToSchema)]
pub struct ConversionRuleUpdate {
    pub enabled: bool,
    /// A coin of the chain (400 `invalid_target` otherwise).
    #[schema(min_length = 1)]
    pub target_asset: String,
    /// Coins of the chain never converted (400 `invalid_keep_asset` for another).
    #[schema(max_items = 64)]
    pub keep_assets: Option<Vec<SymbolIn>>,
}

/// `POST /v1/conversions/quote` and `POST /v1/conversions`.
#[derive(ToSchema)]
pub struct ConversionQuoteRequest {
    pub chain: ChainIdIn,
    #[schema(min_length = 1)]
    pub from_asset: String,
    #[schema(min_length = 1)]
    pub to_asset: String,
    /// Atomic units of `from_asset`.
    #[schema(pattern = "^[1-9][0-9]{0,37}$")]
    pub amount: String,
    /// Default 50 (0.5%).
    #[schema(minimum = 0, maximum = 5000)]
    pub slippage_bps: Option<u32>,
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
