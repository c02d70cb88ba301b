//! Hostile-input fuzzing over every route: malformed JSON,
//! wrong types, huge numbers, unicode, nulls, deep nesting, oversized bodies and headers,
//! invalid ids. Every answer is below 500, every 4xx is the SPEC.md section 7 envelope, and
//! `appliance verify` is green afterwards. Cases come from a fixed proptest seed so a failure
//! reproduces; the case count keeps the run to a few seconds.

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;

const CASES: usize = 1500;

/// Every route of the API, `{id}` standing for a path id.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/ping"),
    ("GET", "/v1/chains"),
    ("GET", "/v1/api_keys"),
    ("POST", "/v1/api_keys"),
    ("GET", "/v1/api_keys/{id}"),
    ("PATCH", "/v1/api_keys/{id}"),
    ("DELETE", "/v1/api_keys/{id}"),
    ("POST", "/v1/api_keys/{id}/roll"),
    ("GET", "/v1/customers"),
    ("POST", "/v1/customers"),
    ("GET", "/v1/customers/{id}"),
    ("PATCH", "/v1/customers/{id}"),
    ("GET", "/v1/customers/{id}/balances"),
    ("GET", "/v1/wallets"),
    ("POST", "/v1/wallets"),
    ("GET", "/v1/wallets/{id}"),
    ("GET", "/v1/wallets/{id}/balances"),
    ("GET", "/v1/balances"),
    ("GET", "/v1/deposits"),
    ("GET", "/v1/deposits/{id}"),
    ("GET", "/v1/payouts"),
    ("POST", "/v1/payouts"),
    ("GET", "/v1/payouts/{id}"),
    ("POST", "/v1/payouts/{id}/cancel"),
    ("POST", "/v1/payouts/{id}/approve"),
    ("POST", "/v1/payouts/{id}/reject"),
    ("GET", "/v1/sweeps"),
    ("POST", "/v1/sweeps"),
    ("GET", "/v1/sweeps/{id}"),
    ("GET", "/v1/events"),
    ("GET", "/v1/events/{id}"),
    ("GET", "/v1/events/{id}/deliveries"),
    ("GET", "/v1/events/stream"),
    ("GET", "/v1/webhooks"),
    ("POST", "/v1/webhooks"),
    ("GET", "/v1/webhooks/{id}"),
    ("PATCH", "/v1/webhooks/{id}"),
    ("DELETE", "/v1/webhooks/{id}"),
    ("POST", "/v1/webhooks/{id}/rotate_secret"),
    ("POST", "/v1/webhooks/{id}/test"),
    ("GET", "/v1/webhook_deliveries"),
    ("POST", "/v1/webhook_deliveries/replay"),
    ("GET", "/v1/webhook_deliveries/{id}"),
    ("POST", "/v1/webhook_deliveries/{id}/replay"),
    ("POST", "/v1/test/deposits"),
    ("POST", "/v1/test/deposits/{id}/confirm"),
    ("POST", "/v1/test/deposits/{id}/fail"),
    ("POST", "/v1/test/deposits/{id}/orphan"),
    ("POST", "/v1/test/blocks"),
    ("GET", "/v1/nothing/here"),
];

/// Field names the routes read, so generated objects reach the validators.
const FIELDS: &[&str] = &[
    "reference_id",
    "metadata",
    "name",
    "email",
    "customer_id",
    "wallet_id",
    "chain",
    "asset",
    "symbol",
    "amount",
    "decimals",
    "destination",
    "address",
    "kind",
    "scopes",
    "ip_allowlist",
    "signing_enabled",
    "expires_at",
    "grace_hours",
    "url",
    "events",
    "enabled_events",
    "delivery_mode",
    "description",
    "confirm",
    "count",
    "delivery_ids",
    "status",
    "limit",
    "cursor",
    "keep_asset",
    "note",
];

#[derive(Debug, Clone)]
enum Body {
    None,
    Json(Value),
    Raw(Vec<u8>),
    Nested(usize),
    Oversized,
}

