//! The harness's own account of what it did and what the appliance should hold: the
//! tenants it made, the transfers its payers sent, the payouts it asked for, and what the
//! appliance said about each (read back from the store as events announce changes).
//!
//! The ledger is compared with what these facts imply: every customer's `available` and
//! `locked` follow the ledger's rules applied to the money each event moves, in order
//! ([`Model::apply`]); a project's own funds are its confirmed invoice payments less its
//! payouts (refunds) paid ([`Model::own`]). Which deposits may be confirmed is judged
//! against the chain itself (`checks`), not taken from the appliance.
//!
//! Rows read back go through [`Model::set_deposit`] and [`Model::set_payout_status`], which
//! keep the indexes the per-step checks read (the live deposit of each transfer, the
//! projects' own funds, what changed lately), so that a step costs what changed in it, not
//! what the run has made so far.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use appliance_chains::evm::{Address, B256};
use uuid::Uuid;

/// One live project and its keys.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub id: Uuid,
    pub name: String,
    /// Wallet key: customers, wallets, balances, deposits, sweeps, events.
    pub wallet_key: String,
    /// Payout key that creates payouts.
    pub payout_key: String,
    /// Payout key that approves or rejects them (an approver must differ from the creator).
    pub approver_key: String,
    /// Checkout key: invoices.
    pub checkout_key: String,
    pub customers: Vec<CustomerM>,
    /// Highest event sequence read so far.
    pub last_sequence: u64,
    /// The wallet key's id (it rolls itself).
    pub wallet_key_id: Uuid,
    /// Keys replaced by a roll: (token, id, when it stops working, Unix µs).
    pub rolled: Vec<(String, Uuid, i64)>,
    /// Webhook endpoints.
    pub endpoints: Vec<EndpointM>,
}

/// How a simulated webhook receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    /// 200 every time.
    Healthy,
    /// 500 or a timeout some of the time.
    Flaky,
    /// 410 Gone: the endpoint is disabled by it.
    Gone,
}

/// A webhook endpoint and the secrets its deliveries may be signed with.
#[derive(Debug, Clone)]
pub struct EndpointM {
    pub id: Uuid,
    pub url: String,
    pub receiver: Receiver,
    /// Secrets with when each stops being used (Unix µs; `i64::MAX` for the current one).
    pub secrets: Vec<(String, i64)>,
    pub deleted: bool,
}

/// One customer of a tenant.
#[derive(Debug, Clone)]
pub struct CustomerM {
    pub id: Uuid,
    pub reference: String,
    /// Deposit address by chain.
    pub wallets: BTreeMap<&'static str, WalletM>,
}

/// A customer's deposit address on one chain.
#[derive(Debug, Clone)]
pub struct WalletM {
    pub id: Uuid,
    pub address: Address,
}

/// A payer's transfer to an address of the appliance (a customer's deposit address or an
/// invoice's payment address), as the harness injected it.
#[derive(Debug, Clone)]
pub struct TransferM {
    pub hash: B256,
    pub chain: &'static str,
    pub to: Address,
    /// The invoice paid (a payment to an invoice's address).
    pub invoice: Option<Uuid>,
    pub asset: String,
    pub amount: u128,
    /// The step that made it.
    pub step: u64,
}

/// An invoice the harness created, with what a payer may send to it.
#[derive(Debug, Clone)]
pub struct InvoiceM {
    pub id: Uuid,
    pub project: Uuid,
    /// The checkout token (`ck_...`), from its `checkout_url`.
    pub token: String,
    /// (chain, asset, address, amount_atomic) of each quote.
    pub quotes: Vec<(String, String, Address, u128)>,
    /// `keep` or `refund`.
    pub policy: String,
    /// Status as last read.
    pub status: String,
    /// Unix µs.
    pub expires_at: i64,
    /// A payer sent more than a quote asked for (the refund op looks at these first).
    pub overpaid: bool,
    /// The harness gave a refund address on its checkout: more money sent to it now opens
    /// a new refund claim (DECISIONS.md section 5).
    pub refund_asked: bool,
}

/// What the appliance says of one deposit row (read back after an event about it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepositSeen {
    pub id: Uuid,
    pub tx_hash: B256,
    pub to: Address,
    pub invoice: Option<Uuid>,
    pub status: String,
    pub amount: u128,
    pub asset: String,
    pub wallet: Uuid,
    pub block: u64,
}

