//! Webhook endpoints (SPEC.md section 4, Webhooks; DECISIONS.md section 7).

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use appliance_storage::records::{DeliveryMode, WebhookEndpoint};

use crate::api::authed::{access_rules, Authed, PathId, Post};
use crate::api::error::ApiError;
use crate::api::extract::{read_body, Fields, JsonBody, ReadBody};
use crate::api::{commit, json, Begin};
use crate::auth::{Access, ANY_KIND};
use crate::services::reads;
use crate::services::types::WebhookEndpointId;
use crate::services::webhook_endpoints::{
    self as endpoints, EndpointPatch, NewEndpoint, RequestedStatus, WebhookEndpointError,
    DEFAULT_OVERLAP_HOURS, MAX_OVERLAP_HOURS,
};
use crate::services::EVENT_CATALOG;
use crate::state::AppState;
use crate::views::{
    delivery_ref, endpoint_json, endpoint_view, to_value, DeletedEndpointView, EndpointList,
    EndpointWithSecret, OptTs, Sorted, WebhookTestView,
};
use crate::webhooks::{dispatcher, guard, Poke};
use serde_json::json;
use utoipa::openapi::{RefOr, Schema};
use utoipa::PartialSchema;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    pub(crate) READ = Access::new(ANY_KIND, "webhooks:read");
    WRITE = Access::new(ANY_KIND, "webhooks:write");
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_webhooks, create_webhook))
        .routes(routes!(get_webhook, patch_webhook, delete_webhook))
        .routes(routes!(rotate_secret))
        .routes(routes!(test_webhook))
}

/// Checks a target URL with the guard (400 `invalid_url`, `param: url`).
/// The guard's own reasons come first; a URL it reads but the document does not describe
/// ([`guard::URL_PATTERN`]) is refused before any lookup.
async fn checked_url(state: &AppState, raw: &str) -> Result<String, ApiError> {
    let allow_private = state.webhooks.config.allow_private_targets;
    let refused = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "invalid_url", m).param("url");
    guard::check_syntax(raw, allow_private).map_err(|e| refused(e.to_string()))?;
    if !guard::url_form_ok(raw) {
        return Err(refused(guard::URL_FORM.to_string()));
    }
    guard::check(raw, allow_private)
        .await
        .map(|u| u.to_string())
        .map_err(|e| refused(e.to_string()))
}

fn event_types(f: &Fields) -> Result<Option<Vec<String>>, ApiError> {
    Ok(f.opt_str_list("event_types")?
        .map(endpoints::parse_event_types)
        .transpose()?)
}

fn delivery_mode(f: &Fields) -> Result<Option<DeliveryMode>, ApiError> {
    f.opt_str("delivery_mode")?
        .map(|m| {
            DeliveryMode::parse(&m).ok_or_else(|| {
                ApiError::invalid(
                    "delivery_mode",
                    "delivery_mode must be unordered or ordered.",
                )
            })
        })
        .transpose()
}

/// `POST /v1/webhooks`.
#[derive(ToSchema)]
pub struct NewWebhookEndpoint {
    /// https, port 443 or 8443, no credentials, resolving to public addresses only.
    #[schema(value_type = WebhookUrlIn)]
    pub url: String,
    #[schema(max_length = 255)]
    pub description: Option<String>,
    /// Empty or omitted: every event type, including types added later.
    #[schema(value_type = Option<Vec<String>>)]
    pub event_types: Vec<String>,
    #[schema(value_type = Option<DeliveryModeIn>)]
    pub delivery_mode: DeliveryMode,
}

impl ReadBody for NewWebhookEndpoint {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        Ok(NewWebhookEndpoint {
            url: f.req_str("url")?,
            description: f.opt_bounded("description", 255)?,
            event_types: event_types(f)?.unwrap_or_default(),
            delivery_mode: delivery_mode(f)?.unwrap_or(DeliveryMode::Unordered),
        })
    }
}

// `description` is `Some(None)` when the body clears it with null; the URL is checked by the
// handler (the guard resolves it).
/// `PATCH /v1/webhooks/{id}`.
#[derive(ToSchema)]
pub struct WebhookEndpointPatch {
    /// `active` also re-enables a disabled endpoint and resets `consecutive_failures`.
    #[schema(value_type = Option<EndpointStatusIn>)]
    pub status: Option<RequestedStatus>,
    #[schema(value_type = Option<WebhookUrlIn>)]
    pub url: Option<String>,
    #[schema(value_type = Option<String>, max_length = 255)]
    pub description: Option<Option<String>>,
    pub event_types: Option<Vec<String>>,
    #[schema(value_type = Option<DeliveryModeIn>)]
    pub delivery_mode: Option<DeliveryMode>,
}

