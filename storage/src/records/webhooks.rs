//! Webhook endpoints and deliveries (SPEC.md sections 2 and 3; DECISIONS.md section 7), with
//! the dispatcher's due index key.

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::Row;
use crate::index::{self, IndexTag};
use crate::schema;

/// Webhook endpoint statuses (SPEC.md section 3, Webhook endpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointStatus {
    Active,
    Paused,
    Disabled,
}

impl EndpointStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointStatus::Active => "active",
            EndpointStatus::Paused => "paused",
            EndpointStatus::Disabled => "disabled",
        }
    }
}

/// `delivery_mode` of an endpoint (DECISIONS.md section 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    Unordered,
    /// One delivery in flight per endpoint, in creation (= event sequence) order.
    Ordered,
}

str_enum!(DeliveryMode {
    Unordered => "unordered",
    Ordered => "ordered",
});

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

impl Row for WebhookEndpoint {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::WEBHOOK_ENDPOINTS;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        vec![index::key(
            IndexTag::WebhookEndpoints,
            self.project_id,
            &[],
            self.id,
        )]
    }
}

/// Webhook delivery statuses (SPEC.md section 3, Webhook delivery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not yet attempted.
    Pending,
    Succeeded,
    /// The last attempt failed and another is scheduled at `next_attempt_at`.
    Failed,
    /// Every attempt failed (or the receiver answered 410).
    Exhausted,
    /// Recorded while the endpoint was paused or disabled; never sent.
    Skipped,
    /// Was open when its endpoint was disabled.
    Canceled,
}

str_enum!(DeliveryStatus {
    Pending => "pending",
    Succeeded => "succeeded",
    Failed => "failed",
    Exhausted => "exhausted",
    Skipped => "skipped",
    Canceled => "canceled",
});

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 6] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Succeeded,
        DeliveryStatus::Failed,
        DeliveryStatus::Exhausted,
        DeliveryStatus::Skipped,
        DeliveryStatus::Canceled,
    ];
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

impl Row for WebhookDelivery {
    const TABLE: TableDefinition<'static, u128, &'static [u8]> = schema::WEBHOOK_DELIVERIES;
    fn id(&self) -> Uuid {
        self.id
    }
    fn project_id(&self) -> Uuid {
        self.project_id
    }
    fn index_keys(&self) -> Vec<Vec<u8>> {
        let p = self.project_id;
        let status = self.status.as_str().as_bytes();
        let ep = self.endpoint_id.as_bytes();
        let mut k = vec![
            index::key(IndexTag::WebhookDeliveries, p, &[], self.id),
            index::key(IndexTag::WebhookDeliveriesByEndpoint, p, &[ep], self.id),
            index::key(
                IndexTag::WebhookDeliveriesByEvent,
                p,
                &[&self.event_sequence.to_be_bytes()],
                self.id,
            ),
            index::key(IndexTag::WebhookDeliveriesByStatus, p, &[status], self.id),
            index::key(
                IndexTag::WebhookDeliveriesByEndpointStatus,
                p,
                &[ep, status],
                self.id,
            ),
        ];
        if let (true, Some(at)) = (self.status.is_open(), self.next_attempt_at) {
            k.push(Self::due_key(at, self.id));
        }
        k
    }
}
