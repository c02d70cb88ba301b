//! Operations endpoints and plumbing (issue 10; DECISIONS.md section 16): `GET /healthz`,
//! `GET /readyz`, `GET /metrics`, the access log, log formats and the client address
//! behind a reverse proxy.
//!
//! - `GET /healthz`: public; 200 `{"status":"ok"}` while the process serves.
//! - `GET /readyz`: public; 200 `{"status":"ready","checks":{...}}` when the store takes a
//!   write and every configured chain's node was reached recently (within twice its poll
//!   interval plus 5 s, the watcher's own round trip); else 503 with
//!   `{"status":"not_ready","not_ready":["store: ...","chain ethereum: ..."],...}`. The
//!   store check commits an empty write transaction (it joins the writer's group commit) at
//!   most once a second; answers in between reuse the last result.
//! - `GET /metrics`: Prometheus text; `[metrics] access` decides who may read it (see
//!   [`crate::config::MetricsAccess`]).

pub mod access;
pub mod logging;
pub mod metrics;
pub mod proxy;

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, State};
use axum::http::{header, request::Parts, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Map};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::api::error::ApiError;
use crate::config::{Config, MetricsAccess};
use crate::state::AppState;

/// The routes of this module (merged into the API router, so they share its request ids,
/// access log and error envelope).
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
}

/// What the operations endpoints keep between requests (a part of `AppState`).
#[derive(Default)]
pub struct Ops {
    /// The `/metrics` bearer token, read once at start (`[metrics] access = "token"`).
    metrics_token: Option<Zeroizing<String>>,
    /// Last store write check of `/readyz`: when, and what it found.
    store_check: Mutex<Option<(Instant, Result<(), String>)>>,
}

/// Shortest accepted `/metrics` token.
pub const MIN_TOKEN_LEN: usize = 16;

/// Checks the operations settings, reads the `/metrics` token and installs the metrics
/// recorder. Called by the server before it listens; fails with a message naming the key.
/// Returns the state the operations endpoints keep (placed in `AppState`).
pub fn init(config: &Config) -> anyhow::Result<Ops> {
    let mut ops = Ops::default();
    if config.metrics.access == MetricsAccess::Token {
        let Some(var) = config
            .metrics
            .token_env
            .as_deref()
            .filter(|v| !v.is_empty())
        else {
            anyhow::bail!("metrics.access = \"token\" needs metrics.token_env (the name of the environment variable holding the token)");
        };
        let token = Zeroizing::new(std::env::var(var).unwrap_or_default());
        if token.trim().len() < MIN_TOKEN_LEN {
            anyhow::bail!(
                "metrics.token_env: the environment variable {var} must hold a token of at least {MIN_TOKEN_LEN} characters"
            );
        }
        ops.metrics_token = Some(Zeroizing::new(token.trim().to_string()));
    }
    if config.metrics.access != MetricsAccess::Off {
        metrics::install()?;
    }
    Ok(ops)
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

/// How old a chain's last successful node round may be for the chain to count as ready.
pub fn chain_ready_window(poll_interval_ms: u64) -> Duration {
    Duration::from_millis(poll_interval_ms.max(50)).saturating_mul(2) + Duration::from_secs(5)
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

/// `access = "loopback"`: the client (after trusted proxies) is on a loopback address, and a
/// request relayed by an untrusted peer (it carries `X-Forwarded-For` or `Forwarded`: a
/// same-host proxy not listed in `trusted_proxies`) is refused, so a local reverse proxy
/// never exposes `/metrics` to the internet by accident.
pub fn loopback_allowed(peer: IpAddr, headers: &HeaderMap, trusted: &[ipnet::IpNet]) -> bool {
    let client = proxy::client_ip(peer, headers, trusted);
    let peer_trusted = trusted.iter().any(|n| n.contains(&peer));
    if !peer_trusted && proxy::is_forwarded(headers) {
        return false;
    }
    client.is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    #[test]
    fn loopback_access_follows_the_client_not_a_relaying_peer() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let v6lo: IpAddr = "::1".parse().unwrap();
        let remote: IpAddr = "203.0.113.5".parse().unwrap();
        let trusted = vec![proxy::parse_net("127.0.0.1").unwrap()];
        // Direct connections.
        assert!(loopback_allowed(lo, &h(&[]), &[]));
        assert!(loopback_allowed(v6lo, &h(&[]), &[]));
        assert!(!loopback_allowed(remote, &h(&[]), &[]));
        // Relayed by an untrusted local proxy: refused whatever the header says.
        assert!(!loopback_allowed(
            lo,
            &h(&[("x-forwarded-for", "127.0.0.1")]),
            &[]
        ));
        assert!(!loopback_allowed(
            lo,
            &h(&[("forwarded", "for=1.2.3.4")]),
            &[]
        ));
        // Relayed by a trusted proxy: the forwarded client decides.
        assert!(!loopback_allowed(
            lo,
            &h(&[("x-forwarded-for", "203.0.113.5")]),
            &trusted
        ));
        assert!(loopback_allowed(
            lo,
            &h(&[("x-forwarded-for", "127.0.0.1")]),
            &trusted
        ));
        // A remote peer cannot claim to be local.
        assert!(!loopback_allowed(
            remote,
            &h(&[("x-forwarded-for", "127.0.0.1")]),
            &trusted
        ));
    }

    #[test]
    fn chain_ready_window_allows_a_round_trip_past_the_interval() {
        assert_eq!(chain_ready_window(1000), Duration::from_secs(7));
        assert_eq!(chain_ready_window(0), Duration::from_millis(5100));
    }
}
