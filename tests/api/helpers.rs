//! Test harness: runs the real `appliance` binary in test mode on an ephemeral port with a
#![allow(dead_code)]
//! temporary data dir, and talks to it like a merchant's client would.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::{json, Value};

/// How long a start may take before the harness gives up (a debug build on a busy box).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running appliance (or one stopped between [`App::stop`] and [`App::start`]).
pub struct App {
    pub base_url: String,
    /// `host:port` the server bound to.
    pub addr: String,
    pub checkout_key: String,
    pub payout_key: String,
    pub wallet_key: String,
    /// Project id of `default`, from the `created project default` line.
    pub project_id: Option<String>,
    pub data_dir: PathBuf,
    pub client: reqwest::Client,
    listen: String,
    /// Extra environment for every start (e.g. `APPLIANCE_SIGNING__ENABLED`).
    env: Vec<(String, String)>,
    /// Shell commands run before the server is exec'd (`sh -c '<prefix>; exec ..'`), e.g.
    /// `umask 000` or `ulimit -n 256`.
    sh_prefix: Option<String>,
    child: Option<Child>,
    /// Every line the server printed (stdout and stderr), all runs.
    pub output: Arc<Mutex<Vec<String>>>,
    /// Lines of the current run only.
    pub run_output: Arc<Mutex<Vec<String>>>,
    _tmp: Option<tempfile::TempDir>,
}

