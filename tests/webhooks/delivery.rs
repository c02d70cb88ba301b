//! What a receiver gets: the envelope, the signature (our own check and Stripe's library),
//! rotation overlaps, the recorded delivery, event types and the test event.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn envelope_and_signature_verify_with_our_check_and_with_stripe() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/sig"), json!({})).await;
    let secret = s(&ep["secret"]);
    let cust = app.customer().await;
    let hit = rx.wait("/sig", 1, Duration::from_secs(10)).await.remove(0);
    assert_eq!(hit.content_type.as_deref(), Some("application/json"));
    let header = hit.signature.clone().expect("Service-Signature header");
    assert!(header.starts_with("t="), "{header}");
    assert_eq!(header.matches("v1=").count(), 1, "{header}");
    assert!(verify_signature(&header, &hit.body, &secret), "our check");
    assert!(
        stripe_verifies(&header, &hit.body, &secret),
        "Stripe's library"
    );
    // A changed body or another secret must not verify, with either check.
    let mut tampered = hit.body.clone();
    tampered.push(b' ');
    assert!(!verify_signature(&header, &tampered, &secret));
    assert!(!stripe_verifies(&header, &tampered, &secret));
    assert!(!stripe_verifies(&header, &hit.body, "whsec_wrong"));

    // The envelope (SPEC.md section 6): the event as GET /v1/events/{id} shows it, plus
    // attempt and delivery_id.
    let env = &hit.json;
    let evt = app.events_of(&cust).await.remove(0);
    let mut expected = evt.clone();
    expected["attempt"] = json!(1);
    expected["delivery_id"] = env["delivery_id"].clone();
    assert_eq!(env, &expected);
    for f in [
        "id",
        "object",
        "type",
        "api_version",
        "created",
        "livemode",
        "tenant",
        "sequence",
        "data",
        "attempt",
        "delivery_id",
    ] {
        assert!(env.get(f).is_some(), "{f} missing from {env}");
    }
    assert_eq!(env["type"], "customer.created");
    assert_eq!(env["livemode"], false);
    assert_eq!(env["data"]["id"], cust.as_str());
    let did = s(&env["delivery_id"]);
    assert!(did.starts_with("whd_") && did.len() == 30, "{did}");

    // The recorded delivery.
    let d = app
        .get(&format!("/v1/webhook_deliveries/{did}"))
        .await
        .expect(200);
    assert_eq!(d["object"], "webhook_delivery");
    assert_eq!(d["status"], "succeeded");
    assert_eq!(d["attempt"], 1);
    assert_eq!(d["max_attempts"], 8);
    assert_eq!(d["response_status"], 200);
    assert_eq!(d["resolved_ip"], "127.0.0.1");
    assert_eq!(d["response_body"], "ok");
    assert_eq!(d["event_id"], evt["id"]);
    assert_eq!(d["endpoint_id"], ep["id"]);
    assert_eq!(d["event_type"], "customer.created");
    assert_eq!(d["endpoint_url"], rx.url("/sig"));
    assert!(d["duration_ms"].is_u64());
    assert!(d["delivered_at"].is_string() && d["next_attempt_at"].is_null());
    assert!(d["replay_of"].is_null());
    let l = app
        .get(&format!("/v1/events/{}/deliveries", s(&evt["id"])))
        .await
        .expect(200);
    assert_eq!(l["data"].as_array().unwrap().len(), 1);
    assert!(l["data"][0].get("response_body").is_none());
    let l = app.deliveries("status=succeeded").await;
    assert_eq!(l.len(), 1);
    assert!(app.deliveries("status=failed").await.is_empty());
    app.get("/v1/webhook_deliveries?status=lost")
        .await
        .expect_error(400, "invalid_request");
    app.get("/v1/webhook_deliveries/whd_nope")
        .await
        .expect_error(400, "invalid_request");
}

#[tokio::test]
async fn rotation_signs_with_both_secrets_until_the_overlap_ends() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let ep = app.create_endpoint(&rx.url("/rot"), json!({})).await;
    let id = s(&ep["id"]);
    let old = s(&ep["secret"]);
    let r = app
        .post(
            &format!("/v1/webhooks/{id}/rotate_secret"),
            json!({ "overlap_hours": 2 }),
        )
        .await
        .expect(200);
    let new = s(&r["secret"]);
    assert_ne!(old, new);
    app.customer().await;
    let hit = rx.wait("/rot", 1, Duration::from_secs(10)).await.remove(0);
    let header = hit.signature.unwrap();
    assert_eq!(header.matches("v1=").count(), 2, "{header}");
    for secret in [&new, &old] {
        assert!(verify_signature(&header, &hit.body, secret));
        assert!(stripe_verifies(&header, &hit.body, secret));
    }
    // Newest first.
    let first_v1 = header.split(',').find(|p| p.starts_with("v1=")).unwrap();
    let t = header.split(',').next().unwrap().trim_start_matches("t=");
    let only_new = format!("t={t},{first_v1}");
    assert!(verify_signature(&only_new, &hit.body, &new));

    // A leaked secret: overlap 0 ends every older secret at once.
    let r = app
        .post(
            &format!("/v1/webhooks/{id}/rotate_secret"),
            json!({ "overlap_hours": 0 }),
        )
        .await
        .expect(200);
    let newest = s(&r["secret"]);
    app.customer().await;
    let hit = rx.wait("/rot", 2, Duration::from_secs(10)).await.remove(1);
    let header = hit.signature.unwrap();
    assert_eq!(header.matches("v1=").count(), 1, "{header}");
    assert!(stripe_verifies(&header, &hit.body, &newest));
    assert!(!stripe_verifies(&header, &hit.body, &new));
    assert!(!stripe_verifies(&header, &hit.body, &old));
}

