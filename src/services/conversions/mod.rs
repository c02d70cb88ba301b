//! Conversions (SPEC.md sections 2, 3 and 4, Conversions; DECISIONS.md section 14): rules,
//! quotes, manual conversions, batches and their settlement.
//!
//! Ledger (per row; the customer is nil for the project's own funds):
//!
//! * planning locks the row's `amount_in`: `available` -> `locked` of `from_asset`;
//! * settlement (the swap has the chain's confirmations) moves the treasury between assets
//!   at the executed amounts: `locked` of `from_asset` -> `treasury` (the coins left the
//!   master wallet) and `treasury` -> `available` of `to_asset` (the coins the swap paid
//!   in). Each row's `amount_out` is its share of the batch's output pro rata to
//!   `amount_in`, the rounding remainder to the last row; both legs balance per asset;
//! * failure returns the locked amount to `available`: the money stays in its arrival coin.
//!
//! A batch is `approving` (an ERC-20 input whose router allowance is short) -> `swapping`
//! -> `settled` | `failed`. Its chain steps are the chain worker's send sagas
//! (`workers/chain/convert.rs`); this module holds every state change.

use std::collections::BTreeMap;
use std::sync::Arc;

use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;

use appliance_chains::evm::dex::{Coin, DexKind};
use appliance_chains::evm::U256;
use appliance_chains::format_decimal;
use appliance_storage::index::{self, IndexTag};
use appliance_storage::ledger::{Account, AccountKind, JournalEntry, JournalKind, Posting};
use appliance_storage::records::{
    BatchStatus, Conversion, ConversionBatch, ConversionKind, ConversionRule, ConversionStatus,
    Mode,
};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::market::Market;
use crate::registry::{Chain, Registry};
use crate::services::chains::{self, ChainError};
use crate::services::error::{fault_from, Fault, Invalid};
use crate::services::types::{
    Amount, AssetSymbol, ChainId, ConversionBatchId, ConversionId, DepositId,
};
use crate::services::{emit, journal_entry, Scope};
use crate::views::{
    ts, ConversionBatchView, ConversionQuoteView, ConversionRequestView, ConversionRuleView,
    ConversionTargetView, ConversionView,
};

/// Swap attempts of a batch: a reverted swap is retried with a fresh quote until this many
/// were made, then the batch fails (DECISIONS.md section 14).
pub const MAX_ATTEMPTS: u32 = 3;

/// Default `slippage_bps` of a quote and a manual conversion (DECISIONS.md section 14).
pub const DEFAULT_SLIPPAGE_BPS: u32 = 50;

/// Highest `slippage_bps` accepted (50%).
pub const MAX_SLIPPAGE_BPS: u32 = 5_000;

/// Most symbols in a rule's `keep_assets`.
pub const MAX_KEEP_ASSETS: usize = 64;

/// Why a conversion request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    /// No such conversion in the project: 404 `not_found`.
    #[error("No such conversion.")]
    NotFound,
    /// No such batch in the project: 404 `not_found`.
    #[error("No such conversion batch.")]
    BatchNotFound,
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The chain has no DEX (or is not an EVM chain): 422 `conversion_unsupported_chain`.
    #[error("Conversions are not supported on {chain}: {reason}.")]
    UnsupportedChain { chain: String, reason: String },
    /// `target_asset` is not a coin of the chain: 400 `invalid_target`.
    #[error("target_asset {target:?} is not a coin listed on {chain}.")]
    InvalidTarget { target: String, chain: String },
    /// A `keep_assets` entry is not a coin of the chain: 400 `invalid_keep_asset`.
    #[error("keep_assets entry {asset:?} is not a coin listed on {chain}.")]
    InvalidKeepAsset { asset: String, chain: String },
    /// A test-mode project asked for an on-chain conversion: 422 `conversion_test_mode`.
    #[error(
        "Conversions are not executed in test mode; rules and quotes work on the simulated chain."
    )]
    TestMode,
    /// The DEX or its node cannot quote now: 503 `conversion_unavailable`.
    #[error("The DEX on {chain} cannot quote now; retry later.")]
    Unavailable { chain: String },
    /// The treasury (free of everything in flight) or the customers' balances lack the
    /// amount: 402 `insufficient_funds`. Atomic units of `asset`.
    #[error(
        "Insufficient funds: {} {asset} can be converted now ({available} atomic), requested {} {asset} ({requested} atomic).",
        format_decimal(*.available, *.decimals),
        format_decimal(*.requested, *.decimals)
    )]
    InsufficientFunds {
        available: u128,
        requested: u128,
        asset: String,
        decimals: u8,
    },
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(ConversionError);

