//! The sender of one chain worker, a saga runner (STYLE.md habit 9). For each queued payout
//! and each open sweep it writes the intent, the nonce and the signed raw transaction in one
//! store transaction, then broadcasts outside it, and finalises in a later transaction once
//! the receipt has the chain's confirmations. Every pass first walks the pending list: a
//! transaction the node does not know is rebroadcast (this is also the start-up recovery
//! pass), one stuck longer than `replace_after_ms` is replaced with the same nonce and
//! higher fees.

use std::sync::Arc;

use anyhow::anyhow;
use uuid::Uuid;

use appliance_chains::client::{AssetRef, CallRequest, ClientError};
use appliance_chains::evm::{sender, sweeper, Address, B256, U256};
use appliance_signer::{SignError, SigningPolicy};
use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    ApiKey, Payout, PayoutStatus, Project, Sweep, SweepStatus, Wallet,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use super::store::{load_watch, pending_txs, put_tx, stored_nonce, OutKind, OutTx};
use super::waiting::WaitingSweeps;
use super::{clean, hex32, write, ChainWorker, Master, MAX_BACKOFF};
use crate::services::error::Fault;
use crate::services::{payouts, sweeps, Scope};
use crate::state::AppState;

/// Most payouts or sweeps one sender pass signs.
const MAX_NEW_PER_PASS: usize = 64;

