//! Refund claims (DECISIONS.md section 5): excess that arrives
//! after a refund was requested opens a new claim held for the buyer, not the merchant's
//! money; a refund whose payout fails or is canceled awaits an address again. Black-box,
//! over HTTP, on the simulated chain.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::*;

/// The senders of the test transfers (personal wallets).
const PAYER: &str = "0x1111111111111111111111111111111111111111";
const PAYER2: &str = "0x4444444444444444444444444444444444444444";

async fn invoice(app: &App, price: &str) -> (Value, String) {
    let inv = app
        .post(
            &app.checkout_key,
            "/v1/invoices",
            json!({"price_amount": price, "overpayment_policy": "refund",
                   "accepted_chains": ["ethereum"]}),
        )
        .await
        .expect_success();
    let url = s(&inv["checkout_url"]);
    let token = url.rsplit('/').next().unwrap().to_string();
    (inv, token)
}

async fn public(app: &App, method: Method, path: &str, body: Option<Value>) -> Resp {
    app.send(method, None, path, body.as_ref(), &[]).await
}

async fn doc(app: &App, token: &str) -> Value {
    public(app, Method::GET, &format!("/v1/checkout/{token}"), None)
        .await
        .expect(200)
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

/// Pays `amount_atomic` USDT (6 decimals) to the invoice's ethereum address from `from`.
async fn pay(app: &App, d: &Value, amount_atomic: u128, from: &str) {
    pay_in(app, d, "USDT", amount_atomic, from).await
}

/// Pays `amount_atomic` of `asset` (a 6-decimal stablecoin on ethereum) from `from`.
async fn pay_in(app: &App, d: &Value, asset: &str, amount_atomic: u128, from: &str) {
    let o = d["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["chain"] == "ethereum" && o["asset"] == asset)
        .unwrap_or_else(|| panic!("no {asset} option in {d}"));
    app.post(
        &app.wallet_key,
        "/v1/test/transfers",
        json!({"chain": "ethereum", "asset": asset, "decimals": 6,
               "amount": amount_atomic.to_string(), "to_address": o["address"],
               "from_address": from, "sender_class": "personal"}),
    )
    .await
    .expect_success();
}

/// A decimal string of USDT (`"19.9979"`) in atomic units (6 decimals), exactly.
fn micros(v: &Value) -> u128 {
    let t = v.as_str().unwrap_or_else(|| panic!("not a decimal: {v}"));
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    assert!(frac.len() <= 6, "{t}");
    let frac = format!("{frac:0<6}");
    whole.parse::<u128>().unwrap() * 1_000_000 + frac.parse::<u128>().unwrap()
}

/// The refund payouts of invoice `id` (`reference` `refund:<id>`).
async fn refund_payouts(app: &App, id: &str) -> Vec<Value> {
    let list = app.get(&app.payout_key, "/v1/payouts").await.expect(200);
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["reference"] == format!("refund:{id}"))
        .cloned()
        .collect()
}

/// The one payout of `payouts` to `to`.
fn to<'a>(payouts: &'a [Value], to: &str) -> &'a Value {
    let mut it = payouts.iter().filter(|p| p["to_address"] == to);
    let p = it
        .next()
        .unwrap_or_else(|| panic!("no payout to {to} in {payouts:?}"));
    assert!(it.next().is_none(), "two payouts to {to}: {payouts:?}");
    p
}

