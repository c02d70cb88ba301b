//! The load phases and the concurrent runner that drives them.
//!
//! A phase is one kind of traffic (SPEC.md section 4): [`Phase::Customers`] creates customers,
//! [`Phase::Wallets`] gives them Ethereum deposit addresses, [`Phase::Deposits`] credits them
//! through simulated test deposits, [`Phase::Payouts`] spends from the credited ones and
//! [`Phase::Reads`] mixes fetches, balances, deposit lists and pings; [`Phase::Invoices`]
//! creates invoices and [`Phase::Checkout`] reads their public checkouts. Each phase runs
//! `clients` concurrent tasks, each with its own keep-alive connection, until a deadline or a
//! request count is reached ([`Limit`]). Ids produced by one phase feed the next ([`Pools`]);
//! when a phase is run without its predecessors, [`Runner::prepare`] seeds what it needs with
//! a few untimed, unreported requests.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::ValueEnum;
use hyper::Method;

use crate::client::{Conn, Outcome, Req, Rng, Stats, Target};

/// One kind of traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Phase {
    /// `POST /v1/customers` with a unique `reference_id` (wallet key); 201 expected.
    Customers,
    /// `POST /v1/wallets` on `ethereum` for the customers created so far (wallet key); 201,
    /// or 200 once every customer has its address and the phase wraps around.
    Wallets,
    /// `POST /v1/test/deposits`, 100 USDT (6 decimals) confirmed at once (wallet key); 201.
    Deposits,
    /// `POST /v1/payouts` of 0.001 USDT from a credited customer (payout key, a fresh
    /// `Idempotency-Key` each); 202.
    Payouts,
    /// An even mix of `GET /v1/customers/{id}`, `GET /v1/customers/{id}/balances`,
    /// `GET /v1/deposits?limit=10` and `GET /v1/ping` (wallet key); 200.
    Reads,
    /// A merchant's day on one connection per client: of every ten requests, one creates a
    /// customer, one gives a customer an address (the client's newest customer without one,
    /// else any: 200), four are confirmed test deposits, one a payout and three reads of
    /// the same resources (`GET /v1/customers/{id}`, `.../balances`, `GET /v1/deposits/{id}`
    /// of a deposit this client made). Customers made here join the pools.
    Mixed,
    /// `POST /v1/invoices` of 40.00 USD (`price_amount` `"4000"`, integer cents; checkout
    /// key, a fresh `Idempotency-Key` each); 201. The checkout tokens (last path segment of
    /// each `checkout_url`) join the pool the checkout phase reads.
    Invoices,
    /// `GET /v1/checkout/{token}`, public (no `Authorization`), round-robin over every
    /// checkout token gathered so far; 200. Each token has its own budget of 120 requests
    /// per minute (DECISIONS.md section 12; a governor quota: a burst of 120, then one more
    /// every 0.5 s), and a 429 counts as an error. So a phase of `d` seconds at `r`
    /// requests/s needs at least `r * d / 120` tokens: [`Runner::prepare`] seeds invoices up
    /// to [`checkout_tokens_needed`] (at least 2,000; 50,000/s assumed for a timed phase).
    /// Requests naming an existing token are charged to that token only, never to the
    /// per-IP unauthenticated budget (only misses are).
    Checkout,
    /// Not a traffic mix: the expiry benchmark (`crate::expiry`), which makes open
    /// invoices, moves the test clock past their expiry and measures a steady load of
    /// customer reads and writes before and while the expiry worker expires them.
    Expiry,
}

impl Phase {
    /// Lower-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Customers => "customers",
            Phase::Wallets => "wallets",
            Phase::Deposits => "deposits",
            Phase::Payouts => "payouts",
            Phase::Reads => "reads",
            Phase::Mixed => "mixed",
            Phase::Invoices => "invoices",
            Phase::Checkout => "checkout",
            Phase::Expiry => "expiry",
        }
    }
}

/// When a phase stops.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    /// Start no request after this long.
    Time(Duration),
    /// Send exactly this many requests (split among the clients as they go).
    Count(u64),
}

/// Payout destination: a valid EIP-55 address that the appliance does not custody.
const PAYOUT_TO: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";

