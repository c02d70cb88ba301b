//! Webhook deliveries (SPEC.md sections 3 and 4, Webhooks; DECISIONS.md sections 1 and 7):
//! the outbox that writes them with their event, their state machine, and replays.
//!
//! A delivery is born `pending` (due at once) when its endpoint is active and `skipped` when
//! it is paused or disabled ([`new_delivery`]). Each attempt's answer moves an open delivery
//! (`pending` or `failed`) to `succeeded` (any 2xx), `failed` (retried at `next_attempt_at`)
//! or `exhausted` (the last attempt failed, or the receiver answered 410); an open delivery
//! of a disabled endpoint becomes `canceled` ([`record_outcomes`], [`apply_attempt`]). Only
//! `failed`, `exhausted` and `skipped` deliveries replay, as a new delivery `replay_of` the
//! original, and only to an active endpoint ([`replay`], [`bulk_replay`]). What an outcome
//! does to the endpoint is in [`super::webhook_endpoints`].
//!
//! Sending, retry timing and the order of sends are transport: `webhooks::dispatcher`.

use std::collections::HashMap;

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    DeliveryStatus, EndpointStatus, Event, Mode, Project, WebhookDelivery, WebhookEndpoint,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::services::error::{fault_from, Fault};
use crate::services::types::{ProjectId, WebhookDeliveryId, WebhookEndpointId};
use crate::services::webhook_endpoints;
use crate::views;

/// Most deliveries replayed by one bulk call (SPEC.md section 8).
pub const BULK_REPLAY_MAX: usize = 100;
/// Open deliveries canceled per transaction when an endpoint is disabled.
pub const CANCEL_CHUNK: usize = 1_000;

/// Why a delivery request was refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum WebhookDeliveryError {
    /// No such delivery in the project (404 `not_found`).
    #[error("No such webhook delivery.")]
    NotFound,
    /// The endpoint a replay goes to is gone (404 `not_found`); `param` names the request
    /// field that named it, if any.
    #[error("No such webhook endpoint.")]
    EndpointNotFound { param: Option<&'static str> },
    /// Only `failed`, `exhausted` and `skipped` deliveries replay (409 `invalid_state`).
    #[error("A {} delivery cannot be replayed; only failed, exhausted and skipped ones.", .0.as_str())]
    NotReplayable(DeliveryStatus),
    /// Replays go to active endpoints only (409 `invalid_state`).
    #[error("The endpoint is {}; set its status to active before replaying.", .0.as_str())]
    EndpointNotActive(EndpointStatus),
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(WebhookDeliveryError);

type Result<T, E = WebhookDeliveryError> = std::result::Result<T, E>;

// ---- Creation: the outbox ----

/// A new delivery id for a row created at `now_us`: a ULID carrying that time (so `since`
/// filters can work on ids), monotonic within this process, so deliveries created one after
/// the other sort in creation order even within one millisecond (ordered endpoints rely on
/// it: creation order is sequence order).
pub fn new_delivery_id(now_us: i64) -> Uuid {
    let u = appliance_storage::sources::new_ulid(now_us.max(0) as u64 / 1000);
    Uuid::from_u128(u.0)
}

/// The facts of an event a delivery carries.
pub struct EventRef<'a> {
    pub project_id: Uuid,
    pub id: &'a str,
    pub sequence: u64,
    pub event_type: &'a str,
}

impl<'a> From<&'a Event> for EventRef<'a> {
    fn from(e: &'a Event) -> Self {
        EventRef {
            project_id: e.project_id,
            id: &e.id,
            sequence: e.sequence,
            event_type: &e.event_type,
        }
    }
}

