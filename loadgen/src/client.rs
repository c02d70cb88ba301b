//! HTTP/1.1 keep-alive client and latency bookkeeping.
//!
//! Each load-generating client owns one [`Conn`]: a single TCP connection driven by hyper's
//! low-level `http1` client, reused for every request (keep-alive) and re-opened only when the
//! server closes it. Latency is measured from just before the request is handed to hyper until
//! the whole response body has been read; connecting is never part of a measured request.
//!
//! Every client records into its own [`Stats`] (no locks on the hot path); the phase runner
//! merges them when the phase ends and [`Stats::print_table`] renders the figures.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Where the requests go: a resolved socket address plus the `Host` header value.
#[derive(Clone, Debug)]
pub struct Target {
    /// Address the TCP connections are opened to.
    pub addr: SocketAddr,
    /// `host:port` as given, sent as the `Host` header.
    pub authority: String,
}

impl Target {
    /// Parses `http://HOST:PORT` (a trailing `/` is allowed; `https` is not supported).
    pub async fn parse(url: &str) -> Result<Self> {
        let Some(rest) = url.strip_prefix("http://") else {
            bail!("target {url:?} must start with http:// (TLS is not supported by loadgen)");
        };
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            bail!("target {url:?} must be http://HOST:PORT with no path");
        }
        let with_port = if authority.contains(':') && !authority.ends_with(']') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addr = tokio::net::lookup_host(&with_port)
            .await
            .with_context(|| format!("resolving {with_port}"))?
            .next()
            .with_context(|| format!("{with_port} resolved to no address"))?;
        Ok(Self {
            addr,
            authority: authority.to_string(),
        })
    }

    /// A target for a server we spawned and whose bound address we read from its output.
    pub fn from_addr(addr: SocketAddr) -> Self {
        Self {
            addr,
            authority: addr.to_string(),
        }
    }

    /// The base URL, for printing.
    pub fn url(&self) -> String {
        format!("http://{}", self.authority)
    }
}

/// One request to send. The body, when present, is sent as `application/json`.
pub struct Req<'a> {
    pub method: Method,
    /// Path and query, e.g. `/v1/deposits?limit=10`.
    pub path: String,
    /// Bearer token for the `Authorization` header; empty sends none (public endpoints).
    pub token: &'a str,
    pub body: Option<Vec<u8>>,
    /// Sent as the `Idempotency-Key` header when present.
    pub idempotency_key: Option<String>,
}

/// What came back for one request.
pub enum Outcome {
    /// The server answered (any status) and the whole body was read.
    Response {
        status: u16,
        body: Bytes,
        latency: Duration,
    },
    /// No answer: connect, write, read or timeout failure. The connection is dropped.
    Failed { kind: &'static str, detail: String },
}

impl Outcome {
    /// The status when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Response { status, .. } => Some(*status),
            Outcome::Failed { .. } => None,
        }
    }

    /// True for a 2xx answer.
    pub fn is_success(&self) -> bool {
        self.status().is_some_and(|s| (200..300).contains(&s))
    }

    /// The parsed JSON body of a response, if it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        match self {
            Outcome::Response { body, .. } => serde_json::from_slice(body).ok(),
            Outcome::Failed { .. } => None,
        }
    }
}

/// One keep-alive HTTP/1.1 connection, opened lazily and re-opened after the server closes it.
pub struct Conn {
    target: Target,
    sender: Option<SendRequest<Full<Bytes>>>,
    timeout: Duration,
}

impl Conn {
    /// A connection to `target`; nothing is opened until the first request.
    /// `timeout` bounds one request from send to the last body byte.
    pub fn new(target: Target, timeout: Duration) -> Self {
        Self {
            target,
            sender: None,
            timeout,
        }
    }

    /// Makes sure an open, idle connection exists. A connection the server closed while it
    /// was idle is replaced silently: that is keep-alive housekeeping, not a failed request.
    async fn ready(&mut self) -> Result<&mut SendRequest<Full<Bytes>>> {
        let reusable = match &mut self.sender {
            Some(sender) => !sender.is_closed() && sender.ready().await.is_ok(),
            None => false,
        };
        if reusable {
            return Ok(self.sender.as_mut().expect("sender was just checked"));
        }
        self.sender = None;
        let stream = tokio::time::timeout(self.timeout, TcpStream::connect(self.target.addr))
            .await
            .context("connect timed out")?
            .context("connect")?;
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP/1.1 handshake")?;
        // The connection future drives the socket; it ends when the server or we close it.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(self.sender.insert(sender))
    }

