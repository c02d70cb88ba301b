//! The dispatcher: sends due deliveries, retries in place, records every outcome.
//!
//! Work arrives three ways: the store's commit notices (deliveries of new events, found by
//! event), pokes from the API (replays, tests, resumed endpoints), and the due index (open
//! deliveries by `next_attempt_at`), which is loaded at start and rescanned whenever memory
//! may have missed something — so a restart resumes every open delivery at its time. Memory
//! holds a bounded schedule of (due time, id); the store stays the truth: every send starts by
//! re-reading the delivery and its endpoint, and every outcome is written only if the delivery
//! is still at the attempt that was sent.
//!
//! Sends run concurrently up to `webhooks.max_concurrency`. Outcomes are written in batches
//! (one transaction for many), after which the dispatcher schedules retries and lets the next
//! delivery of an ordered endpoint go. Delivery is at least once: a crash between a send and
//! its outcome sends again after restart, with the same event id.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    DeliveryMode, DeliveryStatus, EndpointStatus, WebhookDelivery, WebhookEndpoint,
};
use appliance_storage::{now_us, ReadCtx, ReadOps, StoreError, WriteCtx};

use crate::sealing::DataKey;
use crate::state::AppState;
use crate::views;
use crate::webhooks::sender::{AttemptResult, Sender};
use crate::webhooks::{
    delivery_ref, endpoints, envelope, signature, Poke, DISABLE_AFTER_EXHAUSTED,
};

/// Most (due time, id) pairs held in memory; the rest wait in the due index.
const MAX_SCHEDULED: usize = 100_000;
/// Most resolved deliveries waiting for a send slot.
const MAX_WAITING: usize = 10_000;
/// Deliveries resolved per read transaction.
const RESOLVE_BATCH: usize = 512;
/// Outcomes written per transaction.
const OUTCOME_BATCH: usize = 1_024;
/// Open deliveries canceled per transaction when an endpoint is disabled.
const CANCEL_CHUNK: usize = 1_000;
/// A full rescan of the due index at least this often (a safety net).
const RESCAN_EVERY: Duration = Duration::from_secs(60);
/// Rescans asked for (overflow, lagging notices, resumed endpoints) at most this often: each
/// reads the due index from its start.
const RESCAN_GAP: Duration = Duration::from_secs(1);
/// Open deliveries looked at per status when choosing an ordered endpoint's next one.
const HEAD_CANDIDATES: usize = 8;
/// Retry delay after the store failed to record an outcome.
const STORE_RETRY_US: i64 = 5_000_000;

/// Starts the dispatcher and its outcome writer; runs until the store closes.
pub async fn run(state: AppState) {
    let Some(pokes) = state.webhooks.take_pokes() else {
        tracing::error!("the webhook dispatcher was started twice");
        return;
    };
    let cfg = &state.webhooks.config;
    let sender = match Sender::new(cfg.allow_private_targets, state.webhooks.timeout()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "webhook HTTP client could not be built; webhooks are not sent");
            return;
        }
    };
    let (out_tx, out_rx) = mpsc::channel::<Outcome>(OUTCOME_BATCH * 4);
    let (done_tx, done_rx) = mpsc::unbounded_channel::<Committed>();
    tokio::spawn(record_outcomes(state.clone(), out_rx, done_tx));
    tokio::spawn(finish_purges(state.clone()));
    let (finished_tx, finished_rx) = mpsc::unbounded_channel::<Uuid>();
    let d = Dispatcher {
        max_sending: cfg.max_concurrency,
        max_per_endpoint: per_endpoint_limit(cfg.max_concurrency),
        sending: 0,
        per_endpoint: HashMap::new(),
        parked: HashMap::new(),
        parked_len: 0,
        finished: finished_tx,
        state,
        sender,
        outcomes: out_tx,
        schedule: BTreeSet::new(),
        scheduled: HashMap::new(),
        inflight: HashSet::new(),
        busy: HashSet::new(),
        waiting: VecDeque::new(),
        overflow: false,
        last_rescan: Instant::now(),
    };
    d.run(pokes, done_rx, finished_rx).await;
}

/// Sends in flight to one endpoint at most: a quarter of all slots, so a slow or dead
/// receiver (each attempt up to the timeout) cannot hold up every other endpoint.
fn per_endpoint_limit(max_concurrency: usize) -> usize {
    (max_concurrency / 4).max(1)
}

