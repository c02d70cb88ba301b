//! Sending again what the chain no longer holds: a filler at a nonce whose call cannot run,
//! a fee bump of a stuck send, a resource planned again at a new nonce, the nonce gaps.

use super::*;
use appliance_signer::{SignError, SignedEvmTx};

/// The signing policy of the sender's own housekeeping transactions (fillers, the factory).
fn service_policy(state: &Handles) -> SigningPolicy {
    SigningPolicy {
        service: state.config.signing.enabled,
        project: true,
        key: true,
    }
}

fn stored_fees(tx: &OutTx) -> (u128, u128) {
    (
        tx.max_fee_per_gas.parse::<u128>().unwrap_or(0),
        tx.max_priority_fee_per_gas.parse::<u128>().unwrap_or(0),
    )
}

/// Fees above every stored version of `tx` (by at least 12.5%) and the node's current ones.
async fn bumped_fees(c: &ChainWorker, tx: &OutTx) -> anyhow::Result<(u128, u128)> {
    let f = c.client.fees().await?;
    let node = (f.max_fee_per_gas, f.max_priority_fee_per_gas);
    Ok(sender::bumped_fees(stored_fees(tx), node))
}

/// The filler at `nonce` signed under `pol`: a zero-value self-transfer of the master
/// wallet at `fees`.
fn sign_filler(
    c: &ChainWorker,
    m: &Master,
    pol: SigningPolicy,
    nonce: u64,
    fees: (u128, u128),
) -> Result<SignedEvmTx, SignError> {
    let (to, data) = (m.treasury, Default::default());
    let unsigned = sender::eip1559(c.chain_id, nonce, to, U256::ZERO, data, FILLER_GAS, fees);
    m.signer.sign_evm(pol, unsigned)
}

/// [`sign_filler`] under the service's policy; `None` (logged) when it cannot be signed.
fn signed_filler(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    nonce: u64,
    fees: (u128, u128),
) -> Option<SignedEvmTx> {
    match sign_filler(c, m, service_policy(state), nonce, fees) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(chain = c.chain, nonce, error = %clean(&e), "cannot sign a filler");
            None
        }
    }
}

/// Adds `signed` to `tx` as its newest version (a filler, or the call again) at `fees`,
/// signed now. Returns its hash.
fn add_version(tx: &mut OutTx, signed: &SignedEvmTx, filler: bool, fees: (u128, u128)) -> String {
    let hash = hex32(&B256::from(signed.hash));
    let (raws, hashes) = match filler {
        true => (&mut tx.filler_raws, &mut tx.filler_hashes),
        false => (&mut tx.raws, &mut tx.hashes),
    };
    raws.push(hex::encode(&signed.raw));
    hashes.push(hash.clone());
    tx.max_fee_per_gas = fees.0.to_string();
    tx.max_priority_fee_per_gas = fees.1.to_string();
    tx.sent_at = appliance_storage::now_us();
    hash
}

/// Signs a zero-value self-transfer at `tx`'s nonce with fees above every stored version
/// (so it replaces any copy of the call still in a pool), records it, then broadcasts it.
pub(super) async fn fill(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    mut tx: OutTx,
) -> anyhow::Result<()> {
    let fees = bumped_fees(c, &tx).await?;
    let Some(signed) = signed_filler(state, c, m, tx.nonce, fees) else {
        return Ok(());
    };
    add_version(&mut tx, &signed, true, fees);
    let nonce = tx.nonce;
    save(state, c, tx).await?;
    if let Err(e) = c.client.broadcast(&signed.raw).await {
        tracing::warn!(chain = c.chain, nonce, error = %clean(&e), "filler broadcast failed; will retry");
    }
    Ok(())
}

