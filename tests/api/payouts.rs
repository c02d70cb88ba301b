//! Issue point 11: payouts (SPEC section 4 Payouts, DECISIONS 5): validation, funds, signing,
//! locking, auto-approve threshold, approve/reject, cancel, the simulated lifecycle.

use serde_json::{json, Value};

use crate::helpers::*;

fn assert_payout_shape(p: &Value) {
    assert_eq!(p["object"], "payout", "{p}");
    assert_uuid(&p["id"]);
    assert!(p.get("customer_id").is_some());
    assert!(p["chain"].is_string());
    assert!(p["asset"].is_string(), "asset is a symbol string: {p}");
    assert!(p.get("asset_id").is_some(), "{p}");
    atomic(&p["amount"]);
    atomic(&p["fee_amount"]);
    assert!(p["to_address"].is_string());
    assert!(p.get("memo").is_some(), "{p}");
    assert!(p["status"].is_string());
    assert!(p.get("reference").is_some());
    assert!(p.get("tx_hash").is_some());
    assert!(p.get("amount_usd").is_some(), "{p}");
    assert!(
        p["amount_usd"].is_null() || p["amount_usd"].is_string(),
        "{p}"
    );
    assert_timestamp(&p["created_at"]);
    assert_timestamp(&p["updated_at"]);
}

fn payout_body(cid: &str, amount: &str) -> Value {
    json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6,
            "amount": amount, "to_address": external_address(0x61) })
}

async fn get_payout(app: &App, id: &str) -> Value {
    app.get(&app.payout_key, &format!("/v1/payouts/{id}"))
        .await
        .expect(200)
}

/// Mines one block at a time until the payout reaches `status` (at most `max` blocks).
async fn mine_until(app: &App, id: &str, status: &str, max: u32) -> Value {
    for _ in 0..max {
        let p = get_payout(app, id).await;
        if p["status"] == status {
            return p;
        }
        app.mine(1).await;
    }
    let p = get_payout(app, id).await;
    assert_eq!(p["status"], status, "not reached after {max} blocks: {p}");
    p
}

#[tokio::test]
async fn a_payout_walks_queued_signing_submitted_confirmed() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let p = app
        .create_payout(
            json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
            "decimals": 6, "amount": "1500000", "to_address": external_address(0x62),
            "reference": "order-7", "memo": null }),
        )
        .await
        .expect(202);
    assert_payout_shape(&p);
    assert_eq!(p["status"], "queued");
    assert_eq!(p["customer_id"], c["id"]);
    assert_eq!(p["amount"], "1500000");
    assert_eq!(p["fee_amount"], "0");
    assert_eq!(p["reference"], "order-7");
    assert!(p["tx_hash"].is_null());
    assert!(decimal_eq(p["amount_usd"].as_str().unwrap(), "1.5"), "{p}");
    let id = s(&p["id"]);
    assert_eq!(
        get_payout(&app, &id).await,
        p,
        "GET differs from the 202 answer"
    );

    app.mine(1).await;
    let p1 = get_payout(&app, &id).await;
    assert!(
        p1["status"] == "signing" || p1["status"] == "submitted",
        "after one block: {p1}"
    );
    let sub = mine_until(&app, &id, "submitted", 3).await;
    let hash = s(&sub["tx_hash"]);
    assert!(hash.starts_with("0x") && hash.len() == 66, "{hash}");
    assert_eq!(
        app.locked(&cid, "ethereum", "USDT").await,
        1_500_000,
        "locked while in flight"
    );
    let conf = mine_until(&app, &id, "confirmed", 20).await;
    assert_eq!(conf["tx_hash"], json!(hash));
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 0);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 3_500_000);

    let ev = app.events(&format!("resource_id={id}")).await;
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for want in [
        "payout.created",
        "payout.signing",
        "payout.submitted",
        "payout.confirmed",
    ] {
        assert!(types.contains(&want), "{want} missing: {types:?}");
    }
    let pos = |t: &str| types.iter().position(|x| *x == t).unwrap();
    assert!(pos("payout.created") < pos("payout.signing"));
    assert!(pos("payout.signing") < pos("payout.submitted"));
    assert!(pos("payout.submitted") < pos("payout.confirmed"));
    let submitted = ev.iter().find(|e| e["type"] == "payout.submitted").unwrap();
    assert_eq!(
        submitted["data"]["tx_hash"],
        json!(hash),
        "payout.submitted carries the hash"
    );
    let confirmed = ev.iter().find(|e| e["type"] == "payout.confirmed").unwrap();
    assert_eq!(
        confirmed["data"], conf,
        "event data differs from the REST read"
    );
    // Each event shows the payout as it was at the event, not as its row is now (events
    // store the payout's changing fields only, schema 10).
    let created = ev.iter().find(|e| e["type"] == "payout.created").unwrap();
    assert_eq!(created["data"], p, "payout.created shows the 202 answer");
    assert_eq!(
        submitted["data"], sub,
        "payout.submitted shows the payout as submitted"
    );
    let signing = ev.iter().find(|e| e["type"] == "payout.signing").unwrap();
    assert_eq!(signing["data"]["status"], "signing");
    assert!(signing["data"]["tx_hash"].is_null(), "{signing}");
    assert_eq!(signing["data"]["amount"], "1500000");
    // The lookup by id renders the same data.
    let one = app
        .get(
            &app.wallet_key,
            &format!("/v1/events/{}", s(&created["id"])),
        )
        .await
        .expect(200);
    assert_eq!(one["data"], p);
}

