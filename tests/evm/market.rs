//! Market prices in live mode through the fallback source: Chainlink
//! AggregatorV3-style feeds (`contracts/TestAggregator.sol`, compiled with the npm solc)
//! deployed on a real Anvil node and read through `[chains.ethereum]`'s node while the
//! provider is down. Stale, zero and negative rounds are refused; native payouts are valued
//! and auto-approved at the feed's price, and neither a payout nor a sweep is decided on a
//! stale or missing price.

use std::io::Write;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::helpers::*;

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn word_i(v: i128) -> String {
    let mut w = [if v < 0 { 0xffu8 } else { 0 }; 32];
    w[16..].copy_from_slice(&v.to_be_bytes());
    hex::encode(w)
}

/// Deploys a test aggregator with `decimals`.
pub(crate) async fn deploy_feed(anvil: &Anvil, decimals: u8) -> String {
    let v: Value = serde_json::from_str(include_str!("contracts/TestAggregator.json")).unwrap();
    let code = v["contracts"]["TestAggregator"].as_str().unwrap();
    let mut arg = [0u8; 32];
    arg[31] = decimals;
    anvil.deploy(code, &arg).await
}

/// `set(answer, updatedAt)` on a test aggregator.
pub(crate) async fn set_round(anvil: &Anvil, feed: &str, answer: i128, updated_at: u64) {
    let sel = &appliance_chains::address::keccak256(b"set(int256,uint256)")[..4];
    let data = format!(
        "0x{}{}{}",
        hex::encode(sel),
        word_i(answer),
        word_i(updated_at as i128)
    );
    anvil.send(ACCOUNT0, Some(feed), 0, &data).await;
}

/// The public price list of the live server.
async fn prices(live: &Live) -> Value {
    let r = live
        .http
        .get(format!("{}/v1/market/prices", live.base_url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.json().await.unwrap()
}

fn entry(list: &Value, symbol: &str) -> Option<Value> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["symbol"] == symbol)
        .cloned()
}

