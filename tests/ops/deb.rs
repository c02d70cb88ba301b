//! The Debian package: built by cargo-deb from the binary the tests
//! run, unpacked with dpkg-deb, and its binary started from there.

use std::path::Path;
use std::process::Command;

use crate::common::*;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn debian_package_builds_unpacks_and_runs() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    // The package is made from the binary cargo built for these tests (target/debug):
    // no second build. cargo-deb is installed by scripts/install-test-deps.sh.
    run(Command::new("cargo")
        .current_dir(root)
        .args([
            "deb",
            "--no-build",
            "--profile",
            "dev",
            "--fast",
            "--strip",
            "-q",
            "-o",
        ])
        .arg(dir.path()));
    let deb = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("a .deb");
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    for f in [
        "./usr/bin/appliance",
        "./usr/lib/systemd/system/appliance.service",
        "./usr/share/doc/appliance/config.toml.example",
        "./usr/share/doc/appliance/README.md",
    ] {
        assert!(
            listing.lines().any(|l| l.ends_with(f)),
            "{f} missing:\n{listing}"
        );
    }
    let x = dir.path().join("x");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&x));
    let ctl = dir.path().join("control");
    run(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&ctl));
    let postinst = std::fs::read_to_string(ctl.join("postinst")).unwrap();
    assert!(
        postinst.contains("adduser --system --group") && postinst.contains(" appliance"),
        "postinst creates the system user:\n{postinst}"
    );
    let control = std::fs::read_to_string(ctl.join("control")).unwrap();
    assert!(control.contains("Package: appliance"), "{control}");
    // The unit shipped is the one in the repository.
    let unit = x.join("usr/lib/systemd/system/appliance.service");
    assert_eq!(
        std::fs::read_to_string(&unit).unwrap(),
        std::fs::read_to_string(Path::new(root).join("packaging/appliance.service")).unwrap()
    );
    // The packaged binary runs.
    let bin = x.join("usr/bin/appliance");
    let version = run(Command::new(&bin).arg("--version"));
    assert_eq!(
        version.trim(),
        format!("appliance {}", env!("CARGO_PKG_VERSION"))
    );
    let data = dir.path().join("data");
    let mut cmd = Command::new(&bin);
    cmd.args(["--test", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data);
    let p = Proc::spawn(cmd);
    let (status, v) = get_public(&p.base_url, "/healthz").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["status"], "ok");
    drop(p);
    // systemd accepts the packaged unit (its ExecStart pointed at the unpacked binary).
    let text = std::fs::read_to_string(&unit)
        .unwrap()
        .replace("/usr/bin/appliance", bin.to_str().unwrap());
    let local = write_file(dir.path(), "appliance.service", &text);
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&local)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}
