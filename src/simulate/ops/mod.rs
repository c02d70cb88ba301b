//! The operations of a simulation and the swarm that weighs them.
//!
//! Every operation is what a user of the real thing does or suffers: a tenant's API call
//! (through the router, with its keys), a payer's transfer, a chain event, a clock jump, a
//! worker step, a crash. Each one updates the harness's model with what it asked for; what
//! the appliance did about it is read back after the step (`checks`).

use std::collections::BTreeMap;

use appliance_chains::evm::{Address, B256, U256};
use axum::http::Method;
use serde_json::json;
use uuid::Uuid;

use appliance_chains::sim::Inject;
use appliance_storage::sources;

use super::model::{CustomerM, PayoutM, Tenant, TransferM, WalletM};
use super::node::Answer;
use super::rng;
use super::world::NodeFaults;
use super::{Sim, CHAINS};
use crate::operator::{ProjectSet, Request};

/// Every kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    NewCustomer,
    NewWallet,
    Deposit,
    Mine,
    Reorg,
    DeepReorg,
    DropTx,
    NodeFault,
    Payout,
    PayoutRetry,
    Approve,
    Reject,
    Cancel,
    SweepRequest,
    NewInvoice,
    PayInvoice,
    CancelInvoice,
    Refund,
    NewEndpoint,
    PatchEndpoint,
    RotateSecret,
    DeleteEndpoint,
    Dispatch,
    RollKey,
    Conversion,
    Clock,
    Work,
    Expire,
    Crash,
}

mod hooks;
mod invoices;

const ALL: [OpKind; 29] = [
    OpKind::NewCustomer,
    OpKind::NewWallet,
    OpKind::Deposit,
    OpKind::Mine,
    OpKind::Reorg,
    OpKind::DeepReorg,
    OpKind::DropTx,
    OpKind::NodeFault,
    OpKind::Payout,
    OpKind::PayoutRetry,
    OpKind::Approve,
    OpKind::Reject,
    OpKind::Cancel,
    OpKind::SweepRequest,
    OpKind::NewInvoice,
    OpKind::PayInvoice,
    OpKind::CancelInvoice,
    OpKind::Refund,
    OpKind::NewEndpoint,
    OpKind::PatchEndpoint,
    OpKind::RotateSecret,
    OpKind::DeleteEndpoint,
    OpKind::Dispatch,
    OpKind::RollKey,
    OpKind::Conversion,
    OpKind::Clock,
    OpKind::Work,
    OpKind::Expire,
    OpKind::Crash,
];

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::NewCustomer => "new_customer",
            OpKind::NewWallet => "new_wallet",
            OpKind::Deposit => "deposit",
            OpKind::Mine => "mine",
            OpKind::Reorg => "reorg",
            OpKind::DeepReorg => "deep_reorg",
            OpKind::DropTx => "drop_tx",
            OpKind::NodeFault => "node_fault",
            OpKind::Payout => "payout",
            OpKind::PayoutRetry => "payout_retry",
            OpKind::Approve => "approve",
            OpKind::Reject => "reject",
            OpKind::Cancel => "cancel",
            OpKind::SweepRequest => "sweep_request",
            OpKind::NewInvoice => "new_invoice",
            OpKind::PayInvoice => "pay_invoice",
            OpKind::CancelInvoice => "cancel_invoice",
            OpKind::Refund => "refund",
            OpKind::NewEndpoint => "new_endpoint",
            OpKind::PatchEndpoint => "patch_endpoint",
            OpKind::RotateSecret => "rotate_secret",
            OpKind::DeleteEndpoint => "delete_endpoint",
            OpKind::Dispatch => "dispatch",
            OpKind::RollKey => "roll_key",
            OpKind::Conversion => "conversion",
            OpKind::Clock => "clock",
            OpKind::Work => "work",
            OpKind::Expire => "expire",
            OpKind::Crash => "crash",
        }
    }

    /// Operations every run keeps (without them nothing happens to check).
    pub(in crate::simulate) fn core(self) -> bool {
        matches!(
            self,
            OpKind::NewCustomer
                | OpKind::NewWallet
                | OpKind::Deposit
                | OpKind::Mine
                | OpKind::Payout
                | OpKind::Work
        )
    }
}

/// Which operations a run uses and how often: drawn from the seed (swarm testing).
#[derive(Debug, Clone)]
pub struct Swarm {
    weights: Vec<(OpKind, u64)>,
    total: u64,
}

