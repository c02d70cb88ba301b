//! End-to-end tests of live mode on EVM chains: real Anvil nodes, real ERC-20
//! contracts, the pinned forwarder factory, and the real binary driven over its API.
//! Needs `scripts/install-test-deps.sh` (Anvil and solc under node_modules/).

mod bench;
mod billing;
mod catchup;
mod dex;
mod failover;
mod helpers;
mod invoices;
mod market;
mod reorg;
mod sends;

use std::collections::BTreeSet;

use serde_json::{json, Value};

use helpers::*;

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// Sends `amount` of `token` to the empty deposit address `addr` of customer `cid`, waits
/// for its deposit to confirm, mines 5 blocks more, and checks that it is still on the
/// address: below the chain's sweep threshold (1 USD), nothing is swept without a request.
async fn small_deposit_waits(
    live: &Live,
    eth: &Anvil,
    cid: &str,
    (token, addr): (&str, &str),
    amount: u128,
) {
    let r = eth.token_transfer(token, ACCOUNT0, addr, amount).await;
    let tx = s(&r["transactionHash"]);
    wait_for("small deposit confirmed", &[eth], 60, || {
        deposit_with(live, cid, &tx, "confirmed")
    })
    .await;
    eth.mine(5).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        eth.token_balance(token, addr).await,
        amount,
        "not swept automatically below the threshold"
    );
}

