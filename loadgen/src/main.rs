//! `loadgen`: the appliance's load generator.
//!
//! Drives the HTTP API (SPEC.md section 4) with many concurrent keep-alive clients and reports,
//! per endpoint, the request count, errors, throughput and latency percentiles, so results can
//! be compared against PERFORMANCE.md. A second mode, `--restart-bench`, measures how long the
//! server takes to serve again after `kill -9` and after a clean shutdown.
//!
//! Modules: [`client`] (HTTP/1.1 connections and latency statistics), [`phases`] (the traffic
//! mixes and the concurrent runner), [`server`] (spawning and stopping `appliance --test`),
//! [`restart`] (the restart benchmark).

mod client;
mod expiry;
mod phases;
mod restart;
mod server;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;

use client::{print_row, Stats, Target};
use phases::{Limit, Phase, PhaseResult, Runner, Setup};
use server::{Server, ServerOpts, WorkDir};

/// Load generator for the appliance HTTP API.
#[derive(Parser, Debug)]
#[command(
    name = "loadgen",
    version,
    about = "Load generator for the appliance HTTP API",
    long_about = "\
Load generator for the appliance HTTP API.

Without --target it spawns its own server: `<--bin> --test --listen 127.0.0.1:0 --data-dir \
<fresh temp dir>` with APPLIANCE_TEST__BLOCK_INTERVAL_MS set, reads the address and the test \
keys the server prints on its first start, raises the `default` project's limits with \
`<--bin> project set default --requests-per-minute 100000000 --addresses-per-day 100000000 \
--max-pending-payouts 100000000`, and stops the server at the end (also on error or Ctrl-C). \
With --target it uses a running server and the keys given (--checkout-token only for the \
invoices and checkout phases); raise that project's limits yourself or expect 429s.

It then runs the selected phases one after another. Each phase keeps --clients concurrent \
clients busy, each on its own HTTP/1.1 keep-alive connection, for --seconds (or --count \
requests in all). Every request carries `Content-Type: application/json` and, except the \
public checkout reads, `Authorization: Bearer <key>`. Ids flow from one phase to the next; a phase run alone first seeds what it \
needs with a few unmeasured requests.

  customers  POST /v1/customers {reference_id (unique), email}          wallet key, 201
  wallets    POST /v1/wallets {customer_id, chain: ethereum}            wallet key, 201 (200 repeat)
  deposits   POST /v1/test/deposits 100 USDT, confirm: true            wallet key, 201
  payouts    POST /v1/payouts 0.001 USDT from a credited customer,      payout key, 202
             with a fresh Idempotency-Key
  reads      GET /v1/customers/{id}, /v1/customers/{id}/balances,       wallet key, 200
             /v1/deposits?limit=10, /v1/ping in equal shares
  mixed      a merchant's day: of every 10 requests 1 customer, 1 wallet, 4 confirmed
             test deposits, 1 payout, 3 reads of the same resources (customer, its
             balances, a deposit this client made, by id)
  invoices   POST /v1/invoices {price_amount: \"4000\"} (40.00 USD in     checkout key, 201
             cents) with a fresh Idempotency-Key; their checkout tokens
             (last segment of checkout_url) feed the checkout phase
  checkout   GET /v1/checkout/{token}, round-robin over all tokens      no key, 200
             gathered; each token's budget is 120 requests/minute and
             a 429 counts as an error, so it first seeds invoices up to
             max(2000, requests / 120) tokens (requests: --count, or
             50,000/s x --seconds); beyond that rate expect 429s
  expiry     not a mix: makes --expiry-invoices open invoices (checkout key;
             their figures are printed), runs a steady paced load of
             --expiry-rate requests/s (half the clients GET
             /v1/customers/{id}, half POST /v1/customers; wallet key) for
             --seconds as a baseline,
             then POST /v1/test/clock +7200 s (wallet key) so that every
             invoice is due at once, and runs the same load until
             GET /v1/invoices?status=open&limit=1 lists none; prints both
             windows' figures, the time until no invoice is open and the
             worst latency per second (a stall shows where it happened)

