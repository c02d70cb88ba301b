//! The event stream (SPEC.md section 4, Events; DECISIONS.md section 7): `ready` with the
//! latest sequence, then one `event` frame per event of the project and one `billing` frame
//! per billing line (SSE id = sequence, which the two share), a
//! `ping` every 25 s, closed after 30 minutes. `Last-Event-ID` resumes after that sequence,
//! replaying at most the last 10 minutes.
//!
//! Each stream wakes on the store's commit notices and reads what follows its cursor from the
//! event log, so frames go out right after the commit and a slow or lagging stream catches up
//! from the log without gaps or duplicates.

use std::time::Duration;

use serde_json::json;
use tokio::sync::{broadcast, mpsc, watch};
use uuid::Uuid;

use appliance_storage::records::Event;
use appliance_storage::{CommitNotice, ReadCtx, ReadOps, StoreError};

use crate::handles::Handles;
use crate::registry::Registry;
use crate::views::{self, ts};
use crate::webhooks::StreamSlot;

// The ping interval (25 s) and the longest life of a stream (30 minutes) are config:
// `webhooks.stream_ping_s`, `webhooks.stream_max_age_s`.
/// How far back a resume replays.
pub const REPLAY_WINDOW_US: i64 = 10 * 60 * 1_000_000;
/// Events read per catch-up step.
const PAGE: usize = 200;

/// One server-sent event frame, independent of the HTTP layer (`api::stream` writes it as
/// `text/event-stream`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The SSE `id` (the event's sequence), for `Last-Event-ID`.
    pub id: Option<String>,
    /// The SSE `event` name: `ready`, `event`, `billing` or `ping`.
    pub event: &'static str,
    /// The JSON payload.
    pub data: String,
}

impl Frame {
    fn new(event: &'static str, data: serde_json::Value) -> Self {
        Frame {
            id: None,
            event,
            data: data.to_string(),
        }
    }
}

/// Where a stream starts.
pub struct Start {
    /// The latest sequence when the stream opened (`ready.cursor`).
    pub latest: u64,
    /// Frames follow this sequence.
    pub after: u64,
    /// The resume point was older than the replay window: events were skipped.
    pub truncated: bool,
}

/// Works out the start of a stream resumed after `last_event_id` (or a fresh one).
pub fn start_point(
    r: &ReadCtx,
    project: Uuid,
    last_event_id: Option<u64>,
    now_us: i64,
) -> Result<Start, StoreError> {
    let latest = r.last_sequence(project)?;
    let Some(n) = last_event_id else {
        return Ok(Start {
            latest,
            after: latest,
            truncated: false,
        });
    };
    let n = n.min(latest);
    // Sequences are dense and `created_at` never decreases along them: binary search for the
    // first event inside the window.
    let cutoff = now_us - REPLAY_WINDOW_US;
    let (mut lo, mut hi) = (n + 1, latest + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match r.event_at(project, mid) {
            Ok(Some(e)) if e.created_at >= cutoff => hi = mid,
            // An undecodable event (reported by `appliance verify`) counts as outside.
            Ok(_) | Err(StoreError::Corrupt(_)) => lo = mid + 1,
            Err(e) => return Err(e),
        }
    }
    Ok(Start {
        latest,
        after: lo - 1,
        truncated: lo > n + 1,
    })
}

fn event_frame(reg: &Registry, e: &Event) -> Frame {
    if e.is_billing_line() {
        // A billing line carries its frame's payload as it is (`services::billing`).
        return Frame {
            id: Some(e.sequence.to_string()),
            ..Frame::new("billing", e.data.clone())
        };
    }
    let data = json!({
        "id": e.id,
        "type": e.event_type,
        "created": ts(e.created_at),
        "livemode": e.livemode,
        "scope": "account",
        "data": views::event_data(reg, e),
    });
    Frame {
        id: Some(e.sequence.to_string()),
        ..Frame::new("event", data)
    }
}