// ---------------------------------------------------------------------------------------
// Rules

/// Splits `amount` over `holders` pro rata to their balances, largest remainder first for
/// the rounding (DECISIONS.md section 14); holders whose share is zero are left out. The
/// shares sum to `amount` when `amount` is at most the holders' total.
pub fn pro_rata(amount: u128, holders: &BTreeMap<Uuid, u128>) -> Vec<(Uuid, u128)> {
    let total: u128 = holders.values().fold(0u128, |a, b| a.saturating_add(*b));
    if total == 0 || amount == 0 {
        return Vec::new();
    }
    let amount = amount.min(total);
    let mut shares: Vec<(Uuid, u128, U256)> = holders
        .iter()
        .map(|(c, b)| {
            let prod = U256::from(amount) * U256::from(*b);
            let q = prod / U256::from(total);
            let r = prod % U256::from(total);
            (*c, u128::try_from(q).unwrap_or(0), r)
        })
        .collect();
    let assigned: u128 = shares.iter().map(|s| s.1).sum();
    let mut left = amount - assigned;
    let mut order: Vec<usize> = (0..shares.len()).collect();
    // Largest remainder first; ties by customer id (deterministic).
    order.sort_by(|a, b| {
        shares[*b]
            .2
            .cmp(&shares[*a].2)
            .then(shares[*a].0.cmp(&shares[*b].0))
    });
    for i in order {
        if left == 0 {
            break;
        }
        if shares[i].1 < holders[&shares[i].0] {
            shares[i].1 += 1;
            left -= 1;
        }
    }
    shares
        .into_iter()
        .filter(|s| s.1 > 0)
        .map(|s| (s.0, s.1))
        .collect()
}

fn move_entry(
    project: Uuid,
    kind: JournalKind,
    ref_id: Uuid,
    now: i64,
    legs: Vec<(Account, Account, u128)>,
) -> JournalEntry {
    let mut postings = Vec::new();
    for (from, to, amount) in legs {
        if amount == 0 {
            continue;
        }
        postings.push(Posting::debit(from, amount));
        postings.push(Posting::credit(to, amount));
    }
    journal_entry(project, kind, ref_id, now, postings)
}

fn owner(c: &Conversion) -> Uuid {
    c.customer_id.unwrap_or(Uuid::nil())
}

fn acct(c: &Conversion, asset: &str, kind: AccountKind) -> Account {
    Account::customer(c.project_id, owner(c), &c.chain, asset, kind)
}

/// What `POST /v1/conversions` answers (202 `conversion_request`).
pub fn request_json(reg: &Registry, rows: &[Conversion], batch: &ConversionBatch) -> Value {
    crate::views::to_value(&ConversionRequestView {
        object: "conversion_request",
        rows: rows.iter().map(|r| conversion_view(reg, r)).collect(),
        batch: Some(batch_view(reg, batch)),
        pending_reason: None,
    })
}

/// A new batch converting `rows` (one project, chain and coin pair; at least one row) of
/// `amount_in` atomic units of `from`, with the quote's (`expected_out`, `min_out`) in atomic
/// units of the target: `swapping` at once for a native coin, else `approving` first
/// (SPEC.md section 3, Conversion batch states). With it, the journal entry that moves each
/// row's `amount_in` from its owner's `available` to `locked` (DECISIONS.md section 14).
fn new_batch(
    id: Uuid,
    from: &crate::registry::Asset,
    rows: &[Conversion],
    amount_in: u128,
    (expected_out, min_out): (u128, u128),
    q: &Priced,
    now: i64,
) -> (ConversionBatch, JournalEntry) {
    let first = &rows[0];
    let batch = ConversionBatch {
        id,
        project_id: first.project_id,
        chain: first.chain.clone(),
        from_asset: first.from_asset.clone(),
        to_asset: first.to_asset.clone(),
        amount_in,
        amount_out: 0,
        expected_out,
        min_out,
        slippage_bps: q.slippage_bps,
        amount_usd_cents: q.amount_usd.and_then(crate::market::whole_cents),
        fee_cents: 0,
        market: q.market.clone(),
        status: if from.is_native {
            BatchStatus::Swapping
        } else {
            BatchStatus::Approving
        },
        error_code: None,
        approve_tx_hash: None,
        swap_tx_hash: None,
        rows: rows.iter().map(|r| r.id).collect(),
        attempts: 0,
        created_at: now,
        updated_at: now,
        settled_at: None,
    };
    let legs = rows
        .iter()
        .map(|r| {
            (
                acct(r, &r.from_asset, AccountKind::Available),
                acct(r, &r.from_asset, AccountKind::Locked),
                r.amount_in,
            )
        })
        .collect();
    let lock = move_entry(first.project_id, JournalKind::ConversionLock, id, now, legs);
    (batch, lock)
}

