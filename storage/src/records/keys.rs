//! API keys (SPEC.md section 5): only the peppered hash of a token is stored.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::IndexTag;

str_enum! {
    /// Key kinds (SPEC.md section 5 rule 5).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum KeyKind {
        Checkout => "checkout",
        Payout => "payout",
        Wallet => "wallet",
    }
}

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

row!(ApiKey, API_KEYS, |_, k| {
    k.list(IndexTag::ApiKeys);
});
