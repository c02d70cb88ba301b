//! `GET /v1/ping`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use appliance_chains::ChainStatus;

use crate::api::error::ApiError;
use crate::api::json;
use crate::api::schemas;
use crate::auth::{Access, Caller};
use crate::services::chains::effective;
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(ping))
}

/// Who am I: the key's project, kind, scopes and signing state (SPEC.md section 2, Ping).
///
/// Any key kind; no scope.
#[utoipa::path(get, path = "/v1/ping", tag = "meta",
    responses((status = 200, description = "The caller's key and project.", body = schemas::Ping)))]
async fn ping(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Access::any())?;
    let reg = state.registry.clone();
    let enabled: Vec<&str> = reg
        .chains
        .iter()
        .map(|c| effective(c, &caller.project))
        .filter(|e| e.listed && e.status == ChainStatus::Live)
        .map(|e| e.chain.id())
        .collect();
    let blocked = caller.signing_blocked_by();
    Ok(json(
        StatusCode::OK,
        &json!({
            "object": "ping",
            "tenant_id": caller.project.id,
            "tenant_slug": caller.project.name,
            "key_id": caller.key.key_id,
            "env": caller.project.mode.as_str(),
            "kind": caller.key.kind.as_str(),
            "scopes": caller.key.scopes,
            "signing_enabled": blocked.is_empty(),
            "signing_blocked_by": blocked,
            "network": if caller.livemode() { "mainnet" } else { "testnet" },
            "enabled_chains": enabled,
        }),
    ))
}
