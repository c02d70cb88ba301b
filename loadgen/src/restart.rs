//! `--restart-bench`: how long the appliance takes to serve again after a crash and after a
//! clean shutdown, with a journal of a given size (PERFORMANCE.md, "Targets").
//!
//! 1. Either spawn the server on a fresh data dir, raise its limits, and post confirmed test
//!    deposits with `clients` concurrent clients until `entries` have succeeded (each
//!    confirmed deposit posts one credit to the journal), or, with `--restart-data-dir`,
//!    start it on a data dir already filled by `examples/fill_store.rs` (millions of
//!    deposits written in large transactions through the same service code) and time that
//!    first start too (the filler closed the store cleanly).
//! 2. Put it under write load (test deposits, `clients` clients) for `load_seconds` and
//!    `kill -9` it while the load runs; spawn it again on the same data dir and time spawn
//!    -> first `GET /readyz` 200 (the store takes a write; polled every 10 ms) and -> first
//!    authenticated `GET /v1/ping` 200; read the process's peak RSS (`VmHWM`) then, again
//!    10 s later (background start-up work such as replaying test mode's simulated chains)
//!    and after a few seconds of reads (`RSS now` is the resident memory serving).
//! 3. SIGTERM it (timing the exit), spawn it again and time the clean restart the same way.

use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::client::Stats;
use crate::phases::{Limit, Phase, Runner, Setup};
use crate::server::{self, Server, ServerOpts, Tokens};

/// Settings of the restart benchmark.
pub struct RestartOpts {
    pub server: ServerOpts,
    /// Confirmed test deposits to post before the crash (fresh data dir only).
    pub entries: u64,
    /// The data dir is already filled (`examples/fill_store.rs`); these are its keys.
    pub existing: Option<Tokens>,
    /// Seconds of write load before the `kill -9`.
    pub load_seconds: u64,
    pub clients: usize,
    pub request_timeout: Duration,
    /// Longest wait for a restarted server to answer `GET /v1/ping`.
    pub ready_timeout: Duration,
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or("n/a".to_string(), |k| {
        format!("{:.1} MiB", k as f64 / 1024.0)
    })
}

