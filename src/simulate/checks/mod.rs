//! The invariants, checked after every step, at every settling and after every restart.
//!
//! After every step:
//! * every tenant's new events follow its last one by exactly one sequence number (none
//!   twice, none skipped, none lost across a crash);
//! * every deposit row is a transfer a payer made, to that wallet, of that amount, and one
//!   transfer has at most one deposit that is not `failed` or `orphaned`;
//! * per project and (chain, asset) the accounts sum to zero, no `available` or `locked`
//!   balance is negative, and every customer's `available` and `locked` and every
//!   project's `receivable` equal the model's, which applies the ledger's rules to the
//!   money each event moves, in order ([`super::model::Model::apply`]);
//! * no payout has been paid twice (its own address holds 0 or its amount), and a canceled
//!   or rejected one not at all;
//! * after a worker step whose watcher caught up with nothing changing under it, the
//!   deposits of that chain are exactly what the chain holds up to the watcher's block:
//!   every transfer in a canonical block is `detected` or `confirmed` by its depth, and
//!   nothing else is (a reorged credit left in place, or a transfer missed, fails here).
//!
//! At every settling (faults off, blocks mined until nothing is in flight): the same chain
//! check at the head; no deposit still `detected`; every deposit address holds on chain
//! exactly what the ledger's holdings say, and the master wallet exactly the treasury's
//! tokens; every confirmed payout paid once, every other one not at all.

use std::collections::{BTreeMap, BTreeSet};

use appliance_chains::evm::{Address, B256, U256};
use uuid::Uuid;

use appliance_storage::ledger::AccountKind;
use appliance_storage::records::{Customer, Deposit, Payout, Wallet};
use appliance_storage::{ReadOps, ScanOps};

use super::model::{DepositSeen, Movement, PayoutM, PayoutMoney, Position};
use super::{Sim, CHAINS};
use crate::workers::chain::store::load_watch;

/// Rounds of mining and worker steps a settling may take before it is a failure (nothing
/// in flight may stay in flight with a healthy node).
const SETTLE_ROUNDS: u64 = 400;

/// A deposit row as the harness keeps it.
fn seen(d: &Deposit) -> Option<DepositSeen> {
    Some(DepositSeen {
        id: d.id,
        tx_hash: d.tx_hash.parse::<B256>().ok()?,
        to: d.to_address.parse::<Address>().ok()?,
        invoice: d.invoice_id,
        status: d.status.as_str().to_string(),
        amount: d.amount,
        asset: d.asset.clone(),
        wallet: d.wallet_id,
        block: d.block_number,
    })
}

mod settle;

impl Sim {
    /// Everything checked after a step.
    pub(super) async fn after_step(&mut self) -> anyhow::Result<()> {
        self.read_events().await?;
        self.refresh_open().await?;
        for b in self.model.settle_live() {
            self.fail(b);
        }
        for chain in std::mem::take(&mut self.pending_sync) {
            let height = self.watcher_height(chain).await?;
            if let Some(h) = height {
                self.check_chain_deposits(chain, h, false).await?;
            }
        }
        self.check_ledger().await?;
        self.check_payouts_paid_once(false).await;
        Ok(())
    }

