//! The payouts side of a sender pass: signing the queued payouts in one batch, and whether
//! the master wallet can fund each now (or waits for a sweep on its way).

use super::*;

/// Signs the queued payouts of this chain, oldest first, up to [`MAX_NEW_PER_PASS`], and
/// records and broadcasts them together ([`SendBatch`]).
///
/// `followed`: the pending rows as the pass's reconciliation left them, when it knows
/// ([`super::reconcile::reconcile`]); the funding check counts the unmined ones instead of
/// reading and decoding every pending row again.
pub(super) async fn send_payouts(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    followed: Option<Vec<OutTx>>,
    waiting: &mut WaitingPayouts,
) -> anyhow::Result<()> {
    let mut batch = None;
    let mut pass = PayoutPass {
        state,
        c,
        m,
        unmined: Lazy::Rows(followed),
    };
    let r = pass.sign_payouts(&mut batch, waiting).await;
    if let Some(b) = batch {
        b.flush(state, c, m).await?;
    }
    r
}

/// `queued` -> `signing` and -> `failed` with `reason` in one transaction (a payout the
/// sender cannot send): the same events as when `signing` was written on its own first.
async fn fail_signing(
    state: &Handles,
    scope: &Scope,
    id: Uuid,
    reason: String,
) -> anyhow::Result<()> {
    let s2 = scope.clone();
    write(state, move |ctx| {
        if payouts::begin_signing(ctx, &s2, id.into())?.is_none() {
            return Ok(());
        }
        payouts::fail_unsent(ctx, &s2, id.into(), &reason)
    })
    .await
}

/// A payout [`pick_payout`] found to sign: the row, its project and the key that created it.
type Picked = (Payout, Project, Option<ApiKey>);

/// One pass over the queued payouts, and the unmined sends it counts as committed.
struct PayoutPass<'a> {
    state: &'a Handles,
    c: &'a ChainWorker,
    m: &'a Master,
    unmined: Lazy,
}

/// A payout ready to sign: its scope, signing policy and transaction.
struct PayoutSend {
    scope: Scope,
    pol: SigningPolicy,
    call: OutCall,
}

