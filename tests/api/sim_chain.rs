//! Test mode's simulated chains (DECISIONS.md section 15): one chain per
//! test project, durable across restarts, with scripted faults (`/v1/test/reorg`,
//! `/v1/test/drop_tx`).

use serde_json::json;

use crate::helpers::*;

/// Mines one block on the project's `chain`; returns the new height.
async fn height(app: &App, token: &str, chain: &str) -> u64 {
    app.post(
        token,
        "/v1/test/blocks",
        json!({ "count": 1, "chain": chain }),
    )
    .await
    .expect(200)["heights"][chain]
        .as_u64()
        .expect("height")
}

#[tokio::test]
async fn a_test_deposit_is_a_transfer_mined_in_a_new_block() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    app.mine(4).await;
    let before = height(&app, &app.wallet_key, "ethereum").await;
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "1000000", None)
        .await;
    assert_eq!(
        d["status"], "confirmed",
        "confirm: true answers confirmed at once"
    );
    assert_eq!(d["block_number"], json!(before + 1), "{d}");
    let n = app
        .test_deposit(&cid, "ethereum", "ETH", 18, "5", Some(false))
        .await;
    assert_eq!(n["block_number"], json!(before + 2), "{n}");
    assert_eq!(height(&app, &app.wallet_key, "ethereum").await, before + 3);
}

#[tokio::test]
async fn each_test_project_has_its_own_chains() {
    let app = spawn_app().await;
    let other = app.other_project_key("other", "test", "wallet");
    let a0 = height(&app, &app.wallet_key, "ethereum").await;
    let b0 = height(&app, &other, "ethereum").await;
    app.post(
        &app.wallet_key,
        "/v1/test/blocks",
        json!({ "count": 50, "chain": "ethereum" }),
    )
    .await
    .expect(200);
    let b1 = height(&app, &other, "ethereum").await;
    assert_eq!(b1, b0 + 1, "mining one project's chain moved another's");
    // A reorg of one project's chain leaves the other's alone.
    reorg(&app, 10, true).await;
    assert_eq!(height(&app, &other, "ethereum").await, b1 + 1);
    assert!(height(&app, &app.wallet_key, "ethereum").await >= a0 + 51);
}

#[tokio::test]
async fn reorg_and_drop_tx_check_their_input() {
    let app = spawn_app().await;
    let k = &app.wallet_key;
    app.mine(3).await;
    let ok = app
        .post(
            k,
            "/v1/test/reorg",
            json!({ "chain": "ethereum", "depth": 2 }),
        )
        .await
        .expect(200);
    assert_eq!(ok["object"], "test_reorg");
    assert_eq!(ok["drop"], true, "drop defaults to true");
    assert_eq!(ok["depth"], 2);
    let h = ok["height"].as_u64().unwrap();
    let r = app
        .post(
            k,
            "/v1/test/reorg",
            json!({ "chain": "ethereum", "depth": h + 1 }),
        )
        .await;
    r.expect_error_param(400, "invalid_request", "depth");
    for depth in [json!(0), json!(1001), json!("2"), json!(-1)] {
        let r = app
            .post(
                k,
                "/v1/test/reorg",
                json!({ "chain": "ethereum", "depth": depth }),
            )
            .await;
        assert_eq!(r.expect_client_error(400)["param"], "depth", "{depth}");
    }
    let r = app
        .post(
            k,
            "/v1/test/reorg",
            json!({ "chain": "narnia", "depth": 1 }),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "chain");
    let r = app.post(k, "/v1/test/reorg", json!({ "depth": 1 })).await;
    assert_eq!(r.expect_client_error(400)["param"], "chain");
    let r = app
        .post(
            k,
            "/v1/test/reorg",
            json!({ "chain": "ethereum", "depth": 1, "drop": "yes" }),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "drop");
    // drop_tx
    let hash = format!("0x{}", "ab".repeat(32));
    let r = app
        .post(
            k,
            "/v1/test/drop_tx",
            json!({ "chain": "ethereum", "tx_hash": hash }),
        )
        .await;
    r.expect_error_param(404, "not_found", "tx_hash");
    for bad in [
        "0x12",
        "ab".repeat(32).as_str(),
        &format!("0x{}", "zz".repeat(32)),
    ] {
        let r = app
            .post(
                k,
                "/v1/test/drop_tx",
                json!({ "chain": "ethereum", "tx_hash": bad }),
            )
            .await;
        assert_eq!(r.expect_client_error(400)["param"], "tx_hash", "{bad}");
    }
    let r = app
        .post(
            k,
            "/v1/test/drop_tx",
            json!({ "chain": "tron", "tx_hash": hash }),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "chain");
    // Test wallet keys only.
    app.post(
        &app.payout_key,
        "/v1/test/reorg",
        json!({ "chain": "ethereum", "depth": 1 }),
    )
    .await
    .expect_client_error(403);
    let live = app.other_project_key("livep", "live", "wallet");
    app.post(
        &live,
        "/v1/test/reorg",
        json!({ "chain": "ethereum", "depth": 1 }),
    )
    .await
    .expect_error(403, "test_mode_only");
    app.post(
        &live,
        "/v1/test/drop_tx",
        json!({ "chain": "ethereum", "tx_hash": hash }),
    )
    .await
    .expect_error(403, "test_mode_only");
}

