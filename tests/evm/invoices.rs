//! Invoices on a live chain: Anvil, a USDT-like token, the pinned factory,
//! ETH priced by a Chainlink-style feed on the same node; one invoice paid in USDT and one
//! in ETH by real transfers to their payment addresses, then swept.

use std::io::Write;

use serde_json::{json, Value};

use crate::helpers::*;
use crate::market::{deploy_feed, now, set_round};

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// Creates an invoice, retrying while the chain is not reached yet (422 right after start).
async fn create(live: &Live, key: &str, body: Value) -> Value {
    wait_for("an invoice", &[], 30, || {
        let body = body.clone();
        async move {
            let (st, v) = live
                .call(key, reqwest::Method::POST, "/v1/invoices", Some(body))
                .await;
            match st {
                201 => Some(v),
                422 => None,
                _ => panic!("POST /v1/invoices: {st} {v}"),
            }
        }
    })
    .await
}

async fn paid(live: &Live, eth: &Anvil, key: &str, id: &str) -> Value {
    let path = format!("/v1/invoices/{id}");
    wait_for("invoice paid", &[eth], 60, || async {
        let v = live.get(key, &path).await;
        (v["status"] == "paid").then_some(v)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoices_paid_in_usdt_and_in_eth_on_anvil() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, true).await;
    let feed = deploy_feed(&eth, 8).await;
    set_round(&eth, &feed, 300_000_000_000, now() - 5).await; // 3000.00000000 USD
    let (tmp, data, master) = init_data_dir();
    deploy_factory(&eth, &master).await;
    eth.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    let mut live = Live::start(
        tmp,
        data,
        master.clone(),
        &[ChainSetup::ethereum(&eth, 2, Some(&usdt), 600_000)],
    )
    .await;
    // Prices: the provider is down (nothing listens), ETH comes from the feed.
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
        "[market]\nbase_url = \"{dead_url}\"\nttl_seconds = 30\nmax_age_seconds = 600\ntimeout_ms = 500\n[market.chainlink_feeds]\nETH = \"{feed}\"\n"
    )
    .unwrap();
    drop(f);
    live.run();
    let key = live.key("checkout", "invoices:read,invoices:write,events:read");

    // 40.00 USD in USDT.
    let a = create(
        &live,
        &key,
        json!({"price_amount": "4000", "accepted_chains": ["ethereum"], "accepted_assets": ["USDT"]}),
    )
    .await;
    let qa = &a["quotes"][0];
    assert_eq!(qa["asset"], "USDT");
    assert_eq!(qa["amount_atomic"], "40000000");
    assert_eq!(qa["rate_source"], "par");
    let addr_a = s(&a["addresses"][0]["address"]);
    eth.token_transfer(&usdt, ACCOUNT0, &addr_a, 40_000_000)
        .await;
    let pa = paid(&live, &eth, &key, &s(&a["id"])).await;
    assert_eq!(pa["received_amount"], "4000");

    // 30.00 USD in ETH at the feed's 3000.00: 0.01 ETH.
    let b = create(
        &live,
        &key,
        json!({"price_amount": "3000", "accepted_chains": ["ethereum"], "accepted_assets": ["ETH"]}),
    )
    .await;
    let qb = &b["quotes"][0];
    assert_eq!(qb["asset"], "ETH");
    assert_eq!(qb["rate"], "3000.00");
    assert_eq!(qb["rate_source"], "chainlink");
    assert_eq!(qb["amount_atomic"], "10000000000000000");
    let addr_b = s(&b["addresses"][0]["address"]);
    assert_ne!(addr_a, addr_b);
    eth.send(ACCOUNT0, Some(&addr_b), 10u128.pow(16), "0x")
        .await;
    let pb = paid(&live, &eth, &key, &s(&b["id"])).await;
    assert_eq!(pb["received_amount"], "3000");

    // Each invoice's events once, in order.
    for inv in [&a, &b] {
        let v = live
            .get(
                &key,
                &format!("/v1/events?resource_id={}&order=asc", s(&inv["id"])),
            )
            .await;
        let types: Vec<String> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| s(&e["type"]))
            .collect();
        assert_eq!(
            types,
            ["invoice.created", "invoice.pending", "invoice.paid"]
        );
    }
    // The merchant's money is swept from both addresses into the master wallet.
    wait_for("both invoice addresses swept", &[&eth], 90, || async {
        let t = eth.token_balance(&usdt, &addr_a).await;
        let e = eth.balance(&addr_b).await;
        (t == 0 && e == 0).then_some(())
    })
    .await;
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_underpaid_invoice_is_completed_on_a_second_evm_chain() {
    let eth = Anvil::start(1);
    let bsc = Anvil::start(56);
    let usdt = deploy_token(&eth, 6, true).await;
    let busdt = deploy_token(&bsc, 18, false).await; // 18 decimals, as on bsc
    let (tmp, data, master) = init_data_dir();
    deploy_factory(&eth, &master).await;
    deploy_factory(&bsc, &master).await;
    eth.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await;
    bsc.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    bsc.mint(&busdt, ACCOUNT0, 10u128.pow(24)).await;
    let live = Live::start(
        tmp,
        data,
        master.clone(),
        &[
            ChainSetup::ethereum(&eth, 2, Some(&usdt), 600_000),
            ChainSetup {
                id: "bsc",
                anvil: &bsc,
                confirmations: 2,
                assets: vec![("USDT", busdt.clone(), 18)],
                replace_after_ms: 600_000,
                poll_ms: 100,
            },
        ],
    )
    .await;
    let key = live.key("checkout", "invoices:read,invoices:write,events:read");
    let inv = wait_for("both chains offered", &[], 30, || async {
        let (st, v) = live
            .call(
                &key,
                reqwest::Method::POST,
                "/v1/invoices",
                Some(
                    json!({"price_amount": "5000", "accepted_chains": ["ethereum", "bsc"],
                            "accepted_assets": ["USDT"]}),
                ),
            )
            .await;
        (st == 201).then_some(v)
    })
    .await;
    let addrs = inv["addresses"].as_array().unwrap();
    assert_eq!(addrs.len(), 2, "{inv}");
    assert_eq!(
        addrs[0]["address"], addrs[1]["address"],
        "one address on every EVM chain"
    );
    let to = s(&addrs[0]["address"]);
    let id = s(&inv["id"]);
    let path = format!("/v1/invoices/{id}");
    // 30 USDT on Ethereum: underpaid, the window extended.
    eth.token_transfer(&usdt, ACCOUNT0, &to, 30_000_000).await;
    let under = wait_for("underpaid", &[&eth, &bsc], 60, || async {
        let v = live.get(&key, &path).await;
        (v["status"] == "underpaid").then_some(v)
    })
    .await;
    assert_eq!(under["received_amount"], "3000");
    assert_eq!(under["extensions"], 1);
    // The remaining 20 USDT on bsc (18 decimals), to the same address.
    bsc.token_transfer(&busdt, ACCOUNT0, &to, 20 * 10u128.pow(18))
        .await;
    let paid = wait_for("paid", &[&eth, &bsc], 60, || async {
        let v = live.get(&key, &path).await;
        (v["status"] == "paid").then_some(v)
    })
    .await;
    assert_eq!(paid["received_amount"], "5000");
    let v = live
        .get(&key, &format!("/v1/events?resource_id={id}&order=asc"))
        .await;
    let types: Vec<String> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| s(&e["type"]))
        .collect();
    assert_eq!(
        types,
        [
            "invoice.created",
            "invoice.pending",
            "invoice.underpaid",
            "invoice.pending",
            "invoice.paid"
        ]
    );
    wait_for("both chains swept", &[&eth, &bsc], 90, || async {
        let a = eth.token_balance(&usdt, &to).await;
        let b = bsc.token_balance(&busdt, &to).await;
        (a == 0 && b == 0).then_some(())
    })
    .await;
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}

