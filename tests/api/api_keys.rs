//! Issue point 5: the API key endpoints (SPEC section 4, API keys; DECISIONS 2 and 4).

use serde_json::{json, Value};

use crate::helpers::*;

fn assert_api_key_shape(k: &Value) {
    assert_eq!(k["object"], "api_key", "{k}");
    assert_uuid(&k["id"]);
    assert_eq!(k["env"], "test", "{k}");
    assert!(
        ["checkout", "payout", "wallet"].contains(&k["kind"].as_str().unwrap()),
        "{k}"
    );
    assert!(k["name"].is_string(), "{k}");
    assert!(k["last4"].as_str().is_some_and(|l| l.len() == 4), "{k}");
    let key_id = k["key_id"].as_str().expect("key_id");
    assert!(key_id.starts_with("apktest") && key_id.len() == 15, "{k}");
    assert!(k["scopes"].is_array(), "{k}");
    assert!(k["ip_allowlist"].is_array(), "{k}");
    assert!(k["signing_enabled"].is_boolean(), "{k}");
    assert!(k["created_by"].is_string(), "{k}");
    for f in ["rotated_from", "expires_at", "revoked_at", "last_used_at"] {
        assert!(k.get(f).is_some(), "{f} missing: {k}");
    }
    assert!(
        k["use_count"].is_string(),
        "use_count must be a string: {k}"
    );
    assert_timestamp(&k["created_at"]);
}

#[tokio::test]
async fn list_shows_keys_without_tokens_with_limit_and_default_scopes() {
    let app = spawn_app().await;
    let l = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    let data = assert_list(&l);
    assert_eq!(data.len(), 3, "{l}");
    for k in data {
        assert_api_key_shape(k);
        assert!(k.get("token").is_none(), "list shows a token: {k}");
        assert_eq!(k["scopes"], json!(["*"]));
        assert_eq!(k["signing_enabled"], true);
        assert_eq!(k["created_by"], "merchant");
    }
    assert!(
        !l.to_string().contains(&app.wallet_key[7..]),
        "a token leaked"
    );
    assert_eq!(l["limit_per_kind"], 5, "{l}");
    let ds = &l["default_scopes"];
    for kind in ["checkout", "payout", "wallet"] {
        let sc = ds[kind]
            .as_array()
            .unwrap_or_else(|| panic!("default_scopes.{kind}: {l}"));
        assert!(!sc.is_empty());
        for never in [
            "payouts:create",
            "payouts:approve",
            "sweeps:create",
            "api_keys:read",
            "api_keys:write",
            "*",
        ] {
            assert!(
                !sc.contains(&json!(never)),
                "{kind} default has {never}: {l}"
            );
        }
    }
    let wallet: Vec<&Value> = ds["wallet"].as_array().unwrap().iter().collect();
    for want in [
        "customers:read",
        "customers:write",
        "wallets:read",
        "wallets:create",
        "deposits:read",
    ] {
        assert!(
            wallet.contains(&&json!(want)),
            "wallet default lacks {want}: {l}"
        );
    }
    assert!(
        ds["payout"]
            .as_array()
            .unwrap()
            .contains(&json!("payouts:read")),
        "{l}"
    );
}

