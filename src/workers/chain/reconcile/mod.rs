//! Sends that reconcile with the chain. Every sender pass starts here and
//! compares the master wallet's stored transactions (one row per nonce, [`OutTx`]) with
//! what the client reports:
//!
//! * a receipt: the row is `mined`; at the chain's confirmations its resource settles (the
//!   ledger moves that depend on the send wait until then); the row is followed until it is
//!   [`track_depth`] deep, so a reorg deeper than the confirmations is still seen;
//! * a receipt that vanished (a reorg): the row is back to submitted and its stored bytes
//!   are rebroadcast (same nonce, same hash: no new event);
//! * a row the node does not know: rebroadcast; when the node refuses it as unable to
//!   succeed (funds, gas), or when the call's outcome is already written as failed and must
//!   not run again, a zero-value self-transfer (a *filler*) is signed at its nonce with
//!   higher fees; once a filler is final, the resource is re-planned: signed again at a new
//!   nonce (a payout's new hash emits `payout.submitted` again), or failed when the call
//!   can no longer succeed;
//! * a nonce gap (the node's pending nonce below the lowest followed nonce): the stored row
//!   at each missing nonce is followed again (and so rebroadcast), or a filler is recorded
//!   where nothing is stored, or where what is stored cannot be read (its bytes are logged
//!   first, and its resource is left for an operator). A filler is broadcast only once it
//!   is stored.
//!
//! At most one transaction per payout is ever mined: every version of a payout's call
//! shares its nonce, and it is re-planned at another nonce only once a filler holds the old
//! one with the chain's confirmations.

use std::sync::Arc;

use anyhow::anyhow;
use uuid::Uuid;

use appliance_chains::client::{CallRequest, ClientError, Receipt};
use appliance_chains::evm::{sender, B256, U256};
use appliance_signer::SigningPolicy;
use appliance_storage::records::{Payout, PayoutStatus, Project, Sweep, SweepStatus};
use appliance_storage::{ChainStateOps, ReadOps, WriteCtx};

use super::send::{crash_point, send_new, OutCall};
use super::store::{
    decode_tx, pending_nonces, put_tx, row_for_log, stored_nonce, MinedAt, OutKind, OutTx,
};
use super::{clean, hex32, write, ChainWorker, Master, Scopes, WorkScope};
use crate::handles::Handles;
use crate::services::error::Fault;
use crate::services::{conversions, payouts, sweeps, Scope};

/// Blocks a settled transaction stays followed after the block that mined it: twice the
/// confirmations, at least 32. A reorg deeper than this is beyond what the sender repairs
/// by itself (the watcher's block memory is deeper and reports it).
mod resend;
use resend::{fill, repair_gap, replace, replan};

pub fn track_depth(w: &ChainWorker) -> u64 {
    (w.required_confirmations as u64 * 2).max(32)
}

/// Most gap nonces repaired in one pass.
const MAX_GAP_PER_PASS: u64 = 16;

/// Most bytes of an unreadable stored row written to the log before a filler replaces it.
const MAX_LOGGED_ROW: usize = 4096;

/// Gas of a zero-value self-transfer.
const FILLER_GAS: u64 = 21_000;

/// Whether a node's refusal of a broadcast means the transaction cannot succeed as signed
/// (it will never enter the pool): funds or gas. Other refusals (fees too low, a version
/// already pooled, nonce too low) resolve by themselves or by the next pass.
pub fn cannot_succeed(e: &ClientError) -> bool {
    let ClientError::Refused { detail, .. } = e else {
        return false;
    };
    let d = detail.to_ascii_lowercase();
    [
        "insufficient funds",
        "intrinsic gas",
        "gas limit",
        "execution reverted",
    ]
    .iter()
    .any(|x| d.contains(x))
}

/// The followed rows as the previous reconciliation pass decoded them, by nonce, each with
/// the stored bytes it was decoded from (one per chain worker, [`ChainWorker::rows`]).
///
/// A pass reads every followed row, and under a backlog thousands are followed (a row stays
/// until it is [`track_depth`] blocks deep): decoding each row's JSON again on every pass
/// would be the largest part of the sender's background work after the signatures
/// (callgrind). A row whose stored bytes equal the remembered ones is taken from here
/// instead: the bytes are still read each pass, so whatever wrote the row, the pass sees
/// exactly what is stored. Holds only the rows of the last pass, at most [`MEMO_ROWS`].
#[derive(Default)]
pub struct RowMemo(std::sync::Mutex<Rows>);

