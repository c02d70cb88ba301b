//! The systemd unit: its offline security score, and the appliance
//! running under an imitation of its sandbox.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::common::*;

fn unit_path() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/appliance.service").to_string()
}

/// `systemd-analyze security --offline=true` rates the unit at most 2.0 (lower is safer).
#[test]
fn unit_security_score_is_at_most_2_0() {
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit_path())
        .output()
        .expect("systemd-analyze (scripts/install-test-deps.sh installs systemd)");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level for appliance.service"))
        .unwrap_or_else(|| {
            panic!(
                "no score in:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let score: f64 = line
        .split(':')
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unreadable score: {line}"));
    assert!(score <= 2.0, "exposure {score} > 2.0:\n{text}");
}

/// The unit points the data dir at its StateDirectory (mode 0700).
#[test]
fn unit_wires_the_data_dir() {
    let unit = std::fs::read_to_string(unit_path()).unwrap();
    let exec = unit
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .expect("ExecStart");
    assert!(exec.contains(" serve"), "{exec}");
    assert!(exec.contains("--data-dir /var/lib/appliance"), "{exec}");
    for line in [
        "StateDirectory=appliance",
        "StateDirectoryMode=0700",
        "User=appliance",
        "NoNewPrivileges=true",
        "ProtectSystem=strict",
        "CapabilityBoundingSet=",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing");
    }
}

/// The sandbox, imitated: the unit's UMask, a private mount namespace where every mount is read-only except
/// the data dir, then an unprivileged user (nobody), no new privileges, no capabilities.
const SANDBOX: &str = r#"
set -e
umask 0077
data="$1"; shift
awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r mp; do
  mount -o remount,bind,ro "$mp" 2>/dev/null || true
done
mount --bind "$data" "$data"
mount -o remount,bind,rw "$data"
exec setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs \
  --inh-caps=-all --bounding-set=-all -- "$@"
"#;

fn sandboxed(data: &Path, argv: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        SANDBOX,
        "sandbox",
    ])
    .arg(data)
    .args(argv);
    c
}

#[tokio::test]
async fn runs_under_an_imitation_of_the_unit_sandbox() {
    assert_eq!(
        unsafe_free_uid(),
        0,
        "the sandbox imitation needs root (as in CI) for unshare and setpriv"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    let st = Command::new("chown")
        .arg("65534:65534")
        .arg(&data)
        .status()
        .unwrap();
    assert!(st.success());

    // The imitation holds: only the data dir takes writes, and as nobody.
    let probe = |path: &Path| {
        sandboxed(&data, &["sh", "-c", &format!("touch '{}'", path.display())])
            .output()
            .unwrap()
    };
    let outside = probe(&dir.path().join("outside"));
    assert!(!outside.status.success(), "wrote outside the data dir");
    let tmp = probe(Path::new("/tmp/appliance-sandbox-probe"));
    assert!(!tmp.status.success(), "wrote /tmp");
    let inside = probe(&data.join("probe"));
    assert!(
        inside.status.success(),
        "{}",
        String::from_utf8_lossy(&inside.stderr)
    );
    assert_eq!(std::fs::metadata(data.join("probe")).unwrap().uid(), 65534);
    std::fs::remove_file(data.join("probe")).unwrap();

    let p = Proc::spawn(sandboxed(
        &data,
        &[
            bin(),
            "--test",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
        ],
    ));
    assert_eq!(get_public(&p.base_url, "/healthz").await.0, 200);
    let (status, v) = get_public(&p.base_url, "/readyz").await;
    assert_eq!(status, 200, "{v}\n{}", p.output());
    // A real write through the API.
    let out = p.output();
    let wallet = out
        .lines()
        .find_map(|l| l.strip_prefix("wallet key: "))
        .expect("wallet key line")
        .trim()
        .to_string();
    let r = reqwest::Client::new()
        .post(format!("{}/v1/customers", p.base_url))
        .bearer_auth(&wallet)
        .json(&json!({ "reference_id": "sandboxed" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201, "{}", p.output());
    // Files it made are the service user's, 0600.
    let store = std::fs::metadata(data.join("appliance.redb")).unwrap();
    assert_eq!(store.uid(), 65534);
    assert_eq!(store.mode() & 0o777, 0o600);
}

/// The effective uid, read from /proc (no unsafe code).
fn unsafe_free_uid() -> u32 {
    std::fs::metadata("/proc/self").unwrap().uid()
}
