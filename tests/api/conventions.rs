//! Issue points 4 and 14: JSON both ways, the error envelope on every failure (unknown routes
//! and 405 included), pagination, another project's resources, bad input never answered 5xx.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;

#[tokio::test]
async fn unknown_route_is_a_404_envelope_with_request_id() {
    let app = spawn_app().await;
    for path in [
        "/v1/no_such_thing",
        "/v1/customers/x/y/z",
        "/nope",
        "/v2/customers",
    ] {
        let r = app.get(&app.wallet_key, path).await;
        r.expect_client_error(404);
    }
    // Even without a key an unknown route answers with the envelope.
    let r = app
        .send(Method::GET, None, "/v1/no_such_thing", None, &[])
        .await;
    assert!(
        r.status == 404 || r.status == 401,
        "{}: {}",
        r.status,
        r.text
    );
    assert_envelope(&r.body, "unauthenticated unknown route");
}

#[tokio::test]
async fn wrong_method_is_a_405_envelope_with_request_id() {
    let app = spawn_app().await;
    for (m, path) in [
        (Method::DELETE, "/v1/customers"),
        (Method::PUT, "/v1/ping"),
        (Method::POST, "/v1/chains"),
        (Method::DELETE, "/v1/payouts"),
    ] {
        let r = app
            .send(m.clone(), Some(&app.wallet_key), path, None, &[])
            .await;
        assert_eq!(r.status, 405, "{m} {path}: {}", r.text);
        assert_envelope(&r.body, &format!("{m} {path}"));
    }
}

#[tokio::test]
async fn request_ids_differ_between_failures() {
    let app = spawn_app().await;
    let a = app.get(&app.wallet_key, "/v1/nothing").await;
    let b = app.get(&app.wallet_key, "/v1/nothing").await;
    assert_ne!(a.body["request_id"], b.body["request_id"]);
}

#[tokio::test]
async fn responses_are_json() {
    let app = spawn_app().await;
    for r in [
        app.get(&app.wallet_key, "/v1/ping").await,
        app.get(&app.wallet_key, "/v1/customers").await,
        app.get(&app.wallet_key, "/v1/nothing").await,
        app.send(Method::GET, None, "/v1/ping", None, &[]).await,
    ] {
        let ct = r.header("content-type").unwrap_or_default();
        assert!(
            ct.starts_with("application/json"),
            "{} {}: content-type {ct:?}",
            r.method,
            r.path
        );
        assert!(!r.body.is_null());
    }
}

#[tokio::test]
async fn malformed_json_is_400_and_writes_nothing() {
    let app = spawn_app().await;
    for body in [
        &b"{"[..],
        b"not json",
        b"[1,2",
        b"{\"reference_id\": }",
        b"\xff\xfe",
    ] {
        let r = app
            .send_raw(
                Method::POST,
                Some(&app.wallet_key),
                "/v1/customers",
                body.to_vec(),
                Some("application/json"),
                &[],
            )
            .await;
        r.expect_client_error(400);
    }
    // A JSON value that is not an object.
    for body in [json!([]), json!("x"), json!(5), json!(null)] {
        let r = app.post(&app.wallet_key, "/v1/customers", body).await;
        r.expect_client_error(400);
    }
    let list = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&list).len(), 0, "something was written: {list}");
}

