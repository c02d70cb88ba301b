//! The resources' answers (SPEC.md section 2), as `src/views.rs` writes them.

#![allow(dead_code)]

use super::*;

// ---------------------------------------------------------------------------------------
// Resources (SPEC.md section 2)

/// An API key with its token, shown once (creation and roll answers). An idempotent replay
/// answers `token: null`.
#[derive(ToSchema)]
pub struct ApiKeyWithToken {
    #[serde(flatten)]
    pub key: ApiKey,
    /// The full key: prefix + 64 lowercase hex. Null in an idempotent replay.
    #[schema(pattern = "^[0-9a-z]+$")]
    pub token: Option<String>,
    /// Roll answers only: when the rolled key stops working.
    #[schema(format = DateTime)]
    pub old_key_expires_at: Option<String>,
}

/// A page of API keys plus the per-kind limit and default scopes.
#[derive(ToSchema)]
pub struct ApiKeyList {
    #[schema(pattern = "^list$")]
    pub object: String,
    pub data: Vec<ApiKey>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
    /// Enabled keys allowed per kind.
    pub limit_per_kind: u32,
    /// Scopes a new key of each kind gets when `scopes` is omitted.
    #[schema(value_type = Object)]
    pub default_scopes: Value,
}

/// A webhook endpoint with its signing secret, shown once (creation and rotation answers).
#[derive(ToSchema)]
pub struct WebhookEndpointWithSecret {
    #[serde(flatten)]
    pub endpoint: WebhookEndpoint,
    /// `whsec_` + 43 base64url characters. Null in an idempotent replay.
    #[schema(pattern = "^whsec_[A-Za-z0-9_-]{43}$")]
    pub secret: Option<String>,
    /// Until when the previous secret also signs.
    #[schema(format = DateTime)]
    pub overlap_until: Option<String>,
}

/// Every endpoint of the project (never paginated) and the event catalogue.
#[derive(ToSchema)]
pub struct WebhookEndpointList {
    #[schema(pattern = "^list$")]
    pub object: String,
    pub data: Vec<WebhookEndpoint>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
    /// Every event type.
    pub event_catalog: Vec<String>,
}