#[tokio::test]
async fn a_restart_keeps_the_chain() {
    let mut app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    app.mine(7).await;
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "1000000", None)
        .await;
    let h = height(&app, &app.wallet_key, "ethereum").await;
    assert_eq!(h, d["block_number"].as_u64().unwrap() + 1);
    // A crash (SIGKILL): everything answered 2xx is on the chain.
    app.restart();
    assert_eq!(height(&app, &app.wallet_key, "ethereum").await, h + 1);
    // A clean stop as well.
    app.stop_graceful();
    app.start();
    assert_eq!(height(&app, &app.wallet_key, "ethereum").await, h + 2);
    let d2 = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "1000000", None)
        .await;
    assert_eq!(d2["block_number"], json!(h + 3));
}

/// `POST /v1/test/reorg` on the project's ethereum chain with the wallet key: replaces the
/// last `depth` blocks, their transactions dropped (`drop`) or back in the mempool.
async fn reorg(app: &App, depth: u64, drop: bool) {
    app.post(
        &app.wallet_key,
        "/v1/test/reorg",
        json!({ "chain": "ethereum", "depth": depth, "drop": drop }),
    )
    .await
    .expect(200);
}

async fn deposit(app: &App, id: &str) -> serde_json::Value {
    app.get(&app.wallet_key, &format!("/v1/deposits/{id}"))
        .await
        .expect(200)
}

#[tokio::test]
async fn a_reorg_orphans_a_confirmed_deposit_and_fails_a_detected_one() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    app.mine(2).await;
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "3000000", None)
        .await;
    assert_eq!(d["status"], "confirmed");
    let pending = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "1000000", Some(false))
        .await;
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 3_000_000);
    app.mine(3).await;
    // Blocks back to before the first deposit's block.
    let r = app
        .post(
            &app.wallet_key,
            "/v1/test/reorg",
            json!({ "chain": "ethereum", "depth": 6 }),
        )
        .await
        .expect(200);
    assert_eq!(
        r["height"].as_u64().unwrap(),
        d["block_number"].as_u64().unwrap() + 4
    );
    let got = deposit(&app, &s(&d["id"])).await;
    assert_eq!(got["status"], "orphaned", "{got}");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 0);
    let got = deposit(&app, &s(&pending["id"])).await;
    assert_eq!(got["status"], "failed", "{got}");
    let ev = app
        .events(&format!(
            "type=deposit.orphaned&resource_id={}",
            s(&d["id"])
        ))
        .await;
    assert_eq!(ev.len(), 1);
    // Dropped: mining on brings nothing back.
    app.mine(20).await;
    let l = app.get(&app.wallet_key, "/v1/deposits").await.expect(200);
    assert_eq!(l["data"].as_array().unwrap().len(), 2, "{l}");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 0);
}

#[tokio::test]
async fn a_reorg_without_drop_mines_the_transfer_again_and_credits_it_once() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    app.mine(1).await;
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "2500000", None)
        .await;
    reorg(&app, 1, false).await;
    assert_eq!(deposit(&app, &s(&d["id"])).await["status"], "orphaned");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 0);
    // The transfer is back in the mempool: the next block holds it again, and the watcher
    // records it as a new deposit that confirms at the chain's threshold.
    app.mine(1).await;
    let l = app.get(&app.wallet_key, "/v1/deposits").await.expect(200);
    let again: Vec<_> = l["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["id"] != d["id"])
        .cloned()
        .collect();
    assert_eq!(again.len(), 1, "{l}");
    assert_eq!(again[0]["tx_hash"], d["tx_hash"]);
    assert_eq!(again[0]["status"], "detected");
    assert!(again[0]["block_number"].as_u64().unwrap() > d["block_number"].as_u64().unwrap());
    app.mine(12).await;
    assert_eq!(
        deposit(&app, &s(&again[0]["id"])).await["status"],
        "confirmed"
    );
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 2_500_000);
    app.mine(5).await;
    let l = app.get(&app.wallet_key, "/v1/deposits").await.expect(200);
    assert_eq!(l["data"].as_array().unwrap().len(), 2, "credited once: {l}");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 2_500_000);
}

