//! Sending one attempt and recording outcomes. The outcome writer batches outcomes into one
//! transaction (`services::webhook_deliveries::record_outcomes` applies the rules) and tells
//! the dispatcher what was committed; the retry schedule (with jitter) is here. Also the
//! chunked background work of disabled and deleted endpoints.

use std::sync::Arc;

use tokio::sync::mpsc;
use uuid::Uuid;

use appliance_storage::{now_us, WriteCtx};

use crate::handles::Handles;
use crate::services::types::{ProjectId, WebhookEndpointId};
use crate::services::webhook_deliveries::{self, OutcomeKind};
use crate::services::webhook_endpoints;
use crate::views::delivery_ref;
use crate::webhooks::sender::Sender;
use crate::webhooks::{envelope, signature};

use super::resolve::Job;

/// Outcomes written per transaction.
pub(super) const OUTCOME_BATCH: usize = 1_024;
/// Retry delay after the store failed to record an outcome.
const STORE_RETRY_US: i64 = 5_000_000;

/// One attempt's (or a cancel's) result on its way to the outcome writer, with what the
/// dispatcher needs back (the endpoint and whether it is ordered).
pub(super) struct Outcome {
    pub endpoint: Uuid,
    pub ordered: bool,
    pub recording: webhook_deliveries::Outcome,
}

/// What the outcome writer committed, back to the dispatcher.
pub(super) struct Committed {
    pub items: Vec<Done>,
    /// Endpoints disabled in this batch whose open deliveries are not all canceled yet.
    pub cancel_more: Vec<(ProjectId, WebhookEndpointId)>,
}

pub(super) struct Done {
    pub id: Uuid,
    pub endpoint: Uuid,
    pub ordered: bool,
    /// When the delivery is due again (`failed`, or the store failed), if at all.
    pub retry_at: Option<i64>,
    /// The outcome is committed: an ordered endpoint may move on.
    pub recorded: bool,
}

/// Sends one attempt.
pub(super) async fn attempt(sender: &Sender, job: Job) -> Outcome {
    let body = envelope(&job.event_json, job.attempt, &delivery_ref(job.id));
    let t = now_us() / 1_000_000;
    let header = signature::header(job.secrets.iter().map(|s| s.as_str()), t, body.as_bytes());
    let result = sender.send(&job.url, body, header).await;
    let report = result.report(job.url);
    crate::ops::metrics::webhook_attempt(report.succeeded(), report.status);
    Outcome {
        endpoint: job.endpoint,
        ordered: job.ordered,
        recording: webhook_deliveries::Outcome {
            id: job.id,
            attempt: job.attempt,
            kind: OutcomeKind::Attempt(report),
        },
    }
}

/// Writes outcomes in batches, then tells the dispatcher what was committed.
pub(super) async fn record_outcomes(
    state: Handles,
    retry_schedule_s: Vec<u64>,
    mut rx: mpsc::Receiver<Outcome>,
    done: mpsc::UnboundedSender<Committed>,
) {
    let schedule = Arc::new(retry_schedule_s);
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
            .map(|o| (o.recording.id, o.endpoint, o.ordered))
            .collect();
        let recordings: Vec<_> = batch.into_iter().map(|o| o.recording).collect();
        let sched = schedule.clone();
        let r = state
            .store
            .write(move |ctx| {
                webhook_deliveries::record_outcomes(ctx, recordings, |attempts_made| {
                    retry_delay_us(&sched, attempts_made)
                })
            })
            .await;
        let c = match r {
            Ok(rec) => Committed {
                items: keys
                    .into_iter()
                    .zip(rec.retry_at)
                    .map(|((id, endpoint, ordered), retry_at)| Done {
                        id,
                        endpoint,
                        ordered,
                        retry_at,
                        recorded: true,
                    })
                    .collect(),
                cancel_more: rec.cancel_more,
            },
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
pub(super) fn retry_delay_us(schedule: &[u64], attempts_made: u32) -> i64 {
    let i = (attempts_made.max(1) as usize - 1).min(schedule.len().saturating_sub(1));
    let base_us = schedule.get(i).copied().unwrap_or(60) as i64 * 1_000_000;
    let r = appliance_storage::sources::random_u64();
    base_us + (r % (base_us as u64 / 10 + 1)) as i64
}

/// Cancels the rest of a disabled endpoint's open deliveries, a chunk per transaction.
pub(super) async fn cancel_rest(state: Handles, project: ProjectId, endpoint: WebhookEndpointId) {
    let failed = "canceling a disabled endpoint's deliveries failed";
    in_chunks(&state, failed, move |ctx| {
        webhook_deliveries::cancel_open(ctx, project, endpoint)
    })
    .await
}

/// Runs `chunk` in a transaction of its own until it reports nothing left (`false`). A
/// failure is logged as `failed` and ends the run (the next start resumes it).
async fn in_chunks<E: std::fmt::Debug + Send + 'static>(
    state: &Handles,
    failed: &str,
    chunk: impl Fn(&mut WriteCtx<'_>) -> Result<bool, E> + Clone + Send + 'static,
) {
    loop {
        match state.store.write(chunk.clone()).await {
            Ok(true) => continue,
            Ok(false) => return,
            Err(e) => {
                tracing::error!(error = ?e, "{failed}");
                return;
            }
        }
    }
}

/// Finishes deleting the deliveries of endpoints deleted before a crash.
pub(super) async fn finish_purges(state: Handles) {
    let pending = match state.store.read(webhook_endpoints::pending_purges).await {
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
pub async fn purge(state: &Handles, project: ProjectId, endpoint: WebhookEndpointId) {
    let failed = "removing a deleted endpoint's deliveries failed";
    in_chunks(state, failed, move |ctx| {
        webhook_endpoints::purge_chunk(ctx, project, endpoint)
    })
    .await
}
