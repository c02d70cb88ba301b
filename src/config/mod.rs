//! Configuration in layers (DECISIONS.md section 1): built-in defaults, then the TOML file
//! given by `--config`, then `APPLIANCE_<SECTION>__<KEY>` environment variables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

mod billing;
mod chains;
mod market;
pub use billing::*;
pub use chains::*;
pub use market::*;

/// Most headers the HTTP/1 parser admits; `limits.max_headers` (ours, enveloped) is below.
pub const PARSER_MAX_HEADERS: usize = 1000;
/// Longest request target the HTTP/1 parser admits (hyper's fixed limit); `limits.max_uri_bytes`
/// (ours, enveloped) is at most this.
pub const PARSER_MAX_URI: usize = 65_534;
/// Default least number of operations between two snapshots of a simulated chain. A start
/// replays at most about this many operations after the last snapshot (1M took 3.65 s,
/// so about 0.4 s); fewer snapshots because each costs the store writer: with 10,000, the
/// default loadgen run's test deposits fell from about 7,000/s to 5,900-6,600/s and its disk
/// bytes per deposit rose from 26-28 KB to 41-58 KB (docs/performance.md).
pub const SNAPSHOT_MIN_OPS: u64 = 100_000;

/// Whole configuration. `config.toml.example` documents every key.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to serve on, e.g. `127.0.0.1:8080`.
    pub listen: String,
    pub data_dir: PathBuf,
    /// Base of links the appliance hands out (checkout, explorer), e.g. `https://pay.example.com`.
    pub public_base_url: Option<String>,
    pub tls: Option<TlsConfig>,
    /// Serve plain HTTP on a non-loopback address in live mode (only behind a
    /// TLS-terminating proxy); refused at start otherwise, logged at WARN when on.
    pub allow_plain_http: bool,
    /// `[signing]` (alias `[signer]`, the name DECISIONS.md section 10 uses).
    #[serde(alias = "signer")]
    pub signing: SigningConfig,
    pub storage: StorageConfig,
    pub test: TestConfig,
    pub limits: LimitsConfig,
    pub chains: BTreeMap<String, ChainConfig>,
    pub webhooks: WebhooksConfig,
    /// Log lines on stderr: `text` (default; colour only on a terminal) or `json` (one object
    /// per line, for journald and log shippers).
    pub log_format: LogFormat,
    /// Reverse proxies whose `X-Forwarded-For` is believed (CIDR blocks or single addresses).
    /// Empty (default): the peer address is the client, whatever the header says.
    #[serde(deserialize_with = "crate::ops::proxy::deserialize_nets")]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// `[metrics]`: who may read `GET /metrics` (DECISIONS.md section 16).
    pub metrics: MetricsConfig,
    /// `[market]`: where live-mode prices come from (DECISIONS.md section 11). Absent in
    /// live mode: `configured:false` (no prices but the stablecoins' par).
    pub market: Option<MarketConfig>,
    /// `[billing]`: the plans projects choose from (DECISIONS.md section 13).
    pub billing: BillingConfig,
    /// `[conversion]`: when queued automatic conversions are batched (DECISIONS.md
    /// section 14).
    pub conversion: ConversionConfig,
}

/// `[conversion]` (DECISIONS.md section 14).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConversionConfig {
    /// Queued rows of one (project, chain, from, to) are batched once worth this much
    /// (US cents; default 2,000) ...
    pub min_batch_usd_cents: u64,
    /// ... or once the oldest has waited this long (seconds; default 900).
    pub max_wait_s: u64,
    /// Slippage of automatic batches, basis points (default 50; at most 5,000).
    pub slippage_bps: u32,
}

impl Default for ConversionConfig {
    fn default() -> Self {
        ConversionConfig {
            min_batch_usd_cents: 2_000,
            max_wait_s: 900,
            slippage_bps: 50,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./appliance-data"),
            public_base_url: None,
            tls: None,
            allow_plain_http: false,
            signing: SigningConfig::default(),
            storage: StorageConfig::default(),
            test: TestConfig::default(),
            limits: LimitsConfig::default(),
            chains: BTreeMap::new(),
            webhooks: WebhooksConfig::default(),
            log_format: LogFormat::Text,
            trusted_proxies: Vec::new(),
            metrics: MetricsConfig::default(),
            market: None,
            conversion: ConversionConfig::default(),
            billing: BillingConfig::default(),
        }
    }
}

/// Format of the log lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines; ANSI colour only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `message` and the fields).
    Json,
}