async fn payout(app: &App, id: &str) -> serde_json::Value {
    app.get(&app.payout_key, &format!("/v1/payouts/{id}"))
        .await
        .expect(200)
}

/// Asserts payout `id` is `confirmed` and `payout.confirmed` was emitted for it once.
async fn confirmed_once(app: &App, id: &str) {
    let p = payout(app, id).await;
    assert_eq!(p["status"], "confirmed", "{p}");
    let ev = app
        .events(&format!("type=payout.confirmed&resource_id={id}"))
        .await;
    assert_eq!(ev.len(), 1, "confirmed exactly once: {ev:?}");
}

async fn new_payout(app: &App, cid: &str, amount: &str, to: &str) -> String {
    let p = app
        .create_payout(
            json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
            "decimals": 6, "amount": amount, "to_address": to }),
        )
        .await
        .expect(202);
    s(&p["id"])
}

fn verify_green(app: &App) {
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify: {out}{err}");
}

#[tokio::test]
async fn payout_and_sweep_lifecycles_run_on_the_simulated_chain() {
    let app = spawn_app().await;
    let (c, w, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let wid = s(&w["id"]);
    let onchain = |l: &serde_json::Value| {
        l["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["asset"]["symbol"] == "USDT" || x["asset"] == "USDT")
            .map(|x| x["onchain"].clone())
    };
    let l = app
        .get(
            &app.wallet_key,
            &format!("/v1/wallets/{wid}/balances?source=chain"),
        )
        .await
        .expect(200);
    assert_eq!(
        onchain(&l),
        Some(json!("5000000")),
        "the transfer is on chain: {l}"
    );
    let id = new_payout(&app, &cid, "2000000", &external_address(0x61)).await;
    app.mine(1).await;
    let p = payout(&app, &id).await;
    assert_eq!(p["status"], "submitted", "{p}");
    let hash = s(&p["tx_hash"]);
    // Mined, then confirmed at the chain's confirmations.
    app.mine(1).await;
    app.mine(12).await;
    let p = payout(&app, &id).await;
    assert_eq!(p["status"], "confirmed", "{p}");
    assert_eq!(p["tx_hash"], json!(hash));
    // The sweep moved the address's whole balance to the treasury on chain.
    let l = app
        .get(
            &app.wallet_key,
            &format!("/v1/wallets/{wid}/balances?source=both"),
        )
        .await
        .expect(200);
    assert_eq!(onchain(&l), Some(json!("0")), "{l}");
    let sw = app.get(&app.wallet_key, "/v1/sweeps").await.expect(200);
    assert_eq!(sw["data"][0]["status"], "confirmed", "{sw}");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 3_000_000);
    let ev = app
        .events(&format!("type=payout.confirmed&resource_id={id}"))
        .await;
    assert_eq!(ev.len(), 1);
    verify_green(&app);
}

#[tokio::test]
async fn a_reorged_out_payout_is_sent_again_and_confirms_once() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let id = new_payout(&app, &cid, "1000000", &external_address(0x62)).await;
    app.mine(1).await; // signed, broadcast, mined
    app.mine(2).await;
    assert_eq!(payout(&app, &id).await["status"], "submitted");
    // The payout's block and the two above it are replaced; the transaction is dropped.
    reorg(&app, 3, true).await;
    assert_eq!(
        payout(&app, &id).await["status"],
        "submitted",
        "never backwards"
    );
    app.mine(1).await;
    app.mine(1).await;
    app.mine(12).await;
    let p = payout(&app, &id).await;
    assert_eq!(p["status"], "confirmed", "{p}");
    let ev = app
        .events(&format!("type=payout.confirmed&resource_id={id}"))
        .await;
    assert_eq!(ev.len(), 1, "confirmed exactly once");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 4_000_000);
    // More blocks change nothing.
    app.mine(20).await;
    assert_eq!(
        app.events(&format!("type=payout.confirmed&resource_id={id}"))
            .await
            .len(),
        1
    );
    verify_green(&app);
}

