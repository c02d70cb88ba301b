//! Harness of the EVM end-to-end tests: real Anvil nodes (npm `@foundry-rs/anvil-linux-amd64`,
//! installed by `scripts/install-test-deps.sh`) and the real `appliance` binary in live mode.
//! A missing Anvil fails the tests: they are never skipped.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const PASSPHRASE: &str = "evm end-to-end test passphrase";
/// Anvil's first pre-funded account (unlocked: `eth_sendTransaction` needs no key).
pub const ACCOUNT0: &str = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266";

pub fn anvil_bin() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil");
    assert!(
        p.exists(),
        "Anvil is missing at {}: run scripts/install-test-deps.sh",
        p.display()
    );
    p
}

/// A running Anvil node.
pub struct Anvil {
    pub url: String,
    pub chain_id: u64,
    child: Child,
    http: reqwest::Client,
}

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

static RPC_ID: AtomicU64 = AtomicU64::new(1);

impl Anvil {
    /// Starts Anvil on a free port with `chain_id`; blocks are mined per transaction and
    /// on `mine`.
    pub fn start(chain_id: u64) -> Anvil {
        Anvil::start_with(chain_id, &[])
    }

    /// [`Anvil::start`] with extra command-line arguments (e.g. `--prune-history`).
    pub fn start_with(chain_id: u64, extra: &[&str]) -> Anvil {
        let mut child = Command::new(anvil_bin())
            .args(["--port", "0", "--chain-id", &chain_id.to_string()])
            .args(["--accounts", "3", "--balance", "1000000"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn anvil");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("Listening on ") {
                    let _ = tx.send(rest.trim().to_string());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("anvil did not start");
        Anvil {
            url: format!("http://{addr}"),
            chain_id,
            child,
            http: reqwest::Client::new(),
        }
    }

    /// The node process's id (CPU accounting in the benchmarks).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": RPC_ID.fetch_add(1, Ordering::Relaxed),
                          "method": method, "params": params});
        let v: Value = self
            .http
            .post(&self.url)
            .json(&body)
            .send()
            .await
            .expect("anvil request")
            .json()
            .await
            .expect("anvil json");
        if let Some(e) = v.get("error") {
            panic!("{method} failed: {e}");
        }
        v["result"].clone()
    }

    pub async fn mine(&self, n: u64) {
        self.rpc("anvil_mine", json!([format!("0x{n:x}")])).await;
    }

    pub async fn block_number(&self) -> u64 {
        hex_u64(&self.rpc("eth_blockNumber", json!([])).await)
    }

    /// Sends a transaction from an unlocked account and returns its receipt (automine).
    /// Its gas limit is the node's estimate plus half (at most 30M, Anvil's block gas
    /// limit): an estimate is made against the pending block, and the block the
    /// transaction lands in may differ from it. Under the full suite's load a Uniswap V3
    /// `mint` sent with the node's own estimate once reverted with no logs.
    pub async fn send(&self, from: &str, to: Option<&str>, value: u128, data: &str) -> Value {
        let mut tx = json!({"from": from, "value": format!("0x{value:x}"), "data": data});
        if let Some(t) = to {
            tx["to"] = json!(t);
        }
        let estimate = hex_u64(&self.rpc("eth_estimateGas", json!([tx])).await);
        tx["gas"] = json!(format!("0x{:x}", (estimate * 3 / 2).min(30_000_000)));
        let hash = self.rpc("eth_sendTransaction", json!([tx])).await;
        for _ in 0..100 {
            let r = self.rpc("eth_getTransactionReceipt", json!([hash])).await;
            if !r.is_null() {
                assert_eq!(r["status"], "0x1", "transaction reverted: {r}");
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("transaction {hash} not mined");
    }

    pub async fn deploy(&self, code_hex: &str, args: &[u8]) -> String {
        let data = format!("0x{code_hex}{}", hex::encode(args));
        let r = self.send(ACCOUNT0, None, 0, &data).await;
        r["contractAddress"].as_str().unwrap().to_string()
    }

    pub async fn balance(&self, addr: &str) -> u128 {
        hex_u128(&self.rpc("eth_getBalance", json!([addr, "latest"])).await)
    }

    pub async fn token_balance(&self, token: &str, owner: &str) -> u128 {
        let data = format!(
            "0x70a08231{:0>64}",
            owner.trim_start_matches("0x").to_lowercase()
        );
        let r = self
            .rpc("eth_call", json!([{"to": token, "data": data}, "latest"]))
            .await;
        hex_u128(&r)
    }

    pub async fn code(&self, addr: &str) -> String {
        self.rpc("eth_getCode", json!([addr, "latest"]))
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// ERC-20 transfer from an unlocked account.
    pub async fn token_transfer(&self, token: &str, from: &str, to: &str, amount: u128) -> Value {
        let data = format!(
            "0xa9059cbb{:0>64}{:064x}",
            to.trim_start_matches("0x").to_lowercase(),
            amount
        );
        self.send(from, Some(token), 0, &data).await
    }

    pub async fn mint(&self, token: &str, to: &str, amount: u128) {
        // mint(address,uint256)
        let sel = &hex::encode(appliance_chains::address::keccak256(
            b"mint(address,uint256)",
        ))[..8];
        let data = format!(
            "0x{sel}{:0>64}{:064x}",
            to.trim_start_matches("0x").to_lowercase(),
            amount
        );
        self.send(ACCOUNT0, Some(token), 0, &data).await;
    }
}

pub fn hex_u64(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
}

pub fn hex_u128(v: &Value) -> u128 {
    let s = v.as_str().unwrap().trim_start_matches("0x");
    let s = s.trim_start_matches('0');
    if s.is_empty() {
        0
    } else {
        u128::from_str_radix(s, 16).unwrap()
    }
}

fn contracts(json_text: &str, name: &str) -> String {
    let v: Value = serde_json::from_str(json_text).unwrap();
    v["contracts"][name].as_str().unwrap().to_string()
}

/// Deploys a test token with `decimals`; `tether_like`: `transfer` returns nothing (USDT).
pub async fn deploy_token(anvil: &Anvil, decimals: u8, tether_like: bool) -> String {
    let code = contracts(
        include_str!("contracts/TestTokens.json"),
        if tether_like {
            "TetherLike"
        } else {
            "TestToken"
        },
    );
    let mut arg = [0u8; 32];
    arg[31] = decimals;
    anvil.deploy(&code, &arg).await
}

/// Deploys the forwarder factory of `treasury` through the deterministic deployment proxy
/// (present at genesis on Anvil) and checks it landed at the address the appliance derives.
pub async fn deploy_factory(anvil: &Anvil, treasury: &str) -> String {
    let t = appliance_chains::address::parse_evm_address(treasury).unwrap();
    let data = appliance_chains::evm::sweeper::factory_deploy_calldata(&t.into());
    let proxy =
        appliance_chains::address::to_checksum(&appliance_chains::address::DEPLOYMENT_PROXY);
    anvil
        .send(
            ACCOUNT0,
            Some(&proxy),
            0,
            &format!("0x{}", hex::encode(&data)),
        )
        .await;
    let factory =
        appliance_chains::address::to_checksum(&appliance_chains::address::factory_address(&t));
    assert!(
        anvil.code(&factory).await.len() > 2,
        "factory not at {factory}"
    );
    factory
}

/// A running appliance in live mode.
pub struct Live {
    pub base_url: String,
    pub data_dir: PathBuf,
    pub config: PathBuf,
    pub master: String,
    pub wallet_key: String,
    pub payout_key: String,
    pub project_id: String,
    pub http: reqwest::Client,
    child: Option<Child>,
    pub output: Arc<Mutex<Vec<String>>>,
    _tmp: tempfile::TempDir,
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_appliance")
}

fn cli(data_dir: &Path, config: &Path, args: &[&str]) -> String {
    let out = Command::new(bin())
        .args(["--data-dir", data_dir.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap()])
        .args(args)
        .env("APPLIANCE_PASSPHRASE", PASSPHRASE)
        .output()
        .expect("run appliance");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "appliance {args:?} failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn token_in(s: &str) -> String {
    s.lines()
        .find_map(|l| l.strip_prefix("token: "))
        .expect("token line")
        .trim()
        .to_string()
}

/// One `[chains.<id>]` table of the test config.
pub struct ChainSetup<'a> {
    pub id: &'a str,
    pub anvil: &'a Anvil,
    pub confirmations: u32,
    /// (symbol, contract, decimals)
    pub assets: Vec<(&'a str, String, u8)>,
    pub replace_after_ms: u64,
    /// The watcher's and sender's poll interval (`poll_interval_ms`).
    pub poll_ms: u64,
}

impl<'a> ChainSetup<'a> {
    /// Chain `ethereum` on `anvil` with `confirmations`, the native coin and, when given,
    /// the 6-decimal token at `usdt` as `USDT`; fee bumps after `replace_after_ms`.
    pub fn ethereum(
        anvil: &'a Anvil,
        confirmations: u32,
        usdt: Option<&String>,
        replace_after_ms: u64,
    ) -> Self {
        ChainSetup {
            id: "ethereum",
            anvil,
            confirmations,
            assets: usdt
                .map(|c| vec![("USDT", c.clone(), 6)])
                .unwrap_or_default(),
            replace_after_ms,
            poll_ms: 100,
        }
    }
}

/// `appliance init` in a fresh data dir; returns (tempdir, data dir, master address).
pub fn init_data_dir() -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = tmp.path().join("empty.toml");
    std::fs::write(&cfg, "").unwrap();
    let out = cli(&data, &cfg, &["init"]);
    let master = out
        .lines()
        .find_map(|l| l.strip_prefix("evm master wallet: "))
        .expect("master line")
        .trim()
        .to_string();
    (tmp, data, master)
}

impl Live {
    /// Writes the config for `chains`, starts `appliance serve`, creates a live project with
    /// a wallet key (sweeps:create) and a payout key (payouts:create), both signing.
    pub async fn start(
        tmp: tempfile::TempDir,
        data_dir: PathBuf,
        master: String,
        chains: &[ChainSetup<'_>],
    ) -> Live {
        Self::start_with(tmp, data_dir, master, chains, "").await
    }

    /// [`Live::start`] with `extra` appended to the config (e.g. `[chains.<id>.dex]`).
    pub async fn start_with(
        tmp: tempfile::TempDir,
        data_dir: PathBuf,
        master: String,
        chains: &[ChainSetup<'_>],
        extra: &str,
    ) -> Live {
        let config = tmp.path().join("config.toml");
        let mut text = String::from("listen = \"127.0.0.1:0\"\n");
        for c in chains {
            text.push_str(&format!(
                "[chains.{}]\nrpc_url = \"{}\"\nconfirmations = {}\npoll_interval_ms = {}\nsweep_threshold_usd_cents = 100\nreplace_after_ms = {}\n",
                c.id, c.anvil.url, c.confirmations, c.poll_ms, c.replace_after_ms
            ));
            for (sym, contract, dec) in &c.assets {
                text.push_str(&format!(
                    "[[chains.{}.assets]]\nsymbol = \"{sym}\"\ncontract = \"{contract}\"\ndecimals = {dec}\n",
                    c.id
                ));
            }
        }
        text.push_str(extra);
        std::fs::write(&config, text).unwrap();
        let mut live = Live {
            base_url: String::new(),
            data_dir,
            config,
            master,
            wallet_key: String::new(),
            payout_key: String::new(),
            project_id: String::new(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            child: None,
            output: Arc::new(Mutex::new(Vec::new())),
            _tmp: tmp,
        };
        live.run();
        let p = cli(
            &live.data_dir,
            &live.config,
            &["project", "create", "--name", "shop", "--mode", "live"],
        );
        let v: Value = serde_json::from_str(&p[p.find('{').unwrap()..]).unwrap();
        live.project_id = v["id"].as_str().unwrap().to_string();
        // A live project needs an active, funded plan to create invoices (SPEC.md section 4,
        // Invoices rule 4): prepay and put it on the example's `drift` plan.
        cli(
            &live.data_dir,
            &live.config,
            &[
                "billing",
                "credit",
                "--project",
                "shop",
                "--cents",
                "100000",
                "--note",
                "prepaid",
            ],
        );
        cli(
            &live.data_dir,
            &live.config,
            &["billing", "plan", "--project", "shop", "--plan", "drift"],
        );
        live.wallet_key = token_in(&cli(
            &live.data_dir,
            &live.config,
            &[
                "key", "create", "--project", "shop", "--kind", "wallet", "--signing-enabled",
                "--scopes",
                "customers:read,customers:write,wallets:read,wallets:create,balances:read,deposits:read,sweeps:read,sweeps:create,events:read",
            ],
        ));
        live.payout_key = token_in(&cli(
            &live.data_dir,
            &live.config,
            &[
                "key",
                "create",
                "--project",
                "shop",
                "--kind",
                "payout",
                "--signing-enabled",
                "--scopes",
                "payouts:read,payouts:create,balances:read,conversions:read,conversions:write",
            ],
        ));
        live
    }

    /// Starts (or restarts) the server process.
    pub fn run(&mut self) {
        self.run_with(&[]);
    }

    /// Starts (or restarts) the server process with extra environment variables (e.g. the
    /// debug-build crash hook `DEBUG_CRASH_AT`).
    pub fn run_with(&mut self, env: &[(&str, &str)]) {
        self.run_bin(bin(), env);
    }

    /// Starts the server process from the executable at `path` (a benchmark comparing
    /// builds, or a wrapper that runs the server under a profiler) with extra environment
    /// variables.
    pub fn run_bin(&mut self, path: &str, env: &[(&str, &str)]) {
        assert!(self.child.is_none());
        let mut child = Command::new(path)
            .args(["--data-dir", self.data_dir.to_str().unwrap()])
            .args(["--config", self.config.to_str().unwrap()])
            .arg("serve")
            .env("APPLIANCE_PASSPHRASE", PASSPHRASE)
            .env("APPLIANCE_LOG", "info,appliance=debug")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn appliance");
        let (tx, rx) = mpsc::channel();
        for (r, tag) in [
            (
                Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
                "",
            ),
            (Box::new(child.stderr.take().unwrap()), "[stderr] "),
        ] {
            let tx = tx.clone();
            let all = self.output.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines() {
                    let Ok(line) = line else { break };
                    all.lock().unwrap().push(format!("{tag}{line}"));
                    let _ = tx.send(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("appliance listening on ") {
                        self.base_url = rest.split_whitespace().next().unwrap().to_string();
                        break;
                    }
                }
                Err(_) => panic!(
                    "appliance did not start:\n{}",
                    self.output.lock().unwrap().join("\n")
                ),
            }
        }
        self.child = Some(child);
    }

    /// The server process's id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// SIGKILL: no graceful shutdown (crash test).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Waits until the server process exits by itself (a crash hook); `false` on timeout.
    pub async fn wait_exit(&mut self, secs: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if c.try_wait().unwrap().is_some() {
                    self.child = None;
                    return true;
                }
            } else {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// A new key of the shop project: `kind`, `scopes` (comma-separated), signing on.
    pub fn new_key(&self, kind: &str, scopes: &str) -> String {
        token_in(&cli(
            &self.data_dir,
            &self.config,
            &[
                "key",
                "create",
                "--project",
                "shop",
                "--kind",
                kind,
                "--signing-enabled",
                "--scopes",
                scopes,
            ],
        ))
    }

    pub fn verify(&self) -> String {
        cli(&self.data_dir, &self.config, &["verify"])
    }

    /// Everything the server printed, ANSI colour codes removed.
    pub fn logs(&self) -> String {
        let raw = self.output.lock().unwrap().join("\n");
        let mut out = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(ch) = chars.next() {
            if ch == '\u{1b}' {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(ch);
            }
        }
        out
    }

    pub async fn call(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{}", self.base_url, path))
            .bearer_auth(key);
        if method == reqwest::Method::POST {
            req = req.header(
                "Idempotency-Key",
                format!("k-{}", RPC_ID.fetch_add(1, Ordering::Relaxed)),
            );
            req = req.json(&body.unwrap_or(json!({})));
        }
        let r = req.send().await.expect("request");
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        (status, v)
    }

    /// A new key of the live project: `kind`, comma-separated `scopes`.
    pub fn key(&self, kind: &str, scopes: &str) -> String {
        token_in(&cli(
            &self.data_dir,
            &self.config,
            &[
                "key",
                "create",
                "--project",
                "shop",
                "--kind",
                kind,
                "--scopes",
                scopes,
            ],
        ))
    }

    pub async fn get(&self, key: &str, path: &str) -> Value {
        let (s, v) = self.call(key, reqwest::Method::GET, path, None).await;
        assert_eq!(s, 200, "GET {path}: {v}");
        v
    }

    pub async fn post(&self, key: &str, path: &str, body: Value, expect: u16) -> Value {
        let (s, v) = self
            .call(key, reqwest::Method::POST, path, Some(body))
            .await;
        assert_eq!(s, expect, "POST {path}: {v}");
        v
    }

    /// A customer and its wallet on `chain`; returns (customer id, wallet).
    pub async fn customer_wallet(&self, reference: &str, chain: &str) -> (String, Value) {
        let c = self
            .post(
                &self.wallet_key,
                "/v1/customers",
                json!({"reference_id": reference}),
                201,
            )
            .await;
        let cid = c["id"].as_str().unwrap().to_string();
        let w = self.wallet(&cid, chain).await;
        (cid, w)
    }

    /// `POST /v1/wallets`. Right after a start the chain may not be reached yet: the
    /// watcher's first pass (on the background runtime, at a lower priority) marks it
    /// reached, and until then a new address is refused with 422 `chain_unavailable` and
    /// the note "Connecting to the node." Like a merchant's client, this retries that one answer for up to 30 s; any other answer is final.
    pub async fn wallet(&self, cid: &str, chain: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (s, v) = self
                .call(
                    &self.wallet_key,
                    reqwest::Method::POST,
                    "/v1/wallets",
                    Some(json!({"customer_id": cid, "chain": chain})),
                )
                .await;
            let connecting = s == 422
                && v["code"] == "chain_unavailable"
                && v["message"]
                    .as_str()
                    .is_some_and(|m| m.ends_with(": Connecting to the node."));
            if connecting && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert!(s == 201 || s == 200, "wallet: {s} {v}");
            return v;
        }
    }

    pub async fn deposits_of(&self, cid: &str) -> Vec<Value> {
        let v = self
            .get(
                &self.wallet_key,
                &format!("/v1/deposits?customer_id={cid}&limit=100"),
            )
            .await;
        v["data"].as_array().unwrap().clone()
    }

    pub async fn available(&self, cid: &str, chain: &str, asset: &str) -> u128 {
        let v = self
            .get(&self.wallet_key, &format!("/v1/customers/{cid}/balances"))
            .await;
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["chain"] == chain && x["asset"] == asset)
            .map(|x| x["available"].as_str().unwrap().parse().unwrap())
            .unwrap_or(0)
    }

    pub async fn events(&self, ty: &str) -> Vec<Value> {
        let v = self
            .get(&self.wallet_key, &format!("/v1/events?type={ty}&limit=100"))
            .await;
        v["data"].as_array().unwrap().clone()
    }
}

/// Polls `f` until it returns `Some`, mining one block on each of `anvils` between tries.
pub async fn wait_for<T, F, Fut>(what: &str, anvils: &[&Anvil], secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        for a in anvils {
            a.mine(1).await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// A fresh external address (not custodied).
pub fn external(n: u32) -> String {
    let h = appliance_chains::address::keccak256(format!("external {n}").as_bytes());
    let mut a = [0u8; 20];
    a.copy_from_slice(&h[12..]);
    appliance_chains::address::to_checksum(&a)
}

/// Calldata of the test token's `spray(address[], uint256)`: credits `value` to each of
/// `to`, one `Transfer` log each.
pub fn spray_calldata(to: &[String], value: u128) -> String {
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

/// Posts a JSON-RPC batch to `anvil` and returns the results in order (panics on an error).
pub async fn batch(
    http: &reqwest::Client,
    anvil: &Anvil,
    calls: &[(&str, serde_json::Value)],
) -> Vec<serde_json::Value> {
    let body: Vec<serde_json::Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (m, p))| json!({"jsonrpc": "2.0", "id": i, "method": m, "params": p}))
        .collect();
    let v: Vec<serde_json::Value> = http
        .post(&anvil.url)
        .json(&body)
        .send()
        .await
        .expect("anvil batch")
        .json()
        .await
        .expect("anvil batch json");
    let mut out = vec![serde_json::Value::Null; calls.len()];
    for r in v {
        if let Some(e) = r.get("error") {
            panic!("anvil batch call failed: {e}");
        }
        let i = r["id"].as_u64().unwrap() as usize;
        out[i] = r["result"].clone();
    }
    out
}
