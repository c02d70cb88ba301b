//! A stored row that cannot be decoded (here: data nested deeper than the
//! JSON decoder's limit, as metadata stored by an older build may be) is passed over with a
//! logged error by every reader of many rows (lists, event pages, the event stream, the
//! dispatcher: an ordered endpoint moves on), a read of the row itself answers a clear error,
//! and `appliance verify` reports it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

use appliance_storage::records::{Customer, Project};
use appliance_storage::{ScanOps, Store, StoreOptions};

use crate::helpers::*;

fn deep(levels: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "a": v });
    }
    v
}

fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| s(&e["id"]))
        .collect()
}

#[tokio::test]
async fn undecodable_rows_are_passed_over_reported_and_never_block_an_ordered_endpoint() {
    let mut app = spawn_app().await;
    let rx = receiver().await;
    let ep = app
        .create_endpoint(&rx.url("/o"), json!({ "delivery_mode": "ordered" }))
        .await;
    let ep_id = s(&ep["id"]);
    let a = app.customer().await;
    let first = rx.wait("/o", 1, Duration::from_secs(15)).await;
    assert_eq!(first[0].json["data"]["id"], a.as_str());
    // Recorded before the kill, so it is not sent again after the restart.
    app.wait_deliveries("status=succeeded", Duration::from_secs(10), |d| {
        d.len() == 1
    })
    .await;
    app.kill();

    // What an older build let in: a customer whose metadata nests 200 levels, and its event
    // (with its deliveries, through the real outbox).
    let cid = Uuid::now_v7();
    let bad_event = {
        let store = Store::open(
            &app.data_dir.join("appliance.redb"),
            StoreOptions::default(),
        )
        .unwrap();
        let ev_id = store
            .write(move |ctx| {
                let p = ctx
                    .all::<Project>()?
                    .into_iter()
                    .find(|p| p.name == "default")
                    .expect("project default");
                let c = Customer {
                    id: cid,
                    project_id: p.id,
                    reference_id: None,
                    email: None,
                    status: appliance_storage::records::CustomerStatus::Active,
                    metadata: deep(200),
                    created_at: ctx.now_us(),
                };
                ctx.put(&c)?;
                let ev = ctx.append_event(
                    p.id,
                    false,
                    "customer.created",
                    &cid.to_string(),
                    json!({ "id": cid, "object": "customer", "metadata": deep(200) }),
                )?;
                appliance::services::webhook_deliveries::enqueue(ctx, &ev)?;
                Ok::<_, appliance_storage::StoreError>(ev.id)
            })
            .await
            .unwrap();
        let closer = store.shutdown();
        drop(store);
        if let Some(h) = closer {
            h.join().unwrap();
        }
        ev_id
    };
    app.start_with(Opts::default());

    // The ordered endpoint moves past the undecodable event to the next one.
    let b = app.customer().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !rx
        .hits("/o")
        .iter()
        .any(|h| h.json["data"]["id"] == b.as_str())
    {
        assert!(
            Instant::now() < deadline,
            "the ordered endpoint did not move on:\n{}",
            app.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !rx.hits("/o")
            .iter()
            .any(|h| h.json["data"]["id"] == cid.to_string().as_str()),
        "the undecodable event was sent"
    );
    let d = app
        .wait_deliveries(
            &format!("endpoint_id={ep_id}&status=skipped"),
            Duration::from_secs(10),
            |d| d.len() == 1,
        )
        .await;
    assert_eq!(d[0]["event_id"], bad_event.as_str());
    assert!(
        d[0]["error_detail"]
            .as_str()
            .is_some_and(|e| e.contains("decoded")),
        "{}",
        d[0]
    );

    // Pages of events, newest and oldest first, by type and by resource: 200 without it.
    for q in [
        "/v1/events?limit=100",
        "/v1/events?limit=100&order=asc",
        "/v1/events?limit=100&type=customer.created",
        "/v1/events?limit=1",
    ] {
        let l = app.get(q).await.expect(200);
        assert!(!ids(&l).contains(&bad_event), "{q}: {l}");
    }
    let l = app.get("/v1/events?limit=100&order=asc").await.expect(200);
    let types: Vec<String> = l["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "customer.created")
        .map(|e| s(&e["data"]["id"]))
        .collect();
    assert_eq!(types, vec![a.clone(), b.clone()]);
    let l = app
        .get(&format!("/v1/events?resource_id={cid}"))
        .await
        .expect(200);
    assert!(ids(&l).is_empty(), "{l}");
    // The customer list passes over the undecodable row; a read of it says what is wrong.
    let l = app.get("/v1/customers?limit=100").await.expect(200);
    let listed = ids(&l);
    assert!(listed.contains(&a) && listed.contains(&b) && !listed.contains(&cid.to_string()));
    app.get(&format!("/v1/customers/{cid}"))
        .await
        .expect_error(500, "record_unreadable");
    app.get(&format!("/v1/events/{bad_event}"))
        .await
        .expect_error(500, "record_unreadable");

    // The event stream replays past it (resuming after the first event).
    let resp = app
        .client
        .get(format!("{}/v1/events/stream", app.base_url))
        .header("Authorization", format!("Bearer {}", app.wallet_key))
        .header("Last-Event-ID", first[0].json["sequence"].to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut resp = resp;
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !text.contains(&b) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(2), resp.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(_) => break,
            Err(_) => {}
        }
    }
    assert!(
        text.contains(&b),
        "the stream stopped at the bad row: {text}"
    );
    assert!(!text.contains(&bad_event));

    // verify reports it and fails.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_appliance"))
        .args(["verify", "--data-dir"])
        .arg(&app.data_dir)
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "verify passed: {out}");
    assert!(out.contains("cannot be decoded"), "{out}");
}
