//! Issue point 9: deposits in test mode — `/v1/test/*`, the four statuses, ledger credit on
//! confirm and reversal on orphan, list and get with every filter, switches.

use serde_json::{json, Value};

use crate::helpers::*;

fn assert_deposit_shape(d: &Value) {
    assert_eq!(d["object"], "deposit", "{d}");
    assert_uuid(&d["id"]);
    assert_uuid(&d["customer_id"]);
    assert_uuid(&d["wallet_id"]);
    assert!(d["chain"].is_string());
    let a = &d["asset"];
    assert!(a.is_object(), "asset is an embedded Asset: {d}");
    assert!(
        a["chain"].is_string() && a["symbol"].is_string() && a["contract"].is_string(),
        "{d}"
    );
    assert!(a["decimals"].is_u64(), "{d}");
    atomic(&d["amount"]);
    assert!(d["amount_decimal"].is_string(), "{d}");
    assert!(d["tx_hash"].is_string(), "{d}");
    assert!(d["log_index"].is_u64(), "{d}");
    assert!(d["from_address"].is_string(), "{d}");
    assert!(d["confirmations"].is_u64(), "{d}");
    assert!(d["required_confirmations"].is_u64(), "{d}");
    assert!(d["status"].is_string());
    assert_timestamp(&d["block_time"]);
    assert!(d["explorer_url"].is_string(), "{d}");
    assert!(d.get("ledger_tx_id").is_some(), "{d}");
    assert_timestamp(&d["created_at"]);
}

#[tokio::test]
async fn a_confirmed_test_deposit_credits_the_customer() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    let w = app.create_wallet(&cid, "ethereum").await;
    let d = app
        .post(
            &app.wallet_key,
            "/v1/test/deposits",
            json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                    "decimals": 6, "amount": "1500000" }),
        )
        .await
        .expect_success();
    assert_deposit_shape(&d);
    assert_eq!(d["status"], "confirmed", "confirm defaults to true: {d}");
    assert_eq!(d["customer_id"], c["id"]);
    assert_eq!(d["wallet_id"], w["id"]);
    assert_eq!(d["chain"], "ethereum");
    assert_eq!(d["asset"]["symbol"], "USDT");
    assert_eq!(d["asset"]["chain"], "ethereum");
    assert_eq!(d["asset"]["decimals"], 6);
    assert_eq!(
        d["asset"]["contract"],
        "0xdAC17F958D2ee523a2206206994597C13D831ec7"
    );
    assert_amount(&d, "amount", "1500000", "1.5");
    assert_eq!(d["required_confirmations"], 12);
    assert_eq!(d["confirmations"], 12);
    assert_uuid(&d["ledger_tx_id"]);
    let tx = s(&d["tx_hash"]);
    assert!(
        s(&d["explorer_url"]).contains(&tx),
        "explorer_url links the tx: {d}"
    );

    let b = app.customer_balance(&cid, "ethereum", "USDT").await;
    assert_amount(&b, "available", "1500000", "1.5");
    assert_amount(&b, "locked", "0", "0");
    assert_amount(&b, "total", "1500000", "1.5");

    let types = app.event_types_for(&s(&d["id"])).await;
    assert_eq!(types, vec!["deposit.detected", "deposit.confirmed"]);
    let got = app
        .get(&app.wallet_key, &format!("/v1/deposits/{}", s(&d["id"])))
        .await
        .expect(200);
    assert_eq!(got, d, "GET differs from the create answer");
}

#[tokio::test]
async fn a_test_deposits_answer_is_the_same_bytes_rendered_after_the_commit_or_stored() {
    // Without an Idempotency-Key the answer is rendered after the commit, on the request's
    // task; with one it is rendered in the store job and stored as the record. Both are the
    // bytes `GET /v1/deposits/{id}` answers, and a replay answers the stored bytes.
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let body = json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                       "decimals": 6, "amount": "2500000" });
    let plain = app
        .post(&app.wallet_key, "/v1/test/deposits", body.clone())
        .await;
    assert_eq!(plain.status, 201, "{}", plain.text);
    assert_deposit_shape(&plain.body);
    let got = app
        .get(
            &app.wallet_key,
            &format!("/v1/deposits/{}", s(&plain.body["id"])),
        )
        .await;
    assert_eq!(plain.text, got.text, "the answer is what GET answers");

    let key = idem();
    let first = app
        .post_idem(&app.wallet_key, "/v1/test/deposits", body.clone(), &key)
        .await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert_ne!(first.body["id"], plain.body["id"]);
    let replay = app
        .post_idem(&app.wallet_key, "/v1/test/deposits", body, &key)
        .await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.text, first.text, "a replay answers the stored bytes");
    let got = app
        .get(
            &app.wallet_key,
            &format!("/v1/deposits/{}", s(&first.body["id"])),
        )
        .await;
    assert_eq!(first.text, got.text);
    // One deposit per distinct request: the replay wrote nothing.
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 5_000_000);
}

