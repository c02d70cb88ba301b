//! The public checkout (SPEC.md section 4, Checkout; the token is the authorisation):
//! `GET /v1/checkout/{token}`, `POST /v1/checkout/{token}/select` and
//! `POST /v1/checkout/{token}/refund`; and the hosted page that reads them
//! (DECISIONS.md section 12): `GET /checkout/{token}` (the HTML shell, or the one
//! "not found" page), its QR codes `GET /checkout/{token}/qr.svg` and its script and style
//! sheet under `/assets/checkout/`.
//!
//! Budgets (DECISIONS.md section 12): a request naming a token that exists is charged to
//! that token (120 per minute; refunds also 10 per minute), never to the per-IP
//! unauthenticated budget; a miss is charged to the caller's address like any request
//! without a key, and answers the same 404 whatever the reason.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, FromRequestParts, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use appliance_storage::WriteError;

use crate::api::error::ApiError;
use crate::api::extract::{rate_limited, ClientIp, JsonBody, Params};
use crate::api::with_headers;
use crate::services::checkout::{self, CheckoutError, Loaded};
use crate::services::checkout_cache::Cached;
use crate::services::invoices;
use crate::services::types::InvoiceId;
use crate::services::Scope;
use crate::state::AppState;

/// The documented checkout endpoints.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_checkout))
        .routes(routes!(select_checkout))
        .routes(routes!(refund_checkout))
}

/// The hosted page, its QR codes and static files (HTML and images, outside the API
/// description, like the coin logos).
pub fn page_router() -> Router<AppState> {
    Router::new()
        .route("/checkout/{token}", get(checkout_page))
        .route("/checkout/{token}/qr.svg", get(checkout_qr))
        .route("/assets/checkout/{file}", get(checkout_asset))
}

/// How long a refund's classification (node reads) may take inside a refund request.
const CLASSIFY_TIMEOUT: Duration = Duration::from_secs(10);

fn now_us() -> i64 {
    appliance_storage::now_us()
}

/// The `{token}` path segment. A segment that does not decode (invalid UTF-8 in its
/// percent-escapes) is a token no checkout has: it reads as the empty token, so it gets the
/// one answer to every miss (404 in the envelope, or the page's own 404) and not the
/// router's plain-text 400 (SPEC.md: any unknown token is 404).
struct Token(String);

impl<S: Send + Sync> FromRequestParts<S> for Token {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Token(
            Path::<String>::from_request_parts(parts, state)
                .await
                .map(|Path(t)| t)
                .unwrap_or_default(),
        ))
    }
}

/// A public request's body, read only after its token opened a checkout, and only while
/// its address reads at most `state::PUBLIC_BODIES_PER_IP` bodies at once (429 past it):
/// a body may take `limits.body_read_timeout_secs`, and a request for no checkout must
/// not hold a reader for that long.
async fn read_body(
    state: &AppState,
    ip: IpAddr,
    req: axum::extract::Request,
) -> Result<JsonBody, ApiError> {
    let _slot = state
        .limits
        .public_body(ip)
        .ok_or_else(|| rate_limited(1))?;
    JsonBody::from_request(req, state).await
}

/// The one answer to every miss, after charging the caller's address (429 once spent).
fn miss(state: &AppState, ip: IpAddr) -> ApiError {
    if let Err(retry) = state.limits.check_unauthenticated(ip) {
        return rate_limited(retry);
    }
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "No such checkout.")
}

/// What the token opens, from the exact checkout cache or one bounded store read
/// (`services::checkout_cache`); `Err` is the miss answer (or a store failure).
async fn open(state: &AppState, ip: IpAddr, token: &str) -> Result<Arc<Cached>, ApiError> {
    if !invoices::is_token(token) {
        return Err(miss(state, ip));
    }
    match state
        .checkout_cache
        .open(&state.store, &state.registry, token, now_us())?
    {
        Some(c) => Ok(c),
        None => Err(miss(state, ip)),
    }
}

/// Charges one request to the token's own budget.
fn charge(state: &AppState, l: &Loaded) -> Result<(), ApiError> {
    state
        .limits
        .check_checkout(l.invoice.id, checkout::CHECKOUT_PER_MINUTE)
        .map_err(rate_limited)
}

