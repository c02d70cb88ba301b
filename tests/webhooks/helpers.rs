//! Harness of the webhook tests: the real `appliance --test` binary on port 0 with a temp data
//! dir, a real HTTP receiver inside the test, and a merchant-style client.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{json, Value};
use sha2::Sha256;

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How a server is started.
#[derive(Clone)]
pub struct Opts {
    /// `webhooks.allow_private_targets` (the receiver lives on 127.0.0.1).
    pub allow_private: bool,
    /// `webhooks.retry_schedule_s` as a comma-separated list.
    pub retry_schedule: Option<String>,
    pub env: Vec<(String, String)>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            allow_private: true,
            retry_schedule: None,
            env: Vec::new(),
        }
    }
}

impl Opts {
    pub fn retries(s: &str) -> Opts {
        Opts {
            retry_schedule: Some(s.to_string()),
            ..Opts::default()
        }
    }
}

/// A running appliance.
pub struct App {
    pub base_url: String,
    pub wallet_key: String,
    pub payout_key: String,
    pub checkout_key: String,
    pub data_dir: PathBuf,
    pub client: reqwest::Client,
    pub output: Arc<Mutex<Vec<String>>>,
    opts: Opts,
    listen: String,
    child: Option<Child>,
    _tmp: tempfile::TempDir,
}

pub async fn spawn_app() -> App {
    spawn_with(Opts::default()).await
}

pub async fn spawn_with(opts: Opts) -> App {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut app = App {
        base_url: String::new(),
        wallet_key: String::new(),
        payout_key: String::new(),
        checkout_key: String::new(),
        data_dir: tmp.path().join("data"),
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
        output: Arc::new(Mutex::new(Vec::new())),
        opts,
        listen: "127.0.0.1:0".into(),
        child: None,
        _tmp: tmp,
    };
    app.start_inner(true);
    app
}

