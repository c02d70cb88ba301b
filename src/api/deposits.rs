//! Deposits (SPEC.md section 4, Deposits).

use axum::extract::{Path, State};
use axum::response::Response;
use chrono::DateTime;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Deposit, DepositStatus, KeyKind, Wallet};

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, Params};
use crate::api::schemas;
use crate::api::{list_page, Listed};
use crate::auth::{Access, Caller};
use crate::state::AppState;
use crate::views;
use appliance_storage::ReadOps;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const READ: Access = Access::new(&[KeyKind::Wallet], "deposits:read");

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_deposits))
        .routes(routes!(get_deposit))
}

/// List deposits, newest first.
///
/// Key: `wallet` kind, scope `deposits:read`.
#[utoipa::path(get, path = "/v1/deposits", tag = "deposits",
    params(schemas::PageParams,
        ("customer_id" = Option<uuid::Uuid>, Query, description = "Only this customer's deposits."),
        ("wallet_id" = Option<uuid::Uuid>, Query, description = "Only deposits to this wallet."),
        ("chain" = Option<String>, Query, description = "Only deposits on this chain."),
        ("status" = Option<schemas::DepositStatusIn>, Query, description = "Only deposits in this status."),
        ("since" = Option<String>, Query, format = DateTime, description = "Only deposits created at or after this time (RFC 3339)."),
    ),
    responses((status = 200, description = "A page of deposits.", body = schemas::DepositList)))]
async fn list_deposits(
    State(state): State<AppState>,
    caller: Caller,
    q: Params,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let page = q.page()?;
    let p = caller.project_id();
    let customer = q.uuid("customer_id")?;
    let wallet = q.uuid("wallet_id")?;
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
    // A customer's deposits to a wallet are listed from the customer's index (schema 6:
    // no index of deposits by wallet; a wallet is its customer's only one on its chain):
    // the wallet's customer, read first, then the `wallet_id` filter below. A wallet of
    // another project, or none, lists nothing.
    let wallet_owner = match wallet {
        Some(w) => {
            let Some(row) = state.store.read_now(move |r| r.get_in::<Wallet>(p, w))? else {
                let none = Listed::<Deposit> {
                    items: Vec::new(),
                    has_more: false,
                };
                return Ok(none.answer(|d| views::deposit_view(&state.registry, d)));
            };
            Some(row.customer_id)
        }
        None => None,
    };
    let prefix = if let Some(c) = wallet_owner.or(customer) {
        index::deposits_of_customer(p, c)
    } else if let Some(s) = status {
        index::prefix(IndexTag::DepositsByStatus, p, &[s.as_str().as_bytes()])
    } else if let Some(c) = &chain {
        index::prefix(IndexTag::DepositsByChain, p, &[c.as_bytes()])
    } else {
        index::prefix(IndexTag::Deposits, p, &[])
    };
    let rows = list_page(&state, prefix, page, move |d: &Deposit| {
        customer.is_none_or(|c| d.customer_id == c)
            && wallet.is_none_or(|w| d.wallet_id == w)
            && chain.as_ref().is_none_or(|c| &d.chain == c)
            && status.is_none_or(|s| d.status == s)
            && since.is_none_or(|t| d.created_at >= t)
    })
    .await?;
    Ok(rows.answer(|d| views::deposit_view(&state.registry, d)))
}

/// Read a deposit.
///
/// Key: `wallet` kind, scope `deposits:read`.
#[utoipa::path(get, path = "/v1/deposits/{id}", tag = "deposits", params(schemas::IdPath),
    responses((status = 200, description = "The deposit.", body = crate::views::DepositView)))]
async fn get_deposit(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let id = path_uuid(&id)?;
    let p = caller.project_id();
    // An invoice payment is the invoice's (docs/decisions.md, Invoices), a funding transfer
    // billing's (docs/decisions.md, Billing): not deposits here.
    match state
        .store
        .read_now(move |r| r.get_in::<Deposit>(p, id))?
        .filter(|d| d.invoice_id.is_none() && !d.funding)
    {
        Some(d) => Ok(crate::api::json(
            axum::http::StatusCode::OK,
            &views::deposit_view(&state.registry, &d),
        )),
        None => Err(ApiError::not_found("deposit")),
    }
}
