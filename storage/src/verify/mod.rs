//! `appliance verify`: recomputes the ledger from the journal and checks every invariant.

use std::collections::BTreeMap;

use redb::{Key, ReadableTable, TableDefinition, TableHandle};
use uuid::Uuid;

use crate::codec::{decode, decode_keyed};
use crate::ledger::{self, Account, AccountKind, Balance, JournalEntry, JournalKind};
use crate::records::{
    BatchStatus, BillingAccount, BillingEntry, ConversionBatch, Deposit, DepositStatus, EntryKind,
    Invoice, Payout, PayoutStatus, Row, Sweep, SweepStatus, Wallet, WebhookDelivery,
    WebhookEndpoint,
};
use crate::schema::*;
use crate::{ReadCtx, ReadOps, Reader, StoreError};

mod balances;
mod billing;
mod events;
mod refunds;
use billing::check_billing;
pub use billing::{funding_cents, payment_fee_cents};

/// What `verify` found.
#[derive(Debug, Default)]
pub struct Report {
    pub journal_entries: u64,
    pub accounts: u64,
    pub events: u64,
    pub rows_checked: u64,
    /// Human-readable descriptions of every violation; empty means all invariants hold.
    pub violations: Vec<String>,
}

/// Checks: each journal entry balances; account totals equal the replayed journal; the sum
/// of debits minus credits per (project, chain, asset) is zero; no `available` or `locked`
/// account is negative; every index entry points at a row that lists it; confirmed deposits
/// carry their ledger entry; per-wallet holdings add up to the `deposits` account; event
/// sequences are contiguous from 1 per project; conversion batches match their rows and
/// their lock, settlement or release entries; refund claims follow their payouts and the
/// project's own `locked` is what its open payouts, conversions and refund claims hold
/// ([`refunds::check_refund_holds`]); the chain adapters' tables are consistent
/// ([`crate::chain_state::check`]).
pub fn verify(ctx: &ReadCtx) -> Result<Report, StoreError> {
    let mut rep = Report::default();
    check_decodable(ctx, &mut rep)?;
    check_unique_layout(ctx, &mut rep)?;
    check_index_layout(ctx, &mut rep)?;
    let journal = balances::replay_journal(ctx, &mut rep)?;
    let accounts = balances::read_accounts(ctx, &mut rep)?;
    check_open_sweeps(ctx, &accounts.open_sweeps, &mut rep)?;
    balances::check_against_journal(&accounts.stored, &journal.replay, &mut rep);
    balances::check_sums(&accounts.stored, &mut rep);
    balances::check_holdings(ctx, &accounts.stored, accounts.holdings, &mut rep)?;
    check_deposits(ctx, &mut rep)?;
    check_webhooks(ctx, &mut rep)?;
    // Chain-adapter state (live EVM sender and watcher).
    let (rows, bad) = crate::chain_state::check(ctx)?;
    rep.rows_checked += rows;
    rep.violations.extend(bad);
    check_conversions(ctx, &journal.conversions, &mut rep)?;
    refunds::check_refund_holds(ctx, &accounts.stored, &journal.conversions, &mut rep)?;
    check_counters(ctx, &mut rep)?;
    check_billing(ctx, &mut rep)?;
    events::check_events(ctx, &mut rep)?;
    events::check_event_runs(ctx, &mut rep)?;
    events::check_list_runs(ctx, &mut rep)?;
    Ok(rep)
}

/// Confirmed (and orphaned) deposits carry a journal entry that exists; deposits are
/// indexed.
fn check_deposits(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    each_row(ctx, rep, |rep, d: Deposit| {
        if matches!(d.status, DepositStatus::Confirmed | DepositStatus::Orphaned) {
            match d.ledger_tx_id {
                Some(id) if ctx.journal_entry(id).is_ok_and(|e| e.is_some()) => {}
                _ => rep.violations.push(format!(
                    "deposit {} is {:?} without its ledger entry",
                    d.id, d.status
                )),
            }
        }
        check_indexed(ctx, &d, rep)
    })
}