/// The document of `c` with `now` at this moment (rendered once per change of what it
/// shows; `services::checkout_cache`).
fn document(c: &Cached) -> Response {
    let mut resp = crate::api::raw_json(StatusCode::OK, c.body(c.now_us(now_us())));
    no_store(resp.headers_mut());
    resp
}

fn no_store(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

fn scope(state: &AppState, l: &Loaded) -> Scope {
    Scope {
        reg: state.registry.clone(),
        project: state
            .keys
            .project(l.project.id)
            .unwrap_or_else(|| std::sync::Arc::new(l.project.clone())),
        delivery_attempts: state.config.webhooks.max_attempts(),
    }
}

fn write_error(e: WriteError<CheckoutError>) -> ApiError {
    match e {
        WriteError::Rejected(e) => e.into(),
        WriteError::Store(s) => s.into(),
    }
}

/// Classifies the refund claims of `l` that wait for it
/// (`services::checkout::RefundClassifier`).
async fn classify_refund(state: &AppState, l: &Loaded) {
    checkout::RefundClassifier {
        store: &state.store,
        reg: &state.registry,
        market: &state.market,
        sim: &state.sim,
        busy: &state.refund_classifying,
    }
    .run(l)
    .await
}

/// The checkout document (`object: checkout`, SPEC.md section 2).
#[derive(ToSchema)]
#[schema(as = Checkout)]
pub struct CheckoutDoc {
    /// Always `checkout`.
    #[schema(pattern = "^checkout$")]
    pub object: String,
    /// `open`, `pending`, `paid`, `underpaid`, `overpaid`, `expired`, `canceled`; new values
    /// can appear.
    pub status: String,
    pub merchant: CheckoutMerchant,
    pub title: Option<String>,
    pub description: Option<String>,
    /// `USD`.
    pub currency: String,
    /// In `currency`, two decimal places (`"40.00"`).
    #[schema(pattern = r"^[0-9]+\.[0-9]{2}$")]
    pub price: String,
    #[schema(pattern = r"^[0-9]+\.[0-9]{2}$")]
    pub received: String,
    #[schema(pattern = r"^[0-9]+\.[0-9]{2}$")]
    pub remaining: String,
    #[schema(pattern = r"^[0-9]+\.[0-9]{2}$")]
    pub excess: String,
    pub expires_at: String,
    /// The underpaid window was extended.
    pub extended: bool,
    /// `keep` or `refund`.
    pub overpayment_policy: String,
    pub selected: Option<CheckoutChoice>,
    pub options: Vec<CheckoutOption>,
    pub payments: Vec<CheckoutPayment>,
    /// The open refund claim: the oldest awaiting an address, else the newest; null while
    /// there is none (DECISIONS.md section 5).
    pub refund: Option<CheckoutRefund>,
    /// Every refund claim, oldest first: under the `refund` policy, excess that arrives
    /// after a refund was requested opens a new claim, refunded by its own payout.
    pub refunds: Vec<CheckoutRefund>,
    pub return_url: Option<String>,
    /// The project's clock (test projects follow the test clock), for countdowns.
    pub now: String,
}

/// `merchant` of the checkout document (project settings, DECISIONS.md section 12).
#[derive(ToSchema)]
pub struct CheckoutMerchant {
    pub name: Option<String>,
    pub logo_url: Option<String>,
}

/// A (chain, asset) pair.
#[derive(ToSchema)]
pub struct CheckoutChoice {
    pub chain: String,
    pub asset: String,
}

/// One way to pay: a (chain, asset) with its locked quote.
#[derive(ToSchema)]
pub struct CheckoutOption {
    pub chain: String,
    pub asset: String,
    /// The network's name (`Ethereum`, `BNB Smart Chain`).
    pub name: String,
    pub decimals: u8,
    pub address: String,
    pub memo: Option<String>,
    /// Whole coins (`"0.0125"`).
    #[schema(pattern = r"^[0-9]+(\.[0-9]+)?$")]
    pub amount: String,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub amount_atomic: String,
    /// USD per whole coin (locked).
    pub rate: String,
    pub stable: bool,
    /// When the rate would be refreshed: `expires_at` (rates are locked).
    pub refresh_at: String,
    /// Payment URI (DECISIONS.md section 12).
    pub uri: Option<String>,
    /// What is still to pay in this coin while `underpaid` (else null).
    #[schema(pattern = r"^[0-9]+(\.[0-9]+)?$")]
    pub remaining_amount: Option<String>,
    #[schema(pattern = "^(0|[1-9][0-9]*)$")]
    pub remaining_amount_atomic: Option<String>,
    /// The payment URI of the remainder while `underpaid` (else null).
    pub remaining_uri: Option<String>,
}

/// A payment to the checkout's addresses.
#[derive(ToSchema)]
pub struct CheckoutPayment {
    pub chain: String,
    pub asset: String,
    #[schema(pattern = r"^[0-9]+(\.[0-9]+)?$")]
    pub amount: String,
    pub tx_hash: String,
    pub explorer_url: Option<String>,
    pub confirmations: u32,
    pub required_confirmations: u32,
    /// `pending`, `confirmed`, `failed`, `orphaned`.
    pub status: String,
    /// First seen after the invoice expired or was canceled (still credited).
    pub late: bool,
    pub at: String,
}

/// One refund claim of an overpayment (`refund` policy).
#[derive(ToSchema)]
pub struct CheckoutRefund {
    /// `awaiting_address`, `pending`, `sent`, `confirmed`, `skipped`. A claim whose payout
    /// failed, reverted or was canceled is `awaiting_address` again (`to_address` null).
    /// `failed` appears only on refunds whose payout failed before that rule.
    pub status: String,
    /// `dust` when `skipped`.
    pub skip_reason: Option<String>,
    pub chain: String,
    pub asset: String,
    /// The excess held, whole coins.
    pub gross: String,
    /// Network fee estimate in the same coin (null until known).
    pub fee: Option<String>,
    /// `gross` - `fee` (null until known).
    pub net: Option<String>,
    /// `personal`, `contract`, `exchange`, `unknown` (null until known).
    pub sender_class: Option<String>,
    /// The sender's address, only for `personal`.
    pub suggested_address: Option<String>,
    pub to_address: Option<String>,
    pub tx_hash: Option<String>,
    pub explorer_url: Option<String>,
}

/// `POST /v1/checkout/{token}/select` body.
#[derive(ToSchema)]
pub struct CheckoutSelectIn {
    pub chain: crate::services::types::ChainIdIn,
    /// An asset symbol the checkout offers on `chain`.
    #[schema(pattern = "^[A-Za-z0-9]{1,16}$")]
    pub asset: String,
}

/// `POST /v1/checkout/{token}/refund` body.
#[derive(ToSchema)]
pub struct CheckoutRefundIn {
    /// The buyer's address on the refund's chain.
    #[schema(min_length = 1, max_length = 128)]
    pub address: String,
}

/// `GET /v1/checkout/{token}` — the checkout document (SPEC.md section 4, Checkout).
///
/// Public: the token (`ck_` + 43 base64url characters) is the authorisation. Every miss is
/// the same 404. Each token has its own budget of 120 requests per minute.
#[utoipa::path(get, path = "/v1/checkout/{token}", tag = "checkout", security(()),
    operation_id = "get_checkout",
    params(("token" = String, Path, description = "The checkout token.", pattern = "^ck_[A-Za-z0-9_-]{43}$")),
    responses(
        (status = 200, description = "The checkout document.", body = CheckoutDoc),
    ))]
