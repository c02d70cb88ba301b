//! Scripted runs of the simulation: a story told step by step on the same world, node and
//! checks as the random runs (`appliance simulate --scenario NAME`).
//!
//! `reorg-after-credit` runs on the simulated chain: a 2 USDT deposit is
//! mined, confirmed (3 confirmations), credited and swept; then a reorg replaces its block
//! (depth 6, or deeper when more was mined, transactions dropped) and blocks come one at a
//! time with a worker step after each. The deposit must be orphaned and its credit reversed
//! within 30 blocks, every round. The rounds vary what the node does meanwhile: nothing, a
//! stale view of the chain before the reorg on some reads (a pool behind a load balancer),
//! blocks mined between the worker's calls, a lag.

use appliance_chains::evm::{Address, B256, U256};
use appliance_chains::sim::Inject;

use super::rng;
use super::world::NodeFaults;
use super::Sim;

/// The chain of the scenario.
const CHAIN: &str = "ethereum";

impl Sim {
    /// The `reorg-after-credit` scenario, `rounds` times (see the module docs).
    pub(super) async fn reorg_after_credit(&mut self, rounds: u64) -> anyhow::Result<()> {
        // One customer with an address on the chain.
        let (project, customer, wallet) = loop {
            if let Some((p, c, _, w)) = self
                .model
                .wallets()
                .into_iter()
                .find(|(_, _, ch, _)| *ch == CHAIN)
            {
                break (p, c, w);
            }
            self.step += 1;
            self.apply(super::OpKind::NewCustomer).await?;
            self.apply(super::OpKind::NewWallet).await?;
            self.after_step().await?;
            if self.step > 200 {
                anyhow::bail!("no customer address after 200 steps");
            }
        };
        let usdt = self.world.chains[CHAIN].tokens["USDT"];
        for round in 0..rounds {
            self.current = format!("round {round}");
            let hash = B256::from(rng::bytes32());
            self.world.chains[CHAIN]
                .inject(Inject {
                    hash,
                    from: Address::from(rng::bytes20()),
                    to: wallet.address,
                    token: Some(usdt),
                    value: U256::from(2_000_000u64),
                })
                .await;
            self.model.add_transfer(super::model::TransferM {
                hash,
                chain: CHAIN,
                to: wallet.address,
                invoice: None,
                asset: "USDT".into(),
                amount: 2_000_000,
                step: self.step,
            });
            // Mined, confirmed and credited, then swept.
            let credited = self.deposit_within(hash, "confirmed", 20).await?;
            if !credited {
                self.fail(format!(
                    "round {round}: the deposit was not credited in 20 blocks"
                ));
                return Ok(());
            }
            self.blocks_until(|_| false, 2).await?;
            let mined = self.world.chains[CHAIN]
                .state()
                .await
                .receipt(hash)
                .map(|r| r.block_number)
                .unwrap_or(0);
            let head = self.world.chains[CHAIN].head().await;
            let depth = (head + 1 - mined).max(6);
            let faults = match round % 4 {
                0 => NodeFaults::default(),
                1 => NodeFaults {
                    stale_permille: 500,
                    ..NodeFaults::default()
                },
                2 => NodeFaults {
                    interleave_mine_permille: 300,
                    ..NodeFaults::default()
                },
                _ => NodeFaults {
                    lag: 2,
                    ..NodeFaults::default()
                },
            };
            *self.world.chains[CHAIN].faults.lock().expect("lock") = faults.clone();
            let done = self.world.chains[CHAIN].reorg(depth, true).await;
            self.note(format!(
                "round {round}: deposit mined in {mined}, reorg of {done} at head {head}, node {faults:?}"
            ));
            let orphaned = self.deposit_within(hash, "orphaned", 30).await?;
            *self.world.chains[CHAIN].faults.lock().expect("lock") = NodeFaults::default();
            if !orphaned {
                self.fail(format!(
                    "round {round}: the deposit mined in block {mined} is {:?} 30 blocks after a reorg of depth {done} at head {head} (node: {faults:?})",
                    self.deposit_status(hash)
                ));
                return Ok(());
            }
            let k = (project, customer, CHAIN.to_string(), "USDT".to_string());
            let left = self.model.balances.get(&k).map(|b| b.0).unwrap_or(0);
            if left != 0 {
                self.fail(format!("round {round}: {left} USDT still credited"));
                return Ok(());
            }
        }
        self.current = "final settle".into();
        self.settle().await
    }

    /// The status of the live deposit of transfer `hash`, else of its latest deposit.
    fn deposit_status(&self, hash: B256) -> Option<String> {
        if let Some((id, _)) = self.model.live(&hash) {
            return self.model.deposit(id).map(|d| d.status.clone());
        }
        self.model
            .deposits()
            .filter(|d| d.tx_hash == hash)
            .last()
            .map(|d| d.status.clone())
    }

    /// Mines one block at a time, each followed by a worker step and the checks, until
    /// `done` holds (`true`) or `most` blocks were mined (`false`).
    /// [`Sim::blocks_until`] the deposit of transfer `hash` is `status`.
    async fn deposit_within(
        &mut self,
        hash: B256,
        status: &str,
        most: u64,
    ) -> anyhow::Result<bool> {
        self.blocks_until(|s| s.deposit_status(hash).as_deref() == Some(status), most)
            .await
    }

    async fn blocks_until(
        &mut self,
        done: impl Fn(&Sim) -> bool,
        most: u64,
    ) -> anyhow::Result<bool> {
        for _ in 0..most {
            self.step += 1;
            self.world.chains[CHAIN].mine(1).await;
            self.work(CHAIN).await;
            self.after_step().await?;
            appliance_storage::sources::advance_us(1_000_000);
            if !self.failures.is_empty() {
                return Ok(false);
            }
            if done(self) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
