//! The ledger's invariants: each journal entry balances; account totals are the replayed
//! journal; the accounts of each (project, chain, asset) sum to zero; no credit-normal
//! account is negative; the wallet holdings of an asset add up to its `deposits` account.

use super::*;

/// A (project, chain, asset).
type AssetKey = (Uuid, String, String);

/// The journal replayed.
pub(super) struct Journal {
    /// Every account's totals as the journal gives them.
    pub replay: BTreeMap<Account, Balance>,
    /// Conversion entries by batch id.
    pub conversions: BTreeMap<Uuid, Vec<JournalEntry>>,
}

/// Replays the journal, reporting each entry that does not balance.
pub(super) fn replay_journal(ctx: &ReadCtx, rep: &mut Report) -> Result<Journal, StoreError> {
    let mut replay: BTreeMap<Account, Balance> = BTreeMap::new();
    let mut conversions: BTreeMap<Uuid, Vec<JournalEntry>> = BTreeMap::new();
    let journal = ctx.open(JOURNAL)?;
    for e in journal.iter()? {
        let (k, v) = e?;
        // Undecodable rows are reported by `check_decodable`.
        let Ok(entry) = decode_keyed::<JournalEntry>(k.value(), v.value()) else {
            continue;
        };
        rep.journal_entries += 1;
        if entry.kind.is_conversion() {
            conversions
                .entry(entry.ref_id)
                .or_default()
                .push(entry.clone());
        }
        if let Err(err) = ledger::check_balanced(&entry) {
            rep.violations.push(format!(
                "journal entry {} does not balance: {err}",
                entry.id
            ));
        }
        for p in &entry.postings {
            let b = replay.entry(p.account.clone()).or_default();
            b.debits = b.debits.saturating_add(p.debit);
            b.credits = b.credits.saturating_add(p.credit);
        }
    }
    Ok(Journal {
        replay,
        conversions,
    })
}

/// The rows of `accounts`.
pub(super) struct Accounts {
    /// The stored totals of every account (holding rows apart).
    pub stored: BTreeMap<Account, Balance>,
    /// Holdings per (project, chain, asset), from the holding rows.
    pub holdings: BTreeMap<AssetKey, u128>,
    /// The open sweeps the holding rows name: sweep -> (wallet, asset).
    pub open_sweeps: BTreeMap<Uuid, (Uuid, String)>,
}

/// Reads `accounts`, reporting a malformed key and a holding row whose wallet is not its
/// customer's wallet on its chain.
pub(super) fn read_accounts(ctx: &ReadCtx, rep: &mut Report) -> Result<Accounts, StoreError> {
    let mut acc = Accounts {
        stored: BTreeMap::new(),
        holdings: BTreeMap::new(),
        open_sweeps: BTreeMap::new(),
    };
    let accounts = ctx.open(ACCOUNTS)?;
    for e in accounts.iter()? {
        let (k, v) = e?;
        if let Some(holding) = ledger::parse_holding_key(k.value()) {
            read_holding(ctx, holding, v.value(), &mut acc, rep);
            continue;
        }
        rep.accounts += 1;
        let Some(a) = Account::from_key(k.value()) else {
            rep.violations.push("malformed account key".into());
            continue;
        };
        let (debits, credits) = v.value();
        acc.stored.insert(a, Balance { debits, credits });
    }
    Ok(acc)
}

/// Adds one holding row (project, customer, chain, asset, wallet) to `acc`.
fn read_holding(
    ctx: &ReadCtx,
    (project, customer, chain, asset, wallet): (Uuid, Uuid, String, String, Uuid),
    value: (u128, u128),
    acc: &mut Accounts,
    rep: &mut Report,
) {
    match ctx.get::<Wallet>(wallet) {
        Ok(Some(w)) if w.project_id == project && w.customer_id == customer && w.chain == chain => {
        }
        Err(StoreError::Corrupt(_)) => {}
        _ => rep.violations.push(format!(
            "holding of {chain}/{asset} names wallet {wallet}, which is not customer \
             {customer}'s wallet on {chain}"
        )),
    }
    let h = ledger::Holding::from_value(value);
    if let Some(sweep) = h.open_sweep {
        acc.open_sweeps.insert(sweep, (wallet, asset.clone()));
    }
    *acc.holdings.entry((project, chain, asset)).or_default() += h.amount;
}

