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
