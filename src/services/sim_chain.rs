//! Test mode's simulated chain: one block height per EVM chain, advanced on a timer
//! (`workers::sim_chain`) and by `POST /v1/test/blocks`. Each advance moves open sweeps and
//! in-flight payouts of test projects as far as the new height allows.

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Mode, Payout, Project, Sweep};
use appliance_storage::{ReadOps, Store, WriteCtx, WriteError};

use crate::registry::Registry;
use crate::services::error::Fault;
use crate::services::{deposits, payouts, sweeps, Scope};

/// Most blocks one call may mine.
pub const MAX_BLOCKS: u64 = 10_000;

/// Work items advance in jobs of this many, so one block never holds the writer long.
const CHUNK: usize = 32;

/// New heights per chain, then the sweep and payout ids waiting on blocks.
pub type Raised = (BTreeMap<String, u64>, Vec<Uuid>, Vec<Uuid>);

/// Raises the simulated height of `chain` (or of every EVM chain) by `count` and lists the
/// sweeps and payouts waiting on blocks. Returns (new heights, sweep ids, payout ids).
pub fn raise_heights(
    ctx: &mut WriteCtx<'_>,
    reg: &Registry,
    chain: Option<&str>,
    count: u64,
) -> Result<Raised, Fault> {
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
        ctx.sim_height_put(c, *h)?;
    }
    let all = |tag| {
        ctx.scan_ids(
            &index::prefix(tag, Uuid::nil(), &[]),
            None,
            usize::MAX,
            |_| Ok(true),
        )
    };
    let mut sweeps = all(IndexTag::SweepsWork)?.items;
    let mut payouts = all(IndexTag::PayoutsWork)?.items;
    sweeps.reverse();
    payouts.reverse();
    Ok((heights, sweeps, payouts))
}

/// Advances the given sweeps and payouts of test projects to `heights`; events they emit
/// get webhook deliveries of `attempts` attempts.
pub fn advance_items(
    ctx: &mut WriteCtx<'_>,
    reg: &Arc<Registry>,
    attempts: u32,
    heights: &BTreeMap<String, u64>,
    sweep_ids: &[Uuid],
    payout_ids: &[Uuid],
) -> Result<(), Fault> {
    let mut projects: BTreeMap<Uuid, Option<Scope>> = BTreeMap::new();
    let mut scope_of = |ctx: &WriteCtx<'_>, id: Uuid| -> Result<Option<Scope>, Fault> {
        if let Some(s) = projects.get(&id) {
            return Ok(s.clone());
        }
        let s = ctx
            .get::<Project>(id)?
            .filter(|p| p.mode == Mode::Test)
            .map(|p| Scope {
                reg: reg.clone(),
                project: Arc::new(p),
                delivery_attempts: attempts,
            });
        projects.insert(id, s.clone());
        Ok(s)
    };
    for id in sweep_ids {
        let Some(sw) = ctx.get::<Sweep>(*id)? else {
            continue;
        };
        let Some(h) = heights.get(&sw.chain).copied() else {
            continue;
        };
        if let Some(s) = scope_of(ctx, sw.project_id)? {
            sweeps::advance(ctx, &s, sw, h)?;
        }
    }
    for id in payout_ids {
        let Some(p) = ctx.get::<Payout>(*id)? else {
            continue;
        };
        let Some(h) = heights.get(&p.chain).copied() else {
            continue;
        };
        if let Some(s) = scope_of(ctx, p.project_id)? {
            payouts::advance(ctx, &s, p, h)?;
        }
    }
    Ok(())
}

/// Mines `count` blocks on `chain` (or every EVM chain) and advances the work that depends
/// on them, in writer jobs of at most [`CHUNK`] items (webhook deliveries of their events get
/// `attempts` attempts). Returns once all are committed.
pub async fn mine(
    store: &Store,
    reg: Arc<Registry>,
    attempts: u32,
    chain: Option<String>,
    count: u64,
) -> Result<BTreeMap<String, u64>, WriteError<Fault>> {
    let r2 = reg.clone();
    let (heights, sweep_ids, payout_ids) = store
        .write(move |ctx| raise_heights(ctx, &r2, chain.as_deref(), count))
        .await?;
    let heights = Arc::new(heights);
    let chunks: Vec<(Vec<Uuid>, Vec<Uuid>)> = sweep_ids
        .chunks(CHUNK)
        .map(|c| (c.to_vec(), Vec::new()))
        .chain(payout_ids.chunks(CHUNK).map(|c| (Vec::new(), c.to_vec())))
        .collect();
    // One chunk at a time: requests queued meanwhile share each chunk's commit instead of
    // waiting behind the whole block's work (bounded latency under load).
    for (sw, po) in chunks {
        let (reg, h) = (reg.clone(), heights.clone());
        store
            .write(move |ctx| advance_items(ctx, &reg, attempts, &h, &sw, &po))
            .await?;
    }
    Ok((*heights).clone())
}
