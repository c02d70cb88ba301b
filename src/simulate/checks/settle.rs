//! The settling: faults off, blocks mined and every sweep asked for until nothing is in
//! flight, then everything compared (deposits, holdings of every address against the chain,
//! payouts paid once).

use super::*;
use crate::simulate::{Sim, CHAINS};
use appliance_chains::evm::B256;
use appliance_storage::ledger::{Account, AccountKind};
use appliance_storage::records::SweepStatus;
use appliance_storage::{ReadOps, ScanOps};
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

impl Sim {
    /// Takes every fault away, mines and runs the workers until nothing is in flight, asks
    /// for a sweep of everything the ledger holds on any address and runs until those are
    /// done too, then compares the chains with the ledger address by address.
    pub(in crate::simulate) async fn settle(&mut self) -> anyhow::Result<()> {
        for c in self.world.chains.values() {
            *c.faults.lock().expect("lock") = Default::default();
        }
        if !self.run_until_quiet(false).await? {
            return Ok(());
        }
        self.request_every_sweep().await?;
        if !self.run_until_quiet(true).await? {
            return Ok(());
        }
        for (chain, _) in CHAINS {
            let h = self.world.chains[chain].head().await;
            match self.watcher_height(chain).await? {
                Some(w) if w == h => self.check_chain_deposits(chain, h, true).await?,
                other => self.fail(format!(
                    "{chain}: settled with the watcher at {other:?}, the head at {h}"
                )),
            }
        }
        self.check_payouts_paid_once(true).await;
        self.check_holdings().await?;
        self.note(format!("settled at heights {}", self.heights().await));
        Ok(())
    }

    /// Mines a block on every chain and runs its worker, round after round, until nothing
    /// is in flight for more rounds than the deepest confirmations (with `sweeps`: no sweep
    /// open with an amount or submitted either). `false` (and a failure) when that takes
    /// more than [`SETTLE_ROUNDS`].
    pub(in crate::simulate) async fn run_until_quiet(
        &mut self,
        sweeps: bool,
    ) -> anyhow::Result<bool> {
        let max_conf = CHAINS.iter().map(|(_, c)| u64::from(*c)).max().unwrap_or(1);
        let mut quiet_rounds = 0;
        for _ in 0..SETTLE_ROUNDS {
            for (chain, _) in CHAINS {
                self.world.chains[chain].mine(1).await;
                self.node_mut().work(chain).await;
            }
            self.after_step().await?;
            if !self.failures.is_empty() {
                return Ok(false);
            }
            sources::advance_us(1_000_000);
            if self.in_flight(sweeps).await?.is_empty() {
                quiet_rounds += 1;
                if quiet_rounds > max_conf + 2 {
                    return Ok(true);
                }
            } else {
                quiet_rounds = 0;
            }
        }
        let what = self.in_flight(sweeps).await?;
        self.fail(format!(
            "nothing settles after {SETTLE_ROUNDS} rounds: {what}"
        ));
        Ok(false)
    }

