//! State-machine tests of webhook endpoints and deliveries against a real store in a temp
//! dir: the 5-strike and 410 disable (with the endpoint's open deliveries canceled), the
//! strike reset, paused endpoints, stale outcomes and the replay rules. No HTTP: outcomes are
//! fed to `record_outcomes` as the dispatcher would.

use std::fmt::Debug;

use uuid::Uuid;

use appliance_storage::records::{
    DeliveryMode, DeliveryStatus, EndpointStatus, WebhookDelivery, WebhookEndpoint,
};
use appliance_storage::{ReadOps, Store, StoreOptions, WriteCtx};

use crate::services::webhook_deliveries::{
    self as deliveries, AttemptReport, OpenDelivery, Outcome, OutcomeKind, Recorded,
    WebhookDeliveryError,
};
use crate::services::webhook_endpoints::{
    self as endpoints, EndpointPatch, NewEndpoint, RequestedStatus, WebhookEndpointError,
    DISABLE_AFTER_EXHAUSTED,
};

/// Fixed retry delay, so due times are checkable.
const DELAY_US: i64 = 7_000_000;

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    project: Uuid,
    endpoint: Uuid,
}

impl Fixture {
    fn write<T, E>(&self, f: impl FnOnce(&mut WriteCtx<'_>) -> Result<T, E> + Send + 'static) -> T
    where
        T: Send + 'static,
        E: Send + Debug + 'static,
    {
        self.store.write_blocking(f).expect("write")
    }

    fn try_write<T, E>(
        &self,
        f: impl FnOnce(&mut WriteCtx<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + Debug + 'static,
    {
        match self.store.write_blocking(f) {
            Ok(v) => Ok(v),
            Err(appliance_storage::WriteError::Rejected(e)) => Err(e),
            Err(e) => panic!("store failed: {e:?}"),
        }
    }

    fn endpoint(&self) -> WebhookEndpoint {
        let (p, e) = (self.project, self.endpoint);
        self.write(move |ctx| endpoints::get(ctx, p.into(), e.into()))
    }

    fn delivery(&self, id: Uuid) -> WebhookDelivery {
        let p = self.project;
        self.write(move |ctx| deliveries::get(ctx, p.into(), id.into()))
    }

    /// Writes `n` events the endpoint subscribes to; returns their deliveries, oldest first.
    fn events(&self, n: usize) -> Vec<WebhookDelivery> {
        let p = self.project;
        self.write(move |ctx| {
            let mut out = Vec::new();
            for _ in 0..n {
                let ev = ctx.append_event(
                    p,
                    false,
                    "customer.created",
                    "r",
                    serde_json::json!({ "object": "customer" }),
                )?;
                deliveries::enqueue(ctx, &ev)?;
                let prefix = appliance_storage::index::prefix(
                    appliance_storage::index::IndexTag::WebhookDeliveriesByEvent,
                    p,
                    &[&ev.sequence.to_be_bytes()],
                );
                let page = ctx.list::<WebhookDelivery>(&prefix, None, 10, |_| true)?;
                assert_eq!(page.items.len(), 1, "one delivery per subscribed endpoint");
                out.extend(page.items);
            }
            Ok::<_, appliance_storage::StoreError>(out)
        })
    }

    /// Records the answer `status` to the next attempt of delivery `id`.
    fn answer(&self, id: Uuid, status: Option<u16>) -> Recorded {
        let attempt = self.delivery(id).attempt + 1;
        self.record(id, attempt, status)
    }

    fn record(&self, id: Uuid, attempt: u32, status: Option<u16>) -> Recorded {
        let report = AttemptReport {
            url: "https://example.com/hook".into(),
            status,
            resolved_ip: Some("93.184.216.34".into()),
            duration_ms: 12,
            error: status
                .filter(|s| !(200..300).contains(s))
                .map(|s| format!("HTTP {s}")),
            body: Some("ok".into()),
        };
        let batch = vec![Outcome {
            id,
            attempt,
            kind: OutcomeKind::Attempt(report),
        }];
        self.write(move |ctx| deliveries::record_outcomes(ctx, batch, |_| DELAY_US))
    }

    /// Fails every attempt of delivery `id` until it is exhausted.
    fn exhaust(&self, id: Uuid) {
        loop {
            let d = self.delivery(id);
            if !d.status.is_open() {
                assert_eq!(d.status, DeliveryStatus::Exhausted);
                return;
            }
            let r = self.answer(id, Some(500));
            let last = d.attempt + 1 >= d.max_attempts;
            assert_eq!(
                r.retry_at[0].is_some(),
                !last,
                "retry only before the last attempt"
            );
        }
    }

    fn set_status(&self, to: RequestedStatus) -> Result<bool, WebhookEndpointError> {
        let (p, e) = (self.project, self.endpoint);
        let req = EndpointPatch {
            status: Some(to),
            ..EndpointPatch::default()
        };
        self.try_write(move |ctx| endpoints::patch(ctx, p.into(), e.into(), req).map(|(_, r)| r))
    }
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let project = Uuid::now_v7();
    let endpoint = store
        .write_blocking(move |ctx| {
            let req = NewEndpoint {
                url: "https://example.com/hook".into(),
                description: None,
                event_types: Vec::new(),
                delivery_mode: DeliveryMode::Unordered,
            };
            endpoints::create(ctx, project.into(), &test_key(), req).map(|(e, _)| e.id)
        })
        .unwrap();
    Fixture {
        _dir: dir,
        store,
        project,
        endpoint,
    }
}

#[test]
fn a_delivery_moves_failed_then_succeeded() {
    let f = fixture();
    let d = f.events(1).remove(0);
    assert_eq!(d.status, DeliveryStatus::Pending);
    assert_eq!(d.attempt, 0);
    assert!(d.next_attempt_at.is_some());

    let r = f.answer(d.id, Some(503));
    let d1 = f.delivery(d.id);
    assert_eq!(d1.status, DeliveryStatus::Failed);
    assert_eq!(d1.attempt, 1);
    assert_eq!(d1.response_status, Some(503));
    assert_eq!(d1.error_detail.as_deref(), Some("HTTP 503"));
    assert_eq!(r.retry_at[0], d1.next_attempt_at);
    assert_eq!(d1.next_attempt_at, Some(d1.updated_at + DELAY_US));
    assert!(f.endpoint().last_failure_at.is_some());

    let r = f.answer(d.id, Some(204));
    let d2 = f.delivery(d.id);
    assert_eq!(d2.status, DeliveryStatus::Succeeded);
    assert_eq!(d2.attempt, 2);
    assert_eq!(d2.error_detail, None);
    assert_eq!(d2.next_attempt_at, None);
    assert!(d2.delivered_at.is_some());
    assert_eq!(r.retry_at[0], None);
    assert!(f.endpoint().last_success_at.is_some());
}

#[test]
fn five_consecutive_exhausted_disable_the_endpoint_and_cancel_open_deliveries() {
    let f = fixture();
    let ds = f.events(DISABLE_AFTER_EXHAUSTED as usize + 2);
    for (i, d) in ds
        .iter()
        .take(DISABLE_AFTER_EXHAUSTED as usize - 1)
        .enumerate()
    {
        f.exhaust(d.id);
        let ep = f.endpoint();
        assert_eq!(ep.consecutive_failures, i as u32 + 1);
        assert_eq!(
            ep.status,
            EndpointStatus::Active,
            "still active after {} strikes",
            i + 1
        );
    }
    // One of the two left has failed once (open, `failed`), the other is still `pending`.
    let spare = ds[DISABLE_AFTER_EXHAUSTED as usize].id;
    f.answer(spare, Some(500));
    assert_eq!(f.delivery(spare).status, DeliveryStatus::Failed);

    f.exhaust(ds[DISABLE_AFTER_EXHAUSTED as usize - 1].id);
    let ep = f.endpoint();
    assert_eq!(ep.status, EndpointStatus::Disabled);
    assert_eq!(ep.disabled_reason.as_deref(), Some("consecutive_failures"));
    assert_eq!(ep.consecutive_failures, DISABLE_AFTER_EXHAUSTED);
    assert!(ep.disabled_at.is_some());
    for d in &ds[DISABLE_AFTER_EXHAUSTED as usize..] {
        let d = f.delivery(d.id);
        assert_eq!(
            d.status,
            DeliveryStatus::Canceled,
            "open deliveries are canceled"
        );
        assert_eq!(d.next_attempt_at, None);
    }
    assert_eq!(
        deliveries::open_delivery(&ep),
        OpenDelivery::Cancel,
        "an open delivery found later is canceled too"
    );
    // New events while disabled are recorded `skipped`.
    let later = f.events(1).remove(0);
    assert_eq!(later.status, DeliveryStatus::Skipped);
    assert_eq!(later.next_attempt_at, None);
}

#[test]
fn gone_disables_at_once() {
    let f = fixture();
    let ds = f.events(2);
    let r = f.answer(ds[0].id, Some(410));
    assert_eq!(r.retry_at[0], None);
    let d = f.delivery(ds[0].id);
    assert_eq!(d.status, DeliveryStatus::Exhausted);
    assert_eq!(d.attempt, 1, "410 ends the delivery at its first attempt");
    let ep = f.endpoint();
    assert_eq!(ep.status, EndpointStatus::Disabled);
    assert_eq!(ep.disabled_reason.as_deref(), Some("gone"));
    assert_eq!(ep.consecutive_failures, 0, "410 is not a strike");
    assert_eq!(f.delivery(ds[1].id).status, DeliveryStatus::Canceled);
}

#[test]
fn a_success_resets_the_strike_count() {
    let f = fixture();
    let ds = f.events(3);
    f.exhaust(ds[0].id);
    f.exhaust(ds[1].id);
    assert_eq!(f.endpoint().consecutive_failures, 2);
    f.answer(ds[2].id, Some(200));
    let ep = f.endpoint();
    assert_eq!(ep.consecutive_failures, 0);
    assert_eq!(ep.status, EndpointStatus::Active);
    assert!(ep.last_success_at.is_some());
}

#[test]
fn a_paused_endpoint_skips_new_events_and_holds_open_ones() {
    let f = fixture();
    let open = f.events(1).remove(0);
    assert!(
        !f.set_status(RequestedStatus::Paused).unwrap(),
        "pausing is no resume"
    );
    let ep = f.endpoint();
    assert_eq!(ep.status, EndpointStatus::Paused);
    assert_eq!(deliveries::open_delivery(&ep), OpenDelivery::Hold);
    let skipped = f.events(1).remove(0);
    assert_eq!(skipped.status, DeliveryStatus::Skipped);
    assert_eq!(skipped.next_attempt_at, None);
    assert_eq!(
        f.delivery(open.id).status,
        DeliveryStatus::Pending,
        "held, not canceled"
    );
    // Resuming reports it, so the dispatcher looks at the held deliveries again.
    assert!(f.set_status(RequestedStatus::Active).unwrap());
    assert_eq!(deliveries::open_delivery(&f.endpoint()), OpenDelivery::Send);
}

#[test]
fn re_enabling_a_disabled_endpoint_resets_it_and_it_cannot_be_paused() {
    let f = fixture();
    let ds = f.events(1);
    f.answer(ds[0].id, Some(410));
    assert!(matches!(
        f.set_status(RequestedStatus::Paused),
        Err(WebhookEndpointError::CannotPauseDisabled)
    ));
    assert_eq!(
        f.endpoint().status,
        EndpointStatus::Disabled,
        "refusal wrote nothing"
    );
    assert!(f.set_status(RequestedStatus::Active).unwrap());
    let ep = f.endpoint();
    assert_eq!(ep.status, EndpointStatus::Active);
    assert_eq!(ep.consecutive_failures, 0);
    assert_eq!(ep.disabled_reason, None);
    assert_eq!(ep.disabled_at, None);
    assert!(
        !f.set_status(RequestedStatus::Active).unwrap(),
        "already active"
    );
}

#[test]
fn stale_and_repeated_outcomes_change_nothing() {
    let f = fixture();
    let d = f.events(1).remove(0);
    f.record(d.id, 3, Some(200));
    assert_eq!(
        f.delivery(d.id).status,
        DeliveryStatus::Pending,
        "attempt 3 was never sent"
    );
    f.record(d.id, 1, Some(500));
    f.record(d.id, 1, Some(200));
    let now = f.delivery(d.id);
    assert_eq!(
        now.status,
        DeliveryStatus::Failed,
        "the repeat of attempt 1 is ignored"
    );
    assert_eq!(now.attempt, 1);
    // A cancel decided at another attempt count is ignored too.
    let batch = vec![Outcome {
        id: d.id,
        attempt: 0,
        kind: OutcomeKind::Cancel,
    }];
    f.write(move |ctx| deliveries::record_outcomes(ctx, batch, |_| DELAY_US));
    assert_eq!(f.delivery(d.id).status, DeliveryStatus::Failed);
}

#[test]
fn replays_only_closed_deliveries_to_an_active_endpoint() {
    let f = fixture();
    let ds = f.events(2);
    let p = f.project;
    let pending = ds[0].id;
    assert!(matches!(
        f.try_write(move |ctx| deliveries::replay(ctx, p.into(), pending.into(), 8)),
        Err(WebhookDeliveryError::NotReplayable(DeliveryStatus::Pending))
    ));
    f.answer(ds[0].id, Some(200));
    let done = ds[0].id;
    assert!(matches!(
        f.try_write(move |ctx| deliveries::replay(ctx, p.into(), done.into(), 8)),
        Err(WebhookDeliveryError::NotReplayable(
            DeliveryStatus::Succeeded
        ))
    ));
    f.exhaust(ds[1].id);
    f.set_status(RequestedStatus::Paused).unwrap();
    let exhausted = ds[1].id;
    assert!(matches!(
        f.try_write(move |ctx| deliveries::replay(ctx, p.into(), exhausted.into(), 8)),
        Err(WebhookDeliveryError::EndpointNotActive(
            EndpointStatus::Paused
        ))
    ));
    f.set_status(RequestedStatus::Active).unwrap();
    let r = f.write(move |ctx| deliveries::replay(ctx, p.into(), exhausted.into(), 8));
    assert_eq!(r.status, DeliveryStatus::Pending);
    assert_eq!(r.replay_of, Some(exhausted));
    assert_eq!(r.attempt, 0);
    assert_eq!(r.event_id, ds[1].event_id);
    assert!(matches!(
        f.try_write(move |ctx| deliveries::replay(ctx, p.into(), Uuid::now_v7().into(), 8)),
        Err(WebhookDeliveryError::NotFound)
    ));
}

#[test]
fn secrets_have_the_documented_shape() {
    let s = endpoints::new_secret();
    assert!(s.starts_with("whsec_") && s.len() == 6 + 43, "{s}");
    assert_ne!(s, endpoints::new_secret());
}

/// The outbox's cost per event, by number of endpoints (CPU inside the transaction, no
/// fsync): `cargo test --release --lib -- --ignored outbox_cost --nocapture`.
#[test]
#[ignore]
fn outbox_cost() {
    use std::time::Instant;

    use appliance_storage::StoreError;

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    for n in [0usize, 1, 8, 16] {
        let p = Uuid::now_v7();
        store
            .write_blocking(move |ctx| {
                for i in 0..n {
                    let req = NewEndpoint {
                        url: format!("https://example.com/{i}"),
                        description: None,
                        event_types: Vec::new(),
                        delivery_mode: DeliveryMode::Unordered,
                    };
                    endpoints::create(ctx, p.into(), &test_key(), req)?;
                }
                Ok::<_, WebhookEndpointError>(())
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
                            deliveries::enqueue(ctx, &e)?;
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

/// A data key for stores made by these tests.
fn test_key() -> crate::sealing::DataKey {
    crate::sealing::DataKey::from_bytes([1; 32])
}
