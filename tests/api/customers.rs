//! Issue point 8: customers — create (idempotent on `reference_id`), list with filters, get,
//! patch.

use serde_json::{json, Value};

use crate::helpers::*;

fn assert_customer_shape(c: &Value) {
    assert_eq!(c["object"], "customer", "{c}");
    assert_uuid(&c["id"]);
    assert!(c.get("reference_id").is_some(), "{c}");
    assert!(c.get("email").is_some(), "{c}");
    assert!(c["status"].is_string(), "{c}");
    assert!(c["metadata"].is_object(), "{c}");
    assert_timestamp(&c["created_at"]);
}

#[tokio::test]
async fn create_with_an_empty_body_and_with_every_field() {
    let app = spawn_app().await;
    let c = app
        .post(&app.wallet_key, "/v1/customers", json!({}))
        .await
        .expect(201);
    assert_customer_shape(&c);
    assert_eq!(c["status"], "active");
    assert_eq!(c["metadata"], json!({}));
    assert!(c["reference_id"].is_null());

    let c = app
        .post(
            &app.wallet_key,
            "/v1/customers",
            json!({ "reference_id": "user-42", "email": "ada@example.com",
                    "metadata": { "tier": "gold", "n": 3 } }),
        )
        .await
        .expect(201);
    assert_customer_shape(&c);
    assert_eq!(c["reference_id"], "user-42");
    assert_eq!(c["email"], "ada@example.com");
    assert_eq!(c["metadata"], json!({ "tier": "gold", "n": 3 }));
    let got = app
        .get(&app.wallet_key, &format!("/v1/customers/{}", s(&c["id"])))
        .await
        .expect(200);
    assert_eq!(got, c, "GET differs from the create answer");
}

#[tokio::test]
async fn reposting_a_reference_id_returns_the_existing_customer_with_200() {
    let app = spawn_app().await;
    let a = app
        .post(
            &app.wallet_key,
            "/v1/customers",
            json!({ "reference_id": "dup", "email": "x@example.com" }),
        )
        .await
        .expect(201);
    let b = app
        .post(
            &app.wallet_key,
            "/v1/customers",
            json!({ "reference_id": "dup", "email": "other@example.com" }),
        )
        .await
        .expect(200);
    assert_eq!(a["id"], b["id"]);
    assert_eq!(
        b["email"], "x@example.com",
        "the existing customer is returned unchanged"
    );
    let l = app
        .get(&app.wallet_key, "/v1/customers?reference_id=dup")
        .await
        .expect(200);
    assert_eq!(assert_list(&l).len(), 1);
    assert_eq!(app.events("type=customer.created").await.len(), 1);
}

#[tokio::test]
async fn list_filters_by_reference_id_and_status() {
    let app = spawn_app().await;
    let a = app.create_customer(Some("alice")).await;
    app.create_customer(Some("bob")).await;
    app.create_customer(None).await;
    let l = app
        .get(&app.wallet_key, "/v1/customers?reference_id=alice")
        .await
        .expect(200);
    assert_eq!(ids(&l), vec![s(&a["id"])]);
    let l = app
        .get(&app.wallet_key, "/v1/customers?reference_id=nobody")
        .await
        .expect(200);
    assert_eq!(assert_list(&l).len(), 0);
    let l = app
        .get(&app.wallet_key, "/v1/customers?status=active")
        .await
        .expect(200);
    assert_eq!(assert_list(&l).len(), 3);
    for c in assert_list(&l) {
        assert_customer_shape(c);
    }
    let l = app
        .get(&app.wallet_key, "/v1/customers?status=active&limit=1")
        .await
        .expect(200);
    assert_eq!(assert_list(&l).len(), 1);
    assert_eq!(l["has_more"], true);
}

