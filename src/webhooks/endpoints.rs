//! Rules of webhook endpoints and deliveries (SPEC.md sections 3 and 4, Webhooks). Each
//! function runs inside one store write transaction and checks before it writes. URL checks
//! need name lookups and happen before the transaction, in the handler.

use axum::http::StatusCode;
use uuid::Uuid;
use zeroize::Zeroizing;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    DeliveryMode, DeliveryStatus, EndpointStatus, Event, Mode, Project, RetiredSecret,
    WebhookDelivery, WebhookEndpoint,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::error::ApiError;
use crate::sealing::DataKey;
use crate::webhooks::outbox::{self, EventRef};
use crate::webhooks::{endpoint_json, new_secret, EVENT_CATALOG, MAX_ENDPOINTS};

/// Longest rotation overlap, hours (SPEC.md section 8).
pub const MAX_OVERLAP_HOURS: u64 = 168;
/// Default rotation overlap, hours.
pub const DEFAULT_OVERLAP_HOURS: u64 = 24;
/// Older secrets kept signing at most (rotations within one overlap window).
const MAX_RETIRED: usize = 3;
/// Most deliveries replayed by one bulk call (SPEC.md section 8).
pub const BULK_REPLAY_MAX: usize = 100;
/// Deliveries removed per transaction when an endpoint is deleted.
pub const PURGE_CHUNK: usize = 2_000;

const HOUR_US: i64 = 3_600_000_000;

/// Checks a list of event types against the catalog; removes duplicates, keeps order.
pub fn parse_event_types(types: Vec<String>) -> Result<Vec<String>, ApiError> {
    let mut out: Vec<String> = Vec::with_capacity(types.len());
    for t in types {
        if !EVENT_CATALOG.contains(&t.as_str()) {
            return Err(ApiError::invalid(
                "event_types",
                format!("Unknown event type {t:?}; GET /v1/webhooks lists event_catalog."),
            ));
        }
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(out)
}

/// An endpoint's fields at creation, already validated (the URL passed the guard).
pub struct NewEndpoint {
    pub url: String,
    pub description: Option<String>,
    pub event_types: Vec<String>,
    pub delivery_mode: DeliveryMode,
}

fn limit_reached() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "endpoint_limit_reached",
        format!("At most {MAX_ENDPOINTS} webhook endpoints per project; delete one first."),
    )
}

/// Creates an active endpoint with a new secret, stored sealed under `key` (409
/// `endpoint_limit_reached` past 16). Returns the endpoint and its secret in clear, for the
/// creation answer only.
pub fn create(
    ctx: &mut WriteCtx<'_>,
    project: Uuid,
    key: &DataKey,
    req: NewEndpoint,
) -> Result<(WebhookEndpoint, Zeroizing<String>), ApiError> {
    let prefix = index::prefix(IndexTag::WebhookEndpoints, project, &[]);
    if ctx.count_prefix(&prefix, MAX_ENDPOINTS)? >= MAX_ENDPOINTS {
        return Err(limit_reached());
    }
    let now = ctx.now_us();
    let id = Uuid::now_v7();
    let secret = Zeroizing::new(new_secret());
    let ep = WebhookEndpoint {
        id,
        project_id: project,
        url: req.url,
        description: req.description,
        event_types: req.event_types,
        status: EndpointStatus::Active,
        delivery_mode: req.delivery_mode,
        consecutive_failures: 0,
        disabled_reason: None,
        disabled_at: None,
        secret: key.seal_webhook_secret(id, &secret),
        retired_secrets: Vec::new(),
        last_success_at: None,
        last_failure_at: None,
        created_at: now,
        updated_at: now,
    };
    ctx.put(&ep)?;
    Ok((ep, secret))
}

