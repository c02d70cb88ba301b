//! The outbox: delivery rows written in the same store transaction as the event they carry
//! (DECISIONS.md section 1), so a crash can lose neither. The dispatcher finds them through
//! the commit notice (by event) and, after a restart, through the due index.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    DeliveryStatus, EndpointStatus, Event, WebhookDelivery, WebhookEndpoint,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

/// Attempts per delivery: one more than the retry schedule's length (config; default 8).
static MAX_ATTEMPTS: AtomicU32 = AtomicU32::new(8);

pub(crate) fn set_max_attempts(n: u32) {
    MAX_ATTEMPTS.store(n.max(1), Ordering::Relaxed);
}

/// Attempts a new delivery gets.
pub fn max_attempts() -> u32 {
    MAX_ATTEMPTS.load(Ordering::Relaxed)
}

/// A new delivery id for a row created at `now_us`: a ULID carrying that time (so `since`
/// filters can work on ids), monotonic within this process, so deliveries created one after
/// the other sort in creation order even within one millisecond (ordered endpoints rely on
/// it: creation order is sequence order).
pub fn new_delivery_id(now_us: i64) -> Uuid {
    static GEN: Mutex<ulid::Generator> = Mutex::new(ulid::Generator::new());
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(now_us.max(0) as u64);
    let u = GEN
        .lock()
        .expect("lock")
        .generate_from_datetime(at)
        .unwrap_or_else(|_| ulid::Ulid::from_datetime(at));
    Uuid::from_u128(u.0)
}

/// The facts of an event a delivery carries.
pub struct EventRef<'a> {
    pub project_id: Uuid,
    pub id: &'a str,
    pub sequence: u64,
    pub event_type: &'a str,
}

impl<'a> From<&'a Event> for EventRef<'a> {
    fn from(e: &'a Event) -> Self {
        EventRef {
            project_id: e.project_id,
            id: &e.id,
            sequence: e.sequence,
            event_type: &e.event_type,
        }
    }
}

/// A delivery of `event` to `ep` created at `now`: `pending` and due at once when the endpoint
/// is active, otherwise `skipped` (a paused or disabled endpoint records what it missed, so a
/// replay can fill the gap).
pub fn new_delivery(
    now: i64,
    ep: &WebhookEndpoint,
    event: &EventRef<'_>,
    replay_of: Option<Uuid>,
) -> WebhookDelivery {
    let active = ep.status == EndpointStatus::Active;
    WebhookDelivery {
        id: new_delivery_id(now),
        project_id: event.project_id,
        endpoint_id: ep.id,
        event_id: event.id.to_string(),
        event_sequence: event.sequence,
        event_type: event.event_type.to_string(),
        endpoint_url: ep.url.clone(),
        status: if active {
            DeliveryStatus::Pending
        } else {
            DeliveryStatus::Skipped
        },
        attempt: 0,
        max_attempts: max_attempts(),
        next_attempt_at: active.then_some(now),
        response_status: None,
        resolved_ip: None,
        duration_ms: None,
        error_detail: None,
        response_body: None,
        replay_of,
        delivered_at: None,
        created_at: now,
        updated_at: now,
    }
}

/// The project's endpoints, oldest first.
pub fn endpoints_of(ctx: &impl ReadOps, project: Uuid) -> Result<Vec<WebhookEndpoint>, StoreError> {
    let prefix = index::prefix(IndexTag::WebhookEndpoints, project, &[]);
    let mut page = ctx.list::<WebhookEndpoint>(&prefix, None, usize::MAX, |_| true)?;
    page.items.reverse();
    Ok(page.items)
}

/// Writes one delivery per endpoint of the event's project that subscribes to its type. Runs
/// for every event, in the event's transaction; a project without endpoints costs one index
/// seek.
pub fn enqueue(ctx: &mut WriteCtx<'_>, event: &Event) -> Result<(), StoreError> {
    let prefix = index::prefix(IndexTag::WebhookEndpoints, event.project_id, &[]);
    if ctx
        .index_range(&prefix, &index::prefix_end(&prefix), 1, false)?
        .is_empty()
    {
        return Ok(());
    }
    let endpoints = endpoints_of(ctx, event.project_id)?;
    let now = ctx.now_us();
    let ev = EventRef::from(event);
    for ep in endpoints
        .iter()
        .filter(|e| e.subscribes_to(&event.event_type))
    {
        ctx.put(&new_delivery(now, ep, &ev, None))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use appliance_storage::records::DeliveryMode;
    use appliance_storage::{Store, StoreError, StoreOptions};

    use super::*;
    use crate::webhooks::endpoints::{self, NewEndpoint};

    /// The outbox's cost per event, by number of endpoints (CPU inside the transaction, no
    /// fsync): `cargo test --release --lib -- --ignored outbox_cost --nocapture`.
    #[test]
    #[ignore]
    fn outbox_cost() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        for n in [0usize, 1, 8, 16] {
            let p = Uuid::now_v7();
            let key = crate::sealing::DataKey::from_bytes([1; 32]);
            store
                .write_blocking(move |ctx| {
                    for i in 0..n {
                        let req = NewEndpoint {
                            url: format!("https://example.com/{i}"),
                            description: None,
                            event_types: Vec::new(),
                            delivery_mode: DeliveryMode::Unordered,
                        };
                        endpoints::create(ctx, p, &key, req).map_err(|e| e.message)?;
                    }
                    Ok::<_, String>(())
                })
                .unwrap();
            for with_outbox in [false, true] {
                let per_txn = 100;
                let rounds = 20;
                let t = store
                    .write_blocking(move |ctx| {
                        let t0 = Instant::now();
                        for _ in 0..per_txn * rounds {
                            let e = ctx.append_event(
                                p,
                                false,
                                "customer.created",
                                "r",
                                serde_json::json!({ "id": "r", "object": "customer" }),
                            )?;
                            if with_outbox {
                                enqueue(ctx, &e)?;
                            }
                        }
                        Ok::<_, StoreError>(t0.elapsed())
                    })
                    .unwrap();
                println!(
                    "endpoints {n:>2}, outbox {with_outbox:>5}: {:>6.1} us per event",
                    t.as_secs_f64() * 1e6 / (per_txn * rounds) as f64
                );
            }
        }
    }
}
