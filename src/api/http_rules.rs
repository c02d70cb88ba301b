//! HTTP-level rules every request passes before (and after) its route:
//!
//! - [`limits`]: more than `limits.max_headers` headers is 431 `request_headers_too_large`, a
//!   request target longer than `limits.max_uri_bytes` is 414 `uri_too_long` (and headers
//!   over [`MAX_HEADER_BYTES`] in all are 431 too), each in the
//!   SPEC.md section 7 envelope (the HTTP parser's own limits are set above these, see
//!   [`crate::transport`]);
//! - [`envelope_errors`]: an error answered by the framework rather than by our code (a path
//!   that does not percent-decode, a rejected extractor) is re-shaped into the envelope;
//! - [`drain_unread_body`]: a request answered before its body was read (401, 429, 404 ...)
//!   has a small remainder drained so the keep-alive connection carries the next request; a
//!   large or slow one closes the connection with `Connection: close` instead of leaving
//!   unread bytes to be parsed as the next request.
//!
//! The hosted `/checkout` pages answer HTML; every other path is the API. [`edge`] applies
//! the three together with the request id and the access log, as one layer.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper::body::Body as _;

use crate::api::error::{ApiError, REQUEST_ID};
use crate::ops::access;
use crate::state::AppState;

/// Largest total size of the request headers (names and values), bytes: 431 above.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Largest unread request body drained to keep a connection alive.
pub const DRAIN_MAX_BYTES: usize = 64 * 1024;
/// Longest wait for an unread request body to arrive when draining it.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// 431 / 414 in the envelope when the request carries more headers or a longer target than
/// `[limits]` allows; `None` when it is within them.
fn limits(state: &AppState, req: &Request) -> Option<Response> {
    let l = &state.config.limits;
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    if req.headers().len() > l.max_headers || header_bytes > MAX_HEADER_BYTES {
        return Some(
            ApiError::new(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request_headers_too_large",
                format!(
                    "A request may carry at most {} headers of {MAX_HEADER_BYTES} bytes in all.",
                    l.max_headers
                ),
            )
            .into_response(),
        );
    }
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().len())
        .unwrap_or(0);
    if target > l.max_uri_bytes {
        return Some(
            ApiError::new(
                StatusCode::URI_TOO_LONG,
                "uri_too_long",
                format!(
                    "The request target (path and query) is limited to {} bytes.",
                    l.max_uri_bytes
                ),
            )
            .into_response(),
        );
    }
    None
}

