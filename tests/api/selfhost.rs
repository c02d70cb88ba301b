//! The self-hoster's path: safe restore, redacted node URLs, `init` that validates
//! first, strict configuration, early start-up errors that leave the store clean, plain HTTP
//! only on loopback, chains paused until their node answers, permission errors that name the
//! path, a CLI that survives a closed stdout, and the contract fixes found on the way. Every
//! test runs the real binary as an operator would.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::*;

const PASSPHRASE: &str = "correct horse battery staple";
const SECRET: &str = "SECRETKEY0123456789";

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_appliance"));
    c.env_remove("RUST_LOG")
        .env_remove("APPLIANCE_PASSPHRASE")
        .stdin(Stdio::null());
    c
}

/// Runs the binary to completion with `args` and extra environment.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    bin()
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run appliance")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn write_config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("config.toml");
    std::fs::write(&p, body).unwrap();
    p
}

/// `appliance verify` on `data`: succeeds, and the store opened without a repair (the
/// previous process closed it cleanly). Full repairs are forced by `quick_repair = false`.
fn assert_opens_clean(data: &Path) {
    let o = run(
        &["verify", "--data-dir", data.to_str().unwrap()],
        &[("APPLIANCE_STORAGE__QUICK_REPAIR", "false")],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "verify failed:\n{out}\n{err}");
    assert!(
        !err.contains("repairing"),
        "the store needed a repair after an early exit:\n{err}"
    );
}

fn init(data: &Path) {
    let o = run(
        &["init", "--data-dir", data.to_str().unwrap()],
        &[("APPLIANCE_PASSPHRASE", PASSPHRASE)],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "init failed:\n{out}\n{err}");
}

// ------------------------------------------------------------------- a live-mode server

/// `appliance serve` run by the test (live mode), with its output collected.
struct Live {
    child: Child,
    base: String,
    output: Arc<Mutex<Vec<String>>>,
    client: reqwest::Client,
}

impl Live {
    /// Starts `serve --config cfg --data-dir data` and waits for the listening line.
    fn start(cfg: &Path, data: &Path, env: &[(&str, &str)]) -> Live {
        let mut child = bin()
            .args(["serve", "--config"])
            .arg(cfg)
            .arg("--data-dir")
            .arg(data)
            .env("APPLIANCE_PASSPHRASE", PASSPHRASE)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn appliance serve");
        let output = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        for (r, tag) in [
            (
                Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
                "",
            ),
            (Box::new(child.stderr.take().unwrap()), "[stderr] "),
        ] {
            let out = output.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(r).lines() {
                    let Ok(line) = line else { break };
                    out.lock().unwrap().push(format!("{tag}{line}"));
                    let _ = tx.send(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) => {
                    if let Some(rest) = l.trim().strip_prefix("appliance listening on http://") {
                        let addr = rest.split_whitespace().next().unwrap().to_string();
                        return Live {
                            child,
                            base: format!("http://{addr}"),
                            output,
                            client: reqwest::Client::new(),
                        };
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "serve did not start:\n{}",
                        output.lock().unwrap().join("\n")
                    );
                }
            }
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value, String) {
        let mut rb = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(b) = body {
            rb = rb.json(&b).header("Idempotency-Key", idem());
        }
        let r = rb.send().await.expect("request");
        let st = r.status().as_u16();
        let t = r.text().await.unwrap();
        (st, serde_json::from_str(&t).unwrap_or(Value::Null), t)
    }

    fn all_output(&self) -> String {
        self.output.lock().unwrap().join("\n")
    }

    fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(100));
        self.all_output()
    }
}

