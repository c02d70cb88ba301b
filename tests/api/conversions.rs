//! Conversions in test mode (SPEC.md section 4, Conversions; DECISIONS.md section 14): rules
//! on the simulated chain, quotes from the test prices, `POST /v1/conversions` refused with
//! `conversion_test_mode`, lists and reads.

use serde_json::{json, Value};

use crate::helpers::*;

fn rule_of<'a>(list: &'a Value, chain: &str) -> &'a Value {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["chain"] == chain)
        .unwrap_or_else(|| panic!("no rule for {chain}: {list}"))
}

#[tokio::test]
async fn rules_list_one_per_enabled_chain_with_stablecoins_first() {
    let app = spawn_app().await;
    let l = app
        .get(&app.payout_key, "/v1/conversion/rules")
        .await
        .expect(200);
    assert_eq!(l["object"], "list", "{l}");
    let chains = app.get(&app.payout_key, "/v1/chains").await.expect(200);
    let listed: Vec<&str> = chains["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["enabled_for_tenant"] == true)
        .map(|c| c["chain"].as_str().unwrap())
        .collect();
    let rules: Vec<&str> = l["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["chain"].as_str().unwrap())
        .collect();
    assert_eq!(rules, listed, "one rule per enabled network");
    let eth = rule_of(&l, "ethereum");
    assert_eq!(eth["object"], "conversion_rule");
    assert_eq!(
        eth["supported"], true,
        "test mode converts on the simulated chain: {eth}"
    );
    assert_eq!(eth["unsupported_reason"], Value::Null);
    assert_eq!(eth["enabled"], false);
    assert_eq!(
        eth["target_asset"], "USDT",
        "default target is the first stablecoin"
    );
    assert_eq!(eth["keep_assets"], json!([]));
    assert_eq!(eth["updated_at"], Value::Null);
    let targets = eth["targets"].as_array().unwrap();
    let first_other = targets.iter().position(|t| t["stable"] == false).unwrap();
    assert!(first_other >= 1, "{eth}");
    assert!(targets[..first_other].iter().all(|t| t["stable"] == true));
    assert!(targets[first_other..].iter().all(|t| t["stable"] == false));
    assert!(
        targets
            .iter()
            .any(|t| t["symbol"] == "ETH" && t["is_native"] == true),
        "{eth}"
    );
    // A wallet key is the wrong kind (DECISIONS.md section 4: conversions are payout keys').
    app.get(&app.wallet_key, "/v1/conversion/rules")
        .await
        .expect_error(403, "wrong_key_kind");
}

#[tokio::test]
async fn a_rule_is_set_validated_and_read_back() {
    let app = spawn_app().await;
    let r = app
        .send(
            reqwest::Method::PUT,
            Some(&app.payout_key),
            "/v1/conversion/rules/ethereum",
            Some(
                &json!({"enabled": true, "target_asset": "USDC", "keep_assets": ["USDT", "USDT"]}),
            ),
            &[],
        )
        .await
        .expect(200);
    assert_eq!(r["object"], "conversion_rule");
    assert_eq!(r["chain"], "ethereum");
    assert_eq!(r["enabled"], true);
    assert_eq!(r["target_asset"], "USDC");
    assert_eq!(r["keep_assets"], json!(["USDT"]), "duplicates are dropped");
    assert_timestamp(&r["updated_at"]);
    let l = app
        .get(&app.payout_key, "/v1/conversion/rules")
        .await
        .expect(200);
    let eth = rule_of(&l, "ethereum");
    assert_eq!(eth["enabled"], true);
    assert_eq!(eth["target_asset"], "USDC");
    // Other chains are untouched.
    assert_eq!(rule_of(&l, "bsc")["enabled"], false);

    let put = |body: Value, chain: &'static str| {
        let app = &app;
        async move {
            app.send(
                reqwest::Method::PUT,
                Some(&app.payout_key),
                &format!("/v1/conversion/rules/{chain}"),
                Some(&body),
                &[],
            )
            .await
        }
    };
    put(json!({"enabled": true, "target_asset": "DOGE"}), "ethereum")
        .await
        .expect_error_param(400, "invalid_target", "target_asset");
    put(
        json!({"enabled": true, "target_asset": "USDT", "keep_assets": ["NOPE"]}),
        "ethereum",
    )
    .await
    .expect_error_param(400, "invalid_keep_asset", "keep_assets");
    put(json!({"target_asset": "USDT"}), "ethereum")
        .await
        .expect_error_param(400, "invalid_request", "enabled");
    put(json!({"enabled": true, "target_asset": "USDT"}), "nochain")
        .await
        .expect_error_param(400, "invalid_request", "chain");
    // A refused update left the rule as it was.
    let l = app
        .get(&app.payout_key, "/v1/conversion/rules")
        .await
        .expect(200);
    assert_eq!(rule_of(&l, "ethereum")["target_asset"], "USDC");
    // Switching it off works and is shown.
    let off = put(
        json!({"enabled": false, "target_asset": "USDT"}),
        "ethereum",
    )
    .await
    .expect(200);
    assert_eq!(off["enabled"], false);
}

#[tokio::test]
async fn a_test_mode_quote_uses_the_test_prices() {
    let app = spawn_app().await;
    // 1 ETH at the fixed test price 3000.00 into USDT (6 decimals on ethereum).
    let q = app
        .post(
            &app.payout_key,
            "/v1/conversions/quote",
            json!({"chain": "ethereum", "from_asset": "ETH", "to_asset": "USDT",
                   "amount": "1000000000000000000"}),
        )
        .await
        .expect(200);
    assert_eq!(q["object"], "conversion_quote", "{q}");
    assert_eq!(q["market"], "test");
    assert_amount(&q, "amount_in", "1000000000000000000", "1");
    assert_amount(&q, "expected_out", "3000000000", "3000");
    // Default slippage 50 bps.
    assert_eq!(q["slippage_bps"], 50);
    assert_amount(&q, "min_out", "2985000000", "2985");
    assert!(decimal_eq(q["rate"].as_str().unwrap(), "3000"), "{q}");
    assert!(decimal_eq(q["amount_usd"].as_str().unwrap(), "3000"), "{q}");
    assert_eq!(q["fee_cents"], 0);
    assert_eq!(q["needs_approval"], false);
    // Nothing in the treasury yet.
    assert_amount(&q, "available", "0", "0");

    // A changed test price moves the quote; slippage is taken from the request.
    app.post(
        &app.wallet_key,
        "/v1/test/prices",
        json!({"symbol": "ETH", "usd": "2500.00"}),
    )
    .await
    .expect_success();
    let q = app
        .post(
            &app.payout_key,
            "/v1/conversions/quote",
            json!({"chain": "ethereum", "from_asset": "USDT", "to_asset": "ETH",
                   "amount": "5000000000", "slippage_bps": 100}),
        )
        .await
        .expect(200);
    assert_amount(&q, "expected_out", "2000000000000000000", "2");
    assert_amount(&q, "min_out", "1980000000000000000", "1.98");
    assert_eq!(q["slippage_bps"], 100);

    // Refusals.
    let quote = |body: Value| {
        let app = &app;
        async move {
            app.post(&app.payout_key, "/v1/conversions/quote", body)
                .await
        }
    };
    quote(json!({"chain": "ethereum", "from_asset": "ETH", "to_asset": "ETH", "amount": "1"}))
        .await
        .expect_error_param(400, "invalid_request", "to_asset");
    quote(json!({"chain": "ethereum", "from_asset": "NOPE", "to_asset": "ETH", "amount": "1"}))
        .await
        .expect_error_param(400, "unknown_asset", "from_asset");
    quote(json!({"chain": "ethereum", "from_asset": "ETH", "to_asset": "USDT", "amount": "0"}))
        .await
        .expect_error_param(400, "invalid_request", "amount");
    quote(
        json!({"chain": "ethereum", "from_asset": "ETH", "to_asset": "USDT",
                 "amount": "1", "slippage_bps": 5001}),
    )
    .await
    .expect_error_param(400, "invalid_request", "slippage_bps");
}

#[tokio::test]
async fn available_is_the_free_treasury() {
    let app = spawn_app().await;
    let (_c, _w, _d) = app.funded_customer("ethereum", "USDT", 6, "7000000").await;
    // Not swept yet: the coins are on the deposit address, not in the treasury.
    let body =
        json!({"chain": "ethereum", "from_asset": "USDT", "to_asset": "ETH", "amount": "1000000"});
    let q = app
        .post(&app.payout_key, "/v1/conversions/quote", body.clone())
        .await
        .expect(200);
    assert_amount(&q, "available", "0", "0");
    app.settle().await;
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["treasury"]), 7_000_000, "{t}");
    let q = app
        .post(&app.payout_key, "/v1/conversions/quote", body)
        .await
        .expect(200);
    assert_amount(&q, "available", "7000000", "7");
}