#[tokio::test]
async fn bsc_stablecoins_have_18_decimals() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "bsc").await;
    let r = app
        .test_deposit_resp(&cid, "bsc", "USDT", 6, "1500000", None)
        .await;
    let e = r.expect_error_param(400, "decimals_mismatch", "decimals");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("18") && msg.contains('6'),
        "both values reported: {msg}"
    );
    let d = app
        .test_deposit(&cid, "bsc", "USDT", 18, "1500000000000000000", None)
        .await;
    assert_amount(&d, "amount", "1500000000000000000", "1.5");
    assert_eq!(d["asset"]["decimals"], 18);
    assert_eq!(d["required_confirmations"], 15);
    let b = app.customer_balance(&cid, "bsc", "USDT").await;
    assert_amount(&b, "available", "1500000000000000000", "1.5");
    // A tiny amount keeps full precision.
    let d = app.test_deposit(&cid, "bsc", "USDT", 18, "1", None).await;
    assert_amount(&d, "amount", "1", "0.000000000000000001");
}

#[tokio::test]
async fn native_coins_deposit_too() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let d = app
        .test_deposit(&cid, "ethereum", "ETH", 18, "250000000000000000", None)
        .await;
    assert_amount(&d, "amount", "250000000000000000", "0.25");
    assert_eq!(d["asset"]["symbol"], "ETH");
    let b = app.customer_balance(&cid, "ethereum", "ETH").await;
    assert_amount(&b, "available", "250000000000000000", "0.25");
}

#[tokio::test]
async fn unconfirmed_deposits_wait_for_confirm() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "2000000", Some(false))
        .await;
    assert_deposit_shape(&d);
    assert_eq!(d["status"], "detected");
    assert_eq!(d["confirmations"], 0);
    assert!(d["ledger_tx_id"].is_null(), "{d}");
    assert_eq!(
        app.available(&cid, "ethereum", "USDT").await,
        0,
        "credited before confirmation"
    );
    // The block clock does not confirm a manual deposit.
    app.mine(20).await;
    let id = s(&d["id"]);
    let got = app
        .get(&app.wallet_key, &format!("/v1/deposits/{id}"))
        .await
        .expect(200);
    assert_eq!(got["status"], "detected");
    let conf = app
        .post(
            &app.wallet_key,
            &format!("/v1/test/deposits/{id}/confirm"),
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(conf["status"], "confirmed");
    assert_eq!(conf["confirmations"], conf["required_confirmations"]);
    assert_uuid(&conf["ledger_tx_id"]);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 2_000_000);
    // Confirming twice is an illegal transition and credits nothing more.
    let r = app
        .post(
            &app.wallet_key,
            &format!("/v1/test/deposits/{id}/confirm"),
            json!({}),
        )
        .await;
    r.expect_client_error(409);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 2_000_000);
    let ev = app.events(&format!("resource_id={id}")).await;
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, vec!["deposit.detected", "deposit.confirmed"]);
    assert_eq!(ev[0]["data"]["status"], "detected");
    assert_eq!(ev[1]["data"], conf, "event data differs from the REST read");
}

