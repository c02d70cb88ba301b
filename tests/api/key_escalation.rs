//! DECISIONS.md section 16 on every key endpoint (mint,
//! patch, roll, revoke) for every narrower caller: a key manages only keys of its own kind
//! (`*` included) within its scopes; signing only from a key that has it; `payouts:approve`
//! only from the operator; no key widens itself.

use serde_json::{json, Value};

use crate::helpers::*;

/// The id of the key whose token is `token`.
async fn id_of(app: &App, token: &str) -> String {
    let l = app
        .get(&app.wallet_key, "/v1/api_keys?include_revoked=1&limit=100")
        .await
        .expect(200);
    assert_list(&l)
        .iter()
        .find(|k| k["key_id"] == json!(&token[..15]))
        .map(|k| s(&k["id"]))
        .unwrap_or_else(|| panic!("no key for {}: {l}", &token[..15]))
}

/// The fields a manager could change, as the `*` wallet key sees them.
async fn powers(app: &App, id: &str) -> Value {
    let k = app
        .get(&app.wallet_key, &format!("/v1/api_keys/{id}"))
        .await
        .expect(200);
    json!({
        "name": k["name"], "kind": k["kind"], "scopes": k["scopes"],
        "ip_allowlist": k["ip_allowlist"], "signing_enabled": k["signing_enabled"],
        "revoked_at": k["revoked_at"], "expires_at": k["expires_at"],
    })
}

async fn key_count(app: &App) -> usize {
    let l = app
        .get(&app.wallet_key, "/v1/api_keys?include_revoked=1&limit=100")
        .await
        .expect(200);
    assert_list(&l).len()
}

#[track_caller]
fn refused(r: &Resp, what: &str) {
    assert_eq!(
        r.status, 403,
        "{what} was not refused: {} {}",
        r.status, r.text
    );
    assert_envelope(&r.body, what);
    let code = r.body["code"].as_str().unwrap_or_default();
    assert!(
        [
            "wrong_key_kind",
            "scope_not_grantable",
            "signing_disabled",
            "ip_not_allowed"
        ]
        .contains(&code),
        "{what}: unexpected code {code}: {}",
        r.text
    );
}

struct Target {
    name: &'static str,
    id: String,
    token: String,
    /// The target's shape, as a mint request would ask for it.
    mint: Value,
}

