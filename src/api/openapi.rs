//! The OpenAPI 3.1 document of the API, generated from the handlers' `#[utoipa::path]`
//! annotations and the types that write the answers and read the bodies, and served at
//! `GET /v1/openapi.json` (public).
//!
//! How it is assembled: every resource module's `router()` is a `utoipa_axum` router whose
//! routes are registered with `routes!(handler, ...)`, so a route and its documentation are one
//! registration. [`crate::api::router`] serves the routes; [`document`] builds the same routers
//! and keeps the document. [`finish`] then adds what every operation shares (the error answers
//! of SPEC.md section 7, the bearer security requirement) and the `webhooks` section.
//!
//! `docs/openapi.json` is a committed copy; `tests/api/openapi.rs` fails when it differs from
//! what the server serves. Regenerate it with `cargo run -q -- openapi > docs/openapi.json`.

use std::sync::LazyLock;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::path::{HttpMethod, Operation, PathItem};
use utoipa::openapi::response::{Response as OaResponse, ResponseBuilder};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, HeaderBuilder, ObjectBuilder, OpenApi as Document, RefOr, Required, Schema,
    Type,
};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;
use crate::views::API_VERSION;

/// Name of the bearer security scheme in the document.
pub const BEARER: &str = "bearer";

const SECURITY_DESCRIPTION: &str = "\
`Authorization: Bearer <API key>` (SPEC.md section 5). A key is a prefix followed by 64 \
lowercase hex characters: `apk` + hex in live mode, `apktest` + hex in test mode; the mode \
of the key is the project's. Missing, malformed, expired or revoked: 401 `invalid_api_key`.\n\n\
Each key has a KIND, chosen at creation and reported by `GET /v1/ping`: `checkout` (invoices \
and hosted checkout), `payout` (payouts and their approvals, balances, payout history), \
`wallet` (customers, deposit addresses, deposits, balances, sweeps, read-only payout \
history). Any kind reaches `GET /v1/ping`, `GET /v1/chains` and `GET /v1/balances`. A wrong \
kind is 403 `wrong_key_kind`.\n\n\
Scopes: `customers:read`, `customers:write`, `wallets:read`, `wallets:create`, \
`balances:read`, `deposits:read`, `sweeps:read`, `sweeps:create`, `payouts:read`, \
`payouts:create`, `payouts:approve`, `webhooks:read`, `webhooks:write`, `webhooks:replay`, \
`events:read`, `invoices:read`, `invoices:write`, `conversions:read`, `conversions:write`, \
`billing:read`, `billing:write`, `api_keys:read`, `api_keys:write`; wildcards `*` and \
`<group>:*`. A missing scope is 403 `missing_scope`. Moving funds (`payouts:create`, \
`sweeps:create`) also needs signing enabled for the service, the project and the key \
(403 `signing_disabled`). A key pinned to `ip_allowlist` refuses other sources (403 \
`ip_not_allowed`). Each operation's description names the kinds and scope it needs.";

/// The document's fixed parts; paths come from the routers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "appliance API",
        description = "Custodial wallet and payments API: customers, deposit addresses, deposits, \
balances, sweeps, payouts, webhooks and events, on live EVM chains or a simulated chain in test \
mode. The contract is SPEC.md; where it is silent, DECISIONS.md.\n\n\
Conventions: every amount is a decimal STRING (atomic amounts are integer strings with a \
`*_decimal` twin); timestamps are RFC 3339 UTC; lists are cursor-paginated, newest first. \
Clients must ignore unknown response properties and keep a default branch on every \
enumerated value: new properties, enum values, event types and error codes can appear within \
a version (SPEC.md section 9). A resource of another project answers 404, never 403.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(
        crate::api::error::ErrorBody, crate::views::EventView<'static>,
        crate::api::balances::BalanceSourceIn, crate::api::deposits::DepositStatusIn,
        crate::api::sweeps::SweepStatusIn, crate::api::payouts::PayoutStatusIn,
        crate::api::webhook_deliveries::DeliveryStatusIn, crate::api::events::EventOrder,
        crate::api::api_keys::IncludeRevoked, crate::api::customers::CustomerStatusIn,
        crate::api::conversions::ConversionStatusIn, crate::api::conversions::ConversionKindIn,
        crate::api::invoices::InvoiceStatusIn, crate::api::billing::BillingEntryKindIn,
    )),
    tags(
        (name = "meta", description = "Who am I, chains, this document."),
        (name = "api_keys", description = "API keys (SPEC.md section 4, API keys)."),
        (name = "customers", description = "Customers."),
        (name = "wallets", description = "Deposit addresses and balances."),
        (name = "deposits", description = "Deposits."),
        (name = "sweeps", description = "Sweeps into the master wallet."),
        (name = "payouts", description = "Payouts."),
        (name = "conversions", description = "On-chain conversions through a DEX: rules, quotes, rows and batches."),
        (name = "invoices", description = "Invoices (SPEC.md section 4, Invoices)."),
        (name = "webhooks", description = "Webhook endpoints and deliveries."),
        (name = "events", description = "The event log and stream."),
        (name = "checkout", description = "The public checkout: the checkout token is the authorisation (SPEC.md section 4, Checkout)."),
        (name = "billing", description = "The plan and the prepaid operational balance (USD cents) fees are drawn from."),
        (name = "test", description = "Test mode: the simulated chain (test wallet keys only)."),
    )
)]
pub struct ApiDoc;

