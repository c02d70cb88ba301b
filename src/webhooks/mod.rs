//! Webhooks and the event stream (SPEC.md sections 2-4 and 6; DECISIONS.md section 7).
//!
//! - [`outbox`]: every event's deliveries are written in the transaction that writes the event.
//! - [`dispatcher`]: a worker that sends due deliveries, retries in place and records outcomes.
//! - [`sender`] and [`guard`]: the HTTP client, which only ever connects to checked addresses.
//! - [`signature`]: the Stripe-compatible `Service-Signature` header.
//! - [`endpoints`]: the rules of creating, changing, rotating and deleting endpoints.
//! - [`stream`]: the server-sent event stream.
//!
//! [`Webhooks`] is the handle the API and the workers share (in `AppState`).

pub mod dispatcher;
pub mod endpoints;
pub mod guard;
pub mod outbox;
pub mod sender;
pub mod signature;
pub mod stream;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use rand::RngCore;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, Notify};
use uuid::Uuid;

use appliance_storage::records::{WebhookDelivery, WebhookEndpoint};

use crate::config::WebhooksConfig;
use crate::views::ts;

/// Every event type the appliance emits or SPEC.md section 6 lists (`invoice.*` and
/// `conversion.completed` included, so an endpoint can subscribe to them ahead of use),
/// shown as `GET /v1/webhooks` `event_catalog`. An endpoint with no `event_types` receives
/// all of them, and any added later.
pub const EVENT_CATALOG: &[&str] = &[
    "customer.created",
    "customer.updated",
    "wallet.created",
    "deposit.detected",
    "deposit.confirmed",
    "deposit.failed",
    "deposit.orphaned",
    "payout.created",
    "payout.approved",
    "payout.signing",
    "payout.submitted",
    "payout.confirmed",
    "payout.failed",
    "payout.canceled",
    "payout.rejected",
    "sweep.submitted",
    "sweep.confirmed",
    "sweep.skipped",
    "sweep.failed",
    "invoice.pending",
    "invoice.paid",
    "invoice.underpaid",
    "invoice.overpaid",
    "invoice.expired",
    "conversion.completed",
    "endpoint.test",
];

/// Most endpoints per project (SPEC.md section 8).
pub const MAX_ENDPOINTS: usize = 16;
/// Consecutive exhausted deliveries that disable an endpoint (SPEC.md section 8).
pub const DISABLE_AFTER_EXHAUSTED: u32 = 5;
/// Test deliveries per project per minute (SPEC.md section 8).
pub const TEST_PER_MINUTE: u32 = 5;
/// Replay calls (single or bulk) per project per minute (SPEC.md section 8).
pub const REPLAY_PER_MINUTE: u32 = 10;
/// Open event streams per project (SPEC.md section 8).
pub const MAX_STREAMS: usize = 10;

/// Something the dispatcher should look at now, told by the API after a commit.
#[derive(Debug, Clone)]
pub enum Poke {
    /// New open deliveries (replays, test events): send them.
    Deliveries(Vec<Uuid>),
    /// An endpoint went back to `active`: its open deliveries may go again.
    Resumed(Uuid),
}

/// The webhook side of the shared state.
pub struct Webhooks {
    pub config: WebhooksConfig,
    pokes: mpsc::Sender<Poke>,
    pokes_rx: Mutex<Option<mpsc::Receiver<Poke>>>,
    /// Set when a poke could not be queued: the dispatcher rescans its due index.
    pub(crate) rescan: AtomicBool,
    pub(crate) rescan_wake: Notify,
    streams: Arc<Mutex<HashMap<Uuid, usize>>>,
    test_limit: DefaultKeyedRateLimiter<Uuid>,
    replay_limit: DefaultKeyedRateLimiter<Uuid>,
    shutdown: watch::Sender<bool>,
}

