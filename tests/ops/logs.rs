//! Logs: no ANSI colour off a terminal, `log_format = "json"`, and one
//! access line per request with the route template, never a token or a body.

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::{stderr_lines, wait_stderr};
use crate::helpers::*;

/// A made-up token of the test shape that matches no key.
const BOGUS: &str = "apktest00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// Requests every log test makes: (customer id, request id of the customer read, body
/// marker that must never be logged).
async fn traffic(app: &App) -> (String, String, &'static str) {
    let marker = "body-marker-7f3e";
    let c = app
        .post(
            &app.wallet_key,
            "/v1/customers",
            json!({ "reference_id": marker }),
        )
        .await
        .expect(201);
    let cid = s(&c["id"]);
    let r = app
        .get(&app.wallet_key, &format!("/v1/customers/{cid}?limit=1"))
        .await;
    let rid = r.header("request-id").expect("request-id header");
    r.expect(200);
    app.send(
        Method::GET,
        Some(&app.wallet_key),
        "/v1/nope/123",
        None,
        &[],
    )
    .await
    .expect_error(404, "route_not_found");
    app.send(Method::GET, Some(BOGUS), "/v1/ping", None, &[])
        .await
        .expect_error(401, "invalid_api_key");
    (cid, rid, marker)
}

/// No stderr line carries a token (whole, or its secret part after the public `key_id`
/// display handle), the body marker, or the Authorization header.
fn assert_no_secrets(app: &App, lines: &[String], marker: &str) {
    for t in [&app.wallet_key, &app.checkout_key, &app.payout_key, BOGUS] {
        let secret_part = &t[15..];
        for l in lines {
            assert!(!l.contains(secret_part), "token material logged: {l}");
        }
    }
    for l in lines {
        assert!(!l.contains(marker), "request body logged: {l}");
        assert!(!l.contains("Bearer"), "Authorization header logged: {l}");
    }
}

fn key_id_of(token: &str) -> String {
    token[..15].to_string()
}

#[tokio::test]
async fn text_logs_have_no_colour_and_one_access_line_per_request() {
    let app = spawn_app().await;
    let (cid, rid, marker) = traffic(&app).await;
    let lines = wait_stderr(&app, |ls| {
        ls.iter().any(|l| l.contains(&rid)) && ls.iter().any(|l| l.contains("status=401"))
    })
    .await;
    for l in &lines {
        assert!(!l.contains('\u{1b}'), "ANSI escape on a pipe: {l:?}");
    }
    let access: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("appliance::access"))
        .collect();
    assert!(access.len() >= 4, "one access line per request: {lines:#?}");
    let read = access
        .iter()
        .find(|l| l.contains(&rid))
        .unwrap_or_else(|| panic!("no access line with {rid}: {lines:#?}"));
    assert!(read.contains("method=GET"), "{read}");
    assert!(read.contains("route=\"/v1/customers/{id}\""), "{read}");
    assert!(read.contains("status=200"), "{read}");
    assert!(read.contains("latency_ms="), "{read}");
    assert!(
        read.contains(&format!("key_id=\"{}\"", key_id_of(&app.wallet_key))),
        "{read}"
    );
    // The template, never the raw path or its query.
    assert!(!read.contains(&cid), "raw path logged: {read}");
    assert!(!read.contains("limit=1"), "query logged: {read}");
    let created = access
        .iter()
        .find(|l| l.contains("method=POST"))
        .expect("POST access line");
    assert!(created.contains("route=\"/v1/customers\""), "{created}");
    assert!(created.contains("status=201"), "{created}");
    let unmatched = access
        .iter()
        .find(|l| l.contains("status=404"))
        .expect("404 access line");
    assert!(unmatched.contains("route=\"unmatched\""), "{unmatched}");
    assert!(!unmatched.contains("/v1/nope"), "{unmatched}");
    let refused = access
        .iter()
        .find(|l| l.contains("status=401"))
        .expect("401 access line");
    assert!(refused.contains("key_id=\"-\""), "{refused}");
    assert_no_secrets(&app, &stderr_lines(&app), marker);
}

#[tokio::test]
async fn json_logs_parse_and_carry_the_access_fields() {
    let app = spawn_app_with("127.0.0.1:0", &[("APPLIANCE_LOG_FORMAT", "json")]).await;
    let (cid, rid, marker) = traffic(&app).await;
    let lines = wait_stderr(&app, |ls| {
        ls.iter().any(|l| l.contains(&rid)) && ls.iter().any(|l| l.contains("\"status\":401"))
    })
    .await;
    assert!(!lines.is_empty());
    let mut objects = Vec::new();
    for l in lines.iter().filter(|l| !l.trim().is_empty()) {
        assert!(!l.contains('\u{1b}'), "ANSI escape in JSON logs: {l:?}");
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v.is_object(), "{l}");
        assert!(v["timestamp"].is_string(), "{l}");
        assert!(v["level"].is_string(), "{l}");
        objects.push(v);
    }
    let access: Vec<&Value> = objects
        .iter()
        .filter(|v| v["target"] == "appliance::access")
        .collect();
    assert!(access.len() >= 4, "{objects:#?}");
    let read = access
        .iter()
        .find(|v| v["request_id"] == rid.as_str())
        .unwrap_or_else(|| panic!("no access object for {rid}: {objects:#?}"));
    assert_eq!(read["method"], "GET");
    assert_eq!(read["route"], "/v1/customers/{id}");
    assert_eq!(read["status"], 200);
    assert!(read["latency_ms"].as_f64().is_some(), "{read}");
    assert_eq!(read["key_id"], key_id_of(&app.wallet_key));
    assert!(!read.to_string().contains(&cid));
    let unmatched = access
        .iter()
        .find(|v| v["status"] == 404)
        .expect("404 access object");
    assert_eq!(unmatched["route"], "unmatched");
    assert_no_secrets(&app, &stderr_lines(&app), marker);
}