/// Endpoint labels (method + route template) under which figures are reported.
const CREATE_CUSTOMER: &str = "POST /v1/customers";
const CREATE_WALLET: &str = "POST /v1/wallets";
/// Label of the confirmed test deposits, whose count the store figures are divided by.
pub const TEST_DEPOSIT: &str = "POST /v1/test/deposits";
const CREATE_PAYOUT: &str = "POST /v1/payouts";
const GET_CUSTOMER: &str = "GET /v1/customers/{id}";
const GET_BALANCES: &str = "GET /v1/customers/{id}/balances";
const LIST_DEPOSITS: &str = "GET /v1/deposits?limit=10";
const PING: &str = "GET /v1/ping";
const GET_DEPOSIT: &str = "GET /v1/deposits/{id}";
const CREATE_INVOICE: &str = "POST /v1/invoices";
const GET_CHECKOUT: &str = "GET /v1/checkout/{token}";

/// Requests one checkout token may take per minute (the server's per-token budget; also
/// its burst).
const CHECKOUT_PER_MINUTE: u64 = 120;
/// The fewest checkout tokens the checkout phase reads.
const CHECKOUT_MIN_TOKENS: u64 = 2_000;
/// The rate assumed when sizing the checkout token pool for a timed phase (requests/s).
const CHECKOUT_EXPECTED_RATE: u64 = 50_000;

/// Checkout tokens needed so that no token goes over its budget during a checkout phase
/// limited by `limit` (round-robin spreads the requests evenly): the phase's requests
/// (`--count`, or [`CHECKOUT_EXPECTED_RATE`] times the seconds) over
/// [`CHECKOUT_PER_MINUTE`], and at least [`CHECKOUT_MIN_TOKENS`].
pub fn checkout_tokens_needed(limit: Limit) -> u64 {
    let requests = match limit {
        Limit::Count(n) => n,
        Limit::Time(d) => CHECKOUT_EXPECTED_RATE.saturating_mul(d.as_secs().max(1)),
    };
    requests
        .div_ceil(CHECKOUT_PER_MINUTE)
        .max(CHECKOUT_MIN_TOKENS)
}

/// What every client needs to reach the server.
#[derive(Clone)]
pub struct Setup {
    pub target: Target,
    pub wallet_token: String,
    pub payout_token: String,
    /// Checkout-kind key (invoices); empty when not given (the invoice phases then fail).
    pub checkout_token: String,
    /// Concurrent clients (= connections).
    pub clients: usize,
    /// Bound on one request, send to last body byte.
    pub request_timeout: Duration,
    /// Paced phases: requests per second across all clients, each client sending one
    /// request every `clients / rate` seconds (its first spread over one interval), or
    /// sooner after a late answer until it has caught up with its schedule. Latency is
    /// still measured from sending to the last body byte, so the phase's achieved rate
    /// must be compared with this: below it, the server could not keep up. `None`: each
    /// client sends its next request as soon as the last one is answered (the closed loop,
    /// the server's capacity).
    pub rate: Option<u64>,
}

/// Customer ids gathered so far.
#[derive(Default)]
pub struct Pools {
    /// Customers created (`POST /v1/customers` answered 2xx with an `id`).
    pub customers: Vec<String>,
    /// Customers holding an Ethereum address.
    pub with_wallet: Vec<String>,
    /// Customers credited by at least one confirmed test deposit.
    pub funded: Vec<String>,
    /// Invoices created: ids (`POST /v1/invoices` answered 2xx with `id` and `checkout_url`).
    pub invoices: Vec<String>,
    /// Their checkout tokens, in the same order.
    pub checkout_tokens: Vec<String>,
}

/// The figures of one phase.
pub struct PhaseResult {
    pub phase: Phase,
    /// From the first request's start until the last client finished.
    pub elapsed: Duration,
    pub stats: Stats,
}

/// Hands out request sequence numbers until the phase's limit is reached.
struct Budget {
    deadline: Option<Instant>,
    max: Option<u64>,
    next: AtomicU64,
    /// Successful requests so far, for progress reports.
    succeeded: AtomicU64,
}

impl Budget {
    fn new(limit: Limit) -> Self {
        let (deadline, max) = match limit {
            Limit::Time(d) => (Some(Instant::now() + d), None),
            Limit::Count(n) => (None, Some(n)),
        };
        Self {
            deadline,
            max,
            next: AtomicU64::new(0),
            succeeded: AtomicU64::new(0),
        }
    }

