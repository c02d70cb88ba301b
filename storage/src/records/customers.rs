//! Customers and their wallets (SPEC.md section 2).

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Row;
use crate::index::{self, IndexTag};
use crate::schema;

/// A customer of a project (SPEC.md section 2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Customer {
    pub id: Uuid,
    pub project_id: Uuid,
    pub reference_id: Option<String>,
    pub email: Option<String>,
    pub status: String,
    pub metadata: serde_json::Value,
    pub created_at: i64,
}

impl Row for Customer {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::CUSTOMERS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let mut k = vec![
            index::key(IndexTag::Customers, self.project_id, &[], self.id),
            index::key(
                IndexTag::CustomersByStatus,
                self.project_id,
                &[self.status.as_bytes()],
                self.id,
            ),
        ];
        if let Some(r) = &self.reference_id {
            k.push(index::key(
                IndexTag::CustomersByRef,
                self.project_id,
                &[r.as_bytes()],
                self.id,
            ));
        }
        k
    }
}

/// A deposit address of a customer on one chain (SPEC.md section 2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Wallet {
    pub id: Uuid,
    pub project_id: Uuid,
    pub customer_id: Uuid,
    pub chain: String,
    pub role: String,
    pub status: String,
    pub address: String,
    pub memo: Option<String>,
    pub created_at: i64,
}

impl Row for Wallet {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::WALLETS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        vec![
            index::key(IndexTag::Wallets, p, &[], self.id),
            index::key(
                IndexTag::WalletsByCustomer,
                p,
                &[self.customer_id.as_bytes()],
                self.id,
            ),
            index::key(
                IndexTag::WalletsByChain,
                p,
                &[self.chain.as_bytes()],
                self.id,
            ),
        ]
    }
}