/// Decoded rows by nonce, each with its stored bytes ([`RowMemo`]).
type Rows = std::collections::HashMap<u64, (Vec<u8>, OutTx)>;

/// Most rows a [`RowMemo`] keeps (a backlog's followed rows beyond it are decoded as before).
const MEMO_ROWS: usize = 32_768;

impl RowMemo {
    /// Takes the remembered rows (a concurrent pass, which a worker never runs, would find
    /// none and decode).
    fn take(&self) -> Rows {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn put(&self, rows: Rows) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = rows;
    }
}

/// The followed rows of `key` (a row that is absent or does not decode is left out, as
/// [`out_tx`](super::store::out_tx) leaves it out), decoded or taken from `old` when their bytes did not change;
/// returns them with the memo of this read.
fn read_followed(
    r: &impl ChainStateOps,
    key: &str,
    mut old: Rows,
) -> Result<(Vec<OutTx>, Rows), appliance_storage::StoreError> {
    let nonces = pending_nonces(r, key)?;
    let mut rows = Vec::with_capacity(nonces.len());
    let mut memo = Rows::with_capacity(nonces.len().min(MEMO_ROWS));
    for (n, bytes) in r.evm_out_txs(key, &nonces)? {
        let row = match old.remove(&n) {
            Some((b, row)) if b == bytes => row,
            _ => match decode_tx(&bytes) {
                Some(row) => row,
                None => continue,
            },
        };
        if memo.len() < MEMO_ROWS {
            memo.insert(n, (bytes, row.clone()));
        }
        rows.push(row);
    }
    Ok((rows, memo))
}

/// What the chain showed for the master wallet at the start of a pass.
struct View {
    head: u64,
    /// Transactions mined (the next nonce of the canonical chain).
    latest: u64,
    /// The next nonce the node expects, counting its pool.
    pending: u64,
}

/// One reconciliation pass over the followed rows, then the gap repair.
///
/// Returns the followed rows the pass left pending and unmined, as it left them (what a
/// read of the pending rows after it would find among those), or `None` when a rare step (a
/// filler, a fee bump, a re-plan, a gap repair) wrote rows on its own: the sender's
/// funding check (`sender::Unmined`) then reads them again.
pub async fn reconcile(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
) -> anyhow::Result<Option<Vec<OutTx>>> {
    let key = c.key.clone();
    let old = c.rows.take();
    let (rows, next, memo) = state
        .store
        .read(move |r| {
            let (rows, memo) = read_followed(r, &key, old)?;
            Ok((rows, stored_nonce(r, &key)?, memo))
        })
        .await?;
    c.rows.put(memo);
    if rows.is_empty() && next == 0 {
        return Ok(Some(rows));
    }
    let view = View {
        head: c.client.head().await?,
        latest: c.client.nonce(m.treasury, false).await?,
        pending: c.client.nonce(m.treasury, true).await?,
    };
    // The lowest nonce still followed and not settled: below it the node should have
    // everything; `next` when nothing is followed.
    let lowest = rows
        .iter()
        .filter(|t| t.settled.is_none())
        .map(|t| t.nonce)
        .min()
        .unwrap_or(next);
    let mut batch = Batch::default();
    let mut after = Some(Vec::with_capacity(rows.len()));
    for tx in rows {
        let now = track(state, c, m, &view, &mut batch, tx).await?;
        after = match (after, now) {
            (Some(mut v), Some(t)) => {
                if !t.done && t.mined.is_none() {
                    v.push(t);
                }
                Some(v)
            }
            _ => None,
        };
        if batch.ops.len() >= MAX_BATCH {
            batch.flush(state, c).await?;
        }
    }
    batch.flush(state, c).await?;
    if view.pending < lowest {
        after = None;
        repair_gap(
            state,
            c,
            m,
            view.pending,
            lowest.min(view.pending + MAX_GAP_PER_PASS),
        )
        .await?;
    }
    Ok(after)
}

