//! Invoice expiry (DECISIONS.md section 12): every second, expires the open and underpaid
//! invoices whose `expires_at` has passed on their project's clock.
//!
//! The schedule is durable: the `InvoicesDue` index (`project ‖ expires_at ‖ id`, kept by
//! `Invoice::index_keys` for exactly the expirable statuses), so a restart loses nothing
//! and a pass reads only what is due. Each project is one forward range scan up to its
//! clock's now (test projects may run ahead, `POST /v1/test/clock`); projects are found by
//! seeking from one project's prefix to the next, never by reading every entry. Expiry is
//! written in batches of [`BATCH`] invoices, so 100,000 invoices expiring at once never
//! hold the store writer for long.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::Project;
use appliance_storage::ReadOps;

use crate::services::{invoices, Scope};
use crate::state::AppState;

/// Invoices expired per store transaction.
pub const BATCH: usize = 500;
/// Time between passes (the most an expiry is late, plus a pass's own time).
const EVERY: Duration = Duration::from_secs(1);

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

/// Expires what is due in `project` (batches until none is left). Returns how many.
pub async fn expire_project(state: &AppState, project: Uuid) -> anyhow::Result<usize> {
    let mut total = 0;
    loop {
        let reg = state.registry.clone();
        let attempts = state.config.webhooks.max_attempts();
        let n = crate::workers::chain::write(state, move |ctx| {
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
        .await?;
        total += n;
        if n < BATCH {
            return Ok(total);
        }
    }
}

/// One pass over every project with expirable invoices.
pub async fn pass(state: &AppState) -> anyhow::Result<()> {
    let projects = state.store.read(projects_with_due).await?;
    for p in projects {
        expire_project(state, p).await?;
    }
    Ok(())
}

/// The worker: a pass every second.
pub async fn run(state: AppState) {
    loop {
        if let Err(e) = pass(&state).await {
            tracing::warn!(error = %e, "invoice expiry pass failed");
        }
        tokio::time::sleep(EVERY).await;
    }
}
