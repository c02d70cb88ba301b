//! Deposits and their statuses (SPEC.md section 3, Deposit).

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Row;
use crate::index::{self, IndexTag};
use crate::schema;

/// Deposit statuses (SPEC.md section 3, Deposit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepositStatus {
    Detected,
    Confirmed,
    Failed,
    Orphaned,
}

str_enum!(DepositStatus {
    Detected => "detected",
    Confirmed => "confirmed",
    Failed => "failed",
    Orphaned => "orphaned",
});

coded_serde!(DepositStatus {
    Detected = 0,
    Confirmed = 1,
    Failed = 2,
    Orphaned = 3,
});

/// Why the appliance fails a deposit (its `failure_reason`, SPEC.md section 3, Deposit).
/// The row keeps the reason as text, so a reason another build wrote still reads and is
/// shown as it is ([`Deposit::failure`] is `None` for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepositFailure {
    /// Its block left the canonical chain before the deposit was final.
    Reorg,
    /// Failed through the test-mode endpoint.
    SimulatedFailure,
    /// Crediting it would overflow the address's holding or an account.
    AmountTooLarge,
    /// Its coin is archived by the operator: never credited.
    AssetArchived,
}

str_enum!(DepositFailure {
    Reorg => "reorg",
    SimulatedFailure => "simulated_failure",
    AmountTooLarge => "amount_too_large",
    AssetArchived => "asset_archived",
});

/// A transfer received at a watched address (SPEC.md section 2): a customer's deposit, or
/// an invoice payment (`invoice_id` set, `customer_id` nil; listed only under the invoice).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deposit {
    pub id: Uuid,
    pub project_id: Uuid,
    pub customer_id: Uuid,
    /// The invoice this payment is for (absent for a customer's deposit).
    #[serde(default)]
    pub invoice_id: Option<Uuid>,
    /// An invoice payment first seen after the invoice expired or was canceled
    /// (DECISIONS.md section 5): credited, counted as late.
    #[serde(default)]
    pub late: bool,
    /// A transfer to the project's billing funding address (DECISIONS.md section 13): the
    /// operator's money, credited to the operational balance, never to a customer or the
    /// project's `available`; listed nowhere under `/v1/deposits`.
    #[serde(default)]
    pub funding: bool,
    /// A confirmed funding transfer of a coin credited at spot whose price was not usable
    /// at confirmation: the billing worker credits it once a price is (index
    /// `FundingAwaitingPrice`).
    #[serde(default)]
    pub awaiting_price: bool,
    pub wallet_id: Uuid,
    pub chain: String,
    pub asset: String,
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount: u128,
    #[serde(
        serialize_with = "crate::codec::hex_text",
        deserialize_with = "crate::codec::read_hex_text"
    )]
    pub tx_hash: String,
    pub log_index: u32,
    #[serde(
        serialize_with = "crate::codec::hex_text",
        deserialize_with = "crate::codec::read_hex_text"
    )]
    pub from_address: String,
    #[serde(
        serialize_with = "crate::codec::hex_text",
        deserialize_with = "crate::codec::read_hex_text"
    )]
    pub to_address: String,
    pub block_number: u64,
    pub block_time: i64,
    pub confirmations: u32,
    pub required_confirmations: u32,
    pub status: DepositStatus,
    pub failure_reason: Option<String>,
    /// Journal entry that credited the customer (set on confirm).
    pub ledger_tx_id: Option<Uuid>,
    /// Journal entry that reversed the credit (set on orphan).
    pub reversal_tx_id: Option<Uuid>,
    /// Manual test deposits (`confirm:false`) are not confirmed by the block clock.
    pub manual: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Deposit {
    /// Why the deposit failed, when its `failure_reason` is one this build writes.
    pub fn failure(&self) -> Option<DepositFailure> {
        self.failure_reason
            .as_deref()
            .and_then(DepositFailure::parse)
    }
}

impl Row for Deposit {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::DEPOSITS;
    fn id(&self) -> Uuid {
        self.id
    }
    /// The invoice it pays (its checkout document lists it).
    fn parent_id(&self) -> Option<Uuid> {
        self.invoice_id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        if self.funding {
            let mut k = Vec::new();
            if self.status == DepositStatus::Detected {
                k.push(index::key(
                    IndexTag::DepositsPending,
                    Uuid::nil(),
                    &[],
                    self.id,
                ));
            }
            if self.awaiting_price && self.status == DepositStatus::Confirmed {
                k.push(index::key(
                    IndexTag::FundingAwaitingPrice,
                    Uuid::nil(),
                    &[],
                    self.id,
                ));
            }
            return k;
        }
        if let Some(inv) = self.invoice_id {
            let mut k = vec![index::key(
                IndexTag::DepositsByInvoice,
                p,
                &[inv.as_bytes()],
                self.id,
            )];
            if self.status == DepositStatus::Detected {
                k.push(index::key(
                    IndexTag::DepositsPending,
                    Uuid::nil(),
                    &[],
                    self.id,
                ));
            }
            return k;
        }
        // No entry by wallet (schema 6): a customer has one wallet per chain, so its
        // deposits to a wallet are found under the customer (`GET /v1/deposits?wallet_id=`).
        let mut k = vec![
            index::key(IndexTag::Deposits, p, &[], self.id),
            index::deposit_by_customer_key(p, self.customer_id, self.id),
            index::key(
                IndexTag::DepositsByChain,
                p,
                &[self.chain.as_bytes()],
                self.id,
            ),
            index::key(
                IndexTag::DepositsByStatus,
                p,
                &[self.status.as_str().as_bytes()],
                self.id,
            ),
        ];
        if self.status == DepositStatus::Detected {
            // Global work queue of the confirmation clock (project nil: all projects).
            k.push(index::key(
                IndexTag::DepositsPending,
                Uuid::nil(),
                &[],
                self.id,
            ));
        }
        k
    }
}
