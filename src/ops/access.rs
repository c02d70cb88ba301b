//! The access log and the per-route request metrics.
//!
//! One `INFO` line per request (target `appliance::access`) with the method, the matched
//! route template (`/v1/customers/{id}`, never the raw path: ids and query strings stay out
//! of the log), the status, the latency to the response head in milliseconds, the request
//! id and the public id of the key that authenticated it (`-` when none did). Never a
//! token, a header value or a body.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::Method;

use appliance_storage::records::ApiKey;

/// Filled by the caller extractor with the key that authenticated the request; the access
/// log reads back its public id.
#[derive(Clone, Default)]
pub struct KeySlot(Arc<OnceLock<Arc<ApiKey>>>);

impl KeySlot {
    /// Records the key (first call wins).
    pub fn set(&self, key: &Arc<ApiKey>) {
        let _ = self.0.set(key.clone());
    }
}

/// The target of the access log lines (gathered into batches by `ops::logging`).
pub const TARGET: &str = "appliance::access";

/// The route label of a request that matched no route.
pub const UNMATCHED: &str = "unmatched";

/// One request's access log line and metrics, begun before its route runs and ended with
/// its status (by `api::http_rules::edge`, inside the request-id scope).
pub struct Entry {
    start: Instant,
    method: Method,
    route: Option<MatchedPath>,
    slot: KeySlot,
}

impl Entry {
    /// Starts the clock and gives the request the [`KeySlot`] the caller extractor fills.
    pub fn begin(req: &mut Request) -> Entry {
        let slot = KeySlot::default();
        req.extensions_mut().insert(slot.clone());
        Entry {
            start: Instant::now(),
            method: req.method().clone(),
            route: req.extensions().get::<MatchedPath>().cloned(),
            slot,
        }
    }

    /// Logs the line (when `appliance::access` is enabled at `INFO`) and counts the request.
    pub fn end(self, status: u16, request_id: &str) {
        let latency = self.start.elapsed();
        let route = self.route.as_ref().map_or(UNMATCHED, |m| m.as_str());
        tracing::info!(
            target: TARGET,
            method = %super::metrics::method_label(&self.method),
            route,
            status,
            latency_ms = (latency.as_secs_f64() * 1e6).round() / 1e3,
            request_id = %request_id,
            key_id = self.slot.0.get().map_or("-", |k| k.key_id.as_str()),
            "request"
        );
        super::metrics::http_request(&self.method, route, status, latency);
    }
}