#[derive(Debug, Clone)]
struct Case {
    route: usize,
    id: String,
    query: String,
    body: Body,
    auth: usize,
    content_type: Option<String>,
    extra_headers: Vec<(String, String)>,
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        "[0-9]{1,60}".prop_map(Value::String),
        Just(json!("-1")),
        Just(json!("0")),
        Just(json!("0001")),
        Just(json!("1e400")),
        Just(json!("\u{0}\u{202e}\u{fffd}😀")),
        Just(json!("x".repeat(5000))),
        Just(json!("ethereum")),
        Just(json!("USDC")),
        Just(json!("wallet")),
        Just(json!(["*"])),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn object() -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(FIELDS), value()), 0..6).prop_map(|kv| {
        let mut m = serde_json::Map::new();
        for (k, v) in kv {
            m.insert(k.to_string(), v);
        }
        Value::Object(m)
    })
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        2 => Just(Body::None),
        6 => object().prop_map(Body::Json),
        2 => value().prop_map(Body::Json),
        2 => prop::collection::vec(any::<u8>(), 0..200).prop_map(Body::Raw),
        1 => prop_oneof![
            Just(Body::Raw(b"{\"amount\": 1e999999}".to_vec())),
            Just(Body::Raw(b"{\"amount\": 123456789012345678901234567890123456789012345}".to_vec())),
            Just(Body::Raw(b"{\"a\":".to_vec())),
            Just(Body::Raw(b"{\"a\":\"\\ud800\"}".to_vec())),
            Just(Body::Raw(b"\xff\xfe{}".to_vec())),
            Just(Body::Raw(b"{\"reference_id\":null,\"reference_id\":1}".to_vec())),
        ],
        1 => (1usize..20_000).prop_map(Body::Nested),
        1 => Just(Body::Oversized),
    ]
}

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("{existing}".to_string()),
        Just("00000000-0000-0000-0000-000000000000".to_string()),
        Just("0198f3c4-5b6a-7c8d-9e0f-123456789abc".to_string()),
        Just("%ff".to_string()),
        Just("%00".to_string()),
        Just("..".to_string()),
        Just("a".repeat(3000)),
        Just("%F0%9F%98%80".to_string()),
        "[a-zA-Z0-9_-]{0,40}",
    ]
}

fn query() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("?limit=0".to_string()),
        Just("?limit=101".to_string()),
        Just("?limit=-1&limit=99999999999999999999".to_string()),
        Just("?cursor=%%%".to_string()),
        Just("?cursor=AAAA".to_string()),
        Just("?customer_id=nope&status=weird&type=x".to_string()),
        Just("?source=chain".to_string()),
        "\\?[a-z_]{1,10}=[a-zA-Z0-9%]{0,30}",
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    prop_oneof![
        6 => Just(vec![]),
        1 => Just(vec![("Idempotency-Key".to_string(), String::new())]),
        1 => Just(vec![("Idempotency-Key".to_string(), "k".repeat(300))]),
        1 => "[a-z0-9]{1,20}".prop_map(|k| vec![("Idempotency-Key".to_string(), k)]),
        1 => Just(vec![("X-Big".to_string(), "b".repeat(100_000))]),
        1 => Just((0..150).map(|i| (format!("X-H{i}"), "v".to_string())).collect()),
        1 => Just(vec![("Transfer-Encoding".to_string(), "gzip".to_string())]),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        0..ROUTES.len(),
        id(),
        query(),
        body(),
        0usize..5,
        prop_oneof![
            6 => Just(Some("application/json".to_string())),
            1 => Just(None),
            1 => Just(Some("application/jsonfoo".to_string())),
            1 => Just(Some("text/plain".to_string())),
            1 => Just(Some("application/json; charset=utf-16".to_string())),
        ],
        headers(),
    )
        .prop_map(
            |(route, id, query, body, auth, content_type, extra_headers)| Case {
                route,
                id,
                query,
                body,
                auth,
                content_type,
                extra_headers,
            },
        )
}

