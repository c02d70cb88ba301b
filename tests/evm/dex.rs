//! Conversions against the REAL Uniswap contracts: the published bytecode of the
//! npm packages `@uniswap/v2-core`, `@uniswap/v2-periphery` (factory, WETH9, Router02) and
//! `@uniswap/v3-core`, `@uniswap/v3-periphery` (factory, SwapRouter, QuoterV2,
//! NonfungiblePositionManager), deployed as published (never recompiled: the routers pin the
//! pair and pool init-code hashes), pools with liquidity, then quotes and conversions through
//! the appliance, checked with `eth_call`.

use std::path::Path;

use serde_json::{json, Value};

use crate::helpers::*;

/// The published creation bytecode (hex, no `0x`) of an artifact under node_modules.
fn artifact(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("node_modules")
        .join(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/install-test-deps.sh (npm ci installs the Uniswap packages)",
            p.display()
        )
    });
    let v: Value = serde_json::from_str(&text).unwrap();
    let b = v["bytecode"]
        .as_str()
        .or_else(|| v["bytecode"]["object"].as_str())
        .expect("bytecode");
    b.trim_start_matches("0x").to_string()
}

fn word_addr(a: &str) -> String {
    format!("{:0>64}", a.trim_start_matches("0x").to_lowercase())
}

fn word(n: u128) -> String {
    format!("{n:064x}")
}

fn sel(sig: &str) -> String {
    hex::encode(&appliance_chains::address::keccak256(sig.as_bytes())[..4])
}

fn bytes_of(words: &[String]) -> Vec<u8> {
    hex::decode(words.concat()).unwrap()
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

const MAX: u128 = u128::MAX;
const DEADLINE: u128 = 4_000_000_000;
const ETHER: u128 = 1_000_000_000_000_000_000;

/// Uniswap V2 on `anvil`: (factory, WETH9, Router02).
async fn deploy_v2(anvil: &Anvil) -> (String, String, String) {
    let weth = anvil
        .deploy(&artifact("@uniswap/v2-periphery/build/WETH9.json"), &[])
        .await;
    let factory = anvil
        .deploy(
            &artifact("@uniswap/v2-core/build/UniswapV2Factory.json"),
            &bytes_of(&[word_addr(ACCOUNT0)]),
        )
        .await;
    let router = anvil
        .deploy(
            &artifact("@uniswap/v2-periphery/build/UniswapV2Router02.json"),
            &bytes_of(&[word_addr(&factory), word_addr(&weth)]),
        )
        .await;
    (factory, weth, router)
}

/// A token/WETH pool on the V2 router with `tokens` and `eth` of liquidity from ACCOUNT0.
async fn v2_liquidity(anvil: &Anvil, router: &str, token: &str, tokens: u128, eth: u128) {
    anvil.mint(token, ACCOUNT0, tokens).await;
    let approve = format!(
        "0x{}{}{}",
        sel("approve(address,uint256)"),
        word_addr(router),
        word(MAX)
    );
    anvil.send(ACCOUNT0, Some(token), 0, &approve).await;
    let add = format!(
        "0x{}{}",
        sel("addLiquidityETH(address,uint256,uint256,uint256,address,uint256)"),
        [
            word_addr(token),
            word(tokens),
            word(0),
            word(0),
            word_addr(ACCOUNT0),
            word(DEADLINE),
        ]
        .concat()
    );
    anvil.send(ACCOUNT0, Some(router), eth, &add).await;
}

/// `getAmountsOut(amount, [a, b])` on the router, read directly.
async fn v2_amount_out(anvil: &Anvil, router: &str, amount: u128, a: &str, b: &str) -> u128 {
    let data = format!(
        "0x{}{}{}{}{}{}",
        sel("getAmountsOut(uint256,address[])"),
        word(amount),
        word(0x40),
        word(2),
        word_addr(a),
        word_addr(b)
    );
    let r = anvil
        .rpc("eth_call", json!([{"to": router, "data": data}, "latest"]))
        .await;
    let hexs = s(&r);
    // amounts: offset, length 2, amounts[0], amounts[1].
    let last = &hexs[2 + 64 * 3..2 + 64 * 4];
    u128::from_str_radix(last, 16).unwrap()
}

async fn allowance(anvil: &Anvil, token: &str, owner: &str, spender: &str) -> u128 {
    let data = format!(
        "0x{}{}{}",
        sel("allowance(address,address)"),
        word_addr(owner),
        word_addr(spender)
    );
    let r = anvil
        .rpc("eth_call", json!([{"to": token, "data": data}, "latest"]))
        .await;
    hex_u128(&json!(format!("0x{}", &s(&r)[2 + 32..])))
}

fn dex_toml(chain: &str, body: &str) -> String {
    format!("[chains.{chain}.dex]\n{body}")
}

/// The appliance on `eth` with `dex`, a funded master wallet and the USDT token.
async fn start(eth: &Anvil, usdt: &str, dex: &str) -> Live {
    start_extra(eth, usdt, dex, "").await
}

/// [`start`] with `extra` appended to the config.
async fn start_extra(eth: &Anvil, usdt: &str, dex: &str, extra: &str) -> Live {
    let (tmp, data, master) = init_data_dir();
    deploy_factory(eth, &master).await;
    eth.send(ACCOUNT0, Some(&master), 100 * ETHER, "0x").await; // gas money
    let live = Live::start_with(
        tmp,
        data,
        master,
        &[ChainSetup {
            id: "ethereum",
            anvil: eth,
            confirmations: 2,
            assets: vec![("USDT", usdt.to_string(), 6)],
            replace_after_ms: 30_000,
            poll_ms: 100,
        }],
        &format!("{}{extra}", dex_toml("ethereum", dex)),
    )
    .await;
    wait_for("ethereum live", &[], 30, || async {
        let v = live.get(&live.wallet_key, "/v1/chains").await;
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["chain"] == "ethereum" && c["status"] == "live")
            .then_some(())
    })
    .await;
    live
}

