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
use appliance_storage::index::IndexTag;
use appliance_storage::records::{
    ApiKey, Payout, PayoutStatus, Project, Sweep, SweepStatus, Wallet,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use super::send::{
    crash_point, policy, send_new, sign_out, work_ids, work_ids_in, OutCall, SignedOut,
};
use super::store::{load_watch, pending_txs, put_tx, stored_nonce, OutKind, OutTx};
use super::waiting::{Waiting, WaitingPayouts, WaitingSweeps};
use super::{clean, write, ChainWorker, Master, WorkScope, MAX_BACKOFF};
use crate::handles::Handles;
use crate::registry::Asset;
use crate::services::error::Fault;
use crate::services::{payouts, sweeps, Scope};

/// Most payouts or sweeps one sender pass signs.
const MAX_NEW_PER_PASS: usize = 64;

pub(super) async fn send_loop(state: Handles, c: ChainWorker, m: Master) {
    let poll = c.poll;
    let mut backoff = poll;
    let mut waiting = Waiting::default();
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
/// next steps of conversion batches. `waiting`: what earlier passes of this sender found
/// waiting ([`Waiting`]; keep one per sender).
pub async fn send_step(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    waiting: &mut Waiting,
) -> anyhow::Result<()> {
    let followed = super::reconcile::reconcile(state, c, m).await?;
    send_payouts(state, c, m, followed, &mut waiting.payouts).await?;
    send_sweeps(state, c, m, &mut waiting.sweeps).await?;
    super::convert::send_conversions(state, c, m).await?;
    Ok(())
}

fn is_refusal(e: &ClientError) -> bool {
    e.is_refusal()
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
/// broadcast in nonce order: one store transaction for the pass, not one each (a commit
/// is a page flush and an fsync each; the sender signs up to [`MAX_NEW_PER_PASS`] a pass).
/// The saga holds: nothing is broadcast before it is recorded, and a transaction is
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
    async fn begin(state: &Handles, c: &ChainWorker, m: &Master) -> anyhow::Result<SendBatch> {
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
    async fn sign(
        &mut self,
        c: &ChainWorker,
        m: &Master,
        pol: SigningPolicy,
        call: OutCall,
        record: Record,
    ) -> anyhow::Result<Result<u128, SignError>> {
        let nonce = self.first + self.items.len() as u64;
        let SignedOut {
            out, raw, max_fee, ..
        } = match sign_out(c, m, pol, nonce, call).await? {
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
    async fn flush(self, state: &Handles, c: &ChainWorker, m: &Master) -> anyhow::Result<usize> {
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

/// How many work items one read looks at ([`WorkItems`]).
const WORK_CHUNK: usize = 256;

/// The work items of one sender pass, looked at in chunks of [`WORK_CHUNK`] ids per read
/// snapshot instead of one read (two thread hand-offs) per id: a queue holds the items
/// already submitted until they are final, so under a backlog a pass would otherwise pass
/// over thousands of them, one read each, before reaching the ones to sign. What an item's read
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
    async fn next<F>(&mut self, state: &Handles, pick: F) -> anyhow::Result<Option<T>>
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

mod payout_batch;
mod sweep_batch;

use payout_batch::send_payouts;
use sweep_batch::send_sweeps;
