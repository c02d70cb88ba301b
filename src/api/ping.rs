//! `GET /v1/ping`.

use axum::http::StatusCode;
use axum::response::Response;

use appliance_chains::ChainStatus;

use crate::api::authed::{Authed, ANY};
use crate::api::error::ApiError;
use crate::api::json;
use crate::services::chains::effective;
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(ping))
}

// Written straight to the body; fields in byte order of their names, as a
// `serde_json::Value` keeps them.
/// Who am I (`object: ping`).
#[derive(serde::Serialize, utoipa::ToSchema)]
struct Ping<'a> {
    enabled_chains: Vec<&'a str>,
    /// `live` or `test`.
    env: &'static str,
    key_id: &'a str,
    /// `checkout`, `payout` or `wallet`.
    kind: &'static str,
    /// `mainnet` or `testnet`.
    network: &'static str,
    #[schema(pattern = "^ping$")]
    object: &'static str,
    scopes: &'a [String],
    /// Any of `service`, `project`, `key`.
    signing_blocked_by: &'a [&'static str],
    signing_enabled: bool,
    tenant_id: uuid::Uuid,
    tenant_slug: &'a str,
}

/// Who am I: the key's project, kind, scopes and signing state (SPEC.md section 2, Ping).
///
/// Any key kind; no scope.
#[utoipa::path(get, path = "/v1/ping", tag = "meta",
    responses((status = 200, description = "The caller's key and project.", body = Ping)))]
async fn ping(a: Authed<ANY>) -> Result<Response, ApiError> {
    let reg = a.state.registry.clone();
    let enabled: Vec<&str> = reg
        .chains
        .iter()
        .map(|c| effective(c, &a.caller.project))
        .filter(|e| e.listed && e.status == ChainStatus::Live)
        .map(|e| e.chain.id())
        .collect();
    let blocked = a.caller.signing_blocked_by();
    Ok(json(
        StatusCode::OK,
        &Ping {
            enabled_chains: enabled,
            env: a.caller.project.mode.as_str(),
            key_id: &a.caller.key.key_id,
            kind: a.caller.key.kind.as_str(),
            network: if a.caller.livemode() {
                "mainnet"
            } else {
                "testnet"
            },
            object: "ping",
            scopes: &a.caller.key.scopes,
            signing_enabled: blocked.is_empty(),
            signing_blocked_by: &blocked,
            tenant_id: a.caller.project.id,
            tenant_slug: &a.caller.project.name,
        },
    ))
}