async fn get_checkout(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Token(token): Token,
) -> Result<Response, ApiError> {
    let l = open(&state, ip, &token).await?;
    charge(&state, &l)?;
    if checkout::needs_classification(&l.invoice) {
        // In the background: the buyer's next poll shows the result.
        let (state2, token2) = (state.clone(), token.clone());
        tokio::spawn(async move {
            if let Ok(l) = open(&state2, IpAddr::from([127, 0, 0, 1]), &token2).await {
                classify_refund(&state2, &l).await;
            }
        });
    }
    Ok(document(&l))
}

/// `POST /v1/checkout/{token}/select` — record the buyer's (chain, asset) (SPEC.md section 4).
///
/// A display preference only: it locks nothing and starts no clock; money on any offered
/// chain settles against the invoice. 400 `invalid_request` (`param: chain`) for a pair the
/// checkout does not offer. Public; the token's budget.
#[utoipa::path(post, path = "/v1/checkout/{token}/select", tag = "checkout", security(()),
    operation_id = "select_checkout",
    params(("token" = String, Path, description = "The checkout token.", pattern = "^ck_[A-Za-z0-9_-]{43}$")),
    request_body(content = CheckoutSelectIn),
    responses(
        (status = 200, description = "The checkout document.", body = CheckoutDoc),
    ))]
