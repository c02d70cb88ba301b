//! Balances (SPEC.md section 2, Balance lists; section 4, Wallets and balances).

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::KeyKind;

use crate::api::authed::{access_rules, Authed, PathId, ANY};
use crate::api::error::ApiError;
use crate::api::extract::Params;
use crate::api::json;
use crate::auth::Access;
use crate::services::balances::{self, BalanceReader, BalanceSource};
use crate::services::types::{CustomerId, WalletId};
use crate::state::AppState;
use crate::views::Sorted;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(&[KeyKind::Wallet, KeyKind::Payout], "balances:read");
}

/// An on-chain balance read (`source=chain|both`) costs this many requests of the key's
/// per-minute budget (SPEC.md section 4: "rate-limited harder").
pub const CHAIN_READ_WEIGHT: u32 = 5;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(customer_balances))
        .routes(routes!(wallet_balances))
        .routes(routes!(treasury))
}

/// A customer's balances: available, locked and total per (chain, asset).
///
/// Key: `wallet` or `payout` kind, scope `balances:read`.
#[utoipa::path(get, path = "/v1/customers/{id}/balances", tag = "wallets", params(PathId),
    responses((status = 200, description = "The customer's balances.", body = balances::CustomerBalances)))]
async fn customer_balances(a: Authed<READ>, id: CustomerId) -> Result<Response, ApiError> {
    let v = balances::customer_by_id(&a.state.store, &a.state.registry, a.caller.project_id(), id)?;
    Ok(json(StatusCode::OK, &v))
}

/// A wallet's balances; with `source=chain` or `both`, the on-chain reading and `drift`
/// (test mode: the simulated chain answers). On-chain reads cost 5 requests of the key's
/// per-minute budget; a node that cannot be reached is 503 `chain_unavailable_now`.
///
/// Key: `wallet` or `payout` kind, scope `balances:read`.
#[utoipa::path(get, path = "/v1/wallets/{id}/balances", tag = "wallets",
    params(PathId,
        ("source" = Option<BalanceSourceIn>, Query, description = "`ledger` (default), `chain` or `both`."),
    ),
    responses(
        (status = 200, description = "The wallet's balances.", body = balances::WalletBalances),
        (status = 503, description = "`chain_unavailable_now`: the node cannot be reached; retry later.", body = crate::api::error::ErrorBody),
    ))]
async fn wallet_balances(a: Authed<READ>, id: WalletId, q: Params) -> Result<Response, ApiError> {
    let source = q
        .one_of("source", &["ledger", "chain", "both"])?
        .and_then(|s| BalanceSource::parse(&s))
        .unwrap_or(BalanceSource::Ledger);
    if source != BalanceSource::Ledger {
        a.state
            .limits
            .check_key_extra(
                a.caller.key.id,
                a.caller.project.settings.requests_per_minute,
                CHAIN_READ_WEIGHT,
            )
            .map_err(|retry| {
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    "Too many on-chain balance reads; retry later.",
                )
                .retry_after(retry)
            })?;
    }
    let reader = BalanceReader {
        store: &a.state.store,
        reg: &a.state.registry,
        sim: &a.state.sim,
    };
    let v = reader
        .wallet(a.caller.project_id(), a.caller.livemode(), id, source)
        .await?;
    Ok(json(StatusCode::OK, &v))
}

/// The project's treasury report per (chain, asset).
///
/// Any key kind; no scope.
#[utoipa::path(get, path = "/v1/balances", tag = "wallets",
    responses((status = 200, description = "The treasury.", body = crate::views::TreasuryView)))]
async fn treasury(a: Authed<ANY>) -> Result<Response, ApiError> {
    let v = balances::treasury_of(&a.state.store, &a.state.registry, a.caller.project_id()).await?;
    Ok(json(StatusCode::OK, &Sorted(v)))
}

/// Which balances `GET /v1/wallets/{id}/balances` reports.
#[derive(ToSchema)]
#[schema(as = BalanceSource, rename_all = "snake_case")]
pub enum BalanceSourceIn {
    Ledger,
    Chain,
    Both,
}