#[tokio::test]
async fn a_dropped_payout_transaction_is_repaired() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    app.mine(2).await; // the sweep is sent and mined
    let id = new_payout(&app, &cid, "1500000", &external_address(0x63)).await;
    // A reorg of the head block drives the sender once without mining: the payout's
    // transaction waits in the mempool.
    reorg(&app, 1, true).await;
    let p = payout(&app, &id).await;
    assert_eq!(p["status"], "submitted", "{p}");
    let hash = s(&p["tx_hash"]);
    let r = app
        .post(
            &app.wallet_key,
            "/v1/test/drop_tx",
            json!({ "chain": "ethereum", "tx_hash": hash }),
        )
        .await
        .expect(200);
    assert_eq!(r["object"], "test_dropped_tx");
    assert_eq!(r["tx_hash"], json!(hash));
    // Dropping it twice: it is no longer pending.
    app.post(
        &app.wallet_key,
        "/v1/test/drop_tx",
        json!({ "chain": "ethereum", "tx_hash": hash }),
    )
    .await
    .expect_error(404, "not_found");
    // The sender finds the node does not know it and sends it again.
    app.mine(1).await;
    app.mine(1).await;
    app.mine(12).await;
    confirmed_once(&app, &id).await;
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 3_500_000);
    verify_green(&app);
}

/// Concurrent test deposits on one project's chain do not wait for each other's
/// commit, and the chain stays exactly its stored operation log. Each answered deposit has
/// a block of its own; a request refused in its store job (an unknown customer) leaves an
/// empty block under the number it reserved; after `kill -9` the replayed chain is the one
/// the watcher saw (no block hash changed: nothing unwound), balances are unchanged and
/// `verify` is clean.
#[tokio::test]
async fn concurrent_test_deposits_keep_the_chain_exact_across_a_kill() {
    let mut app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let h0 = height(&app, &app.wallet_key, "ethereum").await;
    const CLIENTS: usize = 8;
    const EACH: usize = 12;
    let unknown = uuid::Uuid::now_v7().to_string();
    let mut all = Vec::new();
    for t in 0..CLIENTS {
        let (app, cid, unknown) = (&app, cid.clone(), unknown.clone());
        all.push(async move {
            let mut out = Vec::new();
            for n in 0..EACH {
                // Every fourth request names no customer of the project: 404 in the job.
                let who = if (t + n) % 4 == 0 { &unknown } else { &cid };
                let confirm = n % 3 != 0;
                out.push(
                    app.test_deposit_resp(who, "ethereum", "USDT", 6, "1000", Some(confirm))
                        .await,
                );
            }
            out
        });
    }
    let answers: Vec<_> = futures_util::future::join_all(all)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut deposits = Vec::new();
    for r in &answers {
        match r.status {
            201 => deposits.push(r.body.clone()),
            404 => {
                r.expect_error(404, "not_found");
            }
            other => panic!("unexpected answer {other}: {}", r.text),
        }
    }
    let refused = answers.len() - deposits.len();
    assert_eq!(
        refused,
        CLIENTS * EACH / 4,
        "every fourth request is refused"
    );
    let mut blocks: Vec<u64> = deposits
        .iter()
        .map(|d| d["block_number"].as_u64().expect("block number"))
        .collect();
    blocks.sort_unstable();
    blocks.dedup();
    assert_eq!(blocks.len(), deposits.len(), "one block per deposit");
    assert!(blocks[0] > h0, "{blocks:?} after {h0}");
    // Mining runs the watcher over every block: it records their hashes and confirms the
    // unconfirmed deposits.
    let h1 = height(&app, &app.wallet_key, "ethereum").await;
    assert!(
        h1 >= h0 + 1 + answers.len() as u64,
        "each request took a block, refused ones too: {h1} after {h0} and {} requests",
        answers.len()
    );
    app.mine(12).await;
    // `confirm: false` deposits are confirmed by hand (`manual`): they stay detected.
    let statuses = |l: &serde_json::Value| {
        let mut m = std::collections::BTreeMap::new();
        for d in l["data"].as_array().unwrap() {
            m.insert(s(&d["id"]), s(&d["status"]));
        }
        m
    };
    let list = app
        .get(&app.wallet_key, "/v1/deposits?limit=100")
        .await
        .expect(200);
    let before = statuses(&list);
    assert_eq!(before.len(), deposits.len());
    for d in &deposits {
        assert_eq!(before[&s(&d["id"])], s(&d["status"]), "{list}");
    }
    let balance = app.available(&cid, "ethereum", "USDT").await;
    let credited = deposits
        .iter()
        .filter(|d| d["status"] == "confirmed")
        .count();
    assert!(credited > 0 && credited < deposits.len());
    assert_eq!(balance, 1000 * credited as u128);

    // A crash: the chain is replayed from the store.
    app.restart();
    let h2 = height(&app, &app.wallet_key, "ethereum").await;
    assert!(h2 > h1 + 12, "the chain carries on: {h2} after {h1}");
    app.mine(3).await;
    let list = app
        .get(&app.wallet_key, "/v1/deposits?limit=100")
        .await
        .expect(200);
    assert_eq!(
        statuses(&list),
        before,
        "no deposit unwound by a replay that differs: {list}"
    );
    for d in &deposits {
        let got = deposit(&app, &s(&d["id"])).await;
        assert_eq!(got["block_number"], d["block_number"], "{got}");
        assert_eq!(got["tx_hash"], d["tx_hash"], "{got}");
    }
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, balance);
    let ev = app.events("type=deposit.orphaned").await;
    assert!(ev.is_empty(), "{ev:?}");
    verify_green(&app);
}