async fn select_checkout(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Token(token): Token,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    // The token first, then the body: a miss never waits for a body.
    let l = open(&state, ip, &token).await?;
    charge(&state, &l)?;
    let body = read_body(&state, ip, req).await?;
    let f = &body.fields;
    let chain = f.req_str("chain")?;
    let asset = f.req_str("asset")?;
    if chain.len() > 32 {
        return Err(ApiError::invalid("chain", "chain is a chain identifier."));
    }
    if asset.is_empty() || asset.len() > 16 {
        return Err(ApiError::invalid(
            "asset",
            "asset is a coin symbol of 1-16 characters.",
        ));
    }
    let t = token.clone();
    state
        .store
        .write(move |ctx| checkout::select(ctx, &t, &chain, &asset))
        .await
        .map_err(write_error)?;
    let l = open(&state, ip, &token).await?;
    Ok(document(&l))
}

/// `POST /v1/checkout/{token}/refund` — send the overpayment's refund to `address`
/// (SPEC.md section 4, rules for refund; DECISIONS.md section 12).
///
/// Acts on the open claim, the document's `refund`. Only under the `refund` policy while it
/// is `awaiting_address`: 409 `refund_not_ready` until `refund.sender_class` and
/// `refund.net` are known, 409 `invalid_state` once it is skipped (or under `keep`). The
/// address must parse on the refund's chain (422 `invalid_address`) and not be one this
/// service custodies (422 `self_payout_forbidden`). When no claim awaits an address, the
/// same address as the open claim's is idempotent; a different one 409
/// `refund_address_mismatch`. A claim whose payout failed awaits an address again (any
/// valid one); excess arriving after a request opens a new claim. Nothing is sent before
/// this call; each claim leaves as its own payout of the merchant's funds (`reference`
/// `refund:<invoice id>`, no approval, no fee). Public; the token's budget and 10 refund
/// requests per minute.
#[utoipa::path(post, path = "/v1/checkout/{token}/refund", tag = "checkout", security(()),
    operation_id = "refund_checkout",
    params(("token" = String, Path, description = "The checkout token.", pattern = "^ck_[A-Za-z0-9_-]{43}$")),
    request_body(content = CheckoutRefundIn),
    responses(
        (status = 200, description = "The checkout document, the refund `pending` (or further).", body = CheckoutDoc),
        (status = 422, description = "`invalid_address`, `self_payout_forbidden` (`param: address`).", body = crate::api::error::ErrorBody),
    ))]
async fn refund_checkout(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Token(token): Token,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    // The token first, then the body: a miss never waits for a body.
    let l = open(&state, ip, &token).await?;
    charge(&state, &l)?;
    state
        .limits
        .check_refund(l.invoice.id, checkout::REFUND_PER_MINUTE)
        .map_err(rate_limited)?;
    let body = read_body(&state, ip, req).await?;
    let address = body
        .fields
        .opt_bounded("address", checkout::MAX_ADDRESS_LEN)?
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .ok_or_else(|| ApiError::invalid("address", "address is required."))?;
    let l = if checkout::needs_classification(&l.invoice) {
        let _ = tokio::time::timeout(CLASSIFY_TIMEOUT, classify_refund(&state, &l)).await;
        open(&state, ip, &token).await?
    } else {
        l
    };
    let s = scope(&state, &l);
    let id = InvoiceId::of(&l.invoice);
    state
        .store
        .write(move |ctx| checkout::request_refund(ctx, &s, id, &address))
        .await
        .map_err(write_error)?;
    let l = open(&state, ip, &token).await?;
    Ok(document(&l))
}

/// Headers of the hosted page and its "not found" page: the strict CSP (images also from
/// the merchant's logo host), no referrer (the URL holds the token), no caching, no framing.
fn page_headers(h: &mut HeaderMap, logo_origin: Option<&str>) {
    let csp = appliance_web::content_security_policy(logo_origin);
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    no_store(h);
}

fn not_found_page(state: &AppState, ip: IpAddr, lang: &str) -> Response {
    let e = miss(state, ip);
    if e.status == StatusCode::TOO_MANY_REQUESTS {
        return e.into_response();
    }
    let mut resp = (StatusCode::NOT_FOUND, appliance_web::not_found_html(lang)).into_response();
    page_headers(resp.headers_mut(), None);
    resp
}

