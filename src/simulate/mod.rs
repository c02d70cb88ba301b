//! `appliance simulate --seed S --steps N`: a deterministic simulation of the
//! whole appliance.
//!
//! The real services, API, chain workers and store (redb on a file in a temporary data dir)
//! run against simulated chains ([`world`]), all driven by ONE seeded random source
//! (`appliance_storage::sources`: the clock, ids, tokens, and every choice of the harness).
//! Nothing is decided by the wall clock or by thread scheduling: the harness runs one thing
//! at a time on a single-threaded runtime, and the workers (watcher, sender with its
//! reconciler, invoice expiry, billing) run as steps it schedules.
//!
//! Each step is one operation ([`ops`]): a tenant's API call (customers, wallets, payouts
//! with approvals, rejections and cancels, sweeps), a payer's transfer, a chain event (blocks,
//! reorgs of any depth, dropped transactions, a node that errors, lags, or changes under a
//! worker between two of its calls), a jump of the clock, a worker step, or a crash (the
//! process dropped and the store reopened, also in the middle of a worker step). Which
//! operations and faults a run uses, and how often, is itself drawn from the seed (swarm
//! testing, as TigerBeetle's VOPR and FoundationDB do).
//!
//! After every step the invariants are checked ([`checks`]); the first failure ends the run
//! with its seed, step, operation and a short trace. The last line is
//! `seed S steps N digest HEX`, a digest of the final store and chains: the same seed gives
//! the same digest on every run and machine.

mod checks;
mod model;
mod node;
mod ops;
mod rng;
mod scenario;
mod world;

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use appliance_chains::evm::{Address, B256, U256};
use sha2::Digest;

use appliance_chains::sim::Genesis;
use appliance_signer::Signer;
use appliance_storage::sources;

use crate::config::{ChainConfig, Config};
use model::Model;
use node::Node;
use world::World;

pub use ops::OpKind;

/// The simulation's clock at its start: 2026-01-01T00:00:00Z, in Unix microseconds.
pub const START_US: i64 = 1_767_225_600_000_000;

/// Steps between two full `verify` runs of the store (and at the end).
pub const VERIFY_EVERY: u64 = 500;

/// Steps between two settlings (faults off, chains mined until everything is final, then
/// the chain and the ledger compared address by address).
pub const SETTLE_EVERY: u64 = 1_000;

/// Lines of trace kept for a failure report.
const TRACE_LINES: usize = 40;

/// What `appliance simulate` is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub steps: u64,
    /// Keep the data dir (printed) instead of removing it.
    pub keep: bool,
    /// Print every step as it runs.
    pub verbose: bool,
    /// Steps between two settlings ([`SETTLE_EVERY`] by default).
    pub settle_every: u64,
    /// A scripted run instead of a random one (`reorg-after-credit`: a credited deposit
    /// whose block a reorg replaces, `steps` rounds of it).
    pub scenario: Option<String>,
}

/// One invariant that did not hold.
#[derive(Debug, Clone)]
pub struct Failure {
    pub step: u64,
    pub op: String,
    pub what: String,
}

/// How a run ended.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub steps: u64,
    /// Hex SHA-256 of the final store content and chain state.
    pub digest: String,
    pub failures: Vec<Failure>,
    /// The last steps before the first failure.
    pub trace: Vec<String>,
    /// Operations run, by kind.
    pub counts: BTreeMap<String, u64>,
    pub crashes: u64,
    pub reorgs: u64,
}

/// The chains a simulation runs: id, confirmations.
const CHAINS: [(&str, u32); 2] = [("ethereum", 3), ("bsc", 2)];

/// The running simulation.
pub struct Sim {
    config: Config,
    signer: Arc<Signer>,
    world: World,
    node: Option<Node>,
    model: Model,
    swarm: ops::Swarm,
    step: u64,
    trace: VecDeque<String>,
    failures: Vec<Failure>,
    counts: BTreeMap<String, u64>,
    crashes: u64,
    reorgs: u64,
    /// The operation of the current step (for a failure report).
    current: String,
    /// Chains whose watcher caught up in this step with nothing changing under it: their
    /// deposits are compared with the chain after the step.
    pending_sync: Vec<&'static str>,
    /// Invoices an event named since their deposits were last read.
    invoices_to_read: std::collections::BTreeSet<uuid::Uuid>,
}