    /// Reads every tenant's events after the last one read: each must be the next
    /// sequence. The rows of the deposits and payouts they name are read back into the
    /// model, and the money each event moves is applied to the model's balances in order.
    pub(in crate::simulate) async fn read_events(&mut self) -> anyhow::Result<()> {
        for ti in 0..self.model.tenants.len() {
            let (project, mut last) = (
                self.model.tenants[ti].id,
                self.model.tenants[ti].last_sequence,
            );
            loop {
                let page = self.read(move |r| r.log_after(project, last, 500)).await?;
                let n = page.items.len();
                let mut events = Vec::new();
                for ev in page.items {
                    if ev.sequence != last + 1 {
                        self.fail(format!(
                            "events of {project}: sequence {} follows {last}",
                            ev.sequence
                        ));
                        return Ok(());
                    }
                    last = ev.sequence;
                    if let Ok(id) = ev.resource_id.parse::<Uuid>() {
                        events.push((ev.event_type, id));
                    }
                }
                self.model.tenants[ti].last_sequence = last;
                let deposits = events
                    .iter()
                    .filter(|(t, _)| t.starts_with("deposit."))
                    .map(|(_, id)| *id)
                    .collect();
                let payouts = events
                    .iter()
                    .filter(|(t, _)| t.starts_with("payout."))
                    .map(|(_, id)| *id)
                    .collect();
                for (ty, id) in &events {
                    if ty.starts_with("invoice.") {
                        self.invoices_to_read.insert(*id);
                    }
                }
                let (ds, ps) = self.load_rows(deposits, payouts).await?;
                for (ty, id) in &events {
                    let m = match ty.as_str() {
                        "deposit.confirmed" | "deposit.orphaned" => {
                            let Some(d) = ds.get(id) else { continue };
                            if d.funding {
                                continue;
                            }
                            let k = (
                                d.project_id,
                                d.customer_id,
                                d.chain.clone(),
                                d.asset.clone(),
                            );
                            if ty == "deposit.confirmed" {
                                Movement::Credited(k, d.amount)
                            } else {
                                Movement::Reversed(k, d.amount)
                            }
                        }
                        "payout.created" | "payout.confirmed" | "payout.failed"
                        | "payout.canceled" | "payout.rejected" => {
                            let Some(p) = ps.get(id) else { continue };
                            let k = (
                                p.project_id,
                                p.customer_id.unwrap_or_default(),
                                p.chain.clone(),
                                p.asset.clone(),
                            );
                            let was = self.model.payout_money.get(id).copied();
                            let (m, now) = match (ty.as_str(), was) {
                                ("payout.created", _) => {
                                    (Movement::Locked(k, p.amount), PayoutMoney::Locked)
                                }
                                ("payout.confirmed", Some(PayoutMoney::Released)) => {
                                    (Movement::Repaid(k, p.amount), PayoutMoney::Paid)
                                }
                                ("payout.confirmed", _) => {
                                    (Movement::Paid(k, p.amount), PayoutMoney::Paid)
                                }
                                (_, Some(PayoutMoney::Paid)) => {
                                    (Movement::Unpaid(k, p.amount), PayoutMoney::Released)
                                }
                                _ => (Movement::Released(k, p.amount), PayoutMoney::Released),
                            };
                            self.model.payout_money.insert(*id, now);
                            m
                        }
                        _ => continue,
                    };
                    if let Err(e) = self.model.apply(&m) {
                        self.fail(format!("{ty} of {id}: {e}"));
                    }
                }
                if n < 500 {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Reads deposit and payout rows into the model; returns them by id.
    pub(in crate::simulate) async fn load_rows(
        &mut self,
        deposits: Vec<Uuid>,
        payouts: Vec<Uuid>,
    ) -> anyhow::Result<(BTreeMap<Uuid, Deposit>, BTreeMap<Uuid, Payout>)> {
        if deposits.is_empty() && payouts.is_empty() {
            return Ok(Default::default());
        }
        let (ds, ps) = self
            .read(move |r| {
                let mut ds = BTreeMap::new();
                for id in deposits {
                    if let Some(d) = r.get::<Deposit>(id)? {
                        ds.insert(id, d);
                    }
                }
                let mut ps = BTreeMap::new();
                for id in payouts {
                    if let Some(p) = r.get::<Payout>(id)? {
                        ps.insert(id, p);
                    }
                }
                Ok((ds, ps))
            })
            .await?;
        for d in ds.values() {
            self.record_deposit(d);
        }
        for p in ps.values() {
            match self.model.payouts.contains_key(&p.id) {
                true => self
                    .model
                    .set_payout_status(p.id, p.status.as_str(), self.step),
                // A payout the appliance made itself (a checkout refund).
                false => {
                    let chain = CHAINS.iter().map(|(c, _)| *c).find(|c| *c == p.chain);
                    if let (Some(chain), Ok(to)) = (chain, p.to_address.parse::<Address>()) {
                        self.model.add_payout(
                            PayoutM {
                                id: p.id,
                                project: p.project_id,
                                customer: p.customer_id.unwrap_or_default(),
                                chain,
                                asset: p.asset.clone(),
                                amount: p.amount,
                                to,
                                idempotency_key: String::new(),
                                asked_us: 0,
                                status: p.status.as_str().to_string(),
                            },
                            self.step,
                        );
                    }
                }
            }
        }
        Ok((ds, ps))
    }

    /// Reads again the payouts not yet final and the deposits still `detected` (a change
    /// without an event would otherwise go unseen until the next full scan).
    pub(in crate::simulate) async fn refresh_open(&mut self) -> anyhow::Result<()> {
        let payouts: Vec<Uuid> = self.model.open_payouts().map(|p| p.id).collect();
        let deposits: Vec<Uuid> = self.model.detected().copied().collect();
        self.load_rows(deposits, payouts).await?;
        // An invoice's payments are not announced one event per deposit: the deposits of
        // an invoice are read again after an event about the invoice, and when the chain
        // and the model disagree about one of its payments (mined without a live deposit,
        // or a live deposit no longer mined there).
        let mut stale: BTreeSet<Uuid> = BTreeSet::new();
        let recent = self.model.recent_transfers(self.step, false);
        for (id, c) in &self.world.chains {
            let chain = c.state().await;
            for t in recent.iter().filter(|t| t.chain == *id) {
                let Some(i) = t.invoice else { continue };
                let mined = chain.receipt(t.hash).map(|r| r.block_number);
                if mined != self.model.live(&t.hash).map(|(_, b)| b) {
                    stale.insert(i);
                }
            }
        }
        stale.append(&mut self.invoices_to_read);
        let invoices: Vec<(Uuid, Uuid)> = stale
            .into_iter()
            .filter_map(|i| self.model.invoices.get(&i).map(|inv| (inv.project, i)))
            .collect();
        if invoices.is_empty() {
            return Ok(());
        }
        let rows = self
            .read(move |r| {
                let mut out = Vec::new();
                for (p, i) in invoices {
                    let prefix = appliance_storage::index::prefix(
                        appliance_storage::index::IndexTag::DepositsByInvoice,
                        p,
                        &[i.as_bytes()],
                    );
                    out.extend(r.list::<Deposit>(&prefix, None, 1_000, |_| true)?.items);
                }
                Ok(out)
            })
            .await?;
        for d in rows {
            self.record_deposit(&d);
        }
        Ok(())
    }

    /// Records a deposit row in the model, failing on what is wrong with it.
    pub(in crate::simulate) fn record_deposit(&mut self, d: &Deposit) {
        match seen(d) {
            Some(s) => {
                for b in self.model.set_deposit(s) {
                    self.fail(b);
                }
            }
            None => self.fail(format!("deposit {} has tx hash {:?}", d.id, d.tx_hash)),
        }
    }

    /// The watcher's stored block on `chain`, when it is the chain's canonical block there
    /// (after a worker step that caught up with nothing changing under it, it must be).
    pub(in crate::simulate) async fn watcher_height(
        &mut self,
        chain: &'static str,
    ) -> anyhow::Result<Option<u64>> {
        let key = chain.to_string();
        let ws = self.read(move |r| load_watch(r, &key)).await?;
        let Some(h) = ws.cursor.height else {
            return Ok(None);
        };
        let canonical = self.world.chains[chain]
            .state()
            .await
            .block(h)
            .map(|b| b.hash);
        if canonical != ws.cursor.hash_at(h) {
            self.fail(format!(
                "{chain}: the watcher caught up at block {h} {:?}, which is not the chain's ({canonical:?})",
                ws.cursor.hash_at(h)
            ));
            return Ok(None);
        }
        Ok(Some(h))
    }

    /// The deposits of `chain` are exactly the payers' transfers in canonical blocks up to
    /// `height`: `confirmed` at the chain's confirmations, `detected` below them.
    pub(in crate::simulate) async fn check_chain_deposits(
        &mut self,
        chain: &'static str,
        height: u64,
        all: bool,
    ) -> anyhow::Result<()> {
        let conf = u64::from(self.confirmations(chain));
        let mut bad = Vec::new();
        {
            let c = self.world.chains[chain].state().await;
            for t in self
                .model
                .recent_transfers(self.step, all)
                .into_iter()
                .filter(|t| t.chain == chain)
            {
                let mined = c
                    .receipt(t.hash)
                    .filter(|r| r.success && r.block_number <= height)
                    .map(|r| r.block_number);
                let want = mined.map(|b| {
                    if height + 1 - b >= conf {
                        "confirmed"
                    } else {
                        "detected"
                    }
                });
                let have = self
                    .model
                    .live(&t.hash)
                    .and_then(|(id, _)| self.model.deposit(id));
                match (want, have) {
                    (None, None) => {}
                    (Some(w), Some(d)) if d.status == w && Some(d.block) == mined => {}
                    // The chain no longer holds the block (pruned far below any reorg the
                    // simulation makes): a confirmed deposit there stays final.
                    (None, Some(d)) if d.block <= c.pruned_to() && d.status == "confirmed" => {}
                    (w, d) => bad.push(format!(
                        "{chain} at block {height}: transfer {:#x} ({} {}) mined in {mined:?} should be {} but its deposit is {}",
                        t.hash,
                        t.amount,
                        t.asset,
                        w.unwrap_or("absent"),
                        d.map(|d| format!("{} (block {}, id {})", d.status, d.block, d.id))
                            .unwrap_or_else(|| "absent".into())
                    )),
                }
            }
        }
        for b in bad {
            self.fail(b);
        }
        Ok(())
    }

    /// Ledger sums, and every customer's `available` and `locked` and every project's
    /// `receivable` against the model.
    pub(in crate::simulate) async fn check_ledger(&mut self) -> anyhow::Result<()> {
        let projects: Vec<Uuid> = self.model.tenants.iter().map(|t| t.id).collect();
        let accounts = self
            .read(move |r| {
                let mut all = Vec::new();
                for p in projects {
                    all.extend(r.project_accounts(p)?);
                }
                Ok(all)
            })
            .await?;
        let mut sums: BTreeMap<(Uuid, String, String), i128> = BTreeMap::new();
        let mut have: BTreeMap<Position, (u128, u128)> = BTreeMap::new();
        let mut recv: BTreeMap<(Uuid, String, String), u128> = BTreeMap::new();
        let mut own: BTreeMap<(Uuid, String, String), i128> = BTreeMap::new();
        let mut bad = Vec::new();
        for (a, b) in &accounts {
            *sums
                .entry((a.project_id, a.chain.clone(), a.asset.clone()))
                .or_default() += b.credits as i128 - b.debits as i128;
            if a.kind.is_credit_normal() && b.debits > b.credits {
                bad.push(format!("account {a:?} is negative: {b:?}"));
            }
            let k = (
                a.project_id,
                a.customer_id,
                a.chain.clone(),
                a.asset.clone(),
            );
            match a.kind {
                AccountKind::Available if !a.customer_id.is_nil() => {
                    have.entry(k).or_default().0 = b.credit_balance();
                }
                AccountKind::Locked if !a.customer_id.is_nil() => {
                    have.entry(k).or_default().1 = b.credit_balance();
                }
                AccountKind::Available | AccountKind::Locked => {
                    *own.entry((a.project_id, a.chain.clone(), a.asset.clone()))
                        .or_default() += b.credits as i128 - b.debits as i128;
                }
                AccountKind::Receivable => {
                    let r = b.debits.saturating_sub(b.credits);
                    if r > 0 || !a.customer_id.is_nil() {
                        *recv
                            .entry((a.project_id, a.chain.clone(), a.asset.clone()))
                            .or_default() += r;
                    }
                }
                _ => {}
            }
        }
        for (k, s) in sums {
            if s != 0 {
                bad.push(format!(
                    "project {} {} {}: accounts sum to {s}, not 0",
                    k.0, k.1, k.2
                ));
            }
        }
        let keys: BTreeSet<Position> = self
            .model
            .balances
            .keys()
            .chain(have.keys())
            .cloned()
            .collect();
        for k in keys {
            let e = self.model.balances.get(&k).copied().unwrap_or_default();
            let h = have.get(&k).copied().unwrap_or_default();
            if e != h {
                bad.push(format!(
                    "customer {} of {} on {} {}: the ledger holds available {} locked {}, the model {} and {}",
                    k.1, k.0, k.2, k.3, h.0, h.1, e.0, e.1
                ));
            }
        }
        // The project's receivable holds its customers' shortfalls (the model's) and its own
        // (an invoice payment taken back after the merchant's funds were spent or held).
        let keys: BTreeSet<_> = self
            .model
            .receivable
            .keys()
            .chain(recv.keys())
            .chain(own.keys())
            .cloned()
            .collect();
        // The project's own funds: invoice payments confirmed, less its payouts (refunds) paid.
        let own_want = self.model.own().clone();
        let keys: BTreeSet<_> = keys.into_iter().chain(own_want.keys().cloned()).collect();
        for k in keys {
            let customers = self.model.receivable.get(&k).copied().unwrap_or_default();
            let total = recv.get(&k).copied().unwrap_or_default();
            let Some(own_recv) = total.checked_sub(customers) else {
                bad.push(format!(
                    "project {} on {} {}: receivable {total} in the ledger, its customers' shortfalls alone are {customers}",
                    k.0, k.1, k.2
                ));
                continue;
            };
            let held = own.get(&k).copied().unwrap_or_default() - own_recv as i128;
            let want = own_want.get(&k).copied().unwrap_or_default();
            if held != want {
                bad.push(format!(
                    "project {} on {} {}: its own funds are {held} in the ledger (receivable {own_recv} of its own), {want} in the model",
                    k.0, k.1, k.2
                ));
            }
        }
        for b in bad {
            self.fail(b);
        }
        Ok(())
    }

    /// The on-chain balance of `owner` in `asset` of `chain`.
    pub(in crate::simulate) async fn chain_balance(
        &self,
        chain: &str,
        owner: Address,
        asset: &str,
    ) -> u128 {
        let wc = &self.world.chains[chain];
        let token = wc.tokens.get(asset).copied();
        let c = wc.state().await;
        let v: U256 = c.balance(owner, token);
        u128::try_from(v).unwrap_or(u128::MAX)
    }

    /// No payout paid twice; a canceled or rejected one never. With `settled`: a
    /// confirmed payout paid exactly once, every other one not at all. Between settlings
    /// only the payouts not final or changed lately are looked at
    /// ([`super::model::WINDOW_STEPS`]).
    pub(in crate::simulate) async fn check_payouts_paid_once(&mut self, settled: bool) {
        let payouts: Vec<_> = if settled {
            self.model.payouts.values().cloned().collect()
        } else {
            let ids = self.model.recent_payouts(self.step);
            ids.iter()
                .filter_map(|id| self.model.payouts.get(id).cloned())
                .collect()
        };
        let mut bad = Vec::new();
        // What each payout's own address holds, read with one lock of each chain.
        let mut paid: BTreeMap<Uuid, u128> = BTreeMap::new();
        for (id, wc) in &self.world.chains {
            let c = wc.state().await;
            for p in payouts.iter().filter(|p| p.chain == *id) {
                let token = wc.tokens.get(&p.asset).copied();
                paid.insert(
                    p.id,
                    u128::try_from(c.balance(p.to, token)).unwrap_or(u128::MAX),
                );
            }
        }
        for p in payouts {
            let got = paid.get(&p.id).copied().unwrap_or(0);
            let ok = if got > p.amount || (got != 0 && got != p.amount) {
                false
            } else if matches!(p.status.as_str(), "canceled" | "rejected") {
                got == 0
            } else if settled {
                (p.status == "confirmed") == (got == p.amount)
            } else {
                true
            };
            if !ok {
                bad.push(format!(
                    "payout {} ({}, {} {} on {}) has paid {got} to its address; {}",
                    p.id,
                    p.status,
                    p.amount,
                    p.asset,
                    p.chain,
                    self.send_history(p.chain, p.id).await
                ));
            }
        }
        for b in bad {
            self.fail(b);
        }
    }

    /// The sender's rows for resource `id` on `chain` and what the chain says of each
    /// version (for a failure report).
    pub(in crate::simulate) async fn send_history(&self, chain: &'static str, id: Uuid) -> String {
        let key = chain.to_string();
        let rows = self
            .read(move |r| crate::workers::chain::store::out_txs_where(r, &key, |t| t.ref_id == id))
            .await
            .unwrap_or_default();
        let c = self.world.chains[chain].state().await;
        let mut s = Vec::new();
        for t in rows {
            let versions: Vec<String> = t
                .versions()
                .iter()
                .map(|(h, filler)| {
                    let r = h.parse::<B256>().ok().and_then(|h| c.receipt(h));
                    format!(
                        "{}{} {}",
                        &h[..10],
                        if *filler { " (filler)" } else { "" },
                        match r {
                            Some(r) => format!("mined in {} success {}", r.block_number, r.success),
                            None => "not mined".into(),
                        }
                    )
                })
                .collect();
            s.push(format!(
                "nonce {} done {} settled {:?} mined {:?} versions [{}]",
                t.nonce,
                t.done,
                t.settled,
                t.mined.as_ref().map(|m| m.block),
                versions.join(", ")
            ));
        }
        s.join("; ")
    }

    /// `verify` of the whole store, and a full read of the tenants' deposits: a customer's
    /// deposit must be as its events announced it (an invoice's payments are taken as read).
    pub(super) async fn verify(&mut self) -> anyhow::Result<()> {
        let rep = self.read(appliance_storage::verify::verify).await?;
        for v in rep.violations.iter().take(5) {
            self.fail(format!("verify: {v}"));
        }
        let rows = self.read(|r| r.all::<Deposit>()).await?;
        let mut bad = Vec::new();
        for d in rows {
            if d.invoice_id.is_some() || d.funding {
                // Not announced by deposit events (the invoice's own events speak of them).
                self.record_deposit(&d);
                continue;
            }
            match (self.model.deposit(d.id), seen(&d)) {
                (Some(m), Some(s)) if *m == s => {}
                (m, s) => bad.push(format!(
                    "deposit {} reads {s:?}, its events announced {m:?}",
                    d.id
                )),
            }
        }
        for b in bad {
            self.fail(b);
        }
        Ok(())
    }

    /// After a restart: every customer and wallet acknowledged before is there, and every
    /// payout made or changed lately, no final one changed; no event was lost.
    pub(super) async fn check_survivors(&mut self) -> anyhow::Result<()> {
        let customers: Vec<(Uuid, Vec<Uuid>)> = self
            .model
            .tenants
            .iter()
            .flat_map(|t| t.customers.iter())
            .map(|c| (c.id, c.wallets.values().map(|w| w.id).collect()))
            .collect();
        let recent = self.model.recent_payouts(self.step);
        let payouts: Vec<(Uuid, String, bool)> = recent
            .iter()
            .filter_map(|id| self.model.payouts.get(id))
            .map(|p| (p.id, p.status.clone(), p.is_final()))
            .collect();
        let sequences: Vec<(Uuid, u64)> = self
            .model
            .tenants
            .iter()
            .map(|t| (t.id, t.last_sequence))
            .collect();
        let bad = self
            .read(move |r| {
                let mut bad = Vec::new();
                for (c, ws) in customers {
                    if r.get::<Customer>(c)?.is_none() {
                        bad.push(format!("customer {c} is gone after a restart"));
                    }
                    for w in ws {
                        if r.get::<Wallet>(w)?.is_none() {
                            bad.push(format!("wallet {w} is gone after a restart"));
                        }
                    }
                }
                for (id, status, fin) in payouts {
                    match r.get::<Payout>(id)? {
                        None => bad.push(format!("payout {id} is gone after a restart")),
                        Some(p) if fin && p.status.as_str() != status => bad.push(format!(
                            "payout {id} was {status}, reads {} after a restart",
                            p.status.as_str()
                        )),
                        Some(_) => {}
                    }
                }
                for (p, seq) in sequences {
                    let last = r.last_sequence(p)?;
                    if last < seq {
                        bad.push(format!(
                            "events of {p} end at {last} after a restart, {seq} were read before"
                        ));
                    }
                }
                Ok(bad)
            })
            .await?;
        for b in bad {
            self.fail(b);
        }
        Ok(())
    }
}

use appliance_storage::sources;
