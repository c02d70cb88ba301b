//! The shapes of events, webhook endpoints and webhook deliveries (SPEC.md section 2). Each
//! view's fields are in byte order of their names, as `serde_json` sorts a `Value`'s keys.

use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;
use uuid::Uuid;

use appliance_storage::records::{Event, WebhookDelivery, WebhookEndpoint};

use super::{customer, deposit, payout, to_value, wallet, OptTs, Ts, API_VERSION};
use crate::registry::Registry;

/// An event (`object: event`); `data` is the resource as its REST read returns it.
#[derive(Serialize, ToSchema)]
#[schema(as = Event)]
pub struct EventView<'a> {
    /// `2026-08-01`.
    api_version: &'static str,
    #[schema(value_type = String, format = DateTime)]
    created: Ts,
    #[schema(value_type = Object)]
    data: Value,
    #[schema(pattern = "^evt_[0-9A-HJKMNP-TV-Z]{26}$")]
    id: &'a str,
    livemode: bool,
    #[schema(pattern = "^event$")]
    object: &'static str,
    #[schema(value_type = Option<String>)]
    resource_id: &'a str,
    /// Monotonic per tenant; gaps are normal.
    sequence: u64,
    tenant: Uuid,
    /// Event type, e.g. `deposit.confirmed`; new types can appear.
    #[serde(rename = "type")]
    kind: &'a str,
}

/// An event's `data`: the resource as its REST read returned it at the event. An event in
/// compact form stores only its resource's changing fields (`records::Event::deposit`,
/// `Event::state`); the store's reader hands it the resource's row with them applied
/// (`Event::row`), rendered here as the resource's `GET` renders it. When that row could not
/// be read (`appliance verify` reports it), the fields the event holds.
pub fn event_data(reg: &Registry, e: &Event) -> Value {
    use appliance_storage::records::{ResourceRow, ResourceState};
    match (&e.row, &e.deposit, &e.state) {
        (Some(ResourceRow::Deposit(d)), _, _) => deposit(reg, d),
        (Some(ResourceRow::Payout(p)), _, _) => payout(reg, p),
        (Some(ResourceRow::Wallet(w)), _, _) => wallet(w),
        (Some(ResourceRow::Customer(c)), _, _) => customer(c),
        (None, None, Some(ResourceState::CustomerAt(c))) => customer(c),
        (None, None, Some(ResourceState::Customer)) => json!({
            "id": e.resource_id,
            "object": "customer",
        }),
        (None, Some(st), _) => json!({
            "id": e.resource_id,
            "object": "deposit",
            "status": st.status.as_str(),
            "confirmations": st.confirmations,
            "failure_reason": st.failure_reason,
            "ledger_tx_id": st.ledger_tx_id,
        }),
        (None, None, Some(ResourceState::Payout(st))) => json!({
            "id": e.resource_id,
            "object": "payout",
            "status": st.status.as_str(),
            "tx_hash": st.tx_hash,
            "failure_reason": st.failure_reason,
            "updated_at": Ts(st.updated_at),
        }),
        (None, None, Some(ResourceState::Wallet)) => json!({
            "id": e.resource_id,
            "object": "wallet",
        }),
        (None, None, None) => stored_data(reg, e),
    }
}

/// An event's stored `data` as it is read: an invoice's `checkout_url`, stored as its
/// sealed token ([`super::invoice_event_view`]), becomes the URL.
fn stored_data(reg: &Registry, e: &Event) -> Value {
    let mut data = e.data.clone();
    if data.get("object").and_then(Value::as_str) == Some("invoice") {
        let id = data
            .get("id")
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok());
        if let (Some(id), Some(Value::String(stored))) = (id, data.get_mut("checkout_url")) {
            if crate::sealing::is_sealed(stored) {
                *stored = reg.checkout_url(id, stored);
            }
        }
    }
    data
}

/// `object: event` (SPEC.md section 2, Event) as a JSON value.
pub fn event(reg: &Registry, e: &Event) -> Value {
    to_value(&EventView {
        api_version: API_VERSION,
        created: Ts(e.created_at),
        data: event_data(reg, e),
        id: &e.id,
        livemode: e.livemode,
        object: "event",
        resource_id: &e.resource_id,
        sequence: e.sequence,
        tenant: e.project_id,
        kind: &e.event_type,
    })
}

/// `whd_` + ULID of a delivery id (SPEC.md section 2, Webhook delivery).
pub fn delivery_ref(id: Uuid) -> String {
    format!("whd_{}", ulid::Ulid::from(id.as_u128()))
}

/// The delivery id in a `whd_...` reference; `None` when malformed.
pub fn parse_delivery_ref(s: &str) -> Option<Uuid> {
    let u = ulid::Ulid::from_string(s.strip_prefix("whd_")?).ok()?;
    Some(Uuid::from_u128(u.0))
}