/// A delivery ready to be sent.
struct Job {
    id: Uuid,
    endpoint: Uuid,
    ordered: bool,
    /// The attempt this send is (attempts made so far + 1).
    attempt: u32,
    url: String,
    /// Live secrets, newest first, opened.
    secrets: Vec<zeroize::Zeroizing<String>>,
    /// The event as `GET /v1/events/{id}` shows it.
    event_json: Arc<str>,
}

/// What a read decided about a candidate.
enum Resolution {
    Send(Job),
    /// Not due yet.
    Later(Uuid, i64),
    /// Open, but its endpoint is disabled.
    Cancel {
        id: Uuid,
        endpoint: Uuid,
        attempt: u32,
    },
    /// Cannot be sent: its event cannot be decoded from the store, or its endpoint's secret
    /// does not open. Recorded `skipped` with the reason (replayable), so an ordered endpoint
    /// moves on instead of waiting for it for ever.
    Skip {
        id: Uuid,
        endpoint: Uuid,
        ordered: bool,
        attempt: u32,
        reason: &'static str,
    },
}

/// One attempt's (or a cancel's) result, for the outcome writer.
struct Outcome {
    id: Uuid,
    endpoint: Uuid,
    ordered: bool,
    /// The attempt sent, or for a cancel the attempts made.
    attempt: u32,
    kind: OutcomeKind,
}

