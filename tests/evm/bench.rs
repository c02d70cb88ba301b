//! Watcher benchmark: blocks per second with 100,000 watched addresses and 200
//! token transfers per block, and detection latency from a mined block to a visible
//! `detected` deposit. Run with:
//!
//! ```text
//! cargo test --release --test evm -- --ignored watcher_benchmark --nocapture
//! ```

use std::time::{Duration, Instant};

use serde_json::json;
use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Customer, Wallet};
use appliance_storage::{ScanOps, Store, StoreOptions};

use crate::helpers::*;

const ADDRESSES: usize = 100_000;
const PER_BLOCK: usize = 200;
const BLOCKS: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run explicitly with --ignored (release build recommended)"]
async fn watcher_benchmark() {
    let eth = Anvil::start(1);
    let token = deploy_token(&eth, 6, false).await;
    let (tmp, data, master) = init_data_dir();
    let mut live = Live::start(
        tmp,
        data.clone(),
        master.clone(),
        &[ChainSetup::ethereum(&eth, 1, Some(&token), 30_000)],
    )
    .await;
    live.kill();

    // 100,000 customers with a wallet each, written straight into the store.
    let project: Uuid = live.project_id.parse().unwrap();
    let treasury = appliance_chains::address::parse_evm_address(&master).unwrap();
    let factory = appliance_chains::address::factory_address(&treasury);
    let store = Store::open(&data.join("appliance.redb"), StoreOptions::default()).unwrap();
    let t = Instant::now();
    let mut addresses = Vec::with_capacity(ADDRESSES);
    for chunk in 0..(ADDRESSES / 5_000) {
        let rows: Vec<(Customer, Wallet)> = (0..5_000)
            .map(|i| {
                let cid = Uuid::now_v7();
                let now = appliance_storage::now_us();
                let addr = appliance_chains::address::deposit_address_under(&factory, project, cid);
                (
                    Customer {
                        id: cid,
                        project_id: project,
                        reference_id: Some(format!("bench-{chunk}-{i}")),
                        email: None,
                        status: appliance_storage::records::CustomerStatus::Active,
                        metadata: json!({}),
                        created_at: now,
                    },
                    Wallet {
                        id: Uuid::now_v7(),
                        project_id: project,
                        customer_id: cid,
                        invoice_id: None,
                        chain: "ethereum".into(),
                        role: "customer".into(),
                        status: "active".into(),
                        address: addr,
                        memo: None,
                        created_at: now,
                    },
                )
            })
            .collect();
        addresses.extend(rows.iter().map(|(_, w)| w.address.clone()));
        store
            .write(move |ctx| {
                for (c, w) in &rows {
                    ctx.put(c)?;
                    ctx.unique_put(
                        &index::unique(
                            IndexTag::UniqueWallet,
                            project,
                            &[c.id.as_bytes(), b"ethereum"],
                        ),
                        w.id,
                    )?;
                    ctx.unique_put(
                        &appliance::services::wallets::address_key("ethereum", &w.address),
                        w.id,
                    )?;
                    ctx.put(w)?;
                }
                Ok::<_, appliance_storage::StoreError>(())
            })
            .await
            .unwrap();
    }
    drop(store);
    eprintln!("wrote {ADDRESSES} wallets in {:?}", t.elapsed());

    // 50 blocks of 200 transfers each, mined while the appliance is down.
    let start_block = eth.block_number().await + 1;
    for b in 0..BLOCKS {
        let to: Vec<String> = (0..PER_BLOCK)
            .map(|i| addresses[(b * PER_BLOCK + i) * 7 % ADDRESSES].clone())
            .collect();
        eth.send(ACCOUNT0, Some(&token), 0, &spray_calldata(&to, 1_000_000))
            .await;
    }
    let last_block = eth.block_number().await;
    assert_eq!(last_block + 1 - start_block, BLOCKS as u64);
    let cfg = std::fs::read_to_string(&live.config).unwrap();
    let cfg = cfg
        .replace(
            "replace_after_ms = 30000\n",
            &format!("replace_after_ms = 30000\nstart_block = {start_block}\n"),
        )
        .replace(
            "sweep_threshold_usd_cents = 100\n",
            "sweep_threshold_usd_cents = 1000000000000\n",
        );
    std::fs::write(&live.config, cfg).unwrap();

    let t = Instant::now();
    live.run();
    let target = format!("to={last_block} ");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if live
            .logs()
            .lines()
            .any(|l| l.contains("watched blocks") && l.contains(&target))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "watcher did not catch up:\n{}",
            live.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let catch_up = t.elapsed();
    let secs = catch_up.as_secs_f64();
    eprintln!(
        "BENCH catch-up: {BLOCKS} blocks x {PER_BLOCK} transfers ({} deposits detected and credited) \
         with {ADDRESSES} watched addresses in {secs:.2}s (includes process start): {:.1} blocks/s, {:.0} transfers/s",
        BLOCKS * PER_BLOCK,
        BLOCKS as f64 / secs,
        (BLOCKS * PER_BLOCK) as f64 / secs
    );
    for l in live
        .logs()
        .lines()
        .filter(|l| l.contains("watched blocks"))
        .take(5)
    {
        eprintln!("  {l}");
    }

    let logs = live.logs();
    let slices: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("watched blocks"))
        .collect();
    if let Some(l) = slices.last() {
        eprintln!("  last slice: {l}");
    }

    // Detection latency: block mined -> deposit visible over the API as detected.
    eth.mint(&token, ACCOUNT0, 1_000_000_000_000).await;
    let mut lat = Vec::new();
    for i in 0..10 {
        let (cid, w) = live.customer_wallet(&format!("lat-{i}"), "ethereum").await;
        let r = eth
            .token_transfer(&token, ACCOUNT0, w["address"].as_str().unwrap(), 1_000_000)
            .await;
        let mined = Instant::now();
        let tx = r["transactionHash"].as_str().unwrap().to_string();
        loop {
            if live
                .deposits_of(&cid)
                .await
                .iter()
                .any(|d| d["tx_hash"] == tx)
            {
                break;
            }
            assert!(mined.elapsed() < Duration::from_secs(30));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        lat.push(mined.elapsed().as_millis());
    }
    lat.sort();
    eprintln!(
        "BENCH detection latency (poll_interval_ms = 100): median {} ms, max {} ms, all {:?}",
        lat[lat.len() / 2],
        lat[lat.len() - 1],
        lat
    );
}

