//! Billing (SPEC.md section 4, Billing; DECISIONS.md section 13): the plan, the prepaid
//! operational balance and its journal.

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::EntryKind;

use crate::api::authed::{access_rules, Authed, Post};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::{Fields, ListPage, Params, ReadBody};
use crate::api::{json, PageAnswer};
use crate::auth::{Access, ANY_KIND};
use crate::services::billing;
use crate::services::reads;
use crate::state::AppState;
use crate::views;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(ANY_KIND, "billing:read");
    WRITE = Access::new(ANY_KIND, "billing:write");
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_billing))
        .routes(routes!(choose_plan))
        .routes(routes!(skip_onboarding))
        .routes(routes!(list_entries))
        .routes(routes!(list_funding))
}

/// `GET /v1/billing` — the plan, its status, the operational balance (USD cents), the
/// onboarding steps, what a requested plan still needs, the active plan's fees and every plan
/// on offer.
///
/// Any key kind; scope `billing:read`.
#[utoipa::path(get, path = "/v1/billing", tag = "billing",
    responses((status = 200, description = "The project's billing.", body = crate::views::BillingView)))]
async fn get_billing(a: Authed<READ>) -> Result<Response, ApiError> {
    let s = a.scope();
    let v = billing::read_billing(&a.state.store, s).await?;
    Ok(json(StatusCode::OK, &v))
}

/// The body of `POST /v1/billing/plan`.
#[derive(ToSchema)]
pub struct PlanChoice {
    /// A plan key from `plans[]` (`drift` is one); an enterprise plan cannot be self-selected.
    #[schema(min_length = 1, max_length = 64)]
    pub plan: String,
}

impl ReadBody for PlanChoice {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        let plan = f.req_str("plan")?;
        if plan.len() > 64 {
            return Err(ApiError::invalid("plan", "plan is at most 64 characters."));
        }
        Ok(PlanChoice { plan })
    }
}

/// `POST /v1/billing/plan` — choose a plan (SPEC.md section 3, Billing plan): it activates at
/// once when the balance covers its onboarding fee (an upgrade pays only the difference) plus
/// its operational balance, emitting `billing.plan_activated`; otherwise it is recorded as
/// `requested_plan` and activates on the funding credit that closes the gap. Asking for the
/// active plan withdraws a pending request.
///
/// Any key kind; scope `billing:write`.
#[utoipa::path(post, path = "/v1/billing/plan", tag = "billing",
    params(crate::api::IdempotencyHeader),
    request_body(content = PlanChoice),
    responses(
        (status = 200, description = "The project's billing after the choice.", body = crate::views::BillingView),
        (status = 400, description = "`invalid_request`: `plan` missing or not a string.", body = crate::api::error::ErrorBody),
        (status = 403, description = "`plan_not_self_selectable`: the plan is arranged with the operator.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`unknown_plan`: no plan of that key is on offer (`param: plan`).", body = crate::api::error::ErrorBody),
    ))]
async fn choose_plan(a: Authed<WRITE>, Post { key, body }: Post) -> Result<Response, ApiError> {
    let PlanChoice { plan } = body.read()?;
    let s = a.scope();
    a.post(&key, "/v1/billing/plan", &body, move |ctx| {
        let acct = billing::request_plan(ctx, &s, &plan)?;
        Ok((StatusCode::OK, billing::billing_json(ctx, &s, &acct)?, ()))
    })
    .await
}

/// `POST /v1/billing/onboarding/skip` — hide the onboarding panel (display only; grants
/// nothing). 402 `plan_not_active` until a plan is active. Idempotent: `skipped_at` keeps its
/// first value.
///
/// Any key kind; scope `billing:write`.
#[utoipa::path(post, path = "/v1/billing/onboarding/skip", tag = "billing",
    responses(
        (status = 200, description = "The project's billing.", body = crate::views::BillingView),
        (status = 402, description = "`plan_not_active`: no plan is active yet.", body = crate::api::error::ErrorBody),
    ))]
async fn skip_onboarding(a: Authed<WRITE>) -> Result<Response, ApiError> {
    let s = a.scope();
    a.write(move |ctx| {
        let acct = billing::skip_onboarding(ctx, &s)?;
        Ok((StatusCode::OK, billing::billing_json(ctx, &s, &acct)?, ()))
    })
    .await
}

/// `GET /v1/billing/funding` — the project's funding addresses, one per chain it can use
/// (SPEC.md section 2, Funding address): created on the first call (in one transaction)
/// and the same for ever after. Send a coin of an address's `assets` to it to fund the
/// operational balance: USDT and USDC are credited at par, the native coin at the cached
/// spot price, at the transfer's confirmation.
///
/// Any key kind; scope `billing:read`.
#[utoipa::path(get, path = "/v1/billing/funding", tag = "billing",
    responses(
        (status = 200, description = "The funding addresses.", body = FundingAddressList),
        (status = 422, description = "`chain_deposits_disabled`: a live project's address cannot be issued before a master key is unlocked.", body = crate::api::error::ErrorBody),
    ))]
async fn list_funding(a: Authed<READ>) -> Result<Response, ApiError> {
    let s = a.scope();
    // Most calls find every address made: a read answers them.
    if let Some(list) = billing::complete_funding_addresses(&a.state.store, s.clone()).await? {
        return Ok(json(StatusCode::OK, &funding_list(&s, &list)));
    }
    a.write(move |ctx| {
        let list = billing::ensure_funding_addresses(ctx, &s)?;
        Ok((StatusCode::OK, funding_list(&s, &list), ()))
    })
    .await
}

fn funding_list(
    s: &crate::services::Scope,
    list: &[appliance_storage::records::FundingAddress],
) -> serde_json::Value {
    let data: Vec<_> = list.iter().map(|fa| billing::funding_view(s, fa)).collect();
    crate::views::to_value(&ListPage::new(&data, false, None))
}

/// `GET /v1/billing/entries` — the operational balance's journal, newest first; `kind`
/// filters by entry kind.
///
/// Any key kind; scope `billing:read`.
#[utoipa::path(get, path = "/v1/billing/entries", tag = "billing",
    params(crate::api::extract::PageParams,
        ("kind" = Option<BillingEntryKindIn>, Query, description = "Only entries of this kind."),
    ),
    responses((status = 200, description = "A page of billing entries.", body = BillingEntryList)))]
async fn list_entries(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let p = a.caller.project_id();
    let kind = q
        .get("kind")
        .map(|k| {
            EntryKind::parse(k).ok_or_else(|| {
                ApiError::invalid(
                    "kind",
                    format!(
                        "kind must be one of {}.",
                        EntryKind::ALL.map(|k| k.as_str()).join(", ")
                    ),
                )
            })
        })
        .transpose()?;
    let rows = reads::billing_entries(&a.state.store, p, kind, page.rows()?).await?;
    Ok(rows.answer(|e| views::billing_entry(&a.state.registry, e)))
}

list_schema! {
    BillingEntryList => crate::views::BillingEntryView<'static>;
    FundingAddressList => crate::services::billing::FundingAddressView<'static>;
}

/// A billing entry kind filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum BillingEntryKindIn {
    Funding,
    OnboardingFee,
    PaymentFee,
    AddressFee,
    PayoutFee,
    WithdrawalFee,
    MonthlyMinimum,
    Refund,
    Adjustment,
    ConversionFee,
}
