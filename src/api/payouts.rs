//! Payouts (SPEC.md section 4, Payouts; DECISIONS.md sections 4 and 5).

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::{KeyKind, Payout, PayoutStatus};

use crate::api::authed::{access_rules, Authed, PathId, Post};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::{Fields, Params, ReadBody};
use crate::api::{json, PageAnswer};
use crate::auth::Access;
use crate::services::payouts::{self, NewPayout, PayoutError};
use crate::services::reads;
use crate::services::types::{ApiKeyId, CustomerId, PayoutId};
use crate::services::Scope;
use crate::state::AppState;
use crate::views;
use appliance_storage::WriteCtx;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(&[KeyKind::Payout, KeyKind::Wallet], "payouts:read");
    CREATE = Access::new(&[KeyKind::Payout], "payouts:create").signing();
    CANCEL = Access::new(&[KeyKind::Payout], "payouts:create");
    APPROVE = Access::new(&[KeyKind::Payout], "payouts:approve");
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_payouts, create_payout))
        .routes(routes!(get_payout))
        .routes(routes!(cancel_payout))
        .routes(routes!(approve_payout))
        .routes(routes!(reject_payout))
}

// `customer_id` is read first: its refusal comes before the other fields'.
impl ReadBody for NewPayout {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        Ok(NewPayout {
            customer_id: f.opt_uuid("customer_id")?.map(CustomerId::from),
            chain: f.req_chain("chain")?,
            asset: f.req_asset("asset")?,
            decimals: f.req_u64("decimals")?,
            amount: f.req_amount("amount")?,
            to_address: f.req_str("to_address")?,
            reference: f.opt_bounded("reference", 255)?,
            memo: f.opt_bounded("memo", 255)?,
            usd_rate: None,
        })
    }
}

/// Request a payout: 202, accepted but not yet sent (SPEC.md section 4, Payouts rules 1-6).
/// Above the project's auto-approve threshold it waits in `pending_approval`.
///
/// Key: `payout` kind, scope `payouts:create`, signing enabled for the service, project and key.
#[utoipa::path(post, path = "/v1/payouts", tag = "payouts",
    params(crate::api::RequiredIdempotencyHeader),
    request_body = NewPayout,
    responses(
        (status = 202, description = "Accepted (not sent).", body = crate::views::PayoutView),
        (status = 400, description = "`invalid_request`, `decimals_mismatch` (both values reported), `unknown_asset`, `idempotency_key_required`.", body = crate::api::error::ErrorBody),
        (status = 402, description = "`insufficient_funds`: available is below amount plus fee.", body = crate::api::error::ErrorBody),
        (status = 404, description = "`not_found`: no such customer (`param: customer_id`).", body = crate::api::error::ErrorBody),
        (status = 422, description = "`chain_not_enabled`, `chain_unavailable`, `asset_payouts_disabled`, `invalid_address`, `self_payout_forbidden`.", body = crate::api::error::ErrorBody),
    ))]
async fn create_payout(a: Authed<CREATE>, Post { key, body }: Post) -> Result<Response, ApiError> {
    // SPEC.md section 4, Payouts rule 2: a payout must be retryable without paying twice.
    key.require("POST /v1/payouts")?;
    let mut req: NewPayout = body.read()?;
    // The market is read outside the store transaction (it may wait for the provider).
    if let Some(asset) = a
        .state
        .registry
        .asset(req.chain.as_str(), req.asset.as_str())
        .filter(|x| !x.is_stable())
    {
        req.usd_rate = a
            .state
            .market
            .usable_price(&asset.symbol, a.caller.livemode())
            .await;
    }
    let s = a.scope();
    let key_id = ApiKeyId::of(&a.caller.key);
    // Hashed here, not on the store writer.
    let facts = payouts::address_facts(&s, &req.to_address);
    a.post(&key, "/v1/payouts", &body, move |ctx| {
        let p = payouts::create_with(ctx, &s, key_id, req, facts)?;
        Ok((StatusCode::ACCEPTED, views::payout(&s.reg, &p), ()))
    })
    .await
}

