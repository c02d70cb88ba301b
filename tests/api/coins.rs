//! The coin catalogue `GET /v1/coins` (SPEC.md sections 2, 4 and 8;
//! DECISIONS.md sections 3 and 11) and the logos it links.

use reqwest::Method;
use serde_json::Value;

use crate::helpers::*;

fn symbols(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {list}"))
        .iter()
        .map(|c| s(&c["symbol"]))
        .collect()
}

/// (chains, coins, distinct symbols) of the whole registry, the mainnet view.
fn registry_counts() -> (usize, usize, usize) {
    let mut syms: Vec<&str> = Vec::new();
    let mut coins = 0;
    for c in appliance_chains::CHAINS {
        for a in c.assets() {
            coins += 1;
            if !syms.contains(&a.symbol) {
                syms.push(a.symbol);
            }
        }
    }
    (appliance_chains::CHAINS.len(), coins, syms.len())
}

#[tokio::test]
async fn the_catalogue_lists_every_coin_with_totals_in_catalogue_order() {
    let app = spawn_app().await;
    let list = app.get(&app.checkout_key, "/v1/coins").await.expect(200);
    assert_eq!(list["object"], "coin_list");
    let (chains, coins, syms) = registry_counts();
    let t = &list["totals"];
    assert_eq!(t["coins"], coins as u64, "{t}");
    assert_eq!(t["symbols"], syms as u64, "{t}");
    assert_eq!(t["chains"], chains as u64, "{t}");
    // A test project: every EVM chain is simulated and live but zkSync (coming soon);
    // keypair chains are not listed.
    assert_eq!(t["chains_live"], 9, "{t}");
    assert_eq!(t["by_chain"]["ethereum"]["coins"], 3, "{t}");
    assert_eq!(t["by_chain"]["ethereum"]["live"], 3, "{t}");
    assert_eq!(t["by_chain"]["tron"]["coins"], 3, "{t}");
    assert_eq!(t["by_chain"]["tron"]["live"], 0, "{t}");
    assert_eq!(t["by_chain"]["zksync"]["live"], 0, "{t}");
    let by_chain_sum: u64 = t["by_chain"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v["coins"].as_u64().unwrap())
        .sum();
    assert_eq!(by_chain_sum, coins as u64);
    // Grouped by symbol (default): live first, natives ahead of tokens, then market rank.
    assert_eq!(
        symbols(&list),
        vec!["ETH", "BNB", "AVAX", "POL", "USDT", "USDC", "BTC", "SOL", "TRX", "DOGE", "TON"]
    );
    assert_eq!(list["returned"], 11);
    let data = list["data"].as_array().unwrap();
    let live: Vec<bool> = data.iter().map(|c| c["live"].as_bool().unwrap()).collect();
    assert_eq!(live.iter().filter(|l| **l).count(), 6);
    assert!(
        live.windows(2).all(|w| w[0] || !w[1]),
        "live first: {live:?}"
    );
    let eth = &data[0];
    assert_eq!(eth["chain"], "ethereum");
    assert_eq!(eth["chain_name"], "Ethereum");
    assert_eq!(eth["chains"], 7, "ETH is native on seven chains: {eth}");
    assert_eq!(eth["name"], "Ether");
    assert_eq!(eth["contract"], "");
    assert_eq!(eth["decimals"], 18);
    assert_eq!(eth["is_native"], true);
    assert_eq!(eth["deposits_enabled"], true);
    assert_eq!(eth["payouts_enabled"], true);
    assert_eq!(eth["decimals_differ_from_default"], false);
    assert!(
        s(&eth["logo_url"]).ends_with("/assets/coins/ETH.svg"),
        "{eth}"
    );
    // The mainnet view, whatever the key's mode: USDT's Ethereum contract.
    let usdt = data.iter().find(|c| c["symbol"] == "USDT").unwrap();
    assert_eq!(
        usdt["contract"],
        "0xdAC17F958D2ee523a2206206994597C13D831ec7"
    );
    assert_eq!(usdt["decimals"], 6);
    assert_eq!(usdt["is_native"], false);
    let btc = data.iter().find(|c| c["symbol"] == "BTC").unwrap();
    assert_eq!(btc["live"], false, "{btc}");
    // Any key kind reads it; no key does not.
    app.get(&app.payout_key, "/v1/coins").await.expect(200);
    app.get(&app.wallet_key, "/v1/coins").await.expect(200);
    app.send(Method::GET, None, "/v1/coins", None, &[])
        .await
        .expect_error(401, "invalid_api_key");
}

