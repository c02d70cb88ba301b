//! Issue point 2: restarting the process (even a crash) loses nothing that was answered 2xx;
//! a flow interrupted by a restart carries on.

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_crash_in_the_middle_of_a_flow_loses_nothing() {
    let mut app = spawn_app().await;
    let c = app.create_customer(Some("survivor")).await;
    let cid = s(&c["id"]);
    let w = app.create_wallet(&cid, "ethereum").await;
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "9000000", None)
        .await;
    let pending = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "1000000", Some(false))
        .await;
    let payout_key = idem();
    let body = json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
        "decimals": 6, "amount": "2000000", "to_address": external_address(0x81) });
    let p = app
        .post_idem(&app.payout_key, "/v1/payouts", body.clone(), &payout_key)
        .await;
    assert_eq!(p.status, 202, "{}", p.text);
    let pid = s(&p.body["id"]);
    app.mine(1).await; // sweep submitted, payout signing or submitted

    let balances_before = app
        .get(&app.wallet_key, &format!("/v1/customers/{cid}/balances"))
        .await
        .expect(200);
    let treasury_before = app.get(&app.wallet_key, "/v1/balances").await.expect(200);
    let events_before = app.events("").await;
    let payout_before = app
        .get(&app.payout_key, &format!("/v1/payouts/{pid}"))
        .await
        .expect(200);
    let sweeps_before = app.get(&app.wallet_key, "/v1/sweeps").await.expect(200);
    let keys_before = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    assert!(!events_before.is_empty());

    app.restart(); // SIGKILL, then start again on the same data dir

    assert_eq!(
        app.get(&app.wallet_key, &format!("/v1/customers/{cid}"))
            .await
            .expect(200),
        c
    );
    assert_eq!(
        app.get(&app.wallet_key, &format!("/v1/wallets/{}", s(&w["id"])))
            .await
            .expect(200),
        w
    );
    assert_eq!(
        app.get(&app.wallet_key, &format!("/v1/deposits/{}", s(&d["id"])))
            .await
            .expect(200),
        d
    );
    assert_eq!(
        app.get(&app.wallet_key, &format!("/v1/customers/{cid}/balances"))
            .await
            .expect(200),
        balances_before
    );
    assert_eq!(
        app.get(&app.wallet_key, "/v1/balances").await.expect(200),
        treasury_before
    );
    // A recovery pass may finish a send that was signing; nothing else may move.
    let payout_after = app
        .get(&app.payout_key, &format!("/v1/payouts/{pid}"))
        .await
        .expect(200);
    if payout_after != payout_before {
        assert_eq!(
            payout_before["status"], "signing",
            "{payout_before} -> {payout_after}"
        );
        assert_eq!(
            payout_after["status"], "submitted",
            "{payout_before} -> {payout_after}"
        );
    }
    assert_eq!(
        app.get(&app.wallet_key, "/v1/sweeps").await.expect(200),
        sweeps_before
    );
    let keys_after = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    assert_eq!(ids(&keys_after), ids(&keys_before));
    let events_after = app.events("").await;
    assert_eq!(
        &events_after[..events_before.len()],
        &events_before[..],
        "events changed across the restart"
    );
    for e in &events_after[events_before.len()..] {
        assert_eq!(
            e["type"], "payout.submitted",
            "unexpected event after restart: {e}"
        );
    }
    // The idempotency record survived: the replay is the first answer, byte for byte.
    let replay = app
        .post_idem(&app.payout_key, "/v1/payouts", body.clone(), &payout_key)
        .await;
    assert_eq!(replay.status, 202);
    assert_eq!(replay.text, p.text);
    // The same reference_id still finds the same customer.
    let again = app
        .post(
            &app.wallet_key,
            "/v1/customers",
            json!({ "reference_id": "survivor" }),
        )
        .await
        .expect(200);
    assert_eq!(again["id"], c["id"]);

    // The flow carries on: the pending deposit confirms, payout and sweep settle.
    app.post(
        &app.wallet_key,
        &format!("/v1/test/deposits/{}/confirm", s(&pending["id"])),
        json!({}),
    )
    .await
    .expect(200);
    app.settle().await;
    let p = app
        .get(&app.payout_key, &format!("/v1/payouts/{pid}"))
        .await
        .expect(200);
    assert_eq!(p["status"], "confirmed", "{p}");
    let b = app.customer_balance(&cid, "ethereum", "USDT").await;
    assert_amount(&b, "available", "8000000", "8");
    assert_amount(&b, "locked", "0", "0");
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["treasury"]), 8_000_000, "{t}");
    assert_eq!(signed_atomic(&t["in_transit"]), 0, "{t}");
    assert_eq!(signed_atomic(&t["deposits"]), 0, "{t}");
    assert_eq!(signed_atomic(&t["surplus"]), 0, "{t}");
    // Sequences continue past the old ones; no event id repeats.
    let after = app.events("").await;
    let max_before = events_before
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .max()
        .unwrap();
    let new: Vec<_> = after
        .iter()
        .filter(|e| !events_before.contains(e))
        .collect();
    assert!(!new.is_empty());
    for e in &new {
        assert!(e["sequence"].as_u64().unwrap() > max_before, "{e}");
    }
    let mut ids_all: Vec<String> = after.iter().map(|e| s(&e["id"])).collect();
    ids_all.sort();
    ids_all.dedup();
    assert_eq!(ids_all.len(), after.len());
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify after restart: {out}{err}");
}

