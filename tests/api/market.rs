//! Market prices (SPEC.md sections 2 and 4, DECISIONS.md sections 11 and
//! 15): the public price list and market status in test mode (the test table,
//! `POST /v1/test/prices`) and in live mode against a loopback server speaking Kraken's
//! public ticker API with its real answer and error shapes; native payouts valued at the
//! market price.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;

// ------------------------------------------------------------- a Kraken-speaking server

/// What the fake answers for one pair.
#[derive(Clone)]
enum Answer {
    /// A ticker with this last trade price (`c[0]`), in Kraken's exact shape.
    Last(&'static str),
    /// A status, content type and body as given.
    Raw(u16, &'static str, &'static str),
}

#[derive(Clone, Default)]
struct Fake {
    answers: Arc<Mutex<HashMap<String, Answer>>>,
    hits: Arc<Mutex<HashMap<String, u32>>>,
}

impl Fake {
    fn set(&self, pair: &str, a: Answer) {
        self.answers.lock().unwrap().insert(pair.to_string(), a);
    }
    fn hits(&self, pair: &str) -> u32 {
        self.hits.lock().unwrap().get(pair).copied().unwrap_or(0)
    }
}

/// Kraken's ticker entry (`GET /0/public/Ticker?pair=XETHZUSD`), every field it sends.
fn ticker_body(pair: &str, last: &str) -> String {
    format!(
        r#"{{"error":[],"result":{{"{pair}":{{"a":["{last}","1","1.000"],"b":["{last}","3","3.000"],"c":["{last}","0.05390000"],"v":["1523.39815208","5631.48416599"],"p":["{last}","{last}"],"t":[21360,67891],"l":["{last}","{last}"],"h":["{last}","{last}"],"o":"{last}"}}}}}}"#
    )
}

async fn ticker(State(f): State<Fake>, Query(q): Query<HashMap<String, String>>) -> Response {
    let pair = q.get("pair").cloned().unwrap_or_default();
    *f.hits.lock().unwrap().entry(pair.clone()).or_default() += 1;
    let answer = f.answers.lock().unwrap().get(&pair).cloned();
    match answer {
        Some(Answer::Last(p)) => (
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            ticker_body(&pair, p),
        )
            .into_response(),
        Some(Answer::Raw(st, ct, body)) => (
            StatusCode::from_u16(st).unwrap(),
            [(header::CONTENT_TYPE, ct)],
            body,
        )
            .into_response(),
        None => (
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            r#"{"error":["EQuery:Unknown asset pair"]}"#,
        )
            .into_response(),
    }
}

/// Starts the fake on a loopback port; returns it and its base URL.
async fn start_fake() -> (Fake, String) {
    let fake = Fake::default();
    let app = axum::Router::new()
        .route("/0/public/Ticker", axum::routing::get(ticker))
        .with_state(fake.clone());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(l, app).await.unwrap();
    });
    (fake, format!("http://{addr}"))
}

// ------------------------------------------------------------- a live-mode server

/// `appliance serve` with a config of its own (live mode, no chains).
struct LiveServer {
    child: Child,
    base: String,
    client: reqwest::Client,
    _tmp: tempfile::TempDir,
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LiveServer {
    fn start(config: &str) -> LiveServer {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = tmp.path().join("config.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = \"127.0.0.1:0\"\n[limits]\nunauthenticated_per_minute = 1000\n{config}"
            ),
        )
        .unwrap();
        let data = tmp.path().join("data");
        let mut child = Command::new(env!("CARGO_BIN_EXE_appliance"))
            .args(["serve", "--config"])
            .arg(&cfg)
            .arg("--data-dir")
            .arg(&data)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn appliance serve");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.trim().strip_prefix("appliance listening on http://") {
                    let _ = tx.send(rest.split_whitespace().next().unwrap().to_string());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("serve did not start");
        assert!(Path::new(&data).exists());
        LiveServer {
            child,
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            _tmp: tmp,
        }
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let st = r.status().as_u16();
        (st, r.json().await.unwrap_or(Value::Null))
    }
}

/// `{symbol: usd}` of a price list.
fn prices_of(list: &Value) -> HashMap<String, String> {
    list["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {list}"))
        .iter()
        .map(|e| {
            assert!(e["age_seconds"].is_u64(), "{e}");
            (s(&e["symbol"]), s(&e["usd"]))
        })
        .collect()
}

fn age_of(list: &Value, symbol: &str) -> u64 {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["symbol"] == symbol)
        .and_then(|e| e["age_seconds"].as_u64())
        .unwrap_or_else(|| panic!("{symbol} not in {list}"))
}