impl Webhooks {
    pub fn new(config: WebhooksConfig) -> Webhooks {
        outbox::set_max_attempts(config.retry_schedule_s.len() as u32 + 1);
        let (pokes, rx) = mpsc::channel(1024);
        let per_minute = |n: u32| Quota::per_minute(NonZeroU32::new(n).expect("non-zero"));
        Webhooks {
            config,
            pokes,
            pokes_rx: Mutex::new(Some(rx)),
            rescan: AtomicBool::new(false),
            rescan_wake: Notify::new(),
            streams: Arc::new(Mutex::new(HashMap::new())),
            test_limit: RateLimiter::keyed(per_minute(TEST_PER_MINUTE)),
            replay_limit: RateLimiter::keyed(per_minute(REPLAY_PER_MINUTE)),
            shutdown: watch::channel(false).0,
        }
    }

    /// Tells the dispatcher about committed work. Never blocks: when the queue is full the
    /// dispatcher is told to rescan its durable schedule instead.
    pub fn poke(&self, p: Poke) {
        if self.pokes.try_send(p).is_err() {
            self.rescan.store(true, Ordering::SeqCst);
            self.rescan_wake.notify_one();
        }
    }

    /// The dispatcher's end of the poke queue (taken once, at start).
    pub(crate) fn take_pokes(&self) -> Option<mpsc::Receiver<Poke>> {
        self.pokes_rx.lock().expect("lock").take()
    }

    /// Counts one test delivery of `project`; `Err(retry_after_s)` when over the limit.
    pub fn check_test_rate(&self, project: Uuid) -> Result<(), u64> {
        check(&self.test_limit, project)
    }

    /// Counts one replay call of `project`; `Err(retry_after_s)` when over the limit.
    pub fn check_replay_rate(&self, project: Uuid) -> Result<(), u64> {
        check(&self.replay_limit, project)
    }

    /// Takes one of the project's stream slots, or `None` when all are in use.
    pub fn open_stream(&self, project: Uuid) -> Option<StreamSlot> {
        let mut m = self.streams.lock().expect("lock");
        let n = m.entry(project).or_insert(0);
        if *n >= MAX_STREAMS {
            return None;
        }
        *n += 1;
        Some(StreamSlot {
            counts: self.streams.clone(),
            project,
        })
    }

    /// Tells open streams the server is stopping.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// Becomes true when the server stops.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Longest wait for a receiver.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.timeout_ms)
    }
}

fn check(limiter: &DefaultKeyedRateLimiter<Uuid>, project: Uuid) -> Result<(), u64> {
    limiter.check_key(&project).map_err(|nu| {
        nu.wait_time_from(governor::clock::Clock::now(
            &governor::clock::DefaultClock::default(),
        ))
        .as_secs()
        .max(1)
    })
}

/// One open event stream of a project; gives its slot back when dropped.
pub struct StreamSlot {
    counts: Arc<Mutex<HashMap<Uuid, usize>>>,
    project: Uuid,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut m = self.counts.lock().expect("lock");
        if let Some(n) = m.get_mut(&self.project) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.project);
            }
        }
    }
}

/// A new signing secret: `whsec_` + 43 base64url characters (32 random bytes).
pub fn new_secret() -> String {
    let mut raw = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    )
}

/// `whd_` + ULID of a delivery id.
pub fn delivery_ref(id: Uuid) -> String {
    format!("whd_{}", ulid::Ulid::from(id.as_u128()))
}

/// The delivery id in a `whd_...` reference; `None` when malformed.
pub fn parse_delivery_ref(s: &str) -> Option<Uuid> {
    let u = ulid::Ulid::from_string(s.strip_prefix("whd_")?).ok()?;
    Some(Uuid::from_u128(u.0))
}

fn opt_ts(us: Option<i64>) -> Value {
    us.map(|u| Value::String(ts(u))).unwrap_or(Value::Null)
}