/// Replaces a stuck version: same nonce, same call (or the same filler), fees up by at least
/// 12.5%. A payout follows the new hash (`payout.submitted` again).
pub(super) async fn replace(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    mut tx: OutTx,
) -> anyhow::Result<()> {
    let fees = bumped_fees(c, &tx).await?;
    let filler = !tx.filler_hashes.is_empty();
    let project_id = tx.project_id;
    let project = state
        .store
        .read(move |r| r.get::<Project>(project_id))
        .await?;
    let pol = SigningPolicy {
        service: state.config.signing.enabled,
        project: filler || project.as_ref().is_none_or(|p| p.settings.signing_enabled),
        key: true,
    };
    let signed = if filler {
        sign_filler(c, m, pol, tx.nonce, fees)
    } else {
        let unsigned = sender::eip1559(
            c.chain_id,
            tx.nonce,
            tx.to,
            // Never a zero-value stand-in for a payout's amount: an unreadable value stops here.
            tx.value
                .parse::<U256>()
                .map_err(|_| anyhow!("bad stored value {:?} of nonce {}", tx.value, tx.nonce))?,
            hex::decode(&tx.data)?.into(),
            tx.gas_limit,
            fees,
        );
        m.signer.sign_evm(pol, unsigned)
    };
    let signed = match signed {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(chain = c.chain, nonce = tx.nonce, error = %clean(&e), "cannot replace a stuck transaction");
            return Ok(());
        }
    };
    let hash = add_version(&mut tx, &signed, filler, fees);
    let key = c.key.clone();
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let scope = c.scope;
    let t2 = tx.clone();
    write(state, move |ctx| {
        put_tx(ctx, &key, &t2)?;
        if matches!(t2.kind, OutKind::Payout | OutKind::Swap | OutKind::Approve) && !filler {
            let mut scopes = Scopes::new(reg, scope, attempts);
            if let Some(s) = scopes.of(ctx, t2.project_id)? {
                match t2.kind {
                    OutKind::Payout => payouts::follow_hash(ctx, &s, t2.ref_id.into(), &hash)?,
                    kind => conversions::follow_hash(
                        ctx,
                        &s,
                        t2.ref_id.into(),
                        kind == OutKind::Swap,
                        &hash,
                    )?,
                }
            }
        }
        Ok(())
    })
    .await?;
    tracing::info!(
        chain = c.chain,
        nonce = tx.nonce,
        max_fee = fees.0,
        tip = fees.1,
        filler,
        "replaced a stuck transaction"
    );
    if let Err(e) = c.client.broadcast(&signed.raw).await {
        tracing::warn!(chain = c.chain, nonce = tx.nonce, error = %clean(&e), "replacement broadcast failed");
    }
    Ok(())
}

/// A filler holds `tx`'s nonce with the chain's confirmations: the call will never be
/// mined. Its resource is signed again at a new nonce (in the transaction that retires the
/// row), or, when the call cannot succeed now, a payout or sweep not yet settled fails.
pub(super) async fn replan(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    tx: OutTx,
) -> anyhow::Result<()> {
    let r = Replan::new(state, c, &tx);
    let (kind, id, nonce) = (tx.kind, tx.ref_id, tx.nonce);
    if matches!(kind, OutKind::Approve | OutKind::Swap) {
        // A batch step is not sent again as it was (a swap's quote and deadline are
        // stale): the batch quotes and sends its step afresh.
        return r.batch_step_dropped(state).await;
    }
    let Some((project_id, already_settled)) = still_waiting(state, kind, id).await? else {
        write(state, move |ctx| r.retire(ctx).map(|_| ())).await?;
        return Ok(());
    };
    let value = tx
        .value
        .parse::<U256>()
        .map_err(|_| anyhow!("bad stored value {:?} of nonce {}", tx.value, tx.nonce))?;
    let data: appliance_chains::evm::Bytes = hex::decode(&tx.data)?.into();
    let call = CallRequest {
        from: m.treasury,
        to: tx.to,
        value,
        data: data.clone(),
    };
    let gas = match c.client.estimate_gas(&call).await {
        Ok(g) => sender::gas_limit_with_margin(g),
        Err(e) if e.is_refusal() => {
            tracing::warn!(chain = c.chain, nonce, kind = ?kind, error = %clean(&e), "a re-planned send cannot succeed");
            if already_settled {
                // Its resource's move is written: what it owes is owed until it is sent. The
                // row stays followed; the next pass tries again (the master wallet's funds
                // may be on their way: a sweep the same reorg removed, say).
                tracing::warn!(chain = c.chain, nonce, kind = ?kind,
                    "a settled send undone by a reorg cannot be sent yet; trying again next pass");
                return Ok(());
            }
            return r.cannot_succeed(state, project_id).await;
        }
        Err(e) => return Err(e.into()),
    };
    let project = state
        .store
        .read(move |r| r.get::<Project>(project_id))
        .await?;
    let pol = SigningPolicy {
        service: state.config.signing.enabled,
        project: project.as_ref().is_none_or(|p| p.settings.signing_enabled),
        key: true,
    };
    let call = OutCall {
        kind,
        ref_id: id,
        project_id,
        to: tx.to,
        value,
        data,
        gas_limit: gas,
    };
    let sent = send_new(state, c, m, pol, call, move |ctx, hash| {
        r.resent(ctx, project_id, hash)
    })
    .await?;
    match sent {
        Ok(Some(h)) => {
            tracing::warn!(chain = c.chain, old_nonce = nonce, kind = ?kind, hash = %hex32(&h), "re-planned a send at a new nonce")
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(chain = c.chain, nonce, error = %clean(&e), "cannot sign a re-planned send")
        }
    }
    Ok(())
}

