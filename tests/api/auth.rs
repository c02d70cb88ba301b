//! Issue point 5: authentication (SPEC section 5, DECISIONS 2 and 4): token format, missing,
//! malformed, expired and revoked keys, kinds, scopes and wildcards, the order of checks, IP
//! allowlists, signing levels and `GET /v1/ping`.

use reqwest::Method;
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn missing_or_malformed_keys_are_401_invalid_api_key() {
    let app = spawn_app().await;
    let r = app.send(Method::GET, None, "/v1/ping", None, &[]).await;
    r.expect_error(401, "invalid_api_key");
    let good = app.wallet_key.clone();
    let upper = good.to_uppercase();
    let truncated = good[..good.len() - 1].to_string();
    let extended = format!("{good}0");
    let swapped = format!("apktest{}", "0".repeat(64));
    let live_prefix = format!("apk{}", &good[7..]);
    for auth in [
        "Bearer".to_string(),
        "Bearer ".to_string(),
        "bearer".to_string(),
        format!("Basic {good}"),
        good.clone(),
        format!("Bearer {upper}"),
        format!("Bearer {truncated}"),
        format!("Bearer {extended}"),
        format!("Bearer {swapped}"),
        format!("Bearer {live_prefix}"),
        format!("Bearer {good} extra"),
        "Bearer sk_test_123".to_string(),
    ] {
        let r = app
            .send(
                Method::GET,
                None,
                "/v1/ping",
                None,
                &[("Authorization", &auth)],
            )
            .await;
        r.expect_error(401, "invalid_api_key");
    }
    // The token is never accepted in the query string.
    for q in ["api_key", "key", "token", "access_token"] {
        let r = app
            .send(
                Method::GET,
                None,
                &format!("/v1/ping?{q}={good}"),
                None,
                &[],
            )
            .await;
        r.expect_error(401, "invalid_api_key");
    }
    // 401 on every authenticated route, also on POST with a body.
    let r = app
        .send(Method::POST, None, "/v1/customers", Some(&json!({})), &[])
        .await;
    r.expect_error(401, "invalid_api_key");
    let list = app.get(&good, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&list).len(), 0);
}

#[tokio::test]
async fn ping_describes_the_key() {
    let app = spawn_app().await;
    let p = app.ping(&app.payout_key).await;
    assert_eq!(p["object"], "ping", "{p}");
    assert_uuid(&p["tenant_id"]);
    assert!(p["tenant_slug"].is_string(), "{p}");
    assert_eq!(p["key_id"], json!(&app.payout_key[..15]), "{p}");
    assert_eq!(p["env"], "test");
    assert_eq!(p["kind"], "payout");
    assert_eq!(p["scopes"], json!(["*"]));
    assert_eq!(p["signing_enabled"], true);
    assert_eq!(p["signing_blocked_by"], json!([]));
    assert!(
        p["network"] == "mainnet" || p["network"] == "testnet",
        "{p}"
    );
    let chains = p["enabled_chains"].as_array().expect("enabled_chains");
    assert!(chains.contains(&json!("ethereum")), "{p}");
    assert!(chains.contains(&json!("bsc")), "{p}");
    if let Some(pid) = &app.project_id {
        assert_eq!(p["tenant_id"], json!(pid));
    }
    // Any kind reaches ping.
    let c = app.ping(&app.checkout_key).await;
    assert_eq!(c["kind"], "checkout");
    assert_eq!(c["tenant_id"], p["tenant_id"]);
}

#[tokio::test]
async fn kinds_reach_only_their_endpoint_groups() {
    let app = spawn_app().await;
    let (c, w, _) = app.funded_customer("ethereum", "USDT", 6, "2000000").await;
    let cid = s(&c["id"]);
    let wid = s(&w["id"]);
    // checkout: no customers, wallets, deposits, payouts, balances of customers.
    for path in [
        "/v1/customers".to_string(),
        "/v1/wallets".to_string(),
        "/v1/deposits".to_string(),
        "/v1/sweeps".to_string(),
        "/v1/payouts".to_string(),
        format!("/v1/customers/{cid}/balances"),
        format!("/v1/wallets/{wid}/balances"),
    ] {
        app.get(&app.checkout_key, &path)
            .await
            .expect_error(403, "wrong_key_kind");
    }
    // payout: balances and payouts, not customers or deposits.
    app.get(&app.payout_key, &format!("/v1/customers/{cid}/balances"))
        .await
        .expect(200);
    app.get(&app.payout_key, &format!("/v1/wallets/{wid}/balances"))
        .await
        .expect(200);
    app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    for path in ["/v1/customers", "/v1/deposits", "/v1/wallets", "/v1/sweeps"] {
        app.get(&app.payout_key, path)
            .await
            .expect_error(403, "wrong_key_kind");
    }
    app.post(&app.payout_key, "/v1/customers", json!({}))
        .await
        .expect_error(403, "wrong_key_kind");
    // wallet: read-only payout history, no payout creation.
    app.get(&app.wallet_key, "/v1/payouts").await.expect(200);
    app.post_idem(
        &app.wallet_key,
        "/v1/payouts",
        json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6,
                "amount": "1", "to_address": external_address(0x21) }),
        &idem(),
    )
    .await
    .expect_error(403, "wrong_key_kind");
    // any kind: ping, chains, treasury.
    for k in [&app.checkout_key, &app.payout_key, &app.wallet_key] {
        app.get(k, "/v1/ping").await.expect(200);
        app.get(k, "/v1/chains").await.expect(200);
        app.get(k, "/v1/balances").await.expect(200);
    }
}