    /// The next sequence number, or `None` when the phase is over.
    fn take(&self) -> Option<u64> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        match self.max {
            Some(max) if n >= max => None,
            _ => Some(n),
        }
    }
}

/// The ids one phase works on, shared read-only by its clients.
struct Input {
    /// Customers to create wallets for / deposit to / read.
    customers: Vec<String>,
    /// Customers to pay out from / read balances of.
    funded: Vec<String>,
    /// Checkout tokens to read.
    tokens: Vec<String>,
}

/// Runs phases against one server and carries ids from one phase to the next.
pub struct Runner {
    setup: Arc<Setup>,
    /// Distinguishes this run's `reference_id`s from any earlier run's.
    run_id: Arc<str>,
    pub pools: Pools,
}

impl Runner {
    pub fn new(setup: Setup) -> Self {
        let run_id = uuid::Uuid::now_v7().simple().to_string();
        Self {
            setup: Arc::new(setup),
            run_id: Arc::from(&run_id[..]),
            pools: Pools::default(),
        }
    }

    /// What every client needs to reach the server.
    pub fn setup(&self) -> &Arc<Setup> {
        &self.setup
    }

    /// Seeds the ids `phase` needs when earlier phases did not run (or produced none):
    /// customers for wallets, customers with addresses for deposits, credited customers for
    /// payouts and reads, and for the checkout phase invoices until there are
    /// [`checkout_tokens_needed`]`(limit)` checkout tokens.
    pub async fn prepare(&mut self, phase: Phase, limit: Limit) -> Result<()> {
        if phase == Phase::Expiry {
            // `crate::expiry::run` makes what it needs.
            return Ok(());
        }
        if matches!(phase, Phase::Invoices | Phase::Checkout)
            && self.setup.checkout_token.is_empty()
        {
            bail!(
                "the {} phase needs a checkout key (--checkout-token)",
                phase.name()
            );
        }
        if phase == Phase::Invoices {
            return Ok(());
        }
        if phase == Phase::Checkout {
            let needed = checkout_tokens_needed(limit);
            let have = self.pools.checkout_tokens.len() as u64;
            if have < needed {
                self.seed(Phase::Invoices, needed - have).await?;
            }
            let have = self.pools.checkout_tokens.len() as u64;
            if have < needed {
                println!(
                    "warning: only {have} checkout tokens for the checkout phase ({needed} \
                     needed to stay within {CHECKOUT_PER_MINUTE} requests per token and \
                     minute); expect 429s"
                );
            }
            return Ok(());
        }
        let seed = (self.setup.clients as u64 * 4).max(256);
        let needs_customers = phase != Phase::Customers;
        let needs_wallets = matches!(
            phase,
            Phase::Deposits | Phase::Payouts | Phase::Reads | Phase::Mixed
        );
        let needs_funds = matches!(phase, Phase::Payouts | Phase::Reads | Phase::Mixed);
        if needs_customers && self.pools.customers.is_empty() {
            self.seed(Phase::Customers, seed).await?;
        }
        if needs_wallets && self.pools.with_wallet.is_empty() {
            let n = self.pools.customers.len() as u64;
            self.seed(Phase::Wallets, n).await?;
        }
        if needs_funds && self.pools.funded.is_empty() {
            let n = self.pools.with_wallet.len() as u64;
            self.seed(Phase::Deposits, n).await?;
        }
        Ok(())
    }

    /// Runs `phase` for `n` requests without reporting, failing if none succeeded.
    async fn seed(&mut self, phase: Phase, n: u64) -> Result<()> {
        println!("setup: {n} x {} (not measured)", phase.name());
        let result = self.run(phase, Limit::Count(n), None).await?;
        if result.stats.successes() == 0 {
            Stats::print_header();
            result.stats.print_table(result.elapsed);
            bail!(
                "setup for the {} phase failed: no request succeeded",
                phase.name()
            );
        }
        Ok(())
    }