#[tokio::test]
async fn wrong_types_are_400_invalid_request_with_param() {
    let app = spawn_app().await;
    let r = app
        .post(&app.wallet_key, "/v1/customers", json!({ "email": 5 }))
        .await;
    r.expect_error_param(400, "invalid_request", "email");
    let r = app
        .post(
            &app.wallet_key,
            "/v1/customers",
            json!({ "reference_id": ["a"] }),
        )
        .await;
    r.expect_error_param(400, "invalid_request", "reference_id");
    let r = app
        .post(&app.wallet_key, "/v1/customers", json!({ "metadata": "x" }))
        .await;
    r.expect_error_param(400, "invalid_request", "metadata");
    let c = app.create_customer(None).await;
    let r = app
        .post(
            &app.wallet_key,
            "/v1/wallets",
            json!({ "customer_id": c["id"], "chain": 1 }),
        )
        .await;
    r.expect_error_param(400, "invalid_request", "chain");
    let r = app
        .post(
            &app.wallet_key,
            "/v1/wallets",
            json!({ "customer_id": 12, "chain": "ethereum" }),
        )
        .await;
    r.expect_error_param(400, "invalid_request", "customer_id");
    let r = app
        .post(
            &app.wallet_key,
            "/v1/wallets",
            json!({ "customer_id": "not-a-uuid", "chain": "ethereum" }),
        )
        .await;
    let b = r.expect_client_error(400);
    assert_eq!(b["param"], "customer_id", "{b}");
    // A required field missing names the field.
    let r = app
        .post(
            &app.wallet_key,
            "/v1/wallets",
            json!({ "chain": "ethereum" }),
        )
        .await;
    let b = r.expect_client_error(400);
    assert_eq!(b["param"], "customer_id", "{b}");
    let list = app.get(&app.wallet_key, "/v1/wallets").await.expect(200);
    assert_eq!(assert_list(&list).len(), 0, "{list}");
}

#[tokio::test]
async fn unknown_request_fields_are_ignored() {
    let app = spawn_app().await;
    let c = app
        .post(
            &app.wallet_key,
            "/v1/customers",
            json!({ "reference_id": "u-1", "favourite_colour": "green", "nested": {"a": [1]} }),
        )
        .await
        .expect(201);
    assert_eq!(c["reference_id"], "u-1");
    assert!(c.get("favourite_colour").is_none());
    let w = app
        .post(
            &app.wallet_key,
            "/v1/wallets",
            json!({ "customer_id": c["id"], "chain": "ethereum", "label": "x" }),
        )
        .await
        .expect(201);
    assert_eq!(w["chain"], "ethereum");
}

#[tokio::test]
async fn bodies_over_one_mebibyte_are_413() {
    let app = spawn_app().await;
    let big = "a".repeat(1024 * 1024 + 10);
    let body = json!({ "reference_id": "big", "metadata": { "blob": big } });
    let r = app.post(&app.wallet_key, "/v1/customers", body).await;
    r.expect_client_error(413);
    // Raw oversized bytes too, without parsing.
    let r = app
        .send_raw(
            Method::POST,
            Some(&app.wallet_key),
            "/v1/customers",
            vec![b' '; 2 * 1024 * 1024],
            Some("application/json"),
            &[],
        )
        .await;
    r.expect_client_error(413);
    assert_eq!(r.body["code"], "request_too_large", "{}", r.text);
    let list = app
        .get_fresh(&app.wallet_key, "/v1/customers?reference_id=big")
        .await
        .expect(200);
    assert_eq!(assert_list(&list).len(), 0);
}

/// A client with a connection pool must not see a transport error on the request that
/// follows a 413: the server either drains the body or closes with `Connection: close`.
#[tokio::test]
async fn the_connection_after_a_413_is_usable_or_closed_cleanly() {
    let app = spawn_app().await;
    let r = app
        .send_raw(
            Method::POST,
            Some(&app.wallet_key),
            "/v1/customers",
            vec![b' '; 2 * 1024 * 1024],
            Some("application/json"),
            &[],
        )
        .await;
    r.expect_client_error(413);
    let closes = r
        .header("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"));
    let next = app
        .client
        .get(app.url("/v1/ping"))
        .header("Authorization", format!("Bearer {}", app.wallet_key))
        .send()
        .await;
    assert!(
        next.is_ok(),
        "the pooled connection broke after a 413 (Connection: close sent: {closes}): {:?}",
        next.err()
    );
}

