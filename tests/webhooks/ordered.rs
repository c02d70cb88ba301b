//! `delivery_mode: ordered`: one delivery in flight per endpoint, in sequence order, a failed
//! one holding the others back until it succeeds.

use std::time::Duration;

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn ordered_endpoints_get_one_at_a_time_in_sequence_order() {
    let app = spawn_app().await;
    let rx = receiver().await;
    rx.set(
        "/ord",
        Behavior {
            status: 200,
            delay_ms: 20,
        },
    );
    rx.set(
        "/free",
        Behavior {
            status: 200,
            delay_ms: 20,
        },
    );
    app.create_endpoint(&rx.url("/ord"), json!({ "delivery_mode": "ordered" }))
        .await;
    app.create_endpoint(&rx.url("/free"), json!({})).await;
    // Many events at once, from concurrent requests.
    let reqs = (0..30).map(|_| app.post("/v1/customers", json!({})));
    for r in futures_util::future::join_all(reqs).await {
        r.expect(201);
    }
    let hits = rx.wait("/ord", 30, Duration::from_secs(30)).await;
    let seqs: Vec<u64> = hits
        .iter()
        .map(|h| h.json["sequence"].as_u64().unwrap())
        .collect();
    let mut sorted = seqs.clone();
    sorted.sort();
    assert_eq!(seqs, sorted, "in sequence order");
    assert_eq!(rx.max_concurrent("/ord"), 1, "one in flight");
    rx.wait("/free", 30, Duration::from_secs(30)).await;
    assert!(
        rx.max_concurrent("/free") > 1,
        "unordered endpoints are sent concurrently"
    );
}

#[tokio::test]
async fn a_failing_delivery_holds_the_next_ones_back() {
    let app = spawn_with(Opts::retries("1,1,1")).await;
    let rx = receiver().await;
    rx.status("/hol", 500);
    app.create_endpoint(&rx.url("/hol"), json!({ "delivery_mode": "ordered" }))
        .await;
    for _ in 0..3 {
        app.customer().await;
    }
    rx.wait("/hol", 1, Duration::from_secs(10)).await;
    rx.status("/hol", 200);
    let hits = rx.wait("/hol", 4, Duration::from_secs(15)).await;
    let seqs: Vec<u64> = hits
        .iter()
        .map(|h| h.json["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs[0], seqs[1],
        "the first event is retried before anything else"
    );
    assert_eq!(hits[0].json["attempt"], 1);
    assert_eq!(hits[1].json["attempt"], 2);
    assert_eq!(seqs[2], seqs[1] + 1);
    assert_eq!(seqs[3], seqs[2] + 1);
    assert!(hits[1].at - hits[0].at >= Duration::from_millis(950));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rx.hits("/hol").len(), 4);
}