/// A benchmark size from the environment (`name`), else `default`.
fn size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` customers with an ethereum wallet each, written straight into the store of a stopped
/// appliance: (customer id, address).
async fn write_wallets(
    data: &std::path::Path,
    project: Uuid,
    master: &str,
    n: usize,
) -> Vec<(Uuid, String)> {
    let treasury = appliance_chains::address::parse_evm_address(master).unwrap();
    let factory = appliance_chains::address::factory_address(&treasury);
    let store = Store::open(&data.join("appliance.redb"), StoreOptions::default()).unwrap();
    let mut out = Vec::with_capacity(n);
    let mut done = 0;
    while done < n {
        let k = (n - done).min(5_000);
        let rows: Vec<(Customer, Wallet)> = (0..k)
            .map(|i| {
                let cid = Uuid::now_v7();
                let now = appliance_storage::now_us();
                let addr = appliance_chains::address::deposit_address_under(&factory, project, cid);
                (
                    Customer {
                        id: cid,
                        project_id: project,
                        reference_id: Some(format!("catchup-{}", done + i)),
                        email: None,
                        status: appliance_storage::records::CustomerStatus::Active,
                        metadata: json!({}),
                        created_at: now,
                    },
                    Wallet {
                        id: Uuid::now_v7(),
                        project_id: project,
                        customer_id: cid,
                        invoice_id: None,
                        chain: "ethereum".into(),
                        role: "customer".into(),
                        status: "active".into(),
                        address: addr,
                        memo: None,
                        created_at: now,
                    },
                )
            })
            .collect();
        out.extend(rows.iter().map(|(c, w)| (c.id, w.address.clone())));
        store
            .write(move |ctx| {
                for (c, w) in &rows {
                    ctx.put(c)?;
                    ctx.unique_put(
                        &index::unique(
                            IndexTag::UniqueWallet,
                            project,
                            &[c.id.as_bytes(), b"ethereum"],
                        ),
                        w.id,
                    )?;
                    ctx.unique_put(
                        &appliance::services::wallets::address_key("ethereum", &w.address),
                        w.id,
                    )?;
                    ctx.put(w)?;
                }
                Ok::<_, appliance_storage::StoreError>(())
            })
            .await
            .unwrap();
        done += k;
    }
    out
}

/// The gauges `names` of the appliance's `/metrics` text for the live ethereum chain, read
/// from one request (the benchmark's polling is work the server does during the catch-up).
async fn gauges<const N: usize>(live: &Live, names: [&str; N]) -> [Option<f64>; N] {
    let text = match live
        .http
        .get(format!("{}/metrics", live.base_url))
        .send()
        .await
    {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    names.map(|name| {
        text.lines()
            .find(|l| {
                l.starts_with(name)
                    && l.contains("chain=\"ethereum\"")
                    && l.contains("mode=\"live\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    })
}

/// Catch-up benchmark: `CATCHUP_BLOCKS` blocks (default 10,000) mined while
/// the appliance is down, each holding one transaction that emits `CATCHUP_PER_BLOCK` token
/// `Transfer`s (default 200), `CATCHUP_MATCHES` of them (default 5) to some of
/// `CATCHUP_WATCHED` watched addresses (default 100,000).
///
/// How the blocks are built (printed too): each block holds exactly one transaction, a call
/// of the test ERC-20's `spray(address[], uint256)` (`tests/evm/contracts/TestTokens.sol`),
/// which credits each recipient's balance and emits one real `Transfer` log per recipient.
/// The watched recipients are drawn in turn from `CATCHUP_RECIPIENTS` (default 1,000) of
/// the watched addresses, spread evenly over them; the others from a fixed pool of 1,000
/// unwatched addresses. The transactions are sent (`eth_sendTransaction`, 30M gas each, so
/// one fills a block) in JSON-RPC batches of 50 with automine off, then `anvil_mine 50`;
/// Anvil runs with `--prune-history` (no historical states; blocks, receipts and logs are
/// kept). Why the recipient pool: Anvil recomputes the whole state root of every block, so
/// mining slows with every storage slot created (50,000 fresh balances made the 10,000-block
/// chain take over 10 minutes to build); with a bounded pool the token's storage stays
/// small. The scan still matches every log against all the watched addresses.
/// The sprays come from Anvil's first account, signed; `CATCHUP_SENDER=impersonated` sends
/// them from an impersonated account instead, whose sender Anvil stores, so that its
/// full-block reads skip the ECDSA recovery it otherwise makes per transaction per read.
///
/// Prints:
/// * blocks/s of the chain client's range scan ([`appliance_chains::evm::client::EvmClient`]
///   `transfers` over the whole range) for each way of asking for logs (by recipient in
///   chunks, by token with local matching, and the automatic choice);
/// * blocks/s of the real server catching up from a stopped start, end to end (process
///   spawn to the chain's lag gauge at 0), and between its first and last watcher commits;
///   the process start (spawn to listening, spawn to the first commit);
/// * block-to-`deposit.detected` latency (p50, p99, max) through the real server for
///   `CATCHUP_LATENCY_SAMPLES` blocks (default 100) of the same shape, with
///   `poll_interval_ms = 100`: from `anvil_mine` returning to the event arriving on the
///   project's event stream (`GET /v1/events/stream`), so it includes the watcher's poll
///   wait, scan, commit and the push, and no polling of the API (which would meet its rate
///   limit).
///
/// Asserts that the store holds exactly one credited deposit per transfer sent to a watched
/// address in the caught-up blocks (no transfer missed, none counted twice).
///
/// Comparing builds on one chain: `CATCHUP_BINS=A,B,...` (server executables, or wrapper
/// scripts that run one under a profiler) catch up in turn, each from a copy of the same
/// stopped store; the last stays up for the latency phase and the check.
/// `CATCHUP_AFTER_RUN` is a shell command run after each catch-up, before the server is
/// stopped, with its pid in `SERVER_PID` (`callgrind_control -d $SERVER_PID`).
///
/// ```text
/// CATCHUP_BLOCKS=10000 cargo test --release --test evm -- --ignored catchup_benchmark --nocapture
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run explicitly with --ignored (release build recommended)"]
async fn catchup_benchmark() {
    use appliance_chains::client::{ChainClient, WatchSet};
    use appliance_chains::evm::client::EvmClient;
    use appliance_chains::evm::rpc::EvmRpc;
    use appliance_chains::evm::watcher::{LogQuery, Tuning, BLOCK_BATCH, CONCURRENCY, LOG_RANGE};

    let blocks = size("CATCHUP_BLOCKS", 10_000);
    let per_block = size("CATCHUP_PER_BLOCK", 200);
    let matches = size("CATCHUP_MATCHES", 5).min(per_block);
    let watched = size("CATCHUP_WATCHED", 100_000).max(matches);
    let recipients = size("CATCHUP_RECIPIENTS", 1_000).clamp(1, watched);
    let samples = size("CATCHUP_LATENCY_SAMPLES", 100);
    eprintln!(
        "catch-up benchmark: {blocks} blocks x {per_block} transfers ({matches} to watched addresses), {watched} watched"
    );
    eprintln!(
        "  blocks: one spray(address[],uint256) call of the test ERC-20 per block ({per_block} balance \
         credits and Transfer logs); watched recipients drawn in turn from {recipients} of the {watched} \
         watched (spread evenly), the rest from 1,000 unwatched; sent as eth_sendTransaction batches of 50 \
         (30M gas each, automine off) then anvil_mine 50; Anvil --prune-history"
    );

    let eth = Anvil::start_with(1, &["--prune-history"]);
    let token = deploy_token(&eth, 6, false).await;
    let (tmp, data, master) = init_data_dir();
    let mut live = Live::start(
        tmp,
        data.clone(),
        master.clone(),
        &[ChainSetup::ethereum(&eth, 1, Some(&token), 30_000)],
    )
    .await;
    live.kill();
    let project: Uuid = live.project_id.parse().unwrap();
    let t = Instant::now();
    let wallets = write_wallets(&data, project, &master, watched).await;
    eprintln!("  wrote {watched} wallets in {:.1?}", t.elapsed());

    // Unwatched recipients: a fixed pool (their balances are warm after the first use).
    let unwatched: Vec<String> = (0..1_000u32).map(external).collect();
    // The k-th watched transfer goes to wallet `pick(k)`.
    let stride = watched / recipients;
    let pick = |k: usize| (k % recipients) * stride;
    let http = reqwest::Client::new();
    // Who sends the sprays (`CATCHUP_SENDER`, see the doc comment above).
    let (sender, how) = if std::env::var("CATCHUP_SENDER").is_ok_and(|v| v == "impersonated") {
        const IMPERSONATED: &str = "0x5e4de4e5e4de4e5e4de4e5e4de4e5e4de4e5e4d0";
        eth.rpc(
            "anvil_setBalance",
            json!([IMPERSONATED, "0x3635c9adc5dea00000"]),
        )
        .await;
        eth.rpc("anvil_impersonateAccount", json!([IMPERSONATED]))
            .await;
        (
            IMPERSONATED,
            "an impersonated account (Anvil stores its sender: no recovery per read)",
        )
    } else {
        (
            ACCOUNT0,
            "Anvil's first account, signed (Anvil recovers the sender on every full-block read)",
        )
    };
    eprintln!("  sprays sent by {how}");
    eth.rpc("evm_setAutomine", json!([false])).await;
    let start_block = eth.block_number().await + 1;
    let t = Instant::now();
    let mut k = 0usize; // index of the next watched transfer
    let mut nonce = hex_u64(
        &eth.rpc("eth_getTransactionCount", json!([sender, "pending"]))
            .await,
    );
    // Each spray is sent with a gas limit of a whole block (30M, Anvil's default), so one
    // `anvil_mine` of n blocks puts exactly one of n pooled sprays in each block.
    const PER_REQUEST: usize = 50;
    let mut b = 0;
    while b < blocks {
        let n = PER_REQUEST.min(blocks - b);
        let mut calls = Vec::with_capacity(n);
        for j in 0..n {
            let mut to: Vec<String> = Vec::with_capacity(per_block);
            for i in 0..per_block {
                // The watched ones spread over the transaction.
                if i * matches / per_block != (i + 1) * matches / per_block {
                    to.push(wallets[pick(k)].1.clone());
                    k += 1;
                } else {
                    to.push(unwatched[(b + j + i) % unwatched.len()].clone());
                }
            }
            calls.push((
                "eth_sendTransaction",
                json!([{"from": sender, "to": token, "data": spray_calldata(&to, 1),
                        "gas": "0x1c9c380", "nonce": format!("0x{nonce:x}")}]),
            ));
            nonce += 1;
        }
        batch(&http, &eth, &calls).await;
        eth.mine(n as u64).await;
        b += n;
    }
    let last_block = eth.block_number().await;
    assert_eq!(
        last_block + 1 - start_block,
        blocks as u64,
        "one block per spray"
    );
    let total = blocks * matches;
    assert_eq!(k, total);
    eprintln!("  mined {blocks} blocks in {:.1?}", t.elapsed());

    // The chain client alone: one range scan over all blocks, per way of asking for logs.
    let watch = WatchSet::new(
        wallets.iter().map(|(id, a)| (a.parse().unwrap(), *id)),
        vec![token.parse().unwrap()],
    );
    // Recipient chunk sizes to compare (`CATCHUP_CHUNKS`, comma-separated addresses per
    // query; default 1,000 and 25,000).
    let chunks: Vec<usize> = std::env::var("CATCHUP_CHUNKS")
        .unwrap_or_else(|_| "1000,25000".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let mut ways = vec![
        ("auto (default)".to_string(), None),
        (
            "by token, local matching".to_string(),
            Some(LogQuery::ByToken),
        ),
    ];
    for chunk in chunks {
        ways.push((
            format!("by recipient, {chunk} per query"),
            Some(LogQuery::ByRecipient { chunk }),
        ));
    }
    for (name, q) in ways {
        if q == Some(LogQuery::ByToken) && std::env::var("CATCHUP_SCAN_BY_TOKEN").is_err() {
            // Every transfer crosses the wire (about 125 MB of JSON per 1,000 blocks here):
            // slow, and not what the watcher asks for with this many blocks.
            eprintln!("  (scan by token skipped; CATCHUP_SCAN_BY_TOKEN=1 runs it)");
            continue;
        }
        let tuning = match q {
            None => Tuning::default(),
            Some(q) => Tuning::new(q, LOG_RANGE, BLOCK_BATCH, CONCURRENCY),
        };
        let client = EvmClient::with_tuning("ethereum", EvmRpc::new(&eth.url).unwrap(), tuning);
        let (t, anvil_cpu, own_cpu) = (
            Instant::now(),
            cpu_secs(eth.pid()),
            cpu_secs(std::process::id()),
        );
        let scan = client
            .transfers(start_block, last_block, &watch)
            .await
            .expect("range scan");
        let secs = t.elapsed().as_secs_f64();
        let (anvil_cpu, own_cpu) = (
            cpu_secs(eth.pid()) - anvil_cpu,
            cpu_secs(std::process::id()) - own_cpu,
        );
        assert_eq!(scan.blocks.len(), blocks);
        assert_eq!(
            scan.transfers.len(),
            total,
            "{name}: every watched transfer, once"
        );
        eprintln!(
            "BENCH client range scan, logs {name}: {blocks} blocks in {secs:.2}s: {:.0} blocks/s; \
             CPU: Anvil {anvil_cpu:.2}s, the client (this process) {own_cpu:.2}s",
            blocks as f64 / secs
        );
    }

    // The real server catching up from a stopped start.
    let cfg = std::fs::read_to_string(&live.config).unwrap();
    let cfg = cfg
        .replace(
            "replace_after_ms = 30000\n",
            &format!("replace_after_ms = 30000\nstart_block = {start_block}\n"),
        )
        .replace(
            "sweep_threshold_usd_cents = 100\n",
            "sweep_threshold_usd_cents = 1000000000000\n",
        );
    std::fs::write(&live.config, cfg).unwrap();
    // The builds to run the catch-up with, in turn, each from the same stopped store
    // (`CATCHUP_BINS`, comma-separated executables or wrapper scripts; default this build's
    // server): before/after comparisons back to back on one chain, built once. The last
    // one's server stays up for the latency phase and the count check.
    let bins: Vec<String> = std::env::var("CATCHUP_BINS")
        .ok()
        .map(|v| {
            v.split(',')
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![bin().to_string()]);
    let snapshot = (bins.len() > 1).then(|| {
        let s = data.with_extension("before-catchup");
        copy_dir(&data, &s);
        s
    });
    for (round, exe) in bins.iter().enumerate() {
        if round > 0 {
            live.kill();
            let s = snapshot.as_ref().expect("a snapshot with several builds");
            std::fs::remove_dir_all(&data).unwrap();
            copy_dir(s, &data);
            live.output.lock().unwrap().clear();
        }
        if bins.len() > 1 {
            eprintln!("  server {} of {}: {exe}", round + 1, bins.len());
        }
        catchup_run(
            &mut live,
            exe,
            eth.pid(),
            (blocks, total),
            start_block,
            last_block,
        )
        .await;
        // A profiler's hook (`CATCHUP_AFTER_RUN`, a shell command given the server's pid as
        // `SERVER_PID`): e.g. `callgrind_control -d $SERVER_PID` before the server is
        // killed, which a profile under valgrind would not survive.
        if let (Ok(cmd), Some(pid)) = (std::env::var("CATCHUP_AFTER_RUN"), live.pid()) {
            let status = std::process::Command::new("sh")
                .args(["-c", &cmd])
                .env("SERVER_PID", pid.to_string())
                .status()
                .expect("run CATCHUP_AFTER_RUN");
            eprintln!("  CATCHUP_AFTER_RUN: {status}");
        }
    }

    // Latency: blocks of the same shape, one recipient a fresh API-created wallet. The
    // deposit is seen on the project's event stream (pushed after the watcher's commit), so
    // the measurement costs no request per try and never meets the API's rate limit.
    let mut events = EventStream::open(&live).await;
    let mut lat = Vec::with_capacity(samples);
    for s in 0..samples {
        let (_, w) = live.customer_wallet(&format!("lat-{s}"), "ethereum").await;
        let fresh = w["address"].as_str().unwrap().to_string();
        let mut to: Vec<String> = Vec::with_capacity(per_block);
        to.push(fresh);
        for i in 1..per_block {
            if i < matches {
                to.push(wallets[pick(s * matches + i)].1.clone());
            } else {
                to.push(unwatched[(s + i) % unwatched.len()].clone());
            }
        }
        let tx = eth
            .rpc(
                "eth_sendTransaction",
                json!([{"from": sender, "to": token, "data": spray_calldata(&to, 1), "gas": "0x1c9c380"}]),
            )
            .await;
        eth.mine(1).await;
        let mined = Instant::now();
        let tx = tx.as_str().unwrap().to_string();
        events
            .wait_for(Duration::from_secs(30), |e| {
                e["type"] == "deposit.detected" && e["data"]["tx_hash"] == tx
            })
            .await;
        lat.push(mined.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];
    eprintln!(
        "BENCH block to deposit.detected on the event stream (poll_interval_ms = 100, {samples} blocks): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        pct(0.5),
        pct(0.99),
        lat[lat.len() - 1]
    );

    // Nothing missed, nothing twice: one credited deposit per watched transfer of the
    // caught-up blocks, each to the wallet it was sent to.
    live.kill();
    let store = Store::open(&data.join("appliance.redb"), StoreOptions::default()).unwrap();
    let (range, seen) = store
        .read(move |r| {
            let mut after = None;
            let mut range = Vec::new();
            let mut seen = 0usize;
            loop {
                let rows = r.after::<appliance_storage::records::Deposit>(after, 10_000)?;
                let n = rows.len();
                for d in rows {
                    after = Some(d.id);
                    seen += 1;
                    if d.chain == "ethereum" && (start_block..=last_block).contains(&d.block_number)
                    {
                        range.push(d);
                    }
                }
                if n < 10_000 {
                    return Ok::<_, appliance_storage::StoreError>((range, seen));
                }
            }
        })
        .await
        .unwrap();
    let mut keys = std::collections::HashSet::new();
    let mut per_wallet: std::collections::HashMap<String, usize> = Default::default();
    for d in &range {
        assert_eq!(
            d.status,
            appliance_storage::records::DepositStatus::Confirmed,
            "{}",
            d.tx_hash
        );
        assert!(d.ledger_tx_id.is_some(), "credited: {}", d.tx_hash);
        assert!(
            keys.insert((d.tx_hash.clone(), d.log_index)),
            "twice: {}",
            d.tx_hash
        );
        *per_wallet.entry(d.to_address.to_lowercase()).or_default() += 1;
    }
    assert_eq!(
        range.len(),
        total,
        "credited deposits = watched transfers sent"
    );
    let mut want: std::collections::HashMap<String, usize> = Default::default();
    for k in 0..total {
        *want.entry(wallets[pick(k)].1.to_lowercase()).or_default() += 1;
    }
    assert_eq!(per_wallet, want, "each wallet credited what was sent to it");
    eprintln!(
        "  checked: {} credited deposits in blocks {start_block}..={last_block} = {total} watched transfers sent, \
         each once, each to its wallet ({seen} deposits in the store)",
        range.len()
    );
}

/// One catch-up of the server `exe` over blocks `start_block..=last_block` (`total` watched
/// transfers) from a stopped start: prints blocks/s end to end and between the first and
/// the last watcher commit, the process start and the first commits. The server stays up.
async fn catchup_run(
    live: &mut Live,
    exe: &str,
    anvil: u32,
    (blocks, total): (usize, usize),
    start_block: u64,
    last_block: u64,
) {
    let spawned = chrono::Utc::now();
    let t = Instant::now();
    let anvil_cpu = cpu_secs(anvil);
    // At the production log level (`info`), with the watcher's per-commit debug line that
    // the figures below are read from: the other debug lines (one per waiting sweep per
    // sender pass here) would be CPU a merchant's server does not spend.
    live.run_bin(
        exe,
        &[(
            "APPLIANCE_LOG",
            "info,appliance::workers::chain::watcher=debug",
        )],
    );
    let listening = t.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(3_600);
    loop {
        let [head, lag] = gauges(
            live,
            ["appliance_chain_head_height", "appliance_chain_lag_blocks"],
        )
        .await;
        if head.is_some_and(|h| h >= last_block as f64) && lag == Some(0.0) {
            break;
        }
        assert!(Instant::now() < deadline, "the server did not catch up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "BENCH server catch-up: {blocks} blocks ({total} deposits) in {secs:.2}s (process start included): {:.0} blocks/s end to end",
        blocks as f64 / secs
    );
    // Where the CPU went (both processes' user + system time over the catch-up; the
    // server's by thread name: the store writer, the background runtime with the watcher
    // and its scanner, the API runtime).
    let anvil_cpu = cpu_secs(anvil) - anvil_cpu;
    let pid = live.pid().expect("the server runs");
    let mut threads: std::collections::BTreeMap<String, f64> = Default::default();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        if let Some((name, secs)) = stat_cpu(&stat) {
            *threads.entry(name).or_default() += secs;
        }
    }
    eprintln!(
        "  CPU over the catch-up: Anvil {anvil_cpu:.2}s, server {:.2}s ({}), both {:.2}s = {:.2} cores",
        cpu_secs(pid),
        threads
            .iter()
            .map(|(n, s)| format!("{n} {s:.2}s"))
            .collect::<Vec<_>>()
            .join(", "),
        anvil_cpu + cpu_secs(pid),
        (anvil_cpu + cpu_secs(pid)) / secs
    );
    // Where the server's time went: process start, its watcher commits.
    let logs = live.logs();
    let commits: Vec<(f64, u64, u64, u64)> = logs
        .lines()
        .filter(|l| l.contains("watched blocks"))
        .filter_map(|l| {
            let at = l.trim_start_matches("[stderr] ").split(' ').next()?;
            let at = chrono::DateTime::parse_from_rfc3339(at).ok()?;
            let field = |name: &str| -> Option<u64> {
                l.split(' ')
                    .find_map(|w| w.strip_prefix(name))
                    .and_then(|v| v.parse().ok())
            };
            let secs = (at.with_timezone(&chrono::Utc) - spawned).num_microseconds()? as f64 / 1e6;
            Some((
                secs,
                field("to=")?,
                field("deposits=")?,
                field("commit_ms=")?,
            ))
        })
        .filter(|c| c.1 >= start_block && c.1 <= last_block)
        .collect();
    eprintln!(
        "  process start: spawn to listening {listening:.2}s; spawn to the first watcher commit {:.2}s",
        commits.first().map(|c| c.0).unwrap_or(f64::NAN)
    );
    if let (Some(first), Some(last)) = (commits.first(), commits.last()) {
        let n = last.1 - first.1;
        let dt = last.0 - first.0;
        let ms: Vec<u64> = commits.iter().map(|c| c.3).collect();
        eprintln!(
            "BENCH server between the first and the last watcher commit: {n} blocks in {dt:.2}s: {:.0} blocks/s; \
             {} commits, {} deposits in the first, commit_ms mean {:.0} max {}",
            n as f64 / dt,
            commits.len(),
            first.2,
            ms.iter().sum::<u64>() as f64 / ms.len() as f64,
            ms.iter().max().unwrap()
        );
    }
    // The writer's idle time between commits: from the end of one watcher commit to the
    // start of the next (each line is logged at its commit's end, with its duration).
    if commits.len() > 1 {
        let gaps: Vec<f64> = commits
            .windows(2)
            .map(|c| (c[1].0 - c[1].3 as f64 / 1e3 - c[0].0).max(0.0) * 1e3)
            .collect();
        // The gaps over 20 ms, in order, each as (the block the waiting commit starts
        // at, ms idle).
        let long: Vec<(u64, u64)> = commits
            .windows(2)
            .zip(&gaps)
            .filter(|(_, g)| **g > 20.0)
            .map(|(c, g)| (c[0].1 + 1, g.round() as u64))
            .collect();
        eprintln!(
            "  watcher idle between commits: {:.0} ms in all over {} gaps; over 20 ms: {:?}",
            gaps.iter().sum::<f64>(),
            gaps.len(),
            long
        );
    }
    for l in logs
        .lines()
        .filter(|l| l.contains("learnt deposit addresses"))
        .take(1)
    {
        eprintln!("    {l}");
    }
    for l in logs
        .lines()
        .filter(|l| l.contains("watched blocks"))
        .take(4)
    {
        eprintln!("    {l}");
    }
}

/// User + system CPU seconds of process `pid` so far (`/proc/PID/stat`, clock ticks of
/// 1/100 s); 0 when it is gone.
fn cpu_secs(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_cpu(&s))
        .map(|(_, secs)| secs)
        .unwrap_or(0.0)
}

/// (name, user + system CPU seconds) of one `/proc/.../stat` line.
fn stat_cpu(stat: &str) -> Option<(String, f64)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let name = stat.get(open + 1..close)?.to_string();
    // Fields after the name: state is the first; utime and stime the 12th and 13th.
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    let ticks = rest.get(11)?.parse::<f64>().ok()? + rest.get(12)?.parse::<f64>().ok()?;
    Some((name, ticks / 100.0))
}

/// Copies the directory `from` (its files and subdirectories) to `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        let kind = e.file_type().unwrap();
        if kind.is_dir() {
            copy_dir(&e.path(), &dest);
        } else if kind.is_file() {
            std::fs::copy(e.path(), &dest).unwrap();
        }
        // Anything else (the operator socket) belongs to a running server: not copied.
    }
}

/// The project's event stream (`GET /v1/events/stream`, server-sent events) as the wallet
/// key reads it.
struct EventStream {
    resp: reqwest::Response,
    buf: String,
}

impl EventStream {
    async fn open(live: &Live) -> EventStream {
        let resp = reqwest::Client::new()
            .get(format!("{}/v1/events/stream", live.base_url))
            .bearer_auth(&live.wallet_key)
            .send()
            .await
            .expect("event stream");
        assert_eq!(resp.status(), 200, "event stream");
        EventStream {
            resp,
            buf: String::new(),
        }
    }

    /// Reads frames until an `event` frame whose payload satisfies `want` (panics after
    /// `within`).
    async fn wait_for(&mut self, within: Duration, want: impl Fn(&serde_json::Value) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..end + 2).collect();
                let is_event = frame.lines().any(|l| l == "event: event");
                let data: String = frame
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                    .collect::<Vec<_>>()
                    .join("\n");
                if is_event {
                    let v: serde_json::Value = serde_json::from_str(&data).expect("event json");
                    if want(&v) {
                        return;
                    }
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .expect("the event did not arrive in time")
                .expect("event stream read")
                .expect("the event stream ended");
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}
