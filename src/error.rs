//! The error every request can end in, with its SPEC.md section 7 envelope.
//!
//! Services return [`ApiError`] values built by the constructors below; each carries the HTTP
//! status, the stable snake_case `code`, the client-facing message and the field at fault.
//! Storage failures become 500 `internal_error` with the cause logged, never a 4xx.

use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use appliance_storage::{StoreError, WriteError};

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

impl From<WriteError<ApiError>> for ApiError {
    fn from(e: WriteError<ApiError>) -> Self {
        match e {
            WriteError::Rejected(e) => e,
            WriteError::Store(s) => s.into(),
        }
    }
}

/// The current request id, or a fresh one outside a request.
pub fn request_id() -> String {
    REQUEST_ID
        .try_with(|id| id.clone())
        .unwrap_or_else(|_| format!("req_{}", ulid::Ulid::new()))
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_client_error() {
            tracing::debug!(code = self.code, message = %self.message, "request refused");
        }
        let mut body = json!({
            "error": self.code,
            "code": self.code,
            "type": self.error_type(),
            "message": self.message,
            "request_id": request_id(),
        });
        if let Some(p) = &self.param {
            body["param"] = json!(p);
        }
        let mut resp = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after_s {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}