impl PayoutPass<'_> {
    /// Signs the queued payouts into `batch`, at most [`MAX_NEW_PER_PASS`], oldest first.
    async fn sign_payouts(
        &mut self,
        batch: &mut Option<SendBatch>,
        waiting: &mut WaitingPayouts,
    ) -> anyhow::Result<()> {
        let (state, c) = (self.state, self.c);
        let (chain, ws) = (c.chain, c.scope);
        let mut done = 0;
        let mut items = WorkItems::new(work_ids(state, IndexTag::PayoutsWork).await?);
        while done < MAX_NEW_PER_PASS {
            let pick = move |r: &appliance_storage::ReadCtx, id| pick_payout(r, id, chain, ws);
            let Some((p, project, key)) = items.next(state, pick).await? else {
                break;
            };
            if self.awaits_sweep(&p).await? {
                waiting.note(chain, p.id);
                continue;
            }
            waiting.forget(p.id);
            done += 1;
            if let Some(send) = self.prepare(&p, project, key).await? {
                self.sign(batch, &p, send).await?;
            }
        }
        Ok(())
    }

    /// Whether the payout waits: the master wallet must hold it at the latest mined state,
    /// after what its own unmined sends already commit; when it does not but a sweep of the
    /// coin is on its way, the payout stays as it is (docs/decisions.md, Payouts: funds in
    /// transit).
    async fn awaits_sweep(&mut self, p: &Payout) -> anyhow::Result<bool> {
        let (state, c, m) = (self.state, self.c, self.m);
        let Some(asset) = state.registry.asset(&p.chain, &p.asset) else {
            return Ok(false);
        };
        let funding =
            payout_funding(state, c, m, &mut self.unmined, asset, &p.asset, p.amount).await?;
        Ok(funding == Funding::Awaiting)
    }

    /// The payout's transaction, or `None` when it is not sent this pass: failed (signing
    /// switched off, a destination that does not parse, a transfer the node says cannot
    /// succeed), or its coin no longer listed.
    async fn prepare(
        &self,
        p: &Payout,
        project: Project,
        key: Option<ApiKey>,
    ) -> anyhow::Result<Option<PayoutSend>> {
        let (state, c, m, id) = (self.state, self.c, self.m, p.id);
        // A payout no key created (`created_by_key` nil: a checkout refund the buyer asked
        // for, DECISIONS.md section 12) has no key switch; the service and project switches
        // still apply.
        let key_signs = match &key {
            Some(k) => k.signing_enabled,
            None => p.created_by_key.is_nil(),
        };
        let pol = policy(state, &project, key_signs);
        let scope = state.scope(project);
        if !pol.blocked_by().is_empty() {
            let reason = format!("signing_disabled: {}", pol.blocked_by().join(","));
            fail_signing(state, &scope, id, reason).await?;
            return Ok(None);
        }
        let Some(asset) = state.registry.asset(&p.chain, &p.asset).cloned() else {
            return Ok(None);
        };
        let Ok(dest) = p.to_address.parse::<Address>() else {
            fail_signing(state, &scope, id, "invalid_address".into()).await?;
            return Ok(None);
        };
        let (to, value, data) = if asset.is_native {
            (dest, U256::from(p.amount), Default::default())
        } else {
            let token: Address = asset
                .contract
                .parse()
                .map_err(|_| anyhow!("bad contract"))?;
            (
                token,
                U256::ZERO,
                sweeper::erc20_transfer_calldata(&dest, U256::from(p.amount)),
            )
        };
        let call = CallRequest {
            from: m.treasury,
            to,
            value,
            data: data.clone(),
        };
        // Estimated at `latest`, the state `payout_funding` read (docs/decisions.md, Payouts).
        let gas = match c.client.estimate_gas_latest(&call).await {
            Ok(g) => sender::gas_limit_with_margin(g),
            Err(e) if is_refusal(&e) => {
                // The node says the transfer cannot succeed now (the master wallet lacks
                // the funds or gas): fail it without spending a nonce. The failure reason
                // is the code (SPEC.md section 3: `execution reverted`); the node's words go
                // to the log.
                tracing::warn!(chain = c.chain, payout = %id, error = %clean(&e), "payout cannot succeed: execution reverted");
                fail_signing(state, &scope, id, "execution reverted".into()).await?;
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        };
        let call = OutCall {
            kind: OutKind::Payout,
            ref_id: id,
            project_id: p.project_id,
            to,
            value,
            data,
            gas_limit: gas,
        };
        Ok(Some(PayoutSend { scope, pol, call }))
    }

    /// Signs the payout into `batch`. `queued` -> `signing` is written with the signed
    /// transaction (or with the failure when it cannot be sent), in the batch's transaction:
    /// a payout cancelled meanwhile is not recorded, and nothing unrecorded is broadcast.
    async fn sign(
        &mut self,
        batch: &mut Option<SendBatch>,
        p: &Payout,
        send: PayoutSend,
    ) -> anyhow::Result<()> {
        let (state, c, m, id) = (self.state, self.c, self.m, p.id);
        let PayoutSend { scope, pol, call } = send;
        let (value, gas) = (call.value, call.gas_limit);
        let s2 = scope.clone();
        let head = c.client.head().await?;
        if batch.is_none() {
            *batch = Some(SendBatch::begin(state, c, m).await?);
        }
        let b = batch.as_mut().expect("begun above");
        let record: Record = Box::new(move |ctx, hash| {
            if payouts::begin_signing(ctx, &s2, id.into())?.is_none() {
                return Ok(false);
            }
            Ok(payouts::submit_sent(ctx, &s2, id.into(), hash, head)?.is_some())
        });
        match b.sign(c, m, pol, call, record).await? {
            // Counted as committed from now on; a send the batch drops (its payout moved
            // before the batch was written) is counted until the pass ends, which can only
            // make a later payout of the pass wait for the next one.
            Ok(max_fee) => {
                if let Lazy::Built(u) = &mut self.unmined {
                    u.add_payout(p, value, gas, max_fee);
                }
            }
            Err(e) => {
                fail_signing(state, &scope, id, format!("signing refused: {e}")).await?;
            }
        }
        Ok(())
    }
}

/// Payout `id` when it is a queued (or signing) payout of this chain that this worker
/// serves, with its project and the key that created it.
fn pick_payout(
    r: &appliance_storage::ReadCtx,
    id: Uuid,
    chain: &str,
    ws: WorkScope,
) -> Result<Option<Picked>, StoreError> {
    let Some(p) = r.get::<Payout>(id)? else {
        return Ok(None);
    };
    if p.chain != chain
        || !ws.may_admit(p.project_id)
        || !matches!(p.status, PayoutStatus::Queued | PayoutStatus::Signing)
    {
        return Ok(None);
    }
    let Some(project) = r.get::<Project>(p.project_id)?.filter(|x| ws.admits(x)) else {
        return Ok(None);
    };
    let key = r.get::<ApiKey>(p.created_by_key)?;
    Ok(Some((p, project, key)))
}