/// Plans a manual conversion at once (SPEC.md section 4, Conversions rule 2): one row per
/// customer holding the coin, pro rata to their available balances, each locked; one batch
/// with the quote `q`. 402 `insufficient_funds` when the free treasury or the customers'
/// balances lack the amount.
pub fn create_manual(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    req: &ConversionRequest,
    q: &Priced,
) -> Result<(Vec<Conversion>, ConversionBatch), ConversionError> {
    if s.project.mode == Mode::Test {
        return Err(ConversionError::TestMode);
    }
    let (_, from, to) = resolve_pair(&s.reg, s, req)?;
    let p = s.project.id;
    let amount = req.amount.get();
    let (free, mut holders) = holdings(ctx, p, &req.chain, &from.symbol)?;
    // Manual conversions draw on customers' balances only (the project's own funds convert
    // automatically, by rule).
    holders.remove(&Uuid::nil());
    let held: u128 = holders.values().fold(0u128, |a, b| a.saturating_add(*b));
    let can = free.min(held);
    if amount > can {
        return Err(ConversionError::InsufficientFunds {
            available: can,
            requested: amount,
            asset: from.symbol.clone(),
            decimals: from.decimals,
        });
    }
    let now = ctx.now_us();
    let batch_id = appliance_storage::sources::new_id();
    let mut rows = Vec::new();
    for (customer, share) in pro_rata(amount, &holders) {
        rows.push(Conversion {
            id: appliance_storage::sources::new_id(),
            project_id: p,
            kind: ConversionKind::Manual,
            payment_id: None,
            receipt_no: None,
            customer_id: Some(customer),
            chain: req.chain.to_string(),
            from_asset: from.symbol.clone(),
            to_asset: to.symbol.clone(),
            amount_in: share,
            amount_out: 0,
            status: ConversionStatus::Converting,
            reason: None,
            batch_id: Some(batch_id),
            tx_hash: None,
            attempts: 0,
            created_at: now,
            updated_at: now,
            settled_at: None,
        });
    }
    let (batch, e) = new_batch(
        batch_id,
        &from,
        &rows,
        amount,
        (q.expected_out, q.min_out),
        q,
        now,
    );
    ctx.post(&e)??;
    for r in &rows {
        ctx.put(r)?;
    }
    ctx.put(&batch)?;
    Ok((rows, batch))
}

// ---------------------------------------------------------------------------------------
// Automatic conversions of invoice payments

/// Most rows one automatic batch takes.
pub const MAX_BATCH_ROWS: usize = 500;

/// Why an automatic row is `skipped` (SPEC.md section 2, Conversion `reason`), or `None`
/// when it queues: the project's rule of the chain as it is now (a later change does not
/// touch the row).
fn skip_reason(
    s: &Scope,
    chain: &Chain,
    asset: &str,
    rule: Option<&ConversionRule>,
) -> Option<&'static str> {
    if s.project.mode == Mode::Test {
        return Some("test_mode");
    }
    if support(chain, s.project.mode).is_err() {
        return Some("unsupported_chain");
    }
    let Some(rule) = rule.filter(|r| r.enabled) else {
        return Some("rule_off");
    };
    if rule.target_asset == asset {
        return Some("already_target");
    }
    if rule.keep_assets.iter().any(|k| k == asset) {
        return Some("kept");
    }
    if chain.asset(&rule.target_asset).is_none() {
        return Some("target_unlisted");
    }
    None
}