#[tokio::test]
async fn hostile_input_on_every_route_never_5xx_and_always_the_envelope() {
    // A generous per-IP budget, so keyless cases reach the authentication path rather than
    // stopping at 429.
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_LIMITS__UNAUTHENTICATED_PER_MINUTE", "100000")],
    )
    .await;
    let customer = app.create_customer(Some("fuzz-existing")).await;
    let existing = customer["id"].as_str().unwrap().to_string();
    let auths = [
        Some(app.wallet_key.clone()),
        Some(app.payout_key.clone()),
        Some(app.checkout_key.clone()),
        None,
        Some(format!("apktest{}", "0".repeat(64))),
    ];
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[9u8; 32]),
    );
    let strategy = case();
    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    for n in 0..CASES {
        let c = strategy.new_tree(&mut runner).expect("a case").current();
        let (method, template) = ROUTES[c.route];
        let id = if c.id == "{existing}" {
            existing.clone()
        } else {
            c.id.clone()
        };
        let path = format!("{}{}", template.replace("{id}", &id), c.query);
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let mut rb = client.request(method.clone(), app.url(&path));
        if let Some(t) = &c.auths_token(&auths) {
            rb = rb.header("Authorization", format!("Bearer {t}"));
        }
        if let Some(ct) = &c.content_type {
            rb = rb.header("Content-Type", ct);
        }
        for (k, v) in &c.extra_headers {
            rb = rb.header(k, v);
        }
        rb = match &c.body {
            Body::None => rb,
            Body::Json(v) => rb.body(serde_json::to_vec(v).unwrap()),
            Body::Raw(b) => rb.body(b.clone()),
            Body::Nested(depth) => rb.body(format!("{}{}", "[".repeat(*depth), "]".repeat(*depth))),
            Body::Oversized => rb.body(vec![b'1'; (1 << 20) + 10]),
        };
        let resp = match rb.send().await {
            Ok(r) => r,
            // Over the body limit the server may close before the whole body is sent.
            Err(_) if matches!(c.body, Body::Oversized) => continue,
            Err(e) => panic!("case {n} {method} {path}: transport error {e:?}; case {c:?}"),
        };
        let status = resp.status().as_u16();
        if std::env::var_os("FUZZ_TRACE").is_some() {
            eprintln!(
                "case {n} {method} {path} -> {status} {:?} {c:?}",
                resp.headers().get("connection")
            );
        }
        *by_status.entry(status).or_default() += 1;
        assert!(
            status < 500,
            "case {n} {method} {path}: {status}; case {c:?}"
        );
        if template == "/v1/events/stream" && status == 200 {
            continue;
        }
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = resp.text().await.unwrap_or_default();
        if status >= 400 {
            assert!(
                ct.starts_with("application/json"),
                "case {n} {method} {path}: {status} with content-type {ct:?}: {text}"
            );
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
                panic!("case {n} {method} {path}: {status} not JSON ({e}): {text}")
            });
            assert!(
                v["error"].is_string() && v["code"] == v["error"],
                "case {n} {method} {path}: {status} without error/code: {text}"
            );
            assert!(v["type"].is_string() && v["message"].is_string(), "{text}");
            assert!(
                v["request_id"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("req_")),
                "case {n} {method} {path}: {status} without request_id: {text}"
            );
        }
    }
    eprintln!("fuzz: {CASES} cases, answers by status: {by_status:?}");
    // Still serving, and the books balance.
    app.ping(&app.wallet_key).await;
    let out = app.cli_ok(&["verify"]);
    let v: Value = serde_json::from_str(&out).expect("verify answer");
    assert_eq!(v["violations"], json!([]), "{out}");
}

impl Case {
    fn auths_token(&self, auths: &[Option<String>]) -> Option<String> {
        auths[self.auth].clone()
    }
}
