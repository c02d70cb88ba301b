//! Sweeps and their statuses (DECISIONS.md section 5).

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Row;
use crate::index::{self, IndexTag};
use crate::schema;

/// Sweep statuses (DECISIONS.md section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepStatus {
    Open,
    Submitted,
    Confirmed,
    Failed,
    Skipped,
}

str_enum!(SweepStatus {
    Open => "open",
    Submitted => "submitted",
    Confirmed => "confirmed",
    Failed => "failed",
    Skipped => "skipped",
});

coded_serde!(SweepStatus {
    Open = 0,
    Submitted = 1,
    Confirmed = 2,
    Failed = 3,
    Skipped = 4,
});

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
    #[serde(
        serialize_with = "crate::codec::hex_text_opt",
        deserialize_with = "crate::codec::read_hex_text_opt",
        default
    )]
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

impl Row for Sweep {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::SWEEPS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        let mut k = vec![
            index::key(IndexTag::Sweeps, p, &[], self.id),
            index::sweep_by_wallet_key(p, self.customer_id, self.wallet_id, self.id),
            index::key(
                IndexTag::SweepsByStatus,
                p,
                &[self.status.as_str().as_bytes()],
                self.id,
            ),
        ];
        if matches!(self.status, SweepStatus::Open | SweepStatus::Submitted) {
            k.push(index::key(IndexTag::SweepsWork, Uuid::nil(), &[], self.id));
        }
        k
    }
}
