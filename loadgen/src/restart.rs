//! `--restart-bench`: how long the appliance takes to serve again after a crash and after a
//! clean shutdown, with a journal of a given size (PERFORMANCE.md, "Targets").
//!
//! 1. Spawn the server on a fresh data dir, raise its limits, and post confirmed test deposits
//!    with `clients` concurrent clients until `entries` have succeeded. Each confirmed deposit
//!    posts one credit to the journal (the simulated sweeps add more afterwards), so N
//!    deposits give at least N journal entries.
//! 2. `kill -9` the server, spawn it again on the same data dir and time spawn -> first
//!    `GET /v1/ping` answering 200 (polled every 10 ms); read the process's peak RSS
//!    (`VmHWM`) once it serves.
//! 3. SIGTERM it (timing the exit), spawn it again and time the clean restart the same way.

use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::client::Stats;
use crate::phases::{Limit, Phase, Runner, Setup};
use crate::server::{self, Server, ServerOpts};

/// Settings of the restart benchmark.
pub struct RestartOpts {
    pub server: ServerOpts,
    /// Confirmed test deposits to post before the crash.
    pub entries: u64,
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
        .wait_ready(token, opts.ready_timeout)
        .await
        .with_context(|| format!("{what}: waiting for the restarted server"))?;
    let (peak, now) = server.memory_kib();
    // The store logs a warning while it repairs after an unclean shutdown; seeing one after
    // a clean SIGTERM means the store was not closed properly.
    let repair_lines = server.stderr_lines_with("repair");
    println!(
        "{what}: serving after {:.3} s (listening line after {:.3} s); peak RSS {} (VmHWM), RSS now {}; stderr lines mentioning repair: {repair_lines}",
        ready.as_secs_f64(),
        server.listening_after.as_secs_f64(),
        mib(peak),
        mib(now),
    );
    let figures = serde_json::json!({
        "ready_s": ready.as_secs_f64(),
        "listening_s": server.listening_after.as_secs_f64(),
        "peak_rss_kib": peak,
        "repair_log_lines": repair_lines,
    });
    Ok((server, figures))
}

/// Runs the benchmark, prints its figures and returns them as JSON.
pub async fn run(opts: RestartOpts) -> Result<serde_json::Value> {
    println!(
        "loadgen restart bench: {} confirmed test deposits with {} clients, server {}, data dir {}",
        opts.entries,
        opts.clients,
        opts.server.bin.display(),
        opts.server.data_dir.display()
    );
    let mut server = Server::spawn(&opts.server, true).await?;
    let tokens = server
        .tokens
        .clone()
        .context("the server printed no keys on a fresh data dir")?;
    if let Err(e) = server::raise_limits(&opts.server.bin, &opts.server.data_dir).await {
        println!("warning: could not raise the project's limits; expect 429s: {e:#}");
    }
    println!(
        "server pid {} listening on http://{} after {:.3} s",
        server.pid(),
        server.addr,
        server.listening_after.as_secs_f64()
    );

    let mut runner = Runner::new(Setup {
        target: crate::client::Target::from_addr(server.addr),
        wallet_token: tokens.wallet.clone(),
        payout_token: tokens.payout.clone(),
        checkout_token: tokens.checkout.clone(),
        clients: opts.clients,
        request_timeout: opts.request_timeout,
    });
    runner
        .prepare(Phase::Deposits, Limit::Count(opts.entries))
        .await?;

    // Fill: post deposits until enough have succeeded (failed ones are sent again).
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
    let (first_peak, now) = server.memory_kib();
    let store_bytes = server::dir_size(&opts.server.data_dir);
    println!(
        "first server: peak RSS {} (VmHWM), RSS now {}",
        mib(first_peak),
        mib(now)
    );

    // Crash.
    server.kill9().await?;
    println!("kill -9 sent to pid {}", server.pid());
    drop(server);
    let (mut server, after_kill) = restart(&opts, &tokens.wallet, "restart after kill -9").await?;

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
    let (mut server, after_clean) =
        restart(&opts, &tokens.wallet, "restart after clean shutdown").await?;
    server.terminate(Duration::from_secs(60)).await?;
    println!(
        "targets (PERFORMANCE.md, at 10M journal entries): after kill -9 <= 5 s with peak <= 1 GiB; clean restart <= 1 s"
    );
    Ok(serde_json::json!({
        "deposits": posted,
        "fill_s": fill_time.as_secs_f64(),
        "fill": fill.json(fill_time),
        "store_bytes": store_bytes,
        "first_peak_rss_kib": first_peak,
        "after_kill9": after_kill,
        "sigterm_exit_s": exit_time.as_secs_f64(),
        "sigterm_clean": clean,
        "after_clean_shutdown": after_clean,
    }))
}
