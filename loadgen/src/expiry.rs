//! The expiry benchmark (`--phases expiry`): the expiry of 100,000 open invoices at once
//! must not stall requests.
//!
//! 1. Makes `--expiry-invoices` open invoices (`POST /v1/invoices`, 40.00 USD, the default
//!    one-hour `expires_in`; the invoices phase's requests, not measured here) and some
//!    customers to read.
//! 2. Baseline: a steady, paced load of `--expiry-rate` requests/s over `--clients`
//!    connections for `--seconds`: half the clients send `GET /v1/customers/{id}`, the
//!    other half `POST /v1/customers` (the writes share the store writer with the expiry
//!    worker, so they are where a stall shows; the readers are on their own connections so
//!    that a stalled write never holds a read back).
//! 3. `POST /v1/test/clock {"advance_seconds": 7200}` (wallet key): every invoice is past
//!    its `expires_at` at once. The request itself expires the first 1,000; the expiry
//!    worker the rest.
//! 4. The same load while a poller asks `GET /v1/invoices?status=open&limit=1` (checkout
//!    key) every 100 ms until none is open, then the load stops.
//!
//! Printed: the load's figures before and during the expiry, the latency of the clock
//! request, the time until no invoice is open, and the worst latency per second of the
//! expiry window (to see a stall where it happened).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use hyper::Method;

use crate::client::{Conn, Outcome, Req, Stats};
use crate::phases::{Limit, Phase, PhaseResult, Runner, Setup};

/// Label of the reads of the expiry load.
const GET_CUSTOMER: &str = "GET /v1/customers/{id}";
/// Label of the writes of the expiry load.
const CREATE_CUSTOMER: &str = "POST /v1/customers";
/// How far the clock moves: past the default one-hour `expires_in` of every invoice made.
const ADVANCE_SECONDS: u64 = 7_200;
/// Customers the load reads.
const CUSTOMERS: u64 = 256;
/// The poller's interval.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// What the expiry benchmark is told on the command line.
pub struct ExpiryOpts {
    /// Open invoices to expire at once.
    pub invoices: u64,
    /// Requests per second of the steady load (all clients together).
    pub rate: u64,
    /// Length of the baseline window.
    pub baseline: Duration,
    /// Longest wait for every invoice to expire.
    pub max_wait: Duration,
}

/// Per-second figures of a load window: (requests answered, worst latency in µs).
type Timeline = Arc<Mutex<Vec<(u64, u32)>>>;

