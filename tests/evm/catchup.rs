//! Catch-up by ranges: a scanner reads the ranges ahead while the watcher
//! commits them. A reorg during a catch-up, wherever it falls (in committed blocks, in the
//! ranges scanned ahead, or above them), leaves exactly the deposits of the canonical
//! chain, each once; a wallet created while the scanner is ahead gets its deposits.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

/// Blocks mined while the server is down.
const BLOCKS: u64 = 1_500;
/// Watched wallets the transfers cycle over.
const WALLETS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_during_a_pipelined_catch_up_leaves_exactly_the_canonical_deposits() {
    let Behind {
        eth,
        mut live,
        wallets,
        first,
        sent,
        ..
    } = stopped_behind().await;
    let head = eth.block_number().await;
    assert_eq!(head + 1 - first, BLOCKS);
    // Each transaction is in the block expected (one 30M-gas transaction per block).
    for (block, h, _) in sent.iter().step_by(97) {
        let r = eth.rpc("eth_getTransactionReceipt", json!([h])).await;
        assert_eq!(hex_u64(&r["blockNumber"]), *block, "{h}");
    }

    // Restart; as soon as the first range is committed (the next one is being scanned or
    // committed), replace every block above `fork` with empty blocks.
    live.run();
    first_commit(&live, first).await;
    let fork = first + 150;
    eth.rpc("anvil_reorg", json!([head - fork, []])).await;
    assert_eq!(eth.block_number().await, head, "same height, new blocks");
    let log_at_reorg = live.logs();

    // Caught up with the new chain: its last block committed.
    eth.mine(1).await;
    let tip = eth.block_number().await;
    wait_for("caught up with the new chain", &[], 120, || async {
        (committed_to(&live.logs()) >= tip).then_some(())
    })
    .await;

    // Exactly the transfers of blocks up to the fork are credited, each once.
    let mut confirmed: HashMap<String, usize> = HashMap::new();
    let mut credited = vec![0u128; WALLETS];
    for (i, (cid, _)) in wallets.iter().enumerate() {
        let list = live.deposits_of(cid).await;
        assert!(list.len() < 100, "listing not cut");
        for d in list {
            if d["status"] == "confirmed" {
                *confirmed
                    .entry(d["tx_hash"].as_str().unwrap().to_string())
                    .or_default() += 1;
                credited[i] += 1_000_000;
            } else {
                assert!(d["status"] == "orphaned" || d["status"] == "failed", "{d}");
            }
        }
    }
    let canonical: HashSet<&str> = sent
        .iter()
        .filter(|(block, _, _)| *block <= fork)
        .map(|(_, h, _)| h.as_str())
        .collect();
    for (h, n) in &confirmed {
        assert_eq!(*n, 1, "{h} credited once");
        assert!(
            canonical.contains(h.as_str()),
            "{h} is not on the canonical chain"
        );
    }
    assert_eq!(
        confirmed.len(),
        canonical.len(),
        "every canonical transfer credited"
    );
    for (i, (cid, _)) in wallets.iter().enumerate() {
        assert_eq!(
            live.available(cid, "ethereum", "USDT").await,
            credited[i],
            "wallet {i}"
        );
    }
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
    // Which case the reorg met (for the record; every case must end as asserted above).
    let committed_at_reorg = committed_to(&log_at_reorg);
    eprintln!(
        "reorg at fork {fork} met the watcher committed to {committed_at_reorg} (first block {first}); \
         rewinds logged: {}",
        live.logs().matches("reorg: rewinding").count()
    );
    for l in live
        .logs()
        .lines()
        .filter(|l| l.contains("watched blocks") || l.contains("reorg") || l.contains("rescanning"))
        .take(8)
    {
        eprintln!("  {l}");
    }
}

/// A catch-up to make: a live server with [`WALLETS`] watched wallets, stopped once its
/// watcher passed their creation, and [`BLOCKS`] blocks mined while it is down, each with
/// one transfer of 1 USDT to one of the wallets in turn.
struct Behind {
    eth: Anvil,
    token: String,
    live: Live,
    /// (customer id, lower-case address).
    wallets: Vec<(String, String)>,
    /// The first of the blocks mined while the server was down.
    first: u64,
    /// Per transfer: (block, transaction hash, wallet index).
    sent: Vec<(u64, String, usize)>,
}

async fn stopped_behind() -> Behind {
    let eth = Anvil::start(1);
    let token = deploy_token(&eth, 6, false).await;
    let (tmp, data, master) = init_data_dir();
    let mut live = Live::start(
        tmp,
        data,
        master,
        &[ChainSetup::ethereum(&eth, 1, Some(&token), 30_000)],
    )
    .await;
    let mut wallets = Vec::new();
    for i in 0..WALLETS {
        let (cid, w) = live.customer_wallet(&format!("c{i}"), "ethereum").await;
        wallets.push((cid, w["address"].as_str().unwrap().to_lowercase()));
    }
    // Let the watcher pass the wallets' creation, then stop the server.
    let at = eth.block_number().await;
    eth.mine(1).await;
    wait_for("watcher at the head", &[], 30, || async {
        (committed_to(&live.logs()) > at).then_some(())
    })
    .await;
    live.kill();
    let addresses: Vec<String> = wallets.iter().map(|(_, a)| a.clone()).collect();
    let (first, sent) = mine_transfers(&eth, &token, &addresses, BLOCKS).await;
    Behind {
        eth,
        token,
        live,
        wallets,
        first,
        sent,
    }
}