/// The receipt of any version of `tx`, newest first: (hash, is a filler, receipt).
async fn find_receipt(
    c: &ChainWorker,
    tx: &OutTx,
) -> anyhow::Result<Option<(String, bool, Receipt)>> {
    for (h, filler) in tx.versions() {
        let hash: B256 = h.parse().map_err(|_| anyhow!("bad stored hash {h}"))?;
        if let Some(r) = c.client.receipt(hash).await? {
            return Ok(Some((h.to_string(), filler, r)));
        }
    }
    Ok(None)
}

async fn save(state: &Handles, c: &ChainWorker, tx: OutTx) -> anyhow::Result<()> {
    let key = c.key.clone();
    write(state, move |ctx| put_row(ctx, &key, &tx)).await
}

/// Writes a followed row; a `done` row leaves the pending set.
fn put_row(ctx: &mut WriteCtx<'_>, key: &str, tx: &OutTx) -> Result<(), Fault> {
    put_tx(ctx, key, tx)?;
    if tx.done {
        ctx.evm_pending_set(key, tx.nonce, false)?;
    }
    Ok(())
}

/// Most writes one [`Batch`] gathers before it is written: bounds how long one pass holds
/// the store writer (other requests' writes queue behind it).
const MAX_BATCH: usize = 256;

/// One write of a reconciliation pass that needs nothing more from the chain.
enum BatchOp {
    /// The row as it now is ([`put_row`]).
    Put(OutTx),
    /// The resource's outcome ([`settle_in`]), then the row.
    Settle {
        tx: OutTx,
        hash: String,
        success: bool,
        swap_out: Option<u128>,
    },
}

/// The usual writes of a reconciliation pass (a row mined, settled, done), gathered and
/// written together in one store transaction instead of one each (every commit
/// is a page flush and an fsync, and under load a pass follows hundreds of rows). The rare
/// steps that sign, broadcast or write on their own (a filler, a fee bump, a re-plan, a
/// vanished receipt) write the batch first, so every row's writes land in the order they
/// were decided.
#[derive(Default)]
struct Batch {
    ops: Vec<BatchOp>,
    /// Payouts marked mined by the batch (the `payout_mined` crash point, after the write).
    mined_payouts: usize,
}

impl Batch {
    /// Writes the gathered operations in one transaction. When that transaction is refused
    /// (one operation's service step failed), each is written again on its own, so one bad
    /// resource cannot hold back the rest; the first failure then ends the pass, as it did
    /// before writes were gathered. Every operation re-checks its resource's state, so
    /// writing one again is harmless.
    async fn flush(&mut self, state: &Handles, c: &ChainWorker) -> anyhow::Result<()> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let ops = Arc::new(std::mem::take(&mut self.ops));
        let mined = std::mem::take(&mut self.mined_payouts);
        let (all, env) = (ops.clone(), BatchEnv::of(state, c));
        let written = write(state, move |ctx| {
            let mut scopes = env.scopes();
            for op in all.iter() {
                apply_op(ctx, &env.key, &mut scopes, op)?;
            }
            Ok(())
        })
        .await;
        if let Err(e) = written {
            if ops.len() == 1 {
                return Err(e);
            }
            tracing::warn!(chain = c.chain, writes = ops.len(), error = %clean(&e),
                "a batch of sender writes was refused; writing them one at a time");
            for i in 0..ops.len() {
                let (one, env) = (ops.clone(), BatchEnv::of(state, c));
                write(state, move |ctx| {
                    apply_op(ctx, &env.key, &mut env.scopes(), &one[i])
                })
                .await?;
            }
        }
        for _ in 0..mined {
            crash_point(OutKind::Payout, "mined");
        }
        Ok(())
    }
}

/// What a batch's store transaction needs besides its operations.
struct BatchEnv {
    key: Arc<str>,
    reg: Arc<crate::registry::Registry>,
    scope: super::WorkScope,
    attempts: u32,
}

impl BatchEnv {
    fn of(state: &Handles, c: &ChainWorker) -> BatchEnv {
        BatchEnv {
            key: c.key.clone(),
            reg: state.registry.clone(),
            scope: c.scope,
            attempts: state.config.webhooks.max_attempts(),
        }
    }

    fn scopes(&self) -> Scopes {
        Scopes::new(self.reg.clone(), self.scope, self.attempts)
    }
}

