//! Issue point 6: idempotency (SPEC sections 4, 7, 8; DECISIONS 2).

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn first_answer_is_replayed_byte_for_byte() {
    let app = spawn_app().await;
    let key = idem();
    let body = json!({ "email": "a@example.com", "metadata": { "n": "1" } });
    let a = app
        .post_idem(&app.wallet_key, "/v1/customers", body.clone(), &key)
        .await;
    assert_eq!(a.status, 201, "{}", a.text);
    let b = app
        .post_idem(&app.wallet_key, "/v1/customers", body.clone(), &key)
        .await;
    assert_eq!(b.status, a.status);
    assert_eq!(b.text, a.text, "replay differs from the first answer");
    let l = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&l).len(), 1, "replay created a second customer");
    assert_eq!(app.events("type=customer.created").await.len(), 1);
    // Another key creates another customer.
    app.post_idem(&app.wallet_key, "/v1/customers", body, &idem())
        .await
        .expect(201);
    let l = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&l).len(), 2);
}

#[tokio::test]
async fn same_key_with_another_body_is_409_reuse() {
    let app = spawn_app().await;
    let key = idem();
    app.post_idem(
        &app.wallet_key,
        "/v1/customers",
        json!({ "email": "a@example.com" }),
        &key,
    )
    .await
    .expect(201);
    let r = app
        .post_idem(
            &app.wallet_key,
            "/v1/customers",
            json!({ "email": "b@example.com" }),
            &key,
        )
        .await;
    r.expect_error(409, "idempotency_key_reuse");
    let l = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&l).len(), 1);
}

#[tokio::test]
async fn keys_are_scoped_by_path() {
    let app = spawn_app().await;
    // Any key, and a UUID (stored as its bytes beside a digest of the path, schema 15).
    for key in [idem(), uuid::Uuid::now_v7().to_string()] {
        let c = app
            .post_idem(&app.wallet_key, "/v1/customers", json!({}), &key)
            .await
            .expect(201);
        let w = app
            .post_idem(
                &app.wallet_key,
                "/v1/wallets",
                json!({ "customer_id": c["id"], "chain": "ethereum" }),
                &key,
            )
            .await
            .expect(201);
        assert_eq!(w["object"], "wallet");
    }
}

#[tokio::test]
async fn keys_are_scoped_by_project() {
    let app = spawn_app().await;
    let other = app.other_project_key("other", "test", "wallet");
    let key = idem();
    let a = app
        .post_idem(&app.wallet_key, "/v1/customers", json!({}), &key)
        .await
        .expect(201);
    let b = app
        .post_idem(&other, "/v1/customers", json!({}), &key)
        .await
        .expect(201);
    assert_ne!(
        a["id"], b["id"],
        "another project got this project's answer"
    );
}

#[tokio::test]
async fn key_length_is_at_most_255() {
    let app = spawn_app().await;
    let ok = "k".repeat(255);
    app.post_idem(&app.wallet_key, "/v1/customers", json!({}), &ok)
        .await
        .expect(201);
    let long = "k".repeat(256);
    let r = app
        .post_idem(&app.wallet_key, "/v1/customers", json!({}), &long)
        .await;
    r.expect_client_error(400);
    assert_idem_param(&r.body);
    let l = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&l).len(), 1);
}

#[tokio::test]
async fn payouts_require_a_key() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "2000000").await;
    let r = app
        .post(
            &app.payout_key,
            "/v1/payouts",
            json!({ "customer_id": c["id"], "chain": "ethereum", "asset": "USDT",
                    "decimals": 6, "amount": "1000", "to_address": external_address(0x31) }),
        )
        .await;
    r.expect_error(400, "idempotency_key_required");
    assert_idem_param(&r.body);
    let l = app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    assert_eq!(assert_list(&l).len(), 0);
}

#[tokio::test]
async fn payout_replay_returns_the_same_payout_and_locks_once() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let cid = s(&c["id"]);
    let key = idem();
    let body = json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                       "decimals": 6, "amount": "1000000", "to_address": external_address(0x32) });
    let a = app
        .post_idem(&app.payout_key, "/v1/payouts", body.clone(), &key)
        .await;
    assert_eq!(a.status, 202, "{}", a.text);
    let b = app
        .post_idem(&app.payout_key, "/v1/payouts", body.clone(), &key)
        .await;
    assert_eq!(b.status, 202);
    assert_eq!(a.text, b.text);
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 1_000_000);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 4_000_000);
    // Even after the payout moved on, the replay is the first answer.
    app.mine(1).await;
    let c2 = app
        .post_idem(&app.payout_key, "/v1/payouts", body.clone(), &key)
        .await;
    assert_eq!(c2.text, a.text);
    let mut other = body.clone();
    other["amount"] = json!("2000000");
    app.post_idem(&app.payout_key, "/v1/payouts", other, &key)
        .await
        .expect_error(409, "idempotency_key_reuse");
    let l = app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    assert_eq!(assert_list(&l).len(), 1);
}

