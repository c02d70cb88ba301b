//! Invoices (SPEC.md section 4, Invoices; DECISIONS.md sections 5 and 12). `checkout`
//! keys: `invoices:read` to read, `invoices:write` to create and cancel.

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::{Invoice, InvoiceStatus, KeyKind, OverpaymentPolicy};

use crate::api::authed::{access_rules, Authed, PathId, Post};
use crate::api::customers::MetadataIn;
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::{JsonBody, Params};
use crate::api::{commit, json, Begin, PageAnswer};
use crate::auth::{Access, Caller};
use crate::services::invoices::{self, NewInvoice};
use crate::services::reads;
use crate::services::types::InvoiceId;
use crate::services::types::{ChainIdIn, SymbolIn};
use crate::state::AppState;
use crate::views;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(&[KeyKind::Checkout], "invoices:read");
    WRITE = Access::new(&[KeyKind::Checkout], "invoices:write");
}

/// Most entries of `accepted_chains` / `accepted_assets`.
const MAX_ACCEPTED: usize = 64;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_invoices, create_invoice))
        .routes(routes!(get_invoice))
        .routes(routes!(cancel_invoice))
}

/// An invoice's view as the JSON of an answer.
fn render(s: &crate::services::Scope, inv: &Invoice) -> String {
    serde_json::to_string(&views::invoice_view(&s.reg, inv)).expect("json")
}

/// `price_amount`: an integer string of cents from 1 to 10^12 (DECISIONS.md section 16).
fn price_cents(body: &JsonBody) -> Result<u64, ApiError> {
    let bad = || {
        ApiError::invalid(
            "price_amount",
            "price_amount must be a string of digits: integer cents from 1 to 1000000000000.",
        )
    };
    let s = body.fields.req_str("price_amount")?;
    if s.is_empty() || s.len() > 13 || !s.bytes().all(|b| b.is_ascii_digit()) || s.starts_with('0')
    {
        return Err(bad());
    }
    let v: u64 = s.parse().map_err(|_| bad())?;
    if !(1..=invoices::PRICE_MAX_CENTS).contains(&v) {
        return Err(bad());
    }
    Ok(v)
}

fn bounded_list(body: &JsonBody, name: &str) -> Result<Option<Vec<String>>, ApiError> {
    let v = body.fields.opt_str_list(name)?;
    if v.as_ref()
        .is_some_and(|l| l.is_empty() || l.len() > MAX_ACCEPTED)
    {
        return Err(ApiError::invalid(
            name,
            format!("{name} must hold 1 to {MAX_ACCEPTED} entries."),
        ));
    }
    Ok(v)
}

/// `return_url` / `cancel_url`, if given (`invoices::redirect_url`: https, or http in test
/// mode).
fn redirect(
    f: &crate::api::extract::Fields,
    param: &'static str,
    caller: &Caller,
) -> Result<Option<String>, ApiError> {
    let test = caller.project.mode == appliance_storage::records::Mode::Test;
    match f.opt_bounded(param, invoices::MAX_REDIRECT_URL)? {
        None => Ok(None),
        Some(v) => Ok(Some(invoices::redirect_url(param, &v, test)?)),
    }
}

/// `POST /v1/invoices` — create an invoice: one payment address per accepted chain (the same
/// on every EVM chain) and a rate locked per (chain, asset) for its life. An
/// `Idempotency-Key` replays the first answer; then a known `reference_id` answers 200 with
/// the FIRST invoice (SPEC.md section 4, Invoices rules 1-3).
///
/// Key: `checkout` kind, scope `invoices:write`.
#[utoipa::path(post, path = "/v1/invoices", tag = "invoices",
    params(crate::api::IdempotencyHeader),
    request_body(content = NewInvoiceBody),
    responses(
        (status = 201, description = "Created.", body = crate::views::InvoiceView),
        (status = 200, description = "An invoice with this `reference_id` exists: the first one.", body = crate::views::InvoiceView),
        (status = 400, description = "`invalid_request`, `unsupported_currency`, `unknown_asset` (named in `param`).", body = crate::api::error::ErrorBody),
        (status = 422, description = "`chain_not_enabled`, `chain_unavailable` (`param: accepted_chains`), `no_payment_options`.", body = crate::api::error::ErrorBody),
    ))]
async fn create_invoice(a: Authed<WRITE>, Post { key, body }: Post) -> Result<Response, ApiError> {
    let f = &body.fields;
    let price = price_cents(&body)?;
    invoices::check_currency(f.opt_str("price_currency")?.as_deref())?;
    let expires_in_s = invoices::lifetime_s(f.opt_u64("expires_in")?)?;
    let policy = match f.opt_str("overpayment_policy")? {
        None => None,
        Some(p) => Some(OverpaymentPolicy::parse(&p).ok_or_else(|| {
            ApiError::invalid(
                "overpayment_policy",
                "overpayment_policy must be keep or refund.",
            )
        })?),
    };
    let accepted = invoices::Accepted {
        chains: bounded_list(&body, "accepted_chains")?,
        assets: bounded_list(&body, "accepted_assets")?,
    };
    let req = NewInvoice {
        price_cents: price,
        reference_id: f.opt_bounded("reference_id", 255)?,
        title: f.opt_bounded("title", 255)?,
        description: f.opt_bounded("description", 2000)?,
        metadata: f.opt_object("metadata")?,
        return_url: redirect(f, "return_url", &a.caller)?,
        cancel_url: redirect(f, "cancel_url", &a.caller)?,
        expires_in_s,
        overpayment_policy: policy,
        offers: Vec::new(),
    };
    let idem = match a.begin(&key, "/v1/invoices", &body).await? {
        Begin::Replay(r) => return Ok(r),
        Begin::Fresh(idem) => idem,
    };
    let s = a.scope();
    let pending = invoices::pending(&a.state.store, &a.state.market, &s, req, accepted).await?;
    let (resp, _) = commit(&a.state, idem, move |ctx| {
        let (inv, answer) = invoices::create(ctx, &s, pending)?;
        // The invoice goes back with the answer, to be dropped on the request's thread
        // rather than the store writer's.
        Ok(match answer {
            invoices::Answer::Prepared(body) => (StatusCode::CREATED, body, Some(inv)),
            invoices::Answer::Created => (StatusCode::CREATED, render(&s, &inv), Some(inv)),
            invoices::Answer::Existing => (StatusCode::OK, render(&s, &inv), Some(inv)),
        })
    })
    .await?;
    Ok(resp)
}

