//! The `/v1` HTTP API: one file per resource, each with its own `router()`.

pub mod api_keys;
pub mod authed;
pub mod balances;
pub mod billing;
pub mod chains;
pub mod checkout;
pub mod coins;
pub mod conversions;
pub mod customers;
pub mod deposits;
pub mod error;
pub mod events;
pub mod extract;
pub mod http_rules;
mod idempotency;
pub mod invoices;
pub mod market;
pub mod openapi;
pub mod ops;
pub mod payouts;
pub mod ping;
pub mod stream;
pub mod sweeps;
pub mod test_mode;
pub mod test_transfers;
pub mod wallets;
pub mod webhook_deliveries;
pub mod webhook_docs;
pub mod webhooks;

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::Value;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use appliance_storage::records::IdempotencyRecord;
use appliance_storage::{Page, ReadOps, WriteCtx};

use crate::api::error::ApiError;
use crate::auth::Caller;
use crate::sealing::DataKey;
use crate::services::error::Fault;
use crate::services::Scope;
use crate::state::AppState;

pub use crate::services::IDEMPOTENCY_TTL_US;
pub use idempotency::*;

/// Every documented route of the API with its OpenAPI operation: each resource
/// module's `router()` registers its handlers with `utoipa_axum::routes!`, so what is served
/// and what `GET /v1/openapi.json` describes come from the same registration.
pub fn documented() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(openapi::router())
        .merge(ping::router())
        .merge(chains::router())
        .merge(coins::router())
        .merge(market::router())
        .merge(api_keys::router())
        .merge(customers::router())
        .merge(wallets::router())
        .merge(balances::router())
        .merge(deposits::router())
        .merge(payouts::router())
        .merge(invoices::router())
        .merge(checkout::router())
        .merge(sweeps::router())
        .merge(conversions::router())
        .merge(events::router())
        .merge(stream::router())
        .merge(webhooks::router())
        .merge(webhook_deliveries::router())
        .merge(billing::router())
        .merge(test_mode::router())
        .merge(test_transfers::router())
}

/// The whole API, with request ids, the 1 MiB body limit and enveloped 404/405.
pub fn router(state: AppState) -> Router {
    let (api, _) = documented().split_for_parts();
    api.merge(ops::router())
        .merge(coins::assets_router())
        .merge(checkout::page_router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Request ids, the access log, and the HTTP-level rules: drain what was
        // left unread, header-count and URI limits, envelope the framework's own errors.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http_rules::edge,
        ))
        .with_state(state)
}

/// A request to an unknown route costs its caller like any other: a request without a valid
/// key is charged to its IP's unauthenticated budget (429 when spent), a keyed one to its key.
async fn charge_unrouted(
    state: &AppState,
    parts: &mut axum::http::request::Parts,
) -> Option<ApiError> {
    use axum::extract::FromRequestParts;
    match Caller::from_request_parts(parts, state).await {
        Err(e) if e.status == StatusCode::TOO_MANY_REQUESTS => Some(e),
        _ => None,
    }
}

async fn not_found(
    axum::extract::State(state): axum::extract::State<AppState>,
    mut parts: axum::http::request::Parts,
) -> ApiError {
    if let Some(e) = charge_unrouted(&state, &mut parts).await {
        return e;
    }
    ApiError::new(StatusCode::NOT_FOUND, "route_not_found", "No such route.")
}

async fn method_not_allowed(
    axum::extract::State(state): axum::extract::State<AppState>,
    mut parts: axum::http::request::Parts,
) -> ApiError {
    if let Some(e) = charge_unrouted(&state, &mut parts).await {
        return e;
    }
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "This route does not accept that method.",
    )
}

/// The service scope of a caller.
pub fn scope(state: &AppState, caller: &Caller) -> Scope {
    Scope {
        reg: state.registry.clone(),
        project: caller.project.clone(),
        delivery_attempts: state.config.webhooks.max_attempts(),
    }
}

/// A JSON answer, written straight from `v` (a typed view or a `Value`).
pub fn json<T: serde::Serialize + ?Sized>(status: StatusCode, v: &T) -> Response {
    json_sized(status, v, 1024)
}

/// [`json`] into a buffer of `capacity` bytes to begin with (a list's size is known
/// roughly in advance: fewer regrowths).
fn json_sized<T: serde::Serialize + ?Sized>(
    status: StatusCode,
    v: &T,
    capacity: usize,
) -> Response {
    let mut body = Vec::with_capacity(capacity);
    serde_json::to_writer(&mut body, v).expect("json");
    raw_json(status, body)
}

fn raw_json(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `body` answered with `headers` (static values), set in the order given.
pub fn with_headers(
    body: impl IntoResponse,
    headers: &[(header::HeaderName, &'static str)],
) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    for (name, value) in headers {
        h.insert(name.clone(), HeaderValue::from_static(value));
    }
    resp
}

/// 201 for a new resource, 200 for an existing one returned again.
pub fn created_or_ok(created: bool) -> StatusCode {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    }
}

/// A page of rows as the list answer (`{object: list, data, has_more, next_cursor}`,
/// SPEC.md section 2, Lists), each row as `view` renders it, written straight to the
/// response body.
pub trait PageAnswer<R: 'static> {
    fn answer<'a, S: serde::Serialize>(&'a self, view: impl Fn(&'a R) -> S) -> Response;
}

impl<R: appliance_storage::records::Row + 'static> PageAnswer<R> for Page<R> {
    fn answer<'a, S: serde::Serialize>(&'a self, view: impl Fn(&'a R) -> S) -> Response {
        let next = self
            .items
            .last()
            .map(|r| extract::cursor_of(r.id().as_bytes()));
        let data = self.items.iter().map(view).collect::<Vec<_>>();
        let body = extract::ListPage::new(&data, self.has_more, next);
        json_sized(StatusCode::OK, &body, 256 + 768 * data.len())
    }
}