impl Swarm {
    /// Each operation that is not core is off with a chance of one in four; the others get a
    /// weight from 1 to 10 (the workers and blocks more, so the chain keeps moving).
    pub fn draw() -> Swarm {
        let mut weights = Vec::new();
        for k in ALL {
            if !k.core() && rng::chance(250) {
                continue;
            }
            let base = rng::between(1, 10);
            let w = match k {
                OpKind::Work => base * 4 + 10,
                OpKind::Mine => base * 2 + 5,
                OpKind::Crash | OpKind::DeepReorg => base.div_ceil(4),
                _ => base,
            };
            weights.push((k, w));
        }
        let total = weights.iter().map(|(_, w)| w).sum();
        Swarm { weights, total }
    }

    pub fn pick(&self) -> OpKind {
        let mut x = rng::below(self.total);
        for (k, w) in &self.weights {
            if x < *w {
                return *k;
            }
            x -= w;
        }
        OpKind::Work
    }

    pub fn describe(&self) -> String {
        self.weights
            .iter()
            .map(|(k, w)| format!("{}={w}", k.name()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Most customers a tenant has.
const MAX_CUSTOMERS: usize = 150;

/// A fresh external address.
fn fresh_address() -> Address {
    Address::from(rng::bytes20())
}

impl Sim {
    /// Posts `body` to `path` with the key `key` picks of the tenant of `project`.
    pub(in crate::simulate) async fn post_as(
        &self,
        project: Uuid,
        key: fn(&Tenant) -> &String,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> anyhow::Result<Answer> {
        let key = key(self.model.tenant(project).expect("tenant"));
        self.node().post(path, key, body).await
    }

    /// Creates the tenants: two or three live projects, each with signing on, a prepaid
    /// plan, a wallet key, a payout key and an approver key; some with an auto-approve
    /// threshold so that payouts wait for approval.
    pub(super) async fn setup(&mut self) -> anyhow::Result<()> {
        let n = rng::between(2, 3);
        for i in 0..n {
            let name = format!("tenant{i}");
            let node = self.node();
            let p = node
                .operator(Request::ProjectCreate {
                    name: name.clone(),
                    mode: "live".into(),
                })
                .await?;
            let id: Uuid = p["id"].as_str().unwrap_or_default().parse()?;
            let threshold = rng::chance(500);
            node.operator(Request::ProjectSet {
                project: name.clone(),
                set: ProjectSet {
                    signing_enabled: Some(true),
                    requests_per_minute: Some(100_000_000),
                    addresses_per_day: Some(1_000_000),
                    max_pending_payouts: Some(100_000),
                    auto_approve_threshold_cents: threshold.then_some(rng::between(100, 5_000)),
                    ..ProjectSet::default()
                },
            })
            .await?;
            node.operator(Request::BillingAdjust {
                project: name.clone(),
                cents: 10_000_000,
                note: "prepaid".into(),
            })
            .await?;
            node.operator(Request::BillingPlan {
                project: name.clone(),
                plan: "drift".into(),
            })
            .await?;
            let key = |kind: &str, scopes: &str| Request::KeyCreate {
                project: name.clone(),
                kind: kind.into(),
                name: Some(format!("{kind} key")),
                scopes: Some(scopes.split(',').map(str::to_string).collect()),
                signing_enabled: true,
            };
            let w = node
                .operator(key(
                    "wallet",
                    "customers:read,customers:write,wallets:read,wallets:create,balances:read,deposits:read,sweeps:read,sweeps:create,events:read,webhooks:read,webhooks:write,api_keys:read,api_keys:write",
                ))
                .await?;
            let pk = node
                .operator(key(
                    "payout",
                    "payouts:read,payouts:create,balances:read,conversions:read,conversions:write",
                ))
                .await?;
            let ak = node
                .operator(key("payout", "payouts:read,payouts:approve"))
                .await?;
            let ck = node
                .operator(key("checkout", "invoices:read,invoices:write"))
                .await?;
            let token = |v: &serde_json::Value| v["token"].as_str().unwrap_or_default().to_string();
            self.model.tenants.push(Tenant {
                id,
                name,
                wallet_key: token(&w),
                payout_key: token(&pk),
                approver_key: token(&ak),
                checkout_key: token(&ck),
                wallet_key_id: w["id"].as_str().unwrap_or_default().parse()?,
                rolled: Vec::new(),
                endpoints: Vec::new(),
                customers: Vec::new(),
                last_sequence: 0,
            });
        }
        // The chains are paused until each worker first reaches its node.
        for (id, _) in CHAINS {
            self.node_mut().work(id).await;
        }
        Ok(())
    }

    pub(in crate::simulate) fn pick_tenant(&self) -> usize {
        rng::below(self.model.tenants.len() as u64) as usize
    }

    pub(in crate::simulate) fn pick_chain(&self) -> &'static str {
        CHAINS[rng::below(CHAINS.len() as u64) as usize].0
    }

    /// Runs one operation; returns a line saying what it did.
    pub(super) async fn apply(&mut self, op: OpKind) -> anyhow::Result<String> {
        Ok(match op {
            OpKind::NewCustomer => self.new_customer().await?,
            OpKind::NewWallet => self.new_wallet().await?,
            OpKind::Deposit => self.deposit().await,
            OpKind::Mine => {
                let chain = self.pick_chain();
                let n = rng::between(1, 3);
                self.world.chains[chain].mine(n).await;
                format!(
                    "{chain}: {n} block(s), head {}",
                    self.world.chains[chain].head().await
                )
            }
            OpKind::Reorg | OpKind::DeepReorg => {
                let chain = self.pick_chain();
                let conf = self.confirmations(chain) as u64;
                let depth = if op == OpKind::Reorg {
                    rng::between(1, conf + 2)
                } else if rng::chance(800) {
                    rng::between(conf + 1, 4 * conf + 12)
                } else {
                    // Deeper than the sender follows its settled sends.
                    rng::between(33, 80)
                };
                let drop = rng::chance(600);
                let done = self.world.chains[chain].reorg(depth, drop).await;
                if done > 0 {
                    self.reorgs += 1;
                }
                let head = self.world.chains[chain].head().await;
                format!("{chain}: reorg of {done} at head {head}, drop {drop}")
            }
            OpKind::DropTx => {
                let chain = self.pick_chain();
                match self.world.chains[chain].drop_pending(rng::u64()).await {
                    Some(h) => format!("{chain}: dropped {h:#x}"),
                    None => format!("{chain}: nothing pending"),
                }
            }
            OpKind::NodeFault => self.node_fault(),
            OpKind::Payout => self.payout().await?,
            OpKind::PayoutRetry => self.payout_retry().await?,
            OpKind::Approve => self.decide(true).await?,
            OpKind::Reject => self.decide(false).await?,
            OpKind::Cancel => self.cancel().await?,
            OpKind::SweepRequest => self.sweep_request().await?,
            OpKind::NewInvoice => self.new_invoice().await?,
            OpKind::PayInvoice => self.pay_invoice().await,
            OpKind::CancelInvoice => self.cancel_invoice().await?,
            OpKind::Refund => self.refund().await?,
            OpKind::NewEndpoint => self.new_endpoint().await?,
            OpKind::PatchEndpoint => self.patch_endpoint().await?,
            OpKind::RotateSecret => self.rotate_secret().await?,
            OpKind::DeleteEndpoint => self.delete_endpoint().await?,
            OpKind::Dispatch => self.dispatch().await?,
            OpKind::RollKey => self.roll_key().await?,
            OpKind::Conversion => self.conversion().await?,
            OpKind::Clock => {
                let s = match rng::below(3) {
                    0 => rng::between(60, 3_600),
                    1 => rng::between(3_600, 86_400),
                    _ => rng::between(86_400, 3 * 86_400),
                };
                sources::advance_us(s * 1_000_000);
                format!("clock +{s} s")
            }
            OpKind::Work => {
                let chain = self.pick_chain();
                self.work(chain).await
            }
            OpKind::Expire => {
                let n = self.node().expire_invoices().await.unwrap_or(0);
                let b = self.node().billing_pass().await.unwrap_or(0);
                format!("expiry pass {n}, billing pass {b}")
            }
            OpKind::Crash => {
                self.world
                    .crashed
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                "crash between steps".into()
            }
        })
    }

    pub(super) fn confirmations(&self, chain: &str) -> u32 {
        CHAINS
            .iter()
            .find(|(c, _)| *c == chain)
            .map(|(_, n)| *n)
            .unwrap_or(1)
    }

    /// One worker step on `chain`, then the check of what the watcher holds against the
    /// chain when it caught up and nothing changed under it.
    pub(super) async fn work(&mut self, chain: &'static str) -> String {
        let before = self.world.chains[chain].log.lock().expect("lock").len();
        let stale_before = self.world.chains[chain]
            .stale_served
            .load(std::sync::atomic::Ordering::SeqCst);
        let head_before = self.world.chains[chain].head().await;
        let out = self.node_mut().work(chain).await;
        let log: Vec<String> = {
            let l = self.world.chains[chain].log.lock().expect("lock");
            l[before..].to_vec()
        };
        for l in &log {
            self.note(format!("  {chain}: {l}"));
        }
        let crashed = self.world.crashed.load(std::sync::atomic::Ordering::SeqCst);
        // A lagging node shows an older view: caught up with it says nothing of the chain.
        let lag = self.world.chains[chain].faults.lock().expect("lock").lag;
        // Nor does it with a node that answered from a stale view during the step.
        let stale = self.world.chains[chain]
            .stale_served
            .load(std::sync::atomic::Ordering::SeqCst)
            != stale_before;
        if out.caught_up && log.is_empty() && !crashed && lag == 0 && !stale {
            self.pending_sync.push(chain);
        }
        format!(
            "{chain}: head {head_before}, caught up {}, failed {}",
            out.caught_up, out.failed
        )
    }

    pub(in crate::simulate) async fn new_customer(&mut self) -> anyhow::Result<String> {
        let t = self.pick_tenant();
        // A tenant keeps at most MAX_CUSTOMERS customers, so a step's checks cost the same at
        // the millionth step as at the first; past that, a new customer is a repeat.
        let full = self.model.tenants[t].customers.len() >= MAX_CUSTOMERS;
        let reuse = !self.model.tenants[t].customers.is_empty() && (full || rng::chance(100));
        let reference = if reuse {
            rng::pick(&self.model.tenants[t].customers)
                .map(|c| c.reference.clone())
                .unwrap_or_default()
        } else {
            format!("cust-{}", self.model.next())
        };
        let key = self.model.tenants[t].wallet_key.clone();
        let a = self
            .node()
            .post("/v1/customers", &key, Some(&json!({"reference_id": reference, "email": format!("{reference}@example.com")})))
            .await?;
        let id: Option<Uuid> = a.str("id").and_then(|s| s.parse().ok());
        let known = self.model.tenants[t]
            .customers
            .iter()
            .find(|c| c.reference == reference)
            .map(|c| c.id);
        match (a.status, id, known) {
            (201, Some(id), None) => {
                self.model.tenants[t].customers.push(CustomerM {
                    id,
                    reference: reference.clone(),
                    wallets: BTreeMap::new(),
                });
            }
            (200, Some(id), Some(k)) if id == k => {}
            _ => self.fail(format!(
                "POST /v1/customers {reference} (known: {known:?}) answered {} {}",
                a.status, a.body
            )),
        }
        Ok(format!(
            "{} customer {reference}: {}",
            self.model.tenants[t].name, a.status
        ))
    }

    pub(in crate::simulate) async fn new_wallet(&mut self) -> anyhow::Result<String> {
        let t = self.pick_tenant();
        let Some(ci) = (!self.model.tenants[t].customers.is_empty())
            .then(|| rng::below(self.model.tenants[t].customers.len() as u64) as usize)
        else {
            return Ok("no customer yet".into());
        };
        let chain = self.pick_chain();
        let (cid, known) = {
            let c = &self.model.tenants[t].customers[ci];
            (c.id, c.wallets.get(chain).cloned())
        };
        let key = self.model.tenants[t].wallet_key.clone();
        let a = self
            .node()
            .post(
                "/v1/wallets",
                &key,
                Some(&json!({"customer_id": cid, "chain": chain})),
            )
            .await?;
        let id: Option<Uuid> = a.str("id").and_then(|s| s.parse().ok());
        let address: Option<Address> = a.str("address").and_then(|s| s.parse().ok());
        match (a.status, id, address, known) {
            (201, Some(id), Some(address), None) => {
                self.model.tenants[t].customers[ci]
                    .wallets
                    .insert(chain, WalletM { id, address });
            }
            (200, Some(id), Some(address), Some(k)) if id == k.id && address == k.address => {}
            // The chain is not issuing (its node was never reached since the start).
            (422, _, _, None) => {}
            _ => self.fail(format!(
                "POST /v1/wallets {cid} {chain} answered {} {}",
                a.status, a.body
            )),
        }
        Ok(format!("{chain} wallet for {cid}: {}", a.status))
    }

    /// A payer's transfer to a deposit address: the native coin or a token, put into the
    /// chain's mempool (mined with the next block).
    pub(in crate::simulate) async fn deposit(&mut self) -> String {
        let wallets = self.model.wallets();
        let Some((_, _, chain, w)) = rng::pick(&wallets).cloned() else {
            return "no wallet yet".into();
        };
        let wc = &self.world.chains[chain];
        let mut assets: Vec<(String, Option<Address>)> = vec![(wc.native_symbol.clone(), None)];
        for (s, a) in &wc.tokens {
            assets.push((s.clone(), Some(*a)));
        }
        let (asset, token) = rng::pick(&assets).cloned().expect("a native coin");
        let decimals = self.node().state.registry.decimals(chain, &asset) as u32;
        let unit = 10u128.pow(decimals.saturating_sub(2));
        let amount = unit * rng::between(1, 200_000) as u128;
        let hash = B256::from(rng::bytes32());
        wc.inject(Inject {
            hash,
            from: fresh_address(),
            to: w.address,
            token,
            value: U256::from(amount),
        })
        .await;
        self.model.add_transfer(TransferM {
            hash,
            chain,
            to: w.address,
            invoice: None,
            asset: asset.clone(),
            amount,
            step: self.step,
        });
        format!("{chain}: {amount} {asset} to {:#x} ({hash:#x})", w.address)
    }

    /// Sets what a chain's node does wrong from now on (or clears it).
    pub(in crate::simulate) fn node_fault(&mut self) -> String {
        let chain = self.pick_chain();
        let f = match rng::below(7) {
            0 | 1 => NodeFaults::default(),
            2 => NodeFaults {
                error_permille: rng::between(50, 500) as u32,
                ..NodeFaults::default()
            },
            3 => NodeFaults {
                lag: rng::between(1, 4),
                ..NodeFaults::default()
            },
            4 => NodeFaults {
                interleave_mine_permille: rng::between(20, 300) as u32,
                interleave_reorg_permille: rng::between(10, 150) as u32,
                interleave_reorg_depth: rng::between(1, 8),
                ..NodeFaults::default()
            },
            5 => NodeFaults {
                crash_permille: rng::between(5, 60) as u32,
                ..NodeFaults::default()
            },
            _ => NodeFaults {
                stale_permille: rng::between(100, 700) as u32,
                ..NodeFaults::default()
            },
        };
        let line = format!("{chain}: node faults {f:?}");
        *self.world.chains[chain].faults.lock().expect("lock") = f;
        line
    }

    /// A payout from a customer's balance to a fresh address: usually within what the
    /// harness expects the customer to hold, sometimes more (a 402 then).
    pub(in crate::simulate) async fn payout(&mut self) -> anyhow::Result<String> {
        // Positions with something to spend.
        let candidates: Vec<(Uuid, Uuid, String, String, u128)> = self
            .model
            .balances
            .iter()
            .filter(|(_, b)| b.0 > 0)
            .map(|(k, b)| (k.0, k.1, k.2.clone(), k.3.clone(), b.0))
            .collect();
        let Some((project, customer, chain, asset, free)) = rng::pick(&candidates).cloned() else {
            return Ok("nothing to pay out".into());
        };
        let chain: &'static str = CHAINS
            .iter()
            .map(|(c, _)| *c)
            .find(|c| *c == chain)
            .unwrap_or("ethereum");
        let amount = if rng::chance(100) {
            free + 1
        } else {
            (free / u128::from(rng::between(1, 4) as u32)).max(1)
        };
        let mut p = PayoutM {
            id: Uuid::nil(),
            project,
            customer,
            chain,
            asset: asset.clone(),
            amount,
            to: fresh_address(),
            idempotency_key: format!("payout-{}", self.model.next()),
            asked_us: 0,
            status: String::new(),
        };
        let a = self.post_payout(&p).await?;
        let id: Option<Uuid> = a.str("id").and_then(|s| s.parse().ok());
        match (a.status, id) {
            (202, Some(id)) => {
                p.id = id;
                p.asked_us = sources::now_us();
                p.status = a.str("status").unwrap_or_default();
                self.model.add_payout(p, self.step);
            }
            (402, _) if amount > free => {}
            // Not issuing payouts now (its node unreached since start), or the pending cap.
            (422, _) | (429, _) => {}
            _ => self.fail(format!(
                "POST /v1/payouts {amount} {asset} on {chain} (free {free}) answered {} {}",
                a.status, a.body
            )),
        }
        Ok(format!(
            "{chain}: payout {amount} {asset} of {customer} (free {free}): {} {}",
            a.status,
            a.str("status").unwrap_or_default()
        ))
    }

    /// `POST /v1/payouts` of `p`'s amount to its address, with its tenant's payout key and
    /// its idempotency key.
    async fn post_payout(&self, p: &PayoutM) -> anyhow::Result<Answer> {
        let t = self.model.tenant(p.project).expect("tenant");
        let decimals = self.node().state.registry.decimals(p.chain, &p.asset);
        let body = json!({"customer_id": p.customer, "chain": p.chain, "asset": p.asset,
            "decimals": decimals, "amount": p.amount.to_string(), "to_address": p.to.to_checksum(None)});
        let (key, idempotency_key) = (
            Some(t.payout_key.as_str()),
            Some(p.idempotency_key.as_str()),
        );
        self.node()
            .call(
                Method::POST,
                "/v1/payouts",
                key,
                Some(&body),
                idempotency_key,
            )
            .await
    }

    /// The same payout request again, with its idempotency key, while the key replays (a
    /// day, less an hour): the first answer's payout.
    pub(in crate::simulate) async fn payout_retry(&mut self) -> anyhow::Result<String> {
        let fresh_from = sources::now_us() - (crate::services::IDEMPOTENCY_TTL_US - 3_600_000_000);
        let Some(p) = rng::pick_cloned(
            self.model
                .payouts
                .values()
                .rev()
                .take(500)
                .filter(|p| p.asked_us >= fresh_from && !p.idempotency_key.is_empty()),
        ) else {
            return Ok("no payout yet".into());
        };
        let a = self.post_payout(&p).await?;
        let same = a.str("id").and_then(|s| s.parse::<Uuid>().ok()) == Some(p.id);
        if !(a.status == 202 && same) {
            self.fail(format!(
                "retrying payout {} with its idempotency key answered {} {}",
                p.id, a.status, a.body
            ));
        }
        Ok(format!("retry of payout {}: {}", p.id, a.status))
    }

    /// Approves (or rejects) a payout waiting for approval, with the tenant's approver key.
    pub(in crate::simulate) async fn decide(&mut self, approve: bool) -> anyhow::Result<String> {
        let Some(p) = rng::pick_cloned(
            self.model
                .open_payouts()
                .filter(|p| p.status == "pending_approval"),
        ) else {
            return Ok("nothing waits for approval".into());
        };
        let verb = if approve { "approve" } else { "reject" };
        let path = format!("/v1/payouts/{}/{verb}", p.id);
        let a = self
            .post_as(p.project, |t| &t.approver_key, &path, None)
            .await?;
        if a.status != 200 {
            self.fail(format!("{verb} payout {}: {} {}", p.id, a.status, a.body));
        }
        Ok(format!("{verb} payout {}: {}", p.id, a.status))
    }

    /// Cancels an open payout (refused once signing has begun).
    pub(in crate::simulate) async fn cancel(&mut self) -> anyhow::Result<String> {
        let Some(p) = rng::pick_cloned(
            self.model
                .open_payouts()
                .filter(|p| p.is_open() && !p.customer.is_nil()),
        ) else {
            return Ok("no open payout".into());
        };
        let path = format!("/v1/payouts/{}/cancel", p.id);
        let a = self
            .post_as(p.project, |t| &t.payout_key, &path, None)
            .await?;
        let ok = match a.status {
            200 => a.str("status").as_deref() == Some("canceled"),
            409 => {
                matches!(p.status.as_str(), "signing" | "submitted")
                    || a.body["code"] == "invalid_state"
            }
            _ => false,
        };
        if !ok {
            self.fail(format!(
                "cancel payout {} ({}): {} {}",
                p.id, p.status, a.status, a.body
            ));
        }
        Ok(format!(
            "cancel payout {} ({}): {}",
            p.id, p.status, a.status
        ))
    }

    /// Asks for a wallet's sweep now, whatever the threshold.
    pub(in crate::simulate) async fn sweep_request(&mut self) -> anyhow::Result<String> {
        let wallets = self.model.wallets();
        let Some((project, _, chain, w)) = rng::pick(&wallets).cloned() else {
            return Ok("no wallet yet".into());
        };
        let body = json!({"wallet_id": w.id});
        let a = self
            .post_as(project, |t| &t.wallet_key, "/v1/sweeps", Some(&body))
            .await?;
        if a.status >= 500 {
            self.fail(format!("POST /v1/sweeps {}: {} {}", w.id, a.status, a.body));
        }
        Ok(format!("{chain}: sweep of {}: {}", w.id, a.status))
    }
}
