//! Billing (SPEC.md sections 2, 3 and 4, Billing; DECISIONS.md section 13): plans, the
//! operational balance as a journal, activation both ways, fees when earned, the operator
//! commands, billing lines on the event stream.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::*;

fn cents(v: &Value) -> i64 {
    v.as_str()
        .unwrap_or_else(|| panic!("cents must be a string: {v}"))
        .parse()
        .unwrap()
}

async fn billing(app: &App) -> Value {
    let b = app.get(&app.wallet_key, "/v1/billing").await.expect(200);
    assert_eq!(b["object"], "billing", "{b}");
    b
}

async fn entries(app: &App, query: &str) -> Vec<Value> {
    let l = app
        .get(&app.wallet_key, &format!("/v1/billing/entries{query}"))
        .await
        .expect(200);
    assert_list(&l).clone()
}

/// `appliance billing credit|debit` on the default project; returns the answer.
fn operator(app: &App, verb: &str, cents: u64, note: &str) -> Value {
    let out = app.cli_ok(&[
        "billing",
        verb,
        "--project",
        "default",
        "--cents",
        &cents.to_string(),
        "--note",
        note,
    ]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

async fn choose(app: &App, plan: &str) -> Resp {
    app.post(
        &app.checkout_key,
        "/v1/billing/plan",
        json!({ "plan": plan }),
    )
    .await
}

fn verify_clean(app: &App) {
    let out = app.cli_ok(&["verify"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["violations"], json!([]), "{v}");
}

#[tokio::test]
async fn a_fresh_project_shows_the_plans_and_no_plan() {
    let app = spawn_app().await;
    let b = billing(&app).await;
    assert!(b["plan"].is_null(), "{b}");
    assert_eq!(b["plan_status"], "pending");
    assert_eq!(b["balance_cents"], "0");
    assert_eq!(b["onboarding_paid_cents"], "0");
    assert!(b["requested_plan"].is_null() && b["activation"].is_null() && b["fees"].is_null());
    // A test project is never gated.
    assert_eq!(b["live"], json!({ "ok": true, "reason": null }));
    let steps: Vec<&str> = b["onboarding"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["plan", "funding", "webhook", "first_invoice"]);
    assert_eq!(b["onboarding"]["remaining"], 4);
    assert_eq!(b["onboarding"]["can_skip"], false);
    let plans = b["plans"].as_array().unwrap();
    let drift = plans.iter().find(|p| p["key"] == "drift").expect("drift");
    assert_eq!(drift["self_selectable"], true);
    assert_eq!(drift["onboarding_fee_cents"], "5000");
    assert_eq!(drift["operational_balance_cents"], "2000");
    assert_eq!(drift["rate_bps"], 50);
    let ent = plans
        .iter()
        .find(|p| p["key"] == "enterprise")
        .expect("enterprise");
    assert_eq!(ent["self_selectable"], false);
    assert_eq!(ent["negotiated"], true);
    assert!(entries(&app, "").await.is_empty());
    // Any key kind reads it.
    app.get(&app.payout_key, "/v1/billing").await.expect(200);
    app.get(&app.checkout_key, "/v1/billing").await.expect(200);
}

#[tokio::test]
async fn a_plan_short_of_balance_waits_for_the_credit_that_closes_the_gap() {
    let app = spawn_app().await;
    let b = choose(&app, "drift").await.expect(200);
    assert!(b["plan"].is_null(), "{b}");
    assert_eq!(b["plan_status"], "pending");
    assert_eq!(b["requested_plan"], "drift");
    assert_eq!(b["requested_plan_name"], "Drift");
    let a = &b["activation"];
    assert_eq!(a["plan"], "drift");
    assert_eq!(a["onboarding_due_cents"], "5000");
    assert_eq!(a["balance_required_cents"], "7000");
    assert_eq!(a["shortfall_cents"], "7000");

    let r = operator(&app, "credit", 3000, "first part");
    assert_eq!(r["balance_cents"], "3000");
    assert_eq!(r["requested_plan"], "drift");
    let b = billing(&app).await;
    assert!(b["plan"].is_null());
    assert_eq!(b["activation"]["shortfall_cents"], "4000");
    assert!(app.events("type=billing.plan_activated").await.is_empty());

    // The credit that closes the gap activates the plan in the same transaction.
    let r = operator(&app, "credit", 4000, "second part");
    assert_eq!(r["plan"], "drift", "{r}");
    assert!(r["requested_plan"].is_null());
    let b = billing(&app).await;
    assert_eq!(b["plan"], "drift");
    assert_eq!(b["plan_status"], "active");
    assert_timestamp(&b["plan_activated_at"]);
    assert_eq!(b["balance_cents"], "2000");
    assert_eq!(b["onboarding_paid_cents"], "5000");
    assert!(b["activation"].is_null());
    assert_eq!(b["fees"]["rate_bps"], 50);
    assert_eq!(b["fees"]["cap_cents"], "500");
    assert_eq!(b["onboarding"]["steps"][0]["done"], true);

    let es = entries(&app, "").await;
    let kinds: Vec<(&str, i64)> = es
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), cents(&e["amount_cents"])))
        .collect();
    assert_eq!(
        kinds,
        [
            ("onboarding_fee", -5000),
            ("adjustment", 4000),
            ("adjustment", 3000)
        ],
        "newest first"
    );
    assert_eq!(es[0]["object"], "billing_entry");
    assert_eq!(es[0]["balance_after_cents"], "2000");
    assert_eq!(es[0]["ref_type"], "plan");
    assert_eq!(es[0]["ref_id"], "drift");
    assert_eq!(es[1]["note"], "second part");
    assert_eq!(
        es.iter().map(|e| cents(&e["amount_cents"])).sum::<i64>(),
        cents(&b["balance_cents"]),
        "the balance is the sum of the entries"
    );
    let only = entries(&app, "?kind=onboarding_fee").await;
    assert_eq!(only.len(), 1);
    assert_eq!(only[0]["id"], es[0]["id"]);
    app.get(&app.wallet_key, "/v1/billing/entries?kind=tip")
        .await
        .expect_error_param(400, "invalid_request", "kind");

    let ev = app.events("type=billing.plan_activated").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["data"]["plan"], "drift");
    assert_eq!(ev[0]["data"]["object"], "billing");
    // Billing lines take sequences of the event log but are not events.
    let all = app.events("").await;
    assert!(all.iter().all(|e| e["type"] != "billing.line"));
    verify_clean(&app);
}

