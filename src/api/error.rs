//! The error every request can end in, with its SPEC.md section 7 envelope, and the one
//! place each service error gets its HTTP status, `code`, `param` and `Retry-After`.
//!
//! Services return their own enums (`services::payouts::PayoutError`, ...; the pattern is
//! described in `services/mod.rs`); the `From` impls below map every variant. The variant's
//! `Display` is the client-facing message. Store failures and broken invariants
//! (`services::error::Fault`) become 500 `internal_error` with the cause logged, never a
//! 4xx. Boundary checks in `api/` (extractors, field readers) build [`ApiError`] directly.

use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use appliance_storage::{StoreError, WriteError};

use crate::services::billing::BillingError;
use crate::services::chains::ChainError;
use crate::services::clock::ClockError;
use crate::services::conversions::ConversionError;
use crate::services::customers::CustomerError;
use crate::services::deposits::DepositError;
use crate::services::error::{Fault, Invalid};
use crate::services::invoices::InvoiceError;
use crate::services::keys::KeyError;
use crate::services::metadata::MetadataError;
use crate::services::payouts::PayoutError;
use crate::services::projects::ProjectError;
use crate::services::sweeps::SweepError;
use crate::services::test_transfers::TestTransferError;
use crate::services::wallets::WalletError;
use crate::services::webhook_deliveries::WebhookDeliveryError;
use crate::services::webhook_endpoints::WebhookEndpointError;
use crate::views::Sorted;

tokio::task_local! {
    /// Id of the request being served (`req_` + ULID), for error bodies and logs.
    pub static REQUEST_ID: String;
}

/// An error answer.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub param: Option<String>,
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            param: None,
            retry_after_s: None,
        }
    }

    /// Names the request field at fault.
    pub fn param(mut self, p: impl Into<String>) -> Self {
        self.param = Some(p.into());
        self
    }

    /// Replaces the code (same status).
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    pub fn retry_after(mut self, s: u64) -> Self {
        self.retry_after_s = Some(s);
        self
    }

    /// 400 `invalid_request` about `param`.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message).param(param)
    }

    /// 404 `not_found` (also for another project's resource).
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("No such {what}."),
        )
    }

    /// 409 `invalid_state`: an illegal state transition.
    pub fn invalid_state(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "invalid_state", message)
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }

    /// 500 with a generic message; the cause goes to the log only.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "An internal error occurred; retry with the same Idempotency-Key.",
        )
    }

    /// SPEC.md section 7: the `type` that goes with a status.
    fn error_type(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "authentication_error",
            409 => "idempotency_error",
            429 => "rate_limit_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        }
    }
}

impl ApiError {
    /// 500 `record_unreadable`: a stored row this build cannot decode. Lists pass such rows
    /// over; a read of the row itself says what is wrong (`appliance verify` reports it).
    pub fn unreadable(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "a stored row cannot be decoded");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "record_unreadable",
            "This record is stored in a form this server cannot read; the operator's \
             `appliance verify` reports it.",
        )
    }
}

impl ApiError {
    /// 401 `invalid_api_key`.
    pub fn invalid_key() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "Missing, malformed, expired or revoked API key.",
        )
    }
}

impl From<crate::auth::Denied> for ApiError {
    fn from(e: crate::auth::Denied) -> Self {
        ApiError::forbidden(e.code(), e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Corrupt(_) => ApiError::unreadable(&e),
            e => ApiError::internal(&e),
        }
    }
}

impl From<Arc<StoreError>> for ApiError {
    fn from(e: Arc<StoreError>) -> Self {
        match &*e {
            StoreError::Corrupt(_) => ApiError::unreadable(&e),
            _ => ApiError::internal(&e),
        }
    }
}

