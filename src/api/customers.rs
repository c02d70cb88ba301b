//! Customers (SPEC.md section 4, Customers).

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::{Customer, CustomerStatus, KeyKind};

use crate::api::authed::{access_rules, Authed, PathId, Post};
use crate::api::error::ApiError;
use crate::api::extract::{JsonBody, Params};
use crate::api::schemas;
use crate::api::{created_or_ok, json, PageAnswer};
use crate::auth::Access;
use crate::services::customers::{self, CustomerPatch, NewCustomer};
use crate::services::reads;
use crate::state::AppState;
use crate::views;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(&[KeyKind::Wallet], "customers:read");
    WRITE = Access::new(&[KeyKind::Wallet], "customers:write");
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_customers, create_customer))
        .routes(routes!(get_customer, patch_customer))
}

/// Create a customer; an existing `reference_id` answers 200 with the existing customer
/// (SPEC.md section 4, Customers).
///
/// Key: `wallet` kind, scope `customers:write`.
#[utoipa::path(post, path = "/v1/customers", tag = "customers",
    params(crate::api::IdempotencyHeader),
    request_body(content = schemas::NewCustomer, description = "Every field optional; `{}` is accepted."),
    responses(
        (status = 201, description = "Created.", body = crate::views::CustomerView),
        (status = 200, description = "A customer with this `reference_id` exists: that customer.", body = crate::views::CustomerView),
    ))]
async fn create_customer(a: Authed<WRITE>, Post { key, body }: Post) -> Result<Response, ApiError> {
    let f = &body.fields;
    let req = NewCustomer {
        reference_id: f.opt_bounded("reference_id", 255)?,
        email: f.opt_bounded("email", 320)?,
        metadata: f.opt_object("metadata")?,
    };
    let s = a.scope();
    a.post(&key, "/v1/customers", &body, move |ctx| {
        let (c, created) = customers::create(ctx, &s, req)?;
        Ok((created_or_ok(created), views::customer(&c), ()))
    })
    .await
}

/// List customers, newest first.
///
/// Key: `wallet` kind, scope `customers:read`.
#[utoipa::path(get, path = "/v1/customers", tag = "customers",
    params(crate::api::extract::PageParams,
        ("reference_id" = Option<String>, Query, description = "Only the customer with this reference id."),
        ("status" = Option<schemas::CustomerStatusIn>, Query, description = "Only customers in this status."),
    ),
    responses((status = 200, description = "A page of customers.", body = schemas::CustomerList)))]
async fn list_customers(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?.rows()?;
    let query = reads::CustomerQuery {
        reference_id: q.get("reference_id").map(str::to_string),
        status: q.status::<CustomerStatus>()?,
    };
    let rows = reads::customers(&a.state.store, a.caller.project_id(), query, page).await?;
    Ok(rows.answer(views::customer_view))
}

/// Read a customer.
///
/// Key: `wallet` kind, scope `customers:read`.
#[utoipa::path(get, path = "/v1/customers/{id}", tag = "customers", params(PathId),
    responses((status = 200, description = "The customer.", body = crate::views::CustomerView)))]
async fn get_customer(a: Authed<READ>, PathId(id): PathId) -> Result<Response, ApiError> {
    let c = a.row::<Customer>(id, ApiError::not_found("customer"))?;
    Ok(json(StatusCode::OK, &views::customer_view(&c)))
}

/// Update a customer: `email`, `metadata` (merged; a null value removes a key),
/// `reference_id`, `status` (`active` | `disabled`).
///
/// Key: `wallet` kind, scope `customers:write`.
#[utoipa::path(patch, path = "/v1/customers/{id}", tag = "customers", params(PathId),
    request_body = schemas::CustomerPatch,
    responses((status = 200, description = "The updated customer.", body = crate::views::CustomerView)))]
async fn patch_customer(
    a: Authed<WRITE>,
    PathId(id): PathId,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let f = &body.fields;
    let nullable = |name: &str, max: usize| -> Result<Option<Option<String>>, ApiError> {
        if !f.has(name) {
            return Ok(None);
        }
        Ok(Some(f.opt_bounded(name, max)?))
    };
    let status = match f.opt_str("status")? {
        Some(s) => Some(
            CustomerStatus::parse(&s)
                .ok_or_else(|| ApiError::invalid("status", "status must be active or disabled."))?,
        ),
        None => None,
    };
    let req = CustomerPatch {
        email: nullable("email", 320)?,
        reference_id: nullable("reference_id", 255)?,
        metadata: f.opt_object("metadata")?,
        status,
    };
    let s = a.scope();
    a.write(move |ctx| {
        let c = customers::patch(ctx, &s, id, req)?;
        Ok((StatusCode::OK, views::customer(&c), ()))
    })
    .await
}
