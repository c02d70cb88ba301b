//! Watcher benchmark (issue 4): blocks per second with 100,000 watched addresses and 200
//! token transfers per block, and detection latency from a mined block to a visible
//! `detected` deposit. Run with:
//!
//! ```text
//! cargo test --release --test evm -- --ignored watcher_benchmark --nocapture
//! ```

use std::time::{Duration, Instant};

use serde_json::json;
use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Customer, Wallet};
use appliance_storage::{Store, StoreOptions};

use crate::helpers::*;

const ADDRESSES: usize = 100_000;
const PER_BLOCK: usize = 200;
const BLOCKS: usize = 50;

fn spray_calldata(to: &[String], value: u128) -> String {
    let sel = &hex::encode(appliance_chains::address::keccak256(
        b"spray(address[],uint256)",
    ))[..8];
    let mut d = format!("0x{sel}{:064x}{:064x}{:064x}", 0x40, value, to.len());
    for a in to {
        d.push_str(&format!(
            "{:0>64}",
            a.trim_start_matches("0x").to_lowercase()
        ));
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run explicitly with --ignored (release build recommended)"]
async fn watcher_benchmark() {
    let eth = Anvil::start(1);
    let token = deploy_token(&eth, 6, false).await;
    let (tmp, data, master) = init_data_dir();
    let mut live = Live::start(
        tmp,
        data.clone(),
        master.clone(),
        &[ChainSetup {
            id: "ethereum",
            anvil: &eth,
            confirmations: 1,
            assets: vec![("USDT", token.clone(), 6)],
            replace_after_ms: 30_000,
        }],
    )
    .await;
    live.kill();

    // 100,000 customers with a wallet each, written straight into the store.
    let project: Uuid = live.project_id.parse().unwrap();
    let treasury = appliance_chains::address::parse_evm_address(&master).unwrap();
    let factory = appliance_chains::address::factory_address(&treasury);
    let store = Store::open(&data.join("appliance.redb"), StoreOptions::default()).unwrap();
    let t = Instant::now();
    let mut addresses = Vec::with_capacity(ADDRESSES);
    for chunk in 0..(ADDRESSES / 5_000) {
        let rows: Vec<(Customer, Wallet)> = (0..5_000)
            .map(|i| {
                let cid = Uuid::now_v7();
                let now = appliance_storage::now_us();
                let addr = appliance_chains::address::deposit_address_under(&factory, project, cid);
                (
                    Customer {
                        id: cid,
                        project_id: project,
                        reference_id: Some(format!("bench-{chunk}-{i}")),
                        email: None,
                        status: "active".into(),
                        metadata: json!({}),
                        created_at: now,
                    },
                    Wallet {
                        id: Uuid::now_v7(),
                        project_id: project,
                        customer_id: cid,
                        chain: "ethereum".into(),
                        role: "customer".into(),
                        status: "active".into(),
                        address: addr,
                        memo: None,
                        created_at: now,
                    },
                )
            })
            .collect();
        addresses.extend(rows.iter().map(|(_, w)| w.address.clone()));
        store
            .write(move |ctx| {
                for (c, w) in &rows {
                    ctx.put(c)?;
                    ctx.unique_put(
                        &index::unique(
                            IndexTag::UniqueWallet,
                            project,
                            &[c.id.as_bytes(), b"ethereum"],
                        ),
                        w.id,
                    )?;
                    ctx.unique_put(
                        &appliance::services::wallets::address_key("ethereum", &w.address),
                        w.id,
                    )?;
                    ctx.put(w)?;
                }
                Ok::<_, appliance_storage::StoreError>(())
            })
            .await
            .unwrap();
    }
    drop(store);
    eprintln!("wrote {ADDRESSES} wallets in {:?}", t.elapsed());

    // 50 blocks of 200 transfers each, mined while the appliance is down.
    let start_block = eth.block_number().await + 1;
    for b in 0..BLOCKS {
        let to: Vec<String> = (0..PER_BLOCK)
            .map(|i| addresses[(b * PER_BLOCK + i) * 7 % ADDRESSES].clone())
            .collect();
        eth.send(ACCOUNT0, Some(&token), 0, &spray_calldata(&to, 1_000_000))
            .await;
    }
    let last_block = eth.block_number().await;
    assert_eq!(last_block + 1 - start_block, BLOCKS as u64);
    let cfg = std::fs::read_to_string(&live.config).unwrap();
    let cfg = cfg
        .replace(
            "replace_after_ms = 30000\n",
            &format!("replace_after_ms = 30000\nstart_block = {start_block}\n"),
        )
        .replace(
            "sweep_threshold_usd_cents = 100\n",
            "sweep_threshold_usd_cents = 1000000000000\n",
        );
    std::fs::write(&live.config, cfg).unwrap();

    let t = Instant::now();
    live.run();
    let target = format!("to={last_block} ");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if live
            .logs()
            .lines()
            .any(|l| l.contains("watched blocks") && l.contains(&target))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "watcher did not catch up:\n{}",
            live.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let catch_up = t.elapsed();
    let secs = catch_up.as_secs_f64();
    eprintln!(
        "BENCH catch-up: {BLOCKS} blocks x {PER_BLOCK} transfers ({} deposits detected and credited) \
         with {ADDRESSES} watched addresses in {secs:.2}s (includes process start): {:.1} blocks/s, {:.0} transfers/s",
        BLOCKS * PER_BLOCK,
        BLOCKS as f64 / secs,
        (BLOCKS * PER_BLOCK) as f64 / secs
    );
    for l in live
        .logs()
        .lines()
        .filter(|l| l.contains("watched blocks"))
        .take(5)
    {
        eprintln!("  {l}");
    }

    let logs = live.logs();
    let slices: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("watched blocks"))
        .collect();
    if let Some(l) = slices.last() {
        eprintln!("  last slice: {l}");
    }

    // Detection latency: block mined -> deposit visible over the API as detected.
    eth.mint(&token, ACCOUNT0, 1_000_000_000_000).await;
    let mut lat = Vec::new();
    for i in 0..10 {
        let (cid, w) = live.customer_wallet(&format!("lat-{i}"), "ethereum").await;
        let r = eth
            .token_transfer(&token, ACCOUNT0, w["address"].as_str().unwrap(), 1_000_000)
            .await;
        let mined = Instant::now();
        let tx = r["transactionHash"].as_str().unwrap().to_string();
        loop {
            if live
                .deposits_of(&cid)
                .await
                .iter()
                .any(|d| d["tx_hash"] == tx)
            {
                break;
            }
            assert!(mined.elapsed() < Duration::from_secs(30));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        lat.push(mined.elapsed().as_millis());
    }
    lat.sort();
    eprintln!(
        "BENCH detection latency (poll_interval_ms = 100): median {} ms, max {} ms, all {:?}",
        lat[lat.len() / 2],
        lat[lat.len() - 1],
        lat
    );
}