For each phase with confirmed test deposits and a spawned server, it also prints the \
store's growth (the bytes its file allocated on disk, and the file's apparent size, which \
redb doubles in steps below 4 GiB) and the bytes the server wrote to disk (/proc/PID/io), \
each per confirmed deposit (the phase's other requests are charged to them too).

For each phase it prints, per endpoint (method + route template): count, errors (non-2xx \
answers, requests without an answer, and 2xx answers lacking a needed field; with a breakdown \
by status and the first body of each), requests/s, and p50/p90/p99/max latency in ms, \
measured from sending the request to reading the last body byte, and how many CPU cores the \
server and loadgen kept busy (from /proc; shows which side is saturated). Then one line for \
all mutating requests and one for all reads. The exit status is 1 when more than --max-error-pct \
of all measured requests failed, 2 on any other error.

--restart-bench instead fills a fresh server with --entries confirmed test deposits (one \
journal entry each, plus the sweeps that follow), kills it with SIGKILL, restarts it on the \
same data dir and times spawn -> first `GET /readyz` 200 (polled every 10 ms), with the \
restarted process's peak RSS (VmHWM) and the number of server stderr lines mentioning \
`repair` (the store warns while it repairs after an unclean shutdown); then does the same \
after a clean SIGTERM shutdown. The server's logs are in the work dir (--keep-data keeps them). \
With --restart-data-dir it starts on a data dir filled beforehand by `cargo run --release \
--example fill_store` (millions of deposits in minutes) instead. Either way the kill comes \
during --load-seconds of test-deposit load, readiness is the first `GET /readyz` 200, and \
resident memory is read again 10 s after start and after 5 s of reads.",
    after_long_help = "\
Examples:
  cargo build --release --bin appliance
  cargo run --release -p loadgen -- --seconds 3
  cargo run --release -p loadgen -- --phases reads --clients 128 --seconds 30
  cargo run --release -p loadgen -- --phases mixed --seconds 10
  cargo run --release -p loadgen -- --phases invoices,checkout --seconds 10
  cargo run --release -p loadgen -- --phases expiry --seconds 10 --expiry-invoices 100000
  cargo run --release -p loadgen -- --target http://127.0.0.1:8080 \\
      --wallet-token apktest... --payout-token apktest... --checkout-token apktest...
  cargo run --release -p loadgen -- --restart-bench --entries 1000000
  cargo run --release -p loadgen -- --restart-bench --restart-data-dir DIR \\
      --wallet-token apktest... --payout-token apktest..."
)]
struct Cli {
    /// Base URL of a running server (`http://HOST:PORT`). Without it, loadgen spawns one.
    #[arg(long, value_name = "URL", requires_all = ["wallet_token", "payout_token"])]
    target: Option<String>,

    /// Wallet-kind API key for --target (customers, wallets, deposits, reads).
    #[arg(long, value_name = "TOKEN", env = "LOADGEN_WALLET_TOKEN")]
    wallet_token: Option<String>,

    /// Payout-kind API key for --target, with `payouts:create` and signing enabled.
    #[arg(long, value_name = "TOKEN", env = "LOADGEN_PAYOUT_TOKEN")]
    payout_token: Option<String>,

    /// Checkout-kind API key for --target (invoices; the checkout phase seeds invoices).
    #[arg(long, value_name = "TOKEN", env = "LOADGEN_CHECKOUT_TOKEN")]
    checkout_token: Option<String>,