#[tokio::test]
async fn event_types_filter_and_empty_means_all() {
    let app = spawn_app().await;
    let rx = receiver().await;
    app.create_endpoint(&rx.url("/all"), json!({})).await;
    app.create_endpoint(
        &rx.url("/wallets"),
        json!({ "event_types": ["wallet.created"] }),
    )
    .await;
    let cust = app.customer().await;
    app.post(
        "/v1/wallets",
        json!({ "customer_id": cust, "chain": "ethereum" }),
    )
    .await
    .expect(201);
    let all = rx.wait("/all", 2, Duration::from_secs(10)).await;
    let mut types: Vec<String> = all.iter().map(|h| s(&h.json["type"])).collect();
    types.sort();
    assert_eq!(types, vec!["customer.created", "wallet.created"]);
    let w = rx.wait("/wallets", 1, Duration::from_secs(10)).await;
    assert_eq!(w[0].json["type"], "wallet.created");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.hits("/wallets").len(), 1);
}

#[tokio::test]
async fn test_event_goes_through_the_pipeline_to_one_endpoint() {
    let app = spawn_app().await;
    let rx = receiver().await;
    let a = app.create_endpoint(&rx.url("/ta"), json!({})).await;
    app.create_endpoint(&rx.url("/tb"), json!({})).await;
    let id = s(&a["id"]);
    let r = app
        .post(&format!("/v1/webhooks/{id}/test"), json!({}))
        .await
        .expect(202);
    let evt = s(&r["event_id"]);
    let did = s(&r["delivery_id"]);
    assert!(evt.starts_with("evt_") && did.starts_with("whd_"));
    let hit = rx.wait("/ta", 1, Duration::from_secs(10)).await.remove(0);
    assert_eq!(hit.json["type"], "endpoint.test");
    assert_eq!(hit.json["id"], evt.as_str());
    assert_eq!(hit.json["delivery_id"], did.as_str());
    assert!(stripe_verifies(
        hit.signature.as_deref().unwrap(),
        &hit.body,
        &s(&a["secret"])
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        rx.hits("/tb").is_empty(),
        "only the tested endpoint gets it"
    );
    let e = app.get(&format!("/v1/events/{evt}")).await.expect(200);
    assert_eq!(e["type"], "endpoint.test");
    // 5 per minute: four more pass, the sixth is refused.
    for _ in 0..4 {
        app.post(&format!("/v1/webhooks/{id}/test"), json!({}))
            .await
            .expect(202);
    }
    let r = app
        .post(&format!("/v1/webhooks/{id}/test"), json!({}))
        .await;
    assert!(r.headers.get("retry-after").is_some());
    r.expect_error(429, "rate_limited");
}

#[tokio::test]
async fn first_attempt_arrives_quickly_after_the_commit() {
    let app = spawn_app().await;
    let rx = receiver().await;
    app.create_endpoint(&rx.url("/fast"), json!({})).await;
    let mut worst = Duration::ZERO;
    for i in 0..20 {
        let t0 = Instant::now();
        app.customer().await;
        let hit = rx
            .wait("/fast", i + 1, Duration::from_secs(10))
            .await
            .remove(i);
        worst = worst.max(hit.at.saturating_duration_since(t0));
    }
    // The dispatcher is notified by the commit, it does not poll.
    assert!(worst < Duration::from_secs(1), "slowest: {worst:?}");
}

#[tokio::test]
async fn a_slow_receiver_does_not_hold_up_the_others() {
    // 8 send slots: at most 2 for one endpoint.
    let app = spawn_with(Opts {
        env: vec![("APPLIANCE_WEBHOOKS__MAX_CONCURRENCY".into(), "8".into())],
        ..Opts::default()
    })
    .await;
    let rx = receiver().await;
    rx.set(
        "/slow",
        Behavior {
            status: 200,
            delay_ms: 1500,
        },
    );
    app.create_endpoint(&rx.url("/slow"), json!({})).await;
    for _ in 0..20 {
        app.customer().await;
    }
    app.create_endpoint(&rx.url("/quick"), json!({})).await;
    for i in 0..5 {
        let t0 = Instant::now();
        app.customer().await;
        let hit = rx
            .wait("/quick", i + 1, Duration::from_secs(10))
            .await
            .remove(i);
        let took = hit.at.saturating_duration_since(t0);
        assert!(
            took < Duration::from_secs(1),
            "quick endpoint waited {took:?}"
        );
    }
    assert!(
        rx.max_concurrent("/slow") <= 2,
        "{}",
        rx.max_concurrent("/slow")
    );
}
