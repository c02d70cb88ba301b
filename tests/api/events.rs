//! Issue point 13: every state change writes an event with `evt_` ULID id, per-project
//! sequence, api_version, livemode false, and `data` identical to the REST read.

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::helpers::*;

fn assert_event_shape(e: &Value) {
    assert_eq!(e["object"], "event", "{e}");
    let id = e["id"].as_str().expect("id");
    let ulid = id
        .strip_prefix("evt_")
        .unwrap_or_else(|| panic!("id prefix: {id}"));
    assert_eq!(ulid.len(), 26, "ULID length: {id}");
    assert!(
        ulid.chars()
            .all(|c| c.is_ascii_digit() || (c.is_ascii_uppercase() && !"ILOU".contains(c))),
        "ULID is upper-case Crockford: {id}"
    );
    assert!(e["type"].is_string());
    assert_eq!(e["api_version"], "2026-08-01", "{e}");
    assert_timestamp(&e["created"]);
    assert_eq!(
        e["livemode"], false,
        "test project events are livemode:false: {e}"
    );
    assert_uuid(&e["tenant"]);
    assert!(e["sequence"].is_u64(), "{e}");
    assert!(e["resource_id"].is_string(), "{e}");
    assert!(e["data"].is_object(), "{e}");
}

#[tokio::test]
async fn every_state_change_writes_an_event_with_the_rest_read() {
    let app = spawn_app().await;
    let tenant = app.ping(&app.wallet_key).await["tenant_id"].clone();
    let c = app.create_customer(Some("ev-1")).await;
    let cid = s(&c["id"]);
    let w = app.create_wallet(&cid, "ethereum").await;
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "3000000", None)
        .await;
    let p = app
        .create_payout(
            json!({ "customer_id": cid, "chain": "ethereum", "asset": "USDT",
            "decimals": 6, "amount": "1000000", "to_address": external_address(0x71) }),
        )
        .await
        .expect(202);
    app.settle().await;

    let all = app.events("").await;
    let mut seqs = HashSet::new();
    let mut ids_seen = HashSet::new();
    let mut last = 0;
    for e in &all {
        assert_event_shape(e);
        assert_eq!(e["tenant"], tenant);
        let seq = e["sequence"].as_u64().unwrap();
        assert!(seq > last, "sequence must increase: {seq} after {last}");
        last = seq;
        assert!(seqs.insert(seq));
        assert!(ids_seen.insert(s(&e["id"])), "duplicate event id");
    }
    let types: Vec<&str> = all.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for want in [
        "customer.created",
        "wallet.created",
        "deposit.detected",
        "deposit.confirmed",
        "payout.created",
        "payout.signing",
        "payout.submitted",
        "payout.confirmed",
        "sweep.submitted",
        "sweep.confirmed",
    ] {
        assert!(types.contains(&want), "{want} missing from {types:?}");
    }
    // The latest event about each resource carries its current REST read.
    let check = |path: String, id: String| {
        let app = &app;
        let all = &all;
        async move {
            let rest = app.get(&app.wallet_key, &path).await.expect(200);
            let latest = all
                .iter()
                .rev()
                .find(|e| e["resource_id"] == json!(id))
                .unwrap_or_else(|| panic!("no event for {id}"));
            assert_eq!(latest["data"], rest, "event data differs from GET {path}");
        }
    };
    check(format!("/v1/customers/{cid}"), cid.clone()).await;
    check(format!("/v1/wallets/{}", s(&w["id"])), s(&w["id"])).await;
    check(format!("/v1/deposits/{}", s(&d["id"])), s(&d["id"])).await;
    check(format!("/v1/payouts/{}", s(&p["id"])), s(&p["id"])).await;
    let sw = app.get(&app.wallet_key, "/v1/sweeps").await.expect(200);
    let swid = s(&sw["data"][0]["id"]);
    check(format!("/v1/sweeps/{swid}"), swid.clone()).await;
}