/// List payouts, newest first.
///
/// Key: `payout` or `wallet` kind, scope `payouts:read`.
#[utoipa::path(get, path = "/v1/payouts", tag = "payouts",
    params(crate::api::extract::PageParams,
        ("customer_id" = Option<uuid::Uuid>, Query, description = "Only this customer's payouts."),
        ("chain" = Option<String>, Query, description = "Only payouts on this chain."),
        ("status" = Option<PayoutStatusIn>, Query, description = "Only payouts in this status."),
        ("reference" = Option<String>, Query, description = "Only payouts with this reference."),
    ),
    responses((status = 200, description = "A page of payouts.", body = PayoutList)))]
async fn list_payouts(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let p = a.caller.project_id();
    let customer = q.uuid("customer_id")?.map(CustomerId::from);
    let chain = q.get("chain").map(str::to_string);
    let status = q.status::<PayoutStatus>()?;
    let reference = q.get("reference").map(str::to_string);
    let query = reads::PayoutQuery {
        reference,
        customer,
        status,
        chain,
    };
    let rows = reads::payouts(&a.state.store, p, query, page.rows()?).await?;
    Ok(rows.answer(|x| views::payout_view(&a.state.registry, x)))
}

/// Read a payout.
///
/// Key: `payout` or `wallet` kind, scope `payouts:read`.
#[utoipa::path(get, path = "/v1/payouts/{id}", tag = "payouts", params(PathId),
    responses((status = 200, description = "The payout.", body = crate::views::PayoutView)))]
async fn get_payout(a: Authed<READ>, id: PayoutId) -> Result<Response, ApiError> {
    let x = a.row::<Payout>(id, ApiError::not_found("payout"))?;
    Ok(json(
        StatusCode::OK,
        &views::payout_view(&a.state.registry, &x),
    ))
}

/// Cancel a payout before signing (`pending_approval` or `queued`); reserved funds return to
/// `available`. Later: 409 `payout_not_cancelable`.
///
/// Key: `payout` kind, scope `payouts:create`.
#[utoipa::path(post, path = "/v1/payouts/{id}/cancel", tag = "payouts", params(PathId),
    responses((status = 200, description = "The canceled payout.", body = crate::views::PayoutView)))]
async fn cancel_payout(a: Authed<CANCEL>, id: PayoutId) -> Result<Response, ApiError> {
    transition(a, move |ctx, s| payouts::cancel(ctx, s, id)).await
}

/// A change of a payout's status, answered as the payout (200).
async fn transition<R>(
    a: Authed<R>,
    change: impl FnOnce(&mut WriteCtx<'_>, &Scope) -> Result<Payout, PayoutError> + Send + 'static,
) -> Result<Response, ApiError> {
    let s = a.scope();
    a.write(move |ctx| {
        let p = change(ctx, &s)?;
        Ok((StatusCode::OK, views::payout(&s.reg, &p), ()))
    })
    .await
}

/// Approve a payout waiting in `pending_approval`, by a key other than the creator's
/// (403 `approver_must_differ`); 409 `invalid_state` otherwise.
///
/// Key: `payout` kind, scope `payouts:approve`.
#[utoipa::path(post, path = "/v1/payouts/{id}/approve", tag = "payouts", params(PathId),
    responses((status = 200, description = "The approved payout.", body = crate::views::PayoutView)))]
async fn approve_payout(a: Authed<APPROVE>, id: PayoutId) -> Result<Response, ApiError> {
    let key_id = ApiKeyId::of(&a.caller.key);
    transition(a, move |ctx, s| payouts::approve(ctx, s, key_id, id)).await
}

/// Reject a payout waiting in `pending_approval`, by a key other than the creator's; reserved
/// funds return to `available`.
///
/// Key: `payout` kind, scope `payouts:approve`.
#[utoipa::path(post, path = "/v1/payouts/{id}/reject", tag = "payouts", params(PathId),
    responses((status = 200, description = "The rejected payout.", body = crate::views::PayoutView)))]
async fn reject_payout(a: Authed<APPROVE>, id: PayoutId) -> Result<Response, ApiError> {
    let key_id = ApiKeyId::of(&a.caller.key);
    transition(a, move |ctx, s| payouts::reject(ctx, s, key_id, id)).await
}

list_schema! {
    PayoutList => crate::views::PayoutView<'static>;
}

/// A payout status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum PayoutStatusIn {
    PendingApproval,
    Queued,
    Signing,
    Submitted,
    Confirmed,
    Failed,
    Canceled,
    Rejected,
}
