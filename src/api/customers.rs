//! Customers (SPEC.md section 4, Customers).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Customer, KeyKind};

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, JsonBody, Params, StatusFilter};
use crate::api::{commit, created_or_ok, get_by_id, list_rows, mutate, scope, IdempotencyKey};
use crate::auth::{Access, Caller};
use crate::services::customers::{self, CustomerPatch, NewCustomer};
use crate::state::AppState;
use crate::views;

/// A customer's `status` as a list filter (SPEC.md section 4, Customers).
#[derive(Clone, Copy)]
enum CustomerStatus {
    Active,
    Disabled,
}

impl CustomerStatus {
    fn as_str(self) -> &'static str {
        match self {
            CustomerStatus::Active => "active",
            CustomerStatus::Disabled => "disabled",
        }
    }
}

impl StatusFilter for CustomerStatus {
    const NAMES: &'static [&'static str] = &["active", "disabled"];
    fn from_name(s: &str) -> Option<Self> {
        match s {
            "active" => Some(CustomerStatus::Active),
            "disabled" => Some(CustomerStatus::Disabled),
            _ => None,
        }
    }
}

const READ: Access = Access::new(&[KeyKind::Wallet], "customers:read");
const WRITE: Access = Access::new(&[KeyKind::Wallet], "customers:write");

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/customers", get(list_customers).post(create_customer))
        .route(
            "/v1/customers/{id}",
            get(get_customer).patch(patch_customer),
        )
}

/// `POST /v1/customers` — create a customer; an existing `reference_id` answers 200 with
/// the existing customer (SPEC 4, Customers).
async fn create_customer(
    State(state): State<AppState>,
    caller: Caller,
    key: IdempotencyKey,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require(WRITE)?;
    let f = &body.fields;
    let req = NewCustomer {
        reference_id: f.opt_bounded("reference_id", 255)?,
        email: f.opt_bounded("email", 320)?,
        metadata: f.opt_object("metadata")?,
    };
    let s = scope(&state, &caller);
    let (resp, _) = mutate(
        &state,
        &caller,
        &key,
        "/v1/customers",
        &body.fingerprint,
        move |ctx| {
            let (c, created) = customers::create(ctx, &s, req)?;
            Ok((created_or_ok(created), views::customer(&c), ()))
        },
    )
    .await?;
    Ok(resp)
}

/// `GET /v1/customers` — newest first; filters `reference_id`, `status`.
async fn list_customers(
    State(state): State<AppState>,
    caller: Caller,
    q: Params,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let page = q.page()?;
    let p = caller.project_id();
    let status = q
        .status::<CustomerStatus>()?
        .map(|s| s.as_str().to_string());
    let prefix = match (q.get("reference_id"), &status) {
        (Some(r), _) => index::prefix(IndexTag::CustomersByRef, p, &[r.as_bytes()]),
        (None, Some(s)) => index::prefix(IndexTag::CustomersByStatus, p, &[s.as_bytes()]),
        (None, None) => index::prefix(IndexTag::Customers, p, &[]),
    };
    list_rows(
        &state,
        prefix,
        page,
        move |c: &Customer| status.as_ref().is_none_or(|s| &c.status == s),
        views::customer,
    )
    .await
}

/// `GET /v1/customers/{id}`.
async fn get_customer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    caller.require(READ)?;
    let id = path_uuid(&id)?;
    get_by_id::<Customer, _>(&state, &caller, id, ApiError::not_found("customer"), |c| {
        views::customer(c)
    })
    .await
}

/// `PATCH /v1/customers/{id}` — `email`, `metadata` (merged; null removes a key),
/// `reference_id`, `status` (`active` | `disabled`).
async fn patch_customer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    caller.require(WRITE)?;
    let id = path_uuid(&id)?;
    let f = &body.fields;
    let nullable = |name: &str, max: usize| -> Result<Option<Option<String>>, ApiError> {
        if !f.has(name) {
            return Ok(None);
        }
        Ok(Some(f.opt_bounded(name, max)?))
    };
    let status = f.opt_str("status")?;
    if let Some(s) = &status {
        if !matches!(s.as_str(), "active" | "disabled") {
            return Err(ApiError::invalid(
                "status",
                "status must be active or disabled.",
            ));
        }
    }
    let req = CustomerPatch {
        email: nullable("email", 320)?,
        reference_id: nullable("reference_id", 255)?,
        metadata: f.opt_object("metadata")?,
        status,
    };
    let s = scope(&state, &caller);
    let (resp, _) = commit(&state, None, move |ctx| {
        let c = customers::patch(ctx, &s, id, req)?;
        Ok((StatusCode::OK, views::customer(&c), ()))
    })
    .await?;
    Ok(resp)
}