/// `object: webhook_endpoint` (SPEC.md section 2), without secrets.
pub fn endpoint_json(e: &WebhookEndpoint, now: i64) -> Value {
    json!({
        "id": e.id,
        "object": "webhook_endpoint",
        "tenant_id": e.project_id,
        "url": e.url,
        "description": e.description,
        "event_types": e.event_types,
        "status": e.status.as_str(),
        "delivery_mode": e.delivery_mode.as_str(),
        "consecutive_failures": e.consecutive_failures,
        "disabled_reason": e.disabled_reason,
        "disabled_at": opt_ts(e.disabled_at),
        "secret_overlap_until": opt_ts(e.overlap_until(now)),
        "last_success_at": opt_ts(e.last_success_at),
        "last_failure_at": opt_ts(e.last_failure_at),
        "created_at": ts(e.created_at),
    })
}

/// `object: webhook_delivery` (SPEC.md section 2); the single read adds `response_body`.
pub fn delivery_json(d: &WebhookDelivery, with_body: bool) -> Value {
    let mut v = json!({
        "id": delivery_ref(d.id),
        "object": "webhook_delivery",
        "tenant_id": d.project_id,
        "event_id": d.event_id,
        "endpoint_id": d.endpoint_id,
        "event_type": d.event_type,
        "endpoint_url": d.endpoint_url,
        "status": d.status.as_str(),
        "attempt": d.attempt,
        "max_attempts": d.max_attempts,
        "next_attempt_at": opt_ts(d.next_attempt_at.filter(|_| d.status.is_open())),
        "response_status": d.response_status,
        "resolved_ip": d.resolved_ip,
        "duration_ms": d.duration_ms,
        "error_detail": d.error_detail,
        "replay_of": d.replay_of.map(delivery_ref),
        "delivered_at": opt_ts(d.delivered_at),
        "created_at": ts(d.created_at),
    });
    if with_body {
        v["response_body"] = json!(d.response_body);
    }
    v
}

/// The body of one attempt: the event as `GET /v1/events/{id}` shows it (`event_json`, a JSON
/// object) with `attempt` and `delivery_id` added (SPEC.md section 6, Envelope).
pub fn envelope(event_json: &str, attempt: u32, delivery_id: &str) -> String {
    let rest = event_json.strip_prefix('{').unwrap_or(event_json);
    let mut out = String::with_capacity(event_json.len() + 64);
    out.push_str("{\"attempt\":");
    out.push_str(&attempt.to_string());
    out.push_str(",\"delivery_id\":\"");
    out.push_str(delivery_id);
    out.push('"');
    if rest.trim_start() != "}" {
        out.push(',');
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_refs_round_trip() {
        let id = outbox::new_delivery_id(appliance_storage::now_us());
        let r = delivery_ref(id);
        assert!(r.starts_with("whd_") && r.len() == 30, "{r}");
        assert_eq!(parse_delivery_ref(&r), Some(id));
        assert_eq!(parse_delivery_ref("whd_nope"), None);
        assert_eq!(parse_delivery_ref(&id.to_string()), None);
    }

    #[test]
    fn secrets_have_the_documented_shape() {
        let s = new_secret();
        assert!(s.starts_with("whsec_") && s.len() == 6 + 43, "{s}");
        assert_ne!(s, new_secret());
    }

    #[test]
    fn envelope_adds_attempt_and_delivery_id() {
        let e = envelope(r#"{"id":"evt_1","data":{"a":1}}"#, 3, "whd_X");
        let v: Value = serde_json::from_str(&e).unwrap();
        assert_eq!(v["attempt"], 3);
        assert_eq!(v["delivery_id"], "whd_X");
        assert_eq!(v["id"], "evt_1");
        assert_eq!(v["data"]["a"], 1);
        let v: Value = serde_json::from_str(&envelope("{}", 1, "whd_Y")).unwrap();
        assert_eq!(v["attempt"], 1);
    }
}