#[tokio::test]
async fn list_is_newest_first_and_filters_by_type_and_resource() {
    let app = spawn_app().await;
    let a = app.create_customer(None).await;
    let b = app.create_customer(None).await;
    let wa = app.create_wallet(&s(&a["id"]), "ethereum").await;
    let l = app.get(&app.wallet_key, "/v1/events").await.expect(200);
    let data = assert_list(&l);
    assert_eq!(data.len(), 3);
    let seqs: Vec<u64> = data
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert!(
        seqs[0] > seqs[1] && seqs[1] > seqs[2],
        "newest first: {seqs:?}"
    );
    assert_eq!(data[0]["type"], "wallet.created");
    let asc = app
        .get(&app.wallet_key, "/v1/events?order=asc")
        .await
        .expect(200);
    let asc_seqs: Vec<u64> = asc["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    let mut rev = seqs.clone();
    rev.reverse();
    assert_eq!(asc_seqs, rev);

    let l = app
        .get(&app.wallet_key, "/v1/events?type=customer.created")
        .await
        .expect(200);
    assert_eq!(assert_list(&l).len(), 2);
    let l = app
        .get(
            &app.wallet_key,
            "/v1/events?type=customer.created&type=wallet.created",
        )
        .await
        .expect(200);
    assert_eq!(assert_list(&l).len(), 3);
    let l = app
        .get(
            &app.wallet_key,
            &format!("/v1/events?resource_id={}", s(&b["id"])),
        )
        .await
        .expect(200);
    let data = assert_list(&l);
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["data"], b);
    let l = app
        .get(
            &app.wallet_key,
            &format!(
                "/v1/events?resource_id={}&type=customer.created",
                s(&wa["id"])
            ),
        )
        .await
        .expect(200);
    assert_eq!(assert_list(&l).len(), 0);
    let l = app
        .get(&app.wallet_key, "/v1/events?type=no.such.type")
        .await
        .expect(200);
    assert_eq!(
        assert_list(&l).len(),
        0,
        "unknown types simply match nothing"
    );
    // Pagination.
    let p1 = app
        .get(&app.wallet_key, "/v1/events?limit=2")
        .await
        .expect(200);
    assert_eq!(assert_list(&p1).len(), 2);
    assert_eq!(p1["has_more"], true);
    let p2 = app
        .get(
            &app.wallet_key,
            &format!("/v1/events?limit=2&cursor={}", s(&p1["next_cursor"])),
        )
        .await
        .expect(200);
    assert_eq!(assert_list(&p2).len(), 1);
    assert_eq!(p2["has_more"], false);
    let all: Vec<String> = ids(&p1).into_iter().chain(ids(&p2)).collect();
    let uniq: HashSet<&String> = all.iter().collect();
    assert_eq!(uniq.len(), 3);
}

#[tokio::test]
async fn get_one_event() {
    let app = spawn_app().await;
    app.create_customer(None).await;
    let l = app.get(&app.wallet_key, "/v1/events").await.expect(200);
    let e = &l["data"][0];
    let got = app
        .get(&app.wallet_key, &format!("/v1/events/{}", s(&e["id"])))
        .await
        .expect(200);
    assert_event_shape(&got);
    assert_eq!(&got, e);
    app.get(&app.wallet_key, "/v1/events/evt_01ARZ3NDEKTSV4RRFFQ69G5FAV")
        .await
        .expect_error(404, "not_found");
    let r = app.get(&app.wallet_key, "/v1/events/not-an-event").await;
    assert!(r.status == 400 || r.status == 404, "{}", r.text);
    assert_envelope(&r.body, "bad event id");
}

#[tokio::test]
async fn any_kind_with_events_read_reads_events() {
    let app = spawn_app().await;
    app.create_customer(None).await;
    app.get(&app.checkout_key, "/v1/events").await.expect(200);
    app.get(&app.payout_key, "/v1/events").await.expect(200);
    let k = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "no-events", "kind": "wallet", "scopes": ["customers:read"] }),
        )
        .await;
    app.get(&s(&k["token"]), "/v1/events")
        .await
        .expect_error(403, "missing_scope");
    let k = app
        .create_key(
            &app.wallet_key,
            json!({ "name": "events", "kind": "payout", "scopes": ["events:read"] }),
        )
        .await;
    let l = app.get(&s(&k["token"]), "/v1/events").await.expect(200);
    assert_eq!(assert_list(&l).len(), 1);
}