/// A payout the harness asked for.
#[derive(Debug, Clone)]
pub struct PayoutM {
    pub id: Uuid,
    pub project: Uuid,
    pub customer: Uuid,
    pub chain: &'static str,
    pub asset: String,
    pub amount: u128,
    /// A fresh address for this payout alone: its balance on chain counts the executions.
    pub to: Address,
    pub idempotency_key: String,
    /// When it was asked for (Unix µs): its idempotency key replays for a day.
    pub asked_us: i64,
    /// Status as last read from the appliance.
    pub status: String,
}

impl PayoutM {
    /// Open: funds locked.
    pub fn is_open(&self) -> bool {
        matches!(
            self.status.as_str(),
            "pending_approval" | "queued" | "signing" | "submitted"
        )
    }

    /// A state no change leaves.
    pub fn is_final(&self) -> bool {
        matches!(
            self.status.as_str(),
            "confirmed" | "failed" | "canceled" | "rejected"
        )
    }
}

/// Steps after which a transfer or payout is no longer looked at by the per-step checks
/// (only by the settlings, which look at everything): far more than the deepest reorg a run
/// makes, in steps.
pub const WINDOW_STEPS: u64 = 3_000;

/// Everything the harness knows.
#[derive(Debug, Default)]
pub struct Model {
    pub tenants: Vec<Tenant>,
    pub transfers: BTreeMap<B256, TransferM>,
    /// Transfer hashes in the order they were made, with their step.
    pub transfer_order: VecDeque<(u64, B256)>,
    /// Deposit rows by id ([`Model::set_deposit`]).
    deposits: BTreeMap<Uuid, DepositSeen>,
    /// The deposit of each transfer that is `detected` or `confirmed`: (id, block), as of
    /// the last [`Model::settle_live`].
    live: BTreeMap<B256, (Uuid, u64)>,
    /// Every deposit of each transfer.
    by_tx: BTreeMap<B256, Vec<Uuid>>,
    /// Transfers whose deposits changed since the last [`Model::settle_live`].
    touched: BTreeSet<B256>,
    /// Deposits `detected` now.
    detected: BTreeSet<Uuid>,
    /// A project's own funds by (project, chain, asset): confirmed invoice payments less
    /// payouts without a customer (refunds) paid.
    own: BTreeMap<(Uuid, String, String), i128>,
    pub payouts: BTreeMap<Uuid, PayoutM>,
    /// Payouts not final.
    open_payouts: BTreeSet<Uuid>,
    /// Payouts by the step they last changed (made, or a status read back).
    payout_changes: VecDeque<(u64, Uuid)>,
    pub invoices: BTreeMap<Uuid, InvoiceM>,
    /// Where each payout's funds are, by its events in order.
    pub payout_money: BTreeMap<Uuid, PayoutMoney>,
    /// What each customer should hold by (project, customer, chain, asset): `available`
    /// and `locked`, kept by the ledger's rules from the tenants' events in order
    /// ([`Model::apply_event`]).
    pub balances: BTreeMap<Position, (u128, u128)>,
    /// What each project's `receivable` should hold for its customers by (project, chain,
    /// asset): customer credits taken back by a reorg after the customer had spent them.
    pub receivable: BTreeMap<(Uuid, String, String), u128>,
    /// Counter for fresh names.
    pub counter: u64,
}

/// A customer's position in one asset: (project, customer, chain, asset).
pub type Position = (Uuid, Uuid, String, String);

/// A money movement an event announces, with what it is about.
#[derive(Debug, Clone)]
pub enum Movement {
    /// A deposit credited (`deposit.confirmed`).
    Credited(Position, u128),
    /// A credited deposit taken back (`deposit.orphaned`).
    Reversed(Position, u128),
    /// A payout accepted: its funds locked (`payout.created`).
    Locked(Position, u128),
    /// A payout paid (`payout.confirmed`).
    Paid(Position, u128),
    /// A payout given up: its funds back (`payout.failed`, `canceled`, `rejected`).
    Released(Position, u128),
    /// A confirmed payout undone by a reorg: its funds back in `available`
    /// (`payout.failed` after `payout.confirmed`).
    Unpaid(Position, u128),
    /// A failed payout paid after all by a reorg: out of `available` as far as it goes, the
    /// rest to the project's `receivable` (`payout.confirmed` after `payout.failed`).
    Repaid(Position, u128),
}

/// Where a payout's funds are, by the events read so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayoutMoney {
    Locked,
    Paid,
    Released,
}

