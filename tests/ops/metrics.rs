//! `GET /metrics`: Prometheus text read by the reference parser, the
//! families an operator needs, counts that move, and the access rules.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::common::*;
use crate::helpers::*;

async fn scrape(app: &App) -> Vec<Sample> {
    let (status, text) = get_metrics(&app.base_url, &[]).await;
    assert_eq!(status, 200, "{text}");
    parse_metrics(&text)
}

#[tokio::test]
async fn metrics_text_parses_and_its_counts_move() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_WEBHOOKS__ALLOW_PRIVATE_TARGETS", "true")],
    )
    .await;
    let r = reqwest::get(app.url("/metrics")).await.unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let before = scrape(&app).await;
    let pings = |s: &[Sample]| {
        sum(
            s,
            "appliance_http_requests_total",
            &[("route", "/v1/ping"), ("status", "200"), ("method", "GET")],
        )
    };
    let commits = |s: &[Sample]| sum(s, "appliance_store_commits_total", &[("result", "ok")]);
    for _ in 0..3 {
        app.ping(&app.wallet_key).await;
    }
    // A webhook endpoint nobody listens on: the customer.created delivery fails to connect.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    app.post(
        &app.wallet_key,
        "/v1/webhooks",
        json!({ "url": format!("http://127.0.0.1:{port}/hook") }),
    )
    .await
    .expect(201);
    // A simulated block: chain heights.
    app.mine(1).await;
    // A payout in flight.
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    app.create_payout(json!({ "customer_id": s(&c["id"]), "chain": "ethereum",
        "asset": "USDT", "decimals": 6, "amount": "1000000",
        "to_address": external_address(0x62) }))
        .await
        .expect(202);
    let deadline = Instant::now() + Duration::from_secs(15);
    let after = loop {
        let m = scrape(&app).await;
        if has(&m, "appliance_webhook_deliveries_total") || Instant::now() > deadline {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Every family an operator needs is there, with its type.
    let kind_of = |name: &str| {
        after
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.kind.clone())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(kind_of("appliance_http_requests_total"), "counter");
    assert_eq!(
        kind_of("appliance_http_request_duration_seconds_bucket"),
        "histogram"
    );
    assert_eq!(
        kind_of("appliance_store_commit_duration_seconds_bucket"),
        "histogram"
    );
    assert_eq!(kind_of("appliance_store_batch_size_bucket"), "histogram");
    assert_eq!(kind_of("appliance_webhook_outbox_depth"), "gauge");
    assert_eq!(kind_of("appliance_webhook_deliveries_total"), "counter");
    assert_eq!(kind_of("appliance_chain_head_height"), "gauge");
    assert_eq!(kind_of("appliance_chain_lag_blocks"), "gauge");
    assert_eq!(kind_of("appliance_payouts_pending"), "gauge");
    // Counts move.
    assert_eq!(pings(&after) - pings(&before), 3.0);
    assert_eq!(
        sum(
            &after,
            "appliance_http_request_duration_seconds_count",
            &[("route", "/v1/ping")]
        ) - sum(
            &before,
            "appliance_http_request_duration_seconds_count",
            &[("route", "/v1/ping")]
        ),
        3.0
    );
    assert!(commits(&after) > commits(&before));
    assert!(
        sum(&after, "appliance_store_batch_size_count", &[])
            > sum(&before, "appliance_store_batch_size_count", &[])
    );
    assert!(
        sum(
            &after,
            "appliance_webhook_deliveries_total",
            &[("outcome", "transport_error")]
        ) >= 1.0
    );
    assert_eq!(sum(&after, "appliance_payouts_pending", &[]), 1.0);
    assert!(
        sum(
            &after,
            "appliance_chain_head_height",
            &[("chain", "ethereum"), ("mode", "test")]
        ) >= 1.0
    );
    // Route labels are templates, never raw paths with ids.
    let cid = s(&c["id"]);
    app.get(&app.wallet_key, &format!("/v1/customers/{cid}"))
        .await
        .expect(200);
    let m = scrape(&app).await;
    assert!(
        sum(
            &m,
            "appliance_http_requests_total",
            &[("route", "/v1/customers/{id}")]
        ) >= 1.0
    );
    for smp in &m {
        if let Some(r) = smp.labels.get("route").and_then(|v| v.as_str()) {
            assert!(!r.contains(&cid), "raw path as a label: {r}");
        }
    }
}

#[tokio::test]
async fn metrics_default_to_loopback_and_refuse_relayed_requests() {
    let app = spawn_app().await;
    assert_eq!(get_metrics(&app.base_url, &[]).await.0, 200);
    // A same-host proxy that is not trusted relays the internet: refused.
    let (status, body) = get_metrics(&app.base_url, &[("X-Forwarded-For", "127.0.0.1")]).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("route_not_found"), "{body}");
    // Health stays public.
    assert_eq!(get_public(&app.base_url, "/healthz").await.0, 200);
    assert_eq!(get_public(&app.base_url, "/readyz").await.0, 200);

    let app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_TRUSTED_PROXIES", "127.0.0.1/32")],
    )
    .await;
    // Through a trusted proxy: the forwarded client decides.
    let (status, _) = get_metrics(&app.base_url, &[("X-Forwarded-For", "203.0.113.5")]).await;
    assert_eq!(status, 404);
    let (status, _) = get_metrics(&app.base_url, &[("X-Forwarded-For", "127.0.0.1")]).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn metrics_off_answers_404() {
    let app = spawn_app_with("127.0.0.1:0", &[("APPLIANCE_METRICS__ACCESS", "off")]).await;
    let (status, body) = get_metrics(&app.base_url, &[]).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("route_not_found"), "{body}");
    assert_eq!(get_public(&app.base_url, "/healthz").await.0, 200);
}