impl App {
    fn start_inner(&mut self, first: bool) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_appliance"));
        cmd.arg("--test")
            .arg("--listen")
            .arg(&self.listen)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .env("APPLIANCE_TEST__BLOCK_INTERVAL_MS", "3600000")
            .env(
                "APPLIANCE_WEBHOOKS__ALLOW_PRIVATE_TARGETS",
                self.opts.allow_private.to_string(),
            )
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(s) = &self.opts.retry_schedule {
            cmd.env("APPLIANCE_WEBHOOKS__RETRY_SCHEDULE_S", s);
        }
        for (k, v) in &self.opts.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn appliance");
        let (tx, rx) = mpsc::channel::<String>();
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
        let deadline = Instant::now() + START_TIMEOUT;
        let mut listening = None;
        let (mut ck, mut pk, mut wk) = (None, None, None);
        while listening.is_none() || (first && (ck.is_none() || pk.is_none() || wk.is_none())) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match rx.recv_timeout(left) {
                Ok(l) => l,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "appliance did not start ({e:?}):\n{}",
                        self.output.lock().unwrap().join("\n")
                    );
                }
            };
            let l = line.trim();
            if let Some(rest) = l.strip_prefix("appliance listening on http://") {
                listening = rest.split_whitespace().next().map(str::to_string);
            } else if let Some(k) = l.strip_prefix("checkout key: ") {
                ck = Some(k.trim().to_string());
            } else if let Some(k) = l.strip_prefix("payout key: ") {
                pk = Some(k.trim().to_string());
            } else if let Some(k) = l.strip_prefix("wallet key: ") {
                wk = Some(k.trim().to_string());
            }
        }
        let addr = listening.unwrap();
        self.base_url = format!("http://{addr}");
        if first {
            self.checkout_key = ck.unwrap();
            self.payout_key = pk.unwrap();
            self.wallet_key = wk.unwrap();
        }
        self.child = Some(child);
    }

    /// `kill -9`: nothing answered 2xx may be lost.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again on the same data dir (a new port), with `opts`.
    pub fn start_with(&mut self, opts: Opts) {
        assert!(self.child.is_none(), "still running");
        self.opts = opts;
        self.start_inner(false);
    }

    pub fn restart(&mut self) {
        self.kill();
        let o = self.opts.clone();
        self.start_with(o);
    }

    pub fn log(&self) -> String {
        self.output.lock().unwrap().join("\n")
    }

    pub async fn send(
        &self,
        method: Method,
        token: &str,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Resp {
        let mut rb = self
            .client
            .request(method.clone(), format!("{}{}", self.base_url, path))
            .header("Authorization", format!("Bearer {token}"));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(b) = body {
            rb = rb
                .header("Content-Type", "application/json")
                .body(serde_json::to_vec(&b).unwrap());
        }
        let r = rb
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap_or_default();
        Resp {
            what: format!("{method} {path}"),
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            text,
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(Method::GET, &self.wallet_key, path, None, &[])
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.send(Method::POST, &self.wallet_key, path, Some(body), &[])
            .await
    }

    pub async fn patch(&self, path: &str, body: Value) -> Resp {
        self.send(Method::PATCH, &self.wallet_key, path, Some(body), &[])
            .await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.send(Method::DELETE, &self.wallet_key, path, None, &[])
            .await
    }

    /// Registers an endpoint (201); returns it with `secret`.
    pub async fn create_endpoint(&self, url: &str, extra: Value) -> Value {
        let mut body = json!({ "url": url });
        if let Value::Object(m) = extra {
            for (k, v) in m {
                body[k] = v;
            }
        }
        self.post("/v1/webhooks", body).await.expect(201)
    }

    /// Creates a customer: one `customer.created` event. Returns the event's resource id.
    pub async fn customer(&self) -> String {
        let c = self.post("/v1/customers", json!({})).await.expect(201);
        c["id"].as_str().unwrap().to_string()
    }

    /// Events of a resource, oldest first.
    pub async fn events_of(&self, resource_id: &str) -> Vec<Value> {
        let l = self
            .get(&format!(
                "/v1/events?order=asc&limit=100&resource_id={resource_id}"
            ))
            .await
            .expect(200);
        l["data"].as_array().unwrap().clone()
    }

    /// Deliveries matching a query, newest first (one page of 100).
    pub async fn deliveries(&self, query: &str) -> Vec<Value> {
        let l = self
            .get(&format!("/v1/webhook_deliveries?limit=100&{query}"))
            .await
            .expect(200);
        l["data"].as_array().unwrap().clone()
    }

    /// Polls deliveries matching `query` until `pred` holds.
    pub async fn wait_deliveries(
        &self,
        query: &str,
        within: Duration,
        pred: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let d = self.deliveries(query).await;
            if pred(&d) {
                return d;
            }
            if Instant::now() > deadline {
                panic!("deliveries for {query:?} never matched; last: {d:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Polls an endpoint until `pred` holds.
    pub async fn wait_endpoint(
        &self,
        id: &str,
        within: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let e = self.get(&format!("/v1/webhooks/{id}")).await.expect(200);
            if pred(&e) {
                return e;
            }
            if Instant::now() > deadline {
                panic!("endpoint {id} never matched; last: {e}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Debug)]
pub struct Resp {
    pub what: String,
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    pub body: Value,
}

impl Resp {
    #[track_caller]
    pub fn expect(self, status: u16) -> Value {
        assert_eq!(
            self.status, status,
            "{}: expected {status}, got {}: {}",
            self.what, self.status, self.text
        );
        self.body
    }

    /// The error envelope with `status` and `code`.
    #[track_caller]
    pub fn expect_error(self, status: u16, code: &str) -> Value {
        assert_eq!(
            (self.status, self.body["code"].as_str()),
            (status, Some(code)),
            "{}: {}",
            self.what,
            self.text
        );
        assert_eq!(self.body["error"], self.body["code"], "{}", self.text);
        self.body
    }
}

pub fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_string()
}

// ---------- the receiver ----------

/// How the receiver answers on one path.
#[derive(Clone, Debug)]
pub struct Behavior {
    pub status: u16,
    pub delay_ms: u64,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            status: 200,
            delay_ms: 0,
        }
    }
}

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Hit {
    pub path: String,
    pub at: Instant,
    pub signature: Option<String>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    pub json: Value,
    /// What the receiver answered.
    pub answered: u16,
}

#[derive(Default)]
struct RecvState {
    hits: Mutex<Vec<Hit>>,
    behavior: Mutex<HashMap<String, Behavior>>,
    concurrent: Mutex<HashMap<String, usize>>,
    max_concurrent: Mutex<HashMap<String, usize>>,
    total: AtomicUsize,
}

/// A real HTTP receiver on 127.0.0.1, answering per path.
#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<RecvState>,
}

pub async fn receiver() -> Receiver {
    let state = Arc::new(RecvState::default());
    let app = axum::Router::new()
        .fallback(receive)
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Receiver { addr, state }
}

async fn receive(
    State(st): State<Arc<RecvState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let path = uri.path().to_string();
    let b = st
        .behavior
        .lock()
        .unwrap()
        .get(&path)
        .cloned()
        .unwrap_or_default();
    {
        let mut c = st.concurrent.lock().unwrap();
        let n = c.entry(path.clone()).or_insert(0);
        *n += 1;
        let mut m = st.max_concurrent.lock().unwrap();
        let mx = m.entry(path.clone()).or_insert(0);
        *mx = (*mx).max(*n);
    }
    if b.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(b.delay_ms)).await;
    }
    let hit = Hit {
        path: path.clone(),
        at: Instant::now(),
        signature: headers
            .get("service-signature")
            .map(|v| v.to_str().unwrap().to_string()),
        content_type: headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string()),
        json: serde_json::from_slice(&body).unwrap_or(Value::Null),
        body: body.to_vec(),
        answered: b.status,
    };
    st.hits.lock().unwrap().push(hit);
    st.total.fetch_add(1, Ordering::SeqCst);
    *st.concurrent.lock().unwrap().get_mut(&path).unwrap() -= 1;
    (
        StatusCode::from_u16(b.status).unwrap(),
        if b.status < 300 { "ok" } else { "nope" },
    )
}

impl Receiver {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn set(&self, path: &str, b: Behavior) {
        self.state
            .behavior
            .lock()
            .unwrap()
            .insert(path.to_string(), b);
    }

    pub fn status(&self, path: &str, status: u16) {
        self.set(
            path,
            Behavior {
                status,
                ..Behavior::default()
            },
        );
    }

    pub fn hits(&self, path: &str) -> Vec<Hit> {
        self.state
            .hits
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.path == path)
            .cloned()
            .collect()
    }

    pub fn max_concurrent(&self, path: &str) -> usize {
        self.state
            .max_concurrent
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Waits until `path` got at least `n` requests.
    pub async fn wait(&self, path: &str, n: usize, within: Duration) -> Vec<Hit> {
        let deadline = Instant::now() + within;
        loop {
            let h = self.hits(path);
            if h.len() >= n {
                return h;
            }
            if Instant::now() > deadline {
                panic!("{path}: {} of {n} requests arrived", h.len());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

// ---------- signatures ----------

/// A merchant's own check of `Service-Signature` (DECISIONS.md section 7), written from the
/// documentation, not from the appliance's code.
pub fn verify_signature(header: &str, body: &[u8], secret: &str) -> bool {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = Some(v.to_string()),
            Some(("v1", v)) => v1.push(v.to_string()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    if (now - t.parse::<i64>().unwrap()).abs() > 300 {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    let want = hex::encode(mac.finalize().into_bytes());
    v1.contains(&want)
}

/// Stripe's own library (`stripe.WebhookSignature.verify_header` from the `stripe` PyPI
/// package) run on the header and the raw body. Panics when Python or the package is missing:
/// install it with `pip install stripe`.
pub fn stripe_verifies(header: &str, body: &[u8], secret: &str) -> bool {
    let script = r#"
import sys
try:
    import stripe
except ImportError:
    print("MISSING: the stripe package is not installed (pip install stripe)")
    sys.exit(3)
payload = sys.stdin.buffer.read()
header, secret = sys.argv[1], sys.argv[2]
try:
    stripe.WebhookSignature.verify_header(payload, header, secret, 300)
    print("VALID")
except stripe.SignatureVerificationError as e:
    print("INVALID", e)
"#;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(header)
        .arg(secret)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 must be installed to run Stripe's verifier");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(body).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code() != Some(3),
        "Stripe's Python library is required: pip install stripe ({stdout})"
    );
    assert!(
        out.status.success(),
        "python3 failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.trim() == "VALID"
}

impl App {
    /// Runs an operator command against this data dir; returns stdout (must succeed).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_appliance"))
            .args(args)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .stdin(Stdio::null())
            .output()
            .expect("run appliance");
        assert!(
            out.status.success(),
            "appliance {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A wallet key (scopes `*`) of a second test project.
    pub fn other_project_key(&self) -> String {
        self.cli(&["project", "create", "--name", "other", "--mode", "test"]);
        let out = self.cli(&[
            "key",
            "create",
            "--project",
            "other",
            "--kind",
            "wallet",
            "--name",
            "o",
            "--scopes",
            "*",
        ]);
        let i = out.find("apktest").expect("a token in the output");
        out[i..i + 71].to_string()
    }
}
