//! The sweeps side of a sender pass: the forwarder factory, the holds that keep a sweep
//! back, and signing the open sweeps in one batch.

use super::*;

/// Deploys the factory through the deterministic deployment proxy when the chain lacks it
/// (the chain side is `appliance_chains::evm::factory`). `Ok(true)` once its code is on
/// chain.
async fn ensure_factory(state: &Handles, c: &ChainWorker, m: &Master) -> anyhow::Result<bool> {
    if !c.client.code(m.factory).await?.is_empty() {
        return Ok(true);
    }
    let key = c.key.clone();
    let pending = state
        .store
        .read(move |r| {
            Ok(pending_txs(r, &key)?
                .iter()
                .any(|t| t.kind == OutKind::Factory))
        })
        .await?;
    if pending {
        return Ok(false);
    }
    let to = Address::from(appliance_chains::address::DEPLOYMENT_PROXY);
    let data = sweeper::factory_deploy_calldata(&m.treasury);
    let gas = c
        .client
        .estimate_gas(&CallRequest {
            from: m.treasury,
            to,
            value: U256::ZERO,
            data: data.clone(),
        })
        .await?;
    let pol = SigningPolicy {
        service: state.config.signing.enabled,
        project: true,
        key: true,
    };
    let r = send_new(
        state,
        c,
        m,
        pol,
        OutKind::Factory,
        Uuid::nil(),
        Uuid::nil(),
        to,
        U256::ZERO,
        data,
        sender::gas_limit_with_margin(gas),
        |_, _| Ok(true),
    )
    .await?;
    if let Err(e) = r {
        tracing::warn!(chain = c.chain, error = %clean(&e), "cannot deploy the forwarder factory");
    }
    Ok(false)
}

/// Why sweeps wait this pass (no sweep of money that is not final).
enum SweepHolds {
    /// The watcher has not processed the chain's head, or its last block is no longer
    /// canonical (a reorg it has not unwound yet): the ledger's holdings may be stale.
    NotInStep,
    /// Wallets with an unconfirmed inbound transfer: their forwarder would flush it along.
    Wallets(std::collections::HashSet<Uuid>),
}

async fn sweep_holds(state: &Handles, c: &ChainWorker) -> anyhow::Result<SweepHolds> {
    let key = c.key.clone();
    let chain = c.chain;
    let (ws, wallets) = state
        .store
        .read(move |r| Ok((load_watch(r, &key)?, sweeps::wallets_receiving(r, chain)?)))
        .await?;
    let head = c.client.head().await?;
    let Some(h) = ws.cursor.height.filter(|h| *h >= head) else {
        return Ok(SweepHolds::NotInStep);
    };
    let canonical = c.client.block(h).await?.map(|b| b.hash);
    if canonical.is_none() || canonical != ws.cursor.hash_at(h) {
        return Ok(SweepHolds::NotInStep);
    }
    Ok(SweepHolds::Wallets(wallets))
}

/// Signs the open sweeps of this chain, oldest first, up to [`MAX_NEW_PER_PASS`], and
/// records and broadcasts them together ([`SendBatch`]).
pub(super) async fn send_sweeps(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    waiting: &mut WaitingSweeps,
) -> anyhow::Result<()> {
    let mut batch = None;
    let r = sign_sweeps(state, c, m, &mut batch, waiting).await;
    if let Some(b) = batch {
        b.flush(state, c, m).await?;
    }
    r
}