impl Model {
    pub fn tenant(&self, project: Uuid) -> Option<&Tenant> {
        self.tenants.iter().find(|t| t.id == project)
    }

    pub fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// Applies one money movement by the ledger's rules (docs/decisions.md, Ledger): a
    /// reversal takes what it can from `available` and posts the rest to the project's
    /// `receivable`. `Err` when a movement cannot happen (a lock beyond `available`, a
    /// release of more than is locked).
    pub fn apply(&mut self, m: &Movement) -> Result<(), String> {
        let own = match m {
            Movement::Credited(k, _)
            | Movement::Reversed(k, _)
            | Movement::Locked(k, _)
            | Movement::Paid(k, _)
            | Movement::Released(k, _)
            | Movement::Unpaid(k, _)
            | Movement::Repaid(k, _) => k.1.is_nil(),
        };
        if own {
            // The project's own funds: summed from the rows at each check (`checks`).
            return Ok(());
        }
        match m {
            Movement::Credited(k, a) => {
                self.balances.entry(k.clone()).or_default().0 += a;
            }
            Movement::Unpaid(k, a) => {
                self.balances.entry(k.clone()).or_default().0 += a;
            }
            Movement::Reversed(k, a) | Movement::Repaid(k, a) => {
                let b = self.balances.entry(k.clone()).or_default();
                let take = b.0.min(*a);
                b.0 -= take;
                if *a > take {
                    *self
                        .receivable
                        .entry((k.0, k.2.clone(), k.3.clone()))
                        .or_default() += a - take;
                }
            }
            Movement::Locked(k, a) => {
                let b = self.balances.entry(k.clone()).or_default();
                if b.0 < *a {
                    return Err(format!(
                        "{k:?}: a payout of {a} was accepted with {} available",
                        b.0
                    ));
                }
                b.0 -= a;
                b.1 += a;
            }
            Movement::Paid(k, a) | Movement::Released(k, a) => {
                let b = self.balances.entry(k.clone()).or_default();
                if b.1 < *a {
                    return Err(format!("{k:?}: {m:?} with {} locked", b.1));
                }
                b.1 -= a;
                if matches!(m, Movement::Released(..)) {
                    b.0 += a;
                }
            }
        }
        Ok(())
    }

    /// Records what the appliance says of a deposit row; returns what is wrong with it (a
    /// row no payer's transfer explains, one that does not match its transfer).
    pub fn set_deposit(&mut self, d: DepositSeen) -> Vec<String> {
        let mut bad = Vec::new();
        let t = self.transfers.get(&d.tx_hash).cloned();
        match &t {
            None => bad.push(format!(
                "deposit {} is no transfer a payer made: {d:?}",
                d.id
            )),
            Some(t) if t.to != d.to || t.amount != d.amount || t.asset != d.asset => {
                bad.push(format!(
                    "deposit {} does not match its transfer: {d:?} vs {t:?}",
                    d.id
                ))
            }
            Some(_) => {}
        }
        let old = self.deposits.insert(d.id, d.clone());
        if let Some(o) = &old {
            if o.status == "detected" {
                self.detected.remove(&o.id);
            }
        } else {
            self.by_tx.entry(d.tx_hash).or_default().push(d.id);
        }
        if d.status == "detected" {
            self.detected.insert(d.id);
        }
        self.touched.insert(d.tx_hash);
        // A project's own funds: its invoices' confirmed payments.
        if let (Some(i), Some(t)) = (d.invoice, &t) {
            if let Some(project) = self.invoices.get(&i).map(|inv| inv.project) {
                let e = self
                    .own
                    .entry((project, t.chain.to_string(), d.asset.clone()))
                    .or_default();
                if old.as_ref().is_some_and(|o| o.status == "confirmed") {
                    *e -= d.amount as i128;
                }
                if d.status == "confirmed" {
                    *e += d.amount as i128;
                }
            }
        }
        bad
    }