/// A delivery of `event` to `ep` created at `now`: `pending` and due at once when the endpoint
/// is active, otherwise `skipped` (a paused or disabled endpoint records what it missed, so a
/// replay can fill the gap).
pub fn new_delivery(
    now: i64,
    ep: &WebhookEndpoint,
    event: &EventRef<'_>,
    replay_of: Option<Uuid>,
    max_attempts: u32,
) -> WebhookDelivery {
    let active = ep.status == EndpointStatus::Active;
    WebhookDelivery {
        id: new_delivery_id(now),
        project_id: event.project_id,
        endpoint_id: ep.id,
        event_id: event.id.to_string(),
        event_sequence: event.sequence,
        event_type: event.event_type.to_string(),
        endpoint_url: ep.url.clone(),
        status: if active {
            DeliveryStatus::Pending
        } else {
            DeliveryStatus::Skipped
        },
        attempt: 0,
        max_attempts: max_attempts.max(1),
        next_attempt_at: active.then_some(now),
        response_status: None,
        resolved_ip: None,
        duration_ms: None,
        error_detail: None,
        response_body: None,
        replay_of,
        delivered_at: None,
        created_at: now,
        updated_at: now,
    }
}

/// [`enqueue_with`] with the attempts of the default retry schedule (8), for tools and
/// tests that write events without a running appliance's config.
pub fn enqueue(ctx: &mut WriteCtx<'_>, event: &Event) -> Result<(), StoreError> {
    enqueue_with(
        ctx,
        event,
        crate::config::WebhooksConfig::default().max_attempts(),
    )
}

/// The outbox (DECISIONS.md section 1): writes one delivery per endpoint of the event's
/// project that subscribes to its type, in the event's transaction, so a crash can lose
/// neither. Runs for every event; a project without endpoints costs one index seek per
/// batch ([`WriteCtx::index_has_any`]). Each
/// delivery gets `max_attempts` attempts (`WebhooksConfig::max_attempts`; `services::emit`
/// passes its scope's).
pub fn enqueue_with(
    ctx: &mut WriteCtx<'_>,
    event: &Event,
    max_attempts: u32,
) -> Result<(), StoreError> {
    // Remembered for the batch until an endpoint is written in it.
    if !ctx.index_has_any(IndexTag::WebhookEndpoints, event.project_id)? {
        return Ok(());
    }
    let endpoints = webhook_endpoints::list(ctx, event.project_id.into())?;
    let now = ctx.now_us();
    let ev = EventRef::from(event);
    for ep in endpoints
        .iter()
        .filter(|e| e.subscribes_to(&event.event_type))
    {
        ctx.put(&new_delivery(now, ep, &ev, None, max_attempts))?;
    }
    Ok(())
}

// ---- Sending: what may go ----

/// What becomes of an open delivery, by its endpoint's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenDelivery {
    /// Active endpoint: send it when due.
    Send,
    /// Paused endpoint: it waits (and goes when the endpoint resumes).
    Hold,
    /// Disabled endpoint: it is canceled.
    Cancel,
}

/// The rule for an open delivery of `ep`.
pub fn open_delivery(ep: &WebhookEndpoint) -> OpenDelivery {
    match ep.status {
        EndpointStatus::Active => OpenDelivery::Send,
        EndpointStatus::Paused => OpenDelivery::Hold,
        EndpointStatus::Disabled => OpenDelivery::Cancel,
    }
}

// ---- Outcomes ----

/// What one attempt found out, as the rules need it.
#[derive(Debug, Clone, Default)]
pub struct AttemptReport {
    /// The URL the attempt went to (the endpoint's at the time).
    pub url: String,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<u16>,
    pub resolved_ip: Option<String>,
    pub duration_ms: u64,
    /// Why the attempt failed (transport, timeout, guard, or a non-2xx status).
    pub error: Option<String>,
    /// The start of the receiver's answer.
    pub body: Option<String>,
}

impl AttemptReport {
    /// Success is any 2xx (DECISIONS.md section 7).
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }
}

/// An outcome to record: the answer to attempt `attempt` of delivery `id`, or a cancel of it
/// (`attempt`: the attempts made when the cancel was decided).
#[derive(Debug)]
pub struct Outcome {
    pub id: Uuid,
    pub attempt: u32,
    pub kind: OutcomeKind,
}

#[derive(Debug)]
pub enum OutcomeKind {
    Attempt(AttemptReport),
    /// The delivery's endpoint is disabled.
    Cancel,
    /// The delivery cannot be sent (its event does not decode, its endpoint's secret does
    /// not open): recorded `skipped` with the reason, so an ordered endpoint moves on.
    Skip {
        reason: &'static str,
    },
}