    /// The appliance binary to spawn when there is no --target.
    #[arg(
        long = "bin",
        value_name = "PATH",
        default_value = "target/release/appliance"
    )]
    bin: PathBuf,

    /// Concurrent clients, each with its own keep-alive connection.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    clients: u16,

    /// How long each phase runs, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,

    /// Send exactly this many requests per phase instead of running for --seconds.
    #[arg(long, value_name = "N", conflicts_with = "seconds")]
    count: Option<u64>,

    /// Pace every phase at this many requests per second across all clients (each client
    /// one request every clients/rate seconds, catching up after a late answer) instead of
    /// as fast as the server answers: the latencies at a given load rather than at the
    /// server's capacity. A phase whose achieved rate is below it was saturated. Not for
    /// the expiry phase (it has --expiry-rate) nor --restart-bench.
    #[arg(long, value_name = "PER_SECOND", value_parser = clap::value_parser!(u64).range(1..))]
    rate: Option<u64>,

    /// Phases to run, comma-separated, in the order given.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "customers,wallets,deposits,payouts,reads"
    )]
    phases: Vec<Phase>,

    /// Longest wait for one answer, in milliseconds; a request past it counts as an error
    /// (`timeout`) and its connection is replaced.
    #[arg(long, default_value_t = 30_000)]
    timeout_ms: u64,

    /// `APPLIANCE_TEST__BLOCK_INTERVAL_MS` for a spawned server (simulated block time).
    #[arg(long, default_value_t = 1000)]
    block_interval_ms: u64,

    /// Directory in which the spawned server's scratch dir (data dir and logs) is created.
    #[arg(long, value_name = "DIR", default_value_os_t = std::env::temp_dir())]
    work_dir: PathBuf,

    /// Keep the spawned server's data dir and logs instead of deleting them at the end.
    #[arg(long)]
    keep_data: bool,

    /// Fail (exit status 1) when more than this percentage of measured requests failed.
    #[arg(long, default_value_t = 1.0)]
    max_error_pct: f64,

    /// Worker threads of the load generator's runtime (default: one per CPU). The server
    /// shares the machine; fewer threads leave it more CPU.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,

    /// Also write the figures as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,

    /// For the expiry phase: open invoices made and then expired at once.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    expiry_invoices: u64,

    /// For the expiry phase: requests per second of the steady load (all clients).
    #[arg(long, default_value_t = 400, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    expiry_rate: u64,

    /// For the expiry phase: longest wait, in seconds, for every invoice to expire.
    #[arg(long, default_value_t = 600, value_name = "S")]
    expiry_max_wait_s: u64,

    /// Measure restart time after `kill -9` and after a clean shutdown instead of running
    /// phases (always spawns its own server).
    #[arg(long, conflicts_with_all = ["target", "phases", "count"])]
    restart_bench: bool,

    /// For --restart-bench: confirmed test deposits (~ journal entries) before the crash.
    #[arg(long, default_value_t = 1_000_000, requires = "restart_bench")]
    entries: u64,

    /// For --restart-bench: an already filled data dir (`cargo run --release --example
    /// fill_store`) instead of a fresh one filled over HTTP; its keys are given with
    /// --wallet-token and --payout-token (printed by the server's first start). Not removed.
    #[arg(long, value_name = "DIR", requires_all = ["restart_bench", "wallet_token", "payout_token"])]
    restart_data_dir: Option<PathBuf>,

    /// For --restart-bench: seconds of write load (test deposits) before the `kill -9`.
    #[arg(long, default_value_t = 5, requires = "restart_bench")]
    load_seconds: u64,

    /// For --restart-bench and spawning: longest wait for the server to start serving, in
    /// seconds.
    #[arg(long, default_value_t = 300)]
    ready_timeout_s: u64,
}

impl Cli {
    fn limit(&self) -> Limit {
        match self.count {
            Some(n) => Limit::Count(n),
            None => Limit::Time(Duration::from_secs(self.seconds)),
        }
    }