#[tokio::test]
async fn decimals_must_match_the_asset() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "bsc").await;
    app.test_deposit(&cid, "bsc", "USDT", 18, "5000000000000000000", None)
        .await;
    let r = app
        .create_payout(
            json!({ "customer_id": cid, "chain": "bsc", "asset": "USDT", "decimals": 6,
            "amount": "1000000", "to_address": external_address(0x63) }),
        )
        .await;
    let e = r.expect_error_param(400, "decimals_mismatch", "decimals");
    let msg = s(&e["message"]);
    assert!(
        msg.contains("18") && msg.contains('6'),
        "both values reported: {msg}"
    );
    let p = app
        .create_payout(
            json!({ "customer_id": cid, "chain": "bsc", "asset": "USDT", "decimals": 18,
            "amount": "1000000000000000000", "to_address": external_address(0x63) }),
        )
        .await
        .expect(202);
    assert_eq!(p["amount"], "1000000000000000000");
    assert_eq!(p["asset"], "USDT");
}

/// `refund:` references are the appliance's own invoice refunds, which charge no payout fee
/// (DECISIONS.md section 12): a merchant's payout cannot take one, so it cannot skip the fee.
#[tokio::test]
async fn a_refund_reference_is_reserved() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "bsc").await;
    app.test_deposit(&cid, "bsc", "USDT", 18, "5000000000000000000", None)
        .await;
    let body = |reference: &str| {
        json!({ "customer_id": cid, "chain": "bsc", "asset": "USDT", "decimals": 18,
        "amount": "1000000000000000000", "to_address": external_address(0x64),
        "reference": reference })
    };
    let r = app
        .create_payout(body("refund:0b6f3f5e-5d6a-4c1e-9d5e-2f1d7a0c9b11"))
        .await;
    let e = r.expect_error_param(400, "invalid_request", "reference");
    assert!(s(&e["message"]).contains("refund:"), "{e}");
    let p = app.create_payout(body("order refund: 7")).await.expect(202);
    assert_eq!(p["reference"], "order refund: 7");
}