/// What [`apply_attempt`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AttemptEffect {
    /// The delivery failed and is due again then.
    pub retry_at: Option<i64>,
    /// The endpoint was disabled by this outcome: its open deliveries must be canceled.
    pub disabled: bool,
}

/// Applies the answer to attempt `d.attempt + 1` of an open delivery to it and its endpoint
/// (the caller checked both). 2xx: `succeeded`, the strike count resets. 410: `exhausted`,
/// the endpoint disabled (`gone`). Another failure: `failed` and due again after
/// `retry_delay_us(attempts made)`, or at the last attempt `exhausted` and one strike.
pub fn apply_attempt(
    d: &mut WebhookDelivery,
    ep: &mut WebhookEndpoint,
    report: AttemptReport,
    now: i64,
    retry_delay_us: impl FnOnce(u32) -> i64,
) -> AttemptEffect {
    let mut effect = AttemptEffect::default();
    let succeeded = report.succeeded();
    d.attempt += 1;
    d.endpoint_url = report.url;
    d.response_status = report.status;
    d.resolved_ip = report.resolved_ip;
    d.duration_ms = Some(report.duration_ms);
    // A receiver may echo the body back: no checkout token is kept.
    d.response_body = report
        .body
        .map(|b| crate::services::invoices::redact_tokens(&b).into_owned());
    if succeeded {
        d.status = DeliveryStatus::Succeeded;
        d.error_detail = None;
        d.delivered_at = Some(now);
        d.next_attempt_at = None;
        webhook_endpoints::record_success(ep, now);
    } else {
        d.error_detail = report.error;
        webhook_endpoints::record_failure(ep, now);
        if report.status == Some(410) {
            d.status = DeliveryStatus::Exhausted;
            d.next_attempt_at = None;
            effect.disabled = webhook_endpoints::record_gone(ep, now);
        } else if d.attempt >= d.max_attempts {
            d.status = DeliveryStatus::Exhausted;
            d.next_attempt_at = None;
            effect.disabled = webhook_endpoints::record_exhausted(ep, now);
        } else {
            let at = now + retry_delay_us(d.attempt);
            d.status = DeliveryStatus::Failed;
            d.next_attempt_at = Some(at);
            effect.retry_at = Some(at);
        }
    }
    d.updated_at = now;
    effect
}

/// Cancels an open delivery (its endpoint is disabled).
pub fn cancel(d: &mut WebhookDelivery, now: i64) {
    d.status = DeliveryStatus::Canceled;
    d.next_attempt_at = None;
    d.updated_at = now;
}

/// An open delivery that cannot be sent is `skipped` with the reason in `error_detail`
/// (replayable, like a delivery recorded while its endpoint was paused).
pub fn skip(d: &mut WebhookDelivery, reason: &str, now: i64) {
    d.status = DeliveryStatus::Skipped;
    d.error_detail = Some(reason.to_string());
    d.next_attempt_at = None;
    d.updated_at = now;
}

/// What [`record_outcomes`] committed.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Per outcome, in order: when the delivery is due again (it `failed`), if at all.
    pub retry_at: Vec<Option<i64>>,
    /// Endpoints disabled in this batch whose open deliveries are not all canceled yet:
    /// (project, endpoint), for [`cancel_open`] in later transactions.
    pub cancel_more: Vec<(ProjectId, WebhookEndpointId)>,
}

