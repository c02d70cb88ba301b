//! `appliance verify` exits 0 on a healthy store and non-zero once the ledger is tampered
//! with: a real flow through the server, a clean stop, one account total changed in the
//! store file behind the appliance's back, then `verify`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use redb::ReadableTable;

fn start(data: &std::path::Path) -> (std::process::Child, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_appliance"))
        .args(["--test", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .env("APPLIANCE_TEST__BLOCK_INTERVAL_MS", "3600000")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut wallet = String::new();
    let mut base = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(t) = line.strip_prefix("wallet key: ") {
            wallet = t.to_string();
        }
        if let Some(rest) = line.strip_prefix("appliance listening on ") {
            base = rest.split_whitespace().next().unwrap().to_string();
            break;
        }
    }
    (child, base, wallet)
}

fn verify(data: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_appliance"))
        .arg("verify")
        .arg("--data-dir")
        .arg(data)
        .output()
        .unwrap()
}

#[tokio::test]
async fn verify_fails_on_a_tampered_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut child, base, key) = start(&data);
    let http = reqwest::Client::new();
    let post = |path: &str, body: serde_json::Value| {
        http.post(format!("{base}{path}"))
            .bearer_auth(&key)
            .json(&body)
            .send()
    };
    let c: serde_json::Value = post("/v1/customers", serde_json::json!({}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cid = c["id"].as_str().unwrap().to_string();
    assert_eq!(
        post(
            "/v1/wallets",
            serde_json::json!({"customer_id": cid, "chain": "ethereum"})
        )
        .await
        .unwrap()
        .status(),
        201
    );
    let d = post(
        "/v1/test/deposits",
        serde_json::json!({"customer_id": cid, "chain": "ethereum", "asset": "USDT", "decimals": 6, "amount": "5000000"}),
    )
    .await
    .unwrap();
    assert_eq!(d.status(), 201);
    // Clean stop (SIGTERM), so the file is closed and can be opened here.
    let pid = child.id() as i32;
    assert_eq!(sigterm(pid), 0);
    assert!(child.wait().unwrap().success());

    let healthy = verify(&data);
    assert!(
        healthy.status.success(),
        "{}",
        String::from_utf8_lossy(&healthy.stderr)
    );

    {
        let db = redb::Database::open(data.join("appliance.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(appliance_storage::schema::ACCOUNTS).unwrap();
            let (k, (debits, credits)) = {
                let first = t.iter().unwrap().next().unwrap().unwrap();
                (first.0.value().to_vec(), first.1.value())
            };
            t.insert(k.as_slice(), (debits, credits + 1)).unwrap();
        }
        txn.commit().unwrap();
    }

    let broken = verify(&data);
    assert!(
        !broken.status.success(),
        "verify must fail on a tampered ledger"
    );
    let out = String::from_utf8_lossy(&broken.stdout);
    assert!(out.contains("but the journal gives"), "{out}");
    assert!(out.contains("not zero"), "{out}");
}

/// SIGTERM through the `kill` command (the crate forbids unsafe code).
fn sigterm(pid: i32) -> i32 {
    Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap()
        .code()
        .unwrap_or(1)
}
