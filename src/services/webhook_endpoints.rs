//! Webhook endpoints (SPEC.md sections 3 and 4, Webhooks; DECISIONS.md section 7): creating,
//! changing, rotating, testing and deleting them, and the endpoint side of every delivery
//! outcome — the strike count, the 5-strike and 410 disable, the strike reset.
//!
//! Each function that takes a [`WriteCtx`] runs inside one store write transaction and checks
//! before it writes. URL checks need name lookups and happen before the transaction, in the
//! handler (`webhooks::guard`). The delivery side of an outcome is in
//! [`super::webhook_deliveries`].

use base64::Engine;
use uuid::Uuid;

use crate::services::types::{ProjectId, WebhookEndpointId};
use zeroize::Zeroizing;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    DeliveryMode, EndpointStatus, RetiredSecret, WebhookDelivery, WebhookEndpoint,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::sealing::DataKey;
use crate::services::error::{fault_from, Fault, Invalid};
use crate::services::set_patched;
use crate::services::EVENT_CATALOG;

/// Most endpoints per project (SPEC.md section 8).
pub const MAX_ENDPOINTS: usize = 16;
/// Consecutive exhausted deliveries that disable an endpoint (SPEC.md section 8).
pub const DISABLE_AFTER_EXHAUSTED: u32 = 5;
/// Longest rotation overlap, hours (SPEC.md section 8).
pub const MAX_OVERLAP_HOURS: u64 = 168;
/// Default rotation overlap, hours.
pub const DEFAULT_OVERLAP_HOURS: u64 = 24;
/// Older secrets kept signing at most (rotations within one overlap window).
const MAX_RETIRED: usize = 3;
/// Deliveries removed per transaction when an endpoint is deleted.
pub const PURGE_CHUNK: usize = 2_000;

const HOUR_US: i64 = 3_600_000_000;

/// Why an endpoint request was refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum WebhookEndpointError {
    /// No such endpoint in the project (404 `not_found`).
    #[error("No such webhook endpoint.")]
    NotFound,
    /// The project has [`MAX_ENDPOINTS`] already (409 `endpoint_limit_reached`).
    #[error("At most {MAX_ENDPOINTS} webhook endpoints per project; delete one first.")]
    LimitReached,
    /// A field breaks a rule: an `event_types` entry is not in [`EVENT_CATALOG`] (400
    /// `invalid_request`, `param: event_types`).
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// `paused` asked of a disabled endpoint (409 `invalid_state`).
    #[error("A disabled endpoint cannot be paused; set status active to re-enable it.")]
    CannotPauseDisabled,
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(WebhookEndpointError);

type Result<T, E = WebhookEndpointError> = std::result::Result<T, E>;

/// A new signing secret: `whsec_` + 43 base64url characters (32 random bytes).
pub fn new_secret() -> String {
    let mut raw = [0u8; 32];
    appliance_storage::sources::fill_random(&mut raw);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    )
}

/// Checks a list of event types against the catalog; removes duplicates, keeps order.
pub fn parse_event_types(types: Vec<String>) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::with_capacity(types.len());
    for t in types {
        if !EVENT_CATALOG.contains(&t.as_str()) {
            return Err(Invalid::new(
                "event_types",
                format!("Unknown event type {t:?}; GET /v1/webhooks lists event_catalog."),
            )
            .into());
        }
        if !out.contains(&t) {
            out.push(t);
        }
    }
    Ok(out)
}

/// The project's endpoints, oldest first.
pub fn list(r: &impl ReadOps, project: ProjectId) -> Result<Vec<WebhookEndpoint>, StoreError> {
    let project = project.uuid();
    let prefix = index::prefix(IndexTag::WebhookEndpoints, project, &[]);
    let mut page = r.list::<WebhookEndpoint>(&prefix, None, usize::MAX, |_| true)?;
    page.items.reverse();
    Ok(page.items)
}

/// One endpoint of the project.
pub fn get(r: &impl ReadOps, project: ProjectId, id: WebhookEndpointId) -> Result<WebhookEndpoint> {
    r.get_in::<WebhookEndpoint>(project.uuid(), id.uuid())?
        .ok_or(WebhookEndpointError::NotFound)
}