    /// Brings the live deposit of every transfer whose deposits changed up to date; returns
    /// the transfers with two live deposits. Called once every row of a step is read (a
    /// reorg fails one deposit of a transfer and detects another in the same step).
    pub fn settle_live(&mut self) -> Vec<String> {
        let mut bad = Vec::new();
        for tx in std::mem::take(&mut self.touched) {
            let live: Vec<&DepositSeen> = self
                .by_tx
                .get(&tx)
                .into_iter()
                .flatten()
                .filter_map(|id| self.deposits.get(id))
                .filter(|d| matches!(d.status.as_str(), "detected" | "confirmed"))
                .collect();
            match live.as_slice() {
                [] => {
                    self.live.remove(&tx);
                }
                [d] => {
                    self.live.insert(tx, (d.id, d.block));
                }
                more => bad.push(format!(
                    "transfer {tx:#x} has {} live deposits: {:?}",
                    more.len(),
                    more.iter().map(|d| (d.id, &d.status)).collect::<Vec<_>>()
                )),
            }
        }
        bad
    }

    pub fn deposit(&self, id: Uuid) -> Option<&DepositSeen> {
        self.deposits.get(&id)
    }

    pub fn deposits(&self) -> impl Iterator<Item = &DepositSeen> {
        self.deposits.values()
    }

    /// The live (`detected` or `confirmed`) deposit of a transfer: (id, block).
    pub fn live(&self, tx: &B256) -> Option<(Uuid, u64)> {
        self.live.get(tx).copied()
    }

    /// The deposits `detected` now.
    pub fn detected(&self) -> impl Iterator<Item = &Uuid> {
        self.detected.iter()
    }

    /// A project's own funds on (chain, asset), as the model expects them.
    pub fn own(&self) -> &BTreeMap<(Uuid, String, String), i128> {
        &self.own
    }

    /// Records a payout (made by the harness, or found in an event: a refund).
    pub fn add_payout(&mut self, p: PayoutM, step: u64) {
        if !p.is_final() {
            self.open_payouts.insert(p.id);
        }
        self.payout_changes.push_back((step, p.id));
        let (id, status) = (p.id, p.status.clone());
        self.payouts.insert(
            id,
            PayoutM {
                status: String::new(),
                ..p
            },
        );
        self.set_payout_status(id, &status, step);
    }

    /// Records a payout's status as read back.
    pub fn set_payout_status(&mut self, id: Uuid, status: &str, step: u64) {
        let Some(p) = self.payouts.get_mut(&id) else {
            return;
        };
        if p.status == status {
            return;
        }
        let was_paid = p.status == "confirmed";
        p.status = status.to_string();
        let now_paid = p.status == "confirmed";
        if p.is_final() {
            self.open_payouts.remove(&id);
        } else {
            self.open_payouts.insert(id);
        }
        if p.customer.is_nil() && was_paid != now_paid {
            let e = self
                .own
                .entry((p.project, p.chain.to_string(), p.asset.clone()))
                .or_default();
            if now_paid {
                *e -= p.amount as i128;
            } else {
                *e += p.amount as i128;
            }
        }
        self.payout_changes.push_back((step, id));
    }

    /// Payouts not final, and those that changed within [`WINDOW_STEPS`] of `step`.
    pub fn recent_payouts(&mut self, step: u64) -> BTreeSet<Uuid> {
        while self
            .payout_changes
            .front()
            .is_some_and(|(s, _)| s + WINDOW_STEPS < step)
        {
            self.payout_changes.pop_front();
        }
        let mut out: BTreeSet<Uuid> = self.open_payouts.clone();
        out.extend(self.payout_changes.iter().map(|(_, id)| *id));
        out
    }

    /// The payouts not final.
    pub fn open_payouts(&self) -> impl Iterator<Item = &PayoutM> {
        self.open_payouts
            .iter()
            .filter_map(|id| self.payouts.get(id))
    }

    /// Records a payer's transfer made at `step`.
    pub fn add_transfer(&mut self, t: TransferM) {
        self.transfer_order.push_back((t.step, t.hash));
        self.transfers.insert(t.hash, t);
    }

    /// The transfers made within [`WINDOW_STEPS`] of `step` (all of them with `all`).
    pub fn recent_transfers(&self, step: u64, all: bool) -> Vec<&TransferM> {
        self.transfer_order
            .iter()
            .rev()
            .take_while(|(s, _)| all || s + WINDOW_STEPS >= step)
            .filter_map(|(_, h)| self.transfers.get(h))
            .collect()
    }

    /// Every wallet of every tenant: (project, customer, chain, wallet).
    pub fn wallets(&self) -> Vec<(Uuid, Uuid, &'static str, WalletM)> {
        let mut out = Vec::new();
        for t in &self.tenants {
            for c in &t.customers {
                for (chain, w) in &c.wallets {
                    out.push((t.id, c.id, *chain, w.clone()));
                }
            }
        }
        out
    }
}
