//! Invoices (SPEC.md section 4, Invoices; DECISIONS.md sections 5 and 12). `checkout`
//! keys: `invoices:read` to read, `invoices:write` to create and cancel.

use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::Response;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Invoice, InvoiceStatus, KeyKind, OverpaymentPolicy};

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, JsonBody, Params};
use crate::api::schemas;
use crate::api::IdempotencyKey;
use crate::api::{begin, commit, json, list_rows, row_by_id, scope, Begin};
use crate::auth::{Access, Caller};
use crate::services::invoices::{self, InvoiceError, NewInvoice, Offer};
use crate::state::AppState;
use crate::views;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const READ: Access = Access::new(&[KeyKind::Checkout], "invoices:read");
const WRITE: Access = Access::new(&[KeyKind::Checkout], "invoices:write");

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
    params(schemas::IdempotencyHeader),
    request_body(content = schemas::NewInvoice),
    responses(
        (status = 201, description = "Created.", body = schemas::Invoice),
        (status = 200, description = "An invoice with this `reference_id` exists: the first one.", body = schemas::Invoice),
        (status = 400, description = "`invalid_request`, `unsupported_currency`, `unknown_asset` (named in `param`).", body = schemas::ErrorBody),
        (status = 422, description = "`chain_not_enabled`, `chain_unavailable` (`param: accepted_chains`), `no_payment_options`.", body = schemas::ErrorBody),
    ))]
async fn create_invoice(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require(WRITE)?;
    let f = &body.fields;
    let price = price_cents(&body)?;
    if let Some(c) = f.opt_str("price_currency")? {
        if !c.eq_ignore_ascii_case("USD") {
            return Err(InvoiceError::UnsupportedCurrency.into());
        }
    }
    let expires_in_s = f
        .opt_u64("expires_in")?
        .unwrap_or(invoices::EXPIRES_IN_DEFAULT_S);
    if !(invoices::EXPIRES_IN_MIN_S..=invoices::EXPIRES_IN_MAX_S).contains(&expires_in_s) {
        return Err(ApiError::invalid(
            "expires_in",
            format!(
                "expires_in must be from {} to {} seconds.",
                invoices::EXPIRES_IN_MIN_S,
                invoices::EXPIRES_IN_MAX_S
            ),
        ));
    }
    let policy = match f.opt_str("overpayment_policy")? {
        None => None,
        Some(p) => Some(OverpaymentPolicy::parse(&p).ok_or_else(|| {
            ApiError::invalid(
                "overpayment_policy",
                "overpayment_policy must be keep or refund.",
            )
        })?),
    };
    let accepted_chains = bounded_list(&body, "accepted_chains")?;
    let accepted_assets = bounded_list(&body, "accepted_assets")?;
    let mut req = NewInvoice {
        price_cents: price,
        reference_id: f.opt_bounded("reference_id", 255)?,
        title: f.opt_bounded("title", 255)?,
        description: f.opt_bounded("description", 2000)?,
        metadata: f.opt_object("metadata")?,
        return_url: redirect(f, "return_url", &caller)?,
        cancel_url: redirect(f, "cancel_url", &caller)?,
        expires_in_s,
        overpayment_policy: policy,
        offers: Vec::new(),
    };
    let idem = match begin(
        &state,
        &caller,
        &Method::POST,
        "/v1/invoices",
        &key,
        &body.fingerprint,
    )
    .await?
    {
        Begin::Replay(r) => return Ok(r),
        Begin::Fresh(idem) => idem,
    };
    // Rates are read outside the store transaction (the market may wait for its source).
    // A refusal of the accepted chains or assets waits until the reference check: a retry
    // with a known `reference_id` returns the first invoice whatever changed since.
    let offers = match invoices::candidates(
        &state.registry,
        &caller.project,
        accepted_chains.as_deref(),
        accepted_assets.as_deref(),
    ) {
        Ok(cands) => {
            let mut rates: Vec<(String, Option<(rust_decimal::Decimal, &'static str)>)> =
                Vec::new();
            let mut offers = Vec::new();
            for c in cands {
                let rate = match rates.iter().find(|(s, _)| s == &c.asset) {
                    Some((_, r)) => *r,
                    None => {
                        let r = state.market.usable_quote(&c.asset, caller.livemode()).await;
                        rates.push((c.asset.clone(), r));
                        r
                    }
                };
                if let Some((rate, rate_source)) = rate {
                    offers.push(Offer {
                        candidate: c,
                        rate,
                        rate_source,
                    });
                }
            }
            Ok(offers)
        }
        Err(e) => Err(e),
    };
    let s = scope(&state, &caller);
    // Everything that needs no store is built here, off the single writer thread
    // (`invoices::prepare`): the quotes, the address, the token, the view and its JSON.
    // A refusal waits for the reference check (SPEC.md section 4, Invoices rule 3); one of
    // `prepare` also for the plan gate (rule 4), as when it was made inside the store job.
    let reference_id = req.reference_id.clone();
    let prepared = match offers {
        Ok(o) => {
            req.offers = o;
            let (fees, offset) = state.store.read_now(|r| invoices::snapshot(r, &s))?;
            invoices::prepare(&s, req, fees, offset, appliance_storage::now_us())
                .map_err(|e| (e, true))
        }
        Err(e) => Err((e, false)),
    };
    let (resp, _) = commit(&state, idem, move |ctx| {
        let mut p = match prepared {
            Ok(p) => p,
            Err((e, gate)) => {
                return match invoices::existing_by_reference(ctx, &s, reference_id.as_deref())? {
                    Some(inv) => Ok((StatusCode::OK, render(&s, &inv), None)),
                    None => {
                        if gate {
                            crate::services::billing::require_live(ctx, &s)
                                .map_err(InvoiceError::from)?;
                        }
                        Err(e.into())
                    }
                };
            }
        };
        // The prepared answer; `create_prepared` stores the rest.
        let body = std::mem::take(&mut p.body);
        let (inv, outcome) = invoices::create_prepared(ctx, &s, p)?;
        // The invoice goes back with the answer, to be dropped on the request's thread
        // rather than the store writer's.
        Ok(match outcome {
            invoices::Created::AsPrepared => (StatusCode::CREATED, body, Some(inv)),
            invoices::Created::Restamped => (StatusCode::CREATED, render(&s, &inv), Some(inv)),
            invoices::Created::Existing => (StatusCode::OK, render(&s, &inv), Some(inv)),
        })
    })
    .await?;
    Ok(resp)
}

/// `GET /v1/invoices` — list invoices, newest first, optionally by `status`.
///
/// Key: `checkout` kind, scope `invoices:read`.
#[utoipa::path(get, path = "/v1/invoices", tag = "invoices",
    params(schemas::PageParams,
        ("status" = Option<schemas::InvoiceStatusIn>, Query, description = "Only invoices in this status."),
    ),
    responses((status = 200, description = "A page of invoices (list items).", body = schemas::InvoiceList)))]