#[tokio::test]
async fn a_refused_request_stores_nothing_under_its_key() {
    let app = spawn_app().await;
    let c = app.create_customer(None).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    let key = idem();
    let mut body = json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                           "decimals": 18, "amount": "1000000", "to_address": external_address(0x33) });
    app.post_idem(&app.payout_key, "/v1/payouts", body.clone(), &key)
        .await
        .expect_error(400, "decimals_mismatch");
    body["decimals"] = json!(6);
    // Not a reuse: the failed validation stored nothing. Funds are still missing: 402.
    app.post_idem(&app.payout_key, "/v1/payouts", body.clone(), &key)
        .await
        .expect_error(402, "insufficient_funds");
    // After a deposit the same key goes through (402 is retryable after a deposit).
    app.test_deposit(&cid, "ethereum", "USDT", 6, "1000000", None)
        .await;
    let p = app
        .post_idem(&app.payout_key, "/v1/payouts", body.clone(), &key)
        .await
        .expect(202);
    assert_eq!(p["amount"], "1000000");
}

#[tokio::test]
async fn concurrent_duplicates_create_one_resource() {
    // Whether a duplicate arrives while the first request is still in its store job is a
    // matter of timing, so rounds of 16 concurrent duplicates (a fresh key each) run until
    // one round has seen `idempotency_in_progress`; every round must create exactly one
    // customer and give every 201 the same answer.
    let app = spawn_app().await;
    let mut in_progress = 0;
    let mut rounds = 0;
    while rounds < 10 && in_progress == 0 {
        rounds += 1;
        let key = idem();
        let body = json!({ "email": format!("race{rounds}@example.com") });
        let mut futs = Vec::new();
        for _ in 0..16 {
            futs.push(app.post_idem(&app.wallet_key, "/v1/customers", body.clone(), &key));
        }
        let results = join_all(futs).await;
        let mut first_text: Option<String> = None;
        for r in &results {
            match r.status {
                201 => {
                    if let Some(t) = &first_text {
                        assert_eq!(&r.text, t, "two different answers for one key");
                    } else {
                        first_text = Some(r.text.clone());
                    }
                }
                409 => {
                    r.expect_error(409, "idempotency_in_progress");
                    let ra = r.header("retry-after").expect("Retry-After on in_progress");
                    assert!(ra.trim().parse::<u64>().is_ok(), "Retry-After {ra}");
                    in_progress += 1;
                }
                other => panic!("unexpected {other}: {}", r.text),
            }
        }
        assert!(
            first_text.is_some(),
            "no request succeeded in round {rounds} ({in_progress} in progress)"
        );
        let l = app
            .get(&app.wallet_key, "/v1/customers?limit=100")
            .await
            .expect(200);
        assert_eq!(
            assert_list(&l).len(),
            rounds,
            "duplicates created in round {rounds}: {l}"
        );
    }
    assert!(
        in_progress > 0,
        "no concurrent duplicate was answered 409 idempotency_in_progress in {rounds} rounds"
    );
}

#[tokio::test]
async fn concurrent_duplicate_payouts_lock_funds_once() {
    let app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "10000000").await;
    let cid = s(&c["id"]);
    let key = idem();
    let body = json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
                       "decimals": 6, "amount": "3000000", "to_address": external_address(0x34) });
    let mut futs = Vec::new();
    for _ in 0..12 {
        futs.push(app.post_idem(&app.payout_key, "/v1/payouts", body.clone(), &key));
    }
    let results = join_all(futs).await;
    let mut ids_seen = std::collections::HashSet::new();
    for r in &results {
        match r.status {
            202 => {
                ids_seen.insert(s(&r.body["id"]));
            }
            409 => {
                r.expect_error(409, "idempotency_in_progress");
                assert!(r.header("retry-after").is_some());
            }
            other => panic!("unexpected {other}: {}", r.text),
        }
    }
    assert_eq!(ids_seen.len(), 1, "{ids_seen:?}");
    assert_eq!(app.locked(&cid, "ethereum", "USDT").await, 3_000_000);
    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 7_000_000);
}

/// `param` names the Idempotency-Key header (any common spelling).
#[track_caller]
fn assert_idem_param(body: &serde_json::Value) {
    let p = body["param"]
        .as_str()
        .unwrap_or_else(|| panic!("no param: {body}"))
        .to_ascii_lowercase()
        .replace('_', "-");
    assert_eq!(p, "idempotency-key", "{body}");
}