static IDEM_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh idempotency key, unique in this test process.
pub fn idem() -> String {
    format!(
        "test-{}-{}",
        std::process::id(),
        IDEM_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Starts a fresh server (first start of a new data dir).
pub async fn spawn_app() -> App {
    spawn_app_on("127.0.0.1:0").await
}

/// Starts a fresh server listening on `listen` (e.g. `[::1]:0`).
pub async fn spawn_app_on(listen: &str) -> App {
    spawn_app_with(listen, &[]).await
}

/// Starts a fresh server with extra environment variables.
pub async fn spawn_app_with(listen: &str, env: &[(&str, &str)]) -> App {
    spawn_app_full(listen, env, None).await
}

/// Starts a fresh server through `sh -c '<prefix>; exec appliance ..'` (e.g. `umask 000`).
pub async fn spawn_app_sh(prefix: &str, env: &[(&str, &str)]) -> App {
    spawn_app_full("127.0.0.1:0", env, Some(prefix.to_string())).await
}

async fn spawn_app_full(listen: &str, env: &[(&str, &str)], sh_prefix: Option<String>) -> App {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let mut app = App {
        base_url: String::new(),
        addr: String::new(),
        checkout_key: String::new(),
        payout_key: String::new(),
        wallet_key: String::new(),
        project_id: None,
        data_dir,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        listen: listen.to_string(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        sh_prefix,
        child: None,
        output: Arc::new(Mutex::new(Vec::new())),
        run_output: Arc::new(Mutex::new(Vec::new())),
        _tmp: Some(tmp),
    };
    app.start_inner(true);
    app
}

/// The first token of the test prefix (`apktest` + 64 lowercase hex) in `s`.
pub fn find_token(s: &str) -> Option<String> {
    let mut from = 0;
    while let Some(i) = s[from..].find("apktest") {
        let start = from + i;
        let rest = &s[start + 7..];
        let hex: String = rest
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            .collect();
        if hex.len() == 64 {
            return Some(format!("apktest{hex}"));
        }
        from = start + 7;
    }
    None
}

/// The first live token (`apk` + 64 lowercase hex, not `apktest`) in `s`.
pub fn find_live_token(s: &str) -> Option<String> {
    let mut from = 0;
    while let Some(i) = s[from..].find("apk") {
        let start = from + i;
        let rest = &s[start + 3..];
        let hex: String = rest
            .chars()
            .take_while(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            .collect();
        if hex.len() == 64 {
            return Some(format!("apk{hex}"));
        }
        from = start + 3;
    }
    None
}

/// True when `t` has the test token shape: `apktest` + 64 lowercase hex.
pub fn is_test_token(t: &str) -> bool {
    t.len() == 7 + 64
        && t.starts_with("apktest")
        && t[7..]
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
}

fn spawn_reader<R: std::io::Read + Send + 'static>(
    r: R,
    tx: mpsc::Sender<String>,
    all: Arc<Mutex<Vec<String>>>,
    run: Arc<Mutex<Vec<String>>>,
    tag: &'static str,
) {
    std::thread::spawn(move || {
        let reader = BufReader::new(r);
        for line in reader.lines() {
            let Ok(line) = line else { break };
            all.lock().unwrap().push(format!("{tag}{line}"));
            run.lock().unwrap().push(line.clone());
            let _ = tx.send(line);
        }
    });
}

impl App {
    fn start_inner(&mut self, first: bool) {
        assert!(self.child.is_none(), "server already running");
        let mut cmd = match &self.sh_prefix {
            None => Command::new(env!("CARGO_BIN_EXE_appliance")),
            Some(prefix) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("{prefix}; exec \"$0\" \"$@\""))
                    .arg(env!("CARGO_BIN_EXE_appliance"));
                c
            }
        };
        let mut child = cmd
            .arg("--test")
            .arg("--listen")
            .arg(&self.listen)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .env("APPLIANCE_TEST__BLOCK_INTERVAL_MS", "3600000")
            .env_remove("RUST_LOG")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn appliance");
        self.run_output = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        // stderr lines are logged but not parsed for the listening line.
        let (etx, _erx) = mpsc::channel::<String>();
        spawn_reader(
            child.stdout.take().unwrap(),
            tx,
            self.output.clone(),
            self.run_output.clone(),
            "",
        );
        spawn_reader(
            child.stderr.take().unwrap(),
            etx,
            self.output.clone(),
            self.run_output.clone(),
            "[stderr] ",
        );
        let deadline = Instant::now() + START_TIMEOUT;
        let mut listening = None;
        let (mut ck, mut pk, mut wk) = (None, None, None);
        loop {
            let done =
                listening.is_some() && (!first || (ck.is_some() && pk.is_some() && wk.is_some()));
            if done {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let l = line.trim();
                    if let Some(rest) = l.strip_prefix("appliance listening on http://") {
                        let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                        assert!(
                            l.ends_with("(test mode)"),
                            "listening line does not say test mode: {l}"
                        );
                        listening = Some(addr);
                    } else if let Some(rest) = l.strip_prefix("checkout key: ") {
                        ck = Some(rest.trim().to_string());
                    } else if let Some(rest) = l.strip_prefix("payout key: ") {
                        pk = Some(rest.trim().to_string());
                    } else if let Some(rest) = l.strip_prefix("wallet key: ") {
                        wk = Some(rest.trim().to_string());
                    } else if l.starts_with("created project default") {
                        if let Some(i) = l.find("id=") {
                            let id: String = l[i + 3..]
                                .chars()
                                .take_while(|c| c.is_ascii_hexdigit() || *c == '-')
                                .collect();
                            self.project_id = Some(id);
                        }
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    std::thread::sleep(Duration::from_millis(100));
                    panic!(
                        "appliance did not start ({e:?}); output so far:\n{}",
                        self.output.lock().unwrap().join("\n")
                    );
                }
            }
        }
        // Operator commands need the socket; it is bound just after the listening line.
        let sock = self.data_dir.join("appliance.sock");
        let sock_deadline = Instant::now() + Duration::from_secs(5);
        while !sock.exists() && Instant::now() < sock_deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.child = Some(child);
        self.addr = listening.unwrap();
        self.base_url = format!("http://{}", self.addr);
        if first {
            self.checkout_key = ck.unwrap();
            self.payout_key = pk.unwrap();
            self.wallet_key = wk.unwrap();
        }
    }

    /// Stops the server the hard way (SIGKILL: a crash; nothing answered 2xx may be lost).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the server with SIGTERM (a clean shutdown) and waits for it to exit.
    pub fn stop_graceful(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    panic!("appliance did not exit within 20 s of SIGTERM");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts the server again on the same data dir (not a first start: no tokens expected).
    pub fn start(&mut self) {
        self.start_inner(false);
    }

    /// Crash and start again on the same data dir.
    pub fn restart(&mut self) {
        self.stop();
        self.start();
    }

    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Runs `appliance <args> --data-dir <dir>` and returns (status, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (ExitStatus, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_appliance"))
            .args(args)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .stdin(Stdio::null())
            .output()
            .expect("run appliance cli");
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs a CLI command that must succeed; returns stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let (st, out, err) = self.cli(args);
        assert!(
            st.success(),
            "appliance {args:?} failed ({st}):\nstdout: {out}\nstderr: {err}"
        );
        out
    }

    pub fn data_path(&self, name: &str) -> PathBuf {
        self.data_dir.join(name)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    // ---------- raw HTTP ----------

    /// Sends a request. `body` is sent as JSON when given.
    pub async fn send(
        &self,
        method: Method,
        token: Option<&str>,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut rb = self.client.request(method.clone(), self.url(path));
        if let Some(t) = token {
            rb = rb.header("Authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(b) = body {
            rb = rb
                .header("Content-Type", "application/json")
                .body(serde_json::to_vec(b).unwrap());
        }
        let r = rb
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: transport error {e}"));
        Resp::read(method.to_string(), path.to_string(), r).await
    }

    /// Sends raw bytes with the given content type.
    pub async fn send_raw(
        &self,
        method: Method,
        token: Option<&str>,
        path: &str,
        body: Vec<u8>,
        content_type: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut rb = self.client.request(method.clone(), self.url(path));
        if let Some(t) = token {
            rb = rb.header("Authorization", format!("Bearer {t}"));
        }
        if let Some(ct) = content_type {
            rb = rb.header("Content-Type", ct);
        }
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        let r = rb
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: transport error {e}"));
        Resp::read(method.to_string(), path.to_string(), r).await
    }

    pub async fn get(&self, token: &str, path: &str) -> Resp {
        self.send(Method::GET, Some(token), path, None, &[]).await
    }

    /// `GET` on a new connection (not from the pool).
    pub async fn get_fresh(&self, token: &str, path: &str) -> Resp {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let r = client
            .get(self.url(path))
            .header("Authorization", format!("Bearer {token}"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: transport error {e}"));
        Resp::read("GET".into(), path.to_string(), r).await
    }

    pub async fn post(&self, token: &str, path: &str, body: Value) -> Resp {
        self.send(Method::POST, Some(token), path, Some(&body), &[])
            .await
    }

    pub async fn post_idem(&self, token: &str, path: &str, body: Value, key: &str) -> Resp {
        self.send(
            Method::POST,
            Some(token),
            path,
            Some(&body),
            &[("Idempotency-Key", key)],
        )
        .await
    }

    pub async fn patch(&self, token: &str, path: &str, body: Value) -> Resp {
        self.send(Method::PATCH, Some(token), path, Some(&body), &[])
            .await
    }

    pub async fn delete(&self, token: &str, path: &str) -> Resp {
        self.send(Method::DELETE, Some(token), path, None, &[])
            .await
    }

    /// `POST` with an explicit list of headers (and JSON body).
    pub async fn post_json(
        &self,
        token: &str,
        path: &str,
        body: Value,
        headers: &[(&str, &str)],
    ) -> Resp {
        self.send(Method::POST, Some(token), path, Some(&body), headers)
            .await
    }

    // ---------- merchant flows ----------

    /// `GET /v1/ping` with `token`.
    pub async fn ping(&self, token: &str) -> Value {
        self.get(token, "/v1/ping").await.expect(200)
    }

    /// Creates a customer (201), optionally with a reference id.
    pub async fn create_customer(&self, reference_id: Option<&str>) -> Value {
        let body = match reference_id {
            Some(r) => json!({ "reference_id": r }),
            None => json!({}),
        };
        self.post(&self.wallet_key, "/v1/customers", body)
            .await
            .expect(201)
    }

    /// Creates (201) a wallet for (customer, chain).
    pub async fn create_wallet(&self, customer_id: &str, chain: &str) -> Value {
        self.post(
            &self.wallet_key,
            "/v1/wallets",
            json!({ "customer_id": customer_id, "chain": chain }),
        )
        .await
        .expect(201)
    }

    /// `POST /v1/test/deposits`; returns the raw answer.
    pub async fn test_deposit_resp(
        &self,
        customer_id: &str,
        chain: &str,
        asset: &str,
        decimals: u32,
        amount: &str,
        confirm: Option<bool>,
    ) -> Resp {
        let mut body = json!({
            "customer_id": customer_id,
            "chain": chain,
            "asset": asset,
            "decimals": decimals,
            "amount": amount,
        });
        if let Some(c) = confirm {
            body["confirm"] = json!(c);
        }
        self.post(&self.wallet_key, "/v1/test/deposits", body).await
    }

    /// A simulated deposit that must succeed; returns the Deposit.
    pub async fn test_deposit(
        &self,
        customer_id: &str,
        chain: &str,
        asset: &str,
        decimals: u32,
        amount: &str,
        confirm: Option<bool>,
    ) -> Value {
        self.test_deposit_resp(customer_id, chain, asset, decimals, amount, confirm)
            .await
            .expect_success()
    }

    /// A customer with a wallet on `chain` and a confirmed deposit of `amount`.
    /// Returns (customer, wallet, deposit).
    pub async fn funded_customer(
        &self,
        chain: &str,
        asset: &str,
        decimals: u32,
        amount: &str,
    ) -> (Value, Value, Value) {
        let c = self.create_customer(None).await;
        let cid = c["id"].as_str().unwrap().to_string();
        let w = self.create_wallet(&cid, chain).await;
        let d = self
            .test_deposit(&cid, chain, asset, decimals, amount, None)
            .await;
        assert_eq!(d["status"], "confirmed", "deposit: {d}");
        (c, w, d)
    }

    /// Mines `count` simulated blocks on every chain.
    pub async fn mine(&self, count: u64) -> Value {
        self.post(
            &self.wallet_key,
            "/v1/test/blocks",
            json!({ "count": count }),
        )
        .await
        .expect_success()
    }

    /// Mines enough blocks, in separate calls, for every payout and sweep in flight to settle
    /// (queued -> signing -> submitted -> confirmed needs a block per step plus the asset's
    /// confirmations; polygon needs 128).
    pub async fn settle(&self) {
        self.mine(1).await;
        self.mine(1).await;
        self.mine(1).await;
        self.mine(200).await;
        self.mine(1).await;
    }

    /// `POST /v1/payouts` with a fresh idempotency key and the payout key.
    pub async fn create_payout(&self, body: Value) -> Resp {
        self.post_idem(&self.payout_key, "/v1/payouts", body, &idem())
            .await
    }

    /// `POST /v1/api_keys` with `token`; must succeed; returns the key with `token`. A key
    /// manages only keys of its own kind (DECISIONS.md section 16, amended): when `token` is
    /// one of the first-start `*` keys, the first-start key of the body's `kind` mints it.
    pub async fn create_key(&self, token: &str, body: Value) -> Value {
        let first_start = [&self.wallet_key, &self.payout_key, &self.checkout_key];
        let token = match (
            first_start.contains(&&token.to_string()),
            body["kind"].as_str(),
        ) {
            (true, Some("wallet")) => self.wallet_key.as_str(),
            (true, Some("payout")) => self.payout_key.as_str(),
            (true, Some("checkout")) => self.checkout_key.as_str(),
            _ => token,
        };
        self.post(token, "/v1/api_keys", body)
            .await
            .expect_success()
    }

    /// `appliance key create` (the operator, who alone grants `payouts:approve`); returns
    /// the token it prints.
    pub fn operator_key(&self, kind: &str, scopes: &str) -> String {
        let out = self.cli_ok(&[
            "key",
            "create",
            "--project",
            "default",
            "--kind",
            kind,
            "--scopes",
            scopes,
        ]);
        out.lines()
            .find_map(|l| l.strip_prefix("token: "))
            .unwrap_or_else(|| panic!("no token line in {out}"))
            .trim()
            .to_string()
    }

    /// Events in `sequence` order, oldest first, for a query string such as `type=x`.
    pub async fn events(&self, query: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..50 {
            let mut path = format!("/v1/events?limit=100&{query}");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let page = self.get(&self.wallet_key, &path).await.expect(200);
            out.extend(page["data"].as_array().unwrap().iter().cloned());
            if page["has_more"] == json!(true) {
                cursor = Some(page["next_cursor"].as_str().unwrap().to_string());
            } else {
                break;
            }
        }
        out.sort_by_key(|e| e["sequence"].as_u64().unwrap());
        out
    }

    /// Event types about one resource, in sequence order.
    pub async fn event_types_for(&self, resource_id: &str) -> Vec<String> {
        self.events(&format!("resource_id={resource_id}"))
            .await
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect()
    }

    /// The balance item for (chain, symbol) of a customer (wallet key).
    pub async fn customer_balance(&self, customer_id: &str, chain: &str, symbol: &str) -> Value {
        let b = self
            .get(
                &self.wallet_key,
                &format!("/v1/customers/{customer_id}/balances"),
            )
            .await
            .expect(200);
        find_asset_item(&b["data"], chain, symbol).unwrap_or(Value::Null)
    }

    /// Available atomic balance of a customer as u128 (0 when the asset is not listed).
    pub async fn available(&self, customer_id: &str, chain: &str, symbol: &str) -> u128 {
        let b = self.customer_balance(customer_id, chain, symbol).await;
        if b.is_null() {
            0
        } else {
            atomic(&b["available"])
        }
    }

    /// Locked atomic balance of a customer as u128 (0 when the asset is not listed).
    pub async fn locked(&self, customer_id: &str, chain: &str, symbol: &str) -> u128 {
        let b = self.customer_balance(customer_id, chain, symbol).await;
        if b.is_null() {
            0
        } else {
            atomic(&b["locked"])
        }
    }

    /// The treasury item for (chain, symbol) from `GET /v1/balances`.
    pub async fn treasury(&self, chain: &str, symbol: &str) -> Value {
        let b = self.get(&self.wallet_key, "/v1/balances").await.expect(200);
        assert_eq!(b["object"], "treasury", "{b}");
        find_asset_item(&b["data"], chain, symbol).unwrap_or(Value::Null)
    }

    /// A second project of the same appliance with one key of `kind` (scopes `*`, signing on).
    /// Returns the token.
    pub fn other_project_key(&self, name: &str, mode: &str, kind: &str) -> String {
        let (st, out, err) = self.cli(&["project", "list"]);
        let exists = st.success() && out.contains(name);
        if !exists {
            self.cli_ok(&["project", "create", "--name", name, "--mode", mode]);
        }
        let out = self.cli_ok(&[
            "key",
            "create",
            "--project",
            name,
            "--kind",
            kind,
            "--name",
            "other-key",
            "--scopes",
            "*",
            "--signing-enabled",
        ]);
        let _ = err;
        let tok = if mode == "live" {
            find_live_token(&out)
        } else {
            find_token(&out)
        };
        tok.unwrap_or_else(|| panic!("no token in key create output: {out}"))
    }

    /// Sets project options through the operator CLI (`project set default ...`).
    pub fn project_set(&self, args: &[&str]) {
        let mut a = vec!["project", "set", "default"];
        a.extend_from_slice(args);
        self.cli_ok(&a);
    }

    /// Polls `GET path` until `pred` holds (the simulated chain works on its own thread).
    pub async fn wait_for(&self, token: &str, path: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.get(token, path).await.expect(200);
            if pred(&v) {
                return v;
            }
            if Instant::now() > deadline {
                panic!("condition not reached on {path}; last answer: {v}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Resp {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
    /// Parsed JSON, or `Null` when the body is not JSON.
    pub body: Value,
}

impl Resp {
    async fn read(method: String, path: String, r: reqwest::Response) -> Resp {
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Resp {
            method,
            path,
            status,
            headers,
            text,
            body,
        }
    }

    /// Asserts the status and returns the JSON body.
    #[track_caller]
    pub fn expect(self, status: u16) -> Value {
        assert_eq!(
            self.status, status,
            "{} {}: expected {status}, got {}: {}",
            self.method, self.path, self.status, self.text
        );
        assert!(
            !self.body.is_null(),
            "{} {}: body is not JSON: {:?}",
            self.method,
            self.path,
            self.text
        );
        self.body
    }

    /// Asserts a 2xx status and returns the JSON body.
    #[track_caller]
    pub fn expect_success(self) -> Value {
        assert!(
            (200..300).contains(&self.status),
            "{} {}: expected 2xx, got {}: {}",
            self.method,
            self.path,
            self.status,
            self.text
        );
        self.body
    }

    /// Asserts one of several statuses and returns the JSON body.
    #[track_caller]
    pub fn expect_any(self, statuses: &[u16]) -> Value {
        assert!(
            statuses.contains(&self.status),
            "{} {}: expected one of {statuses:?}, got {}: {}",
            self.method,
            self.path,
            self.status,
            self.text
        );
        self.body
    }

    /// Asserts the SPEC section 7 error envelope with `status` and `code`; returns the body.
    #[track_caller]
    pub fn expect_error(&self, status: u16, code: &str) -> &Value {
        assert_eq!(
            self.status, status,
            "{} {}: expected {status} {code}, got {}: {}",
            self.method, self.path, self.status, self.text
        );
        assert_envelope(&self.body, &format!("{} {}", self.method, self.path));
        assert_eq!(
            self.body["code"], code,
            "{} {}: wrong code: {}",
            self.method, self.path, self.text
        );
        if let Some(t) = type_for_status(status) {
            assert_eq!(
                self.body["type"], t,
                "{} {}: wrong type: {}",
                self.method, self.path, self.text
            );
        }
        &self.body
    }

    /// As [`Resp::expect_error`], and `param` must name the field.
    #[track_caller]
    pub fn expect_error_param(&self, status: u16, code: &str, param: &str) -> &Value {
        self.expect_error(status, code);
        assert_eq!(
            self.body["param"], param,
            "{} {}: wrong param: {}",
            self.method, self.path, self.text
        );
        &self.body
    }

    /// A 4xx with a well-formed envelope, whatever the code.
    #[track_caller]
    pub fn expect_client_error(&self, status: u16) -> &Value {
        assert_eq!(
            self.status, status,
            "{} {}: expected {status}, got {}: {}",
            self.method, self.path, self.status, self.text
        );
        assert_envelope(&self.body, &format!("{} {}", self.method, self.path));
        if let Some(t) = type_for_status(status) {
            assert_eq!(self.body["type"], t, "{}", self.text);
        }
        &self.body
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap_or("").to_string())
    }
}

/// The `type` SPEC section 7 assigns to an HTTP status, where it is fixed.
pub fn type_for_status(status: u16) -> Option<&'static str> {
    match status {
        400 | 402 | 404 | 422 => Some("invalid_request_error"),
        401 | 403 => Some("authentication_error"),
        409 => Some("idempotency_error"),
        429 => Some("rate_limit_error"),
        503 => Some("api_error"),
        _ => None,
    }
}

/// `{error, code, type, message, param?, request_id}` with `error == code`.
#[track_caller]
pub fn assert_envelope(body: &Value, ctx: &str) {
    assert!(
        body.is_object(),
        "{ctx}: error body is not a JSON object: {body}"
    );
    let code = body["code"].as_str();
    assert!(
        code.is_some_and(|c| !c.is_empty()),
        "{ctx}: no code: {body}"
    );
    assert_eq!(body["error"], body["code"], "{ctx}: error != code: {body}");
    assert!(
        body["type"].as_str().is_some_and(|t| !t.is_empty()),
        "{ctx}: no type: {body}"
    );
    assert!(
        body["message"].as_str().is_some_and(|t| !t.is_empty()),
        "{ctx}: no message: {body}"
    );
    assert!(
        body["request_id"].as_str().is_some_and(|t| !t.is_empty()),
        "{ctx}: no request_id: {body}"
    );
    if let Some(p) = body.get("param") {
        assert!(
            p.is_null() || p.is_string(),
            "{ctx}: param not a string: {body}"
        );
    }
}

/// Parses an atomic amount string; panics unless it is an integer string.
#[track_caller]
pub fn atomic(v: &Value) -> u128 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("amount is not a string: {v}"));
    assert!(
        !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()),
        "amount is not an atomic integer string: {s:?}"
    );
    s.parse().unwrap()
}

/// Parses a signed integer amount string (treasury `surplus` can be negative).
#[track_caller]
pub fn signed_atomic(v: &Value) -> i128 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("amount is not a string: {v}"));
    s.parse()
        .unwrap_or_else(|_| panic!("amount is not an integer string: {s:?}"))
}

/// Asserts `obj[field]` is an atomic amount string equal to `atomic_value`, and its
/// `field_decimal` twin equals `decimal`.
#[track_caller]
pub fn assert_amount(obj: &Value, field: &str, atomic_value: &str, decimal: &str) {
    assert_eq!(obj[field], json!(atomic_value), "{field} in {obj}");
    let twin = format!("{field}_decimal");
    assert!(
        obj[&twin].is_string(),
        "{twin} missing or not a string in {obj}"
    );
    assert!(
        decimal_eq(obj[&twin].as_str().unwrap(), decimal),
        "{twin}: expected {decimal}, got {} in {obj}",
        obj[&twin]
    );
}

/// Compares decimal strings numerically ("1.5" == "1.500000").
pub fn decimal_eq(a: &str, b: &str) -> bool {
    fn norm(s: &str) -> String {
        let (neg, s) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (i, f) = s.split_once('.').unwrap_or((s, ""));
        let i = i.trim_start_matches('0');
        let f = f.trim_end_matches('0');
        let i = if i.is_empty() { "0" } else { i };
        let r = if f.is_empty() {
            i.to_string()
        } else {
            format!("{i}.{f}")
        };
        if neg && r != "0" {
            format!("-{r}")
        } else {
            r
        }
    }
    norm(a) == norm(b)
}

/// Finds the item of a balance or treasury list for (chain, symbol). `asset` may be an
/// embedded Asset object, or a symbol string with `chain` on the item.
pub fn find_asset_item(data: &Value, chain: &str, symbol: &str) -> Option<Value> {
    data.as_array()?
        .iter()
        .find(|it| {
            let a = &it["asset"];
            if a.is_object() {
                a["symbol"] == symbol
                    && (a["chain"] == chain || (a["chain"].is_null() && it["chain"] == chain))
            } else {
                a == symbol && (it["chain"] == chain || it["chain"].is_null())
            }
        })
        .cloned()
}

/// RFC 3339 UTC timestamp.
#[track_caller]
pub fn assert_timestamp(v: &Value) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("timestamp is not a string: {v}"));
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("not RFC 3339: {s}: {e}"));
    assert_eq!(t.offset().local_minus_utc(), 0, "not UTC: {s}");
}

