//! Issue point 12: sweeps in test mode — automatic after a confirmed deposit (in transit, then
//! swept), list, get, `POST /v1/sweeps` with its scope and signing rules.

use serde_json::{json, Value};

use crate::helpers::*;

fn assert_sweep_shape(sw: &Value) {
    assert_eq!(sw["object"], "sweep", "{sw}");
    assert_uuid(&sw["id"]);
    assert_uuid(&sw["wallet_id"]);
    assert!(sw["chain"].is_string());
    assert!(sw["status"].is_string());
    atomic(&sw["amount"]);
    assert!(sw["amount_decimal"].is_string(), "{sw}");
    let a = &sw["asset"];
    assert!(
        a["symbol"].is_string() && a["decimals"].is_u64() && a["contract"].is_string(),
        "{sw}"
    );
    assert!(sw.get("skip_reason").is_some(), "{sw}");
    assert_timestamp(&sw["created_at"]);
}

async fn sweeps_of(app: &App, wallet_id: &str) -> Vec<Value> {
    let l = app
        .get(
            &app.wallet_key,
            &format!("/v1/sweeps?wallet_id={wallet_id}"),
        )
        .await
        .expect(200);
    let data = assert_list(&l).clone();
    for sw in &data {
        assert_sweep_shape(sw);
    }
    data
}

#[tokio::test]
async fn a_confirmed_deposit_is_swept_automatically() {
    let app = spawn_app().await;
    let (c, w, _) = app.funded_customer("ethereum", "USDT", 6, "1500000").await;
    let wid = s(&w["id"]);
    // Before the next block a sweep may be scheduled (`open`) but nothing has moved.
    for sw in sweeps_of(&app, &wid).await {
        assert_eq!(sw["status"], "open", "swept before a block was mined: {sw}");
    }
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["deposits"]), 1_500_000, "{t}");
    app.mine(1).await;
    let sw = sweeps_of(&app, &wid).await;
    assert_eq!(sw.len(), 1, "{sw:?}");
    let sw = &sw[0];
    assert_eq!(sw["status"], "submitted");
    assert_eq!(sw["wallet_id"], w["id"]);
    assert_eq!(sw["chain"], "ethereum");
    assert_amount(sw, "amount", "1500000", "1.5");
    assert_eq!(sw["asset"]["symbol"], "USDT");
    assert_eq!(sw["asset"]["decimals"], 6);
    let id = s(&sw["id"]);
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["in_transit"]), 1_500_000, "{t}");

    for _ in 0..14 {
        app.mine(1).await;
    }
    let got = app
        .get(&app.wallet_key, &format!("/v1/sweeps/{id}"))
        .await
        .expect(200);
    assert_sweep_shape(&got);
    assert_eq!(got["status"], "confirmed", "{got}");
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["in_transit"]), 0, "{t}");
    assert_eq!(signed_atomic(&t["treasury"]), 1_500_000, "{t}");
    assert_eq!(
        app.available(&s(&c["id"]), "ethereum", "USDT").await,
        1_500_000
    );
    // No second sweep for the same money.
    app.mine(5).await;
    assert_eq!(sweeps_of(&app, &wid).await.len(), 1);

    let ev = app.events(&format!("resource_id={id}")).await;
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, vec!["sweep.submitted", "sweep.confirmed"]);
    assert_eq!(ev[1]["data"], got, "event data differs from the REST read");
}

#[tokio::test]
async fn a_manual_sweep_moves_what_the_address_holds_once() {
    let app = spawn_app().await;
    let (_c, w, _) = app.funded_customer("ethereum", "USDC", 6, "2000000").await;
    let wid = s(&w["id"]);
    let sw = app
        .post_idem(
            &app.wallet_key,
            "/v1/sweeps",
            json!({ "wallet_id": wid }),
            &idem(),
        )
        .await
        .expect_success();
    assert_sweep_shape(&sw);
    assert_eq!(sw["wallet_id"], w["id"]);
    assert_eq!(sw["asset"]["symbol"], "USDC");
    assert_amount(&sw, "amount", "2000000", "2");
    assert!(
        sw["status"] == "open" || sw["status"] == "submitted",
        "{sw}"
    );
    app.settle().await;
    let all = sweeps_of(&app, &wid).await;
    let moved: u128 = all
        .iter()
        .filter(|x| x["status"] != "skipped")
        .map(|x| atomic(&x["amount"]))
        .sum();
    assert_eq!(
        moved, 2_000_000,
        "the automatic sweep moved the same money again: {all:?}"
    );
    let t = app.treasury("ethereum", "USDC").await;
    assert_eq!(signed_atomic(&t["treasury"]), 2_000_000, "{t}");
    assert_eq!(signed_atomic(&t["deposits"]), 0, "{t}");
    assert_eq!(signed_atomic(&t["surplus"]), 0, "{t}");
    // Nothing left: a skipped sweep with its reason.
    let sk = app
        .post_idem(
            &app.wallet_key,
            "/v1/sweeps",
            json!({ "wallet_id": wid }),
            &idem(),
        )
        .await
        .expect_success();
    assert_eq!(sk["status"], "skipped", "{sk}");
    assert_eq!(sk["skip_reason"], "nothing_to_sweep");
    // Filters.
    let l = app
        .get(&app.wallet_key, "/v1/sweeps?status=skipped")
        .await
        .expect(200);
    assert_eq!(ids(&l), vec![s(&sk["id"])]);
    let l = app
        .get(&app.wallet_key, "/v1/sweeps?status=confirmed")
        .await
        .expect(200);
    assert!(!assert_list(&l).is_empty());
    let r = app.get(&app.wallet_key, "/v1/sweeps?status=lost").await;
    assert_eq!(r.expect_client_error(400)["param"], "status");
    let r = app.get(&app.wallet_key, "/v1/sweeps?wallet_id=nope").await;
    assert_eq!(r.expect_client_error(400)["param"], "wallet_id");
}