/// The fingerprint is the parsed request. The same JSON object with other
/// whitespace and key order replays the first answer; a different value is still 409.
#[tokio::test]
async fn same_object_with_other_spacing_and_key_order_replays() {
    let app = spawn_app().await;
    let key = idem();
    let send = |body: &'static str| {
        let key = key.clone();
        let app = &app;
        async move {
            app.send_raw(
                reqwest::Method::POST,
                Some(&app.wallet_key),
                "/v1/customers",
                body.as_bytes().to_vec(),
                Some("application/json"),
                &[("Idempotency-Key", key.as_str())],
            )
            .await
        }
    };
    let a = send(r#"{"email":"a@example.com","metadata":{"n":"1","m":"2"}}"#).await;
    assert_eq!(a.status, 201, "{}", a.text);
    let b = send(
        "{ \"metadata\" : { \"m\" : \"2\", \"n\" : \"1\" },\n  \"email\" : \"a@example.com\" }\n",
    )
    .await;
    assert_eq!(b.status, 201, "{}", b.text);
    assert_eq!(b.text, a.text, "the same object was not replayed");
    assert_eq!(
        b.header("idempotent-replayed").as_deref(),
        Some("true"),
        "not marked as a replay"
    );
    let l = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&l).len(), 1, "a second customer was created");
    // A different value under the same key is still a different request.
    send(r#"{"email":"a@example.com","metadata":{"n":"1","m":"3"}}"#)
        .await
        .expect_error(409, "idempotency_key_reuse");
    // So is a number where a string was.
    send(r#"{"email":"a@example.com","metadata":{"n":1,"m":"2"}}"#)
        .await
        .expect_error(409, "idempotency_key_reuse");
    let l = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&l).len(), 1);
}

/// Schema 15 keys a record by its project and a digest of its method, path and key (a UUID
/// key: the UUID and a digest of the method and path); a record written before, under the
/// key in full, is still found until it expires: replayed as first answered, and refused
/// for another body.
#[tokio::test]
async fn a_record_keyed_the_way_before_schema_15_is_still_replayed() {
    use appliance_storage::index::{self, IndexTag};
    use redb::{ReadableDatabase, ReadableTable};
    let mut app = spawn_app().await;
    let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("idempotency");
    let uuid_key = uuid::Uuid::now_v7().to_string();
    let keys = [
        (idem(), IndexTag::IdempotencyDigest, 33),
        (uuid_key.clone(), IndexTag::IdempotencyUuid, 41),
        // Not canonical (upper case): a digest.
        (uuid_key.to_uppercase(), IndexTag::IdempotencyDigest, 33),
    ];
    let mut firsts = Vec::new();
    for (i, (key, _, _)) in keys.iter().enumerate() {
        let body = json!({ "email": format!("{i}@example.com") });
        let first = app
            .post_idem(&app.wallet_key, "/v1/customers", body, key)
            .await;
        assert_eq!(first.status, 201, "{}", first.text);
        firsts.push(first.text);
    }
    app.stop_graceful();
    {
        let db = redb::Database::open(app.data_path("appliance.redb")).unwrap();
        let found: Vec<(Vec<u8>, Vec<u8>)> = {
            let r = db.begin_read().unwrap();
            let t = r.open_table(def).unwrap();
            t.iter()
                .unwrap()
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.value().to_vec(), v.value().to_vec())
                })
                .collect()
        };
        assert_eq!(found.len(), keys.len());
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(def).unwrap();
            for (key, tag, len) in &keys {
                // Each record is where its key's form says (the order of `found` is the
                // keys', not the requests').
                let (k, v) = found
                    .iter()
                    .find(|(k, _)| {
                        k[0] == *tag as u8
                            && k.len() == *len
                            && (*tag != IndexTag::IdempotencyUuid
                                || k[17..33] == *uuid::Uuid::parse_str(key).unwrap().as_bytes())
                    })
                    .unwrap_or_else(|| panic!("no {tag:?} record of {len} bytes for {key}"));
                let project = uuid::Uuid::from_slice(&k[1..17]).unwrap();
                let legacy = index::unique(
                    IndexTag::Projects,
                    project,
                    &[b"POST", b"/v1/customers", key.as_bytes()],
                );
                t.remove(k.as_slice()).unwrap();
                t.insert(legacy.as_slice(), v.as_slice()).unwrap();
            }
        }
        w.commit().unwrap();
    }
    app.start();
    for (i, (key, _, _)) in keys.iter().enumerate() {
        let body = json!({ "email": format!("{i}@example.com") });
        let again = app
            .post_idem(&app.wallet_key, "/v1/customers", body, key)
            .await;
        assert_eq!((again.status, &again.text), (201, &firsts[i]));
        app.post_idem(
            &app.wallet_key,
            "/v1/customers",
            json!({ "email": "other@example.com" }),
            key,
        )
        .await
        .expect_error(409, "idempotency_key_reuse");
    }
    let l = app.get(&app.wallet_key, "/v1/customers").await.expect(200);
    assert_eq!(assert_list(&l).len(), keys.len());
}