/// Writes the automatic row of an invoice payment when it is credited to the project's own
/// funds (DECISIONS.md section 14): `queued` with the rule's target, or `skipped` with the
/// reason. Never refuses: a payment is never delayed or refused because of it.
pub fn queue_payment(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    payment_id: DepositId,
    receipt_no: Option<String>,
    chain: &str,
    asset: &str,
    amount: u128,
) -> Result<Conversion, Fault> {
    let Some(c) = s.reg.chain(chain) else {
        return Err(Fault::invariant(format!(
            "payment on unknown chain {chain}"
        )));
    };
    let rule = stored_rule(ctx, s.project.id, chain)?;
    let reason = skip_reason(s, c, asset, rule.as_ref());
    let now = ctx.now_us();
    let row = Conversion {
        id: appliance_storage::sources::new_id(),
        project_id: s.project.id,
        kind: ConversionKind::Auto,
        payment_id: Some(payment_id.uuid()),
        receipt_no,
        customer_id: None,
        chain: chain.to_string(),
        from_asset: asset.to_string(),
        to_asset: match (&rule, reason) {
            (Some(r), None) => r.target_asset.clone(),
            (Some(r), Some(_)) if !r.target_asset.is_empty() => r.target_asset.clone(),
            _ => asset.to_string(),
        },
        amount_in: amount,
        amount_out: 0,
        status: match reason {
            None => ConversionStatus::Queued,
            Some(_) => ConversionStatus::Skipped,
        },
        reason: reason.map(str::to_string),
        batch_id: None,
        tx_hash: None,
        attempts: 0,
        created_at: now,
        updated_at: now,
        settled_at: None,
    };
    ctx.put(&row)?;
    Ok(row)
}

/// A credited payment was reversed (a reorg): its row, while still `queued`, is
/// `skipped` (`payment_reversed`).
pub fn payment_reversed(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    payment_id: DepositId,
) -> Result<(), Fault> {
    let p = s.project.id;
    let page = ctx.list::<Conversion>(
        &index::prefix(IndexTag::ConversionsByStatus, p, &[b"queued"]),
        None,
        MAX_BATCH_ROWS * 10,
        move |r: &Conversion| r.payment_id == Some(payment_id.uuid()),
    )?;
    let now = ctx.now_us();
    for mut r in page.items {
        r.status = ConversionStatus::Skipped;
        r.reason = Some("payment_reversed".into());
        r.updated_at = now;
        ctx.put(&r)?;
    }
    Ok(())
}

/// Whether queued rows worth `usd` (None: no usable price) whose oldest was written at
/// `oldest_us` are due for a batch at `now_us` (DECISIONS.md section 14: worth at least
/// `min_batch_usd_cents`, or the oldest waited `max_wait_s`).
pub fn batch_due(
    usd: Option<Decimal>,
    oldest_us: i64,
    now_us: i64,
    min_batch_usd_cents: u64,
    max_wait_s: u64,
) -> bool {
    let waited = now_us.saturating_sub(oldest_us) >= (max_wait_s as i64).saturating_mul(1_000_000);
    let worth = usd.is_some_and(|v| !crate::market::below_threshold(Some(v), min_batch_usd_cents));
    waited || worth
}

/// Plans queued automatic rows `ids` (one project, chain, coin pair) into one batch with
/// the quote `q`, once the treasury holds their amount free (the payments are swept):
/// `None` while it does not, or when no row is still queued. Rows are taken oldest first
/// as far as the project's own `available` covers them; a row larger than all of it is
/// `skipped` (`funds_spent`). Each planned row's amount moves from the project's
/// `available` to its `locked`.
pub fn plan_auto(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    ids: &[ConversionId],
    quoted_in: u128,
    q: &Priced,
) -> Result<Option<ConversionBatch>, Fault> {
    let p = s.project.id;
    let mut rows = Vec::new();
    for id in ids.iter().take(MAX_BATCH_ROWS) {
        if let Some(r) = ctx
            .get_in::<Conversion>(p, id.uuid())?
            .filter(|r| r.status == ConversionStatus::Queued)
        {
            rows.push(r);
        }
    }
    let Some(first) = rows.first().cloned() else {
        return Ok(None);
    };
    rows.retain(|r| {
        r.chain == first.chain && r.from_asset == first.from_asset && r.to_asset == first.to_asset
    });
    let (free, holders) = holdings(ctx, p, &first.chain, &first.from_asset)?;
    let own = holders.get(&Uuid::nil()).copied().unwrap_or(0);
    // A row larger than everything the project still has of the coin can never be
    // converted (the merchant paid it out, or it is held for a refund): skipped.
    let now = ctx.now_us();
    let mut kept = Vec::with_capacity(rows.len());
    for mut r in rows {
        if r.amount_in > own {
            r.status = ConversionStatus::Skipped;
            r.reason = Some("funds_spent".into());
            r.updated_at = now;
            ctx.put(&r)?;
        } else {
            kept.push(r);
        }
    }
    // Oldest first, as many as the project's own funds cover.
    let mut total: u128 = 0;
    let mut rows = Vec::with_capacity(kept.len());
    for r in kept {
        if total + r.amount_in <= own {
            total += r.amount_in;
            rows.push(r);
        }
    }
    if rows.is_empty() || total > free {
        return Ok(None);
    }
    let Some(from) = s.reg.asset(&first.chain, &first.from_asset) else {
        return Ok(None);
    };
    let batch_id = appliance_storage::sources::new_id();
    // The quote was read for the rows then queued; fewer planned scale it (the swap is
    // quoted afresh when it is sent).
    let scale = |v: u128| {
        if quoted_in == 0 || quoted_in == total {
            return v;
        }
        u128::try_from(U256::from(v) * U256::from(total) / U256::from(quoted_in)).unwrap_or(v)
    };
    let (batch, e) = new_batch(
        batch_id,
        from,
        &rows,
        total,
        (scale(q.expected_out), scale(q.min_out)),
        q,
        now,
    );
    if ctx.post(&e)?.is_err() {
        return Ok(None);
    }
    for mut r in rows {
        r.status = ConversionStatus::Converting;
        r.batch_id = Some(batch_id);
        r.updated_at = now;
        ctx.put(&r)?;
    }
    ctx.put(&batch)?;
    Ok(Some(batch))
}