#[tokio::test]
async fn manual_conversions_are_refused_in_test_mode() {
    let app = spawn_app().await;
    let body =
        json!({"chain": "ethereum", "from_asset": "ETH", "to_asset": "USDT", "amount": "1000"});
    // The Idempotency-Key is required first (SPEC.md section 7).
    app.post(&app.payout_key, "/v1/conversions", body.clone())
        .await
        .expect_error_param(400, "idempotency_key_required", "Idempotency-Key");
    app.post_idem(&app.payout_key, "/v1/conversions", body, &idem())
        .await
        .expect_error(422, "conversion_test_mode");
    // Nothing was written.
    let l = app
        .get(&app.payout_key, "/v1/conversions")
        .await
        .expect(200);
    assert_eq!(assert_list(&l).len(), 0, "{l}");
}

#[tokio::test]
async fn lists_filter_and_reads_answer_404_for_unknown_ids() {
    let app = spawn_app().await;
    for q in [
        "/v1/conversions?status=queued",
        "/v1/conversions?chain=ethereum",
        "/v1/conversions?kind=manual",
        "/v1/conversions?limit=5",
    ] {
        let l = app.get(&app.payout_key, q).await.expect(200);
        assert_eq!(assert_list(&l).len(), 0, "{q}: {l}");
    }
    app.get(&app.payout_key, "/v1/conversions?status=bogus")
        .await
        .expect_error_param(400, "invalid_request", "status");
    app.get(&app.payout_key, "/v1/conversions?kind=bogus")
        .await
        .expect_error_param(400, "invalid_request", "kind");
    let id = "0190a4b2-7c1e-7000-8000-000000000001";
    app.get(&app.payout_key, &format!("/v1/conversions/{id}"))
        .await
        .expect_error(404, "not_found");
    app.get(&app.payout_key, &format!("/v1/conversions/batches/{id}"))
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn a_test_mode_invoice_payment_gets_a_skipped_automatic_row() {
    let app = spawn_app().await;
    app.send(
        reqwest::Method::PUT,
        Some(&app.payout_key),
        "/v1/conversion/rules/ethereum",
        Some(&json!({"enabled": true, "target_asset": "USDC"})),
        &[],
    )
    .await
    .expect(200);
    let inv = app
        .post_idem(
            &app.checkout_key,
            "/v1/invoices",
            json!({"price_amount": "1000", "accepted_chains": ["ethereum"], "accepted_assets": ["USDT"]}),
            &idem(),
        )
        .await
        .expect(201);
    let addr = inv["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["chain"] == "ethereum")
        .map(|a| s(&a["address"]))
        .unwrap();
    app.post_idem(
        &app.wallet_key,
        "/v1/test/transfers",
        json!({"chain": "ethereum", "asset": "USDT", "decimals": 6, "amount": "10000000",
               "to_address": addr}),
        &idem(),
    )
    .await
    .expect(201);
    // One row per payment, written when it is credited; nothing swaps on the simulated chain.
    let l = app
        .get(&app.payout_key, "/v1/conversions?kind=auto")
        .await
        .expect(200);
    let rows = assert_list(&l);
    assert_eq!(rows.len(), 1, "{l}");
    let r = &rows[0];
    assert_eq!(r["object"], "conversion");
    assert_eq!(r["kind"], "auto");
    assert_eq!(r["status"], "skipped");
    assert_eq!(r["reason"], "test_mode");
    assert_eq!(r["from_asset"], "USDT");
    assert_eq!(r["to_asset"], "USDC", "the rule's target at the time");
    assert_amount(r, "amount_in", "10000000", "10");
    assert!(r["payment_id"].is_string(), "{r}");
    let got = app
        .get(&app.payout_key, &format!("/v1/conversions/{}", s(&r["id"])))
        .await
        .expect(200);
    assert_eq!(got["id"], r["id"]);
    let l = app
        .get(&app.payout_key, "/v1/conversions?kind=manual")
        .await
        .expect(200);
    assert!(assert_list(&l).is_empty());
}