/// `GET /v1/openapi.json` and nothing else (the document's own route).
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(openapi_json))
}

/// The served document, built once.
static SERVED: LazyLock<String> = LazyLock::new(|| to_json(&document()));

/// `GET /v1/openapi.json` — this API's OpenAPI 3.1 document (public, no key).
#[utoipa::path(
    get, path = "/v1/openapi.json", tag = "meta", operation_id = "get_openapi",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document.", content_type = "application/json", body = Object)),
)]
async fn openapi_json() -> Response {
    let mut r = SERVED.as_str().into_response();
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The whole document: the routers' paths, plus what [`finish`] adds.
pub fn document() -> Document {
    let (_, doc) = crate::api::documented().split_for_parts();
    finish(doc)
}

/// The document as served and committed: pretty JSON with a final newline.
pub fn to_json(doc: &Document) -> String {
    let mut s = serde_json::to_string_pretty(doc).expect("the document serializes");
    s.push('\n');
    s
}

/// Adds what every operation shares to a document built from the routers: `info.version`,
/// the bearer scheme, a default security requirement on operations that declare none, the
/// SPEC.md section 7 error answers each operation can give, `405` for undeclared methods,
/// and the `webhooks` section.
pub fn finish(mut doc: Document) -> Document {
    doc.info.version = API_VERSION.to_string();
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        BEARER,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("apk[test]<64 hex>")
                .description(Some(SECURITY_DESCRIPTION))
                .build(),
        ),
    );
    for (name, desc) in COMMON_RESPONSES {
        components.responses.insert(
            (*name).to_string(),
            RefOr::T(error_response(
                desc,
                *name == "RateLimited" || *name == "InProgress",
            )),
        );
    }
    // A body whose schema requires nothing may be omitted (an empty body reads as `{}`).
    let requires: std::collections::BTreeMap<String, bool> = components
        .schemas
        .iter()
        .map(|(name, s)| {
            let req = matches!(s, RefOr::T(Schema::Object(o)) if !o.required.is_empty());
            (format!("#/components/schemas/{name}"), req)
        })
        .collect();
    for (path, item) in doc.paths.paths.iter_mut() {
        for (method, op) in operations(item) {
            add_common(path, method, op);
            if let Some(RefOr::T(body)) = op.request_body.as_mut() {
                let required = body.content.values().any(|c| match c {
                    RefOr::T(c) => matches!(&c.schema, Some(RefOr::Ref(r)) if requires.get(&r.ref_location).copied().unwrap_or(false)),
                    RefOr::Ref(_) => false,
                });
                body.required = Some(if required {
                    Required::True
                } else {
                    Required::False
                });
            }
        }
    }
    add_links(&mut doc);
    doc.webhooks = Some(crate::api::webhook_docs::webhooks());
    crate::api::webhook_docs::add_event_schemas(&mut doc);
    doc
}

/// Shared error answers, by component name.
const COMMON_RESPONSES: &[(&str, &str)] = &[
    ("BadRequest", "400 `invalid_request_error`: malformed or failed validation (`invalid_request`, `invalid_json`, ...), `param` names the field."),
    ("Unauthorized", "401 `invalid_api_key`: missing, malformed, expired or revoked key."),
    ("Forbidden", "403: `wrong_key_kind`, `missing_scope`, `scope_not_grantable` (a key minting or patching a key beyond its own scopes, or with `payouts:approve`), `ip_not_allowed`, `signing_disabled`, `test_mode_only`."),
    ("NotFound", "404 `not_found`: no such resource in this project (another project's resource answers the same)."),
    ("MethodNotAllowed", "405 `method_not_allowed`; `Allow` lists the methods the path serves."),
    ("Conflict", "409: `idempotency_key_reuse` (same key, different body), `idempotency_in_progress` (with `Retry-After`), or an illegal state transition (`invalid_state`, ...)."),
    ("InProgress", "409 `idempotency_in_progress` (with `Retry-After`) or another conflict."),
    ("PayloadTooLarge", "413 `request_too_large`: the body exceeds the configured limit."),
    ("UnsupportedMediaType", "415 `unsupported_media_type`: a body must be `application/json`."),
    ("Unprocessable", "422: valid JSON refused by the chain or an availability rule."),
    ("RateLimited", "429 `rate_limited` (or `quota_exceeded`, `too_many_pending_payouts`, ...): honour `Retry-After`."),
    ("ServerError", "5xx `api_error`: the request may or may not have taken effect; retry with the same `Idempotency-Key`."),
];

