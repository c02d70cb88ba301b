//! The harness's own account of what it did and what the appliance should hold: the
//! tenants it made, the transfers its payers sent, the payouts it asked for, and what the
//! appliance said about each (read back from the store as events announce changes).
//!
//! The ledger is compared with what these facts imply ([`Model::expected`]): a customer's
//! net position (`available + locked - receivable`) is the sum of its confirmed deposits
//! less its confirmed payouts, and `locked` is the sum of its open payouts. Which deposits may be confirmed is judged against the chain itself
//! (`checks`), not taken from the appliance.

use std::collections::BTreeMap;

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
    pub asset: String,
    pub amount: u128,
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

/// Everything the harness knows.
#[derive(Debug, Default)]
pub struct Model {
    pub tenants: Vec<Tenant>,
    pub transfers: BTreeMap<B256, TransferM>,
    /// Deposit rows by id.
    pub deposits: BTreeMap<Uuid, DepositSeen>,
    pub payouts: BTreeMap<Uuid, PayoutM>,
    pub invoices: BTreeMap<Uuid, InvoiceM>,
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
            | Movement::Released(k, _) => k.1.is_nil(),
        };
        if own {
            // The project's own funds: summed from the rows at each check (`checks`).
            return Ok(());
        }
        match m {
            Movement::Credited(k, a) => {
                self.balances.entry(k.clone()).or_default().0 += a;
            }
            Movement::Reversed(k, a) => {
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