#[tokio::test]
async fn metrics_token_is_required_and_checked() {
    let token = "metrics-token-0123456789abcdef";
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[
            ("APPLIANCE_METRICS__ACCESS", "token"),
            ("APPLIANCE_METRICS__TOKEN_ENV", "OPS_TEST_METRICS_TOKEN"),
            ("OPS_TEST_METRICS_TOKEN", token),
        ],
    )
    .await;
    let r = app.send(Method::GET, None, "/metrics", None, &[]).await;
    r.expect_error(401, "invalid_metrics_token");
    assert_eq!(r.header("www-authenticate").as_deref(), Some("Bearer"));
    app.send(
        Method::GET,
        Some("metrics-token-0123456789abcdeX"),
        "/metrics",
        None,
        &[],
    )
    .await
    .expect_error(401, "invalid_metrics_token");
    // An API key is not the metrics token.
    app.send(Method::GET, Some(&app.wallet_key), "/metrics", None, &[])
        .await
        .expect_error(401, "invalid_metrics_token");
    let (status, text) = get_metrics(
        &app.base_url,
        &[("Authorization", &format!("Bearer {token}"))],
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(has(&parse_metrics(&text), "appliance_http_requests_total"));
    // The token never reaches the logs.
    for l in app.output.lock().unwrap().iter() {
        assert!(!l.contains(token), "metrics token logged: {l}");
    }
}

#[test]
fn metrics_token_mode_without_a_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = std::process::Command::new(bin())
        .args(["--test", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("APPLIANCE_METRICS__ACCESS", "token")
        .env("APPLIANCE_METRICS__TOKEN_ENV", "OPS_TEST_UNSET_TOKEN")
        .env_remove("OPS_TEST_UNSET_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started without a metrics token");
    assert!(err.contains("metrics.token_env"), "{err}");
    assert!(err.contains("OPS_TEST_UNSET_TOKEN"), "{err}");
    assert!(!data.join("appliance.redb").exists(), "store opened first");
}
