//! Fills a test-mode data dir with confirmed test deposits, fast, through the appliance's own
//! write code: for the restart benchmark (restart after `kill -9` on a store of 10M
//! journal entries; docs/performance.md, "Restart and memory").
//!
//! ```text
//! target/release/appliance --test --data-dir DIR     # once: bootstraps the test project; stop it
//! cargo run --release --example fill_store -- --data-dir DIR --deposits N
//!     [--customers C] [--batch B] [--chain ethereum] [--asset USDT]
//!     [--max-store-gb 12] [--min-free-gb 15]
//! ```
//!
//! What it writes, and how: the same rows `POST /v1/customers`, `POST /v1/wallets` and
//! `POST /v1/test/deposits` (`confirm: true`) write, by calling the same service functions
//! the handlers call (`services::customers::create`, `services::wallets::get_or_create`,
//! `services::deposits::create_test`, `services::sim_chain::deposit_transfer`, the block
//! reservation and `Reservation::write` of the simulated chain, as `api::test_mode` does),
//! in store transactions of `--batch` requests each instead of one HTTP request each. So a
//! deposit leaves its deposit row, journal entry, ledger accounts and holding, events,
//! index entries, unique transfer key, sweep schedule and simulated-chain block exactly as
//! the server would, and a snapshot of the chain whenever one is due (the flush the
//! server's timer does); `appliance verify` checks the result. Not done: idempotency records
//! (no key is sent), HTTP, auth and JSON rendering of the answers.
//!
//! The one liberty: the project's daily cap on new addresses (`addresses_per_day`) is lifted
//! in this process's copy of the project (it is a rate limit, not a rule of the data).
//! Customers default to one per ten deposits (PERFORMANCE.md's 1M customers at 10M journal
//! entries); deposit `i` goes to customer `i mod C`.
//!
//! The data dir must not be in use by a server (the store is opened exclusively). Filling
//! stops early, with what it committed, once the store file reaches `--max-store-gb` or the
//! file system's free space drops below `--min-free-gb`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use uuid::Uuid;

use appliance::config::Config;
use appliance::registry::Registry;
use appliance::services::customers::{self, NewCustomer};
use appliance::services::deposits::{self, TestDeposit};
use appliance::services::sim_chain::{self, Reservation, SimChains};
use appliance::services::types::{Amount, AssetSymbol, ChainId, CustomerId};
use appliance::services::{wallets, Scope};
use appliance_storage::records::{Mode, Project};
use appliance_storage::ScanOps;

struct Args {
    data_dir: PathBuf,
    deposits: u64,
    customers: Option<u64>,
    batch: u64,
    chain: String,
    asset: String,
    max_store_bytes: u64,
    min_free_bytes: u64,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        data_dir: PathBuf::new(),
        deposits: 0,
        customers: None,
        batch: 2000,
        chain: "ethereum".into(),
        asset: "USDT".into(),
        max_store_bytes: 12 << 30,
        min_free_bytes: 15 << 30,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--data-dir" => a.data_dir = value()?.into(),
            "--deposits" => a.deposits = value()?.parse()?,
            "--customers" => a.customers = Some(value()?.parse()?),
            "--batch" => a.batch = value()?.parse::<u64>()?.max(1),
            "--chain" => a.chain = value()?,
            "--asset" => a.asset = value()?,
            "--max-store-gb" => a.max_store_bytes = (value()?.parse::<f64>()? * 1e9) as u64,
            "--min-free-gb" => a.min_free_bytes = (value()?.parse::<f64>()? * 1e9) as u64,
            _ => bail!("unknown argument {flag} (see the doc comment of examples/fill_store.rs)"),
        }
    }
    if a.data_dir.as_os_str().is_empty() || a.deposits == 0 {
        bail!("usage: fill_store --data-dir DIR --deposits N [--customers C] [--batch B]");
    }
    Ok(a)
}