// ---------------------------------------------------------------------------------------
// Batch steps (called by the chain worker inside its store transactions)

fn open_batch(
    ctx: &WriteCtx<'_>,
    s: &Scope,
    id: ConversionBatchId,
    status: BatchStatus,
) -> Result<Option<ConversionBatch>, Fault> {
    Ok(ctx
        .get_in::<ConversionBatch>(s.project.id, id.uuid())?
        .filter(|b| b.status == status))
}

fn rows_of(ctx: &WriteCtx<'_>, b: &ConversionBatch) -> Result<Vec<Conversion>, Fault> {
    let mut v = Vec::with_capacity(b.rows.len());
    for id in &b.rows {
        let r = ctx
            .get_in::<Conversion>(b.project_id, *id)?
            .ok_or_else(|| {
                Fault::invariant(format!("conversion row {id} of batch {} is missing", b.id))
            })?;
        v.push(r);
    }
    Ok(v)
}

/// A conversion row as the API shows it (SPEC.md section 2, Conversion).
pub fn conversion_view(reg: &Registry, c: &Conversion) -> ConversionView {
    let fd = reg.decimals(&c.chain, &c.from_asset);
    let td = reg.decimals(&c.chain, &c.to_asset);
    let settled = c.status == ConversionStatus::Converted;
    ConversionView {
        id: c.id,
        object: "conversion",
        kind: c.kind.as_str().into(),
        payment_id: c.payment_id,
        receipt_no: c.receipt_no.clone(),
        customer_id: c.customer_id,
        chain: c.chain.clone(),
        from_asset: c.from_asset.clone(),
        to_asset: c.to_asset.clone(),
        amount_in: c.amount_in.to_string(),
        amount_in_decimal: format_decimal(c.amount_in, fd),
        amount_out: settled.then(|| c.amount_out.to_string()),
        amount_out_decimal: settled.then(|| format_decimal(c.amount_out, td)),
        rate: settled
            .then(|| rate_string(c.amount_in, fd, c.amount_out, td))
            .flatten(),
        status: c.status.as_str().into(),
        reason: c.reason.clone(),
        batch_id: c.batch_id,
        tx_hash: c.tx_hash.clone(),
        explorer_url: c
            .tx_hash
            .as_ref()
            .and_then(|h| reg.chain(&c.chain).map(|x| x.info.tx_url(h))),
        attempts: c.attempts,
        created_at: ts(c.created_at),
        updated_at: ts(c.updated_at),
        settled_at: c.settled_at.map(ts),
    }
}