async fn public(app: &App, path: &str) -> Resp {
    app.send(Method::GET, None, path, None, &[]).await
}

// ------------------------------------------------------------- test mode

#[tokio::test]
async fn test_mode_serves_the_test_table_without_a_key() {
    let app = spawn_app().await;
    let list = public(&app, "/v1/market/prices").await.expect(200);
    assert_eq!(list["object"], "price_list");
    assert_eq!(list["configured"], true);
    assert_eq!(list["ttl_seconds"], 60);
    let p = prices_of(&list);
    for (sym, usd) in [
        ("ETH", "3000.00"),
        ("BTC", "60000.00"),
        ("BNB", "600.00"),
        ("POL", "0.50"),
        ("AVAX", "30.00"),
        ("TRX", "0.25"),
        ("SOL", "150.00"),
        ("TON", "5.00"),
        ("DOGE", "0.20"),
        ("USDT", "1.00"),
        ("USDC", "1.00"),
    ] {
        assert_eq!(p.get(sym).map(String::as_str), Some(usd), "{sym}: {list}");
    }
    assert_eq!(p.len(), 11, "{list}");
    // A filter, in any case, unknown symbols left out.
    let list = public(&app, "/v1/market/prices?symbols=eth,NOPE,usdc")
        .await
        .expect(200);
    let syms: Vec<String> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| s(&e["symbol"]))
        .collect();
    assert_eq!(syms, vec!["ETH", "USDC"]);
    for bad in [
        "ETH,",
        "E%2DTH",
        "ETH;BTC",
        "ABCDEFGHIJKLMNOPQ",
        "ETH,%20BTC",
    ] {
        public(&app, &format!("/v1/market/prices?symbols={bad}"))
            .await
            .expect_error_param(400, "invalid_request", "symbols");
    }
    let st = public(&app, "/v1/market/status").await.expect(200);
    assert_eq!(st["object"], "market_status");
    assert_eq!(st["configured"], true);
    assert_eq!(st["provider"], "test");
    assert!(st["base_url"].is_string(), "{st}");
}

#[tokio::test]
async fn test_prices_change_with_post_test_prices() {
    let app = spawn_app().await;
    let r = app
        .post(
            &app.wallet_key,
            "/v1/test/prices",
            json!({"symbol": "ETH", "usd": "2500.5"}),
        )
        .await
        .expect(200);
    assert_eq!(r["object"], "test_price");
    assert_eq!(r["symbol"], "ETH");
    assert_eq!(r["usd"], "2500.50");
    let p = prices_of(
        &public(&app, "/v1/market/prices?symbols=ETH,BTC")
            .await
            .expect(200),
    );
    assert_eq!(p["ETH"], "2500.50");
    assert_eq!(p["BTC"], "60000.00");
    // Refusals.
    for (body, param, code) in [
        (
            json!({"symbol": "ETH", "usd": "0"}),
            "usd",
            "invalid_request",
        ),
        (
            json!({"symbol": "ETH", "usd": "0.00"}),
            "usd",
            "invalid_request",
        ),
        (
            json!({"symbol": "ETH", "usd": "-1"}),
            "usd",
            "invalid_request",
        ),
        (
            json!({"symbol": "ETH", "usd": "abc"}),
            "usd",
            "invalid_request",
        ),
        (
            json!({"symbol": "ETH", "usd": "1e3"}),
            "usd",
            "invalid_request",
        ),
        (
            json!({"symbol": "ETH", "usd": 2500}),
            "usd",
            "invalid_request",
        ),
        (json!({"symbol": "ETH"}), "usd", "invalid_request"),
        (json!({"usd": "1.00"}), "symbol", "invalid_request"),
        (
            json!({"symbol": "USDT", "usd": "0.99"}),
            "symbol",
            "invalid_request",
        ),
        (
            json!({"symbol": "NOPE", "usd": "1.00"}),
            "symbol",
            "unknown_asset",
        ),
    ] {
        app.post(&app.wallet_key, "/v1/test/prices", body.clone())
            .await
            .expect_error_param(400, code, param);
    }
    // Test wallet keys only.
    app.post(
        &app.checkout_key,
        "/v1/test/prices",
        json!({"symbol": "ETH", "usd": "1.00"}),
    )
    .await
    .expect_error(403, "test_mode_only");
    app.send(
        Method::POST,
        None,
        "/v1/test/prices",
        Some(&json!({"symbol": "ETH", "usd": "1.00"})),
        &[],
    )
    .await
    .expect_error(401, "invalid_api_key");
    // Nothing refused changed the table.
    let p = prices_of(
        &public(&app, "/v1/market/prices?symbols=ETH")
            .await
            .expect(200),
    );
    assert_eq!(p["ETH"], "2500.50");
}

