//! Webhook deliveries: reads and replays (SPEC.md section 4, Webhooks and Events).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use appliance_storage::records::{DeliveryStatus, WebhookDelivery};

use crate::api::authed::{access_rules, Authed};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::{list_json, parse_status, Fields, JsonBody, Params, ReadBody};
use crate::api::webhooks::{rate_limited, READ};
use crate::api::{json, PageAnswer};
use crate::auth::{Access, ANY_KIND};
use crate::services::reads;
use crate::services::types::{WebhookDeliveryId, WebhookEndpointId};
use crate::services::webhook_deliveries::{self as deliveries, BulkReplay, WebhookDeliveryError};
use crate::state::AppState;
use crate::views::{delivery_json, delivery_ref, parse_delivery_ref};
use crate::webhooks::Poke;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    REPLAY = Access::new(ANY_KIND, "webhooks:replay");
}
/// Most deliveries `GET /v1/events/{id}/deliveries` returns (it is not paginated).
const EVENT_DELIVERIES_MAX: usize = 1_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_deliveries))
        .routes(routes!(bulk_replay))
        .routes(routes!(get_delivery))
        .routes(routes!(replay_delivery))
        .routes(routes!(list_event_deliveries))
}

fn delivery_id(s: &str) -> Result<WebhookDeliveryId, ApiError> {
    parse_delivery_ref(s)
        .map(WebhookDeliveryId::from)
        .ok_or_else(|| ApiError::invalid("id", format!("{s:?} is not a delivery id (whd_...).")))
}

/// List webhook deliveries, newest first.
///
/// Any key kind; scope `webhooks:read`.
#[utoipa::path(get, path = "/v1/webhook_deliveries", tag = "webhooks",
    params(crate::api::extract::PageParams,
        ("endpoint_id" = Option<uuid::Uuid>, Query, description = "Only deliveries to this endpoint."),
        ("event_id" = Option<String>, Query, description = "Only deliveries of this event (`evt_...`)."),
        ("status" = Option<DeliveryStatusIn>, Query, description = "Only deliveries in this status."),
    ),
    responses((status = 200, description = "A page of deliveries.", body = DeliveryList)))]
async fn list_deliveries(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let p = a.caller.project_id();
    let endpoint = q.uuid("endpoint_id")?.map(WebhookEndpointId::from);
    let status = q.status::<DeliveryStatus>()?;
    let query = reads::DeliveryQuery {
        endpoint,
        status,
        event_id: q.get("event_id").map(str::to_string),
    };
    let rows = reads::deliveries(&a.state.store, p, query, page.rows()?).await?;
    Ok(rows.answer(|d| delivery_json(d, false)))
}

/// Read a delivery, with `response_body`.
///
/// Any key kind; scope `webhooks:read`.
#[utoipa::path(get, path = "/v1/webhook_deliveries/{id}", tag = "webhooks",
    params(("id" = String, Path, pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$", description = "`whd_` + ULID.")),
    responses((status = 200, description = "The delivery.", body = crate::views::DeliveryView)))]
async fn get_delivery(a: Authed<READ>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = delivery_id(&id)?;
    a.get_by_id::<WebhookDelivery, _, _>(id, WebhookDeliveryError::NotFound, |d| {
        delivery_json(d, true)
    })
    .await
}

/// Replay a delivery: a new delivery of the same event with `replay_of` set. Only `failed`,
/// `exhausted` and `skipped` deliveries, only to an active endpoint (409 otherwise); 10 replay
/// calls per minute per project.
///
/// Any key kind; scope `webhooks:replay`.
#[utoipa::path(post, path = "/v1/webhook_deliveries/{id}/replay", tag = "webhooks",
    params(("id" = String, Path, pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$", description = "`whd_` + ULID.")),
    responses((status = 201, description = "The new delivery.", body = crate::views::DeliveryView)))]
async fn replay_delivery(a: Authed<REPLAY>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = delivery_id(&id)?;
    if let Err(retry) = a.state.webhooks.check_replay_rate(a.caller.project.id) {
        return Err(rate_limited(retry));
    }
    let p = a.caller.project_id();
    let attempts = a.state.config.webhooks.max_attempts();
    let (resp, new_id) = a
        .commit(move |ctx| {
            let d = deliveries::replay(ctx, p, id, attempts)?;
            Ok((StatusCode::CREATED, delivery_json(&d, false), d.id))
        })
        .await?;
    if let Some(d) = new_id {
        a.state.webhooks.poke(Poke::Deliveries(vec![d]));
    }
    Ok(resp)
}