#[tokio::test]
async fn insufficient_funds_is_402_stating_available_and_requested() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "1000000").await;
    let cid = s(&c["id"]);
    let r = app.create_payout(payout_body(&cid, "2500000")).await;
    let e = r.expect_error(402, "insufficient_funds");
    let msg = s(&e["message"]);
    assert!(
        mentions_amount(&msg, "2500000", "2.5"),
        "message states the requested amount: {msg}"
    );
    assert!(
        mentions_amount(&msg, "1000000", "1"),
        "message states the available amount: {msg}"
    );
    // Locked funds are not available.
    app.create_payout(payout_body(&cid, "600000"))
        .await
        .expect(202);
    app.create_payout(payout_body(&cid, "600000"))
        .await
        .expect_error(402, "insufficient_funds");
    app.create_payout(payout_body(&cid, "400000"))
        .await
        .expect(202);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 0);
    // A payout without customer_id draws on the project's own account, empty here.
    let r = app
        .create_payout(json!({ "chain": "ethereum", "asset": "USDT", "decimals": 6,
            "amount": "1", "to_address": external_address(0x64) }))
        .await;
    r.expect_error(402, "insufficient_funds");
    let l = app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    assert_eq!(assert_list(&l).len(), 2);
}

#[tokio::test]
async fn payouts_validate_their_input() {
    let app = spawn_app().await;
    let (c, w, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let base = payout_body(&cid, "1000");
    for field in ["chain", "asset", "decimals", "amount", "to_address"] {
        let mut b = base.clone();
        b.as_object_mut().unwrap().remove(field);
        let r = app.create_payout(b).await;
        assert_eq!(
            r.expect_client_error(400)["param"],
            field,
            "missing {field}"
        );
    }
    let mut b = base.clone();
    b["to_address"] = json!("0x1234");
    app.create_payout(b)
        .await
        .expect_error_param(422, "invalid_address", "to_address");
    let mut b = base.clone();
    // Mixed case that fails the EIP-55 checksum.
    b["to_address"] = json!("0xdAC17F958D2ee523a2206206994597C13D831eC7");
    app.create_payout(b)
        .await
        .expect_error_param(422, "invalid_address", "to_address");
    let mut b = base.clone();
    b["asset"] = json!("NOPE");
    app.create_payout(b)
        .await
        .expect_error_param(400, "unknown_asset", "asset");
    let mut b = base.clone();
    b["amount"] = json!("0");
    assert_eq!(
        app.create_payout(b).await.expect_client_error(400)["param"],
        "amount"
    );
    let mut b = base.clone();
    b["customer_id"] = json!(uuid::Uuid::now_v7().to_string());
    app.create_payout(b).await.expect_error(404, "not_found");
    // Paying out to one of our own deposit addresses is refused.
    let mut b = base.clone();
    b["to_address"] = w["address"].clone();
    app.create_payout(b)
        .await
        .expect_error(422, "self_payout_forbidden");
    // A valid EIP-55 mixed-case address is accepted.
    let mut b = base.clone();
    b["to_address"] = json!("0xdAC17F958D2ee523a2206206994597C13D831ec7");
    app.create_payout(b).await.expect(202);
    let l = app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    assert_eq!(
        assert_list(&l).len(),
        1,
        "refused payouts were written: {l}"
    );
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 1000);
}

#[tokio::test]
async fn payouts_need_payouts_create_and_signing_at_every_level() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let body = payout_body(&cid, "1000");
    // A payout key with its default scopes cannot create payouts.
    let k = app
        .create_key(
            &app.payout_key,
            json!({ "name": "reader", "kind": "payout", "signing_enabled": true }),
        )
        .await;
    app.post_idem(&s(&k["token"]), "/v1/payouts", body.clone(), &idem())
        .await
        .expect_error(403, "missing_scope");
    app.get(&s(&k["token"]), "/v1/payouts").await.expect(200);
    // With the scope and key signing, but project signing off.
    let k2 = app
        .create_key(
            &app.payout_key,
            json!({ "name": "sender", "kind": "payout", "scopes": ["payouts:create", "payouts:read"],
                    "signing_enabled": true }),
        )
        .await;
    app.project_set(&["--signing-enabled", "false"]);
    app.post_idem(&s(&k2["token"]), "/v1/payouts", body.clone(), &idem())
        .await
        .expect_error(403, "signing_disabled");
    app.project_set(&["--signing-enabled", "true"]);
    app.post_idem(&s(&k2["token"]), "/v1/payouts", body.clone(), &idem())
        .await
        .expect(202);
    // A read-only key (signing off) is a supported configuration.
    let k3 = app
        .create_key(
            &app.payout_key,
            json!({ "name": "ro", "kind": "payout", "scopes": ["payouts:create", "payouts:read"],
                    "signing_enabled": false }),
        )
        .await;
    app.post_idem(&s(&k3["token"]), "/v1/payouts", body.clone(), &idem())
        .await
        .expect_error(403, "signing_disabled");
    let p = app.ping(&s(&k3["token"])).await;
    assert_eq!(p["signing_blocked_by"], json!(["key"]));
}

