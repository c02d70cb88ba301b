//! The second security round, point by point as an attacker tries it: slow
//! bodies, unbounded metrics labels, unsafe redirect URLs, undecodable tokens, the nosniff
//! header. (Key kinds: key_escalation.rs; the pepper on restore: selfhost.rs.)

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::connections::{assert_envelope, raw_request, read_response};
use crate::helpers::*;

/// A test invoice's checkout token.
async fn token(app: &App) -> String {
    let inv = app
        .post(
            &app.checkout_key,
            "/v1/invoices",
            json!({ "price_amount": "4000" }),
        )
        .await
        .expect_success();
    let url = inv["checkout_url"].as_str().expect("checkout_url");
    url.rsplit('/').next().unwrap().to_string()
}

/// The head of a POST that announces `len` body bytes.
fn slow_head(path: &str, len: usize) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n{{"
    )
    .into_bytes()
}

/// Point 1: a token miss is answered before the body; a body trickled in is cut at
/// `body_read_timeout_secs` with 408 and the connection closed; one address cannot hold
/// the connection ceiling with slow bodies, and keyed requests keep being answered.
#[tokio::test]
async fn slow_bodies_cannot_hold_the_connection_ceiling() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[
            ("APPLIANCE_LIMITS__MAX_CONNECTIONS", "100"),
            ("APPLIANCE_LIMITS__BODY_READ_TIMEOUT_SECS", "2"),
        ],
    )
    .await;
    let tok = token(&app).await;

    // A miss: 404 at once, the announced body never waited for.
    let bogus = format!("/v1/checkout/ck_{}/select", "A".repeat(43));
    let mut s = TcpStream::connect(&app.addr).await.unwrap();
    s.write_all(&slow_head(&bogus, 100_000)).await.unwrap();
    let t = Instant::now();
    let r = read_response(&mut s, Duration::from_secs(5))
        .await
        .expect("an answer to a miss");
    assert_eq!(r.status, 404, "{} {}", r.head, r.body);
    assert_envelope(&r, 404, "not_found");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());

    // A real token, a body that never completes: 408 at the body timeout.
    let path = format!("/v1/checkout/{tok}/select");
    let mut s = TcpStream::connect(&app.addr).await.unwrap();
    s.write_all(&slow_head(&path, 100_000)).await.unwrap();
    let t = Instant::now();
    let r = read_response(&mut s, Duration::from_secs(8))
        .await
        .expect("an answer to a slow body");
    assert_envelope(&r, 408, "request_timeout");
    assert!(r.head.contains("connection: close"), "{}", r.head);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "{took:?}"
    );

    // 120 slow bodies from one address against a ceiling of 100: at most a few are read at
    // once (429 for the rest), and keyed pings are answered all along.
    let mut socks = Vec::new();
    for _ in 0..120 {
        let mut s = TcpStream::connect(&app.addr).await.unwrap();
        s.write_all(&slow_head(&path, 100_000)).await.unwrap();
        socks.push(s);
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(4);
    let mut pings = 0;
    while Instant::now() < until {
        let r = client
            .get(app.url("/v1/ping"))
            .header("Authorization", format!("Bearer {}", app.wallet_key))
            .send()
            .await
            .unwrap_or_else(|e| panic!("keyed ping {pings} failed: {e}"));
        assert_eq!(r.status(), 200, "keyed ping {pings}");
        pings += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Keep trickling.
        for s in &mut socks {
            let _ = s.write_all(b" ").await;
        }
    }
    assert!(pings >= 10, "{pings}");
    let mut limited = 0;
    for s in &mut socks {
        if let Some(r) = read_response(s, Duration::from_millis(200)).await {
            if r.status == 429 {
                limited += 1;
            }
        }
    }
    assert!(
        limited >= 100,
        "only {limited} of 120 slow bodies were refused"
    );
}