impl ReadBody for BulkReplay {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        let endpoint_id = WebhookEndpointId::from(f.req_uuid("endpoint_id")?);
        let statuses = match f.opt_str("status")? {
            None => vec![
                DeliveryStatus::Failed,
                DeliveryStatus::Exhausted,
                DeliveryStatus::Skipped,
            ],
            Some(s) => {
                let st: DeliveryStatus = parse_status("status", &s)?;
                if !st.is_replayable() {
                    return Err(ApiError::invalid(
                        "status",
                        "Only failed, exhausted and skipped deliveries can be replayed.",
                    ));
                }
                vec![st]
            }
        };
        let since_us = f
            .opt_str("since")?
            .map(|s| {
                chrono::DateTime::parse_from_rfc3339(&s)
                    .map(|t| t.timestamp_micros())
                    .map_err(|_| ApiError::invalid("since", "since must be an RFC 3339 timestamp."))
            })
            .transpose()?;
        let after = f
            .opt_str("cursor")?
            .map(|c| {
                parse_delivery_ref(&c).ok_or_else(|| {
                    ApiError::invalid("cursor", "cursor is not a cursor this API returned.")
                })
            })
            .transpose()?;
        Ok(BulkReplay {
            endpoint_id,
            statuses,
            since_us,
            after,
        })
    }
}

/// Replay up to 100 failed, exhausted or skipped deliveries of one endpoint, oldest first,
/// each as a new delivery of the same event. Answers the new deliveries as a list.
///
/// Any key kind; scope `webhooks:replay`.
#[utoipa::path(post, path = "/v1/webhook_deliveries/replay", tag = "webhooks",
    request_body = BulkReplay,
    responses(
        (status = 200, description = "The new deliveries.", body = ReplayedList),
        (status = 404, description = "`not_found`: no such endpoint (`param: endpoint_id`).", body = crate::api::error::ErrorBody),
    ))]
async fn bulk_replay(a: Authed<REPLAY>, body: JsonBody) -> Result<Response, ApiError> {
    let req: BulkReplay = body.read()?;
    if let Err(retry) = a.state.webhooks.check_replay_rate(a.caller.project.id) {
        return Err(rate_limited(retry));
    }
    let p = a.caller.project_id();
    let attempts = a.state.config.webhooks.max_attempts();
    let (resp, ids) = a
        .commit(move |ctx| {
            let (new, has_more, last) = deliveries::bulk_replay(ctx, p, req, attempts)?;
            let data: Vec<Value> = new.iter().map(|d| delivery_json(d, false)).collect();
            let next = last.map(delivery_ref);
            let body = list_json(data, has_more, next);
            Ok((
                StatusCode::OK,
                body,
                new.iter().map(|d| d.id).collect::<Vec<_>>(),
            ))
        })
        .await?;
    if let Some(ids) = ids.filter(|v| !v.is_empty()) {
        a.state.webhooks.poke(Poke::Deliveries(ids));
    }
    Ok(resp)
}

/// Every delivery of one event, newest first (not paginated; at most 1,000).
///
/// Any key kind; scope `webhooks:read`.
#[utoipa::path(get, path = "/v1/events/{id}/deliveries", tag = "events",
    params(("id" = String, Path, description = "`evt_` + ULID.")),
    responses((status = 200, description = "The event's deliveries.", body = DeliveryList)))]
async fn list_event_deliveries(
    a: Authed<READ>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let p = a.caller.project_id();
    let rows = reads::event_deliveries(&a.state.store, p, id, EVENT_DELIVERIES_MAX)
        .await?
        .ok_or_else(|| ApiError::not_found("event"))?;
    let data = rows.items.iter().map(|d| delivery_json(d, false)).collect();
    Ok(json(StatusCode::OK, &list_json(data, false, None)))
}

list_schema! {
    DeliveryList => crate::views::DeliveryView<'static>;
}

/// A webhook delivery status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DeliveryStatusIn {
    Pending,
    Succeeded,
    Failed,
    Exhausted,
    Skipped,
    Canceled,
}

/// A page of webhook deliveries as `POST /v1/webhook_deliveries/replay` answers it: the new
/// deliveries, oldest first; `next_cursor` continues the replay.
#[derive(ToSchema)]
pub struct ReplayedList {
    #[schema(pattern = "^list$")]
    pub object: String,
    pub data: Vec<crate::views::DeliveryView<'static>>,
    pub has_more: bool,
    #[schema(pattern = "^whd_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    pub next_cursor: Option<String>,
}