/// `GET /v1/invoices` — list invoices, newest first, optionally by `status`.
///
/// Key: `checkout` kind, scope `invoices:read`.
#[utoipa::path(get, path = "/v1/invoices", tag = "invoices",
    params(crate::api::extract::PageParams,
        ("status" = Option<InvoiceStatusIn>, Query, description = "Only invoices in this status."),
    ),
    responses((status = 200, description = "A page of invoices (list items).", body = InvoiceList)))]
async fn list_invoices(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let p = a.caller.project_id();
    let status = q.status::<InvoiceStatus>()?;
    let rows = reads::invoices(&a.state.store, p, status, page.rows()?).await?;
    Ok(rows.answer(views::invoice_item))
}

/// `GET /v1/invoices/{id}` — read an invoice (full form).
///
/// Key: `checkout` kind, scope `invoices:read`.
#[utoipa::path(get, path = "/v1/invoices/{id}", tag = "invoices", params(PathId),
    responses((status = 200, description = "The invoice.", body = crate::views::InvoiceView)))]
async fn get_invoice(a: Authed<READ>, id: InvoiceId) -> Result<Response, ApiError> {
    let inv = a.row::<Invoice>(id, ApiError::not_found("invoice"))?;
    Ok(json(
        StatusCode::OK,
        &views::invoice_view(&a.state.registry, &inv),
    ))
}

/// `POST /v1/invoices/{id}/cancel` — cancel an open invoice that has received nothing
/// (else 409 `invalid_state`); canceling again answers the canceled invoice. The payment
/// addresses stay watched: a later transfer is still credited, as a late payment (SPEC.md
/// section 4, Invoices rule 5).
///
/// Key: `checkout` kind, scope `invoices:write`.
#[utoipa::path(post, path = "/v1/invoices/{id}/cancel", tag = "invoices", params(PathId),
    responses(
        (status = 200, description = "The canceled invoice.", body = crate::views::InvoiceView),
        (status = 409, description = "`invalid_state`: not open, or money was received.", body = crate::api::error::ErrorBody),
    ))]
async fn cancel_invoice(a: Authed<WRITE>, id: InvoiceId) -> Result<Response, ApiError> {
    let s = a.scope();
    a.write(move |ctx| {
        let inv = invoices::cancel(ctx, &s, id)?;
        Ok((StatusCode::OK, render(&s, &inv), ()))
    })
    .await
}

list_schema! {
    InvoiceList => crate::views::InvoiceItemView<'static>;
}

/// `POST /v1/invoices`.
#[derive(ToSchema)]
#[schema(as = NewInvoice)]
pub struct NewInvoiceBody {
    /// Integer cents, 1 to 10^12.
    #[schema(pattern = "^([1-9][0-9]{0,11}|1000000000000)$")]
    pub price_amount: String,
    /// Only `USD` is priced (anything else: 400 `unsupported_currency`).
    pub price_currency: Option<PriceCurrencyIn>,
    /// Makes creation idempotent: a retry returns the FIRST invoice with this reference.
    #[schema(max_length = 255)]
    pub reference_id: Option<String>,
    #[schema(max_length = 255)]
    pub title: Option<String>,
    #[schema(max_length = 2000)]
    pub description: Option<String>,
    pub metadata: Option<MetadataIn>,
    #[schema(max_length = 2048)]
    pub return_url: Option<String>,
    #[schema(max_length = 2048)]
    pub cancel_url: Option<String>,
    /// Seconds until expiry, 300-604800 (default 3600).
    #[schema(minimum = 300, maximum = 604800)]
    pub expires_in: Option<u64>,
    /// Only these chains (default: every chain taking payments now).
    #[schema(max_items = 32)]
    pub accepted_chains: Option<Vec<ChainIdIn>>,
    /// Only these asset symbols (default: every asset taking deposits).
    #[schema(max_items = 64)]
    pub accepted_assets: Option<Vec<SymbolIn>>,
    /// `keep` or `refund` (default: the project's).
    pub overpayment_policy: Option<OverpaymentPolicyIn>,
}

/// The currency of a price: only USD is priced.
#[derive(ToSchema)]
pub enum PriceCurrencyIn {
    USD,
}

/// What happens to an overpayment's excess.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum OverpaymentPolicyIn {
    Keep,
    Refund,
}

/// An invoice status a list may be filtered by.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum InvoiceStatusIn {
    Open,
    Pending,
    Paid,
    Underpaid,
    Overpaid,
    Expired,
    Canceled,
}