// Never carries the signing secrets.
/// A webhook endpoint (`object: webhook_endpoint`).
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookEndpoint)]
pub struct EndpointView<'a> {
    consecutive_failures: u32,
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    /// `unordered` or `ordered`.
    delivery_mode: &'static str,
    description: &'a Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    disabled_at: OptTs,
    /// `consecutive_failures` or `gone` for a disabled endpoint.
    disabled_reason: &'a Option<String>,
    /// Subscribed types; empty means every type, including types added later.
    event_types: &'a [String],
    id: Uuid,
    #[schema(value_type = Option<String>, format = DateTime)]
    last_failure_at: OptTs,
    #[schema(value_type = Option<String>, format = DateTime)]
    last_success_at: OptTs,
    #[schema(pattern = "^webhook_endpoint$")]
    object: &'static str,
    #[schema(value_type = Option<String>, format = DateTime)]
    secret_overlap_until: OptTs,
    /// `active`, `paused` or `disabled` (new values may appear).
    status: &'static str,
    tenant_id: Uuid,
    url: &'a str,
}

/// `object: webhook_endpoint` (SPEC.md section 2), without secrets; `now` decides whether
/// a rotation overlap is running.
pub fn endpoint_view(e: &WebhookEndpoint, now: i64) -> EndpointView<'_> {
    EndpointView {
        consecutive_failures: e.consecutive_failures,
        created_at: Ts(e.created_at),
        delivery_mode: e.delivery_mode.as_str(),
        description: &e.description,
        disabled_at: OptTs(e.disabled_at),
        disabled_reason: &e.disabled_reason,
        event_types: &e.event_types,
        id: e.id,
        last_failure_at: OptTs(e.last_failure_at),
        last_success_at: OptTs(e.last_success_at),
        object: "webhook_endpoint",
        secret_overlap_until: OptTs(e.overlap_until(now)),
        status: e.status.as_str(),
        tenant_id: e.project_id,
        url: &e.url,
    }
}

/// [`endpoint_view`] as a JSON value.
pub fn endpoint_json(e: &WebhookEndpoint, now: i64) -> Value {
    to_value(&endpoint_view(e, now))
}

/// A webhook endpoint with its signing secret, shown once (creation and rotation answers).
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookEndpointWithSecret)]
pub struct EndpointWithSecret<'a> {
    #[serde(flatten)]
    pub endpoint: EndpointView<'a>,
    /// `whsec_` + 43 base64url characters. Null in an idempotent replay.
    #[schema(value_type = Option<String>, pattern = "^whsec_[A-Za-z0-9_-]{43}$")]
    pub secret: &'a str,
    /// Until when the previous secret also signs.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub overlap_until: OptTs,
}

/// Every endpoint of the project (never paginated) and the event catalogue.
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookEndpointList)]
pub struct EndpointList<'a> {
    #[schema(pattern = "^list$")]
    pub object: &'static str,
    pub data: Vec<EndpointView<'a>>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
    /// Every event type.
    pub event_catalog: &'static [&'static str],
}

/// A webhook delivery (`object: webhook_delivery`); the single read adds `response_body`.
#[derive(Serialize, ToSchema)]
#[schema(as = WebhookDelivery)]
pub struct DeliveryView<'a> {
    attempt: u32,
    #[schema(value_type = String, format = DateTime)]
    created_at: Ts,
    #[schema(value_type = Option<String>, format = DateTime)]
    delivered_at: OptTs,
    duration_ms: Option<u64>,
    endpoint_id: Uuid,
    endpoint_url: &'a str,
    error_detail: &'a Option<String>,
    #[schema(pattern = "^evt_[0-9A-HJKMNP-TV-Z]{26}$")]
    event_id: &'a str,
    event_type: &'a str,
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    id: String,
    max_attempts: u32,
    #[schema(value_type = Option<String>, format = DateTime)]
    next_attempt_at: OptTs,
    #[schema(pattern = "^webhook_delivery$")]
    object: &'static str,
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    replay_of: Option<String>,
    resolved_ip: &'a Option<String>,
    /// The receiver's answer (single read only), truncated.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    response_body: Option<&'a Option<String>>,
    response_status: Option<u16>,
    /// `pending`, `succeeded`, `failed`, `exhausted`, `skipped` or `canceled`.
    status: &'static str,
    tenant_id: Uuid,
}

/// `object: webhook_delivery` (SPEC.md section 2) as a JSON value; the single read adds
/// `response_body`.
pub fn delivery_json(d: &WebhookDelivery, with_body: bool) -> Value {
    to_value(&DeliveryView {
        attempt: d.attempt,
        created_at: Ts(d.created_at),
        delivered_at: OptTs(d.delivered_at),
        duration_ms: d.duration_ms,
        endpoint_id: d.endpoint_id,
        endpoint_url: &d.endpoint_url,
        error_detail: &d.error_detail,
        event_id: &d.event_id,
        event_type: &d.event_type,
        id: delivery_ref(d.id),
        max_attempts: d.max_attempts,
        next_attempt_at: OptTs(d.next_attempt_at.filter(|_| d.status.is_open())),
        object: "webhook_delivery",
        replay_of: d.replay_of.map(delivery_ref),
        resolved_ip: &d.resolved_ip,
        response_body: with_body.then_some(&d.response_body),
        response_status: d.response_status,
        status: d.status.as_str(),
        tenant_id: d.project_id,
    })
}
