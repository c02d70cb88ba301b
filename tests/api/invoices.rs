//! Invoices (SPEC.md sections 2-4 and 6, Invoice; DECISIONS.md sections 5, 12 and 15):
//! creation, reads, cancel, and every payment outcome walked with test transfers and the
//! test clock.

use serde_json::{json, Value};

use crate::helpers::{idem, s, spawn_app, App};

/// Creates an invoice of `price` cents on ethereum USDT (and whatever `extra` adds).
async fn invoice(app: &App, price: &str, extra: Value) -> Value {
    let mut body = json!({
        "price_amount": price,
        "accepted_chains": ["ethereum"],
        "accepted_assets": ["USDT"],
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    app.post_idem(&app.checkout_key, "/v1/invoices", body, &idem())
        .await
        .expect(201)
}

fn quote<'a>(inv: &'a Value, chain: &str, asset: &str) -> &'a Value {
    inv["quotes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["chain"] == chain && q["asset"] == asset)
        .unwrap_or_else(|| panic!("no {chain} {asset} quote in {inv}"))
}

fn address(inv: &Value, chain: &str) -> String {
    inv["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["chain"] == chain)
        .map(|a| s(&a["address"]))
        .unwrap_or_else(|| panic!("no {chain} address in {inv}"))
}

/// Pays `amount` atomic of (chain, asset) to the invoice's address with a test transfer.
async fn pay(
    app: &App,
    inv: &Value,
    chain: &str,
    asset: &str,
    amount: &str,
    confirm: bool,
) -> Value {
    let decimals = quote(inv, chain, asset)["decimals"].as_u64().unwrap();
    app.post_idem(
        &app.wallet_key,
        "/v1/test/transfers",
        json!({
            "chain": chain, "asset": asset, "decimals": decimals, "amount": amount,
            "to_address": address(inv, chain), "confirm": confirm,
        }),
        &idem(),
    )
    .await
    .expect(201)
}

async fn get(app: &App, inv: &Value) -> Value {
    app.get(
        &app.checkout_key,
        &format!("/v1/invoices/{}", s(&inv["id"])),
    )
    .await
    .expect(200)
}

async fn types(app: &App, inv: &Value) -> Vec<String> {
    app.event_types_for(&s(&inv["id"])).await
}

#[tokio::test]
async fn create_get_and_list_an_invoice() {
    let app = spawn_app().await;
    let inv = app
        .post_idem(
            &app.checkout_key,
            "/v1/invoices",
            json!({"price_amount": "4000", "title": "Order 17", "metadata": {"order": "17"},
                   "return_url": "https://shop.example/done"}),
            &idem(),
        )
        .await
        .expect(201);
    assert_eq!(inv["object"], "invoice");
    assert_eq!(inv["status"], "open");
    assert_eq!(inv["price_amount"], "4000");
    assert_eq!(inv["price_currency"], "USD");
    assert_eq!(inv["received_amount"], "0");
    assert_eq!(inv["excess_amount"], "0");
    assert_eq!(inv["fee_bps"], 0);
    assert_eq!(inv["fee_fixed_cents"], "0");
    assert_eq!(inv["fee_cap_cents"], "0");
    assert_eq!(inv["metadata"]["order"], "17");
    let url = s(&inv["checkout_url"]);
    let token = url.rsplit('/').next().unwrap();
    assert!(url.contains("/checkout/ck_"), "{url}");
    assert_eq!(token.len(), 46, "{token}");
    assert_ne!(token, s(&inv["id"]));
    // One address per chain, identical on every EVM chain; quotes per (chain, asset).
    let addrs = inv["addresses"].as_array().unwrap();
    assert!(addrs.len() >= 2, "{inv}");
    let first = s(&addrs[0]["address"]);
    assert!(addrs.iter().all(|a| s(&a["address"]) == first), "{inv}");
    let usdt = quote(&inv, "ethereum", "USDT");
    assert_eq!(usdt["amount_atomic"], "40000000");
    assert_eq!(usdt["amount"], "40");
    assert_eq!(usdt["rate"], "1.00");
    assert_eq!(usdt["rate_source"], "par");
    let eth = quote(&inv, "ethereum", "ETH");
    // 40.00 / 3000.00 ETH, rounded up to the wei.
    assert_eq!(eth["amount_atomic"], "13333333333333334");
    assert_eq!(eth["rate_source"], "test");
    let bsc = quote(&inv, "bsc", "USDT");
    assert_eq!(bsc["decimals"], 18);
    assert_eq!(bsc["amount_atomic"], "40000000000000000000");
    // The address is nobody's customer address and shows in no wallet list.
    let wallets = app.get(&app.wallet_key, "/v1/wallets").await.expect(200);
    assert!(!wallets.to_string().contains(&first));

    let got = get(&app, &inv).await;
    assert_eq!(got, inv);
    let list = app.get(&app.checkout_key, "/v1/invoices").await.expect(200);
    assert_eq!(list["data"][0]["id"], inv["id"]);
    assert_eq!(list["data"][0]["received_amount"], "0");
    assert!(
        list["data"][0].get("quotes").is_none(),
        "list items are short"
    );
    let open = app
        .get(&app.checkout_key, "/v1/invoices?status=open")
        .await
        .expect(200);
    assert_eq!(open["data"].as_array().unwrap().len(), 1);
    let paid = app
        .get(&app.checkout_key, "/v1/invoices?status=paid")
        .await
        .expect(200);
    assert!(paid["data"].as_array().unwrap().is_empty());
    app.get(&app.checkout_key, "/v1/invoices?status=nope")
        .await
        .expect_error_param(400, "invalid_request", "status");
    assert_eq!(types(&app, &inv).await, vec!["invoice.created"]);
}

#[tokio::test]
async fn reference_id_returns_the_first_invoice_and_the_key_replays() {
    let app = spawn_app().await;
    let key = idem();
    let body = json!({"price_amount": "1500", "reference_id": "order-9"});
    let a = app
        .post_idem(&app.checkout_key, "/v1/invoices", body.clone(), &key)
        .await
        .expect(201);
    // Same Idempotency-Key: the stored first answer, byte for byte.
    let replay = app
        .post_idem(&app.checkout_key, "/v1/invoices", body.clone(), &key)
        .await;
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(replay.expect(201), a);
    // A new key with the same reference (even another price): the FIRST invoice, 200.
    let b = app
        .post_idem(
            &app.checkout_key,
            "/v1/invoices",
            json!({"price_amount": "9999", "reference_id": "order-9"}),
            &idem(),
        )
        .await
        .expect(200);
    assert_eq!(b["id"], a["id"]);
    assert_eq!(b["price_amount"], "1500");
    assert_eq!(b["quotes"], a["quotes"]);
    assert_eq!(b["checkout_url"], a["checkout_url"]);
    // Without any key, too.
    let c = app
        .post(
            &app.checkout_key,
            "/v1/invoices",
            json!({"price_amount": "1", "reference_id": "order-9"}),
        )
        .await
        .expect(200);
    assert_eq!(c["id"], a["id"]);
    let list = app.get(&app.checkout_key, "/v1/invoices").await.expect(200);
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn create_refuses_bad_input_and_wrong_keys() {
    let app = spawn_app().await;
    let post = |body: Value| app.post(&app.checkout_key, "/v1/invoices", body);
    for bad in ["0", "01", "-5", "1.5", "abc", "", "1000000000001"] {
        post(json!({"price_amount": bad})).await.expect_error_param(
            400,
            "invalid_request",
            "price_amount",
        );
    }
    post(json!({"price_amount": 100})).await.expect_error_param(
        400,
        "invalid_request",
        "price_amount",
    );
    post(json!({}))
        .await
        .expect_error_param(400, "invalid_request", "price_amount");
    post(json!({"price_amount": "100", "price_currency": "EUR"}))
        .await
        .expect_error_param(400, "unsupported_currency", "price_currency");
    post(json!({"price_amount": "100", "expires_in": 10}))
        .await
        .expect_error_param(400, "invalid_request", "expires_in");
    post(json!({"price_amount": "100", "overpayment_policy": "give"}))
        .await
        .expect_error_param(400, "invalid_request", "overpayment_policy");
    post(json!({"price_amount": "100", "accepted_chains": ["nochain"]}))
        .await
        .expect_client_error(400);
    post(json!({"price_amount": "100", "accepted_assets": ["NOPE"]}))
        .await
        .expect_error_param(400, "invalid_request", "accepted_assets");
    post(json!({"price_amount": "100", "accepted_chains": ["zksync"]}))
        .await
        .expect_error_param(422, "chain_unavailable", "accepted_chains");
    // Wrong kinds, missing scope.
    app.post(
        &app.wallet_key,
        "/v1/invoices",
        json!({"price_amount": "100"}),
    )
    .await
    .expect_error(403, "wrong_key_kind");
    app.get(&app.payout_key, "/v1/invoices")
        .await
        .expect_error(403, "wrong_key_kind");
    let ro = app
        .create_key(
            &app.checkout_key,
            json!({"name": "ro", "kind": "checkout", "scopes": ["invoices:read"]}),
        )
        .await;
    let ro = s(&ro["token"]);
    app.post(&ro, "/v1/invoices", json!({"price_amount": "100"}))
        .await
        .expect_error(403, "missing_scope");
    let inv = invoice(&app, "100", json!({})).await;
    app.post(
        &ro,
        &format!("/v1/invoices/{}/cancel", s(&inv["id"])),
        json!({}),
    )
    .await
    .expect_error(403, "missing_scope");
    app.get(&ro, &format!("/v1/invoices/{}", s(&inv["id"])))
        .await
        .expect(200);
    // Another project's invoice is not found.
    let other = app.other_project_key("other", "test", "checkout");
    app.get(&other, &format!("/v1/invoices/{}", s(&inv["id"])))
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn an_exact_payment_makes_the_invoice_paid_with_each_event_once() {
    let app = spawn_app().await;
    let inv = invoice(&app, "4000", json!({})).await;
    let t = pay(&app, &inv, "ethereum", "USDT", "40000000", true).await;
    assert_eq!(t["object"], "test_transfer");
    assert_eq!(t["owner"], "invoice");
    assert_eq!(t["owner_id"], inv["id"]);
    let got = get(&app, &inv).await;
    assert_eq!(got["status"], "paid", "{got}");
    assert_eq!(got["received_amount"], "4000");
    assert_eq!(got["excess_amount"], "0");
    assert!(got["paid_at"].is_string());
    assert_eq!(
        types(&app, &inv).await,
        vec!["invoice.created", "invoice.pending", "invoice.paid"]
    );
    // The merchant's money, not a customer deposit.
    let deposits = app.get(&app.wallet_key, "/v1/deposits").await.expect(200);
    assert!(
        deposits["data"].as_array().unwrap().is_empty(),
        "{deposits}"
    );
    assert!(app.events("type=deposit.detected").await.is_empty());
    // Merchant money gets its automatic conversion row (skipped: test projects never swap).
    let conv = app
        .get(&app.payout_key, "/v1/conversions")
        .await
        .expect(200);
    let rows = conv["data"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{conv}");
    assert_eq!(rows[0]["from_asset"], "USDT");
    assert_eq!(rows[0]["status"], "skipped");
    assert_eq!(rows[0]["amount_in"], "40000000");
    // Cancel after money arrived is refused.
    app.post(
        &app.checkout_key,
        &format!("/v1/invoices/{}/cancel", s(&inv["id"])),
        json!({}),
    )
    .await
    .expect_error(409, "invalid_state");
}

#[tokio::test]
async fn within_half_a_percent_is_paid_and_beyond_is_not() {
    let app = spawn_app().await;
    // 100.00 USD: 99.50 is paid, 100.50 is paid.
    let a = invoice(&app, "10000", json!({})).await;
    pay(&app, &a, "ethereum", "USDT", "99500000", true).await;
    assert_eq!(get(&app, &a).await["status"], "paid");
    let b = invoice(&app, "10000", json!({})).await;
    pay(&app, &b, "ethereum", "USDT", "100500000", true).await;
    let b = get(&app, &b).await;
    assert_eq!(b["status"], "paid");
    assert_eq!(b["excess_amount"], "0");
    // One atomic unit beyond: overpaid.
    let c = invoice(&app, "10000", json!({})).await;
    pay(&app, &c, "ethereum", "USDT", "100500001", true).await;
    let c2 = get(&app, &c).await;
    assert_eq!(c2["status"], "overpaid");
    assert_eq!(c2["excess_amount"], "50");
    assert_eq!(c2["received_amount"], "10050");
    assert!(c2["paid_at"].is_string());
    assert_eq!(
        types(&app, &c).await,
        vec!["invoice.created", "invoice.pending", "invoice.overpaid"]
    );
}

#[tokio::test]
async fn an_underpayment_extends_the_window_and_a_second_payment_completes_it() {
    let app = spawn_app().await;
    let inv = invoice(
        &app,
        "4000",
        json!({"expires_in": 600, "accepted_chains": ["ethereum", "polygon"],
               "accepted_assets": ["USDT", "USDC"]}),
    )
    .await;
    let before = chrono::DateTime::parse_from_rfc3339(inv["expires_at"].as_str().unwrap()).unwrap();
    pay(&app, &inv, "ethereum", "USDT", "30000000", true).await;
    let got = get(&app, &inv).await;
    assert_eq!(got["status"], "underpaid", "{got}");
    assert_eq!(got["received_amount"], "3000");
    assert_eq!(got["extensions"], 1);
    let after = chrono::DateTime::parse_from_rfc3339(got["expires_at"].as_str().unwrap()).unwrap();
    assert!(
        after - before >= chrono::Duration::minutes(30),
        "{before} -> {after}"
    );
    // The remainder, in another coin on another EVM chain (same address), at its locked rate.
    let polygon = quote(&inv, "polygon", "USDC").clone();
    assert_eq!(polygon["amount_atomic"], "40000000");
    pay(&app, &inv, "polygon", "USDC", "10000000", true).await;
    let got = get(&app, &inv).await;
    assert_eq!(got["status"], "paid", "{got}");
    assert_eq!(got["received_amount"], "4000");
    assert_eq!(
        types(&app, &inv).await,
        vec![
            "invoice.created",
            "invoice.pending",
            "invoice.underpaid",
            "invoice.pending",
            "invoice.paid"
        ]
    );
}

#[tokio::test]
async fn underpaid_windows_are_extended_at_most_three_times() {
    let app = spawn_app().await;
    let inv = invoice(&app, "10000", json!({})).await;
    for i in 1..=4 {
        pay(&app, &inv, "ethereum", "USDT", "1000000", true).await;
        let got = get(&app, &inv).await;
        assert_eq!(got["status"], "underpaid");
        assert_eq!(got["extensions"], i.min(3), "{got}");
    }
    let t = types(&app, &inv).await;
    assert_eq!(t.iter().filter(|x| *x == "invoice.underpaid").count(), 4);
}

#[tokio::test]
async fn overpaid_under_refund_holds_the_excess_and_keep_does_not() {
    let app = spawn_app().await;
    let keep = invoice(&app, "1000", json!({"overpayment_policy": "keep"})).await;
    assert_eq!(keep["overpayment_policy"], "keep");
    pay(&app, &keep, "ethereum", "USDT", "15000000", true).await;
    let k = get(&app, &keep).await;
    assert_eq!(k["status"], "overpaid");
    assert_eq!(k["excess_amount"], "500");
    let refund = invoice(&app, "1000", json!({"overpayment_policy": "refund"})).await;
    pay(&app, &refund, "ethereum", "USDT", "15000000", true).await;
    let r = get(&app, &refund).await;
    assert_eq!(r["status"], "overpaid");
    assert_eq!(r["overpayment_policy"], "refund");
    assert_eq!(r["excess_amount"], "500");
    // The merchant's own funds (payouts without customer_id): 30 USDT arrived, the refund's
    // 5 USDT excess is locked, so 25.000001 is more than is available and 25 is not.
    let payout = |amount: &str| {
        json!({"chain": "ethereum", "asset": "USDT", "decimals": 6, "amount": amount,
               "to_address": crate::helpers::external_address(9)})
    };
    app.create_payout(payout("25000001"))
        .await
        .expect_error(402, "insufficient_funds");
    app.create_payout(payout("25000000")).await.expect(202);
}

#[tokio::test]
async fn expiry_follows_the_test_clock_and_late_money_is_still_credited() {
    let app = spawn_app().await;
    let inv = invoice(&app, "2000", json!({"expires_in": 300})).await;
    let untouched = invoice(&app, "2000", json!({"expires_in": 3600})).await;
    let clock = app
        .post(
            &app.wallet_key,
            "/v1/test/clock",
            json!({"advance_seconds": 301}),
        )
        .await
        .expect(200);
    assert_eq!(clock["object"], "test_clock");
    let got = get(&app, &inv).await;
    assert_eq!(got["status"], "expired", "{got}");
    assert!(got["expired_at"].is_string());
    assert_eq!(get(&app, &untouched).await["status"], "open");
    // Late money: credited, marked late, the status stays.
    pay(&app, &inv, "ethereum", "USDT", "20000000", true).await;
    let got = get(&app, &inv).await;
    assert_eq!(got["status"], "expired");
    assert_eq!(got["received_amount"], "2000");
    assert_eq!(
        types(&app, &inv).await,
        vec!["invoice.created", "invoice.expired", "invoice.late_payment"]
    );
    let expired = app
        .get(&app.checkout_key, "/v1/invoices?status=expired")
        .await
        .expect(200);
    assert_eq!(expired["data"].as_array().unwrap().len(), 1);
    // The clock refuses nonsense.
    app.post(
        &app.wallet_key,
        "/v1/test/clock",
        json!({"advance_seconds": 0}),
    )
    .await
    .expect_error_param(400, "invalid_request", "advance_seconds");
    app.post(
        &app.checkout_key,
        "/v1/test/clock",
        json!({"advance_seconds": 5}),
    )
    .await
    .expect_error(403, "test_mode_only");
}

#[tokio::test]
async fn the_expiry_worker_expires_without_a_request() {
    let app = spawn_app().await;
    let inv = invoice(&app, "2000", json!({"expires_in": 300})).await;
    // Move the clock by 299 s: not due yet; the worker expires it after real time passes.
    app.post(
        &app.wallet_key,
        "/v1/test/clock",
        json!({"advance_seconds": 299}),
    )
    .await
    .expect(200);
    assert_eq!(get(&app, &inv).await["status"], "open");
    let path = format!("/v1/invoices/{}", s(&inv["id"]));
    let got = app
        .wait_for(&app.checkout_key, &path, |v| v["status"] == "expired")
        .await;
    assert_eq!(got["status"], "expired");
}

#[tokio::test]
async fn cancel_keeps_the_address_watched_and_later_money_is_credited() {
    let app = spawn_app().await;
    let inv = invoice(&app, "2000", json!({})).await;
    let path = format!("/v1/invoices/{}/cancel", s(&inv["id"]));
    let c = app
        .post(&app.checkout_key, &path, json!({}))
        .await
        .expect(200);
    assert_eq!(c["status"], "canceled");
    assert!(c["canceled_at"].is_string());
    // Again: the canceled invoice, no second event.
    app.post(&app.checkout_key, &path, json!({}))
        .await
        .expect(200);
    pay(&app, &inv, "ethereum", "USDT", "20000000", true).await;
    let got = get(&app, &inv).await;
    assert_eq!(got["status"], "canceled");
    assert_eq!(got["received_amount"], "2000");
    assert_eq!(
        types(&app, &inv).await,
        vec![
            "invoice.created",
            "invoice.canceled",
            "invoice.late_payment"
        ]
    );
    // The clock never expires a canceled invoice.
    app.post(
        &app.wallet_key,
        "/v1/test/clock",
        json!({"advance_seconds": 7200}),
    )
    .await
    .expect(200);
    assert_eq!(get(&app, &inv).await["status"], "canceled");
}

#[tokio::test]
async fn a_transfer_below_finality_is_pending_and_on_time_even_after_the_deadline() {
    let app = spawn_app().await;
    // polygon needs 128 confirmations: the block clock will not confirm it during the test.
    let inv = app
        .post_idem(
            &app.checkout_key,
            "/v1/invoices",
            json!({"price_amount": "1000", "accepted_chains": ["polygon"],
                   "accepted_assets": ["USDT"], "expires_in": 300}),
            &idem(),
        )
        .await
        .expect(201);
    pay(&app, &inv, "polygon", "USDT", "10000000", false).await;
    let got = get(&app, &inv).await;
    assert_eq!(got["status"], "pending", "{got}");
    assert_eq!(got["received_amount"], "0");
    // The deadline passes while pending: not expired (seen before the deadline).
    app.post(
        &app.wallet_key,
        "/v1/test/clock",
        json!({"advance_seconds": 600}),
    )
    .await
    .expect(200);
    assert_eq!(get(&app, &inv).await["status"], "pending");
    app.post(
        &app.wallet_key,
        "/v1/test/blocks",
        json!({"chain": "polygon", "count": 130}),
    )
    .await
    .expect(200);
    let got = get(&app, &inv).await;
    assert_eq!(got["status"], "paid", "{got}");
    assert_eq!(
        types(&app, &inv).await,
        vec!["invoice.created", "invoice.pending", "invoice.paid"]
    );
}

#[tokio::test]
async fn a_paid_invoice_whose_payment_is_reorged_out_keeps_its_status() {
    let app = spawn_app().await;
    let inv = invoice(&app, "1000", json!({})).await;
    pay(&app, &inv, "ethereum", "USDT", "10000000", true).await;
    assert_eq!(get(&app, &inv).await["status"], "paid");
    app.post(
        &app.wallet_key,
        "/v1/test/reorg",
        json!({"chain": "ethereum", "depth": 12}),
    )
    .await
    .expect(200);
    let got = get(&app, &inv).await;
    assert_eq!(got["status"], "paid");
    assert_eq!(got["received_amount"], "0");
    assert_eq!(
        types(&app, &inv).await,
        vec![
            "invoice.created",
            "invoice.pending",
            "invoice.paid",
            "invoice.payment_orphaned"
        ]
    );
}

#[tokio::test]
async fn test_transfers_reach_customer_addresses_and_refuse_strangers() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let w = app.create_wallet(&s(&c["id"]), "ethereum").await;
    let t = app
        .post_idem(
            &app.wallet_key,
            "/v1/test/transfers",
            json!({"chain": "ethereum", "asset": "USDT", "decimals": 6, "amount": "5000000",
                   "to_address": s(&w["address"])}),
            &idem(),
        )
        .await
        .expect(201);
    assert_eq!(t["owner"], "customer");
    assert_eq!(t["owner_id"], c["id"]);
    assert_eq!(
        app.available(&s(&c["id"]), "ethereum", "USDT").await,
        5_000_000
    );
    let d = app.events("type=deposit.confirmed").await;
    assert_eq!(d.len(), 1);
    let body = |to: String| {
        json!({"chain": "ethereum", "asset": "USDT", "decimals": 6, "amount": "1",
               "to_address": to})
    };
    app.post(
        &app.wallet_key,
        "/v1/test/transfers",
        body(crate::helpers::external_address(7)),
    )
    .await
    .expect_error_param(422, "unknown_address", "to_address");
    app.post(&app.wallet_key, "/v1/test/transfers", body("nope".into()))
        .await
        .expect_error_param(400, "invalid_request", "to_address");
    let mut bad = body(s(&w["address"]));
    bad["decimals"] = json!(18);
    app.post(&app.wallet_key, "/v1/test/transfers", bad)
        .await
        .expect_error(400, "decimals_mismatch");
    // The customer's address on a chain where it has none is not custodied there.
    app.post(
        &app.wallet_key,
        "/v1/test/transfers",
        json!({"chain": "bsc", "asset": "USDT", "decimals": 18, "amount": "1",
               "to_address": s(&w["address"])}),
    )
    .await
    .expect_error_param(422, "unknown_address", "to_address");
    app.post(
        &app.checkout_key,
        "/v1/test/transfers",
        body(s(&w["address"])),
    )
    .await
    .expect_error(403, "test_mode_only");
}

#[tokio::test]
async fn a_kill_between_transfer_and_confirmation_ends_paid_with_each_event_once() {
    let mut app = spawn_app().await;
    let inv = invoice(&app, "3000", json!({})).await;
    pay(&app, &inv, "ethereum", "USDT", "30000000", false).await;
    assert_eq!(get(&app, &inv).await["status"], "pending");
    app.restart(); // SIGKILL, then start again on the same data dir
    app.post(
        &app.wallet_key,
        "/v1/test/blocks",
        json!({"chain": "ethereum", "count": 12}),
    )
    .await
    .expect(200);
    let path = format!("/v1/invoices/{}", s(&inv["id"]));
    let got = app
        .wait_for(&app.checkout_key, &path, |v| v["status"] == "paid")
        .await;
    assert_eq!(got["received_amount"], "3000");
    app.restart();
    app.post(
        &app.wallet_key,
        "/v1/test/blocks",
        json!({"chain": "ethereum", "count": 5}),
    )
    .await
    .expect(200);
    assert_eq!(
        types(&app, &inv).await,
        vec!["invoice.created", "invoice.pending", "invoice.paid"]
    );
    assert_eq!(get(&app, &inv).await["status"], "paid");
}

#[tokio::test]
async fn invoice_money_is_swept_like_a_deposit() {
    let app = spawn_app().await;
    let inv = invoice(&app, "4000", json!({})).await;
    pay(&app, &inv, "ethereum", "USDT", "40000000", true).await;
    app.settle().await;
    let sweeps = app.get(&app.wallet_key, "/v1/sweeps").await.expect(200);
    let swept = sweeps["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["status"] == "confirmed" && s["amount"] == "40000000");
    assert!(swept, "the invoice address was not swept: {sweeps}");
}

#[tokio::test]
async fn the_test_clock_moves_key_expiry_too() {
    let app = spawn_app().await;
    let k = app
        .create_key(&app.wallet_key, json!({"name": "rolled", "kind": "wallet"}))
        .await;
    let old = s(&k["token"]);
    let rolled = app
        .post(
            &app.wallet_key,
            &format!("/v1/api_keys/{}/roll", s(&k["id"])),
            json!({"grace_hours": 1}),
        )
        .await
        .expect_success();
    let new = s(&rolled["token"]);
    app.get(&old, "/v1/ping").await.expect(200);
    app.post(
        &app.wallet_key,
        "/v1/test/clock",
        json!({"advance_seconds": 3601}),
    )
    .await
    .expect(200);
    app.get(&old, "/v1/ping")
        .await
        .expect_error(401, "invalid_api_key");
    app.get(&new, "/v1/ping").await.expect(200);
    app.get(&app.wallet_key, "/v1/ping").await.expect(200);
}
