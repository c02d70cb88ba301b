//! The access log and the per-route request metrics (issue 10, items 9 and 10).
//!
//! One `INFO` line per request (target `appliance::access`) with the method, the matched
//! route template (`/v1/customers/{id}`, never the raw path: ids and query strings stay out
//! of the log), the status, the latency to the response head in milliseconds, the request
//! id and the public id of the key that authenticated it (`-` when none did). Never a
//! token, a header value or a body.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

/// Filled by the caller extractor with the public id of the key that authenticated the
/// request, read back by the access log.
#[derive(Clone, Default)]
pub struct KeySlot(Arc<OnceLock<String>>);

impl KeySlot {
    /// Records the key id (first call wins).
    pub fn set(&self, key_id: &str) {
        let _ = self.0.set(key_id.to_string());
    }
}

/// The route label of a request that matched no route.
pub const UNMATCHED: &str = "unmatched";

/// Middleware: logs and counts every request. Runs inside the request-id scope.
pub async fn layer(mut req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let slot = KeySlot::default();
    req.extensions_mut().insert(slot.clone());
    let resp = next.run(req).await;
    let latency = start.elapsed();
    let route = route.as_deref().unwrap_or(UNMATCHED);
    let status = resp.status().as_u16();
    let request_id = crate::api::error::request_id();
    tracing::info!(
        target: "appliance::access",
        method = %method,
        route,
        status,
        latency_ms = (latency.as_secs_f64() * 1e6).round() / 1e3,
        request_id = %request_id,
        key_id = slot.0.get().map(String::as_str).unwrap_or("-"),
        "request"
    );
    super::metrics::http_request(method.as_str(), route, status, latency);
    resp
}
