//! Sweeps (SPEC.md section 4, Sweeps).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{KeyKind, Sweep, SweepStatus};

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, JsonBody, Params};
use crate::api::{get_by_id, list_rows, mutate, scope, IdempotencyKey};
use crate::auth::{Access, Caller};
use crate::services::{deposits, sweeps};
use crate::state::AppState;
use crate::views;

const READ: Access = Access::new(&[KeyKind::Wallet], "sweeps:read");
const CREATE: Access = Access::new(&[KeyKind::Wallet], "sweeps:create").signing();

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sweeps", get(list_sweeps).post(create_sweep))
        .route("/v1/sweeps/{id}", get(get_sweep))
}

/// `POST /v1/sweeps` — sweep a deposit address now (`wallet_id`, optional `asset`); needs
/// `sweeps:create` and signing at all three levels.
async fn create_sweep(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require(CREATE)?;
    let wallet_id = body.fields.req_uuid("wallet_id")?;
    let asset = body.fields.opt_asset("asset")?;
    let s = scope(&state, &caller);
    let (resp, _) = mutate(
        &state,
        &caller,
        &key,
        "/v1/sweeps",
        &body.fingerprint,
        move |ctx| {
            let sw = sweeps::request(ctx, &s, wallet_id, asset, |c, chain| {
                deposits::sim_height(c, chain)
            })?;
            Ok((StatusCode::CREATED, views::sweep(&s.reg, &sw), ()))
        },
    )
    .await?;
    Ok(resp)
}

/// `GET /v1/sweeps` — filters `wallet_id`, `status`.
async fn list_sweeps(
    State(state): State<AppState>,
    caller: Caller,
    q: Params,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let page = q.page()?;
    let p = caller.project_id();
    let wallet = q.uuid("wallet_id")?;
    let status = q.status::<SweepStatus>()?;
    let prefix = match (wallet, status) {
        (Some(w), _) => index::prefix(IndexTag::SweepsByWallet, p, &[w.as_bytes()]),
        (None, Some(s)) => index::prefix(IndexTag::SweepsByStatus, p, &[s.as_str().as_bytes()]),
        (None, None) => index::prefix(IndexTag::Sweeps, p, &[]),
    };
    let reg = state.registry.clone();
    list_rows(
        &state,
        prefix,
        page,
        move |s: &Sweep| status.is_none_or(|st| s.status == st),
        move |s| views::sweep(&reg, s),
    )
    .await
}

/// `GET /v1/sweeps/{id}`.
async fn get_sweep(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let id = path_uuid(&id)?;
    get_by_id::<Sweep, _>(&state, &caller, id, ApiError::not_found("sweep"), |s| {
        views::sweep(&state.registry, s)
    })
    .await
}
