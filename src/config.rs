//! Configuration in layers (DECISIONS.md section 1): built-in defaults, then the TOML file
//! given by `--config`, then `APPLIANCE_<SECTION>__<KEY>` environment variables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Whole configuration. `config.toml.example` documents every key.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Address to serve on, e.g. `127.0.0.1:8080`.
    pub listen: String,
    pub data_dir: PathBuf,
    /// Base of links the appliance hands out (checkout, explorer), e.g. `https://pay.example.com`.
    pub public_base_url: Option<String>,
    pub tls: Option<TlsConfig>,
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./appliance-data"),
            public_base_url: None,
            tls: None,
            signing: SigningConfig::default(),
            storage: StorageConfig::default(),
            test: TestConfig::default(),
            limits: LimitsConfig::default(),
            chains: BTreeMap::new(),
            webhooks: WebhooksConfig::default(),
            log_format: LogFormat::Text,
            trusted_proxies: Vec::new(),
            metrics: MetricsConfig::default(),
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
#[serde(default)]
pub struct MetricsConfig {
    /// Who may read `GET /metrics` (default `loopback`).
    pub access: MetricsAccess,
    /// Environment variable holding the bearer token (with `access = "token"`; at least 16
    /// characters). A name outside `APPLIANCE_*`: those variables are configuration keys.
    pub token_env: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
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
#[serde(default)]
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
#[serde(default)]
pub struct TestConfig {
    /// Simulated chain: one block per chain every this many milliseconds.
    pub block_interval_ms: u64,
}

impl Default for TestConfig {
    fn default() -> Self {
        TestConfig {
            block_interval_ms: 1000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct LimitsConfig {
    /// Requests per minute per source IP that carry no valid key (DECISIONS.md section 8).
    pub unauthenticated_per_minute: u32,
    /// Largest request body accepted, bytes (413 above).
    pub max_body_bytes: usize,
    /// Seconds a client has to send a whole request head, from the connection's accept or
    /// the first byte of the next request; the connection is closed after (DECISIONS.md
    /// section 16: 10 s).
    pub header_read_timeout_secs: u64,
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
        if self.header_read_timeout_secs == 0 || self.idle_timeout_secs == 0 {
            return Err(
                "limits.header_read_timeout_secs and limits.idle_timeout_secs must be at least 1"
                    .into(),
            );
        }
        if self.max_connections == 0 {
            return Err("limits.max_connections must be at least 1".into());
        }
        if !(1..=crate::transport::PARSER_MAX_HEADERS).contains(&self.max_headers) {
            return Err(format!(
                "limits.max_headers must be from 1 to {}",
                crate::transport::PARSER_MAX_HEADERS
            ));
        }
        if !(1024..=crate::transport::PARSER_MAX_URI).contains(&self.max_uri_bytes) {
            return Err(format!(
                "limits.max_uri_bytes must be from 1024 to {}",
                crate::transport::PARSER_MAX_URI
            ));
        }
        Ok(())
    }
}

/// One live chain (DECISIONS.md section 10).
#[derive(Debug, Clone, Deserialize)]
pub struct ChainConfig {
    pub rpc_url: String,
    pub confirmations: Option<u32>,
    #[serde(default = "default_poll_ms")]
    pub poll_interval_ms: u64,
    #[serde(default)]
    pub sweep_threshold_usd_cents: Option<u64>,
    #[serde(default)]
    pub assets: Vec<AssetConfig>,
    /// A transaction of the master wallet unmined this long is replaced with the same
    /// nonce and higher fees.
    #[serde(default = "default_replace_ms")]
    pub replace_after_ms: u64,
    /// Block the watcher starts from on its first run (default: the node's head then).
    #[serde(default)]
    pub start_block: Option<u64>,
}

fn default_poll_ms() -> u64 {
    1000
}

fn default_replace_ms() -> u64 {
    120_000
}

#[derive(Debug, Clone, Deserialize)]
pub struct AssetConfig {
    pub symbol: String,
    pub contract: String,
    pub decimals: u8,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
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

/// Why configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid configuration: {0}")]
    Invalid(#[from] toml::de::Error),
    #[error("environment variable {0} is not of the form APPLIANCE_<SECTION>__<KEY>")]
    BadEnv(String),
}

/// Environment variables that carry secrets, never configuration keys.
const SECRET_ENV: &[&str] = &["APPLIANCE_PASSPHRASE"];

impl Config {
    /// Loads defaults, then `file` (if any), then the environment.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut root = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.into(),
                    source,
                })?;
                text.parse::<toml::Table>()
                    .map_err(|source| ConfigError::Parse {
                        path: path.into(),
                        source,
                    })?
            }
            None => toml::Table::new(),
        };
        for (name, value) in std::env::vars() {
            let Some(rest) = name.strip_prefix("APPLIANCE_") else {
                continue;
            };
            if SECRET_ENV.contains(&name.as_str()) || rest.is_empty() {
                continue;
            }
            let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
            if path.iter().any(|p| p.is_empty()) {
                return Err(ConfigError::BadEnv(name));
            }
            set_path(&mut root, &path, parse_env_value(&value));
        }
        let cfg: Config = toml::Value::Table(root).try_into()?;
        Ok(cfg)
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
mod tests {
    use super::*;

    #[test]
    fn env_path_sets_nested_keys() {
        let mut t = toml::Table::new();
        set_path(
            &mut t,
            &["webhooks".into(), "allow_private_targets".into()],
            parse_env_value("true"),
        );
        set_path(
            &mut t,
            &["test".into(), "block_interval_ms".into()],
            parse_env_value("250"),
        );
        let cfg: Config = toml::Value::Table(t).try_into().unwrap();
        assert!(cfg.webhooks.allow_private_targets);
        assert_eq!(cfg.webhooks.retry_schedule_s.len(), 7);
        assert_eq!(cfg.test.block_interval_ms, 250);
        assert_eq!(cfg.listen, "127.0.0.1:8080");
    }

    #[test]
    fn retry_schedule_reads_a_list_or_a_string() {
        let mut t = toml::Table::new();
        set_path(
            &mut t,
            &["webhooks".into(), "retry_schedule_s".into()],
            parse_env_value("1,2, 3"),
        );
        let cfg: Config = toml::Value::Table(t).try_into().unwrap();
        assert_eq!(cfg.webhooks.retry_schedule_s, vec![1, 2, 3]);
        let cfg: Config = toml::from_str("[webhooks]\nretry_schedule_s = [5, 6]\n").unwrap();
        assert_eq!(cfg.webhooks.retry_schedule_s, vec![5, 6]);
        assert!(cfg.webhooks.validate().is_ok());
    }
}