async fn sign_sweeps(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    batch: &mut Option<SendBatch>,
    waiting: &mut WaitingSweeps,
) -> anyhow::Result<()> {
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let chain = c.chain;
    let ws = c.scope;
    let threshold = c.sweep_threshold_usd_cents;
    let mut factory_ready: Option<bool> = None;
    let mut held: Option<SweepHolds> = None;
    let mut done = 0;
    // Before the store is read: a sweep written after this is in the next pass's queue.
    if waiting.begin_pass(
        &state.sweep_changes,
        state.market.generation(),
        std::time::Instant::now(),
    ) {
        waiting.looked_at(work_ids(state, IndexTag::SweepsWork).await?);
    }
    // An id comes back as `Err` when it is not this pass's to sign until its row is written
    // again: another sender's, no longer open, or gone (`WaitingSweeps::passes_over`).
    let pick = move |r: &appliance_storage::ReadCtx, id| {
        let Some(sw) = r.get::<Sweep>(id)? else {
            return Ok(Some(Err(id)));
        };
        if sw.chain != chain || !ws.may_admit(sw.project_id) || sw.status != SweepStatus::Open {
            return Ok(Some(Err(id)));
        }
        let Some(project) = r.get::<Project>(sw.project_id)?.filter(|x| ws.admits(x)) else {
            // A test project's sweep on a live worker (a project's mode is fixed).
            return Ok(Some(Err(id)));
        };
        let Some(w) = r.get::<Wallet>(sw.wallet_id)? else {
            return Ok(Some(Err(id)));
        };
        let amount = sweeps::amount_now(r, &sw).unwrap_or(0);
        let requested = r.sweep_requested(sw.id)?;
        Ok(Some(Ok((sw, project, w, amount, requested))))
    };
    let mut items = WorkItems::new(Vec::new());
    let mut read_to: Option<Uuid> = None; // the last id of the queue's chunks read
    while done < MAX_NEW_PER_PASS {
        let item = loop {
            if let Some(found) = items.next(state, pick).await? {
                break Some(found);
            }
            let chunk = waiting.next_ids(read_to, WORK_CHUNK);
            let Some(&last) = chunk.last() else {
                break None;
            };
            read_to = Some(last);
            items = WorkItems::new(chunk);
        };
        let (sw, project, w, amount, requested) = match item {
            None => break,
            Some(Err(other)) => {
                waiting.passes_over(other);
                continue;
            }
            Some(Ok(found)) => found,
        };
        let id = sw.id;
        let Some(asset) = reg.asset(chain, &sw.asset).cloned() else {
            continue;
        };
        // Below the chain's threshold, or a coin without a usable price, waits (a request
        // sweeps anyway); docs/decisions.md, Market prices.
        if !requested
            && amount > 0
            && state
                .market
                .sweep_waits(
                    &asset.symbol,
                    asset.decimals,
                    amount,
                    threshold,
                    project.mode == appliance_storage::records::Mode::Live,
                )
                .await
        {
            tracing::debug!(chain, sweep = %id, asset = %asset.symbol, "sweep waits: below the threshold or no usable price");
            waiting.waits(id);
            continue;
        }
        done += 1;
        let scope = Scope {
            reg: reg.clone(),
            project: Arc::new(project.clone()),
            delivery_attempts: attempts,
        };
        if amount == 0 {
            let s2 = scope.clone();
            write(state, move |ctx| {
                sweeps::skip_if_empty(ctx, &s2, id).map(|_| ())
            })
            .await?;
            continue;
        }
        if held.is_none() {
            held = Some(sweep_holds(state, c).await?);
        }
        match &held {
            Some(SweepHolds::NotInStep) => return Ok(()),
            Some(SweepHolds::Wallets(ws)) if ws.contains(&sw.wallet_id) => {
                tracing::debug!(chain, sweep = %id, "sweep held: the address has an unconfirmed inbound transfer");
                continue;
            }
            _ => {}
        }
        if factory_ready.is_none() {
            factory_ready = Some(ensure_factory(state, c, m).await?);
        }
        if factory_ready != Some(true) {
            return Ok(());
        }
        let pol = policy(state, &project, true);
        if !pol.blocked_by().is_empty() {
            continue; // stays open until signing is switched back on
        }
        let token = if asset.is_native {
            Address::ZERO
        } else {
            asset
                .contract
                .parse()
                .map_err(|_| anyhow!("bad contract"))?
        };
        let salt = crate::services::wallets::forwarder_salt(&w);
        let data = sweeper::sweep_calldata(salt, &[token]);
        let call = CallRequest {
            from: m.treasury,
            to: m.factory,
            value: U256::ZERO,
            data: data.clone(),
        };
        let gas = match c.client.estimate_gas(&call).await {
            Ok(g) => sender::gas_limit_with_margin(g),
            Err(e) if is_refusal(&e) => {
                tracing::warn!(chain, sweep = %id, error = %clean(&e), "sweep would revert; left open");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let head = c.client.head().await?;
        let s2 = scope.clone();
        if batch.is_none() {
            *batch = Some(SendBatch::begin(state, c, m).await?);
        }
        let b = batch.as_mut().expect("begun above");
        let r = b
            .sign(
                c,
                m,
                pol,
                OutKind::Sweep,
                id,
                sw.project_id,
                m.factory,
                U256::ZERO,
                data,
                gas,
                Box::new(move |ctx, hash| {
                    Ok(sweeps::submit_sent(ctx, &s2, id, hash, head)?
                        .is_some_and(|s| s.status == SweepStatus::Submitted))
                }),
            )
            .await?;
        if let Err(e) = r {
            tracing::warn!(chain, sweep = %id, error = %clean(&e), "sweep not signed");
        }
    }
    Ok(())
}