/// Each stored account holds what the journal gives it and is not negative when it is
/// credit-normal; the journal posts to no missing account.
pub(super) fn check_against_journal(
    stored: &BTreeMap<Account, Balance>,
    replay: &BTreeMap<Account, Balance>,
    rep: &mut Report,
) {
    for (a, b) in stored {
        let r = replay.get(a).copied().unwrap_or_default();
        if r != *b {
            rep.violations.push(format!(
                "account {a:?} holds {b:?} but the journal gives {r:?}"
            ));
        }
        if a.kind.is_credit_normal() && b.debits > b.credits {
            rep.violations.push(format!("account {a:?} is negative"));
        }
    }
    for a in replay.keys() {
        if !stored.contains_key(a) {
            rep.violations
                .push(format!("journal posts to missing account {a:?}"));
        }
    }
}

/// The debits and credits of each (project, chain, asset) are equal, totalled exactly (a
/// sum of `u128` can exceed `u128`).
pub(super) fn check_sums(stored: &BTreeMap<Account, Balance>, rep: &mut Report) {
    let mut sums: BTreeMap<AssetKey, (Wide, Wide)> = BTreeMap::new();
    for (a, b) in stored {
        let s = sums
            .entry((a.project_id, a.chain.clone(), a.asset.clone()))
            .or_default();
        s.0.add(b.debits);
        s.1.add(b.credits);
    }
    for (k, (debits, credits)) in sums {
        if debits != credits {
            rep.violations.push(format!(
                "accounts of {k:?} sum to debits {debits:?} against credits {credits:?}, not zero"
            ));
        }
    }
}

/// The holdings of each (project, chain, asset) add up to its `deposits` account, and a
/// `deposits` account that holds money has holdings.
pub(super) fn check_holdings(
    ctx: &ReadCtx,
    stored: &BTreeMap<Account, Balance>,
    mut holdings: BTreeMap<AssetKey, u128>,
    rep: &mut Report,
) -> Result<(), StoreError> {
    let deposits_acct: BTreeMap<AssetKey, u128> = stored
        .iter()
        .filter(|(a, _)| a.kind == AccountKind::Deposits)
        .map(|(a, b)| {
            (
                (a.project_id, a.chain.clone(), a.asset.clone()),
                b.debits.saturating_sub(b.credits),
            )
        })
        .collect();
    add_legacy_holdings(ctx, &mut holdings, rep)?;
    for (k, h) in &holdings {
        let d = deposits_acct.get(k).copied().unwrap_or(0);
        if *h != d {
            rep.violations.push(format!(
                "holdings of {k:?} total {h} but the deposits account holds {d}"
            ));
        }
    }
    for (k, d) in &deposits_acct {
        if *d != 0 && !holdings.contains_key(k) {
            rep.violations.push(format!(
                "deposits account {k:?} holds {d} with no wallet holdings"
            ));
        }
    }
    Ok(())
}

/// Holdings of a store not yet migrated to schema 4 (wallet ‖ asset -> amount), or left
/// behind by the migration because their wallet is missing, count as schema 3 counts them.
fn add_legacy_holdings(
    ctx: &ReadCtx,
    holdings: &mut BTreeMap<AssetKey, u128>,
    rep: &mut Report,
) -> Result<(), StoreError> {
    let hold = match ctx.open(LEGACY_HOLDINGS) {
        Ok(hold) => hold,
        Err(StoreError::Redb(redb::Error::TableDoesNotExist(_))) => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in hold.iter()? {
        let (k, v) = e?;
        let kb = k.value();
        let wallet = kb.get(..16).and_then(|w| Uuid::from_slice(w).ok());
        let asset = String::from_utf8_lossy(kb.get(16..).unwrap_or_default()).to_string();
        match wallet.and_then(|w| ctx.get::<Wallet>(w).ok().flatten()) {
            Some(w) => *holdings.entry((w.project_id, w.chain, asset)).or_default() += v.value(),
            None => rep.violations.push(format!(
                "holding {} (schema 3 layout) is for a missing wallet",
                hex::encode(kb)
            )),
        }
    }
    Ok(())
}

/// A 256-bit unsigned total, enough for any sum of `u128` amounts here.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wide {
    pub(super) hi: u128,
    pub(super) lo: u128,
}

impl Wide {
    pub(super) fn add(&mut self, v: u128) {
        let (lo, carry) = self.lo.overflowing_add(v);
        self.lo = lo;
        self.hi += u128::from(carry);
    }
}
