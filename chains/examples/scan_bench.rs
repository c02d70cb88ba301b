//! The chain client's range scan alone, against a local Anvil: mines
//! `BLOCKS` blocks of one transaction each emitting `PER_BLOCK` token `Transfer`s, `MATCHES`
//! of them to some of `WATCHED` watched addresses, then times `EvmClient::transfers` over the
//! whole range for each way of asking for logs. The full benchmark through the real server
//! is `catchup_benchmark` in `tests/evm/bench.rs`.
//!
//! ```text
//! cargo run --release -p appliance-chains --example scan_bench -- [BLOCKS] [WATCHED] [PER_BLOCK] [MATCHES]
//! ```
//! Defaults: 10,000 blocks, 100,000 watched, 200 per block, 5 matches. Needs Anvil under
//! `node_modules/` (`scripts/install-test-deps.sh`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use alloy::primitives::{keccak256, Address};
use alloy::providers::{Provider, RootProvider};
use serde_json::{json, Value};

use appliance_chains::client::{ChainClient, WatchSet};
use appliance_chains::evm::client::EvmClient;
use appliance_chains::evm::rpc::EvmRpc;
use appliance_chains::evm::watcher::{LogQuery, Tuning, BLOCK_BATCH, CONCURRENCY, LOG_RANGE};

const ACCOUNT0: &str = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266";