impl ReadBody for WebhookEndpointPatch {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        let status = f
            .opt_str("status")?
            .map(|s| {
                RequestedStatus::parse(&s)
                    .ok_or_else(|| ApiError::invalid("status", "status must be active or paused."))
            })
            .transpose()?;
        let description = f.opt_nullable("description", 255)?;
        let event_types = event_types(f)?;
        let delivery_mode = delivery_mode(f)?;
        Ok(WebhookEndpointPatch {
            status,
            url: f.opt_str("url")?,
            description,
            event_types,
            delivery_mode,
        })
    }
}

/// The endpoint with its secret (in clear) and overlap end (creation and rotation answers
/// only; an idempotent replay answers it with `secret` null, DECISIONS.md section 16).
fn with_secret(ep: &WebhookEndpoint, secret: &str, now: i64) -> Value {
    to_value(&EndpointWithSecret {
        endpoint: endpoint_view(ep, now),
        secret,
        overlap_until: OptTs(ep.overlap_until(now)),
    })
}

/// Every webhook endpoint of the project, newest first (never paginated), and
/// `event_catalog`.
///
/// Any key kind; scope `webhooks:read`.
#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks",
    responses((status = 200, description = "The endpoints and the event catalogue.", body = EndpointList)))]
async fn list_webhooks(a: Authed<READ>) -> Result<Response, ApiError> {
    let eps = reads::webhook_endpoints(&a.state.store, a.caller.project_id()).await?;
    let now = appliance_storage::now_us();
    Ok(json(
        StatusCode::OK,
        &Sorted(EndpointList {
            object: "list",
            data: eps.iter().map(|e| endpoint_view(e, now)).collect(),
            has_more: false,
            next_cursor: None,
            event_catalog: EVENT_CATALOG,
        }),
    ))
}

/// Register an endpoint: 201 with `secret` (shown once) and `overlap_until`. The URL must be
/// https on port 443 or 8443, carry no credentials and resolve to public addresses only
/// (400 `invalid_url`); at most 16 endpoints per project (409 `endpoint_limit_reached`).
///
/// Any key kind; scope `webhooks:write`.
#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks",
    params(crate::api::IdempotencyHeader),
    request_body(content = NewWebhookEndpoint),
    responses((status = 201, description = "The endpoint with its secret.", body = EndpointWithSecret)))]
async fn create_webhook(a: Authed<WRITE>, Post { key, body }: Post) -> Result<Response, ApiError> {
    let NewWebhookEndpoint {
        url: raw_url,
        description,
        event_types,
        delivery_mode,
    } = body.read()?;
    let idem = match a.begin(&key, "/v1/webhooks", &body).await? {
        Begin::Replay(r) => return Ok(r),
        Begin::Fresh(i) => i,
    };
    let url = checked_url(&a.state, &raw_url).await?;
    let p = a.caller.project_id();
    let req = NewEndpoint {
        url,
        description,
        event_types,
        delivery_mode,
    };
    let key = a.state.data_key.clone();
    let (resp, _) = commit(&a.state, idem, move |ctx| {
        let (ep, secret) = endpoints::create(ctx, p, &key, req)?;
        Ok((
            StatusCode::CREATED,
            with_secret(&ep, &secret, ctx.now_us()),
            (),
        ))
    })
    .await?;
    Ok(resp)
}

/// Read a webhook endpoint.
///
/// Any key kind; scope `webhooks:read`.
#[utoipa::path(get, path = "/v1/webhooks/{id}", tag = "webhooks", params(PathId),
    responses((status = 200, description = "The endpoint.", body = crate::views::EndpointView)))]
async fn get_webhook(a: Authed<READ>, id: WebhookEndpointId) -> Result<Response, ApiError> {
    a.get_by_id::<WebhookEndpoint, _, _>(id, WebhookEndpointError::NotFound, |ep| {
        endpoint_json(ep, appliance_storage::now_us())
    })
    .await
}

/// Update an endpoint: `status` (`paused` | `active`: re-enables a disabled endpoint and
/// resets `consecutive_failures`), `url`, `description`, `event_types`, `delivery_mode`.
///
/// Any key kind; scope `webhooks:write`.
#[utoipa::path(patch, path = "/v1/webhooks/{id}", tag = "webhooks", params(PathId),
    request_body = WebhookEndpointPatch,
    responses((status = 200, description = "The endpoint.", body = crate::views::EndpointView)))]
async fn patch_webhook(
    a: Authed<WRITE>,
    id: WebhookEndpointId,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let WebhookEndpointPatch {
        status,
        url,
        description,
        event_types,
        delivery_mode,
    } = body.read()?;
    let mut req = EndpointPatch {
        url: None,
        description,
        event_types,
        delivery_mode,
        status,
    };
    if let Some(u) = url {
        req.url = Some(checked_url(&a.state, &u).await?);
    }
    let p = a.caller.project_id();
    let (resp, resumed) = a
        .commit(move |ctx| {
            let (ep, resumed) = endpoints::patch(ctx, p, id, req)?;
            Ok((StatusCode::OK, endpoint_json(&ep, ctx.now_us()), resumed))
        })
        .await?;
    if resumed == Some(true) {
        a.state.webhooks.poke(Poke::Resumed(id.uuid()));
    }
    Ok(resp)
}