#[tokio::test]
async fn invalid_uuids_in_paths_are_clean_4xx() {
    let app = spawn_app().await;
    for path in [
        "/v1/customers/not-a-uuid",
        "/v1/customers/123",
        "/v1/customers/00000000-0000-0000-0000-00000000000g",
        "/v1/wallets/xyz",
        "/v1/deposits/%00",
        "/v1/payouts/1e9",
        "/v1/sweeps/..",
        "/v1/api_keys/abc",
        "/v1/customers/not-a-uuid/balances",
    ] {
        let r = app.get(&app.wallet_key, path).await;
        assert!(
            r.status == 400 || r.status == 404,
            "{path}: expected 400 or 404, got {}: {}",
            r.status,
            r.text
        );
        assert_envelope(&r.body, path);
    }
    let r = app
        .patch(
            &app.wallet_key,
            "/v1/customers/nope",
            json!({ "email": "a@b.c" }),
        )
        .await;
    assert!(r.status == 400 || r.status == 404, "{}", r.text);
    assert_envelope(&r.body, "patch bad uuid");
    // A well-formed but unknown id is a plain 404 `not_found`.
    let r = app
        .get(
            &app.wallet_key,
            &format!("/v1/customers/{}", uuid::Uuid::now_v7()),
        )
        .await;
    r.expect_error(404, "not_found");
}

#[tokio::test]
async fn pagination_is_newest_first_with_cursor() {
    let app = spawn_app().await;
    let mut created = Vec::new();
    for i in 0..5 {
        let c = app.create_customer(Some(&format!("page-{i}"))).await;
        created.push(s(&c["id"]));
    }
    let p1 = app
        .get(&app.wallet_key, "/v1/customers?limit=2")
        .await
        .expect(200);
    assert_list(&p1);
    assert_eq!(p1["has_more"], true, "{p1}");
    assert_eq!(ids(&p1), vec![created[4].clone(), created[3].clone()]);
    let cur = s(&p1["next_cursor"]);
    let p2 = app
        .get(
            &app.wallet_key,
            &format!("/v1/customers?limit=2&cursor={cur}"),
        )
        .await
        .expect(200);
    assert_eq!(ids(&p2), vec![created[2].clone(), created[1].clone()]);
    let cur = s(&p2["next_cursor"]);
    let p3 = app
        .get(
            &app.wallet_key,
            &format!("/v1/customers?limit=2&cursor={cur}"),
        )
        .await
        .expect(200);
    assert_list(&p3);
    assert_eq!(ids(&p3), vec![created[0].clone()]);
    assert_eq!(p3["has_more"], false);
    assert!(p3["next_cursor"].is_null());
}

#[tokio::test]
async fn default_page_size_is_25_and_limit_is_checked() {
    let app = spawn_app().await;
    for _ in 0..26 {
        app.create_customer(None).await;
    }
    let p = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&p).len(), 25);
    assert_eq!(p["has_more"], true);
    let p = app
        .get(&app.wallet_key, "/v1/customers?limit=100")
        .await
        .expect(200);
    assert_eq!(assert_list(&p).len(), 26);
    assert_eq!(p["has_more"], false);
    let p = app
        .get(&app.wallet_key, "/v1/customers?limit=1")
        .await
        .expect(200);
    assert_eq!(assert_list(&p).len(), 1);
    for bad in ["0", "101", "-1", "abc", "1.5", "99999999999999999999"] {
        let r = app
            .get(&app.wallet_key, &format!("/v1/customers?limit={bad}"))
            .await;
        r.expect_error_param(400, "invalid_request", "limit");
    }
    let r = app
        .get(&app.wallet_key, "/v1/customers?cursor=%%%garbage")
        .await;
    let b = r.expect_client_error(400);
    assert_eq!(b["param"], "cursor", "{b}");
}

#[tokio::test]
async fn timestamps_are_rfc3339_utc() {
    let app = spawn_app().await;
    let (c, w, d) = app.funded_customer("ethereum", "USDT", 6, "1000000").await;
    assert_timestamp(&c["created_at"]);
    assert_timestamp(&w["created_at"]);
    assert_timestamp(&d["created_at"]);
    let k = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    for key in k["data"].as_array().unwrap() {
        assert_timestamp(&key["created_at"]);
    }
    let e = app.events("").await;
    assert!(!e.is_empty());
    for ev in e {
        assert_timestamp(&ev["created"]);
    }
}