impl<E: Into<ApiError>> From<WriteError<E>> for ApiError {
    fn from(e: WriteError<E>) -> Self {
        match e {
            WriteError::Rejected(e) => e.into(),
            WriteError::Store(s) => s.into(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Service errors -> SPEC.md section 7 (status, code, param, Retry-After). The message is
// the variant's `Display`, taken before the match.

const BAD_REQUEST: StatusCode = StatusCode::BAD_REQUEST;
const NOT_FOUND: StatusCode = StatusCode::NOT_FOUND;
const CONFLICT: StatusCode = StatusCode::CONFLICT;
const UNPROCESSABLE: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;

impl From<Fault> for ApiError {
    fn from(e: Fault) -> Self {
        match e {
            Fault::Store(s) => s.into(),
            e => ApiError::internal(&e),
        }
    }
}

impl From<crate::services::balances::BalanceError> for ApiError {
    fn from(e: crate::services::balances::BalanceError) -> Self {
        use crate::services::balances::BalanceError as E;
        match e {
            E::NotFound(what) => ApiError::not_found(what),
            E::ChainUnavailable => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "chain_unavailable_now",
                "The chain's node cannot be reached now; retry later.",
            )
            .retry_after(5),
            E::Sim(s) => s.into(),
            E::Onchain(o) => ApiError::internal(&o),
            E::Fault(f) => f.into(),
        }
    }
}

impl From<crate::services::sim_chain::SimOpenError> for ApiError {
    fn from(e: crate::services::sim_chain::SimOpenError) -> Self {
        use crate::services::sim_chain::SimOpenError as E;
        match e {
            E::NotSimulated(_) => ApiError::invalid("chain", e.to_string()),
            E::Depth { .. } => ApiError::invalid("depth", e.to_string()),
            E::Rebuilding => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "chain_unavailable_now",
                "The simulated chain is being rebuilt after a failed write; retry.",
            )
            .retry_after(1),
            E::Store(s) => s.into(),
            e => ApiError::internal(&e),
        }
    }
}

impl From<MetadataError> for ApiError {
    fn from(e: MetadataError) -> Self {
        ApiError::new(BAD_REQUEST, "invalid_request", e.message).param(e.param)
    }
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        ApiError::invalid(e.param, e.message)
    }
}

/// `From<$err> for ApiError` for each service error: `m` is the variant's `Display` (the
/// client-facing message), taken before the match; the arms name the variants unqualified.
macro_rules! from_service_errors {
    ($($(#[$doc:meta])* $err:ident => |$m:ident| { $($arm:tt)* })*) => {$(
        $(#[$doc])*
        impl From<$err> for ApiError {
            fn from(e: $err) -> Self {
                use $err::*;
                let $m = e.to_string();
                match e { $($arm)* }
            }
        }
    )*};
}

from_service_errors! {
    ChainError => |m| {
        Unknown { param, .. } => {
            ApiError::new(BAD_REQUEST, "invalid_request", m).param(param)
        }
        NotEnabled { param, .. } => {
            ApiError::new(UNPROCESSABLE, "chain_not_enabled", m).param(param)
        }
        UnknownAsset { param, .. } => {
            ApiError::new(BAD_REQUEST, "unknown_asset", m).param(param)
        }
        DecimalsMismatch { .. } => {
            ApiError::new(BAD_REQUEST, "decimals_mismatch", m).param("decimals")
        }
    }
    PayoutError => |m| {
        Chain(c) => c.into(),
        Fault(f) => f.into(),
        NotFound => ApiError::new(NOT_FOUND, "not_found", m),
        CustomerNotFound => ApiError::new(NOT_FOUND, "not_found", m).param("customer_id"),
        ChainUnavailable { .. } => {
            ApiError::new(UNPROCESSABLE, "chain_unavailable", m).param("chain")
        }
        AssetPayoutsDisabled { .. } => {
            ApiError::new(UNPROCESSABLE, "asset_payouts_disabled", m).param("asset")
        }
        InvalidAddress { .. } => {
            ApiError::new(UNPROCESSABLE, "invalid_address", m).param("to_address")
        }
        SelfPayout => {
            ApiError::new(UNPROCESSABLE, "self_payout_forbidden", m).param("to_address")
        }
        ReservedReference => ApiError::invalid("reference", m),
        TooManyPending { .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_pending_payouts", m)
                .retry_after(60)
        }
        InsufficientFunds { .. } => {
            ApiError::new(StatusCode::PAYMENT_REQUIRED, "insufficient_funds", m).param("amount")
        }
        NotPendingApproval { .. } => ApiError::new(CONFLICT, "invalid_state", m),
        ApproverMustDiffer { .. } => {
            ApiError::new(StatusCode::FORBIDDEN, "approver_must_differ", m)
        }
        NotCancelable { .. } => ApiError::new(CONFLICT, "payout_not_cancelable", m),
    }
    DepositError => |m| {
        Chain(c) => c.into(),
        Fault(f) => f.into(),
        NotFound => ApiError::new(NOT_FOUND, "not_found", m),
        CustomerNotFound => ApiError::new(NOT_FOUND, "not_found", m).param("customer_id"),
        NoDepositAddress { .. } => {
            ApiError::new(UNPROCESSABLE, "no_deposit_address", m).param("customer_id")
        }
        AmountTooLarge => ApiError::new(UNPROCESSABLE, "amount_too_large", m).param("amount"),
        InvalidState { .. } => ApiError::new(CONFLICT, "invalid_state", m),
    }
    ConversionError => |m| {
        Chain(c) => c.into(),
        Fault(f) => f.into(),
        Invalid(i) => i.into(),
        NotFound | BatchNotFound => ApiError::new(NOT_FOUND, "not_found", m),
        UnsupportedChain { .. } => {
            ApiError::new(UNPROCESSABLE, "conversion_unsupported_chain", m).param("chain")
        }
        InvalidTarget { .. } => {
            ApiError::new(BAD_REQUEST, "invalid_target", m).param("target_asset")
        }
        InvalidKeepAsset { .. } => {
            ApiError::new(BAD_REQUEST, "invalid_keep_asset", m).param("keep_assets")
        }
        TestMode => ApiError::new(UNPROCESSABLE, "conversion_test_mode", m),
        Unavailable { .. } => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "conversion_unavailable", m)
                .retry_after(30)
        }
        InsufficientFunds { .. } => {
            ApiError::new(StatusCode::PAYMENT_REQUIRED, "insufficient_funds", m).param("amount")
        }
    }
    SweepError => |m| {
        Chain(c) => c.into(),
        Fault(f) => f.into(),
        WalletNotFound => {
            ApiError::new(NOT_FOUND, "not_found", m).param("wallet_id")
        }
    }
    WalletError => |m| {
        Chain(c) => c.into(),
        Fault(f) => f.into(),
        CustomerNotFound => ApiError::new(NOT_FOUND, "not_found", m).param("customer_id"),
        AccountKindDisabled { .. } => not_issuing("account_kind_disabled", m),
        NotLiveYet { .. } => not_issuing("chain_not_live_yet", m),
        Unavailable { .. } => not_issuing("chain_unavailable", m),
        Paused { .. } | DepositsDisabled { .. } | NoMasterKey => {
            not_issuing("chain_deposits_disabled", m)
        }
        AssetDepositsDisabled { .. } => not_issuing("asset_deposits_disabled", m),
        QuotaExceeded { retry_after_s, .. } => {
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "quota_exceeded", m)
                .retry_after(retry_after_s)
        }
    }
    InvoiceError => |m| {
        Fault(f) => f.into(),
        Billing(b) => b.into(),
        Invalid(i) => i.into(),
        Metadata(e) => e.into(),
        Chain(c) => c.into(),
        NotFound => ApiError::new(NOT_FOUND, "not_found", m),
        UnsupportedCurrency => {
            ApiError::new(StatusCode::BAD_REQUEST, "unsupported_currency", m)
                .param("price_currency")
        }
        ChainUnavailable { .. } => {
            ApiError::new(UNPROCESSABLE, "chain_unavailable", m).param("accepted_chains")
        }
        NoPaymentOptions => ApiError::new(UNPROCESSABLE, "no_payment_options", m),
        NoMasterKey => ApiError::new(UNPROCESSABLE, "chain_deposits_disabled", m),
        NotCancelable { .. } => ApiError::invalid_state(m),
    }
    TestTransferError => |m| {
        Chain(c) => c.into(),
        Invalid(i) => i.into(),
        Fault(f) => f.into(),
        UnknownAddress { .. } => {
            ApiError::new(UNPROCESSABLE, "unknown_address", m).param("to_address")
        }
    }
    ClockError => |m| {
        Fault(f) => f.into(),
        TooFar => ApiError::invalid("advance_seconds", m),
    }
    CustomerError => |m| {
        Fault(f) => f.into(),
        NotFound => ApiError::new(NOT_FOUND, "not_found", m),
        ReferenceTaken => {
            ApiError::new(CONFLICT, "reference_id_taken", m).param("reference_id")
        }
        Metadata(e) => e.into(),
    }
    KeyError => |m| {
        Invalid(i) => i.into(),
        Fault(f) => f.into(),
        // DECISIONS.md section 16: SPEC.md's own 403 codes for the same facts.
        WrongKind { .. } => {
            ApiError::new(StatusCode::FORBIDDEN, "wrong_key_kind", m).param("kind")
        }
        MissingScope { .. } | ApproveNotGrantable { .. } => {
            ApiError::new(StatusCode::FORBIDDEN, "scope_not_grantable", m).param("scopes")
        }
        SigningNotHeld => {
            ApiError::new(StatusCode::FORBIDDEN, "signing_disabled", m).param("signing_enabled")
        }
        AllowlistWider => {
            ApiError::new(StatusCode::FORBIDDEN, "ip_not_allowed", m).param("ip_allowlist")
        }
        LimitReached { .. } => {
            ApiError::new(CONFLICT, "key_limit_reached", m).param("kind")
        }
        NotFound => ApiError::new(NOT_FOUND, "not_found", m),
        NotRollable | Revoked => {
            ApiError::new(CONFLICT, "invalid_state", m)
        }
    }
    ProjectError => |m| {
        Invalid(i) => i.into(),
        Key(k) => k.into(),
        Fault(f) => f.into(),
        NameTaken { .. } => {
            ApiError::new(CONFLICT, "name_taken", m).param("name")
        }
    }
    /// SPEC.md section 7 for each refusal of the endpoint rules.
    WebhookEndpointError => |m| {
        NotFound => ApiError::not_found("webhook endpoint"),
        LimitReached => {
            ApiError::new(StatusCode::CONFLICT, "endpoint_limit_reached", m)
        }
        CannotPauseDisabled => ApiError::invalid_state(m),
        Invalid(i) => i.into(),
        Fault(f) => f.into(),
    }
    /// SPEC.md section 7 for each refusal of the delivery rules.
    WebhookDeliveryError => |m| {
        NotFound => ApiError::not_found("webhook delivery"),
        EndpointNotFound { param } => {
            let e = ApiError::not_found("webhook endpoint");
            match param {
                Some(p) => e.param(p),
                None => e,
            }
        }
        NotReplayable(_) | EndpointNotActive(_) => {
            ApiError::invalid_state(m)
        }
        Fault(f) => f.into(),
    }
    BillingError => |m| {
        UnknownPlan { .. } => {
            ApiError::new(UNPROCESSABLE, "unknown_plan", m).param("plan")
        }
        NotSelfSelectable { .. } => {
            ApiError::new(StatusCode::FORBIDDEN, "plan_not_self_selectable", m).param("plan")
        }
        PlanNotActive | BalanceNegative { .. } => {
            ApiError::new(StatusCode::PAYMENT_REQUIRED, "plan_not_active", m)
        }
        NoMasterKey => ApiError::new(UNPROCESSABLE, "chain_deposits_disabled", m),
        Fault(f) => f.into(),
    }
}

