//! Deposits and their statuses (SPEC.md section 3, Deposit).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::{self, IndexTag};

str_enum! {
    /// Deposit statuses (SPEC.md section 3, Deposit).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum DepositStatus {
        Detected => "detected" = 0,
        Confirmed => "confirmed" = 1,
        Failed => "failed" = 2,
        Orphaned => "orphaned" = 3,
    }
}

str_enum! {
    /// Why the appliance fails a deposit (its `failure_reason`, SPEC.md section 3, Deposit).
    /// The row keeps the reason as text, so a reason another build wrote still reads and is
    /// shown as it is ([`Deposit::failure`] is `None` for it).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum DepositFailure {
        /// Its block left the canonical chain before the deposit was final.
        Reorg => "reorg",
        /// Failed through the test-mode endpoint.
        SimulatedFailure => "simulated_failure",
        /// Crediting it would overflow the address's holding or an account.
        AmountTooLarge => "amount_too_large",
        /// Its coin is archived by the operator: never credited.
        AssetArchived => "asset_archived",
    }
}

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
    #[serde(with = "crate::codec::hex_field")]
    pub tx_hash: String,
    pub log_index: u32,
    #[serde(with = "crate::codec::hex_field")]
    pub from_address: String,
    #[serde(with = "crate::codec::hex_field")]
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

// The parent is the invoice a deposit pays (its checkout document lists it).
row!(Deposit, DEPOSITS, parent = invoice_id, |d, k| {
    let pending = d.status == DepositStatus::Detected;
    if d.funding {
        if pending {
            k.global(IndexTag::DepositsPending);
        }
        if d.awaiting_price && d.status == DepositStatus::Confirmed {
            k.global(IndexTag::FundingAwaitingPrice);
        }
        return;
    }
    if let Some(inv) = d.invoice_id {
        k.by(IndexTag::DepositsByInvoice, inv);
    } else {
        // No entry by wallet (schema 6): a customer has one wallet per chain, so its
        // deposits to a wallet are found under the customer (`GET /v1/deposits?wallet_id=`).
        k.list(IndexTag::Deposits)
            .push(index::deposit_by_customer_key(
                d.project_id,
                d.customer_id,
                d.id,
            ))
            .by(IndexTag::DepositsByChain, &d.chain)
            .by(IndexTag::DepositsByStatus, d.status.as_str());
    }
    if pending {
        // Global work queue of the confirmation clock (project nil: all projects).
        k.global(IndexTag::DepositsPending);
    }
});