#[tokio::test]
async fn filters_grouping_and_limit() {
    let app = spawn_app().await;
    let k = &app.wallet_key;
    let all = app.get(k, "/v1/coins").await.expect(200);
    let (_, coins, _) = registry_counts();
    // status=live: live coins only; totals stay those of the whole catalogue.
    let live = app.get(k, "/v1/coins?status=live").await.expect(200);
    assert_eq!(
        symbols(&live),
        vec!["ETH", "BNB", "AVAX", "POL", "USDT", "USDC"]
    );
    assert_eq!(live["totals"], all["totals"]);
    assert_eq!(
        symbols(&app.get(k, "/v1/coins?status=all").await.expect(200)),
        symbols(&all)
    );
    // One chain: its coins, with that chain's decimals.
    let bsc = app.get(k, "/v1/coins?chain=bsc").await.expect(200);
    assert_eq!(symbols(&bsc), vec!["BNB", "USDT", "USDC"]);
    assert_eq!(
        bsc["totals"], all["totals"],
        "totals before the chain filter"
    );
    let busdt = &bsc["data"][1];
    assert_eq!(busdt["chain"], "bsc");
    assert_eq!(busdt["decimals"], 18);
    assert_eq!(busdt["decimals_differ_from_default"], true);
    assert!(busdt["chains"].as_u64().unwrap() > 1, "{busdt}");
    // group_by=contract: one entry per (chain, coin).
    let by_contract = app.get(k, "/v1/coins?group_by=contract").await.expect(200);
    assert_eq!(by_contract["returned"], coins as u64);
    let d = by_contract["data"].as_array().unwrap();
    let eths: Vec<String> = d
        .iter()
        .filter(|c| c["symbol"] == "ETH")
        .map(|c| s(&c["chain"]))
        .collect();
    assert_eq!(eths.len(), 7);
    assert_eq!(
        eths.last().unwrap(),
        "zksync",
        "the one not live comes last: {eths:?}"
    );
    let first_token = d.iter().position(|c| c["is_native"] == false).unwrap();
    assert!(
        d[..first_token].iter().all(|c| c["live"] == true),
        "live natives ahead of tokens"
    );
    // limit: 1-1000, after the filters; totals unchanged.
    let five = app
        .get(k, "/v1/coins?group_by=contract&limit=5")
        .await
        .expect(200);
    assert_eq!(five["returned"], 5);
    assert_eq!(five["data"].as_array().unwrap().len(), 5);
    assert_eq!(five["totals"], all["totals"]);
    app.get(k, "/v1/coins?limit=1000").await.expect(200);
    app.get(k, "/v1/coins?limit=1").await.expect(200);
    for bad in ["0", "1001", "-1", "x", ""] {
        app.get(k, &format!("/v1/coins?limit={bad}"))
            .await
            .expect_error_param(400, "invalid_request", "limit");
    }
    app.get(k, "/v1/coins?status=dead")
        .await
        .expect_error_param(400, "invalid_request", "status");
    app.get(k, "/v1/coins?group_by=chain")
        .await
        .expect_error_param(400, "invalid_request", "group_by");
    app.get(k, "/v1/coins?chain=etherium")
        .await
        .expect_error_param(400, "invalid_request", "chain");
    // A paused chain's coins are listed, switched off, after the live ones.
    app.project_set(&["--chain", "polygon", "--chain-status", "paused"]);
    let after = app.get(k, "/v1/coins").await.expect(200);
    assert_eq!(
        symbols(&after),
        vec!["ETH", "BNB", "AVAX", "USDT", "USDC", "BTC", "SOL", "TRX", "DOGE", "TON", "POL"]
    );
    assert_eq!(after["totals"]["by_chain"]["polygon"]["live"], 0);
    assert_eq!(after["totals"]["chains_live"], 8);
}

#[tokio::test]
async fn logos_are_served_from_the_binary() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_PUBLIC_BASE_URL", "https://pay.example.com/")],
    )
    .await;
    let list = app.get(&app.wallet_key, "/v1/coins").await.expect(200);
    for c in list["data"].as_array().unwrap() {
        let url = s(&c["logo_url"]);
        assert_eq!(
            url,
            format!(
                "https://pay.example.com/assets/coins/{}.svg",
                s(&c["symbol"])
            )
        );
        let path = url.strip_prefix("https://pay.example.com").unwrap();
        let r = app.send(Method::GET, None, path, None, &[]).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        assert_eq!(r.header("content-type").as_deref(), Some("image/svg+xml"));
        assert_eq!(
            r.header("x-content-type-options").as_deref(),
            Some("nosniff")
        );
        assert!(r.header("content-security-policy").is_some());
        assert!(r.text.starts_with("<svg "), "{}", r.text);
        assert!(r.text.contains(&s(&c["symbol"])));
    }
    let r = app
        .send(Method::GET, None, "/assets/coins/eth.svg", None, &[])
        .await;
    assert_eq!(r.status, 200);
    for missing in [
        "/assets/coins/NOPE.svg",
        "/assets/coins/ETH.png",
        "/assets/coins/ETH",
        "/assets/coins/..%2Fconfig.svg",
    ] {
        app.send(Method::GET, None, missing, None, &[])
            .await
            .expect_error(404, "not_found");
    }
}