/// Whether the master wallet can pay a payout now (see [`payout_funding`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Funding {
    /// The latest mined balance covers it after the unmined sends already committed.
    Covered,
    /// It does not, but sweeps of the coin to the master wallet already broadcast would
    /// cover the shortfall: the payout waits, unchanged.
    Awaiting,
    /// It does not and nothing coming covers it: the payout goes on to the estimate, which
    /// refuses it as before (`execution reverted`, funds unlocked).
    Short,
}

/// The master wallet's stored outgoing sends not yet mined, as [`payout_funding`] counts
/// them: built once per sender pass, after the reconciliation (the only other writer of the
/// rows during a pass), from the unmined rows it hands over (or, after one of its rare
/// steps, read again), and added to as the pass records payouts, instead of decoding every
/// pending row again for each payout (that would be most of a busy sender pass) or
/// once more per pass after the reconciliation decoded them.
pub(crate) struct Unmined {
    sends: Vec<UnminedSend>,
}

/// The [`Unmined`] sends of a pass, built at the first payout that needs them: from the
/// rows the reconciliation handed over when it did (`Rows(Some(..))`), else read.
enum Lazy {
    Rows(Option<Vec<OutTx>>),
    Built(Unmined),
}

/// One unmined send: what it may cost in the native coin, and the payout it pays.
struct UnminedSend {
    /// `value + gas_limit x max_fee_per_gas`, or why the stored row does not say.
    native: Result<U256, String>,
    /// (chain, asset, amount) of the payout the send pays, when it pays one.
    payout: Option<(String, String, u128)>,
}

impl Unmined {
    /// The pending rows of `key` neither done nor mined (mined: the latest balance already
    /// shows them), with the payouts they pay.
    fn read(r: &impl ReadOps, key: &str) -> Result<Unmined, StoreError> {
        Self::of_rows(r, key, pending_txs(r, key)?)
    }

    /// The unmined sends among `rows` (pending rows of `key`), with the payouts they pay
    /// read from `r`.
    fn of_rows(r: &impl ReadOps, key: &str, rows: Vec<OutTx>) -> Result<Unmined, StoreError> {
        let mut sends = Vec::new();
        for tx in rows {
            if tx.done || tx.mined.is_some() {
                continue;
            }
            let nonce = tx.nonce;
            let bad = |field: &str, v: &str| {
                format!("outgoing transaction {key} nonce {nonce}: {field} {v:?} is not a number")
            };
            let native = match (tx.value.parse::<U256>(), tx.max_fee_per_gas.parse::<U256>()) {
                (Ok(value), Ok(fee)) => Ok(value + U256::from(tx.gas_limit) * fee),
                (Err(_), _) => Err(bad("value", &tx.value)),
                (_, Err(_)) => Err(bad("max_fee_per_gas", &tx.max_fee_per_gas)),
            };
            let payout = match tx.kind {
                OutKind::Payout => r
                    .get::<Payout>(tx.ref_id)?
                    .map(|p| (p.chain, p.asset, p.amount)),
                _ => None,
            };
            sends.push(UnminedSend { native, payout });
        }
        Ok(Unmined { sends })
    }

    /// What the unmined sends commit of a coin: for the native coin every send's value and
    /// most gas; for a token the amounts of the payouts of `asset_id` on `chain`. A stored
    /// amount that does not parse is a damaged row: counting it as zero would understate
    /// what is committed, so the pass stops (`Corrupt`) and the payout is left for the next
    /// one, unsigned.
    fn committed(&self, native: bool, chain: &str, asset_id: &str) -> Result<U256, StoreError> {
        let mut committed = U256::ZERO;
        for s in &self.sends {
            if native {
                committed += s.native.clone().map_err(StoreError::Corrupt)?;
            } else if let Some((c, a, amount)) = &s.payout {
                if c == chain && a == asset_id {
                    committed += U256::from(*amount);
                }
            }
        }
        Ok(committed)
    }

    /// A payout the pass has just recorded (signed with `max_fee_per_gas` = `max_fee`).
    fn add_payout(&mut self, p: &Payout, value: U256, gas_limit: u64, max_fee: u128) {
        self.sends.push(UnminedSend {
            native: Ok(value + U256::from(gas_limit) * U256::from(max_fee)),
            payout: Some((p.chain.clone(), p.asset.clone(), p.amount)),
        });
    }
}

