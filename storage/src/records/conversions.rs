//! Conversions: rules, rows and batches (SPEC.md sections 2 and 3, Conversion rule,
//! Conversion, Conversion batch; DECISIONS.md section 14).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::IndexTag;

/// A project's conversion rule of one chain (SPEC.md section 2, Conversion rule); one per
/// (project, chain), found through the unique key `UniqueConversionRule`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConversionRule {
    pub id: Uuid,
    pub project_id: Uuid,
    pub chain: String,
    pub enabled: bool,
    /// Symbol the chain's payments convert into.
    pub target_asset: String,
    /// Symbols that are never converted.
    pub keep_assets: Vec<String>,
    pub updated_at: i64,
}

row!(ConversionRule, CONVERSION_RULES, |_, k| {
    k.list(IndexTag::ConversionRules);
});

str_enum! {
    /// `auto` (an invoice payment) or `manual` (`POST /v1/conversions`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum ConversionKind {
        Auto => "auto",
        Manual => "manual",
    }
}

str_enum! {
    /// Conversion row statuses (SPEC.md section 3, Conversion row).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum ConversionStatus {
        Queued => "queued",
        Converting => "converting",
        Converted => "converted",
        Skipped => "skipped",
        Failed => "failed",
    }
}

/// One conversion row (SPEC.md section 2, Conversion): one per invoice payment, or one per
/// customer balance a manual conversion draws on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Conversion {
    pub id: Uuid,
    pub project_id: Uuid,
    pub kind: ConversionKind,
    /// The invoice payment (`auto`).
    pub payment_id: Option<Uuid>,
    pub receipt_no: Option<String>,
    /// The customer whose balance is drawn on (`manual`); `None`: the project's own funds.
    pub customer_id: Option<Uuid>,
    pub chain: String,
    pub from_asset: String,
    pub to_asset: String,
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount_in: u128,
    /// Executed share of the swap's output; 0 until converted.
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount_out: u128,
    pub status: ConversionStatus,
    pub reason: Option<String>,
    pub batch_id: Option<Uuid>,
    pub tx_hash: Option<String>,
    pub attempts: u32,
    pub created_at: i64,
    pub updated_at: i64,
    pub settled_at: Option<i64>,
}

row!(Conversion, CONVERSIONS, |c, k| {
    k.list(IndexTag::Conversions)
        .by(IndexTag::ConversionsByStatus, c.status.as_str())
        .by(IndexTag::ConversionsByChain, &c.chain)
        .by(IndexTag::ConversionsByKind, c.kind.as_str());
    if c.status == ConversionStatus::Queued {
        k.global(IndexTag::ConversionsQueued);
    }
    if let Some(b) = c.batch_id {
        k.by(IndexTag::ConversionsByBatch, b);
    }
});

str_enum! {
    /// Conversion batch statuses (DECISIONS.md section 5).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum BatchStatus {
        Approving => "approving",
        Swapping => "swapping",
        Settled => "settled",
        Failed => "failed",
    }
}

impl BatchStatus {
    /// Still waiting for a chain step.
    pub fn is_open(self) -> bool {
        matches!(self, BatchStatus::Approving | BatchStatus::Swapping)
    }
}

/// One swap on a DEX for rows of one project (SPEC.md section 2, Conversion batch).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConversionBatch {
    pub id: Uuid,
    pub project_id: Uuid,
    pub chain: String,
    pub from_asset: String,
    pub to_asset: String,
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount_in: u128,
    /// What the swap returned; 0 until settled.
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount_out: u128,
    /// The quote of the current attempt.
    #[serde(serialize_with = "crate::codec::amount")]
    pub expected_out: u128,
    /// The least the current attempt's swap accepts (it reverts below).
    #[serde(serialize_with = "crate::codec::amount")]
    pub min_out: u128,
    pub slippage_bps: u32,
    /// USD value of `amount_in` at planning, cents; `None` without a usable price.
    pub amount_usd_cents: Option<u64>,
    pub fee_cents: u64,
    /// Where the quote came from: the DEX kind (`uniswap_v2`, `uniswap_v3`).
    pub market: String,
    pub status: BatchStatus,
    pub error_code: Option<String>,
    pub approve_tx_hash: Option<String>,
    pub swap_tx_hash: Option<String>,
    /// The conversion rows, in order (the last takes the rounding remainders).
    pub rows: Vec<Uuid>,
    /// Swap attempts made (a reverted swap is retried with a fresh quote up to 3 times).
    pub attempts: u32,
    pub created_at: i64,
    pub updated_at: i64,
    pub settled_at: Option<i64>,
}

row!(ConversionBatch, CONVERSION_BATCHES, |b, k| {
    k.list(IndexTag::ConversionBatches);
    if b.status.is_open() {
        k.global(IndexTag::ConversionBatchesWork);
    }
});
