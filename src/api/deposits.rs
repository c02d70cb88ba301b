//! Deposits (SPEC.md section 4, Deposits).

use axum::response::Response;
use chrono::DateTime;

use appliance_storage::records::{DepositStatus, KeyKind};

use crate::api::authed::{access_rules, Authed, PathId};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::Params;
use crate::api::PageAnswer;
use crate::auth::Access;
use crate::services::reads;
use crate::services::types::{CustomerId, DepositId, WalletId};
use crate::state::AppState;
use crate::views;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(&[KeyKind::Wallet], "deposits:read");
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_deposits))
        .routes(routes!(get_deposit))
}

/// List deposits, newest first.
///
/// Key: `wallet` kind, scope `deposits:read`.
#[utoipa::path(get, path = "/v1/deposits", tag = "deposits",
    params(crate::api::extract::PageParams,
        ("customer_id" = Option<uuid::Uuid>, Query, description = "Only this customer's deposits."),
        ("wallet_id" = Option<uuid::Uuid>, Query, description = "Only deposits to this wallet."),
        ("chain" = Option<String>, Query, description = "Only deposits on this chain."),
        ("status" = Option<DepositStatusIn>, Query, description = "Only deposits in this status."),
        ("since" = Option<String>, Query, format = DateTime, description = "Only deposits created at or after this time (RFC 3339)."),
    ),
    responses((status = 200, description = "A page of deposits.", body = DepositList)))]
async fn list_deposits(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let p = a.caller.project_id();
    let customer = q.uuid("customer_id")?.map(CustomerId::from);
    let wallet = q.uuid("wallet_id")?.map(WalletId::from);
    let chain = q.get("chain").map(str::to_string);
    let status = q.status::<DepositStatus>()?;
    let since = q
        .get("since")
        .map(|s| {
            DateTime::parse_from_rfc3339(s)
                .map(|d| d.timestamp_micros())
                .map_err(|_| ApiError::invalid("since", "since must be an RFC 3339 timestamp."))
        })
        .transpose()?;
    let query = reads::DepositQuery {
        customer,
        wallet,
        chain,
        status,
        since,
    };
    let rows = reads::deposits(&a.state.store, p, query, page.rows()?).await?;
    Ok(rows.answer(|d| views::deposit_view(&a.state.registry, d)))
}

/// Read a deposit.
///
/// Key: `wallet` kind, scope `deposits:read`.
#[utoipa::path(get, path = "/v1/deposits/{id}", tag = "deposits", params(PathId),
    responses((status = 200, description = "The deposit.", body = crate::views::DepositView)))]
async fn get_deposit(a: Authed<READ>, id: DepositId) -> Result<Response, ApiError> {
    match reads::deposit(&a.state.store, a.caller.project_id(), id)? {
        Some(d) => Ok(crate::api::json(
            axum::http::StatusCode::OK,
            &views::deposit_view(&a.state.registry, &d),
        )),
        None => Err(ApiError::not_found("deposit")),
    }
}

list_schema! {
    DepositList => crate::views::DepositView<'static>;
}

/// A deposit status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum DepositStatusIn {
    Detected,
    Confirmed,
    Failed,
    Orphaned,
}
