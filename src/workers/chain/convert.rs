//! Conversion batches on chain (DECISIONS.md section 14): each open batch's next step is a
//! send saga of the master wallet, like payouts and sweeps (`send::send_new`: intent,
//! nonce and signed transaction stored before the broadcast).
//!
//! * `approving`: the router's allowance of the input token is read; when it covers the
//!   batch the batch moves to `swapping` without a transaction, otherwise one approval (of
//!   the largest amount, so later batches of the coin skip the step) is sent. The batch
//!   moves on when it has the chain's confirmations (`reconcile::settle`).
//! * `swapping`: the DEX is quoted afresh, `min_out` taken from the batch's slippage, the
//!   swap's gas estimated (a node that says it would revert counts as an attempt, without
//!   spending a nonce) and the swap sent. At the chain's confirmations the receipt's logs
//!   give the executed output and the batch settles; a revert is retried with a fresh
//!   quote up to `conversions::MAX_ATTEMPTS`, then the batch fails and the coins stay.
//!
//! The rules (state changes, ledger) are `services::conversions`.

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use appliance_chains::client::{CallRequest, ClientError};
use appliance_chains::evm::dex::{Coin, Dex, TxCall};
use appliance_chains::evm::{sender, U256};
use appliance_signer::SigningPolicy;
use appliance_storage::index::IndexTag;
use appliance_storage::records::{
    BatchStatus, Conversion, ConversionBatch, ConversionStatus, Project,
};
use appliance_storage::ReadOps;

use super::send::{policy, send_new, work_ids, OutCall};
use super::store::{pending_txs, OutKind};
use super::{clean, write, ChainWorker, Master};
use crate::handles::Handles;
use crate::services::conversions::{self, coin, ConversionRequest};
use crate::services::types::{Amount, AssetSymbol, ChainId, ConversionId};
use crate::services::Scope;

/// Most batches one pass advances.
const MAX_PER_PASS: usize = 16;

/// A swap's deadline after it is signed (seconds): a swap still unmined then reverts
/// instead of running at a stale price; the batch then quotes afresh.
const SWAP_DEADLINE_S: u64 = 1_800;

/// Whether a transaction of `kind` for batch `id` is still followed (not final).
async fn in_flight(
    state: &Handles,
    c: &ChainWorker,
    kind: OutKind,
    id: Uuid,
) -> anyhow::Result<bool> {
    let key = c.key.clone();
    Ok(state
        .store
        .read(move |r| {
            Ok(pending_txs(r, &key)?
                .iter()
                .any(|t| t.kind == kind && t.ref_id == id && t.settled.is_none()))
        })
        .await?)
}

/// Most queued rows one planning pass reads.
const MAX_QUEUED_PER_PASS: usize = 5_000;