/// A batch as the API shows it (SPEC.md section 2, Conversion batch).
pub fn batch_view(reg: &Registry, b: &ConversionBatch) -> ConversionBatchView {
    let fd = reg.decimals(&b.chain, &b.from_asset);
    let td = reg.decimals(&b.chain, &b.to_asset);
    let settled = b.status == BatchStatus::Settled;
    let url = |h: &Option<String>| {
        h.as_ref()
            .and_then(|h| reg.chain(&b.chain).map(|x| x.info.tx_url(h)))
    };
    let out = if settled {
        b.amount_out
    } else {
        b.expected_out
    };
    ConversionBatchView {
        id: b.id,
        object: "conversion_batch",
        chain: b.chain.clone(),
        from_asset: b.from_asset.clone(),
        to_asset: b.to_asset.clone(),
        amount_in: b.amount_in.to_string(),
        amount_in_decimal: format_decimal(b.amount_in, fd),
        amount_out: settled.then(|| b.amount_out.to_string()),
        amount_out_decimal: settled.then(|| format_decimal(b.amount_out, td)),
        expected_out: b.expected_out.to_string(),
        expected_out_decimal: format_decimal(b.expected_out, td),
        min_out: b.min_out.to_string(),
        min_out_decimal: format_decimal(b.min_out, td),
        slippage_bps: b.slippage_bps,
        rate: rate_string(b.amount_in, fd, out, td),
        amount_usd: b.amount_usd_cents.map(|c| format_decimal(c as u128, 2)),
        fee_cents: b.fee_cents,
        market: b.market.clone(),
        status: b.status.as_str().into(),
        error_code: b.error_code.clone(),
        approve_tx_hash: b.approve_tx_hash.clone(),
        approve_explorer_url: url(&b.approve_tx_hash),
        swap_tx_hash: b.swap_tx_hash.clone(),
        swap_explorer_url: url(&b.swap_tx_hash),
        rows: b.rows.len() as u64,
        attempts: b.attempts,
        created_at: ts(b.created_at),
        updated_at: ts(b.updated_at),
        settled_at: b.settled_at.map(ts),
    }
}

mod quotes;
use quotes::rate_string;
mod rules;
mod saga;
pub use quotes::*;
pub use rules::*;
pub use saga::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pro_rata_shares_sum_to_the_amount_with_largest_remainders() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        let c = Uuid::from_u128(3);
        let h: BTreeMap<Uuid, u128> = [(a, 1), (b, 1), (c, 1)].into_iter().collect();
        let s = pro_rata(2, &h);
        assert_eq!(s.iter().map(|x| x.1).sum::<u128>(), 2);
        assert_eq!(s.len(), 2);
        let h: BTreeMap<Uuid, u128> = [(a, 700), (b, 200), (c, 100)].into_iter().collect();
        let s = pro_rata(500, &h);
        assert_eq!(s, vec![(a, 350), (b, 100), (c, 50)]);
        let s = pro_rata(10, &h);
        // 7, 2, 1 exactly.
        assert_eq!(s.iter().map(|x| x.1).sum::<u128>(), 10);
        // Never more than a holder has.
        let h: BTreeMap<Uuid, u128> = [(a, 1), (b, u128::MAX / 2)].into_iter().collect();
        let s = pro_rata(u128::MAX / 2 + 1, &h);
        assert_eq!(s.iter().map(|x| x.1).sum::<u128>(), u128::MAX / 2 + 1);
    }

    #[test]
    fn a_batch_is_due_when_worth_enough_or_waited_long_enough() {
        let m = 60_000_000;
        assert!(batch_due(Some(Decimal::new(2000, 2)), 0, 0, 2_000, 900));
        assert!(!batch_due(Some(Decimal::new(1999, 2)), 0, 0, 2_000, 900));
        assert!(!batch_due(None, 0, 14 * m, 2_000, 900));
        assert!(batch_due(None, 0, 15 * m, 2_000, 900));
    }

    #[test]
    fn min_out_takes_the_slippage_off_rounding_down() {
        assert_eq!(min_out(10_000, 50), 9_950);
        assert_eq!(min_out(1, 50), 0);
        assert_eq!(min_out(u128::MAX, 0), u128::MAX);
        assert_eq!(min_out(123_456_789, 10_000), 0);
    }

    #[test]
    fn test_prices_convert_between_scales() {
        // 1 ETH (18) at 3000 into USDT (6) at 1: 3000 USDT.
        let out = at_prices(10u128.pow(18), 18, Decimal::new(300000, 2), 6, Decimal::ONE);
        assert_eq!(out, Some(3_000_000_000));
        // 1500 USDT into ETH at 3000: 0.5 ETH.
        let out = at_prices(1_500_000_000, 6, Decimal::ONE, 18, Decimal::new(3000, 0));
        assert_eq!(out, Some(5 * 10u128.pow(17)));
        assert_eq!(at_prices(1, 6, Decimal::ZERO, 6, Decimal::ONE), None);
    }
}