#[tokio::test]
async fn a_manual_sweep_can_name_the_asset() {
    let app = spawn_app().await;
    let (c, w, _) = app.funded_customer("ethereum", "USDT", 6, "1000000").await;
    app.test_deposit(
        &s(&c["id"]),
        "ethereum",
        "ETH",
        18,
        "1000000000000000000",
        None,
    )
    .await;
    let sw = app
        .post_idem(
            &app.wallet_key,
            "/v1/sweeps",
            json!({ "wallet_id": w["id"], "asset": "ETH" }),
            &idem(),
        )
        .await
        .expect_success();
    assert_eq!(sw["asset"]["symbol"], "ETH");
    assert_amount(&sw, "amount", "1000000000000000000", "1");
}

#[tokio::test]
async fn creating_a_sweep_needs_scope_kind_and_signing() {
    let app = spawn_app().await;
    let (_c, w, _) = app.funded_customer("ethereum", "USDT", 6, "1000000").await;
    let body = json!({ "wallet_id": w["id"] });
    app.post_idem(&app.payout_key, "/v1/sweeps", body.clone(), &idem())
        .await
        .expect_error(403, "wrong_key_kind");
    // Default wallet scopes do not include sweeps:create.
    let k = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "dflt", "kind": "wallet", "signing_enabled": true }),
        )
        .await;
    app.post_idem(&s(&k["token"]), "/v1/sweeps", body.clone(), &idem())
        .await
        .expect_error(403, "missing_scope");
    app.get(&s(&k["token"]), "/v1/sweeps").await.expect(200);
    let k2 = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "sweeper", "kind": "wallet", "scopes": ["sweeps:create", "sweeps:read"],
                    "signing_enabled": false }),
        )
        .await;
    app.post_idem(&s(&k2["token"]), "/v1/sweeps", body.clone(), &idem())
        .await
        .expect_error(403, "signing_disabled");
    app.project_set(&["--signing-enabled", "false"]);
    app.post_idem(&app.wallet_key, "/v1/sweeps", body.clone(), &idem())
        .await
        .expect_error(403, "signing_disabled");
    app.project_set(&["--signing-enabled", "true"]);
    let r = app
        .post_idem(
            &app.wallet_key,
            "/v1/sweeps",
            json!({ "wallet_id": uuid::Uuid::now_v7() }),
            &idem(),
        )
        .await;
    r.expect_error(404, "not_found");
    let r = app
        .post_idem(&app.wallet_key, "/v1/sweeps", json!({}), &idem())
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "wallet_id");
    // Replay of a sweep creation answers the first sweep.
    let key = idem();
    let a = app
        .post_idem(&app.wallet_key, "/v1/sweeps", body.clone(), &key)
        .await;
    let b = app
        .post_idem(&app.wallet_key, "/v1/sweeps", body.clone(), &key)
        .await;
    assert!(a.status < 300, "{}", a.text);
    assert_eq!(a.text, b.text);
    app.get(
        &app.wallet_key,
        &format!("/v1/sweeps/{}", uuid::Uuid::now_v7()),
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn the_wallet_filter_lists_that_wallets_sweeps_only() {
    // Schema 9 indexes a wallet's sweeps under its customer: the filter reads the wallet
    // first; a wallet id that names no wallet of the project lists nothing.
    let app = spawn_app().await;
    let (_, w1, _) = app.funded_customer("ethereum", "USDT", 6, "1000000").await;
    let (_, w2, _) = app.funded_customer("ethereum", "USDT", 6, "2000000").await;
    app.mine(1).await;
    let (a, b) = (
        sweeps_of(&app, &s(&w1["id"])).await,
        sweeps_of(&app, &s(&w2["id"])).await,
    );
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(a[0]["wallet_id"], w1["id"]);
    assert_eq!(b[0]["wallet_id"], w2["id"]);
    assert_amount(&a[0], "amount", "1000000", "1");
    assert_amount(&b[0], "amount", "2000000", "2");
    let none = sweeps_of(&app, &uuid::Uuid::now_v7().to_string()).await;
    assert!(none.is_empty(), "{none:?}");
    let all = app.get(&app.wallet_key, "/v1/sweeps").await.expect(200);
    assert_eq!(assert_list(&all).len(), 2);
}