/// A live project `shop` and a wallet key for it, through the operator socket.
fn live_wallet_key(data: &Path) -> String {
    let d = data.to_str().unwrap();
    let o = run(
        &[
            "project",
            "create",
            "--name",
            "shop",
            "--mode",
            "live",
            "--data-dir",
            d,
        ],
        &[],
    );
    assert!(o.status.success(), "{:?}", text(&o));
    let o = run(
        &[
            "key",
            "create",
            "--project",
            "shop",
            "--kind",
            "wallet",
            "--data-dir",
            d,
        ],
        &[],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    find_live_token(&out).unwrap_or_else(|| panic!("no live token in {out}"))
}

// --------------------------------------------------------------- a minimal JSON-RPC node

/// An Ethereum JSON-RPC node good enough for the watcher (chain id 1, one empty block), on
/// any URL path (hosted providers put the account key there). Every answer closes its
/// connection, so dropping the node makes the next call fail with "connection refused".
struct FakeNode {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl FakeNode {
    async fn start() -> FakeNode {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let body = loop {
                        let Ok(n) = s.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        let Some(h) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..h]).to_ascii_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if buf.len() >= h + 4 + len {
                            break buf[h + 4..h + 4 + len].to_vec();
                        }
                    };
                    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let answer = |r: &Value| {
                        let result = match r["method"].as_str().unwrap_or("") {
                            "eth_chainId" => json!("0x1"),
                            "eth_blockNumber" => json!("0x1"),
                            "eth_getBlockByNumber" => json!({
                                "number": "0x1",
                                "hash": format!("0x{}", "11".repeat(32)),
                                "parentHash": format!("0x{}", "22".repeat(32)),
                                "timestamp": "0x5f5e100",
                                "transactions": [],
                            }),
                            "eth_getLogs" => json!([]),
                            "eth_getBalance" | "eth_getTransactionCount" => json!("0x0"),
                            "eth_getCode" | "eth_call" => json!("0x"),
                            _ => {
                                return json!({"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32601, "message": "not here"}})
                            }
                        };
                        json!({"jsonrpc": "2.0", "id": r["id"], "result": result})
                    };
                    let out = match &req {
                        Value::Array(a) => Value::Array(a.iter().map(answer).collect()),
                        r => answer(r),
                    };
                    let b = serde_json::to_vec(&out).unwrap();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        b.len()
                    );
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(&b).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        FakeNode { port, task }
    }

    fn stop(self) {
        self.task.abort();
    }
}

async fn chain_item(live: &Live, token: &str, chain: &str) -> Value {
    let (st, body, t) = live
        .call(reqwest::Method::GET, token, "/v1/chains", None)
        .await;
    assert_eq!(st, 200, "{t}");
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["chain"] == chain)
        .cloned()
        .unwrap_or_else(|| panic!("{chain} not in {t}"))
}

// ------------------------------------------------------------------------------- tests

