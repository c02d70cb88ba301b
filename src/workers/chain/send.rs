//! What every step of a chain worker's send saga shares (the sender's payouts and sweeps,
//! the conversion steps, the reconciler's replacements): the signing policy, signing one
//! transaction of the master wallet, sending one new transaction (intent, nonce and raw
//! transaction in one store transaction, then the broadcast), the global work queues and
//! the debug builds' crash points.

use appliance_chains::evm::{sender, Address, B256, U256};
use appliance_signer::{SignError, SignedEvmTx, SigningPolicy};
use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::Project;
use appliance_storage::{ReadOps, StoreError, WriteCtx};
use uuid::Uuid;

use super::store::{put_tx, stored_nonce, OutKind, OutTx};
use super::{clean, hex32, write, ChainWorker, Master};
use crate::handles::Handles;
use crate::services::error::Fault;

/// The signing policy of a send for `project` (`key`: whether the key that asked may sign).
pub(super) fn policy(state: &Handles, project: &Project, key: bool) -> SigningPolicy {
    SigningPolicy {
        service: state.config.signing.enabled,
        project: project.settings.signing_enabled,
        key,
    }
}

/// What a transaction of the master wallet does: its saga step (`kind`, the row it serves
/// and that row's project) and its call (recipient, value in wei, calldata, gas limit).
pub(super) struct OutCall {
    pub(super) kind: OutKind,
    pub(super) ref_id: Uuid,
    pub(super) project_id: Uuid,
    pub(super) to: Address,
    pub(super) value: U256,
    pub(super) data: appliance_chains::evm::Bytes,
    pub(super) gas_limit: u64,
}

impl OutCall {
    /// The stored row of this call as `signed` at `nonce` with `fees` (max fee and tip, wei
    /// per gas): its one version, sent now, neither mined nor done.
    pub(super) fn row(&self, nonce: u64, fees: (u128, u128), signed: &SignedEvmTx) -> OutTx {
        OutTx {
            nonce,
            kind: self.kind,
            ref_id: self.ref_id,
            project_id: self.project_id,
            to: self.to,
            value: self.value.to_string(),
            data: hex::encode(&self.data),
            gas_limit: self.gas_limit,
            max_fee_per_gas: fees.0.to_string(),
            max_priority_fee_per_gas: fees.1.to_string(),
            raws: vec![hex::encode(&signed.raw)],
            hashes: vec![hex32(&B256::from(signed.hash))],
            sent_at: appliance_storage::now_us(),
            done: false,
            mined: None,
            settled: None,
            filler_raws: vec![],
            filler_hashes: vec![],
        }
    }
}

/// Signs, records (with the saga step `record`) and broadcasts one transaction.
pub(super) async fn send_new<F>(
    state: &Handles,
    c: &ChainWorker,
    m: &Master,
    pol: SigningPolicy,
    call: OutCall,
    record: F,
) -> anyhow::Result<Result<Option<B256>, SignError>>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>, &str) -> Result<bool, Fault> + Send + 'static,
{
    let kind = call.kind;
    let key = c.key.clone();
    let k2 = key.clone();
    let stored = state.store.read(move |r| stored_nonce(r, &k2)).await?;
    let node = c.client.nonce(m.treasury, true).await?;
    let nonce = sender::choose_nonce(stored, node);
    let SignedOut { out, raw, hash, .. } = match sign_out(c, m, pol, nonce, call).await? {
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
/// refusal. Shared by [`send_new`] and the sender's batches.
pub(super) async fn sign_out(
    c: &ChainWorker,
    m: &Master,
    pol: SigningPolicy,
    nonce: u64,
    call: OutCall,
) -> anyhow::Result<Result<SignedOut, SignError>> {
    let f = c.client.fees().await?;
    let (max_fee, tip) = (f.max_fee_per_gas, f.max_priority_fee_per_gas);
    let tx = sender::eip1559(
        c.chain_id,
        nonce,
        call.to,
        call.value,
        call.data.clone(),
        call.gas_limit,
        (max_fee, tip),
    );
    let signed = match m.signer.sign_evm(pol, tx) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let out = call.row(nonce, (max_fee, tip), &signed);
    Ok(Ok(SignedOut {
        out,
        raw: signed.raw.to_vec(),
        hash: B256::from(signed.hash),
        max_fee,
    }))
}

/// A transaction [`sign_out`] signed: its stored row, raw bytes, hash and
/// `max_fee_per_gas` (wei).
pub(super) struct SignedOut {
    pub(super) out: OutTx,
    pub(super) raw: Vec<u8>,
    pub(super) hash: B256,
    pub(super) max_fee: u128,
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
pub(super) async fn work_ids(state: &Handles, tag: IndexTag) -> anyhow::Result<Vec<Uuid>> {
    let mut ids = state.store.read(move |r| work_ids_in(r, tag)).await?;
    ids.reverse();
    Ok(ids)
}

/// Every work item of the global queue `tag` in the read snapshot `r`, in index order
/// (newest first).
pub(super) fn work_ids_in(r: &impl ReadOps, tag: IndexTag) -> Result<Vec<Uuid>, StoreError> {
    let page = r.scan_ids(
        &index::prefix(tag, Uuid::nil(), &[]),
        None,
        usize::MAX,
        |_| Ok(true),
    )?;
    Ok(page.items)
}