/// Who may read `GET /metrics` (DECISIONS.md section 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsAccess {
    /// Only clients on a loopback address (the default).
    #[default]
    Loopback,
    /// Not served at all (404).
    Off,
    /// Any client presenting `Authorization: Bearer <token>`, the token read at start from
    /// the environment variable named by `token_env`.
    Token,
}

/// `[metrics]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Who may read `GET /metrics` (default `loopback`).
    pub access: MetricsAccess,
    /// Environment variable holding the bearer token (with `access = "token"`; at least 16
    /// characters). A name outside `APPLIANCE_*`: those variables are configuration keys.
    pub token_env: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SigningConfig {
    /// Service-level signing switch (SPEC.md section 5 rule 8): off blocks every payout and sweep.
    pub enabled: bool,
    /// Environment variable holding the seed passphrase.
    pub passphrase_env: Option<String>,
    /// File holding the seed passphrase (e.g. a systemd credential).
    pub passphrase_file: Option<PathBuf>,
}

impl Default for SigningConfig {
    fn default() -> Self {
        SigningConfig {
            enabled: true,
            passphrase_env: None,
            passphrase_file: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Save allocator state on every commit: reopening after a crash takes milliseconds
    /// instead of a walk of the whole file (11.7 s at 1M deposits), for a commit cost that
    /// does not show over HTTP (see docs/decisions.md, Storage). On by default.
    pub quick_repair: bool,
    /// redb page cache in MiB.
    pub cache_size_mb: usize,
    /// Most requests committed in one transaction.
    pub max_batch: usize,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            quick_repair: true,
            cache_size_mb: 256,
            max_batch: 512,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TestConfig {
    /// Simulated chain: one block per chain every this many milliseconds.
    pub block_interval_ms: u64,
    /// Simulated chain: least operations between two snapshots of a chain's state (its
    /// log is cut at each; `services::sim_chain::SnapshotPolicy`). Default 100,000; at
    /// least 1.
    pub snapshot_min_ops: u64,
    /// Simulated chain: blocks held in memory below the head once the chain's worker has
    /// read them (blocks, receipts, what a test reorg can replace; older ones answer as a
    /// node that expired its history). Default 10,000; 64 to 100,000. Blocks the worker has
    /// not read yet are held up to 100,000 deep whatever this is
    /// (`appliance_chains::sim::HOLD_LIMIT`).
    pub retain_blocks: u64,
}

impl Default for TestConfig {
    fn default() -> Self {
        TestConfig {
            block_interval_ms: 1000,
            snapshot_min_ops: SNAPSHOT_MIN_OPS,
            retain_blocks: appliance_chains::sim::RETAIN_BLOCKS,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Requests per minute per source IP that carry no valid key (DECISIONS.md section 8).
    pub unauthenticated_per_minute: u32,
    /// Largest request body accepted, bytes (413 above).
    pub max_body_bytes: usize,
    /// Seconds a client has to send a whole request head, from the connection's accept or
    /// the first byte of the next request; the connection is closed after (DECISIONS.md
    /// section 16: 10 s).
    pub header_read_timeout_secs: u64,
    /// Seconds a client has to send a whole request body, from the end of its head; the
    /// request is then answered 408 `request_timeout` and the connection closed: a body
    /// trickled a byte at a time would otherwise hold a connection for as long as it liked.
    pub body_read_timeout_secs: u64,
    /// Seconds an idle keep-alive connection (no request in flight, no bytes arriving) stays
    /// open (DECISIONS.md section 16: 60 s).
    pub idle_timeout_secs: u64,
    /// Most open client connections (DECISIONS.md section 16: 10,000). At the ceiling a new
    /// connection sheds the longest-idle one; when none is idle it is answered 503.
    pub max_connections: usize,
    /// Most request headers (431 `request_headers_too_large` above).
    pub max_headers: usize,
    /// Longest request target (path and query), bytes (414 `uri_too_long` above).
    pub max_uri_bytes: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            unauthenticated_per_minute: 60,
            max_body_bytes: 1 << 20,
            header_read_timeout_secs: 10,
            body_read_timeout_secs: 10,
            idle_timeout_secs: 60,
            max_connections: 10_000,
            max_headers: 100,
            max_uri_bytes: 16 * 1024,
        }
    }
}

impl LimitsConfig {
    /// Refuses values the server cannot honour (zero timeouts, a URI limit above what the
    /// HTTP parser itself admits).
    pub fn validate(&self) -> Result<(), String> {
        if self.header_read_timeout_secs == 0
            || self.body_read_timeout_secs == 0
            || self.idle_timeout_secs == 0
        {
            return Err(
                "limits.header_read_timeout_secs, limits.body_read_timeout_secs and limits.idle_timeout_secs must be at least 1"
                    .into(),
            );
        }
        if self.max_connections == 0 {
            return Err("limits.max_connections must be at least 1".into());
        }
        if !(1..=PARSER_MAX_HEADERS).contains(&self.max_headers) {
            return Err(format!(
                "limits.max_headers must be from 1 to {}",
                PARSER_MAX_HEADERS
            ));
        }
        if !(1024..=PARSER_MAX_URI).contains(&self.max_uri_bytes) {
            return Err(format!(
                "limits.max_uri_bytes must be from 1024 to {}",
                PARSER_MAX_URI
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// Lets tests and local development target http and loopback receivers.
    pub allow_private_targets: bool,
    /// Delays between attempts, seconds (DECISIONS.md section 7); `max_attempts` is one more
    /// than its length. A list, or a comma-separated string (for the environment).
    #[serde(deserialize_with = "seconds_list")]
    pub retry_schedule_s: Vec<u64>,
    /// Longest wait for a receiver's answer (status and the start of the body).
    pub timeout_ms: u64,
    /// Most sends in flight at once.
    pub max_concurrency: usize,
    /// Event stream: seconds between `ping` frames (SPEC.md section 8: 25).
    pub stream_ping_s: u64,
    /// Event stream: seconds after which a stream is closed (SPEC.md section 8: 30 minutes).
    pub stream_max_age_s: u64,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            allow_private_targets: false,
            retry_schedule_s: vec![60, 300, 1800, 7200, 21_600, 43_200, 86_400],
            timeout_ms: 10_000,
            max_concurrency: 64,
            stream_ping_s: 25,
            stream_max_age_s: 1800,
        }
    }
}

impl WebhooksConfig {
    /// Attempts a new webhook delivery gets: one more than the retry schedule's length
    /// (DECISIONS.md section 7; default 8).
    pub fn max_attempts(&self) -> u32 {
        (self.retry_schedule_s.len() as u32).saturating_add(1)
    }

    /// Refuses values the dispatcher cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        if self.retry_schedule_s.len() > 20 {
            return Err("webhooks.retry_schedule_s has more than 20 entries".into());
        }
        if self
            .retry_schedule_s
            .iter()
            .any(|s| *s == 0 || *s > 7 * 86_400)
        {
            return Err("webhooks.retry_schedule_s entries must be 1 to 604800 seconds".into());
        }
        if !(1..=3600).contains(&self.stream_ping_s) {
            return Err("webhooks.stream_ping_s must be 1 to 3600".into());
        }
        if !(1..=86_400).contains(&self.stream_max_age_s) {
            return Err("webhooks.stream_max_age_s must be 1 to 86400".into());
        }
        if !(100..=60_000).contains(&self.timeout_ms) {
            return Err("webhooks.timeout_ms must be 100 to 60000".into());
        }
        if !(1..=1024).contains(&self.max_concurrency) {
            return Err("webhooks.max_concurrency must be 1 to 1024".into());
        }
        Ok(())
    }
}

/// A list of seconds given as a TOML array or as a string `"60,300,1800"`.
fn seconds_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        List(Vec<u64>),
        Text(String),
        One(u64),
    }
    match Form::deserialize(d)? {
        Form::List(v) => Ok(v),
        Form::One(n) => Ok(vec![n]),
        Form::Text(s) => s
            .split(',')
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u64>().map_err(serde::de::Error::custom))
            .collect(),
    }
}