/// Re-shapes an error answer that is not JSON (the framework's own rejections: a path that
/// does not percent-decode, a method or extractor refusal) into the SPEC.md section 7
/// envelope, keeping its status and its text as the message. The HTML pages under
/// `/checkout` (`html_page`) keep their own answers.
async fn envelope_errors(resp: Response, html_page: bool) -> Response {
    let status = resp.status();
    if html_page || !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = match http_body_util::Limited::new(body, 4096).collect().await {
        Ok(c) => String::from_utf8_lossy(&c.to_bytes()).trim().to_string(),
        Err(_) => String::new(),
    };
    let (code, fallback) = match status.as_u16() {
        400 => ("invalid_request", "The request is not valid."),
        404 => ("route_not_found", "No such route."),
        405 => (
            "method_not_allowed",
            "This route does not accept that method.",
        ),
        408 => ("request_timeout", "The request took too long to arrive."),
        413 => ("request_too_large", "The request body is too large."),
        414 => ("uri_too_long", "The request target is too long."),
        415 => (
            "unsupported_media_type",
            "Request bodies must be application/json.",
        ),
        422 => ("invalid_request", "The request is not valid."),
        431 => (
            "request_headers_too_large",
            "The request headers are too large.",
        ),
        s if s >= 500 => ("internal_error", "An internal error occurred."),
        _ => ("invalid_request", "The request is not valid."),
    };
    let message = if text.is_empty() || status.is_server_error() {
        fallback.to_string()
    } else {
        // Framework texts end without a full stop and name the failing part, e.g.
        // "Invalid URL: Cannot parse `%ff` to a `String`".
        let mut t: String = text.chars().take(300).collect();
        if !t.ends_with('.') {
            t.push('.');
        }
        t
    };
    let mut err = ApiError::new(status, code, message);
    if status.as_u16() == 400 && text.starts_with("Invalid URL") {
        err = err.param("path");
    }
    let mut out = err.into_response();
    for name in [header::CONNECTION, header::RETRY_AFTER, header::ALLOW] {
        if let Some(v) = parts.headers.get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}

/// The rules of this module around a route, in this order from the outside in: the
/// request's id (`Request-Id` on every answer, and the task-local [`REQUEST_ID`] for the
/// error envelope and the log), the access log and metrics line ([`access::Entry`]),
/// draining an unread body, the `[limits]` refusals, and the envelope for the framework's
/// own errors. One layer instead of one per rule: each `from_fn` layer costs a boxed
/// service clone and a boxed future per request.
pub async fn edge(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let id = new_request_id();
    let header = HeaderValue::from_str(&id).ok();
    let entry = access::Entry::begin(&mut req);
    let (status, mut resp) = REQUEST_ID
        .scope(id, async move {
            let resp = drain_unread_body(&state, req, next).await;
            let status = resp.status();
            REQUEST_ID.with(|id| entry.end(status.as_u16(), id));
            (status, resp)
        })
        .await;
    if let Some(v) = header {
        resp.headers_mut().insert("request-id", v);
    }
    // Every answer, JSON included, is read as what its Content-Type says.
    resp.headers_mut()
        .entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(HeaderValue::from_static("nosniff"));
    // An oversized body, or one not received in time, was not read to its end: the
    // connection cannot carry another request, so say so instead of leaving the client to
    // find out.
    if status == StatusCode::PAYLOAD_TOO_LARGE || status == StatusCode::REQUEST_TIMEOUT {
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// `req_` and a new ULID (SPEC.md section 7, request ids).
fn new_request_id() -> String {
    let mut buf = [0u8; ulid::ULID_LEN];
    let ulid = crate::transport::new_ulid();
    let mut id = String::with_capacity(4 + ulid::ULID_LEN);
    id.push_str("req_");
    id.push_str(ulid.array_to_str(&mut buf));
    id
}

/// The limits and the route, then the envelope.
async fn checked(state: &AppState, req: Request, next: Next) -> Response {
    if let Some(refused) = limits(state, &req) {
        return refused;
    }
    let html_page = req.uri().path().starts_with("/checkout");
    let resp = next.run(req).await;
    envelope_errors(resp, html_page).await
}

/// Drains a request body its route did not read (a small one, arriving promptly), or answers
/// `Connection: close`, so the next request on a keep-alive connection is read from a clean
/// stream.
async fn drain_unread_body(state: &AppState, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    if body.is_end_stream() {
        return checked(state, Request::from_parts(parts, body), next).await;
    }
    let returned: Arc<Mutex<Option<Body>>> = Arc::new(Mutex::new(None));
    let tracked = Body::new(Tracked {
        inner: Some(body),
        done: false,
        returned: returned.clone(),
    });
    let mut resp = checked(state, Request::from_parts(parts, tracked), next).await;
    let unread = returned.lock().expect("lock").take();
    if let Some(rest) = unread {
        let small = rest
            .size_hint()
            .upper()
            .is_some_and(|n| n <= DRAIN_MAX_BYTES as u64);
        let drained = small
            && matches!(
                tokio::time::timeout(
                    DRAIN_TIMEOUT,
                    http_body_util::Limited::new(rest, DRAIN_MAX_BYTES).collect()
                )
                .await,
                Ok(Ok(_))
            );
        if !drained {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
    }
    resp
}

/// A request body that hands itself back when dropped before its end.
struct Tracked {
    inner: Option<Body>,
    done: bool,
    returned: Arc<Mutex<Option<Body>>>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(b) = self.inner.take() {
            if !self.done && !b.is_end_stream() {
                *self.returned.lock().expect("lock") = Some(b);
            }
        }
    }
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let r = Pin::new(inner).poll_frame(cx);
        match &r {
            // A body that failed (malformed framing) cannot be drained: the connection is
            // closed by the parser anyway.
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => self.done = true,
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner
            .as_ref()
            .map(|b| b.size_hint())
            .unwrap_or_else(|| hyper::body::SizeHint::with_exact(0))
    }
}
