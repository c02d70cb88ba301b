//! Events (SPEC.md section 4, Events; DECISIONS.md section 3).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use appliance_storage::ReadOps;

use crate::api::error::ApiError;
use crate::api::extract::{cursor_of, list_json, Params};
use crate::api::json;
use crate::auth::{Access, Caller, ANY_KIND};
use crate::state::AppState;
use crate::views;

const READ: Access = Access::new(ANY_KIND, "events:read");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/events", get(list_events))
        .route("/v1/events/{id}", get(get_event))
}

/// `GET /v1/events` — by `sequence`, newest first (`order=asc` for oldest first); filters
/// `type` (repeatable) and `resource_id`.
async fn list_events(
    State(state): State<AppState>,
    caller: Caller,
    q: Params,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let page = q.page()?;
    let cursor = page.cursor_seq()?;
    let ascending = q.one_of("order", &["asc", "desc"])?.as_deref() == Some("asc");
    let types = q.all("type");
    let resource = q.get("resource_id").map(str::to_string);
    let p = caller.project_id();
    let limit = page.limit;
    let rows = state
        .store
        .read(move |r| r.list_events(p, &types, resource.as_deref(), cursor, limit, ascending))
        .await?;
    let next = rows
        .items
        .last()
        .map(|e| cursor_of(&e.sequence.to_be_bytes()));
    let data = rows.items.iter().map(views::event).collect();
    Ok(json(StatusCode::OK, &list_json(data, rows.has_more, next)))
}

/// `GET /v1/events/{id}` — `{id}` is `evt_...`.
async fn get_event(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let p = caller.project_id();
    let e = state
        .store
        .read(move |r| r.event(p, &id))
        .await?
        .ok_or_else(|| ApiError::not_found("event"))?;
    Ok(json(StatusCode::OK, &views::event(&e)))
}