/// Why configuration could not be loaded. Each message is complete on its own (no source
/// chain is appended), so it is printed once.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("parsing {path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// A key no configuration struct knows: its dotted path, where it
    /// came from and the closest valid name.
    #[error("unknown key {key} in {origin}{hint}")]
    UnknownKey {
        key: String,
        origin: String,
        hint: String,
    },
    /// A key of the wrong type or value.
    #[error("invalid value for {key} in {origin}: {message}")]
    Invalid {
        key: String,
        origin: String,
        message: String,
    },
    #[error("environment variable {0} is not of the form APPLIANCE_<SECTION>__<KEY>")]
    BadEnv(String),
    /// A value that parses but cannot work (ranges, chain names, files).
    #[error("{0}")]
    Check(String),
}

/// `APPLIANCE_*` environment variables that are not configuration keys: the log filter and
/// the default seed passphrase. Variables named by a `*_env` key of the configuration file
/// (e.g. `signing.passphrase_env`) are not configuration keys either.
pub const DOCUMENTED_ENV: &[&str] = &["APPLIANCE_LOG", "APPLIANCE_PASSPHRASE"];

impl Config {
    /// Loads defaults, then `file` (if any), then the environment. Unknown keys, tables and
    /// `APPLIANCE_*` variables are refused with their path and the closest valid name.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_from(file, std::env::vars())
    }

    /// [`Config::load`] with the environment given (tests).
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut root = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
                    path: path.into(),
                    message: io_message(&e),
                })?;
                text.parse::<toml::Table>()
                    .map_err(|e| ConfigError::Parse {
                        path: path.into(),
                        message: e.to_string().trim_end().to_string(),
                    })?
            }
            None => toml::Table::new(),
        };
        let mut not_config: Vec<String> = DOCUMENTED_ENV.iter().map(|s| s.to_string()).collect();
        collect_env_names(&root, &mut not_config);
        // (dotted path, variable) of every key the environment set.
        let mut from_env: Vec<(String, String)> = Vec::new();
        let mut env: Vec<(String, String)> = env.into_iter().collect();
        env.sort();
        // `*_env` keys set from the environment name secrets too.
        for (name, value) in &env {
            if name.starts_with("APPLIANCE_") && name.ends_with("_ENV") {
                not_config.push(value.clone());
            }
        }
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("APPLIANCE_") else {
                continue;
            };
            if not_config.contains(&name) {
                continue;
            }
            let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
            if rest.is_empty() || path.iter().any(|p| p.is_empty()) {
                return Err(ConfigError::BadEnv(name));
            }
            from_env.push((path.join("."), name));
            set_path(&mut root, &path, parse_env_value(&value));
        }
        let origin_of = |key: &str| -> String {
            for (p, var) in &from_env {
                if key == p
                    || key.starts_with(&format!("{p}."))
                    || p.starts_with(&format!("{key}."))
                {
                    return format!("environment variable {var}");
                }
            }
            match file {
                Some(f) => f.display().to_string(),
                None => "the configuration".to_string(),
            }
        };
        let de = toml::Value::Table(root);
        match serde_path_to_error::deserialize::<_, Config>(de) {
            Ok(cfg) => Ok(cfg),
            Err(e) => {
                let parent = match e.path().to_string() {
                    p if p == "." => String::new(),
                    p => p,
                };
                let message = e.inner().message().trim_end().to_string();
                if let Some((field, expected)) = parse_unknown_field(&message) {
                    // The path ends with the refused key itself.
                    let (key, parent) = match parent.rsplit_once('.') {
                        Some((p, last)) if last == field => (parent.clone(), p.to_string()),
                        None if parent == field => (parent.clone(), String::new()),
                        _ if parent.is_empty() => (field.clone(), String::new()),
                        _ => (format!("{parent}.{field}"), parent.clone()),
                    };
                    let origin = origin_of(&key);
                    let hint = match closest(&field, &expected) {
                        Some(best) if origin.starts_with("environment") => {
                            let mut var = String::from("APPLIANCE_");
                            if !parent.is_empty() {
                                var.push_str(&parent.replace('.', "__").to_ascii_uppercase());
                                var.push_str("__");
                            }
                            var.push_str(&best.to_ascii_uppercase());
                            format!(" (did you mean {var}?)")
                        }
                        Some(best) => format!(" (did you mean {best}?)"),
                        None if expected.is_empty() => String::new(),
                        None => format!(" (valid keys: {})", expected.join(", ")),
                    };
                    return Err(ConfigError::UnknownKey { key, origin, hint });
                }
                let origin = origin_of(&parent);
                Err(ConfigError::Invalid {
                    key: if parent.is_empty() {
                        "the configuration".into()
                    } else {
                        parent
                    },
                    origin,
                    message,
                })
            }
        }
    }

    /// Checks what parses but cannot work, before anything is opened:
    /// value ranges, chain table names and the TLS files (readable, parseable PEM).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.webhooks.validate().map_err(ConfigError::Check)?;
        if self.conversion.slippage_bps > 5_000 {
            return Err(ConfigError::Check(format!(
                "conversion.slippage_bps {} is above 5000",
                self.conversion.slippage_bps
            )));
        }
        self.billing.validate().map_err(ConfigError::Check)?;
        if !(64..=appliance_chains::sim::HOLD_LIMIT).contains(&self.test.retain_blocks) {
            return Err(ConfigError::Check(format!(
                "test.retain_blocks must be from 64 to {}",
                appliance_chains::sim::HOLD_LIMIT
            )));
        }
        if let Some(m) = &self.market {
            m.validate().map_err(ConfigError::Check)?;
        }
        let known: Vec<&str> = appliance_chains::CHAINS.iter().map(|c| c.id).collect();
        for (id, cc) in &self.chains {
            let Some(info) = appliance_chains::CHAINS
                .iter()
                .find(|c| c.id == id.as_str())
            else {
                let hint =
                    match closest(id, &known.iter().map(|s| s.to_string()).collect::<Vec<_>>()) {
                        Some(b) => format!(" (did you mean {b}?)"),
                        None => String::new(),
                    };
                return Err(ConfigError::Check(format!(
                    "unknown chain [chains.{id}]{hint}; valid chains: {}",
                    known.join(", ")
                )));
            };
            if info.account_kind != appliance_chains::AccountKind::Contract {
                return Err(ConfigError::Check(format!(
                    "[chains.{id}]: no live adapter for this chain family yet"
                )));
            }
            cc.check_urls(id).map_err(ConfigError::Check)?;
            if let Some(d) = &cc.dex {
                d.dex(id).map_err(ConfigError::Check)?;
            }
        }
        if let Some(tls) = &self.tls {
            check_pem(&tls.cert, "tls.cert", "CERTIFICATE")?;
            check_pem(&tls.key, "tls.key", "PRIVATE KEY")?;
        }
        Ok(())
    }

    /// The store file inside the data dir.
    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join("appliance.redb")
    }

    /// The operator socket inside the data dir.
    pub fn socket_path(&self) -> PathBuf {
        self.data_dir.join("appliance.sock")
    }
}