/// Point 2 and 14: the node's URL (with an account key in its path) never appears in
/// answers or logs; a balance read with the node down is 503 `chain_unavailable_now`.
#[tokio::test]
async fn node_url_is_redacted_and_a_chain_read_with_the_node_down_is_503() {
    let node = FakeNode::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    init(&data);
    let cfg = write_config(
        tmp.path(),
        &format!(
            "listen = \"127.0.0.1:0\"\n[chains.ethereum]\nrpc_url = \"http://127.0.0.1:{}/v3/{SECRET}\"\npoll_interval_ms = 100\n",
            node.port
        ),
    );
    let live = Live::start(&cfg, &data, &[]);
    let key = live_wallet_key(&data);
    // The watcher reaches the node: the chain turns live.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = chain_item(&live, &key, "ethereum").await;
        if c["status"] == "live" {
            assert_eq!(c["deposits_enabled"], true, "{c}");
            break;
        }
        assert!(Instant::now() < deadline, "ethereum never went live: {c}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (st, cust, t) = live
        .call(
            reqwest::Method::POST,
            &key,
            "/v1/customers",
            Some(json!({})),
        )
        .await;
    assert_eq!(st, 201, "{t}");
    let (st, w, t) = live
        .call(
            reqwest::Method::POST,
            &key,
            "/v1/wallets",
            Some(json!({"customer_id": cust["id"], "chain": "ethereum"})),
        )
        .await;
    assert_eq!(st, 201, "{t}");
    let wid = w["id"].as_str().unwrap().to_string();
    // With the node up, an on-chain read keeps the ledger fields (SPEC.md section 2).
    let (st, b, t) = live
        .call(
            reqwest::Method::GET,
            &key,
            &format!("/v1/wallets/{wid}/balances?source=chain"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{t}");
    for item in b["data"].as_array().unwrap() {
        for f in [
            "available",
            "available_decimal",
            "locked",
            "locked_decimal",
            "total",
            "total_decimal",
            "onchain",
            "onchain_decimal",
            "drift",
        ] {
            assert!(item[f].is_string(), "{f} missing in {item}");
        }
    }

    node.stop();
    let (st, b, t) = live
        .call(
            reqwest::Method::GET,
            &key,
            &format!("/v1/wallets/{wid}/balances?source=both"),
            None,
        )
        .await;
    assert_eq!(st, 503, "{t}");
    assert_eq!(b["code"], "chain_unavailable_now", "{t}");
    assert!(!t.contains(SECRET), "the node URL leaked: {t}");
    // The watcher notices: still live (it was reached), with one plain sentence.
    let deadline = Instant::now() + Duration::from_secs(30);
    let c = loop {
        let c = chain_item(&live, &key, "ethereum").await;
        if c["status_note"] != "" {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "no status_note after the node went away: {c}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(c["status"], "live", "{c}");
    assert_eq!(
        c["status_note"], "Node calls are failing; retrying with back-off.",
        "{c}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = live.stop();
    assert!(
        !out.contains(SECRET),
        "the node URL leaked into the output:\n{out}"
    );
    // The failures were logged, with the node named by scheme and host only.
    assert!(
        out.contains(&format!("http://127.0.0.1:{}", node_port_of(&out))),
        "no redacted node URL in the logs:\n{out}"
    );
}

/// The port of the first `http://127.0.0.1:PORT` in `s` (the fake node's, in the logs).
fn node_port_of(s: &str) -> String {
    s.split("http://127.0.0.1:")
        .skip(1)
        .map(|r| {
            r.chars()
                .take_while(|c| c.is_ascii_digit())
                .collect::<String>()
        })
        .find(|p| !p.is_empty())
        .unwrap_or_else(|| "none".into())
}

/// Point 7: an unreachable node leaves its chain `paused` ("Connecting to the node."), no
/// address is issued (422 `chain_unavailable`) and `deposits_enabled` is false.
#[tokio::test]
async fn unreachable_node_pauses_its_chain_until_first_reached() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    init(&data);
    // Port 1 on loopback: connection refused.
    let cfg = write_config(
        tmp.path(),
        &format!("listen = \"127.0.0.1:0\"\n[chains.ethereum]\nrpc_url = \"http://127.0.0.1:1/v3/{SECRET}\"\npoll_interval_ms = 100\n"),
    );
    let live = Live::start(&cfg, &data, &[]);
    let key = live_wallet_key(&data);
    // Give the watcher several failed rounds.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let c = chain_item(&live, &key, "ethereum").await;
    assert_eq!(c["status"], "paused", "{c}");
    assert_eq!(c["status_note"], "Connecting to the node.", "{c}");
    assert_eq!(c["deposits_enabled"], false, "{c}");
    let (st, cust, t) = live
        .call(
            reqwest::Method::POST,
            &key,
            "/v1/customers",
            Some(json!({})),
        )
        .await;
    assert_eq!(st, 201, "{t}");
    let (st, b, t) = live
        .call(
            reqwest::Method::POST,
            &key,
            "/v1/wallets",
            Some(json!({"customer_id": cust["id"], "chain": "ethereum"})),
        )
        .await;
    assert_eq!(st, 422, "{t}");
    assert_eq!(b["code"], "chain_unavailable", "{t}");
    assert!(!t.contains(SECRET), "{t}");
    let out = live.stop();
    assert!(
        out.contains("watcher step failed"),
        "no WARN about the node:\n{out}"
    );
    assert!(!out.contains(SECRET), "the node URL leaked:\n{out}");
}

/// Point 1: restore refuses a missing path (and does not create it), an incomplete or
/// tampered backup, a backup without the seed into a data dir with one, and a test-mode
/// backup into a live data dir; the data dir is untouched each time.
#[tokio::test]
async fn restore_refuses_anything_but_a_complete_verified_backup() {
    // The data dir gets a seed below; test mode then needs its passphrase to start.
    let mut app = spawn_app_with("127.0.0.1:0", &[("APPLIANCE_PASSPHRASE", PASSPHRASE)]).await;
    let d = app.data_dir.display().to_string();
    let backup = app.data_path("../bk");
    let bk = backup.display().to_string();
    app.cli_ok(&["backup", "--out", &bk]);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(backup.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["sha256"]["pepper"].is_string(), "{manifest}");
    app.stop_graceful();

    let typo = app.data_path("../typo-path");
    let (st, out, err) = app.cli(&["restore", "--from", typo.to_str().unwrap()]);
    assert!(
        !st.success(),
        "restore from a missing path succeeded: {out}"
    );
    assert!(
        err.contains("typo-path") && err.contains("not a backup"),
        "{err}"
    );
    assert!(!typo.exists(), "restore created its source");

    // Incomplete: the pepper is missing.
    let partial = app.data_path("../partial");
    copy_dir(&backup, &partial);
    std::fs::remove_file(partial.join("pepper")).unwrap();
    let (st, _, err) = app.cli(&["restore", "--from", partial.to_str().unwrap()]);
    assert!(!st.success() && err.contains("pepper is missing"), "{err}");

    // Tampered: the pepper differs from its checksum.
    let tampered = app.data_path("../tampered");
    copy_dir(&backup, &tampered);
    std::fs::write(tampered.join("pepper"), "00".repeat(32)).unwrap();
    let (st, _, err) = app.cli(&["restore", "--from", tampered.to_str().unwrap()]);
    assert!(!st.success() && err.contains("checksum"), "{err}");
    assert!(
        !app.data_path("pepper.restoring").exists(),
        "a refused restore left a staged file"
    );

    // A pepper of the wrong length, its checksum recomputed, is refused
    // before anything is replaced (the server would not start on it).
    for bad in ["00".repeat(31), "zz".repeat(32), String::new()] {
        let short = app.data_path("../short-pepper");
        let _ = std::fs::remove_dir_all(&short);
        copy_dir(&backup, &short);
        std::fs::write(short.join("pepper"), &bad).unwrap();
        let mut m = manifest.clone();
        m["sha256"]["pepper"] = json!(sha256_hex(bad.as_bytes()));
        std::fs::write(short.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
        let (st, out, err) = app.cli(&["restore", "--from", short.to_str().unwrap()]);
        assert!(!st.success(), "a bad pepper {bad:?} was restored: {out}");
        assert!(err.contains("is not a pepper"), "{err}");
    }

    // Still the same data dir: the keys validate and the project is there.
    app.start();
    app.ping(&app.wallet_key).await;
    app.stop_graceful();

    // A data dir with a seed (initialised for live mode) refuses a backup without one.
    init(&app.data_dir);
    let (st, _, err) = app.cli(&["restore", "--from", &bk]);
    assert!(
        !st.success(),
        "a backup without seed.enc replaced a live seed"
    );
    assert!(err.contains("seed.enc"), "{err}");

    // A test-mode backup that carries a seed is still refused by a live data dir.
    let with_seed = app.data_path("../with-seed");
    copy_dir(&backup, &with_seed);
    std::fs::copy(app.data_path("seed.enc"), with_seed.join("seed.enc")).unwrap();
    let mut m = manifest.clone();
    m["files"].as_array_mut().unwrap().push(json!("seed.enc"));
    m["sha256"]["seed.enc"] = json!(sha256_hex(
        &std::fs::read(with_seed.join("seed.enc")).unwrap()
    ));
    std::fs::write(
        with_seed.join("manifest.json"),
        serde_json::to_vec(&m).unwrap(),
    )
    .unwrap();
    let (st, _, err) = app.cli(&["restore", "--from", with_seed.to_str().unwrap()]);
    assert!(
        !st.success(),
        "a test-mode backup went into a live data dir"
    );
    assert!(err.contains("test-mode backup"), "{err}");

    // Nothing was moved aside by any refusal.
    let aside: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("before-restore") || n.contains("restoring"))
        .collect();
    assert!(
        aside.is_empty(),
        "refused restores touched the data dir: {aside:?}"
    );
    app.start();
    app.ping(&app.wallet_key).await;
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Point 3: `init` with a short or missing passphrase writes nothing.
#[test]
fn init_validates_before_writing_anything() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let d = data.to_str().unwrap();
    let o = run(
        &["init", "--data-dir", d],
        &[("APPLIANCE_PASSPHRASE", "short")],
    );
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("at least"), "{err}");
    assert!(!data.exists(), "init left a half-made data dir");
    let o = run(&["init", "--data-dir", d], &[]);
    assert!(!o.status.success());
    assert!(!data.exists(), "init without a passphrase left a data dir");
    init(&data);
    for f in ["appliance.redb", "pepper", "seed.enc"] {
        assert!(data.join(f).is_file(), "{f} missing after init");
    }
}

/// An operator command on a mistyped data dir creates nothing and says what is wrong.
#[test]
fn operator_commands_on_a_missing_data_dir_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("typo");
    let d = data.to_str().unwrap();
    for args in [
        vec!["project", "list", "--data-dir", d],
        vec!["key", "list", "--project", "default", "--data-dir", d],
        vec!["verify", "--data-dir", d],
    ] {
        let o = run(&args, &[]);
        let (_, err) = text(&o);
        assert!(
            !o.status.success(),
            "{args:?} succeeded on a missing data dir"
        );
        assert!(err.contains("no appliance store in"), "{args:?}: {err}");
        assert!(!data.exists(), "{args:?} created the mistyped data dir");
    }
}

/// Point 4: unknown keys, tables and `APPLIANCE_*` variables are refused with their path
/// and the closest valid name; a type error is printed once.
#[test]
fn unknown_configuration_keys_are_refused_with_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let d = data.to_str().unwrap();
    let cases = [
        (
            "listen_addr = \"127.0.0.1:0\"\n",
            "unknown key listen_addr",
            "did you mean listen?",
        ),
        (
            "[tsl]\ncert = \"a\"\nkey = \"b\"\n",
            "unknown key tsl",
            "did you mean tls?",
        ),
        (
            "[webhooks]\nallow_private_target = true\n",
            "unknown key webhooks.allow_private_target",
            "did you mean allow_private_targets?",
        ),
        (
            "[signing]\npasphrase_env = \"X\"\n",
            "unknown key signing.pasphrase_env",
            "did you mean passphrase_env?",
        ),
        (
            "[chains.ethereum]\nrpc_url = \"http://127.0.0.1:1\"\npoll_interval = 5\n",
            "unknown key chains.ethereum.poll_interval",
            "did you mean poll_interval_ms?",
        ),
    ];
    for (body, what, hint) in cases {
        let cfg = write_config(tmp.path(), body);
        let o = run(
            &["--test", "--config", cfg.to_str().unwrap(), "--data-dir", d],
            &[],
        );
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{body:?} started: {out}");
        assert!(err.contains(what) && err.contains(hint), "{body:?}: {err}");
        assert!(err.contains("config.toml"), "the file is not named: {err}");
        assert!(
            !data.exists(),
            "{body:?}: a refused config created the data dir"
        );
    }
    // The environment the same way.
    let o = run(
        &["--test", "--data-dir", d],
        &[("APPLIANCE_WEBHOOKS__ALLOW_PRIVATE_TARGET", "true")],
    );
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("APPLIANCE_WEBHOOKS__ALLOW_PRIVATE_TARGET")
            && err.contains("did you mean APPLIANCE_WEBHOOKS__ALLOW_PRIVATE_TARGETS?"),
        "{err}"
    );
    // A type error, once.
    let cfg = write_config(tmp.path(), "listen = 8080\n");
    let o = run(
        &["--test", "--config", cfg.to_str().unwrap(), "--data-dir", d],
        &[],
    );
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("listen"), "{err}");
    assert_eq!(err.matches("invalid type").count(), 1, "{err}");
    // Documented variables are not configuration keys (on an initialised data dir, since
    // operator commands refuse a data dir without a store).
    init(&data);
    let o = run(
        &["project", "list", "--data-dir", d],
        &[("APPLIANCE_LOG", "warn"), ("APPLIANCE_PASSPHRASE", "x")],
    );
    assert!(o.status.success(), "{:?}", text(&o));
}