#[tokio::test]
async fn cancel_returns_funds_until_signing_begins() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let p = app
        .create_payout(payout_body(&cid, "2000000"))
        .await
        .expect(202);
    let id = s(&p["id"]);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 3_000_000);
    let cp = app
        .post_idem(
            &app.payout_key,
            &format!("/v1/payouts/{id}/cancel"),
            json!({}),
            &idem(),
        )
        .await
        .expect(200);
    assert_eq!(cp["status"], "canceled");
    assert_eq!(cp["id"], p["id"]);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 5_000_000);
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 0);
    assert!(app
        .event_types_for(&id)
        .await
        .contains(&"payout.canceled".to_string()));
    // A canceled payout never moves.
    app.mine(30).await;
    assert_eq!(get_payout(&app, &id).await["status"], "canceled");
    app.post_idem(
        &app.payout_key,
        &format!("/v1/payouts/{id}/cancel"),
        json!({}),
        &idem(),
    )
    .await
    .expect_error(409, "payout_not_cancelable");

    // Once signing has begun, cancel is refused and nothing is returned.
    let p = app
        .create_payout(payout_body(&cid, "1000000"))
        .await
        .expect(202);
    let id = s(&p["id"]);
    app.mine(1).await;
    let now = get_payout(&app, &id).await;
    assert!(
        now["status"] == "signing" || now["status"] == "submitted",
        "{now}"
    );
    app.post_idem(
        &app.payout_key,
        &format!("/v1/payouts/{id}/cancel"),
        json!({}),
        &idem(),
    )
    .await
    .expect_error(409, "payout_not_cancelable");
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 1_000_000);
    app.post_idem(
        &app.payout_key,
        &format!("/v1/payouts/{}/cancel", uuid::Uuid::now_v7()),
        json!({}),
        &idem(),
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn above_the_threshold_a_payout_waits_for_a_different_approver() {
    let app = spawn_app().await;
    app.project_set(&["--auto-approve-threshold-cents", "1000"]);
    let (c, _, _) = app
        .funded_customer("ethereum", "USDT", 6, "100000000")
        .await;
    let cid = s(&c["id"]);
    // At or below $10: queued at once.
    let small = app
        .create_payout(payout_body(&cid, "10000000"))
        .await
        .expect(202);
    assert_eq!(small["status"], "queued");
    // Above: pending_approval, not an error; funds locked.
    let big = app
        .create_payout(payout_body(&cid, "20000000"))
        .await
        .expect(202);
    assert_eq!(big["status"], "pending_approval");
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 30_000_000);
    let id = s(&big["id"]);
    // Mining does not move a payout awaiting approval.
    app.mine(3).await;
    assert_eq!(get_payout(&app, &id).await["status"], "pending_approval");
    // The creator cannot approve its own payout.
    app.post(
        &app.payout_key,
        &format!("/v1/payouts/{id}/approve"),
        json!({}),
    )
    .await
    .expect_error(403, "approver_must_differ");
    // Approval needs payouts:approve.
    let plain = app
        .create_key(
            &app.payout_key,
            json!({ "name": "plain", "kind": "payout" }),
        )
        .await;
    app.post(
        &s(&plain["token"]),
        &format!("/v1/payouts/{id}/approve"),
        json!({}),
    )
    .await
    .expect_error(403, "missing_scope");
    // Only the operator grants payouts:approve (DECISIONS.md section 16, amended).
    app.post(
        &app.payout_key,
        "/v1/api_keys",
        json!({ "name": "approver", "kind": "payout", "scopes": ["payouts:approve", "payouts:read"] }),
    )
    .await
    .expect_error_param(403, "scope_not_grantable", "scopes");
    let approver = json!({ "token": app.operator_key("payout", "payouts:approve,payouts:read") });
    let a = app
        .post(
            &s(&approver["token"]),
            &format!("/v1/payouts/{id}/approve"),
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(a["status"], "queued");
    assert!(app
        .event_types_for(&id)
        .await
        .contains(&"payout.approved".to_string()));
    // Approving twice is an illegal transition.
    app.post(
        &s(&approver["token"]),
        &format!("/v1/payouts/{id}/approve"),
        json!({}),
    )
    .await
    .expect_client_error(409);
    mine_until(&app, &id, "confirmed", 20).await;

    // Reject returns the funds.
    let big2 = app
        .create_payout(payout_body(&cid, "30000000"))
        .await
        .expect(202);
    assert_eq!(big2["status"], "pending_approval");
    let id2 = s(&big2["id"]);
    let before = app.available(&cid, "ethereum", "USDT").await;
    let r = app
        .post(
            &s(&approver["token"]),
            &format!("/v1/payouts/{id2}/reject"),
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(r["status"], "rejected");
    assert_eq!(
        app.available(&cid, "ethereum", "USDT").await,
        before + 30_000_000
    );
    assert!(app
        .event_types_for(&id2)
        .await
        .contains(&"payout.rejected".to_string()));
    // A pending payout can also be canceled by its creator.
    let big3 = app
        .create_payout(payout_body(&cid, "15000000"))
        .await
        .expect(202);
    let c3 = app
        .post_idem(
            &app.payout_key,
            &format!("/v1/payouts/{}/cancel", s(&big3["id"])),
            json!({}),
            &idem(),
        )
        .await
        .expect(200);
    assert_eq!(c3["status"], "canceled");
    // Removing the threshold auto-approves everything.
    app.project_set(&["--auto-approve-threshold-cents", "none"]);
    let p = app
        .create_payout(payout_body(&cid, "40000000"))
        .await
        .expect(202);
    assert_eq!(p["status"], "queued");
}

#[tokio::test]
async fn operator_can_approve_from_the_cli() {
    let app = spawn_app().await;
    app.project_set(&["--auto-approve-threshold-cents", "100"]);
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "10000000").await;
    let p = app
        .create_payout(payout_body(&s(&c["id"]), "5000000"))
        .await
        .expect(202);
    assert_eq!(p["status"], "pending_approval");
    app.cli_ok(&["payout", "approve", &s(&p["id"])]);
    assert_eq!(get_payout(&app, &s(&p["id"])).await["status"], "queued");
}

#[tokio::test]
async fn a_reverted_payout_fails_and_unlocks_its_funds() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let p = app
        .create_payout(
            json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
            "decimals": 6, "amount": "2000000", "to_address": reverting_address() }),
        )
        .await
        .expect(202);
    let id = s(&p["id"]);
    let f = mine_until(&app, &id, "failed", 30).await;
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 0);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 5_000_000);
    let ev = app
        .events(&format!("type=payout.failed&resource_id={id}"))
        .await;
    assert_eq!(ev.len(), 1);
    assert_eq!(
        ev[0]["data"]["failure_reason"], "execution reverted",
        "{}",
        ev[0]
    );
    assert_eq!(ev[0]["data"], f);
}