    fn server_opts(&self, work: &WorkDir) -> ServerOpts {
        ServerOpts {
            bin: self.bin.clone(),
            data_dir: work.data_dir(),
            log_dir: work.path.clone(),
            block_interval_ms: self.block_interval_ms,
            start_timeout: Duration::from_secs(self.ready_timeout_s),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = cli.threads {
        builder.worker_threads(usize::from(n));
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadgen: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        tokio::select! {
            r = run(&cli) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    // The server (kill_on_drop) and the scratch dir are gone once `run`'s future is dropped.
    runtime.shutdown_timeout(Duration::from_secs(1));
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("loadgen: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the selected mode; `Ok(false)` when too many requests failed.
async fn run(cli: &Cli) -> Result<bool> {
    if cli.phases.is_empty() {
        bail!("--phases is empty");
    }
    let timeout = Duration::from_millis(cli.timeout_ms);
    let clients = usize::from(cli.clients);

    if cli.restart_bench {
        let work = WorkDir::create(&cli.work_dir, cli.keep_data)?;
        let mut server = cli.server_opts(&work);
        let existing = match &cli.restart_data_dir {
            Some(dir) => {
                server.data_dir = dir.clone();
                Some(server::Tokens {
                    wallet: cli.wallet_token.clone().unwrap_or_default(),
                    payout: cli.payout_token.clone().unwrap_or_default(),
                    checkout: cli.checkout_token.clone().unwrap_or_default(),
                })
            }
            None => None,
        };
        let report = restart::run(restart::RestartOpts {
            server,
            entries: cli.entries,
            existing,
            load_seconds: cli.load_seconds,
            clients,
            request_timeout: timeout,
            ready_timeout: Duration::from_secs(cli.ready_timeout_s),
        })
        .await?;
        write_json(cli, &report)?;
        return Ok(true);
    }

    // Declared before `server` so that the server is dropped (killed) first.
    let mut work = None;
    let mut server = None;
    let (target, wallet_token, payout_token, checkout_token, origin) = match &cli.target {
        Some(url) => (
            Target::parse(url).await?,
            cli.wallet_token
                .clone()
                .context("--wallet-token is required")?,
            cli.payout_token
                .clone()
                .context("--payout-token is required")?,
            cli.checkout_token.clone().unwrap_or_default(),
            "running server".to_string(),
        ),
        None => {
            let dir = work.insert(WorkDir::create(&cli.work_dir, cli.keep_data)?);
            let opts = cli.server_opts(dir);
            let spawned = server.insert(Server::spawn(&opts, true).await?);
            let tokens = spawned
                .tokens
                .clone()
                .context("the server printed no keys on a fresh data dir")?;
            if let Err(e) = server::raise_limits(&opts.bin, &opts.data_dir).await {
                println!("warning: could not raise the project's limits; expect 429s: {e:#}");
            }
            (
                Target::from_addr(spawned.addr),
                tokens.wallet,
                tokens.payout,
                tokens.checkout,
                format!(
                    "spawned {} pid {} (work dir {})",
                    opts.bin.display(),
                    spawned.pid(),
                    dir.path.display()
                ),
            )
        }
    };

    let mut limit = match cli.limit() {
        Limit::Time(d) => format!("{} s per phase", d.as_secs()),
        Limit::Count(n) => format!("{n} requests per phase"),
    };
    if let Some(rate) = cli.rate {
        limit.push_str(&format!(", paced at {rate} requests/s"));
    }
    let phase_names: Vec<&str> = cli.phases.iter().map(|p| p.name()).collect();
    println!(
        "loadgen: target {} ({origin}); {clients} clients; {limit}; phases {}",
        target.url(),
        phase_names.join(",")
    );

    let target_url = target.url();
    let mut runner = Runner::new(Setup {
        target,
        wallet_token,
        payout_token,
        checkout_token,
        clients,
        request_timeout: timeout,
        rate: cli.rate,
    });
    let mut results = Vec::new();
    let server_pid = server.as_ref().map(|s| s.pid().to_string());
    let cpu = || {
        (
            server_pid.as_deref().and_then(server::cpu_seconds),
            server::cpu_seconds("self"),
        )
    };
    let data_dir = work.as_ref().map(WorkDir::data_dir);
    // ((store file bytes, allocated), bytes the server wrote to disk), when loadgen runs
    // the server.
    let store = || -> Option<((u64, u64), u64)> {
        let dir = data_dir.as_deref()?;
        Some((
            server::dir_usage(dir),
            server::disk_write_bytes(server_pid.as_deref()?)?,
        ))
    };
    let mut store_figures = Vec::new();
    for &phase in &cli.phases {
        if phase == Phase::Expiry {
            let opts = expiry::ExpiryOpts {
                invoices: cli.expiry_invoices,
                rate: cli.expiry_rate,
                baseline: Duration::from_secs(cli.seconds.max(1)),
                max_wait: Duration::from_secs(cli.expiry_max_wait_s),
            };
            results.extend(expiry::run(&mut runner, &opts).await?);
            continue;
        }
        runner.prepare(phase, cli.limit()).await?;
        let (server_before, own_before) = cpu();
        let store_before = store();
        let result = runner.run(phase, cli.limit(), None).await?;
        let (server_after, own_after) = cpu();
        let store_after = store();
        // CPU use during the phase in cores (1.0 = one core busy), to see who is saturated.
        let secs = result.elapsed.as_secs_f64();
        let cores = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if secs > 0.0 => format!("{:.2}", (b - a) / secs),
            _ => "n/a".to_string(),
        };
        println!(
            "\nphase {}: {secs:.2} s; CPU cores busy: server {}, loadgen {}",
            phase.name(),
            cores(server_before, server_after),
            cores(own_before, own_after)
        );
        Stats::print_header();
        result.stats.print_table(result.elapsed);
        let deposits = result.stats.successes_of(phases::TEST_DEPOSIT);
        if let (Some(b), Some(a), true) = (store_before, store_after, deposits > 0) {
            let fig = StoreFigures::new(phase, deposits, b, a);
            fig.print();
            store_figures.push(fig);
        }
        results.push(result);
    }

    let (ok, mut report) = summarize(&results, cli.max_error_pct);
    report["store"] = store_figures.iter().map(StoreFigures::json).collect();
    report["target"] = target_url.into();
    report["clients"] = clients.into();
    report["limit"] = limit.into();
    if let Some(mut s) = server.take() {
        if let (Some(peak), _) = s.memory_kib() {
            println!("server peak RSS {:.1} MiB (VmHWM)", peak as f64 / 1024.0);
        }
        let (took, clean) = s.terminate(Duration::from_secs(30)).await?;
        if !clean {
            println!(
                "warning: the server did not exit cleanly on SIGTERM ({:.1} s)",
                took.as_secs_f64()
            );
        }
    }
    drop(work);
    write_json(cli, &report)?;
    Ok(ok)
}

/// Writes `report` to `--json PATH` when given.
fn write_json(cli: &Cli, report: &serde_json::Value) -> Result<()> {
    if let Some(path) = &cli.json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Prints the mutating and read totals and the verdict; true when within `max_error_pct`.
/// Also returns every figure as JSON.
fn summarize(results: &[PhaseResult], max_error_pct: f64) -> (bool, serde_json::Value) {
    let mut all = Stats::default();
    let (mut write_time, mut read_time) = (Duration::ZERO, Duration::ZERO);
    for r in results {
        all.merge(&r.stats);
        if r.stats.combined(false).total() > 0 {
            write_time += r.elapsed;
        }
        if r.stats.combined(true).total() > 0 {
            read_time += r.elapsed;
        }
    }
    println!("\nsummary (rates over the time of the phases that sent them)");
    Stats::print_header();
    print_row(
        "all mutating (POST)",
        &all.combined(false),
        write_time,
        false,
    );
    print_row("all reads (GET)", &all.combined(true), read_time, false);

    let total = all.total();
    let errors = all.errors();
    let pct = if total == 0 {
        0.0
    } else {
        errors as f64 * 100.0 / total as f64
    };
    let ok = total > 0 && pct <= max_error_pct;
    println!(
        "\nresult: {errors} of {total} requests failed ({pct:.2}%, limit {max_error_pct}%): {}",
        if ok { "OK" } else { "FAIL" }
    );
    let phases: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            serde_json::json!({
                "phase": r.phase.name(),
                "elapsed_s": r.elapsed.as_secs_f64(),
                "endpoints": r.stats.json(r.elapsed),
            })
        })
        .collect();
    let report = serde_json::json!({
        "phases": phases,
        "mutating": all.combined(false).json(write_time),
        "reads": all.combined(true).json(read_time),
        "requests": total,
        "errors": errors,
        "error_pct": pct,
        "ok": ok,
    });
    (ok, report)
}

/// What the store grew by and how much the server wrote to disk during one phase that made
/// confirmed test deposits, per confirmed deposit (store bytes per confirmed
/// deposit; bytes written per commit are the lever). Other requests of the phase (a mixed
/// phase's customers, payouts) are charged to the deposits too.
struct StoreFigures {
    phase: Phase,
    deposits: u64,
    /// Growth of the store file's apparent size (redb doubles it until a 4 GiB region is
    /// full: a step function of the pages in use, meaningful over many deposits only).
    file_bytes: i64,
    /// Growth of the bytes the store's file has allocated on disk: the pages ever written
    /// (the doubled extension is sparse until used). The store's size per deposit.
    allocated_bytes: i64,
    /// `write_bytes` of the server process (`/proc/<pid>/io`).
    written_bytes: u64,
}

impl StoreFigures {
    fn new(
        phase: Phase,
        deposits: u64,
        before: ((u64, u64), u64),
        after: ((u64, u64), u64),
    ) -> Self {
        StoreFigures {
            phase,
            deposits,
            file_bytes: after.0 .0 as i64 - before.0 .0 as i64,
            allocated_bytes: after.0 .1 as i64 - before.0 .1 as i64,
            written_bytes: after.1.saturating_sub(before.1),
        }
    }

    fn per_deposit(&self, bytes: f64) -> f64 {
        bytes / self.deposits as f64
    }

    fn print(&self) {
        println!(
            "store: {} confirmed deposits; allocated +{:.1} MiB ({:.0} B per deposit), \
             file +{:.1} MiB ({:.0} B per deposit); \
             server wrote {:.1} MiB to disk ({:.0} B per deposit)",
            self.deposits,
            self.allocated_bytes as f64 / 1048576.0,
            self.per_deposit(self.allocated_bytes as f64),
            self.file_bytes as f64 / 1048576.0,
            self.per_deposit(self.file_bytes as f64),
            self.written_bytes as f64 / 1048576.0,
            self.per_deposit(self.written_bytes as f64),
        );
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "phase": self.phase.name(),
            "confirmed_deposits": self.deposits,
            "store_file_growth_bytes": self.file_bytes,
            "store_file_growth_per_confirmed_deposit": self.per_deposit(self.file_bytes as f64),
            "store_allocated_growth_bytes": self.allocated_bytes,
            "store_bytes_per_confirmed_deposit": self.per_deposit(self.allocated_bytes as f64),
            "disk_written_bytes": self.written_bytes,
            "disk_written_bytes_per_confirmed_deposit": self.per_deposit(self.written_bytes as f64),
        })
    }
}