/// Point 5: a missing TLS file, a port in use, an unknown chain table and a wrong passphrase
/// are refused before the store opens (no store, or one that opens without repair), and
/// nothing claims to be listening.
#[test]
fn early_start_failures_leave_no_store_or_a_clean_one() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let d = data.to_str().unwrap();
    let fail = |args: &[&str], env: &[(&str, &str)], expect: &str| {
        let o = run(args, env);
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{args:?} started:\n{out}");
        assert!(
            err.contains(expect),
            "{args:?}: wanted {expect:?} in:\n{err}"
        );
        assert!(
            !out.contains("listening on"),
            "{args:?} announced itself:\n{out}"
        );
    };

    // A missing TLS file: no store at all.
    let cfg = write_config(
        tmp.path(),
        "[tls]\ncert = \"/nonexistent/cert.pem\"\nkey = \"/nonexistent/key.pem\"\n",
    );
    fail(
        &[
            "--test",
            "--config",
            cfg.to_str().unwrap(),
            "--data-dir",
            d,
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
        "/nonexistent/cert.pem",
    );
    assert!(
        !data.join("appliance.redb").exists(),
        "TLS failure opened the store"
    );

    // An unknown chain table lists the valid names.
    let cfg = write_config(
        tmp.path(),
        "[chains.etherium]\nrpc_url = \"http://127.0.0.1:1\"\n",
    );
    fail(
        &["serve", "--config", cfg.to_str().unwrap(), "--data-dir", d],
        &[],
        "did you mean ethereum?",
    );
    let o = run(
        &["serve", "--config", cfg.to_str().unwrap(), "--data-dir", d],
        &[],
    );
    let (_, err) = text(&o);
    assert!(err.contains("polygon") && err.contains("base"), "{err}");
    assert!(!data.exists(), "an unknown chain created the data dir");

    // Serving live chains without `init` says what to do, and writes nothing.
    let cfg = write_config(
        tmp.path(),
        "[chains.ethereum]\nrpc_url = \"http://127.0.0.1:1\"\n",
    );
    fail(
        &[
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--data-dir",
            d,
            "--listen",
            "127.0.0.1:0",
        ],
        &[("APPLIANCE_PASSPHRASE", PASSPHRASE)],
        "appliance init",
    );
    assert!(!data.exists(), "serve without init created the data dir");

    // A port in use, on an existing store: it opens clean afterwards.
    init(&data);
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().to_string();
    fail(
        &["serve", "--data-dir", d, "--listen", &port],
        &[("APPLIANCE_STORAGE__QUICK_REPAIR", "false")],
        &format!("binding {port}"),
    );
    assert_opens_clean(&data);

    // A wrong passphrase.
    fail(
        &[
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--data-dir",
            d,
            "--listen",
            "127.0.0.1:0",
        ],
        &[
            ("APPLIANCE_PASSPHRASE", "not the right passphrase"),
            ("APPLIANCE_STORAGE__QUICK_REPAIR", "false"),
        ],
        "unlocking the master seed",
    );
    assert_opens_clean(&data);
}