/// Whether the resource of a payout or sweep send is still waiting for it: its project,
/// and whether its move is already settled (confirmed); `None` for any other kind.
async fn still_waiting(
    state: &Handles,
    kind: OutKind,
    id: Uuid,
) -> anyhow::Result<Option<(Uuid, bool)>> {
    Ok(match kind {
        OutKind::Payout => {
            read_row(state, id, |p: Payout| match p.status {
                PayoutStatus::Submitted => Some((p.project_id, false)),
                PayoutStatus::Confirmed => Some((p.project_id, true)),
                _ => None,
            })
            .await?
        }
        OutKind::Sweep => {
            read_row(state, id, |s: Sweep| match s.status {
                SweepStatus::Submitted => Some((s.project_id, false)),
                SweepStatus::Confirmed => Some((s.project_id, true)),
                _ => None,
            })
            .await?
        }
        OutKind::Factory | OutKind::Filler | OutKind::Approve | OutKind::Swap => None,
    })
}

/// What `f` makes of row `id` (`None` when missing).
async fn read_row<R, T>(
    state: &Handles,
    id: Uuid,
    f: impl FnOnce(R) -> Option<T> + Send + 'static,
) -> anyhow::Result<Option<T>>
where
    R: appliance_storage::records::Row + Send + 'static,
    T: Send + 'static,
{
    Ok(state
        .store
        .read(move |r| Ok(r.get::<R>(id)?.and_then(f)))
        .await?)
}

/// A send [`replan`] plans again: its stored row (retired in the transaction that writes
/// what follows) and the resource it serves.
struct Replan {
    key: Arc<str>,
    nonce: u64,
    kind: OutKind,
    id: Uuid,
    project_id: Uuid,
    reg: Arc<crate::registry::Registry>,
    scope: WorkScope,
    attempts: u32,
}

impl Replan {
    fn new(state: &Handles, c: &ChainWorker, tx: &OutTx) -> Self {
        Replan {
            key: c.key.clone(),
            nonce: tx.nonce,
            kind: tx.kind,
            id: tx.ref_id,
            project_id: tx.project_id,
            reg: state.registry.clone(),
            scope: c.scope,
            attempts: state.config.webhooks.max_attempts(),
        }
    }

    /// Marks the stored row done (and settled unless it says otherwise) and no longer
    /// pending; `false` when it is gone, unreadable or done already.
    fn retire(&self, ctx: &mut appliance_storage::WriteCtx<'_>) -> Result<bool, Fault> {
        let (key, nonce) = (&self.key, self.nonce);
        let Some(b) = ctx.evm_out_tx(key, nonce)? else {
            return Ok(false);
        };
        let Some(mut row) = decode_tx(&b) else {
            return Ok(false);
        };
        if row.done {
            return Ok(false);
        }
        row.done = true;
        row.settled = Some(row.settled.unwrap_or(true));
        put_tx(ctx, key, &row)?;
        ctx.evm_pending_set(key, nonce, false)?;
        Ok(true)
    }

    /// The scope of `project_id` in `ctx`, when this worker serves it.
    fn scope_of(
        &self,
        ctx: &mut appliance_storage::WriteCtx<'_>,
        project_id: Uuid,
    ) -> Result<Option<Scope>, Fault> {
        Scopes::new(self.reg.clone(), self.scope, self.attempts).of(ctx, project_id)
    }

    /// Retires a conversion batch's approval or swap: the batch sends its step afresh.
    async fn batch_step_dropped(self, state: &Handles) -> anyhow::Result<()> {
        write(state, move |ctx| {
            if !self.retire(ctx)? {
                return Ok(());
            }
            if let Some(s) = self.scope_of(ctx, self.project_id)? {
                match self.kind {
                    OutKind::Swap => conversions::swap_dropped(ctx, &s, self.id.into())?,
                    _ => conversions::approve_lost(ctx, &s, self.id.into(), false)?,
                }
            }
            Ok(())
        })
        .await
    }

    /// Retires a send the node says cannot succeed and fails its resource: a payout with
    /// the code `execution reverted` (SPEC.md section 3; the node's words go to the log),
    /// a sweep as not sent.
    async fn cannot_succeed(self, state: &Handles, project_id: Uuid) -> anyhow::Result<()> {
        let reason = "execution reverted";
        write(state, move |ctx| {
            if !self.retire(ctx)? {
                return Ok(());
            }
            if let Some(s) = self.scope_of(ctx, project_id)? {
                match self.kind {
                    OutKind::Payout => payouts::fail_replanned(ctx, &s, self.id.into(), reason)?,
                    OutKind::Sweep => sweeps::settle_sent(ctx, &s, self.id.into(), false)?,
                    _ => {}
                }
            }
            Ok(())
        })
        .await
    }

