//! Issue points 3 and 10: the double-entry ledger seen through customer balances, wallet
//! balances (`source=ledger|chain|both`) and the project treasury.

use serde_json::{json, Value};

use crate::helpers::*;

fn assert_balance_item(b: &Value) {
    assert!(!b["asset"].is_null(), "{b}");
    for f in ["available", "locked", "total"] {
        atomic(&b[f]);
        assert!(b[format!("{f}_decimal")].is_string(), "{f}_decimal in {b}");
    }
    assert_eq!(
        atomic(&b["total"]),
        atomic(&b["available"]) + atomic(&b["locked"]),
        "total = available + locked: {b}"
    );
}

#[tokio::test]
async fn customer_balances_report_available_locked_total_with_decimal_twins() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "1500000").await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "bsc").await;
    app.test_deposit(&cid, "bsc", "USDT", 18, "2500000000000000000", None)
        .await;
    let l = app
        .get(&app.wallet_key, &format!("/v1/customers/{cid}/balances"))
        .await
        .expect(200);
    assert_eq!(l["object"], "balance_list", "{l}");
    assert_eq!(l["customer_id"], c["id"]);
    for b in l["data"].as_array().unwrap() {
        assert_balance_item(b);
        assert!(
            b.get("onchain").is_none_or(|v| v.is_null()),
            "onchain only when asked: {b}"
        );
    }
    let eth = find_asset_item(&l["data"], "ethereum", "USDT").expect("ethereum USDT");
    assert_amount(&eth, "available", "1500000", "1.5");
    assert_amount(&eth, "total", "1500000", "1.5");
    let bsc = find_asset_item(&l["data"], "bsc", "USDT").expect("bsc USDT");
    assert_amount(&bsc, "available", "2500000000000000000", "2.5");
    // Payout keys read balances too.
    let l2 = app
        .get(&app.payout_key, &format!("/v1/customers/{cid}/balances"))
        .await
        .expect(200);
    assert_eq!(l2, l);
}

#[tokio::test]
async fn a_payout_locks_funds_until_it_settles() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    app.create_payout(
        json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
        "decimals": 6, "amount": "2000000", "to_address": external_address(0x51) }),
    )
    .await
    .expect(202);
    let b = app.customer_balance(&cid, "ethereum", "USDT").await;
    assert_amount(&b, "available", "3000000", "3");
    assert_amount(&b, "locked", "2000000", "2");
    assert_amount(&b, "total", "5000000", "5");
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["liability"]), 5_000_000, "{t}");
    app.settle().await;
    let b = app.customer_balance(&cid, "ethereum", "USDT").await;
    assert_amount(&b, "available", "3000000", "3");
    assert_amount(&b, "locked", "0", "0");
    assert_amount(&b, "total", "3000000", "3");
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["liability"]), 3_000_000, "{t}");
    assert_eq!(signed_atomic(&t["treasury"]), 3_000_000, "{t}");
    assert_eq!(signed_atomic(&t["surplus"]), 0, "{t}");
}

#[tokio::test]
async fn treasury_follows_deposits_through_sweeps() {
    let app = spawn_app().await;
    // Any key kind reads the treasury.
    for k in [&app.checkout_key, &app.payout_key, &app.wallet_key] {
        let t = app.get(k, "/v1/balances").await.expect(200);
        assert_eq!(t["object"], "treasury", "{t}");
        assert!(t["data"].is_array());
    }
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "1500000").await;
    let cid = s(&c["id"]);
    let t = app.treasury("ethereum", "USDT").await;
    for f in ["deposits", "treasury", "in_transit", "liability", "surplus"] {
        assert!(t[f].is_string(), "{f} is a string: {t}");
    }
    assert_eq!(signed_atomic(&t["deposits"]), 1_500_000, "{t}");
    assert_eq!(signed_atomic(&t["in_transit"]), 0, "{t}");
    assert_eq!(signed_atomic(&t["treasury"]), 0, "{t}");
    assert_eq!(signed_atomic(&t["liability"]), 1_500_000, "{t}");
    assert_eq!(signed_atomic(&t["surplus"]), 0, "{t}");

    // Next block: the simulated chain sweeps it (in transit).
    app.mine(1).await;
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["deposits"]), 0, "{t}");
    assert_eq!(signed_atomic(&t["in_transit"]), 1_500_000, "{t}");
    assert_eq!(signed_atomic(&t["liability"]), 1_500_000, "{t}");
    assert_eq!(signed_atomic(&t["surplus"]), 0, "{t}");
    // After the asset's confirmations: in the treasury.
    app.mine(12).await;
    app.mine(1).await;
    let t = app.treasury("ethereum", "USDT").await;
    assert_eq!(signed_atomic(&t["in_transit"]), 0, "{t}");
    assert_eq!(signed_atomic(&t["treasury"]), 1_500_000, "{t}");
    assert_eq!(signed_atomic(&t["surplus"]), 0, "{t}");
    // Sweeps never change customer balances.
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 1_500_000);
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify: {out}{err}");
}