/// Runs the benchmark and returns the figures of the load during the expiry (the baseline
/// is printed and returned as its own result first).
pub async fn run(runner: &mut Runner, opts: &ExpiryOpts) -> Result<Vec<PhaseResult>> {
    if runner.setup().checkout_token.is_empty() {
        bail!("the expiry phase needs a checkout key (--checkout-token)");
    }
    if runner.pools.customers.is_empty() {
        let r = runner
            .run(Phase::Customers, Limit::Count(CUSTOMERS), None)
            .await?;
        if r.stats.successes() == 0 {
            bail!("setup for the expiry phase failed: no customer was created");
        }
    }
    let have = runner.pools.invoices.len() as u64;
    if have < opts.invoices {
        let n = opts.invoices - have;
        println!("setup: {n} x invoices (their own figures below)");
        let r = runner
            .run(
                Phase::Invoices,
                Limit::Count(n),
                Some(Duration::from_secs(10)),
            )
            .await?;
        Stats::print_header();
        r.stats.print_table(r.elapsed);
        if r.stats.errors() > 0 {
            bail!("setup for the expiry phase failed: not every invoice was created");
        }
    }
    let setup = runner.setup().clone();
    let customers = Arc::new(runner.pools.customers.clone());
    let open = open_invoices(&setup).await?;
    println!(
        "expiry: {} invoices made; open before the clock moves: {}",
        runner.pools.invoices.len(),
        if open {
            "yes"
        } else {
            "none (nothing to expire)"
        }
    );

    println!(
        "\nexpiry baseline: {} requests/s for {} s (half the clients GET /v1/customers/{{id}}, half POST /v1/customers)",
        opts.rate,
        opts.baseline.as_secs()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = Arc::clone(&stop);
        let d = opts.baseline;
        tokio::spawn(async move {
            tokio::time::sleep(d).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let (before, before_elapsed, before_line) =
        paced_load(&setup, &customers, opts.rate, Arc::clone(&stop)).await?;
    timer.abort();
    Stats::print_header();
    before.print_table(before_elapsed);
    print_timeline("baseline", &before_line);

    // The clock moves; the load runs until nothing is open.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (setup, customers, stop) = (setup.clone(), Arc::clone(&customers), Arc::clone(&stop));
        let rate = opts.rate;
        tokio::spawn(async move { paced_load(&setup, &customers, rate, stop).await })
    };
    // Let the load settle before the clock moves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let mut conn = Conn::new(setup.target.clone(), setup.request_timeout);
    let clock = conn
        .send(Req {
            method: Method::POST,
            path: "/v1/test/clock".into(),
            token: &setup.wallet_token,
            body: Some(format!(r#"{{"advance_seconds":{ADVANCE_SECONDS}}}"#).into_bytes()),
            idempotency_key: Some(uuid::Uuid::now_v7().to_string()),
        })
        .await;
    let clock_ms = started.elapsed().as_secs_f64() * 1000.0;
    if !clock.is_success() {
        stop.store(true, Ordering::Relaxed);
        let _ = load.await;
        bail!(
            "POST /v1/test/clock failed: {:?} {}",
            clock.status(),
            body_text(&clock)
        );
    }
    let mut expired_after = None;
    while started.elapsed() < opts.max_wait {
        if !open_invoices(&setup).await? {
            expired_after = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (during, during_elapsed, during_line) = load.await??;

    println!("\nexpiry: POST /v1/test/clock (+{ADVANCE_SECONDS} s) answered in {clock_ms:.1} ms");
    match expired_after {
        Some(t) => println!(
            "expiry: no invoice open {:.2} s after the clock moved ({} invoices, {:.0}/s)",
            t.as_secs_f64(),
            opts.invoices,
            opts.invoices as f64 / t.as_secs_f64()
        ),
        None => println!(
            "expiry: invoices still open after {} s (--expiry-max-wait-s)",
            opts.max_wait.as_secs()
        ),
    }
    println!(
        "expiry: the same load during the expiry ({:.1} s)",
        during_elapsed.as_secs_f64()
    );
    Stats::print_header();
    during.print_table(during_elapsed);
    print_timeline("during expiry", &during_line);
    if expired_after.is_none() {
        bail!(
            "not every invoice expired within {} s",
            opts.max_wait.as_secs()
        );
    }
    Ok(vec![
        PhaseResult {
            phase: Phase::Expiry,
            elapsed: before_elapsed,
            stats: before,
        },
        PhaseResult {
            phase: Phase::Expiry,
            elapsed: during_elapsed,
            stats: during,
        },
    ])
}

/// Whether `GET /v1/invoices?status=open&limit=1` lists an invoice.
async fn open_invoices(setup: &Setup) -> Result<bool> {
    let mut conn = Conn::new(setup.target.clone(), setup.request_timeout);
    let o = conn
        .send(Req {
            method: Method::GET,
            path: "/v1/invoices?status=open&limit=1".into(),
            token: &setup.checkout_token,
            body: None,
            idempotency_key: None,
        })
        .await;
    let Some(v) = o.json().filter(|_| o.is_success()) else {
        bail!(
            "GET /v1/invoices?status=open failed: {:?} {}",
            o.status(),
            body_text(&o)
        );
    };
    Ok(v["data"].as_array().is_some_and(|d| !d.is_empty()))
}

fn body_text(o: &Outcome) -> String {
    match o {
        Outcome::Response { body, .. } => String::from_utf8_lossy(body).chars().take(300).collect(),
        Outcome::Failed { detail, .. } => detail.clone(),
    }
}

/// Paced load until `stop`: `rate` requests/s spread over `setup.clients` connections, each
/// client on its own schedule (a late request does not make the next ones early: a stall
/// shows as latency, not as a burst afterwards). Returns the figures, the window's length
/// and the per-second timeline.
async fn paced_load(
    setup: &Arc<Setup>,
    customers: &Arc<Vec<String>>,
    rate: u64,
    stop: Arc<AtomicBool>,
) -> Result<(Stats, Duration, Vec<(u64, u32)>)> {
    let clients = setup.clients.max(1);
    let every = Duration::from_secs_f64(clients as f64 / rate.max(1) as f64);
    let timeline: Timeline = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let run_id = uuid::Uuid::now_v7().simple().to_string();
    let mut handles = Vec::with_capacity(clients);
    for idx in 0..clients {
        let (setup, customers, stop, timeline) = (
            setup.clone(),
            Arc::clone(customers),
            Arc::clone(&stop),
            Arc::clone(&timeline),
        );
        let run_id = run_id.clone();
        handles.push(tokio::spawn(async move {
            let mut conn = Conn::new(setup.target.clone(), setup.request_timeout);
            let mut stats = Stats::default();
            // Spread the clients' first requests over one interval.
            let offset = every.mul_f64(idx as f64 / clients as f64);
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + offset, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                seq += 1;
                let (label, req) = if idx.is_multiple_of(2) {
                    let c = &customers[(seq as usize * clients + idx) % customers.len()];
                    (
                        GET_CUSTOMER,
                        Req {
                            method: Method::GET,
                            path: format!("/v1/customers/{c}"),
                            token: &setup.wallet_token,
                            body: None,
                            idempotency_key: None,
                        },
                    )
                } else {
                    (
                        CREATE_CUSTOMER,
                        Req {
                            method: Method::POST,
                            path: "/v1/customers".into(),
                            token: &setup.wallet_token,
                            body: Some(
                                format!(r#"{{"reference_id":"ex-{run_id}-{idx}-{seq}"}}"#)
                                    .into_bytes(),
                            ),
                            idempotency_key: None,
                        },
                    )
                };
                let outcome = conn.send(req).await;
                stats.record(label, &outcome);
                if let Outcome::Response { latency, .. } = &outcome {
                    let sec = started.elapsed().as_secs() as usize;
                    let us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
                    let mut t = timeline.lock().expect("timeline lock");
                    if t.len() <= sec {
                        t.resize(sec + 1, (0, 0));
                    }
                    t[sec].0 += 1;
                    t[sec].1 = t[sec].1.max(us);
                }
            }
            stats
        }));
    }
    let mut stats = Stats::default();
    for h in handles {
        stats.merge(&h.await?);
    }
    let elapsed = started.elapsed();
    let line = timeline.lock().expect("timeline lock").clone();
    Ok((stats, elapsed, line))
}

/// Prints the per-second timeline: requests answered and the worst latency.
fn print_timeline(what: &str, line: &[(u64, u32)]) {
    let cells: Vec<String> = line
        .iter()
        .map(|(n, max)| format!("{n}/{:.0}", f64::from(*max) / 1000.0))
        .collect();
    println!(
        "  per second ({what}; answered/worst ms): {}",
        cells.join(" ")
    );
}