/// Plans this chain's queued automatic rows into batches, per (project, from, to), once they
/// are due (`conversions::batch_due`) and the treasury holds them free (swept). The quote is
/// read from the DEX before the planning transaction; a DEX that cannot quote leaves the
/// rows queued for the next pass.
async fn plan_queued(state: &Handles, c: &ChainWorker) -> anyhow::Result<()> {
    let chain = c.chain;
    let ws = c.scope;
    let ids = work_ids(state, IndexTag::ConversionsQueued).await?;
    if ids.is_empty() {
        return Ok(());
    }
    let groups = state
        .store
        .read(move |r| {
            let mut g: BTreeMap<(Uuid, String, String), Vec<Conversion>> = BTreeMap::new();
            for id in ids.into_iter().take(MAX_QUEUED_PER_PASS) {
                let Some(row) = r.get::<Conversion>(id)? else {
                    continue;
                };
                if row.chain != chain
                    || row.status != ConversionStatus::Queued
                    || !ws.may_admit(row.project_id)
                {
                    continue;
                }
                g.entry((row.project_id, row.from_asset.clone(), row.to_asset.clone()))
                    .or_default()
                    .push(row);
            }
            let mut out = Vec::new();
            for ((p, from, to), rows) in g {
                if let Some(project) = r.get::<Project>(p)?.filter(|x| ws.admits(x)) {
                    out.push((project, from, to, rows));
                }
            }
            Ok(out)
        })
        .await?;
    let cfg = state.config.conversion.clone();
    let attempts = state.config.webhooks.max_attempts();
    for (project, from, to, rows) in groups {
        let Some(asset) = state.registry.asset(chain, &from).cloned() else {
            continue;
        };
        let livemode = project.mode == appliance_storage::records::Mode::Live;
        let total = rows
            .iter()
            .take(conversions::MAX_BATCH_ROWS)
            .fold(0u128, |a, r| a.saturating_add(r.amount_in));
        let oldest = rows.iter().map(|r| r.created_at).min().unwrap_or(0);
        let usd = state
            .market
            .usable_price(&asset.symbol, livemode)
            .await
            .and_then(|rate| crate::market::usd_value(total, asset.decimals, rate));
        if total == 0
            || !conversions::batch_due(
                usd,
                oldest,
                appliance_storage::now_us(),
                cfg.min_batch_usd_cents,
                cfg.max_wait_s,
            )
        {
            continue;
        }
        let scope = Scope {
            reg: state.registry.clone(),
            project: Arc::new(project),
            delivery_attempts: attempts,
        };
        let req = ConversionRequest {
            chain: ChainId::new(chain),
            from_asset: AssetSymbol::new(from),
            to_asset: AssetSymbol::new(to),
            amount: Amount::parse("amount", &total.to_string())?,
            slippage_bps: cfg.slippage_bps,
        };
        let q = match conversions::price(&state.registry, &state.market, &scope, &req).await {
            Ok(q) => q,
            Err(e) => {
                tracing::warn!(chain, error = %e, "queued conversions wait: no quote");
                continue;
            }
        };
        let ids: Vec<ConversionId> = rows.iter().map(ConversionId::of).collect();
        let planned = write(state, move |ctx| {
            conversions::plan_auto(ctx, &scope, &ids, total, &q)
        })
        .await?;
        if let Some(b) = planned {
            tracing::info!(chain, batch = %b.id, rows = b.rows.len(), "planned a conversion batch");
        }
    }
    Ok(())
}

/// Plans due automatic rows, then advances this chain's open batches by one step each.
pub(super) async fn send_conversions(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
) -> anyhow::Result<()> {
    plan_queued(state, c).await?;
    let mut done = 0;
    for id in work_ids(state, IndexTag::ConversionBatchesWork).await? {
        if done >= MAX_PER_PASS {
            break;
        }
        let Some((b, project)) = open_batch(state, c, id).await? else {
            continue;
        };
        done += 1;
        let Some(step) = next_step(state, c, b, project).await? else {
            continue;
        };
        match step.batch.status {
            BatchStatus::Approving => approve(state, c, m, step).await?,
            BatchStatus::Swapping => swap(state, c, m, step).await?,
            BatchStatus::Settled | BatchStatus::Failed => {}
        }
    }
    Ok(())
}

/// Batch `id` with its project, when it is an open batch of this chain that this worker
/// serves.
async fn open_batch(
    state: &Handles,
    c: &ChainWorker,
    id: Uuid,
) -> anyhow::Result<Option<(ConversionBatch, Project)>> {
    let (chain, ws) = (c.chain, c.scope);
    Ok(state
        .store
        .read(move |r| {
            let Some(b) = r.get::<ConversionBatch>(id)? else {
                return Ok(None);
            };
            if b.chain != chain || !ws.may_admit(b.project_id) || !b.status.is_open() {
                return Ok(None);
            }
            let Some(project) = r.get::<Project>(b.project_id)?.filter(|x| ws.admits(x)) else {
                return Ok(None);
            };
            Ok(Some((b, project)))
        })
        .await?)
}