/// Changes to an endpoint; `None` leaves a field as it is.
#[derive(Default)]
pub struct EndpointPatch {
    pub url: Option<String>,
    pub description: Option<Option<String>>,
    pub event_types: Option<Vec<String>>,
    pub delivery_mode: Option<DeliveryMode>,
    /// `Active` or `Paused` only.
    pub status: Option<EndpointStatus>,
}

/// Applies a patch (SPEC.md section 3, Webhook endpoint): `paused` only from `active`;
/// `active` from `paused` resumes, from `disabled` re-enables and resets the strike count.
/// Returns the endpoint and whether it went back to `active`.
pub fn patch(
    ctx: &mut WriteCtx<'_>,
    project: Uuid,
    id: Uuid,
    req: EndpointPatch,
) -> Result<(WebhookEndpoint, bool), ApiError> {
    let mut ep = ctx
        .get_in::<WebhookEndpoint>(project, id)?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    let mut resumed = false;
    match req.status {
        Some(EndpointStatus::Paused) => match ep.status {
            EndpointStatus::Active | EndpointStatus::Paused => ep.status = EndpointStatus::Paused,
            EndpointStatus::Disabled => {
                return Err(ApiError::invalid_state(
                    "A disabled endpoint cannot be paused; set status active to re-enable it.",
                ))
            }
        },
        Some(EndpointStatus::Active) => {
            resumed = ep.status != EndpointStatus::Active;
            if ep.status == EndpointStatus::Disabled {
                ep.consecutive_failures = 0;
                ep.disabled_reason = None;
                ep.disabled_at = None;
            }
            ep.status = EndpointStatus::Active;
        }
        Some(EndpointStatus::Disabled) => {
            return Err(ApiError::invalid(
                "status",
                "status must be active or paused.",
            ))
        }
        None => {}
    }
    if let Some(u) = req.url {
        ep.url = u;
    }
    if let Some(d) = req.description {
        ep.description = d;
    }
    if let Some(t) = req.event_types {
        ep.event_types = t;
    }
    if let Some(m) = req.delivery_mode {
        ep.delivery_mode = m;
    }
    ep.updated_at = ctx.now_us();
    ctx.put(&ep)?;
    Ok((ep, resumed))
}

/// Gives the endpoint a new secret, stored sealed under `key`. The old one keeps signing for
/// `overlap_hours` (0: stops at once, with every older secret — the answer to a leak).
/// Returns the endpoint and the new secret in clear, for the rotation answer only.
pub fn rotate(
    ctx: &mut WriteCtx<'_>,
    project: Uuid,
    key: &DataKey,
    id: Uuid,
    overlap_hours: u64,
) -> Result<(WebhookEndpoint, Zeroizing<String>), ApiError> {
    let mut ep = ctx
        .get_in::<WebhookEndpoint>(project, id)?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    let now = ctx.now_us();
    let secret = Zeroizing::new(new_secret());
    // Older rows may still hold secrets in clear: never carry one forward unsealed.
    key.seal_endpoint_in_place(&mut ep);
    let old = std::mem::replace(&mut ep.secret, key.seal_webhook_secret(ep.id, &secret));
    if overlap_hours == 0 {
        ep.retired_secrets.clear();
    } else {
        ep.retired_secrets.retain(|r| r.valid_until_us > now);
        ep.retired_secrets.insert(
            0,
            RetiredSecret {
                secret: old,
                valid_until_us: now + overlap_hours as i64 * HOUR_US,
            },
        );
        ep.retired_secrets.truncate(MAX_RETIRED);
    }
    ep.updated_at = now;
    ctx.put(&ep)?;
    Ok((ep, secret))
}