#[tokio::test]
async fn scopes_are_enforced_with_wildcards() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    let ro = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "ro", "kind": "wallet", "scopes": ["customers:read"] }),
        )
        .await;
    let ro = s(&ro["token"]);
    app.get(&ro, "/v1/customers").await.expect(200);
    app.get(&ro, &format!("/v1/customers/{cid}"))
        .await
        .expect(200);
    app.post(&ro, "/v1/customers", json!({}))
        .await
        .expect_error(403, "missing_scope");
    app.patch(
        &ro,
        &format!("/v1/customers/{cid}"),
        json!({ "email": "a@b.co" }),
    )
    .await
    .expect_error(403, "missing_scope");
    app.get(&ro, "/v1/wallets")
        .await
        .expect_error(403, "missing_scope");
    app.get(&ro, "/v1/deposits")
        .await
        .expect_error(403, "missing_scope");
    app.get(&ro, &format!("/v1/customers/{cid}/balances"))
        .await
        .expect_error(403, "missing_scope");
    app.get(&ro, "/v1/events")
        .await
        .expect_error(403, "missing_scope");
    app.get(&ro, "/v1/api_keys")
        .await
        .expect_error(403, "missing_scope");
    // Still reaches the endpoints that need no scope.
    app.get(&ro, "/v1/ping").await.expect(200);
    app.get(&ro, "/v1/chains").await.expect(200);
    app.get(&ro, "/v1/balances").await.expect(200);

    // `wallets:*` covers wallets:read and wallets:create, nothing else.
    let wk = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "wallets", "kind": "wallet", "scopes": ["wallets:*"] }),
        )
        .await;
    let wk = s(&wk["token"]);
    let w = app
        .post(
            &wk,
            "/v1/wallets",
            json!({ "customer_id": cid, "chain": "ethereum" }),
        )
        .await
        .expect(201);
    app.get(&wk, &format!("/v1/wallets/{}", s(&w["id"])))
        .await
        .expect(200);
    app.get(&wk, "/v1/wallets").await.expect(200);
    app.get(&wk, "/v1/customers")
        .await
        .expect_error(403, "missing_scope");
}

