//! The UTXO JSON-RPC client against a real node: Debian's `litecoind` (a Bitcoin Core
//! fork) on regtest, installed by scripts/install-test-deps.sh. A missing node fails the
//! test.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use appliance_chains::client::ClientError;
use appliance_chains::utxo::rpc::{RpcAuth, UtxoRpc};
use serde_json::{json, Value};

const LITECOIND: &str = "/usr/lib/litecoin/litecoind";

/// A regtest node in a temporary data dir, killed on drop.
struct Node {
    child: Child,
    rpc: UtxoRpc,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn auth() -> RpcAuth {
    RpcAuth::UserPass {
        user: "u".into(),
        password: "p".into(),
    }
}

async fn start() -> Node {
    assert!(
        std::path::Path::new(LITECOIND).exists(),
        "{LITECOIND} is missing: run scripts/install-test-deps.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    let rpc_port = free_port();
    let child = Command::new(LITECOIND)
        .args([
            "-regtest".to_string(),
            format!("-datadir={}", dir.path().display()),
            format!("-rpcport={rpc_port}"),
            "-rpcuser=u".into(),
            "-rpcpassword=p".into(),
            "-txindex=1".into(),
            "-fallbackfee=0.0001".into(),
            "-vbparams=mweb:4102444800:4102444801:0:0".into(),
            "-rpcserialversion=1".into(),
            "-mempoolreplacement=1".into(),
            "-listen=0".into(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("litecoind starts");
    let rpc = UtxoRpc::new(&format!("http://127.0.0.1:{rpc_port}"), auth()).unwrap();
    let node = Node {
        child,
        rpc,
        port: rpc_port,
        _dir: dir,
    };
    let t0 = Instant::now();
    while let Err(e) = node.rpc.chain_info().await {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "litecoind did not answer: {e}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    node
}

/// Every signing switch on.
const SIGNING_ON: appliance_signer::SigningPolicy = appliance_signer::SigningPolicy {
    service: true,
    project: true,
    key: true,
};

/// A node with a wallet holding mature coins (101 blocks mined to it), and the address
/// they were mined to.
async fn funded() -> (Node, Value) {
    let node = start().await;
    node.cli("createwallet", json!(["w"])).await;
    let miner = node.cli("getnewaddress", json!(["", "bech32"])).await;
    node.cli("generatetoaddress", json!([101, miner])).await;
    (node, miner)
}

/// Litecoin's regtest encodings (hrp `rltc`, P2PKH 111, P2SH 58): bitcoin's P2WPKH form
/// and dogecoin's P2PKH form, as the node reads them.
fn litecoin_networks() -> [appliance_signer::utxo::UtxoNetwork; 2] {
    use appliance_signer::utxo::UtxoNetwork;
    [
        UtxoNetwork::bitcoin("regtest")
            .unwrap()
            .with_overrides(Some("rltc"), Some(111), Some(58))
            .unwrap(),
        UtxoNetwork::dogecoin("regtest")
            .unwrap()
            .with_overrides(None, Some(111), Some(58))
            .unwrap(),
    ]
}

impl Node {
    async fn cli(&self, method: &'static str, params: Value) -> Value {
        self.rpc.call(method, params).await.unwrap()
    }
}

#[tokio::test]
async fn blocks_transactions_mempool_and_refusals_read_through_the_client() {
    let node = start().await;
    let info = node.rpc.chain_info().await.unwrap();
    assert_eq!(info.chain, "regtest");
    assert_eq!(info.blocks, 0);

    node.cli("createwallet", json!(["w"])).await;
    let miner = node.cli("getnewaddress", json!(["", "bech32"])).await;
    node.cli("generatetoaddress", json!([101, miner])).await;
    let to = node.cli("getnewaddress", json!(["", "bech32"])).await;
    let to = to.as_str().unwrap().to_string();
    assert!(to.starts_with("rltc1q"), "{to}");

    // A payment waits in the mempool, then is mined with its exact value.
    let txid = node
        .cli("sendtoaddress", json!([to, "1.23456789"]))
        .await
        .as_str()
        .unwrap()
        .to_string();
    assert!(node.rpc.mempool().await.unwrap().contains(&txid));
    let pending = node.rpc.transaction(&txid).await.unwrap();
    assert!(!pending.inputs.is_empty(), "a payment spends something");
    let out = pending
        .outputs
        .iter()
        .find(|o| o.address.as_deref() == Some(to.as_str()))
        .expect("an output to the address");
    assert_eq!(out.value, 123_456_789);
    assert!(
        out.script_hex.starts_with("0014"),
        "P2WPKH: {}",
        out.script_hex
    );

    node.cli("generatetoaddress", json!([1, miner])).await;
    let info = node.rpc.chain_info().await.unwrap();
    assert_eq!(info.blocks, 102);
    let hash = node.rpc.block_hash(102).await.unwrap();
    assert_eq!(hash, info.best_block_hash);
    let block = node.rpc.block(&hash).await.unwrap();
    assert_eq!(block.height, 102);
    assert_eq!(
        block.previous_hash.as_deref(),
        Some(node.rpc.block_hash(101).await.unwrap().as_str())
    );
    let mined = block.txs.iter().find(|t| t.txid == txid).expect("mined");
    assert_eq!(mined, &pending);
    assert!(
        block.txs[0].inputs.is_empty(),
        "the coinbase spends nothing"
    );
    // The block scan finds the output by its script, and the spend of a held coin.
    let wallet = uuid::Uuid::from_u128(7);
    let mut watch = appliance_chains::utxo::scan::ScriptWatch::default();
    watch.insert(hex::decode(&out.script_hex).unwrap(), wallet);
    let held = pending.inputs.iter().cloned().collect();
    let found = appliance_chains::utxo::scan::scan(&block.txs, &watch, &held);
    assert_eq!(found.received.len(), 1);
    assert_eq!(found.received[0].outpoint.txid, txid);
    assert_eq!(found.received[0].outpoint.vout, out.n);
    assert_eq!(
        (found.received[0].value, found.received[0].wallet),
        (123_456_789, wallet)
    );
    assert_eq!(found.spent.len(), pending.inputs.len());
    assert!(found.spent.iter().all(|s| s.by == txid));
    assert!(node.rpc.mempool().await.unwrap().is_empty());

    // Regtest has no fee estimate.
    assert_eq!(node.rpc.fee_per_kvb(6).await.unwrap(), None);

    // The node's refusals are refusals, with its message.
    match node.rpc.broadcast("00").await {
        Err(ClientError::Refused { method, detail }) => {
            assert_eq!(method, "sendrawtransaction");
            assert!(detail.contains("decode"), "{detail}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(matches!(
        node.rpc.block_hash(1_000).await,
        Err(ClientError::Refused { .. })
    ));

    // A node that is gone is unavailable, not a refusal.
    let gone = UtxoRpc::new(&format!("http://127.0.0.1:{}", free_port()), auth()).unwrap();
    assert!(matches!(
        gone.chain_info().await,
        Err(ClientError::Unavailable { .. })
    ));
}

/// The signer's UTXO transactions are valid on a real node: a P2WPKH spend (bitcoin's
/// form, on Litecoin's regtest hrp `rltc`) and a legacy P2PKH spend (dogecoin's form, with
/// the node's version byte 111), each mined with its exact outputs.
#[tokio::test]
async fn signed_p2wpkh_and_p2pkh_spends_are_mined() {
    use appliance_signer::utxo::{CUSTOMER_ACCOUNT, MASTER_ACCOUNT};
    use appliance_signer::utxo_tx::{UtxoInput, UtxoOutput};

    let (node, miner) = funded().await;
    let signer = appliance_signer::Signer::test_mode();
    let on = SIGNING_ON;
    let [segwit, legacy] = litecoin_networks();
    for net in [segwit, legacy] {
        let deposit = signer.utxo_account(&net, CUSTOMER_ACCOUNT).unwrap();
        let master = signer.utxo_account(&net, MASTER_ACCOUNT).unwrap();
        let from = deposit.address(5).unwrap();
        let funding = node
            .cli("sendtoaddress", json!([from, "0.5"]))
            .await
            .as_str()
            .unwrap()
            .to_string();
        node.cli("generatetoaddress", json!([1, miner])).await;
        let out = node
            .rpc
            .transaction(&funding)
            .await
            .unwrap()
            .outputs
            .into_iter()
            .find(|o| o.address.as_deref() == Some(from.as_str()))
            .expect("the deposit output");
        assert_eq!(out.value, 50_000_000);
        let to = master.address(0).unwrap();
        let fee = 20_000;
        let signed = signer
            .sign_utxo_tx(
                on,
                &net,
                &[UtxoInput {
                    txid: funding.clone(),
                    vout: out.n,
                    value: out.value,
                    key: (CUSTOMER_ACCOUNT, 5),
                }],
                &[UtxoOutput {
                    script: net.script_for(&to).unwrap(),
                    value: out.value - fee,
                }],
                true,
            )
            .unwrap();
        let txid = node.rpc.broadcast(&hex::encode(&signed.raw)).await.unwrap();
        assert_eq!(txid, signed.txid, "{net:?}");
        node.cli("generatetoaddress", json!([1, miner])).await;
        let hash = node.rpc.chain_info().await.unwrap().best_block_hash;
        let block = node.rpc.block(&hash).await.unwrap();
        let mined = block.txs.iter().find(|t| t.txid == txid).expect("mined");
        assert_eq!(mined.outputs.len(), 1);
        assert_eq!(mined.outputs[0].value, 50_000_000 - fee);
        assert_eq!(mined.outputs[0].address.as_deref(), Some(to.as_str()));
        assert_eq!(
            mined.inputs,
            vec![appliance_chains::utxo::rpc::OutPoint {
                txid: funding,
                vout: out.n
            }]
        );
    }
}

/// The spend planner's sizes and fees hold on a real node: a payout planned from three
/// master coins, signed, is accepted with its exact amount and change; a replacement
/// planned from it (opt-in RBF, BIP125) is accepted in its place and mined, and the
/// stuck send never is. For bitcoin's form (P2WPKH) and dogecoin's (P2PKH).
#[tokio::test]
async fn a_planned_payout_and_its_replacement_are_accepted_and_one_is_mined() {
    use appliance_chains::utxo::plan::{
        plan_payout, plan_replacement, vsize, Coin, Dust, FeePolicy, Payment, Plan, Replaced,
        ScriptKind,
    };
    use appliance_signer::utxo::MASTER_ACCOUNT;
    use appliance_signer::utxo_tx::{UtxoInput, UtxoOutput};

    let (node, miner) = funded().await;
    let signer = appliance_signer::Signer::test_mode();
    let on = SIGNING_ON;
    // Litecoin's relay rules are ten times bitcoin's (0.0001 LTC/kvB minimum and
    // increment); the policy says so, as an operator's config would.
    let policy = FeePolicy {
        floor_kvb: 20_000,
        ceiling_kvb: 2_000_000,
        incremental_kvb: 10_000,
        dust: Dust::Relay { rate_kvb: 30_000 },
    };
    let [segwit, legacy] = litecoin_networks();
    for (net, kind, dest_type) in [
        (segwit, ScriptKind::P2wpkh, "bech32"),
        (legacy, ScriptKind::P2pkh, "legacy"),
    ] {
        let master = signer.utxo_account(&net, MASTER_ACCOUNT).unwrap();
        // Three master coins, at indices 0, 1 and 2.
        let mut coins = Vec::new();
        let mut index_of = std::collections::HashMap::new();
        for (i, amount) in [(0u32, "0.3"), (1, "0.2"), (2, "0.05")] {
            let a = master.address(i).unwrap();
            let txid = node.cli("sendtoaddress", json!([a, amount])).await;
            let txid = txid.as_str().unwrap().to_string();
            let out = node
                .rpc
                .transaction(&txid)
                .await
                .unwrap()
                .outputs
                .into_iter()
                .find(|o| o.address.as_deref() == Some(a.as_str()))
                .unwrap();
            let script = hex::decode(&out.script_hex).unwrap();
            assert_eq!(ScriptKind::of(&script), Some(kind));
            let outpoint = appliance_chains::utxo::rpc::OutPoint { txid, vout: out.n };
            index_of.insert(outpoint.clone(), i);
            coins.push(Coin {
                outpoint,
                value: out.value,
                kind,
            });
        }
        node.cli("generatetoaddress", json!([1, miner])).await;
        let dest = node.cli("getnewaddress", json!(["", dest_type])).await;
        let dest = dest.as_str().unwrap().to_string();
        let dest_script = net.script_for(&dest).unwrap();
        let pay = Payment {
            kind: ScriptKind::of(dest_script.as_bytes()).unwrap(),
            value: 42_123_456,
        };
        let change_to = net.script_for(&master.address(7).unwrap()).unwrap();
        let sign = |plan: &Plan| {
            let inputs: Vec<UtxoInput> = plan
                .inputs
                .iter()
                .map(|c| UtxoInput {
                    txid: c.outpoint.txid.clone(),
                    vout: c.outpoint.vout,
                    value: c.value,
                    key: (MASTER_ACCOUNT, index_of[&c.outpoint]),
                })
                .collect();
            let mut outputs = vec![UtxoOutput {
                script: dest_script.clone(),
                value: pay.value,
            }];
            if let Some(change) = plan.change {
                outputs.push(UtxoOutput {
                    script: change_to.clone(),
                    value: change,
                });
            }
            signer
                .sign_utxo_tx(on, &net, &inputs, &outputs, true)
                .unwrap()
        };

        let rate = policy.rate(node.rpc.fee_per_kvb(6).await.unwrap());
        assert_eq!(rate, policy.floor_kvb, "regtest has no estimate: the floor");
        let first = plan_payout(&coins, &[pay], kind, rate, policy.dust).unwrap();
        assert_eq!(first.inputs.len(), 2, "0.3 + 0.2 pay 0.42: {first:?}");
        assert!(first.change.is_some());
        let stuck = sign(&first);
        assert!(
            stuck.vsize <= vsize(first.weight),
            "planned at the largest size"
        );
        let stuck_id = node.rpc.broadcast(&hex::encode(&stuck.raw)).await.unwrap();
        assert!(node.rpc.mempool().await.unwrap().contains(&stuck_id));

        let prev = Replaced {
            plan: &first,
            signed_vsize: stuck.vsize,
        };
        let bumped = plan_replacement(prev, &coins, kind, rate * 3, &policy).unwrap();
        assert_eq!(bumped.inputs, first.inputs);
        assert!(bumped.fee > first.fee);
        let replacement = sign(&bumped);
        let id = node
            .rpc
            .broadcast(&hex::encode(&replacement.raw))
            .await
            .unwrap_or_else(|e| panic!("{net:?}: the replacement is refused: {e}"));
        let pool = node.rpc.mempool().await.unwrap();
        assert!(pool.contains(&id) && !pool.contains(&stuck_id), "replaced");

        node.cli("generatetoaddress", json!([1, miner])).await;
        let hash = node.rpc.chain_info().await.unwrap().best_block_hash;
        let block = node.rpc.block(&hash).await.unwrap();
        assert!(!block.txs.iter().any(|t| t.txid == stuck_id));
        let mined = block.txs.iter().find(|t| t.txid == id).expect("mined");
        let paid = mined
            .outputs
            .iter()
            .find(|o| o.address.as_deref() == Some(dest.as_str()))
            .unwrap();
        assert_eq!(paid.value, 42_123_456, "the exact amount");
        let total_in: u64 = bumped.inputs.iter().map(|c| c.value).sum();
        let total_out: u64 = mined.outputs.iter().map(|o| o.value).sum();
        assert_eq!(total_in - total_out, bumped.fee);
    }
}

/// The follower: the node's network checked, blocks by height linked by parent hash, a
/// transaction paying two watched addresses found in its block and, after the block is
/// invalidated, in the mempool (read once), then in the block that mines it again.
#[tokio::test]
async fn the_follower_reads_linked_blocks_the_mempool_and_a_reorg() {
    use appliance_chains::utxo::follow::{MempoolWatch, NetworkCheck, UtxoFollower};
    use appliance_chains::utxo::scan::ScriptWatch;
    use std::collections::HashSet;

    let node = start().await;
    let url = format!("http://127.0.0.1:{}", node.port);
    let follower = UtxoFollower::new(UtxoRpc::new(&url, auth()).unwrap());
    follower.check_network("regtest").await.unwrap();
    assert!(matches!(
        follower.check_network("bitcoin").await,
        Err(NetworkCheck::Mismatch { ref got, ref expected }) if got == "regtest" && expected == "main"
    ));
    assert!(matches!(
        follower.check_network("moon").await,
        Err(NetworkCheck::Unknown(_))
    ));

    node.cli("createwallet", json!(["w"])).await;
    let miner = node.cli("getnewaddress", json!(["", "bech32"])).await;
    node.cli("generatetoaddress", json!([101, miner])).await;
    let head = follower.head().await.unwrap();
    assert_eq!(head, 101);
    let top = follower.block_ref(head).await.unwrap().unwrap();
    let below = follower.block_ref(head - 1).await.unwrap().unwrap();
    assert_eq!(top.parent_hash, below.hash);
    assert_eq!(
        format!("{:x}", top.hash).trim_start_matches("0x"),
        node.rpc.chain_info().await.unwrap().best_block_hash
    );
    assert_eq!(follower.block_ref(head + 1).await.unwrap(), None);

    // One transaction paying two watched addresses (and change to the node's wallet).
    let (a, b) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
    let mut watch = ScriptWatch::default();
    let mut addrs = Vec::new();
    for w in [a, b] {
        let addr = node.cli("getnewaddress", json!(["", "bech32"])).await;
        let info = node.cli("getaddressinfo", json!([addr])).await;
        watch.insert(
            hex::decode(info["scriptPubKey"].as_str().unwrap()).unwrap(),
            w,
        );
        addrs.push(addr.as_str().unwrap().to_string());
    }
    let txid = node
        .cli(
            "sendmany",
            json!(["", {addrs[0].clone(): "0.1", addrs[1].clone(): "0.25"}]),
        )
        .await;
    let txid = txid.as_str().unwrap().to_string();
    let none = HashSet::new();
    let mut pool = MempoolWatch::default();
    let seen = pool.poll(&node.rpc, &watch, &none).await.unwrap();
    assert_eq!(seen.received.len(), 2, "detected in the mempool");
    assert!(
        pool.poll(&node.rpc, &watch, &none)
            .await
            .unwrap()
            .received
            .is_empty(),
        "read once"
    );

    node.cli("generatetoaddress", json!([1, miner])).await;
    let range = follower.scan(100, 102, &watch, &none).await.unwrap();
    assert_eq!(range.blocks.len(), 3);
    assert!(range
        .blocks
        .windows(2)
        .all(|p| p[1].parent_hash == p[0].hash));
    assert_eq!(range.changes.len(), 1);
    let (height, changes) = &range.changes[0];
    assert_eq!(*height, 102);
    let mut got: Vec<(u64, uuid::Uuid)> = changes
        .received
        .iter()
        .map(|r| (r.value, r.wallet))
        .collect();
    got.sort();
    assert_eq!(got, vec![(10_000_000, a), (25_000_000, b)]);
    assert!(changes.received.iter().all(|r| r.outpoint.txid == txid));
    assert!(matches!(
        follower.scan(102, 103, &watch, &none).await,
        Err(ClientError::Moving(_))
    ));

    // The block is invalidated: the transaction is back in the mempool (remembered as
    // read: not reported twice), then mined in a block of another hash.
    let old = follower.block_ref(102).await.unwrap().unwrap();
    node.cli(
        "invalidateblock",
        json!([format!("{:x}", old.hash).trim_start_matches("0x")]),
    )
    .await;
    assert_eq!(follower.head().await.unwrap(), 101);
    assert!(pool
        .poll(&node.rpc, &watch, &none)
        .await
        .unwrap()
        .received
        .is_empty());
    let fresh = node.cli("getnewaddress", json!(["", "bech32"])).await;
    node.cli("generatetoaddress", json!([1, fresh])).await;
    let new = follower.block_ref(102).await.unwrap().unwrap();
    assert_ne!(new.hash, old.hash);
    assert_eq!(
        new.parent_hash,
        follower.block_ref(101).await.unwrap().unwrap().hash
    );
    let again = follower.scan(102, 102, &watch, &none).await.unwrap();
    assert_eq!(again.changes.len(), 1, "mined again");
}