#[tokio::test]
async fn patch_updates_email_and_metadata_and_emits_an_event() {
    let app = spawn_app().await;
    let c = app.create_customer(Some("p-1")).await;
    let path = format!("/v1/customers/{}", s(&c["id"]));
    let p = app
        .patch(
            &app.wallet_key,
            &path,
            json!({ "email": "new@example.com", "metadata": { "k": "v" } }),
        )
        .await
        .expect(200);
    assert_customer_shape(&p);
    assert_eq!(p["id"], c["id"]);
    assert_eq!(p["email"], "new@example.com");
    assert_eq!(p["metadata"], json!({ "k": "v" }));
    assert_eq!(p["reference_id"], "p-1", "an absent field changed");
    assert_eq!(p["created_at"], c["created_at"]);
    let got = app.get(&app.wallet_key, &path).await.expect(200);
    assert_eq!(got, p);
    let ev = app.events(&format!("resource_id={}", s(&c["id"]))).await;
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, vec!["customer.created", "customer.updated"]);
    assert_eq!(ev[1]["data"], p, "event data differs from the REST read");
    // `customer.created` is stored without data and rendered from the customer's row
    // (schema 13): it still shows the customer as created, after one change and another.
    assert_eq!(
        ev[0]["data"], c,
        "the created event changed with the customer"
    );
    let p2 = app
        .patch(
            &app.wallet_key,
            &path,
            json!({ "email": "third@example.com" }),
        )
        .await
        .expect(200);
    let ev = app.events(&format!("resource_id={}", s(&c["id"]))).await;
    assert_eq!(ev.len(), 3);
    assert_eq!(ev[0]["data"], c);
    assert_eq!(ev[1]["data"], p);
    assert_eq!(ev[2]["data"], p2);
    let one = app
        .get(&app.wallet_key, &format!("/v1/events/{}", s(&ev[0]["id"])))
        .await
        .expect(200);
    assert_eq!(one["data"], c);
    let p = p2;
    // Wrong types are refused with param and change nothing.
    app.patch(&app.wallet_key, &path, json!({ "email": false }))
        .await
        .expect_error_param(400, "invalid_request", "email");
    assert_eq!(app.get(&app.wallet_key, &path).await.expect(200), p);
    app.patch(
        &app.wallet_key,
        &format!("/v1/customers/{}", uuid::Uuid::now_v7()),
        json!({ "email": "a@b.co" }),
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn unknown_customer_is_404() {
    let app = spawn_app().await;
    let missing = uuid::Uuid::now_v7();
    app.get(&app.wallet_key, &format!("/v1/customers/{missing}"))
        .await
        .expect_error(404, "not_found");
    app.get(
        &app.wallet_key,
        &format!("/v1/customers/{missing}/balances"),
    )
    .await
    .expect_error(404, "not_found");
    app.post(
        &app.wallet_key,
        "/v1/wallets",
        json!({ "customer_id": missing, "chain": "ethereum" }),
    )
    .await
    .expect_error(404, "not_found");
}

#[tokio::test]
async fn customer_created_event_carries_the_rest_read() {
    let app = spawn_app().await;
    let c = app.create_customer(Some("evt")).await;
    let ev = app
        .events(&format!(
            "type=customer.created&resource_id={}",
            s(&c["id"])
        ))
        .await;
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["data"], c);
    assert_eq!(ev[0]["resource_id"], c["id"]);
}

/// A patch that is refused (here: nested metadata) changes nothing and is a 400, also when
/// it carries a new `reference_id`: every check runs before the first write, so a refusal
/// never aborts the store batch (which answered 500 before, to this request and to any
/// other committed with it).
#[tokio::test]
async fn a_refused_patch_with_a_new_reference_is_400_and_changes_nothing() {
    let app = spawn_app().await;
    let c = app.create_customer(Some("patch-ref-1")).await;
    let id = c["id"].as_str().unwrap();
    let r = app
        .patch(
            &app.wallet_key,
            &format!("/v1/customers/{id}"),
            json!({"reference_id": "patch-ref-2", "metadata": {"nested": {"no": 1}}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.body["param"], "metadata[nested]");
    let got = app
        .get(&app.wallet_key, &format!("/v1/customers/{id}"))
        .await;
    assert_eq!(got.body["reference_id"], "patch-ref-1");
    // The new reference was not taken: another customer can have it.
    let other = app.create_customer(Some("patch-ref-2")).await;
    assert_ne!(other["id"], c["id"]);
}
