//! Spawning, watching and stopping an `appliance --test` server.
//!
//! The server is started as
//! `appliance --test --listen 127.0.0.1:0 --data-dir DIR` with
//! `APPLIANCE_TEST__BLOCK_INTERVAL_MS` set, and its standard output is read line by line
//! (docs/decisions.md, "Process and command line"):
//!
//! - `appliance listening on http://ADDR (test mode)` gives the bound address;
//! - on the first start of a data dir, `checkout key: T`, `payout key: T` and `wallet key: T`
//!   give the test tokens (`apktest` + 64 lowercase hex).
//!
//! Standard output keeps being drained into `server.stdout.log` (a full pipe would stall the
//! server) and standard error goes to `server.stderr.log`, both in the work directory.
//! The child is killed when its [`Server`] is dropped, so an error anywhere cannot leave a
//! server running.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hyper::Method;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::client::{Conn, Outcome, Req, Target};

/// A scratch directory for one run: the server's data dir and its logs.
/// Removed on drop unless it is to be kept.
pub struct WorkDir {
    pub path: PathBuf,
    keep: bool,
}

impl WorkDir {
    /// Creates `<parent>/appliance-loadgen-<uuid>/data` (the data dir starts empty).
    pub fn create(parent: &Path, keep: bool) -> Result<Self> {
        let path = parent.join(format!(
            "appliance-loadgen-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(path.join("data"))
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path, keep })
    }

    /// The server's `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.path.join("data")
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("loadgen: kept work dir {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// How to start the server.
#[derive(Clone)]
pub struct ServerOpts {
    /// The `appliance` binary.
    pub bin: PathBuf,
    /// Passed as `--data-dir`.
    pub data_dir: PathBuf,
    /// Where `server.stdout.log` and `server.stderr.log` are appended.
    pub log_dir: PathBuf,
    /// Value of `APPLIANCE_TEST__BLOCK_INTERVAL_MS`.
    pub block_interval_ms: u64,
    /// How long to wait for the listening line (and the key lines when expected).
    pub start_timeout: Duration,
}

/// The test tokens printed on the first start of a data dir.
#[derive(Clone, Debug)]
pub struct Tokens {
    pub wallet: String,
    pub payout: String,
    /// The checkout key (invoices).
    pub checkout: String,
}

/// A running `appliance --test` child process.
pub struct Server {
    child: Child,
    pid: u32,
    /// The address from the listening line.
    pub addr: SocketAddr,
    /// When the process was spawned.
    pub spawned_at: Instant,
    /// Time from spawn until the listening line was read.
    pub listening_after: Duration,
    /// Present when the server printed the wallet, payout and checkout key lines.
    pub tokens: Option<Tokens>,
    /// The shared stderr log and its length when this process was spawned.
    stderr_log: PathBuf,
    stderr_start: u64,
}

/// What the stdout reader learned from one line.
enum Line {
    Listening(SocketAddr, Instant),
    Key(&'static str, String),
    Eof,
}

/// True for `apktest` followed by exactly 64 lowercase hex characters.
fn is_test_token(s: &str) -> bool {
    s.strip_prefix("apktest").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Parses one stdout line of the server.
fn parse_line(line: &str) -> Option<Line> {
    if let Some(i) = line.find("listening on http://") {
        let rest = &line[i + "listening on http://".len()..];
        let addr = rest.split_whitespace().next()?.trim_end_matches('/');
        return addr
            .parse()
            .ok()
            .map(|a| Line::Listening(a, Instant::now()));
    }
    for kind in ["checkout", "payout", "wallet"] {
        let marker = format!("{kind} key:");
        if let Some(i) = line.find(&marker) {
            let token = line[i + marker.len()..].split_whitespace().next()?;
            if is_test_token(token) {
                return Some(Line::Key(kind, token.to_string()));
            }
        }
    }
    None
}

fn open_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))
}

/// The last `n` lines of a log file, for error messages.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Server {
    /// Spawns the server and waits for its listening line and, when `expect_tokens`, for the
    /// wallet, payout and checkout key lines (only a fresh data dir prints keys).
    pub async fn spawn(opts: &ServerOpts, expect_tokens: bool) -> Result<Self> {
        let stdout_log = opts.log_dir.join("server.stdout.log");
        let stderr_log = opts.log_dir.join("server.stderr.log");
        let mut out = open_append(&stdout_log)?;
        let mut err = open_append(&stderr_log)?;
        let marker = format!("---- loadgen: spawning {} ----", opts.bin.display());
        writeln!(out, "{marker}")?;
        writeln!(err, "{marker}")?;
        let stderr_start = err.metadata()?.len();

        let mut cmd = Command::new(&opts.bin);
        cmd.arg("--test")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(&opts.data_dir)
            .env(
                "APPLIANCE_TEST__BLOCK_INTERVAL_MS",
                opts.block_interval_ms.to_string(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .kill_on_drop(true);
        let spawned_at = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", opts.bin.display()))?;
        let pid = child.id().context("spawned server has no pid")?;
        let stdout = child.stdout.take().context("server stdout not captured")?;

        // Drain stdout for the whole life of the process; report what matters on the way.
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = writeln!(out, "{line}");
                if let Some(parsed) = parse_line(&line) {
                    let _ = tx.send(parsed);
                }
            }
            let _ = tx.send(Line::Eof);
        });