#[tokio::test]
async fn native_payouts_are_valued_and_approved_at_the_market_price() {
    let app = spawn_app().await;
    app.project_set(&["--auto-approve-threshold-cents", "1000"]);
    let (c, _, _) = app
        .funded_customer("ethereum", "ETH", 18, "1000000000000000000")
        .await;
    let cid = s(&c["id"]);
    let body = |amount: &str| {
        json!({ "customer_id": cid, "chain": "ethereum", "asset": "ETH", "decimals": 18,
                "amount": amount, "to_address": external_address(0x71) })
    };
    // 0.001 ETH at 3000 = $3: at or below $10, queued.
    let small = app
        .create_payout(body("1000000000000000"))
        .await
        .expect(202);
    assert_eq!(small["status"], "queued", "{small}");
    assert!(decimal_eq(&s(&small["amount_usd"]), "3"), "{small}");
    // 0.01 ETH = $30: above, held for approval.
    let big = app
        .create_payout(body("10000000000000000"))
        .await
        .expect(202);
    assert_eq!(big["status"], "pending_approval", "{big}");
    assert!(decimal_eq(&s(&big["amount_usd"]), "30"), "{big}");
    // Just under $10 (0.003333.. ETH at 3000 = $9.999..): queued; shown in whole cents,
    // rounded down.
    let edge = app
        .create_payout(body("3333333333333333"))
        .await
        .expect(202);
    assert_eq!(edge["status"], "queued", "{edge}");
    assert!(decimal_eq(&s(&edge["amount_usd"]), "9.99"), "{edge}");
    // The price moves: the same 0.01 ETH at 500 is $5.
    app.post(
        &app.wallet_key,
        "/v1/test/prices",
        json!({"symbol": "ETH", "usd": "500"}),
    )
    .await
    .expect(200);
    let after = app
        .create_payout(body("10000000000000000"))
        .await
        .expect(202);
    assert_eq!(after["status"], "queued", "{after}");
    assert!(decimal_eq(&s(&after["amount_usd"]), "5"), "{after}");
    // The value is frozen at acceptance: the held payout still reads $30.
    let got = app
        .get(&app.payout_key, &format!("/v1/payouts/{}", s(&big["id"])))
        .await
        .expect(200);
    assert!(decimal_eq(&s(&got["amount_usd"]), "30"), "{got}");
}

#[tokio::test]
async fn public_market_endpoints_spend_the_unauthenticated_budget() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_LIMITS__UNAUTHENTICATED_PER_MINUTE", "3")],
    )
    .await;
    for _ in 0..3 {
        public(&app, "/v1/market/status").await.expect(200);
    }
    let r = public(&app, "/v1/market/prices").await;
    r.expect_error(429, "rate_limited");
    assert!(r.header("retry-after").is_some());
}

// ------------------------------------------------------------- live mode

#[tokio::test]
async fn live_without_a_market_section_is_not_configured() {
    let live = LiveServer::start("");
    let (st, v) = live.get("/v1/market/prices").await;
    assert_eq!(st, 503, "{v}");
    assert_eq!(v["object"], "price_list");
    assert_eq!(v["configured"], false);
    assert_eq!(v["data"], json!([]));
    assert!(v["ttl_seconds"].is_u64());
    assert_eq!(v["code"], "market_not_configured");
    assert_eq!(v["error"], "market_not_configured");
    assert_eq!(v["type"], "api_error");
    assert!(s(&v["request_id"]).starts_with("req_"), "{v}");
    let (st, v) = live.get("/v1/market/status").await;
    assert_eq!(st, 200);
    assert_eq!(v["configured"], false);
    assert_eq!(v["base_url"], "");
}