#[tokio::test]
async fn create_shows_the_token_once_then_get_never_does() {
    let app = spawn_app().await;
    let k = app
        .post(
            &app.payout_key,
            "/v1/api_keys",
            json!({ "name": "backend", "kind": "payout" }),
        )
        .await
        .expect_any(&[200, 201]);
    assert_api_key_shape(&k);
    let tok = s(&k["token"]);
    assert!(is_test_token(&tok), "{tok}");
    assert_eq!(k["key_id"], json!(&tok[..15]));
    assert_eq!(k["last4"], json!(&tok[tok.len() - 4..]));
    assert_eq!(k["kind"], "payout");
    assert_eq!(k["name"], "backend");
    assert_eq!(k["created_by"], "merchant");
    assert!(k["revoked_at"].is_null() && k["expires_at"].is_null());
    // Default scopes of the kind; never payouts:create.
    let l = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    assert_eq!(k["scopes"], l["default_scopes"]["payout"], "{k}");
    assert!(!k["scopes"]
        .as_array()
        .unwrap()
        .contains(&json!("payouts:create")));
    // Signing is not on unless asked for? Whatever the default, it is a boolean; ping agrees.
    let p = app.ping(&tok).await;
    assert_eq!(p["kind"], "payout");
    assert_eq!(p["signing_enabled"], k["signing_enabled"]);

    let got = app
        .get(&app.wallet_key, &format!("/v1/api_keys/{}", s(&k["id"])))
        .await
        .expect(200);
    assert_api_key_shape(&got);
    assert!(got.get("token").is_none(), "{got}");
    assert!(!got.to_string().contains(&tok), "{got}");
    assert_eq!(got["key_id"], k["key_id"]);
    let l = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    assert!(!l.to_string().contains(&tok));
    assert_eq!(assert_list(&l).len(), 4);
}

#[tokio::test]
async fn create_validates_its_fields() {
    let app = spawn_app().await;
    let w = &app.wallet_key;
    app.post(w, "/v1/api_keys", json!({ "kind": "wallet" }))
        .await
        .expect_error_param(400, "invalid_request", "name");
    let r = app.post(w, "/v1/api_keys", json!({ "name": "x" })).await;
    assert_eq!(r.expect_client_error(400)["param"], "kind");
    let r = app
        .post(w, "/v1/api_keys", json!({ "name": "x", "kind": "admin" }))
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "kind");
    let r = app
        .post(
            w,
            "/v1/api_keys",
            json!({ "name": "x", "kind": "wallet", "scopes": ["customers:fly"] }),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "scopes");
    let r = app
        .post(
            w,
            "/v1/api_keys",
            json!({ "name": "x", "kind": "wallet", "ip_allowlist": ["300.1.1.1"] }),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "ip_allowlist");
    let r = app
        .post(
            w,
            "/v1/api_keys",
            json!({ "name": "x", "kind": "wallet", "ip_allowlist": ["10.0.0.0/33"] }),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "ip_allowlist");
    let too_many: Vec<String> = (0..33).map(|i| format!("10.0.{i}.0/24")).collect();
    let r = app
        .post(
            w,
            "/v1/api_keys",
            json!({ "name": "x", "kind": "wallet", "ip_allowlist": too_many }),
        )
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "ip_allowlist");
    let r = app
        .post(
            w,
            "/v1/api_keys",
            json!({ "name": "x", "kind": "wallet", "signing_enabled": "yes" }),
        )
        .await;
    r.expect_error_param(400, "invalid_request", "signing_enabled");
    // Exactly 32 entries, IPv4 and IPv6 mixed, is fine.
    let mut ok: Vec<String> = (0..31).map(|i| format!("10.0.{i}.0/24")).collect();
    ok.push("2001:db8::/32".into());
    let k = app
        .create_key(
            w,
            json!({ "name": "x", "kind": "wallet", "ip_allowlist": ok }),
        )
        .await;
    assert_eq!(k["ip_allowlist"].as_array().unwrap().len(), 32);
    // An IPv4-mapped entry is kept in its IPv4 form, which a PATCH can send back as it is.
    let m = app
        .create_key(
            w,
            json!({ "name": "m", "kind": "wallet", "ip_allowlist": ["::ffff:a00:0/104"] }),
        )
        .await;
    assert_eq!(m["ip_allowlist"], json!(["10.0.0.0/8"]));
    let path = format!("/v1/api_keys/{}", s(&m["id"]));
    let back = app
        .patch(w, &path, json!({ "ip_allowlist": m["ip_allowlist"] }))
        .await
        .expect(200);
    assert_eq!(back["ip_allowlist"], json!(["10.0.0.0/8"]));
    let l = app.get(w, "/v1/api_keys").await.expect(200);
    assert_eq!(assert_list(&l).len(), 5, "failed creates wrote keys: {l}");
}