enum OutcomeKind {
    Attempt { url: String, result: AttemptResult },
    Cancel,
    Skip { reason: &'static str },
}

/// What the outcome writer committed, back to the dispatcher.
struct Committed {
    items: Vec<Done>,
    /// Endpoints disabled in this batch whose open deliveries are not all canceled yet.
    cancel_more: Vec<(Uuid, Uuid)>,
}

struct Done {
    id: Uuid,
    endpoint: Uuid,
    ordered: bool,
    /// When the delivery is due again (`failed`, or the store failed), if at all.
    retry_at: Option<i64>,
    /// The outcome is committed: an ordered endpoint may move on.
    recorded: bool,
}

struct Dispatcher {
    state: AppState,
    sender: Sender,
    outcomes: mpsc::Sender<Outcome>,
    /// Due times of deliveries known to be open, earliest first.
    schedule: BTreeSet<(i64, Uuid)>,
    scheduled: HashMap<Uuid, i64>,
    /// Resolved and not yet recorded (waiting, sending, or outcome not committed).
    inflight: HashSet<Uuid>,
    /// Ordered endpoints with their one delivery in flight.
    busy: HashSet<Uuid>,
    waiting: VecDeque<Job>,
    /// Sends in flight, in all and per endpoint, and their limits.
    sending: usize,
    max_sending: usize,
    per_endpoint: HashMap<Uuid, usize>,
    max_per_endpoint: usize,
    /// Jobs whose endpoint is at its limit, released one per finished send.
    parked: HashMap<Uuid, VecDeque<Job>>,
    parked_len: usize,
    /// Each send task reports its endpoint here when it is done.
    finished: mpsc::UnboundedSender<Uuid>,
    /// Memory dropped some work the due index still holds.
    overflow: bool,
    last_rescan: Instant,
}

impl Dispatcher {
    async fn run(
        mut self,
        mut pokes: mpsc::Receiver<Poke>,
        mut done: mpsc::UnboundedReceiver<Committed>,
        mut finished: mpsc::UnboundedReceiver<Uuid>,
    ) {
        let mut commits = self.state.store.subscribe();
        self.rescan().await;
        loop {
            self.start_waiting();
            self.run_due().await;
            self.start_waiting();
            let rescan_at = self.rescan_at();
            if rescan_at <= Instant::now() {
                self.rescan().await;
                continue;
            }
            let wake = self.next_wake(rescan_at);
            let state = self.state.clone();
            tokio::select! {
                r = commits.recv() => match r {
                    Ok(n) => {
                        let mut events = n.events;
                        loop {
                            match commits.try_recv() {
                                Ok(more) => events.extend(more.events),
                                Err(broadcast::error::TryRecvError::Lagged(_)) => self.lagged(),
                                Err(_) => break,
                            }
                        }
                        if self.queued() >= MAX_WAITING {
                            // Saturated: the due index has them; a rescan brings them later.
                            self.overflow = true;
                        } else {
                            self.resolve(events, Vec::new(), Vec::new()).await;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => self.lagged(),
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                Some(p) = pokes.recv() => {
                    let mut ids = Vec::new();
                    let mut next = Some(p);
                    while let Some(p) = next {
                        match p {
                            Poke::Deliveries(v) => ids.extend(v),
                            Poke::Resumed(_) => {
                                state.webhooks.rescan.store(true, Ordering::SeqCst)
                            }
                        }
                        next = pokes.try_recv().ok();
                    }
                    self.resolve(Vec::new(), ids, Vec::new()).await;
                }
                Some(c) = done.recv() => {
                    let mut next = Some(c);
                    let mut kicks = Vec::new();
                    while let Some(c) = next {
                        self.committed(c, &mut kicks);
                        next = done.try_recv().ok();
                    }
                    if !kicks.is_empty() {
                        self.resolve(Vec::new(), Vec::new(), kicks).await;
                    }
                }
                Some(ep) = finished.recv() => {
                    let mut next = Some(ep);
                    while let Some(ep) = next {
                        self.send_done(ep);
                        next = finished.try_recv().ok();
                    }
                }
                _ = state.webhooks.rescan_wake.notified() => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    fn lagged(&mut self) {
        tracing::warn!("webhook dispatcher fell behind the commit notices; rescanning");
        self.state.webhooks.rescan.store(true, Ordering::SeqCst);
    }

    /// When the next rescan is due: soon after one was asked for (memory dropped work that
    /// it now has room for, notices were lost, an endpoint resumed), else the safety net.
    fn rescan_at(&self) -> Instant {
        let asked = self.state.webhooks.rescan.load(Ordering::SeqCst)
            || (self.overflow
                && self.schedule.len() < MAX_SCHEDULED / 2
                && self.queued() < MAX_WAITING / 2);
        if asked {
            self.last_rescan + RESCAN_GAP
        } else {
            self.last_rescan + RESCAN_EVERY
        }
    }

    /// When the earliest scheduled delivery falls due, or the next rescan. While the waiting
    /// queue is full, finished sends (not the clock) wake the dispatcher.
    fn next_wake(&self, rescan_at: Instant) -> tokio::time::Instant {
        let rescan = tokio::time::Instant::from_std(rescan_at);
        if self.queued() >= MAX_WAITING {
            return rescan;
        }
        match self.schedule.first() {
            Some(&(at, _)) => {
                let wait_us = (at - now_us()).max(0) as u64;
                rescan.min(tokio::time::Instant::now() + Duration::from_micros(wait_us))
            }
            None => rescan,
        }
    }

    fn schedule_at(&mut self, id: Uuid, at: i64) {
        if self.inflight.contains(&id) {
            return;
        }
        if let Some(old) = self.scheduled.get(&id).copied() {
            if old == at {
                return;
            }
            self.schedule.remove(&(old, id));
            self.scheduled.remove(&id);
        }
        if self.schedule.len() >= MAX_SCHEDULED {
            self.overflow = true;
            return;
        }
        self.schedule.insert((at, id));
        self.scheduled.insert(id, at);
    }

    /// Resolves every scheduled delivery that is due, in batches.
    async fn run_due(&mut self) {
        loop {
            let now = now_us();
            let mut ids = Vec::new();
            while ids.len() < RESOLVE_BATCH && self.queued() + ids.len() < MAX_WAITING {
                let Some(&(at, id)) = self.schedule.first() else {
                    break;
                };
                if at > now {
                    break;
                }
                self.schedule.pop_first();
                self.scheduled.remove(&id);
                if !self.inflight.contains(&id) {
                    ids.push(id);
                }
            }
            if ids.is_empty() {
                return;
            }
            self.resolve(Vec::new(), ids, Vec::new()).await;
        }
    }

    /// Reads the candidates (new events' deliveries, delivery ids, ordered endpoints to
    /// advance) in one snapshot and queues, schedules or cancels each.
    async fn resolve(&mut self, events: Vec<(Uuid, u64)>, ids: Vec<Uuid>, kicks: Vec<Uuid>) {
        if events.is_empty() && ids.is_empty() && kicks.is_empty() {
            return;
        }
        let now = now_us();
        let key = self.state.data_key.clone();
        let read = self
            .state
            .store
            .read(move |r| resolve_in(r, &key, &events, ids, &kicks, now))
            .await;
        let resolutions = match read {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "webhook dispatcher could not read its work; rescanning");
                self.state.webhooks.rescan.store(true, Ordering::SeqCst);
                return;
            }
        };
        for r in resolutions {
            match r {
                Resolution::Send(job) => {
                    if self.inflight.contains(&job.id)
                        || (job.ordered && self.busy.contains(&job.endpoint))
                    {
                        continue;
                    }
                    if self.queued() >= MAX_WAITING {
                        self.overflow = true;
                        continue;
                    }
                    if let Some(at) = self.scheduled.remove(&job.id) {
                        self.schedule.remove(&(at, job.id));
                    }
                    self.inflight.insert(job.id);
                    if job.ordered {
                        self.busy.insert(job.endpoint);
                    }
                    self.waiting.push_back(job);
                }
                Resolution::Later(id, at) => self.schedule_at(id, at),
                Resolution::Cancel {
                    id,
                    endpoint,
                    attempt,
                } => {
                    if self.inflight.insert(id) {
                        let o = Outcome {
                            id,
                            endpoint,
                            ordered: false,
                            attempt,
                            kind: OutcomeKind::Cancel,
                        };
                        if self.outcomes.send(o).await.is_err() {
                            return;
                        }
                    }
                }
                Resolution::Skip {
                    id,
                    endpoint,
                    ordered,
                    attempt,
                    reason,
                } => {
                    if self.inflight.insert(id) {
                        if let Some(at) = self.scheduled.remove(&id) {
                            self.schedule.remove(&(at, id));
                        }
                        let o = Outcome {
                            id,
                            endpoint,
                            ordered,
                            attempt,
                            kind: OutcomeKind::Skip { reason },
                        };
                        if self.outcomes.send(o).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Jobs resolved and not yet sending.
    fn queued(&self) -> usize {
        self.waiting.len() + self.parked_len
    }

    /// Starts waiting jobs while send slots are free; a job whose endpoint has all its slots
    /// in use is parked until one of them finishes.
    fn start_waiting(&mut self) {
        while self.sending < self.max_sending {
            let Some(job) = self.waiting.pop_front() else {
                return;
            };
            let n = self.per_endpoint.entry(job.endpoint).or_insert(0);
            if *n >= self.max_per_endpoint {
                self.parked.entry(job.endpoint).or_default().push_back(job);
                self.parked_len += 1;
                continue;
            }
            *n += 1;
            self.sending += 1;
            let sender = self.sender.clone();
            let outcomes = self.outcomes.clone();
            let finished = self.finished.clone();
            tokio::spawn(async move {
                let endpoint = job.endpoint;
                let o = attempt(&sender, job).await;
                // Waiting for room in the outcome queue holds the slot: back-pressure.
                let _ = outcomes.send(o).await;
                let _ = finished.send(endpoint);
            });
        }
    }

    /// A send to `endpoint` finished: its slot is free, and a parked job of that endpoint
    /// goes first.
    fn send_done(&mut self, endpoint: Uuid) {
        self.sending = self.sending.saturating_sub(1);
        if let Some(n) = self.per_endpoint.get_mut(&endpoint) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_endpoint.remove(&endpoint);
            }
        }
        if let Some(q) = self.parked.get_mut(&endpoint) {
            if let Some(job) = q.pop_front() {
                self.parked_len -= 1;
                self.waiting.push_front(job);
            }
            if q.is_empty() {
                self.parked.remove(&endpoint);
            }
        }
    }

    /// Takes back what the outcome writer committed: retries are scheduled, ordered endpoints
    /// move on (`kicks`), disabled endpoints get their remaining deliveries canceled.
    fn committed(&mut self, c: Committed, kicks: &mut Vec<Uuid>) {
        for d in c.items {
            self.inflight.remove(&d.id);
            if d.ordered {
                self.busy.remove(&d.endpoint);
                if d.recorded {
                    kicks.push(d.endpoint);
                }
            }
            if let Some(at) = d.retry_at {
                self.schedule_at(d.id, at);
            }
        }
        for (project, endpoint) in c.cancel_more {
            tokio::spawn(cancel_rest(self.state.clone(), project, endpoint));
        }
    }

    /// Loads open deliveries from the due index, earliest first, up to the memory bound.
    async fn rescan(&mut self) {
        self.last_rescan = Instant::now();
        self.state.webhooks.rescan.store(false, Ordering::SeqCst);
        let room = MAX_SCHEDULED.saturating_sub(self.schedule.len());
        let limit = room + self.scheduled.len() + self.inflight.len();
        let prefix = index::prefix(IndexTag::WebhookDeliveriesDue, Uuid::nil(), &[]);
        let end = index::prefix_end(&prefix);
        let keys = match self
            .state
            .store
            .read(move |r| r.index_range(&prefix, &end, limit, false))
            .await
        {
            Ok(k) => k,
            Err(e) => {
                tracing::error!(error = %e, "webhook dispatcher could not read the due index");
                return;
            }
        };
        self.overflow = keys.len() >= limit;
        for k in keys {
            if let Some((at, id)) = WebhookDelivery::parse_due_key(&k) {
                if !self.scheduled.contains_key(&id) {
                    self.schedule_at(id, at);
                }
            }
        }
    }
}

/// The resolving read (blocking, one snapshot).
fn resolve_in(
    r: &ReadCtx,
    key: &DataKey,
    events: &[(Uuid, u64)],
    mut ids: Vec<Uuid>,
    kicks: &[Uuid],
    now: i64,
) -> Result<Vec<Resolution>, StoreError> {
    for (project, seq) in events {
        let prefix = index::prefix(
            IndexTag::WebhookDeliveriesByEvent,
            *project,
            &[&seq.to_be_bytes()],
        );
        let end = index::prefix_end(&prefix);
        for k in r.index_range(&prefix, &end, 1_000, false)? {
            ids.push(index::id_of(&k));
        }
    }
    let mut seen = HashSet::new();
    ids.retain(|id| seen.insert(*id));
    let mut cx = ResolveCtx {
        r,
        key,
        now,
        endpoints: HashMap::new(),
        events: HashMap::new(),
        heads: HashSet::new(),
        out: Vec::new(),
    };
    for id in ids {
        let d = match r.get::<WebhookDelivery>(id) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(StoreError::Corrupt(e)) => {
                tracing::error!(delivery = %delivery_ref(id), error = %e, "a webhook delivery row cannot be decoded; skipped (appliance verify reports it)");
                continue;
            }
            Err(e) => return Err(e),
        };
        if !d.status.is_open() {
            continue;
        }
        let Some(ep) = cx.endpoint(d.endpoint_id)? else {
            continue;
        };
        match ep.status {
            EndpointStatus::Paused => continue,
            EndpointStatus::Disabled => {
                cx.out.push(Resolution::Cancel {
                    id: d.id,
                    endpoint: ep.id,
                    attempt: d.attempt,
                });
                continue;
            }
            EndpointStatus::Active => {}
        }
        if ep.delivery_mode == DeliveryMode::Ordered {
            cx.head(&ep)?;
        } else {
            cx.ready(d, &ep)?;
        }
    }
    for e in kicks {
        if let Some(ep) = cx.endpoint(*e)? {
            if ep.status == EndpointStatus::Active && ep.delivery_mode == DeliveryMode::Ordered {
                cx.head(&ep)?;
            }
        }
    }
    Ok(cx.out)
}

/// An event as a delivery needs it.
#[derive(Clone)]
enum EventRead {
    Found(Arc<str>),
    Missing,
    /// The stored row does not decode (reported by `appliance verify`).
    Undecodable,
}

struct ResolveCtx<'r> {
    r: &'r ReadCtx,
    key: &'r DataKey,
    now: i64,
    endpoints: HashMap<Uuid, Option<Arc<WebhookEndpoint>>>,
    events: HashMap<(Uuid, u64), EventRead>,
    /// Ordered endpoints already advanced in this read.
    heads: HashSet<Uuid>,
    out: Vec<Resolution>,
}

impl ResolveCtx<'_> {
    fn endpoint(&mut self, id: Uuid) -> Result<Option<Arc<WebhookEndpoint>>, StoreError> {
        if let Some(e) = self.endpoints.get(&id) {
            return Ok(e.clone());
        }
        let e = self.r.get::<WebhookEndpoint>(id)?.map(Arc::new);
        self.endpoints.insert(id, e.clone());
        Ok(e)
    }

    /// The oldest open delivery of an ordered endpoint: only it may go.
    fn head(&mut self, ep: &Arc<WebhookEndpoint>) -> Result<(), StoreError> {
        if !self.heads.insert(ep.id) {
            return Ok(());
        }
        // A few candidates per status, oldest first: a row that cannot be decoded (reported by
        // `appliance verify`) is passed over, so it cannot hold the endpoint up for ever.
        let mut open: Vec<Uuid> = Vec::new();
        for s in [DeliveryStatus::Pending, DeliveryStatus::Failed] {
            let prefix = index::prefix(
                IndexTag::WebhookDeliveriesByEndpointStatus,
                ep.project_id,
                &[ep.id.as_bytes(), s.as_str().as_bytes()],
            );
            let end = index::prefix_end(&prefix);
            for k in self.r.index_range(&prefix, &end, HEAD_CANDIDATES, false)? {
                open.push(index::id_of(&k));
            }
        }
        open.sort();
        for id in open {
            match self.r.get::<WebhookDelivery>(id) {
                Ok(Some(d)) if d.status.is_open() => return self.ready(d, ep),
                Ok(_) => return Ok(()),
                Err(StoreError::Corrupt(e)) => {
                    tracing::error!(delivery = %delivery_ref(id), error = %e, "a webhook delivery row cannot be decoded; passed over (appliance verify reports it)");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends `d` now or schedules it for later.
    fn ready(&mut self, d: WebhookDelivery, ep: &WebhookEndpoint) -> Result<(), StoreError> {
        let at = d.next_attempt_at.unwrap_or(self.now);
        if at > self.now {
            self.out.push(Resolution::Later(d.id, at));
            return Ok(());
        }
        let key = (d.project_id, d.event_sequence);
        let event_read = match self.events.get(&key) {
            Some(e) => e.clone(),
            None => {
                let e = match self.r.event_at(d.project_id, d.event_sequence) {
                    Ok(Some(ev)) => EventRead::Found(Arc::from(views::event(&ev).to_string())),
                    Ok(None) => EventRead::Missing,
                    Err(StoreError::Corrupt(e)) => {
                        tracing::error!(
                            event_sequence = d.event_sequence,
                            error = %e,
                            "an event row cannot be decoded; its deliveries are skipped (appliance verify reports it)"
                        );
                        EventRead::Undecodable
                    }
                    Err(e) => return Err(e),
                };
                self.events.insert(key, e.clone());
                e
            }
        };
        let skip = |reason: &'static str| Resolution::Skip {
            id: d.id,
            endpoint: ep.id,
            ordered: ep.delivery_mode == DeliveryMode::Ordered,
            attempt: d.attempt,
            reason,
        };
        let event_json = match event_read {
            EventRead::Found(e) => e,
            EventRead::Missing => {
                tracing::error!(delivery = %delivery_ref(d.id), "the event of a delivery is missing");
                return Ok(());
            }
            EventRead::Undecodable => {
                self.out.push(skip(
                    "The event cannot be decoded from the store; appliance verify reports it.",
                ));
                return Ok(());
            }
        };
        let secrets = match self.key.webhook_secrets(ep, self.now) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(endpoint = %ep.id, error = %e, "a webhook endpoint's signing secret does not open; its deliveries are skipped");
                self.out.push(skip(
                    "The endpoint's signing secret cannot be opened with this data key.",
                ));
                return Ok(());
            }
        };
        self.out.push(Resolution::Send(Job {
            id: d.id,
            endpoint: ep.id,
            ordered: ep.delivery_mode == DeliveryMode::Ordered,
            attempt: d.attempt + 1,
            url: ep.url.clone(),
            secrets,
            event_json,
        }));
        Ok(())
    }
}

/// Sends one attempt.
async fn attempt(sender: &Sender, job: Job) -> Outcome {
    let body = envelope(&job.event_json, job.attempt, &delivery_ref(job.id));
    let t = now_us() / 1_000_000;
    let header = signature::header(job.secrets.iter().map(|s| s.as_str()), t, body.as_bytes());
    let result = sender.send(&job.url, body, header).await;
    Outcome {
        id: job.id,
        endpoint: job.endpoint,
        ordered: job.ordered,
        attempt: job.attempt,
        kind: OutcomeKind::Attempt {
            url: job.url,
            result,
        },
    }
}

/// Writes outcomes in batches, then tells the dispatcher what was committed.
async fn record_outcomes(
    state: AppState,
    mut rx: mpsc::Receiver<Outcome>,
    done: mpsc::UnboundedSender<Committed>,
) {
    let schedule = Arc::new(state.webhooks.config.retry_schedule_s.clone());
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < OUTCOME_BATCH {
            match rx.try_recv() {
                Ok(o) => batch.push(o),
                Err(_) => break,
            }
        }
        let keys: Vec<(Uuid, Uuid, bool)> = batch
            .iter()
            .map(|o| (o.id, o.endpoint, o.ordered))
            .collect();
        let sched = schedule.clone();
        let r = state
            .store
            .write(move |ctx| apply_outcomes(ctx, batch, &sched))
            .await;
        let c = match r {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = ?e, "recording webhook outcomes failed; they will be sent again");
                let retry_at = now_us() + STORE_RETRY_US;
                Committed {
                    items: keys
                        .into_iter()
                        .map(|(id, endpoint, ordered)| Done {
                            id,
                            endpoint,
                            ordered,
                            retry_at: Some(retry_at),
                            recorded: false,
                        })
                        .collect(),
                    cancel_more: Vec::new(),
                }
            }
        };
        if done.send(c).is_err() {
            return;
        }
    }
}

/// Delay before the attempt after `attempts_made`, with up to 10% jitter.
fn retry_delay_us(schedule: &[u64], attempts_made: u32) -> i64 {
    let i = (attempts_made.max(1) as usize - 1).min(schedule.len().saturating_sub(1));
    let base_us = schedule.get(i).copied().unwrap_or(60) as i64 * 1_000_000;
    base_us + rand::thread_rng().gen_range(0..=base_us / 10)
}

fn apply_outcomes(
    ctx: &mut WriteCtx<'_>,
    batch: Vec<Outcome>,
    schedule: &[u64],
) -> Result<Committed, StoreError> {
    let now = ctx.now_us();
    let mut endpoints: HashMap<Uuid, Option<WebhookEndpoint>> = HashMap::new();
    let mut dirty: Vec<Uuid> = Vec::new();
    let mut disabled: Vec<(Uuid, Uuid)> = Vec::new();
    let mut items = Vec::with_capacity(batch.len());
    for o in batch {
        let mut item = Done {
            id: o.id,
            endpoint: o.endpoint,
            ordered: o.ordered,
            retry_at: None,
            recorded: true,
        };
        let current = ctx
            .get::<WebhookDelivery>(o.id)?
            .filter(|d| d.status.is_open());
        let Some(mut d) = current else {
            items.push(item);
            continue;
        };
        match o.kind {
            OutcomeKind::Cancel => {
                if d.attempt != o.attempt {
                    items.push(item);
                    continue;
                }
                d.status = DeliveryStatus::Canceled;
                d.next_attempt_at = None;
            }
            OutcomeKind::Skip { reason } => {
                if d.attempt != o.attempt {
                    items.push(item);
                    continue;
                }
                d.status = DeliveryStatus::Skipped;
                d.error_detail = Some(reason.to_string());
                d.next_attempt_at = None;
            }
            OutcomeKind::Attempt { url, result } => {
                if d.attempt + 1 != o.attempt {
                    items.push(item);
                    continue;
                }
                if let std::collections::hash_map::Entry::Vacant(slot) =
                    endpoints.entry(d.endpoint_id)
                {
                    slot.insert(ctx.get::<WebhookEndpoint>(d.endpoint_id)?);
                }
                let Some(Some(ep)) = endpoints.get_mut(&d.endpoint_id) else {
                    // Deleted: its deliveries are being purged.
                    items.push(item);
                    continue;
                };
                d.attempt = o.attempt;
                d.endpoint_url = url;
                d.response_status = result.status;
                d.resolved_ip = result.resolved_ip.map(|ip| ip.to_string());
                d.duration_ms = Some(result.duration_ms);
                d.response_body = result.body.clone();
                if result.succeeded() {
                    d.status = DeliveryStatus::Succeeded;
                    d.error_detail = None;
                    d.delivered_at = Some(now);
                    d.next_attempt_at = None;
                    ep.last_success_at = Some(now);
                    ep.consecutive_failures = 0;
                } else {
                    d.error_detail = result.error.clone();
                    ep.last_failure_at = Some(now);
                    if result.status == Some(410) {
                        d.status = DeliveryStatus::Exhausted;
                        d.next_attempt_at = None;
                        if ep.status == EndpointStatus::Active {
                            disable(ep, "gone", now);
                            disabled.push((ep.project_id, ep.id));
                        }
                    } else if d.attempt >= d.max_attempts {
                        d.status = DeliveryStatus::Exhausted;
                        d.next_attempt_at = None;
                        ep.consecutive_failures += 1;
                        if ep.consecutive_failures >= DISABLE_AFTER_EXHAUSTED
                            && ep.status == EndpointStatus::Active
                        {
                            disable(ep, "consecutive_failures", now);
                            disabled.push((ep.project_id, ep.id));
                        }
                    } else {
                        let at = now + retry_delay_us(schedule, d.attempt);
                        d.status = DeliveryStatus::Failed;
                        d.next_attempt_at = Some(at);
                        item.retry_at = Some(at);
                    }
                }
                if !dirty.contains(&d.endpoint_id) {
                    dirty.push(d.endpoint_id);
                }
            }
        }
        d.updated_at = now;
        ctx.put(&d)?;
        items.push(item);
    }
    for id in dirty {
        if let Some(Some(ep)) = endpoints.get(&id) {
            ctx.put(ep)?;
        }
    }
    let mut cancel_more = Vec::new();
    for (project, endpoint) in disabled {
        if cancel_open(ctx, project, endpoint)? {
            cancel_more.push((project, endpoint));
        }
    }
    Ok(Committed { items, cancel_more })
}

fn disable(ep: &mut WebhookEndpoint, reason: &str, now: i64) {
    tracing::warn!(endpoint = %ep.id, reason, "webhook endpoint disabled");
    ep.status = EndpointStatus::Disabled;
    ep.disabled_reason = Some(reason.to_string());
    ep.disabled_at = Some(now);
    ep.updated_at = now;
}

/// Cancels up to [`CANCEL_CHUNK`] open deliveries of a disabled endpoint; returns whether more
/// remain. Does nothing once the endpoint is enabled again (or gone).
fn cancel_open(ctx: &mut WriteCtx<'_>, project: Uuid, endpoint: Uuid) -> Result<bool, StoreError> {
    let still_disabled = ctx
        .get::<WebhookEndpoint>(endpoint)?
        .is_some_and(|e| e.status == EndpointStatus::Disabled);
    if !still_disabled {
        return Ok(false);
    }
    let now = ctx.now_us();
    let mut left = CANCEL_CHUNK;
    for s in [DeliveryStatus::Pending, DeliveryStatus::Failed] {
        let prefix = index::prefix(
            IndexTag::WebhookDeliveriesByEndpointStatus,
            project,
            &[endpoint.as_bytes(), s.as_str().as_bytes()],
        );
        let end = index::prefix_end(&prefix);
        let keys = ctx.index_range(&prefix, &end, left + 1, false)?;
        for k in keys.iter().take(left) {
            if let Some(mut d) = ctx.get::<WebhookDelivery>(index::id_of(k))? {
                d.status = DeliveryStatus::Canceled;
                d.next_attempt_at = None;
                d.updated_at = now;
                ctx.put(&d)?;
            }
        }
        if keys.len() > left {
            return Ok(true);
        }
        left -= keys.len();
    }
    Ok(false)
}

/// Cancels the rest of a disabled endpoint's open deliveries, a chunk per transaction.
async fn cancel_rest(state: AppState, project: Uuid, endpoint: Uuid) {
    loop {
        match state
            .store
            .write(move |ctx| cancel_open(ctx, project, endpoint))
            .await
        {
            Ok(true) => continue,
            Ok(false) => return,
            Err(e) => {
                tracing::error!(error = ?e, "canceling a disabled endpoint's deliveries failed");
                return;
            }
        }
    }
}

/// Finishes deleting the deliveries of endpoints deleted before a crash.
async fn finish_purges(state: AppState) {
    let pending = match state.store.read(endpoints::pending_purges).await {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "reading pending webhook purges failed");
            return;
        }
    };
    for (project, endpoint) in pending {
        purge(&state, project, endpoint).await;
    }
}

/// Removes a deleted endpoint's deliveries, a chunk per transaction.
pub async fn purge(state: &AppState, project: Uuid, endpoint: Uuid) {
    loop {
        match state
            .store
            .write(move |ctx| endpoints::purge_chunk(ctx, project, endpoint))
            .await
        {
            Ok(true) => continue,
            Ok(false) => return,
            Err(e) => {
                tracing::error!(error = ?e, "removing a deleted endpoint's deliveries failed");
                return;
            }
        }
    }
}