#[tokio::test]
async fn switched_off_payouts_are_422() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "ethereum",
        "--asset",
        "USDT",
        "--asset-payouts",
        "false",
    ]);
    app.create_payout(payout_body(&cid, "1000"))
        .await
        .expect_error(422, "asset_payouts_disabled");
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "ethereum",
        "--asset",
        "USDT",
        "--asset-payouts",
        "true",
    ]);
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "ethereum",
        "--chain-payouts",
        "false",
    ]);
    app.create_payout(payout_body(&cid, "1000"))
        .await
        .expect_error(422, "chain_unavailable");
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "ethereum",
        "--chain-payouts",
        "true",
    ]);
    app.create_payout(payout_body(&cid, "1000"))
        .await
        .expect(202);
}

#[tokio::test]
async fn too_many_pending_payouts_is_429() {
    let app = spawn_app().await;
    app.project_set(&["--max-pending-payouts", "2"]);
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    app.create_payout(payout_body(&cid, "1000"))
        .await
        .expect(202);
    app.create_payout(payout_body(&cid, "1000"))
        .await
        .expect(202);
    let r = app.create_payout(payout_body(&cid, "1000")).await;
    r.expect_error(429, "too_many_pending_payouts");
    assert!(r.header("retry-after").is_some(), "Retry-After");
    app.settle().await;
    app.create_payout(payout_body(&cid, "1000"))
        .await
        .expect(202);
}