#[tokio::test]
async fn api_key_endpoints_need_api_key_scopes() {
    let app = spawn_app().await;
    let k = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "plain", "kind": "wallet" }),
        )
        .await;
    let tok = s(&k["token"]);
    app.get(&tok, "/v1/api_keys")
        .await
        .expect_error(403, "missing_scope");
    app.post(
        &tok,
        "/v1/api_keys",
        json!({ "name": "x", "kind": "wallet" }),
    )
    .await
    .expect_error(403, "missing_scope");
    // A key can mint keys only within its own scopes.
    let minter = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "minter", "kind": "wallet",
                    "scopes": ["api_keys:write", "api_keys:read", "customers:read"] }),
        )
        .await;
    let mt = s(&minter["token"]);
    let sub = app
        .create_key(
            &mt,
            json!({ "name": "sub", "kind": "wallet", "scopes": ["customers:read"] }),
        )
        .await;
    assert_eq!(sub["scopes"], json!(["customers:read"]));
    let r = app
        .post(
            &mt,
            "/v1/api_keys",
            json!({ "name": "escalate", "kind": "wallet", "scopes": ["customers:write"] }),
        )
        .await;
    assert_eq!(
        r.status, 403,
        "minted a key beyond its own scopes: {}",
        r.text
    );
    assert_envelope(&r.body, "escalate");
    let r = app
        .post(
            &mt,
            "/v1/api_keys",
            json!({ "name": "escalate", "kind": "wallet", "scopes": ["*"] }),
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = app
        .patch(
            &mt,
            &format!("/v1/api_keys/{}", s(&sub["id"])),
            json!({ "scopes": ["*"] }),
        )
        .await;
    assert_eq!(
        r.status, 403,
        "patched a key beyond its own scopes: {}",
        r.text
    );
}

