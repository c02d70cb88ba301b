//! Payouts and their statuses (DECISIONS.md section 5).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::IndexTag;

str_enum! {
    /// Payout statuses (DECISIONS.md section 5).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum PayoutStatus {
        PendingApproval => "pending_approval" = 0,
        Queued => "queued" = 1,
        Signing => "signing" = 2,
        Submitted => "submitted" = 3,
        Confirmed => "confirmed" = 4,
        Failed => "failed" = 5,
        Canceled => "canceled" = 6,
        Rejected => "rejected" = 7,
    }
}

impl PayoutStatus {
    /// In flight: funds are locked and the payout counts against the pending ceiling.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            PayoutStatus::PendingApproval
                | PayoutStatus::Queued
                | PayoutStatus::Signing
                | PayoutStatus::Submitted
        )
    }
}

/// The `reference` of the payout that sends an invoice's refund claim: `refund:<invoice
/// id>` (DECISIONS.md section 12). The one place that builds and reads that text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RefundReference {
    /// The invoice whose overpayment the payout refunds.
    pub invoice_id: Uuid,
}

impl RefundReference {
    const PREFIX: &'static str = "refund:";

    /// The reference of a refund of invoice `invoice_id`.
    pub fn new(invoice_id: Uuid) -> Self {
        RefundReference { invoice_id }
    }

    /// The refund reference `reference` is; `None` for any other text (no prefix, or no
    /// invoice id in its hyphenated lower-case form after it: only [`RefundReference`]'s
    /// own text reads back).
    pub fn parse(reference: &str) -> Option<Self> {
        let id = reference.strip_prefix(Self::PREFIX)?;
        let r = Uuid::try_parse(id).ok().map(Self::new)?;
        (r.invoice_id.hyphenated().to_string() == id).then_some(r)
    }

    /// Whether `reference` starts with the refunds' prefix, whatever follows: such a payout
    /// charges no payout fee (DECISIONS.md section 12).
    pub fn has_prefix(reference: &str) -> bool {
        reference.starts_with(Self::PREFIX)
    }
}

impl std::fmt::Display for RefundReference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", Self::PREFIX, self.invoice_id)
    }
}

/// A withdrawal from a customer balance to an outside address (SPEC.md section 2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Payout {
    pub id: Uuid,
    pub project_id: Uuid,
    /// `None`: drawn from the project's own account (customer nil in the ledger).
    pub customer_id: Option<Uuid>,
    pub chain: String,
    pub asset: String,
    #[serde(serialize_with = "crate::codec::amount")]
    pub amount: u128,
    #[serde(serialize_with = "crate::codec::amount")]
    pub fee_amount: u128,
    #[serde(with = "crate::codec::hex_field")]
    pub to_address: String,
    pub memo: Option<String>,
    pub status: PayoutStatus,
    pub reference: Option<String>,
    #[serde(with = "crate::codec::hex_opt_field", default)]
    pub tx_hash: Option<String>,
    pub failure_reason: Option<String>,
    /// Value in US cents at creation (stablecoins at par); `None` when no price is known.
    pub amount_usd_cents: Option<u64>,
    pub created_by_key: Uuid,
    pub approved_by_key: Option<Uuid>,
    /// Simulated/real block height when the payout entered `queued`.
    #[serde(default)]
    pub queued_block: Option<u64>,
    pub submitted_block: Option<u64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Payout {
    /// The `failure_reason` of a confirmed payout whose one transaction a reorg undid
    /// (`services::payouts::unsettle`).
    pub const REORG_UNDONE: &'static str = "reorg: its transaction was undone and did not pay";

    /// Whether the payout confirmed and was then undone by a reorg: `failed` with a
    /// `failure_reason` of the reorg family ([`Payout::REORG_UNDONE`]). Its payout fee
    /// stays charged.
    pub fn undone_by_reorg(&self) -> bool {
        self.status == PayoutStatus::Failed
            && self
                .failure_reason
                .as_deref()
                .is_some_and(|r| r.starts_with("reorg"))
    }

    /// The refund this payout sends, when its `reference` is a [`RefundReference`].
    pub fn refund(&self) -> Option<RefundReference> {
        self.reference.as_deref().and_then(RefundReference::parse)
    }
}

row!(Payout, PAYOUTS, |p, k| {
    k.list(IndexTag::Payouts)
        .by(IndexTag::PayoutsByChain, &p.chain)
        .by(IndexTag::PayoutsByStatus, p.status.as_str());
    if let Some(c) = p.customer_id {
        k.by(IndexTag::PayoutsByCustomer, c);
    }
    if let Some(r) = &p.reference {
        k.by(IndexTag::PayoutsByReference, r);
    }
    if p.status.is_open() {
        k.list(IndexTag::PayoutsOpen);
    }
    if matches!(
        p.status,
        PayoutStatus::Queued | PayoutStatus::Signing | PayoutStatus::Submitted
    ) {
        k.global(IndexTag::PayoutsWork);
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    /// A refund reference reads back from its own text only.
    #[test]
    fn refund_references_read_back_from_their_own_text() {
        let id = Uuid::now_v7();
        let r = RefundReference::new(id);
        assert_eq!(r.to_string(), format!("refund:{id}"));
        assert_eq!(RefundReference::parse(&r.to_string()), Some(r));
        let upper = format!("refund:{}", id.to_string().to_uppercase());
        for other in [
            "refund:",
            "refund:x",
            upper.as_str(),
            "order 7",
            &id.to_string(),
        ] {
            assert_eq!(RefundReference::parse(other), None, "{other}");
        }
        assert!(RefundReference::has_prefix("refund:x"));
        assert!(!RefundReference::has_prefix("order 7"));
    }
}