fn error_response(description: &str, retry_after: bool) -> OaResponse {
    let mut b = ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                "Error",
            ))))
            .build(),
    );
    if retry_after {
        b = b.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0)),
                ))
                .description(Some("Seconds to wait before retrying."))
                .build(),
        );
    }
    b.build()
}

fn operations(item: &mut PathItem) -> Vec<(HttpMethod, &mut Operation)> {
    let mut v = Vec::new();
    for (m, op) in [
        (HttpMethod::Get, item.get.as_mut()),
        (HttpMethod::Post, item.post.as_mut()),
        (HttpMethod::Put, item.put.as_mut()),
        (HttpMethod::Patch, item.patch.as_mut()),
        (HttpMethod::Delete, item.delete.as_mut()),
    ] {
        if let Some(op) = op {
            v.push((m, op));
        }
    }
    v
}

fn add_common(path: &str, method: HttpMethod, op: &mut Operation) {
    let public = op
        .security
        .as_ref()
        .is_some_and(|s| s.iter().all(|r| *r == SecurityRequirement::default()));
    if op.security.is_none() {
        op.security = Some(vec![SecurityRequirement::new::<_, _, &str>(BEARER, [])]);
    }
    let has_body = op.request_body.is_some();
    let mut want: Vec<(&str, &str)> = vec![
        ("400", "BadRequest"),
        ("405", "MethodNotAllowed"),
        ("429", "RateLimited"),
        ("500", "ServerError"),
    ];
    if !public {
        want.extend([("401", "Unauthorized"), ("403", "Forbidden")]);
    }
    if path.contains('{') {
        want.push(("404", "NotFound"));
    }
    if method != HttpMethod::Get {
        want.push(("409", "Conflict"));
    }
    if has_body {
        want.extend([("413", "PayloadTooLarge"), ("415", "UnsupportedMediaType")]);
    }
    for (status, name) in want {
        op.responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| {
                RefOr::Ref(utoipa::openapi::Ref::new(format!(
                    "#/components/responses/{name}"
                )))
            });
    }
}

/// Links from an answer to the operations that take what it returns (OpenAPI `links`): how a
/// client (and Schemathesis's stateful phase) goes from a created resource to its reads and
/// transitions. (source path, method, status, link name, target operationId, target
/// parameter, runtime expression).
const LINKS: &[(&str, &str, &str, &str, &str, &str, &str)] = &[
    (
        "/v1/invoices",
        "post",
        "201",
        "GetInvoice",
        "get_invoice",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/invoices",
        "post",
        "201",
        "CancelInvoice",
        "cancel_invoice",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/customers",
        "post",
        "201",
        "GetCustomer",
        "get_customer",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/customers",
        "post",
        "201",
        "PatchCustomer",
        "patch_customer",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/customers",
        "post",
        "201",
        "CustomerBalances",
        "customer_balances",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/wallets",
        "post",
        "201",
        "GetWallet",
        "get_wallet",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/wallets",
        "post",
        "201",
        "WalletBalances",
        "wallet_balances",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/wallets",
        "post",
        "200",
        "GetWallet",
        "get_wallet",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/test/deposits",
        "post",
        "201",
        "GetDeposit",
        "get_deposit",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/test/deposits",
        "post",
        "201",
        "ConfirmDeposit",
        "confirm_test_deposit",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/test/deposits",
        "post",
        "201",
        "FailDeposit",
        "fail_test_deposit",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/test/deposits",
        "post",
        "201",
        "OrphanDeposit",
        "orphan_test_deposit",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/sweeps",
        "post",
        "201",
        "GetSweep",
        "get_sweep",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/payouts",
        "post",
        "202",
        "GetPayout",
        "get_payout",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/payouts",
        "post",
        "202",
        "CancelPayout",
        "cancel_payout",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/payouts",
        "post",
        "202",
        "ApprovePayout",
        "approve_payout",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/payouts",
        "post",
        "202",
        "RejectPayout",
        "reject_payout",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/api_keys",
        "post",
        "201",
        "GetKey",
        "get_key",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/api_keys",
        "post",
        "201",
        "PatchKey",
        "patch_key",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/api_keys",
        "post",
        "201",
        "RollKey",
        "roll_key",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/api_keys",
        "post",
        "201",
        "RevokeKey",
        "revoke_key",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/webhooks",
        "post",
        "201",
        "GetWebhook",
        "get_webhook",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/webhooks",
        "post",
        "201",
        "PatchWebhook",
        "patch_webhook",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/webhooks",
        "post",
        "201",
        "RotateSecret",
        "rotate_secret",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/webhooks",
        "post",
        "201",
        "TestWebhook",
        "test_webhook",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/webhooks",
        "post",
        "201",
        "DeleteWebhook",
        "delete_webhook",
        "id",
        "$response.body#/id",
    ),
    (
        "/v1/webhooks/{id}/test",
        "post",
        "202",
        "GetDelivery",
        "get_delivery",
        "id",
        "$response.body#/delivery_id",
    ),
    (
        "/v1/webhooks/{id}/test",
        "post",
        "202",
        "ReplayDelivery",
        "replay_delivery",
        "id",
        "$response.body#/delivery_id",
    ),
    (
        "/v1/webhooks/{id}/test",
        "post",
        "202",
        "GetEvent",
        "get_event",
        "id",
        "$response.body#/event_id",
    ),
    (
        "/v1/webhooks/{id}/test",
        "post",
        "202",
        "EventDeliveries",
        "list_event_deliveries",
        "id",
        "$response.body#/event_id",
    ),
];