#[tokio::test]
async fn a_plan_activates_at_once_when_the_balance_covers_it() {
    let app = spawn_app().await;
    app.post(&app.wallet_key, "/v1/billing/onboarding/skip", json!({}))
        .await
        .expect_error(402, "plan_not_active");
    operator(&app, "credit", 7500, "prepaid");
    let key = idem();
    let b = app
        .post_idem(
            &app.checkout_key,
            "/v1/billing/plan",
            json!({ "plan": "drift" }),
            &key,
        )
        .await
        .expect(200);
    assert_eq!(b["plan"], "drift", "{b}");
    assert_eq!(b["balance_cents"], "2500");
    assert_eq!(b["onboarding"]["can_skip"], true);
    // A replay answers the first answer and charges nothing more.
    let again = app
        .post_idem(
            &app.checkout_key,
            "/v1/billing/plan",
            json!({ "plan": "drift" }),
            &key,
        )
        .await
        .expect(200);
    assert_eq!(again, b);
    // Choosing the active plan again is a no-op.
    let b2 = choose(&app, "drift").await.expect(200);
    assert_eq!(b2["balance_cents"], "2500");
    assert_eq!(entries(&app, "?kind=onboarding_fee").await.len(), 1);

    let s1 = app
        .post(&app.wallet_key, "/v1/billing/onboarding/skip", json!({}))
        .await
        .expect(200);
    let at = s1["onboarding"]["skipped_at"].clone();
    assert_timestamp(&at);
    assert_eq!(s1["onboarding"]["can_skip"], false);
    assert_eq!(s1["onboarding"]["remaining"], 0);
    let bypassed = s1["onboarding"]["bypassed"].as_array().unwrap();
    assert!(bypassed.contains(&json!("funding")), "{s1}");
    assert!(s1["onboarding"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["complete"] == true));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let s2 = app
        .post(&app.wallet_key, "/v1/billing/onboarding/skip", json!({}))
        .await
        .expect(200);
    assert_eq!(
        s2["onboarding"]["skipped_at"], at,
        "the timestamp does not move"
    );
    verify_clean(&app);
}

#[tokio::test]
async fn enterprise_is_not_self_selectable_and_an_upgrade_pays_the_difference() {
    let app = spawn_app().await;
    let r = choose(&app, "enterprise").await;
    r.expect_error_param(403, "plan_not_self_selectable", "plan");
    choose(&app, "platinum")
        .await
        .expect_error_param(422, "unknown_plan", "plan");
    app.post(&app.checkout_key, "/v1/billing/plan", json!({}))
        .await
        .expect_error_param(400, "invalid_request", "plan");
    assert!(billing(&app).await["requested_plan"].is_null());

    operator(&app, "credit", 7000, "drift");
    choose(&app, "drift").await.expect(200);
    // Enterprise: onboarding 1000.00 less the 50.00 paid, plus 500.00 operational.
    let out = app.cli_ok(&[
        "billing",
        "plan",
        "--project",
        "default",
        "--plan",
        "enterprise",
    ]);
    let b: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(b["plan"], "drift", "{b}");
    assert_eq!(b["requested_plan"], "enterprise");
    assert_eq!(b["activation"]["onboarding_due_cents"], "95000");
    assert_eq!(b["activation"]["balance_required_cents"], "145000");
    assert_eq!(b["activation"]["shortfall_cents"], "143000");
    let r = operator(&app, "credit", 143_000, "upgrade");
    assert_eq!(r["plan"], "enterprise", "{r}");
    let b = billing(&app).await;
    assert_eq!(b["plan"], "enterprise");
    assert_eq!(b["onboarding_paid_cents"], "100000");
    assert_eq!(b["balance_cents"], "50000");
    let fees = entries(&app, "?kind=onboarding_fee").await;
    let amounts: Vec<i64> = fees.iter().map(|e| cents(&e["amount_cents"])).collect();
    assert_eq!(amounts, [-95_000, -5_000]);
    assert_eq!(app.events("type=billing.plan_activated").await.len(), 2);
    verify_clean(&app);
}

