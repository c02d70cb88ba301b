//! Issue point 7: `GET /v1/chains` with every field (SPEC section 2, Chain).

use serde_json::{json, Value};

use crate::helpers::*;

fn chain<'a>(list: &'a Value, id: &str) -> Option<&'a Value> {
    list["data"].as_array()?.iter().find(|c| c["chain"] == id)
}

fn asset<'a>(c: &'a Value, sym: &str) -> &'a Value {
    c["assets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["symbol"] == sym)
        .unwrap_or_else(|| panic!("{sym} not on {}", c["chain"]))
}

#[tokio::test]
async fn chains_list_every_field() {
    let app = spawn_app().await;
    let l = app.get(&app.checkout_key, "/v1/chains").await.expect(200);
    let data = l["data"].as_array().expect("data[]");
    assert!(!data.is_empty());
    for c in data {
        for f in [
            "chain",
            "name",
            "network_type",
            "explorer_url",
            "account_kind",
            "status",
        ] {
            assert!(c[f].is_string(), "{f} in {c}");
        }
        assert!(c["chain_id"].is_u64(), "chain_id integer: {c}");
        assert!(c.get("status_note").is_some(), "status_note: {c}");
        for f in [
            "enabled_for_tenant",
            "deposits_enabled",
            "payouts_enabled",
            "supports_memo",
        ] {
            assert!(c[f].is_boolean(), "{f} in {c}");
        }
        assert!(c["required_confirmations"].is_u64(), "{c}");
        let nc = &c["native_currency"];
        assert!(
            nc["name"].is_string() && nc["symbol"].is_string() && nc["decimals"].is_u64(),
            "{c}"
        );
        assert!(
            ["contract", "eoa"].contains(&c["account_kind"].as_str().unwrap()),
            "{c}"
        );
        assert!(
            ["live", "paused", "coming_soon"].contains(&c["status"].as_str().unwrap()),
            "{c}"
        );
        for a in c["assets"].as_array().expect("assets[]") {
            assert!(a["symbol"].is_string() && a["contract"].is_string(), "{a}");
            assert!(a["decimals"].is_u64(), "decimals integer: {a}");
            for f in [
                "is_native",
                "deposits_enabled",
                "payouts_enabled",
                "decimals_differ_from_default",
            ] {
                assert!(a[f].is_boolean(), "{f} in {a}");
            }
        }
    }

    let eth = chain(&l, "ethereum").expect("ethereum listed");
    assert_eq!(eth["chain_id"], 1);
    assert_eq!(eth["required_confirmations"], 12);
    assert_eq!(eth["account_kind"], "contract");
    assert_eq!(eth["status"], "live");
    assert_eq!(eth["deposits_enabled"], true);
    assert_eq!(eth["payouts_enabled"], true);
    assert_eq!(eth["enabled_for_tenant"], true);
    assert_eq!(eth["native_currency"]["symbol"], "ETH");
    assert_eq!(eth["native_currency"]["decimals"], 18);
    let usdt = asset(eth, "USDT");
    assert_eq!(usdt["decimals"], 6);
    assert_eq!(usdt["decimals_differ_from_default"], false);
    assert_eq!(usdt["is_native"], false);
    assert_eq!(
        usdt["contract"],
        "0xdAC17F958D2ee523a2206206994597C13D831ec7"
    );
    let ethn = asset(eth, "ETH");
    assert_eq!(ethn["is_native"], true);
    assert_eq!(ethn["decimals"], 18);
    assert_eq!(
        ethn["decimals_differ_from_default"], false,
        "natives are not flagged"
    );

    let bsc = chain(&l, "bsc").expect("bsc listed");
    assert_eq!(bsc["chain_id"], 56);
    assert_eq!(bsc["required_confirmations"], 15);
    for sym in ["USDT", "USDC"] {
        let a = asset(bsc, sym);
        assert_eq!(a["decimals"], 18, "{a}");
        assert_eq!(a["decimals_differ_from_default"], true, "{a}");
    }
    for (id, conf) in [
        ("polygon", 128),
        ("arbitrum", 20),
        ("base", 20),
        ("avalanche", 12),
        ("optimism", 20),
    ] {
        let c = chain(&l, id).unwrap_or_else(|| panic!("{id} listed"));
        assert_eq!(c["required_confirmations"], conf, "{id}");
        assert_eq!(c["account_kind"], "contract");
        for a in c["assets"].as_array().unwrap() {
            if a["symbol"] == "USDT" || a["symbol"] == "USDC" {
                assert_eq!(a["decimals"], 6, "{id} {a}");
                assert_eq!(a["decimals_differ_from_default"], false);
            }
        }
    }
    if let Some(zk) = chain(&l, "zksync") {
        assert_eq!(zk["status"], "coming_soon", "{zk}");
    }
    // Keypair chains are off by default and therefore not listed.
    for id in ["tron", "solana", "ton", "bitcoin", "dogecoin"] {
        assert!(chain(&l, id).is_none(), "{id} listed though switched off");
    }
}

#[tokio::test]
async fn chain_switches_show_in_the_listing() {
    let app = spawn_app().await;
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "base",
        "--chain-status",
        "paused",
        "--chain-status-note",
        "RPC maintenance until 14:00 UTC",
    ]);
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "polygon",
        "--chain-deposits",
        "false",
    ]);
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "ethereum",
        "--asset",
        "USDC",
        "--asset-payouts",
        "false",
    ]);
    app.cli_ok(&[
        "project",
        "set",
        "default",
        "--chain",
        "tron",
        "--chain-listed",
        "true",
    ]);
    let l = app.get(&app.wallet_key, "/v1/chains").await.expect(200);
    let base = chain(&l, "base").expect("base");
    assert_eq!(base["status"], "paused");
    assert_eq!(base["status_note"], "RPC maintenance until 14:00 UTC");
    let polygon = chain(&l, "polygon").expect("polygon");
    assert_eq!(polygon["deposits_enabled"], false);
    assert_eq!(polygon["payouts_enabled"], true);
    let eth = chain(&l, "ethereum").unwrap();
    assert_eq!(asset(eth, "USDC")["payouts_enabled"], false);
    assert_eq!(asset(eth, "USDC")["deposits_enabled"], true);
    assert_eq!(asset(eth, "USDT")["payouts_enabled"], true);
    let tron = chain(&l, "tron").expect("tron listed once switched on");
    assert_eq!(tron["account_kind"], "eoa");
    assert_eq!(tron["network_type"], "TRC20");
    assert_eq!(tron["required_confirmations"], 19);
    // The ping's enabled_chains follows the listing.
    let p = app.ping(&app.wallet_key).await;
    assert!(p["enabled_chains"]
        .as_array()
        .unwrap()
        .contains(&json!("ethereum")));
}
