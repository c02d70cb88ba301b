//! Customers and their wallets (SPEC.md section 2).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::IndexTag;

str_enum! {
    /// A customer's status (SPEC.md section 4, Customers). Stored and sent as its name.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum CustomerStatus {
        Active => "active",
        Disabled => "disabled",
    }
}

/// A customer of a project (SPEC.md section 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Customer {
    pub id: Uuid,
    pub project_id: Uuid,
    pub reference_id: Option<String>,
    pub email: Option<String>,
    pub status: CustomerStatus,
    pub metadata: serde_json::Value,
    pub created_at: i64,
}

row!(Customer, CUSTOMERS, |c, k| {
    k.list(IndexTag::Customers)
        .by(IndexTag::CustomersByStatus, c.status.as_str());
    if let Some(r) = &c.reference_id {
        k.by(IndexTag::CustomersByRef, r);
    }
});

/// A watched address on one chain: a customer's deposit address (SPEC.md section 2), or an
/// invoice's payment address (`invoice_id` set, `customer_id` nil, role `invoice`;
/// DECISIONS.md section 12). See [`Wallet::owner`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Wallet {
    pub id: Uuid,
    pub project_id: Uuid,
    /// The customer credited by transfers here; nil for an invoice address (the project's
    /// own accounts).
    pub customer_id: Uuid,
    /// The invoice this address belongs to (absent for a customer's address).
    #[serde(default)]
    pub invoice_id: Option<Uuid>,
    pub chain: String,
    pub role: String,
    pub status: String,
    #[serde(with = "crate::codec::hex_field")]
    pub address: String,
    pub memo: Option<String>,
    pub created_at: i64,
}

/// Who a watched address belongs to: the one seam that routes a transfer to it (a
/// customer deposit, an invoice payment, a billing funding credit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressOwner {
    /// A customer's deposit address: transfers are the customer's deposits.
    Customer(Uuid),
    /// An invoice's payment address: transfers are the merchant's invoice payments.
    Invoice(Uuid),
    /// The project's (id) billing funding address on the chain (role `funding`): transfers
    /// fund its operational balance and are the operator's money (DECISIONS.md section 13).
    Funding(Uuid),
}

/// `role` of a billing funding address's wallet row.
pub const FUNDING_ROLE: &str = "funding";

impl Wallet {
    /// Who the address belongs to.
    pub fn owner(&self) -> AddressOwner {
        match self.invoice_id {
            Some(i) => AddressOwner::Invoice(i),
            None if self.is_funding() => AddressOwner::Funding(self.project_id),
            None => AddressOwner::Customer(self.customer_id),
        }
    }

    /// The key in `accounts` of the ledger's holding of this wallet in `asset`
    /// ([`crate::ledger::holding_key`]).
    pub fn holding_key(&self, asset: &str) -> Vec<u8> {
        crate::ledger::holding_key(
            self.project_id,
            self.customer_id,
            &self.chain,
            asset,
            self.id,
        )
    }

    /// Whether this is the project's billing funding address (role `funding`, customer nil).
    pub fn is_funding(&self) -> bool {
        self.role == FUNDING_ROLE && self.invoice_id.is_none()
    }

    /// The id the address's CREATE2 salt is derived from with the project id
    /// (DECISIONS.md sections 9 and 12): the customer's, or the invoice's. A funding
    /// address's salt is not of this form (`address::funding_salt`): check
    /// [`Wallet::is_funding`] first.
    pub fn salt_id(&self) -> Uuid {
        self.invoice_id.unwrap_or(self.customer_id)
    }
}

row!(Wallet, WALLETS, |w, k| {
    if w.invoice_id.is_some() || w.is_funding() {
        // An invoice's address is shown on the invoice, a funding address under
        // `GET /v1/billing/funding`: never in the wallet lists.
        return;
    }
    k.list(IndexTag::Wallets)
        .by(IndexTag::WalletsByCustomer, w.customer_id)
        .by(IndexTag::WalletsByChain, &w.chain);
});