/// Webhooks: rows are indexed; a delivery's endpoint exists (or is being purged after a
/// delete); open deliveries are scheduled.
fn check_webhooks(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    each_row(ctx, rep, |rep, ep: WebhookEndpoint| {
        check_indexed(ctx, &ep, rep)
    })?;
    let purge = crate::index::prefix(crate::index::IndexTag::WebhookPurge, Uuid::nil(), &[]);
    let purging: Vec<Uuid> = ctx
        .index_range(&purge, &crate::index::prefix_end(&purge), usize::MAX, false)?
        .iter()
        .map(|k| crate::index::id_of(k))
        .collect();
    each_row(ctx, rep, |rep, d: WebhookDelivery| {
        check_indexed(ctx, &d, rep)?;
        let endpoint_present = match ctx.get::<WebhookEndpoint>(d.endpoint_id) {
            Ok(e) => e.is_some(),
            // Present, but undecodable: reported by `check_decodable`.
            Err(StoreError::Corrupt(_)) => true,
            Err(e) => return Err(e),
        };
        if !endpoint_present && !purging.contains(&d.endpoint_id) {
            rep.violations.push(format!(
                "webhook delivery {} belongs to missing endpoint {}",
                d.id, d.endpoint_id
            ));
        }
        if d.status.is_open() && d.next_attempt_at.is_none() {
            rep.violations.push(format!(
                "open webhook delivery {} has no next attempt",
                d.id
            ));
        }
        Ok(())
    })?;
    Ok(())
}

/// Counted indexes agree with their counters.
fn check_counters(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    let mut counted: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for def in std::iter::once(INDEX).chain(SPLIT_INDEXES.iter().map(|(_, d)| *d)) {
        let idx = ctx.open(def)?;
        for e in idx.iter()? {
            let (k, _) = e?;
            if let Some(c) = crate::index::counter_key(k.value()) {
                *counted.entry(c.to_vec()).or_default() += 1;
            }
        }
    }
    let counters = ctx.open(COUNTERS)?;
    for e in counters.iter()? {
        let (k, v) = e?;
        let actual = counted.remove(k.value()).unwrap_or(0);
        if actual != v.value() {
            rep.violations.push(format!(
                "counter {} holds {} but its index has {actual} keys",
                hex::encode(k.value()),
                v.value()
            ));
        }
    }
    for (k, n) in counted {
        rep.violations.push(format!(
            "index {} has {n} keys and no counter",
            hex::encode(k)
        ));
    }
    Ok(())
}