#[tokio::test]
async fn narrower_keys_cannot_escalate_through_any_key_endpoint() {
    let app = spawn_app().await;
    let w = app.wallet_key.clone();
    let wider = app
        .create_key(
            &w,
            json!({ "name": "wider", "kind": "wallet",
                    "scopes": ["customers:read", "customers:write"] }),
        )
        .await;
    let targets = vec![
        Target {
            name: "the * payout key",
            id: id_of(&app, &app.payout_key).await,
            token: app.payout_key.clone(),
            mint: json!({ "name": "m", "kind": "payout", "scopes": ["*"], "signing_enabled": true }),
        },
        Target {
            name: "the * wallet key",
            id: id_of(&app, &w).await,
            token: w.clone(),
            mint: json!({ "name": "m", "kind": "wallet", "scopes": ["*"], "signing_enabled": true }),
        },
        Target {
            name: "a wider wallet key",
            id: s(&wider["id"]),
            token: s(&wider["token"]),
            mint: json!({ "name": "m", "kind": "wallet",
                          "scopes": ["customers:read", "customers:write"] }),
        },
    ];
    let narrow_scopes = json!(["api_keys:read", "api_keys:write", "customers:read"]);
    // The callers: the example, the same pinned to an allowlist, a payout key that
    // manages keys, and a `*` key without signing. (name, token, targets it may NOT manage)
    let narrow = app
        .create_key(
            &w,
            json!({ "name": "narrow", "kind": "wallet", "scopes": narrow_scopes }),
        )
        .await;
    let pinned = app
        .create_key(
            &w,
            json!({ "name": "pinned", "kind": "wallet", "scopes": narrow_scopes,
                    "ip_allowlist": ["127.0.0.0/8", "::1"] }),
        )
        .await;
    let payout_admin = app
        .create_key(
            &w,
            json!({ "name": "payout admin", "kind": "payout",
                    "scopes": ["api_keys:read", "api_keys:write", "payouts:read"] }),
        )
        .await;
    let star_unsigned = app
        .create_key(
            &w,
            json!({ "name": "star unsigned", "kind": "wallet", "scopes": ["*"],
                    "signing_enabled": false }),
        )
        .await;
    let callers: Vec<(&str, String, Vec<usize>)> = vec![
        ("narrow", s(&narrow["token"]), vec![0, 1, 2]),
        ("pinned", s(&pinned["token"]), vec![0, 1, 2]),
        ("payout admin", s(&payout_admin["token"]), vec![0, 1, 2]),
        ("* without signing", s(&star_unsigned["token"]), vec![0, 1]),
    ];
    let mut before = Vec::new();
    for t in &targets {
        before.push(powers(&app, &t.id).await);
    }
    let count = key_count(&app).await;

    for (cname, tok, out_of_reach) in &callers {
        for &ti in out_of_reach {
            let t = &targets[ti];
            let path = format!("/v1/api_keys/{}", t.id);
            let what = |op: &str| format!("{cname} {op} {}", t.name);
            let r = app.post(tok, &format!("{path}/roll"), json!({})).await;
            refused(&r, &what("rolls"));
            assert!(
                r.body.get("token").is_none(),
                "a refused roll carried a token"
            );
            let r = app
                .post_idem(tok, &format!("{path}/roll"), json!({}), &idem())
                .await;
            refused(&r, &what("rolls (idempotent)"));
            for body in [
                json!({ "name": "pwned" }),
                json!({ "ip_allowlist": ["203.0.113.7"] }),
                json!({ "scopes": ["customers:read"] }),
                json!({ "signing_enabled": false }),
            ] {
                let r = app.patch(tok, &path, body.clone()).await;
                refused(&r, &what(&format!("patches {body}")));
            }
            let r = app.delete(tok, &path).await;
            refused(&r, &what("revokes"));
            let r = app.post(tok, "/v1/api_keys", t.mint.clone()).await;
            refused(&r, &what("mints a copy of"));
        }
        // Minting a key of another kind, even with no scopes at all.
        if *cname != "* without signing" {
            let other = if *cname == "payout admin" {
                "wallet"
            } else {
                "payout"
            };
            let r = app
                .post(
                    tok,
                    "/v1/api_keys",
                    json!({ "name": "x", "kind": other, "scopes": [] }),
                )
                .await;
            r.expect_error_param(403, "wrong_key_kind", "kind");
        }
    }
    // Nothing changed: every target as it was, every target token still works, no key added.
    for (t, b) in targets.iter().zip(&before) {
        assert_eq!(&powers(&app, &t.id).await, b, "{} changed", t.name);
        app.get(&t.token, "/v1/ping").await.expect(200);
    }
    assert_eq!(
        key_count(&app).await,
        count,
        "a refused request minted a key"
    );

    // No key widens itself.
    let narrow_tok = s(&narrow["token"]);
    let narrow_path = format!("/v1/api_keys/{}", s(&narrow["id"]));
    app.patch(
        &narrow_tok,
        &narrow_path,
        json!({ "signing_enabled": true }),
    )
    .await
    .expect_error_param(403, "signing_disabled", "signing_enabled");
    app.patch(
        &narrow_tok,
        &narrow_path,
        json!({ "scopes": ["api_keys:read", "api_keys:write", "customers:read", "customers:write"] }),
    )
    .await
    .expect_error_param(403, "scope_not_grantable", "scopes");
    app.patch(&narrow_tok, &narrow_path, json!({ "scopes": ["*"] }))
        .await
        .expect_error_param(403, "scope_not_grantable", "scopes");
    let pinned_tok = s(&pinned["token"]);
    let pinned_path = format!("/v1/api_keys/{}", s(&pinned["id"]));
    app.patch(&pinned_tok, &pinned_path, json!({ "ip_allowlist": [] }))
        .await
        .expect_error_param(403, "ip_not_allowed", "ip_allowlist");
    app.patch(
        &pinned_tok,
        &pinned_path,
        json!({ "ip_allowlist": ["0.0.0.0/0", "::/0"] }),
    )
    .await
    .expect_error_param(403, "ip_not_allowed", "ip_allowlist");
    let star_tok = s(&star_unsigned["token"]);
    app.patch(
        &star_tok,
        &format!("/v1/api_keys/{}", s(&star_unsigned["id"])),
        json!({ "signing_enabled": true }),
    )
    .await
    .expect_error_param(403, "signing_disabled", "signing_enabled");
    let p = powers(&app, &s(&narrow["id"])).await;
    assert_eq!(p["signing_enabled"], false, "{p}");
    assert_eq!(p["scopes"], narrow_scopes, "{p}");
    let p = powers(&app, &s(&pinned["id"])).await;
    assert_eq!(p["ip_allowlist"], json!(["127.0.0.0/8", "::1"]), "{p}");
    // A pinned key mints only keys pinned within its own list.
    app.post(
        &pinned_tok,
        "/v1/api_keys",
        json!({ "name": "x", "kind": "wallet", "scopes": ["customers:read"] }),
    )
    .await
    .expect_error_param(403, "ip_not_allowed", "ip_allowlist");
    // The payout key still moves funds only with its own token: nobody else got one.
    let l = app
        .get(&w, "/v1/api_keys?include_revoked=1&limit=100")
        .await
        .expect(200);
    assert!(
        !assert_list(&l)
            .iter()
            .any(|k| k["rotated_from"] == json!(targets[0].id)),
        "the payout key was rolled: {l}"
    );

    // What stays allowed: narrowing oneself, and managing keys one could hold.
    // (The `*` key without signing may manage the wider key: same kind, no signing.)
    app.patch(
        &star_tok,
        &format!("/v1/api_keys/{}", targets[2].id),
        json!({ "name": "renamed by star" }),
    )
    .await
    .expect(200);
    app.patch(
        &narrow_tok,
        &narrow_path,
        json!({ "name": "narrow, renamed" }),
    )
    .await
    .expect(200);
    app.delete(&w, &format!("/v1/api_keys/{}", s(&star_unsigned["id"])))
        .await
        .expect(200);
    // Replaying another key's Idempotency-Key does not get past the rule either.
    let idem_body = json!({ "name": "idem", "kind": "wallet", "scopes": ["customers:read", "customers:write"] });
    let first = app
        .post_idem(&w, "/v1/api_keys", idem_body.clone(), "shared-key")
        .await
        .expect(201);
    let r = app
        .post_idem(
            &s(&narrow["token"]),
            "/v1/api_keys",
            idem_body,
            "shared-key",
        )
        .await;
    refused(&r, "narrow replays a mint it could not make");
    app.delete(&w, &format!("/v1/api_keys/{}", s(&first["id"])))
        .await
        .expect(200);
    let sub = app
        .create_key(
            &pinned_tok,
            json!({ "name": "sub", "kind": "wallet", "scopes": ["customers:read"],
                    "ip_allowlist": ["127.0.0.1"] }),
        )
        .await;
    assert_eq!(sub["ip_allowlist"], json!(["127.0.0.1"]));
    let sub_path = format!("/v1/api_keys/{}", s(&sub["id"]));
    app.patch(
        &narrow_tok,
        &sub_path,
        json!({ "name": "sub2", "scopes": [] }),
    )
    .await
    .expect(200);
    let rolled = app
        .post(
            &narrow_tok,
            &format!("{sub_path}/roll"),
            json!({ "grace_hours": 0 }),
        )
        .await
        .expect_success();
    assert!(is_test_token(&s(&rolled["token"])));
    app.delete(&narrow_tok, &format!("/v1/api_keys/{}", s(&rolled["id"])))
        .await
        .expect(200);
    // A key may always revoke itself.
    app.delete(&narrow_tok, &narrow_path).await.expect(200);
    app.get(&narrow_tok, "/v1/ping")
        .await
        .expect_error(401, "invalid_api_key");
}