        let mut listening = None;
        let (mut wallet, mut payout, mut checkout) = (None, None, None);
        let deadline = tokio::time::Instant::now() + opts.start_timeout;
        loop {
            let done = listening.is_some()
                && (!expect_tokens || (wallet.is_some() && payout.is_some() && checkout.is_some()));
            if done {
                break;
            }
            let what = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(line)) => line,
                Ok(None) => Line::Eof,
                Err(_) => bail!(
                    "server printed no {} within {} s; last stdout lines:\n{}\nlast stderr lines:\n{}",
                    if listening.is_none() { "listening line" } else { "key lines (is the data dir fresh?)" },
                    opts.start_timeout.as_secs(),
                    tail(&stdout_log, 10),
                    tail(&stderr_log, 20)
                ),
            };
            match what {
                Line::Listening(addr, at) => listening = Some((addr, at)),
                Line::Key("wallet", t) => wallet = Some(t),
                Line::Key("payout", t) => payout = Some(t),
                Line::Key("checkout", t) => checkout = Some(t),
                Line::Key(..) => {}
                Line::Eof => {
                    let status = child.wait().await.ok();
                    bail!(
                        "server exited during start-up ({}); last stdout lines:\n{}\nlast stderr lines:\n{}",
                        status.map_or("unknown status".to_string(), |s| s.to_string()),
                        tail(&stdout_log, 10),
                        tail(&stderr_log, 20)
                    );
                }
            }
        }
        let (addr, at) = listening.expect("loop ends only once listening");
        let tokens = match (wallet, payout, checkout) {
            (Some(wallet), Some(payout), Some(checkout)) => Some(Tokens {
                wallet,
                payout,
                checkout,
            }),
            _ => None,
        };
        Ok(Self {
            child,
            pid,
            addr,
            spawned_at,
            listening_after: at.saturating_duration_since(spawned_at),
            tokens,
            stderr_log,
            stderr_start,
        })
    }

    /// Lines this process has written to stderr so far that contain `needle` (e.g. the
    /// store's "repairing store after unclean shutdown" warnings).
    pub fn stderr_lines_with(&self, needle: &str) -> usize {
        let Ok(bytes) = std::fs::read(&self.stderr_log) else {
            return 0;
        };
        let start = usize::try_from(self.stderr_start)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        String::from_utf8_lossy(&bytes[start..])
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Polls `GET path` (`/readyz`, public: the store takes a write; or `/v1/ping` with a
    /// key's `token`) every 10 ms until it answers 200 and returns the time since spawn.
    /// Refused connections and non-200 answers are retried until `timeout` has passed.
    pub async fn wait_ready(&self, path: &str, token: &str, timeout: Duration) -> Result<Duration> {
        let mut conn = Conn::new(Target::from_addr(self.addr), Duration::from_secs(5));
        let deadline = self.spawned_at + timeout;
        loop {
            let outcome = conn
                .send(Req {
                    method: Method::GET,
                    path: path.to_string(),
                    token,
                    body: None,
                    idempotency_key: None,
                })
                .await;
            let last = match &outcome {
                Outcome::Response { status: 200, .. } => return Ok(self.spawned_at.elapsed()),
                Outcome::Response { status, body, .. } => {
                    format!("{status} {}", String::from_utf8_lossy(body))
                }
                Outcome::Failed { kind, detail } => format!("{kind}: {detail}"),
            };
            if Instant::now() >= deadline {
                bail!(
                    "GET {path} did not answer 200 within {} s (last: {last})",
                    timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Peak and current resident set size in KiB (`VmHWM`, `VmRSS` from `/proc/PID/status`),
    /// when the platform has them.
    pub fn memory_kib(&self) -> (Option<u64>, Option<u64>) {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", self.pid)) else {
            return (None, None);
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        (field("VmHWM:"), field("VmRSS:"))
    }

    /// `kill -9` and wait for the process to be gone.
    pub async fn kill9(&mut self) -> Result<()> {
        self.child.start_kill().context("sending SIGKILL")?;
        self.child
            .wait()
            .await
            .context("waiting for the killed server")?;
        Ok(())
    }

    /// Sends SIGTERM and waits up to `grace` for a clean exit; returns the time to exit and
    /// whether the exit was clean. After `grace` the process is killed with SIGKILL.
    pub async fn terminate(&mut self, grace: Duration) -> Result<(Duration, bool)> {
        let started = Instant::now();
        if let Ok(Some(_)) = self.child.try_wait() {
            return Ok((Duration::ZERO, false));
        }
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid.to_string())
            .status()
            .await
            .context("running kill -TERM")?;
        if !status.success() {
            bail!("kill -TERM {} failed: {status}", self.pid);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(exit)) => Ok((started.elapsed(), exit.success())),
            Ok(Err(e)) => Err(e).context("waiting for the server to exit"),
            Err(_) => {
                self.kill9().await?;
                Ok((started.elapsed(), false))
            }
        }
    }
}

/// Raises the `default` project's limits so the load generator measures the server rather
/// than its rate limiter, through the operator command (which talks to the running server
/// over its Unix socket `DIR/appliance.sock`):
/// `appliance project set default --data-dir DIR --requests-per-minute 100000000
/// --addresses-per-day 100000000 --max-pending-payouts 100000000`.
///
/// The server may print its listening line before its operator socket is bound, and the
/// command then finds the store locked; so this waits for the socket file and retries for a
/// few seconds.
pub async fn raise_limits(bin: &Path, data_dir: &Path) -> Result<()> {
    let socket = data_dir.join("appliance.sock");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    loop {
        match project_set(bin, data_dir).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// One run of `appliance project set default ...` with the raised limits.
async fn project_set(bin: &Path, data_dir: &Path) -> Result<()> {
    let output = Command::new(bin)
        .args(["project", "set", "default", "--data-dir"])
        .arg(data_dir)
        .args([
            "--requests-per-minute",
            "100000000",
            "--addresses-per-day",
            "100000000",
            "--max-pending-payouts",
            "100000000",
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {} project set", bin.display()))?;
    if !output.status.success() {
        bail!(
            "`{} project set default ...` failed ({}): {}{}",
            bin.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            String::from_utf8_lossy(&output.stdout).trim()
        );
    }
    Ok(())
}

/// CPU time (user + system) consumed so far by process `pid` (`"self"` for loadgen), in
/// seconds, from `/proc/PID/stat`. Assumes the usual 100 clock ticks per second.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name start at field 3 (state); utime and stime
    // are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Bytes a process has caused to be written to storage so far (`write_bytes` of
/// `/proc/<pid>/io`: what reached the block layer, page rewrites included).
pub fn disk_write_bytes(pid: &str) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Size in bytes of the files directly in `dir` (the store is one file there).
pub fn dir_size(dir: &Path) -> u64 {
    dir_usage(dir).0
}

/// (apparent size, bytes allocated on disk) of the files directly in `dir`. The store grows
/// its file by doubling until a region is full (redb: up to 4 GiB), so below that the
/// apparent size runs up to twice the pages ever written; the allocated bytes (`st_blocks`
/// x 512; the file's extension is sparse until a page is written) count only those.
pub fn dir_usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .fold((0, 0), |(len, alloc), m| {
                    (len + m.len(), alloc + m.blocks() * 512)
                })
        })
        .unwrap_or((0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_listening_and_key_lines() {
        match parse_line("appliance listening on http://127.0.0.1:41234 (test mode)") {
            Some(Line::Listening(a, _)) => assert_eq!(a, "127.0.0.1:41234".parse().unwrap()),
            _ => panic!("listening line not parsed"),
        }
        let token = format!("apktest{}", "0a".repeat(32));
        match parse_line(&format!("wallet key: {token}")) {
            Some(Line::Key("wallet", t)) => assert_eq!(t, token),
            _ => panic!("key line not parsed"),
        }
        assert!(parse_line("payout key: apktestXYZ").is_none());
        assert!(parse_line("created project default (test mode) id=1").is_none());
    }

    #[test]
    fn token_shape() {
        assert!(is_test_token(&format!("apktest{}", "f".repeat(64))));
        assert!(!is_test_token(&format!("apktest{}", "F".repeat(64))));
        assert!(!is_test_token(&format!("apk{}", "f".repeat(64))));
        assert!(!is_test_token(&format!("apktest{}", "f".repeat(63))));
    }
}
