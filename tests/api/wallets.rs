//! Issue point 8: wallets — one address per (customer, chain), the same address on every EVM
//! chain, 200 with the existing wallet on repeat, the 422 availability codes, the daily
//! new-address cap, list and get.

use serde_json::{json, Value};

use crate::helpers::*;

fn assert_wallet_shape(w: &Value) {
    assert_eq!(w["object"], "wallet", "{w}");
    assert_uuid(&w["id"]);
    assert_uuid(&w["customer_id"]);
    assert!(w["chain"].is_string(), "{w}");
    assert_eq!(w["role"], "customer", "{w}");
    assert_eq!(w["status"], "active", "{w}");
    assert!(w.get("memo").is_some(), "memo present (null on EVM): {w}");
    assert_timestamp(&w["created_at"]);
}

fn is_evm_address(a: &str) -> bool {
    a.len() == 42 && a.starts_with("0x") && a[2..].chars().all(|c| c.is_ascii_hexdigit())
}

#[tokio::test]
async fn one_address_per_customer_and_chain_identical_across_evm_chains() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    let eth = app.create_wallet(&cid, "ethereum").await;
    assert_wallet_shape(&eth);
    assert_eq!(eth["customer_id"], c["id"]);
    assert_eq!(eth["chain"], "ethereum");
    assert!(eth["memo"].is_null());
    let addr = s(&eth["address"]);
    assert!(is_evm_address(&addr), "{addr}");

    let mut seen_ids = vec![s(&eth["id"])];
    for chain in [
        "bsc",
        "polygon",
        "arbitrum",
        "base",
        "avalanche",
        "optimism",
    ] {
        let w = app.create_wallet(&cid, chain).await;
        assert_wallet_shape(&w);
        assert_eq!(w["chain"], chain);
        assert!(
            w["address"].as_str().unwrap().eq_ignore_ascii_case(&addr),
            "{chain} address {} differs from ethereum {addr}",
            w["address"]
        );
        assert!(!seen_ids.contains(&s(&w["id"])), "wallet id reused");
        seen_ids.push(s(&w["id"]));
    }

    // Repeat: 200 with the same wallet.
    let again = app
        .post(
            &app.wallet_key,
            "/v1/wallets",
            json!({ "customer_id": cid, "chain": "ethereum" }),
        )
        .await
        .expect(200);
    assert_eq!(again, eth);

    // Another customer, another address.
    let c2 = app.create_customer(None).await;
    let w2 = app.create_wallet(&s(&c2["id"]), "ethereum").await;
    assert_ne!(
        w2["address"].as_str().unwrap().to_lowercase(),
        addr.to_lowercase()
    );

    let ev = app.events("type=wallet.created").await;
    assert_eq!(ev.len(), 8, "one wallet.created per new wallet");
    let ev_eth = ev.iter().find(|e| e["resource_id"] == eth["id"]).unwrap();
    assert_eq!(ev_eth["data"], eth);
}