/// A test chain that is snapshotted often (at least 8 operations apart) and holds 64 blocks
/// once read, so a test reaches its snapshots and pruned history in a few hundred blocks.
const SMALL_CHAIN: &[(&str, &str)] = &[
    ("APPLIANCE_TEST__SNAPSHOT_MIN_OPS", "8"),
    ("APPLIANCE_TEST__RETAIN_BLOCKS", "64"),
];

/// The blocks the project's ethereum chain holds, as a refused 1,000-deep test reorg names
/// them (400, `param` `depth`).
async fn blocks_held(app: &App) -> u64 {
    let body = app
        .post(
            &app.wallet_key,
            "/v1/test/reorg",
            json!({ "chain": "ethereum", "depth": 1000 }),
        )
        .await
        .expect(400);
    assert_eq!(body["param"], "depth", "{body}");
    s(&body["message"])
        .rsplit_once('(')
        .and_then(|(_, n)| n.split_once(')'))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("the blocks held: {body}"))
}

/// The stopped server's store, opened with redb directly (to read or damage rows as a
/// test needs).
fn open_store(app: &App) -> redb::Database {
    redb::Database::open(app.data_path("appliance.redb")).expect("open the store")
}

/// The rows of `chain` in `sim_ops` in the stopped server's store (one test project):
/// (sequence, is a snapshot).
fn stored_chain_rows(app: &App, chain: &str) -> Vec<(u64, bool)> {
    let def: redb::TableDefinition<(u128, &str, u64), &[u8]> =
        redb::TableDefinition::new("sim_ops");
    let db = open_store(app);
    let r = redb::ReadableDatabase::begin_read(&db).unwrap();
    let t = r.open_table(def).unwrap();
    let snaps: redb::TableDefinition<(u128, &str, u64, u32), &[u8]> =
        redb::TableDefinition::new("sim_snapshot_chunks");
    let snaps = r.open_table(snaps).unwrap();
    let mut out = Vec::new();
    for e in redb::ReadableTable::iter(&t).unwrap() {
        let (k, v) = e.unwrap();
        // A snapshot: the log holds a reference, and `sim_snapshot_chunks` under the same
        // key and chunk 0 the start of a codec value (version 3) whose map key is
        // `snapshot`.
        let snapshot = v.value() == appliance_storage::schema::SIM_SNAPSHOT_REF && {
            let (p, c, seq) = k.value();
            let row = redb::ReadableTable::get(&snaps, (p, c, seq, 0u32)).unwrap();
            row.is_some_and(|s| {
                let s = s.value();
                s.first() == Some(&3) && s.windows(8).take(16).any(|w| w == b"snapshot")
            })
        };
        if k.value().1 == chain {
            out.push((k.value().2, snapshot));
        }
    }
    out
}

