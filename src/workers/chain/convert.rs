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

use appliance_chains::client::CallRequest;
use appliance_chains::evm::{sender, U256};
use appliance_storage::index::IndexTag;
use appliance_storage::records::{
    BatchStatus, Conversion, ConversionBatch, ConversionStatus, Project,
};
use appliance_storage::ReadOps;

use super::send::{policy, send_new, work_ids};
use super::store::{pending_txs, OutKind};
use super::{clean, write, ChainWorker, Master};
use crate::handles::Handles;
use crate::services::conversions::{self, coin, ConversionRequest};
use crate::services::types::{Amount, AssetSymbol, ChainId};
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
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
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
    let chain = c.chain;
    let ws = c.scope;
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let mut done = 0;
    for id in work_ids(state, IndexTag::ConversionBatchesWork).await? {
        if done >= MAX_PER_PASS {
            break;
        }
        let item = state
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
            .await?;
        let Some((b, project)) = item else {
            continue;
        };
        done += 1;
        let scope = Scope {
            reg: reg.clone(),
            project: Arc::new(project.clone()),
            delivery_attempts: attempts,
        };
        let (Some(from), Some(to)) = (
            reg.asset(chain, &b.from_asset).cloned(),
            reg.asset(chain, &b.to_asset).cloned(),
        ) else {
            let s2 = scope.clone();
            write(state, move |ctx| {
                conversions::fail(ctx, &s2, id, "asset_unlisted")
            })
            .await?;
            continue;
        };
        let (Some(dex), Some(fc), Some(tc)) = (
            reg.chain(chain).and_then(|x| x.dex.clone()),
            coin(&from),
            coin(&to),
        ) else {
            // No DEX configured any more (or a test project's chain): nothing can run it.
            let s2 = scope.clone();
            write(state, move |ctx| {
                conversions::fail(ctx, &s2, id, "no_dex_configured")
            })
            .await?;
            continue;
        };
        let pol = policy(state, &project, true);
        if !pol.blocked_by().is_empty() {
            continue; // waits until signing is switched back on
        }
        match b.status {
            BatchStatus::Approving => {
                if b.approve_tx_hash.is_some() {
                    continue; // the approval is followed by the reconciler
                }
                let Some(token) = dex.approval_token(fc) else {
                    let s2 = scope.clone();
                    write(state, move |ctx| conversions::approved(ctx, &s2, id)).await?;
                    continue;
                };
                if in_flight(state, c, OutKind::Approve, id).await? {
                    continue;
                }
                let allowance = dex.allowance(c.client.as_ref(), token, m.treasury).await?;
                if allowance >= U256::from(b.amount_in) {
                    let s2 = scope.clone();
                    write(state, move |ctx| conversions::approved(ctx, &s2, id)).await?;
                    continue;
                }
                let call = dex.approve_call(token, U256::MAX);
                let gas = match c
                    .client
                    .estimate_gas(&CallRequest {
                        from: m.treasury,
                        to: call.to,
                        value: call.value,
                        data: call.data.clone(),
                    })
                    .await
                {
                    Ok(g) => sender::gas_limit_with_margin(g),
                    Err(e) if e.is_refusal() => {
                        tracing::warn!(chain, batch = %id, error = %clean(&e), "approval would revert");
                        let s2 = scope.clone();
                        write(state, move |ctx| {
                            conversions::approve_lost(ctx, &s2, id, true)
                        })
                        .await?;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let s2 = scope.clone();
                let r = send_new(
                    state,
                    c,
                    m,
                    pol,
                    OutKind::Approve,
                    id,
                    b.project_id,
                    call.to,
                    call.value,
                    call.data,
                    gas,
                    move |ctx, hash| conversions::approve_recorded(ctx, &s2, id, hash),
                )
                .await?;
                if let Err(e) = r {
                    tracing::warn!(chain, batch = %id, error = %clean(&e), "approval not signed");
                }
            }
            BatchStatus::Swapping => {
                if b.swap_tx_hash.is_some() || in_flight(state, c, OutKind::Swap, id).await? {
                    continue;
                }
                let quoted = match dex
                    .quote(c.client.as_ref(), fc, tc, U256::from(b.amount_in))
                    .await
                {
                    Ok(q) => q,
                    Err(e) => {
                        // The DEX cannot quote now (node down, pool gone): try next pass.
                        tracing::warn!(chain, batch = %id, error = %e, "no fresh quote for a batch");
                        continue;
                    }
                };
                let expected = u128::try_from(quoted).unwrap_or(u128::MAX);
                let min = conversions::min_out(expected, b.slippage_bps);
                let deadline = appliance_storage::now_us() as u64 / 1_000_000 + SWAP_DEADLINE_S;
                let call = dex.swap_call(
                    fc,
                    tc,
                    U256::from(b.amount_in),
                    U256::from(min),
                    m.treasury,
                    deadline,
                );
                let gas = match c
                    .client
                    .estimate_gas(&CallRequest {
                        from: m.treasury,
                        to: call.to,
                        value: call.value,
                        data: call.data.clone(),
                    })
                    .await
                {
                    Ok(g) => sender::gas_limit_with_margin(g),
                    Err(e) if e.is_refusal() => {
                        tracing::warn!(chain, batch = %id, error = %clean(&e), "swap would revert; counted as an attempt");
                        let s2 = scope.clone();
                        write(state, move |ctx| {
                            conversions::swap_refused(ctx, &s2, id, "slippage")
                        })
                        .await?;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let s2 = scope.clone();
                let r = send_new(
                    state,
                    c,
                    m,
                    pol,
                    OutKind::Swap,
                    id,
                    b.project_id,
                    call.to,
                    call.value,
                    call.data,
                    gas,
                    move |ctx, hash| conversions::swap_recorded(ctx, &s2, id, hash, expected, min),
                )
                .await?;
                if let Err(e) = r {
                    tracing::warn!(chain, batch = %id, error = %clean(&e), "swap not signed");
                }
            }
            BatchStatus::Settled | BatchStatus::Failed => {}
        }
    }
    Ok(())
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