#[tokio::test]
async fn list_and_get_wallets_with_filters() {
    let app = spawn_app().await;
    let a = app.create_customer(None).await;
    let b = app.create_customer(None).await;
    let (aid, bid) = (s(&a["id"]), s(&b["id"]));
    let a_eth = app.create_wallet(&aid, "ethereum").await;
    let a_bsc = app.create_wallet(&aid, "bsc").await;
    let b_eth = app.create_wallet(&bid, "ethereum").await;

    let l = app.get(&app.wallet_key, "/v1/wallets").await.expect(200);
    assert_eq!(
        ids(&l),
        vec![s(&b_eth["id"]), s(&a_bsc["id"]), s(&a_eth["id"])],
        "newest first"
    );
    let l = app
        .get(&app.wallet_key, &format!("/v1/wallets?customer_id={aid}"))
        .await
        .expect(200);
    assert_eq!(ids(&l), vec![s(&a_bsc["id"]), s(&a_eth["id"])]);
    let l = app
        .get(&app.wallet_key, "/v1/wallets?chain=ethereum")
        .await
        .expect(200);
    assert_eq!(ids(&l), vec![s(&b_eth["id"]), s(&a_eth["id"])]);
    let l = app
        .get(
            &app.wallet_key,
            &format!("/v1/wallets?customer_id={aid}&chain=bsc"),
        )
        .await
        .expect(200);
    assert_eq!(ids(&l), vec![s(&a_bsc["id"])]);
    let r = app
        .get(&app.wallet_key, "/v1/wallets?customer_id=not-a-uuid")
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "customer_id");

    let got = app
        .get(&app.wallet_key, &format!("/v1/wallets/{}", s(&a_bsc["id"])))
        .await
        .expect(200);
    assert_eq!(got, a_bsc);
    app.get(
        &app.wallet_key,
        &format!("/v1/wallets/{}", uuid::Uuid::now_v7()),
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn chains_that_are_not_issuing_refuse_new_addresses_with_422() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    // A wallet that exists before the switches go off.
    let held = app.create_wallet(&cid, "polygon").await;

    let post = |chain: &'static str| {
        let cid = cid.clone();
        let app = &app;
        async move {
            app.post(
                &app.wallet_key,
                "/v1/wallets",
                json!({ "customer_id": cid, "chain": chain }),
            )
            .await
        }
    };
    // zkSync is coming_soon.
    post("zksync").await.expect_error(422, "chain_not_live_yet");
    // Chain-level deposits off.
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "base",
        "--chain-deposits",
        "false",
    ]);
    post("base")
        .await
        .expect_error(422, "chain_deposits_disabled");
    // Status coming_soon set by the operator.
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "arbitrum",
        "--chain-status",
        "coming_soon",
    ]);
    post("arbitrum")
        .await
        .expect_error(422, "chain_not_live_yet");
    // A keypair chain listed but not issuable: the platform issues smart accounts only.
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "tron",
        "--chain-listed",
        "true",
    ]);
    post("tron")
        .await
        .expect_error(422, "account_kind_disabled");
    // An address the customer already holds is always returned.
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "polygon",
        "--chain-deposits",
        "false",
    ]);
    let again = post("polygon").await.expect(200);
    assert_eq!(again["id"], held["id"]);
    // Unknown chain identifiers are refused with param chain.
    let r = post("narnia").await;
    assert!(r.status == 400 || r.status == 422, "{}", r.text);
    assert_envelope(&r.body, "unknown chain");
    assert_eq!(r.body["param"], "chain");
    let l = app.get(&app.wallet_key, "/v1/wallets").await.expect(200);
    assert_eq!(
        assert_list(&l).len(),
        1,
        "a refused request wrote a wallet: {l}"
    );
}

#[tokio::test]
async fn daily_new_address_cap_is_429_quota_exceeded() {
    let app = spawn_app().await;
    app.project_set(&["--addresses-per-day", "2"]);
    let a = app.create_customer(None).await;
    let b = app.create_customer(None).await;
    app.create_wallet(&s(&a["id"]), "ethereum").await;
    app.create_wallet(&s(&a["id"]), "bsc").await;
    let r = app
        .post(
            &app.wallet_key,
            "/v1/wallets",
            json!({ "customer_id": b["id"], "chain": "ethereum" }),
        )
        .await;
    r.expect_error(429, "quota_exceeded");
    let ra = r
        .header("retry-after")
        .expect("Retry-After on quota_exceeded");
    assert!(
        ra.trim().parse::<u64>().is_ok_and(|n| n > 0 && n <= 86_400),
        "Retry-After {ra}"
    );
    let l = app.get(&app.wallet_key, "/v1/wallets").await.expect(200);
    assert_eq!(assert_list(&l).len(), 2);
    // Raising the cap lets it through.
    app.project_set(&["--addresses-per-day", "100"]);
    app.create_wallet(&s(&b["id"]), "ethereum").await;
}

#[tokio::test]
async fn wallets_need_the_wallet_kind_and_scopes() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    app.post(
        &app.payout_key,
        "/v1/wallets",
        json!({ "customer_id": c["id"], "chain": "ethereum" }),
    )
    .await
    .expect_error(403, "wrong_key_kind");
    let ro = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "ro", "kind": "wallet", "scopes": ["wallets:read"] }),
        )
        .await;
    app.post(
        &s(&ro["token"]),
        "/v1/wallets",
        json!({ "customer_id": c["id"], "chain": "ethereum" }),
    )
    .await
    .expect_error(403, "missing_scope");
    app.get(&s(&ro["token"]), "/v1/wallets").await.expect(200);
}

#[tokio::test]
async fn repeated_address_requests_count_towards_the_daily_cap() {
    let app = spawn_app().await;
    app.project_set(&["--addresses-per-day", "2"]);
    let a = app.create_customer(None).await;
    let b = app.create_customer(None).await;
    app.create_wallet(&s(&a["id"]), "ethereum").await;
    // The idempotent repeat answers the held address, and still counts.
    app.post(
        &app.wallet_key,
        "/v1/wallets",
        json!({ "customer_id": a["id"], "chain": "ethereum" }),
    )
    .await
    .expect(200);
    app.post(
        &app.wallet_key,
        "/v1/wallets",
        json!({ "customer_id": b["id"], "chain": "ethereum" }),
    )
    .await
    .expect_error(429, "quota_exceeded");
}