/// A test-mode server whose chain has enough operations writes a snapshot of it
/// and deletes the operations it covers; killed with SIGKILL, it starts from the snapshot
/// and the operations after it, with the same height, balances and deposits, and its
/// chain carries on (a later test deposit, a payout that is sent, mined and confirmed, the
/// sweep it needs), also after more than the held history was mined (`test.retain_blocks`
/// 64 here, so a few hundred blocks instead of 10,000).
#[tokio::test]
async fn a_killed_server_restarts_from_its_chain_snapshot() {
    let mut app = spawn_app_with("127.0.0.1:0", SMALL_CHAIN).await;
    let (a, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let aid = s(&a["id"]);
    let b = app.create_customer(None).await;
    let bid = s(&b["id"]);
    app.create_wallet(&bid, "ethereum").await;
    let mut deposits = Vec::new();
    for n in 0..20 {
        let d = app
            .test_deposit(&bid, "ethereum", "USDT", 6, "1000", Some(n % 5 != 0))
            .await;
        deposits.push(d);
    }
    // Mining writes its block with a snapshot (20 operations since genesis > 8).
    app.mine(13).await;
    for _ in 0..3 {
        deposits.push(
            app.test_deposit(&bid, "ethereum", "USDT", 6, "1000", None)
                .await,
        );
    }
    let h = height(&app, &app.wallet_key, "ethereum").await;
    let list = |l: &serde_json::Value| {
        let mut m = std::collections::BTreeMap::new();
        for d in l["data"].as_array().unwrap() {
            m.insert(s(&d["id"]), (s(&d["status"]), d["block_number"].clone()));
        }
        m
    };
    let before = list(
        &app.get(&app.wallet_key, "/v1/deposits?limit=100")
            .await
            .expect(200),
    );
    assert_eq!(before.len(), 24);
    let (a_bal, b_bal) = (
        app.available(&aid, "ethereum", "USDT").await,
        app.available(&bid, "ethereum", "USDT").await,
    );
    assert_eq!(a_bal, 5_000_000);
    assert_eq!(
        b_bal,
        1000 * 19,
        "four of 20 wait for a manual confirmation"
    );

    app.stop();
    let rows = stored_chain_rows(&app, "ethereum");
    let first = rows.first().copied().expect("the chain is stored");
    assert!(
        first.1 && first.0 >= 8,
        "the log begins at a snapshot: {rows:?}"
    );
    assert!(rows[1..].iter().all(|(_, snap)| !snap), "{rows:?}");
    assert!(
        rows.len() < 10,
        "the operations the snapshot covers are deleted: {rows:?}"
    );
    let seqs: Vec<u64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(
        seqs,
        (first.0..first.0 + rows.len() as u64).collect::<Vec<_>>()
    );

    app.start();
    assert_eq!(height(&app, &app.wallet_key, "ethereum").await, h + 1);
    let after = list(
        &app.get(&app.wallet_key, "/v1/deposits?limit=100")
            .await
            .expect(200),
    );
    assert_eq!(
        after, before,
        "no deposit changed or unwound by the restart"
    );
    assert_eq!(app.available(&aid, "ethereum", "USDT").await, a_bal);
    assert_eq!(app.available(&bid, "ethereum", "USDT").await, b_bal);
    let d = app
        .test_deposit(&bid, "ethereum", "USDT", 6, "1000", None)
        .await;
    assert_eq!(d["block_number"], json!(h + 2));
    assert_eq!(d["status"], "confirmed");

    // Past the history a chain holds: the deposits' blocks are pruned from memory (the
    // chain holds the 256 blocks its watcher remembers below the head, no more).
    for _ in 0..7 {
        app.mine(60).await;
    }
    let held = blocks_held(&app).await;
    assert!(
        (256..7 * 60).contains(&held),
        "the watcher's 256 blocks and what the last drive mined, not the history: {held}"
    );
    let id = new_payout(&app, &aid, "2000000", &external_address(0x63)).await;
    app.settle().await;
    let p = payout(&app, &id).await;
    assert_eq!(p["status"], "confirmed", "{p}");
    assert_eq!(app.available(&aid, "ethereum", "USDT").await, 3_000_000);

    // And again after a kill: the snapshot and the operations after it.
    app.restart();
    let p = payout(&app, &id).await;
    assert_eq!(p["status"], "confirmed", "{p}");
    let d2 = app
        .test_deposit(&bid, "ethereum", "USDT", 6, "1000", None)
        .await;
    assert_eq!(d2["status"], "confirmed");
    assert_eq!(app.available(&bid, "ethereum", "USDT").await, b_bal + 2_000);
    let ev = app.events("type=deposit.orphaned").await;
    assert!(ev.is_empty(), "{ev:?}");
    verify_green(&app);
}

/// A chain worker that lags more than the blocks a chain retains (`test.retain_blocks`,
/// here 64): test deposits mine a block each without the worker, 100 of them between two
/// drives. The chain holds what the worker has not read (`SimChain::hold_from`), so the
/// watcher still scans those blocks (a reorg among them orphans its deposit) and the
/// sender still finds the receipt of its payout mined before them (it confirms, once).
/// Before the hold, the watcher failed on every pass ("history before block N is pruned")
/// and the payout stayed `submitted`: its receipt was gone and its nonce used. What the
/// worker has read is still pruned: a reorg deeper than the held blocks is refused.
#[tokio::test]
async fn a_worker_that_lags_more_than_the_retained_blocks_catches_up() {
    let app = spawn_app_with("127.0.0.1:0", &[("APPLIANCE_TEST__RETAIN_BLOCKS", "64")]).await;
    let (a, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let aid = s(&a["id"]);
    let b = app.create_customer(None).await;
    let bid = s(&b["id"]);
    app.create_wallet(&bid, "ethereum").await;
    app.mine(400).await;
    let id = new_payout(&app, &aid, "1000000", &external_address(0x64)).await;
    app.mine(1).await; // signed, broadcast, mined
    let p = payout(&app, &id).await;
    assert_eq!(p["status"], "submitted", "{p}");
    let mut last = json!(null);
    for _ in 0..100 {
        last = app
            .test_deposit(&bid, "ethereum", "USDT", 6, "1000", None)
            .await;
    }
    // The last deposit's transfer goes back to the mempool: the watcher must see its block
    // replaced, so it must have read the 99 blocks below.
    reorg(&app, 1, false).await;
    assert_eq!(deposit(&app, &s(&last["id"])).await["status"], "orphaned");
    app.settle().await;
    confirmed_once(&app, &id).await;
    assert_eq!(app.available(&aid, "ethereum", "USDT").await, 4_000_000);
    assert_eq!(
        app.available(&bid, "ethereum", "USDT").await,
        100 * 1000,
        "99 deposits and the orphaned one mined again"
    );
    // The worker read everything: the chain holds its watcher's fork-point memory (256
    // blocks) below the head, not the whole history.
    assert_eq!(blocks_held(&app).await, 257);
    verify_green(&app);
}

/// A watcher whose next block the chain no longer holds (a worker that lagged more than
/// the hold's limit, or a store written before the hold): at its next catch-up it is moved
/// up to the oldest block held, with an error logged, and watches from there on. Made here
/// by writing the watcher's stored position back to block 10 while the chain's snapshot
/// has pruned below about block 140.
#[tokio::test]
async fn a_watcher_behind_the_pruned_history_skips_to_the_blocks_held() {
    let mut app = spawn_app_with("127.0.0.1:0", SMALL_CHAIN).await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    for _ in 0..10 {
        app.test_deposit(&cid, "ethereum", "USDT", 6, "1000", None)
            .await;
    }
    app.mine(400).await;
    // Enough operations after the pruning for a snapshot of the pruned chain (the cadence
    // waits for max(8, the last snapshot's bytes / 75) operations, about 140 here).
    for _ in 0..150 {
        app.test_deposit(&cid, "ethereum", "USDT", 6, "1000", None)
            .await;
    }
    app.mine(1).await;
    app.stop();
    let rows = stored_chain_rows(&app, "ethereum");
    assert!(
        rows[0].1 && rows[0].0 > 10,
        "the log begins at a later snapshot: {rows:?}"
    );
    {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("evm_watch");
        let db = open_store(&app);
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(def).unwrap();
            let (key, mut ws) = {
                let mut it = redb::ReadableTable::iter(&t).unwrap();
                let (k, v) = it
                    .find(|e| e.as_ref().unwrap().0.value().starts_with("ethereum/"))
                    .expect("the ethereum watcher's position")
                    .unwrap();
                let ws: serde_json::Value = serde_json::from_slice(v.value()).unwrap();
                (k.value().to_string(), ws)
            };
            let height = ws["cursor"]["height"].as_u64().unwrap();
            assert!(height >= 400, "the watcher read the chain: {height}");
            ws["cursor"]["height"] = json!(10);
            let recent = ws["cursor"]["recent"].as_array().unwrap()[0][1].clone();
            ws["cursor"]["recent"] = json!([[10, recent]]);
            t.insert(key.as_str(), serde_json::to_vec(&ws).unwrap().as_slice())
                .unwrap();
        }
        w.commit().unwrap();
    }
    app.start();
    app.mine(1).await;
    assert!(
        app.run_output
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("its watcher skips to the oldest block held")),
        "the skip is logged"
    );
    // The watcher works again: a reorg of a new deposit's block orphans it.
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "2000", None)
        .await;
    reorg(&app, 1, true).await;
    assert_eq!(deposit(&app, &s(&d["id"])).await["status"], "orphaned");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 160 * 1000);
    app.mine(3).await;
    let lines = app.run_output.lock().unwrap().clone();
    let skip = lines
        .iter()
        .position(|l| l.contains("its watcher skips to the oldest block held"))
        .unwrap();
    assert!(
        lines[..skip]
            .iter()
            .any(|l| l.contains("is pruned (asked from 11)")),
        "the watcher had failed on the pruned block"
    );
    assert!(
        !lines[skip + 1..]
            .iter()
            .any(|l| l.contains("is pruned (asked from") || l.contains("skips to")),
        "after the skip the watcher no longer asks for pruned blocks, and skips once"
    );
    verify_green(&app);
}

