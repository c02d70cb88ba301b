//! Issue point 1: layout and binary. First start prints one token of each kind exactly once;
//! operator subcommands work through the Unix socket while a server runs and directly on the
//! store when none does; `verify` passes on a healthy store.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn first_start_prints_one_token_of_each_kind_and_later_starts_print_none() {
    let mut app = spawn_app().await;
    let toks = [&app.checkout_key, &app.payout_key, &app.wallet_key];
    for t in toks {
        assert!(is_test_token(t), "not a test token: {t:?}");
    }
    assert_ne!(app.checkout_key, app.payout_key);
    assert_ne!(app.payout_key, app.wallet_key);
    assert_ne!(app.checkout_key, app.wallet_key);
    assert!(
        app.project_id.is_some(),
        "no `created project default ... id=` line"
    );

    // Give late lines (curl examples) time to arrive, then count the key lines.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first = app.run_output.lock().unwrap().clone();
    for prefix in ["checkout key: ", "payout key: ", "wallet key: "] {
        let n = first
            .iter()
            .filter(|l| l.trim().starts_with(prefix))
            .count();
        assert_eq!(n, 1, "{prefix:?} printed {n} times:\n{}", first.join("\n"));
    }

    // Each printed key has its kind, `*` scopes and signing enabled.
    for (tok, kind) in [
        (app.checkout_key.clone(), "checkout"),
        (app.payout_key.clone(), "payout"),
        (app.wallet_key.clone(), "wallet"),
    ] {
        let p = app.ping(&tok).await;
        assert_eq!(p["kind"], kind, "{p}");
        assert_eq!(p["env"], "test", "{p}");
        assert_eq!(p["scopes"], json!(["*"]), "{p}");
        assert_eq!(p["signing_enabled"], true, "{p}");
    }

    app.stop_graceful();
    app.start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = app.run_output.lock().unwrap().join("\n");
    for t in [&app.checkout_key, &app.payout_key, &app.wallet_key] {
        assert!(
            !second.contains(t.as_str()),
            "a token was printed again:\n{second}"
        );
    }
    assert!(
        find_token(&second).is_none(),
        "a later start printed a token:\n{second}"
    );
    assert!(
        !second.contains("created project default"),
        "a later start created the project again:\n{second}"
    );
    // The keys from the first start still work.
    let p = app.ping(&app.wallet_key).await;
    assert_eq!(p["kind"], "wallet");
}

#[tokio::test]
async fn data_dir_holds_store_pepper_and_private_socket() {
    let app = spawn_app().await;
    assert!(
        app.data_path("appliance.redb").is_file(),
        "no appliance.redb"
    );
    let pepper = std::fs::metadata(app.data_path("pepper")).expect("pepper file");
    assert_eq!(pepper.permissions().mode() & 0o777, 0o600, "pepper mode");
    // The socket is bound next to the listener; allow it a moment.
    let mut sock = std::fs::metadata(app.data_path("appliance.sock"));
    for _ in 0..100 {
        if sock.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        sock = std::fs::metadata(app.data_path("appliance.sock"));
    }
    let sock = sock.expect("appliance.sock");
    assert_eq!(sock.permissions().mode() & 0o777, 0o600, "socket mode");
    // The pepper never appears in the output.
    let pepper_bytes = std::fs::read(app.data_path("pepper")).unwrap();
    let pepper_text = String::from_utf8_lossy(&pepper_bytes).trim().to_string();
    if pepper_text.len() >= 16 {
        let out = app.output.lock().unwrap().join("\n");
        assert!(!out.contains(&pepper_text), "pepper printed");
    }
}

