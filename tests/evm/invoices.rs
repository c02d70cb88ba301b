//! Invoices on a live chain (issue 12 item 3): Anvil, a USDT-like token, the pinned factory,
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
        &[ChainSetup {
            id: "ethereum",
            anvil: &eth,
            confirmations: 2,
            assets: vec![("USDT", usdt.clone(), 6)],
            replace_after_ms: 600_000,
        }],
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
            ChainSetup {
                id: "ethereum",
                anvil: &eth,
                confirmations: 2,
                assets: vec![("USDT", usdt.clone(), 6)],
                replace_after_ms: 600_000,
            },
            ChainSetup {
                id: "bsc",
                anvil: &bsc,
                confirmations: 2,
                assets: vec![("USDT", busdt.clone(), 18)],
                replace_after_ms: 600_000,
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