#[tokio::test]
async fn a_failed_deposit_is_never_credited() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "2000000", Some(false))
        .await;
    let id = s(&d["id"]);
    let f = app
        .post(
            &app.wallet_key,
            &format!("/v1/test/deposits/{id}/fail"),
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(f["status"], "failed");
    assert!(f["ledger_tx_id"].is_null());
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 0);
    let ev = app
        .events(&format!("type=deposit.failed&resource_id={id}"))
        .await;
    assert_eq!(ev.len(), 1);
    assert!(
        ev[0]["data"]["failure_reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "deposit.failed carries data.failure_reason: {}",
        ev[0]
    );
    // failed is terminal.
    app.post(
        &app.wallet_key,
        &format!("/v1/test/deposits/{id}/confirm"),
        json!({}),
    )
    .await
    .expect_client_error(409);
    app.post(
        &app.wallet_key,
        &format!("/v1/test/deposits/{id}/orphan"),
        json!({}),
    )
    .await
    .expect_client_error(409);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 0);
    // A confirmed deposit cannot fail.
    let d2 = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "5", None)
        .await;
    app.post(
        &app.wallet_key,
        &format!("/v1/test/deposits/{}/fail", s(&d2["id"])),
        json!({}),
    )
    .await
    .expect_client_error(409);
}

#[tokio::test]
async fn orphaning_a_confirmed_deposit_reverses_the_credit() {
    let app = spawn_app().await;
    let (c, _w, d) = app.funded_customer("ethereum", "USDT", 6, "4000000").await;
    let cid = s(&c["id"]);
    let id = s(&d["id"]);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 4_000_000);
    let o = app
        .post(
            &app.wallet_key,
            &format!("/v1/test/deposits/{id}/orphan"),
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(o["status"], "orphaned");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 0);
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["liability"]), 0, "{t}");
    assert_eq!(signed_atomic(&t["surplus"]), 0, "{t}");
    let ev = app.events(&format!("resource_id={id}")).await;
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        vec!["deposit.detected", "deposit.confirmed", "deposit.orphaned"]
    );
    assert_eq!(ev[2]["data"], o);
    // A detected deposit cannot be orphaned; an orphaned one cannot be orphaned again.
    app.post(
        &app.wallet_key,
        &format!("/v1/test/deposits/{id}/orphan"),
        json!({}),
    )
    .await
    .expect_client_error(409);
    let d2 = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "7", Some(false))
        .await;
    app.post(
        &app.wallet_key,
        &format!("/v1/test/deposits/{}/orphan", s(&d2["id"])),
        json!({}),
    )
    .await
    .expect_client_error(409);
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify after orphan: {out}{err}");
}

#[tokio::test]
async fn orphaning_spent_funds_leaves_a_negative_surplus() {
    let app = spawn_app().await;
    let (c, _w, d) = app.funded_customer("ethereum", "USDT", 6, "4000000").await;
    let cid = s(&c["id"]);
    app.create_payout(
        json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
        "decimals": 6, "amount": "3000000", "to_address": external_address(0x41) }),
    )
    .await
    .expect(202);
    app.settle().await;
    let p = app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    assert_eq!(p["data"][0]["status"], "confirmed", "{p}");
    app.post(
        &app.wallet_key,
        &format!("/v1/test/deposits/{}/orphan", s(&d["id"])),
        json!({}),
    )
    .await
    .expect(200);
    let b = app.customer_balance(&cid, "ethereum", "USDT").await;
    assert_eq!(
        atomic(&b["available"]),
        0,
        "available never goes negative: {b}"
    );
    let t = app.treasury("ethereum", "USDT").await;
    assert!(
        signed_atomic(&t["surplus"]) < 0,
        "a spent orphan shows as negative surplus: {t}"
    );
    assert_eq!(signed_atomic(&t["surplus"]), -3_000_000, "{t}");
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify: {out}{err}");
}