#[tokio::test]
async fn order_of_checks_is_kind_scope_ip_signing() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "2000000").await;
    let body = json!({ "customer_id": c["id"], "chain": "ethereum", "asset": "USDT",
                       "decimals": 6, "amount": "1000", "to_address": external_address(0x22) });
    // A checkout key holding every scope still gets wrong_key_kind.
    app.post_idem(&app.checkout_key, "/v1/payouts", body.clone(), &idem())
        .await
        .expect_error(403, "wrong_key_kind");
    // Wrong kind wins over a missing scope.
    let ck = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "ck", "kind": "checkout", "scopes": ["invoices:read"],
                    "ip_allowlist": ["10.0.0.0/8"], "signing_enabled": false }),
        )
        .await;
    app.post_idem(&s(&ck["token"]), "/v1/payouts", body.clone(), &idem())
        .await
        .expect_error(403, "wrong_key_kind");
    // Missing scope wins over IP and signing.
    let k1 = app
        .create_key(
            &app.payout_key,
            json!({ "name": "k1", "kind": "payout", "scopes": ["payouts:read"],
                    "ip_allowlist": ["10.0.0.0/8"], "signing_enabled": false }),
        )
        .await;
    app.post_idem(&s(&k1["token"]), "/v1/payouts", body.clone(), &idem())
        .await
        .expect_error(403, "missing_scope");
    // IP allowlist wins over signing.
    let k2 = app
        .create_key(
            &app.payout_key,
            json!({ "name": "k2", "kind": "payout", "scopes": ["payouts:create", "payouts:read"],
                    "ip_allowlist": ["10.0.0.0/8"], "signing_enabled": false }),
        )
        .await;
    app.post_idem(&s(&k2["token"]), "/v1/payouts", body.clone(), &idem())
        .await
        .expect_error(403, "ip_not_allowed");
    // Signing last.
    let k3 = app
        .create_key(
            &app.payout_key,
            json!({ "name": "k3", "kind": "payout", "scopes": ["payouts:create", "payouts:read"],
                    "signing_enabled": false }),
        )
        .await;
    app.post_idem(&s(&k3["token"]), "/v1/payouts", body.clone(), &idem())
        .await
        .expect_error(403, "signing_disabled");
    // And with all four satisfied, accepted.
    let k4 = app
        .create_key(
            &app.payout_key,
            json!({ "name": "k4", "kind": "payout", "scopes": ["payouts:create", "payouts:read"],
                    "ip_allowlist": ["127.0.0.0/8"], "signing_enabled": true }),
        )
        .await;
    app.post_idem(&s(&k4["token"]), "/v1/payouts", body.clone(), &idem())
        .await
        .expect(202);
    // An authentication failure beats everything (401 before 403).
    app.send(
        Method::POST,
        None,
        "/v1/payouts",
        Some(&body),
        &[("Idempotency-Key", "x")],
    )
    .await
    .expect_error(401, "invalid_api_key");
}

#[tokio::test]
async fn ipv4_allowlists_with_exact_ips_and_cidrs() {
    let app = spawn_app().await;
    for (list, ok) in [
        (json!(["127.0.0.1"]), true),
        (json!(["127.0.0.1/32"]), true),
        (json!(["127.0.0.0/8", "10.0.0.0/8"]), true),
        (json!(["10.0.0.0/8"]), false),
        (json!(["127.0.0.2"]), false),
        (json!(["::1/128"]), false),
        (json!(["2001:db8::/32"]), false),
        (json!([]), true),
    ] {
        let k = app
            .create_key(
                &app.wallet_key,
                json!({ "name": "ip", "kind": "wallet", "scopes": ["customers:read"],
                        "ip_allowlist": list }),
            )
            .await;
        let tok = s(&k["token"]);
        let r = app.get(&tok, "/v1/customers").await;
        if ok {
            assert_eq!(r.status, 200, "allowlist {list}: {}", r.text);
        } else {
            r.expect_error(403, "ip_not_allowed");
        }
        // Revoke to stay under five keys per kind.
        app.delete(&app.wallet_key, &format!("/v1/api_keys/{}", s(&k["id"])))
            .await
            .expect(200);
    }
}

#[tokio::test]
async fn ipv6_allowlists_when_listening_on_ipv6_loopback() {
    let app = spawn_app_on("[::1]:0").await;
    assert!(app.addr.starts_with("[::1]"), "{}", app.addr);
    for (list, ok) in [
        (json!(["::1"]), true),
        (json!(["::1/128"]), true),
        (json!(["::/0"]), true),
        (json!(["2001:db8::/32"]), false),
        (json!(["127.0.0.0/8"]), false),
    ] {
        let k = app
            .create_key(
                &app.wallet_key,
                json!({ "name": "ip6", "kind": "wallet", "scopes": ["customers:read"],
                        "ip_allowlist": list }),
            )
            .await;
        let tok = s(&k["token"]);
        let r = app.get(&tok, "/v1/customers").await;
        if ok {
            assert_eq!(r.status, 200, "allowlist {list}: {}", r.text);
        } else {
            r.expect_error(403, "ip_not_allowed");
        }
        app.delete(&app.wallet_key, &format!("/v1/api_keys/{}", s(&k["id"])))
            .await
            .expect(200);
    }
}