/// The stored row of a payout's transaction cannot be read (its bytes were damaged) and
/// the node lost the transaction (a restart empties the simulated mempool): the nonce gap
/// is repaired by a filler that is stored, over the damaged row, before it is broadcast;
/// the damaged bytes are logged for an operator, and the payout is never paid. A filler
/// broadcast without being stored (its write finding the row's bytes and skipping) is what
/// this guards against.
#[tokio::test]
async fn a_gap_at_an_unreadable_row_is_filled_by_a_stored_filler() {
    let mut app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    app.mine(2).await; // the sweep is sent and mined
    let id = new_payout(&app, &cid, "1500000", &external_address(0x65)).await;
    reorg(&app, 1, true).await; // the sender runs once, nothing is mined
    assert_eq!(payout(&app, &id).await["status"], "submitted");
    app.stop();
    let def: redb::TableDefinition<(&str, u64), &[u8]> = redb::TableDefinition::new("evm_out_txs");
    let stored = |app: &App| -> Vec<(String, u64, Vec<u8>)> {
        let db = open_store(app);
        let r = redb::ReadableDatabase::begin_read(&db).unwrap();
        let t = r.open_table(def).unwrap();
        redb::ReadableTable::iter(&t)
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                let (key, n) = k.value();
                (key.to_string(), n, v.value().to_vec())
            })
            .collect()
    };
    let (key, nonce, _) = stored(&app)
        .into_iter()
        .find(|(k, _, v)| {
            k.starts_with("ethereum/") && {
                let row = appliance_storage::codec::stored_doc(v).expect("a stored row");
                let kind = b"\"kind\":\"payout\"";
                row.windows(kind.len()).any(|w| w == kind)
            }
        })
        .expect("the payout's row");
    {
        let db = open_store(&app);
        let w = db.begin_write().unwrap();
        w.open_table(def)
            .unwrap()
            .insert((key.as_str(), nonce), b"{\"damaged".as_slice())
            .unwrap();
        w.commit().unwrap();
    }
    app.start();
    // The sweep before it is rebroadcast, mined and settled; then the gap below the next
    // nonce is seen, filled, and the filler mined and confirmed.
    for n in [1, 12, 1, 12] {
        app.mine(n).await;
    }
    assert!(
        app.run_output.lock().unwrap().iter().any(|l| l
            .contains("nonce gap at a stored transaction that cannot be read")
            && l.contains("damaged")),
        "the damaged row is logged"
    );
    let p = payout(&app, &id).await;
    assert_eq!(p["status"], "submitted", "never paid: {p}");
    assert!(app
        .events(&format!("type=payout.confirmed&resource_id={id}"))
        .await
        .is_empty());
    app.stop();
    let (_, _, row) = stored(&app)
        .into_iter()
        .find(|(k, n, _)| *k == key && *n == nonce)
        .unwrap();
    let row = appliance_storage::codec::stored_doc(&row).expect("a stored row");
    let row: serde_json::Value =
        serde_json::from_slice(&row).expect("the filler's row replaced the damaged one");
    assert_eq!(row["kind"], "filler", "{row}");
    assert!(
        row["mined"]["block"].as_u64().is_some(),
        "the filler is mined: {row}"
    );
    verify_green(&app);
}