/// `GET /checkout/{token}` — the hosted checkout page (DECISIONS.md section 12): the HTML
/// shell that reads `GET /v1/checkout/{token}`, in the language of `?lang=` or
/// `Accept-Language` (English by default); a malformed or unknown token gets the one plain
/// "not found" page (404).
async fn checkout_page(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Token(token): Token,
    headers: HeaderMap,
    q: Params,
) -> Response {
    let lang = appliance_web::pick_language(
        q.get("lang"),
        headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok()),
    );
    if !invoices::is_token(&token) {
        return not_found_page(&state, ip, lang);
    }
    let l = match open(&state, ip, &token).await {
        Ok(l) => l,
        Err(e) if e.status == StatusCode::NOT_FOUND => return not_found_page(&state, ip, lang),
        Err(e) => return e.into_response(),
    };
    if let Err(e) = charge(&state, &l) {
        return e.into_response();
    }
    let logo = l
        .project
        .settings
        .merchant_logo_url
        .as_deref()
        .and_then(appliance_web::https_origin);
    let mut resp = (StatusCode::OK, appliance_web::page_html(lang)).into_response();
    page_headers(resp.headers_mut(), logo.as_deref());
    resp
}

/// `GET /checkout/{token}/qr.svg?chain=&asset=&variant=uri|address&amount=full|remaining` —
/// a QR code of the page (SVG): exactly `options[].uri` (`variant=uri`, the default), the
/// address alone (`variant=address`), or the underpaid remainder's `remaining_uri`
/// (`amount=remaining`). 404 for an option the checkout does not have.
async fn checkout_qr(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Token(token): Token,
    q: Params,
) -> Result<Response, ApiError> {
    let l = open(&state, ip, &token).await?;
    charge(&state, &l)?;
    let options = checkout::options(&state.registry, &l.invoice);
    let (chain, asset) = (q.get("chain").unwrap_or(""), q.get("asset").unwrap_or(""));
    let option = options
        .iter()
        .find(|o| o["chain"] == chain && o["asset"] == asset);
    let text = option.and_then(|o| {
        match (
            q.get("variant").unwrap_or("uri"),
            q.get("amount").unwrap_or("full"),
        ) {
            ("address", _) => o["address"].as_str(),
            ("uri", "full") => o["uri"].as_str(),
            ("uri", "remaining") => o["remaining_uri"].as_str(),
            _ => None,
        }
    });
    let svg = text
        .and_then(appliance_web::qr_svg)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", "No such QR code."))?;
    let mut resp = with_headers(
        (StatusCode::OK, svg),
        &[
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CONTENT_SECURITY_POLICY, "default-src 'none'"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
    );
    no_store(resp.headers_mut());
    Ok(resp)
}

/// `GET /assets/checkout/{file}` — the page's script and style sheet (embedded).
async fn checkout_asset(Path(file): Path<String>) -> Response {
    let (body, ctype) = match file.as_str() {
        "checkout.js" => (appliance_web::CHECKOUT_JS, "text/javascript; charset=utf-8"),
        "checkout.css" => (appliance_web::CHECKOUT_CSS, "text/css; charset=utf-8"),
        _ => {
            return ApiError::new(StatusCode::NOT_FOUND, "not_found", "No such file.")
                .into_response()
        }
    };
    with_headers(
        (StatusCode::OK, body),
        &[
            (header::CONTENT_TYPE, ctype),
            (header::CACHE_CONTROL, "public, max-age=300"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
    )
}

impl From<CheckoutError> for ApiError {
    fn from(e: CheckoutError) -> Self {
        use CheckoutError::*;
        let m = e.to_string();
        match e {
            Fault(f) => f.into(),
            Invalid(i) => i.into(),
            NotFound => ApiError::new(StatusCode::NOT_FOUND, "not_found", "No such checkout."),
            NotOffered { .. } => ApiError::invalid("chain", m),
            RefundNotReady => ApiError::new(StatusCode::CONFLICT, "refund_not_ready", m),
            RefundClosed { .. } => ApiError::new(StatusCode::CONFLICT, "invalid_state", m),
            AddressMismatch => {
                ApiError::new(StatusCode::CONFLICT, "refund_address_mismatch", m).param("address")
            }
            InvalidAddress { .. } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_address", m)
                    .param("address")
            }
            Custodied => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "self_payout_forbidden", m)
                    .param("address")
            }
        }
    }
}
