//! Operations plumbing (DECISIONS.md section 16): what the operations endpoints
//! (`api::ops`: `GET /healthz`, `GET /readyz`, `GET /metrics`) keep and check, the access
//! log, log formats and the client address behind a reverse proxy.
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

use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use zeroize::Zeroizing;

use crate::config::{Config, MetricsAccess};

/// What the operations endpoints (`api::ops`) keep between requests (a part of the API's
/// state).
#[derive(Default)]
pub struct Ops {
    /// The `/metrics` bearer token, read once at start (`[metrics] access = "token"`).
    pub(crate) metrics_token: Option<Zeroizing<String>>,
    /// Last store write check of `/readyz`: when, and what it found.
    pub(crate) store_check: Mutex<Option<(Instant, Result<(), String>)>>,
}

/// Shortest accepted `/metrics` token.
pub const MIN_TOKEN_LEN: usize = 16;

/// Checks the operations settings, reads the `/metrics` token and installs the metrics
/// recorder. Called by the server before it listens; fails with a message naming the key.
/// Returns the state the operations endpoints keep (placed in the API's state).
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

/// How old a chain's last successful node round may be for the chain to count as ready.
pub fn chain_ready_window(poll_interval_ms: u64) -> Duration {
    Duration::from_millis(poll_interval_ms.max(50)).saturating_mul(2) + Duration::from_secs(5)
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
    use axum::http::HeaderValue;

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
