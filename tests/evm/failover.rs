//! `rpc_urls` failover (DECISIONS.md section 16): one Anvil reached through a
//! small TCP proxy (the first node) and directly (the second). The test stops the proxy:
//! the appliance goes on with the second node, says so in the chain's `status_note` and
//! its log, and misses no deposit; when the proxy is back the first node is used again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::AbortHandle;

use crate::helpers::*;

/// A TCP forwarder to one address that the test can stop (every connection cut, the port
/// closed) and start again on the same port.
pub struct Proxy {
    pub port: u16,
    target: String,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
    /// Connections accepted since start.
    pub accepted: Arc<AtomicU64>,
}

impl Proxy {
    pub async fn start(target: &str) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut p = Proxy {
            port: l.local_addr().unwrap().port(),
            target: target.to_string(),
            tasks: Arc::new(Mutex::new(Vec::new())),
            accepted: Arc::new(AtomicU64::new(0)),
        };
        p.serve(l);
        p
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn serve(&mut self, l: TcpListener) {
        let target = self.target.clone();
        let tasks = self.tasks.clone();
        let accepted = self.accepted.clone();
        let h = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = l.accept().await else {
                    continue;
                };
                accepted.fetch_add(1, Ordering::Relaxed);
                let target = target.clone();
                let h = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                tasks.lock().unwrap().push(h.abort_handle());
            }
        });
        self.tasks.lock().unwrap().push(h.abort_handle());
    }

    /// Closes the port and cuts every open connection.
    pub fn stop(&self) {
        for h in self.tasks.lock().unwrap().drain(..) {
            h.abort();
        }
    }

    /// Listens on the same port again.
    pub async fn restart(&mut self) {
        let mut tries = 0;
        let l = loop {
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(e) => {
                    tries += 1;
                    assert!(tries < 100, "rebinding port {}: {e}", self.port);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        self.serve(l);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn ethereum(live: &Live) -> Value {
    let v = live.get(&live.wallet_key, "/v1/chains").await;
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["chain"] == "ethereum")
        .cloned()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_first_node_is_skipped_and_no_deposit_is_missed() {
    let eth = Anvil::start(1);
    let usdt = deploy_token(&eth, 6, false).await;
    eth.mint(&usdt, ACCOUNT0, 1_000_000_000_000).await;
    let mut proxy = Proxy::start(eth.url.trim_start_matches("http://")).await;
    let (tmp, data, master) = init_data_dir();
    let mut live = Live::start(
        tmp,
        data,
        master,
        &[ChainSetup::ethereum(&eth, 2, Some(&usdt), 30_000)],
    )
    .await;
    // The first node is the proxy, the second the same Anvil directly.
    live.kill();
    let cfg = std::fs::read_to_string(&live.config).unwrap();
    let one = format!("rpc_url = \"{}\"\n", eth.url);
    assert!(cfg.contains(&one));
    let cfg = cfg.replace(
        &one,
        &format!("rpc_urls = [\"{}\", \"{}\"]\n", proxy.url(), eth.url),
    );
    std::fs::write(&live.config, cfg).unwrap();
    live.run();

    let (c1, w1) = live.customer_wallet("fo-1", "ethereum").await;
    let (c2, w2) = live.customer_wallet("fo-2", "ethereum").await;
    let a1 = w1["address"].as_str().unwrap().to_string();
    let a2 = w2["address"].as_str().unwrap().to_string();

    // Both nodes answer: the first serves, nothing is said.
    wait_for("chain live through the first node", &[], 30, || async {
        let e = ethereum(&live).await;
        (e["status"] == "live" && e["status_note"] == "").then_some(())
    })
    .await;
    eth.token_transfer(&usdt, ACCOUNT0, &a1, 1_000_000).await;
    wait_for("first deposit credited", &[&eth], 60, || async {
        (live.available(&c1, "ethereum", "USDT").await == 1_000_000).then_some(())
    })
    .await;
    let through_proxy = proxy.accepted.load(Ordering::Relaxed);
    assert!(through_proxy > 0, "the first node was not used");

    // The first node goes away between blocks: transfers keep coming.
    proxy.stop();
    let at_stop = proxy.accepted.load(Ordering::Relaxed);
    eth.token_transfer(&usdt, ACCOUNT0, &a1, 2_000_000).await;
    eth.token_transfer(&usdt, ACCOUNT0, &a2, 3_000_000).await;
    eth.send(ACCOUNT0, Some(&a2), 10u128.pow(17), "0x").await;
    wait_for("deposits after the stop credited", &[&eth], 60, || async {
        (live.available(&c1, "ethereum", "USDT").await == 3_000_000
            && live.available(&c2, "ethereum", "USDT").await == 3_000_000
            && live.available(&c2, "ethereum", "ETH").await == 10u128.pow(17))
        .then_some(())
    })
    .await;
    // Said so: the chain stays live with a note naming the skipped node by host only.
    let e = ethereum(&live).await;
    assert_eq!(e["status"], "live", "{e}");
    let note = e["status_note"].as_str().unwrap().to_string();
    assert!(
        note.contains(&format!("127.0.0.1:{}", proxy.port)) && note.contains("skipped"),
        "{note}"
    );
    assert!(
        note.contains(eth.url.as_str()),
        "names the node in use: {note}"
    );
    assert!(
        live.logs().contains("node skipped"),
        "no log line for the skipped node"
    );

    // Exactly one deposit per transfer: nothing missed, nothing twice.
    let d1 = live.deposits_of(&c1).await;
    let d2 = live.deposits_of(&c2).await;
    assert_eq!(d1.len(), 2, "{d1:?}");
    assert_eq!(d2.len(), 2, "{d2:?}");

    // The first node comes back: after its skip period it is probed, used again, and the
    // note clears.
    proxy.restart().await;
    wait_for("first node back in use", &[&eth], 60, || async {
        let e = ethereum(&live).await;
        (e["status"] == "live" && e["status_note"] == "").then_some(())
    })
    .await;
    assert!(live.logs().contains("node back in use"));
    assert!(
        proxy.accepted.load(Ordering::Relaxed) > at_stop,
        "the first node is not asked again"
    );
    eth.token_transfer(&usdt, ACCOUNT0, &a2, 4_000_000).await;
    wait_for(
        "deposit through the first node again",
        &[&eth],
        60,
        || async { (live.available(&c2, "ethereum", "USDT").await == 7_000_000).then_some(()) },
    )
    .await;
    let v = live.verify();
    assert!(v.contains("\"violations\": []"), "{v}");
}