/// Free bytes of the file system holding `path`.
fn free_bytes(path: &std::path::Path) -> Result<u64> {
    let s = rustix::fs::statvfs(path).context("statvfs")?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

/// Whether filling must stop: the store file's size or the disk's free space.
fn out_of_room(a: &Args, store_path: &std::path::Path) -> Result<Option<String>> {
    let size = std::fs::metadata(store_path).map(|m| m.len()).unwrap_or(0);
    if size >= a.max_store_bytes {
        return Ok(Some(format!("store file is {size} bytes")));
    }
    let free = free_bytes(&a.data_dir)?;
    if free < a.min_free_bytes {
        return Ok(Some(format!(
            "only {free} bytes free on the data dir's disk"
        )));
    }
    Ok(None)
}

fn main() -> Result<()> {
    let args = parse_args()?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(a: Args) -> Result<()> {
    let mut config = Config::load(None).context("loading the default configuration")?;
    config.data_dir = a.data_dir.clone();
    let store_path = config.store_path();
    let store = appliance::server::open_store(&config, Duration::from_secs(1))?;
    let registry = Arc::new(Registry::from_config(&config));
    registry.set_market(Arc::new(appliance::market::Market::new(&config, true)));

    let mut project = store
        .read(|r| r.all::<Project>())
        .await?
        .into_iter()
        .find(|p| p.mode == Mode::Test)
        .context("no test project: start `appliance --test --data-dir DIR` once first")?;
    project.settings.addresses_per_day = u32::MAX;
    let project_id = project.id;
    let scope = Scope {
        reg: registry.clone(),
        project: Arc::new(project),
        delivery_attempts: config.webhooks.max_attempts(),
    };
    let chain = registry
        .chain(&a.chain)
        .with_context(|| format!("no chain {}", a.chain))?;
    let decimals = u64::from(
        chain
            .asset(&a.asset)
            .with_context(|| format!("no asset {} on {}", a.asset, a.chain))?
            .decimals,
    );
    let n_customers = a.customers.unwrap_or((a.deposits / 10).max(1));
    println!(
        "filling {}: project {project_id}, {n_customers} customers with a {} wallet, {} confirmed {} deposits, {} per transaction",
        a.data_dir.display(),
        a.chain,
        a.deposits,
        a.asset,
        a.batch
    );

    // Customers and their wallets, `batch` per transaction.
    let started = Instant::now();
    let mut customers: Vec<Uuid> = Vec::with_capacity(n_customers as usize);
    while (customers.len() as u64) < n_customers {
        if let Some(why) = out_of_room(&a, &store_path)? {
            bail!("stopped while creating customers: {why}");
        }
        let n = a.batch.min(n_customers - customers.len() as u64);
        let (s, chain_id, first) = (scope.clone(), a.chain.clone(), customers.len());
        let ids = store
            .write(move |ctx| {
                let mut ids = Vec::with_capacity(n as usize);
                for i in 0..n {
                    let (c, _) = customers::create(
                        ctx,
                        &s,
                        NewCustomer {
                            reference_id: Some(format!("fill-{}", first as u64 + i)),
                            email: None,
                            metadata: None,
                        },
                    )
                    .map_err(|e| format!("customer: {e}"))?;
                    wallets::get_or_create(ctx, &s, CustomerId::of(&c), &chain_id)
                        .map_err(|e| format!("wallet: {e}"))?;
                    ids.push(c.id);
                }
                Ok::<_, String>(ids)
            })
            .await
            .map_err(|e| anyhow::anyhow!("customer batch: {e:?}"))?;
        customers.extend(ids);
    }
    println!(
        "{} customers and wallets in {:.1} s",
        customers.len(),
        started.elapsed().as_secs_f64()
    );

    // Confirmed test deposits, as `api::test_mode::simulated_deposit` writes them.
    let sims = SimChains::default();
    let h = sims
        .get(&store, &registry, project_id, &a.chain)
        .await
        .map_err(|e| anyhow::anyhow!("opening the simulated chain: {e}"))?;
    let customers = Arc::new(customers);
    let started = Instant::now();
    let mut done = 0u64;
    let mut last_report = Instant::now();
    while done < a.deposits {
        if let Some(why) = out_of_room(&a, &store_path)? {
            println!("stopping after {done} deposits: {why}");
            break;
        }
        let n = a.batch.min(a.deposits - done);
        let mut gates = Vec::with_capacity(n as usize);
        let mut reservations: Vec<Reservation> = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (gate, chain_lock, r) = h
                .reserve_block(&store, sim_chain::now_ms())
                .await
                .map_err(|e| anyhow::anyhow!("reserving a block: {e}"))?;
            drop(chain_lock);
            gates.push(gate);
            reservations.push(r);
        }
        let (s, chain_id, asset, customers, jobs) = (
            scope.clone(),
            a.chain.clone(),
            a.asset.clone(),
            customers.clone(),
            reservations.clone(),
        );
        let out = store
            .write(move |ctx| {
                let mut ops = Vec::with_capacity(jobs.len());
                for (k, job) in jobs.iter().enumerate() {
                    if !job.in_order(ctx).map_err(|e| e.to_string())? {
                        return Err("simulated chain operations out of order".to_string());
                    }
                    let i = done + k as u64;
                    let req = TestDeposit {
                        customer_id: customers[(i % customers.len() as u64) as usize].into(),
                        chain: ChainId::new(chain_id.clone()),
                        asset: AssetSymbol::new(asset.clone()),
                        decimals,
                        amount: Amount::new(1_000_000 + u128::from(i % 1000)).expect("non-zero"),
                        confirm: true,
                        block_number: job.block,
                        block_time_us: i64::try_from(job.time_ms.saturating_mul(1000))
                            .unwrap_or(i64::MAX),
                        minted: deposits::Minted::fresh(),
                    };
                    let d = deposits::create_test(ctx, &s, req).map_err(|e| e.to_string())?;
                    let op = sim_chain::deposit_transfer(&s.reg, &d, job.time_ms)
                        .map_err(|e| e.to_string())?;
                    ctx.evm_block_deposit_add(
                        &sim_chain::state_key(&d.chain, d.project_id),
                        d.block_number,
                        d.id,
                    )
                    .map_err(|e| e.to_string())?;
                    job.write(ctx, &op).map_err(|e| e.to_string())?;
                    ops.push(op);
                }
                Ok::<_, String>(ops)
            })
            .await;
        let ops = match out {
            Ok(ops) => ops,
            Err(e) => {
                let mut c = h.client.chain_state().lock().await;
                for r in reservations {
                    h.settle(&mut c, r, None);
                }
                bail!("deposit batch after {done}: {e:?}");
            }
        };
        {
            let mut c = h.client.chain_state().lock().await;
            for (r, op) in reservations.into_iter().zip(ops) {
                h.settle(&mut c, r, Some(op));
            }
        }
        drop(gates);
        // The server's timer flushes each chain at least every `test.block_interval_ms`,
        // writing a snapshot when one is due; so does the fill after each batch, or the
        // server's first test deposit would replay the whole log.
        h.flush(&store)
            .await
            .map_err(|e| anyhow::anyhow!("flushing the simulated chain: {e}"))?;
        done += n;
        if last_report.elapsed() >= Duration::from_secs(10) || done == a.deposits {
            last_report = Instant::now();
            let size = std::fs::metadata(&store_path).map(|m| m.len()).unwrap_or(0);
            println!(
                "{done} deposits, {:.0}/s, store file {:.2} GB ({:.0} bytes per deposit so far)",
                done as f64 / started.elapsed().as_secs_f64(),
                size as f64 / 1e9,
                size as f64 / done as f64
            );
        }
    }
    let size = std::fs::metadata(&store_path).map(|m| m.len()).unwrap_or(0);
    println!(
        "done: {done} confirmed deposits in {:.1} s; store file {size} bytes",
        started.elapsed().as_secs_f64()
    );
    drop(h);
    drop(sims);
    // Closed cleanly, so the server's next start needs no repair.
    let closer = store.shutdown();
    drop(store);
    if let Some(closer) = closer {
        closer.join().ok();
    }
    Ok(())
}
