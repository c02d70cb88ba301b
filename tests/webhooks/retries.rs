//! Retries in place on a shortened schedule (`webhooks.retry_schedule_s`), exhaustion, and
//! the two ways an endpoint gets disabled.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::*;

fn by_status<'a>(d: &'a [Value], status: &str) -> Vec<&'a Value> {
    d.iter().filter(|x| x["status"] == status).collect()
}

#[tokio::test]
async fn retries_in_place_until_exhausted() {
    let app = spawn_with(Opts::retries("1,1")).await;
    let rx = receiver().await;
    rx.status("/fail", 500);
    let ep = app.create_endpoint(&rx.url("/fail"), json!({})).await;
    let id = s(&ep["id"]);
    app.customer().await;

    // First attempt fails: `failed`, a retry scheduled about a second later.
    let d = app
        .wait_deliveries("", Duration::from_secs(10), |d| {
            d.len() == 1 && d[0]["attempt"] == 1
        })
        .await;
    assert_eq!(d[0]["status"], "failed");
    assert_eq!(d[0]["max_attempts"], 3);
    assert_eq!(d[0]["response_status"], 500);
    assert_eq!(s(&d[0]["error_detail"]), "receiver answered HTTP 500");
    assert!(d[0]["next_attempt_at"].is_string(), "{}", d[0]);
    let did = s(&d[0]["id"]);

    let hits = rx.wait("/fail", 3, Duration::from_secs(15)).await;
    let d = app
        .wait_deliveries("", Duration::from_secs(10), |d| {
            d[0]["status"] == "exhausted"
        })
        .await;
    assert_eq!(d.len(), 1, "retried in place, no new rows");
    assert_eq!(d[0]["attempt"], 3);
    assert!(d[0]["next_attempt_at"].is_null());
    // Every attempt carries the same event and delivery id and its own attempt number,
    // about one second (plus up to 10%) apart.
    for (i, h) in hits.iter().enumerate() {
        assert_eq!(h.json["attempt"], i as u64 + 1);
        assert_eq!(h.json["delivery_id"], did.as_str());
        assert_eq!(h.json["id"], hits[0].json["id"]);
    }
    for w in hits.windows(2) {
        let gap = w[1].at - w[0].at;
        assert!(
            gap >= Duration::from_millis(950) && gap < Duration::from_secs(3),
            "gap {gap:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rx.hits("/fail").len(), 3, "no attempt after the last");
    let e = app.get(&format!("/v1/webhooks/{id}")).await.expect(200);
    assert_eq!(e["consecutive_failures"], 1);
    assert_eq!(e["status"], "active");
    assert!(e["last_failure_at"].is_string());

    // A success resets the strike count.
    rx.status("/fail", 204);
    app.customer().await;
    app.wait_endpoint(&id, Duration::from_secs(10), |e| {
        e["consecutive_failures"] == 0 && e["last_success_at"].is_string()
    })
    .await;
}

#[tokio::test]
async fn five_exhausted_deliveries_disable_and_cancel_the_rest() {
    let app = spawn_with(Opts::retries("1,1")).await;
    let rx = receiver().await;
    rx.status("/down", 503);
    let ep = app.create_endpoint(&rx.url("/down"), json!({})).await;
    let id = s(&ep["id"]);
    for _ in 0..5 {
        app.customer().await;
    }
    // Once the first five are on their second attempt, two more events start their own
    // retries: they are still open when the first five are exhausted.
    app.wait_deliveries("", Duration::from_secs(10), |d| {
        d.len() == 5 && d.iter().all(|x| x["attempt"].as_u64() >= Some(2))
    })
    .await;
    for _ in 0..2 {
        app.customer().await;
    }
    let e = app
        .wait_endpoint(&id, Duration::from_secs(15), |e| e["status"] == "disabled")
        .await;
    assert_eq!(e["disabled_reason"], "consecutive_failures");
    assert_eq!(e["consecutive_failures"], 5);
    assert!(e["disabled_at"].is_string());
    let d = app
        .wait_deliveries("", Duration::from_secs(10), |d| {
            by_status(d, "canceled").len() == 2
        })
        .await;
    assert_eq!(by_status(&d, "exhausted").len(), 5, "{d:#?}");
    assert!(by_status(&d, "canceled")
        .iter()
        .all(|x| x["next_attempt_at"].is_null()));

    // While disabled, new events are recorded as skipped (a replay can fill the gap).
    let before = rx.hits("/down").len();
    app.customer().await;
    app.wait_deliveries("status=skipped", Duration::from_secs(10), |d| d.len() == 1)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.hits("/down").len(), before);

    // Re-enabling resets the strike count; sends resume.
    rx.status("/down", 200);
    let e = app
        .patch(&format!("/v1/webhooks/{id}"), json!({ "status": "active" }))
        .await
        .expect(200);
    assert_eq!(e["status"], "active");
    assert_eq!(e["consecutive_failures"], 0);
    assert!(e["disabled_reason"].is_null() && e["disabled_at"].is_null());
    app.customer().await;
    app.wait_deliveries("status=succeeded", Duration::from_secs(10), |d| {
        d.len() == 1
    })
    .await;
    app.cli(&["verify"]);
}

#[tokio::test]
async fn a_410_disables_the_endpoint_at_once() {
    let app = spawn_with(Opts::retries("30")).await;
    let rx = receiver().await;
    rx.status("/gone", 410);
    let ep = app.create_endpoint(&rx.url("/gone"), json!({})).await;
    let id = s(&ep["id"]);
    app.customer().await;
    let e = app
        .wait_endpoint(&id, Duration::from_secs(10), |e| e["status"] == "disabled")
        .await;
    assert_eq!(e["disabled_reason"], "gone");
    let d = app
        .wait_deliveries("", Duration::from_secs(10), |d| {
            d.len() == 1 && d[0]["status"] == "exhausted"
        })
        .await;
    assert_eq!(d[0]["response_status"], 410);
    assert_eq!(d[0]["attempt"], 1);
    assert_eq!(rx.hits("/gone").len(), 1);
}
