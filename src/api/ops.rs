//! The operations endpoints (DECISIONS.md section 16): `GET /healthz`, `GET /readyz` and
//! `GET /metrics`, merged into the API router so they share its request ids, access log and
//! error envelope. What they keep between requests is `ops::Ops`.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, State};
use axum::http::{header, request::Parts, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Map};
use subtle::ConstantTimeEq;

use crate::api::error::ApiError;
use crate::config::MetricsAccess;
use crate::ops::{chain_ready_window, loopback_allowed, metrics};
use crate::state::AppState;

/// The operations routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
}

/// `GET /healthz`: the process is up and serving.
async fn healthz() -> Response {
    let mut r = crate::api::json(StatusCode::OK, &json!({"status": "ok"}));
    no_store(&mut r);
    r
}

/// How long a store check result is reused.
const STORE_CHECK_TTL: Duration = Duration::from_secs(1);
/// Longest wait for the store check.
const STORE_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

async fn store_writable(state: &AppState) -> Result<(), String> {
    if let Some((at, r)) = state
        .ops
        .store_check
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        if at.elapsed() < STORE_CHECK_TTL {
            return r.clone();
        }
    }
    let write = state
        .store
        .write(|_ctx| Ok::<(), appliance_storage::StoreError>(()));
    let r = match tokio::time::timeout(STORE_CHECK_TIMEOUT, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("store: a write failed ({e})")),
        Err(_) => Err(format!(
            "store: a write did not commit within {} s",
            STORE_CHECK_TIMEOUT.as_secs()
        )),
    };
    *state
        .ops
        .store_check
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), r.clone()));
    r
}

/// `GET /readyz`.
async fn readyz(State(state): State<AppState>) -> Response {
    let mut not_ready: Vec<String> = Vec::new();
    let mut checks = Map::new();
    match store_writable(&state).await {
        Ok(()) => {
            checks.insert("store".into(), json!("ok"));
        }
        Err(e) => {
            checks.insert("store".into(), json!("failing"));
            not_ready.push(e);
        }
    }
    for (id, cc) in &state.config.chains {
        let h = state
            .registry
            .chain(id)
            .map(|c| c.contact())
            .unwrap_or_default();
        let window = chain_ready_window(cc.poll_interval_ms);
        let key = format!("chain:{id}");
        match h.last_success {
            Some(t) if t.elapsed() <= window => {
                checks.insert(key, json!("ok"));
            }
            Some(t) => {
                checks.insert(key, json!("failing"));
                not_ready.push(format!(
                    "chain {id}: node last reached {} s ago (allowed {} s)",
                    t.elapsed().as_secs(),
                    window.as_secs()
                ));
            }
            None => {
                checks.insert(key, json!("failing"));
                not_ready.push(format!("chain {id}: node not reached yet"));
            }
        }
    }
    let (status, body) = if not_ready.is_empty() {
        (StatusCode::OK, json!({"status": "ready", "checks": checks}))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "not_ready", "not_ready": not_ready, "checks": checks}),
        )
    };
    let mut r = crate::api::json(status, &body);
    no_store(&mut r);
    r
}

fn no_store(r: &mut Response) {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// `GET /metrics`.
async fn metrics_text(State(state): State<AppState>, parts: Parts) -> Response {
    let headers = &parts.headers;
    let not_found = || {
        ApiError::new(StatusCode::NOT_FOUND, "route_not_found", "No such route.").into_response()
    };
    match state.config.metrics.access {
        MetricsAccess::Off => return not_found(),
        MetricsAccess::Loopback => {
            let peer = parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip())
                .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
            if !loopback_allowed(peer, headers, &state.config.trusted_proxies) {
                return not_found();
            }
        }
        MetricsAccess::Token => {
            let Some(expected) = state.ops.metrics_token.as_ref() else {
                return not_found();
            };
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim)
                .unwrap_or("");
            let ok = presented.len() == expected.len()
                && bool::from(presented.as_bytes().ct_eq(expected.as_bytes()));
            if !ok {
                let mut r = ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "invalid_metrics_token",
                    "GET /metrics needs the metrics bearer token.",
                )
                .into_response();
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return r;
            }
        }
    }
    match metrics::render(&state).await {
        Some(text) => {
            let mut r = text.into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            no_store(&mut r);
            r
        }
        None => not_found(),
    }
}