async fn deposit_with(live: &Live, cid: &str, tx: &str, status: &str) -> Option<Value> {
    live.deposits_of(cid)
        .await
        .into_iter()
        .find(|d| d["tx_hash"] == tx && d["status"] == status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deposits_sweeps_and_payouts_on_two_chains() {
    let eth = Anvil::start(1);
    let bsc = Anvil::start(56);
    let usdt = deploy_token(&eth, 6, true).await; // returns no bool, as USDT on Ethereum
    let busdt = deploy_token(&bsc, 18, false).await; // 18 decimals, as on bsc
    let (tmp, data, master) = init_data_dir();
    let factory = deploy_factory(&eth, &master).await;
    assert_eq!(
        deploy_factory(&bsc, &master).await,
        factory,
        "one factory address everywhere"
    );
    eth.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await; // gas money
    bsc.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    bsc.mint(&busdt, ACCOUNT0, 10u128.pow(24)).await;

    let live = Live::start(
        tmp,
        data,
        master.clone(),
        &[
            ChainSetup::ethereum(&eth, 3, Some(&usdt), 30_000),
            ChainSetup {
                id: "bsc",
                anvil: &bsc,
                confirmations: 3,
                assets: vec![("USDT", busdt.clone(), 18)],
                replace_after_ms: 30_000,
                poll_ms: 100,
            },
        ],
    )
    .await;

    // Chains with a healthy adapter are live.
    let chains = wait_for("chains live", &[], 30, || async {
        let v = live.get(&live.wallet_key, "/v1/chains").await;
        let all = v["data"].as_array().cloned().unwrap_or_default();
        let st = |id: &str| {
            all.iter()
                .find(|c| c["chain"] == id)
                .map(|c| s(&c["status"]))
        };
        (st("ethereum").as_deref() == Some("live") && st("bsc").as_deref() == Some("live"))
            .then_some(all)
    })
    .await;
    assert!(chains
        .iter()
        .any(|c| c["chain"] == "polygon" && c["status"] == "paused"));

    // The same customer gets the same address on both chains, and it is the factory's own
    // CREATE2 answer.
    let (cid, w) = live.customer_wallet("alice", "ethereum").await;
    let wb = live.wallet(&cid, "bsc").await;
    let addr = s(&w["address"]);
    assert_eq!(addr, s(&wb["address"]));
    let salt = appliance_chains::address::deposit_salt(
        live.project_id.parse().unwrap(),
        cid.parse().unwrap(),
    );
    let onchain = eth
        .rpc("eth_call", json!([{"to": factory, "data": format!("0x{}", hex::encode(appliance_chains::evm::sweeper::forwarder_address_calldata(salt)))}, "latest"]))
        .await;
    assert_eq!(s(&onchain)[26..].to_lowercase(), addr[2..].to_lowercase());
    assert_eq!(eth.code(&addr).await, "0x", "no forwarder deployed yet");

    // USDT and ETH arrive at the undeployed address.
    let r1 = eth.token_transfer(&usdt, ACCOUNT0, &addr, 25_000_000).await;
    let r2 = eth
        .send(ACCOUNT0, Some(&addr), 1_500_000_000_000_000_000, "0x")
        .await;
    let r3 = bsc
        .token_transfer(&busdt, ACCOUNT0, &addr, 7 * 10u128.pow(18))
        .await;
    let (t1, t2, t3) = (
        s(&r1["transactionHash"]),
        s(&r2["transactionHash"]),
        s(&r3["transactionHash"]),
    );

    // Detected first (not credited), confirmed after 3 blocks.
    let d1 = wait_for("usdt detected", &[], 30, || {
        deposit_with(&live, &cid, &t1, "detected")
    })
    .await;
    assert_eq!(d1["amount"], "25000000");
    assert_eq!(d1["asset"]["symbol"], "USDT");
    assert_eq!(d1["chain"], "ethereum");
    assert_eq!(
        live.available(&cid, "ethereum", "USDT").await,
        0,
        "not credited before the threshold"
    );
    wait_for("usdt confirmed", &[&eth], 60, || {
        deposit_with(&live, &cid, &t1, "confirmed")
    })
    .await;
    let d2 = wait_for("eth confirmed", &[&eth], 60, || {
        deposit_with(&live, &cid, &t2, "confirmed")
    })
    .await;
    assert_eq!(d2["asset"]["symbol"], "ETH");
    assert_eq!(d2["log_index"], 0);
    let d3 = wait_for("bsc confirmed", &[&bsc], 60, || {
        deposit_with(&live, &cid, &t3, "confirmed")
    })
    .await;
    assert_eq!(d3["chain"], "bsc");
    assert_eq!(d3["amount"], "7000000000000000000");
    assert_eq!(live.available(&cid, "ethereum", "USDT").await, 25_000_000);
    assert_eq!(
        live.available(&cid, "ethereum", "ETH").await,
        1_500_000_000_000_000_000
    );
    assert_eq!(
        live.available(&cid, "bsc", "USDT").await,
        7 * 10u128.pow(18)
    );
    assert!(!live.events("deposit.detected").await.is_empty());
    assert!(live.events("deposit.confirmed").await.len() >= 3);

    // Sweeps run automatically (threshold 1 USD): funds reach the master wallet on chain.
    wait_for("sweeps confirmed", &[&eth, &bsc], 90, || async {
        let v = live.get(&live.wallet_key, "/v1/sweeps?limit=100").await;
        let all = v["data"].as_array().cloned().unwrap_or_default();
        (all.iter().filter(|x| x["status"] == "confirmed").count() >= 3).then_some(())
    })
    .await;
    assert_eq!(eth.token_balance(&usdt, &master).await, 25_000_000);
    assert_eq!(eth.token_balance(&usdt, &addr).await, 0);
    assert_eq!(eth.balance(&addr).await, 0);
    // 10 ETH of gas money + the swept 1.5 ETH, less the (small) gas of the sweeps.
    let m = eth.balance(&master).await;
    assert!(
        m > 11_400_000_000_000_000_000 && m < 11_500_000_000_000_000_000,
        "ETH swept: {m}"
    );
    assert_eq!(bsc.token_balance(&busdt, &master).await, 7 * 10u128.pow(18));
    assert!(
        eth.code(&addr).await.len() > 2,
        "the sweep deployed the forwarder"
    );
    let treasury = live.get(&live.wallet_key, "/v1/balances").await;
    let row = treasury["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["chain"] == "ethereum" && r["asset"] == "USDT")
        .unwrap()
        .clone();
    assert_eq!(row["treasury"], "25000000", "{treasury}");
    assert_eq!(row["deposits"], "0");
    assert_eq!(row["in_transit"], "0");

    // POST /v1/sweeps on a swept address: nothing left to sweep.
    let sk = live
        .post(
            &live.wallet_key,
            "/v1/sweeps",
            json!({"wallet_id": s(&w["id"]), "asset": "USDT"}),
            201,
        )
        .await;
    assert_eq!(sk["status"], "skipped", "{sk}");
    assert_eq!(sk["skip_reason"], "nothing_to_sweep");

    // Balances from chain: on-chain 0 on the swept address, drift 0 against the ledger.
    let wid = s(&w["id"]);
    let b = live
        .get(
            &live.wallet_key,
            &format!("/v1/wallets/{wid}/balances?source=both"),
        )
        .await;
    let usdt_row = b["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["asset"] == "USDT")
        .unwrap()
        .clone();
    assert_eq!(usdt_row["onchain"], "0", "{b}");
    assert_eq!(usdt_row["drift"], "0", "{b}");

    // Address validation and self-payouts.
    let bad = live
        .post(&live.payout_key, "/v1/payouts", json!({"customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6, "amount": "1", "to_address": "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD"}), 422)
        .await;
    assert_eq!(bad["code"], "invalid_address", "{bad}");
    for to in [addr.clone(), master.clone()] {
        let v = live
            .post(&live.payout_key, "/v1/payouts", json!({"customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6, "amount": "1", "to_address": to}), 422)
            .await;
        assert_eq!(v["code"], "self_payout_forbidden", "{v}");
    }

    // A payout arrives with the exact amount.
    let dest = external(1);
    let p = live
        .post(&live.payout_key, "/v1/payouts", json!({"customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6, "amount": "5000000", "to_address": dest}), 202)
        .await;
    let pid = s(&p["id"]);
    let done = wait_for("payout confirmed", &[&eth], 60, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{pid}"))
            .await;
        (v["status"] == "confirmed").then_some(v)
    })
    .await;
    assert_eq!(eth.token_balance(&usdt, &dest).await, 5_000_000);
    let tx = eth
        .rpc("eth_getTransactionByHash", json!([done["tx_hash"]]))
        .await;
    assert_eq!(s(&tx["from"]).to_lowercase(), master.to_lowercase());
    assert_eq!(tx["type"], "0x2", "EIP-1559");
    assert_eq!(live.available(&cid, "ethereum", "USDT").await, 20_000_000);

    // 20 concurrent payouts: all confirm, with consecutive nonces.
    let mut futs = Vec::new();
    for i in 0..20 {
        let body = json!({"customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6,
                          "amount": "100000", "to_address": external(100 + i)});
        futs.push(async { live.post(&live.payout_key, "/v1/payouts", body, 202).await });
    }
    let created: Vec<Value> = futures_join(futs).await;
    let ids: Vec<String> = created.iter().map(|p| s(&p["id"])).collect();
    let hashes = wait_for("20 payouts confirmed", &[&eth], 120, || async {
        let mut hs = Vec::new();
        for id in &ids {
            let v = live
                .get(&live.payout_key, &format!("/v1/payouts/{id}"))
                .await;
            if v["status"] != "confirmed" {
                return None;
            }
            hs.push(s(&v["tx_hash"]));
        }
        Some(hs)
    })
    .await;
    let mut nonces = BTreeSet::new();
    for h in &hashes {
        let tx = eth.rpc("eth_getTransactionByHash", json!([h])).await;
        nonces.insert(hex_u64(&tx["nonce"]));
    }
    assert_eq!(nonces.len(), 20, "no nonce reused");
    let (lo, hi) = (*nonces.first().unwrap(), *nonces.last().unwrap());
    assert_eq!(hi - lo, 19, "consecutive nonces: {nonces:?}");
    for i in 0..20 {
        assert_eq!(eth.token_balance(&usdt, &external(100 + i)).await, 100_000);
    }
    assert_eq!(live.available(&cid, "ethereum", "USDT").await, 18_000_000);

    // A payout on the second chain (18-decimal USDT) arrives too.
    let native = live
        .post(&live.payout_key, "/v1/payouts", json!({"customer_id": cid, "chain": "bsc", "asset": "USDT", "decimals": 18, "amount": "1000000000000000000", "to_address": external(7)}), 202)
        .await;
    let nid = s(&native["id"]);
    wait_for("bsc payout confirmed", &[&bsc], 60, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{nid}"))
            .await;
        (v["status"] == "confirmed").then_some(())
    })
    .await;
    assert_eq!(
        bsc.token_balance(&busdt, &external(7)).await,
        10u128.pow(18)
    );

    // Below the automatic threshold (1 USD) a deposit waits on its address; an explicit
    // POST /v1/sweeps moves it anyway.
    small_deposit_waits(&live, &eth, &cid, (&usdt, &addr), 500_000).await;
    let master_before = eth.token_balance(&usdt, &master).await;
    let req = live
        .post(
            &live.wallet_key,
            "/v1/sweeps",
            json!({"wallet_id": s(&w["id"]), "asset": "USDT"}),
            201,
        )
        .await;
    let sid = s(&req["id"]);
    wait_for("requested sweep confirmed", &[&eth], 60, || async {
        let v = live
            .get(&live.wallet_key, &format!("/v1/sweeps/{sid}"))
            .await;
        (v["status"] == "confirmed").then_some(())
    })
    .await;
    assert_eq!(
        eth.token_balance(&usdt, &master).await,
        master_before + 500_000
    );

    // A sweep found waiting is passed over by the next passes until its row changes: a
    // second small deposit waits; a third lifts the same open sweep over the threshold and
    // it is swept without a request, well before the sender's full pass (60 s) would have
    // read it again anyway.
    small_deposit_waits(&live, &eth, &cid, (&usdt, &addr), 400_000).await;
    let master_before = eth.token_balance(&usdt, &master).await;
    eth.token_transfer(&usdt, ACCOUNT0, &addr, 700_000).await;
    let started = std::time::Instant::now();
    wait_for(
        "the open sweep over the threshold swept",
        &[&eth],
        60,
        || async { (eth.token_balance(&usdt, &addr).await == 0).then_some(()) },
    )
    .await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "swept after {:?}: the waiting sweep was not read again when it changed",
        started.elapsed()
    );
    assert_eq!(
        eth.token_balance(&usdt, &master).await,
        master_before + 1_100_000
    );

    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}

async fn futures_join<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let handles: Vec<_> = futs.into_iter().map(Box::pin).collect();
    let mut out = Vec::new();
    // Poll all concurrently.
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = (0..pending.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (i, slot) in pending.iter_mut().enumerate() {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        results[i] = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    for r in results {
        out.push(r.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_orphans_a_confirmed_deposit_and_reverses_its_credit() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, true).await;
    let (tmp, data, master) = init_data_dir();
    deploy_factory(&eth, &master).await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    // No gas for the master wallet: nothing is swept, the reorg meets the deposit alone.
    let live = Live::start(
        tmp,
        data,
        master,
        &[ChainSetup::ethereum(&eth, 2, Some(&usdt), 30_000)],
    )
    .await;
    let (cid, w) = live.customer_wallet("bob", "ethereum").await;
    let addr = s(&w["address"]);
    // A detected (unconfirmed) one and a confirmed one, both in blocks the reorg removes.
    let r = eth.token_transfer(&usdt, ACCOUNT0, &addr, 3_000_000).await;
    let t = s(&r["transactionHash"]);
    wait_for("confirmed", &[&eth], 60, || {
        deposit_with(&live, &cid, &t, "confirmed")
    })
    .await;
    assert_eq!(live.available(&cid, "ethereum", "USDT").await, 3_000_000);
    // A payout the master wallet cannot fund (no tokens, no gas) fails and unlocks its funds.
    let p = live
        .post(
            &live.payout_key,
            "/v1/payouts",
            json!({"customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6,
                   "amount": "1000000", "to_address": external(3)}),
            202,
        )
        .await;
    let pid = s(&p["id"]);
    let failed = wait_for("payout failed", &[], 30, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{pid}"))
            .await;
        (v["status"] == "failed").then_some(v)
    })
    .await;
    assert!(
        s(&failed["failure_reason"]).starts_with("execution reverted"),
        "{failed}"
    );
    assert_eq!(
        live.available(&cid, "ethereum", "USDT").await,
        3_000_000,
        "funds unlocked"
    );
    assert!(!live.events("payout.failed").await.is_empty());

    let r2 = eth.token_transfer(&usdt, ACCOUNT0, &addr, 1_000_000).await;
    let t2 = s(&r2["transactionHash"]);
    wait_for("detected", &[], 30, || {
        deposit_with(&live, &cid, &t2, "detected")
    })
    .await;

    let raw = eth.rpc("eth_getRawTransactionByHash", json!([t])).await;
    assert!(raw.is_string(), "{raw}");

    // Replace the last blocks (the transfers are dropped, not re-mined).
    let head = eth.block_number().await;
    let first = hex_u64(&r["blockNumber"]);
    eth.rpc("anvil_reorg", json!([head - first + 1, []])).await;

    let d = wait_for("orphaned", &[&eth], 60, || {
        deposit_with(&live, &cid, &t, "orphaned")
    })
    .await;
    assert_eq!(d["amount"], "3000000");
    let f = wait_for("failed", &[], 30, || {
        deposit_with(&live, &cid, &t2, "failed")
    })
    .await;
    assert_eq!(f["tx_hash"], t2);
    assert_eq!(
        live.available(&cid, "ethereum", "USDT").await,
        0,
        "credit reversed"
    );
    let ev = live.events("deposit.orphaned").await;
    assert!(
        ev.iter().any(|e| e["data"]["tx_hash"] == t),
        "deposit.orphaned emitted"
    );
    assert!(!live.events("deposit.failed").await.is_empty());
    assert_eq!(eth.token_balance(&usdt, &addr).await, 0);

    // The same transaction mined again on the new chain is a new deposit, credited again.
    eth.rpc("eth_sendRawTransaction", json!([raw])).await;
    let again = wait_for("re-mined deposit confirmed", &[&eth], 60, || {
        deposit_with(&live, &cid, &t, "confirmed")
    })
    .await;
    assert_ne!(again["id"], d["id"]);
    assert_eq!(live.available(&cid, "ethereum", "USDT").await, 3_000_000);
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_flow_misses_and_duplicates_nothing() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    let (tmp, data, master) = init_data_dir();
    deploy_factory(&eth, &master).await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    let mut live = Live::start(
        tmp,
        data,
        master,
        &[ChainSetup::ethereum(&eth, 2, Some(&usdt), 30_000)],
    )
    .await;
    let mut customers = Vec::new();
    for i in 0..3 {
        let (cid, w) = live.customer_wallet(&format!("c{i}"), "ethereum").await;
        customers.push((cid, s(&w["address"])));
    }
    // Two transfers each; the server dies (SIGKILL) between them, and more blocks are mined
    // while it is down.
    for (_, a) in &customers {
        eth.token_transfer(&usdt, ACCOUNT0, a, 1_000_000).await;
    }
    wait_for("some detected", &[], 30, || async {
        (!live.deposits_of(&customers[0].0).await.is_empty()).then_some(())
    })
    .await;
    live.kill();
    for (_, a) in &customers {
        eth.token_transfer(&usdt, ACCOUNT0, a, 2_000_000).await;
        eth.send(ACCOUNT0, Some(a), 1_000_000_000, "0x").await;
    }
    eth.mine(5).await;
    live.run();
    for (cid, _) in &customers {
        let all = wait_for("all confirmed", &[&eth], 60, || async {
            let d = live.deposits_of(cid).await;
            (d.len() >= 3 && d.iter().all(|x| x["status"] == "confirmed")).then_some(d)
        })
        .await;
        assert_eq!(all.len(), 3, "exactly three deposits, none twice: {all:?}");
        assert_eq!(live.available(cid, "ethereum", "USDT").await, 3_000_000);
        assert_eq!(live.available(cid, "ethereum", "ETH").await, 1_000_000_000);
    }
    // A second restart rescans nothing twice.
    live.kill();
    live.run();
    eth.mine(3).await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    for (cid, _) in &customers {
        assert_eq!(live.deposits_of(cid).await.len(), 3);
    }
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_failures_show_on_the_chain_list_and_a_wrong_chain_id_refuses_the_start() {
    let eth = Anvil::start(1);
    let (tmp, data, master) = init_data_dir();
    let live = Live::start(
        tmp,
        data,
        master,
        &[ChainSetup::ethereum(&eth, 2, None, 30_000)],
    )
    .await;
    wait_for("live", &[], 30, || async {
        let v = live.get(&live.wallet_key, "/v1/chains").await;
        let e = v["data"]
            .as_array()?
            .iter()
            .find(|c| c["chain"] == "ethereum")?
            .clone();
        (e["status"] == "live" && e["status_note"] == "").then_some(())
    })
    .await;
    drop(eth); // the node goes away; the appliance keeps serving
    let note = wait_for("status note", &[], 30, || async {
        let v = live.get(&live.wallet_key, "/v1/chains").await;
        let e = v["data"]
            .as_array()?
            .iter()
            .find(|c| c["chain"] == "ethereum")?
            .clone();
        let n = s(&e["status_note"]);
        (!n.is_empty()).then_some(n)
    })
    .await;
    // One plain sentence, no error chain.
    assert_eq!(note, "Node calls are failing; retrying with back-off.");

    // A node whose chain id differs from the registry's refuses the start.
    let other = Anvil::start(5);
    let (tmp2, data2, _) = init_data_dir();
    let cfg = tmp2.path().join("bad.toml");
    std::fs::write(
        &cfg,
        format!(
            "listen = \"127.0.0.1:0\"\n[chains.ethereum]\nrpc_url = \"{}\"\n",
            other.url
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_appliance"))
        .args([
            "--data-dir",
            data2.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "serve",
        ])
        .env("APPLIANCE_PASSPHRASE", PASSPHRASE)
        // A store left open would need a full repair on the next open, which is logged.
        .env("APPLIANCE_STORAGE__QUICK_REPAIR", "false")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chain id 5"), "{err}");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(!printed.contains("listening on"), "{printed}");
    // The refused start had opened the store: it closed it cleanly.
    let v = std::process::Command::new(env!("CARGO_BIN_EXE_appliance"))
        .args(["--data-dir", data2.to_str().unwrap(), "verify"])
        .env("APPLIANCE_STORAGE__QUICK_REPAIR", "false")
        .output()
        .unwrap();
    let verr = String::from_utf8_lossy(&v.stderr);
    assert!(v.status.success(), "{verr}");
    assert!(
        !verr.contains("repairing"),
        "the store needed a repair:\n{verr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_payout_is_replaced_with_higher_fees_and_the_same_nonce() {
    let eth = Anvil::start(1);
    let (tmp, data, master) = init_data_dir();
    // No factory on this chain: the appliance deploys it before its first sweep.

    eth.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await;
    let live = Live::start(
        tmp,
        data,
        master.clone(),
        &[ChainSetup::ethereum(&eth, 1, None, 1_500)],
    )
    .await;
    let (cid, w) = live.customer_wallet("carol", "ethereum").await;
    let r = eth
        .send(ACCOUNT0, Some(&s(&w["address"])), 2 * 10u128.pow(18), "0x")
        .await;
    let t = s(&r["transactionHash"]);
    wait_for("confirmed", &[&eth], 60, || {
        deposit_with(&live, &cid, &t, "confirmed")
    })
    .await;
    wait_for("swept", &[&eth], 60, || async {
        let v = live.get(&live.wallet_key, "/v1/sweeps").await;
        v["data"]
            .as_array()?
            .iter()
            .any(|x| x["status"] == "confirmed")
            .then_some(())
    })
    .await;

    let factory =
        appliance_chains::address::to_checksum(&appliance_chains::address::factory_address(
            &appliance_chains::address::parse_evm_address(&master).unwrap(),
        ));
    assert!(
        eth.code(&factory).await.len() > 2,
        "the appliance deployed the factory"
    );

    // The node stops mining: the payout's transaction sits in the mempool.
    eth.rpc("evm_setAutomine", json!([false])).await;
    let dest = external(9);
    let p = live
        .post(
            &live.payout_key,
            "/v1/payouts",
            json!({"customer_id": cid, "chain": "ethereum", "asset": "ETH", "decimals": 18,
                   "amount": "500000000000000000", "to_address": dest}),
            202,
        )
        .await;
    let pid = s(&p["id"]);
    let first = wait_for("submitted", &[], 30, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{pid}"))
            .await;
        (v["status"] == "submitted").then(|| s(&v["tx_hash"]))
    })
    .await;
    // Read while it is still in the mempool (the replacement evicts it).
    let a = eth.rpc("eth_getTransactionByHash", json!([first])).await;
    assert!(!a.is_null());
    let second = wait_for("replaced", &[], 30, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{pid}"))
            .await;
        let h = s(&v["tx_hash"]);
        (h != first).then_some(h)
    })
    .await;
    let b = eth.rpc("eth_getTransactionByHash", json!([second])).await;
    assert_eq!(b["nonce"], a["nonce"], "a replacement keeps the nonce");
    let fee = |x: &Value| hex_u128(&x["maxFeePerGas"]);
    let tip = |x: &Value| hex_u128(&x["maxPriorityFeePerGas"]);
    assert!(
        fee(&b) * 8 >= fee(&a) * 9 && tip(&b) * 8 >= tip(&a) * 9,
        "fees up by 12.5%"
    );

    eth.rpc("evm_setAutomine", json!([true])).await;
    let done = wait_for("confirmed payout", &[&eth], 60, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{pid}"))
            .await;
        (v["status"] == "confirmed").then_some(v)
    })
    .await;
    assert_ne!(done["tx_hash"], first);
    let gone = eth.rpc("eth_getTransactionReceipt", json!([first])).await;
    assert!(gone.is_null(), "the replaced transaction never mined");
    assert_eq!(eth.balance(&dest).await, 500_000_000_000_000_000);
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payout_that_reverts_on_chain_fails_and_unlocks_its_funds() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    let (tmp, data, master) = init_data_dir();
    deploy_factory(&eth, &master).await;
    eth.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    let live = Live::start(
        tmp,
        data,
        master.clone(),
        &[ChainSetup::ethereum(&eth, 2, Some(&usdt), 30_000)],
    )
    .await;
    let (cid, w) = live.customer_wallet("dave", "ethereum").await;
    let r = eth
        .token_transfer(&usdt, ACCOUNT0, &s(&w["address"]), 10_000_000)
        .await;
    let t = s(&r["transactionHash"]);
    wait_for("confirmed", &[&eth], 60, || {
        deposit_with(&live, &cid, &t, "confirmed")
    })
    .await;
    wait_for("swept", &[&eth], 60, || async {
        (eth.token_balance(&usdt, &master).await == 10_000_000).then_some(())
    })
    .await;

    // The payout passes simulation, then the token is paused in the same block, ahead of it
    // (higher tip): the payout's transaction is mined and reverts.
    eth.rpc("evm_setAutomine", json!([false])).await;
    let dest = external(11);
    let p = live
        .post(
            &live.payout_key,
            "/v1/payouts",
            json!({"customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6,
                   "amount": "2000000", "to_address": dest}),
            202,
        )
        .await;
    let pid = s(&p["id"]);
    wait_for("submitted", &[], 30, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{pid}"))
            .await;
        (v["status"] == "submitted").then_some(())
    })
    .await;
    assert_eq!(
        live.available(&cid, "ethereum", "USDT").await,
        8_000_000,
        "locked"
    );
    let sel = &hex::encode(appliance_chains::address::keccak256(b"setPaused(bool)"))[..8];
    eth.rpc(
        "eth_sendTransaction",
        json!([{"from": ACCOUNT0, "to": usdt, "data": format!("0x{sel}{:064x}", 1),
                "maxPriorityFeePerGas": "0x174876e800", "maxFeePerGas": "0x2e90edd000"}]),
    )
    .await;
    eth.mine(1).await;
    eth.rpc("evm_setAutomine", json!([true])).await;
    let failed = wait_for("payout failed", &[&eth], 60, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{pid}"))
            .await;
        (v["status"] == "failed").then_some(v)
    })
    .await;
    assert_eq!(failed["failure_reason"], "execution reverted");
    let rc = eth
        .rpc("eth_getTransactionReceipt", json!([failed["tx_hash"]]))
        .await;
    assert_eq!(rc["status"], "0x0", "mined and reverted: {rc}");
    assert_eq!(
        live.available(&cid, "ethereum", "USDT").await,
        10_000_000,
        "unlocked"
    );
    assert_eq!(eth.token_balance(&usdt, &dest).await, 0);
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payout_recorded_before_a_crash_is_rebroadcast_once_after_restart() {
    let eth = Anvil::start(1);
    let (tmp, data, master) = init_data_dir();
    deploy_factory(&eth, &master).await;
    eth.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await;
    let mut live = Live::start(
        tmp,
        data,
        master.clone(),
        &[ChainSetup::ethereum(&eth, 2, None, 600_000)],
    )
    .await;
    let (cid, w) = live.customer_wallet("erin", "ethereum").await;
    let r = eth
        .send(ACCOUNT0, Some(&s(&w["address"])), 3 * 10u128.pow(18), "0x")
        .await;
    let t = s(&r["transactionHash"]);
    wait_for("confirmed", &[&eth], 60, || {
        deposit_with(&live, &cid, &t, "confirmed")
    })
    .await;

    eth.rpc("evm_setAutomine", json!([false])).await;
    let dest = external(21);
    let p = live
        .post(
            &live.payout_key,
            "/v1/payouts",
            json!({"customer_id": cid, "chain": "ethereum", "asset": "ETH", "decimals": 18,
                   "amount": "1000000000000000000", "to_address": dest}),
            202,
        )
        .await;
    let pid = s(&p["id"]);
    let hash = wait_for("submitted", &[], 30, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{pid}"))
            .await;
        (v["status"] == "submitted").then(|| s(&v["tx_hash"]))
    })
    .await;
    // Crash, and lose the broadcast: as if the process died between recording the signed
    // transaction and sending it.
    live.kill();
    eth.rpc("anvil_dropTransaction", json!([hash])).await;
    assert!(eth
        .rpc("eth_getTransactionByHash", json!([hash]))
        .await
        .is_null());
    eth.rpc("evm_setAutomine", json!([true])).await;
    live.run();
    let done = wait_for("confirmed payout", &[&eth], 60, || async {
        let v = live
            .get(&live.payout_key, &format!("/v1/payouts/{pid}"))
            .await;
        (v["status"] == "confirmed").then_some(v)
    })
    .await;
    assert_eq!(
        done["tx_hash"], hash,
        "the recorded transaction itself was rebroadcast"
    );
    assert_eq!(
        eth.balance(&dest).await,
        10u128.pow(18),
        "paid exactly once"
    );
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}