fn add_links(doc: &mut Document) {
    use utoipa::openapi::link::LinkBuilder;
    for (path, method, status, name, target, param, expr) in LINKS {
        let Some(item) = doc.paths.paths.get_mut(*path) else {
            continue;
        };
        let op = match *method {
            "post" => item.post.as_mut(),
            "get" => item.get.as_mut(),
            _ => None,
        };
        let Some(op) = op else { continue };
        let Some(RefOr::T(resp)) = op.responses.responses.get_mut(*status) else {
            continue;
        };
        resp.links.insert(
            (*name).to_string(),
            RefOr::T(
                LinkBuilder::new()
                    .operation_id(*target)
                    .parameter(*param, *expr)
                    .build(),
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op_ids(doc: &Document) -> std::collections::BTreeMap<String, (String, Vec<String>)> {
        let mut m = std::collections::BTreeMap::new();
        for (path, item) in &doc.paths.paths {
            let mut item = item.clone();
            for (_, op) in operations(&mut item) {
                let params = op
                    .parameters
                    .iter()
                    .flatten()
                    .filter_map(|p| match p {
                        RefOr::T(p) => Some(p.name.clone()),
                        RefOr::Ref(_) => None,
                    })
                    .collect();
                if let Some(id) = &op.operation_id {
                    m.insert(id.clone(), (path.clone(), params));
                }
            }
        }
        m
    }

    #[test]
    fn every_link_is_placed_and_resolves() {
        let doc = document();
        let ids = op_ids(&doc);
        let mut placed = 0;
        for item in doc.paths.paths.values() {
            let mut item = item.clone();
            for (_, op) in operations(&mut item) {
                for resp in op.responses.responses.values() {
                    let RefOr::T(resp) = resp else { continue };
                    for link in resp.links.values() {
                        let RefOr::T(link) = link else { continue };
                        let (path, params) = ids
                            .get(&link.operation_id)
                            .unwrap_or_else(|| panic!("no operation {}", link.operation_id));
                        for p in link.parameters.keys() {
                            assert!(params.contains(p), "{path} has no parameter {p}");
                        }
                        placed += 1;
                    }
                }
            }
        }
        assert_eq!(
            placed,
            LINKS.len(),
            "a link's source operation or status is missing"
        );
    }

    #[test]
    fn operation_ids_are_unique_and_every_operation_is_secured_or_public() {
        let doc = document();
        let mut seen = std::collections::BTreeSet::new();
        for (path, item) in &doc.paths.paths {
            let mut item = item.clone();
            for (_, op) in operations(&mut item) {
                let id = op.operation_id.clone().expect("operation id");
                assert!(seen.insert(id.clone()), "duplicate operation id {id}");
                assert!(op.security.is_some(), "{id} {path}: no security");
                for status in ["400", "429", "500"] {
                    assert!(
                        op.responses.responses.contains_key(status),
                        "{id} {path}: no {status}"
                    );
                }
            }
        }
        assert_eq!(doc.info.version, "2026-08-01");
    }
}
