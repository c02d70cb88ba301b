//! Billing on a live chain (SPEC.md section 2, Funding address): a USDT
//! transfer to the live project's funding address credits its operational balance at par
//! once the chain's confirmations are reached, and not before; the coins are swept to the
//! master wallet like any custodied address's.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::*;

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

async fn funding_entries(live: &Live, key: &str) -> Vec<Value> {
    live.get(key, "/v1/billing/entries?kind=funding").await["data"]
        .as_array()
        .unwrap()
        .clone()
}

async fn balance(live: &Live, key: &str) -> i64 {
    s(&live.get(key, "/v1/billing").await["balance_cents"])
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usdt_transfer_to_a_funding_address_credits_at_par_after_its_confirmations() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, true).await;
    let (tmp, data, master) = init_data_dir();
    let factory = deploy_factory(&eth, &master).await;
    eth.send(ACCOUNT0, Some(&master), 10u128.pow(19), "0x")
        .await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    let live = Live::start(
        tmp,
        data,
        master.clone(),
        &[ChainSetup::ethereum(&eth, 3, Some(&usdt), 600_000)],
    )
    .await;
    let key = live.key("checkout", "billing:read");
    let list = live.get(&key, "/v1/billing/funding").await;
    let data = list["data"].as_array().unwrap().clone();
    // Only the chain with a node: a live project's funding addresses are the watched ones.
    assert_eq!(data.len(), 1, "{list}");
    let f = &data[0];
    assert_eq!(f["chain"], "ethereum");
    assert_eq!(f["account_kind"], "contract");
    assert_eq!(
        f["assets"],
        json!([{"symbol": "ETH", "decimals": 18, "par": false},
               {"symbol": "USDT", "decimals": 6, "par": true},
               {"symbol": "USDC", "decimals": 6, "par": true}])
    );
    let addr = s(&f["address"]);
    assert_eq!(live.get(&key, "/v1/billing/funding").await, list, "stable");
    // It is the factory's own CREATE2 answer for the project's funding salt, so a sweep can
    // deploy and flush it.
    let salt = appliance_chains::address::funding_salt(live.project_id.parse().unwrap());
    let onchain = eth
        .rpc("eth_call", json!([{"to": factory, "data": format!("0x{}", hex::encode(appliance_chains::evm::sweeper::forwarder_address_calldata(salt)))}, "latest"]))
        .await;
    assert_eq!(s(&onchain)[26..].to_lowercase(), addr[2..].to_lowercase());

    let before = balance(&live, &key).await;
    let r = eth.token_transfer(&usdt, ACCOUNT0, &addr, 25_000_000).await;
    let tx = s(&r["transactionHash"]);
    // Mined in one block: 1 confirmation, then 2; the chain wants 3.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        funding_entries(&live, &key).await.is_empty(),
        "credited at 1 confirmation"
    );
    eth.mine(1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        funding_entries(&live, &key).await.is_empty(),
        "credited at 2 confirmations"
    );
    assert_eq!(balance(&live, &key).await, before);

    let es = wait_for("the funding credit", &[&eth], 60, || async {
        let es = funding_entries(&live, &key).await;
        (!es.is_empty()).then_some(es)
    })
    .await;
    assert_eq!(es.len(), 1, "{es:?}");
    let e = &es[0];
    assert_eq!(e["amount_cents"], "2500", "{e}");
    assert_eq!(e["rate"], "1.00");
    assert_eq!(e["rate_source"], "par");
    assert_eq!(e["asset"], "USDT");
    assert_eq!(e["amount_atomic"], "25000000");
    assert_eq!(e["transfer"]["tx_hash"], tx);
    assert_eq!(e["transfer"]["amount_decimal"], "25");
    assert_eq!(e["transfer"]["required_confirmations"], 3);
    assert!(e["transfer"]["confirmations"].as_u64().unwrap() >= 3, "{e}");
    assert_eq!(
        s(&e["transfer"]["from_address"]).to_lowercase(),
        ACCOUNT0.to_lowercase()
    );
    assert_eq!(balance(&live, &key).await, before + 2500);

    // The operator's coins go to the master wallet like any address's.
    wait_for("the funding address swept", &[&eth], 90, || async {
        (eth.token_balance(&usdt, &addr).await == 0).then_some(())
    })
    .await;
    assert_eq!(eth.token_balance(&usdt, &master).await, 25_000_000);
    // More blocks credit nothing twice.
    eth.mine(5).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(funding_entries(&live, &key).await.len(), 1);
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}