#[tokio::test]
async fn list_and_get_with_every_filter() {
    let app = spawn_app().await;
    let a = app.create_customer(None).await;
    let b = app.create_customer(None).await;
    let (aid, bid) = (s(&a["id"]), s(&b["id"]));
    let a_eth = app.create_wallet(&aid, "ethereum").await;
    app.create_wallet(&aid, "bsc").await;
    app.create_wallet(&bid, "ethereum").await;
    let d1 = app
        .test_deposit(&aid, "ethereum", "USDT", 6, "100", None)
        .await;
    let d2 = app
        .test_deposit(&aid, "bsc", "USDT", 18, "200", Some(false))
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let since = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let d3 = app
        .test_deposit(&bid, "ethereum", "USDC", 6, "300", None)
        .await;
    let d4 = app
        .test_deposit(&bid, "ethereum", "USDT", 6, "400", Some(false))
        .await;
    app.post(
        &app.wallet_key,
        &format!("/v1/test/deposits/{}/fail", s(&d4["id"])),
        json!({}),
    )
    .await
    .expect(200);
    let d5 = app
        .test_deposit(&bid, "ethereum", "USDT", 6, "500", None)
        .await;
    app.post(
        &app.wallet_key,
        &format!("/v1/test/deposits/{}/orphan", s(&d5["id"])),
        json!({}),
    )
    .await
    .expect(200);
    let id = |v: &Value| s(&v["id"]);

    let q = |query: String| {
        let app = &app;
        async move {
            let l = app
                .get(&app.wallet_key, &format!("/v1/deposits{query}"))
                .await
                .expect(200);
            for d in assert_list(&l) {
                assert_deposit_shape(d);
            }
            ids(&l)
        }
    };
    assert_eq!(
        q(String::new()).await,
        vec![id(&d5), id(&d4), id(&d3), id(&d2), id(&d1)]
    );
    assert_eq!(
        q(format!("?customer_id={aid}")).await,
        vec![id(&d2), id(&d1)]
    );
    assert_eq!(
        q(format!("?wallet_id={}", s(&a_eth["id"]))).await,
        vec![id(&d1)]
    );
    assert_eq!(q("?chain=bsc".into()).await, vec![id(&d2)]);
    assert_eq!(q("?status=detected".into()).await, vec![id(&d2)]);
    assert_eq!(q("?status=confirmed".into()).await, vec![id(&d3), id(&d1)]);
    assert_eq!(q("?status=failed".into()).await, vec![id(&d4)]);
    assert_eq!(q("?status=orphaned".into()).await, vec![id(&d5)]);
    assert_eq!(
        q(format!("?since={}", since.replace('+', "%2B"))).await,
        vec![id(&d5), id(&d4), id(&d3)]
    );
    assert_eq!(
        q(format!(
            "?customer_id={bid}&chain=ethereum&status=confirmed"
        ))
        .await,
        vec![id(&d3)]
    );
    assert_eq!(q("?limit=2".into()).await.len(), 2);
    for (bad, param) in [
        ("?status=pending", "status"),
        ("?customer_id=nope", "customer_id"),
        ("?wallet_id=nope", "wallet_id"),
        ("?since=yesterday", "since"),
    ] {
        let r = app
            .get(&app.wallet_key, &format!("/v1/deposits{bad}"))
            .await;
        assert_eq!(r.expect_client_error(400)["param"], param, "{bad}");
    }
    app.get(
        &app.wallet_key,
        &format!("/v1/deposits/{}", uuid::Uuid::now_v7()),
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn test_endpoints_validate_their_input() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let base = json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                       "decimals": 6, "amount": "10" });
    for field in ["customer_id", "chain", "asset", "decimals", "amount"] {
        let mut b = base.clone();
        b.as_object_mut().unwrap().remove(field);
        let r = app.post(&app.wallet_key, "/v1/test/deposits", b).await;
        assert_eq!(
            r.expect_client_error(400)["param"],
            field,
            "missing {field}"
        );
    }
    let mut b = base.clone();
    b["asset"] = json!("DOGGO");
    let r = app.post(&app.wallet_key, "/v1/test/deposits", b).await;
    r.expect_error_param(400, "unknown_asset", "asset");
    let mut b = base.clone();
    b["decimals"] = json!(18);
    app.post(&app.wallet_key, "/v1/test/deposits", b)
        .await
        .expect_error_param(400, "decimals_mismatch", "decimals");
    let mut b = base.clone();
    b["confirm"] = json!("yes");
    app.post(&app.wallet_key, "/v1/test/deposits", b)
        .await
        .expect_error_param(400, "invalid_request", "confirm");
    let mut b = base.clone();
    b["amount"] = json!("0");
    let r = app.post(&app.wallet_key, "/v1/test/deposits", b).await;
    assert_eq!(r.expect_client_error(400)["param"], "amount");
    let mut b = base.clone();
    b["customer_id"] = json!(uuid::Uuid::now_v7().to_string());
    app.post(&app.wallet_key, "/v1/test/deposits", b)
        .await
        .expect_error(404, "not_found");
    for action in ["confirm", "fail", "orphan"] {
        app.post(
            &app.wallet_key,
            &format!("/v1/test/deposits/{}/{action}", uuid::Uuid::now_v7()),
            json!({}),
        )
        .await
        .expect_error(404, "not_found");
    }
    let l = app.get(&app.wallet_key, "/v1/deposits").await.expect(200);
    assert_eq!(assert_list(&l).len(), 0);
    let r = app
        .post(&app.wallet_key, "/v1/test/blocks", json!({ "count": 0 }))
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "count");
    let r = app
        .post(
            &app.wallet_key,
            "/v1/test/blocks",
            json!({ "count": 10001 }),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "count");
    let r = app
        .post(
            &app.wallet_key,
            "/v1/test/blocks",
            json!({ "count": 1, "chain": "narnia" }),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "chain");
}

