//! Sweeps (SPEC.md section 4, Sweeps).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{KeyKind, Sweep, SweepStatus, Wallet};
use appliance_storage::ReadOps;

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, JsonBody, Params};
use crate::api::schemas;
use crate::api::{get_by_id, list_rows, mutate, scope, IdempotencyKey, Listed};
use crate::auth::{Access, Caller};
use crate::services::{deposits, sweeps};
use crate::state::AppState;
use crate::views;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const READ: Access = Access::new(&[KeyKind::Wallet], "sweeps:read");
const CREATE: Access = Access::new(&[KeyKind::Wallet], "sweeps:create").signing();

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_sweeps, create_sweep))
        .routes(routes!(get_sweep))
}

/// Sweep a deposit address into the master wallet now. Customer balances do not change.
///
/// Key: `wallet` kind, scope `sweeps:create`, signing enabled for the service, project and key.
#[utoipa::path(post, path = "/v1/sweeps", tag = "sweeps",
    params(schemas::IdempotencyHeader),
    request_body = schemas::NewSweep,
    responses(
        (status = 201, description = "The sweep (possibly `skipped` with `skip_reason`).", body = crate::views::SweepView),
        (status = 404, description = "`not_found`: no such wallet (`param: wallet_id`).", body = schemas::ErrorBody),
        (status = 422, description = "Refused by the chain or an availability rule.", body = schemas::ErrorBody),
    ))]
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

/// List sweeps, newest first.
///
/// Key: `wallet` kind, scope `sweeps:read`.
#[utoipa::path(get, path = "/v1/sweeps", tag = "sweeps",
    params(schemas::PageParams,
        ("wallet_id" = Option<uuid::Uuid>, Query, description = "Only sweeps of this wallet."),
        ("status" = Option<schemas::SweepStatusIn>, Query, description = "Only sweeps in this status."),
    ),
    responses((status = 200, description = "A page of sweeps.", body = schemas::SweepList)))]
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
    // A wallet's sweeps are indexed under its customer (schema 9): the wallet is read
    // first; one of another project, or none, lists nothing.
    let owner = match wallet {
        Some(w) => match state.store.read_now(move |r| r.get_in::<Wallet>(p, w))? {
            Some(row) => Some(row.customer_id),
            None => {
                let reg = state.registry.clone();
                let none = Listed::<Sweep> {
                    items: Vec::new(),
                    has_more: false,
                };
                return Ok(none.answer(|s| views::sweep(&reg, s)));
            }
        },
        None => None,
    };
    let prefix = match (wallet, status) {
        (Some(w), _) => index::sweeps_of_wallet(p, owner.unwrap_or_default(), w),
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

/// Read a sweep.
///
/// Key: `wallet` kind, scope `sweeps:read`.
#[utoipa::path(get, path = "/v1/sweeps/{id}", tag = "sweeps", params(schemas::IdPath),
    responses((status = 200, description = "The sweep.", body = crate::views::SweepView)))]
async fn get_sweep(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let id = path_uuid(&id)?;
    get_by_id::<Sweep, _, _>(&state, &caller, id, ApiError::not_found("sweep"), |s| {
        views::sweep(&state.registry, s)
    })
    .await
}