#[track_caller]
pub fn assert_uuid(v: &Value) {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("id is not a string: {v}"));
    uuid::Uuid::parse_str(s).unwrap_or_else(|e| panic!("not a uuid: {s}: {e}"));
}

/// `{object:list, data[], has_more, next_cursor}`.
#[track_caller]
pub fn assert_list(v: &Value) -> &Vec<Value> {
    assert_eq!(v["object"], "list", "{v}");
    assert!(v["has_more"].is_boolean(), "has_more: {v}");
    assert!(
        v.get("next_cursor").is_some(),
        "next_cursor missing (must be present, null at the end): {v}"
    );
    if v["has_more"] == json!(false) {
        assert!(
            v["next_cursor"].is_null(),
            "next_cursor must be null at the end: {v}"
        );
    } else {
        assert!(v["next_cursor"].is_string(), "{v}");
    }
    v["data"].as_array().expect("data[]")
}

/// Ids of a list's items.
pub fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect()
}

/// A lowercase EVM address that is not custodied anywhere.
pub fn external_address(n: u8) -> String {
    format!("0x{}", format!("{n:02x}").repeat(20))
}

/// Address whose last four hex digits are `fa11`: the simulated chain reverts payouts to it.
pub fn reverting_address() -> String {
    format!("0x{}fa11", "ab".repeat(18))
}

pub fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_string()
}

#[allow(dead_code)]
pub fn path_exists(p: &Path) -> bool {
    p.exists()
}

/// Runs the futures concurrently on this task (no extra dependency).
pub async fn join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.unwrap()).collect()
}