#[tokio::test]
async fn sequences_are_per_project() {
    let app = spawn_app().await;
    let other = app.other_project_key("other", "test", "wallet");
    for _ in 0..3 {
        app.create_customer(None).await;
    }
    app.post(&other, "/v1/customers", json!({}))
        .await
        .expect(201);
    let mine = app.events("").await;
    let theirs = app.get(&other, "/v1/events").await.expect(200);
    let theirs = assert_list(&theirs);
    assert_eq!(mine.len(), 3);
    assert_eq!(theirs.len(), 1);
    assert_ne!(theirs[0]["tenant"], mine[0]["tenant"]);
    // A sequence is per tenant: the other project's first event does not continue ours.
    assert!(
        theirs[0]["sequence"].as_u64().unwrap() <= mine[0]["sequence"].as_u64().unwrap(),
        "sequence looks global: {} vs {}",
        theirs[0]["sequence"],
        mine[0]["sequence"]
    );
}

/// Schema 6: a deposit event stores only the deposit's changing fields and renders
/// the rest from the deposit's row; each event still shows the deposit as it was at the
/// event, through later changes of the row (confirmation, orphaning), in the list, the
/// lookup by id and the event stream's catch-up.
#[tokio::test]
async fn deposit_events_show_the_deposit_as_it_was_at_each_event() {
    let app = spawn_app().await;
    let c = app.create_customer(Some("ev-dep")).await;
    let cid = s(&c["id"]);
    app.create_wallet(&cid, "ethereum").await;
    // Manual: detected now, confirmed and then orphaned by the test endpoints.
    let d = app
        .test_deposit(&cid, "ethereum", "USDT", 6, "2500000", Some(false))
        .await;
    let did = s(&d["id"]);
    assert_eq!(d["status"], "detected");
    let confirmed = app
        .post(
            &app.wallet_key,
            &format!("/v1/test/deposits/{did}/confirm"),
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(confirmed["status"], "confirmed");
    let orphaned = app
        .post(
            &app.wallet_key,
            &format!("/v1/test/deposits/{did}/orphan"),
            json!({}),
        )
        .await
        .expect(200);
    assert_eq!(orphaned["status"], "orphaned");
    let rest = app
        .get(&app.wallet_key, &format!("/v1/deposits/{did}"))
        .await
        .expect(200);
    assert_eq!(rest, orphaned);

    let evs = app.events(&format!("?resource_id={did}")).await;
    let by_type = |t: &str| -> Value {
        evs.iter()
            .find(|e| e["type"] == t)
            .unwrap_or_else(|| panic!("no {t} in {evs:?}"))
            .clone()
    };
    let detected = by_type("deposit.detected");
    let conf = by_type("deposit.confirmed");
    let orph = by_type("deposit.orphaned");
    for e in [&detected, &conf, &orph] {
        assert_event_shape(e);
    }
    assert_eq!(
        detected["data"], d,
        "deposit.detected shows the deposit as detected"
    );
    assert_eq!(
        conf["data"], confirmed,
        "deposit.confirmed shows it as confirmed"
    );
    assert_eq!(
        orph["data"], orphaned,
        "deposit.orphaned shows it as orphaned"
    );
    assert_eq!(detected["data"]["confirmations"], 0);
    assert_eq!(detected["data"]["ledger_tx_id"], Value::Null);
    assert!(conf["data"]["ledger_tx_id"].is_string(), "{conf}");

    // The lookup by id renders the same data.
    let one = app
        .get(
            &app.wallet_key,
            &format!("/v1/events/{}", s(&detected["id"])),
        )
        .await
        .expect(200);
    assert_eq!(one, detected);
}