/// Mines blocks until payout `id` is `status` (at most `max` rounds of 4 blocks).
async fn mine_until(app: &App, id: &str, status: &str, max: u32) -> Value {
    let path = format!("/v1/payouts/{id}");
    let mut p = Value::Null;
    for _ in 0..max {
        p = app.get(&app.payout_key, &path).await.expect(200);
        if p["status"] == status {
            return p;
        }
        app.mine(4).await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(p["status"], status, "{p}");
    p
}

/// The merchant's own funds (a payout without `customer_id`) hold exactly `available`
/// atomic USDT: one unit more is 402 `insufficient_funds`; exactly that is accepted (and
/// leaves, so the merchant's `available` is 0 afterwards).
async fn merchant_available_is(app: &App, available: u128) {
    merchant_available_in(app, "USDT", available).await
}

/// [`merchant_available_is`] of `asset` on ethereum.
async fn merchant_available_in(app: &App, asset: &str, available: u128) {
    let payout = |amount: u128| {
        json!({"chain": "ethereum", "asset": asset, "decimals": 6,
               "amount": amount.to_string(), "to_address": external_address(9)})
    };
    app.create_payout(payout(available + 1))
        .await
        .expect_error(402, "insufficient_funds");
    app.create_payout(payout(available)).await.expect(202);
}

/// Invoice 40, paid 60, refund of the 20 excess requested; 30 more arrive: the 30 open a
/// second claim, held (locked) for the buyer and refunded by its own payout, rather than
/// showing 50.00 excess on a refund of 20 and raising the merchant's balance by 30;
/// `refund` is the open claim and `refunds` lists both.
#[tokio::test]
async fn excess_after_a_refund_request_opens_a_new_claim_held_for_the_buyer() {
    let app = spawn_app().await;
    let (inv, token) = invoice(&app, "4000").await;
    let id = s(&inv["id"]);
    let d = doc(&app, &token).await;
    pay(&app, &d, 60_000_000, PAYER).await;
    let d = wait_doc(&app, &token, "a classified refund", |d| {
        d["status"] == "overpaid" && !d["refund"]["net"].is_null()
    })
    .await;
    assert_eq!(d["excess"], "20.00");
    assert_eq!(d["refund"]["gross"], "20");
    let (fee1, net1) = (micros(&d["refund"]["fee"]), micros(&d["refund"]["net"]));
    assert!(fee1 > 0 && fee1 + net1 == 20_000_000, "{d}");
    let path = format!("/v1/checkout/{token}/refund");
    let first_to = "0x2222222222222222222222222222222222222222";
    let d = public(
        &app,
        Method::POST,
        &path,
        Some(json!({"address": first_to})),
    )
    .await
    .expect(200);
    assert_eq!(d["refund"]["status"], "pending");

    // 30 more arrive after the refund was requested.
    pay(&app, &d, 30_000_000, PAYER2).await;
    wait_doc(&app, &token, "the second payment credited", |d| {
        d["excess"] == "50.00"
    })
    .await;
    // The merchant's own funds are the price and the first claim's fee estimate: the first
    // claim's net is its payout's lock and the 30 are held for the buyer (not the
    // merchant's: that would be 70 + fee).
    merchant_available_is(&app, 40_000_000 + fee1).await;

    // The second claim: its own gross, classification, fee and net; the open one.
    let d = wait_doc(&app, &token, "the second claim classified", |d| {
        d["refunds"].as_array().is_some_and(|r| r.len() == 2) && !d["refund"]["net"].is_null()
    })
    .await;
    let claims = d["refunds"].as_array().unwrap();
    // The first claim went on meanwhile (a test transfer mines the blocks that confirm it,
    // which also sends the queued refund).
    assert!(
        ["pending", "sent", "confirmed"].contains(&claims[0]["status"].as_str().unwrap()),
        "{d}"
    );
    assert_eq!(claims[0]["to_address"], first_to);
    assert_eq!(claims[0]["gross"], "20");
    assert_eq!(claims[1]["status"], "awaiting_address", "{d}");
    assert_eq!(claims[1]["gross"], "30");
    assert_eq!(claims[1]["to_address"], Value::Null);
    assert_eq!(claims[1]["sender_class"], "personal");
    assert_eq!(
        s(&claims[1]["suggested_address"]).to_ascii_lowercase(),
        PAYER2
    );
    assert_eq!(d["refund"], claims[1], "the open claim is the new one");
    let (fee2, net2) = (micros(&claims[1]["fee"]), micros(&claims[1]["net"]));
    assert!(fee2 > 0 && fee2 + net2 == 30_000_000, "{d}");
    let overpaid = app
        .events(&format!("type=invoice.overpaid&resource_id={id}"))
        .await;
    assert_eq!(overpaid.len(), 2, "{overpaid:?}");

    // The second claim is refunded by its own payout, to any address.
    let second_to = "0x3333333333333333333333333333333333333333";
    let d = public(
        &app,
        Method::POST,
        &path,
        Some(json!({"address": second_to})),
    )
    .await
    .expect(200);
    assert_eq!(d["refund"]["status"], "pending");
    assert_eq!(d["refund"]["to_address"], second_to);
    assert_eq!(d["refunds"][0]["to_address"], first_to);
    // Nothing awaits an address now: the same address again is idempotent, another refused.
    public(
        &app,
        Method::POST,
        &path,
        Some(json!({"address": second_to})),
    )
    .await
    .expect(200);
    public(&app, Method::POST, &path, Some(json!({"address": PAYER})))
        .await
        .expect_error_param(409, "refund_address_mismatch", "address");
    let payouts = refund_payouts(&app, &id).await;
    assert_eq!(payouts.len(), 2, "{payouts:?}");
    assert_eq!(atomic(&to(&payouts, first_to)["amount"]), net1);
    assert_eq!(atomic(&to(&payouts, second_to)["amount"]), net2);
    for p in &payouts {
        assert_eq!(p["customer_id"], Value::Null);
        assert_eq!(atomic(&p["fee_amount"]), 0);
    }
    // The second request released only the second claim's fee estimate to the merchant
    // (the merchant's earlier payout took the rest).
    merchant_available_is(&app, fee2).await;

    // Both are sent and confirmed: each claim shows its own transaction, and
    // `invoice.refunded` is emitted once per claim.
    for p in &payouts {
        mine_until(&app, &s(&p["id"]), "confirmed", 60).await;
    }
    let d = wait_doc(&app, &token, "both claims confirmed", |d| {
        d["refunds"]
            .as_array()
            .is_some_and(|r| r.iter().all(|c| c["status"] == "confirmed"))
    })
    .await;
    let (h0, h1) = (&d["refunds"][0]["tx_hash"], &d["refunds"][1]["tx_hash"]);
    assert!(h0.is_string() && h1.is_string() && h0 != h1, "{d}");
    assert_eq!(d["refund"], d["refunds"][1]);
    let refunded = app
        .events(&format!("type=invoice.refunded&resource_id={id}"))
        .await;
    assert_eq!(refunded.len(), 2, "{refunded:?}");
}

/// DECISIONS.md section 5: a refund whose payout reverts or is canceled goes back to
/// `awaiting_address` (any valid address may then be given), its net held for the buyer
/// meanwhile; the next request makes a new payout of the same net.
#[tokio::test]
async fn a_refund_whose_payout_reverts_or_is_canceled_awaits_an_address_again() {
    let app = spawn_app().await;
    let (inv, token) = invoice(&app, "2000").await;
    let id = s(&inv["id"]);
    let d = doc(&app, &token).await;
    // 60 USDT for a 20.00 invoice: 40 USDT excess.
    pay(&app, &d, 60_000_000, PAYER).await;
    let d = wait_doc(&app, &token, "a classified refund", |d| {
        !d["refund"]["net"].is_null()
    })
    .await;
    let (fee, net) = (micros(&d["refund"]["fee"]), micros(&d["refund"]["net"]));
    assert_eq!(fee + net, 40_000_000);
    let path = format!("/v1/checkout/{token}/refund");

    // To an address whose transfers revert: the payout fails, the claim awaits again.
    let d = public(
        &app,
        Method::POST,
        &path,
        Some(json!({"address": reverting_address()})),
    )
    .await
    .expect(200);
    assert_eq!(d["refund"]["status"], "pending");
    let first = refund_payouts(&app, &id).await;
    assert_eq!(first.len(), 1);
    let failed = mine_until(&app, &s(&first[0]["id"]), "failed", 30).await;
    assert_eq!(failed["failure_reason"], "execution reverted");
    let d = wait_doc(&app, &token, "the refund awaiting an address again", |d| {
        d["refund"]["status"] == "awaiting_address"
    })
    .await;
    assert_eq!(d["refund"]["to_address"], Value::Null);
    assert_eq!(d["refund"]["tx_hash"], Value::Null);
    assert_eq!(micros(&d["refund"]["net"]), net, "the same net");
    assert_eq!(d["refunds"].as_array().unwrap().len(), 1, "still one claim");

    // A new address: a new payout of the same net.
    let good = "0x2222222222222222222222222222222222222222";
    let d = public(&app, Method::POST, &path, Some(json!({"address": good})))
        .await
        .expect(200);
    assert_eq!(d["refund"]["status"], "pending");
    assert_eq!(d["refund"]["to_address"], good);
    let all = refund_payouts(&app, &id).await;
    assert_eq!(all.len(), 2, "{all:?}");
    let second = to(&all, good);
    assert_eq!(atomic(&second["amount"]), net);
    // Canceled by the merchant before it is sent: awaiting an address again.
    let canceled = app
        .post_idem(
            &app.payout_key,
            &format!("/v1/payouts/{}/cancel", s(&second["id"])),
            json!({}),
            &idem(),
        )
        .await
        .expect(200);
    assert_eq!(canceled["status"], "canceled");
    let d = doc(&app, &token).await;
    assert_eq!(d["refund"]["status"], "awaiting_address", "{d}");
    assert_eq!(d["refund"]["to_address"], Value::Null);
    // Meanwhile the net is held for the buyer: the merchant has the price and the fee
    // estimate, no more.
    merchant_available_is(&app, 20_000_000 + fee).await;

    // A third request is sent and confirmed.
    let third_to = "0x3333333333333333333333333333333333333333";
    public(
        &app,
        Method::POST,
        &path,
        Some(json!({"address": third_to})),
    )
    .await
    .expect(200);
    let all = refund_payouts(&app, &id).await;
    assert_eq!(all.len(), 3, "{all:?}");
    let third = to(&all, third_to);
    assert_eq!(atomic(&third["amount"]), net);
    mine_until(&app, &s(&third["id"]), "confirmed", 60).await;
    assert_eq!(to(&all, good)["status"], "canceled");
    let d = wait_doc(&app, &token, "the refund confirmed", |d| {
        d["refund"]["status"] == "confirmed"
    })
    .await;
    assert_eq!(d["refund"]["to_address"], third_to);
    let refunded = app
        .events(&format!("type=invoice.refunded&resource_id={id}"))
        .await;
    assert_eq!(refunded.len(), 1, "{refunded:?}");
}

/// Before any refund is requested, further excess in the same coin grows the one claim
/// (its held gross); excess in another coin opens a claim of its own in that coin. The
/// open claim is the oldest awaiting an address.
#[tokio::test]
async fn excess_before_a_request_grows_the_claim_and_another_coin_opens_its_own() {
    let app = spawn_app().await;
    let (_, token) = invoice(&app, "4000").await;
    let d = doc(&app, &token).await;
    pay(&app, &d, 50_000_000, PAYER).await;
    wait_doc(&app, &token, "overpaid by 10", |d| d["excess"] == "10.00").await;
    pay(&app, &d, 5_000_000, PAYER).await;
    let d = wait_doc(&app, &token, "overpaid by 15", |d| d["excess"] == "15.00").await;
    assert_eq!(d["refunds"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(d["refund"]["gross"], "15", "{d}");
    pay_in(&app, &d, "USDC", 5_000_000, PAYER2).await;
    let d = wait_doc(&app, &token, "both claims classified", |d| {
        d["excess"] == "20.00"
            && d["refunds"]
                .as_array()
                .is_some_and(|r| r.len() == 2 && r.iter().all(|c| !c["net"].is_null()))
    })
    .await;
    let claims = d["refunds"].as_array().unwrap();
    assert_eq!(
        (&claims[0]["asset"], &claims[0]["gross"]),
        (&json!("USDT"), &json!("15"))
    );
    assert_eq!(
        (&claims[1]["asset"], &claims[1]["gross"]),
        (&json!("USDC"), &json!("5"))
    );
    assert!(
        claims.iter().all(|c| c["status"] == "awaiting_address"),
        "{d}"
    );
    assert_eq!(
        s(&claims[1]["suggested_address"]).to_ascii_lowercase(),
        PAYER2
    );
    assert_eq!(d["refund"], claims[0], "the oldest awaiting an address");
    // Every excess is held: the merchant has the price in USDT and nothing in USDC.
    merchant_available_in(&app, "USDT", 40_000_000).await;
    app.create_payout(json!({"chain": "ethereum", "asset": "USDC", "decimals": 6,
            "amount": "1", "to_address": external_address(9)}))
        .await
        .expect_error(402, "insufficient_funds");
    // Requesting the open claim moves `refund` on to the other.
    let d = public(
        &app,
        Method::POST,
        &format!("/v1/checkout/{token}/refund"),
        Some(json!({"address": "0x2222222222222222222222222222222222222222"})),
    )
    .await
    .expect(200);
    assert_eq!(d["refunds"][0]["status"], "pending");
    assert_eq!(d["refund"], d["refunds"][1], "{d}");
    assert_eq!(d["refund"]["status"], "awaiting_address");
}
