//! Secrets at rest and in replays. Webhook secrets are sealed in the store,
//! idempotency records never hold a token or a secret (a replay answers them null, even to
//! another key of the project), `backup` carries the data key and `restore` brings it back,
//! and secrets stored in clear by an older build are sealed at start.

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use appliance_storage::records::WebhookEndpoint;
use appliance_storage::{ScanOps, Store, StoreOptions};

use crate::helpers::*;

/// Files of `dir` (recursively) that may hold no secret: all but the key files.
fn scanned_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let ft = e.file_type().unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if ft.is_dir() {
            out.extend(scanned_files(&e.path()));
        } else if ft.is_file() && !name.starts_with("pepper") && !name.starts_with("data.key") {
            out.push(e.path());
        }
    }
    out
}

/// Asserts that no file of `dir` but the key files holds any of `needles`.
#[track_caller]
fn assert_nothing_leaks(dir: &Path, needles: &[String]) {
    let files = scanned_files(dir);
    assert!(
        files.iter().any(|f| f.ends_with("appliance.redb")),
        "no store file in {}",
        dir.display()
    );
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        for n in needles {
            assert!(
                !bytes.windows(n.len()).any(|w| w == n.as_bytes()),
                "{} holds the secret {}…",
                f.display(),
                &n[..12]
            );
        }
    }
}

/// The secret part of a token or secret (the random characters after the prefix).
fn secret_part(s: &str) -> String {
    if let Some(r) = s.strip_prefix("whsec_") {
        r.to_string()
    } else {
        s[s.len() - 64..].to_string()
    }
}

async fn idem_post(app: &App, token: &str, path: &str, body: Value, key: &str) -> Resp {
    app.send(
        Method::POST,
        token,
        path,
        Some(body),
        &[("Idempotency-Key", key)],
    )
    .await
}

/// Sends `endpoint.test` to `id` and returns the hit the receiver got on `path`.
async fn test_hit(app: &App, rx: &Receiver, id: &str, path: &str, n: usize) -> Hit {
    app.post(&format!("/v1/webhooks/{id}/test"), json!({}))
        .await
        .expect(202);
    rx.wait(path, n, Duration::from_secs(15))
        .await
        .remove(n - 1)
}

#[tokio::test]
async fn secrets_are_sealed_at_rest_and_never_replayed() {
    let mut app = spawn_app().await;
    let rx = receiver().await;
    let (w, p) = (app.wallet_key.clone(), app.payout_key.clone());
    let mut needles: Vec<String> = Vec::new();

    // A webhook endpoint created with an Idempotency-Key, replayed by another key.
    let body = json!({ "url": rx.url("/s") });
    let ep = idem_post(&app, &w, "/v1/webhooks", body.clone(), "wh-1")
        .await
        .expect(201);
    let first_secret = s(&ep["secret"]);
    assert!(first_secret.starts_with("whsec_"), "{ep}");
    let id = s(&ep["id"]);
    let again = idem_post(&app, &p, "/v1/webhooks", body, "wh-1").await;
    assert_eq!(
        again
            .headers
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap()),
        Some("true"),
        "{}",
        again.text
    );
    let again = again.expect(201);
    assert_eq!(again["id"], ep["id"], "the replay is the same endpoint");
    assert!(
        again.get("secret").is_some_and(Value::is_null),
        "a replay carried the secret: {again}"
    );
    assert!(!again.to_string().contains(&secret_part(&first_secret)));
    // A rotation keeps the old secret signing for an hour: both sealed.
    let rot = app
        .post(
            &format!("/v1/webhooks/{id}/rotate_secret"),
            json!({ "overlap_hours": 1 }),
        )
        .await
        .expect(200);
    let secret = s(&rot["secret"]);
    assert_ne!(secret, first_secret);
    needles.extend([secret_part(&first_secret), secret_part(&secret)]);

    // An API key minted with an Idempotency-Key, replayed by another key of the project.
    let kb = json!({ "name": "minted", "kind": "wallet", "scopes": ["customers:read"] });
    let k = idem_post(&app, &w, "/v1/api_keys", kb.clone(), "key-1")
        .await
        .expect(201);
    let token = s(&k["token"]);
    // (Another key of the same kind: a key manages only keys of its kind, DECISIONS.md
    // section 16.)
    let other = idem_post(
        &app,
        &w,
        "/v1/api_keys",
        json!({ "name": "other", "kind": "wallet", "scopes": ["api_keys:write", "customers:read"] }),
        "key-0",
    )
    .await
    .expect(201);
    let again = idem_post(&app, &s(&other["token"]), "/v1/api_keys", kb, "key-1")
        .await
        .expect(201);
    assert_eq!(again["id"], k["id"]);
    assert_eq!(again["key_id"], k["key_id"]);
    assert!(
        again.get("token").is_some_and(Value::is_null),
        "a replay carried the token: {again}"
    );
    // A roll with an Idempotency-Key, replayed.
    let roll_path = format!("/v1/api_keys/{}/roll", s(&k["id"]));
    let r = idem_post(&app, &w, &roll_path, json!({}), "roll-1")
        .await
        .expect(201);
    let rolled = s(&r["token"]);
    let again = idem_post(&app, &w, &roll_path, json!({}), "roll-1")
        .await
        .expect(201);
    assert_eq!(again["id"], r["id"], "a replayed roll rolled again");
    assert!(again.get("token").is_some_and(Value::is_null), "{again}");
    for t in [&token, &rolled, &w, &p, &app.checkout_key] {
        needles.push(secret_part(t));
    }
    // The tokens work; the endpoint signs with the new and the overlapping old secret.
    app.send(Method::GET, &rolled, "/v1/ping", None, &[])
        .await
        .expect(200);
    let hit = test_hit(&app, &rx, &id, "/s", 1).await;
    let sig = hit.signature.clone().expect("signature");
    assert!(verify_signature(&sig, &hit.body, &secret), "{sig}");
    assert!(verify_signature(&sig, &hit.body, &first_secret), "{sig}");

    // Nothing in the data dir but the key files holds any of them.
    assert_nothing_leaks(&app.data_dir, &needles);

    // A backup carries the data key; it holds no secret either, outside the key files.
    let out = app.data_dir.parent().unwrap().join("backup");
    let out_s = out.to_string_lossy().into_owned();
    app.cli(&["backup", "--out", &out_s]);
    assert!(
        out.join("data.key").exists(),
        "the backup lacks the data key"
    );
    assert_nothing_leaks(&out, &needles);

    // The machine is lost (the data key with it); restore brings it back and the endpoint
    // signs with the same secret.
    app.kill();
    std::fs::remove_file(app.data_dir.join("data.key")).unwrap();
    app.cli(&["restore", "--from", &out_s]);
    app.start_with(Opts::default());
    let hit = test_hit(&app, &rx, &id, "/s", 2).await;
    let sig = hit.signature.clone().expect("signature");
    assert!(
        verify_signature(&sig, &hit.body, &secret),
        "after restore the endpoint no longer signs with its secret: {sig}\n{}",
        app.log()
    );
    assert_nothing_leaks(&app.data_dir, &needles);
}

