//! TLS through rustls: with `[tls]` configured the appliance serves HTTPS only.
//! A self-signed certificate is generated for `localhost`; curl verifies it against that
//! certificate, as a merchant's client pinned to it would.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn serves_https_with_the_configured_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n",
            cert_path.display().to_string(),
            key_path.display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_appliance"))
        .args(["--test", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut addr = None;
    let mut wallet = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(t) = line.strip_prefix("wallet key: ") {
            wallet = Some(t.to_string());
        }
        if let Some(rest) = line.strip_prefix("appliance listening on ") {
            addr = Some(rest.split_whitespace().next().unwrap().to_string());
            break;
        }
        assert!(Instant::now() < deadline, "server did not start");
    }
    let addr = addr.expect("listening line");
    assert!(addr.starts_with("https://"), "{addr}");
    let port = addr.rsplit(':').next().unwrap();
    let url = format!("https://localhost:{port}/v1/ping");
    let curl = Command::new("curl")
        .args(["-s", "--cacert"])
        .arg(&cert_path)
        .args([
            "-H",
            &format!("Authorization: Bearer {}", wallet.unwrap()),
            &url,
        ])
        .output()
        .expect("curl is installed");
    let body = String::from_utf8_lossy(&curl.stdout);
    assert!(
        curl.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&curl.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["object"], "ping");
    assert_eq!(v["env"], "test");
    // Plain HTTP on the same port is not served.
    let plain = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://127.0.0.1:{port}/v1/ping"),
        ])
        .output()
        .unwrap();
    assert_ne!(String::from_utf8_lossy(&plain.stdout), "200");
    child.kill().unwrap();
    let _ = child.wait();
}