#[tokio::test]
async fn settings_and_keys_survive_a_restart() {
    let mut app = spawn_app().await;
    let k = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "keeps", "kind": "wallet", "scopes": ["customers:read"],
                    "ip_allowlist": ["127.0.0.0/8"] }),
        )
        .await;
    let revoked = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "revoked", "kind": "wallet" }),
        )
        .await;
    app.delete(
        &app.wallet_key,
        &format!("/v1/api_keys/{}", s(&revoked["id"])),
    )
    .await
    .expect(200);
    app.project_set(&["--signing-enabled", "false"]);
    app.project_set(&["--addresses-per-day", "1"]);
    let c = app.create_customer(None).await;
    app.create_wallet(&s(&c["id"]), "ethereum").await;

    app.restart();

    app.get(&s(&k["token"]), "/v1/customers").await.expect(200);
    app.get(&s(&revoked["token"]), "/v1/ping")
        .await
        .expect_error(401, "invalid_api_key");
    let p = app.ping(&app.payout_key).await;
    assert_eq!(p["signing_blocked_by"], json!(["project"]));
    // The day's address count survived too.
    app.post(
        &app.wallet_key,
        "/v1/wallets",
        json!({ "customer_id": c["id"], "chain": "bsc" }),
    )
    .await
    .expect_error(429, "quota_exceeded");
}

#[tokio::test]
async fn a_graceful_restart_keeps_everything_too() {
    let mut app = spawn_app().await;
    let (c, _, _) = app
        .funded_customer("bsc", "USDC", 18, "7000000000000000000")
        .await;
    let cid = s(&c["id"]);
    let before = app.events("").await;
    app.stop_graceful();
    app.start();
    assert_eq!(app.events("").await, before);
    assert_eq!(
        app.available(&cid, "bsc", "USDC").await,
        7_000_000_000_000_000_000
    );
    // Twice in a row.
    app.restart();
    app.restart();
    assert_eq!(app.events("").await, before);
}

/// `kill -9` in the middle of a mixed load (customers, addresses, confirmed
/// deposits, payouts, from many concurrent clients) loses no write that was answered 2xx:
/// after the restart every acknowledged id reads back as answered, and `verify` is clean.
#[tokio::test]
async fn a_kill_during_a_mixed_load_loses_no_acknowledged_write() {
    use std::sync::{Arc, Mutex};

    let mut app = spawn_app().await;
    let mut funded = Vec::new();
    for i in 0..4 {
        let c = app.create_customer(Some(&format!("seed-{i}"))).await;
        let cid = s(&c["id"]);
        app.create_wallet(&cid, "ethereum").await;
        app.test_deposit(&cid, "ethereum", "USDT", 6, "1000000000", None)
            .await;
        funded.push(cid);
    }

    // (path to read back, the answer's body) of every 2xx answer.
    let acked: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
    let client = reqwest::Client::new();
    let base = app.url("");
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let (client, base, acked) = (client.clone(), base.clone(), acked.clone());
        let (wk, pk) = (app.wallet_key.clone(), app.payout_key.clone());
        let funded = funded.clone();
        tasks.push(tokio::spawn(async move {
            let post = |path: &str, key: &str, body: serde_json::Value, idem: bool| {
                let mut rb = client
                    .post(format!("{base}{path}"))
                    .header("Authorization", format!("Bearer {key}"))
                    .json(&body);
                if idem {
                    rb = rb.header("Idempotency-Key", uuid::Uuid::now_v7().to_string());
                }
                rb.send()
            };
            for n in 0.. {
                let cid = &funded[(t + n) % funded.len()];
                let (path, key, body, idem, read) = match n % 4 {
                    0 => (
                        "/v1/customers",
                        &wk,
                        json!({ "reference_id": format!("mix-{t}-{n}") }),
                        false,
                        "/v1/customers/",
                    ),
                    1 | 2 => (
                        "/v1/test/deposits",
                        &wk,
                        json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                            "decimals": 6, "amount": "1000", "confirm": true }),
                        false,
                        "/v1/deposits/",
                    ),
                    _ => (
                        "/v1/payouts",
                        &pk,
                        json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                            "decimals": 6, "amount": "10", "to_address": external_address(0x42) }),
                        true,
                        "/v1/payouts/",
                    ),
                };
                let Ok(r) = post(path, key, body, idem).await else {
                    return; // the server is gone
                };
                if !r.status().is_success() {
                    continue;
                }
                let Ok(v) = r.json::<serde_json::Value>().await else {
                    return; // killed while answering: not acknowledged
                };
                let id = v["id"].as_str().expect("an id").to_string();
                acked.lock().unwrap().push((format!("{read}{id}"), v));
            }
        }));
    }
    // Let the load run, then crash the server in the middle of it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while acked.lock().unwrap().len() < 150 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    app.stop();
    for t in tasks {
        t.await.unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    assert!(
        acked.len() >= 150,
        "only {} writes acknowledged",
        acked.len()
    );

    app.start();
    for (path, answered) in &acked {
        let key = if path.starts_with("/v1/payouts/") {
            app.payout_key.clone()
        } else {
            app.wallet_key.clone()
        };
        let now = app.get(&key, path).await.expect(200);
        if path.starts_with("/v1/payouts/") {
            // A payout may have moved on since (the block clock); it exists with its amount.
            assert_eq!(now["amount"], answered["amount"], "{path}");
        } else {
            assert_eq!(&now, answered, "{path}");
        }
    }
    app.stop_graceful();
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify: {out}{err}");
}