#[tokio::test]
async fn project_commands_work_through_the_socket_while_running() {
    let app = spawn_app().await;
    let list = app.cli_ok(&["project", "list"]);
    assert!(list.contains("default"), "project list: {list}");

    app.cli_ok(&["project", "create", "--name", "other", "--mode", "test"]);
    let list = app.cli_ok(&["project", "list"]);
    assert!(list.contains("default") && list.contains("other"), "{list}");
    let show = app.cli_ok(&["project", "show", "other"]);
    assert!(show.contains("other") && show.contains("test"), "{show}");
    if let Some(id) = &app.project_id {
        let show = app.cli_ok(&["project", "show", id]);
        assert!(show.contains("default"), "project show by id: {show}");
    }

    // `project set` reaches the running server at once.
    app.project_set(&["--signing-enabled", "false"]);
    let p = app.ping(&app.payout_key).await;
    assert_eq!(p["signing_blocked_by"], json!(["project"]), "{p}");
    app.project_set(&["--signing-enabled", "true"]);
    let p = app.ping(&app.payout_key).await;
    assert_eq!(p["signing_blocked_by"], json!([]), "{p}");

    // The server keeps serving: the socket did not take the store away from it.
    app.create_customer(Some("after-cli")).await;

    // An unknown project is an error, not a silent success.
    let (st, _, _) = app.cli(&["project", "show", "no-such-project"]);
    assert!(
        !st.success(),
        "project show of an unknown project succeeded"
    );
}

#[tokio::test]
async fn key_commands_work_through_the_socket_while_running() {
    let app = spawn_app().await;
    let out = app.cli_ok(&[
        "key",
        "create",
        "--project",
        "default",
        "--kind",
        "payout",
        "--name",
        "ops",
    ]);
    let tok = find_token(&out).unwrap_or_else(|| panic!("no token printed: {out}"));
    let p = app.ping(&tok).await;
    assert_eq!(p["kind"], "payout", "{p}");
    // Default scopes: payouts:create is never a default; signing off unless asked for.
    let scopes = p["scopes"].as_array().unwrap();
    assert!(!scopes.contains(&json!("payouts:create")), "{p}");
    assert!(!scopes.contains(&json!("*")), "{p}");

    let key_id = s(&p["key_id"]);
    let list = app.cli_ok(&["key", "list", "--project", "default"]);
    assert!(list.contains(&key_id), "key list lacks {key_id}: {list}");
    assert!(!list.contains(&tok), "key list prints a token: {list}");

    // Revoke through the CLI: the running server refuses the key at once.
    let keys = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    let id = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key_id"] == json!(key_id))
        .map(|k| s(&k["id"]))
        .expect("key in /v1/api_keys");
    app.cli_ok(&["key", "revoke", &id]);
    app.get(&tok, "/v1/ping")
        .await
        .expect_error(401, "invalid_api_key");
}

#[tokio::test]
async fn key_create_with_scopes_and_signing_flags() {
    let app = spawn_app().await;
    let out = app.cli_ok(&[
        "key",
        "create",
        "--project",
        "default",
        "--kind",
        "wallet",
        "--scopes",
        "customers:read,wallets:read",
        "--signing-enabled",
    ]);
    let tok = find_token(&out).expect("token");
    let p = app.ping(&tok).await;
    assert_eq!(
        p["scopes"],
        json!(["customers:read", "wallets:read"]),
        "{p}"
    );
    assert_eq!(p["signing_enabled"], true, "{p}");
}

