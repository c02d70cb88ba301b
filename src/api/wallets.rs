//! Wallets (deposit addresses): SPEC.md section 4, Wallets and balances; DECISIONS.md 3.

use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{KeyKind, Wallet};

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, JsonBody, Params};
use crate::api::{created_or_ok, get_by_id, list_rows, mutate, scope, IdempotencyKey};
use crate::auth::{Access, Caller};
use crate::services::wallets;
use crate::state::AppState;
use crate::views;

const READ: Access = Access::new(&[KeyKind::Wallet], "wallets:read");
const WRITE: Access = Access::new(&[KeyKind::Wallet], "wallets:create");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/wallets", get(list_wallets).post(create_wallet))
        .route("/v1/wallets/{id}", get(get_wallet))
}

/// `POST /v1/wallets` — the customer's address on a chain: 201 when new, 200 with the
/// existing wallet on repeat (SPEC 4, Wallets).
async fn create_wallet(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require(WRITE)?;
    let customer_id = body.fields.req_uuid("customer_id")?;
    let chain = body.fields.req_chain("chain")?;
    let s = scope(&state, &caller);
    let (resp, _) = mutate(
        &state,
        &caller,
        &key,
        "/v1/wallets",
        &body.fingerprint,
        move |ctx| {
            let (w, created) = wallets::get_or_create(ctx, &s, customer_id, &chain)?;
            Ok((created_or_ok(created), views::wallet(&w), ()))
        },
    )
    .await?;
    Ok(resp)
}

/// `GET /v1/wallets` — filters `customer_id`, `chain`.
async fn list_wallets(
    State(state): State<AppState>,
    caller: Caller,
    q: Params,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let page = q.page()?;
    let p = caller.project_id();
    let customer = q.uuid("customer_id")?;
    let chain = q.get("chain").map(str::to_string);
    let prefix = match (customer, &chain) {
        (Some(c), _) => index::prefix(IndexTag::WalletsByCustomer, p, &[c.as_bytes()]),
        (None, Some(ch)) => index::prefix(IndexTag::WalletsByChain, p, &[ch.as_bytes()]),
        (None, None) => index::prefix(IndexTag::Wallets, p, &[]),
    };
    list_rows(
        &state,
        prefix,
        page,
        move |w: &Wallet| chain.as_ref().is_none_or(|c| &w.chain == c),
        views::wallet,
    )
    .await
}

/// `GET /v1/wallets/{id}`.
async fn get_wallet(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let id = path_uuid(&id)?;
    get_by_id::<Wallet, _>(&state, &caller, id, ApiError::not_found("wallet"), |w| {
        views::wallet(w)
    })
    .await
}
