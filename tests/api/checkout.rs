//! The public checkout (SPEC.md section 4, Checkout; DECISIONS.md section 12) and the hosted
//! page's HTTP side (the page itself runs in a browser in
//! scripts/checkout_browser.py).

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;

/// A personal sender's address for test transfers.
const PAYER: &str = "0x1111111111111111111111111111111111111111";

/// Creates an invoice with the checkout key; returns it and its checkout token.
async fn invoice(app: &App, body: Value) -> (Value, String) {
    let inv = app
        .post(&app.checkout_key, "/v1/invoices", body)
        .await
        .expect_success();
    let url = inv["checkout_url"]
        .as_str()
        .expect("checkout_url")
        .to_string();
    let token = url.rsplit('/').next().unwrap().to_string();
    assert!(token.starts_with("ck_") && token.len() == 46, "{url}");
    (inv, token)
}

/// A keyless request.
async fn public(app: &App, method: Method, path: &str, body: Option<Value>) -> Resp {
    app.send(method, None, path, body.as_ref(), &[]).await
}

async fn doc(app: &App, token: &str) -> Value {
    public(app, Method::GET, &format!("/v1/checkout/{token}"), None)
        .await
        .expect(200)
}

fn option<'a>(d: &'a Value, chain: &str, asset: &str) -> &'a Value {
    d["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["chain"] == chain && o["asset"] == asset)
        .unwrap_or_else(|| panic!("no option {chain}/{asset} in {d}"))
}

/// Pays `amount_atomic` of an option through `POST /v1/test/transfers`.
async fn pay(app: &App, o: &Value, amount_atomic: u128, extra: Value) -> Value {
    let mut body = json!({
        "chain": o["chain"], "asset": o["asset"], "decimals": o["decimals"],
        "amount": amount_atomic.to_string(), "to_address": o["address"],
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    app.post(&app.wallet_key, "/v1/test/transfers", body)
        .await
        .expect_success()
}

async fn wait_doc(app: &App, token: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let d = doc(app, token).await;
        if pred(&d) {
            return d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} not reached; last document: {d}"
        );
        // Well inside the token's 120 requests per minute.
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    }
}