/// An endpoint's fields at creation, already validated (the URL passed the guard).
pub struct NewEndpoint {
    pub url: String,
    pub description: Option<String>,
    pub event_types: Vec<String>,
    pub delivery_mode: DeliveryMode,
}

/// Creates an active endpoint with a new secret, stored sealed under `key`
/// ([`WebhookEndpointError::LimitReached`] past [`MAX_ENDPOINTS`]). Returns the endpoint and
/// its secret in clear, for the creation answer only.
pub fn create(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    key: &DataKey,
    req: NewEndpoint,
) -> Result<(WebhookEndpoint, Zeroizing<String>)> {
    let project = project.uuid();
    let prefix = index::prefix(IndexTag::WebhookEndpoints, project, &[]);
    if ctx.count_prefix(&prefix, MAX_ENDPOINTS)? >= MAX_ENDPOINTS {
        return Err(WebhookEndpointError::LimitReached);
    }
    let now = ctx.now_us();
    let id = appliance_storage::sources::new_id();
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

/// The statuses a client may ask for (`disabled` is only ever set by the dispatcher).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestedStatus {
    Active,
    Paused,
}

impl RequestedStatus {
    /// `active` or `paused`; anything else is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(RequestedStatus::Active),
            "paused" => Some(RequestedStatus::Paused),
            _ => None,
        }
    }
}

/// Changes to an endpoint; `None` leaves a field as it is.
#[derive(Default)]
pub struct EndpointPatch {
    pub url: Option<String>,
    pub description: Option<Option<String>>,
    pub event_types: Option<Vec<String>>,
    pub delivery_mode: Option<DeliveryMode>,
    pub status: Option<RequestedStatus>,
}

/// The status rule of a patch (SPEC.md section 3, Webhook endpoint): `paused` only from
/// `active` (or `paused`); `active` from `paused` resumes, from `disabled` re-enables and
/// resets the strike count. Returns whether the endpoint went back to `active`.
pub fn set_status(ep: &mut WebhookEndpoint, to: RequestedStatus) -> Result<bool> {
    match to {
        RequestedStatus::Paused => match ep.status {
            EndpointStatus::Active | EndpointStatus::Paused => {
                ep.status = EndpointStatus::Paused;
                Ok(false)
            }
            EndpointStatus::Disabled => Err(WebhookEndpointError::CannotPauseDisabled),
        },
        RequestedStatus::Active => {
            let resumed = ep.status != EndpointStatus::Active;
            if ep.status == EndpointStatus::Disabled {
                ep.consecutive_failures = 0;
                ep.disabled_reason = None;
                ep.disabled_at = None;
            }
            ep.status = EndpointStatus::Active;
            Ok(resumed)
        }
    }
}

/// Applies a patch (status by [`set_status`]). Returns the endpoint and whether it went back
/// to `active` (its open deliveries may go again).
pub fn patch(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    id: WebhookEndpointId,
    req: EndpointPatch,
) -> Result<(WebhookEndpoint, bool)> {
    let mut ep = get(ctx, project, id)?;
    let resumed = match req.status {
        Some(s) => set_status(&mut ep, s)?,
        None => false,
    };
    set_patched!(ep, req, [url, description, event_types, delivery_mode]);
    ep.updated_at = ctx.now_us();
    ctx.put(&ep)?;
    Ok((ep, resumed))
}