pub(super) async fn send_loop(state: AppState, c: ChainWorker, m: Master) {
    let poll = c.poll;
    let mut backoff = poll;
    let mut waiting = WaitingSweeps::default();
    loop {
        let step = std::panic::AssertUnwindSafe(send_step(&state, &c, &m, &mut waiting));
        let r = match futures_util::FutureExt::catch_unwind(step).await {
            Ok(r) => r,
            Err(_) => Err(anyhow!("the sender step panicked (a bug); retrying")),
        };
        match r {
            Ok(()) => {
                backoff = poll;
                tokio::time::sleep(poll).await;
            }
            Err(e) => {
                tracing::warn!(chain = c.chain, key = %c.key, error = %clean(&e), "sender step failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One sender pass: follow pending transactions, then sign new payouts, sweeps and the
/// next steps of conversion batches. `waiting`: the open sweeps earlier passes of this
/// sender found waiting below the threshold ([`WaitingSweeps`]; keep one per sender).
pub async fn send_step(
    state: &AppState,
    c: &ChainWorker,
    m: &Master,
    waiting: &mut WaitingSweeps,
) -> anyhow::Result<()> {
    let followed = super::reconcile::reconcile(state, c, m).await?;
    send_payouts(state, c, m, followed).await?;
    send_sweeps(state, c, m, waiting).await?;
    super::convert::send_conversions(state, c, m).await?;
    Ok(())
}

fn is_refusal(e: &ClientError) -> bool {
    e.is_refusal()
}

pub(super) fn policy(state: &AppState, project: &Project, key: bool) -> SigningPolicy {
    SigningPolicy {
        service: state.config.signing.enabled,
        project: project.settings.signing_enabled,
        key,
    }
}

/// Signs, records (with the saga step `record`) and broadcasts one transaction.
#[allow(clippy::too_many_arguments)]
pub(super) async fn send_new<F>(
    state: &AppState,
    c: &ChainWorker,
    m: &Master,
    pol: SigningPolicy,
    kind: OutKind,
    ref_id: Uuid,
    project_id: Uuid,
    to: Address,
    value: U256,
    data: appliance_chains::evm::Bytes,
    gas_limit: u64,
    record: F,
) -> anyhow::Result<Result<Option<B256>, SignError>>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>, &str) -> Result<bool, Fault> + Send + 'static,
{
    let key = c.key.clone();
    let k2 = key.clone();
    let stored = state.store.read(move |r| stored_nonce(r, &k2)).await?;
    let node = c.client.nonce(m.treasury, true).await?;
    let nonce = sender::choose_nonce(stored, node);
    let SignedOut { out, raw, hash, .. } = match sign_out(
        c, m, pol, nonce, kind, ref_id, project_id, to, value, data, gas_limit,
    )
    .await?
    {
        Ok(signed) => signed,
        Err(e) => return Ok(Err(e)),
    };
    let recorded = write(state, move |ctx| {
        if stored_nonce(ctx, &key)? != stored {
            return Err(Fault::invariant("nonce moved under the sender"));
        }
        if !record(ctx, &out.hashes[0])? {
            return Ok(false);
        }
        put_tx(ctx, &key, &out)?;
        ctx.evm_pending_set(&key, nonce, true)?;
        ctx.evm_next_nonce_put(&key, nonce + 1)?;
        Ok(true)
    })
    .await?;
    if !recorded {
        return Ok(Ok(None));
    }
    crash_point(kind, "recorded");
    if let Err(e) = c.client.broadcast_signed_by(&raw, m.treasury).await {
        // Recorded: the tracker rebroadcasts it.
        tracing::warn!(chain = c.chain, nonce, error = %clean(&e), "broadcast failed; will retry");
    }
    crash_point(kind, "broadcast");
    Ok(Ok(Some(hash)))
}

/// Signs a transaction of the master wallet at `nonce` with the node's current fees and
/// returns it as its stored row (not yet recorded) and its raw bytes, or the signer's
/// refusal. Shared by [`send_new`] and [`SendBatch`].
#[allow(clippy::too_many_arguments)]
async fn sign_out(
    c: &ChainWorker,
    m: &Master,
    pol: SigningPolicy,
    nonce: u64,
    kind: OutKind,
    ref_id: Uuid,
    project_id: Uuid,
    to: Address,
    value: U256,
    data: appliance_chains::evm::Bytes,
    gas_limit: u64,
) -> anyhow::Result<Result<SignedOut, SignError>> {
    let f = c.client.fees().await?;
    let (max_fee, tip) = (f.max_fee_per_gas, f.max_priority_fee_per_gas);
    let tx = sender::eip1559(
        c.chain_id,
        nonce,
        to,
        value,
        data.clone(),
        gas_limit,
        max_fee,
        tip,
    );
    let signed = match m.signer.sign_evm(pol, tx) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let out = OutTx {
        nonce,
        kind,
        ref_id,
        project_id,
        to,
        value: value.to_string(),
        data: hex::encode(&data),
        gas_limit,
        max_fee_per_gas: max_fee.to_string(),
        max_priority_fee_per_gas: tip.to_string(),
        raws: vec![hex::encode(&signed.raw)],
        hashes: vec![hex32(&B256::from(signed.hash))],
        sent_at: appliance_storage::now_us(),
        done: false,
        mined: None,
        settled: None,
        filler_raws: vec![],
        filler_hashes: vec![],
    };
    Ok(Ok(SignedOut {
        out,
        raw: signed.raw.to_vec(),
        hash: B256::from(signed.hash),
        max_fee,
    }))
}

/// A transaction [`sign_out`] signed: its stored row, raw bytes, hash and
/// `max_fee_per_gas` (wei).
struct SignedOut {
    out: OutTx,
    raw: Vec<u8>,
    hash: B256,
    max_fee: u128,
}

/// The saga step that records one transaction of a [`SendBatch`], in the batch's store
/// transaction: moves the resource on with the transaction's hash; `false` when the resource
/// is no longer waiting for it (nothing of the transaction is then recorded).
type Record = Box<dyn Fn(&mut WriteCtx<'_>, &str) -> Result<bool, Fault> + Send + Sync>;

/// One signed transaction of a [`SendBatch`].
struct Signed {
    out: OutTx,
    raw: Vec<u8>,
    record: Record,
}

/// The new payouts or sweeps of one sender pass, signed at consecutive nonces, then
/// recorded together in one store transaction (each with its saga step and the nonce), then
/// broadcast in nonce order. Before, each was its own store transaction (issue 16: a commit
/// is a page flush and an fsync each; the sender signs up to [`MAX_NEW_PER_PASS`] a pass).
/// The saga is unchanged: nothing is broadcast before it is recorded, and a transaction is
/// recorded only with its resource's step. The resource whose step refuses (it moved
/// meanwhile) ends the batch there: the transactions signed after it are dropped unsent (their
/// nonces would leave a gap) and their resources are signed again by the next pass.
struct SendBatch {
    /// The store's next nonce when the batch began (checked in its transaction).
    stored: u64,
    /// Nonce of the first transaction.
    first: u64,
    items: Vec<Signed>,
}

impl SendBatch {
    /// A batch starting at the next nonce (the store's and the node's pending count).
    async fn begin(state: &AppState, c: &ChainWorker, m: &Master) -> anyhow::Result<SendBatch> {
        let key = c.key.clone();
        let stored = state.store.read(move |r| stored_nonce(r, &key)).await?;
        let node = c.client.nonce(m.treasury, true).await?;
        Ok(SendBatch {
            stored,
            first: sender::choose_nonce(stored, node),
            items: Vec::new(),
        })
    }

    /// Signs one transaction at the batch's next nonce with the node's current fees.
    /// Returns its `max_fee_per_gas`, or the signer's refusal (nothing is added then).
    #[allow(clippy::too_many_arguments)]
    async fn sign(
        &mut self,
        c: &ChainWorker,
        m: &Master,
        pol: SigningPolicy,
        kind: OutKind,
        ref_id: Uuid,
        project_id: Uuid,
        to: Address,
        value: U256,
        data: appliance_chains::evm::Bytes,
        gas_limit: u64,
        record: Record,
    ) -> anyhow::Result<Result<u128, SignError>> {
        let nonce = self.first + self.items.len() as u64;
        let SignedOut {
            out, raw, max_fee, ..
        } = match sign_out(
            c, m, pol, nonce, kind, ref_id, project_id, to, value, data, gas_limit,
        )
        .await?
        {
            Ok(signed) => signed,
            Err(e) => return Ok(Err(e)),
        };
        self.items.push(Signed { out, raw, record });
        Ok(Ok(max_fee))
    }

    /// Records the batch in one store transaction, then broadcasts what it recorded, in
    /// nonce order. When that transaction is refused (a step failed), the transactions are
    /// recorded one at a time up to the first failure, which then ends the pass (as when
    /// each had its own transaction): the ones before it still go out. Returns how many
    /// were recorded.
    async fn flush(self, state: &AppState, c: &ChainWorker, m: &Master) -> anyhow::Result<usize> {
        if self.items.is_empty() {
            return Ok(0);
        }
        let items = Arc::new(self.items);
        let stored = self.stored;
        let (key, all) = (c.key.clone(), items.clone());
        let n = items.len();
        let recorded = match write(state, move |ctx| {
            record_range(ctx, &key, stored, &all, 0..n)
        })
        .await
        {
            Ok(k) => k,
            Err(e) if n == 1 => return Err(e),
            Err(e) => {
                tracing::warn!(chain = c.chain, sends = n, error = %clean(&e),
                    "a batch of new sends was refused; recording them one at a time");
                let mut k = 0;
                let mut failure = None;
                while k < n {
                    let (key, all) = (c.key.clone(), items.clone());
                    let expect = if k == 0 {
                        stored
                    } else {
                        items[k - 1].out.nonce + 1
                    };
                    match write(state, move |ctx| {
                        record_range(ctx, &key, expect, &all, k..k + 1)
                    })
                    .await
                    {
                        Ok(1) => k += 1,
                        Ok(_) => break,
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
                broadcast(c, m, &items[..k]).await;
                return match failure {
                    Some(e) => Err(e),
                    None => Ok(k),
                };
            }
        };
        broadcast(c, m, &items[..recorded]).await;
        Ok(recorded)
    }
}

/// Inside a store transaction: checks the store's next nonce is still `stored`, then records
/// `items[range]` in order (saga step, row, pending set, next nonce), stopping at the first
/// whose step refuses. Returns how many were recorded.
fn record_range(
    ctx: &mut WriteCtx<'_>,
    key: &str,
    stored: u64,
    items: &[Signed],
    range: std::ops::Range<usize>,
) -> Result<usize, Fault> {
    if stored_nonce(ctx, key)? != stored {
        return Err(Fault::invariant("nonce moved under the sender"));
    }
    let mut recorded = 0;
    for item in &items[range] {
        if !(item.record)(ctx, &item.out.hashes[0])? {
            break;
        }
        put_tx(ctx, key, &item.out)?;
        ctx.evm_pending_set(key, item.out.nonce, true)?;
        ctx.evm_next_nonce_put(key, item.out.nonce + 1)?;
        recorded += 1;
    }
    Ok(recorded)
}

/// Broadcasts recorded transactions in nonce order (a failure is logged: the tracker
/// rebroadcasts). They were signed by this pass with the master key, so the client is
/// told their sender ([`appliance_chains::client::ChainClient::broadcast_signed_by`]).
async fn broadcast(c: &ChainWorker, m: &Master, items: &[Signed]) {
    for item in items {
        crash_point(item.out.kind, "recorded");
        if let Err(e) = c.client.broadcast_signed_by(&item.raw, m.treasury).await {
            tracing::warn!(chain = c.chain, nonce = item.out.nonce, error = %clean(&e), "broadcast failed; will retry");
        }
        crash_point(item.out.kind, "broadcast");
    }
}

/// Crash-test hook, debug builds only: with `DEBUG_CRASH_AT=<kind>_<stage>` (e.g.
/// `payout_recorded`, `payout_broadcast`, `payout_mined`) the process aborts at that point
/// of the send saga, as a `kill -9` would stop it. Release builds compile it to nothing.
pub(super) fn crash_point(kind: OutKind, stage: &str) {
    #[cfg(debug_assertions)]
    {
        let kind = match kind {
            OutKind::Payout => "payout",
            OutKind::Sweep => "sweep",
            OutKind::Factory => "factory",
            OutKind::Filler => "filler",
            OutKind::Approve => "approve",
            OutKind::Swap => "swap",
        };
        if std::env::var("DEBUG_CRASH_AT").is_ok_and(|v| v == format!("{kind}_{stage}")) {
            eprintln!("crash point {kind}_{stage}: aborting");
            std::process::abort();
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = (kind, stage);
}

/// Work items of the global queue `tag` on this chain, oldest first.
pub(super) async fn work_ids(state: &AppState, tag: IndexTag) -> anyhow::Result<Vec<Uuid>> {
    let mut ids = state.store.read(move |r| work_ids_in(r, tag)).await?;
    ids.reverse();
    Ok(ids)
}

/// How many work items one read looks at ([`WorkItems`]).
const WORK_CHUNK: usize = 256;

/// The work items of one sender pass, looked at in chunks of [`WORK_CHUNK`] ids per read
/// snapshot instead of one read (two thread hand-offs) per id: a queue holds the items
/// already submitted until they are final, so under a backlog a pass passed over thousands
/// of them one read each before reaching the ones to sign (issue 16). What an item's read
/// found is checked again by the transaction that records its step.
struct WorkItems<T> {
    ids: std::vec::IntoIter<Uuid>,
    ready: std::collections::VecDeque<T>,
}

impl<T: Send + 'static> WorkItems<T> {
    fn new(ids: Vec<Uuid>) -> Self {
        WorkItems {
            ids: ids.into_iter(),
            ready: Default::default(),
        }
    }

    /// The next item `pick` accepts (`None` when the queue is exhausted), in queue order.
    async fn next<F>(&mut self, state: &AppState, pick: F) -> anyhow::Result<Option<T>>
    where
        F: Fn(&appliance_storage::ReadCtx, Uuid) -> Result<Option<T>, StoreError>
            + Clone
            + Send
            + 'static,
    {
        while self.ready.is_empty() {
            let chunk: Vec<Uuid> = self.ids.by_ref().take(WORK_CHUNK).collect();
            if chunk.is_empty() {
                return Ok(None);
            }
            let pick = pick.clone();
            let found = state
                .store
                .read(move |r| {
                    let mut found = Vec::new();
                    for id in chunk {
                        if let Some(t) = pick(r, id)? {
                            found.push(t);
                        }
                    }
                    Ok(found)
                })
                .await?;
            self.ready.extend(found);
        }
        Ok(self.ready.pop_front())
    }
}

/// Every work item of the global queue `tag` in the read snapshot `r`, in index order
/// (newest first).
fn work_ids_in(r: &impl ReadOps, tag: IndexTag) -> Result<Vec<Uuid>, StoreError> {
    let page = r.scan_ids(
        &index::prefix(tag, Uuid::nil(), &[]),
        None,
        usize::MAX,
        |_| Ok(true),
    )?;
    Ok(page.items)
}

/// Signs the queued payouts of this chain, oldest first, up to [`MAX_NEW_PER_PASS`], and
/// records and broadcasts them together ([`SendBatch`]).
///
/// `followed`: the pending rows as the pass's reconciliation left them, when it knows
/// ([`super::reconcile::reconcile`]); the funding check counts the unmined ones instead of
/// reading and decoding every pending row again.
async fn send_payouts(
    state: &AppState,
    c: &ChainWorker,
    m: &Master,
    followed: Option<Vec<OutTx>>,
) -> anyhow::Result<()> {
    let mut batch = None;
    let r = sign_payouts(state, c, m, &mut batch, followed).await;
    if let Some(b) = batch {
        b.flush(state, c, m).await?;
    }
    r
}

/// `queued` -> `signing` and -> `failed` with `reason` in one transaction (a payout the
/// sender cannot send): the same events as when `signing` was written on its own first.
async fn fail_signing(
    state: &AppState,
    scope: &Scope,
    id: Uuid,
    reason: String,
) -> anyhow::Result<()> {
    let s2 = scope.clone();
    write(state, move |ctx| {
        if payouts::begin_signing(ctx, &s2, id)?.is_none() {
            return Ok(());
        }
        payouts::fail_unsent(ctx, &s2, id, &reason)
    })
    .await
}

async fn sign_payouts(
    state: &AppState,
    c: &ChainWorker,
    m: &Master,
    batch: &mut Option<SendBatch>,
    followed: Option<Vec<OutTx>>,
) -> anyhow::Result<()> {
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let mut done = 0;
    let mut unmined = Lazy::Rows(followed);
    let chain = c.chain;
    let ws = c.scope;
    let mut items = WorkItems::new(work_ids(state, IndexTag::PayoutsWork).await?);
    while done < MAX_NEW_PER_PASS {
        let item = items
            .next(state, move |r, id| {
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
            })
            .await?;
        let Some((p, project, key)) = item else {
            break;
        };
        let id = p.id;
        // The master wallet must hold the payout at the latest mined state, after what its
        // own unmined sends already commit; when it does not but a sweep of the coin is on
        // its way, the payout stays as it is (docs/decisions.md, Payouts: funds in transit).
        if let Some(asset) = reg.asset(&p.chain, &p.asset) {
            let funding =
                payout_funding(state, c, m, &mut unmined, asset, &p.asset, p.amount).await?;
            if funding == Funding::Awaiting {
                note_waiting(c.chain, id);
                continue;
            }
        }
        forget_waiting(id);
        done += 1;
        let scope = Scope {
            reg: reg.clone(),
            project: Arc::new(project.clone()),
            delivery_attempts: attempts,
        };
        // `queued` -> `signing` is written with the signed transaction (or with the failure
        // when it cannot be sent), in the batch's transaction: a payout cancelled meanwhile
        // is not recorded, and nothing unrecorded is broadcast.
        // A payout no key created (`created_by_key` nil: a checkout refund the buyer asked
        // for, DECISIONS.md section 12) has no key switch; the service and project switches
        // still apply.
        let key_signs = match &key {
            Some(k) => k.signing_enabled,
            None => p.created_by_key.is_nil(),
        };
        let pol = policy(state, &project, key_signs);
        if !pol.blocked_by().is_empty() {
            let reason = format!("signing_disabled: {}", pol.blocked_by().join(","));
            fail_signing(state, &scope, id, reason).await?;
            continue;
        }
        let Some(asset) = reg.asset(&p.chain, &p.asset).cloned() else {
            continue;
        };
        let dest: Address = match p.to_address.parse() {
            Ok(a) => a,
            Err(_) => {
                fail_signing(state, &scope, id, "invalid_address".into()).await?;
                continue;
            }
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
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let s2 = scope.clone();
        let head = c.client.head().await?;
        if batch.is_none() {
            *batch = Some(SendBatch::begin(state, c, m).await?);
        }
        let b = batch.as_mut().expect("begun above");
        let sent = b
            .sign(
                c,
                m,
                pol,
                OutKind::Payout,
                id,
                p.project_id,
                to,
                value,
                data,
                gas,
                Box::new(move |ctx, hash| {
                    if payouts::begin_signing(ctx, &s2, id)?.is_none() {
                        return Ok(false);
                    }
                    Ok(payouts::submit_sent(ctx, &s2, id, hash, head)?.is_some())
                }),
            )
            .await?;
        match sent {
            // Counted as committed from now on; a send the batch drops (its payout moved
            // before the batch was written) is counted until the pass ends, which can only
            // make a later payout of the pass wait for the next one.
            Ok(max_fee) => {
                if let Lazy::Built(u) = &mut unmined {
                    u.add_payout(&p, value, gas, max_fee);
                }
            }
            Err(e) => {
                fail_signing(state, &scope, id, format!("signing refused: {e}")).await?;
            }
        }
    }
    Ok(())
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
/// pending row again for each payout (issue 16: that was most of a busy sender pass) or
/// once more per pass after the reconciliation decoded them.
pub(super) struct Unmined {
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
    state: &AppState,
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

/// Payouts already reported as waiting for a sweep, so the wait is logged once per payout
/// rather than on every sender pass. Bounded: cleared when it grows past 10,000.
static WAITING: std::sync::Mutex<Option<std::collections::HashSet<Uuid>>> =
    std::sync::Mutex::new(None);

fn note_waiting(chain: &str, id: Uuid) {
    let mut g = WAITING.lock().unwrap_or_else(|e| e.into_inner());
    let set = g.get_or_insert_with(Default::default);
    if set.len() >= 10_000 {
        set.clear();
    }
    if set.insert(id) {
        tracing::info!(chain, payout = %id, "payout waits: the master wallet does not hold it yet and a sweep of the coin is on its way");
    } else {
        tracing::debug!(chain, payout = %id, "payout still waits for a sweep");
    }
}

fn forget_waiting(id: Uuid) {
    let mut g = WAITING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(set) = g.as_mut() {
        set.remove(&id);
    }
}

/// Deploys the factory through the deterministic deployment proxy when the chain lacks it
/// (the chain side is `appliance_chains::evm::factory`). `Ok(true)` once its code is on
/// chain.
async fn ensure_factory(state: &AppState, c: &ChainWorker, m: &Master) -> anyhow::Result<bool> {
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

/// Why sweeps wait this pass (issue 8 item 4: no sweep of money that is not final).
enum SweepHolds {
    /// The watcher has not processed the chain's head, or its last block is no longer
    /// canonical (a reorg it has not unwound yet): the ledger's holdings may be stale.
    NotInStep,
    /// Wallets with an unconfirmed inbound transfer: their forwarder would flush it along.
    Wallets(std::collections::HashSet<Uuid>),
}

async fn sweep_holds(state: &AppState, c: &ChainWorker) -> anyhow::Result<SweepHolds> {
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
async fn send_sweeps(
    state: &AppState,
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
    state: &AppState,
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