    /// Sends one request and reads the whole answer. Never returns an error: failures are an
    /// [`Outcome::Failed`] so the caller can count them.
    pub async fn send(&mut self, req: Req<'_>) -> Outcome {
        let authority = self.target.authority.clone();
        let timeout = self.timeout;
        let sender = match self.ready().await {
            Ok(sender) => sender,
            Err(e) => {
                return Outcome::Failed {
                    kind: "connect",
                    detail: format!("{e:#}"),
                }
            }
        };
        let mut builder = Request::builder()
            .method(req.method)
            .uri(req.path)
            .header(hyper::header::HOST, authority);
        if !req.token.is_empty() {
            builder = builder.header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", req.token),
            );
        }
        builder = builder
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json");
        if let Some(key) = req.idempotency_key {
            builder = builder.header("Idempotency-Key", key);
        }
        let request = match builder.body(Full::new(Bytes::from(req.body.unwrap_or_default()))) {
            Ok(r) => r,
            Err(e) => {
                return Outcome::Failed {
                    kind: "bad-request",
                    detail: e.to_string(),
                }
            }
        };

        let started = Instant::now();
        let exchange = async {
            let response = sender.send_request(request).await?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body))
        };
        let result = tokio::time::timeout(timeout, exchange).await;
        let latency = started.elapsed();
        match result {
            Ok(Ok((status, body))) => Outcome::Response {
                status,
                body,
                latency,
            },
            Ok(Err(e)) => {
                self.sender = None;
                Outcome::Failed {
                    kind: "transport",
                    detail: e.to_string(),
                }
            }
            Err(_) => {
                self.sender = None;
                Outcome::Failed {
                    kind: "timeout",
                    detail: format!("no complete answer within {} ms", timeout.as_millis()),
                }
            }
        }
    }
}

/// Figures for one endpoint (method + route template).
#[derive(Default, Clone)]
pub struct EndpointStats {
    /// Latency of every answered request (any status), in microseconds.
    latencies_us: Vec<u32>,
    /// Count per HTTP status, successes included.
    statuses: BTreeMap<u16, u64>,
    /// Requests without an answer, by kind (`transport`, `timeout`, `connect`, ...).
    failures: BTreeMap<&'static str, u64>,
    /// 2xx answers whose body lacked what the load generator needed (e.g. no `id`).
    bad_bodies: u64,
    /// First body or failure detail seen per error label, to show what went wrong.
    samples: BTreeMap<String, String>,
}

impl EndpointStats {
    /// Requests recorded.
    pub fn total(&self) -> u64 {
        self.statuses.values().sum::<u64>() + self.failures.values().sum::<u64>()
    }

    fn errors(&self) -> u64 {
        self.statuses
            .iter()
            .filter(|(s, _)| !(200..300).contains(*s))
            .map(|(_, n)| n)
            .sum::<u64>()
            + self.failures.values().sum::<u64>()
            + self.bad_bodies
    }

