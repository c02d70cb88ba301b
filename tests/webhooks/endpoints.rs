//! `/v1/webhooks`: create, read, change, rotate, delete, limits and scopes.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;

#[tokio::test]
async fn create_shows_the_secret_once_and_lists_the_catalog() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app
        .create_endpoint(
            &rx.url("/a"),
            json!({ "description": "orders", "event_types": ["customer.created"] }),
        )
        .await;
    assert_eq!(ep["object"], "webhook_endpoint");
    assert_eq!(ep["status"], "active");
    assert_eq!(ep["delivery_mode"], "unordered");
    assert_eq!(ep["consecutive_failures"], 0);
    assert_eq!(ep["description"], "orders");
    assert_eq!(ep["event_types"], json!(["customer.created"]));
    assert!(ep["overlap_until"].is_null() && ep["secret_overlap_until"].is_null());
    let secret = s(&ep["secret"]);
    assert!(
        secret.starts_with("whsec_") && secret.len() == 49,
        "{secret}"
    );
    for f in [
        "tenant_id",
        "url",
        "disabled_reason",
        "disabled_at",
        "last_success_at",
        "last_failure_at",
        "created_at",
    ] {
        assert!(ep.get(f).is_some(), "{f} missing: {ep}");
    }
    let id = s(&ep["id"]);
    let got = app.get(&format!("/v1/webhooks/{id}")).await.expect(200);
    assert!(got.get("secret").is_none(), "secret shown again: {got}");
    let list = app.get("/v1/webhooks").await.expect(200);
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(list["data"][0].get("secret").is_none());
    let catalog: Vec<String> = list["event_catalog"]
        .as_array()
        .unwrap()
        .iter()
        .map(s)
        .collect();
    for t in [
        "customer.created",
        "wallet.created",
        "deposit.detected",
        "deposit.confirmed",
        "deposit.failed",
        "deposit.orphaned",
        "payout.submitted",
        "payout.confirmed",
        "endpoint.test",
    ] {
        assert!(
            catalog.contains(&t.to_string()),
            "{t} missing from {catalog:?}"
        );
    }
    assert!(!app.log().contains(&secret), "the secret was logged");
}

#[tokio::test]
async fn create_is_idempotent_with_a_key() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let body = json!({ "url": rx.url("/idem") });
    let h = [("Idempotency-Key", "hook-1")];
    let a = app
        .send(
            Method::POST,
            &app.wallet_key,
            "/v1/webhooks",
            Some(body.clone()),
            &h,
        )
        .await
        .expect(201);
    let b = app
        .send(
            Method::POST,
            &app.wallet_key,
            "/v1/webhooks",
            Some(body),
            &h,
        )
        .await;
    assert_eq!(b.headers.get("idempotent-replayed").unwrap(), "true");
    let b = b.expect(201);
    assert_eq!(a["id"], b["id"]);
    let list = app.get("/v1/webhooks").await.expect(200);
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    app.send(
        Method::POST,
        &app.wallet_key,
        "/v1/webhooks",
        Some(json!({ "url": rx.url("/other") })),
        &h,
    )
    .await
    .expect_error(409, "idempotency_key_reuse");
}

#[tokio::test]
async fn validation_and_the_limit_of_16() {
    let app = spawn_app().await;
    let rx = receiver().await;
    app.post("/v1/webhooks", json!({}))
        .await
        .expect_error(400, "invalid_request");
    let e = app
        .post(
            "/v1/webhooks",
            json!({ "url": rx.url("/x"), "event_types": ["customer.exploded"] }),
        )
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(e["param"], "event_types");
    let e = app
        .post(
            "/v1/webhooks",
            json!({ "url": rx.url("/x"), "delivery_mode": "sometimes" }),
        )
        .await
        .expect_error(400, "invalid_request");
    assert_eq!(e["param"], "delivery_mode");
    for i in 0..16 {
        app.create_endpoint(&rx.url(&format!("/n{i}")), json!({}))
            .await;
    }
    app.post("/v1/webhooks", json!({ "url": rx.url("/n16") }))
        .await
        .expect_error(409, "endpoint_limit_reached");
    let list = app.get("/v1/webhooks").await.expect(200);
    assert_eq!(list["data"].as_array().unwrap().len(), 16);
    assert_eq!(list["has_more"], false);
}

#[tokio::test]
async fn patch_rotate_and_state_rules() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/p"), json!({})).await;
    let id = s(&ep["id"]);
    let path = format!("/v1/webhooks/{id}");
    let p = app
        .patch(
            &path,
            json!({
                "url": rx.url("/q"),
                "description": "new",
                "event_types": ["wallet.created"],
                "delivery_mode": "ordered",
                "status": "paused",
            }),
        )
        .await
        .expect(200);
    assert_eq!(p["url"], rx.url("/q"));
    assert_eq!(p["status"], "paused");
    assert_eq!(p["delivery_mode"], "ordered");
    assert_eq!(p["event_types"], json!(["wallet.created"]));
    app.patch(&path, json!({ "status": "disabled" }))
        .await
        .expect_error(400, "invalid_request");
    let p = app
        .patch(&path, json!({ "status": "active", "event_types": [] }))
        .await
        .expect(200);
    assert_eq!(p["status"], "active");
    assert_eq!(p["event_types"], json!([]));

    let r = app
        .post(&format!("{path}/rotate_secret"), json!({}))
        .await
        .expect(200);
    assert_ne!(r["secret"], ep["secret"]);
    assert!(r["overlap_until"].is_string(), "{r}");
    assert_eq!(r["overlap_until"], r["secret_overlap_until"]);
    let until = chrono::DateTime::parse_from_rfc3339(r["overlap_until"].as_str().unwrap()).unwrap();
    let hours = (until.timestamp() - chrono::Utc::now().timestamp()) as f64 / 3600.0;
    assert!(
        (23.9..=24.1).contains(&hours),
        "default overlap is 24 h: {hours}"
    );
    app.post(
        &format!("{path}/rotate_secret"),
        json!({ "overlap_hours": 169 }),
    )
    .await
    .expect_error(400, "invalid_request");
    let r = app
        .post(
            &format!("{path}/rotate_secret"),
            json!({ "overlap_hours": 0 }),
        )
        .await
        .expect(200);
    assert!(r["overlap_until"].is_null(), "{r}");

    let other = uuid_v7_like();
    app.get(&format!("/v1/webhooks/{other}"))
        .await
        .expect_error(404, "not_found");
}

