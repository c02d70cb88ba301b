//! Metadata is bounded at the boundary (50 keys, keys of 1-40 characters,
//! string values of at most 500 characters, numbers and booleans, no nesting), 400
//! `invalid_request` with `param`, at and beyond each bound.

use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::helpers::*;

fn pairs(n: usize, value: Value) -> Value {
    let m: Map<String, Value> = (0..n).map(|i| (format!("key{i}"), value.clone())).collect();
    Value::Object(m)
}

#[tokio::test]
async fn metadata_is_bounded_at_and_beyond_each_limit() {
    let app = spawn_app().await;
    let w = &app.wallet_key;
    let a = &app;
    let create = |md: Value| async move {
        a.post(&a.wallet_key, "/v1/customers", json!({ "metadata": md }))
            .await
    };
    // At each bound: accepted and stored as sent.
    let at = json!({
        "k".repeat(40): "v".repeat(500),
        "é".repeat(40): "é".repeat(500),
        "n": 12.5, "i": -3, "b": false,
    });
    let c = create(at.clone()).await.expect(201);
    assert_eq!(c["metadata"], at);
    let fifty = pairs(50, json!("x"));
    let c = create(fifty.clone()).await.expect(201);
    assert_eq!(c["metadata"], fifty);
    // Beyond each bound: 400 with param, nothing written.
    let before = assert_list(&app.get(w, "/v1/customers?limit=100").await.expect(200)).len();
    create(pairs(51, json!("x")))
        .await
        .expect_error_param(400, "invalid_request", "metadata");
    create(json!({ "k".repeat(41): "v" }))
        .await
        .expect_error_param(400, "invalid_request", "metadata");
    create(json!({ "": "v" }))
        .await
        .expect_error_param(400, "invalid_request", "metadata");
    create(json!({ "long": "v".repeat(501) }))
        .await
        .expect_error_param(400, "invalid_request", "metadata[long]");
    create(json!({ "nested": { "a": "b" } }))
        .await
        .expect_error_param(400, "invalid_request", "metadata[nested]");
    create(json!({ "list": ["a"] })).await.expect_error_param(
        400,
        "invalid_request",
        "metadata[list]",
    );
    // The body: metadata nested 126 levels deep.
    let deep = format!(
        "{{\"metadata\":{{\"a\":{}1{}}}}}",
        "{\"a\":".repeat(125),
        "}".repeat(125)
    );
    let r = app
        .send_raw(
            Method::POST,
            Some(w),
            "/v1/customers",
            deep.into_bytes(),
            Some("application/json"),
            &[],
        )
        .await;
    r.expect_error_param(400, "invalid_request", "metadata[a]");
    // An existing reference_id does not let bad metadata through either.
    app.post(w, "/v1/customers", json!({ "reference_id": "ref-1" }))
        .await
        .expect(201);
    app.post(
        w,
        "/v1/customers",
        json!({ "reference_id": "ref-1", "metadata": { "x": { "y": 1 } } }),
    )
    .await
    .expect_error_param(400, "invalid_request", "metadata[x]");
    let after = assert_list(&app.get(w, "/v1/customers?limit=100").await.expect(200)).len();
    assert_eq!(after, before + 1, "a refused create wrote a customer");
    // Events still page.
    app.get(w, "/v1/events?limit=100").await.expect(200);
}

#[tokio::test]
async fn a_patch_is_bounded_the_same_way_and_may_not_grow_past_fifty_keys() {
    let app = spawn_app().await;
    let w = &app.wallet_key;
    let c = app
        .post(
            w,
            "/v1/customers",
            json!({ "metadata": pairs(49, json!(1)) }),
        )
        .await
        .expect(201);
    let path = format!("/v1/customers/{}", s(&c["id"]));
    let p = app
        .patch(w, &path, json!({ "metadata": { "fiftieth": "ok" } }))
        .await
        .expect(200);
    assert_eq!(p["metadata"].as_object().unwrap().len(), 50);
    app.patch(w, &path, json!({ "metadata": { "fifty-first": "no" } }))
        .await
        .expect_error_param(400, "invalid_request", "metadata");
    // Removing one (null) makes room in the same patch.
    let p = app
        .patch(
            w,
            &path,
            json!({ "metadata": { "key0": null, "fifty-first": "yes" } }),
        )
        .await
        .expect(200);
    let m = p["metadata"].as_object().unwrap();
    assert_eq!(m.len(), 50);
    assert!(m.contains_key("fifty-first") && !m.contains_key("key0"));
    app.patch(w, &path, json!({ "metadata": { "key1": "v".repeat(501) } }))
        .await
        .expect_error_param(400, "invalid_request", "metadata[key1]");
    app.patch(
        w,
        &path,
        json!({ "metadata": { "key1": { "deep": true } } }),
    )
    .await
    .expect_error_param(400, "invalid_request", "metadata[key1]");
    let got = app.get(w, &path).await.expect(200);
    assert_eq!(
        got["metadata"], p["metadata"],
        "a refused patch changed metadata"
    );
}