/// An open batch ready for its next transaction: what that step needs.
struct Step {
    batch: ConversionBatch,
    scope: Scope,
    dex: Dex,
    from: Coin,
    to: Coin,
    pol: SigningPolicy,
}

/// The batch's [`Step`], or `None` when it waits or cannot run: a batch whose coins are no
/// longer listed, or whose chain has no DEX any more (or is a test project's), fails; one
/// whose signing is switched off waits until it is switched back on.
async fn next_step(
    state: &Handles,
    c: &ChainWorker,
    batch: ConversionBatch,
    project: Project,
) -> anyhow::Result<Option<Step>> {
    let (reg, id) = (&state.registry, batch.id);
    let pol = policy(state, &project, true);
    let scope = state.scope(project);
    let (Some(from), Some(to)) = (
        reg.asset(c.chain, &batch.from_asset).cloned(),
        reg.asset(c.chain, &batch.to_asset).cloned(),
    ) else {
        write(state, move |ctx| {
            conversions::fail(ctx, &scope, id.into(), "asset_unlisted")
        })
        .await?;
        return Ok(None);
    };
    let (Some(dex), Some(from), Some(to)) = (
        reg.chain(c.chain).and_then(|x| x.dex.clone()),
        coin(&from),
        coin(&to),
    ) else {
        write(state, move |ctx| {
            conversions::fail(ctx, &scope, id.into(), "no_dex_configured")
        })
        .await?;
        return Ok(None);
    };
    if !pol.blocked_by().is_empty() {
        return Ok(None);
    }
    Ok(Some(Step {
        batch,
        scope,
        dex,
        from,
        to,
        pol,
    }))
}

/// `approving`: moves the batch on when the router's allowance covers it (or the input coin
/// needs none); otherwise sends one approval of the largest amount, unless one is followed.
async fn approve(state: &Handles, c: &ChainWorker, m: &Master, step: Step) -> anyhow::Result<()> {
    let Step {
        batch: b,
        scope,
        dex,
        from,
        pol,
        ..
    } = step;
    let (chain, id) = (c.chain, b.id);
    if b.approve_tx_hash.is_some() {
        return Ok(()); // the approval is followed by the reconciler
    }
    let Some(token) = dex.approval_token(from) else {
        write(state, move |ctx| {
            conversions::approved(ctx, &scope, id.into())
        })
        .await?;
        return Ok(());
    };
    if in_flight(state, c, OutKind::Approve, id).await? {
        return Ok(());
    }
    let allowance = dex.allowance(c.client.as_ref(), token, m.treasury).await?;
    if allowance >= U256::from(b.amount_in) {
        write(state, move |ctx| {
            conversions::approved(ctx, &scope, id.into())
        })
        .await?;
        return Ok(());
    }
    let call = dex.approve_call(token, U256::MAX);
    let gas = match estimate(c, m, &call).await? {
        Ok(gas) => gas,
        Err(e) => {
            tracing::warn!(chain, batch = %id, error = %clean(&e), "approval would revert");
            write(state, move |ctx| {
                conversions::approve_lost(ctx, &scope, id.into(), true)
            })
            .await?;
            return Ok(());
        }
    };
    let out = out_call(OutKind::Approve, &b, call, gas);
    let r = send_new(state, c, m, pol, out, move |ctx, hash| {
        conversions::approve_recorded(ctx, &scope, id.into(), hash)
    })
    .await?;
    if let Err(e) = r {
        tracing::warn!(chain, batch = %id, error = %clean(&e), "approval not signed");
    }
    Ok(())
}