fn apply_op(
    ctx: &mut WriteCtx<'_>,
    key: &str,
    scopes: &mut Scopes,
    op: &BatchOp,
) -> Result<(), Fault> {
    match op {
        BatchOp::Put(tx) => put_row(ctx, key, tx),
        BatchOp::Settle {
            tx,
            hash,
            success,
            swap_out,
        } => settle_in(ctx, key, scopes, tx, hash, *success, *swap_out),
    }
}

/// Follows one pending row for one pass: through its receipt when a version of it is mined
/// ([`Follow::mined`]), otherwise as unmined ([`Follow::unmined`]). Returns the row as the
/// pass leaves it, or `None` when a step took it over (a replacement, a filler, a re-plan, a
/// payout's turn).
async fn track(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    v: &View,
    batch: &mut Batch,
    tx: OutTx,
) -> anyhow::Result<Option<OutTx>> {
    let f = Follow { state, c, m, v };
    match find_receipt(c, &tx).await? {
        Some((hash, filler, r)) => f.mined(batch, tx, hash, filler, r).await,
        None => f.unmined(batch, tx).await,
    }
}

/// What following a row in one pass reads: the worker, its master wallet and the chain's
/// [`View`].
struct Follow<'a> {
    state: &'a Handles,
    c: &'a ChainWorker,
    m: &'a Master,
    v: &'a View,
}

