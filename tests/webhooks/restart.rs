//! `kill -9` with deliveries pending: after a restart every one is delivered.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn every_pending_delivery_is_delivered_after_kill_9() {
    let mut app = spawn_with(Opts::retries("2,2,2,2")).await;
    let rx = receiver().await;
    rx.status("/r", 503);
    app.create_endpoint(&rx.url("/r"), json!({})).await;
    app.create_endpoint(
        &rx.url("/r2"),
        json!({ "event_types": ["customer.created"] }),
    )
    .await;
    rx.status("/r2", 503);
    let mut customers = Vec::new();
    for _ in 0..30 {
        customers.push(app.customer().await);
    }
    app.kill();
    let before: HashSet<String> = rx
        .hits("/r")
        .iter()
        .filter(|h| h.answered < 300)
        .map(|h| s(&h.json["id"]))
        .collect();
    assert!(before.is_empty());

    rx.status("/r", 200);
    rx.status("/r2", 200);
    app.start_with(Opts::retries("2,2,2,2"));
    let mut want = HashSet::new();
    for c in &customers {
        for e in app.events_of(c).await {
            want.insert(s(&e["id"]));
        }
    }
    assert_eq!(want.len(), 30);
    for path in ["/r", "/r2"] {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let got: HashSet<String> = rx
                .hits(path)
                .iter()
                .filter(|h| h.answered == 200)
                .map(|h| s(&h.json["id"]))
                .collect();
            if got == want {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{path}: {} of 30 events delivered after the restart",
                got.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let d = app
        .wait_deliveries("status=succeeded", Duration::from_secs(10), |d| {
            d.len() == 60
        })
        .await;
    assert_eq!(d.len(), 60);
    assert!(app.deliveries("status=failed").await.is_empty());
    assert!(app.deliveries("status=pending").await.is_empty());
    app.cli(&["verify"]);
}