/// Spawns the server on the existing data dir and reports how long it took to serve, as
/// text and as JSON.
async fn restart(
    opts: &RestartOpts,
    token: &str,
    what: &str,
) -> Result<(Server, serde_json::Value)> {
    let mut restart_opts = opts.server.clone();
    restart_opts.start_timeout = opts.ready_timeout;
    let server = Server::spawn(&restart_opts, false)
        .await
        .with_context(|| format!("{what}: restarting the server"))?;
    let ready = server
        .wait_ready("/readyz", "", opts.ready_timeout)
        .await
        .with_context(|| format!("{what}: waiting for /readyz"))?;
    let (peak, now) = server.memory_kib();
    let ping = server
        .wait_ready("/v1/ping", token, opts.ready_timeout)
        .await
        .with_context(|| format!("{what}: waiting for /v1/ping"))?;
    // The store logs a warning while it repairs after an unclean shutdown; seeing one after
    // a clean SIGTERM means the store was not closed properly.
    let repair_lines = server.stderr_lines_with("repair");
    println!(
        "{what}: /readyz 200 after {:.3} s (listening line after {:.3} s, /v1/ping 200 after {:.3} s); peak RSS {} (VmHWM), RSS {}; stderr lines mentioning repair: {repair_lines}",
        ready.as_secs_f64(),
        server.listening_after.as_secs_f64(),
        ping.as_secs_f64(),
        mib(peak),
        mib(now),
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (peak10, now10) = server.memory_kib();
    println!(
        "{what}: 10 s later: peak RSS {} (VmHWM), RSS {}",
        mib(peak10),
        mib(now10)
    );
    let figures = serde_json::json!({
        "ready_s": ready.as_secs_f64(),
        "listening_s": server.listening_after.as_secs_f64(),
        "ping_s": ping.as_secs_f64(),
        "peak_rss_kib": peak,
        "rss_kib": now,
        "peak_rss_kib_10s": peak10,
        "rss_kib_10s": now10,
        "repair_log_lines": repair_lines,
    });
    Ok((server, figures))
}

fn runner_for(opts: &RestartOpts, server: &Server, tokens: &Tokens) -> Runner {
    Runner::new(Setup {
        target: crate::client::Target::from_addr(server.addr),
        wallet_token: tokens.wallet.clone(),
        payout_token: tokens.payout.clone(),
        checkout_token: tokens.checkout.clone(),
        clients: opts.clients,
        request_timeout: opts.request_timeout,
        rate: None,
    })
}

/// Posts confirmed test deposits until `entries` have succeeded (failed ones are sent again).
async fn fill(opts: &RestartOpts, runner: &mut Runner) -> Result<(u64, Stats, Duration)> {
    runner
        .prepare(Phase::Deposits, Limit::Count(opts.entries))
        .await?;
    let mut posted = 0u64;
    let mut fill = Stats::default();
    let mut fill_time = Duration::ZERO;
    while posted < opts.entries {
        let result = runner
            .run(
                Phase::Deposits,
                Limit::Count(opts.entries - posted),
                Some(Duration::from_secs(10)),
            )
            .await?;
        let ok = result.stats.successes();
        fill.merge(&result.stats);
        fill_time += result.elapsed;
        posted += ok;
        if ok == 0 {
            Stats::print_header();
            fill.print_table(fill_time);
            bail!("no deposit succeeded; giving up");
        }
    }
    println!(
        "fill: {posted} deposits in {:.1} s ({:.0}/s); store {:.1} MiB",
        fill_time.as_secs_f64(),
        posted as f64 / fill_time.as_secs_f64(),
        server::dir_size(&opts.server.data_dir) as f64 / (1024.0 * 1024.0)
    );
    Stats::print_header();
    fill.print_table(fill_time);
    Ok((posted, fill, fill_time))
}

/// Runs the benchmark, prints its figures and returns them as JSON.
pub async fn run(opts: RestartOpts) -> Result<serde_json::Value> {
    println!(
        "loadgen restart bench: server {}, data dir {} ({})",
        opts.server.bin.display(),
        opts.server.data_dir.display(),
        if opts.existing.is_some() {
            "already filled".to_string()
        } else {
            format!(
                "fresh; {} confirmed test deposits with {} clients",
                opts.entries, opts.clients
            )
        }
    );
    let mut report = serde_json::Map::new();
    let (mut server, tokens) = match &opts.existing {
        Some(tokens) => {
            let (server, first) = restart(
                &opts,
                &tokens.wallet,
                "first start (filled store, closed cleanly)",
            )
            .await?;
            report.insert("first_start".into(), first);
            (server, tokens.clone())
        }
        None => {
            let server = Server::spawn(&opts.server, true).await?;
            let tokens = server
                .tokens
                .clone()
                .context("the server printed no keys on a fresh data dir")?;
            (server, tokens)
        }
    };
    if let Err(e) = server::raise_limits(&opts.server.bin, &opts.server.data_dir).await {
        println!("warning: could not raise the project's limits; expect 429s: {e:#}");
    }
    println!(
        "server pid {} listening on http://{} after {:.3} s",
        server.pid(),
        server.addr,
        server.listening_after.as_secs_f64()
    );
    let mut runner = runner_for(&opts, &server, &tokens);
    if opts.existing.is_none() {
        let (posted, stats, fill_time) = fill(&opts, &mut runner).await?;
        report.insert("deposits".into(), posted.into());
        report.insert("fill_s".into(), fill_time.as_secs_f64().into());
        report.insert("fill".into(), stats.json(fill_time));
    }
    let store_bytes = server::dir_size(&opts.server.data_dir);
    report.insert("store_bytes".into(), store_bytes.into());
    println!("data dir {:.2} GB", store_bytes as f64 / 1e9);

    // Crash under write load.
    runner.prepare(Phase::Deposits, Limit::Count(1)).await?;
    println!(
        "write load: test deposits with {} clients for {} s, then kill -9",
        opts.clients, opts.load_seconds
    );
    let load_for = Duration::from_secs(opts.load_seconds);
    tokio::select! {
        r = runner.run(Phase::Deposits, Limit::Time(load_for * 100), Some(Duration::from_secs(2))) => {
            r?;
            bail!("the write load ended before the kill");
        }
        _ = tokio::time::sleep(load_for) => {}
    }
    let (first_peak, now) = server.memory_kib();
    server.kill9().await?;
    println!(
        "kill -9 sent to pid {} during the load (it had peak RSS {}, RSS {})",
        server.pid(),
        mib(first_peak),
        mib(now)
    );
    report.insert("loaded_peak_rss_kib".into(), first_peak.into());
    drop(server);
    let (server, after_kill) = restart(&opts, &tokens.wallet, "restart after kill -9").await?;
    report.insert("after_kill9".into(), after_kill);

    // Resident memory serving reads.
    let mut reader = runner_for(&opts, &server, &tokens);
    reader.prepare(Phase::Reads, Limit::Count(1)).await?;
    let reads = reader
        .run(Phase::Reads, Limit::Time(Duration::from_secs(5)), None)
        .await?;
    let (peak, now) = server.memory_kib();
    println!(
        "after 5 s of reads ({} answered): peak RSS {} (VmHWM), RSS {}",
        reads.stats.successes(),
        mib(peak),
        mib(now)
    );
    report.insert("after_reads_peak_rss_kib".into(), peak.into());
    report.insert("after_reads_rss_kib".into(), now.into());
    let mut server = server;

    // Clean shutdown.
    let (exit_time, clean) = server.terminate(Duration::from_secs(60)).await?;
    println!(
        "SIGTERM: exited after {:.3} s ({})",
        exit_time.as_secs_f64(),
        if clean {
            "exit status 0"
        } else {
            "NOT clean: non-zero status or killed after 60 s"
        }
    );
    drop(server);
    report.insert("sigterm_exit_s".into(), exit_time.as_secs_f64().into());
    report.insert("sigterm_clean".into(), clean.into());
    let (mut server, after_clean) =
        restart(&opts, &tokens.wallet, "restart after clean shutdown").await?;
    report.insert("after_clean_shutdown".into(), after_clean);
    server.terminate(Duration::from_secs(60)).await?;
    println!(
        "targets (PERFORMANCE.md, at 10M journal entries): after kill -9 <= 5 s with peak <= 1 GiB; clean restart <= 1 s; resident <= 512 MiB"
    );
    Ok(serde_json::Value::Object(report))
}