/// A second project's resources answer exactly like missing ones.
#[tokio::test]
async fn another_projects_resources_answer_like_missing_ones() {
    let app = spawn_app().await;
    let other = app.other_project_key("other", "test", "wallet");
    let other_payout = app.other_project_key("other", "test", "payout");
    let (c, w, d) = app.funded_customer("ethereum", "USDT", 6, "3000000").await;
    let p = app
        .create_payout(json!({
            "customer_id": c["id"], "chain": "ethereum", "asset": "USDT",
            "decimals": 6, "amount": "1000000", "to_address": external_address(0x12),
        }))
        .await
        .expect(202);
    app.mine(1).await;
    let sweeps = app.get(&app.wallet_key, "/v1/sweeps").await.expect(200);
    let ev = app.events("").await;
    let evt_id = s(&ev[0]["id"]);
    let other_ping = app.ping(&other).await;
    let mine_ping = app.ping(&app.wallet_key).await;
    assert_ne!(other_ping["tenant_id"], mine_ping["tenant_id"]);

    let missing = uuid::Uuid::now_v7().to_string();
    let mut paths = vec![
        (
            format!("/v1/customers/{}", s(&c["id"])),
            format!("/v1/customers/{missing}"),
        ),
        (
            format!("/v1/customers/{}/balances", s(&c["id"])),
            format!("/v1/customers/{missing}/balances"),
        ),
        (
            format!("/v1/wallets/{}", s(&w["id"])),
            format!("/v1/wallets/{missing}"),
        ),
        (
            format!("/v1/wallets/{}/balances", s(&w["id"])),
            format!("/v1/wallets/{missing}/balances"),
        ),
        (
            format!("/v1/deposits/{}", s(&d["id"])),
            format!("/v1/deposits/{missing}"),
        ),
        (
            format!("/v1/payouts/{}", s(&p["id"])),
            format!("/v1/payouts/{missing}"),
        ),
        (
            format!("/v1/events/{evt_id}"),
            "/v1/events/evt_01ARZ3NDEKTSV4RRFFQ69G5FAV".to_string(),
        ),
    ];
    if let Some(sw) = sweeps["data"].as_array().and_then(|a| a.first()) {
        paths.push((
            format!("/v1/sweeps/{}", s(&sw["id"])),
            format!("/v1/sweeps/{missing}"),
        ));
    }
    let keys = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    let key_id = s(&keys["data"][0]["id"]);
    paths.push((
        format!("/v1/api_keys/{key_id}"),
        format!("/v1/api_keys/{missing}"),
    ));

    for (theirs, absent) in paths {
        let a = app.get(&other, &theirs).await;
        let b = app.get(&other, &absent).await;
        a.expect_client_error(404);
        b.expect_client_error(404);
        let strip = |v: &Value| {
            let mut v = v.clone();
            v.as_object_mut().unwrap().remove("request_id");
            v
        };
        assert_eq!(strip(&a.body), strip(&b.body), "{theirs} vs {absent}");
    }

    // Writes against another project's resources are 404 too, and change nothing.
    let r = app
        .patch(
            &other,
            &format!("/v1/customers/{}", s(&c["id"])),
            json!({ "email": "x@example.com" }),
        )
        .await;
    r.expect_error(404, "not_found");
    let r = app
        .post(
            &other,
            "/v1/wallets",
            json!({ "customer_id": c["id"], "chain": "bsc" }),
        )
        .await;
    r.expect_client_error(404);
    let r = app
        .post(
            &other,
            "/v1/test/deposits",
            json!({ "customer_id": c["id"], "chain": "ethereum", "asset": "USDT", "decimals": 6, "amount": "1" }),
        )
        .await;
    r.expect_client_error(404);
    let r = app
        .post_idem(
            &other_payout,
            &format!("/v1/payouts/{}/cancel", s(&p["id"])),
            json!({}),
            &idem(),
        )
        .await;
    r.expect_client_error(404);
    let r = app
        .post_idem(
            &other_payout,
            "/v1/payouts",
            json!({ "customer_id": c["id"], "chain": "ethereum", "asset": "USDT",
                    "decimals": 6, "amount": "1", "to_address": external_address(0x13) }),
            &idem(),
        )
        .await;
    r.expect_client_error(404);
    let got = app
        .get(&app.wallet_key, &format!("/v1/customers/{}", s(&c["id"])))
        .await
        .expect(200);
    assert!(got["email"].is_null() || got["email"] != "x@example.com");

    // Lists never show the other project's rows.
    for path in [
        "/v1/customers",
        "/v1/wallets",
        "/v1/deposits",
        "/v1/payouts",
        "/v1/sweeps",
    ] {
        let l = app.get(&other, path).await.expect(200);
        assert_eq!(assert_list(&l).len(), 0, "{path} leaks: {l}");
    }
    let l = app
        .get(&other, &format!("/v1/deposits?customer_id={}", s(&c["id"])))
        .await
        .expect(200);
    assert_eq!(assert_list(&l).len(), 0);
    let e = app.get(&other, "/v1/events").await.expect(200);
    assert_eq!(assert_list(&e).len(), 0, "events leak: {e}");
    let t = app.get(&other, "/v1/balances").await.expect(200);
    for item in t["data"].as_array().unwrap() {
        for f in ["deposits", "treasury", "in_transit", "liability"] {
            assert_eq!(signed_atomic(&item[f]), 0, "treasury leaks: {t}");
        }
    }
}

