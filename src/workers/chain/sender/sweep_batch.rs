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
        OutCall {
            kind: OutKind::Factory,
            ref_id: Uuid::nil(),
            project_id: Uuid::nil(),
            to,
            value: U256::ZERO,
            data,
            gas_limit: sender::gas_limit_with_margin(gas),
        },
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

/// A sweep [`pick_sweep`] found to look at: the row, its project and wallet, the amount its
/// address holds now, and whether a sweep was requested.
type Picked = (Sweep, Project, Wallet, u128, bool);

/// Signs this pass's sweeps into `batch`, at most [`MAX_NEW_PER_PASS`], in queue order.
async fn sign_sweeps(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    batch: &mut Option<SendBatch>,
    waiting: &mut WaitingSweeps,
) -> anyhow::Result<()> {
    // Before the store is read: a sweep written after this is in the next pass's queue.
    if waiting.begin_pass(
        &state.sweep_changes,
        state.market.generation(),
        std::time::Instant::now(),
    ) {
        waiting.looked_at(work_ids(state, IndexTag::SweepsWork).await?);
    }
    let mut queue = SweepQueue {
        items: WorkItems::new(Vec::new()),
        read_to: None,
    };
    let mut pass = SweepPass {
        state,
        c,
        m,
        factory_ready: None,
        held: None,
    };
    let mut done = 0;
    while done < MAX_NEW_PER_PASS {
        let picked = match queue.next(state, c, waiting).await? {
            None => break,
            Some(Err(other)) => {
                waiting.passes_over(other);
                continue;
            }
            Some(Ok(picked)) => picked,
        };
        let Some(asset) = state.registry.asset(c.chain, &picked.0.asset).cloned() else {
            continue;
        };
        if waits_for_price(state, c, &picked, &asset).await {
            waiting.waits(picked.0.id);
            continue;
        }
        done += 1;
        if !pass.sign(batch, picked, &asset).await? {
            return Ok(());
        }
    }
    Ok(())
}

/// The sweeps of one pass, read in chunks of [`WORK_CHUNK`] ids from the waiting list.
struct SweepQueue {
    items: WorkItems<Result<Picked, Uuid>>,
    /// The last id of the chunks read.
    read_to: Option<Uuid>,
}

impl SweepQueue {
    /// The next sweep to look at, `None` at the queue's end. An id comes back as `Err` when
    /// it is not this pass's to sign until its row is written again: another sender's, no
    /// longer open, or gone (`WaitingSweeps::passes_over`).
    async fn next(
        &mut self,
        state: &Handles,
        c: &ChainWorker,
        waiting: &WaitingSweeps,
    ) -> anyhow::Result<Option<Result<Picked, Uuid>>> {
        let (chain, ws) = (c.chain, c.scope);
        let pick = move |r: &appliance_storage::ReadCtx, id| pick_sweep(r, id, chain, ws);
        loop {
            if let Some(found) = self.items.next(state, pick).await? {
                return Ok(Some(found));
            }
            let chunk = waiting.next_ids(self.read_to, WORK_CHUNK);
            let Some(&last) = chunk.last() else {
                return Ok(None);
            };
            self.read_to = Some(last);
            self.items = WorkItems::new(chunk);
        }
    }
}

/// Sweep `id` as [`SweepQueue::next`] gives it.
fn pick_sweep(
    r: &appliance_storage::ReadCtx,
    id: Uuid,
    chain: &str,
    ws: WorkScope,
) -> Result<Option<Result<Picked, Uuid>>, StoreError> {
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
}

/// Whether an unrequested sweep waits: below the chain's threshold, or of a coin without a
/// usable price (a request sweeps anyway); docs/decisions.md, Market prices.
async fn waits_for_price(state: &Handles, c: &ChainWorker, picked: &Picked, asset: &Asset) -> bool {
    let (sw, project, _, amount, requested) = picked;
    let waits = !requested
        && *amount > 0
        && state
            .market
            .sweep_waits(
                &asset.symbol,
                asset.decimals,
                *amount,
                c.sweep_threshold_usd_cents,
                project.mode == appliance_storage::records::Mode::Live,
            )
            .await;
    if waits {
        tracing::debug!(chain = c.chain, sweep = %sw.id, asset = %asset.symbol, "sweep waits: below the threshold or no usable price");
    }
    waits
}

