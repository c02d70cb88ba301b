//! The monthly minimum (DECISIONS.md section 13): at the start of each UTC month, on each
//! project's own clock (a test project's follows `POST /v1/test/clock`), charge the shortfall
//! of the month before. `services::billing::settle_minimums` charges each month once, whatever
//! the number of passes, restarts or other billing writes that settle it first.
//!
//! It also credits confirmed funding transfers that found no usable spot price at their
//! confirmation (`services::billing::funding_confirmed`), once the market has one.

use std::time::Duration;

use appliance_storage::records::{BillingAccount, Project};
use appliance_storage::{ReadOps, ScanOps};

use crate::handles::Handles;
use crate::services::billing;

/// How often the worker looks for months to settle.
pub const PASS_INTERVAL: Duration = Duration::from_secs(2);

/// Funding transfers awaiting a price looked at per pass.
const AWAITING_PER_PASS: usize = 100;

/// Runs forever: one pass at start, then every [`PASS_INTERVAL`].
pub async fn run(state: Handles) {
    loop {
        if let Err(e) = pass(&state).await {
            tracing::warn!(error = %e, "monthly minimum pass failed; retried on the next pass");
        }
        if let Err(e) = credit_awaiting(&state).await {
            tracing::warn!(error = %e, "funding credits awaiting a price failed; retried on the next pass");
        }
        tokio::time::sleep(PASS_INTERVAL).await;
    }
}

/// Settles every project with an unsettled month behind its clock. Returns the number of
/// entries written.
pub async fn pass(state: &Handles) -> anyhow::Result<usize> {
    let accounts = state.store.read(|r| r.all::<BillingAccount>()).await?;
    let mut written = 0;
    for a in accounts {
        let Some(settled) = a.minimum_settled_month else {
            continue;
        };
        let project = a.project_id;
        let Some(p) = state.store.read(move |r| r.get::<Project>(project)).await? else {
            continue;
        };
        let s = state.scope(p);
        let n = state
            .store
            .write(move |ctx| {
                let now = billing::clock(ctx, &s.project);
                if billing::month_of(now) <= settled + 1 {
                    return Ok(0);
                }
                billing::settle_minimums(ctx, &s, now).map(|v| v.len())
            })
            .await
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        written += n;
    }
    Ok(written)
}

/// Credits the confirmed funding transfers that await a usable spot price, for those whose
/// price the market has now (read outside the store transaction, fetched when the cache
/// holds none). Returns the number credited.
pub async fn credit_awaiting(state: &Handles) -> anyhow::Result<usize> {
    let ids = state
        .store
        .read(|r| {
            billing::awaiting_price(r, AWAITING_PER_PASS).map_err(|e| match e {
                crate::services::error::Fault::Store(e) => e,
                other => appliance_storage::StoreError::Corrupt(other.to_string()),
            })
        })
        .await?;
    let mut credited = 0;
    for id in ids {
        let row = state
            .store
            .read(move |r| {
                let Some(d) = r.get::<appliance_storage::records::Deposit>(id.uuid())? else {
                    return Ok(None);
                };
                let p = r.get::<Project>(d.project_id)?;
                Ok(p.map(|p| (d, p)))
            })
            .await?;
        let Some((d, p)) = row else {
            continue;
        };
        let livemode = p.mode == appliance_storage::records::Mode::Live;
        let Some((rate, source)) = state.market.usable_quote(&d.asset, livemode).await else {
            continue;
        };
        let s = state.scope(p);
        let done = state
            .store
            .write(move |ctx| billing::credit_awaiting_price(ctx, &s, id, rate, source))
            .await
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        if done {
            credited += 1;
        }
    }
    Ok(credited)
}