#[tokio::test]
async fn amounts_out_of_range_are_400_never_5xx() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let beyond_u128 = "340282366920938463463374607431768211456";
    for bad in [
        json!("-1"),
        json!("1.5"),
        json!("abc"),
        json!(""),
        json!(" 1"),
        json!("1e6"),
        json!("0x10"),
        json!(beyond_u128),
        json!("99999999999999999999999999999999999999999999999999"),
        json!(1000),
        json!(1.5),
        json!(null),
    ] {
        let r = app
            .post(
                &app.wallet_key,
                "/v1/test/deposits",
                json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                        "decimals": 6, "amount": bad }),
            )
            .await;
        let b = r.expect_client_error(400);
        assert_eq!(b["param"], "amount", "amount {bad}: {b}");
        let r = app
            .create_payout(
                json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                    "decimals": 6, "amount": bad, "to_address": external_address(0x14) }),
            )
            .await;
        let b = r.expect_client_error(400);
        assert_eq!(b["param"], "amount", "payout amount {bad}: {b}");
    }
    let r = app
        .post(
            &app.wallet_key,
            "/v1/test/deposits",
            json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                    "decimals": "six", "amount": "1" }),
        )
        .await;
    let b = r.expect_client_error(400);
    assert_eq!(b["param"], "decimals", "{b}");
    let l = app.get(&app.wallet_key, "/v1/deposits").await.expect(200);
    assert_eq!(assert_list(&l).len(), 0, "{l}");
    let l = app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    assert_eq!(assert_list(&l).len(), 0, "{l}");
    assert_eq!(app.events("type=deposit.detected").await.len(), 0);
}

#[tokio::test]
async fn per_key_request_rate_is_limited_with_retry_after() {
    let app = spawn_app().await;
    app.project_set(&["--requests-per-minute", "5"]);
    let mut limited = None;
    for _ in 0..12 {
        let r = app.get(&app.wallet_key, "/v1/ping").await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = limited.expect("no 429 after 12 requests at 5 per minute");
    r.expect_error(429, "rate_limited");
    let ra = r.header("retry-after").expect("Retry-After header");
    assert!(ra.trim().parse::<u64>().is_ok(), "Retry-After: {ra}");
}

#[tokio::test]
async fn deeply_nested_or_odd_json_is_a_clean_400() {
    let app = spawn_app().await;
    let deep = format!(
        "{{\"metadata\":{}1{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let r = app
        .send_raw(
            Method::POST,
            Some(&app.wallet_key),
            "/v1/customers",
            deep.into_bytes(),
            Some("application/json"),
            &[],
        )
        .await;
    r.expect_client_error(400);
    let r = app
        .send_raw(
            Method::POST,
            Some(&app.wallet_key),
            "/v1/customers",
            b"{\"email\": \"a@b.co\"} trailing".to_vec(),
            Some("application/json"),
            &[],
        )
        .await;
    r.expect_client_error(400);
    // The server is still healthy.
    app.get(&app.wallet_key, "/v1/ping").await.expect(200);
    let l = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&l).len(), 0);
}

