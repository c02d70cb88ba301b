//! File modes: the data dir 0700 and every file in it 0600 whatever the
//! umask; a data dir others may write to is refused with a message naming it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::helpers::*;

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Every entry under `dir` (recursively): directories 0700, everything else 0600 at most.
fn assert_private_tree(dir: &Path) {
    assert_eq!(mode(dir), 0o700, "{} is {:o}", dir.display(), mode(dir));
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = mode(&p);
        if p.is_dir() {
            assert_private_tree(&p);
        } else {
            assert_eq!(m & 0o077, 0, "{} is {m:o}", p.display());
            assert_eq!(m & 0o111, 0, "{} is executable ({m:o})", p.display());
        }
    }
}

#[tokio::test]
async fn under_umask_000_the_data_dir_is_0700_and_its_files_0600() {
    let mut app = spawn_app_sh("umask 000", &[]).await;
    // Something in the store, a backup next to it.
    app.create_customer(Some("modes-1")).await;
    let backup = app.data_dir.parent().unwrap().join("backup-1");
    app.cli_ok(&["backup", "--out", backup.to_str().unwrap()]);
    let names: Vec<String> = std::fs::read_dir(&app.data_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for expected in ["appliance.redb", "pepper", "appliance.sock"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing: {names:?}"
        );
    }
    assert_private_tree(&app.data_dir);
    assert_private_tree(&backup);
    // Files written later (a restart re-binds the socket) keep the modes.
    app.stop();
    app.start();
    assert_private_tree(&app.data_dir);
}

#[tokio::test]
async fn a_group_or_world_writable_data_dir_is_refused_with_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("open-data");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_appliance"))
        .args(["--test", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run appliance");
    // It must exit at once; a server that starts is killed and the test fails.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = status.unwrap_or_else(|| panic!("started on a 0777 data dir: {stderr}"));
    assert!(!status.success(), "started on a 0777 data dir: {stderr}");
    assert!(
        stderr.contains(&dir.display().to_string()) && stderr.contains("writable"),
        "{stderr}"
    );
    // Nothing was created in it.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}