#[tokio::test]
async fn list_and_get_with_filters() {
    let app = spawn_app().await;
    let (a, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let (b, _, _) = app
        .funded_customer("bsc", "USDC", 18, "5000000000000000000")
        .await;
    let (aid, bid) = (s(&a["id"]), s(&b["id"]));
    let p1 = app
        .create_payout(
            json!({ "customer_id": aid, "chain": "ethereum", "asset": "USDT", "decimals": 6,
            "amount": "1000", "to_address": external_address(0x65), "reference": "r-1" }),
        )
        .await
        .expect(202);
    let p2 = app
        .create_payout(
            json!({ "customer_id": bid, "chain": "bsc", "asset": "USDC", "decimals": 18,
            "amount": "1000", "to_address": external_address(0x65), "reference": "r-2" }),
        )
        .await
        .expect(202);
    let p3 = app
        .create_payout(payout_body(&aid, "2000"))
        .await
        .expect(202);
    app.post_idem(
        &app.payout_key,
        &format!("/v1/payouts/{}/cancel", s(&p3["id"])),
        json!({}),
        &idem(),
    )
    .await
    .expect(200);
    let q = |query: &'static str| {
        let app = &app;
        async move {
            let l = app
                .get(&app.payout_key, &format!("/v1/payouts{query}"))
                .await
                .expect(200);
            for p in assert_list(&l) {
                assert_payout_shape(p);
            }
            ids(&l)
        }
    };
    let id = |v: &Value| s(&v["id"]);
    assert_eq!(q("").await, vec![id(&p3), id(&p2), id(&p1)]);
    let l = app
        .get(&app.payout_key, &format!("/v1/payouts?customer_id={aid}"))
        .await
        .expect(200);
    assert_eq!(ids(&l), vec![id(&p3), id(&p1)]);
    assert_eq!(q("?chain=bsc").await, vec![id(&p2)]);
    assert_eq!(q("?status=canceled").await, vec![id(&p3)]);
    assert_eq!(q("?status=queued").await, vec![id(&p2), id(&p1)]);
    assert_eq!(q("?reference=r-2").await, vec![id(&p2)]);
    assert_eq!(q("?limit=1").await.len(), 1);
    let r = app.get(&app.payout_key, "/v1/payouts?status=lost").await;
    assert_eq!(r.expect_client_error(400)["param"], "status");
    // The wallet key reads payout history too.
    let l = app.get(&app.wallet_key, "/v1/payouts").await.expect(200);
    assert_eq!(assert_list(&l).len(), 3);
    app.get(&app.wallet_key, &format!("/v1/payouts/{}", id(&p1)))
        .await
        .expect(200);
    app.get(
        &app.payout_key,
        &format!("/v1/payouts/{}", uuid::Uuid::now_v7()),
    )
    .await
    .expect_error(404, "not_found");
}