/// Waits (polling the server's log every 2 ms, at most 60 s) until the restarted watcher
/// has committed block `first`: the catch-up's first range is in, the scanner reads on.
async fn first_commit(live: &Live, first: u64) {
    let started = Instant::now();
    while committed_to(&live.logs()) < first {
        assert!(started.elapsed() < Duration::from_secs(60), "no commit");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `n` blocks, each with one transfer of 1 USDT (`spray` of the test token) to
/// `wallets[i % len]`, mined in batches of 100 with automine off (left off). Returns the
/// first block and, per transfer, (block, transaction hash, wallet index).
async fn mine_transfers(
    eth: &Anvil,
    token: &str,
    wallets: &[String],
    n: u64,
) -> (u64, Vec<(u64, String, usize)>) {
    let http = reqwest::Client::new();
    eth.rpc("evm_setAutomine", json!([false])).await;
    let first = eth.block_number().await + 1;
    let mut sent: Vec<(u64, String, usize)> = Vec::new();
    let mut nonce = hex_u64(
        &eth.rpc("eth_getTransactionCount", json!([ACCOUNT0, "pending"]))
            .await,
    );
    let mut b = 0u64;
    while b < n {
        let k = 100.min(n - b);
        let calls: Vec<(&str, serde_json::Value)> = (0..k)
            .map(|j| {
                let w = ((b + j) as usize) % wallets.len();
                (
                    "eth_sendTransaction",
                    json!([{"from": ACCOUNT0, "to": token,
                            "data": spray_calldata(&[wallets[w].clone()], 1_000_000),
                            "gas": "0x1c9c380", "nonce": format!("0x{:x}", nonce + j)}]),
                )
            })
            .collect();
        let hashes = batch(&http, eth, &calls).await;
        for (j, h) in hashes.iter().enumerate() {
            let w = ((b + j as u64) as usize) % wallets.len();
            sent.push((first + b + j as u64, h.as_str().unwrap().to_string(), w));
        }
        nonce += k;
        eth.mine(k).await;
        b += k;
    }
    (first, sent)
}

/// The highest `to=` of the server's `watched blocks` lines (its last committed block).
fn committed_to(logs: &str) -> u64 {
    logs.lines()
        .filter(|l| l.contains("watched blocks"))
        .filter_map(|l| {
            l.split(' ')
                .find_map(|w| w.strip_prefix("to="))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .max()
        .unwrap_or(0)
}

/// The scanner refreshes the watched addresses after each head it reads: a wallet created
/// while it runs ahead of the commits (ranges scanned with the older set already queued)
/// gets the deposits sent to it after its creation, each credited once, and the transfers
/// of the catch-up are all credited once. A scanner that kept the set it started with
/// would miss the new wallet's deposit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wallet_created_while_the_scanner_is_ahead_gets_its_deposits_once() {
    let Behind {
        eth,
        token,
        mut live,
        wallets,
        first,
        mut sent,
    } = stopped_behind().await;
    let addresses: Vec<String> = wallets.iter().map(|(_, a)| a.clone()).collect();

    // Restart; once the catch-up has committed its first range (the scanner is scanning
    // or holding the next ones), create a wallet and send to it in the next 300 blocks.
    live.run();
    first_commit(&live, first).await;
    let (late_cid, w) = live.customer_wallet("late", "ethereum").await;
    let late = w["address"].as_str().unwrap().to_lowercase();
    let behind_at_creation = committed_to(&live.logs());
    let mut all = addresses.clone();
    all.push(late.clone());
    // Transfers cycle over the 20 old wallets and the new one: every 21st is the new one's.
    let (_, more) = mine_transfers(&eth, &token, &all, 300).await;
    sent.extend(more.iter().cloned());
    let tip = eth.block_number().await;
    wait_for("caught up", &[], 180, || async {
        (committed_to(&live.logs()) >= tip).then_some(())
    })
    .await;
    assert!(
        behind_at_creation < first + BLOCKS - 1,
        "the wallet was created during the catch-up (committed to {behind_at_creation})"
    );

    // Every transfer credited once, to the wallet it was sent to.
    let to_late: Vec<&str> = more
        .iter()
        .filter(|(_, _, w)| *w == WALLETS)
        .map(|(_, h, _)| h.as_str())
        .collect();
    assert_eq!(to_late.len(), 14, "blocks 20, 41, .., 293 of the 300");
    let list = live.deposits_of(&late_cid).await;
    let mut got: Vec<&str> = list
        .iter()
        .map(|d| {
            assert_eq!(d["status"], "confirmed", "{d}");
            d["tx_hash"].as_str().unwrap()
        })
        .collect();
    got.sort_unstable();
    let mut want = to_late.clone();
    want.sort_unstable();
    assert_eq!(got, want, "the new wallet's deposits, each once");
    assert_eq!(
        live.available(&late_cid, "ethereum", "USDT").await,
        1_000_000 * to_late.len() as u128
    );
    let mut confirmed: HashSet<String> = HashSet::new();
    for (cid, _) in &wallets {
        let list = live.deposits_of(cid).await;
        assert!(list.len() < 100, "listing not cut");
        for d in list {
            assert_eq!(d["status"], "confirmed", "{d}");
            assert!(
                confirmed.insert(d["tx_hash"].as_str().unwrap().to_string()),
                "{d} twice"
            );
        }
    }
    let old: HashSet<String> = sent
        .iter()
        .filter(|(_, _, w)| *w < WALLETS)
        .map(|(_, h, _)| h.clone())
        .collect();
    assert_eq!(
        confirmed, old,
        "every transfer to the old wallets credited once"
    );
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}
