//! Webhook transport and the event stream (SPEC.md sections 2-4 and 6; DECISIONS.md
//! section 7).
//!
//! The rules of endpoints and deliveries (which deliveries an event gets, their states, the
//! strike count and the disable, replays) are in `services::webhook_endpoints` and
//! `services::webhook_deliveries`; their JSON shapes in `views`. This module moves them:
//!
//! - [`dispatcher`]: a worker that sends due deliveries, schedules retries and hands every
//!   outcome to the delivery rules.
//! - [`sender`] and [`guard`]: the HTTP client, which only ever connects to checked addresses.
//! - [`signature`]: the Stripe-compatible `Service-Signature` header.
//! - [`stream`]: the server-sent event stream.
//!
//! [`Webhooks`] is the handle the API and the workers share (in `Handles`): the dispatcher's
//! wake-ups, the per-project test and replay rate limits and the stream slots.

pub mod dispatcher;
pub mod guard;
pub mod sender;
pub mod signature;
pub mod stream;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{mpsc, watch, Notify};
use uuid::Uuid;

use crate::config::WebhooksConfig;

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
    streams: crate::slots::Slots<Uuid>,
    test_limit: DefaultKeyedRateLimiter<Uuid>,
    replay_limit: DefaultKeyedRateLimiter<Uuid>,
    shutdown: watch::Sender<bool>,
}

impl Webhooks {
    pub fn new(config: WebhooksConfig) -> Webhooks {
        let (pokes, rx) = mpsc::channel(1024);
        let per_minute = |n: u32| Quota::per_minute(NonZeroU32::new(n).expect("non-zero"));
        Webhooks {
            config,
            pokes,
            pokes_rx: Mutex::new(Some(rx)),
            rescan: AtomicBool::new(false),
            rescan_wake: Notify::new(),
            streams: Default::default(),
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
        self.streams.take(project, MAX_STREAMS)
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
pub type StreamSlot = crate::slots::Slot<Uuid>;

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
    use serde_json::Value;

    use super::*;

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