/// Runs a whole simulation on a fresh single-threaded runtime.
pub fn run(opts: &Options) -> anyhow::Result<Report> {
    sources::install(opts.seed, START_US).map_err(|e| anyhow!("{e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let dir = temp_dir(opts.seed)?;
    let out = rt.block_on(async {
        let mut sim = Sim::new(&dir).await?;
        match opts.scenario.as_deref() {
            None => sim.run(opts).await,
            Some("reorg-after-credit") => {
                sim.reorg_after_credit(opts.steps).await?;
                sim.report(opts).await
            }
            Some(other) => Err(anyhow!("no scenario {other:?} (known: reorg-after-credit)")),
        }
    });
    if opts.keep {
        eprintln!("data dir kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    out
}

/// A fresh directory for the data dir: in `/dev/shm` when there is one (a store on tmpfs
/// syncs without touching a disk), else the system's temporary directory.
fn temp_dir(seed: u64) -> anyhow::Result<PathBuf> {
    let base = ["/dev/shm"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    for i in 0..1000u32 {
        let p = base.join(format!("appliance-sim-{}-{seed}-{i}", std::process::id()));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).context(format!("creating {}", p.display())),
        }
    }
    Err(anyhow!(
        "no free temporary directory under {}",
        base.display()
    ))
}

/// The configuration of a simulated appliance: the chains of [`CHAINS`] as live chains
/// (their node is the world's), signing on, limits out of the way of the load.
fn config(dir: &std::path::Path) -> Config {
    let mut c = Config {
        data_dir: dir.join("data"),
        ..Config::default()
    };
    c.signing.enabled = true;
    c.limits.unauthenticated_per_minute = 1_000_000;
    c.webhooks.allow_private_targets = true;
    c.metrics.access = crate::config::MetricsAccess::Off;
    for (id, conf) in CHAINS {
        c.chains.insert(
            id.to_string(),
            ChainConfig {
                rpc_url: Some(format!("http://{id}.simulated.invalid")),
                rpc_urls: Vec::new(),
                confirmations: Some(conf),
                poll_interval_ms: 1000,
                sweep_threshold_usd_cents: Some(100),
                assets: Vec::new(),
                replace_after_ms: 30_000,
                start_block: Some(0),
                dex: None,
            },
        );
    }
    c
}

impl Sim {
    async fn new(dir: &std::path::Path) -> anyhow::Result<Sim> {
        let config = config(dir);
        let signer = {
            use rand_chacha::rand_core::SeedableRng;
            let mut r = rand_chacha::ChaCha20Rng::from_seed(rng::bytes32());
            Arc::new(Signer::in_memory(&mut r)?)
        };
        let master = signer.evm_master_address();
        let reg = crate::registry::Registry::from_config(&config);
        let mut world = World::new();
        for (id, _) in CHAINS {
            let c = reg.chain(id).ok_or_else(|| anyhow!("no chain {id}"))?;
            let mut tokens = BTreeMap::new();
            for a in c.assets.iter().filter(|a| !a.is_native) {
                if let Ok(t) = a.contract.parse::<Address>() {
                    tokens.insert(a.symbol.clone(), t);
                }
            }
            let mut seed = Vec::from(&b"appliance-simulate:"[..]);
            seed.extend_from_slice(id.as_bytes());
            seed.extend_from_slice(&rng::bytes32());
            let genesis = Genesis {
                chain: id.to_string(),
                chain_id: c.info.chain_id,
                seed: B256::from(appliance_chains::address::keccak256(&seed)),
                time_ms: (START_US / 1000) as u64,
                treasury: master,
                // Gas for every send of the run; no tokens: the treasury holds what sweeps
                // bring, so the ledger and the chain can be compared exactly.
                treasury_native: U256::from(10u128.pow(24)),
                treasury_tokens: U256::ZERO,
                tokens: tokens.values().copied().collect(),
            };
            world.add_chain(c.id(), genesis, tokens, c.info.native.symbol.to_string());
        }
        let node = Node::start(&config, signer.clone(), &world).await?;
        let swarm = ops::Swarm::draw();
        let mut sim = Sim {
            config,
            signer,
            world,
            node: Some(node),
            model: Model::default(),
            swarm,
            step: 0,
            trace: VecDeque::new(),
            failures: Vec::new(),
            counts: BTreeMap::new(),
            crashes: 0,
            reorgs: 0,
            current: "set-up".into(),
            pending_sync: Vec::new(),
            invoices_to_read: Default::default(),
        };
        sim.note(format!("swarm: {}", sim.swarm.describe()));
        sim.setup().await?;
        Ok(sim)
    }

    fn node(&self) -> &Node {
        self.node.as_ref().expect("the node runs between steps")
    }

    /// Runs `f` on a read snapshot of the node's store.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&appliance_storage::ReadCtx) -> Result<T, appliance_storage::StoreError>
            + Send
            + 'static,
    ) -> Result<T, appliance_storage::StoreError> {
        self.node().store().read(f).await
    }

    fn node_mut(&mut self) -> &mut Node {
        self.node.as_mut().expect("the node runs between steps")
    }

    /// A line of the trace (kept for a failure report).
    fn note(&mut self, s: String) {
        if self.trace.len() >= TRACE_LINES {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("[{}] {s}", self.step));
    }

    /// Records a failed invariant.
    fn fail(&mut self, what: String) {
        self.failures.push(Failure {
            step: self.step,
            op: self.current.clone(),
            what,
        });
    }

    async fn run(&mut self, opts: &Options) -> anyhow::Result<Report> {
        while self.step < opts.steps && self.failures.is_empty() {
            self.step += 1;
            let op = self.swarm.pick();
            self.current = op.name().to_string();
            *self.counts.entry(op.name().to_string()).or_default() += 1;
            let done = self.apply(op).await?;
            self.current = format!("{} ({done})", op.name());
            self.note(self.current.clone());
            if opts.verbose {
                eprintln!("[{}] {}", self.step, self.current);
            }
            if self.world.crashed.load(std::sync::atomic::Ordering::SeqCst) {
                self.restart().await?;
            }
            self.after_step().await?;
            if self.failures.is_empty() && self.step.is_multiple_of(opts.settle_every) {
                self.current = "settle".into();
                self.settle().await?;
            }
            if self.failures.is_empty() && self.step.is_multiple_of(VERIFY_EVERY) {
                self.verify().await?;
            }
            let advance = rng::between(20, 1_500) * 1000;
            sources::advance_us(advance);
        }
        if self.failures.is_empty() {
            self.current = "final settle".into();
            self.settle().await?;
        }
        self.report(opts).await
    }

    /// The run's outcome (after a last `verify`; the trace when something failed) and its
    /// digest; stops the node.
    async fn report(&mut self, opts: &Options) -> anyhow::Result<Report> {
        if self.failures.is_empty() {
            self.verify().await?;
        }
        let trace = if self.failures.is_empty() {
            Vec::new()
        } else {
            self.trace.iter().cloned().collect()
        };
        let digest = self.digest().await?;
        if let Some(n) = self.node.take() {
            n.crash(&self.world).await;
        }
        Ok(Report {
            seed: opts.seed,
            steps: self.step,
            digest,
            failures: self.failures.clone(),
            trace,
            counts: self.counts.clone(),
            crashes: self.crashes,
            reorgs: self.reorgs,
        })
    }

    /// Drops the running appliance as a crash does and starts a new one on the same files.
    async fn restart(&mut self) -> anyhow::Result<()> {
        self.crashes += 1;
        if let Some(n) = self.node.take() {
            n.crash(&self.world).await;
        }
        self.world
            .crashed
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.node = Some(Node::start(&self.config, self.signer.clone(), &self.world).await?);
        self.note("restarted".into());
        self.check_survivors().await
    }

    /// SHA-256 of the store's content digest and every chain's head block hash and
    /// treasury balances.
    async fn digest(&self) -> anyhow::Result<String> {
        let (store_digest, _) = self.read(appliance_storage::backup::content_digest).await?;
        let mut h = sha2::Sha256::new();
        h.update(store_digest);
        for (id, c) in &self.world.chains {
            let chain = c.state().await;
            h.update(id.as_bytes());
            h.update(chain.head().to_be_bytes());
            if let Some(b) = chain.block(chain.head()) {
                h.update(b.hash.as_slice());
            }
        }
        Ok(hex::encode(h.finalize()))
    }
}