/// Records a batch of outcomes in one transaction. An outcome counts only while its delivery
/// is still open at the attempt it answers (a stale or repeated outcome changes nothing);
/// a delivery whose endpoint is gone is left to the purge. Endpoints disabled here get their
/// open deliveries canceled, the first [`CANCEL_CHUNK`] in this transaction.
pub fn record_outcomes(
    ctx: &mut WriteCtx<'_>,
    batch: Vec<Outcome>,
    retry_delay_us: impl Fn(u32) -> i64,
) -> Result<Recorded, StoreError> {
    let now = ctx.now_us();
    let mut endpoints: HashMap<Uuid, Option<WebhookEndpoint>> = HashMap::new();
    let mut dirty: Vec<Uuid> = Vec::new();
    let mut disabled: Vec<(ProjectId, WebhookEndpointId)> = Vec::new();
    let mut retry_at = Vec::with_capacity(batch.len());
    for o in batch {
        retry_at.push(None);
        let current = ctx
            .get::<WebhookDelivery>(o.id)?
            .filter(|d| d.status.is_open());
        let Some(mut d) = current else {
            continue;
        };
        match o.kind {
            OutcomeKind::Cancel => {
                if d.attempt != o.attempt {
                    continue;
                }
                cancel(&mut d, now);
            }
            OutcomeKind::Skip { reason } => {
                if d.attempt != o.attempt {
                    continue;
                }
                skip(&mut d, reason, now);
            }
            OutcomeKind::Attempt(report) => {
                if d.attempt + 1 != o.attempt {
                    continue;
                }
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    endpoints.entry(d.endpoint_id)
                {
                    slot.insert(ctx.get::<WebhookEndpoint>(d.endpoint_id)?);
                }
                let Some(Some(ep)) = endpoints.get_mut(&d.endpoint_id) else {
                    // Deleted: its deliveries are being purged.
                    continue;
                };
                let effect = apply_attempt(&mut d, ep, report, now, &retry_delay_us);
                if effect.disabled {
                    disabled.push((ep.project_id.into(), WebhookEndpointId::of(ep)));
                }
                *retry_at.last_mut().expect("pushed") = effect.retry_at;
                if !dirty.contains(&d.endpoint_id) {
                    dirty.push(d.endpoint_id);
                }
            }
        }
        ctx.put(&d)?;
    }
    for id in dirty {
        if let Some(Some(ep)) = endpoints.get(&id) {
            ctx.put(ep)?;
        }
    }
    let mut cancel_more = Vec::new();
    for (project, endpoint) in disabled {
        if cancel_open(ctx, project, endpoint)? {
            cancel_more.push((project, endpoint));
        }
    }
    Ok(Recorded {
        retry_at,
        cancel_more,
    })
}

/// Cancels up to [`CANCEL_CHUNK`] open deliveries of a disabled endpoint; returns whether more
/// remain. Does nothing once the endpoint is enabled again (or gone).
pub fn cancel_open(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    endpoint: WebhookEndpointId,
) -> Result<bool, StoreError> {
    let (project, endpoint) = (project.uuid(), endpoint.uuid());
    let still_disabled = ctx
        .get::<WebhookEndpoint>(endpoint)?
        .is_some_and(|e| e.status == EndpointStatus::Disabled);
    if !still_disabled {
        return Ok(false);
    }
    let now = ctx.now_us();
    let mut left = CANCEL_CHUNK;
    for s in [DeliveryStatus::Pending, DeliveryStatus::Failed] {
        let prefix = index::prefix(
            IndexTag::WebhookDeliveriesByEndpointStatus,
            project,
            &[endpoint.as_bytes(), s.as_str().as_bytes()],
        );
        let end = index::prefix_end(&prefix);
        let keys = ctx.index_range(&prefix, &end, left + 1, false)?;
        for k in keys.iter().take(left) {
            if let Some(mut d) = ctx.get::<WebhookDelivery>(index::id_of(k))? {
                cancel(&mut d, now);
                ctx.put(&d)?;
            }
        }
        if keys.len() > left {
            return Ok(true);
        }
        left -= keys.len();
    }
    Ok(false)
}

// ---- Replays ----

/// One delivery of the project.
pub fn get(r: &impl ReadOps, project: ProjectId, id: WebhookDeliveryId) -> Result<WebhookDelivery> {
    r.get_in::<WebhookDelivery>(project.uuid(), id.uuid())?
        .ok_or(WebhookDeliveryError::NotFound)
}

