//! `appliance backup` while the server runs, then `appliance restore` on a stopped server:
//! the restored appliance holds exactly what the snapshot held, its keys still work (the
//! pepper travels with the backup) and every invariant holds.

use crate::helpers::*;

#[tokio::test]
async fn backup_while_running_then_restore_brings_back_the_snapshot() {
    let mut app = spawn_app().await;
    let (c, _, _) = app.funded_customer("ethereum", "USDT", 6, "7000000").await;
    let cid = c["id"].as_str().unwrap().to_string();
    let out = app.data_path("../backup-1");
    let out_s = out.display().to_string();
    let answer = app.cli_ok(&["backup", "--out", &out_s]);
    assert!(answer.contains("\"rows\""), "{answer}");
    for f in ["appliance.redb", "pepper", "manifest.json"] {
        assert!(out.join(f).exists(), "{f} missing from the backup");
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(out.join("pepper"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    // A second backup to the same directory is refused.
    let (st, _, _) = app.cli(&["backup", "--out", &out_s]);
    assert!(!st.success());
    // Restoring under a running server is refused.
    let (st, _, err) = app.cli(&["restore", "--from", &out_s]);
    assert!(!st.success() && err.contains("stop it"), "{err}");

    // After the snapshot: a second customer that the restore must take away.
    let later = app.create_customer(Some("after-backup")).await;
    app.stop_graceful();
    app.cli_ok(&["restore", "--from", &out_s]);
    app.start();

    assert_eq!(app.available(&cid, "ethereum", "USDT").await, 7_000_000);
    let gone = app
        .get(
            &app.wallet_key,
            &format!("/v1/customers/{}", later["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(gone.status, 404, "{}", gone.text);
    let v = app.cli_ok(&["verify"]);
    assert!(v.contains("\"violations\": []"), "{v}");
}