#[tokio::test]
async fn a_restore_without_the_data_key_of_its_store_is_refused() {
    let mut app = spawn_app().await;
    let rx = receiver().await;
    app.create_endpoint(&rx.url("/r"), json!({})).await;
    let out = app.data_dir.parent().unwrap().join("backup");
    let out_s = out.to_string_lossy().into_owned();
    app.cli(&["backup", "--out", &out_s]);
    app.kill();
    std::fs::remove_file(out.join("data.key")).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_appliance"))
        .args(["restore", "--from", &out_s, "--data-dir"])
        .arg(&app.data_dir)
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "a backup whose sealed secrets cannot be opened was restored"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("data.key"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[tokio::test]
async fn secrets_stored_in_clear_by_an_older_build_are_sealed_at_start() {
    let mut app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/m"), json!({})).await;
    let id = s(&ep["id"]);
    app.kill();
    // What an older build wrote: the secret in clear.
    let clear = format!("whsec_{}", "Q".repeat(43));
    {
        let store = Store::open(
            &app.data_dir.join("appliance.redb"),
            StoreOptions::default(),
        )
        .unwrap();
        let c = clear.clone();
        store
            .write(move |ctx| {
                for mut e in ctx.all::<WebhookEndpoint>()? {
                    e.secret = c.clone();
                    ctx.put(&e)?;
                }
                Ok::<_, appliance_storage::StoreError>(())
            })
            .await
            .unwrap();
        let closer = store.shutdown();
        drop(store);
        if let Some(h) = closer {
            h.join().unwrap();
        }
    }
    let before = std::fs::read(app.data_dir.join("appliance.redb")).unwrap();
    assert!(
        before.windows(clear.len()).any(|w| w == clear.as_bytes()),
        "the test did not manage to store a secret in clear"
    );
    app.start_with(Opts::default());
    let hit = test_hit(&app, &rx, &id, "/m", 1).await;
    assert!(
        verify_signature(hit.signature.as_deref().unwrap(), &hit.body, &clear),
        "the migrated endpoint does not sign with its secret"
    );
    app.kill();
    // redb may keep the old page until it is reused: judge the live rows, as a reader of the
    // file would see them.
    let store = Store::open(
        &app.data_dir.join("appliance.redb"),
        StoreOptions::default(),
    )
    .unwrap();
    let eps = store.read_blocking(|r| r.all::<WebhookEndpoint>()).unwrap();
    assert_eq!(eps.len(), 1);
    assert!(
        eps[0].secret.starts_with("sealed:v1:"),
        "the secret is still in clear: {}",
        &eps[0].secret[..12]
    );
}