fn active_endpoint(
    r: &impl ReadOps,
    project: Uuid,
    id: Uuid,
    param: Option<&'static str>,
) -> Result<WebhookEndpoint> {
    let ep = r
        .get_in::<WebhookEndpoint>(project, id)?
        .ok_or(WebhookDeliveryError::EndpointNotFound { param })?;
    if ep.status != EndpointStatus::Active {
        return Err(WebhookDeliveryError::EndpointNotActive(ep.status));
    }
    Ok(ep)
}

/// A new delivery of the same event to the same endpoint, `replay_of` the original. Only
/// `failed`, `exhausted` and `skipped` deliveries replay, and only to an active endpoint. The
/// replay gets `max_attempts` attempts.
pub fn replay(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    id: WebhookDeliveryId,
    max_attempts: u32,
) -> Result<WebhookDelivery> {
    let orig = get(ctx, project, id)?;
    let project = project.uuid();
    if !orig.status.is_replayable() {
        return Err(WebhookDeliveryError::NotReplayable(orig.status));
    }
    let ep = active_endpoint(ctx, project, orig.endpoint_id, None)?;
    let d = replay_of(ctx.now_us(), &ep, &orig, max_attempts);
    ctx.put(&d)?;
    Ok(d)
}

fn replay_of(
    now: i64,
    ep: &WebhookEndpoint,
    orig: &WebhookDelivery,
    max_attempts: u32,
) -> WebhookDelivery {
    let ev = EventRef {
        project_id: orig.project_id,
        id: &orig.event_id,
        sequence: orig.event_sequence,
        event_type: &orig.event_type,
    };
    new_delivery(now, ep, &ev, Some(orig.id), max_attempts)
}

/// `POST /v1/webhook_deliveries/replay`.
#[derive(utoipa::ToSchema)]
pub struct BulkReplay {
    #[schema(value_type = Uuid)]
    pub endpoint_id: WebhookEndpointId,
    // Replayable statuses only (the handler checks): the one the body names, else all three.
    /// Default: all three replayable statuses.
    #[schema(rename = "status", value_type = Option<ReplayableStatus>)]
    pub statuses: Vec<DeliveryStatus>,
    // Unix µs.
    /// Only deliveries created at or after this time (RFC 3339).
    #[schema(rename = "since", value_type = Option<String>, format = DateTime, pattern = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")]
    pub since_us: Option<i64>,
    // Continue after this original.
    /// The previous answer's `next_cursor`.
    #[schema(rename = "cursor", value_type = Option<String>, pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    pub after: Option<Uuid>,
}

/// A delivery status that can be replayed.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ReplayableStatus {
    Failed,
    Exhausted,
    Skipped,
}

/// Replays up to [`BULK_REPLAY_MAX`] matching deliveries of one endpoint, oldest first.
/// Returns the new deliveries, whether more originals match, and the last original taken.
pub fn bulk_replay(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    req: BulkReplay,
    max_attempts: u32,
) -> Result<(Vec<WebhookDelivery>, bool, Option<Uuid>)> {
    let project = project.uuid();
    let ep = active_endpoint(ctx, project, req.endpoint_id.uuid(), Some("endpoint_id"))?;
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
        let d = replay_of(now, &ep, orig, max_attempts);
        ctx.put(&d)?;
        out.push(d);
    }
    Ok((out, has_more, ids.last().copied()))
}

/// Writes an `endpoint.test` event for one endpoint and its single delivery (the event goes to
/// no other endpoint). A paused or disabled endpoint records it `skipped`, as any event.
pub fn send_test(
    ctx: &mut WriteCtx<'_>,
    project: &Project,
    id: WebhookEndpointId,
    max_attempts: u32,
) -> Result<(Event, WebhookDelivery), webhook_endpoints::WebhookEndpointError> {
    let ep = webhook_endpoints::get(ctx, ProjectId::of(project), id)?;
    let now = ctx.now_us();
    let ev = ctx.append_event(
        project.id,
        project.mode == Mode::Live,
        "endpoint.test",
        &ep.id.to_string(),
        views::endpoint_json(&ep, now),
    )?;
    let d = new_delivery(now, &ep, &EventRef::from(&ev), None, max_attempts);
    ctx.put(&d)?;
    Ok((ev, d))
}
