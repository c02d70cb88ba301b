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
//!
//! The loop is here; [`resolve`] is the read that turns candidates into sends, and
//! [`outcomes`] sends one attempt and writes outcomes through `services::webhook_deliveries`,
//! which owns every state change.

mod outcomes;
mod resolve;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, mpsc};
use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::WebhookDelivery;
use appliance_storage::{now_us, ReadOps};

use crate::handles::Handles;
use crate::services::webhook_deliveries::{Outcome as Recording, OutcomeKind};
use crate::webhooks::sender::Sender;
use crate::webhooks::{Poke, Webhooks};

use outcomes::{
    attempt, cancel_rest, finish_purges, record_outcomes, Committed, Outcome, OUTCOME_BATCH,
};
use resolve::{resolve_in, Job, Resolution};

pub use outcomes::purge;

/// Most (due time, id) pairs held in memory; the rest wait in the due index.
const MAX_SCHEDULED: usize = 100_000;
/// Most resolved deliveries waiting for a send slot.
const MAX_WAITING: usize = 10_000;
/// Deliveries resolved per read transaction.
const RESOLVE_BATCH: usize = 512;
/// A full rescan of the due index at least this often (a safety net).
const RESCAN_EVERY: Duration = Duration::from_secs(60);
/// Rescans asked for (overflow, lagging notices, resumed endpoints) at most this often: each
/// reads the due index from its start.
const RESCAN_GAP: Duration = Duration::from_secs(1);

/// Starts the dispatcher and its outcome writer; runs until the store closes.
pub async fn run(state: Handles, hooks: Arc<Webhooks>) {
    let Some(pokes) = hooks.take_pokes() else {
        tracing::error!("the webhook dispatcher was started twice");
        return;
    };
    let cfg = hooks.config.clone();
    let sender = match Sender::new(cfg.allow_private_targets, hooks.timeout()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "webhook HTTP client could not be built; webhooks are not sent");
            return;
        }
    };
    let (out_tx, out_rx) = mpsc::channel::<Outcome>(OUTCOME_BATCH * 4);
    let (done_tx, done_rx) = mpsc::unbounded_channel::<Committed>();
    tokio::spawn(record_outcomes(
        state.clone(),
        cfg.retry_schedule_s.clone(),
        out_rx,
        done_tx,
    ));
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
        hooks,
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

struct Dispatcher {
    state: Handles,
    /// The webhook handle the API pokes and the dispatcher answers (rescans).
    hooks: Arc<Webhooks>,
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
            let hooks = self.hooks.clone();
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
                                hooks.rescan.store(true, Ordering::SeqCst)
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
                _ = hooks.rescan_wake.notified() => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    fn lagged(&mut self) {
        tracing::warn!("webhook dispatcher fell behind the commit notices; rescanning");
        self.hooks.rescan.store(true, Ordering::SeqCst);
    }

    /// When the next rescan is due: soon after one was asked for (memory dropped work that
    /// it now has room for, notices were lost, an endpoint resumed), else the safety net.
    fn rescan_at(&self) -> Instant {
        let asked = self.hooks.rescan.load(Ordering::SeqCst)
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
        let reg = self.state.registry.clone();
        let read = self
            .state
            .store
            .read(move |r| resolve_in(r, &reg, &key, &events, ids, &kicks, now))
            .await;
        let resolutions = match read {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "webhook dispatcher could not read its work; rescanning");
                self.hooks.rescan.store(true, Ordering::SeqCst);
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
                            endpoint,
                            ordered: false,
                            recording: Recording {
                                id,
                                attempt,
                                kind: OutcomeKind::Cancel,
                            },
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
                            endpoint,
                            ordered,
                            recording: Recording {
                                id,
                                attempt,
                                kind: OutcomeKind::Skip { reason },
                            },
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
        self.hooks.rescan.store(false, Ordering::SeqCst);
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

/// One pass over the deliveries due now (at most `limit`), sent one after another through
/// `send` instead of the network, outcomes written as the dispatcher writes them (the
/// resolving read, [`webhook_deliveries::record_outcomes`] and the retry schedule are the
/// dispatcher's own). Returns the number of outcomes recorded. For `appliance simulate`,
/// which runs the dispatcher as a step it schedules, with no event loop, no
/// timers and no concurrency deciding anything; `send` gets the URL, the body and its
/// signature header.
pub async fn deliver_due(
    state: &Handles,
    hooks: &Webhooks,
    limit: usize,
    mut send: impl FnMut(&str, &str, &str) -> crate::webhooks::sender::AttemptResult,
) -> anyhow::Result<usize> {
    let prefix = index::prefix(IndexTag::WebhookDeliveriesDue, Uuid::nil(), &[]);
    let end = index::prefix_end(&prefix);
    let now = now_us();
    let keys = state
        .store
        .read(move |r| r.index_range(&prefix, &end, limit, false))
        .await?;
    let ids: Vec<Uuid> = keys
        .iter()
        .filter_map(|k| WebhookDelivery::parse_due_key(k))
        .filter(|(at, _)| *at <= now)
        .map(|(_, id)| id)
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let (reg, key) = (state.registry.clone(), state.data_key.clone());
    let resolutions = state
        .store
        .read(move |r| resolve_in(r, &reg, &key, &[], ids, &[], now))
        .await?;
    let mut recordings = Vec::new();
    for r in resolutions {
        match r {
            Resolution::Send(job) => {
                let body = crate::webhooks::envelope(
                    &job.event_json,
                    job.attempt,
                    &crate::views::delivery_ref(job.id),
                );
                let t = now_us() / 1_000_000;
                let header = crate::webhooks::signature::header(
                    job.secrets.iter().map(|s| s.as_str()),
                    t,
                    body.as_bytes(),
                );
                let result = send(&job.url, &body, &header);
                let report = result.report(job.url);
                recordings.push(Recording {
                    id: job.id,
                    attempt: job.attempt,
                    kind: OutcomeKind::Attempt(report),
                });
            }
            Resolution::Later(..) => {}
            Resolution::Cancel { id, attempt, .. } => recordings.push(Recording {
                id,
                attempt,
                kind: OutcomeKind::Cancel,
            }),
            Resolution::Skip {
                id,
                attempt,
                reason,
                ..
            } => recordings.push(Recording {
                id,
                attempt,
                kind: OutcomeKind::Skip { reason },
            }),
        }
    }
    let n = recordings.len();
    let schedule = hooks.config.retry_schedule_s.clone();
    let rec = state
        .store
        .write(move |ctx| {
            crate::services::webhook_deliveries::record_outcomes(ctx, recordings, |made| {
                outcomes::retry_delay_us(&schedule, made)
            })
        })
        .await
        .map_err(|e| anyhow::anyhow!("recording webhook outcomes: {e:?}"))?;
    for (project, endpoint) in rec.cancel_more {
        cancel_rest(state.clone(), project, endpoint).await;
    }
    Ok(n)
}