/// Point 6: plain HTTP on a non-loopback address in live mode needs `allow_plain_http`,
/// and is then logged at WARN.
#[tokio::test]
async fn plain_http_off_loopback_needs_allow_plain_http() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let d = data.to_str().unwrap();
    let o = run(&["serve", "--data-dir", d, "--listen", "0.0.0.0:0"], &[]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "plain HTTP on 0.0.0.0 started: {out}");
    assert!(err.contains("allow_plain_http"), "{err}");
    assert!(!data.join("appliance.redb").exists());

    let cfg = write_config(
        tmp.path(),
        "listen = \"0.0.0.0:0\"\nallow_plain_http = true\n",
    );
    let live = Live::start(&cfg, &data, &[]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let out = live.stop();
    assert!(
        out.lines()
            .any(|l| l.contains("WARN") && l.contains("PLAIN HTTP")),
        "no WARN about plain HTTP:\n{out}"
    );
}

/// Point 8: permission errors name the path.
#[test]
fn permission_errors_name_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    init(&data);
    let store = data.join("appliance.redb");
    let mut cmd = if unsafe_is_root() {
        // root reads everything: run the command as nobody instead.
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_appliance"));
        c
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o000)).unwrap();
        Command::new(env!("CARGO_BIN_EXE_appliance"))
    };
    let o = cmd
        .args(["project", "list", "--data-dir"])
        .arg(&data)
        .env_remove("APPLIANCE_PASSPHRASE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!("{}: permission denied", store.display()))
            || err.contains(&format!(
                "{}: permission denied",
                data.join("pepper").display()
            )),
        "{err}"
    );
}

