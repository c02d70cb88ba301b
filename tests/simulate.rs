//! `appliance simulate` as a user runs it: the binary, its exit status and its
//! last line `seed S steps N digest HEX`. The long runs (3 seeds x 20,000 steps) are in
//! scripts/test.sh; these check what a short run must already show: the same seed gives
//! the same digest, another seed another, and the scripted reorg scenario holds.

use std::process::Command;

/// Runs `appliance simulate ARGS`; returns (exit success, stdout, stderr).
fn simulate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_appliance"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("run appliance simulate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The digest of the last line, checked to name `seed` and `steps` (any count when `None`:
/// a scenario counts the steps it took).
fn digest(stdout: &str, seed: u64, steps: Option<u64>) -> String {
    let last = stdout.lines().last().unwrap_or_default();
    let prefix = format!("seed {seed} steps ");
    let rest = last
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("last line {last:?} does not start with {prefix:?}"));
    let (n, hex) = rest
        .split_once(" digest ")
        .unwrap_or_else(|| panic!("last line {last:?} has no digest"));
    if let Some(steps) = steps {
        assert_eq!(n, steps.to_string(), "last line {last:?}");
    }
    assert_eq!(hex.len(), 64, "digest {hex:?}");
    assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "digest {hex:?}");
    hex.to_string()
}

#[test]
fn the_same_seed_gives_the_same_digest_and_another_seed_another() {
    let (ok, first, err) = simulate(&["--seed", "11", "--steps", "600"]);
    assert!(ok, "seed 11 failed:\n{first}\n{err}");
    let (ok, second, err) = simulate(&["--seed", "11", "--steps", "600"]);
    assert!(ok, "seed 11 (again) failed:\n{second}\n{err}");
    assert_eq!(
        digest(&first, 11, Some(600)),
        digest(&second, 11, Some(600))
    );
    let (ok, other, err) = simulate(&["--seed", "12", "--steps", "600"]);
    assert!(ok, "seed 12 failed:\n{other}\n{err}");
    assert_ne!(digest(&first, 11, Some(600)), digest(&other, 12, Some(600)));
}

#[test]
fn the_reorg_after_credit_scenario_orphans_every_deposit() {
    let (ok, out, err) = simulate(&[
        "--seed",
        "3",
        "--steps",
        "5",
        "--scenario",
        "reorg-after-credit",
    ]);
    assert!(ok, "scenario failed:\n{out}\n{err}");
    digest(&out, 3, None);
}

#[test]
fn a_bad_argument_is_refused_with_a_clear_message() {
    let (ok, _, err) = simulate(&["--seed", "1", "--steps", "5", "--scenario", "nope"]);
    assert!(!ok);
    assert!(err.contains("reorg-after-credit"), "stderr: {err}");
}