/// Writes the stream's frames into `tx` until the client leaves, the stream ages out or the
/// server stops. `commits` must have been subscribed before `start` was computed.
pub async fn produce(
    state: Handles,
    hooks: std::sync::Arc<crate::webhooks::Webhooks>,
    project: Uuid,
    slot: StreamSlot,
    mut commits: broadcast::Receiver<CommitNotice>,
    start: Start,
    tx: mpsc::Sender<Frame>,
) {
    let _slot = slot;
    let mut shutdown: watch::Receiver<bool> = hooks.shutdown_signal();
    let ready = json!({ "cursor": start.latest, "replay_truncated": start.truncated });
    if tx.send(Frame::new("ready", ready)).await.is_err() {
        return;
    }
    let mut cursor = start.after;
    if catch_up(&state, project, &mut cursor, &tx).await.is_err() {
        return;
    }
    let max_age = Duration::from_secs(state.config.webhooks.stream_max_age_s);
    let ping_every = Duration::from_secs(state.config.webhooks.stream_ping_s);
    let deadline = tokio::time::Instant::now() + max_age;
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
    loop {
        tokio::select! {
            n = commits.recv() => {
                let relevant = match n {
                    Ok(n) => n.events.iter().any(|(p, _)| *p == project),
                    Err(broadcast::error::RecvError::Lagged(_)) => true,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if relevant && catch_up(&state, project, &mut cursor, &tx).await.is_err() {
                    return;
                }
            }
            _ = ping.tick() => {
                let f = Frame::new("ping", json!({ "time": ts(appliance_storage::now_us()) }));
                if tx.send(f).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline) => return,
            _ = shutdown.changed() => return,
            _ = tx.closed() => return,
        }
    }
}

/// Sends every event after `cursor`, oldest first, moving the cursor. `Err` when the client
/// is gone or the store failed (the stream ends; the client resumes).
async fn catch_up(
    state: &Handles,
    project: Uuid,
    cursor: &mut u64,
    tx: &mpsc::Sender<Frame>,
) -> Result<(), ()> {
    loop {
        let after = *cursor;
        let page = state
            .store
            .read(move |r| r.log_after(project, after, PAGE))
            .await
            .map_err(|e| tracing::error!(error = %e, "event stream read failed"))?;
        for e in &page.items {
            tx.send(event_frame(&state.registry, e))
                .await
                .map_err(|_| ())?;
            *cursor = e.sequence;
        }
        if !page.has_more {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use appliance_storage::{Store, StoreOptions, WriteError};

    #[test]
    fn resume_replays_only_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let p = Uuid::now_v7();
        let mut created = Vec::new();
        for i in 0..6 {
            let e = store
                .write_blocking(move |ctx| {
                    ctx.append_event(p, false, "customer.created", &i.to_string(), json!({}))
                })
                .map_err(|e| match e {
                    WriteError::Rejected(e) => e.to_string(),
                    WriteError::Store(e) => e.to_string(),
                })
                .unwrap();
            created.push(e.created_at);
            std::thread::sleep(Duration::from_millis(3));
        }
        let start = |last: Option<u64>, now: i64| {
            store
                .read_blocking(|r| start_point(r, p, last, now))
                .unwrap()
        };
        // Fresh: from the latest.
        let s = start(None, created[5]);
        assert_eq!((s.latest, s.after, s.truncated), (6, 6, false));
        // Inside the window: right after the given id.
        let s = start(Some(2), created[5]);
        assert_eq!((s.after, s.truncated), (2, false));
        // Events 1-3 are older than the window: the replay starts at 4.
        let s = start(Some(1), created[3] + REPLAY_WINDOW_US);
        assert_eq!((s.after, s.truncated), (3, true));
        // Everything is older: nothing is replayed.
        let s = start(Some(0), created[5] + REPLAY_WINDOW_US + 1);
        assert_eq!((s.after, s.truncated), (6, true));
        // An id past the end is clamped.
        let s = start(Some(99), created[5]);
        assert_eq!((s.after, s.truncated), (6, false));
    }
}