/// Schema 16 keys a transfer (`unique` tag 200) and an issued address (tag 112) by digest.
/// A store whose keys are in schema 15's layout (written back while the server is stopped,
/// the store marked schema 15) opens, and everything that looks them up over HTTP behaves
/// as before: a payout to the customer's own deposit address is refused as a self-payout,
/// a test transfer to it is credited to its customer, and `appliance verify` finds no key
/// left in an old layout.
#[tokio::test]
async fn a_store_with_schema_15_unique_keys_opens_and_finds_them() {
    use appliance_storage::index::{self, IndexTag};
    use appliance_storage::schema::{META, UNIQUE};
    let mut app = spawn_app().await;
    let (c, w, d) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let (cid, address, hash) = (s(&c["id"]), s(&w["address"]), s(&d["tx_hash"]));
    let payout = |to: &str| {
        json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6,
                "amount": "1000", "to_address": to })
    };
    app.create_payout(payout(&address))
        .await
        .expect_error(422, "self_payout_forbidden");
    app.stop_graceful();
    {
        let db = redb::Database::open(app.data_path("appliance.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut u = txn.open_table(UNIQUE).unwrap();
            // Moves the key `new` of row `row` back to `old`, schema 15's layout.
            let mut put_back = |new: Vec<u8>, old: Vec<u8>, row: &serde_json::Value| {
                let id = u.remove(new.as_slice()).unwrap().expect("a key").value();
                assert_eq!(uuid::Uuid::from_u128(id).to_string(), s(&row["id"]));
                u.insert(old.as_slice(), id).unwrap();
            };
            // The test deposit's transfer: a token transfer of log index 0.
            let mut old = vec![IndexTag::UniqueDepositTxHash as u8];
            old.extend_from_slice(&hex::decode(&hash[2..]).unwrap());
            old.extend_from_slice(&0u32.to_be_bytes());
            old.extend_from_slice(b"ethereum");
            put_back(index::transfer_key("ethereum", &hash, 0), old, &d);
            let old = index::unique(
                IndexTag::UniqueAddressChain,
                uuid::Uuid::nil(),
                &[address.to_lowercase().as_bytes(), b"ethereum"],
            );
            put_back(index::address_key("ethereum", &address), old, &w);
            let mut meta = txn.open_table(META).unwrap();
            meta.insert("schema_version", 15u32.to_be_bytes().as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
    }
    app.start();
    app.create_payout(payout(&address))
        .await
        .expect_error(422, "self_payout_forbidden");
    app.post_idem(
        &app.wallet_key,
        "/v1/test/transfers",
        json!({ "chain": "ethereum", "asset": "USDT", "decimals": 6,
                "amount": "2000000", "to_address": address }),
        &idem(),
    )
    .await
    .expect(201);
    app.mine(20).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while app.available(&cid, "ethereum", "USDT").await != 7_000_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the test transfer was not credited to the wallet's customer"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    app.stop_graceful();
    let v = app.cli_ok(&["verify"]);
    assert!(v.contains("\"violations\": []"), "{v}");
    let db = redb::Database::open(app.data_path("appliance.redb")).unwrap();
    let r = redb::ReadableDatabase::begin_read(&db).unwrap();
    let u = r.open_table(UNIQUE).unwrap();
    for tag in [IndexTag::UniqueDepositTxHash, IndexTag::UniqueAddressChain] {
        let t = tag as u8;
        let left = redb::ReadableTable::range::<&[u8]>(&u, [t].as_slice()..[t + 1].as_slice())
            .unwrap()
            .count();
        assert_eq!(left, 0, "{tag:?}");
    }
}
