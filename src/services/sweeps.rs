//! Sweeps: moving funds from deposit addresses into the master wallet (SPEC.md section 4,
//! Sweeps; DECISIONS.md section 5). A sweep never changes customer balances: the ledger
//! moves the amount `deposits` -> `in_transit` on submission and `in_transit` -> `treasury`
//! on confirmation.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::ledger::{Account, AccountKind, JournalEntry, JournalKind, Posting};
use appliance_storage::records::{Sweep, SweepStatus, Wallet};
use appliance_storage::{CommitHook, Delta, ReadOps, StoreError, Touched, WriteCtx};

use crate::services::chains::{self, ChainError};
use crate::services::error::{fault_from, Fault};
use crate::services::types::{AssetSymbol, SweepId, WalletId};
use crate::services::{emit, journal_entry, Scope};
use crate::views;

/// Why a sweep request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// `wallet_id` names no wallet of the project: 404 `not_found`.
    #[error("No such wallet.")]
    WalletNotFound,
    /// The wallet's chain or the asset cannot be used.
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(SweepError);

/// Adds `amount` to wallet `w`'s open sweep for `asset`, opening one at `height` if none.
/// `open`: the wallet's open sweep of `asset` as its holding row names it
/// ([`appliance_storage::ledger::Holding`], read by the caller in this job: a deposit's
/// credit reads that row anyway). A new sweep is recorded in that row, so the deposit that
/// opens it writes no page beside the one its credit dirties (schema 8).
pub fn schedule(
    ctx: &mut WriteCtx<'_>,
    w: &Wallet,
    asset: &str,
    amount: u128,
    height: u64,
    open: Option<Uuid>,
) -> Result<Sweep, StoreError> {
    let now = ctx.now_us();
    if let Some(id) = open {
        if let Some(old) = ctx.get::<Sweep>(id)? {
            let mut s = old.clone();
            s.amount = s.amount.saturating_add(amount);
            s.updated_at = now;
            // Just read: not read and decoded again by `put`.
            ctx.put_replacing(Some(&old), &s)?;
            return Ok(s);
        }
    }
    let s = Sweep {
        id: appliance_storage::sources::new_id(),
        project_id: w.project_id,
        wallet_id: w.id,
        chain: w.chain.clone(),
        asset: asset.to_string(),
        amount,
        status: SweepStatus::Open,
        skip_reason: None,
        tx_hash: None,
        open_block: Some(height),
        submitted_block: None,
        created_at: now,
        updated_at: now,
        customer_id: w.customer_id,
    };
    ctx.open_sweep_set(w, asset, Some(s.id))?;
    // A new id: nothing stored under it to read for its old index entries.
    ctx.put_replacing(None, &s)?;
    Ok(s)
}

/// Lowers the open sweep of (wallet, asset) by `amount` (funds reorged away before it left).
pub fn shrink_open(
    ctx: &mut WriteCtx<'_>,
    wallet: Uuid,
    asset: &str,
    amount: u128,
) -> Result<(), StoreError> {
    if let Some(id) = ctx.holding_row(wallet, asset)?.open_sweep {
        if let Some(mut s) = ctx.get::<Sweep>(id)? {
            s.amount = s.amount.saturating_sub(amount);
            ctx.put(&s)?;
        }
    }
    Ok(())
}

