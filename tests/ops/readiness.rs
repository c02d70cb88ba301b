//! `GET /healthz` and `GET /readyz`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::helpers::*;

#[tokio::test]
async fn healthz_and_readyz_are_public_and_ready_in_test_mode() {
    let app = spawn_app().await;
    let r = reqwest::get(app.url("/healthz")).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["cache-control"], "no-store");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["status"], "ok");
    let (status, v) = get_public(&app.base_url, "/readyz").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "ready");
    assert_eq!(v["checks"]["store"], "ok");
    // Only GET.
    let r = reqwest::Client::new()
        .post(app.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
}

#[tokio::test]
async fn readyz_names_a_chain_whose_node_is_not_reached() {
    const PASS: &str = "readiness test passphrase, long enough";
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let cfg = write_file(
        dir.path(),
        "config.toml",
        &format!(
            "[signing]\npassphrase_env = \"APPLIANCE_PASSPHRASE\"\n\n\
             [chains.ethereum]\nrpc_url = \"http://127.0.0.1:{port}\"\npoll_interval_ms = 200\n"
        ),
    );
    let out = Command::new(bin())
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&cfg)
        .arg("init")
        .env("APPLIANCE_PASSPHRASE", PASS)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cmd = Command::new(bin());
    cmd.arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&cfg)
        .args(["--listen", "127.0.0.1:0", "serve"])
        .env("APPLIANCE_PASSPHRASE", PASS);
    let p = Proc::spawn(cmd);
    assert_eq!(get_public(&p.base_url, "/healthz").await.0, 200);
    let (status, v) = get_public(&p.base_url, "/readyz").await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["status"], "not_ready");
    assert_eq!(v["checks"]["store"], "ok", "{v}");
    assert_eq!(v["checks"]["chain:ethereum"], "failing", "{v}");
    let names: Vec<String> = v["not_ready"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("chain ethereum:")),
        "{names:?}"
    );
    // The failing node shows in the metrics as the age of its last error.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, text) = get_metrics(&p.base_url, &[]).await;
        assert_eq!(status, 200);
        let m = parse_metrics(&text);
        if m.iter().any(|s| {
            s.name == "appliance_chain_last_error_age_seconds"
                && s.labels.get("chain").and_then(|c| c.as_str()) == Some("ethereum")
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no chain_last_error_age_seconds for ethereum:\n{text}\n{}",
            p.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