#[tokio::test]
async fn address_and_payout_fees_are_charged_once_when_earned() {
    let app = spawn_app().await;
    // Before a plan: no fee.
    let c0 = app.create_customer(None).await;
    app.create_wallet(&s(&c0["id"]), "ethereum").await;
    assert!(entries(&app, "").await.is_empty());

    operator(&app, "credit", 7000, "prepaid");
    choose(&app, "drift").await.expect(200);
    let (c, w, _) = app.funded_customer("ethereum", "USDT", 6, "5000000").await;
    let fees = entries(&app, "?kind=address_fee").await;
    assert_eq!(fees.len(), 1, "{fees:?}");
    assert_eq!(fees[0]["amount_cents"], "-1");
    assert_eq!(fees[0]["ref_type"], "wallet");
    assert_eq!(fees[0]["ref_id"], w["id"]);
    // The same address asked for again is not new: no fee.
    app.post(
        &app.wallet_key,
        "/v1/wallets",
        json!({ "customer_id": c["id"], "chain": "ethereum" }),
    )
    .await
    .expect(200);
    assert_eq!(entries(&app, "?kind=address_fee").await.len(), 1);

    let p = app
        .create_payout(
            json!({ "customer_id": c["id"], "chain": "ethereum", "asset": "USDT",
            "decimals": 6, "amount": "1000000", "to_address": external_address(0x41) }),
        )
        .await
        .expect(202);
    assert!(
        entries(&app, "?kind=payout_fee").await.is_empty(),
        "not before it confirms"
    );
    app.settle().await;
    let paid = app
        .wait_for(
            &app.payout_key,
            &format!("/v1/payouts/{}", s(&p["id"])),
            |v| v["status"] == "confirmed",
        )
        .await;
    assert_eq!(paid["fee_amount"], "0", "fees never come out of the coins");
    app.settle().await;
    let fees = entries(&app, "?kind=payout_fee").await;
    assert_eq!(fees.len(), 1, "{fees:?}");
    assert_eq!(fees[0]["amount_cents"], "-25");
    assert_eq!(fees[0]["ref_id"], p["id"]);
    assert_eq!(billing(&app).await["balance_cents"], "1974");
    verify_clean(&app);
}