async fn metrics_text(app: &App) -> String {
    reqwest::get(app.url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body")
}

/// Point 2: every label of the HTTP metrics comes from a closed set; invented methods are
/// `other`, and `/metrics` does not grow with them.
#[tokio::test]
async fn invented_methods_do_not_grow_the_metrics() {
    let app = spawn_app().await;
    let size = |t: &str| t.len();
    app.get(&app.wallet_key, "/v1/ping").await.expect(200);
    let before = metrics_text(&app).await;
    for i in 0..50 {
        let method = format!("X{}{i}", "Y".repeat(2000));
        let r = raw_request(
            &app.addr,
            format!("{method} /v1/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
        assert!(r.status >= 400, "{}", r.status);
    }
    let after = metrics_text(&app).await;
    assert!(!after.contains("YYYY"), "an invented method is a label");
    assert!(after.contains("method=\"other\""), "{after}");
    assert!(
        size(&after) < size(&before) + 4096,
        "/metrics grew from {} to {} bytes",
        size(&before),
        size(&after)
    );
}

/// Point 6: the page sends the buyer to `return_url` / `cancel_url`, so only http(s) URLs
/// with a host (https only in live mode).
#[tokio::test]
async fn redirect_urls_are_http_or_https_only() {
    let app = spawn_app().await;
    for (param, url) in [
        ("return_url", "javascript:alert(1)"),
        ("cancel_url", "data:text/html,<script>alert(1)</script>"),
        ("return_url", "//evil.example/x"),
        ("cancel_url", "ftp://shop.example/x"),
        ("return_url", "https://shop.example/a b"),
    ] {
        app.post(
            &app.checkout_key,
            "/v1/invoices",
            json!({ "price_amount": "4000", param: url }),
        )
        .await
        .expect_error_param(400, "invalid_request", param);
    }
    let inv = app
        .post(
            &app.checkout_key,
            "/v1/invoices",
            json!({ "price_amount": "4000", "return_url": "https://shop.example/thanks",
                    "cancel_url": "http://localhost:3000/cart" }),
        )
        .await
        .expect(201);
    assert_eq!(inv["return_url"], "https://shop.example/thanks", "{inv}");
}

/// Point 7: a token whose percent-escapes are not UTF-8 is an unknown token: 404 in the
/// envelope (the page: its own 404), never the router's plain-text 400.
#[tokio::test]
async fn an_undecodable_token_is_a_miss() {
    let app = spawn_app().await;
    let r = raw_request(
        &app.addr,
        b"GET /v1/checkout/ck_%FF%FE HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_envelope(&r, 404, "not_found");
    let r = raw_request(
        &app.addr,
        b"POST /v1/checkout/%C3%28/select HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{}",
    )
    .await;
    assert_envelope(&r, 404, "not_found");
    let page = app
        .send(reqwest::Method::GET, None, "/checkout/ck_%FF", None, &[])
        .await;
    assert_eq!(page.status, 404, "{}", page.text);
}

/// Point 10: JSON answers carry `X-Content-Type-Options: nosniff`.
#[tokio::test]
async fn json_answers_say_nosniff() {
    let app = spawn_app().await;
    for (token, path) in [
        (Some(app.wallet_key.as_str()), "/v1/ping"),
        (None, "/v1/ping"),
        (Some(app.wallet_key.as_str()), "/v1/no-such-route"),
    ] {
        let r = raw_request(
            &app.addr,
            format!(
                "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{}\r\n",
                token
                    .map(|t| format!("Authorization: Bearer {t}\r\n"))
                    .unwrap_or_default()
            )
            .as_bytes(),
        )
        .await;
        assert!(
            r.head.contains("x-content-type-options: nosniff"),
            "{path}: {}",
            r.head
        );
    }
}

/// Every file of a data dir, read whole.
fn data_dir_bytes(app: &App) -> Vec<(String, Vec<u8>)> {
    let dir = app.data_path("");
    let mut out = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.push((p.display().to_string(), b));
            }
        }
    }
    out
}

/// Point 4: a checkout token is never stored in clear: not in the invoice's row, not in
/// its `invoice.*` events, not in the idempotent answer of its creation, not in what a
/// webhook receiver that echoes the body answered. Every reader still shows the same
/// `checkout_url`, and it still opens the checkout after a restart.
#[tokio::test]
async fn checkout_tokens_are_not_stored_in_clear() {
    // A receiver that answers with the body it got.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move {
        let echo = axum::Router::new().route(
            "/hook",
            axum::routing::post(|body: String| async move { body }),
        );
        axum::serve(l, echo).await.unwrap();
    });
    let mut app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_WEBHOOKS__ALLOW_PRIVATE_TARGETS", "true")],
    )
    .await;
    app.post(&app.wallet_key, "/v1/webhooks", json!({ "url": hook }))
        .await
        .expect(201);

    let key = idem();
    let body = json!({ "price_amount": "4000", "title": "at rest" });
    let inv = app
        .post_idem(&app.checkout_key, "/v1/invoices", body.clone(), &key)
        .await
        .expect(201);
    let url = inv["checkout_url"].as_str().unwrap().to_string();
    let tok = url.rsplit('/').next().unwrap().to_string();
    assert!(tok.starts_with("ck_") && tok.len() == 46, "{url}");
    let id = inv["id"].as_str().unwrap().to_string();

    // Every reader renders the same URL: the replay, the read, the event, the webhook.
    let replay = app
        .post_idem(&app.checkout_key, "/v1/invoices", body, &key)
        .await;
    assert_eq!(
        replay.header("idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(replay.expect(201)["checkout_url"], url.as_str());
    let read = app
        .get(&app.checkout_key, &format!("/v1/invoices/{id}"))
        .await
        .expect(200);
    assert_eq!(read["checkout_url"], url.as_str());
    app.post(
        &app.checkout_key,
        &format!("/v1/invoices/{id}/cancel"),
        json!({}),
    )
    .await
    .expect(200);
    let events = app.events(&format!("resource_id={id}")).await;
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(
        types.contains(&"invoice.created") && types.contains(&"invoice.canceled"),
        "{types:?}"
    );
    for e in &events {
        assert_eq!(e["data"]["checkout_url"], url.as_str(), "{e}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let delivered = loop {
        let d = app
            .get(&app.wallet_key, "/v1/webhook_deliveries?limit=100")
            .await
            .expect(200);
        let done: Vec<Value> = d["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["status"] == "succeeded" && d["event_type"] == "invoice.canceled")
            .cloned()
            .collect();
        if let Some(d) = done.first() {
            break d.clone();
        }
        assert!(Instant::now() < deadline, "no delivery succeeded: {d}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let one = app
        .get(
            &app.wallet_key,
            &format!(
                "/v1/webhook_deliveries/{}",
                delivered["id"].as_str().unwrap()
            ),
        )
        .await
        .expect(200);
    let echoed = one["response_body"].as_str().expect("the echo was kept");
    assert!(echoed.contains(&format!("\"id\":\"{id}\"")), "{echoed}");
    assert!(echoed.contains("/checkout/ck_[redacted]"), "{echoed}");
    assert!(
        !echoed.contains(&tok[3..]),
        "the echo kept the token: {echoed}"
    );

    // The store, the files beside it: no token anywhere.
    app.stop();
    for (path, bytes) in data_dir_bytes(&app) {
        let hit = bytes
            .windows(tok.len() - 3)
            .any(|w| w == &tok.as_bytes()[3..]);
        assert!(!hit, "{path} holds the checkout token in clear");
    }

    // Still the same link after a restart.
    app.start();
    let read = app
        .get(&app.checkout_key, &format!("/v1/invoices/{id}"))
        .await
        .expect(200);
    assert_eq!(read["checkout_url"], url.as_str());
    let d = app
        .send(
            reqwest::Method::GET,
            None,
            &format!("/v1/checkout/{tok}"),
            None,
            &[],
        )
        .await
        .expect(200);
    assert_eq!(d["status"], "canceled", "{d}");
}