/// `appliance project set shop <args>` through the operator socket.
fn project_set(live: &Live, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_appliance"))
        .args(["--data-dir", live.data_dir.to_str().unwrap()])
        .args(["--config", live.config.to_str().unwrap()])
        .args(["project", "set", "shop"])
        .args(args)
        .env("APPLIANCE_PASSPHRASE", PASSPHRASE)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chainlink_feeds_price_coins_when_the_provider_is_down() {
    let eth = Anvil::start(1);
    let eth_feed = deploy_feed(&eth, 8).await;
    let bnb_feed = deploy_feed(&eth, 8).await;
    let ton_feed = deploy_feed(&eth, 8).await;
    let sol_feed = deploy_feed(&eth, 18).await;
    set_round(&eth, &eth_feed, 300_012_345_678, now() - 5).await;
    set_round(&eth, &bnb_feed, 60_000_000_000, now() - 7200).await; // stale
    set_round(&eth, &ton_feed, -500_000_000, now()).await; // negative
    set_round(&eth, &sol_feed, 0, now()).await; // zero
    let (tmp, data, master) = init_data_dir();
    deploy_factory(&eth, &master).await;
    eth.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await; // gas money
    let mut live = Live::start(
        tmp,
        data,
        master.clone(),
        &[ChainSetup::ethereum(&eth, 1, None, 120_000)],
    )
    .await;
    // The provider is down (nothing listens there): every price comes from the feeds.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    live.kill();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&live.config)
        .unwrap();
    write!(
        f,
        "[limits]\nunauthenticated_per_minute = 100000\n[market]\nbase_url = \"{dead_url}\"\nttl_seconds = 1\nmax_age_seconds = 60\ntimeout_ms = 500\n[market.chainlink_feeds]\nETH = \"{eth_feed}\"\nBNB = \"{bnb_feed}\"\nton = \"{ton_feed}\"\nSOL = \"{sol_feed}\"\n"
    )
    .unwrap();
    drop(f);
    live.run();

    let st: Value = live
        .http
        .get(format!("{}/v1/market/status", live.base_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(st["configured"], true, "{st}");
    assert_eq!(st["fallback"], "chainlink", "{st}");
    assert_eq!(st["base_url"], dead_url.as_str());
    let list = prices(&live).await;
    let e = entry(&list, "ETH").unwrap_or_else(|| panic!("ETH not priced: {list}"));
    assert_eq!(e["usd"], "3000.12345678", "{e}");
    let age = e["age_seconds"].as_u64().unwrap();
    assert!(
        (5..=30).contains(&age),
        "age of the round, not of the read: {e}"
    );
    for refused in ["BNB", "TON", "SOL", "BTC", "DOGE"] {
        assert!(entry(&list, refused).is_none(), "{refused} served: {list}");
    }
    assert_eq!(entry(&list, "USDT").unwrap()["usd"], "1.00");

    // A native deposit is swept above the threshold (1 USD) at the feed's price.
    let (cid, w) = live.customer_wallet("buyer-1", "ethereum").await;
    let addr = w["address"].as_str().unwrap().to_string();
    eth.send(ACCOUNT0, Some(&addr), 10u128.pow(18), "0x").await;
    wait_for("ETH credited", &[&eth], 60, || async {
        (live.available(&cid, "ethereum", "ETH").await == 10u128.pow(18)).then_some(())
    })
    .await;
    wait_for("ETH swept", &[&eth], 90, || async {
        (eth.balance(&addr).await == 0).then_some(())
    })
    .await;

    // Payouts in ETH: valued and auto-approved at the feed's price (threshold 10 USD).
    project_set(&live, &["--auto-approve-threshold-cents", "1000"]);
    // The round is 45 s old: usable for 15 s more.
    set_round(&eth, &eth_feed, 300_000_000_000, now() - 45).await;
    wait_for("the older round read", &[], 20, || async {
        let l = prices(&live).await;
        entry(&l, "ETH")
            .filter(|e| e["usd"] == "3000.00")
            .map(|_| ())
    })
    .await;
    let payout = |amount: &str| {
        json!({"customer_id": cid, "chain": "ethereum", "asset": "ETH", "decimals": 18,
               "amount": amount, "to_address": external(9)})
    };
    let small = live
        .post(
            &live.payout_key,
            "/v1/payouts",
            payout("1000000000000000"),
            202,
        )
        .await;
    assert_eq!(small["status"], "queued", "{small}");
    assert_eq!(small["amount_usd"], "3", "{small}");
    let big = live
        .post(
            &live.payout_key,
            "/v1/payouts",
            payout("10000000000000000"),
            202,
        )
        .await;
    assert_eq!(big["status"], "pending_approval", "{big}");
    assert_eq!(big["amount_usd"], "30", "{big}");

    // The feed goes stale: the cached value is served until it is older than max_age
    // (60 s), then never; a payout is then held for approval, whatever its size.
    set_round(&eth, &eth_feed, 300_000_000_000, now() - 7200).await;
    wait_for("the ETH price expired", &[], 40, || async {
        let l = prices(&live).await;
        match entry(&l, "ETH") {
            Some(e) => {
                assert!(e["age_seconds"].as_u64().unwrap() <= 60, "{e}");
                None
            }
            None => Some(()),
        }
    })
    .await;
    let unpriced = live
        .post(
            &live.payout_key,
            "/v1/payouts",
            payout("1000000000000000"),
            202,
        )
        .await;
    assert_eq!(unpriced["status"], "pending_approval", "{unpriced}");
    assert!(unpriced["amount_usd"].is_null(), "{unpriced}");

    // And a native deposit is not swept without a usable price...
    eth.send(ACCOUNT0, Some(&addr), 10u128.pow(18), "0x").await;
    wait_for("second ETH credited", &[&eth], 60, || async {
        (live.available(&cid, "ethereum", "ETH").await >= 2 * 10u128.pow(18) - 2 * 10u128.pow(16))
            .then_some(())
    })
    .await;
    eth.mine(5).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        eth.balance(&addr).await,
        10u128.pow(18),
        "swept without a usable price"
    );
    // ...until the feed answers again.
    set_round(&eth, &eth_feed, 310_000_000_000, now()).await;
    wait_for("ETH swept at the new price", &[&eth], 90, || async {
        (eth.balance(&addr).await == 0).then_some(())
    })
    .await;
    let l = prices(&live).await;
    assert_eq!(entry(&l, "ETH").unwrap()["usd"], "3100.00", "{l}");
}
