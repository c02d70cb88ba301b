//! Every error in the envelope, and the small HTTP rules: strict
//! `Content-Type`, a case-insensitive `Bearer`, `appliance key revoke` printing the key's
//! `env`, unknown routes charged to the per-IP budget.

use reqwest::Method;
use serde_json::json;

use crate::connections::{assert_envelope, raw_request};
use crate::helpers::*;

fn assert_resp_envelope(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "{} {}: {}", r.method, r.path, r.text);
    let ct = r
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(
        ct.starts_with("application/json"),
        "content-type {ct}: {}",
        r.text
    );
    assert_eq!(r.body["error"], code, "{}", r.text);
    assert_eq!(r.body["code"], code, "{}", r.text);
    assert!(
        r.body["request_id"]
            .as_str()
            .is_some_and(|s| s.starts_with("req_")),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn a_path_that_does_not_percent_decode_is_400_in_the_envelope() {
    let app = spawn_app().await;
    for path in ["/v1/customers/%ff", "/v1/payouts/%c3%28/cancel"] {
        let m = if path.ends_with("cancel") {
            Method::POST
        } else {
            Method::GET
        };
        let r = app.send(m, Some(&app.wallet_key), path, None, &[]).await;
        assert_resp_envelope(&r, 400, "invalid_request");
    }
}

#[tokio::test]
async fn too_many_headers_and_too_long_uris_are_answered_in_the_envelope() {
    let app = spawn_app().await;
    // 101 headers: over our limit of 100, under the parser's.
    let mut req = format!(
        "GET /v1/ping HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n",
        app.wallet_key
    );
    for i in 0..100 {
        req.push_str(&format!("X-H{i}: v\r\n"));
    }
    req.push_str("\r\n");
    let r = raw_request(&app.addr, req.as_bytes()).await;
    assert_envelope(&r, 431, "request_headers_too_large");
    // 1,500 headers: over the parser's own limit too.
    let mut req = String::from("GET /v1/ping HTTP/1.1\r\nHost: x\r\n");
    for i in 0..1500 {
        req.push_str(&format!("X-H{i}: v\r\n"));
    }
    req.push_str("\r\n");
    let r = raw_request(&app.addr, req.as_bytes()).await;
    assert_envelope(&r, 431, "request_headers_too_large");
    // A 600 KB header: over the parser's head buffer.
    let req = format!(
        "GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(600_000)
    );
    let r = raw_request(&app.addr, req.as_bytes()).await;
    assert_envelope(&r, 431, "request_headers_too_large");
    // URIs of 20 KB (our limit) and 70 KB (the parser's).
    for n in [20_000, 70_000] {
        let req = format!(
            "GET /v1/customers?reference_id={} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
            "a".repeat(n),
            app.wallet_key
        );
        let r = raw_request(&app.addr, req.as_bytes()).await;
        assert_envelope(&r, 414, "uri_too_long");
    }
    // The server is still well.
    app.ping(&app.wallet_key).await;
}

#[tokio::test]
async fn malformed_http_and_malformed_chunked_bodies_are_400_in_the_envelope() {
    let app = spawn_app().await;
    for req in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"GET /v1/ping HTTP/9.9\r\nHost: x\r\n\r\n",
    ] {
        let r = raw_request(&app.addr, req).await;
        assert_envelope(&r, 400, "invalid_request");
    }
    let req = format!(
        "POST /v1/customers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{{}}\r\n0\r\n\r\n",
        app.wallet_key
    );
    let r = raw_request(&app.addr, req.as_bytes()).await;
    assert_envelope(&r, 400, "invalid_request");
    // An oversized body is still 413, in the envelope.
    let big = vec![b' '; 2 << 20];
    let r = app
        .send_raw(
            Method::POST,
            Some(&app.wallet_key),
            "/v1/customers",
            big,
            Some("application/json"),
            &[],
        )
        .await;
    assert_resp_envelope(&r, 413, "request_too_large");
}

#[tokio::test]
async fn content_type_must_be_application_json_with_utf8() {
    let app = spawn_app().await;
    let body = serde_json::to_vec(&json!({"reference_id": "ct-1"})).unwrap();
    for bad in [
        "application/jsonfoo",
        "text/json",
        "application/json; charset=latin1",
    ] {
        let r = app
            .send_raw(
                Method::POST,
                Some(&app.wallet_key),
                "/v1/customers",
                body.clone(),
                Some(bad),
                &[],
            )
            .await;
        assert_resp_envelope(&r, 415, "unsupported_media_type");
    }
    for (i, good) in [
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/json;charset=\"UTF-8\"",
    ]
    .iter()
    .enumerate()
    {
        let b = serde_json::to_vec(&json!({"reference_id": format!("ct-ok-{i}")})).unwrap();
        let r = app
            .send_raw(
                Method::POST,
                Some(&app.wallet_key),
                "/v1/customers",
                b,
                Some(good),
                &[],
            )
            .await;
        assert_eq!(r.status, 201, "{good}: {}", r.text);
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let app = spawn_app().await;
    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let auth = format!("{scheme} {}", app.wallet_key);
        let r = app
            .send(
                Method::GET,
                None,
                "/v1/ping",
                None,
                &[("Authorization", &auth)],
            )
            .await;
        assert_eq!(r.status, 200, "{scheme}: {}", r.text);
    }
    let auth = format!("Basic {}", app.wallet_key);
    let r = app
        .send(
            Method::GET,
            None,
            "/v1/ping",
            None,
            &[("Authorization", &auth)],
        )
        .await;
    assert_resp_envelope(&r, 401, "invalid_api_key");
}

#[tokio::test]
async fn key_revoke_prints_the_keys_env() {
    let app = spawn_app().await;
    let key = app
        .create_key(
            &app.wallet_key,
            json!({"kind": "wallet", "name": "to revoke"}),
        )
        .await;
    let id = key["id"].as_str().unwrap().to_string();
    let out = app.cli_ok(&["key", "revoke", &id]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json answer");
    assert_eq!(v["env"], "test", "{out}");
    assert!(
        v["revoked_at"].is_number() || v["revoked_at"].is_string(),
        "{out}"
    );
}

#[tokio::test]
async fn unauthenticated_requests_to_unknown_routes_spend_the_per_ip_budget() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_LIMITS__UNAUTHENTICATED_PER_MINUTE", "5")],
    )
    .await;
    let mut limited = None;
    for i in 0..12 {
        let r = app
            .send(
                Method::GET,
                None,
                &format!("/v1/nothing-here/{i}"),
                None,
                &[],
            )
            .await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
        assert_resp_envelope(&r, 404, "route_not_found");
    }
    let r = limited.expect("12 unauthenticated requests to unknown routes were never limited");
    assert_resp_envelope(&r, 429, "rate_limited");
    assert!(r.headers.get("retry-after").is_some());
    // A keyed caller is not charged to the IP's budget.
    let r = app.get(&app.wallet_key, "/v1/nothing-here").await;
    assert_resp_envelope(&r, 404, "route_not_found");
}