fn unsafe_is_root() -> bool {
    // SAFETY-free: read the effective uid from /proc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|x| x == "0"))
        })
        .unwrap_or(false)
}

/// Point 13: a closed stdout never panics; `--listen` only where something serves; the
/// token is printed once; the test-mode banner marks revoked keys.
#[tokio::test]
async fn cli_survives_closed_stdout_and_marks_revoked_keys() {
    let mut app = spawn_app().await;
    let d = app.data_dir.display().to_string();
    // stdout is a pipe whose reader is already gone.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = bin()
        .args(["project", "list", "--data-dir", &d])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");

    let (st, _, err) = app.cli(&["project", "list", "--listen", "127.0.0.1:0"]);
    assert!(!st.success(), "--listen accepted by project list");
    assert!(err.contains("--listen"), "{err}");

    let out = app.cli_ok(&[
        "key",
        "create",
        "--project",
        "default",
        "--kind",
        "checkout",
    ]);
    let tok = find_token(&out).expect("token");
    assert_eq!(
        out.matches(&tok).count(),
        1,
        "token printed more than once:\n{out}"
    );

    let keys = app.get(&app.wallet_key, "/v1/api_keys").await.expect(200);
    let payout = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "payout")
        .cloned()
        .unwrap();
    app.cli_ok(&["key", "revoke", payout["id"].as_str().unwrap()]);
    app.stop_graceful();
    app.start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let banner = app.run_output.lock().unwrap().join("\n");
    let line = banner
        .lines()
        .find(|l| l.contains(payout["id"].as_str().unwrap()))
        .unwrap_or_else(|| panic!("revoked key not in the banner:\n{banner}"));
    assert!(line.contains("(revoked)"), "{line}");
    let wallet_line = banner
        .lines()
        .find(|l| l.trim_start().starts_with("wallet key"))
        .unwrap();
    assert!(!wallet_line.contains("(revoked)"), "{wallet_line}");
    let _ = Write::flush(&mut std::io::stdout());
}