fn atomic(v: &Value) -> u128 {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_document_is_public_and_carries_nothing_internal() {
    let app = spawn_app().await;
    app.project_set(&["--merchant-name", "Northwind Books"]);
    let (inv, token) = invoice(
        &app,
        json!({"price_amount": "4000", "title": "Order 7", "description": "Two notebooks",
               "reference_id": "order-7", "metadata": {"internal": "secret-tag"},
               "return_url": "https://shop.example/thanks",
               "accepted_chains": ["ethereum"]}),
    )
    .await;
    let r = public(&app, Method::GET, &format!("/v1/checkout/{token}"), None).await;
    assert_eq!(r.header("cache-control").as_deref(), Some("no-store"));
    let d = r.expect(200);
    assert_eq!(d["object"], "checkout");
    assert_eq!(d["status"], "open");
    assert_eq!(d["merchant"]["name"], "Northwind Books");
    assert_eq!(d["title"], "Order 7");
    assert_eq!(d["currency"], "USD");
    assert_eq!(d["price"], "40.00");
    assert_eq!(d["received"], "0.00");
    assert_eq!(d["remaining"], "40.00");
    assert_eq!(d["excess"], "0.00");
    assert_eq!(d["extended"], false);
    assert_eq!(d["expires_at"], inv["expires_at"]);
    assert_eq!(d["return_url"], "https://shop.example/thanks");
    assert_eq!(d["payments"], json!([]));
    assert_eq!(d["refund"], Value::Null);

    // No metadata, reference id, internal id or fee of any kind (not even null).
    let text = d.to_string();
    for banned in [
        "metadata",
        "secret-tag",
        "reference_id",
        "order-7",
        "fee_bps",
        "fee_fixed",
        "fee_cap",
        "\"id\"",
        "invoice_id",
        "project",
    ] {
        assert!(!text.contains(banned), "{banned} in {text}");
    }
    assert!(
        !text.contains(inv["id"].as_str().unwrap()),
        "the invoice id leaked"
    );

    // options[]: one per quote, amounts per DECISIONS.md section 12, URIs exact.
    let quotes = inv["quotes"].as_array().unwrap();
    assert_eq!(d["options"].as_array().unwrap().len(), quotes.len());
    let usdt = option(&d, "ethereum", "USDT");
    let q = quotes.iter().find(|q| q["asset"] == "USDT").unwrap();
    let addr = inv["addresses"][0]["address"]
        .as_str()
        .unwrap()
        .to_ascii_lowercase();
    assert_eq!(usdt["amount_atomic"], "40000000");
    assert_eq!(usdt["amount"], "40");
    assert_eq!(usdt["decimals"], 6);
    assert_eq!(usdt["stable"], true);
    assert_eq!(usdt["name"], "Ethereum");
    assert_eq!(usdt["refresh_at"], d["expires_at"]);
    assert_eq!(usdt["rate"], q["rate"]);
    assert_eq!(
        usdt["uri"],
        format!(
            "ethereum:{}@1/transfer?address={addr}&uint256=40000000",
            q["contract"].as_str().unwrap().to_ascii_lowercase()
        )
    );
    let eth = option(&d, "ethereum", "ETH");
    // 40.00 USD at the test price 3000.00: ceil(40 / 3000 x 10^18) wei.
    assert_eq!(eth["amount_atomic"], "13333333333333334");
    assert_eq!(eth["amount"], "0.013333333333333334");
    assert_eq!(eth["stable"], false);
    assert_eq!(
        eth["uri"],
        format!("ethereum:{addr}@1?value=13333333333333334")
    );
    assert_eq!(usdt["remaining_uri"], Value::Null);
}

#[tokio::test]
async fn every_miss_is_the_same_404() {
    let app = spawn_app().await;
    let (_, token) = invoice(&app, json!({"price_amount": "1000"})).await;
    let unknown = format!("ck_{}", "A".repeat(43));
    let mut bodies = Vec::new();
    for t in [
        "ck_short",
        unknown.as_str(),
        "nonsense",
        "ck_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA%21",
    ] {
        for (m, path, body) in [
            (Method::GET, format!("/v1/checkout/{t}"), None),
            (
                Method::POST,
                format!("/v1/checkout/{t}/select"),
                Some(json!({"chain": "ethereum", "asset": "USDT"})),
            ),
            (
                Method::POST,
                format!("/v1/checkout/{t}/refund"),
                Some(json!({"address": PAYER})),
            ),
        ] {
            let r = public(&app, m, &path, body).await;
            r.expect_error(404, "not_found");
            let mut b = r.body.clone();
            b.as_object_mut().unwrap().remove("request_id");
            bodies.push(b);
        }
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:?}");
    // A token of a real invoice with one character changed is just as unknown.
    let mut near = token.clone();
    near.pop();
    near.push(if token.ends_with('A') { 'B' } else { 'A' });
    public(&app, Method::GET, &format!("/v1/checkout/{near}"), None)
        .await
        .expect_error(404, "not_found");
}

#[tokio::test]
async fn select_is_a_display_preference() {
    let app = spawn_app().await;
    let (_, token) = invoice(
        &app,
        json!({"price_amount": "2500", "accepted_chains": ["ethereum", "polygon"]}),
    )
    .await;
    let before = doc(&app, &token).await;
    assert_eq!(before["selected"], Value::Null);
    let path = format!("/v1/checkout/{token}/select");
    let d = public(
        &app,
        Method::POST,
        &path,
        Some(json!({"chain": "polygon", "asset": "USDC"})),
    )
    .await
    .expect(200);
    assert_eq!(d["selected"], json!({"chain": "polygon", "asset": "USDC"}));
    // Nothing is locked or extended by it.
    assert_eq!(d["expires_at"], before["expires_at"]);
    assert_eq!(d["options"], before["options"]);
    assert_eq!(doc(&app, &token).await["selected"]["chain"], "polygon");

    let r = public(
        &app,
        Method::POST,
        &path,
        Some(json!({"chain": "bsc", "asset": "USDT"})),
    )
    .await;
    r.expect_error_param(400, "invalid_request", "chain");
    let r = public(
        &app,
        Method::POST,
        &path,
        Some(json!({"chain": "ethereum"})),
    )
    .await;
    r.expect_error_param(400, "invalid_request", "asset");
}

#[tokio::test]
async fn each_token_has_its_own_budget_apart_from_the_per_ip_one() {
    let app = spawn_app().await;
    let (_, a) = invoice(&app, json!({"price_amount": "1000"})).await;
    let (_, b) = invoice(&app, json!({"price_amount": "1000"})).await;
    // 120 per minute per token (2 more each second): more than the 60 unauthenticated
    // requests an address gets, and no more.
    let started = std::time::Instant::now();
    let mut ok = 0u64;
    let refused = loop {
        let r = public(&app, Method::GET, &format!("/v1/checkout/{a}"), None).await;
        if r.status != 200 {
            break r;
        }
        ok += 1;
        assert!(ok < 400, "never refused");
    };
    let refilled = 2 * started.elapsed().as_secs() + 2;
    assert!(
        (120..=120 + refilled).contains(&ok),
        "{ok} requests passed in {:?}",
        started.elapsed()
    );
    refused.expect_error(429, "rate_limited");
    assert!(refused.header("retry-after").is_some());
    // Another token, and the address's own keyless budget, are untouched.
    doc(&app, &b).await;
    public(&app, Method::GET, "/v1/market/status", None)
        .await
        .expect(200);
}

#[tokio::test]
async fn the_hosted_page_its_qr_codes_and_the_not_found_page() {
    let app = spawn_app().await;
    app.project_set(&["--merchant-logo-url", "https://cdn.shop.example/logo.svg"]);
    let (_, token) = invoice(
        &app,
        json!({"price_amount": "4000", "accepted_chains": ["ethereum"]}),
    )
    .await;
    let r = public(&app, Method::GET, &format!("/checkout/{token}"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/html; charset=utf-8")
    );
    let csp = r.header("content-security-policy").unwrap();
    assert!(
        csp.starts_with("default-src 'self'; img-src 'self' https://cdn.shop.example;"),
        "{csp}"
    );
    assert_eq!(r.header("referrer-policy").as_deref(), Some("no-referrer"));
    assert!(r.header("set-cookie").is_none());
    assert!(r.text.contains("ck-strings") && r.text.contains("lang=\"en\""));
    // Accept-Language and ?lang= pick the language.
    let r = app
        .send(
            Method::GET,
            None,
            &format!("/checkout/{token}"),
            None,
            &[("Accept-Language", "de-DE,de;q=0.9")],
        )
        .await;
    assert!(r.text.contains("lang=\"de\""), "{}", r.text);
    let r = public(
        &app,
        Method::GET,
        &format!("/checkout/{token}?lang=fr"),
        None,
    )
    .await;
    assert!(r.text.contains("lang=\"fr\""));

    // The QR code of an option, and the address variant; a pair not offered is 404.
    let d = doc(&app, &token).await;
    let o = option(&d, "ethereum", "USDT");
    let r = public(
        &app,
        Method::GET,
        &format!("/checkout/{token}/qr.svg?chain=ethereum&asset=USDT"),
        None,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type").as_deref(), Some("image/svg+xml"));
    assert!(r.text.contains("<svg"));
    let by_address = public(
        &app,
        Method::GET,
        &format!("/checkout/{token}/qr.svg?chain=ethereum&asset=USDT&variant=address"),
        None,
    )
    .await;
    assert_eq!(by_address.status, 200);
    assert_ne!(by_address.text, r.text, "the address QR is the URI's");
    assert!(o["uri"].as_str().unwrap().len() > o["address"].as_str().unwrap().len());
    public(
        &app,
        Method::GET,
        &format!("/checkout/{token}/qr.svg?chain=bsc&asset=USDT"),
        None,
    )
    .await
    .expect_error(404, "not_found");
    // Only an underpaid checkout has a remainder.
    public(
        &app,
        Method::GET,
        &format!("/checkout/{token}/qr.svg?chain=ethereum&asset=USDT&amount=remaining"),
        None,
    )
    .await
    .expect_error(404, "not_found");

    // Script and style sheet are served; nothing else under /assets/checkout/.
    let js = public(&app, Method::GET, "/assets/checkout/checkout.js", None).await;
    assert_eq!(js.status, 200);
    assert!(js
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));
    public(&app, Method::GET, "/assets/checkout/other.js", None)
        .await
        .expect_error(404, "not_found");

    // Malformed and unknown tokens: the same plain page, 404.
    let a = public(&app, Method::GET, "/checkout/ck_nope", None).await;
    let b = public(
        &app,
        Method::GET,
        &format!("/checkout/ck_{}", "B".repeat(43)),
        None,
    )
    .await;
    assert_eq!((a.status, b.status), (404, 404));
    assert_eq!(a.text, b.text);
    assert!(a.text.contains("Not found"));
    assert!(a
        .header("content-security-policy")
        .unwrap()
        .starts_with("default-src 'self'"));
}

#[tokio::test]
async fn underpaid_shows_the_remainder_with_its_own_uri() {
    let app = spawn_app().await;
    let (_, token) = invoice(
        &app,
        json!({"price_amount": "5000", "overpayment_policy": "refund", "accepted_chains": ["ethereum"]}),
    )
    .await;
    let d = doc(&app, &token).await;
    let o = option(&d, "ethereum", "USDT").clone();
    pay(&app, &o, 20_000_000, json!({"from_address": PAYER})).await;
    let d = wait_doc(&app, &token, "underpaid", |d| d["status"] == "underpaid").await;
    assert_eq!(d["received"], "20.00");
    assert_eq!(d["remaining"], "30.00");
    assert_eq!(d["extended"], true);
    let o2 = option(&d, "ethereum", "USDT");
    assert_eq!(o2["remaining_amount_atomic"], "30000000");
    assert_eq!(o2["remaining_amount"], "30");
    assert_eq!(
        o2["remaining_uri"],
        o["uri"]
            .as_str()
            .unwrap()
            .replace("uint256=50000000", "uint256=30000000")
    );
    // The ETH option's remainder is priced at the same locked rate (3000.00): 30 / 3000.
    assert_eq!(
        option(&d, "ethereum", "ETH")["remaining_amount_atomic"],
        "10000000000000000"
    );
    let p = &d["payments"][0];
    assert_eq!(p["amount"], "20");
    assert_eq!(p["status"], "confirmed");
    assert_eq!(p["asset"], "USDT");
    // Nothing to refund (yet): not ready.
    public(
        &app,
        Method::POST,
        &format!("/v1/checkout/{token}/refund"),
        Some(json!({"address": PAYER})),
    )
    .await
    .expect_error(409, "refund_not_ready");
}

#[tokio::test]
async fn an_overpayment_is_refunded_on_chain_to_the_buyer() {
    let app = spawn_app().await;
    let (inv, token) = invoice(
        &app,
        json!({"price_amount": "2000", "overpayment_policy": "refund", "accepted_chains": ["ethereum"]}),
    )
    .await;
    let d = doc(&app, &token).await;
    let o = option(&d, "ethereum", "USDT").clone();
    // 60 USDT for a 20.00 invoice: 40 USDT excess.
    pay(
        &app,
        &o,
        60_000_000,
        json!({"from_address": PAYER, "sender_class": "personal"}),
    )
    .await;
    let d = wait_doc(&app, &token, "a classified refund", |d| {
        d["status"] == "overpaid" && !d["refund"]["sender_class"].is_null()
    })
    .await;
    assert_eq!(d["excess"], "40.00");
    let r = &d["refund"];
    assert_eq!(r["status"], "awaiting_address");
    assert_eq!(r["sender_class"], "personal");
    assert_eq!(
        r["suggested_address"]
            .as_str()
            .unwrap()
            .to_ascii_lowercase(),
        PAYER
    );
    assert_eq!(r["gross"], "40");
    let gross: u128 = 40_000_000;
    let fee = (r["fee"].as_str().unwrap().parse::<f64>().unwrap() * 1e6).round() as u128;
    let net = (r["net"].as_str().unwrap().parse::<f64>().unwrap() * 1e6).round() as u128;
    assert!(fee > 0 && net + fee == gross, "{r}");

    let path = format!("/v1/checkout/{token}/refund");
    // An address the service custodies (the invoice's own) and a malformed one are refused.
    public(
        &app,
        Method::POST,
        &path,
        Some(json!({"address": o["address"]})),
    )
    .await
    .expect_error_param(422, "self_payout_forbidden", "address");
    public(
        &app,
        Method::POST,
        &path,
        Some(json!({"address": "0x1234"})),
    )
    .await
    .expect_error_param(422, "invalid_address", "address");
    public(&app, Method::POST, &path, Some(json!({})))
        .await
        .expect_error_param(400, "invalid_request", "address");

    let to = "0x2222222222222222222222222222222222222222";
    let d = public(&app, Method::POST, &path, Some(json!({"address": to})))
        .await
        .expect(200);
    assert_eq!(d["refund"]["status"], "pending");
    assert_eq!(d["refund"]["to_address"], to);
    // The same address again is idempotent; another is refused.
    let again = public(
        &app,
        Method::POST,
        &path,
        Some(json!({"address": to.to_ascii_uppercase().replace("0X", "0x")})),
    )
    .await
    .expect(200);
    assert_eq!(again["refund"]["to_address"], to);
    public(&app, Method::POST, &path, Some(json!({"address": PAYER})))
        .await
        .expect_error_param(409, "refund_address_mismatch", "address");

    // A payout from the merchant's funds: reference refund:<invoice id>, no fee, no approval.
    let list = app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    let payout = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["reference"] == format!("refund:{}", inv["id"].as_str().unwrap()))
        .unwrap_or_else(|| panic!("no refund payout in {list}"))
        .clone();
    assert_eq!(payout["customer_id"], Value::Null);
    assert_eq!(payout["to_address"], to);
    assert_eq!(atomic(&payout["amount"]), net);
    assert_eq!(atomic(&payout["fee_amount"]), 0);

    // It is sent and confirmed on the simulated chain: `invoice.refunded`, the tx hash shown.
    let payout_path = format!("/v1/payouts/{}", payout["id"].as_str().unwrap());
    let mut p = Value::Null;
    for _ in 0..60 {
        app.mine(4).await;
        p = app.get(&app.payout_key, &payout_path).await.expect(200);
        if p["status"] == "confirmed" || p["status"] == "failed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(p["status"], "confirmed", "{p}");
    let d = wait_doc(&app, &token, "the refund confirmed", |d| {
        d["refund"]["status"] == "confirmed"
    })
    .await;
    assert!(
        d["refund"]["tx_hash"]
            .as_str()
            .is_some_and(|h| h.starts_with("0x")),
        "{d}"
    );
    let types = app.event_types_for(inv["id"].as_str().unwrap()).await;
    assert_eq!(
        types.iter().filter(|t| *t == "invoice.refunded").count(),
        1,
        "{types:?}"
    );
    // The payout that carried it is confirmed, with the same hash.
    let p = app
        .get(
            &app.payout_key,
            &format!("/v1/payouts/{}", payout["id"].as_str().unwrap()),
        )
        .await
        .expect(200);
    assert_eq!(p["status"], "confirmed");
    assert_eq!(p["tx_hash"], d["refund"]["tx_hash"]);
    // Refund requests have their own budget: 10 per minute.
    let mut last = 0;
    for _ in 0..12 {
        last = public(&app, Method::POST, &path, Some(json!({"address": to})))
            .await
            .status;
    }
    assert_eq!(last, 429);
}

#[tokio::test]
async fn a_small_excess_is_skipped_as_dust_and_keep_has_no_refund() {
    let app = spawn_app().await;
    let (_, token) = invoice(
        &app,
        json!({"price_amount": "4000", "overpayment_policy": "refund", "accepted_chains": ["ethereum"]}),
    )
    .await;
    let o = option(&doc(&app, &token).await, "ethereum", "USDT").clone();
    // 41.00 for 40.00: 2.5% over, an excess of 1.00 USD, at most 1.00 after the fee: dust.
    pay(
        &app,
        &o,
        41_000_000,
        json!({"from_address": PAYER, "sender_class": "personal"}),
    )
    .await;
    let d = wait_doc(&app, &token, "the refund skipped", |d| {
        d["refund"]["status"] == "skipped"
    })
    .await;
    assert_eq!(d["refund"]["skip_reason"], "dust");
    public(
        &app,
        Method::POST,
        &format!("/v1/checkout/{token}/refund"),
        Some(json!({"address": PAYER})),
    )
    .await
    .expect_error(409, "invalid_state");

    let (_, keep) = invoice(
        &app,
        json!({"price_amount": "4000", "overpayment_policy": "keep", "accepted_chains": ["ethereum"]}),
    )
    .await;
    let o = option(&doc(&app, &keep).await, "ethereum", "USDT").clone();
    pay(&app, &o, 80_000_000, json!({"from_address": PAYER})).await;
    let d = wait_doc(&app, &keep, "overpaid", |d| d["status"] == "overpaid").await;
    assert_eq!(d["overpayment_policy"], "keep");
    assert_eq!(d["refund"], Value::Null);
    public(
        &app,
        Method::POST,
        &format!("/v1/checkout/{keep}/refund"),
        Some(json!({"address": PAYER})),
    )
    .await
    .expect_error(409, "invalid_state");
}

fn at(d: &Value, field: &str) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(d[field].as_str().unwrap()).unwrap()
}

/// The document is served from an in-memory cache (`services::checkout_cache`): every
/// answered change shows in the very next read, whichever writer made it (the test
/// clock, the expiry it causes, a merchant's cancel), and `now` is read at each request.
#[tokio::test]
async fn a_cached_document_shows_every_answered_change_at_once() {
    let app = spawn_app().await;
    let (inv, token) = invoice(&app, json!({"price_amount": "2500", "expires_in": 600})).await;
    let (other, other_token) = invoice(&app, json!({"price_amount": "700"})).await;
    let first = doc(&app, &token).await;
    assert_eq!(first["status"], "open");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let second = doc(&app, &token).await;
    assert_eq!(first["options"], second["options"]);
    assert!(at(&second, "now") > at(&first, "now"), "{first} {second}");
    assert_eq!(doc(&app, &other_token).await["status"], "open");

    // The test clock moves `now` at once (a project change, not an invoice one).
    app.post(
        &app.wallet_key,
        "/v1/test/clock",
        json!({"advance_seconds": 120}),
    )
    .await
    .expect(200);
    let moved = doc(&app, &token).await;
    assert_eq!(moved["status"], "open");
    let ahead = at(&moved, "now") - at(&second, "now");
    assert!(ahead >= chrono::Duration::seconds(120), "{second} {moved}");
    assert!(ahead < chrono::Duration::seconds(180), "{second} {moved}");

    // Past `expires_at`: the expiry written for the clock shows at once.
    app.post(
        &app.wallet_key,
        "/v1/test/clock",
        json!({"advance_seconds": 500}),
    )
    .await
    .expect(200);
    let got = app
        .get(
            &app.checkout_key,
            &format!("/v1/invoices/{}", inv["id"].as_str().unwrap()),
        )
        .await
        .expect(200);
    assert_eq!(got["status"], "expired", "{got}");
    assert_eq!(doc(&app, &token).await["status"], "expired");

    // A merchant's cancel of the other (cached) invoice.
    let id = other["id"].as_str().unwrap();
    app.post(
        &app.checkout_key,
        &format!("/v1/invoices/{id}/cancel"),
        json!({}),
    )
    .await
    .expect(200);
    assert_eq!(doc(&app, &other_token).await["status"], "canceled");
}