#[tokio::test]
async fn test_blocks_answers_heights() {
    let app = spawn_app().await;
    let a = app.mine(3).await;
    assert_eq!(a["object"], "test_blocks", "{a}");
    let h1 = a["heights"]["ethereum"].as_u64().expect("ethereum height");
    let b = app.mine(2).await;
    assert_eq!(b["heights"]["ethereum"].as_u64().unwrap(), h1 + 2);
    let c = app
        .post(
            &app.wallet_key,
            "/v1/test/blocks",
            json!({ "count": 5, "chain": "bsc" }),
        )
        .await
        .expect(200);
    assert_eq!(
        c["heights"]["bsc"].as_u64().unwrap(),
        b["heights"]["bsc"].as_u64().unwrap() + 5
    );
    if let Some(e) = c["heights"]["ethereum"].as_u64() {
        assert_eq!(e, h1 + 2, "mining bsc moved ethereum");
    }
}

#[tokio::test]
async fn test_endpoints_need_a_test_wallet_key() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let body = json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                       "decimals": 6, "amount": "10" });
    app.post(&app.payout_key, "/v1/test/deposits", body.clone())
        .await
        .expect_client_error(403);
    app.post(&app.checkout_key, "/v1/test/blocks", json!({ "count": 1 }))
        .await
        .expect_client_error(403);
    let ro = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "ro", "kind": "wallet", "scopes": ["wallets:read"] }),
        )
        .await;
    app.post(&s(&ro["token"]), "/v1/test/deposits", body.clone())
        .await
        .expect_error(403, "missing_scope");
    // A live project's key is refused with test_mode_only.
    let live = app.other_project_key("livep", "live", "wallet");
    let lc = app
        .post(&live, "/v1/customers", json!({}))
        .await
        .expect(201);
    let r = app
        .post(
            &live,
            "/v1/test/deposits",
            json!({ "customer_id": lc["id"], "chain": "ethereum", "asset": "USDT",
                    "decimals": 6, "amount": "10" }),
        )
        .await;
    r.expect_error(403, "test_mode_only");
    app.post(&live, "/v1/test/blocks", json!({ "count": 1 }))
        .await
        .expect_error(403, "test_mode_only");
    let p = app.ping(&live).await;
    assert_eq!(p["env"], "live");
    let l = app.get(&app.wallet_key, "/v1/deposits").await.expect(200);
    assert_eq!(assert_list(&l).len(), 0);
}

#[tokio::test]
async fn deposits_to_held_addresses_are_credited_whatever_the_switches_say() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "polygon").await;
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "polygon",
        "--chain-deposits",
        "false",
    ]);
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "polygon",
        "--asset",
        "USDT",
        "--asset-deposits",
        "false",
    ]);
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "polygon",
        "--chain-status",
        "paused",
    ]);
    let d = app
        .test_deposit(&cid, "polygon", "USDT", 6, "900000", None)
        .await;
    assert_eq!(d["status"], "confirmed");
    assert_eq!(d["required_confirmations"], 128);
    assert_eq!(app.available(&cid, "polygon", "USDT").await, 900_000);
}

#[tokio::test]
async fn an_archived_coin_is_not_credited() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "ethereum",
        "--asset",
        "USDC",
        "--asset-archived",
        "true",
    ]);
    let r = app
        .test_deposit_resp(&cid, "ethereum", "USDC", 6, "900000", None)
        .await;
    assert!(r.status < 500, "5xx for an archived coin: {}", r.text);
    if r.status < 300 {
        assert_ne!(
            r.body["status"], "confirmed",
            "archived coin credited: {}",
            r.text
        );
    } else {
        assert_envelope(&r.body, "archived coin");
    }
    assert_eq!(app.available(&cid, "ethereum", "USDC").await, 0);
}
