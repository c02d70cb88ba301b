//! Customers (SPEC.md section 4, Customers).

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::{Customer, CustomerStatus, KeyKind};

use crate::api::authed::{access_rules, Authed, PathId, Post};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::{read_body, Fields, JsonBody, Params, ReadBody};
use crate::api::{created_or_ok, json, PageAnswer};
use crate::auth::Access;
use crate::services::customers::{self, CustomerPatch, NewCustomer};
use crate::services::reads;
use crate::services::types::CustomerId;
use crate::state::AppState;
use crate::views;
use serde_json::json;
use serde_json::{Map, Value};
use utoipa::openapi::{RefOr, Schema};
use utoipa::PartialSchema;
use utoipa::ToSchema;
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

/// `POST /v1/customers`: every field optional; `{}` is accepted.
#[derive(ToSchema)]
#[schema(as = NewCustomer)]
pub struct NewCustomerBody {
    /// The merchant's own user id; re-posting an existing one answers 200 with that customer.
    #[schema(max_length = 255)]
    pub reference_id: Option<String>,
    #[schema(max_length = 320)]
    pub email: Option<String>,
    #[schema(value_type = Option<MetadataIn>)]
    pub metadata: Option<Map<String, Value>>,
}

read_body!(NewCustomerBody {
    reference_id: opt_bounded(255),
    email: opt_bounded(320),
    metadata: opt_object,
});

/// `PATCH /v1/customers/{id}`: only the fields present change; `null` clears `email` and
/// `reference_id`; `metadata` is merged (a `null` value removes a key).
#[derive(ToSchema)]
#[schema(as = CustomerPatch)]
pub struct CustomerPatchBody {
    #[schema(value_type = Option<String>, max_length = 255)]
    pub reference_id: Option<Option<String>>,
    #[schema(value_type = Option<String>, max_length = 320)]
    pub email: Option<Option<String>>,
    #[schema(value_type = Option<MetadataPatchIn>)]
    pub metadata: Option<Map<String, Value>>,
    #[schema(value_type = Option<CustomerStatusIn>)]
    pub status: Option<CustomerStatus>,
}

impl ReadBody for CustomerPatchBody {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        let status = f
            .opt_str("status")?
            .map(|s| {
                CustomerStatus::parse(&s).ok_or_else(|| {
                    ApiError::invalid("status", "status must be active or disabled.")
                })
            })
            .transpose()?;
        let email = f.opt_nullable("email", 320)?;
        let reference_id = f.opt_nullable("reference_id", 255)?;
        Ok(CustomerPatchBody {
            reference_id,
            email,
            metadata: f.opt_object("metadata")?,
            status,
        })
    }
}

/// Create a customer; an existing `reference_id` answers 200 with the existing customer
/// (SPEC.md section 4, Customers).
///
/// Key: `wallet` kind, scope `customers:write`.
#[utoipa::path(post, path = "/v1/customers", tag = "customers",
    params(crate::api::IdempotencyHeader),
    request_body(content = NewCustomerBody, description = "Every field optional; `{}` is accepted."),
    responses(
        (status = 201, description = "Created.", body = crate::views::CustomerView),
        (status = 200, description = "A customer with this `reference_id` exists: that customer.", body = crate::views::CustomerView),
    ))]
async fn create_customer(a: Authed<WRITE>, Post { key, body }: Post) -> Result<Response, ApiError> {
    let NewCustomerBody {
        reference_id,
        email,
        metadata,
    } = body.read()?;
    let req = NewCustomer {
        reference_id,
        email,
        metadata,
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
        ("status" = Option<CustomerStatusIn>, Query, description = "Only customers in this status."),
    ),
    responses((status = 200, description = "A page of customers.", body = CustomerList)))]
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
async fn get_customer(a: Authed<READ>, id: CustomerId) -> Result<Response, ApiError> {
    let c = a.row::<Customer>(id, ApiError::not_found("customer"))?;
    Ok(json(StatusCode::OK, &views::customer_view(&c)))
}

/// Update a customer: `email`, `metadata` (merged; a null value removes a key),
/// `reference_id`, `status` (`active` | `disabled`).
///
/// Key: `wallet` kind, scope `customers:write`.
#[utoipa::path(patch, path = "/v1/customers/{id}", tag = "customers", params(PathId),
    request_body = CustomerPatchBody,
    responses((status = 200, description = "The updated customer.", body = crate::views::CustomerView)))]
async fn patch_customer(
    a: Authed<WRITE>,
    id: CustomerId,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let CustomerPatchBody {
        reference_id,
        email,
        metadata,
        status,
    } = body.read()?;
    let req = CustomerPatch {
        email,
        metadata,
        reference_id,
        status,
    };
    let s = a.scope();
    a.write(move |ctx| {
        let c = customers::patch(ctx, &s, id, req)?;
        Ok((StatusCode::OK, views::customer(&c), ()))
    })
    .await
}

list_schema! {
    CustomerList => crate::views::CustomerView<'static>;
}

/// A customer status a request may set or filter by.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum CustomerStatusIn {
    Active,
    Disabled,
}

fn metadata_schema(patch: bool) -> Value {
    let values = vec![
        json!({"type": "string", "maxLength": crate::services::metadata::MAX_VALUE_CHARS}),
        json!({"type": "number"}),
        json!({"type": "boolean"}),
        json!({"type": "null"}),
    ];
    let description = if patch {
        "Merged into the customer's metadata; a key set to null is removed; the result holds at most 50 keys."
    } else {
        "The merchant's key-value data; null values are left out."
    };
    json!({
        "type": "object",
        "description": format!("{description} At most {} keys of 1-{} characters; each value a string of at most {} characters, a number or a boolean.",
            crate::services::metadata::MAX_KEYS, crate::services::metadata::MAX_KEY_CHARS, crate::services::metadata::MAX_VALUE_CHARS),
        "maxProperties": crate::services::metadata::MAX_KEYS,
        "propertyNames": {"type": "string", "minLength": 1, "maxLength": crate::services::metadata::MAX_KEY_CHARS},
        "additionalProperties": {"anyOf": values},
    })
}

/// `metadata` of a request that sets it whole.
pub struct MetadataIn;

impl PartialSchema for MetadataIn {
    fn schema() -> RefOr<Schema> {
        crate::services::types::schema_from_json(metadata_schema(false))
    }
}
impl ToSchema for MetadataIn {}

/// `metadata` of a patch: merged, null removes a key.
pub struct MetadataPatchIn;

impl PartialSchema for MetadataPatchIn {
    fn schema() -> RefOr<Schema> {
        crate::services::types::schema_from_json(metadata_schema(true))
    }
}
impl ToSchema for MetadataPatchIn {}