/// `POST /v1/sweeps`: opens a sweep of what the ledger holds on the wallet's address for
/// `asset` (default: the first asset with a holding), to be submitted on the next block;
/// `skipped` with `nothing_to_sweep` when the address holds nothing.
pub fn request(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    wallet_id: WalletId,
    asset: Option<AssetSymbol>,
    height: impl Fn(&WriteCtx<'_>, &str) -> Result<u64, StoreError>,
) -> Result<Sweep, SweepError> {
    let p = s.project.id;
    let w = ctx
        .get_in::<Wallet>(p, wallet_id.uuid())?
        .ok_or(SweepError::WalletNotFound)?;
    let eff = chains::resolve(&s.reg, &s.project, &w.chain, "wallet_id")?;
    if let Some(a) = &asset {
        chains::resolve_asset(&eff, a, "asset")?;
    }
    let candidates: Vec<String> = match asset {
        Some(a) => vec![a.into_string()],
        None => eff.chain.assets.iter().map(|a| a.symbol.clone()).collect(),
    };
    // The first asset the ledger holds on the address; nothing held means a skipped sweep
    // of the asked-for (or first) asset.
    let mut chosen = None;
    for a in &candidates {
        let row = ctx.holding_of(&w, a)?;
        if row.amount > 0 {
            chosen = Some((a.clone(), row));
            break;
        }
    }
    let (asset, row) = chosen.unwrap_or_else(|| {
        let first = candidates.first().cloned();
        (
            first.unwrap_or_else(|| eff.chain.info.native.symbol.to_string()),
            Default::default(),
        )
    });
    let held = row.amount;
    let now = ctx.now_us();
    if held == 0 {
        let sw = Sweep {
            id: appliance_storage::sources::new_id(),
            project_id: p,
            wallet_id: w.id,
            chain: w.chain.clone(),
            asset,
            amount: 0,
            status: SweepStatus::Skipped,
            skip_reason: Some("nothing_to_sweep".into()),
            tx_hash: None,
            open_block: None,
            submitted_block: None,
            created_at: now,
            updated_at: now,
            customer_id: w.customer_id,
        };
        ctx.put(&sw)?;
        emit(ctx, s, "sweep.skipped", sw.id, views::sweep(&s.reg, &sw))?;
        return Ok(sw);
    }
    // An open sweep already covers part of the holding; add only the rest.
    let open = row.open_sweep;
    let already = match open {
        Some(id) => ctx.get::<Sweep>(id)?.map(|s| s.amount).unwrap_or(0),
        None => 0,
    };
    let h = height(ctx, &w.chain)?;
    let sw = schedule(ctx, &w, &asset, held.saturating_sub(already), h, open)?;
    if s.livemode() {
        // An explicit request is swept whatever the chain's automatic threshold says.
        ctx.sweep_request_put(sw.id)?;
    }
    Ok(sw)
}

/// `open` -> `skipped` (`nothing_to_sweep`, `sweep.skipped`): the address holds nothing any
/// more. The one transition of both chains.
fn to_skipped(ctx: &mut WriteCtx<'_>, s: &Scope, sw: &mut Sweep) -> Result<(), Fault> {
    ctx.open_sweep_close(sw.wallet_id, &sw.asset, sw.id)?;
    sw.skip_reason = Some("nothing_to_sweep".into());
    store_moved(ctx, s, sw, SweepStatus::Skipped, "sweep.skipped")
}

/// Stores sweep `sw` moved to `to` and emits `event` about it: how every transition ends,
/// after its journal entry and the fields it sets.
fn store_moved(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    sw: &mut Sweep,
    to: SweepStatus,
    event: &str,
) -> Result<(), Fault> {
    sw.status = to;
    sw.updated_at = ctx.now_us();
    ctx.put(sw)?;
    emit(ctx, s, event, sw.id, views::sweep(&s.reg, sw))?;
    Ok(())
}

/// `open` -> `submitted` for `amount` with the transaction's hash and the block it was sent
/// at (`sweep.submitted`); ledger: deposits -> in_transit, the address's holding reduced.
/// The one transition of both chains (live: written with the signed transaction, before the
/// broadcast).
fn to_submitted(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    sw: &mut Sweep,
    amount: u128,
    tx_hash: String,
    block: u64,
) -> Result<(), Fault> {
    let now = ctx.now_us();
    let e = project_move(
        sw,
        JournalKind::SweepSubmit,
        AccountKind::InTransit,
        AccountKind::Deposits,
        amount,
        now,
    );
    ctx.post(&e)??;
    ctx.holding_add(sw.wallet_id, &sw.asset, Delta::Sub(amount))?;
    ctx.open_sweep_close(sw.wallet_id, &sw.asset, sw.id)?;
    sw.amount = amount;
    sw.tx_hash = Some(tx_hash);
    sw.submitted_block = Some(block);
    store_moved(ctx, s, sw, SweepStatus::Submitted, "sweep.submitted")
}

/// `submitted` -> `confirmed` (in_transit -> treasury, `sweep.confirmed`) when the
/// transaction succeeded, `failed` (in_transit -> deposits, the holding restored,
/// `skip_reason` `execution reverted`, `sweep.failed`) when it reverted. The one transition
/// of both chains (the simulated chain never reverts a sweep).
fn to_final(ctx: &mut WriteCtx<'_>, s: &Scope, sw: &mut Sweep, success: bool) -> Result<(), Fault> {
    let now = ctx.now_us();
    let (debit, credit, status, event) = if success {
        (
            AccountKind::Treasury,
            AccountKind::InTransit,
            SweepStatus::Confirmed,
            "sweep.confirmed",
        )
    } else {
        (
            AccountKind::Deposits,
            AccountKind::InTransit,
            SweepStatus::Failed,
            "sweep.failed",
        )
    };
    let kind = if success {
        JournalKind::SweepSettle
    } else {
        JournalKind::SweepRevert
    };
    let e = project_move(sw, kind, debit, credit, sw.amount, now);
    ctx.post(&e)??;
    if !success {
        ctx.holding_add(sw.wallet_id, &sw.asset, Delta::Add(sw.amount))?;
        sw.skip_reason = Some("execution reverted".into());
    }
    store_moved(ctx, s, sw, status, event)
}

// ---------------------------------------------------------------------------------------
// The chain worker's sender runs these around its broadcast, whatever the chain (a saga: the
// submission is recorded with the signed transaction before it is broadcast).

fn project_move(
    sw: &Sweep,
    kind: JournalKind,
    debit: AccountKind,
    credit: AccountKind,
    amount: u128,
    now: i64,
) -> JournalEntry {
    let p = sw.project_id;
    journal_entry(
        p,
        kind,
        sw.id,
        now,
        vec![
            Posting::debit(Account::project(p, &sw.chain, &sw.asset, debit), amount),
            Posting::credit(Account::project(p, &sw.chain, &sw.asset, credit), amount),
        ],
    )
}

/// Wallets on `chain` with an unconfirmed inbound transfer (a `detected` deposit). Their
/// sweeps wait (DECISIONS.md section 16): the forwarder flushes the
/// address's whole balance, so a sweep now would move money that is not final.
pub fn wallets_receiving(
    r: &impl ReadOps,
    chain: &str,
) -> Result<std::collections::HashSet<Uuid>, StoreError> {
    let ids = r.scan_ids(
        &index::prefix(IndexTag::DepositsPending, Uuid::nil(), &[]),
        None,
        usize::MAX,
        |_| Ok(true),
    )?;
    let mut out = std::collections::HashSet::new();
    for id in ids.items {
        if let Some(d) = r.get::<appliance_storage::records::Deposit>(id)? {
            if d.chain == chain && d.status == appliance_storage::records::DepositStatus::Detected {
                out.insert(d.wallet_id);
            }
        }
    }
    Ok(out)
}

/// What an open live sweep would move now: the ledger's holding of the address, capped by
/// the sweep's amount. 0: nothing to sweep.
pub fn amount_now(ctx: &impl ReadOps, sw: &Sweep) -> Result<u128, StoreError> {
    Ok(sw.amount.min(ctx.holding(sw.wallet_id, &sw.asset)?))
}

/// `open` -> `submitted` with `tx_hash` (ledger: deposits -> in_transit), or `skipped`
/// (`nothing_to_sweep`) when the address holds nothing any more. `None` when the sweep is
/// no longer open (someone else moved it).
pub fn submit_sent(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: SweepId,
    tx_hash: &str,
    height: u64,
) -> Result<Option<Sweep>, Fault> {
    let Some(mut sw) = sweep_in(ctx, id, SweepStatus::Open)? else {
        return Ok(None);
    };
    let amount = amount_now(ctx, &sw)?;
    if amount == 0 {
        to_skipped(ctx, s, &mut sw)?;
        return Ok(Some(sw));
    }
    to_submitted(ctx, s, &mut sw, amount, tx_hash.to_string(), height)?;
    Ok(Some(sw))
}

/// `open` -> `skipped` (`nothing_to_sweep`) when the address holds nothing now, read in
/// this transaction. The sender calls it for a sweep it read as empty outside the
/// transaction: a deposit credited in between leaves the sweep `open` (returns `None`) for
/// the next pass to sign, instead of marking it `submitted` with no transaction behind it.
pub fn skip_if_empty(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: SweepId,
) -> Result<Option<Sweep>, Fault> {
    let Some(mut sw) = ctx.get::<Sweep>(id.uuid())? else {
        return Ok(None);
    };
    if sw.status != SweepStatus::Open || amount_now(ctx, &sw)? != 0 {
        return Ok(None);
    }
    to_skipped(ctx, s, &mut sw)?;
    Ok(Some(sw))
}

/// A submitted live sweep's transaction is final: `confirmed` (in_transit -> treasury) when
/// it succeeded, `failed` (in_transit -> deposits, the holding restored) when it reverted.
pub fn settle_sent(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: SweepId,
    success: bool,
) -> Result<(), Fault> {
    let Some(mut sw) = sweep_in(ctx, id, SweepStatus::Submitted)? else {
        return Ok(());
    };
    to_final(ctx, s, &mut sw, success)
}

/// A submitted (or confirmed) live sweep's transaction was signed again at a new nonce (a
/// filler took the old one): the sweep follows the new hash, its status and ledger
/// unchanged.
pub fn follow_hash(
    ctx: &mut WriteCtx<'_>,
    _s: &Scope,
    id: SweepId,
    tx_hash: &str,
) -> Result<(), Fault> {
    if let Some(mut sw) = ctx.get::<Sweep>(id.uuid())? {
        if matches!(sw.status, SweepStatus::Submitted | SweepStatus::Confirmed) {
            sw.tx_hash = Some(tx_hash.to_string());
            sw.updated_at = ctx.now_us();
            ctx.put(&sw)?;
        }
    }
    Ok(())
}

/// Sweep rows written since the start, newest last, at most [`SweepChanges::CAPACITY`] of
/// them: what the commit hook heard, for the chain senders to read from their own position
/// (`workers::chain::waiting`).
#[derive(Default)]
pub struct SweepChanges {
    log: Mutex<ChangeLog>,
}

#[derive(Default)]
struct ChangeLog {
    /// Position after the newest entry (entries ever pushed).
    end: u64,
    /// The newest entries; `ids[i]` is at position `end - ids.len() + i`.
    ids: VecDeque<Uuid>,
}

impl SweepChanges {
    /// Entries kept (16 B each): a sender further behind than this reads every open sweep.
    pub const CAPACITY: usize = 65_536;

    /// The store's commit hook that logs every sweep row a committed batch wrote.
    pub fn hook(self: &Arc<Self>) -> CommitHook {
        let me = self.clone();
        Arc::new(move |touched: &[Touched]| {
            let mut sweeps = touched.iter().filter(|t| t.is::<Sweep>()).peekable();
            if sweeps.peek().is_none() {
                return;
            }
            let mut log = me.log.lock().unwrap_or_else(|e| e.into_inner());
            for t in sweeps {
                log.push(t.id);
            }
        })
    }

    /// The position after the newest entry: read it before a pass reads the store.
    pub fn position(&self) -> u64 {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).end
    }

    /// The sweeps written from position `from` to the end, and the end; `None` when some
    /// of them are no longer kept.
    pub(crate) fn since(&self, from: u64) -> Option<(Vec<Uuid>, u64)> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let first = log.end - log.ids.len() as u64;
        if from < first || from > log.end {
            return None;
        }
        let skip = (from - first) as usize;
        Some((log.ids.iter().skip(skip).copied().collect(), log.end))
    }
}

impl ChangeLog {
    fn push(&mut self, id: Uuid) {
        if self.ids.len() == SweepChanges::CAPACITY {
            self.ids.pop_front();
        }
        self.ids.push_back(id);
        self.end += 1;
    }
}

/// Sweep `id` when it is `status`, else `None` (missing, or moved on by someone else).
fn sweep_in(
    ctx: &WriteCtx<'_>,
    id: SweepId,
    status: SweepStatus,
) -> Result<Option<Sweep>, StoreError> {
    Ok(ctx.get::<Sweep>(id.uuid())?.filter(|r| r.status == status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_the_newest_entries_at_their_positions() {
        let c = SweepChanges::default();
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        {
            let mut log = c.log.lock().unwrap();
            for id in &ids {
                log.push(*id);
            }
        }
        assert_eq!(c.position(), 5);
        assert_eq!(c.since(2), Some((ids[2..].to_vec(), 5)));
        assert_eq!(c.since(5), Some((vec![], 5)));
        assert_eq!(c.since(6), None);
    }
}