/// The project's treasury ledger of `asset` on ethereum (atomic, may be negative).
async fn treasury(live: &Live, asset: &str) -> i128 {
    let v = live.get(&live.payout_key, "/v1/balances").await;
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["chain"] == "ethereum" && x["asset"] == asset)
        .map(|x| s(&x["treasury"]).parse().unwrap())
        .unwrap_or(0)
}

/// A customer whose deposit of `eth` wei is confirmed and swept into the treasury.
async fn customer_with_eth(live: &Live, eth: &Anvil, reference: &str, wei: u128) -> String {
    let (cid, w) = live.customer_wallet(reference, "ethereum").await;
    let before = treasury(live, "ETH").await;
    eth.send(ACCOUNT0, Some(&s(&w["address"])), wei, "0x").await;
    wait_for("deposit swept into the treasury", &[eth], 90, || async {
        (treasury(live, "ETH").await >= before + wei as i128).then_some(())
    })
    .await;
    assert_eq!(live.available(&cid, "ethereum", "ETH").await, wei);
    cid
}

async fn batch(live: &Live, id: &str) -> Value {
    live.get(&live.payout_key, &format!("/v1/conversions/batches/{id}"))
        .await
}

async fn wait_batch(live: &Live, eth: &Anvil, id: &str, status: &str) -> Value {
    wait_for(&format!("batch {status}"), &[eth], 120, || async {
        let b = batch(live, id).await;
        assert!(
            b["status"] == status || b["status"] != "failed",
            "batch failed: {b}\n{}",
            live.logs()
        );
        (b["status"] == status).then_some(b)
    })
    .await
}