/// Point 14: treasury items carry `_decimal` twins; `source=chain` keeps the ledger fields;
/// webhook endpoints take every SPEC.md section 6 type; a chain that cannot issue an
/// address does not claim `deposits_enabled`.
#[tokio::test]
async fn contract_fixes_decimals_event_types_and_deposits_enabled() {
    let app = spawn_app_with(
        "127.0.0.1:0",
        &[("APPLIANCE_WEBHOOKS__ALLOW_PRIVATE_TARGETS", "true")],
    )
    .await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "2500000").await;
    let t = app.get(&app.wallet_key, "/v1/balances").await.expect(200);
    let item = find_asset_item(&t["data"], "ethereum", "USDT").expect("treasury item");
    for f in [
        "deposits",
        "in_transit",
        "treasury",
        "held",
        "liability",
        "surplus",
    ] {
        let twin = format!("{f}_decimal");
        assert!(item[&twin].is_string(), "{twin} missing: {item}");
    }
    assert_eq!(item["liability_decimal"], "2.5", "{item}");

    let w = app
        .post(
            &app.wallet_key,
            "/v1/wallets",
            json!({"customer_id": c["id"], "chain": "ethereum"}),
        )
        .await
        .expect_any(&[200, 201]);
    let b = app
        .get(
            &app.wallet_key,
            &format!(
                "/v1/wallets/{}/balances?source=chain",
                w["id"].as_str().unwrap()
            ),
        )
        .await
        .expect(200);
    let usdt = b["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["asset"] == "USDT")
        .cloned()
        .unwrap();
    assert_eq!(usdt["available"], "2500000", "{usdt}");
    for f in [
        "available_decimal",
        "locked",
        "locked_decimal",
        "total",
        "total_decimal",
        "onchain",
    ] {
        assert!(usdt[f].is_string(), "{f} missing: {usdt}");
    }

    let r = app
        .post(
            &app.wallet_key,
            "/v1/webhooks",
            json!({
                "url": "http://127.0.0.1:9/hook",
                "event_types": ["invoice.pending", "invoice.paid", "invoice.underpaid",
                    "invoice.overpaid", "invoice.expired", "conversion.completed",
                    "deposit.confirmed", "endpoint.test"],
            }),
        )
        .await;
    assert!(r.status == 201 || r.status == 200, "{}", r.text);

    app.project_set(&["--chain", "polygon", "--chain-status", "paused"]);
    let chains = app.get(&app.wallet_key, "/v1/chains").await.expect(200);
    for c in chains["data"].as_array().unwrap() {
        if c["chain"] == "polygon" {
            assert_eq!(c["deposits_enabled"], false, "{c}");
        }
        if c["status"] != "live" || c["account_kind"] == "eoa" {
            assert_eq!(c["deposits_enabled"], false, "{c}");
        }
        if c["chain"] == "ethereum" {
            assert_eq!(c["deposits_enabled"], true, "{c}");
        }
    }
}

/// Point 13: a test-mode server whose stdout is closed from the start (its banner cannot be
/// written) keeps serving instead of panicking.
#[test]
fn a_server_with_a_closed_stdout_keeps_running() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = bin()
        .args(["--test", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first start writes the banner and the keys; give it time to do so.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !data.join("appliance.sock").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let alive = matches!(child.try_wait(), Ok(None));
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(alive, "the server exited:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        data.join("appliance.sock").exists(),
        "never started:\n{err}"
    );
}