/// 422 for a chain that issues no new address now (`param: chain`).
fn not_issuing(code: &'static str, m: String) -> ApiError {
    ApiError::new(UNPROCESSABLE, code, m).param("chain")
}

/// The error envelope of every failure (SPEC.md section 7). Clients branch on `code`; new
/// codes can appear.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody<'a> {
    /// Repeats `code`.
    pub error: &'a str,
    /// Machine-readable reason, e.g. `invalid_request`, `invalid_api_key`, `wrong_key_kind`,
    /// `missing_scope`, `signing_disabled`, `test_mode_only`, `not_found`,
    /// `insufficient_funds`, `decimals_mismatch`, `idempotency_key_required`,
    /// `idempotency_key_reuse`, `idempotency_in_progress`, `rate_limited`, `internal_error`.
    pub code: &'a str,
    /// `invalid_request_error` (400, 402, 404, 422), `authentication_error` (401, 403),
    /// `idempotency_error` (409), `rate_limit_error` (429), `api_error` (5xx).
    #[serde(rename = "type")]
    pub kind: &'a str,
    /// Human-readable explanation; not for branching.
    pub message: &'a str,
    /// The request field, query parameter or header at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param: Option<&'a str>,
    /// `req_` + ULID, also sent as the `Request-Id` header.
    pub request_id: String,
}

/// The current request id, or a fresh one outside a request.
pub fn request_id() -> String {
    REQUEST_ID
        .try_with(|id| id.clone())
        .unwrap_or_else(|_| format!("req_{}", crate::transport::new_ulid()))
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_client_error() {
            tracing::debug!(code = self.code, message = %self.message, "request refused");
        }
        let body = ErrorBody {
            error: self.code,
            code: self.code,
            kind: self.error_type(),
            message: &self.message,
            param: self.param.as_deref(),
            request_id: request_id(),
        };
        let mut resp = (self.status, axum::Json(Sorted(body))).into_response();
        if let Some(s) = self.retry_after_s {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}
