//! Webhook throughput and latency benchmark.
//!
//! ```text
//! cargo run --release --example webhook_bench -- [--endpoints 1,8,16] [--seconds 10]
//!     [--concurrency 32] [--paced-rate 2000]
//! ```
//!
//! For each endpoint count it starts `target/release/appliance --test` on a fresh data dir
//! (`webhooks.allow_private_targets = true`), registers that many endpoints pointing at a fast
//! receiver inside this process, and runs two phases:
//!
//! 1. saturation: `--concurrency` clients create customers (one `customer.created` event each)
//!    as fast as the server takes them for `--seconds`; reported are events written per second
//!    and deliveries received per second (all must arrive, each exactly once per endpoint);
//! 2. paced: events at `--paced-rate / endpoints` per second (so the receiver gets about
//!    `--paced-rate` deliveries per second) for `--seconds`; reported are the percentiles of
//!    the time from the event's `created` timestamp (taken in the writing transaction, just
//!    before its commit) to the receiver having the request.
//!
//! The receiver answers 200 at once. Everything runs on one machine: the server, the load and
//! the receiver share its cores.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{json, Value};

struct Args {
    endpoints: Vec<usize>,
    seconds: u64,
    concurrency: usize,
    paced_rate: u64,
}

fn args() -> Args {
    let mut a = Args {
        endpoints: vec![1, 8, 16],
        seconds: 10,
        concurrency: 32,
        paced_rate: 2000,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < v.len() {
        let val = &v[i + 1];
        match v[i].as_str() {
            "--endpoints" => a.endpoints = val.split(',').map(|x| x.parse().unwrap()).collect(),
            "--seconds" => a.seconds = val.parse().unwrap(),
            "--concurrency" => a.concurrency = val.parse().unwrap(),
            "--paced-rate" => a.paced_rate = val.parse().unwrap(),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    count: AtomicU64,
    /// (event id, endpoint path) pairs, to check exactly-once arrival.
    keys: Mutex<HashSet<(String, String)>>,
    duplicates: AtomicU64,
    /// created -> receipt, microseconds, while `measuring`.
    latencies_us: Mutex<Vec<i64>>,
    measuring: AtomicBool,
}

async fn receive(State(seen): State<Arc<Seen>>, uri: axum::http::Uri, body: Bytes) -> StatusCode {
    let now = chrono::Utc::now();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.count.fetch_add(1, Ordering::Relaxed);
    if seen.measuring.load(Ordering::Relaxed) {
        if let Some(c) = v["created"].as_str() {
            if let Ok(t) = chrono::DateTime::parse_from_rfc3339(c) {
                let lat = (now - t.with_timezone(&chrono::Utc))
                    .num_microseconds()
                    .unwrap_or(0);
                seen.latencies_us.lock().unwrap().push(lat);
            }
        }
    }
    let key = (
        v["id"].as_str().unwrap_or("").to_string(),
        uri.path().to_string(),
    );
    if !seen.keys.lock().unwrap().insert(key) {
        seen.duplicates.fetch_add(1, Ordering::Relaxed);
    }
    StatusCode::OK
}

struct Server {
    child: Child,
    base: String,
    key: String,
    data_dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "--release", "--bin", "appliance"])
        .current_dir(&root)
        .status()
        .expect("cargo build");
    assert!(st.success(), "building the release binary failed");
    root.join("target/release/appliance")
}

fn start_server(bin: &PathBuf) -> Server {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let mut child = Command::new(bin)
        .args(["--test", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data_dir)
        .env("APPLIANCE_WEBHOOKS__ALLOW_PRIVATE_TARGETS", "true")
        .env("APPLIANCE_TEST__BLOCK_INTERVAL_MS", "3600000")
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn appliance");
    let out = BufReader::new(child.stdout.take().unwrap());
    let (mut base, mut key) = (None, None);
    let mut lines = out.lines();
    while base.is_none() || key.is_none() {
        let l = lines.next().expect("server output").unwrap();
        if let Some(r) = l.strip_prefix("appliance listening on ") {
            base = r.split_whitespace().next().map(str::to_string);
        } else if let Some(k) = l.strip_prefix("wallet key: ") {
            key = Some(k.trim().to_string());
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let st = Command::new(bin)
        .args([
            "project",
            "set",
            "default",
            "--requests-per-minute",
            "100000000",
            "--data-dir",
        ])
        .arg(&data_dir)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "project set failed");
    Server {
        child,
        base: base.unwrap(),
        key: key.unwrap(),
        data_dir,
        _tmp: tmp,
    }
}

async fn create_customer(client: &reqwest::Client, s: &Server) -> bool {
    client
        .post(format!("{}/v1/customers", s.base))
        .bearer_auth(&s.key)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .map(|r| r.status().as_u16() == 201)
        .unwrap_or(false)
}

fn pct(sorted: &[i64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// Waits until the receiver has `want` requests (or `limit` passes); returns when it had them.
async fn drain(seen: &Seen, want: u64, limit: Duration) -> Option<Instant> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if seen.count.load(Ordering::Relaxed) >= want {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let bin = binary();
    println!(
        "webhook_bench: {} s per phase, {} clients, paced at {} deliveries/s",
        a.seconds, a.concurrency, a.paced_rate
    );
    println!(
        "{:>9} | {:>10} {:>13} {:>6} | {:>12} {:>8} {:>8} {:>8} {:>8}",
        "endpoints",
        "events/s",
        "deliveries/s",
        "dupes",
        "paced dlv/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms"
    );
    for &n in &a.endpoints {
        let seen = Arc::new(Seen::default());
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let raddr: SocketAddr = listener.local_addr().unwrap();
        let recv_task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let server = start_server(&bin);
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(256)
            .build()
            .unwrap();
        for i in 0..n {
            let r = client
                .post(format!("{}/v1/webhooks", server.base))
                .bearer_auth(&server.key)
                .json(&json!({ "url": format!("http://{raddr}/ep{i}") }))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 201, "{:?}", r.text().await);
        }
        // Warm up connections and caches.
        for _ in 0..20 {
            create_customer(&client, &server).await;
        }
        drain(&seen, 20 * n as u64, Duration::from_secs(30)).await;

        // Phase 1: saturation.
        let base_count = seen.count.load(Ordering::Relaxed);
        let events = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let server = Arc::new(server);
        let t0 = Instant::now();
        let mut workers = Vec::new();
        for _ in 0..a.concurrency {
            let (client, server, events, stop) =
                (client.clone(), server.clone(), events.clone(), stop.clone());
            workers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if create_customer(&client, &server).await {
                        events.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(a.seconds)).await;
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            let _ = w.await;
        }
        let write_secs = t0.elapsed().as_secs_f64();
        let written = events.load(Ordering::Relaxed);
        let want = base_count + written * n as u64;
        let done_at = drain(&seen, want, Duration::from_secs(120)).await;
        let got = seen.count.load(Ordering::Relaxed) - base_count;
        let dlv_secs = done_at.map(|d| (d - t0).as_secs_f64()).unwrap_or(f64::NAN);
        let events_per_s = written as f64 / write_secs;
        let deliveries_per_s = got as f64 / dlv_secs;
        if done_at.is_none() {
            eprintln!(
                "endpoints={n}: only {got} of {} deliveries arrived",
                written * n as u64
            );
        }

        if n == 0 {
            println!(
                "{:>9} | {:>10.0} {:>13} {:>6} | (no endpoints: outbox cost baseline)",
                n, events_per_s, "-", "-"
            );
            continue;
        }

        // Phase 2: paced, for latency.
        let base_count = seen.count.load(Ordering::Relaxed);
        seen.measuring.store(true, Ordering::Relaxed);
        let rate = (a.paced_rate as f64 / n as f64).max(1.0);
        let total = (rate * a.seconds as f64) as u64;
        let interval = Duration::from_secs_f64(1.0 / rate);
        let t1 = Instant::now();
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let inflight = Arc::new(tokio::sync::Semaphore::new(a.concurrency * 4));
        for _ in 0..total {
            tick.tick().await;
            let permit = inflight.clone().acquire_owned().await.unwrap();
            let (client, server) = (client.clone(), server.clone());
            tokio::spawn(async move {
                create_customer(&client, &server).await;
                drop(permit);
            });
        }
        let _ = inflight.acquire_many(a.concurrency as u32 * 4).await;
        let want = base_count + total * n as u64;
        let done = drain(&seen, want, Duration::from_secs(60)).await;
        let paced_secs = done.map(|d| (d - t1).as_secs_f64()).unwrap_or(f64::NAN);
        let paced_got = seen.count.load(Ordering::Relaxed) - base_count;
        seen.measuring.store(false, Ordering::Relaxed);
        let mut lat = std::mem::take(&mut *seen.latencies_us.lock().unwrap());
        lat.sort();
        println!(
            "{:>9} | {:>10.0} {:>13.0} {:>6} | {:>12.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
            n,
            events_per_s,
            deliveries_per_s,
            seen.duplicates.load(Ordering::Relaxed),
            paced_got as f64 / paced_secs,
            pct(&lat, 0.50),
            pct(&lat, 0.90),
            pct(&lat, 0.99),
            pct(&lat, 1.0),
        );
        let _ = &server.data_dir;
        drop(server);
        recv_task.abort();
    }
}
