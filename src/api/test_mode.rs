//! `/v1/test/*`: the simulated chain (SPEC.md section 4, Test mode). Test wallet keys
//! only; anything else is 403 `test_mode_only`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use appliance_storage::records::{KeyKind, Mode};

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, JsonBody};
use crate::api::schemas;
use crate::api::{commit, json as json_response, mutate, scope, IdempotencyKey};
use crate::auth::{Access, Caller};
use crate::services::deposits::{self, TestDeposit};
use crate::services::sim_chain;
use crate::services::Scope;
use crate::state::AppState;
use crate::views;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const ACCESS: Access = Access::new(&[KeyKind::Wallet], "wallets:create");

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_test_deposit))
        .routes(routes!(confirm_test_deposit))
        .routes(routes!(fail_test_deposit))
        .routes(routes!(orphan_test_deposit))
        .routes(routes!(mine_blocks))
}

fn check(caller: &Caller) -> Result<(), ApiError> {
    if caller.project.mode != Mode::Test || caller.key.kind != KeyKind::Wallet {
        return Err(ApiError::forbidden(
            "test_mode_only",
            "Only test-mode wallet keys can use /v1/test endpoints.",
        ));
    }
    Ok(caller.require(ACCESS)?)
}

/// Simulate a transfer to the customer's address; with `confirm` (default true) it is
/// credited at once (`deposit.detected`, then `deposit.confirmed`).
///
/// Key: test-mode `wallet` kind (else 403 `test_mode_only`), scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/deposits", tag = "test",
    params(schemas::IdempotencyHeader),
    request_body(content = schemas::NewTestDeposit),
    responses(
        (status = 201, description = "The deposit.", body = schemas::Deposit),
        (status = 400, description = "`invalid_request`, `decimals_mismatch`, `unknown_asset`.", body = schemas::ErrorBody),
        (status = 404, description = "`not_found`: no such customer (`param: customer_id`).", body = schemas::ErrorBody),
        (status = 422, description = "No deposit address on that chain, or refused by the chain.", body = schemas::ErrorBody),
    ))]
async fn create_test_deposit(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody,
) -> Result<Response, ApiError> {
    check(&caller)?;
    let f = &body.fields;
    let req = TestDeposit {
        customer_id: f.req_uuid("customer_id")?,
        chain: f.req_chain("chain")?,
        asset: f.req_asset("asset")?,
        decimals: f.req_u64("decimals")?,
        amount: f.req_amount("amount")?,
        confirm: f.opt_bool("confirm")?.unwrap_or(true),
    };
    let s = scope(&state, &caller);
    let (resp, _) = mutate(
        &state,
        &caller,
        &key,
        "/v1/test/deposits",
        &body.fingerprint,
        move |ctx| {
            let d = deposits::create_test(ctx, &s, req)?;
            Ok((StatusCode::CREATED, views::deposit(&s.reg, &d), ()))
        },
    )
    .await?;
    Ok(resp)
}

async fn transition(
    state: AppState,
    caller: Caller,
    id: String,
    f: fn(
        &mut appliance_storage::WriteCtx<'_>,
        &Scope,
        uuid::Uuid,
    ) -> Result<appliance_storage::records::Deposit, deposits::DepositError>,
) -> Result<Response, ApiError> {
    check(&caller)?;
    let id = path_uuid(&id)?;
    let s = scope(&state, &caller);
    let (resp, _) = commit(&state, None, move |ctx| {
        let d = f(ctx, &s, id)?;
        Ok((StatusCode::OK, views::deposit(&s.reg, &d), ()))
    })
    .await?;
    Ok(resp)
}

/// `detected` -> `confirmed`: the deposit is credited (`deposit.confirmed`); 409
/// `invalid_state` from another status.
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/deposits/{id}/confirm", tag = "test", params(schemas::IdPath),
    responses((status = 200, description = "The deposit.", body = schemas::Deposit)))]
async fn confirm_test_deposit(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    transition(state, caller, id, deposits::confirm).await
}

/// `detected` -> `failed` (`deposit.failed`); 409 `invalid_state` from another status.
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/deposits/{id}/fail", tag = "test", params(schemas::IdPath),
    responses((status = 200, description = "The deposit.", body = schemas::Deposit)))]
async fn fail_test_deposit(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    transition(state, caller, id, deposits::fail).await
}

/// `confirmed` -> `orphaned`: the credit is reversed (`deposit.orphaned`); 409
/// `invalid_state` from another status.
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/deposits/{id}/orphan", tag = "test", params(schemas::IdPath),
    responses((status = 200, description = "The deposit.", body = schemas::Deposit)))]
async fn orphan_test_deposit(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    transition(state, caller, id, deposits::orphan).await
}

/// Mine `count` blocks on `chain` (default: every simulated EVM chain) and advance deposits,
/// sweeps and payouts accordingly.
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/blocks", tag = "test",
    request_body = schemas::MineBlocks,
    responses((status = 200, description = "Heights after mining.", body = schemas::TestBlocks)))]
async fn mine_blocks(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    check(&caller)?;
    let count = body.fields.opt_u64("count")?.unwrap_or(1);
    if !(1..=sim_chain::MAX_BLOCKS).contains(&count) {
        return Err(ApiError::invalid(
            "count",
            format!("count must be from 1 to {}.", sim_chain::MAX_BLOCKS),
        ));
    }
    let chain = body.fields.opt_str("chain")?;
    let reg = state.registry.clone();
    if let Some(c) = &chain {
        if !reg.chain(c).is_some_and(|c| c.is_evm()) {
            return Err(ApiError::invalid(
                "chain",
                format!("{c:?} is not a simulated chain."),
            ));
        }
    }
    let heights = sim_chain::mine(
        &state.store,
        reg,
        state.config.webhooks.max_attempts(),
        chain,
        count,
    )
    .await?;
    for (c, h) in &heights {
        crate::ops::metrics::chain_position(c, "test", *h, *h);
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"object": "test_blocks", "mined": count, "heights": heights}),
    ))
}
