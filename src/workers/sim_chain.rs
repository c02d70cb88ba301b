//! Test mode's simulated chain: one block height per EVM chain, advanced on a timer and by
//! `POST /v1/test/blocks`. Each advance moves open sweeps and in-flight payouts of test
//! projects as far as the new height allows, in the same transaction.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Mode, Payout, Project, Sweep};
use appliance_storage::{ReadOps, WriteCtx};

use crate::error::ApiError;
use crate::registry::Registry;
use crate::services::{deposits, payouts, sweeps, Scope};
use crate::state::AppState;

/// Most blocks one call may mine.
pub const MAX_BLOCKS: u64 = 10_000;

/// Mines `count` blocks on `chain` (or on every EVM chain) and advances the work that
/// depends on them. Returns the new heights.
pub fn mine(
    ctx: &mut WriteCtx<'_>,
    reg: &Arc<Registry>,
    chain: Option<&str>,
    count: u64,
) -> Result<BTreeMap<String, u64>, ApiError> {
    let mut heights = BTreeMap::new();
    for c in reg
        .chains
        .iter()
        .filter(|c| c.is_evm() && chain.is_none_or(|x| x == c.id()))
    {
        let h = deposits::sim_height(ctx, c.id())? + count;
        heights.insert(c.id().to_string(), h);
    }
    for (c, h) in &heights {
        ctx.meta_put(&format!("sim_height:{c}"), &h.to_be_bytes())?;
    }
    let mut projects: BTreeMap<Uuid, Option<Scope>> = BTreeMap::new();
    let mut scope_of = |ctx: &WriteCtx<'_>, id: Uuid| -> Result<Option<Scope>, ApiError> {
        if let Some(s) = projects.get(&id) {
            return Ok(s.clone());
        }
        let s = ctx
            .get::<Project>(id)?
            .filter(|p| p.mode == Mode::Test)
            .map(|p| Scope {
                reg: reg.clone(),
                project: Arc::new(p),
            });
        projects.insert(id, s.clone());
        Ok(s)
    };
    let sweep_ids = ctx.scan_ids(
        &index::prefix(IndexTag::SweepsWork, Uuid::nil(), &[]),
        None,
        usize::MAX,
        |_| Ok(true),
    )?;
    for id in sweep_ids.items.into_iter().rev() {
        let Some(sw) = ctx.get::<Sweep>(id)? else {
            continue;
        };
        let Some(h) = heights.get(&sw.chain).copied() else {
            continue;
        };
        if let Some(s) = scope_of(ctx, sw.project_id)? {
            sweeps::advance(ctx, &s, sw, h)?;
        }
    }
    let payout_ids = ctx.scan_ids(
        &index::prefix(IndexTag::PayoutsWork, Uuid::nil(), &[]),
        None,
        usize::MAX,
        |_| Ok(true),
    )?;
    for id in payout_ids.items.into_iter().rev() {
        let Some(p) = ctx.get::<Payout>(id)? else {
            continue;
        };
        let Some(h) = heights.get(&p.chain).copied() else {
            continue;
        };
        if let Some(s) = scope_of(ctx, p.project_id)? {
            payouts::advance(ctx, &s, p, h)?;
        }
    }
    Ok(heights)
}

/// Mines one block on every EVM chain every `test.block_interval_ms`.
pub async fn run(state: AppState) {
    let interval = Duration::from_millis(state.config.test.block_interval_ms.max(10));
    let reg = crate::api::registry(&state);
    loop {
        tokio::time::sleep(interval).await;
        let reg = reg.clone();
        if let Err(e) = state.store.write(move |ctx| mine(ctx, &reg, None, 1)).await {
            tracing::error!(error = ?e, "simulated block failed");
        }
    }
}