#[tokio::test]
async fn signing_is_required_at_project_and_key_level() {
    let app = spawn_app().await;
    let (c, w, _) = app.funded_customer("ethereum", "USDT", 6, "2000000").await;
    let body = json!({ "customer_id": c["id"], "chain": "ethereum", "asset": "USDT",
                       "decimals": 6, "amount": "1000", "to_address": external_address(0x23) });
    // Project level.
    app.project_set(&["--signing-enabled", "false"]);
    let p = app.ping(&app.payout_key).await;
    assert_eq!(p["signing_blocked_by"], json!(["project"]), "{p}");
    app.create_payout(body.clone())
        .await
        .expect_error(403, "signing_disabled");
    app.post_idem(
        &app.wallet_key,
        "/v1/sweeps",
        json!({ "wallet_id": w["id"] }),
        &idem(),
    )
    .await
    .expect_error(403, "signing_disabled");
    app.project_set(&["--signing-enabled", "true"]);
    // Key level, switched by PATCH.
    let id = app.get(&app.payout_key, "/v1/api_keys").await.expect(200)["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key_id"] == json!(&app.payout_key[..15]))
        .map(|k| s(&k["id"]))
        .unwrap();
    let k = app
        .patch(
            &app.payout_key,
            &format!("/v1/api_keys/{id}"),
            json!({ "signing_enabled": false }),
        )
        .await
        .expect(200);
    assert_eq!(k["signing_enabled"], false);
    let p = app.ping(&app.payout_key).await;
    assert_eq!(p["signing_enabled"], false);
    assert_eq!(p["signing_blocked_by"], json!(["key"]), "{p}");
    app.create_payout(body.clone())
        .await
        .expect_error(403, "signing_disabled");
    // Both off: both listed.
    app.project_set(&["--signing-enabled", "false"]);
    let p = app.ping(&app.payout_key).await;
    let blocked: Vec<String> = p["signing_blocked_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    assert!(
        blocked.contains(&"project".to_string()) && blocked.contains(&"key".to_string()),
        "{p}"
    );
    // Reads stay allowed for a key without signing.
    app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    app.project_set(&["--signing-enabled", "true"]);
    // A key without signing cannot give itself signing back (DECISIONS 16: no key widens
    // itself); a key of its kind with signing and its scopes can (only the operator makes
    // a `*` payout key: it holds payouts:approve).
    let admin = app
        .cli_ok(&[
            "key",
            "create",
            "--project",
            "default",
            "--kind",
            "payout",
            "--signing-enabled",
            "--scopes",
            "*",
        ])
        .lines()
        .find_map(|l| l.strip_prefix("token: "))
        .expect("token line")
        .trim()
        .to_string();
    app.patch(
        &app.payout_key,
        &format!("/v1/api_keys/{id}"),
        json!({ "signing_enabled": true }),
    )
    .await
    .expect_error(403, "signing_disabled");
    app.patch(
        &admin,
        &format!("/v1/api_keys/{id}"),
        json!({ "signing_enabled": true }),
    )
    .await
    .expect(200);
    app.create_payout(body).await.expect(202);
}

#[tokio::test]
async fn revoked_and_expired_keys_are_401() {
    let app = spawn_app().await;
    let k = app
        .create_key(&app.wallet_key, json!({ "name": "tmp", "kind": "wallet" }))
        .await;
    let tok = s(&k["token"]);
    app.get(&tok, "/v1/ping").await.expect(200);
    app.delete(&app.wallet_key, &format!("/v1/api_keys/{}", s(&k["id"])))
        .await
        .expect(200);
    app.get(&tok, "/v1/ping")
        .await
        .expect_error(401, "invalid_api_key");

    // Roll with no grace: the old key expires at once.
    let k = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "roll0", "kind": "wallet" }),
        )
        .await;
    let old = s(&k["token"]);
    let new = app
        .post(
            &app.wallet_key,
            &format!("/v1/api_keys/{}/roll", s(&k["id"])),
            json!({ "grace_hours": 0 }),
        )
        .await
        .expect_success();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    app.get(&old, "/v1/ping")
        .await
        .expect_error(401, "invalid_api_key");
    app.get(&s(&new["token"]), "/v1/ping").await.expect(200);
}

#[tokio::test]
async fn service_level_signing_off_blocks_payouts_and_sweeps() {
    let app = spawn_app_with("127.0.0.1:0", &[("APPLIANCE_SIGNING__ENABLED", "false")]).await;
    let p = app.ping(&app.payout_key).await;
    assert_eq!(p["signing_blocked_by"], json!(["service"]), "{p}");
    let (c, w, _) = app.funded_customer("ethereum", "USDT", 6, "2000000").await;
    app.create_payout(
        json!({ "customer_id": c["id"], "chain": "ethereum", "asset": "USDT",
        "decimals": 6, "amount": "1000", "to_address": external_address(0x24) }),
    )
    .await
    .expect_error(403, "signing_disabled");
    app.post_idem(
        &app.wallet_key,
        "/v1/sweeps",
        json!({ "wallet_id": w["id"] }),
        &idem(),
    )
    .await
    .expect_error(403, "signing_disabled");
    // Reads are unaffected.
    app.get(&app.payout_key, "/v1/payouts").await.expect(200);
}