/// The checkout token of an invoice (the last segment of its `checkout_url`).
fn token_of(inv: &Value) -> String {
    s(&inv["checkout_url"])
        .rsplit('/')
        .next()
        .unwrap()
        .to_string()
}

/// A public checkout request (no key): returns (status, body).
async fn checkout(
    live: &Live,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = live
        .http
        .request(method, format!("{}{}", live.base_url, path));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("checkout request");
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or(Value::Null))
}

/// The node's fee estimate the refund classification reads (the chain client's `fees`),
/// read again here to compute the expected network fee exactly.
async fn max_fee_per_gas(eth: &Anvil) -> u128 {
    appliance_chains::evm::rpc::EvmRpc::new(&eth.url)
        .unwrap()
        .fees()
        .await
        .unwrap()
        .0
}

/// An atomic amount from a decimal string with `decimals` places ("9.4" with 6 -> 9400000).
fn atomic(dec: &str, decimals: u32) -> u128 {
    let (w, f) = dec.split_once('.').unwrap_or((dec, ""));
    assert!(f.len() as u32 <= decimals, "{dec}");
    let f = format!("{f:0<width$}", width = decimals as usize);
    w.parse::<u128>().unwrap() * 10u128.pow(decimals) + f.parse::<u128>().unwrap_or(0)
}