/// The first-start checkout key (scope `*`, signing) cannot lead to a
/// payout key, and no key gives `payouts:approve`: two-person approval needs two keys the
/// operator chose.
#[tokio::test]
async fn a_checkout_key_cannot_move_money_and_approval_comes_from_the_operator() {
    let app = spawn_app().await;
    let ck = app.checkout_key.clone();
    for body in [
        json!({ "name": "p", "kind": "payout", "scopes": ["payouts:create", "payouts:approve"],
                "signing_enabled": true }),
        json!({ "name": "p", "kind": "payout", "scopes": [] }),
        json!({ "name": "w", "kind": "wallet", "scopes": ["customers:read"] }),
    ] {
        app.post(&ck, "/v1/api_keys", body)
            .await
            .expect_error_param(403, "wrong_key_kind", "kind");
    }
    // A checkout key still manages checkout keys.
    app.post(
        &ck,
        "/v1/api_keys",
        json!({ "name": "shop", "kind": "checkout", "scopes": ["invoices:read"] }),
    )
    .await
    .expect(201);

    // The `*` payout key may mint payout keys, but never one that approves.
    let pk = app.payout_key.clone();
    for scopes in [
        json!(["payouts:approve"]),
        json!(["payouts:*"]),
        json!(["*"]),
    ] {
        app.post(
            &pk,
            "/v1/api_keys",
            json!({ "name": "a", "kind": "payout", "scopes": scopes }),
        )
        .await
        .expect_error_param(403, "scope_not_grantable", "scopes");
    }
    let sender = app
        .create_key(
            &pk,
            json!({ "name": "sender", "kind": "payout", "scopes": ["payouts:create", "payouts:read"] }),
        )
        .await;
    let path = format!("/v1/api_keys/{}", s(&sender["id"]));
    app.patch(
        &pk,
        &path,
        json!({ "scopes": ["payouts:read", "payouts:approve"] }),
    )
    .await
    .expect_error_param(403, "scope_not_grantable", "scopes");
    // The operator's approver: the API may rename and roll it (nothing new is given).
    let approver = app.operator_key("payout", "payouts:approve,payouts:read");
    let l = app.get(&pk, "/v1/api_keys?limit=100").await.expect(200);
    let approver_id = assert_list(&l)
        .iter()
        .find(|k| k["key_id"] == json!(&approver[..15]))
        .map(|k| s(&k["id"]))
        .expect("the operator's key is listed");
    app.patch(
        &pk,
        &format!("/v1/api_keys/{approver_id}"),
        json!({ "name": "second approver" }),
    )
    .await
    .expect(200);
    app.post(&pk, &format!("/v1/api_keys/{approver_id}/roll"), json!({}))
        .await
        .expect_success();
}