#[tokio::test]
async fn operator_commands_show_credit_and_debit() {
    let app = spawn_app().await;
    let r = operator(&app, "debit", 150, "correction");
    assert_eq!(r["entry"]["kind"], "adjustment");
    assert_eq!(r["entry"]["amount_cents"], "-150");
    assert_eq!(r["balance_cents"], "-150");
    let out = app.cli_ok(&["billing", "show", "--project", "default"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["balance_cents"], "-150");
    assert_eq!(v["entries"][0]["note"], "correction");
    // A test project is never gated, whatever its balance.
    assert_eq!(v["live"]["ok"], true);
    for bad in [
        vec![
            "billing",
            "credit",
            "--project",
            "default",
            "--cents",
            "0",
            "--note",
            "x",
        ],
        vec![
            "billing",
            "credit",
            "--project",
            "default",
            "--cents",
            "-5",
            "--note",
            "x",
        ],
        vec![
            "billing",
            "debit",
            "--project",
            "default",
            "--cents",
            "5",
            "--note",
            " ",
        ],
        vec![
            "billing",
            "credit",
            "--project",
            "nosuch",
            "--cents",
            "5",
            "--note",
            "x",
        ],
        vec![
            "billing",
            "plan",
            "--project",
            "default",
            "--plan",
            "platinum",
        ],
    ] {
        let (st, out, err) = app.cli(&bad);
        assert!(!st.success(), "{bad:?} succeeded: {out}");
        assert!(!err.is_empty(), "{bad:?}: no message");
    }
    assert_eq!(entries(&app, "").await.len(), 1, "refusals write nothing");
    // Offline: the store is opened directly.
    let mut app = app;
    app.stop();
    let r = operator(&app, "credit", 200, "offline");
    assert_eq!(r["balance_cents"], "50");
    verify_clean(&app);
}

/// One server-sent event frame.
#[derive(Debug)]
struct Frame {
    id: Option<String>,
    event: String,
    data: Value,
}

async fn next_frame(resp: &mut reqwest::Response, buf: &mut String, within: Duration) -> Frame {
    let deadline = Instant::now() + within;
    loop {
        if let Some(i) = buf.find("\n\n") {
            let raw: String = buf.drain(..i + 2).collect();
            let mut f = Frame {
                id: None,
                event: "message".into(),
                data: Value::Null,
            };
            let mut data = String::new();
            for line in raw.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    f.id = Some(v.trim().to_string());
                } else if let Some(v) = line.strip_prefix("event:") {
                    f.event = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            f.data = serde_json::from_str(&data).unwrap_or(Value::Null);
            if f.event != "ping" {
                return f;
            }
            continue;
        }
        let left = deadline
            .checked_duration_since(Instant::now())
            .expect("a frame in time");
        match tokio::time::timeout(left, resp.chunk()).await {
            Ok(Ok(Some(c))) => buf.push_str(&String::from_utf8_lossy(&c)),
            other => panic!("stream ended: {other:?}"),
        }
    }
}

#[tokio::test]
async fn billing_lines_share_the_event_sequence_on_the_stream() {
    let app = spawn_app().await;
    app.create_customer(None).await;
    let mut resp = app
        .client
        .get(app.url("/v1/events/stream"))
        .header("Authorization", format!("Bearer {}", app.wallet_key))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut buf = String::new();
    let ready = next_frame(&mut resp, &mut buf, Duration::from_secs(10)).await;
    assert_eq!(ready.event, "ready");
    let start = ready.data["cursor"].as_u64().unwrap();

    operator(&app, "credit", 1234, "stream me");
    let f = next_frame(&mut resp, &mut buf, Duration::from_secs(10)).await;
    assert_eq!(f.event, "billing", "{f:?}");
    assert_eq!(f.id, Some((start + 1).to_string()));
    assert_eq!(f.data["kind"], "adjustment");
    assert_eq!(f.data["amount_cents"], "1234");
    assert_eq!(f.data["note"], "stream me");
    assert_timestamp(&f.data["created"]);
    let e = entries(&app, "").await;
    assert_eq!(f.data["id"], e[0]["id"]);

    let c = app.create_customer(None).await;
    let f = next_frame(&mut resp, &mut buf, Duration::from_secs(10)).await;
    assert_eq!(f.event, "event");
    assert_eq!(f.id, Some((start + 2).to_string()));
    assert_eq!(f.data["data"]["id"], c["id"]);
    // The event list skips the billing line's sequence (gaps are normal).
    let seqs: Vec<u64> = app
        .events("")
        .await
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert!(!seqs.contains(&(start + 1)), "{seqs:?}");
    assert!(seqs.contains(&(start + 2)));
    drop(resp);

    // Resuming from before the line replays it.
    let mut resp = app
        .client
        .get(app.url("/v1/events/stream"))
        .header("Authorization", format!("Bearer {}", app.wallet_key))
        .header("Last-Event-ID", start.to_string())
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    let mut buf = String::new();
    assert_eq!(
        next_frame(&mut resp, &mut buf, Duration::from_secs(10))
            .await
            .event,
        "ready"
    );
    let f = next_frame(&mut resp, &mut buf, Duration::from_secs(10)).await;
    assert_eq!(
        (f.event.as_str(), f.id),
        ("billing", Some((start + 1).to_string()))
    );
}

#[tokio::test]
async fn the_payment_fee_is_frozen_and_charged_once_and_live_projects_are_gated() {
    let app = spawn_app().await;
    operator(&app, "credit", 7000, "prepaid");
    choose(&app, "drift").await.expect(200);
    let inv = app
        .post(
            &app.checkout_key,
            "/v1/invoices",
            json!({ "price_amount": "10000" }),
        )
        .await
        .expect(201);
    let b = billing(&app).await;
    assert_eq!(b["onboarding"]["steps"][3]["step"], "first_invoice");
    assert_eq!(b["onboarding"]["steps"][3]["done"], true, "{b}");
    // 0.5% of 100.00 plus 0.10, frozen at creation.
    assert_eq!(inv["fee_bps"], 50, "{inv}");
    assert_eq!(inv["fee_fixed_cents"], "10");
    assert_eq!(inv["fee_cap_cents"], "500");
    let q = inv["quotes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["chain"] == "ethereum" && q["asset"] == "USDT")
        .unwrap()
        .clone();
    let to = inv["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["chain"] == "ethereum")
        .unwrap()["address"]
        .clone();
    // Paid in two halves: one fee, at the first credit.
    for _ in 0..2 {
        app.post_idem(
            &app.wallet_key,
            "/v1/test/transfers",
            json!({ "chain": "ethereum", "asset": "USDT", "decimals": q["decimals"],
                "amount": "50000000", "to_address": to }),
            &idem(),
        )
        .await
        .expect(201);
        app.mine(20).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let fees = entries(&app, "?kind=payment_fee").await;
        if !fees.is_empty() {
            assert_eq!(fees.len(), 1, "{fees:?}");
            assert_eq!(fees[0]["amount_cents"], "-60");
            assert_eq!(fees[0]["ref_id"], inv["id"]);
            break;
        }
        assert!(Instant::now() < deadline, "no payment fee");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    app.mine(20).await;
    assert_eq!(entries(&app, "?kind=payment_fee").await.len(), 1);
    verify_clean(&app);

    // A live project without a plan: 402; the test project never is.
    let live = app.other_project_key("shop", "live", "checkout");
    let r = app
        .post(&live, "/v1/invoices", json!({ "price_amount": "1000" }))
        .await;
    r.expect_error(402, "plan_not_active");
}

/// The payment fee is charged exactly once per invoice, also when the process is
/// killed (SIGKILL) at different points around the invoice's first credit.
#[tokio::test]
async fn a_kill_around_the_first_credit_charges_the_payment_fee_exactly_once() {
    let mut app = spawn_app().await;
    operator(&app, "credit", 7000, "prepaid");
    choose(&app, "drift").await.expect(200);
    let mut invoices: Vec<String> = Vec::new();
    for (round, delay_ms) in [0u64, 15, 40, 120].into_iter().enumerate() {
        let inv = app
            .post(
                &app.checkout_key,
                "/v1/invoices",
                json!({ "price_amount": "10000" }),
            )
            .await
            .expect(201);
        invoices.push(s(&inv["id"]));
        let to = inv["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["chain"] == "ethereum")
            .unwrap()["address"]
            .clone();
        // Mined but not final; the confirming blocks race a kill at a different point
        // around the credit (and its fee) each round.
        app.post_idem(
            &app.wallet_key,
            "/v1/test/transfers",
            json!({ "chain": "ethereum", "asset": "USDT", "decimals": 6,
                "amount": "100000000", "to_address": to, "confirm": false }),
            &idem(),
        )
        .await
        .expect(201);
        mine_killed_after(&mut app, delay_ms).await;
        let fees = wait_entries(&app, "payment_fee", round + 1).await;
        let mut refs: Vec<String> = fees.iter().map(|e| s(&e["ref_id"])).collect();
        refs.sort();
        refs.dedup();
        assert_eq!(refs.len(), round + 1, "an invoice charged twice: {fees:?}");
    }
    app.restart();
    app.mine(20).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fees = entries(&app, "?kind=payment_fee").await;
    assert_eq!(fees.len(), 4, "{fees:?}");
    for f in &fees {
        assert_eq!(f["amount_cents"], "-60", "0.5% of 100.00 plus 0.10: {f}");
        assert!(invoices.contains(&s(&f["ref_id"])), "{f}");
    }
    for id in &invoices {
        let inv = app
            .get(&app.checkout_key, &format!("/v1/invoices/{id}"))
            .await
            .expect(200);
        assert_eq!(inv["status"], "paid", "{inv}");
    }
    verify_clean(&app);
}

#[tokio::test]
async fn the_monthly_minimum_is_charged_once_across_a_restart() {
    let mut app = spawn_app().await;
    operator(&app, "credit", 7000, "prepaid");
    choose(&app, "drift").await.expect(200);
    // One day past the start of the next UTC month on the project's clock, and short of the
    // month after (a fixed 32 days crosses two month starts when run on a month's last day).
    app.post(
        &app.wallet_key,
        "/v1/test/clock",
        json!({ "advance_seconds": to_next_month_s() + 86_400 }),
    )
    .await
    .expect(200);
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let m = entries(&app, "?kind=monthly_minimum").await;
        if !m.is_empty() {
            break m;
        }
        assert!(Instant::now() < deadline, "no monthly minimum");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(first.len(), 1, "{first:?}");
    let amount = cents(&first[0]["amount_cents"]);
    assert!((-2000..0).contains(&amount), "pro rata of 20.00: {amount}");
    assert_eq!(first[0]["ref_type"], "month");
    app.restart();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let again = entries(&app, "?kind=monthly_minimum").await;
    assert_eq!(again.len(), 1, "charged once across the restart: {again:?}");
    verify_clean(&app);
}

// ---------------------------------------------------------------------------------------
// Funding addresses (SPEC.md section 2, Funding address; DECISIONS.md sections 13 and 15).

async fn funding(app: &App) -> Vec<Value> {
    let l = app
        .get(&app.wallet_key, "/v1/billing/funding")
        .await
        .expect(200);
    assert_eq!(l["has_more"], false, "{l}");
    assert_list(&l).clone()
}

fn funding_on(list: &[Value], chain: &str) -> Value {
    list.iter()
        .find(|f| f["chain"] == chain)
        .unwrap_or_else(|| panic!("no funding address on {chain}: {list:?}"))
        .clone()
}

/// A test transfer of `amount` atomic `asset` to the project's funding address on
/// `chain`, confirmed (`confirm` true) or only mined.
async fn fund(
    app: &App,
    chain: &str,
    asset: &str,
    decimals: u8,
    amount: &str,
    confirm: bool,
) -> Value {
    let to = funding_on(&funding(app).await, chain)["address"].clone();
    let t = app
        .post_idem(
            &app.wallet_key,
            "/v1/test/transfers",
            json!({ "chain": chain, "asset": asset, "decimals": decimals, "amount": amount,
                "to_address": to, "confirm": confirm }),
            &idem(),
        )
        .await
        .expect(201);
    assert_eq!(t["owner"], "funding", "{t}");
    t
}

/// Waits until the journal holds `n` entries of `kind` (`?kind=`), and returns them.
/// Mines 12 ethereum blocks and SIGKILLs the server `delay_ms` into that request (or once
/// it is answered, if sooner), starts it again on the same data dir and mines 12 more.
async fn mine_killed_after(app: &mut App, delay_ms: u64) {
    let blocks = app.post(
        &app.wallet_key,
        "/v1/test/blocks",
        json!({"chain": "ethereum", "count": 12}),
    );
    tokio::select! {
        _ = blocks => {}
        _ = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
    }
    app.restart(); // SIGKILL, then start again on the same data dir
    app.post(
        &app.wallet_key,
        "/v1/test/blocks",
        json!({"chain": "ethereum", "count": 12}),
    )
    .await
    .expect(200);
}

async fn wait_entries(app: &App, kind: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let es = entries(app, &format!("?kind={kind}")).await;
        if es.len() >= n {
            assert_eq!(es.len(), n, "more {kind} entries than expected: {es:?}");
            return es;
        }
        assert!(
            Instant::now() < deadline,
            "{n} {kind} entries never came: {es:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn funding_addresses_are_made_on_first_call_and_never_change() {
    let app = spawn_app().await;
    let first = funding(&app).await;
    let again = funding(&app).await;
    assert_eq!(first, again, "the second call answers the same addresses");
    let chains: Vec<&str> = first.iter().map(|f| f["chain"].as_str().unwrap()).collect();
    for c in ["ethereum", "bsc", "polygon", "arbitrum", "base"] {
        assert!(chains.contains(&c), "no {c} funding address: {chains:?}");
    }
    let eth = funding_on(&first, "ethereum");
    assert_eq!(eth["object"], "funding_address");
    assert_eq!(eth["account_kind"], "contract");
    assert!(eth["memo"].is_null());
    let addr = s(&eth["address"]);
    assert!(addr.starts_with("0x") && addr.len() == 42, "{addr}");
    // One forwarder address for every EVM chain, like a customer's.
    assert!(
        first.iter().all(|f| f["address"] == eth["address"]),
        "{first:?}"
    );
    // assets[] is exactly what is credited: the stablecoins at par, the native coin at spot.
    assert_eq!(
        eth["assets"],
        json!([
            {"symbol": "ETH", "decimals": 18, "par": false},
            {"symbol": "USDT", "decimals": 6, "par": true},
            {"symbol": "USDC", "decimals": 6, "par": true},
        ])
    );
    let bsc = funding_on(&first, "bsc");
    assert!(bsc["assets"]
        .as_array()
        .unwrap()
        .contains(&json!({"symbol": "USDT", "decimals": 18, "par": true})));
    // Any key kind reads it, and sees the same addresses.
    let by_checkout = app
        .get(&app.checkout_key, "/v1/billing/funding")
        .await
        .expect(200);
    assert_eq!(assert_list(&by_checkout), &first);
    // Not a customer's wallet, and distinct from a customer's and an invoice's address.
    let wallets = app.get(&app.wallet_key, "/v1/wallets").await.expect(200);
    assert!(assert_list(&wallets).is_empty(), "{wallets}");
    let c = app.create_customer(None).await;
    let w = app.create_wallet(&s(&c["id"]), "ethereum").await;
    assert_ne!(w["address"], eth["address"]);
    // Stable across a restart too.
    let mut app = app;
    app.restart();
    assert_eq!(funding(&app).await, first);
    // A live project gets addresses only on chains with a node (the watched ones): none on
    // this server.
    let live = app.other_project_key("shop", "live", "wallet");
    let none = app.get(&live, "/v1/billing/funding").await.expect(200);
    assert!(assert_list(&none).is_empty(), "{none}");
    // Another project gets its own.
    let other = app.other_project_key("other", "test", "wallet");
    let theirs = app.get(&other, "/v1/billing/funding").await.expect(200);
    assert_ne!(
        funding_on(assert_list(&theirs), "ethereum")["address"],
        eth["address"]
    );
    verify_clean(&app);
}

#[tokio::test]
async fn usdt_funds_at_par_and_the_native_coin_at_the_test_price() {
    let app = spawn_app().await;
    assert_eq!(billing(&app).await["onboarding"]["steps"][1]["done"], false);
    let t = fund(&app, "ethereum", "USDT", 6, "25000000", true).await;
    let es = wait_entries(&app, "funding", 1).await;
    let e = &es[0];
    assert_eq!(e["amount_cents"], "2500", "{e}");
    assert_eq!(e["balance_after_cents"], "2500");
    assert_eq!(e["chain"], "ethereum");
    assert_eq!(e["asset"], "USDT");
    assert_eq!(e["amount_atomic"], "25000000");
    assert_eq!(e["rate"], "1.00");
    assert_eq!(e["rate_source"], "par");
    assert_eq!(e["ref_type"], "deposit");
    let tr = &e["transfer"];
    assert_eq!(tr["amount_decimal"], "25");
    assert_eq!(tr["tx_hash"], t["tx_hash"]);
    assert_eq!(tr["from_address"], t["from_address"]);
    assert_eq!(tr["status"], "confirmed");
    assert_eq!(tr["required_confirmations"], 12);
    assert!(tr["confirmations"].as_u64().unwrap() >= 12, "{tr}");
    assert!(s(&tr["explorer_url"]).contains(&s(&t["tx_hash"])), "{tr}");
    assert_timestamp(&tr["block_time"]);

    // 0.01 ETH at the test table's 3000.00: 30.00.
    fund(&app, "ethereum", "ETH", 18, "10000000000000000", true).await;
    let es = wait_entries(&app, "funding", 2).await;
    assert_eq!(es[0]["asset"], "ETH");
    assert_eq!(es[0]["amount_cents"], "3000", "{}", es[0]);
    assert_eq!(es[0]["rate"], "3000.00");
    assert_eq!(es[0]["rate_source"], "test");
    assert_eq!(es[0]["transfer"]["amount_decimal"], "0.01");
    let b = billing(&app).await;
    assert_eq!(b["balance_cents"], "5500");
    assert_eq!(b["onboarding"]["steps"][1]["step"], "funding");
    assert_eq!(b["onboarding"]["steps"][1]["done"], true, "{b}");
    // A funding transfer is not a merchant's deposit: no deposit event, no deposit row.
    assert!(app.events("type=deposit.confirmed").await.is_empty());
    let deps = app.get(&app.wallet_key, "/v1/deposits").await.expect(200);
    assert!(assert_list(&deps).is_empty(), "{deps}");
    // The coins are the operator's: swept to the master wallet like any address's, and
    // not the project's to pay out (its own available stays empty).
    app.settle().await;
    let sweeps = app.get(&app.wallet_key, "/v1/sweeps").await.expect(200);
    assert!(
        assert_list(&sweeps)
            .iter()
            .any(|s| s["status"] == "confirmed" && s["amount"] == "25000000"),
        "the funding address was not swept: {sweeps}"
    );
    let r = app
        .create_payout(json!({ "chain": "ethereum", "asset": "USDT", "decimals": 6,
            "amount": "1000000", "to_address": external_address(7) }))
        .await;
    r.expect_error(402, "insufficient_funds");
    verify_clean(&app);
}

#[tokio::test]
async fn a_requested_plan_activates_on_the_funding_transfer_that_closes_the_gap() {
    let app = spawn_app().await;
    let b = choose(&app, "drift").await.expect(200);
    assert_eq!(b["activation"]["shortfall_cents"], "7000");
    fund(&app, "ethereum", "USDC", 6, "30000000", true).await;
    wait_entries(&app, "funding", 1).await;
    let b = billing(&app).await;
    assert!(b["plan"].is_null(), "{b}");
    assert_eq!(b["activation"]["shortfall_cents"], "4000");
    assert!(app.events("type=billing.plan_activated").await.is_empty());

    fund(&app, "polygon", "USDT", 6, "40000000", true).await;
    wait_entries(&app, "funding", 2).await;
    let b = billing(&app).await;
    assert_eq!(b["plan"], "drift", "{b}");
    assert_eq!(b["plan_status"], "active");
    assert!(b["requested_plan"].is_null());
    assert_eq!(b["balance_cents"], "2000");
    let es = entries(&app, "").await;
    let kinds: Vec<(&str, i64)> = es
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), cents(&e["amount_cents"])))
        .collect();
    assert_eq!(
        kinds,
        [
            ("onboarding_fee", -5000),
            ("funding", 4000),
            ("funding", 3000)
        ],
        "the activation's line follows the credit that closed the gap"
    );
    let ev = app.events("type=billing.plan_activated").await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["data"]["plan"], "drift");
    verify_clean(&app);
}

#[tokio::test]
async fn a_coin_a_funding_address_does_not_list_is_recorded_not_credited() {
    let app = spawn_app().await;
    app.project_set(&[
        "--chain",
        "ethereum",
        "--asset",
        "USDC",
        "--asset-archived",
        "true",
    ]);
    let eth = funding_on(&funding(&app).await, "ethereum");
    let symbols: Vec<&str> = eth["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["symbol"].as_str().unwrap())
        .collect();
    assert_eq!(symbols, ["ETH", "USDT"], "an archived coin is not listed");
    fund(&app, "ethereum", "USDC", 6, "50000000", true).await;
    let es = wait_entries(&app, "adjustment", 1).await;
    let e = &es[0];
    assert_eq!(e["amount_cents"], "0", "{e}");
    assert_eq!(e["asset"], "USDC");
    assert_eq!(e["amount_atomic"], "50000000");
    assert_eq!(e["transfer"]["status"], "failed", "{e}");
    assert!(s(&e["note"]).contains("not credited"), "{e}");
    let b = billing(&app).await;
    assert_eq!(b["balance_cents"], "0");
    assert_eq!(
        b["onboarding"]["steps"][1]["done"], false,
        "nothing was credited"
    );
    assert!(entries(&app, "?kind=funding").await.is_empty());
    // A listed coin still funds.
    fund(&app, "ethereum", "USDT", 6, "1000000", true).await;
    wait_entries(&app, "funding", 1).await;
    assert_eq!(billing(&app).await["balance_cents"], "100");
    verify_clean(&app);
}

/// A funding transfer too large to credit (10^30 atomic BSC USDT does not
/// fit exact decimals; 9.2 x 10^22 atomic ETH USDT is 92 quadrillion USD) is recorded with
/// a 0-cent adjustment saying why, never dropped and never "worth less than a cent".
#[tokio::test]
async fn a_huge_funding_transfer_is_recorded_for_the_operator_not_dropped() {
    let app = spawn_app().await;
    fund(
        &app,
        "bsc",
        "USDT",
        18,
        "1000000000000000000000000000000",
        true,
    )
    .await;
    fund(&app, "ethereum", "USDT", 6, "92000000000000000000000", true).await;
    let es = wait_entries(&app, "adjustment", 2).await;
    for e in &es {
        assert_eq!(e["amount_cents"], "0", "{e}");
        let note = s(&e["note"]);
        assert!(note.contains("not credited automatically"), "{e}");
        assert!(!note.contains("less than a cent"), "{e}");
    }
    assert_eq!(billing(&app).await["balance_cents"], "0");
    assert!(entries(&app, "?kind=funding").await.is_empty());
    // A transfer of a normal size still funds.
    fund(&app, "ethereum", "USDT", 6, "1000000", true).await;
    wait_entries(&app, "funding", 1).await;
    assert_eq!(billing(&app).await["balance_cents"], "100");
    verify_clean(&app);
}

#[tokio::test]
async fn a_kill_around_the_funding_credit_credits_exactly_once() {
    let mut app = spawn_app().await;
    funding(&app).await;
    // Mined but not final; killed at a different point around the credit each round.
    for (round, delay_ms) in [0u64, 15, 40, 120].into_iter().enumerate() {
        fund(&app, "ethereum", "USDT", 6, "10000000", false).await;
        mine_killed_after(&mut app, delay_ms).await;
        let es = wait_entries(&app, "funding", round + 1).await;
        let mut txs: Vec<String> = es.iter().map(|e| s(&e["transfer"]["tx_hash"])).collect();
        txs.sort();
        txs.dedup();
        assert_eq!(txs.len(), round + 1, "a transfer credited twice: {es:?}");
    }
    app.restart();
    app.post(
        &app.wallet_key,
        "/v1/test/blocks",
        json!({"chain": "ethereum", "count": 5}),
    )
    .await
    .expect(200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(entries(&app, "?kind=funding").await.len(), 4);
    assert_eq!(billing(&app).await["balance_cents"], "4000");
    verify_clean(&app);
}

#[tokio::test]
async fn a_funding_credit_orphaned_by_a_reorg_is_reversed_and_the_plan_stays() {
    let app = spawn_app().await;
    operator(&app, "credit", 5000, "prepaid");
    choose(&app, "drift").await.expect(200);
    let t = fund(&app, "ethereum", "USDT", 6, "20000000", true).await;
    wait_entries(&app, "funding", 1).await;
    let b = billing(&app).await;
    assert_eq!(b["plan"], "drift", "the funding credit closed the gap: {b}");
    assert_eq!(b["balance_cents"], "2000");
    app.post(
        &app.wallet_key,
        "/v1/test/reorg",
        json!({"chain": "ethereum", "depth": 12}),
    )
    .await
    .expect(200);
    // The reversal: an adjustment of minus the credit, about the same transfer.
    let deadline = Instant::now() + Duration::from_secs(20);
    let rev = loop {
        let adj: Vec<Value> = entries(&app, "?kind=adjustment")
            .await
            .into_iter()
            .filter(|e| e["ref_type"] == "deposit")
            .collect();
        if let Some(e) = adj.first() {
            assert_eq!(adj.len(), 1, "{adj:?}");
            break e.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the orphaned credit was not reversed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(rev["amount_cents"], "-2000", "{rev}");
    assert_eq!(rev["transfer"]["status"], "orphaned");
    assert_eq!(rev["transfer"]["tx_hash"], t["tx_hash"]);
    assert_eq!(rev["rate_source"], "par");
    let b = billing(&app).await;
    assert_eq!(b["balance_cents"], "0");
    assert_eq!(b["plan"], "drift", "an activation is not undone");
    // The funding entry itself is never rewritten.
    let f = entries(&app, "?kind=funding").await;
    assert_eq!(f.len(), 1);
    assert_eq!(f[0]["amount_cents"], "2000");
    app.mine(20).await;
    assert_eq!(
        entries(&app, "?kind=adjustment").await.len(),
        2,
        "reversed once"
    );
    verify_clean(&app);
}

/// Seconds from now to the start of the next UTC month.
fn to_next_month_s() -> i64 {
    use chrono::{Datelike, TimeZone, Utc};
    let now = Utc::now();
    let (y, m) = if now.month() == 12 {
        (now.year() + 1, 1)
    } else {
        (now.year(), now.month() + 1)
    };
    let start = Utc
        .with_ymd_and_hms(y, m, 1, 0, 0, 0)
        .single()
        .expect("a valid date");
    (start - now).num_seconds()
}
