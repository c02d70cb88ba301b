//! Balances (SPEC.md section 2, Balance lists; section 4, Wallets and balances).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::{Customer, KeyKind, Wallet};
use appliance_storage::ReadOps;

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, Params};
use crate::api::json;
use crate::api::schemas;
use crate::auth::{Access, Caller};
use crate::services::balances;
use crate::state::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const READ: Access = Access::new(&[KeyKind::Wallet, KeyKind::Payout], "balances:read");

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
#[utoipa::path(get, path = "/v1/customers/{id}/balances", tag = "wallets", params(schemas::IdPath),
    responses((status = 200, description = "The customer's balances.", body = balances::CustomerBalances)))]
async fn customer_balances(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let id = path_uuid(&id)?;
    let p = caller.project_id();
    let reg = state.registry.clone();
    let v = state
        .store
        .read_now(move |r| {
            if r.get_in::<Customer>(p, id)?.is_none() {
                return Ok(None);
            }
            balances::customer(r, &reg, p, id).map(Some)
        })?
        .ok_or_else(|| ApiError::not_found("customer"))?;
    Ok(json(StatusCode::OK, &v))
}

/// A wallet's balances; with `source=chain` or `both`, the on-chain reading and `drift`
/// (test mode: the simulated chain answers). On-chain reads cost 5 requests of the key's
/// per-minute budget; a node that cannot be reached is 503 `chain_unavailable_now`.
///
/// Key: `wallet` or `payout` kind, scope `balances:read`.
#[utoipa::path(get, path = "/v1/wallets/{id}/balances", tag = "wallets",
    params(schemas::IdPath,
        ("source" = Option<schemas::BalanceSource>, Query, description = "`ledger` (default), `chain` or `both`."),
    ),
    responses(
        (status = 200, description = "The wallet's balances.", body = balances::WalletBalances),
        (status = 503, description = "`chain_unavailable_now`: the node cannot be reached; retry later.", body = schemas::ErrorBody),
    ))]
async fn wallet_balances(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    q: Params,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let id = path_uuid(&id)?;
    let source = q
        .one_of("source", &["ledger", "chain", "both"])?
        .unwrap_or_else(|| "ledger".into());
    if source != "ledger" {
        state
            .limits
            .check_key_extra(
                caller.key.id,
                caller.project.settings.requests_per_minute,
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
    let p = caller.project_id();
    let reg = state.registry.clone();
    // Live: read the node first (outside the store snapshot), then report against the ledger.
    let mut live: Option<std::collections::BTreeMap<String, u128>> = None;
    if source != "ledger" && !caller.livemode() {
        // Test mode: the project's own simulated chain (issue 8), for EVM chains.
        let w = state
            .store
            .read(move |r| r.get_in::<Wallet>(p, id))
            .await?
            .ok_or_else(|| ApiError::not_found("wallet"))?;
        if reg.chain(&w.chain).is_some_and(|c| c.is_evm()) {
            let h = state.sim.get(&state.store, &reg, p, &w.chain).await?;
            let read = balances::onchain_via(&h.client, &reg, &w.chain, &w.address).await;
            live = Some(read.map_err(|e| ApiError::internal(&e))?);
        }
    }
    if source != "ledger" && caller.livemode() {
        let w = state
            .store
            .read(move |r| r.get_in::<Wallet>(p, id))
            .await?
            .ok_or_else(|| ApiError::not_found("wallet"))?;
        let read = balances::onchain(&reg, &w.chain, &w.address).await;
        let reg_chain = w.chain.clone();
        live = Some(read.map_err(|e| {
            // DECISIONS.md section 16: a chain READ with the node down is retryable.
            tracing::warn!(chain = %reg_chain, error = %crate::workers::chain::clean(&e), "on-chain balance read failed");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "chain_unavailable_now",
                "The chain's node cannot be reached now; retry later.",
            )
            .retry_after(5)
        })?);
    }
    let v = state
        .store
        .read(move |r| {
            let Some(w) = r.get_in::<Wallet>(p, id)? else {
                return Ok(None);
            };
            balances::wallet(r, &reg, &w, &source, |asset| match &live {
                Some(m) => Ok(m.get(asset).copied().unwrap_or(0)),
                None => r.sim_balance(&w.chain, &w.address, asset),
            })
            .map(Some)
        })
        .await?
        .ok_or_else(|| ApiError::not_found("wallet"))?;
    Ok(json(StatusCode::OK, &v))
}

/// The project's treasury report per (chain, asset).
///
/// Any key kind; no scope.
#[utoipa::path(get, path = "/v1/balances", tag = "wallets",
    responses((status = 200, description = "The treasury.", body = schemas::Treasury)))]
async fn treasury(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Access::any())?;
    let p = caller.project_id();
    let reg = state.registry.clone();
    let v = state
        .store
        .read(move |r| balances::treasury(r, &reg, p))
        .await?;
    Ok(json(StatusCode::OK, &v))
}