    /// Runs one phase with `setup.clients` concurrent clients until `limit`, adds the ids it
    /// produced to the pools, and returns its figures. With `progress`, prints the number of
    /// successful requests at that interval.
    pub async fn run(
        &mut self,
        phase: Phase,
        limit: Limit,
        progress: Option<Duration>,
    ) -> Result<PhaseResult> {
        let input = Arc::new(Input {
            customers: match phase {
                Phase::Wallets | Phase::Reads => self.pools.customers.clone(),
                _ => self.pools.with_wallet.clone(),
            },
            funded: self.pools.funded.clone(),
            tokens: match phase {
                Phase::Checkout => self.pools.checkout_tokens.clone(),
                _ => Vec::new(),
            },
        });
        let needs = match phase {
            Phase::Expiry => bail!("the expiry phase is run by expiry::run"),
            Phase::Customers | Phase::Invoices => false,
            Phase::Checkout => input.tokens.is_empty(),
            Phase::Wallets | Phase::Deposits => input.customers.is_empty(),
            Phase::Payouts | Phase::Reads | Phase::Mixed => {
                input.funded.is_empty() || input.customers.is_empty()
            }
        };
        if needs {
            bail!(
                "the {} phase has nothing to work on (call prepare first)",
                phase.name()
            );
        }

        let budget = Arc::new(Budget::new(limit));
        let started = Instant::now();
        let ticker = progress.map(|every| {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    tick.tick().await;
                    let done = budget.succeeded.load(Ordering::Relaxed);
                    let secs = started.elapsed().as_secs_f64();
                    println!(
                        "  ... {done} successful after {secs:.0} s ({:.0}/s)",
                        done as f64 / secs
                    );
                }
            })
        });

        let mut handles = Vec::with_capacity(self.setup.clients);
        for idx in 0..self.setup.clients {
            let setup = Arc::clone(&self.setup);
            let run_id = Arc::clone(&self.run_id);
            let input = Arc::clone(&input);
            let budget = Arc::clone(&budget);
            handles.push(tokio::spawn(client_loop(
                phase, setup, run_id, input, budget, idx,
            )));
        }
        let mut stats = Stats::default();
        let mut produced = Vec::new();
        let mut mixed = MixedIds::default();
        for handle in handles {
            let (client_stats, ids, m) = handle.await?;
            stats.merge(&client_stats);
            produced.extend(ids);
            mixed.merge(m);
        }
        let elapsed = started.elapsed();
        if let Some(ticker) = ticker {
            ticker.abort();
        }

        let pool = match phase {
            Phase::Customers => Some(&mut self.pools.customers),
            Phase::Wallets => Some(&mut self.pools.with_wallet),
            Phase::Deposits => Some(&mut self.pools.funded),
            Phase::Payouts | Phase::Reads | Phase::Checkout | Phase::Expiry => None,
            Phase::Invoices => {
                // Each produced entry is `id token`; no duplicates (fresh invoices).
                for pair in produced.drain(..) {
                    if let Some((id, token)) = pair.split_once(' ') {
                        self.pools.invoices.push(id.to_string());
                        self.pools.checkout_tokens.push(token.to_string());
                    }
                }
                None
            }
            Phase::Mixed => {
                // New customers (with their addresses and credits) join the pools.
                add_new(&mut self.pools.customers, mixed.customers);
                add_new(&mut self.pools.with_wallet, mixed.with_wallet);
                add_new(&mut self.pools.funded, mixed.funded);
                None
            }
        };
        if let Some(pool) = pool {
            let mut seen: HashSet<String> = pool.iter().cloned().collect();
            for id in produced {
                if seen.insert(id.clone()) {
                    pool.push(id);
                }
            }
        }
        Ok(PhaseResult {
            phase,
            elapsed,
            stats,
        })
    }
}

/// Appends the ids of `new` not yet in `pool`.
fn add_new(pool: &mut Vec<String>, new: Vec<String>) {
    let mut seen: HashSet<String> = pool.iter().cloned().collect();
    for id in new {
        if seen.insert(id.clone()) {
            pool.push(id);
        }
    }
}

/// Ids one client of the mixed phase produced: customers it created, those it gave an
/// address, those it credited, and the deposits it made (read back by id).
#[derive(Default)]
struct MixedIds {
    customers: Vec<String>,
    with_wallet: Vec<String>,
    funded: Vec<String>,
    deposits: Vec<String>,
}

impl MixedIds {
    fn merge(&mut self, other: MixedIds) {
        self.customers.extend(other.customers);
        self.with_wallet.extend(other.with_wallet);
        self.funded.extend(other.funded);
    }
}

/// What a mixed-phase request was, for the bookkeeping after its answer.
enum MixedStep {
    Customer,
    Wallet(String),
    Deposit(String),
    Other,
}