#[tokio::test]
async fn operator_commands_open_the_store_directly_when_no_server_runs() {
    let mut app = spawn_app().await;
    let cust = app.create_customer(Some("before-stop")).await;
    app.stop_graceful();

    let list = app.cli_ok(&["project", "list"]);
    assert!(list.contains("default"), "{list}");
    app.cli_ok(&["project", "create", "--name", "offline", "--mode", "test"]);
    let out = app.cli_ok(&[
        "key",
        "create",
        "--project",
        "default",
        "--kind",
        "wallet",
        "--name",
        "offline-key",
        "--scopes",
        "*",
    ]);
    let tok = find_token(&out).expect("token printed by offline key create");
    let keys = app.cli_ok(&["key", "list", "--project", "default"]);
    assert!(
        keys.contains(&tok[..15]),
        "key list lacks the new key_id: {keys}"
    );
    let (st, vout, verr) = app.cli(&["verify"]);
    assert!(
        st.success(),
        "verify on a stopped store failed: {vout}{verr}"
    );

    app.start();
    let list = app.cli_ok(&["project", "list"]);
    assert!(list.contains("offline"), "{list}");
    let p = app.ping(&tok).await;
    assert_eq!(p["kind"], "wallet");
    let got = app
        .get(&tok, &format!("/v1/customers/{}", s(&cust["id"])))
        .await
        .expect(200);
    assert_eq!(got["reference_id"], "before-stop");
}

#[tokio::test]
async fn verify_passes_on_a_healthy_store_with_money_moving() {
    let app = spawn_app().await;
    let (c, _w, _d) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    app.create_payout(json!({
        "customer_id": cid,
        "chain": "ethereum",
        "asset": "USDT",
        "decimals": 6,
        "amount": "1000000",
        "to_address": external_address(0x11),
    }))
    .await
    .expect(202);
    app.mine(2).await;

    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify failed while running: {out}{err}");
    app.mine(30).await;
    let (st, out, err) = app.cli(&["verify"]);
    assert!(st.success(), "verify failed after settlement: {out}{err}");
}

#[tokio::test]
async fn unknown_subcommands_and_flags_fail() {
    let app = spawn_app().await;
    let (st, _, _) = app.cli(&["no-such-command"]);
    assert!(!st.success());
    let (st, _, _) = app.cli(&["project", "create", "--name", "x", "--mode", "sideways"]);
    assert!(!st.success(), "project create accepted mode sideways");
    let (st, _, _) = app.cli(&["key", "create", "--project", "default", "--kind", "admin"]);
    assert!(!st.success(), "key create accepted kind admin");
}

/// `project set --merchant-name --merchant-logo-url` (DECISIONS.md section 12): stored and
/// shown, cleared with `""`, and a logo URL the checkout page could not show under its
/// Content-Security-Policy (not https, a host with odd characters) refused.
#[tokio::test]
async fn merchant_name_and_logo_are_project_settings() {
    let app = spawn_app().await;
    app.project_set(&[
        "--merchant-name",
        "  Northwind Books ",
        "--merchant-logo-url",
        "https://cdn.northwind.example/logo.svg",
    ]);
    let show = app.cli_ok(&["project", "show", "default"]);
    assert!(
        show.contains("\"merchant_name\": \"Northwind Books\""),
        "{show}"
    );
    assert!(
        show.contains("\"merchant_logo_url\": \"https://cdn.northwind.example/logo.svg\""),
        "{show}"
    );

    for bad in [
        "http://cdn.northwind.example/logo.svg",
        "javascript:alert(1)",
        "https://user@cdn.northwind.example/logo.svg",
        "https://cdn.northwind.example/logo svg",
    ] {
        let (st, _, err) = app.cli(&["project", "set", "default", "--merchant-logo-url", bad]);
        assert!(!st.success(), "{bad} was accepted");
        assert!(err.contains("https://"), "{bad}: {err}");
    }
    let long = "x".repeat(101);
    let (st, _, _) = app.cli(&["project", "set", "default", "--merchant-name", &long]);
    assert!(!st.success(), "a 101-character name was accepted");

    // Refused values left the settings alone; `""` removes them.
    let show = app.cli_ok(&["project", "show", "default"]);
    assert!(show.contains("Northwind Books"), "{show}");
    app.project_set(&["--merchant-name", "", "--merchant-logo-url", ""]);
    let show = app.cli_ok(&["project", "show", "default"]);
    assert!(show.contains("\"merchant_name\": null"), "{show}");
    assert!(show.contains("\"merchant_logo_url\": null"), "{show}");
}