/// Writes an `endpoint.test` event for one endpoint and its single delivery (the event goes to
/// no other endpoint). A paused or disabled endpoint records it `skipped`, as any event.
pub fn send_test(
    ctx: &mut WriteCtx<'_>,
    project: &Project,
    id: Uuid,
) -> Result<(Event, WebhookDelivery), ApiError> {
    let ep = ctx
        .get_in::<WebhookEndpoint>(project.id, id)?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    let now = ctx.now_us();
    let ev = ctx.append_event(
        project.id,
        project.mode == Mode::Live,
        "endpoint.test",
        &ep.id.to_string(),
        endpoint_json(&ep, now),
    )?;
    let d = outbox::new_delivery(now, &ep, &EventRef::from(&ev), None);
    ctx.put(&d)?;
    Ok((ev, d))
}

fn endpoint_not_active(ep: &WebhookEndpoint) -> ApiError {
    ApiError::invalid_state(format!(
        "The endpoint is {}; set its status to active before replaying.",
        ep.status.as_str()
    ))
}

/// A new delivery of the same event to the same endpoint, `replay_of` the original. Only
/// `failed`, `exhausted` and `skipped` deliveries replay (409 `invalid_state`), and only to an
/// active endpoint.
pub fn replay(
    ctx: &mut WriteCtx<'_>,
    project: Uuid,
    id: Uuid,
) -> Result<WebhookDelivery, ApiError> {
    let orig = ctx
        .get_in::<WebhookDelivery>(project, id)?
        .ok_or_else(|| ApiError::not_found("webhook delivery"))?;
    if !orig.status.is_replayable() {
        return Err(ApiError::invalid_state(format!(
            "A {} delivery cannot be replayed; only failed, exhausted and skipped ones.",
            orig.status.as_str()
        )));
    }
    let ep = ctx
        .get_in::<WebhookEndpoint>(project, orig.endpoint_id)?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))?;
    if ep.status != EndpointStatus::Active {
        return Err(endpoint_not_active(&ep));
    }
    let d = replay_of(ctx.now_us(), &ep, &orig);
    ctx.put(&d)?;
    Ok(d)
}

fn replay_of(now: i64, ep: &WebhookEndpoint, orig: &WebhookDelivery) -> WebhookDelivery {
    let ev = EventRef {
        project_id: orig.project_id,
        id: &orig.event_id,
        sequence: orig.event_sequence,
        event_type: &orig.event_type,
    };
    outbox::new_delivery(now, ep, &ev, Some(orig.id))
}

/// Which deliveries a bulk replay re-sends.
pub struct BulkReplay {
    pub endpoint_id: Uuid,
    pub statuses: Vec<DeliveryStatus>,
    /// Only deliveries created at or after this time (Unix µs).
    pub since_us: Option<i64>,
    /// Continue after this original (the previous call's `next_cursor`).
    pub after: Option<Uuid>,
}

/// Replays up to [`BULK_REPLAY_MAX`] matching deliveries of one endpoint, oldest first.
/// Returns the new deliveries, whether more originals match, and the last original taken.
pub fn bulk_replay(
    ctx: &mut WriteCtx<'_>,
    project: Uuid,
    req: BulkReplay,
) -> Result<(Vec<WebhookDelivery>, bool, Option<Uuid>), ApiError> {
    let ep = ctx
        .get_in::<WebhookEndpoint>(project, req.endpoint_id)?
        .ok_or_else(|| ApiError::not_found("webhook endpoint").param("endpoint_id"))?;
    if ep.status != EndpointStatus::Active {
        return Err(endpoint_not_active(&ep));
    }
    // Delivery ids are ULIDs: the top 48 bits are the creation time in milliseconds.
    let since_id = req
        .since_us
        .map(|us| Uuid::from_u128(((us.max(0) / 1000) as u128) << 80));
    let mut ids: Vec<Uuid> = Vec::new();
    for s in &req.statuses {
        let prefix = index::prefix(
            IndexTag::WebhookDeliveriesByEndpointStatus,
            project,
            &[ep.id.as_bytes(), s.as_str().as_bytes()],
        );
        let mut from = prefix.clone();
        match (req.after, since_id) {
            (Some(a), Some(s)) if s > a => from.extend_from_slice(s.as_bytes()),
            (Some(a), _) => {
                // Strictly after `a`.
                from.extend_from_slice(a.as_bytes());
                from.push(0);
            }
            (None, Some(s)) => from.extend_from_slice(s.as_bytes()),
            (None, None) => {}
        }
        let end = index::prefix_end(&prefix);
        for k in ctx.index_range(&from, &end, BULK_REPLAY_MAX + 1, false)? {
            ids.push(index::id_of(&k));
        }
    }
    ids.sort();
    ids.dedup();
    let has_more = ids.len() > BULK_REPLAY_MAX;
    ids.truncate(BULK_REPLAY_MAX);
    let mut originals = Vec::with_capacity(ids.len());
    for id in &ids {
        if let Some(d) = ctx.get::<WebhookDelivery>(*id)? {
            originals.push(d);
        }
    }
    let now = ctx.now_us();
    let mut out = Vec::with_capacity(originals.len());
    for orig in &originals {
        let d = replay_of(now, &ep, orig);
        ctx.put(&d)?;
        out.push(d);
    }
    Ok((out, has_more, ids.last().copied()))
}