/// One overpaid invoice of [`overpay_and_refund`].
struct Overpay<'a> {
    asset: &'a str,
    price_cents: u64,
    /// Atomic units of `asset`.
    paid: u128,
    /// The `excess_amount` expected, cents.
    excess_cents: &'a str,
    /// The refund address.
    dest: &'a str,
    early: bool,
}

/// One overpaid invoice refunded on chain: pays `paid` (atomic) of `asset` for a price of
/// `price_cents`, checks `overpaid` and its `excess_amount`, gives the refund address,
/// follows the payout to `confirmed` and returns (gross, fee, net) from the checkout
/// document after checking the destination received exactly the net.
///
/// `early`: the buyer asks while the sweep of the invoice address is still unmined (Anvil's
/// automine off from the payment on, blocks mined only by the waits; on a real chain the
/// sweep waits a block time or more), so the master wallet does not hold the refund yet.
/// Otherwise the address is given once the sweep is mined. Either way no block is mined
/// between the fee read here and the classification.
async fn overpay_and_refund(
    live: &Live,
    eth: &Anvil,
    key: &str,
    usdt: &str,
    o: Overpay<'_>,
) -> (u128, u128, u128) {
    let Overpay {
        asset,
        price_cents,
        paid,
        excess_cents,
        dest,
        early,
    } = o;
    let native = asset == "ETH";
    let decimals = if native { 18 } else { 6 };
    let inv = create(
        live,
        key,
        json!({"price_amount": price_cents.to_string(), "accepted_chains": ["ethereum"],
               "accepted_assets": [asset], "overpayment_policy": "refund"}),
    )
    .await;
    assert_eq!(inv["overpayment_policy"], "refund");
    let quote: u128 = s(&inv["quotes"][0]["amount_atomic"]).parse().unwrap();
    // More than 0.5% over.
    assert!(paid * 1000 > quote * 1005);
    let gross = paid - quote;
    let id = s(&inv["id"]);
    let to = s(&inv["addresses"][0]["address"]);
    let token = token_of(&inv);
    if native {
        eth.send(ACCOUNT0, Some(&to), paid, "0x").await;
    } else {
        eth.token_transfer(usdt, ACCOUNT0, &to, paid).await;
    }
    if early {
        eth.rpc("evm_setAutomine", json!([false])).await;
    }
    let path = format!("/v1/invoices/{id}");
    let over = wait_for("invoice overpaid", &[eth], 60, || async {
        let v = live.get(key, &path).await;
        (v["status"] == "overpaid").then_some(v)
    })
    .await;
    assert_eq!(over["excess_amount"], excess_cents);
    assert_eq!(
        over["received_amount"],
        (price_cents + excess_cents.parse::<u64>().unwrap()).to_string()
    );
    let left = || async {
        if native {
            eth.balance(&to).await
        } else {
            eth.token_balance(usdt, &to).await
        }
    };
    if !early {
        // The merchant's money leaves the invoice address first; after that nothing mines
        // a block on its own, so the fee history the classification reads is the one read
        // here.
        wait_for("the invoice address swept", &[eth], 90, || async {
            (left().await == 0).then_some(())
        })
        .await;
    }
    let cpath = format!("/v1/checkout/{token}");
    let (st, d) = checkout(live, reqwest::Method::GET, &cpath, None).await;
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["status"], "overpaid");
    assert_eq!(d["refund"]["status"], "awaiting_address");
    assert_eq!(d["refund"]["asset"], asset);
    assert_eq!(atomic(&s(&d["refund"]["gross"]), decimals), gross);
    let m_before = max_fee_per_gas(eth).await;
    // The classification (sender class, fee) is started by that GET or inline here.
    let d = wait_for("a classified refund", &[], 30, || async {
        let (_, d) = checkout(live, reqwest::Method::GET, &cpath, None).await;
        (!d["refund"]["net"].is_null()).then_some(d)
    })
    .await;
    let m_after = max_fee_per_gas(eth).await;
    let r = &d["refund"];
    assert_eq!(r["status"], "awaiting_address", "{d}");
    // Anvil's first account: no code, a small nonce.
    assert_eq!(r["sender_class"], "personal");
    assert_eq!(s(&r["suggested_address"]).to_lowercase(), ACCOUNT0);
    let fee = atomic(&s(&r["fee"]), decimals);
    let net = atomic(&s(&r["net"]), decimals);
    // DECISIONS.md section 12: net = excess - the network fee estimate in the same coin;
    // 21,000 gas for a native refund, 100,000 for a token at ETH 3000.00 and USDT at par,
    // rounded up.
    let expect = |m: u128| {
        if native {
            21_000 * m
        } else {
            (100_000 * m * 3000 * 10u128.pow(6)).div_ceil(10u128.pow(18))
        }
    };
    assert!(
        fee == expect(m_before) || fee == expect(m_after),
        "fee {fee}, expected {} or {}",
        expect(m_before),
        expect(m_after)
    );
    assert!(fee > 0);
    assert_eq!(net, gross - fee);

    // The buyer's address: the payout is queued from the merchant's funds.
    let (st, d) = checkout(
        live,
        reqwest::Method::POST,
        &format!("{cpath}/refund"),
        Some(json!({"address": dest})),
    )
    .await;
    assert_eq!(st, 200, "{d}");
    assert!(
        ["pending", "sent", "confirmed"].contains(&d["refund"]["status"].as_str().unwrap()),
        "{d}"
    );
    assert_eq!(s(&d["refund"]["to_address"]), dest.to_lowercase());
    if early {
        // The sweep is still in the node's pool: the master wallet does not hold the
        // refund yet. The refund must not fail for that (Anvil estimates against its pending
        // block, so the sender signs it behind the sweep's nonce).
        assert_eq!(left().await, paid, "the sweep was mined already");
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let (_, d) = checkout(live, reqwest::Method::GET, &cpath, None).await;
        assert!(
            ["pending", "sent"].contains(&d["refund"]["status"].as_str().unwrap_or("")),
            "{d}"
        );
        eth.rpc("evm_setAutomine", json!([true])).await;
    }
    let done = wait_for("the refund confirmed", &[eth], 120, || async {
        let (_, d) = checkout(live, reqwest::Method::GET, &cpath, None).await;
        (d["refund"]["status"] == "confirmed").then_some(d)
    })
    .await;
    let r = &done["refund"];
    assert_eq!(done["status"], "overpaid");
    assert_eq!(atomic(&s(&r["gross"]), decimals), gross);
    assert_eq!(atomic(&s(&r["fee"]), decimals), fee);
    assert_eq!(atomic(&s(&r["net"]), decimals), net);
    let tx = s(&r["tx_hash"]);
    assert!(tx.starts_with("0x") && tx.len() == 66, "{done}");
    // The transaction is on chain, sent by the master wallet.
    let rc = eth.rpc("eth_getTransactionReceipt", json!([tx])).await;
    assert_eq!(rc["status"], "0x1");
    assert_eq!(s(&rc["from"]).to_lowercase(), live.master.to_lowercase());
    // Exactly the net reached the buyer (read through the node, eth_call balanceOf for
    // the token).
    let got = if native {
        eth.balance(dest).await
    } else {
        eth.token_balance(usdt, dest).await
    };
    assert_eq!(got, net, "the destination's balance");
    // The payout: merchant funds, reference refund:<id>, the net, no fee, confirmed.
    let (_, list) = live
        .call(
            &live.payout_key,
            reqwest::Method::GET,
            "/v1/payouts?limit=100",
            None,
        )
        .await;
    let p = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["reference"] == format!("refund:{id}"))
        .unwrap_or_else(|| panic!("no refund payout in {list}"))
        .clone();
    assert_eq!(p["customer_id"], Value::Null);
    assert_eq!(p["amount"], net.to_string());
    assert_eq!(p["fee_amount"], "0");
    assert_eq!(p["status"], "confirmed");
    assert_eq!(p["tx_hash"], tx.as_str());
    // Each invoice event once, `invoice.refunded` last.
    let v = live
        .get(key, &format!("/v1/events?resource_id={id}&order=asc"))
        .await;
    let types: Vec<String> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| s(&e["type"]))
        .collect();
    assert_eq!(
        types,
        [
            "invoice.created",
            "invoice.pending",
            "invoice.overpaid",
            "invoice.refunded"
        ]
    );
    // A later poll changes nothing and sends nothing again.
    eth.mine(3).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let again = if native {
        eth.balance(dest).await
    } else {
        eth.token_balance(usdt, dest).await
    };
    assert_eq!(again, net);
    (gross, fee, net)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overpaid_invoice_is_refunded_on_chain_in_usdt_and_in_eth() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, true).await;
    let feed = deploy_feed(&eth, 8).await;
    set_round(&eth, &feed, 300_000_000_000, now() - 5).await; // 3000.00000000 USD
    let (tmp, data, master) = init_data_dir();
    deploy_factory(&eth, &master).await;
    eth.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let live = Live::start_with(
        tmp,
        data,
        master.clone(),
        &[ChainSetup::ethereum(&eth, 2, Some(&usdt), 600_000)],
        &format!(
            "[market]\nbase_url = \"{dead_url}\"\nttl_seconds = 30\nmax_age_seconds = 600\ntimeout_ms = 500\n[market.chainlink_feeds]\nETH = \"{feed}\"\n"
        ),
    )
    .await;
    let key = live.key("checkout", "invoices:read,invoices:write,events:read");

    // 40.00 USD paid with 50 USDT: 10.00 over.
    let dest_usdt = external(12_001);
    let (gross, fee, net) = overpay_and_refund(
        &live,
        &eth,
        &key,
        &usdt,
        Overpay {
            asset: "USDT",
            price_cents: 4000,
            paid: 50_000_000,
            excess_cents: "1000",
            dest: &dest_usdt,
            early: false,
        },
    )
    .await;
    assert_eq!(gross, 10_000_000);
    assert_eq!(net, 10_000_000 - fee);

    // 30.00 USD (0.01 ETH at 3000.00) paid with 0.02 ETH: 30.00 over.
    let dest_eth = external(12_002);
    let (gross, fee, net) = overpay_and_refund(
        &live,
        &eth,
        &key,
        &usdt,
        Overpay {
            asset: "ETH",
            price_cents: 3000,
            paid: 2 * 10u128.pow(16),
            excess_cents: "3000",
            dest: &dest_eth,
            early: false,
        },
    )
    .await;
    assert_eq!(gross, 10u128.pow(16));
    assert_eq!(net, 10u128.pow(16) - fee);

    // A buyer who asks at once, while the sweep of the invoice address is not mined yet:
    // 25.00 USD paid with 40 USDT, 15.00 over.
    let dest_early = external(12_003);
    let (gross, fee, net) = overpay_and_refund(
        &live,
        &eth,
        &key,
        &usdt,
        Overpay {
            asset: "USDT",
            price_cents: 2500,
            paid: 40_000_000,
            excess_cents: "1500",
            dest: &dest_early,
            early: true,
        },
    )
    .await;
    assert_eq!(gross, 15_000_000);
    assert_eq!(net, 15_000_000 - fee);

    // One `invoice.refunded` per invoice, nothing more.
    let refunded = live.events("invoice.refunded").await;
    assert_eq!(refunded.len(), 3, "{refunded:?}");
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}