/// Stops Anvil however `main` ends (a failed assertion included).
struct Node(std::process::Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn addr(tag: &str, i: usize) -> Address {
    Address::from_slice(&keccak256(format!("{tag} {i}").as_bytes())[12..])
}

async fn rpc(p: &RootProvider, method: &'static str, params: Value) -> Value {
    p.raw_request::<_, Value>(method.into(), params)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"))
}

async fn wait_receipt(p: &RootProvider, hash: &Value) -> Value {
    for _ in 0..200 {
        let r = rpc(p, "eth_getTransactionReceipt", json!([hash])).await;
        if !r.is_null() {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not mined");
}

fn spray(to: &[Address], value: u64) -> String {
    let sel = &hex::encode(keccak256(b"spray(address[],uint256)"))[..8];
    let mut d = format!("0x{sel}{:064x}{:064x}{:064x}", 0x40, value, to.len());
    for a in to {
        d.push_str(&format!("{:0>64}", hex::encode(a.as_slice())));
    }
    d
}

/// What the benchmark mines: `blocks` blocks of `per_block` transfers, `matches` of each
/// block's to some of `watched` watched addresses.
struct Shape {
    blocks: usize,
    watched: usize,
    per_block: usize,
    matches: usize,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let shape = Shape {
        blocks: arg(1, 10_000),
        watched: arg(2, 100_000),
        per_block: arg(3, 200),
        matches: arg(4, 5).min(arg(3, 200)),
    };
    let (_node, url) = start_anvil();
    let p = RootProvider::new_http(url.parse().unwrap());
    let token = deploy_token(&p).await;
    let watch_list: Vec<Address> = (0..shape.watched).map(|i| addr("watched", i)).collect();
    let (start, last) = mine(&p, token, &watch_list, &shape).await;
    let watch = WatchSet::new(
        watch_list.iter().map(|a| (*a, uuid::Uuid::nil())),
        vec![token],
    );
    scan_each_way(&url, &watch, start, last, &shape).await;
}

/// Starts Anvil on a free port; its guard and URL.
fn start_anvil() -> (Node, String) {
    let anvil = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"
    );
    let mut child = Command::new(anvil)
        .args(["--port", "0", "--accounts", "1", "--balance", "1000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn anvil (scripts/install-test-deps.sh)");
    let out = child.stdout.take().unwrap();
    let node = Node(child);
    let mut url = String::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("Listening on ") {
            url = format!("http://{}", rest.trim());
            break;
        }
    }
    (node, url)
}

/// Deploys the test token (tests/evm/contracts/TestTokens.sol, compiled by solc 0.8.37).
async fn deploy_token(p: &RootProvider) -> Address {
    let bins: Value =
        serde_json::from_str(include_str!("../../tests/evm/contracts/TestTokens.json")).unwrap();
    let code = bins["contracts"]["TestToken"].as_str().unwrap();
    let deploy = format!("0x{code}{:064x}", 6);
    let h = rpc(
        p,
        "eth_sendTransaction",
        json!([{"from": ACCOUNT0, "data": deploy}]),
    )
    .await;
    let r = wait_receipt(p, &h).await;
    r["contractAddress"].as_str().unwrap().parse().unwrap()
}

/// Mines the blocks of `shape`, 50 at a time, one spray of the token per block; the first
/// and last block mined.
async fn mine(
    p: &RootProvider,
    token: Address,
    watch_list: &[Address],
    shape: &Shape,
) -> (u64, u64) {
    let Shape {
        blocks,
        watched,
        per_block,
        matches,
    } = *shape;
    let unwatched: Vec<Address> = (0..1_000).map(|i| addr("other", i)).collect();
    rpc(p, "evm_setAutomine", json!([false])).await;
    let start = rpc(p, "eth_blockNumber", json!([])).await;
    let start =
        u64::from_str_radix(start.as_str().unwrap().trim_start_matches("0x"), 16).unwrap() + 1;
    let t = Instant::now();
    let mut k = 0;
    let mut nonce = 1u64; // the deploy used nonce 0
    let mut b = 0;
    while b < blocks {
        let n = 50.min(blocks - b);
        for j in 0..n {
            let mut to = Vec::with_capacity(per_block);
            for i in 0..per_block {
                if i * matches / per_block != (i + 1) * matches / per_block {
                    to.push(watch_list[k % watched]);
                    k += 1;
                } else {
                    to.push(unwatched[(b + j + i) % unwatched.len()]);
                }
            }
            // A whole block's gas: one spray per block.
            rpc(
                p,
                "eth_sendTransaction",
                json!([{"from": ACCOUNT0, "to": token, "data": spray(&to, 1),
                        "gas": "0x1c9c380", "nonce": format!("0x{nonce:x}")}]),
            )
            .await;
            nonce += 1;
        }
        rpc(p, "anvil_mine", json!([format!("0x{n:x}")])).await;
        b += n;
    }
    eprintln!(
        "mined {blocks} blocks x {per_block} transfers ({matches} to {watched} watched) in {:.1?}",
        t.elapsed()
    );
    (start, start + blocks as u64 - 1)
}

/// Times `EvmClient::transfers` over `start..=last` for each way of asking for logs.
async fn scan_each_way(url: &str, watch: &WatchSet, start: u64, last: u64, shape: &Shape) {
    let blocks = shape.blocks;
    let mut blocks_only = watch.clone();
    blocks_only.tokens = Vec::new();
    let total = blocks * shape.matches;
    for (name, q, w, want) in [
        ("blocks only (no token watched)", None, &blocks_only, 0),
        ("auto (default)", None, watch, total),
        (
            "by token, local matching",
            Some(LogQuery::ByToken),
            watch,
            total,
        ),
        (
            "by recipient, 1,000 per query",
            Some(LogQuery::ByRecipient { chunk: 1_000 }),
            watch,
            total,
        ),
        (
            "by recipient, 10,000 per query",
            Some(LogQuery::ByRecipient { chunk: 10_000 }),
            watch,
            total,
        ),
        (
            "by recipient, 25,000 per query",
            Some(LogQuery::ByRecipient { chunk: 25_000 }),
            watch,
            total,
        ),
    ] {
        let tuning = match q {
            None => Tuning::default(),
            Some(q) => Tuning::new(q, LOG_RANGE, BLOCK_BATCH, CONCURRENCY),
        };
        let client = EvmClient::with_tuning("ethereum", EvmRpc::new(url).unwrap(), tuning);
        let t = Instant::now();
        let scan = client.transfers(start, last, w).await.expect("scan");
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(scan.blocks.len(), blocks);
        assert_eq!(scan.transfers.len(), want, "{name}");
        println!(
            "BENCH range scan, {name}: {blocks} blocks in {secs:.2}s: {:.0} blocks/s",
            blocks as f64 / secs
        );
    }
}