    fn merge(&mut self, other: &EndpointStats) {
        self.latencies_us.extend_from_slice(&other.latencies_us);
        for (s, n) in &other.statuses {
            *self.statuses.entry(*s).or_default() += n;
        }
        for (k, n) in &other.failures {
            *self.failures.entry(k).or_default() += n;
        }
        self.bad_bodies += other.bad_bodies;
        for (k, v) in &other.samples {
            self.samples.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }

    /// Error labels and counts: `429 x 12, transport x 1`.
    fn error_breakdown(&self) -> String {
        let mut parts: Vec<String> = self
            .statuses
            .iter()
            .filter(|(s, _)| !(200..300).contains(*s))
            .map(|(s, n)| format!("{s} x {n}"))
            .collect();
        parts.extend(self.failures.iter().map(|(k, n)| format!("{k} x {n}")));
        if self.bad_bodies > 0 {
            parts.push(format!("bad-body x {}", self.bad_bodies));
        }
        parts.join(", ")
    }

    /// Success statuses when more than one kind occurred (e.g. `201 x 900, 200 x 100`).
    fn success_breakdown(&self) -> Option<String> {
        let ok: Vec<String> = self
            .statuses
            .iter()
            .rev()
            .filter(|(s, _)| (200..300).contains(*s))
            .map(|(s, n)| format!("{s} x {n}"))
            .collect();
        (ok.len() > 1).then(|| ok.join(", "))
    }
}

/// Latency figures of a set of requests, in milliseconds.
struct Percentiles {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles; sorts `latencies_us` in place.
    fn of(latencies_us: &mut [u32]) -> Option<Self> {
        if latencies_us.is_empty() {
            return None;
        }
        latencies_us.sort_unstable();
        let rank = |p: f64| {
            // Nearest rank: the smallest value with at least p of the samples at or below it.
            let n = latencies_us.len();
            let idx = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
            f64::from(latencies_us[idx]) / 1000.0
        };
        Some(Self {
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: f64::from(*latencies_us.last().expect("not empty")) / 1000.0,
        })
    }
}

/// Figures of one client or one phase, keyed by endpoint label (`POST /v1/customers`).
#[derive(Default, Clone)]
pub struct Stats {
    endpoints: BTreeMap<&'static str, EndpointStats>,
}

/// Longest response body kept as an error sample.
const SAMPLE_CHARS: usize = 300;

impl Stats {
    /// Records one request's outcome under `endpoint`.
    pub fn record(&mut self, endpoint: &'static str, outcome: &Outcome) {
        let e = self.endpoints.entry(endpoint).or_default();
        match outcome {
            Outcome::Response {
                status,
                body,
                latency,
            } => {
                let us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
                e.latencies_us.push(us);
                *e.statuses.entry(*status).or_default() += 1;
                if !(200..300).contains(status) {
                    e.samples.entry(status.to_string()).or_insert_with(|| {
                        String::from_utf8_lossy(body)
                            .chars()
                            .take(SAMPLE_CHARS)
                            .collect()
                    });
                }
            }
            Outcome::Failed { kind, detail } => {
                *e.failures.entry(kind).or_default() += 1;
                e.samples
                    .entry((*kind).to_string())
                    .or_insert_with(|| detail.clone());
            }
        }
    }

    /// Marks the last recorded 2xx answer of `endpoint` as unusable (missing field).
    pub fn record_bad_body(&mut self, endpoint: &'static str, body: &str) {
        let e = self.endpoints.entry(endpoint).or_default();
        e.bad_bodies += 1;
        e.samples
            .entry("bad-body".to_string())
            .or_insert_with(|| body.chars().take(SAMPLE_CHARS).collect());
    }

    /// Adds another client's or phase's figures to these.
    pub fn merge(&mut self, other: &Stats) {
        for (k, v) in &other.endpoints {
            self.endpoints.entry(k).or_default().merge(v);
        }
    }

    /// All requests recorded.
    pub fn total(&self) -> u64 {
        self.endpoints.values().map(EndpointStats::total).sum()
    }

    /// Failed requests: non-2xx answers, requests without an answer, unusable 2xx bodies.
    pub fn errors(&self) -> u64 {
        self.endpoints.values().map(EndpointStats::errors).sum()
    }

    /// Successful requests.
    pub fn successes(&self) -> u64 {
        self.total() - self.errors()
    }

    /// Successful requests to one endpoint (its label, e.g. `POST /v1/test/deposits`).
    pub fn successes_of(&self, label: &str) -> u64 {
        self.endpoints
            .get(label)
            .map(|e| e.total() - e.errors())
            .unwrap_or(0)
    }

    /// The figures of the endpoints whose method is (`reads`) or is not (`!reads`) GET,
    /// folded into one row.
    pub fn combined(&self, reads: bool) -> EndpointStats {
        let mut all = EndpointStats::default();
        for (k, v) in &self.endpoints {
            if k.starts_with("GET ") == reads {
                all.merge(v);
            }
        }
        all
    }

    /// Prints a table header.
    pub fn print_header() {
        println!(
            "  {:<34} {:>9} {:>7} {:>10} {:>8} {:>8} {:>8} {:>8}",
            "endpoint", "count", "errors", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms"
        );
    }

    /// Prints one row per endpoint, with error breakdowns and samples beneath, over `elapsed`.
    pub fn print_table(&self, elapsed: Duration) {
        for (label, e) in &self.endpoints {
            print_row(label, e, elapsed, true);
        }
    }
}

/// The headline figures of an [`EndpointStats`] over a time span.
pub struct Summary {
    pub count: u64,
    pub errors: u64,
    /// Requests per second over the span.
    pub rate: f64,
    latency: Option<Percentiles>,
}

impl EndpointStats {
    /// Count, errors, rate over `elapsed` and latency percentiles.
    pub fn summary(&self, elapsed: Duration) -> Summary {
        let count = self.total();
        let rate = if elapsed.is_zero() {
            0.0
        } else {
            count as f64 / elapsed.as_secs_f64()
        };
        Summary {
            count,
            errors: self.errors(),
            rate,
            latency: Percentiles::of(&mut self.latencies_us.clone()),
        }
    }

