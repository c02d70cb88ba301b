//! Webhook endpoints and deliveries (SPEC.md sections 2 and 3; DECISIONS.md section 7), with
//! the dispatcher's due index key.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::index::{self, IndexTag};

str_enum! {
    /// Webhook endpoint statuses (SPEC.md section 3, Webhook endpoint).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum EndpointStatus {
        Active => "active",
        Paused => "paused",
        Disabled => "disabled",
    }
}

str_enum! {
    /// `delivery_mode` of an endpoint (DECISIONS.md section 7).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum DeliveryMode {
        Unordered => "unordered",
        /// One delivery in flight per endpoint, in creation (= event sequence) order.
        Ordered => "ordered",
    }
}

/// A signing secret replaced by a rotation, still signing until `valid_until_us`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredSecret {
    /// Sealed, as [`WebhookEndpoint::secret`].
    pub secret: String,
    pub valid_until_us: i64,
}

/// A webhook endpoint (SPEC.md section 2). Its signing secrets are stored sealed under the
/// data key (`sealed:v1:...`, see the binary's `sealing` module; a row written before sealing
/// holds `whsec_...` until the start-up migration seals it); they are never logged and only
/// returned at creation and rotation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookEndpoint {
    pub id: Uuid,
    pub project_id: Uuid,
    pub url: String,
    pub description: Option<String>,
    /// Empty: every event type, including types added later.
    pub event_types: Vec<String>,
    pub status: EndpointStatus,
    pub delivery_mode: DeliveryMode,
    /// Consecutive exhausted deliveries; five disable the endpoint.
    pub consecutive_failures: u32,
    /// `consecutive_failures` or `gone` (DECISIONS.md section 5).
    pub disabled_reason: Option<String>,
    pub disabled_at: Option<i64>,
    /// The sealed form of `whsec_` + 43 base64url characters.
    pub secret: String,
    /// Older secrets still inside their rotation overlap, newest first.
    #[serde(default)]
    pub retired_secrets: Vec<RetiredSecret>,
    pub last_success_at: Option<i64>,
    pub last_failure_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl WebhookEndpoint {
    /// Every secret that signs at `now`, newest first, in their stored (sealed) form.
    pub fn live_sealed_secrets(&self, now: i64) -> impl Iterator<Item = &str> {
        std::iter::once(self.secret.as_str()).chain(
            self.retired_secrets
                .iter()
                .filter(move |r| r.valid_until_us > now)
                .map(|r| r.secret.as_str()),
        )
    }

    /// End of the current rotation overlap, if one is running at `now`.
    pub fn overlap_until(&self, now: i64) -> Option<i64> {
        self.retired_secrets
            .iter()
            .map(|r| r.valid_until_us)
            .filter(|t| *t > now)
            .max()
    }

    /// Whether events of `event_type` go to this endpoint.
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        self.event_types.is_empty() || self.event_types.iter().any(|t| t == event_type)
    }
}

row!(WebhookEndpoint, WEBHOOK_ENDPOINTS, |_, k| {
    k.list(IndexTag::WebhookEndpoints);
});

str_enum! {
    /// Webhook delivery statuses (SPEC.md section 3, Webhook delivery).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum DeliveryStatus {
        /// Not yet attempted.
        Pending => "pending",
        Succeeded => "succeeded",
        /// The last attempt failed and another is scheduled at `next_attempt_at`.
        Failed => "failed",
        /// Every attempt failed (or the receiver answered 410).
        Exhausted => "exhausted",
        /// Recorded while the endpoint was paused or disabled; never sent.
        Skipped => "skipped",
        /// Was open when its endpoint was disabled.
        Canceled => "canceled",
    }
}

impl DeliveryStatus {
    /// Still to be sent (now or at `next_attempt_at`).
    pub fn is_open(self) -> bool {
        matches!(self, DeliveryStatus::Pending | DeliveryStatus::Failed)
    }
    /// May be replayed (SPEC.md section 3).
    pub fn is_replayable(self) -> bool {
        matches!(
            self,
            DeliveryStatus::Failed | DeliveryStatus::Exhausted | DeliveryStatus::Skipped
        )
    }
}

/// One event bound for one endpoint, retried in place (`attempt` climbs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookDelivery {
    /// A ULID (time-ordered) as a UUID; rendered `whd_` + ULID.
    pub id: Uuid,
    pub project_id: Uuid,
    pub endpoint_id: Uuid,
    pub event_id: String,
    pub event_sequence: u64,
    pub event_type: String,
    pub endpoint_url: String,
    pub status: DeliveryStatus,
    /// Attempts made so far.
    pub attempt: u32,
    pub max_attempts: u32,
    /// When the next attempt is due (open deliveries only).
    pub next_attempt_at: Option<i64>,
    pub response_status: Option<u16>,
    pub resolved_ip: Option<String>,
    pub duration_ms: Option<u64>,
    pub error_detail: Option<String>,
    /// The start of the receiver's answer, truncated.
    pub response_body: Option<String>,
    pub replay_of: Option<Uuid>,
    pub delivered_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl WebhookDelivery {
    /// Key of the dispatcher's due index for an open delivery.
    pub fn due_key(at_us: i64, id: Uuid) -> Vec<u8> {
        index::key(
            IndexTag::WebhookDeliveriesDue,
            Uuid::nil(),
            &[&(at_us.max(0) as u64).to_be_bytes()],
            id,
        )
    }

    /// (next_attempt_at, id) of a due-index key.
    pub fn parse_due_key(key: &[u8]) -> Option<(i64, Uuid)> {
        // tag (1) ‖ nil project (16) ‖ len (2) ‖ at (8) ‖ id (16)
        if key.len() != 43 {
            return None;
        }
        let at = u64::from_be_bytes(key[19..27].try_into().ok()?);
        Some((at as i64, index::id_of(key)))
    }
}

row!(WebhookDelivery, WEBHOOK_DELIVERIES, |d, k| {
    let status = d.status.as_str().as_bytes();
    let ep = d.endpoint_id.as_bytes();
    k.list(IndexTag::WebhookDeliveries)
        .by(IndexTag::WebhookDeliveriesByEndpoint, ep)
        .by(
            IndexTag::WebhookDeliveriesByEvent,
            d.event_sequence.to_be_bytes(),
        )
        .by(IndexTag::WebhookDeliveriesByStatus, status)
        .by_all(IndexTag::WebhookDeliveriesByEndpointStatus, &[ep, status]);
    if let (true, Some(at)) = (d.status.is_open(), d.next_attempt_at) {
        k.push(WebhookDelivery::due_key(at, d.id));
    }
});
