//! Invoice expiry (DECISIONS.md section 12): every second, expires the open and underpaid
//! invoices whose `expires_at` has passed on their project's clock.
//!
//! The schedule is durable: the `InvoicesDue` index (`project ‖ expires_at ‖ id`, kept by
//! `Invoice::index_keys` for exactly the expirable statuses), so a restart loses nothing
//! and a pass reads only what is due. Each project is one forward range scan up to its
//! clock's now (test projects may run ahead, `POST /v1/test/clock`); projects are found by
//! seeking from one project's prefix to the next, never by reading every entry.
//!
//! A backlog (100,000 invoices due at once) must not stall requests: every store write
//! goes through one writer, and a request whose commit shares a batch with an expiry
//! transaction waits for all of it. So expiry is written in transactions of at most
//! [`BATCH`] invoices (a few milliseconds of the writer each), and after each the worker
//! pauses as long as that transaction took: while a backlog lasts it holds the writer at
//! most about half of the time and request commits go through in between. Projects take
//! turns, one transaction each, so one project's backlog does not hold back another's
//! expiry. Measured with `loadgen --phases expiry` (docs/performance.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::Project;
use appliance_storage::ReadOps;

use crate::handles::Handles;
use crate::services::{invoices, Scope};

/// Invoices expired per store transaction: at about half a millisecond of the writer each
/// (release build, docs/performance.md), a transaction stays near 15 ms.
pub const BATCH: usize = 32;
/// Time between passes (the most an expiry is late when there is no backlog, plus a pass's
/// own time).
const EVERY: Duration = Duration::from_secs(1);
/// The shortest pause between two expiry transactions of a backlog.
const MIN_PAUSE: Duration = Duration::from_millis(1);

/// The projects that have at least one expirable invoice.
fn projects_with_due(r: &impl ReadOps) -> Result<Vec<Uuid>, appliance_storage::StoreError> {
    let mut out = Vec::new();
    let mut from = vec![IndexTag::InvoicesDue as u8];
    let to = vec![IndexTag::InvoicesDue as u8 + 1];
    loop {
        let Some(k) = r.index_range(&from, &to, 1, false)?.pop() else {
            return Ok(out);
        };
        let Some(p) = k.get(1..17).and_then(|b| Uuid::from_slice(b).ok()) else {
            return Ok(out);
        };
        out.push(p);
        from = index::prefix_end(&index::prefix(IndexTag::InvoicesDue, p, &[]));
    }
}

/// Expires up to [`BATCH`] due invoices of `project` in one transaction. Returns how many
/// were due (fewer than [`BATCH`]: nothing more is due now).
pub async fn expire_batch(state: &Handles, project: Uuid) -> anyhow::Result<usize> {
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    crate::workers::chain::write(state, move |ctx| {
        let Some(p) = ctx.get::<Project>(project)? else {
            return Ok(0);
        };
        let s = Scope {
            reg,
            project: Arc::new(p),
            delivery_attempts: attempts,
        };
        invoices::expire_due(ctx, &s, BATCH)
    })
    .await
}

/// One pass: the projects with expirable invoices take turns, one transaction of at most
/// [`BATCH`] each, until none has more due; after each transaction the worker pauses as
/// long as it took (at least [`MIN_PAUSE`]), so request commits interleave with a backlog.
/// Returns how many were due in all.
pub async fn pass(state: &Handles) -> anyhow::Result<usize> {
    let mut projects = state.store.read(projects_with_due).await?;
    let mut total = 0;
    while !projects.is_empty() {
        let mut more = Vec::new();
        for p in projects {
            let started = Instant::now();
            let n = expire_batch(state, p).await?;
            total += n;
            if n == 0 {
                continue;
            }
            if n >= BATCH {
                more.push(p);
            }
            tokio::time::sleep(started.elapsed().max(MIN_PAUSE)).await;
        }
        projects = more;
    }
    Ok(total)
}

/// The worker: a pass every second.
pub async fn run(state: Handles) {
    loop {
        if let Err(e) = pass(&state).await {
            tracing::warn!(error = %e, "invoice expiry pass failed");
        }
        tokio::time::sleep(EVERY).await;
    }
}