impl Follow<'_> {
    /// A row a version of which (`hash`, a `filler` or the call) is mined with receipt `r`:
    /// noted as mined; at the chain's confirmations settled, or turned, re-planned or sent
    /// again when a reorg changed what its nonce carries; done past the tracking depth.
    async fn mined(
        &self,
        batch: &mut Batch,
        mut tx: OutTx,
        hash: String,
        filler: bool,
        r: Receipt,
    ) -> anyhow::Result<Option<OutTx>> {
        let (state, c) = (self.state, self.c);
        let at = MinedAt {
            hash: hash.clone(),
            block: r.block_number,
            filler,
        };
        if tx.mined.as_ref() != Some(&at) {
            tx.mined = Some(at);
            batch.ops.push(BatchOp::Put(tx.clone()));
            if tx.kind == OutKind::Payout && !filler {
                batch.mined_payouts += 1;
            }
        }
        let confirmed = self.v.head + 1 >= r.block_number + c.required_confirmations as u64;
        if confirmed && tx.kind == OutKind::Payout {
            if let Some(turn) = payout_turn(c, &tx, &hash, filler, r.success) {
                batch.flush(state, c).await?;
                payout_outcome(state, c, tx, turn).await?;
                return Ok(None);
            }
        }
        if confirmed && tx.settled.is_none() {
            if filler {
                // The call can never be mined now: re-plan its resource.
                batch.flush(state, c).await?;
                replan(state, c, self.m, tx).await?;
                return Ok(None);
            }
            if !self.settle(batch, &mut tx, hash, r.success).await? {
                return Ok(Some(tx));
            }
        } else if confirmed && undone_send(&tx, filler, r.success) {
            tracing::warn!(chain = c.chain, nonce = tx.nonce, kind = ?tx.kind, filler,
                "a settled send was undone by a reorg; it is sent again at a new nonce");
            batch.flush(state, c).await?;
            replan(state, c, self.m, tx).await?;
            return Ok(None);
        }
        if tx.settled.is_some() && self.v.head + 1 >= r.block_number + track_depth(c) {
            tx.done = true;
            batch.ops.push(BatchOp::Put(tx.clone()));
        }
        Ok(Some(tx))
    }

    /// A confirmed call, settled in the batch with its outcome (a swap with its executed
    /// output). `false` when the settlement waits: a swap whose output its receipt does not
    /// give.
    async fn settle(
        &self,
        batch: &mut Batch,
        tx: &mut OutTx,
        hash: String,
        success: bool,
    ) -> anyhow::Result<bool> {
        let (state, c) = (self.state, self.c);
        let swap_out = if tx.kind == OutKind::Swap && success {
            let out = super::convert::swap_output(state, c, self.m, tx.ref_id, &hash).await?;
            if out.is_none() {
                tracing::error!(chain = c.chain, nonce = tx.nonce, batch = %tx.ref_id,
                    "a mined swap's output cannot be read from its receipt; settlement waits");
                return Ok(false);
            }
            out
        } else {
            None
        };
        tx.settled = Some(success);
        batch.ops.push(BatchOp::Settle {
            tx: tx.clone(),
            hash,
            success,
            swap_out,
        });
        Ok(true)
    }

    /// A row none of whose versions is mined: sent again after a reorg removed it; filled
    /// when written as failed or when the node says it can no longer succeed; rebroadcast
    /// when the node does not hold it, replaced with higher fees once it is stuck.
    async fn unmined(&self, batch: &mut Batch, mut tx: OutTx) -> anyhow::Result<Option<OutTx>> {
        let (state, c, m) = (self.state, self.c, self.m);
        // What follows may sign, broadcast or write on its own: the batch goes first.
        batch.flush(state, c).await?;
        if tx.mined.take().is_some() {
            tracing::warn!(chain = c.chain, nonce = tx.nonce, kind = ?tx.kind,
                "a reorg removed a sent transaction; it is submitted again");
            // Submitted again now: a fee bump waits `replace_after_ms` from here.
            tx.sent_at = appliance_storage::now_us();
            save(state, c, tx.clone()).await?;
        }
        if tx.nonce < self.v.latest {
            // The nonce is used on chain by no version stored here.
            tracing::error!(chain = c.chain, nonce = tx.nonce,
                "the master wallet's nonce was used by a transaction this appliance did not record; left as is");
            return Ok(Some(tx));
        }
        if tx.settled == Some(false) && tx.filler_hashes.is_empty() {
            // Written as failed (reverted): the call must not run again.
            fill(state, c, m, tx).await?;
            return Ok(None);
        }
        let Some((raw, hash)) = tx.current().map(|(r, h)| (r.to_string(), h.to_string())) else {
            return Err(anyhow!("outgoing transaction {} has no version", tx.nonce));
        };
        let hash: B256 = hash.parse().map_err(|_| anyhow!("bad stored hash"))?;
        let age_ms = (appliance_storage::now_us() - tx.sent_at) / 1000;
        if c.client.knows_tx(hash).await? {
            if age_ms > c.replace_after_ms as i64 {
                replace(state, c, m, tx).await?;
                return Ok(None);
            }
            return Ok(Some(tx));
        }
        match c.client.broadcast(&hex::decode(raw)?).await {
            Ok(_) => {
                tracing::info!(
                    chain = c.chain,
                    nonce = tx.nonce,
                    "rebroadcast a stored transaction"
                )
            }
            Err(e) if cannot_succeed(&e) && tx.filler_hashes.is_empty() => {
                tracing::warn!(chain = c.chain, nonce = tx.nonce, error = %clean(&e),
                    "a stored transaction can no longer succeed; filling its nonce");
                fill(state, c, m, tx).await?;
                return Ok(None);
            }
            Err(e) => {
                tracing::debug!(chain = c.chain, nonce = tx.nonce, error = %clean(&e), "rebroadcast refused")
            }
        }
        Ok(Some(tx))
    }
}

/// The turn of a confirmed payout's row whose status no longer says what its nonce carries.
/// Once its call was mined (settled), a payout follows that nonce: it is not sent at a second
/// one, so it is paid at most once whatever a reorg does later; its status follows what that
/// nonce carries. (A payout whose call never mined, its nonce taken by a filler, is
/// re-planned instead.)
fn payout_turn(
    c: &ChainWorker,
    tx: &OutTx,
    hash: &str,
    filler: bool,
    success: bool,
) -> Option<PayoutTurn> {
    match (tx.settled, !filler && success) {
        (Some(true), false) => {
            tracing::warn!(chain = c.chain, nonce = tx.nonce, filler,
                "a confirmed payout's transaction was undone by a reorg; the payout fails and its funds are back");
            Some(PayoutTurn::Unpaid)
        }
        (Some(false), true) => {
            tracing::warn!(
                chain = c.chain,
                nonce = tx.nonce,
                "a failed payout's transaction succeeded after a reorg; the payout is confirmed"
            );
            Some(PayoutTurn::Paid(hash.to_string()))
        }
        _ => None,
    }
}

