//! Wallets (deposit addresses): SPEC.md section 4, Wallets and balances; DECISIONS.md 3.

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::{KeyKind, Wallet};

use crate::api::authed::{access_rules, Authed, PathId, Post};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::{read_body, Params};
use crate::api::{created_or_ok, json, PageAnswer};
use crate::auth::Access;
use crate::services::reads;
use crate::services::types::ChainIdIn;
use crate::services::types::{ChainId, CustomerId, WalletId};
use crate::services::wallets;
use crate::state::AppState;
use crate::views;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(&[KeyKind::Wallet], "wallets:read");
    WRITE = Access::new(&[KeyKind::Wallet], "wallets:create");
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_wallets, create_wallet))
        .routes(routes!(get_wallet))
}

/// `POST /v1/wallets`.
#[derive(ToSchema)]
pub struct NewWallet {
    #[schema(value_type = Uuid)]
    pub customer_id: CustomerId,
    #[schema(value_type = ChainIdIn)]
    pub chain: ChainId,
}

read_body!(NewWallet {
    customer_id: req_id,
    chain: req_chain,
});

/// The customer's deposit address on a chain: 201 when new, 200 with the existing wallet on
/// repeat (SPEC.md section 4, Wallets). A NEW address on a chain that is not issuing is 422
/// (`account_kind_disabled`, `chain_not_live_yet`, `chain_deposits_disabled`).
///
/// Key: `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/wallets", tag = "wallets",
    params(crate::api::IdempotencyHeader),
    request_body = NewWallet,
    responses(
        (status = 201, description = "A new address.", body = crate::views::WalletView),
        (status = 200, description = "The customer's existing address on that chain.", body = crate::views::WalletView),
        (status = 404, description = "`not_found`: no such customer (`param: customer_id`).", body = crate::api::error::ErrorBody),
        (status = 422, description = "No new address on this chain now: `account_kind_disabled`, `chain_not_live_yet`, `chain_deposits_disabled`, `chain_unavailable`, `chain_not_enabled`.", body = crate::api::error::ErrorBody),
    ))]
async fn create_wallet(a: Authed<WRITE>, Post { key, body }: Post) -> Result<Response, ApiError> {
    let NewWallet { customer_id, chain } = body.read()?;
    let s = a.scope();
    // Derived here, not on the store writer (used only if the wallet is new).
    let address = wallets::new_address(&s, customer_id);
    a.post(&key, "/v1/wallets", &body, move |ctx| {
        let (w, created) = wallets::get_or_create_at(ctx, &s, customer_id, &chain, address)?;
        Ok((created_or_ok(created), views::wallet(&w), ()))
    })
    .await
}

/// List wallets, newest first.
///
/// Key: `wallet` kind, scope `wallets:read`.
#[utoipa::path(get, path = "/v1/wallets", tag = "wallets",
    params(crate::api::extract::PageParams,
        ("customer_id" = Option<uuid::Uuid>, Query, description = "Only this customer's wallets."),
        ("chain" = Option<String>, Query, description = "Only wallets on this chain."),
    ),
    responses((status = 200, description = "A page of wallets.", body = WalletList)))]
async fn list_wallets(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let p = a.caller.project_id();
    let customer = q.uuid("customer_id")?.map(CustomerId::from);
    let chain = q.get("chain").map(str::to_string);
    let rows = reads::wallets(&a.state.store, p, customer, chain, page.rows()?).await?;
    Ok(rows.answer(views::wallet_view))
}

/// Read a wallet.
///
/// Key: `wallet` kind, scope `wallets:read`.
#[utoipa::path(get, path = "/v1/wallets/{id}", tag = "wallets", params(PathId),
    responses((status = 200, description = "The wallet.", body = crate::views::WalletView)))]
async fn get_wallet(a: Authed<READ>, id: WalletId) -> Result<Response, ApiError> {
    let w = a.row::<Wallet>(id, ApiError::not_found("wallet"))?;
    Ok(json(StatusCode::OK, &views::wallet_view(&w)))
}

list_schema! {
    WalletList => crate::views::WalletView<'static>;
}