#[tokio::test]
async fn patch_changes_name_scopes_allowlist_and_signing() {
    let app = spawn_app().await;
    let k = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "old", "kind": "wallet", "scopes": ["customers:read"] }),
        )
        .await;
    let tok = s(&k["token"]);
    let path = format!("/v1/api_keys/{}", s(&k["id"]));
    let p = app
        .patch(
            &app.wallet_key,
            &path,
            json!({ "name": "new", "scopes": ["customers:read", "customers:write"],
                    "ip_allowlist": ["10.0.0.0/8"], "signing_enabled": true }),
        )
        .await
        .expect(200);
    assert_api_key_shape(&p);
    assert_eq!(p["name"], "new");
    assert_eq!(p["scopes"], json!(["customers:read", "customers:write"]));
    assert_eq!(p["ip_allowlist"], json!(["10.0.0.0/8"]));
    assert_eq!(p["signing_enabled"], true);
    assert!(p.get("token").is_none());
    // The allowlist applies at once.
    app.get(&tok, "/v1/customers")
        .await
        .expect_error(403, "ip_not_allowed");
    // An empty list clears the restriction; the new scope applies.
    let p = app
        .patch(&app.wallet_key, &path, json!({ "ip_allowlist": [] }))
        .await
        .expect(200);
    assert_eq!(p["ip_allowlist"], json!([]));
    assert_eq!(p["name"], "new", "an absent field changed: {p}");
    app.post(&tok, "/v1/customers", json!({})).await.expect(201);
    // Dropping the scope applies at once too.
    app.patch(
        &app.wallet_key,
        &path,
        json!({ "scopes": ["customers:read"] }),
    )
    .await
    .expect(200);
    app.post(&tok, "/v1/customers", json!({}))
        .await
        .expect_error(403, "missing_scope");
    let got = app.get(&app.wallet_key, &path).await.expect(200);
    assert_eq!(got["name"], "new");
    // Bad values are refused with param and change nothing.
    let r = app
        .patch(&app.wallet_key, &path, json!({ "ip_allowlist": ["nope"] }))
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "ip_allowlist");
    let r = app
        .patch(&app.wallet_key, &path, json!({ "scopes": ["bogus"] }))
        .await;
    assert_eq!(r.expect_client_error(400)["param"], "scopes");
    let r = app
        .patch(&app.wallet_key, &path, json!({ "name": 7 }))
        .await;
    r.expect_error_param(400, "invalid_request", "name");
    assert_eq!(app.get(&app.wallet_key, &path).await.expect(200), got);
    app.patch(
        &app.wallet_key,
        &format!("/v1/api_keys/{}", uuid::Uuid::now_v7()),
        json!({ "name": "x" }),
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn delete_revokes_idempotently_and_keeps_the_row() {
    let app = spawn_app().await;
    let k = app
        .create_key(&app.wallet_key, json!({ "name": "gone", "kind": "wallet" }))
        .await;
    let path = format!("/v1/api_keys/{}", s(&k["id"]));
    let d1 = app.delete(&app.wallet_key, &path).await.expect(200);
    assert_eq!(d1["object"], "api_key");
    assert_timestamp(&d1["revoked_at"]);
    let d2 = app.delete(&app.wallet_key, &path).await.expect(200);
    assert_eq!(
        d1["revoked_at"], d2["revoked_at"],
        "second revoke moved revoked_at"
    );
    app.get(&s(&k["token"]), "/v1/ping")
        .await
        .expect_error(401, "invalid_api_key");
    // The row stays; the list hides it unless include_revoked=1.
    let got = app.get(&app.wallet_key, &path).await.expect(200);
    assert_eq!(got["revoked_at"], d1["revoked_at"]);
    let l = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    assert!(
        !ids(&l).contains(&s(&k["id"])),
        "revoked key listed by default"
    );
    let l = app
        .get(&app.wallet_key, "/v1/api_keys?include_revoked=1")
        .await
        .expect(200);
    assert!(ids(&l).contains(&s(&k["id"])), "include_revoked=1 hides it");
    let l = app
        .get(&app.wallet_key, "/v1/api_keys?include_revoked=0")
        .await
        .expect(200);
    assert!(!ids(&l).contains(&s(&k["id"])));
    app.delete(
        &app.wallet_key,
        &format!("/v1/api_keys/{}", uuid::Uuid::now_v7()),
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn roll_issues_a_new_key_and_both_work_during_grace() {
    let app = spawn_app().await;
    let k = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "rolled", "kind": "wallet", "scopes": ["customers:read"],
                    "ip_allowlist": ["127.0.0.0/8"] }),
        )
        .await;
    let old = s(&k["token"]);
    let r = app
        .post(
            &app.wallet_key,
            &format!("/v1/api_keys/{}/roll", s(&k["id"])),
            json!({ "grace_hours": 2 }),
        )
        .await
        .expect_any(&[200, 201]);
    assert_api_key_shape(&r);
    let new = s(&r["token"]);
    assert!(is_test_token(&new));
    assert_ne!(new, old);
    assert_ne!(r["id"], k["id"]);
    assert_eq!(r["rotated_from"], k["id"]);
    assert_eq!(r["kind"], "wallet");
    assert_eq!(r["scopes"], json!(["customers:read"]), "roll keeps scopes");
    assert_eq!(
        r["ip_allowlist"],
        json!(["127.0.0.0/8"]),
        "roll keeps the allowlist"
    );
    assert_timestamp(&r["old_key_expires_at"]);
    let exp =
        chrono::DateTime::parse_from_rfc3339(r["old_key_expires_at"].as_str().unwrap()).unwrap();
    let hours = (exp.timestamp() - chrono::Utc::now().timestamp()) as f64 / 3600.0;
    assert!(
        (1.9..=2.1).contains(&hours),
        "old key expires in {hours} h, wanted 2"
    );
    app.get(&old, "/v1/customers").await.expect(200);
    app.get(&new, "/v1/customers").await.expect(200);
    let oldrow = app
        .get(&app.wallet_key, &format!("/v1/api_keys/{}", s(&k["id"])))
        .await
        .expect(200);
    assert_eq!(oldrow["expires_at"], r["old_key_expires_at"]);

    // Default grace is 24 hours.
    let k2 = app
        .create_key(&app.wallet_key, json!({ "name": "r2", "kind": "wallet" }))
        .await;
    let r2 = app
        .post(
            &app.wallet_key,
            &format!("/v1/api_keys/{}/roll", s(&k2["id"])),
            json!({}),
        )
        .await
        .expect_any(&[200, 201]);
    let exp =
        chrono::DateTime::parse_from_rfc3339(r2["old_key_expires_at"].as_str().unwrap()).unwrap();
    let hours = (exp.timestamp() - chrono::Utc::now().timestamp()) as f64 / 3600.0;
    assert!((23.9..=24.1).contains(&hours), "default grace {hours} h");
    // Beyond 168 hours, or negative, is refused.
    for bad in [json!(169), json!(-1), json!("24")] {
        let r = app
            .post(
                &app.wallet_key,
                &format!("/v1/api_keys/{}/roll", s(&r2["id"])),
                json!({ "grace_hours": bad }),
            )
            .await;
        assert_eq!(
            r.expect_client_error(400)["param"],
            "grace_hours",
            "grace {bad}"
        );
    }
}