fn uuid_v7_like() -> String {
    "01900000-0000-7000-8000-000000000000".to_string()
}

#[tokio::test]
async fn delete_removes_deliveries_but_not_events() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/del"), json!({})).await;
    let id = s(&ep["id"]);
    let cust = app.customer().await;
    rx.wait("/del", 1, Duration::from_secs(10)).await;
    let evs = app.events_of(&cust).await;
    assert_eq!(evs.len(), 1);
    let q = format!("endpoint_id={id}");
    app.wait_deliveries(&q, Duration::from_secs(10), |d| {
        d.len() == 1 && d[0]["status"] == "succeeded"
    })
    .await;
    let d = app.delete(&format!("/v1/webhooks/{id}")).await.expect(200);
    assert_eq!(
        d,
        json!({ "id": id, "object": "webhook_endpoint", "deleted": true })
    );
    app.get(&format!("/v1/webhooks/{id}"))
        .await
        .expect_error(404, "not_found");
    assert!(app.deliveries(&q).await.is_empty());
    assert!(app.deliveries("").await.is_empty());
    assert_eq!(app.events_of(&cust).await.len(), 1, "events stay");
    let evt = s(&evs[0]["id"]);
    let l = app
        .get(&format!("/v1/events/{evt}/deliveries"))
        .await
        .expect(200);
    assert_eq!(l["data"], json!([]));
    app.delete(&format!("/v1/webhooks/{id}"))
        .await
        .expect_error(404, "not_found");
    app.cli(&["verify"]);
}

#[tokio::test]
async fn scopes_decide_who_reads_writes_and_replays() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/s"), json!({})).await;
    let id = s(&ep["id"]);
    // Any kind may hold webhook scopes: the checkout key (all defaults) reads the list.
    app.send(Method::GET, &app.checkout_key, "/v1/webhooks", None, &[])
        .await
        .expect(200);
    let mk = |scopes: Value| json!({ "name": "limited", "kind": "wallet", "scopes": scopes });
    let reader = app.post("/v1/api_keys", mk(json!(["webhooks:read"]))).await;
    assert!(
        reader.status == 200 || reader.status == 201,
        "{}",
        reader.text
    );
    let reader = s(&reader.body["token"]);
    app.send(
        Method::GET,
        &reader,
        &format!("/v1/webhooks/{id}"),
        None,
        &[],
    )
    .await
    .expect(200);
    app.send(Method::GET, &reader, "/v1/webhook_deliveries", None, &[])
        .await
        .expect(200);
    app.send(
        Method::POST,
        &reader,
        "/v1/webhooks",
        Some(json!({ "url": rx.url("/t") })),
        &[],
    )
    .await
    .expect_error(403, "missing_scope");
    app.send(
        Method::POST,
        &reader,
        "/v1/webhook_deliveries/replay",
        Some(json!({ "endpoint_id": id })),
        &[],
    )
    .await
    .expect_error(403, "missing_scope");
    app.send(Method::GET, &reader, "/v1/events/stream", None, &[])
        .await
        .expect_error(403, "missing_scope");
    let writer = app
        .post("/v1/api_keys", mk(json!(["webhooks:write"])))
        .await;
    let writer = s(&writer.body["token"]);
    app.send(Method::GET, &writer, "/v1/webhooks", None, &[])
        .await
        .expect_error(403, "missing_scope");
    app.send(
        Method::PATCH,
        &writer,
        &format!("/v1/webhooks/{id}"),
        Some(json!({ "description": "w" })),
        &[],
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn another_projects_endpoints_and_deliveries_read_as_missing() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/mine"), json!({})).await;
    let id = s(&ep["id"]);
    app.customer().await;
    let d = app
        .wait_deliveries("", Duration::from_secs(10), |d| d.len() == 1)
        .await;
    let did = s(&d[0]["id"]);
    let other = app.other_project_key();
    for path in [
        format!("/v1/webhooks/{id}"),
        format!("/v1/webhook_deliveries/{did}"),
    ] {
        app.send(Method::GET, &other, &path, None, &[])
            .await
            .expect_error(404, "not_found");
    }
    let l = app
        .send(Method::GET, &other, "/v1/webhooks", None, &[])
        .await
        .expect(200);
    assert_eq!(l["data"], json!([]));
    let l = app
        .send(Method::GET, &other, "/v1/webhook_deliveries", None, &[])
        .await
        .expect(200);
    assert_eq!(l["data"], json!([]));
    app.send(
        Method::DELETE,
        &other,
        &format!("/v1/webhooks/{id}"),
        None,
        &[],
    )
    .await
    .expect_error(404, "not_found");
}
