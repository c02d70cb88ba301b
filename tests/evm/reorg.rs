//! A reorg that replaces the block of a confirmed (and swept) deposit, as a new
//! user met it: `confirmations = 3`, `poll_interval_ms = 200`, one USDT token, a 2 USDT
//! deposit confirmed and credited, then `anvil_reorg` of depth 6 with no transactions and a
//! block mined every 0.3 s. The deposit must end `orphaned` with its credit reversed, every
//! time: the loop runs the scenario 20 times against one Anvil and one server, each
//! iteration ending as soon as the deposit is orphaned.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::*;

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

async fn deposit(live: &Live, cid: &str, tx: &str) -> Option<Value> {
    live.deposits_of(cid)
        .await
        .into_iter()
        .find(|d| d["tx_hash"] == tx)
}

/// Polls `f` every 50 ms (mining nothing) until it returns `Some`, at most `secs`.
async fn poll<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The warnings and errors of the appliance's log, then its last 80 lines (what the
/// watcher was doing when the test gave up).
fn tail_of_log(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let warned: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    let tail = &lines[lines.len().saturating_sub(80)..];
    format!(
        "{}\n--- last lines ---\n{}",
        warned.join("\n"),
        tail.join("\n")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_depth_6_reorg_orphans_the_credited_deposit_20_times_in_a_row() {
    let started = Instant::now();
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, true).await;
    let (tmp, data, master) = init_data_dir();
    deploy_factory(&eth, &master).await;
    // Gas for the master wallet: the deposits are swept, so the reorgs also remove sweeps.
    eth.send(ACCOUNT0, Some(&master), 10u128.pow(20), "0x")
        .await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    let mut setup = ChainSetup::ethereum(&eth, 3, Some(&usdt), 600_000);
    setup.poll_ms = 200;
    let live = Live::start(tmp, data, master, &[setup]).await;
    let (cid, w) = live.customer_wallet("reorged", "ethereum").await;
    let addr = s(&w["address"]);
    // Blocks the watcher follows before the first deposit, so that the first reorg, too,
    // forks inside what it remembers (and above the set-up's transactions).
    eth.mine(10).await;
    let mut outcomes = Vec::new();
    for i in 0..20 {
        let r = eth.token_transfer(&usdt, ACCOUNT0, &addr, 2_000_000).await;
        let tx = s(&r["transactionHash"]);
        let mined = hex_u64(&r["blockNumber"]);
        eth.mine(2).await;
        let confirmed = poll("the deposit confirmed", 15, || async {
            deposit(&live, &cid, &tx)
                .await
                .filter(|d| d["status"] == "confirmed")
        })
        .await;
        assert_eq!(live.available(&cid, "ethereum", "USDT").await, 2_000_000);
        // The sweep the confirmation starts is let land first (at most 10 s): Anvil mines a
        // transaction the moment it arrives, and one arriving during `anvil_reorg` can be
        // mined on the block the reorg replaced, leaving a node whose blocks do not link
        // (no real node answers so; the watcher follows parent hashes).
        let swept = Instant::now();
        while eth.token_balance(&usdt, &addr).await != 0
            && swept.elapsed() < Duration::from_secs(10)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The reorg removes the deposit's block (depth 6, deeper if more was mined since).
        let head = eth.block_number().await;
        let depth = (head + 1 - mined).max(6);
        eth.rpc("anvil_reorg", json!([depth, []])).await;
        let gone = eth.rpc("eth_getTransactionReceipt", json!([tx])).await;
        assert!(gone.is_null(), "the reorg removed the deposit: {gone}");
        // One block every 0.3 s, until the deposit is orphaned (20 s at most).
        let t0 = Instant::now();
        let orphaned = loop {
            if let Some(d) = deposit(&live, &cid, &tx)
                .await
                .filter(|d| d["status"] == "orphaned")
            {
                break d;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "iteration {i}: the deposit in block {mined} stayed {} after a reorg of depth {depth} at head {head}; log:\n{}",
                deposit(&live, &cid, &tx).await.map(|d| d["status"].clone()).unwrap_or_default(),
                tail_of_log(&live.logs())
            );
            eth.mine(1).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        assert_eq!(orphaned["id"], confirmed["id"]);
        assert_eq!(
            live.available(&cid, "ethereum", "USDT").await,
            0,
            "iteration {i}: credit reversed"
        );
        outcomes.push(t0.elapsed().as_millis());
    }
    let orphaned = live.events("deposit.orphaned").await;
    assert_eq!(
        orphaned.len(),
        20,
        "one deposit.orphaned per reorged deposit"
    );
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
    eprintln!(
        "20 reorgs orphaned their deposit (ms to orphaned: {outcomes:?}); {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    assert!(
        started.elapsed() < Duration::from_secs(180),
        "20 iterations within 3 minutes"
    );
}