    /// `POST /v1/sweeps` for every (address, asset) the ledger holds something on (a
    /// sweep goes out whatever the threshold when asked for).
    pub(in crate::simulate) async fn request_every_sweep(&mut self) -> anyhow::Result<()> {
        let mut wallets: BTreeMap<Uuid, (Uuid, &'static str)> = BTreeMap::new();
        for (project, _, chain, w) in self.model.wallets() {
            wallets.insert(w.id, (project, chain));
        }
        for d in self.model.deposits() {
            if let (Some(i), Some(t)) = (d.invoice, self.model.transfers.get(&d.tx_hash)) {
                if let Some(inv) = self.model.invoices.get(&i) {
                    wallets.insert(d.wallet, (inv.project, t.chain));
                }
            }
        }
        for (wid, (project, chain)) in wallets {
            let wc = &self.world.chains[chain];
            let mut assets = vec![wc.native_symbol.clone()];
            assets.extend(wc.tokens.keys().cloned());
            let key = self
                .model
                .tenant(project)
                .expect("tenant")
                .wallet_key
                .clone();
            for asset in assets {
                let a = asset.clone();
                let held = self.read(move |r| r.holding(wid, &a)).await?;
                if held == 0 {
                    continue;
                }
                let ans = self
                    .node()
                    .post(
                        "/v1/sweeps",
                        &key,
                        Some(&serde_json::json!({"wallet_id": wid, "asset": asset})),
                    )
                    .await?;
                if ans.status >= 300 {
                    self.fail(format!(
                        "POST /v1/sweeps {wid} {asset} while settling: {} {}",
                        ans.status, ans.body
                    ));
                }
            }
        }
        Ok(())
    }

    pub(in crate::simulate) async fn heights(&self) -> String {
        let mut s = Vec::new();
        for (id, c) in &self.world.chains {
            s.push(format!("{id} {}", c.head().await));
        }
        s.join(", ")
    }

    /// What is still in flight: transactions pending on a chain, payouts queued, signing or
    /// submitted, deposits still detected; with `sweeps`, sweeps open with an amount or
    /// submitted. Empty when nothing is.
    pub(in crate::simulate) async fn in_flight(&self, sweeps: bool) -> anyhow::Result<String> {
        use appliance_storage::records::Sweep;
        let mut out = Vec::new();
        for (id, c) in &self.world.chains {
            let n = c.state().await.pending().len();
            if n > 0 {
                out.push(format!("{id}: {n} pending"));
            }
        }
        for p in self.model.open_payouts() {
            if matches!(p.status.as_str(), "queued" | "signing" | "submitted") {
                out.push(format!("payout {} {}", p.id, p.status));
            }
        }
        for d in self.model.detected() {
            out.push(format!("deposit {d} detected"));
        }
        if sweeps {
            let rows = self.read(|r| r.all::<Sweep>()).await?;
            for sw in rows {
                let open = sw.status == SweepStatus::Open && sw.amount > 0;
                if open || sw.status == SweepStatus::Submitted {
                    out.push(format!(
                        "sweep {} {} {}",
                        sw.id,
                        sw.status.as_str(),
                        sw.amount
                    ));
                }
            }
        }
        Ok(out.join("; "))
    }

    /// Every deposit address holds on chain what the ledger's holdings say; the master
    /// wallet holds the tokens the tenants' treasuries say.
    pub(in crate::simulate) async fn check_holdings(&mut self) -> anyhow::Result<()> {
        let mut wallets = self.model.wallets();
        // The invoices' payment addresses too (their wallets are known from their deposits).
        let mut seen: BTreeSet<Uuid> = wallets.iter().map(|w| w.3.id).collect();
        for d in self.model.deposits() {
            if let (Some(i), Some(t)) = (d.invoice, self.model.transfers.get(&d.tx_hash)) {
                if let Some(inv) = self.model.invoices.get(&i) {
                    if seen.insert(d.wallet) {
                        wallets.push((
                            inv.project,
                            Uuid::nil(),
                            t.chain,
                            crate::simulate::model::WalletM {
                                id: d.wallet,
                                address: d.to,
                            },
                        ));
                    }
                }
            }
        }
        let mut bad = Vec::new();
        for (project, _, chain, w) in &wallets {
            let wc = &self.world.chains[chain];
            let mut assets = vec![wc.native_symbol.clone()];
            assets.extend(wc.tokens.keys().cloned());
            for asset in assets {
                let (id, a) = (w.id, asset.clone());
                let ledger = self.read(move |r| r.holding(id, &a)).await?;
                let onchain = self.chain_balance(chain, w.address, &asset).await;
                if ledger != onchain {
                    bad.push(format!(
                        "{chain} wallet {} of {project} ({:#x}): the ledger holds {ledger} {asset}, the chain {onchain}",
                        w.id, w.address
                    ));
                }
            }
        }
        let master = self.signer.evm_master_address();
        for (chain, wc) in &self.world.chains {
            for asset in wc.tokens.keys() {
                let projects: Vec<Uuid> = self.model.tenants.iter().map(|t| t.id).collect();
                let (c, a) = (chain.to_string(), asset.clone());
                let treasury = self
                    .read(move |r| {
                        let mut sum = 0i128;
                        for p in projects {
                            let b =
                                r.balance(&Account::project(p, &c, &a, AccountKind::Treasury))?;
                            sum += b.debits as i128 - b.credits as i128;
                        }
                        Ok(sum)
                    })
                    .await?;
                let onchain = self.chain_balance(chain, master, asset).await as i128;
                if treasury != onchain {
                    bad.push(format!(
                        "{chain}: the treasuries hold {treasury} {asset}, the master wallet {onchain}; sweeps whose ledger amount is not what they moved: {}",
                        self.sweeps_moved(chain, asset).await
                    ));
                }
            }
        }
        for b in bad {
            self.fail(b);
        }
        Ok(())
    }

    /// Sweeps of `asset` whose ledger amount and what their transactions moved on chain
    /// differ (for a failure report).
    pub(in crate::simulate) async fn sweeps_moved(
        &self,
        chain: &'static str,
        asset: &str,
    ) -> String {
        use appliance_storage::records::Sweep;
        let key = chain.to_string();
        let rows = self
            .read(move |r| {
                use crate::workers::chain::store::{out_txs_where, OutKind};
                let out: Vec<(Uuid, Vec<String>)> =
                    out_txs_where(r, &key, |t| t.kind == OutKind::Sweep)?
                        .into_iter()
                        .map(|t| (t.ref_id, t.hashes))
                        .collect();
                let mut sweeps = BTreeMap::new();
                for (id, _) in &out {
                    if let Some(s) = r.get::<Sweep>(*id)? {
                        sweeps.insert(*id, s);
                    }
                }
                Ok((out, sweeps))
            })
            .await
            .unwrap_or_default();
        let (rows, sweeps) = rows;
        let Some(token) = self.world.chains[chain].tokens.get(asset).copied() else {
            return String::new();
        };
        let master = self.signer.evm_master_address();
        let mut moved: BTreeMap<Uuid, u128> = BTreeMap::new();
        {
            let c = self.world.chains[chain].state().await;
            for (id, hashes) in &rows {
                for h in hashes {
                    let Ok(h) = h.parse::<B256>() else { continue };
                    for (t, _, to, v) in c.token_transfers_of(h).unwrap_or_default() {
                        if t == token && to == master {
                            *moved.entry(*id).or_default() += u128::try_from(v).unwrap_or(0);
                        }
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (id, s) in &sweeps {
            if s.asset != asset {
                continue;
            }
            let ledger = if s.status == SweepStatus::Confirmed {
                s.amount
            } else {
                0
            };
            let m = moved.get(id).copied().unwrap_or(0);
            if m != ledger {
                out.push(format!(
                    "sweep {id} {} amount {} moved {m}",
                    s.status.as_str(),
                    s.amount
                ));
            }
        }
        out.join(", ")
    }
}