async fn list_invoices(
    State(state): State<AppState>,
    caller: Caller,
    q: Params,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let page = q.page()?;
    let p = caller.project_id();
    let status = q.status::<InvoiceStatus>()?;
    let prefix = match status {
        Some(s) => index::prefix(IndexTag::InvoicesByStatus, p, &[s.as_str().as_bytes()]),
        None => index::prefix(IndexTag::Invoices, p, &[]),
    };
    list_rows(
        &state,
        prefix,
        page,
        move |i: &Invoice| status.is_none_or(|s| i.status == s),
        views::invoice_item,
    )
    .await
}

/// `GET /v1/invoices/{id}` — read an invoice (full form).
///
/// Key: `checkout` kind, scope `invoices:read`.
#[utoipa::path(get, path = "/v1/invoices/{id}", tag = "invoices", params(schemas::IdPath),
    responses((status = 200, description = "The invoice.", body = schemas::Invoice)))]
async fn get_invoice(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let id = path_uuid(&id)?;
    let inv = row_by_id::<Invoice>(&state, &caller, id, ApiError::not_found("invoice"))?;
    Ok(json(
        StatusCode::OK,
        &views::invoice_view(&state.registry, &inv),
    ))
}

/// `POST /v1/invoices/{id}/cancel` — cancel an open invoice that has received nothing
/// (else 409 `invalid_state`); canceling again answers the canceled invoice. The payment
/// addresses stay watched: a later transfer is still credited, as a late payment (SPEC.md
/// section 4, Invoices rule 5).
///
/// Key: `checkout` kind, scope `invoices:write`.
#[utoipa::path(post, path = "/v1/invoices/{id}/cancel", tag = "invoices", params(schemas::IdPath),
    responses(
        (status = 200, description = "The canceled invoice.", body = schemas::Invoice),
        (status = 409, description = "`invalid_state`: not open, or money was received.", body = schemas::ErrorBody),
    ))]
async fn cancel_invoice(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(WRITE)?;
    let id = path_uuid(&id)?;
    let s = scope(&state, &caller);
    let (resp, _) = commit(&state, None, move |ctx| {
        let inv = invoices::cancel(ctx, &s, id)?;
        Ok((StatusCode::OK, render(&s, &inv), ()))
    })
    .await?;
    Ok(resp)
}
