//! The HTTP side of one delivery attempt: POST the signed envelope, wait at most the timeout,
//! keep the start of the answer.
//!
//! The client follows no redirects (a redirect could point anywhere), uses no proxy, retries
//! nothing by itself, and resolves names only through [`GuardedResolver`]; IP-literal hosts
//! are checked here before each send. Connections are pooled per host: a pooled connection
//! goes to an address that was checked when it was opened.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::webhooks::guard::{self, GuardedResolver};
use crate::webhooks::signature;

/// Bytes of the receiver's answer kept in `response_body`.
pub const RESPONSE_BODY_MAX: usize = 2048;

/// What one attempt found out (whether it counts as a success is
/// `services::webhook_deliveries::AttemptReport::succeeded`).
#[derive(Debug, Clone, Default)]
pub struct AttemptResult {
    /// The receiver's HTTP status, when it answered.
    pub status: Option<u16>,
    pub resolved_ip: Option<IpAddr>,
    pub duration_ms: u64,
    /// Why the attempt failed (transport, timeout, guard, or a non-2xx status).
    pub error: Option<String>,
    pub body: Option<String>,
}

impl AttemptResult {
    /// The attempt as the store records it, sent to `url`.
    pub fn report(self, url: String) -> crate::services::webhook_deliveries::AttemptReport {
        crate::services::webhook_deliveries::AttemptReport {
            url,
            status: self.status,
            resolved_ip: self.resolved_ip.map(|ip| ip.to_string()),
            duration_ms: self.duration_ms,
            error: self.error,
            body: self.body,
        }
    }
}

/// A shared client for every send.
#[derive(Clone)]
pub struct Sender {
    client: reqwest13::Client,
    allow_private: bool,
    timeout: Duration,
}

impl Sender {
    pub fn new(allow_private: bool, timeout: Duration) -> Result<Sender, reqwest13::Error> {
        let client = reqwest13::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver { allow_private }))
            .redirect(reqwest13::redirect::Policy::none())
            .retry(reqwest13::retry::never())
            .no_proxy()
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .user_agent(concat!("appliance-webhooks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Sender {
            client,
            allow_private,
            timeout,
        })
    }

    /// One attempt: checks the URL, POSTs `body` with its signature header.
    pub async fn send(&self, url: &str, body: String, signature_header: String) -> AttemptResult {
        let started = Instant::now();
        let mut out = match tokio::time::timeout(
            self.timeout,
            self.post(url, body, signature_header),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => AttemptResult {
                error: Some(format!("timed out after {} ms", self.timeout.as_millis())),
                ..Default::default()
            },
        };
        out.duration_ms = started.elapsed().as_millis() as u64;
        out
    }

    async fn post(&self, url: &str, body: String, signature_header: String) -> AttemptResult {
        let mut out = AttemptResult::default();
        let parsed = match guard::check_syntax(url, self.allow_private) {
            Ok(u) => u,
            Err(e) => {
                out.error = Some(format!("url refused: {e}"));
                return out;
            }
        };
        if let Some(ip) = parsed.host_str().and_then(guard::literal_ip) {
            out.resolved_ip = Some(ip);
            if let Err(e) = guard::resolve(&parsed, self.allow_private).await {
                out.error = Some(format!("url refused: {e}"));
                return out;
            }
        }
        let sent = self
            .client
            .post(parsed)
            .header("content-type", "application/json")
            .header(signature::HEADER, signature_header)
            .body(body)
            .send()
            .await;
        let mut resp = match sent {
            Ok(r) => r,
            Err(e) => {
                out.error = Some(error_chain(&e));
                return out;
            }
        };
        let status = resp.status().as_u16();
        out.status = Some(status);
        if let Some(a) = resp.remote_addr() {
            out.resolved_ip = Some(a.ip());
        }
        let mut kept: Vec<u8> = Vec::new();
        while kept.len() < RESPONSE_BODY_MAX {
            match resp.chunk().await {
                Ok(Some(c)) => kept.extend_from_slice(&c),
                Ok(None) => break,
                Err(e) => {
                    out.error = Some(format!("reading the answer: {}", error_chain(&e)));
                    break;
                }
            }
        }
        kept.truncate(RESPONSE_BODY_MAX);
        out.body = Some(String::from_utf8_lossy(&kept).into_owned());
        if !(200..300).contains(&status) && out.error.is_none() {
            out.error = Some(format!("receiver answered HTTP {status}"));
        }
        out
    }
}

/// An error with its causes, `a: b: c` (the guard's refusal sits deep in a connect error).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}
