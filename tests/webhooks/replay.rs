//! Paused endpoints record `skipped` deliveries; replays (single and bulk) send them again as
//! new rows with `replay_of`.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::*;

#[tokio::test]
async fn pause_records_skipped_and_replay_sends_a_new_row() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/p"), json!({})).await;
    let id = s(&ep["id"]);
    let secret = s(&ep["secret"]);
    app.patch(&format!("/v1/webhooks/{id}"), json!({ "status": "paused" }))
        .await
        .expect(200);
    let cust = app.customer().await;
    let d = app
        .wait_deliveries("", Duration::from_secs(10), |d| d.len() == 1)
        .await;
    assert_eq!(d[0]["status"], "skipped");
    assert_eq!(d[0]["attempt"], 0);
    assert!(d[0]["next_attempt_at"].is_null());
    let skipped = s(&d[0]["id"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.hits("/p").is_empty(), "nothing is sent while paused");

    // Replaying needs the endpoint active.
    app.post(
        &format!("/v1/webhook_deliveries/{skipped}/replay"),
        json!({}),
    )
    .await
    .expect_error(409, "invalid_state");
    app.patch(&format!("/v1/webhooks/{id}"), json!({ "status": "active" }))
        .await
        .expect(200);
    let r = app
        .post(
            &format!("/v1/webhook_deliveries/{skipped}/replay"),
            json!({}),
        )
        .await
        .expect(201);
    assert_eq!(r["replay_of"], skipped.as_str());
    assert_ne!(r["id"], skipped.as_str());
    assert_eq!(r["event_id"], d[0]["event_id"]);
    let hit = rx.wait("/p", 1, Duration::from_secs(10)).await.remove(0);
    assert_eq!(hit.json["id"], d[0]["event_id"], "same event id");
    assert_eq!(hit.json["delivery_id"], r["id"]);
    assert_eq!(hit.json["data"]["id"], cust.as_str());
    assert!(stripe_verifies(
        hit.signature.as_deref().unwrap(),
        &hit.body,
        &secret
    ));
    let evt = s(&d[0]["event_id"]);
    let l = app
        .get(&format!("/v1/events/{evt}/deliveries"))
        .await
        .expect(200);
    assert_eq!(l["data"].as_array().unwrap().len(), 2);
    let new_id = s(&r["id"]);
    app.wait_deliveries("status=succeeded", Duration::from_secs(10), |d| {
        d.len() == 1
    })
    .await;
    // A succeeded delivery does not replay; the original stays skipped.
    app.post(
        &format!("/v1/webhook_deliveries/{new_id}/replay"),
        json!({}),
    )
    .await
    .expect_error(409, "invalid_state");
    let orig = app
        .get(&format!("/v1/webhook_deliveries/{skipped}"))
        .await
        .expect(200);
    assert_eq!(orig["status"], "skipped");
}

#[tokio::test]
async fn bulk_replay_takes_up_to_100_oldest_first() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/bulk"), json!({})).await;
    let id = s(&ep["id"]);
    app.patch(&format!("/v1/webhooks/{id}"), json!({ "status": "paused" }))
        .await
        .expect(200);
    for _ in 0..105 {
        app.customer().await;
    }
    // Oldest first: the skipped rows in creation order.
    let mut skipped: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/webhook_deliveries?limit=100&endpoint_id={id}&status=skipped");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let l = app.get(&path).await.expect(200);
        skipped.extend(l["data"].as_array().unwrap().iter().cloned());
        match l["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(skipped.len(), 105);
    skipped.reverse();
    let oldest: Vec<String> = skipped.iter().map(|d| s(&d["id"])).collect();

    app.patch(&format!("/v1/webhooks/{id}"), json!({ "status": "active" }))
        .await
        .expect(200);
    let r = app
        .post(
            "/v1/webhook_deliveries/replay",
            json!({ "endpoint_id": id, "status": "skipped" }),
        )
        .await
        .expect(200);
    assert_eq!(r["object"], "list");
    assert_eq!(r["has_more"], true);
    let first: Vec<String> = r["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| s(&d["replay_of"]))
        .collect();
    assert_eq!(
        first,
        oldest[..100].to_vec(),
        "the 100 oldest, oldest first"
    );
    let r2 = app
        .post(
            "/v1/webhook_deliveries/replay",
            json!({ "endpoint_id": id, "status": "skipped", "cursor": r["next_cursor"] }),
        )
        .await
        .expect(200);
    assert_eq!(r2["has_more"], false);
    let rest: Vec<String> = r2["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| s(&d["replay_of"]))
        .collect();
    assert_eq!(rest, oldest[100..].to_vec());

    // Every event arrives once.
    let hits = rx.wait("/bulk", 105, Duration::from_secs(30)).await;
    let ids: HashSet<String> = hits.iter().map(|h| s(&h.json["id"])).collect();
    let want: HashSet<String> = skipped.iter().map(|d| s(&d["event_id"])).collect();
    assert_eq!(ids, want);

    // `since` keeps only deliveries created at or after it.
    let since = s(&skipped[90]["created_at"]);
    let r3 = app
        .post(
            "/v1/webhook_deliveries/replay",
            json!({ "endpoint_id": id, "status": "skipped", "since": since }),
        )
        .await
        .expect(200);
    let got = r3["data"].as_array().unwrap();
    assert!(!got.is_empty() && got.len() <= 15, "{}", got.len());
    assert_eq!(got.last().unwrap()["replay_of"], oldest[104].as_str());
    let since_t = chrono::DateTime::parse_from_rfc3339(&since).unwrap();
    for d in got {
        let orig = skipped.iter().find(|x| x["id"] == d["replay_of"]).unwrap();
        let t = chrono::DateTime::parse_from_rfc3339(orig["created_at"].as_str().unwrap()).unwrap();
        assert!(t >= since_t);
    }
    app.post(
        "/v1/webhook_deliveries/replay",
        json!({ "endpoint_id": id, "status": "succeeded" }),
    )
    .await
    .expect_error(400, "invalid_request");
}

#[tokio::test]
async fn replays_are_limited_to_10_per_minute() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/rl"), json!({})).await;
    let id = s(&ep["id"]);
    app.patch(&format!("/v1/webhooks/{id}"), json!({ "status": "paused" }))
        .await
        .expect(200);
    app.customer().await;
    let d = app
        .wait_deliveries("", Duration::from_secs(10), |d| d.len() == 1)
        .await;
    let skipped = s(&d[0]["id"]);
    app.patch(&format!("/v1/webhooks/{id}"), json!({ "status": "active" }))
        .await
        .expect(200);
    for _ in 0..10 {
        app.post(
            &format!("/v1/webhook_deliveries/{skipped}/replay"),
            json!({}),
        )
        .await
        .expect(201);
    }
    let r = app
        .post(
            &format!("/v1/webhook_deliveries/{skipped}/replay"),
            json!({}),
        )
        .await;
    assert!(r.headers.get("retry-after").is_some());
    r.expect_error(429, "rate_limited");
    rx.wait("/rl", 10, Duration::from_secs(10)).await;
}