/// Remove an endpoint and all its deliveries; events stay.
///
/// Any key kind; scope `webhooks:write`.
#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks", params(PathId),
    responses((status = 200, description = "`{deleted: true, id}`.", body = DeletedEndpointView)))]
async fn delete_webhook(a: Authed<WRITE>, id: WebhookEndpointId) -> Result<Response, ApiError> {
    let p = a.caller.project_id();
    let (resp, more) = a
        .commit(move |ctx| {
            let more = endpoints::delete(ctx, p, id)?;
            Ok((
                StatusCode::OK,
                to_value(&DeletedEndpointView {
                    id: id.uuid(),
                    object: "webhook_endpoint",
                    deleted: true,
                }),
                more,
            ))
        })
        .await?;
    if more == Some(true) {
        dispatcher::purge(&a.state, p, id).await;
    }
    Ok(resp)
}

/// `POST /v1/webhooks/{id}/rotate_secret`.
#[derive(ToSchema)]
pub struct RotateSecret {
    /// Hours the old secret keeps signing (default 24; 0 for a leaked secret).
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 168)]
    pub overlap_hours: u64,
}

read_body!(RotateSecret {
    overlap_hours: u64_within(
        Some(DEFAULT_OVERLAP_HOURS),
        0..=MAX_OVERLAP_HOURS,
        &format!("overlap_hours must be 0 to {MAX_OVERLAP_HOURS}.")
    ),
});

/// A new signing secret; the old one also signs until `overlap_until`.
///
/// Any key kind; scope `webhooks:write`.
#[utoipa::path(post, path = "/v1/webhooks/{id}/rotate_secret", tag = "webhooks", params(PathId),
    request_body = RotateSecret,
    responses((status = 200, description = "The endpoint with its new secret.", body = EndpointWithSecret)))]
async fn rotate_secret(
    a: Authed<WRITE>,
    id: WebhookEndpointId,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let RotateSecret {
        overlap_hours: hours,
    } = body.read()?;
    let p = a.caller.project_id();
    let key = a.state.data_key.clone();
    a.write(move |ctx| {
        let (ep, secret) = endpoints::rotate(ctx, p, &key, id, hours)?;
        Ok((StatusCode::OK, with_secret(&ep, &secret, ctx.now_us()), ()))
    })
    .await
}

/// Queue one `endpoint.test` event through the real pipeline, to this endpoint only (5 per
/// minute per project).
///
/// Any key kind; scope `webhooks:write`.
#[utoipa::path(post, path = "/v1/webhooks/{id}/test", tag = "webhooks", params(PathId),
    responses((status = 202, description = "`{event_id, delivery_id}`.", body = WebhookTestView)))]
async fn test_webhook(a: Authed<WRITE>, id: WebhookEndpointId) -> Result<Response, ApiError> {
    if let Err(retry) = a.state.webhooks.check_test_rate(a.caller.project.id) {
        return Err(rate_limited(retry));
    }
    let project = a.caller.project.clone();
    let attempts = a.state.config.webhooks.max_attempts();
    // The event's commit notice brings the delivery to the dispatcher.
    a.write(move |ctx| {
        let (ev, d) = crate::services::webhook_deliveries::send_test(ctx, &project, id, attempts)?;
        let body = to_value(&WebhookTestView {
            object: "webhook_test",
            event_id: ev.id,
            delivery_id: delivery_ref(d.id),
        });
        Ok((StatusCode::ACCEPTED, body, ()))
    })
    .await
}

/// 429 `rate_limited` with `Retry-After`.
pub(crate) fn rate_limited(retry_after_s: u64) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "Too many requests of this kind; retry later.",
    )
    .retry_after(retry_after_s)
}

/// A webhook target URL ([`crate::webhooks::guard::URL_PATTERN`]).
pub struct WebhookUrlIn;

impl PartialSchema for WebhookUrlIn {
    fn schema() -> RefOr<Schema> {
        crate::services::types::schema_from_json(json!({
            "type": "string",
            "minLength": 1,
            "maxLength": crate::webhooks::guard::MAX_URL_LEN,
            "pattern": crate::webhooks::guard::URL_PATTERN,
        }))
    }
}
impl ToSchema for WebhookUrlIn {}

/// A delivery mode a request may set.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DeliveryModeIn {
    Unordered,
    Ordered,
}

/// An endpoint status a request may set.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum EndpointStatusIn {
    Active,
    Paused,
}