#[tokio::test]
async fn every_list_checks_its_limit() {
    let app = spawn_app().await;
    for (tok, path) in [
        (&app.wallet_key, "/v1/customers"),
        (&app.wallet_key, "/v1/wallets"),
        (&app.wallet_key, "/v1/deposits"),
        (&app.wallet_key, "/v1/sweeps"),
        (&app.payout_key, "/v1/payouts"),
        (&app.wallet_key, "/v1/events"),
    ] {
        for bad in ["0", "101", "x"] {
            let r = app.get(tok, &format!("{path}?limit={bad}")).await;
            r.expect_error_param(400, "invalid_request", "limit");
        }
        let l = app.get(tok, &format!("{path}?limit=100")).await.expect(200);
        assert_list(&l);
        let r = app.get(tok, &format!("{path}?cursor=!!notacursor!!")).await;
        assert_eq!(r.expect_client_error(400)["param"], "cursor", "{path}");
    }
}

#[tokio::test]
async fn unauthenticated_requests_have_a_small_per_ip_budget() {
    let app = spawn_app().await;
    let mut limited = None;
    for _ in 0..80 {
        let r = app.send(Method::GET, None, "/v1/ping", None, &[]).await;
        if r.status == 429 {
            limited = Some(r);
            break;
        }
        r.expect_error(401, "invalid_api_key");
    }
    let r = limited.expect("no 429 after 80 unauthenticated requests (budget is 60/min)");
    r.expect_error(429, "rate_limited");
    assert!(r.header("retry-after").is_some());
    // A keyed client is not affected by the anonymous budget.
    app.get(&app.wallet_key, "/v1/ping").await.expect(200);
}

#[tokio::test]
async fn another_projects_payout_cannot_be_approved_or_rejected() {
    let app = spawn_app().await;
    app.project_set(&["--auto-approve-threshold-cents", "100"]);
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "9000000").await;
    let p = app
        .create_payout(
            json!({ "customer_id": c["id"], "chain": "ethereum", "asset": "USDT",
            "decimals": 6, "amount": "5000000", "to_address": external_address(0x15) }),
        )
        .await
        .expect(202);
    assert_eq!(p["status"], "pending_approval");
    let other = app.other_project_key("other", "test", "payout");
    for action in ["approve", "reject"] {
        app.post(
            &other,
            &format!("/v1/payouts/{}/{action}", s(&p["id"])),
            json!({}),
        )
        .await
        .expect_error(404, "not_found");
    }
    let got = app
        .get(&app.payout_key, &format!("/v1/payouts/{}", s(&p["id"])))
        .await
        .expect(200);
    assert_eq!(got["status"], "pending_approval");
}

/// An atomic amount is written canonically. Leading zeros, a sign and the
/// empty string are 400 `invalid_request` naming `amount`, and nothing is written.
#[tokio::test]
async fn amounts_must_be_canonical_digit_strings() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    for bad in ["0001", "01", "00", "0", "", "+1", "-0"] {
        let r = app
            .post(
                &app.wallet_key,
                "/v1/test/deposits",
                json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                        "decimals": 6, "amount": bad }),
            )
            .await;
        r.expect_error_param(400, "invalid_request", "amount");
        let r = app
            .create_payout(
                json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                    "decimals": 6, "amount": bad, "to_address": external_address(0x16) }),
            )
            .await;
        r.expect_error_param(400, "invalid_request", "amount");
    }
    let l = app.get(&app.wallet_key, "/v1/deposits").await.expect(200);
    assert_eq!(assert_list(&l).len(), 0, "{l}");
    // The canonical form of the same value is accepted.
    let r = app
        .post(
            &app.wallet_key,
            "/v1/test/deposits",
            json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                    "decimals": 6, "amount": "1" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["amount"], "1", "{}", r.text);
}