#[tokio::test]
async fn live_prices_come_from_the_provider_and_bad_answers_are_refused() {
    let (fake, base) = start_fake().await;
    fake.set("XETHZUSD", Answer::Last("3000.10000"));
    fake.set("XDGUSD", Answer::Last("0.12340000"));
    fake.set("XXBTZUSD", Answer::Last("0.00000")); // zero
    fake.set("TONUSD", Answer::Last("-5.10000")); // negative
    fake.set(
        "SOLUSD",
        Answer::Raw(
            502,
            "text/html",
            "<html><head><title>502 Bad Gateway</title></head><body>cloudflare</body></html>",
        ),
    );
    fake.set(
        "AVAXUSD",
        Answer::Raw(429, "text/plain", "Too Many Requests"),
    );
    fake.set(
        "TRXUSD",
        Answer::Raw(
            200,
            "application/json",
            r#"{"error":["EAPI:Rate limit exceeded"]}"#,
        ),
    );
    fake.set(
        "POLUSD",
        Answer::Raw(
            503,
            "application/json",
            r#"{"error":["EService:Unavailable"]}"#,
        ),
    );
    // BNBUSD: not set, Kraken's `EQuery:Unknown asset pair`.
    let live = LiveServer::start(&format!(
        "[market]\nbase_url = \"{base}\"\nttl_seconds = 60\nfallback = \"none\"\n"
    ));
    let (st, list) = live.get("/v1/market/prices").await;
    assert_eq!(st, 200, "{list}");
    assert_eq!(list["configured"], true);
    assert_eq!(list["ttl_seconds"], 60);
    let p = prices_of(&list);
    assert_eq!(p.get("ETH").map(String::as_str), Some("3000.10"), "{list}");
    assert_eq!(p.get("DOGE").map(String::as_str), Some("0.1234"), "{list}");
    assert_eq!(p.get("USDT").map(String::as_str), Some("1.00"));
    assert_eq!(p.get("USDC").map(String::as_str), Some("1.00"));
    for refused in ["BTC", "TON", "SOL", "AVAX", "TRX", "POL", "BNB"] {
        assert!(!p.contains_key(refused), "{refused} served: {list}");
    }
    assert!(age_of(&list, "ETH") <= 5);
    let (_, only) = live.get("/v1/market/prices?symbols=eth,btc").await;
    assert_eq!(
        only["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| s(&e["symbol"]))
            .collect::<Vec<_>>(),
        vec!["ETH"]
    );
    let (st, status) = live.get("/v1/market/status").await;
    assert_eq!(st, 200);
    assert_eq!(status["configured"], true);
    assert_eq!(status["base_url"], base.as_str());
    assert_eq!(status["provider"], "kraken");
    assert_eq!(status["fallback"], "none");
    // Within the TTL the cache answers: no new upstream call per request.
    let before = fake.hits("XETHZUSD");
    for _ in 0..5 {
        live.get("/v1/market/prices?symbols=ETH").await;
    }
    assert_eq!(
        fake.hits("XETHZUSD"),
        before,
        "read upstream within the TTL"
    );
    // A provider that recovers is read again (not before the retry pause).
    fake.set("XXBTZUSD", Answer::Last("61000.5"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, l) = live.get("/v1/market/prices?symbols=BTC").await;
        if prices_of(&l).get("BTC").map(String::as_str) == Some("61000.50") {
            break;
        }
        assert!(Instant::now() < deadline, "BTC never priced: {l}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn stale_prices_are_served_then_refreshed_and_expire_after_max_age() {
    let (fake, base) = start_fake().await;
    fake.set("XETHZUSD", Answer::Last("3000.00000"));
    let live = LiveServer::start(&format!(
        "[market]\nbase_url = \"{base}/\"\nttl_seconds = 1\nmax_age_seconds = 4\nfallback = \"none\"\n"
    ));
    let (_, l) = live.get("/v1/market/prices?symbols=ETH").await;
    assert_eq!(prices_of(&l)["ETH"], "3000.00", "{l}");
    fake.set("XETHZUSD", Answer::Last("3100.00000"));
    tokio::time::sleep(Duration::from_millis(1300)).await;
    // Older than the TTL: served as it is, a refresh starts in the background.
    let (_, l) = live.get("/v1/market/prices?symbols=ETH").await;
    assert_eq!(
        prices_of(&l)["ETH"],
        "3000.00",
        "stale value not served: {l}"
    );
    assert!(age_of(&l, "ETH") >= 1, "{l}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, l) = live.get("/v1/market/prices?symbols=ETH").await;
        if prices_of(&l).get("ETH").map(String::as_str) == Some("3100.00") {
            break;
        }
        assert!(Instant::now() < deadline, "never refreshed: {l}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The provider fails: the last value is served until it is older than max_age, then
    // never again.
    fake.set(
        "XETHZUSD",
        Answer::Raw(
            500,
            "text/html",
            "<!DOCTYPE html><html>Internal error</html>",
        ),
    );
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (_, l) = live.get("/v1/market/prices?symbols=ETH").await;
    assert_eq!(
        prices_of(&l).get("ETH").map(String::as_str),
        Some("3100.00"),
        "{l}"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (st, l) = live.get("/v1/market/prices?symbols=ETH").await;
        assert_eq!(st, 200);
        if !prices_of(&l).contains_key("ETH") {
            break;
        }
        assert!(age_of(&l, "ETH") <= 4, "served older than max_age: {l}");
        assert!(Instant::now() < deadline, "never expired: {l}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
