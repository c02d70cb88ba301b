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

/// The stored first answer to an idempotent request (DECISIONS.md section 2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// SHA-256 of the request body, hex: a different body under the same key is a reuse.
    pub request_hash: String,
    pub status: u16,
    pub body: String,
    pub created_at: i64,
}
