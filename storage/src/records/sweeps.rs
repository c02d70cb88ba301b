//! Sweeps and their statuses (DECISIONS.md section 5).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::{self, IndexTag};

str_enum! {
    /// Sweep statuses (DECISIONS.md section 5).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SweepStatus {
        Open => "open" = 0,
        Submitted => "submitted" = 1,
        Confirmed => "confirmed" = 2,
        Failed => "failed" = 3,
        Skipped => "skipped" = 4,
    }
}

/// A transfer of a wallet's funds to the treasury (SPEC.md section 2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sweep {
    pub id: Uuid,
    pub project_id: Uuid,
    pub wallet_id: Uuid,
    pub chain: String,
    pub asset: String,
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount: u128,
    pub status: SweepStatus,
    pub skip_reason: Option<String>,
    #[serde(with = "crate::codec::hex_opt_field", default)]
    pub tx_hash: Option<String>,
    /// Block height when the sweep was opened.
    #[serde(default)]
    pub open_block: Option<u64>,
    pub submitted_block: Option<u64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// The wallet's customer (nil for an invoice's or the funding address), which places
    /// the sweep's index entry under its customer beside the customer's deposits
    /// ([`index::sweep_by_wallet_key`]; schema 9). Rows written before it read as nil and
    /// are rewritten with it when a store of schema 8 or older is opened. Last, with a
    /// default: a positional field appended (`codec`).
    #[serde(default)]
    pub customer_id: Uuid,
}

row!(Sweep, SWEEPS, |s, k| {
    k.list(IndexTag::Sweeps)
        .push(index::sweep_by_wallet_key(
            s.project_id,
            s.customer_id,
            s.wallet_id,
            s.id,
        ))
        .by(IndexTag::SweepsByStatus, s.status.as_str());
    if matches!(s.status, SweepStatus::Open | SweepStatus::Submitted) {
        k.global(IndexTag::SweepsWork);
    }
});