/// An I/O error as a short lower-case phrase (`permission denied`, `not found`).
pub fn io_message(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        _ => e.to_string(),
    }
}

/// A readable PEM file holding at least one `label` block (`tls.cert`, `tls.key`).
fn check_pem(path: &Path, key: &str, label: &str) -> Result<(), ConfigError> {
    let text = std::fs::read(path).map_err(|e| {
        ConfigError::Check(format!(
            "{key}: reading {}: {}",
            path.display(),
            io_message(&e)
        ))
    })?;
    let text = String::from_utf8_lossy(&text);
    let found = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.contains(label));
    if !found {
        return Err(ConfigError::Check(format!(
            "{key}: {} holds no PEM {label}",
            path.display()
        )));
    }
    Ok(())
}

/// Names given by `*_env` keys anywhere in the file (they hold secrets, not configuration).
fn collect_env_names(t: &toml::Table, out: &mut Vec<String>) {
    for (k, v) in t {
        match v {
            toml::Value::String(s) if k.ends_with("_env") => out.push(s.clone()),
            toml::Value::Table(t) => collect_env_names(t, out),
            _ => {}
        }
    }
}

/// Parses serde's ``unknown field `x`, expected one of `a`, `b` `` into (x, [a, b]).
fn parse_unknown_field(message: &str) -> Option<(String, Vec<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let end = rest.find('`')?;
    let field = rest[..end].to_string();
    let mut expected = Vec::new();
    let mut tail = &rest[end + 1..];
    while let Some(a) = tail.find('`') {
        let after = &tail[a + 1..];
        let Some(b) = after.find('`') else { break };
        expected.push(after[..b].to_string());
        tail = &after[b + 1..];
    }
    Some((field, expected))
}