/// Conversion batches agree with their rows and their journal entries (DECISIONS.md
/// section 14): the rows exist, are of the batch's project and coin pair and sum to its
/// `amount_in`; an open or settled batch locked exactly that (`conversion_lock`); a settled
/// one moved it out of the treasury of `from_asset` and its `amount_out` into the owners'
/// `available` of `to_asset`, row by row (`conversion_settle`); a failed one released
/// it (`conversion_release`).
fn check_conversions(
    ctx: &ReadCtx,
    entries: &BTreeMap<Uuid, Vec<JournalEntry>>,
    rep: &mut Report,
) -> Result<(), StoreError> {
    use crate::records::{BatchStatus, Conversion, ConversionBatch, ConversionStatus};
    let batches = ctx.open(CONVERSION_BATCHES)?;
    let sum = |e: &JournalEntry, kind: AccountKind, asset: &str, debit: bool| -> u128 {
        e.postings
            .iter()
            .filter(|p| p.account.kind == kind && p.account.asset == asset)
            .fold(0u128, |a, p| {
                a.saturating_add(if debit { p.debit } else { p.credit })
            })
    };
    for e in batches.iter()? {
        let (_, v) = e?;
        let Ok(b) = decode::<ConversionBatch>(v.value()) else {
            continue;
        };
        let mut total_in: u128 = 0;
        let mut total_out: u128 = 0;
        for id in &b.rows {
            match ctx.get::<Conversion>(*id)? {
                Some(r)
                    if r.project_id == b.project_id
                        && r.chain == b.chain
                        && r.from_asset == b.from_asset
                        && r.to_asset == b.to_asset
                        && r.batch_id == Some(b.id) =>
                {
                    total_in = total_in.saturating_add(r.amount_in);
                    total_out = total_out.saturating_add(r.amount_out);
                    let want = match b.status {
                        BatchStatus::Settled => ConversionStatus::Converted,
                        BatchStatus::Failed => ConversionStatus::Failed,
                        _ => ConversionStatus::Converting,
                    };
                    if r.status != want {
                        rep.violations.push(format!(
                            "conversion {} is {} in a {} batch {}",
                            r.id,
                            r.status.as_str(),
                            b.status.as_str(),
                            b.id
                        ));
                    }
                }
                _ => rep.violations.push(format!(
                    "conversion batch {} lists row {id}, which is missing or not its own",
                    b.id
                )),
            }
        }
        if total_in != b.amount_in {
            rep.violations.push(format!(
                "conversion batch {} converts {} but its rows sum to {total_in}",
                b.id, b.amount_in
            ));
        }
        let of = |kind: JournalKind| {
            entries
                .get(&b.id)
                .map(|v| v.iter().filter(|e| e.kind == kind).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let locks = of(JournalKind::ConversionLock);
        let locked: u128 = locks
            .iter()
            .map(|e| sum(e, AccountKind::Locked, &b.from_asset, false))
            .sum();
        if locks.len() != 1 || locked != b.amount_in {
            rep.violations.push(format!(
                "conversion batch {} has {} lock entries locking {locked}, expected one of {}",
                b.id,
                locks.len(),
                b.amount_in
            ));
        }
        match b.status {
            BatchStatus::Settled => {
                let settles = of(JournalKind::ConversionSettle);
                let ok = settles.len() == 1
                    && sum(settles[0], AccountKind::Treasury, &b.from_asset, false) == b.amount_in
                    && sum(settles[0], AccountKind::Locked, &b.from_asset, true) == b.amount_in
                    && sum(settles[0], AccountKind::Treasury, &b.to_asset, true) == b.amount_out
                    && sum(settles[0], AccountKind::Available, &b.to_asset, false) == b.amount_out
                    && total_out == b.amount_out;
                if !ok {
                    rep.violations.push(format!(
                        "settled conversion batch {} does not match its settlement entry (in {}, out {}, rows out {total_out})",
                        b.id, b.amount_in, b.amount_out
                    ));
                }
            }
            BatchStatus::Failed => {
                let rel = of(JournalKind::ConversionRelease);
                if rel.len() != 1
                    || sum(rel[0], AccountKind::Locked, &b.from_asset, true) != b.amount_in
                {
                    rep.violations.push(format!(
                        "failed conversion batch {} did not release exactly {}",
                        b.id, b.amount_in
                    ));
                }
            }
            BatchStatus::Approving | BatchStatus::Swapping => {}
        }
    }
    Ok(())
}

/// No address or transfer key is left in a layout of before schema 16 in `unique`
/// ([`crate::index::IndexTag::UniqueAddress`], `UniqueAddressChain`, `UniqueDepositTx`,
/// `UniqueDepositTxHash`): opening the store moves every one to its digest key
/// ([`crate::index::address_key`], [`crate::index::transfer_key`]); one that did not have
/// the expected shape stays and is reported here (lookups by address or transfer would miss
/// it). One violation per key, naming the wallet or deposit it points to.
fn check_unique_layout(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    use crate::index::IndexTag;
    let unique = ctx.open(UNIQUE)?;
    for (tag, key, row, schema) in [
        (IndexTag::UniqueAddress, "an address", "wallet", 4),
        (IndexTag::UniqueAddressChain, "an address", "wallet", 15),
        (IndexTag::UniqueDepositTx, "a transfer", "deposit", 15),
        (IndexTag::UniqueDepositTxHash, "a transfer", "deposit", 15),
    ] {
        let tag = tag as u8;
        for e in unique.range::<&[u8]>([tag].as_slice()..[tag + 1].as_slice())? {
            let (k, v) = e?;
            rep.violations.push(format!(
                "unique key {} is {key} key ({row} {}) in a layout of schema version {schema} or older",
                hex::encode(k.value()),
                Uuid::from_u128(v.value()),
            ));
        }
    }
    Ok(())
}

/// Each wallet's open sweep of an asset is named by its holding row (schema 8,
/// [`ledger::Holding`]): every sweep a holding row names is an open sweep of that wallet and
/// asset, and every open sweep is named by its wallet's holding row of its asset (a sweep
/// that is not named is never added to by later deposits: a second one would open beside
/// it). No open-sweep key of schema 7 is left in `unique` (the schema 8 migration leaves
/// one whose wallet it cannot find).
fn check_open_sweeps(
    ctx: &ReadCtx,
    named: &BTreeMap<Uuid, (Uuid, String)>,
    rep: &mut Report,
) -> Result<(), StoreError> {
    for (sweep, (wallet, asset)) in named {
        match ctx.get::<Sweep>(*sweep) {
            Ok(Some(sw))
                if sw.status == SweepStatus::Open
                    && sw.wallet_id == *wallet
                    && sw.asset == *asset => {}
            // Undecodable rows are reported by `check_decodable`.
            Err(StoreError::Corrupt(_)) => {}
            _ => rep.violations.push(format!(
                "holding of wallet {wallet} in {asset} names {sweep} as its open sweep, which \
                 is not an open sweep of that wallet and asset"
            )),
        }
    }
    let sweeps = ctx.open(SWEEPS)?;
    for e in sweeps.iter()? {
        let (k, v) = e?;
        let Ok(sw) = decode_keyed::<Sweep>(k.value(), v.value()) else {
            continue;
        };
        if sw.status == SweepStatus::Open && !named.contains_key(&sw.id) {
            rep.violations.push(format!(
                "open sweep {} is not its wallet's open sweep of {} (no holding row names it)",
                sw.id, sw.asset
            ));
        }
    }
    let tag = crate::index::IndexTag::UniqueOpenSweep as u8;
    let unique = ctx.open(UNIQUE)?;
    for e in unique.range::<&[u8]>([tag].as_slice()..[tag + 1].as_slice())? {
        let (k, v) = e?;
        rep.violations.push(format!(
            "unique key {} (sweep {}) is an open-sweep key of schema version 7",
            hex::encode(k.value()),
            Uuid::from_u128(v.value())
        ));
    }
    Ok(())
}

/// Schema 7's index tables hold only their own keys: no key of a tag that has a table of
/// its own ([`SPLIT_INDEXES`]), of the event tags or of a list kept as runs
/// ([`RUN_INDEXES`]) is left in `index` (the schema 7 migration leaves a key there when it
/// does not have its tag's shape), and each table of [`SPLIT_INDEXES`] holds only keys of
/// its tag, none when schema 15 keeps that tag as runs. One violation per tag and table,
/// with the number of keys (and the first one).
fn check_index_layout(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    use crate::index::IndexTag;
    let idx = ctx.open(INDEX)?;
    let moved = SPLIT_INDEXES
        .iter()
        .map(|(t, _)| *t)
        .chain([IndexTag::EventsByType, IndexTag::EventsByResource])
        .chain([IndexTag::DepositsByCustomer, IndexTag::SweepsByWallet])
        .chain(RUN_INDEXES.iter().map(|r| r.tag));
    for tag in moved {
        let tag = tag as u8;
        let mut keys = idx.range::<&[u8]>([tag].as_slice()..[tag + 1].as_slice())?;
        if let Some(first) = keys.next() {
            let n = 1 + keys.count();
            rep.violations.push(format!(
                "index holds {n} keys of tag {tag} that schema version 7, 9, 14 or 15 keeps elsewhere (first: {})",
                hex::encode(first?.0.value())
            ));
        }
    }
    for (tag, def) in SPLIT_INDEXES {
        let t = ctx.open(def)?;
        let tag = tag as u8;
        if run_index(tag).is_some() {
            // Schema 15 keeps this tag's keys as runs: the table stays, empty.
            let n = t.iter()?.count();
            if n > 0 {
                rep.violations.push(format!(
                    "table {} holds {n} keys that schema version 15 keeps as runs",
                    def.name()
                ));
            }
            continue;
        }
        let mut n = 0u64;
        let mut first: Option<Vec<u8>> = None;
        let below = t.range::<&[u8]>(..[tag].as_slice())?;
        let above = t.range::<&[u8]>([tag + 1].as_slice()..)?;
        for e in below.chain(above) {
            let (k, _) = e?;
            n += 1;
            first.get_or_insert_with(|| k.value().to_vec());
        }
        if let Some(first) = first {
            rep.violations.push(format!(
                "table {} holds {n} keys of another tag than {tag} (first: {})",
                def.name(),
                hex::encode(first)
            ));
        }
    }
    Ok(())
}

/// Every row of every record table ([`crate::schema::for_each_record_table`]) decodes as
/// this build reads it, in either encoding; each one that does not is a violation (the API
/// passes such rows over in lists, the event stream and the webhook dispatcher, so they
/// must be reported here).
fn check_decodable(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    fn table<K: Key + KeyText + 'static, T: crate::codec::Record>(
        ctx: &ReadCtx,
        def: TableDefinition<K, &[u8]>,
        rep: &mut Report,
    ) -> Result<(), StoreError> {
        let t = ctx.open(def)?;
        for e in t.iter()? {
            let (k, v) = e?;
            if let Err(err) = K::decode::<T>(k.value(), v.value()) {
                rep.violations.push(format!(
                    "{} row {} cannot be decoded: {err}",
                    def.name(),
                    K::text(k.value())
                ));
            }
        }
        Ok(())
    }
    macro_rules! check {
        ($def:ident, $ty:ty) => {
            table::<_, $ty>(ctx, $def, rep)?
        };
    }
    crate::schema::for_each_record_table!(check);
    Ok(())
}

/// How `verify` names a row by its key.
trait KeyText: Key {
    fn text(k: Self::SelfType<'_>) -> String;
    /// Decodes the value stored under `k` as its table's readers do: under a row id,
    /// through [`decode_keyed`].
    fn decode<T: crate::codec::Record>(_k: Self::SelfType<'_>, v: &[u8]) -> Result<T, StoreError> {
        decode(v)
    }
}
impl KeyText for u128 {
    fn text(k: u128) -> String {
        Uuid::from_u128(k).to_string()
    }
    fn decode<T: crate::codec::Record>(k: u128, v: &[u8]) -> Result<T, StoreError> {
        decode_keyed(k, v)
    }
}
impl KeyText for (u128, u64) {
    fn text((p, seq): (u128, u64)) -> String {
        format!("{}/{seq}", Uuid::from_u128(p))
    }
}
impl KeyText for &[u8] {
    fn text(k: &[u8]) -> String {
        hex::encode(k)
    }
}

/// Calls `f` with every row of `R`'s table that decodes; a row that does not is left to
/// `check_decodable`, which reports it.
fn decoded_rows<R: Row>(
    ctx: &ReadCtx,
    mut f: impl FnMut(R) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let t = ctx.open(R::TABLE)?;
    for e in t.iter()? {
        let (k, v) = e?;
        if let Ok(row) = decode_keyed::<R>(k.value(), v.value()) {
            f(row)?;
        }
    }
    Ok(())
}

/// [`decoded_rows`], each row counted in `rows_checked`.
fn each_row<R: Row>(
    ctx: &ReadCtx,
    rep: &mut Report,
    mut f: impl FnMut(&mut Report, R) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    decoded_rows(ctx, |row| {
        rep.rows_checked += 1;
        f(rep, row)
    })
}

fn check_indexed<R: Row>(ctx: &ReadCtx, row: &R, rep: &mut Report) -> Result<(), StoreError> {
    for k in row.index_keys() {
        let runs = crate::id_runs::run_of_key(&k);
        let listed = if let Some(runs) = runs {
            crate::id_runs::contains(&ctx.open(runs.table)?, &k)?
        } else {
            ctx.open(index_table_of(&k))?.get(k.as_slice())?.is_some()
        };
        if !listed {
            rep.violations
                .push(format!("row {} is missing an index entry", row.id()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod undecodable_tests;
