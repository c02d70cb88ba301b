//! API keys (SPEC.md section 5): only the peppered hash of a token is stored.

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Row;
use crate::index::{self, IndexTag};
use crate::schema;

/// Key kinds (SPEC.md section 5 rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyKind {
    Checkout,
    Payout,
    Wallet,
}

impl KeyKind {
    pub const ALL: [KeyKind; 3] = [KeyKind::Checkout, KeyKind::Payout, KeyKind::Wallet];
}

str_enum!(KeyKind {
    Checkout => "checkout",
    Payout => "payout",
    Wallet => "wallet",
});

/// An API key. Only the peppered hash of the token is kept (SPEC.md section 5 rule 10).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKey {
    pub id: Uuid,
    pub project_id: Uuid,
    pub kind: KeyKind,
    pub name: String,
    /// HMAC-SHA256(pepper, token), hex (DECISIONS.md section 2).
    pub token_hash: String,
    /// Display handle: prefix + first 8 hex characters of the random part.
    pub key_id: String,
    pub last4: String,
    pub scopes: Vec<String>,
    pub ip_allowlist: Vec<String>,
    pub signing_enabled: bool,
    pub created_by: String,
    pub rotated_from: Option<Uuid>,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
    pub use_count: u64,
    pub created_at: i64,
}

impl ApiKey {
    /// Usable at `now`: neither revoked nor past its expiry.
    pub fn is_enabled(&self, now: i64) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| e > now)
    }
}

impl Row for ApiKey {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::API_KEYS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        vec![index::key(IndexTag::ApiKeys, self.project_id, &[], self.id)]
    }
}