/// What one pass learns once, when its first sweep needs it: the holds of the chain, and
/// whether the forwarder factory is on chain.
struct SweepPass<'a> {
    state: &'a Handles,
    c: &'a ChainWorker,
    m: &'a Master,
    factory_ready: Option<bool>,
    held: Option<SweepHolds>,
}

impl SweepPass<'_> {
    /// Signs one sweep into `batch`: an empty address skips the sweep, a held wallet or
    /// signing switched off leaves it open, a sweep the node says would revert stays open.
    /// `Ok(false)` ends the pass (the chain is not in step, or the factory is not there).
    async fn sign(
        &mut self,
        batch: &mut Option<SendBatch>,
        (sw, project, w, amount, _): Picked,
        asset: &Asset,
    ) -> anyhow::Result<bool> {
        let (state, c, m) = (self.state, self.c, self.m);
        let (chain, id) = (c.chain, sw.id);
        let pol = policy(state, &project, true);
        let scope = state.scope(project);
        if amount == 0 {
            write(state, move |ctx| {
                sweeps::skip_if_empty(ctx, &scope, id.into()).map(|_| ())
            })
            .await?;
            return Ok(true);
        }
        if self.held.is_none() {
            self.held = Some(sweep_holds(state, c).await?);
        }
        match &self.held {
            Some(SweepHolds::NotInStep) => return Ok(false),
            Some(SweepHolds::Wallets(ws)) if ws.contains(&sw.wallet_id) => {
                tracing::debug!(chain, sweep = %id, "sweep held: the address has an unconfirmed inbound transfer");
                return Ok(true);
            }
            _ => {}
        }
        if self.factory_ready.is_none() {
            self.factory_ready = Some(ensure_factory(state, c, m).await?);
        }
        if self.factory_ready != Some(true) {
            return Ok(false);
        }
        if !pol.blocked_by().is_empty() {
            return Ok(true); // stays open until signing is switched back on
        }
        let Some((data, gas)) = sweep_call(c, m, id, asset, &w).await? else {
            return Ok(true);
        };
        let head = c.client.head().await?;
        if batch.is_none() {
            *batch = Some(SendBatch::begin(state, c, m).await?);
        }
        let call = OutCall {
            kind: OutKind::Sweep,
            ref_id: id,
            project_id: sw.project_id,
            to: m.factory,
            value: U256::ZERO,
            data,
            gas_limit: gas,
        };
        let b = batch.as_mut().expect("begun above");
        let r = b
            .sign(
                c,
                m,
                pol,
                call,
                Box::new(move |ctx, hash| {
                    Ok(sweeps::submit_sent(ctx, &scope, id.into(), hash, head)?
                        .is_some_and(|s| s.status == SweepStatus::Submitted))
                }),
            )
            .await?;
        if let Err(e) = r {
            tracing::warn!(chain, sweep = %id, error = %clean(&e), "sweep not signed");
        }
        Ok(true)
    }
}

/// The factory's calldata that sweeps `asset` from wallet `w`'s forwarder, with its gas
/// limit; `None` when the node says the sweep (`id`) would revert.
async fn sweep_call(
    c: &ChainWorker,
    m: &Master,
    id: Uuid,
    asset: &Asset,
    w: &Wallet,
) -> anyhow::Result<Option<(appliance_chains::evm::Bytes, u64)>> {
    let token = if asset.is_native {
        Address::ZERO
    } else {
        asset
            .contract
            .parse()
            .map_err(|_| anyhow!("bad contract"))?
    };
    let salt = crate::services::wallets::forwarder_salt(w);
    let data = sweeper::sweep_calldata(salt, &[token]);
    let call = CallRequest {
        from: m.treasury,
        to: m.factory,
        value: U256::ZERO,
        data: data.clone(),
    };
    match c.client.estimate_gas(&call).await {
        Ok(g) => Ok(Some((data, sender::gas_limit_with_margin(g)))),
        Err(e) if is_refusal(&e) => {
            tracing::warn!(chain = c.chain, sweep = %id, error = %clean(&e), "sweep would revert; left open");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}
