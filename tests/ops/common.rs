//! Shared pieces of the operations tests: a bare server process, the metrics parser and
//! the lines a server wrote to stderr.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::App;

/// The appliance binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_appliance")
}

/// The lines the server wrote to stderr (all runs).
pub fn stderr_lines(app: &App) -> Vec<String> {
    app.output
        .lock()
        .unwrap()
        .iter()
        .filter_map(|l| l.strip_prefix("[stderr] ").map(str::to_string))
        .collect()
}

/// Waits until `pred` holds for the server's stderr lines (the access line of a request is
/// written just after its answer went out).
pub async fn wait_stderr(app: &App, pred: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = stderr_lines(app);
        if pred(&lines) || Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One sample of the metrics text, as the reference parser read it.
#[derive(Debug, Clone)]
pub struct Sample {
    pub kind: String,
    pub name: String,
    pub labels: serde_json::Map<String, Value>,
    pub value: f64,
}

/// Parses Prometheus text with the reference parser (Python `prometheus_client`, installed
/// by scripts/install-test-deps.sh). Panics when the text does not parse.
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    use std::io::Write;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ops/parse_metrics.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/install-test-deps.sh installs prometheus_client)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the metrics text does not parse: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.into_iter()
        .map(|s| Sample {
            kind: s["type"].as_str().unwrap().to_string(),
            name: s["name"].as_str().unwrap().to_string(),
            labels: s["labels"].as_object().cloned().unwrap_or_default(),
            value: s["value"].as_f64().unwrap_or(f64::NAN),
        })
        .collect()
}

/// Sum of the samples named `name` whose labels include every `(key, value)` of `labels`.
pub fn sum(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).and_then(Value::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// True when a sample named `name` exists.
pub fn has(samples: &[Sample], name: &str) -> bool {
    samples.iter().any(|s| s.name == name)
}

/// `GET /metrics` with extra headers; (status, body).
pub async fn get_metrics(base_url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut rb = reqwest::Client::new().get(format!("{base_url}/metrics"));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.send().await.expect("GET /metrics");
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

/// A server process started by a test with its own command line, killed on drop.
pub struct Proc {
    pub child: Child,
    pub base_url: String,
    pub lines: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Spawns `cmd` (stdout and stderr piped) and waits for its `listening on` line.
    pub fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn appliance");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        for (r, tag) in [
            (
                Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
                "",
            ),
            (Box::new(child.stderr.take().unwrap()), "[stderr] "),
        ] {
            let (tx, lines) = (tx.clone(), lines.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines() {
                    let Ok(line) = line else { break };
                    lines.lock().unwrap().push(format!("{tag}{line}"));
                    let _ = tx.send(line);
                }
            });
        }
        drop(tx);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) => {
                    if let Some(rest) = l.trim().strip_prefix("appliance listening on http://") {
                        let addr = rest.split_whitespace().next().unwrap().to_string();
                        return Proc {
                            child,
                            base_url: format!("http://{addr}"),
                            lines,
                        };
                    }
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    std::thread::sleep(Duration::from_millis(100));
                    panic!(
                        "appliance did not start ({e:?}):\n{}",
                        lines.lock().unwrap().join("\n")
                    );
                }
            }
        }
    }

    pub fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET base_url + path` without a key; (status, JSON body or Null).
pub async fn get_public(base_url: &str, path: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{base_url}{path}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