#[tokio::test]
async fn at_most_five_enabled_keys_per_kind() {
    let app = spawn_app().await;
    let mut made = Vec::new();
    for i in 0..4 {
        let k = app
            .create_key(
                &app.wallet_key,
                json!({ "name": format!("w{i}"), "kind": "wallet" }),
            )
            .await;
        made.push(k);
    }
    let r = app
        .post(
            &app.wallet_key,
            "/v1/api_keys",
            json!({ "name": "sixth", "kind": "wallet" }),
        )
        .await;
    assert!(
        (400..500).contains(&r.status),
        "a sixth enabled wallet key was accepted: {} {}",
        r.status,
        r.text
    );
    assert_envelope(&r.body, "sixth key");
    // Other kinds are counted separately.
    app.create_key(&app.wallet_key, json!({ "name": "p2", "kind": "payout" }))
        .await;
    // Revoking one frees a place.
    app.delete(
        &app.wallet_key,
        &format!("/v1/api_keys/{}", s(&made[0]["id"])),
    )
    .await
    .expect(200);
    app.create_key(
        &app.wallet_key,
        json!({ "name": "again", "kind": "wallet" }),
    )
    .await;
    let l = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    let wallets = assert_list(&l)
        .iter()
        .filter(|k| k["kind"] == "wallet")
        .count();
    assert_eq!(wallets, 5);
    // A roll at the limit is allowed: the old key expires.
    let r = app
        .post(
            &app.wallet_key,
            &format!("/v1/api_keys/{}/roll", s(&made[1]["id"])),
            json!({ "grace_hours": 0 }),
        )
        .await;
    assert!(
        r.status < 300,
        "roll at the limit refused: {} {}",
        r.status,
        r.text
    );
}

#[tokio::test]
async fn usage_is_counted() {
    let app = spawn_app().await;
    let k = app
        .create_key(&app.wallet_key, json!({ "name": "used", "kind": "wallet" }))
        .await;
    let tok = s(&k["token"]);
    for _ in 0..3 {
        app.get(&tok, "/v1/ping").await.expect(200);
    }
    let got = app
        .get(&app.wallet_key, &format!("/v1/api_keys/{}", s(&k["id"])))
        .await
        .expect(200);
    let n: u64 = got["use_count"].as_str().unwrap().parse().unwrap();
    assert!(n >= 3, "use_count {n} after 3 uses: {got}");
    assert_timestamp(&got["last_used_at"]);
}
