//! The event log's rows and stored idempotent answers (SPEC.md section 6; DECISIONS.md
//! section 2). Events are written by [`crate::WriteCtx::append_event`], not through [`super::Row`].

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// An event of the log (SPEC.md section 6). `data` is the resource as its REST read
/// returns it at the time of the event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    /// `evt_` + ULID.
    pub id: String,
    pub project_id: Uuid,
    pub sequence: u64,
    #[serde(rename = "type")]
    pub event_type: String,
    pub resource_id: String,
    pub created_at: i64,
    pub livemode: bool,
    pub data: serde_json::Value,
}

/// Type of the log rows that carry a billing line (DECISIONS.md section 7: events and
/// billing lines share the tenant's `sequence`). The event stream sends them as `billing`
/// frames; `GET /v1/events`, the lookup by id and the webhook outbox never see them (a
/// billing line is no event, so the event list has a gap at its sequence).
pub const BILLING_LINE: &str = "billing.line";

impl Event {
    /// Whether this log row is a billing line rather than an event.
    pub fn is_billing_line(&self) -> bool {
        self.event_type == BILLING_LINE
    }
}

/// The stored first answer to an idempotent request (DECISIONS.md section 2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// SHA-256 of the request body, hex: a different body under the same key is a reuse.
    pub request_hash: String,
    pub status: u16,
    pub body: String,
    pub created_at: i64,
}