/// `swapping`: quotes the DEX afresh, takes `min_out` from the batch's slippage and sends
/// the swap, unless one is followed. A DEX that cannot quote now (node down, pool gone)
/// leaves the batch for the next pass; a swap the node says would revert counts as an
/// attempt without spending a nonce.
async fn swap(state: &Handles, c: &ChainWorker, m: &Master, step: Step) -> anyhow::Result<()> {
    let Step {
        batch: b,
        scope,
        dex,
        from,
        to,
        pol,
    } = step;
    let (chain, id) = (c.chain, b.id);
    if b.swap_tx_hash.is_some() || in_flight(state, c, OutKind::Swap, id).await? {
        return Ok(());
    }
    let amount_in = U256::from(b.amount_in);
    let quoted = match dex.quote(c.client.as_ref(), from, to, amount_in).await {
        Ok(q) => q,
        Err(e) => {
            tracing::warn!(chain, batch = %id, error = %e, "no fresh quote for a batch");
            return Ok(());
        }
    };
    let expected = u128::try_from(quoted).unwrap_or(u128::MAX);
    let min = conversions::min_out(expected, b.slippage_bps);
    let deadline = appliance_storage::now_us() as u64 / 1_000_000 + SWAP_DEADLINE_S;
    let call = dex.swap_call(from, to, amount_in, U256::from(min), m.treasury, deadline);
    let gas = match estimate(c, m, &call).await? {
        Ok(gas) => gas,
        Err(e) => {
            tracing::warn!(chain, batch = %id, error = %clean(&e), "swap would revert; counted as an attempt");
            write(state, move |ctx| {
                conversions::swap_refused(ctx, &scope, id.into(), "slippage")
            })
            .await?;
            return Ok(());
        }
    };
    let out = out_call(OutKind::Swap, &b, call, gas);
    let r = send_new(state, c, m, pol, out, move |ctx, hash| {
        conversions::swap_recorded(ctx, &scope, id.into(), hash, expected, min)
    })
    .await?;
    if let Err(e) = r {
        tracing::warn!(chain, batch = %id, error = %clean(&e), "swap not signed");
    }
    Ok(())
}

/// The gas limit (with margin) of the master wallet's `call`, or the node's refusal (the
/// call would revert); any other failure of the node is an error.
async fn estimate(
    c: &ChainWorker,
    m: &Master,
    call: &TxCall,
) -> anyhow::Result<Result<u64, ClientError>> {
    let req = CallRequest {
        from: m.treasury,
        to: call.to,
        value: call.value,
        data: call.data.clone(),
    };
    match c.client.estimate_gas(&req).await {
        Ok(g) => Ok(Ok(sender::gas_limit_with_margin(g))),
        Err(e) if e.is_refusal() => Ok(Err(e)),
        Err(e) => Err(e.into()),
    }
}

/// The transaction of step `kind` of batch `b`.
fn out_call(kind: OutKind, b: &ConversionBatch, call: TxCall, gas_limit: u64) -> OutCall {
    OutCall {
        kind,
        ref_id: b.id,
        project_id: b.project_id,
        to: call.to,
        value: call.value,
        data: call.data,
        gas_limit,
    }
}

/// The executed output of a mined successful swap of batch `id`, from its receipt's logs
/// (`None` when the batch or the logs cannot tell: the settlement waits).
pub(super) async fn swap_output(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    id: Uuid,
    hash: &str,
) -> anyhow::Result<Option<u128>> {
    let b = state
        .store
        .read(move |r| r.get::<ConversionBatch>(id))
        .await?;
    let Some(b) = b else { return Ok(None) };
    let reg = &state.registry;
    let (Some(dex), Some(to)) = (
        reg.chain(c.chain).and_then(|x| x.dex.clone()),
        reg.asset(c.chain, &b.to_asset).and_then(coin),
    ) else {
        return Ok(None);
    };
    let h: appliance_chains::evm::B256 = hash
        .parse()
        .map_err(|_| anyhow::anyhow!("bad hash {hash}"))?;
    let Some(logs) = c.client.receipt_logs(h).await? else {
        return Ok(None);
    };
    Ok(dex
        .executed_out(to, m.treasury, &logs)
        .map(|v| u128::try_from(v).unwrap_or(u128::MAX)))
}
