//! Events (SPEC.md section 4, Events; DECISIONS.md section 3).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;

use crate::api::authed::{access_rules, Authed};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::{cursor_of, list_json, Params};
use crate::api::json;
use crate::auth::{Access, ANY_KIND};
use crate::services::reads;
use crate::state::AppState;
use crate::views;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(ANY_KIND, "events:read");
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_events))
        .routes(routes!(get_event))
}

/// The event log by `sequence`, newest first (`order=asc` for oldest first).
///
/// Any key kind; scope `events:read`.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 100, description = "Page size, 1-100 (default 25)."),
        ("cursor" = Option<String>, Query, pattern = "^([A-Za-z0-9_-]{10}[AEIMQUYcgkosw048])?$", description = "The previous page's `next_cursor`."),
        ("type" = Option<Vec<String>>, Query, explode = true, description = "Only events of these types (repeatable)."),
        ("resource_id" = Option<String>, Query, description = "Only events about this resource."),
        ("order" = Option<EventOrder>, Query, description = "`desc` (default) or `asc`."),
    ),
    responses((status = 200, description = "A page of events.", body = EventList)))]
async fn list_events(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let cursor = page.cursor_seq()?;
    let ascending = q.one_of("order", &["asc", "desc"])?.as_deref() == Some("asc");
    let types = q.all("type");
    let resource = q.get("resource_id").map(str::to_string);
    let query = reads::EventQuery {
        types,
        resource,
        after: cursor,
        ascending,
    };
    let rows = reads::events(&a.state.store, a.caller.project_id(), query, page.limit).await?;
    let next = rows
        .items
        .last()
        .map(|e| cursor_of(&e.sequence.to_be_bytes()));
    let reg = &a.state.registry;
    let data = rows.items.iter().map(|e| views::event(reg, e)).collect();
    Ok(json(StatusCode::OK, &list_json(data, rows.has_more, next)))
}

/// Read an event.
///
/// Any key kind; scope `events:read`.
#[utoipa::path(get, path = "/v1/events/{id}", tag = "events",
    params(("id" = String, Path, description = "`evt_` + ULID.")),
    responses((status = 200, description = "The event.", body = crate::views::EventView)))]
async fn get_event(a: Authed<READ>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let e = reads::event(&a.state.store, a.caller.project_id(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("event"))?;
    Ok(json(StatusCode::OK, &views::event(&a.state.registry, &e)))
}

list_schema! {
    EventList => crate::views::EventView<'static>;
}

/// Order of `GET /v1/events`.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum EventOrder {
    Asc,
    Desc,
}