/// Gives the endpoint a new secret, stored sealed under `key`. The old one keeps signing for
/// `overlap_hours` (0: stops at once, with every older secret — the answer to a leak). The
/// handler bounds `overlap_hours` by [`MAX_OVERLAP_HOURS`]. Returns the endpoint and the new
/// secret in clear, for the rotation answer only.
pub fn rotate(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    key: &DataKey,
    id: WebhookEndpointId,
    overlap_hours: u64,
) -> Result<(WebhookEndpoint, Zeroizing<String>)> {
    let mut ep = get(ctx, project, id)?;
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

// ---- Outcomes: the endpoint side of each recorded attempt (DECISIONS.md section 7) ----

/// A delivery succeeded: the strike count resets.
pub fn record_success(ep: &mut WebhookEndpoint, now: i64) {
    ep.last_success_at = Some(now);
    ep.consecutive_failures = 0;
}

/// An attempt failed (any failure, retried or not).
pub fn record_failure(ep: &mut WebhookEndpoint, now: i64) {
    ep.last_failure_at = Some(now);
}

/// The receiver answered 410 Gone: an active endpoint is disabled at once (`gone`). Returns
/// whether this disabled it.
pub fn record_gone(ep: &mut WebhookEndpoint, now: i64) -> bool {
    if ep.status != EndpointStatus::Active {
        return false;
    }
    disable(ep, "gone", now);
    true
}

/// A delivery exhausted its attempts: one strike; the [`DISABLE_AFTER_EXHAUSTED`]th in a row
/// disables an active endpoint (`consecutive_failures`). Returns whether this disabled it.
pub fn record_exhausted(ep: &mut WebhookEndpoint, now: i64) -> bool {
    ep.consecutive_failures += 1;
    if ep.consecutive_failures >= DISABLE_AFTER_EXHAUSTED && ep.status == EndpointStatus::Active {
        disable(ep, "consecutive_failures", now);
        return true;
    }
    false
}

/// Disables an endpoint for `reason` (`gone` or `consecutive_failures`). Its open deliveries
/// are then canceled (`webhook_deliveries::cancel_open`).
fn disable(ep: &mut WebhookEndpoint, reason: &str, now: i64) {
    tracing::warn!(endpoint = %ep.id, reason, "webhook endpoint disabled");
    ep.status = EndpointStatus::Disabled;
    ep.disabled_reason = Some(reason.to_string());
    ep.disabled_at = Some(now);
    ep.updated_at = now;
}

// ---- Deletion ----

fn purge_marker(project: ProjectId, endpoint: WebhookEndpointId) -> Vec<u8> {
    index::key(
        IndexTag::WebhookPurge,
        Uuid::nil(),
        &[project.as_uuid().as_bytes()],
        endpoint.uuid(),
    )
}

/// Deletes an endpoint and the first chunk of its deliveries (events stay). When more remain,
/// a purge marker records the work and [`purge_chunk`] finishes it. Returns whether more
/// remain.
pub fn delete(ctx: &mut WriteCtx<'_>, project: ProjectId, id: WebhookEndpointId) -> Result<bool> {
    get(ctx, project, id)?;
    ctx.delete::<WebhookEndpoint>(id.uuid())?;
    let more = purge_some(ctx, project, id)?;
    if more {
        ctx.index_insert(&purge_marker(project, id))?;
    }
    Ok(more)
}

fn purge_some(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    endpoint: WebhookEndpointId,
) -> Result<bool, StoreError> {
    let prefix = index::prefix(
        IndexTag::WebhookDeliveriesByEndpoint,
        project.uuid(),
        &[endpoint.as_uuid().as_bytes()],
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
    project: ProjectId,
    endpoint: WebhookEndpointId,
) -> Result<bool, StoreError> {
    let more = purge_some(ctx, project, endpoint)?;
    if !more {
        ctx.index_remove(&purge_marker(project, endpoint))?;
    }
    Ok(more)
}

/// Deleted endpoints whose deliveries are still being removed: (project, endpoint).
pub fn pending_purges(r: &impl ReadOps) -> Result<Vec<(ProjectId, WebhookEndpointId)>, StoreError> {
    let prefix = index::prefix(IndexTag::WebhookPurge, Uuid::nil(), &[]);
    let end = index::prefix_end(&prefix);
    let mut out = Vec::new();
    for k in r.index_range(&prefix, &end, 1_000, false)? {
        // tag (1) ‖ nil (16) ‖ len (2) ‖ project (16) ‖ endpoint (16)
        if k.len() == 51 {
            let project = Uuid::from_slice(&k[19..35]).unwrap_or_default();
            out.push((project.into(), index::id_of(&k).into()));
        }
    }
    Ok(out)
}