/// Whether a settled send (not a payout) was undone by a reorg: final now as a filler, or
/// mined again and reverted. Its resource's move is written (a sweep done) but the chain did
/// not make it, so the call is sent again at a new nonce as soon as it can succeed (a second
/// sweep moves what the first did not); until then the row stays followed and this is tried
/// on every pass.
fn undone_send(tx: &OutTx, filler: bool, success: bool) -> bool {
    tx.kind != OutKind::Payout && tx.settled == Some(true) && (filler || !success)
}

/// What a settled payout's nonce ends up carrying, against what its status says.
enum PayoutTurn {
    /// The confirmed payout's transaction was undone (a filler, or mined again and
    /// reverted): the payout fails, funds back ([`payouts::unsettle`]).
    Unpaid,
    /// The failed payout's call succeeded after a reorg, at this hash: confirmed again
    /// ([`payouts::resettle`]).
    Paid(String),
}

/// Writes a payout's turn and its row (settled as it now is) in one transaction.
async fn payout_outcome(
    state: &Handles,
    c: &ChainWorker,
    mut tx: OutTx,
    turn: PayoutTurn,
) -> anyhow::Result<()> {
    let key = c.key.clone();
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let scope = c.scope;
    tx.settled = Some(matches!(turn, PayoutTurn::Paid(_)));
    write(state, move |ctx| {
        let mut scopes = Scopes::new(reg, scope, attempts);
        if let Some(s) = scopes.of(ctx, tx.project_id)? {
            match &turn {
                PayoutTurn::Unpaid => {
                    payouts::unsettle(ctx, &s, tx.ref_id.into(), Payout::REORG_UNDONE)?
                }
                PayoutTurn::Paid(hash) => payouts::resettle(ctx, &s, tx.ref_id.into(), hash)?,
            }
        }
        put_row(ctx, &key, &tx)
    })
    .await
}

/// The resource's outcome at the chain's confirmations, inside a store transaction: the
/// ledger moves that waited for the send, then the row (already marked `settled`).
fn settle_in(
    ctx: &mut WriteCtx<'_>,
    key: &str,
    scopes: &mut Scopes,
    tx: &OutTx,
    hash: &str,
    success: bool,
    swap_out: Option<u128>,
) -> Result<(), Fault> {
    match tx.kind {
        OutKind::Sweep => {
            if let Some(s) = scopes.of(ctx, tx.project_id)? {
                sweeps::settle_sent(ctx, &s, tx.ref_id.into(), success)?;
            }
        }
        OutKind::Payout => {
            if let Some(s) = scopes.of(ctx, tx.project_id)? {
                payouts::settle_sent(ctx, &s, tx.ref_id.into(), hash, success)?;
            }
        }
        OutKind::Approve => {
            if let Some(s) = scopes.of(ctx, tx.project_id)? {
                match success {
                    true => conversions::approved(ctx, &s, tx.ref_id.into())?,
                    false => conversions::approve_lost(ctx, &s, tx.ref_id.into(), true)?,
                }
            }
        }
        OutKind::Swap => {
            if let Some(s) = scopes.of(ctx, tx.project_id)? {
                let out = if success { swap_out } else { None };
                conversions::swap_settled(ctx, &s, tx.ref_id.into(), hash, out)?;
            }
        }
        OutKind::Factory | OutKind::Filler => {}
    }
    put_row(ctx, key, tx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(detail: &str) -> ClientError {
        ClientError::Refused {
            method: "eth_sendRawTransaction",
            detail: detail.into(),
        }
    }

    #[test]
    fn only_refusals_about_funds_or_gas_mean_a_send_cannot_succeed() {
        assert!(cannot_succeed(&refused(
            "Insufficient funds for gas * price + value"
        )));
        assert!(cannot_succeed(&refused("intrinsic gas too low")));
        assert!(cannot_succeed(&refused("exceeds block gas limit")));
        // These resolve by themselves or by the next pass.
        assert!(!cannot_succeed(&refused("nonce too low")));
        assert!(!cannot_succeed(&refused(
            "replacement transaction underpriced"
        )));
        assert!(!cannot_succeed(&refused("already known")));
        assert!(!cannot_succeed(&ClientError::Unavailable {
            detail: "insufficient funds".into()
        }));
    }
}