/// True when `msg` contains the number `atomic` or `decimal` (as a whole number token).
fn mentions_amount(msg: &str, atomic: &str, decimal: &str) -> bool {
    msg.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|t| t.trim_end_matches('.'))
        .filter(|t| !t.is_empty())
        .any(|t| t == atomic || decimal_eq(t, decimal))
}

#[tokio::test]
async fn concurrent_payouts_never_overdraw() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let mut futs = Vec::new();
    for _ in 0..12 {
        futs.push(app.create_payout(payout_body(&cid, "1000000")));
    }
    let mut accepted = 0;
    let mut refused = 0;
    for r in join_all(futs).await {
        match r.status {
            202 => accepted += 1,
            402 => {
                r.expect_error(402, "insufficient_funds");
                refused += 1;
            }
            other => panic!("unexpected {other}: {}", r.text),
        }
    }
    assert_eq!(accepted, 5, "{accepted} accepted, {refused} refused");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 0);
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 5_000_000);
}

#[tokio::test]
async fn parallel_payouts_from_many_clients_never_overdraw() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let mut handles = Vec::new();
    for _ in 0..12 {
        let client = app.client.clone();
        let url = app.url("/v1/payouts");
        let tok = app.payout_key.clone();
        let body = payout_body(&cid, "1000000");
        handles.push(tokio::spawn(async move {
            let r = client
                .post(url)
                .header("Authorization", format!("Bearer {tok}"))
                .header("Idempotency-Key", idem())
                .json(&body)
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for h in handles {
        statuses.push(h.await.unwrap());
    }
    let ok = statuses.iter().filter(|s| **s == 202).count();
    assert!(
        statuses.iter().all(|s| *s == 202 || *s == 402),
        "{statuses:?}"
    );
    assert_eq!(ok, 5, "{statuses:?}");
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 0);
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 5_000_000);
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify: {out}{err}");
}

#[tokio::test]
async fn extreme_amounts_are_never_a_5xx() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let max = u128::MAX.to_string();
    let r = app
        .test_deposit_resp(&cid, "ethereum", "USDT", 6, &max, None)
        .await;
    assert!(r.status < 500, "{}: {}", r.status, r.text);
    let r = app
        .test_deposit_resp(&cid, "ethereum", "USDT", 6, &max, None)
        .await;
    assert!(
        r.status < 500,
        "second u128::MAX deposit: {}: {}",
        r.status,
        r.text
    );
    let r = app
        .test_deposit_resp(&cid, "ethereum", "USDT", 6, "1", None)
        .await;
    assert!(r.status < 500, "{}: {}", r.status, r.text);
    let r = app.create_payout(payout_body(&cid, &max)).await;
    assert!(r.status < 500, "{}: {}", r.status, r.text);
    let r = app
        .get(&app.wallet_key, &format!("/v1/customers/{cid}/balances"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = app.get(&app.wallet_key, "/v1/balances").await;
    assert_eq!(r.status, 200, "{}", r.text);
    app.mine(1).await;
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify: {out}{err}");
}

#[tokio::test]
async fn payouts_on_chains_not_enabled_are_422() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let r = app
        .create_payout(
            json!({ "customer_id": c["id"], "chain": "tron", "asset": "USDT",
            "decimals": 6, "amount": "1000", "to_address": "TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t" }),
        )
        .await;
    let b = r.expect_client_error(422);
    assert!(
        b["code"] == "chain_not_enabled" || b["code"] == "chain_unavailable",
        "{b}"
    );
    let r = app
        .create_payout(
            json!({ "customer_id": c["id"], "chain": "zksync", "asset": "USDT",
            "decimals": 6, "amount": "1000", "to_address": external_address(0x66) }),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
    let r = app
        .create_payout(
            json!({ "customer_id": c["id"], "chain": "narnia", "asset": "USDT",
            "decimals": 6, "amount": "1000", "to_address": external_address(0x66) }),
        )
        .await;
    assert!(r.status == 400 || r.status == 422, "{}", r.text);
    assert_eq!(r.body["param"], "chain", "{}", r.text);
}