/// The valid name closest to `wrong`, for "did you mean" hints: the one fewest edits away
/// (transpositions count as one, at most a third of the name), else the most similar by
/// Jaro-Winkler (at least 0.8, the measure clap uses for its own suggestions).
pub fn closest(wrong: &str, valid: &[String]) -> Option<String> {
    let limit = (wrong.chars().count() / 3).max(1);
    let by_edits = valid
        .iter()
        .map(|v| (strsim::osa_distance(wrong, v), v))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d);
    if let Some((_, v)) = by_edits {
        return Some(v.clone());
    }
    valid
        .iter()
        .map(|v| (strsim::jaro_winkler(wrong, v), v))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, v)| v.clone())
}

fn parse_env_value(v: &str) -> toml::Value {
    if let Ok(b) = v.parse::<bool>() {
        return toml::Value::Boolean(b);
    }
    if let Ok(i) = v.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    toml::Value::String(v.to_string())
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) {
    let (head, rest) = path.split_first().expect("non-empty path");
    if rest.is_empty() {
        table.insert(head.clone(), value);
        return;
    }
    let entry = table
        .entry(head.clone())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if !entry.is_table() {
        *entry = toml::Value::Table(toml::Table::new());
    }
    if let toml::Value::Table(t) = entry {
        set_path(t, rest, value);
    }
}

#[cfg(test)]
mod tests;
