//! Sweeps (SPEC.md section 4, Sweeps).

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::{KeyKind, Sweep, SweepStatus};

use crate::api::authed::{access_rules, Authed, PathId, Post};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::{read_body, Params};
use crate::api::PageAnswer;
use crate::auth::Access;
use crate::services::reads;
use crate::services::types::{AssetSymbol, SweepId, WalletId};
use crate::services::{deposits, sweeps};
use crate::state::AppState;
use crate::views;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(&[KeyKind::Wallet], "sweeps:read");
    CREATE = Access::new(&[KeyKind::Wallet], "sweeps:create").signing();
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_sweeps, create_sweep))
        .routes(routes!(get_sweep))
}

/// `POST /v1/sweeps`.
#[derive(ToSchema)]
pub struct NewSweep {
    #[schema(value_type = Uuid)]
    pub wallet_id: WalletId,
    /// Sweep only this asset (default: every asset with a balance).
    #[schema(value_type = Option<String>, min_length = 1)]
    pub asset: Option<AssetSymbol>,
}

read_body!(NewSweep {
    wallet_id: req_id,
    asset: opt_asset,
});

/// Sweep a deposit address into the master wallet now. Customer balances do not change.
///
/// Key: `wallet` kind, scope `sweeps:create`, signing enabled for the service, project and key.
#[utoipa::path(post, path = "/v1/sweeps", tag = "sweeps",
    params(crate::api::IdempotencyHeader),
    request_body = NewSweep,
    responses(
        (status = 201, description = "The sweep (possibly `skipped` with `skip_reason`).", body = crate::views::SweepView),
        (status = 404, description = "`not_found`: no such wallet (`param: wallet_id`).", body = crate::api::error::ErrorBody),
        (status = 422, description = "Refused by the chain or an availability rule.", body = crate::api::error::ErrorBody),
    ))]
async fn create_sweep(a: Authed<CREATE>, Post { key, body }: Post) -> Result<Response, ApiError> {
    let NewSweep { wallet_id, asset } = body.read()?;
    let s = a.scope();
    a.post(&key, "/v1/sweeps", &body, move |ctx| {
        let sw = sweeps::request(ctx, &s, wallet_id, asset, |c, chain| {
            deposits::sim_height(c, chain)
        })?;
        Ok((StatusCode::CREATED, views::sweep(&s.reg, &sw), ()))
    })
    .await
}

/// List sweeps, newest first.
///
/// Key: `wallet` kind, scope `sweeps:read`.
#[utoipa::path(get, path = "/v1/sweeps", tag = "sweeps",
    params(crate::api::extract::PageParams,
        ("wallet_id" = Option<uuid::Uuid>, Query, description = "Only sweeps of this wallet."),
        ("status" = Option<SweepStatusIn>, Query, description = "Only sweeps in this status."),
    ),
    responses((status = 200, description = "A page of sweeps.", body = SweepList)))]
async fn list_sweeps(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let p = a.caller.project_id();
    let wallet = q.uuid("wallet_id")?.map(WalletId::from);
    let status = q.status::<SweepStatus>()?;
    let rows = reads::sweeps(&a.state.store, p, wallet, status, page.rows()?).await?;
    Ok(rows.answer(|s| views::sweep(&a.state.registry, s)))
}

/// Read a sweep.
///
/// Key: `wallet` kind, scope `sweeps:read`.
#[utoipa::path(get, path = "/v1/sweeps/{id}", tag = "sweeps", params(PathId),
    responses((status = 200, description = "The sweep.", body = crate::views::SweepView)))]
async fn get_sweep(a: Authed<READ>, id: SweepId) -> Result<Response, ApiError> {
    a.get_by_id::<Sweep, _, _>(id, ApiError::not_found("sweep"), |s| {
        views::sweep(&a.state.registry, s)
    })
    .await
}

list_schema! {
    SweepList => crate::views::SweepView<'static>;
}

/// A sweep status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum SweepStatusIn {
    Open,
    Submitted,
    Confirmed,
    Failed,
    Skipped,
}