fn convert_body(from: &str, to: &str, amount: u128) -> Value {
    json!({"chain": "ethereum", "from_asset": from, "to_asset": to, "amount": amount.to_string()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniswap_v2_quotes_and_manual_conversions_both_ways_with_one_approval() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    let (factory, weth, router) = deploy_v2(&eth).await;
    // 300,000 USDT and 100 ETH: 3,000 USDT per ETH.
    v2_liquidity(&eth, &router, &usdt, 300_000_000_000, 100 * ETHER).await;
    let live = start(
        &eth,
        &usdt,
        &format!(
            "kind = \"uniswap_v2\"\nrouter = \"{router}\"\nfactory = \"{factory}\"\nweth = \"{weth}\"\n"
        ),
    )
    .await;
    let master = live.master.clone();

    // The rule is supported where a DEX is configured, and not elsewhere.
    let rules = live.get(&live.payout_key, "/v1/conversion/rules").await;
    let rule = |c: &str| {
        rules["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["chain"] == c)
            .cloned()
            .unwrap()
    };
    assert_eq!(rule("ethereum")["supported"], true, "{rules}");
    assert_eq!(rule("bsc")["supported"], false);
    assert_eq!(rule("bsc")["unsupported_reason"], "no_dex_configured");

    // Two customers hold 1 and 3 ETH in the treasury.
    let alice = customer_with_eth(&live, &eth, "alice", ETHER).await;
    let bob = customer_with_eth(&live, &eth, "bob", 3 * ETHER).await;

    // The quote is the router's own getAmountsOut.
    let amount = 2 * ETHER;
    let q = live
        .post(
            &live.payout_key,
            "/v1/conversions/quote",
            convert_body("ETH", "USDT", amount),
            200,
        )
        .await;
    let direct = v2_amount_out(&eth, &router, amount, &weth, &usdt).await;
    assert_eq!(q["expected_out"], direct.to_string(), "{q}");
    assert_eq!(q["market"], "uniswap_v2");
    assert_eq!(
        q["needs_approval"], false,
        "the native coin needs no approval"
    );
    assert_eq!(
        q["min_out"],
        (direct * 9_950 / 10_000).to_string(),
        "default slippage 50 bps: {q}"
    );
    assert_eq!(q["available"], (4 * ETHER).to_string(), "{q}");
    assert!(q["gas_usd"].is_null() || q["gas_usd"].is_string(), "{q}");

    // More than the customers hold: 402.
    let (st, e) = live
        .call(
            &live.payout_key,
            reqwest::Method::POST,
            "/v1/conversions",
            Some(convert_body("ETH", "USDT", 5 * ETHER)),
        )
        .await;
    assert_eq!(st, 402, "{e}");
    assert_eq!(e["code"], "insufficient_funds");

    // A manual conversion of 2 ETH: drawn 0.5 / 1.5 from alice / bob, planned at once.
    let usdt_before = eth.token_balance(&usdt, &master).await;
    let eth_before = eth.balance(&master).await;
    let r = live
        .post(
            &live.payout_key,
            "/v1/conversions",
            convert_body("ETH", "USDT", amount),
            202,
        )
        .await;
    assert_eq!(r["object"], "conversion_request", "{r}");
    let rows = r["rows"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 2, "{r}");
    let share = |cid: &str| {
        rows.iter()
            .find(|x| x["customer_id"] == cid)
            .map(|x| s(&x["amount_in"]).parse::<u128>().unwrap())
            .unwrap()
    };
    assert_eq!(share(&alice), ETHER / 2);
    assert_eq!(share(&bob), 3 * ETHER / 2);
    assert!(rows
        .iter()
        .all(|x| x["kind"] == "manual" && x["status"] == "converting"));
    let bid = s(&r["batch"]["id"]);
    assert_eq!(
        r["batch"]["status"], "swapping",
        "no approval for the native coin"
    );
    // Locked while it converts: nothing of it can be paid out.
    assert_eq!(live.available(&alice, "ethereum", "ETH").await, ETHER / 2);

    let b = wait_batch(&live, &eth, &bid, "settled").await;
    let out: u128 = s(&b["amount_out"]).parse().unwrap();
    assert!(out >= s(&b["min_out"]).parse::<u128>().unwrap(), "{b}");
    assert_eq!(b["approve_tx_hash"], Value::Null);
    assert!(b["swap_tx_hash"].is_string());
    assert_eq!(b["attempts"], 1);
    // The treasury's on-chain USDT grew by amount_out; its ETH fell by the amount plus gas.
    assert_eq!(eth.token_balance(&usdt, &master).await - usdt_before, out);
    let eth_after = eth.balance(&master).await;
    assert!(eth_before - eth_after >= amount && eth_before - eth_after < amount + ETHER / 100);
    // Rows settled pro rata, the remainder to the last row.
    let a_usdt = live.available(&alice, "ethereum", "USDT").await;
    let b_usdt = live.available(&bob, "ethereum", "USDT").await;
    assert_eq!(a_usdt + b_usdt, out);
    assert!(a_usdt.abs_diff(out / 4) <= 1, "{a_usdt} of {out}");
    assert_eq!(live.available(&alice, "ethereum", "ETH").await, ETHER / 2);
    assert_eq!(live.available(&bob, "ethereum", "ETH").await, 3 * ETHER / 2);
    assert_eq!(treasury(&live, "USDT").await, out as i128);
    assert_eq!(treasury(&live, "ETH").await, 2 * ETHER as i128);
    let done = live.events("conversion.completed").await;
    assert_eq!(done.len(), 2, "one conversion.completed per row");
    for e in &done {
        assert_eq!(e["data"]["status"], "converted");
        assert_eq!(e["data"]["batch_id"], bid);
    }
    let listed = live
        .get(
            &live.payout_key,
            "/v1/conversions?status=converted&kind=manual",
        )
        .await;
    assert_eq!(listed["data"].as_array().unwrap().len(), 2);

    // USDT back to ETH: an ERC-20 source approves the router once.
    let back = out / 2;
    let q = live
        .post(
            &live.payout_key,
            "/v1/conversions/quote",
            convert_body("USDT", "ETH", back),
            200,
        )
        .await;
    assert_eq!(q["needs_approval"], true, "{q}");
    let r = live
        .post(
            &live.payout_key,
            "/v1/conversions",
            convert_body("USDT", "ETH", back),
            202,
        )
        .await;
    let bid2 = s(&r["batch"]["id"]);
    assert_eq!(r["batch"]["status"], "approving", "{r}");
    let eth_before = eth.balance(&master).await;
    let b2 = wait_batch(&live, &eth, &bid2, "settled").await;
    assert!(b2["approve_tx_hash"].is_string(), "{b2}");
    assert!(
        allowance(&eth, &usdt, &master, &router).await > 10u128.pow(30),
        "the router may take the largest amount"
    );
    let got: u128 = s(&b2["amount_out"]).parse().unwrap();
    assert!(got > 0);
    // The treasury received the ETH (less the gas of the approval and the swap).
    let eth_after = eth.balance(&master).await;
    assert!(eth_after + ETHER / 100 > eth_before + got && eth_after < eth_before + got);
    assert_eq!(treasury(&live, "ETH").await, (2 * ETHER + got) as i128);

    // A second USDT conversion needs no approval any more.
    let q = live
        .post(
            &live.payout_key,
            "/v1/conversions/quote",
            convert_body("USDT", "ETH", 1_000_000),
            200,
        )
        .await;
    assert_eq!(q["needs_approval"], false, "{q}");
    let r = live
        .post(
            &live.payout_key,
            "/v1/conversions",
            convert_body("USDT", "ETH", 1_000_000),
            202,
        )
        .await;
    let b3 = wait_batch(&live, &eth, &s(&r["batch"]["id"]), "settled").await;
    assert_eq!(b3["approve_tx_hash"], Value::Null, "approved once: {b3}");

    let v = live.verify();
    // The settlement postings balance, like every entry (`appliance verify`).
    assert!(v.contains("\"violations\": []"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_that_cannot_succeed_is_retried_then_fails_and_the_coins_stay() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    let (factory, weth, router) = deploy_v2(&eth).await;
    v2_liquidity(&eth, &router, &usdt, 300_000_000_000, 100 * ETHER).await;
    let live = start(
        &eth,
        &usdt,
        &format!(
            "kind = \"uniswap_v2\"\nrouter = \"{router}\"\nfactory = \"{factory}\"\nweth = \"{weth}\"\n"
        ),
    )
    .await;
    let master = live.master.clone();
    let alice = customer_with_eth(&live, &eth, "alice", ETHER).await;
    // The pool can no longer pay USDT out: every swap reverts.
    let pause = format!("0x{}{}", sel("setPaused(bool)"), word(1));
    eth.send(ACCOUNT0, Some(&usdt), 0, &pause).await;
    let eth_before = eth.balance(&master).await;
    let r = live
        .post(
            &live.payout_key,
            "/v1/conversions",
            convert_body("ETH", "USDT", ETHER / 2),
            202,
        )
        .await;
    let bid = s(&r["batch"]["id"]);
    let b = wait_for("batch failed", &[&eth], 120, || async {
        let b = batch(&live, &bid).await;
        (b["status"] == "failed").then_some(b)
    })
    .await;
    assert_eq!(b["error_code"], "slippage", "{b}");
    assert_eq!(b["attempts"], 3, "{b}");
    // The coins stayed where they were: on chain and in the ledger.
    assert!(eth_before - eth.balance(&master).await < ETHER / 100);
    assert_eq!(live.available(&alice, "ethereum", "ETH").await, ETHER);
    assert_eq!(treasury(&live, "ETH").await, ETHER as i128);
    let rows = live
        .get(&live.payout_key, "/v1/conversions?status=failed")
        .await;
    let rows = rows["data"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["reason"], "slippage");
    assert!(live.events("conversion.completed").await.is_empty());
    assert!(live.verify().contains("\"violations\": []"));
}

/// Uniswap V3 on `anvil`: (factory, WETH9, SwapRouter, QuoterV2, NonfungiblePositionManager).
async fn deploy_v3(anvil: &Anvil) -> (String, String, String, String, String) {
    let weth = anvil
        .deploy(&artifact("@uniswap/v2-periphery/build/WETH9.json"), &[])
        .await;
    let factory = anvil
        .deploy(
            &artifact(
                "@uniswap/v3-core/artifacts/contracts/UniswapV3Factory.sol/UniswapV3Factory.json",
            ),
            &[],
        )
        .await;
    let args = bytes_of(&[word_addr(&factory), word_addr(&weth)]);
    let router = anvil
        .deploy(
            &artifact("@uniswap/v3-periphery/artifacts/contracts/SwapRouter.sol/SwapRouter.json"),
            &args,
        )
        .await;
    let quoter = anvil
        .deploy(
            &artifact("@uniswap/v3-periphery/artifacts/contracts/lens/QuoterV2.sol/QuoterV2.json"),
            &args,
        )
        .await;
    // The token descriptor only renders tokenURI, which nothing here reads.
    let npm = anvil
        .deploy(
            &artifact("@uniswap/v3-periphery/artifacts/contracts/NonfungiblePositionManager.sol/NonfungiblePositionManager.json"),
            &bytes_of(&[word_addr(&factory), word_addr(&weth), word_addr(ACCOUNT0)]),
        )
        .await;
    (factory, weth, router, quoter, npm)
}

/// A full-range USDT/WETH position at `usdt_per_eth` (fee tier 3000) through the position
/// manager, from ACCOUNT0.
async fn v3_liquidity(anvil: &Anvil, npm: &str, usdt: &str, weth: &str, usdt_per_eth: f64) {
    let (t0, t1) = if usdt.to_lowercase() < weth.to_lowercase() {
        (usdt, weth)
    } else {
        (weth, usdt)
    };
    // price = token1 per token0 in atomic units; sqrtPriceX96 = sqrt(price) * 2^96.
    let raw = if t0 == weth {
        usdt_per_eth * 1e6 / 1e18
    } else {
        1e18 / (usdt_per_eth * 1e6)
    };
    let sqrt_x96 = (raw.sqrt() * 2f64.powi(96)) as u128;
    let create = format!(
        "0x{}{}",
        sel("createAndInitializePoolIfNecessary(address,address,uint24,uint160)"),
        [word_addr(t0), word_addr(t1), word(3000), word(sqrt_x96)].concat()
    );
    anvil.send(ACCOUNT0, Some(npm), 0, &create).await;
    let usdt_amount = 300_000_000_000u128;
    let eth_amount = 100 * ETHER;
    anvil.mint(usdt, ACCOUNT0, usdt_amount).await;
    let approve = format!(
        "0x{}{}{}",
        sel("approve(address,uint256)"),
        word_addr(npm),
        word(MAX)
    );
    anvil.send(ACCOUNT0, Some(usdt), 0, &approve).await;
    let (a0, a1) = if t0 == usdt {
        (usdt_amount, eth_amount)
    } else {
        (eth_amount, usdt_amount)
    };
    let tick = |t: i64| {
        format!(
            "{}{:016x}",
            if t < 0 {
                "f".repeat(48)
            } else {
                "0".repeat(48)
            },
            t as u64
        )
    };
    let mint = format!(
        "0x{}{}",
        sel("mint((address,address,uint24,int24,int24,uint256,uint256,uint256,uint256,address,uint256))"),
        [
            word_addr(t0),
            word_addr(t1),
            word(3000),
            tick(-887_220),
            tick(887_220),
            word(a0),
            word(a1),
            word(0),
            word(0),
            word_addr(ACCOUNT0),
            word(DEADLINE),
        ]
        .concat()
    );
    // The ETH side is paid as value (the manager wraps it).
    anvil.send(ACCOUNT0, Some(npm), eth_amount, &mint).await;
}

/// QuoterV2 `quoteExactInputSingle` read directly: the amount out.
async fn v3_quote(anvil: &Anvil, quoter: &str, from: &str, to: &str, amount: u128) -> u128 {
    let data = format!(
        "0x{}{}",
        sel("quoteExactInputSingle((address,address,uint256,uint24,uint160))"),
        [
            word_addr(from),
            word_addr(to),
            word(amount),
            word(3000),
            word(0)
        ]
        .concat()
    );
    let r = anvil
        .rpc("eth_call", json!([{"to": quoter, "data": data}, "latest"]))
        .await;
    u128::from_str_radix(&s(&r)[2..66], 16).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uniswap_v3_quotes_and_conversions_both_ways() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    let (_factory, weth, router, quoter, npm) = deploy_v3(&eth).await;
    v3_liquidity(&eth, &npm, &usdt, &weth, 3000.0).await;
    let live = start(
        &eth,
        &usdt,
        &format!(
            "kind = \"uniswap_v3\"\nrouter = \"{router}\"\nquoter = \"{quoter}\"\nfee_tier = 3000\nweth = \"{weth}\"\n"
        ),
    )
    .await;
    let master = live.master.clone();
    let alice = customer_with_eth(&live, &eth, "alice", 2 * ETHER).await;

    // The quote is QuoterV2's own answer, near the pool's price.
    let q = live
        .post(
            &live.payout_key,
            "/v1/conversions/quote",
            convert_body("ETH", "USDT", ETHER),
            200,
        )
        .await;
    let direct = v3_quote(&eth, &quoter, &weth, &usdt, ETHER).await;
    assert_eq!(q["expected_out"], direct.to_string(), "{q}");
    assert_eq!(q["market"], "uniswap_v3");
    assert!(
        (2_900_000_000..3_000_000_000).contains(&direct),
        "about 3000 USDT less the 0.3% fee and the price impact: {direct}"
    );

    let usdt_before = eth.token_balance(&usdt, &master).await;
    let r = live
        .post(
            &live.payout_key,
            "/v1/conversions",
            convert_body("ETH", "USDT", ETHER),
            202,
        )
        .await;
    let b = wait_batch(&live, &eth, &s(&r["batch"]["id"]), "settled").await;
    let out: u128 = s(&b["amount_out"]).parse().unwrap();
    assert!(out >= s(&b["min_out"]).parse::<u128>().unwrap(), "{b}");
    assert_eq!(eth.token_balance(&usdt, &master).await - usdt_before, out);
    assert_eq!(live.available(&alice, "ethereum", "USDT").await, out);
    assert_eq!(live.available(&alice, "ethereum", "ETH").await, ETHER);

    // USDT back to ETH: approval, then exactInputSingle + unwrapWETH9 in one multicall.
    let back = out / 2;
    let direct = v3_quote(&eth, &quoter, &usdt, &weth, back).await;
    let q = live
        .post(
            &live.payout_key,
            "/v1/conversions/quote",
            convert_body("USDT", "ETH", back),
            200,
        )
        .await;
    assert_eq!(q["expected_out"], direct.to_string(), "{q}");
    assert_eq!(q["needs_approval"], true);
    let eth_before = eth.balance(&master).await;
    let r = live
        .post(
            &live.payout_key,
            "/v1/conversions",
            convert_body("USDT", "ETH", back),
            202,
        )
        .await;
    let b = wait_batch(&live, &eth, &s(&r["batch"]["id"]), "settled").await;
    assert!(b["approve_tx_hash"].is_string(), "{b}");
    let got: u128 = s(&b["amount_out"]).parse().unwrap();
    assert!(
        got >= s(&b["min_out"]).parse::<u128>().unwrap() && got > 0,
        "{b}"
    );
    let eth_after = eth.balance(&master).await;
    assert!(eth_after + ETHER / 100 > eth_before + got && eth_after < eth_before + got);
    assert_eq!(live.available(&alice, "ethereum", "ETH").await, ETHER + got);
    assert_eq!(live.available(&alice, "ethereum", "USDT").await, out - back);
    assert!(live.verify().contains("\"violations\": []"));
}

/// Transactions of `from` to `to` mined in blocks `1..=head`.
async fn sent_to(anvil: &Anvil, from: &str, to: &str) -> usize {
    let head = anvil.block_number().await;
    let mut n = 0;
    for b in 1..=head {
        let blk = anvil
            .rpc("eth_getBlockByNumber", json!([format!("0x{b:x}"), true]))
            .await;
        for tx in blk["transactions"].as_array().unwrap() {
            if s(&tx["from"]).eq_ignore_ascii_case(from) && s(&tx["to"]).eq_ignore_ascii_case(to) {
                n += 1;
            }
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
// The server's crash hook (`DEBUG_CRASH_AT`) is compiled into debug builds only; a release
// build of this test would wait for a crash that never comes.
#[cfg_attr(
    not(debug_assertions),
    ignore = "needs the debug build's crash hook (DEBUG_CRASH_AT)"
)]
async fn a_crash_between_approve_and_swap_and_after_the_swap_broadcast_mines_one_swap() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    let (factory, weth, router) = deploy_v2(&eth).await;
    v2_liquidity(&eth, &router, &usdt, 300_000_000_000, 100 * ETHER).await;
    let mut live = start(
        &eth,
        &usdt,
        &format!(
            "kind = \"uniswap_v2\"\nrouter = \"{router}\"\nfactory = \"{factory}\"\nweth = \"{weth}\"\n"
        ),
    )
    .await;
    let master = live.master.clone();
    // A customer's 5,000 USDT, swept into the treasury.
    let (cid, w) = live.customer_wallet("carol", "ethereum").await;
    eth.mint(&usdt, ACCOUNT0, 5_000_000_000).await;
    eth.token_transfer(&usdt, ACCOUNT0, &s(&w["address"]), 5_000_000_000)
        .await;
    wait_for("usdt swept", &[&eth], 90, || async {
        (treasury(&live, "USDT").await >= 5_000_000_000).then_some(())
    })
    .await;

    // The process dies right after broadcasting the approval ...
    live.kill();
    live.run_with(&[("DEBUG_CRASH_AT", "approve_broadcast")]);
    let r = live
        .post(
            &live.payout_key,
            "/v1/conversions",
            convert_body("USDT", "ETH", 3_000_000_000),
            202,
        )
        .await;
    let bid = s(&r["batch"]["id"]);
    assert!(live.wait_exit(60).await, "no crash at approve_broadcast");
    // ... then right after broadcasting the swap ...
    live.run_with(&[("DEBUG_CRASH_AT", "swap_broadcast")]);
    let mut crashed = false;
    for _ in 0..90 {
        if live.wait_exit(1).await {
            crashed = true;
            break;
        }
        eth.mine(1).await;
    }
    assert!(crashed, "no crash at swap_broadcast:\n{}", live.logs());
    // ... and the restarted appliance settles the one swap it recorded.
    live.run();
    let b = wait_batch(&live, &eth, &bid, "settled").await;
    assert_eq!(b["attempts"], 1, "{b}");
    assert_eq!(sent_to(&eth, &master, &usdt).await, 1, "one approval");
    assert_eq!(
        sent_to(&eth, &master, &router).await,
        1,
        "exactly one swap mined"
    );
    let got: u128 = s(&b["amount_out"]).parse().unwrap();
    assert!(got > 0);
    assert_eq!(
        live.available(&cid, "ethereum", "USDT").await,
        2_000_000_000
    );
    assert_eq!(live.available(&cid, "ethereum", "ETH").await, got);
    assert!(live.verify().contains("\"violations\": []"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_reverted_on_chain_by_a_price_move_is_retried_with_a_fresh_quote() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    let (factory, weth, router) = deploy_v2(&eth).await;
    v2_liquidity(&eth, &router, &usdt, 300_000_000_000, 100 * ETHER).await;
    let live = start(
        &eth,
        &usdt,
        &format!(
            "kind = \"uniswap_v2\"\nrouter = \"{router}\"\nfactory = \"{factory}\"\nweth = \"{weth}\"\n"
        ),
    )
    .await;
    let master = live.master.clone();
    let alice = customer_with_eth(&live, &eth, "alice", 2 * ETHER).await;
    // Blocks only on request from here: the swap waits in the pool.
    eth.rpc("evm_setAutomine", json!([false])).await;
    let r = live
        .post(
            &live.payout_key,
            "/v1/conversions",
            convert_body("ETH", "USDT", ETHER),
            202,
        )
        .await;
    let bid = s(&r["batch"]["id"]);
    let first = wait_for("swap in the pool", &[], 60, || async {
        let b = batch(&live, &bid).await;
        let h = s(&b["swap_tx_hash"]);
        if h.is_empty() {
            return None;
        }
        let tx = eth.rpc("eth_getTransactionByHash", json!([h])).await;
        (!tx.is_null()).then_some(h)
    })
    .await;
    // Someone sells 50 ETH into the pool first, with a higher tip: our min_out cannot be met.
    let data = format!(
        "0x{}{}",
        sel("swapExactETHForTokens(uint256,address[],address,uint256)"),
        [
            word(0),
            word(0x80),
            word_addr(ACCOUNT0),
            word(DEADLINE),
            word(2),
            word_addr(&weth),
            word_addr(&usdt),
        ]
        .concat()
    );
    eth.rpc(
        "eth_sendTransaction",
        json!([{"from": ACCOUNT0, "to": router, "value": format!("0x{:x}", 50 * ETHER),
                "data": data, "gas": "0x7a120",
                "maxPriorityFeePerGas": "0x2540be400", "maxFeePerGas": "0x174876e800"}]),
    )
    .await;
    eth.mine(1).await;
    let receipt = eth.rpc("eth_getTransactionReceipt", json!([first])).await;
    assert_eq!(receipt["status"], "0x0", "our swap reverted: {receipt}");
    eth.rpc("evm_setAutomine", json!([true])).await;
    // The revert counts as an attempt; a fresh quote at the new price goes through.
    let b = wait_batch(&live, &eth, &bid, "settled").await;
    assert_eq!(b["attempts"], 2, "{b}");
    assert_ne!(s(&b["swap_tx_hash"]), first);
    let out: u128 = s(&b["amount_out"]).parse().unwrap();
    assert_eq!(eth.token_balance(&usdt, &master).await, out);
    assert_eq!(live.available(&alice, "ethereum", "USDT").await, out);
    assert_eq!(live.available(&alice, "ethereum", "ETH").await, ETHER);
    assert!(live.verify().contains("\"violations\": []"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invoice_payment_is_converted_automatically_after_it_is_swept() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    let (factory, weth, router) = deploy_v2(&eth).await;
    v2_liquidity(&eth, &router, &usdt, 300_000_000_000, 100 * ETHER).await;
    let live = start(
        &eth,
        &usdt,
        &format!(
            "kind = \"uniswap_v2\"\nrouter = \"{router}\"\nfactory = \"{factory}\"\nweth = \"{weth}\"\n"
        ),
    )
    .await;
    let master = live.master.clone();
    let checkout = live.new_key("checkout", "invoices:read,invoices:write");
    // The merchant converts what its invoices receive on ethereum into ETH.
    let rule: Value = live
        .http
        .put(format!("{}/v1/conversion/rules/ethereum", live.base_url))
        .bearer_auth(&live.payout_key)
        .json(&json!({"enabled": true, "target_asset": "ETH"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rule["enabled"], true, "{rule}");
    assert_eq!(rule["target_asset"], "ETH");

    // A 50.00 USD invoice paid in USDT.
    let inv = live
        .post(
            &checkout,
            "/v1/invoices",
            json!({"price_amount": "5000", "accepted_chains": ["ethereum"], "accepted_assets": ["USDT"]}),
            201,
        )
        .await;
    let addr = inv["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["chain"] == "ethereum")
        .map(|a| s(&a["address"]))
        .unwrap();
    eth.mint(&usdt, ACCOUNT0, 50_000_000).await;
    eth.token_transfer(&usdt, ACCOUNT0, &addr, 50_000_000).await;

    // One automatic row per payment, written at the credit; executed once swept.
    let row = wait_for("the payment's row converted", &[&eth], 120, || async {
        let l = live
            .get(&live.payout_key, "/v1/conversions?kind=auto")
            .await;
        let rows = l["data"].as_array().unwrap().clone();
        assert!(rows.len() <= 1, "{l}");
        rows.into_iter().find(|r| {
            assert_ne!(r["status"], "failed", "{r}\n{}", live.logs());
            assert_ne!(r["status"], "skipped", "{r}");
            r["status"] == "converted"
        })
    })
    .await;
    assert_eq!(row["from_asset"], "USDT");
    assert_eq!(row["to_asset"], "ETH");
    assert_eq!(row["amount_in"], "50000000");
    assert!(row["payment_id"].is_string(), "{row}");
    let out: u128 = s(&row["amount_out"]).parse().unwrap();
    let b = batch(&live, &s(&row["batch_id"])).await;
    assert_eq!(b["status"], "settled");
    assert_eq!(b["amount_out"], row["amount_out"]);
    assert!(
        b["approve_tx_hash"].is_string(),
        "USDT approves the router: {b}"
    );
    // The treasury's USDT went into the pool; the ledger's treasury holds the ETH it paid.
    assert_eq!(eth.token_balance(&usdt, &master).await, 0);
    assert_eq!(treasury(&live, "USDT").await, 0);
    assert_eq!(treasury(&live, "ETH").await, out as i128);
    let done = live.events("conversion.completed").await;
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["data"]["kind"], "auto");
    assert!(live.verify().contains("\"violations\": []"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eth_invoice_payment_is_converted_to_usdt_and_the_treasury_holds_amount_out() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    let (factory, weth, router) = deploy_v2(&eth).await;
    v2_liquidity(&eth, &router, &usdt, 300_000_000_000, 100 * ETHER).await;
    // ETH is priced by a Chainlink-style feed on the same node (the provider is down).
    let feed = crate::market::deploy_feed(&eth, 8).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    crate::market::set_round(&eth, &feed, 3000_0000_0000, now).await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let live = start_extra(
        &eth,
        &usdt,
        &format!(
            "kind = \"uniswap_v2\"\nrouter = \"{router}\"\nfactory = \"{factory}\"\nweth = \"{weth}\"\n"
        ),
        &format!(
            "[market]\nbase_url = \"{dead_url}\"\nmax_age_seconds = 3600\ntimeout_ms = 500\n[market.chainlink_feeds]\nETH = \"{feed}\"\n"
        ),
    )
    .await;
    let master = live.master.clone();
    let checkout = live.new_key("checkout", "invoices:read,invoices:write");
    let rule: Value = live
        .http
        .put(format!("{}/v1/conversion/rules/ethereum", live.base_url))
        .bearer_auth(&live.payout_key)
        .json(&json!({"enabled": true, "target_asset": "USDT"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rule["enabled"], true, "{rule}");

    // A 60.00 USD invoice paid in ETH at the locked rate.
    let inv = wait_for("an ETH quote", &[], 30, || async {
        let (st, inv) = live
            .call(
                &checkout,
                reqwest::Method::POST,
                "/v1/invoices",
                Some(json!({"price_amount": "6000", "accepted_chains": ["ethereum"], "accepted_assets": ["ETH"]})),
            )
            .await;
        (st == 201 && inv["quotes"].as_array().is_some_and(|q| !q.is_empty())).then_some(inv)
    })
    .await;
    let q = &inv["quotes"][0];
    assert_eq!(q["asset"], "ETH", "{inv}");
    let wei: u128 = s(&q["amount_atomic"]).parse().unwrap();
    let addr = s(&inv["addresses"][0]["address"]);
    eth.send(ACCOUNT0, Some(&addr), wei, "0x").await;

    let row = wait_for("the payment converted", &[&eth], 120, || async {
        let l = live
            .get(&live.payout_key, "/v1/conversions?kind=auto")
            .await;
        l["data"].as_array().unwrap().iter().find_map(|r| {
            assert!(
                r["status"] != "failed" && r["status"] != "skipped",
                "{r}\n{}",
                live.logs()
            );
            (r["status"] == "converted").then(|| r.clone())
        })
    })
    .await;
    assert_eq!(row["from_asset"], "ETH");
    assert_eq!(row["to_asset"], "USDT");
    assert_eq!(row["amount_in"], wei.to_string());
    let out: u128 = s(&row["amount_out"]).parse().unwrap();
    // About 60 USDT less the pool's fee; the treasury's on-chain USDT grew by amount_out.
    assert!((55_000_000..60_000_000).contains(&out), "{row}");
    assert_eq!(eth.token_balance(&usdt, &master).await, out);
    assert_eq!(treasury(&live, "USDT").await, out as i128);
    assert_eq!(treasury(&live, "ETH").await, 0);
    let b = batch(&live, &s(&row["batch_id"])).await;
    assert_eq!(
        b["approve_tx_hash"],
        Value::Null,
        "ETH needs no approval: {b}"
    );
    assert!(live.verify().contains("\"violations\": []"));
}