fn purge_marker(project: Uuid, endpoint: Uuid) -> Vec<u8> {
    index::key(
        IndexTag::WebhookPurge,
        Uuid::nil(),
        &[project.as_bytes()],
        endpoint,
    )
}

/// Deletes an endpoint and the first chunk of its deliveries (events stay). When more remain,
/// a purge marker records the work and [`purge_chunk`] finishes it. Returns whether more
/// remain.
pub fn delete(ctx: &mut WriteCtx<'_>, project: Uuid, id: Uuid) -> Result<bool, ApiError> {
    if ctx.get_in::<WebhookEndpoint>(project, id)?.is_none() {
        return Err(ApiError::not_found("webhook endpoint"));
    }
    ctx.delete::<WebhookEndpoint>(id)?;
    let more = purge_some(ctx, project, id)?;
    if more {
        ctx.index_insert(&purge_marker(project, id))?;
    }
    Ok(more)
}

fn purge_some(ctx: &mut WriteCtx<'_>, project: Uuid, endpoint: Uuid) -> Result<bool, StoreError> {
    let prefix = index::prefix(
        IndexTag::WebhookDeliveriesByEndpoint,
        project,
        &[endpoint.as_bytes()],
    );
    let end = index::prefix_end(&prefix);
    let keys = ctx.index_range(&prefix, &end, PURGE_CHUNK + 1, false)?;
    for k in keys.iter().take(PURGE_CHUNK) {
        ctx.delete::<WebhookDelivery>(index::id_of(k))?;
    }
    Ok(keys.len() > PURGE_CHUNK)
}

/// Removes the next chunk of a deleted endpoint's deliveries; clears the marker when done.
/// Returns whether more remain.
pub fn purge_chunk(
    ctx: &mut WriteCtx<'_>,
    project: Uuid,
    endpoint: Uuid,
) -> Result<bool, StoreError> {
    let more = purge_some(ctx, project, endpoint)?;
    if !more {
        ctx.index_remove(&purge_marker(project, endpoint))?;
    }
    Ok(more)
}

/// Deleted endpoints whose deliveries are still being removed: (project, endpoint).
pub fn pending_purges(r: &impl ReadOps) -> Result<Vec<(Uuid, Uuid)>, StoreError> {
    let prefix = index::prefix(IndexTag::WebhookPurge, Uuid::nil(), &[]);
    let end = index::prefix_end(&prefix);
    let mut out = Vec::new();
    for k in r.index_range(&prefix, &end, 1_000, false)? {
        // tag (1) ‖ nil (16) ‖ len (2) ‖ project (16) ‖ endpoint (16)
        if k.len() == 51 {
            let project = Uuid::from_slice(&k[19..35]).unwrap_or_default();
            out.push((project, index::id_of(&k)));
        }
    }
    Ok(out)
}
