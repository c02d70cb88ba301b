//! Payouts (SPEC.md section 4, Payouts; DECISIONS.md sections 4 and 5).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{KeyKind, Payout, PayoutStatus};

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, JsonBody, Params};
use crate::api::{commit, get_by_id, list_rows, mutate, scope, IdempotencyKey};
use crate::auth::{Access, Caller};
use crate::services::payouts::{self, NewPayout};
use crate::state::AppState;
use crate::views;

const READ: Access = Access::new(&[KeyKind::Payout, KeyKind::Wallet], "payouts:read");
const CREATE: Access = Access::new(&[KeyKind::Payout], "payouts:create").signing();
const CANCEL: Access = Access::new(&[KeyKind::Payout], "payouts:create");
const APPROVE: Access = Access::new(&[KeyKind::Payout], "payouts:approve");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/payouts", get(list_payouts).post(create_payout))
        .route("/v1/payouts/{id}", get(get_payout))
        .route("/v1/payouts/{id}/cancel", post(cancel_payout))
        .route("/v1/payouts/{id}/approve", post(approve_payout))
        .route("/v1/payouts/{id}/reject", post(reject_payout))
}

/// `POST /v1/payouts` — accept a payout: 202, not yet sent (SPEC 4, Payouts rules 1-6).
async fn create_payout(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require(CREATE)?;
    // SPEC.md section 4, Payouts rule 2: a payout must be retryable without paying twice.
    if key.get()?.is_none() {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            "POST /v1/payouts requires an Idempotency-Key header.",
        )
        .with_code("idempotency_key_required"));
    }
    let f = &body.fields;
    let req = NewPayout {
        customer_id: f.opt_uuid("customer_id")?,
        chain: f.req_chain("chain")?,
        asset: f.req_asset("asset")?,
        decimals: f.req_u64("decimals")?,
        amount: f.req_amount("amount")?,
        to_address: f.req_str("to_address")?,
        reference: f.opt_bounded("reference", 255)?,
        memo: f.opt_bounded("memo", 255)?,
        usd_rate: None,
    };
    let mut req = req;
    // The market is read outside the store transaction (it may wait for the provider).
    if let Some(a) = state
        .registry
        .asset(req.chain.as_str(), req.asset.as_str())
        .filter(|a| !a.is_stable())
    {
        req.usd_rate = state
            .market
            .usable_price(&a.symbol, caller.livemode())
            .await;
    }
    let s = scope(&state, &caller);
    let key_id = caller.key.id;
    let (resp, _) = mutate(
        &state,
        &caller,
        &key,
        "/v1/payouts",
        &body.fingerprint,
        move |ctx| {
            let p = payouts::create(ctx, &s, key_id, req)?;
            Ok((StatusCode::ACCEPTED, views::payout(&s.reg, &p), ()))
        },
    )
    .await?;
    Ok(resp)
}

/// `GET /v1/payouts` — filters `customer_id`, `chain`, `status`, `reference`.
async fn list_payouts(
    State(state): State<AppState>,
    caller: Caller,
    q: Params,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let page = q.page()?;
    let p = caller.project_id();
    let customer = q.uuid("customer_id")?;
    let chain = q.get("chain").map(str::to_string);
    let status = q.status::<PayoutStatus>()?;
    let reference = q.get("reference").map(str::to_string);
    let prefix = if let Some(r) = &reference {
        index::prefix(IndexTag::PayoutsByReference, p, &[r.as_bytes()])
    } else if let Some(c) = customer {
        index::prefix(IndexTag::PayoutsByCustomer, p, &[c.as_bytes()])
    } else if let Some(s) = status {
        index::prefix(IndexTag::PayoutsByStatus, p, &[s.as_str().as_bytes()])
    } else if let Some(c) = &chain {
        index::prefix(IndexTag::PayoutsByChain, p, &[c.as_bytes()])
    } else {
        index::prefix(IndexTag::Payouts, p, &[])
    };
    let reg = state.registry.clone();
    list_rows(
        &state,
        prefix,
        page,
        move |x: &Payout| {
            customer.is_none_or(|c| x.customer_id == Some(c))
                && chain.as_ref().is_none_or(|c| &x.chain == c)
                && status.is_none_or(|s| x.status == s)
        },
        move |x| views::payout(&reg, x),
    )
    .await
}

/// `GET /v1/payouts/{id}`.
async fn get_payout(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let id = path_uuid(&id)?;
    get_by_id::<Payout, _>(&state, &caller, id, ApiError::not_found("payout"), |x| {
        views::payout(&state.registry, x)
    })
    .await
}

/// `POST /v1/payouts/{id}/cancel` — before signing only; funds return to available.
async fn cancel_payout(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(CANCEL)?;
    let id = path_uuid(&id)?;
    let s = scope(&state, &caller);
    let (resp, _) = commit(&state, None, move |ctx| {
        let p = payouts::cancel(ctx, &s, id)?;
        Ok((StatusCode::OK, views::payout(&s.reg, &p), ()))
    })
    .await?;
    Ok(resp)
}

/// `POST /v1/payouts/{id}/approve` — by a key other than the creator's.
async fn approve_payout(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(APPROVE)?;
    let id = path_uuid(&id)?;
    let s = scope(&state, &caller);
    let key_id = caller.key.id;
    let (resp, _) = commit(&state, None, move |ctx| {
        let p = payouts::approve(ctx, &s, key_id, id)?;
        Ok((StatusCode::OK, views::payout(&s.reg, &p), ()))
    })
    .await?;
    Ok(resp)
}

/// `POST /v1/payouts/{id}/reject` — by a key other than the creator's; funds return.
async fn reject_payout(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(APPROVE)?;
    let id = path_uuid(&id)?;
    let s = scope(&state, &caller);
    let key_id = caller.key.id;
    let (resp, _) = commit(&state, None, move |ctx| {
        let p = payouts::reject(ctx, &s, key_id, id)?;
        Ok((StatusCode::OK, views::payout(&s.reg, &p), ()))
    })
    .await?;
    Ok(resp)
}