    /// The saga step of the send at its new nonce: retires the old row and has the resource
    /// follow `hash`.
    fn resent(
        &self,
        ctx: &mut appliance_storage::WriteCtx<'_>,
        project_id: Uuid,
        hash: &str,
    ) -> Result<bool, Fault> {
        if !self.retire(ctx)? {
            return Ok(false);
        }
        let Some(s) = self.scope_of(ctx, project_id)? else {
            return Ok(true);
        };
        match self.kind {
            OutKind::Payout => payouts::follow_hash(ctx, &s, self.id.into(), hash)?,
            OutKind::Sweep => sweeps::follow_hash(ctx, &s, self.id.into(), hash)?,
            _ => {}
        }
        Ok(true)
    }
}

/// The node's pending nonce is below the lowest followed one: each missing nonce in
/// `from..to` is followed again when a row is stored at it (the next pass rebroadcasts it),
/// or gets a filler row when nothing is stored there or what is stored does not decode
/// (logged as an error with its bytes, at most [`MAX_LOGGED_ROW`]: every reader skips such
/// a row, so without the filler the gap would hold back every later send). The filler is
/// broadcast only once its row is stored (every outgoing transaction is stored
/// signed before broadcast).
pub(super) async fn repair_gap(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    from: u64,
    to: u64,
) -> anyhow::Result<()> {
    for n in from..to {
        let key = c.key.clone();
        let bytes = state.store.read(move |r| r.evm_out_tx(&key, n)).await?;
        let row = bytes.as_deref().and_then(decode_tx);
        // Stored bytes that do not decode as an `OutTx`.
        let unreadable = if row.is_none() { bytes } else { None };
        match row {
            Some(mut t) => {
                if !t.done {
                    continue; // followed already (settled, and its receipt is checked)
                }
                tracing::warn!(
                    chain = c.chain,
                    nonce = n,
                    "nonce gap: following a finished transaction again"
                );
                t.done = false;
                t.mined = None;
                let key = c.key.clone();
                write(state, move |ctx| {
                    put_tx(ctx, &key, &t)?;
                    ctx.evm_pending_set(&key, n, true)?;
                    Ok(())
                })
                .await?;
            }
            None => {
                match &unreadable {
                    // Its bytes go to the log before the filler replaces them: what it was
                    // for (`kind`, `ref_id`) is for an operator to find; its resource stays
                    // where it is, and nothing at this nonce can be mined but the filler.
                    Some(b) => tracing::error!(
                        chain = c.chain,
                        nonce = n,
                        stored = %row_for_log(b, MAX_LOGGED_ROW),
                        "nonce gap at a stored transaction that cannot be read: a filler replaces it; its resource needs an operator"
                    ),
                    None => tracing::warn!(
                        chain = c.chain,
                        nonce = n,
                        "nonce gap with nothing stored: filling it"
                    ),
                }
                let f = c.client.fees().await?;
                let fees = (f.max_fee_per_gas, f.max_priority_fee_per_gas);
                let Some(signed) = signed_filler(state, c, m, n, fees) else {
                    return Ok(());
                };
                let filler = OutCall {
                    kind: OutKind::Filler,
                    ref_id: Uuid::nil(),
                    project_id: Uuid::nil(),
                    to: m.treasury,
                    value: U256::ZERO,
                    data: Default::default(),
                    gas_limit: FILLER_GAS,
                };
                let row = filler.row(n, fees, &signed);
                let key = c.key.clone();
                // Stored before it is broadcast, and only over what was read above (a row
                // written meanwhile is followed by the next pass instead).
                let stored = write(state, move |ctx| {
                    if ctx.evm_out_tx(&key, n)? != unreadable {
                        return Ok(false);
                    }
                    put_tx(ctx, &key, &row)?;
                    ctx.evm_pending_set(&key, n, true)?;
                    if ctx.evm_next_nonce(&key)? <= n {
                        ctx.evm_next_nonce_put(&key, n + 1)?;
                    }
                    Ok(true)
                })
                .await?;
                if !stored {
                    continue;
                }
                if let Err(e) = c.client.broadcast(&signed.raw).await {
                    tracing::warn!(chain = c.chain, nonce = n, error = %clean(&e), "filler broadcast failed; will retry");
                }
            }
        }
    }
    Ok(())
}