    /// The figures as JSON (`count`, `errors`, `error_breakdown`, `rps`, `p50_ms`, ...).
    pub fn json(&self, elapsed: Duration) -> serde_json::Value {
        let s = self.summary(elapsed);
        let mut breakdown = serde_json::Map::new();
        for (status, n) in &self.statuses {
            if !(200..300).contains(status) {
                breakdown.insert(status.to_string(), (*n).into());
            }
        }
        for (kind, n) in &self.failures {
            breakdown.insert((*kind).to_string(), (*n).into());
        }
        if self.bad_bodies > 0 {
            breakdown.insert("bad-body".into(), self.bad_bodies.into());
        }
        let ms = |f: fn(&Percentiles) -> f64| s.latency.as_ref().map(f);
        serde_json::json!({
            "count": s.count,
            "errors": s.errors,
            "error_breakdown": breakdown,
            "rps": s.rate,
            "p50_ms": ms(|p| p.p50),
            "p90_ms": ms(|p| p.p90),
            "p99_ms": ms(|p| p.p99),
            "max_ms": ms(|p| p.max),
        })
    }
}

impl Stats {
    /// Every endpoint's figures as a JSON object keyed by endpoint label.
    pub fn json(&self, elapsed: Duration) -> serde_json::Value {
        self.endpoints
            .iter()
            .map(|(label, e)| ((*label).to_string(), e.json(elapsed)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// Prints one table row for `e` over `elapsed`; `details` adds status breakdowns and the
/// first error body of each kind beneath it.
pub fn print_row(label: &str, e: &EndpointStats, elapsed: Duration, details: bool) {
    let s = e.summary(elapsed);
    let mut line = format!(
        "  {label:<34} {:>9} {:>7} {:>10.1}",
        s.count, s.errors, s.rate
    );
    match &s.latency {
        Some(p) => {
            let _ = write!(
                line,
                " {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                p.p50, p.p90, p.p99, p.max
            );
        }
        None => {
            let _ = write!(line, " {:>8} {:>8} {:>8} {:>8}", "-", "-", "-", "-");
        }
    }
    println!("{line}");
    if !details {
        return;
    }
    if let Some(ok) = e.success_breakdown() {
        println!("      ok: {ok}");
    }
    if s.errors > 0 {
        println!("      errors: {}", e.error_breakdown());
        for (k, sample) in &e.samples {
            println!("      first {k}: {sample}");
        }
    }
}

/// A small, fast xorshift64* generator: good enough to spread requests over ids, and keeps
/// the dependency list short.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed` (any value, zero included).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u32> = (1..=100).map(|x| x * 1000).collect();
        let p = Percentiles::of(&mut v).unwrap();
        assert_eq!(p.p50, 50.0);
        assert_eq!(p.p90, 90.0);
        assert_eq!(p.p99, 99.0);
        assert_eq!(p.max, 100.0);
        let mut one = vec![2500];
        let p = Percentiles::of(&mut one).unwrap();
        assert_eq!((p.p50, p.p99, p.max), (2.5, 2.5, 2.5));
    }

    #[test]
    fn errors_count_non_2xx_and_failures() {
        let mut s = Stats::default();
        let ok = Outcome::Response {
            status: 201,
            body: Bytes::new(),
            latency: Duration::from_millis(1),
        };
        let limited = Outcome::Response {
            status: 429,
            body: Bytes::from_static(b"{\"code\":\"rate_limited\"}"),
            latency: Duration::from_millis(1),
        };
        let failed = Outcome::Failed {
            kind: "transport",
            detail: "reset".into(),
        };
        s.record("POST /v1/customers", &ok);
        s.record("POST /v1/customers", &limited);
        s.record("GET /v1/ping", &failed);
        assert_eq!(s.total(), 3);
        assert_eq!(s.errors(), 2);
        assert_eq!(s.combined(false).total(), 2);
        assert_eq!(s.combined(true).errors(), 1);
        assert_eq!(s.combined(false).error_breakdown(), "429 x 1");
    }

    #[tokio::test]
    async fn parses_targets() {
        let t = Target::parse("http://127.0.0.1:8080/").await.unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(t.url(), "http://127.0.0.1:8080");
        assert!(Target::parse("https://127.0.0.1:1").await.is_err());
        assert!(Target::parse("http://127.0.0.1:1/v1").await.is_err());
    }
}