/// How many submitted sweeps [`payout_funding`] asks the node about for one payout.
const MAX_SWEEPS_ASKED: usize = 32;

/// Gas a plain native transfer uses; what a native payout's own gas is reckoned at
/// before its estimate.
const NATIVE_TRANSFER_GAS: u64 = 21_000;

/// Whether the master wallet can pay `amount` (atomic units) of `asset` (`asset_id` is the
/// payout's asset id) now, at the latest mined state: its on-chain balance of the coin
/// (`latest`) minus what the master's stored, unmined outgoing sends of that coin commit
/// (a payout's amount; for the native coin every unmined send's value and its most gas,
/// `gas_limit x max_fee_per_gas`), and for the native coin also this payout's gas at the
/// node's current fee. When short, the payout is [`Funding::Awaiting`] if the submitted
/// (broadcast, not yet final, held by the node) sweeps of that coin on this chain, of the projects this worker serves, add up
/// to the shortfall. Rule: docs/decisions.md, Payouts (funds in transit).
async fn payout_funding(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    unmined: &mut Lazy,
    asset: &crate::registry::Asset,
    asset_id: &str,
    amount: u128,
) -> anyhow::Result<Funding> {
    let native = asset.is_native;
    let aref = if native {
        AssetRef::Native
    } else {
        AssetRef::Token(
            asset
                .contract
                .parse()
                .map_err(|_| anyhow!("bad contract"))?,
        )
    };
    let balance = c.client.balance(m.treasury, aref).await?;
    let mut need = U256::from(amount);
    if native {
        let f = c.client.fees().await?;
        need += U256::from(NATIVE_TRANSFER_GAS) * U256::from(f.max_fee_per_gas);
    }
    let chain = c.chain;
    let ws = c.scope;
    let aid = asset_id.to_string();
    if let Lazy::Rows(rows) = unmined {
        let (key, rows) = (c.key.clone(), rows.take());
        let built = state
            .store
            .read(move |r| match rows {
                Some(rows) => Unmined::of_rows(r, &key, rows),
                None => Unmined::read(r, &key),
            })
            .await?;
        *unmined = Lazy::Built(built);
    }
    let Lazy::Built(u) = unmined else {
        unreachable!("built above")
    };
    let committed = u.committed(native, chain, &aid)?;
    let need = need.saturating_add(committed);
    if balance >= need {
        return Ok(Funding::Covered);
    }
    // Short: the sweeps of the coin broadcast and not yet final, whose money is on its way
    // (read only now: a funded payout, the usual case, scans no sweep).
    let coming_sweeps = state
        .store
        .read(move |r| {
            let mut submitted: Vec<(u128, String)> = Vec::new();
            for id in work_ids_in(r, IndexTag::SweepsWork)? {
                let Some(sw) = r.get::<Sweep>(id)? else {
                    continue;
                };
                if sw.chain != chain || sw.asset != aid || !ws.may_admit(sw.project_id) {
                    continue;
                }
                // Only sweeps on their way: an open sweep may never go (no gas on the master
                // wallet, below its threshold), and a payout waiting on it would wait with no
                // signal to the merchant.
                if let (SweepStatus::Submitted, Some(h)) = (sw.status, sw.tx_hash) {
                    submitted.push((sw.amount, h));
                }
            }
            Ok(submitted)
        })
        .await?;
    // A submitted sweep counts only while the node holds its transaction (in its pool or
    // mined): one whose broadcast was refused (the master wallet cannot pay its gas) or
    // that was dropped is not on its way. At most `MAX_SWEEPS_ASKED` are asked about.
    let mut coming = U256::ZERO;
    for (amount, hash) in coming_sweeps.into_iter().take(MAX_SWEEPS_ASKED) {
        let Ok(h) = hash.parse::<B256>() else {
            continue;
        };
        // A node error is not an answer: the pass fails and is retried, rather than
        // counting the sweep as gone and failing the payout as short.
        if c.client.knows_tx(h).await? {
            coming = coming.saturating_add(U256::from(amount));
            if balance.saturating_add(coming) >= need {
                break;
            }
        }
    }
    if coming > U256::ZERO && balance.saturating_add(coming) >= need {
        return Ok(Funding::Awaiting);
    }
    Ok(Funding::Short)
}