/// One client: sends `phase` requests on one connection until the budget runs out. Returns
/// its figures, the customer ids its successful requests produced or touched (invoices
/// phase: `"{id} {checkout token}"` of each invoice it made), and (mixed phase) the ids it
/// made.
/// The schedule of client `idx` of `clients` in a phase paced at `rate` requests/s
/// ([`Setup::rate`]): one tick every `clients / rate` seconds, the first after `idx / clients`
/// of an interval (so the clients' requests are spread evenly), and after a late answer the
/// missed ticks at once until the client is back on its schedule.
fn pace(rate: u64, clients: usize, idx: usize) -> tokio::time::Interval {
    let clients = clients.max(1);
    let every = Duration::from_secs_f64(clients as f64 / rate.max(1) as f64);
    let offset = every.mul_f64(idx as f64 / clients as f64);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + offset, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    tick
}

async fn client_loop(
    phase: Phase,
    setup: Arc<Setup>,
    run_id: Arc<str>,
    input: Arc<Input>,
    budget: Arc<Budget>,
    idx: usize,
) -> (Stats, Vec<String>, MixedIds) {
    let mut conn = Conn::new(setup.target.clone(), setup.request_timeout);
    let mut stats = Stats::default();
    let mut produced = Vec::new();
    let mut mixed = MixedIds::default();
    // Mixed phase: this client's customers still without an address, newest last.
    let mut bare: Vec<String> = Vec::new();
    let mut rng = Rng::new(idx as u64 + 1);
    let wallet = setup.wallet_token.as_str();
    let mut pace = setup.rate.map(|rate| pace(rate, setup.clients, idx));

    loop {
        if let Some(tick) = pace.as_mut() {
            tick.tick().await;
        }
        let Some(seq) = budget.take() else { break };
        if phase == Phase::Mixed {
            let (label, req, step) =
                mixed_request(seq, &setup, &run_id, &input, &mut rng, &mut bare, &mixed);
            let outcome = conn.send(req).await;
            stats.record(label, &outcome);
            if !outcome.is_success() {
                continue;
            }
            let id = || {
                outcome
                    .json()
                    .as_ref()
                    .and_then(|v| v["id"].as_str().map(str::to_string))
            };
            match step {
                MixedStep::Customer => match id() {
                    Some(c) => {
                        bare.push(c.clone());
                        mixed.customers.push(c);
                    }
                    None => {
                        if let Outcome::Response { body, .. } = &outcome {
                            stats.record_bad_body(label, &String::from_utf8_lossy(body));
                        }
                        continue;
                    }
                },
                MixedStep::Wallet(c) => mixed.with_wallet.push(c),
                MixedStep::Deposit(c) => {
                    if let Some(d) = id() {
                        mixed.deposits.push(d);
                    }
                    mixed.funded.push(c);
                }
                MixedStep::Other => {}
            }
            budget.succeeded.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        // Spread consecutive requests over different customers so that concurrent clients
        // rarely contend for the same ledger accounts.
        let pick = |pool: &[String]| pool[(seq % pool.len() as u64) as usize].clone();
        let (label, req, customer) = match phase {
            Phase::Customers => {
                let body =
                    format!(r#"{{"reference_id":"lg-{run_id}-{seq}","email":"x@example.com"}}"#);
                (CREATE_CUSTOMER, post("/v1/customers", wallet, body), None)
            }
            Phase::Wallets => {
                let c = pick(&input.customers);
                let body = format!(r#"{{"customer_id":"{c}","chain":"ethereum"}}"#);
                (CREATE_WALLET, post("/v1/wallets", wallet, body), Some(c))
            }
            Phase::Deposits => {
                let c = pick(&input.customers);
                let body = format!(
                    r#"{{"customer_id":"{c}","chain":"ethereum","asset":"USDT","decimals":6,"amount":"100000000","confirm":true}}"#
                );
                (
                    TEST_DEPOSIT,
                    post("/v1/test/deposits", wallet, body),
                    Some(c),
                )
            }
            Phase::Payouts => {
                let c = pick(&input.funded);
                let body = format!(
                    r#"{{"customer_id":"{c}","chain":"ethereum","asset":"USDT","decimals":6,"amount":"1000","to_address":"{PAYOUT_TO}"}}"#
                );
                let mut req = post("/v1/payouts", &setup.payout_token, body);
                req.idempotency_key = Some(uuid::Uuid::now_v7().to_string());
                (CREATE_PAYOUT, req, None)
            }
            Phase::Reads => match seq % 4 {
                0 => {
                    let c = &input.customers[rng.below(input.customers.len())];
                    (
                        GET_CUSTOMER,
                        get(format!("/v1/customers/{c}"), wallet),
                        None,
                    )
                }
                1 => {
                    let c = &input.funded[rng.below(input.funded.len())];
                    let path = format!("/v1/customers/{c}/balances");
                    (GET_BALANCES, get(path, wallet), None)
                }
                2 => (
                    LIST_DEPOSITS,
                    get("/v1/deposits?limit=10".into(), wallet),
                    None,
                ),
                _ => (PING, get("/v1/ping".into(), wallet), None),
            },
            Phase::Invoices => {
                let mut req = post(
                    "/v1/invoices",
                    &setup.checkout_token,
                    r#"{"price_amount":"4000"}"#.to_string(),
                );
                req.idempotency_key = Some(uuid::Uuid::now_v7().to_string());
                (CREATE_INVOICE, req, None)
            }
            // Round-robin over the whole pool: each token gets 1 / len of the requests.
            Phase::Checkout => {
                let t = pick(&input.tokens);
                (GET_CHECKOUT, get(format!("/v1/checkout/{t}"), ""), None)
            }
            Phase::Mixed | Phase::Expiry => unreachable!("handled above or elsewhere"),
        };

        let outcome = conn.send(req).await;
        stats.record(label, &outcome);
        if !outcome.is_success() {
            continue;
        }
        match phase {
            Phase::Customers => match outcome.json().as_ref().and_then(|v| v["id"].as_str()) {
                Some(id) => produced.push(id.to_string()),
                None => {
                    if let Outcome::Response { body, .. } = &outcome {
                        stats.record_bad_body(label, &String::from_utf8_lossy(body));
                    }
                    continue;
                }
            },
            Phase::Invoices => match outcome.json().as_ref().and_then(invoice_entry) {
                Some(entry) => produced.push(entry),
                None => {
                    if let Outcome::Response { body, .. } = &outcome {
                        stats.record_bad_body(label, &String::from_utf8_lossy(body));
                    }
                    continue;
                }
            },
            _ => produced.extend(customer),
        }
        budget.succeeded.fetch_add(1, Ordering::Relaxed);
    }
    (stats, produced, mixed)
}

/// The mixed phase's request number `seq` (SPEC.md section 4 endpoints): by `seq % 10`,
/// 0 a customer, 1 an address, 2-5 a confirmed test deposit, 6 a payout, 7-9 a read.
fn mixed_request<'a>(
    seq: u64,
    setup: &'a Setup,
    run_id: &str,
    input: &Input,
    rng: &mut Rng,
    bare: &mut Vec<String>,
    own: &MixedIds,
) -> (&'static str, Req<'a>, MixedStep) {
    let wallet = setup.wallet_token.as_str();
    // Deposits and reads go to customers with an address: the seeded ones and this
    // client's own.
    let pick_addressed = |rng: &mut Rng| -> String {
        let n = input.customers.len() + own.with_wallet.len();
        let i = rng.below(n);
        match input.customers.get(i) {
            Some(c) => c.clone(),
            None => own.with_wallet[i - input.customers.len()].clone(),
        }
    };
    match seq % 10 {
        0 => {
            let body =
                format!(r#"{{"reference_id":"lg-{run_id}-m{seq}","email":"x@example.com"}}"#);
            (
                CREATE_CUSTOMER,
                post("/v1/customers", wallet, body),
                MixedStep::Customer,
            )
        }
        1 => {
            let c = bare.pop().unwrap_or_else(|| pick_addressed(rng));
            let body = format!(r#"{{"customer_id":"{c}","chain":"ethereum"}}"#);
            (
                CREATE_WALLET,
                post("/v1/wallets", wallet, body),
                MixedStep::Wallet(c),
            )
        }
        2..=5 => {
            let c = pick_addressed(rng);
            let body = format!(
                r#"{{"customer_id":"{c}","chain":"ethereum","asset":"USDT","decimals":6,"amount":"100000000","confirm":true}}"#
            );
            (
                TEST_DEPOSIT,
                post("/v1/test/deposits", wallet, body),
                MixedStep::Deposit(c),
            )
        }
        6 => {
            let c = &input.funded[rng.below(input.funded.len())];
            let body = format!(
                r#"{{"customer_id":"{c}","chain":"ethereum","asset":"USDT","decimals":6,"amount":"1000","to_address":"{PAYOUT_TO}"}}"#
            );
            let mut req = post("/v1/payouts", &setup.payout_token, body);
            req.idempotency_key = Some(uuid::Uuid::now_v7().to_string());
            (CREATE_PAYOUT, req, MixedStep::Other)
        }
        7 => {
            let c = pick_addressed(rng);
            (
                GET_CUSTOMER,
                get(format!("/v1/customers/{c}"), wallet),
                MixedStep::Other,
            )
        }
        8 => {
            let c = &input.funded[rng.below(input.funded.len())];
            let path = format!("/v1/customers/{c}/balances");
            (GET_BALANCES, get(path, wallet), MixedStep::Other)
        }
        _ => match own.deposits.last() {
            Some(d) => (
                GET_DEPOSIT,
                get(format!("/v1/deposits/{d}"), wallet),
                MixedStep::Other,
            ),
            None => (
                LIST_DEPOSITS,
                get("/v1/deposits?limit=10".into(), wallet),
                MixedStep::Other,
            ),
        },
    }
}

/// `"{id} {token}"` of an invoice answer: its `id` and the last path segment of its
/// `checkout_url` (`{public_base_url}/checkout/{token}`).
fn invoice_entry(v: &serde_json::Value) -> Option<String> {
    let id = v["id"].as_str()?;
    let token = v["checkout_url"].as_str()?.rsplit('/').next()?;
    if id.is_empty() || token.is_empty() || id.contains(' ') || token.contains(' ') {
        return None;
    }
    Some(format!("{id} {token}"))
}

fn post<'a>(path: &str, token: &'a str, body: String) -> Req<'a> {
    Req {
        method: Method::POST,
        path: path.to_string(),
        token,
        body: Some(body.into_bytes()),
        idempotency_key: None,
    }
}

fn get(path: String, token: &str) -> Req<'_> {
    Req {
        method: Method::GET,
        path,
        token,
        body: None,
        idempotency_key: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_paced_client_ticks_on_its_share_of_the_rate_and_catches_up_when_late() {
        // 1,000 requests/s over 10 clients: each client every 10 ms; client 5 starts 5 ms in.
        let start = tokio::time::Instant::now();
        let mut tick = pace(1_000, 10, 5);
        let mut at = Vec::new();
        for _ in 0..3 {
            at.push(tick.tick().await - start);
        }
        assert_eq!(
            at,
            [5, 15, 25].map(Duration::from_millis),
            "first after its offset, then one interval apart"
        );
        // An answer 35 ms late: the three missed ticks come at once, then the schedule goes on.
        tokio::time::sleep(Duration::from_millis(35)).await;
        let mut late = Vec::new();
        for _ in 0..4 {
            late.push(tick.tick().await - start);
        }
        assert_eq!(late, [35, 45, 55, 65].map(Duration::from_millis));
        assert_eq!(
            tokio::time::Instant::now() - start,
            Duration::from_millis(65)
        );
    }

    #[test]
    fn checkout_pool_size() {
        assert_eq!(
            checkout_tokens_needed(Limit::Time(Duration::from_secs(4))),
            2_000
        );
        // 50,000/s for 30 s over 120 per token.
        assert_eq!(
            checkout_tokens_needed(Limit::Time(Duration::from_secs(30))),
            12_500
        );
        assert_eq!(checkout_tokens_needed(Limit::Count(1_000_001)), 8_334);
        assert_eq!(checkout_tokens_needed(Limit::Count(10)), 2_000);
    }

    #[test]
    fn invoice_entry_takes_the_last_segment() {
        let v = serde_json::json!({
            "id": "inv_1",
            "checkout_url": "http://127.0.0.1:8080/checkout/ck_abc",
        });
        assert_eq!(invoice_entry(&v).as_deref(), Some("inv_1 ck_abc"));
        assert_eq!(invoice_entry(&serde_json::json!({"id": "inv_1"})), None);
    }
}