#[tokio::test]
async fn wallet_balances_by_source() {
    let app = spawn_app().await;
    let (_c, w, _) = app.funded_customer("ethereum", "USDT", 6, "1500000").await;
    let wid = s(&w["id"]);
    let l = app
        .get(&app.wallet_key, &format!("/v1/wallets/{wid}/balances"))
        .await
        .expect(200);
    assert_eq!(l["object"], "balance_list");
    assert_eq!(l["wallet_id"], w["id"]);
    assert_eq!(l["source"], "ledger");
    let b = find_asset_item(&l["data"], "ethereum", "USDT").expect("USDT item");
    assert_balance_item(&b);
    assert_amount(&b, "available", "1500000", "1.5");
    assert!(b.get("onchain").is_none_or(|v| v.is_null()), "{b}");
    assert!(b.get("drift").is_none_or(|v| v.is_null()), "{b}");
    let l2 = app
        .get(
            &app.wallet_key,
            &format!("/v1/wallets/{wid}/balances?source=ledger"),
        )
        .await
        .expect(200);
    assert_eq!(l2, l);

    for source in ["chain", "both"] {
        let l = app
            .get(
                &app.wallet_key,
                &format!("/v1/wallets/{wid}/balances?source={source}"),
            )
            .await
            .expect(200);
        assert_eq!(l["source"], source);
        let b = find_asset_item(&l["data"], "ethereum", "USDT").expect("USDT item");
        assert_amount(&b, "onchain", "1500000", "1.5");
        assert_eq!(b["drift"], "0", "{b}");
    }
    // After the sweep the address is empty on chain and in the ledger: no drift.
    app.settle().await;
    let l = app
        .get(
            &app.wallet_key,
            &format!("/v1/wallets/{wid}/balances?source=both"),
        )
        .await
        .expect(200);
    let b = find_asset_item(&l["data"], "ethereum", "USDT").expect("USDT item");
    assert_eq!(b["onchain"], "0", "{b}");
    assert_eq!(b["drift"], "0", "{b}");
    let r = app
        .get(
            &app.wallet_key,
            &format!("/v1/wallets/{wid}/balances?source=moon"),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "source");
    app.get(
        &app.wallet_key,
        &format!("/v1/wallets/{}/balances", uuid::Uuid::now_v7()),
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn ledger_sums_stay_consistent_across_many_customers() {
    let app = spawn_app().await;
    let mut total = 0u128;
    let mut customers = Vec::new();
    for i in 1..=4u128 {
        let (c, _, _) = app
            .funded_customer("ethereum", "USDC", 6, &(i * 1_000_000).to_string())
            .await;
        total += i * 1_000_000;
        customers.push(s(&c["id"]));
    }
    app.create_payout(
        json!({ "customer_id": customers[3], "chain": "ethereum", "asset": "USDC",
        "decimals": 6, "amount": "1000000", "to_address": external_address(0x52) }),
    )
    .await
    .expect(202);
    app.mine(1).await;
    let t = app.treasury("ethereum", "USDC").await;
    let assets = signed_atomic(&t["deposits"])
        + signed_atomic(&t["in_transit"])
        + signed_atomic(&t["treasury"]);
    assert_eq!(
        signed_atomic(&t["surplus"]),
        assets - signed_atomic(&t["liability"]),
        "surplus = assets - liability: {t}"
    );
    let mut liability = 0u128;
    for c in &customers {
        let b = app.customer_balance(c, "ethereum", "USDC").await;
        liability += atomic(&b["total"]);
    }
    assert_eq!(signed_atomic(&t["liability"]), liability as i128, "{t}");
    assert_eq!(liability, total, "a payout in flight is still owed");
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify: {out}{err}");
}

/// On-chain balance reads are rate-limited harder than ledger reads (SPEC.md section 4):
/// each costs five requests of the key's per-minute budget.
#[tokio::test]
async fn chain_balance_reads_cost_more_of_the_rate_budget() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = c["id"].as_str().unwrap().to_string();
    let w = app.create_wallet(&cid, "ethereum").await;
    let wid = w["id"].as_str().unwrap().to_string();
    // A fresh budget of 10 requests a minute for the key.
    app.cli_ok(&["project", "set", "default", "--requests-per-minute", "10"]);
    let ledger = format!("/v1/wallets/{wid}/balances");
    let chain = format!("/v1/wallets/{wid}/balances?source=chain");
    for _ in 0..3 {
        app.get(&app.wallet_key, &ledger).await.expect(200); // 3 used
    }
    app.get(&app.wallet_key, &chain).await.expect(200); // 8 used
    let r = app.get(&app.wallet_key, &chain).await; // needs 5, 2 left
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.body["code"], "rate_limited");
    assert!(r.headers.contains_key("retry-after"));
    // The refused read cost one; a ledger read still fits in what is left.
    app.get(&app.wallet_key, &ledger).await.expect(200);
    assert_eq!(app.get(&app.wallet_key, &ledger).await.status, 429);
}
