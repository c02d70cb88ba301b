//! Market prices in USD (DECISIONS.md sections 11 and 15; SPEC.md section 2, Price list and
//! market status).
//!
//! * Stablecoins (`is_stable` in the registry) are priced at par, 1.00 USD, everywhere.
//! * Test mode (`--test`) never calls out: one table per server, seeded with DECISIONS.md
//!   section 11's prices and changed with `POST /v1/test/prices`. Test projects always
//!   price from it.
//! * Live mode reads the `[market]` provider (Kraken's public ticker, [`kraken`]) and, for
//!   a symbol the provider cannot price, the fallback (Chainlink feeds, [`chainlink`]).
//!   Prices are cached: a value older than `ttl_seconds` is still served and refreshed in
//!   the background; a value older than `max_age_seconds` is never served and never used.
//!   Zero, negative, unparsable and stale values are refused, never stored. Without
//!   `[market]` live mode is `configured:false`.
//!
//! Prices are [`Decimal`]s, never floats.

pub mod chainlink;
pub mod kraken;

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rust_decimal::Decimal;

use crate::config::{Config, MarketConfig, MarketFallback};

/// DECISIONS.md section 11: test mode's prices until `POST /v1/test/prices` changes them.
pub const TEST_PRICES: &[(&str, &str)] = &[
    ("ETH", "3000.00"),
    ("BTC", "60000.00"),
    ("BNB", "600.00"),
    ("POL", "0.50"),
    ("AVAX", "30.00"),
    ("TRX", "0.25"),
    ("SOL", "150.00"),
    ("TON", "5.00"),
    ("DOGE", "0.20"),
];

/// Most integer digits of a price: below 10^12 USD (far above any coin's).
const MAX_INT_DIGITS: usize = 12;
/// Most decimals of a price.
const MAX_FRAC_DIGITS: usize = 16;
/// Least time between two reads of one symbol that found nothing usable (an upstream that
/// is down is not hammered by every request that wants its price).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// Why a source gave no usable price. Logged; never shown to API clients.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PriceError {
    #[error("rate limited by the provider (HTTP {0})")]
    RateLimited(u16),
    #[error("the provider answered HTTP {0}")]
    Status(u16),
    #[error("the provider's answer is malformed: {0}")]
    Malformed(String),
    #[error("the provider reported: {0}")]
    Provider(String),
    #[error("no price for pair {0} in the answer")]
    Missing(String),
    #[error("refused value {0:?}: {1}")]
    Refused(String, &'static str),
    #[error("stale: last updated {0} s ago")]
    Stale(u64),
    #[error("{0}")]
    Transport(String),
    #[error("no feed for {0}")]
    NoFeed(String),
}

/// Parses a price: `^[0-9]{1,12}(\.[0-9]{1,16})?$` (so below 10^12 USD, at most 16
/// decimals: 28 digits, what a `Decimal` holds exactly) and above zero. Anything else (zero, negative, exponent forms, spaces) is
/// [`PriceError::Refused`].
pub fn positive_price(text: &str) -> Result<Decimal, PriceError> {
    let refused = |why| PriceError::Refused(text.chars().take(40).collect(), why);
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text, None),
    };
    let digits = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())
    };
    if !digits(int, MAX_INT_DIGITS) || frac.is_some_and(|f| !digits(f, MAX_FRAC_DIGITS)) {
        return Err(refused(
            "not a plain decimal below 10^12 with at most 16 decimals",
        ));
    }
    let d = Decimal::from_str_exact(text).map_err(|_| refused("not a decimal number"))?;
    if d <= Decimal::ZERO {
        return Err(refused("a price must be above zero"));
    }
    Ok(d)
}

/// A price as a decimal string with at least two decimal places and no trailing zeros
/// beyond them (`3000` → `"3000.00"`, `0.123400` → `"0.1234"`).
pub fn format_usd(d: Decimal) -> String {
    let mut n = d.normalize();
    if n.scale() < 2 {
        n.rescale(2);
    }
    n.to_string()
}

/// The exact USD value of `amount` atomic units of an asset with `decimals` at `rate` USD
/// per whole unit; `None` when it does not fit a decimal (the caller treats it as unpriced).
pub fn usd_value(amount: u128, decimals: u8, rate: Decimal) -> Option<Decimal> {
    let mut units = Decimal::from_u128(amount)?;
    if decimals as u32 > 28 {
        return None;
    }
    units.set_scale(decimals as u32).ok()?;
    units.checked_mul(rate)
}

/// Whole US cents of a USD value, rounded down.
pub fn whole_cents(value: Decimal) -> Option<u64> {
    let cents = value.checked_mul(Decimal::ONE_HUNDRED)?.trunc();
    u64::from_str(&cents.normalize().to_string()).ok()
}

/// Trait for `Decimal::from_u128` without the num-traits import at every call.
trait FromU128: Sized {
    fn from_u128(v: u128) -> Option<Self>;
}

impl FromU128 for Decimal {
    fn from_u128(v: u128) -> Option<Decimal> {
        Decimal::from_str(&v.to_string()).ok()
    }
}

/// Whether a USD `value` is below `threshold_cents`; a value too large to compute is not.
pub fn below_threshold(value: Option<Decimal>, threshold_cents: u64) -> bool {
    match value {
        Some(v) => v < Decimal::from(threshold_cents) / Decimal::ONE_HUNDRED,
        None => false,
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    u64::try_from(appliance_storage::now_us() / 1_000_000).unwrap_or(0)
}

/// One price in the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct Quote {
    pub usd: Decimal,
    /// `kraken`, `chainlink`, `test` or `par`.
    pub source: &'static str,
    /// When the value was true, Unix seconds (the fetch for the provider, the round's
    /// `updatedAt` for a feed).
    pub as_of: u64,
}

#[derive(Debug, Clone)]
struct Cached {
    quote: Quote,
    /// When it was fetched (decides the background refresh).
    fetched: Instant,
}

/// How usable a cached value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Within the TTL.
    Fresh,
    /// Older than the TTL, within `max_age`: served, and a refresh is started.
    Stale,
    /// Older than `max_age`: never served or used.
    Expired,
}

/// Freshness of a value fetched `since_fetch` ago and true `age_s` seconds ago.
pub fn freshness(since_fetch: Duration, age_s: u64, ttl: Duration, max_age_s: u64) -> Freshness {
    if age_s > max_age_s {
        Freshness::Expired
    } else if since_fetch > ttl {
        Freshness::Stale
    } else {
        Freshness::Fresh
    }
}

/// One entry of a price list.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceEntry {
    pub symbol: String,
    pub usd: Decimal,
    pub age_seconds: u64,
}

/// The live sources of a configured `[market]`.
struct Live {
    cfg: MarketConfig,
    kraken: kraken::Kraken,
    chainlink: Option<chainlink::Chainlink>,
}

/// Where this server's prices come from.
enum Source {
    /// `--test`: the test table only.
    Test,
    /// `serve` without `[market]`.
    Unconfigured,
    Live(Box<Live>),
}

impl std::fmt::Debug for Market {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Market")
            .field("provider", &self.provider())
            .finish_non_exhaustive()
    }
}

/// The price service of one server (`AppState::market`).
pub struct Market {
    source: Source,
    ttl: Duration,
    max_age_s: u64,
    /// Non-stable symbols the registry lists (the ones priced by a source).
    symbols: Vec<String>,
    /// Stablecoin symbols (par).
    stables: Vec<String>,
    test_table: RwLock<BTreeMap<String, Decimal>>,
    cache: RwLock<HashMap<String, Cached>>,
    /// One read per symbol at a time (a request waiting for a price and the background
    /// refresh never ask twice for the same thing).
    locks: HashMap<String, Arc<tokio::sync::Mutex<Option<Instant>>>>,
    refreshing: AtomicBool,
    last_refresh: Mutex<Option<Instant>>,
    /// Moves with every price stored (a test price set, a live value fetched): see
    /// [`Market::generation`].
    generation: AtomicU64,
}

impl Market {
    /// The market of a server: the test table in `--test` mode, else `[market]` when set.
    pub fn new(config: &Config, test_mode: bool) -> Market {
        let mut symbols: Vec<String> = Vec::new();
        let mut stables: Vec<String> = Vec::new();
        for c in appliance_chains::CHAINS {
            for a in c.assets() {
                let list = if a.is_stable() {
                    &mut stables
                } else {
                    &mut symbols
                };
                if !list.iter().any(|s| s == a.symbol) {
                    list.push(a.symbol.to_string());
                }
            }
        }
        let cfg = config.market.clone();
        let ttl = Duration::from_secs(cfg.as_ref().map(|m| m.ttl_seconds).unwrap_or(60));
        let max_age_s = cfg.as_ref().map(|m| m.max_age_seconds).unwrap_or(3600);
        let source = match (test_mode, cfg) {
            (true, _) => Source::Test,
            (false, None) => Source::Unconfigured,
            (false, Some(cfg)) => {
                let timeout = Duration::from_millis(cfg.timeout_ms);
                match kraken::Kraken::new(&cfg.base_url, timeout, &cfg.pairs) {
                    Ok(kraken) => {
                        let chainlink = match cfg.fallback {
                            MarketFallback::None => None,
                            MarketFallback::Chainlink => chainlink_client(config, &cfg),
                        };
                        Source::Live(Box::new(Live {
                            cfg,
                            kraken,
                            chainlink,
                        }))
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "market provider client cannot be built; prices are not configured");
                        Source::Unconfigured
                    }
                }
            }
        };
        let test_table = TEST_PRICES
            .iter()
            .map(|(s, p)| (s.to_string(), Decimal::from_str(p).expect("test price")))
            .collect();
        let locks = symbols
            .iter()
            .map(|s| (s.clone(), Arc::new(tokio::sync::Mutex::new(None))))
            .collect();
        Market {
            source,
            ttl,
            max_age_s,
            symbols,
            stables,
            test_table: RwLock::new(test_table),
            cache: RwLock::new(HashMap::new()),
            locks,
            refreshing: AtomicBool::new(false),
            last_refresh: Mutex::new(None),
            generation: AtomicU64::new(0),
        }
    }

    /// A number that changes whenever a price is stored (a test price set, a live value
    /// fetched), so a caller that decided something at one generation knows a price may
    /// decide it differently now (the sender's waiting sweeps,
    /// `workers::chain::waiting`). A price that only expires does not move it: an
    /// expired price is no usable price, which never turns a waiting sweep into one to send.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether prices are available at all (`configured` of SPEC.md's price list).
    pub fn configured(&self) -> bool {
        !matches!(self.source, Source::Unconfigured)
    }

    /// Whether this is test mode's table.
    pub fn is_test(&self) -> bool {
        matches!(self.source, Source::Test)
    }

    pub fn ttl_seconds(&self) -> u64 {
        self.ttl.as_secs()
    }

    pub fn max_age_seconds(&self) -> u64 {
        self.max_age_s
    }

    /// The provider's base URL (`market_status.base_url`); empty when none is called
    /// (test mode, not configured).
    pub fn base_url(&self) -> String {
        match &self.source {
            Source::Live(l) => appliance_chains::redact::redact_url(&l.cfg.base_url),
            _ => String::new(),
        }
    }

    /// `kraken`, `test` or `none`.
    pub fn provider(&self) -> &'static str {
        match &self.source {
            Source::Live(_) => "kraken",
            Source::Test => "test",
            Source::Unconfigured => "none",
        }
    }

    /// `chainlink` when the fallback can run (a feed and the `ethereum` node), else `none`.
    pub fn fallback(&self) -> &'static str {
        match &self.source {
            Source::Live(l) if l.chainlink.is_some() => "chainlink",
            _ => "none",
        }
    }

    /// Whether `symbol` is a stablecoin (priced at par).
    pub fn is_stable(&self, symbol: &str) -> bool {
        self.stables.iter().any(|s| s == symbol)
    }

    /// Whether `symbol` is one the market prices (a listed coin, stable or not).
    pub fn knows(&self, symbol: &str) -> bool {
        self.is_stable(symbol) || self.symbols.iter().any(|s| s == symbol)
    }

    /// Sets a test price (`POST /v1/test/prices`). Only stablecoins are refused (par).
    pub fn set_test_price(&self, symbol: &str, usd: Decimal) {
        self.test_table
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(symbol.to_string(), usd);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The test table's price of `symbol`.
    fn test_price(&self, symbol: &str) -> Option<Decimal> {
        self.test_table
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(symbol)
            .copied()
    }

    /// A usable price of `symbol` for deciding about money (auto-approval, sweep threshold,
    /// an invoice rate): par for a stablecoin; the test table for a test project
    /// (`livemode == false`); else a live value no older than `max_age_seconds`, read now
    /// (bounded by `timeout_ms`) when the cache holds none. `None`: no usable price; the
    /// caller must not act as if it had one.
    pub async fn usable_price(self: &Arc<Self>, symbol: &str, livemode: bool) -> Option<Decimal> {
        if self.is_stable(symbol) {
            return Some(Decimal::ONE);
        }
        if !livemode {
            return self.test_price(symbol);
        }
        let Source::Live(_) = &self.source else {
            return None;
        };
        if let Some(q) = self.cached(symbol) {
            return Some(q.usd);
        }
        self.read_symbol(symbol, true).await;
        self.cached(symbol).map(|q| q.usd)
    }

    /// [`Market::usable_price`] with where it came from (`par`, `test`, `kraken`,
    /// `chainlink`): what an invoice locks as `rate` and `rate_source` (DECISIONS.md
    /// section 12).
    pub async fn usable_quote(
        self: &Arc<Self>,
        symbol: &str,
        livemode: bool,
    ) -> Option<(Decimal, &'static str)> {
        if self.is_stable(symbol) {
            return Some((Decimal::ONE, "par"));
        }
        if !livemode {
            return self.test_price(symbol).map(|p| (p, "test"));
        }
        let Source::Live(_) = &self.source else {
            return None;
        };
        if let Some(q) = self.cached(symbol) {
            return Some((q.usd, q.source));
        }
        self.read_symbol(symbol, true).await;
        self.cached(symbol).map(|q| (q.usd, q.source))
    }

    /// Whether an automatic sweep of `amount` atomic units of `symbol` (`decimals`) of a
    /// live (`livemode`) or test project waits under the chain's `sweep_threshold_usd_cents`
    /// (docs/decisions.md, Market prices): it waits while its value is below a non-zero
    /// threshold, and while a non-stable coin has no usable price where a price source
    /// exists (never decided on a stale or missing price). A live project's non-stable
    /// coin on a server without a live source (`[market]` absent) has no dollar value and
    /// is swept whatever its amount: the threshold cannot apply to it.
    pub async fn sweep_waits(
        self: &Arc<Self>,
        symbol: &str,
        decimals: u8,
        amount: u128,
        threshold_cents: u64,
        livemode: bool,
    ) -> bool {
        if threshold_cents == 0 {
            return false;
        }
        if livemode && !self.is_stable(symbol) && !matches!(self.source, Source::Live(_)) {
            return false;
        }
        match self.usable_price(symbol, livemode).await {
            Some(rate) => below_threshold(usd_value(amount, decimals, rate), threshold_cents),
            None => true,
        }
    }

    /// The price of `symbol` to credit a funding transfer at, without waiting (inside a store
    /// transaction): par for a stablecoin, the test table for a test project, else the cached
    /// live value when not expired (a background refresh starts when it is older than the
    /// TTL). `None`: no usable price now.
    pub fn spot_now(self: &Arc<Self>, symbol: &str, livemode: bool) -> Option<Quote> {
        if self.is_stable(symbol) {
            return Some(Quote {
                usd: Decimal::ONE,
                source: "par",
                as_of: unix_now(),
            });
        }
        if !livemode {
            return self.test_price(symbol).map(|usd| Quote {
                usd,
                source: "test",
                as_of: unix_now(),
            });
        }
        let Source::Live(_) = &self.source else {
            return None;
        };
        self.cached(symbol)
    }

    /// The cached live value of `symbol` when not expired; starts a background refresh
    /// when it is older than the TTL.
    fn cached(self: &Arc<Self>, symbol: &str) -> Option<Quote> {
        let now = unix_now();
        let c = self
            .cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(symbol)
            .cloned();
        let Some(c) = c else {
            self.spawn_refresh();
            return None;
        };
        match freshness(
            c.fetched.elapsed(),
            now.saturating_sub(c.quote.as_of),
            self.ttl,
            self.max_age_s,
        ) {
            Freshness::Fresh => Some(c.quote),
            Freshness::Stale => {
                self.spawn_refresh();
                Some(c.quote)
            }
            Freshness::Expired => {
                self.spawn_refresh();
                None
            }
        }
    }

    /// The price list of `symbols` (all when `None`) in SPEC.md's order of the request (or
    /// stablecoins, then the registry's order). Unknown symbols are left out. In live mode a
    /// cold cache is read first (bounded); stale values are served while a background
    /// refresh runs.
    pub async fn list(self: &Arc<Self>, symbols: Option<Vec<String>>) -> Vec<PriceEntry> {
        if !self.configured() {
            return Vec::new();
        }
        let wanted: Vec<String> = match symbols {
            Some(s) => s.into_iter().filter(|s| self.knows(s)).collect(),
            None => self.stables.iter().chain(&self.symbols).cloned().collect(),
        };
        let now = unix_now();
        let mut out = Vec::with_capacity(wanted.len());
        let live = matches!(self.source, Source::Live(_));
        if live {
            // What has no usable price yet is read before answering (there is nothing stale
            // to serve instead): a read already running, such as the start-up refresh, is
            // waited for. A symbol that failed within RETRY_AFTER_FAILURE returns at once,
            // so a provider that lacks a pair costs at most one bounded read per interval.
            let cold: Vec<&String> = wanted
                .iter()
                .filter(|s| !self.is_stable(s) && self.cached(s).is_none())
                .collect();
            if !cold.is_empty() {
                let reads = cold.iter().map(|s| self.read_symbol(s, true));
                futures_util::future::join_all(reads).await;
            }
        }
        for s in wanted {
            if self.is_stable(&s) {
                out.push(PriceEntry {
                    symbol: s,
                    usd: Decimal::ONE,
                    age_seconds: 0,
                });
                continue;
            }
            match &self.source {
                Source::Test => {
                    if let Some(p) = self.test_price(&s) {
                        out.push(PriceEntry {
                            symbol: s,
                            usd: p,
                            age_seconds: 0,
                        });
                    }
                }
                Source::Live(_) => {
                    if let Some(q) = self.cached(&s) {
                        out.push(PriceEntry {
                            symbol: s,
                            usd: q.usd,
                            age_seconds: now.saturating_sub(q.as_of),
                        });
                    }
                }
                Source::Unconfigured => {}
            }
        }
        out
    }

    /// Starts a background refresh of every symbol unless one runs or one ran within
    /// [`RETRY_AFTER_FAILURE`].
    pub fn spawn_refresh(self: &Arc<Self>) {
        if !matches!(self.source, Source::Live(_)) {
            return;
        }
        {
            let last = self.last_refresh.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < RETRY_AFTER_FAILURE.min(self.ttl)) {
                return;
            }
        }
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.refreshing.store(false, Ordering::Release);
            return;
        };
        rt.spawn(async move {
            me.refresh_all().await;
            *me.last_refresh.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            me.refreshing.store(false, Ordering::Release);
        });
    }

    /// Reads every symbol once, one after the other (the provider's rate limit).
    async fn refresh_all(self: &Arc<Self>) {
        for s in self.symbols.clone() {
            self.read_symbol(&s, false).await;
        }
    }

    /// Reads `symbol` from the provider, then from the fallback, and caches what is usable.
    /// `wait`: wait for a read of the same symbol already running (then use its result);
    /// otherwise skip the symbol when one runs. A symbol read within the TTL is not read
    /// again, nor one that failed within [`RETRY_AFTER_FAILURE`].
    async fn read_symbol(self: &Arc<Self>, symbol: &str, wait: bool) {
        let Source::Live(live) = &self.source else {
            return;
        };
        let Some(lock) = self.locks.get(symbol) else {
            return;
        };
        let mut guard = if wait {
            match tokio::time::timeout(
                Duration::from_millis(live.cfg.timeout_ms.saturating_mul(3)),
                lock.lock(),
            )
            .await
            {
                Ok(g) => g,
                Err(_) => return,
            }
        } else {
            match lock.try_lock() {
                Ok(g) => g,
                Err(_) => return,
            }
        };
        // What another read found while this one waited.
        let fresh = self
            .cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(symbol)
            .is_some_and(|c| c.fetched.elapsed() <= self.ttl);
        if fresh || guard.is_some_and(|t| t.elapsed() < RETRY_AFTER_FAILURE) {
            return;
        }
        *guard = Some(Instant::now());
        let quote = match live.kraken.fetch(symbol).await {
            Ok(usd) => Some(Quote {
                usd,
                source: "kraken",
                as_of: unix_now(),
            }),
            Err(e) => {
                tracing::warn!(symbol, error = %e, "market provider gave no price");
                match &live.chainlink {
                    Some(cl) if cl.has(symbol) => {
                        match cl.fetch(symbol, unix_now(), self.max_age_s).await {
                            Ok((usd, as_of)) => Some(Quote {
                                usd,
                                source: "chainlink",
                                as_of,
                            }),
                            Err(e) => {
                                tracing::warn!(symbol, error = %e, "chainlink feed gave no price");
                                None
                            }
                        }
                    }
                    _ => None,
                }
            }
        };
        if let Some(quote) = quote {
            *guard = None;
            self.cache
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    symbol.to_string(),
                    Cached {
                        quote,
                        fetched: Instant::now(),
                    },
                );
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// At start in live mode: fills the cache in the background and logs what is set up.
    pub fn start(self: &Arc<Self>) {
        if let Source::Live(l) = &self.source {
            tracing::info!(
                provider = "kraken",
                base_url = %appliance_chains::redact::redact_url(&l.cfg.base_url),
                fallback = self.fallback(),
                ttl_seconds = self.ttl.as_secs(),
                "market prices configured"
            );
            if l.cfg.fallback == MarketFallback::Chainlink && l.chainlink.is_none() {
                tracing::warn!("market.fallback is chainlink but [chains.ethereum] is not configured; no fallback");
            }
            self.spawn_refresh();
        }
    }
}

/// The Chainlink reader over `[chains.ethereum]`'s nodes (failover in order, as the chain
/// worker uses them); `None` without one.
fn chainlink_client(config: &Config, m: &MarketConfig) -> Option<chainlink::Chainlink> {
    let urls = config.chains.get("ethereum")?.urls();
    if urls.is_empty() {
        return None;
    }
    let rpc = appliance_chains::evm::rpc::EvmRpc::with_urls("ethereum", &urls).ok()?;
    let client = appliance_chains::evm::client::EvmClient::new("ethereum", rpc);
    Some(chainlink::Chainlink::new(
        Arc::new(client),
        &m.chainlink_feeds,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn prices_must_be_plain_positive_decimals() {
        assert_eq!(positive_price("3000.10000").unwrap(), d("3000.1"));
        assert_eq!(positive_price("0.00000001").unwrap(), d("0.00000001"));
        assert_eq!(
            positive_price("999999999999.1234567890123456").unwrap(),
            d("999999999999.1234567890123456")
        );
        for bad in [
            "0",
            "0.000",
            "-1",
            "-0.5",
            "",
            "1e3",
            " 1",
            "1,5",
            "NaN",
            "inf",
            "1000000000000",
            "1.",
            ".5",
            "1.12345678901234567",
        ] {
            assert!(
                matches!(positive_price(bad), Err(PriceError::Refused(..))),
                "{bad}"
            );
        }
    }

    #[test]
    fn usd_strings_have_two_places_at_least() {
        assert_eq!(format_usd(d("3000")), "3000.00");
        assert_eq!(format_usd(d("3000.10000")), "3000.10");
        assert_eq!(format_usd(d("0.25")), "0.25");
        assert_eq!(format_usd(d("0.123400")), "0.1234");
        assert_eq!(format_usd(d("1")), "1.00");
    }

    #[test]
    fn values_are_exact() {
        // 1.5 ETH at 3000.10 = 4500.15 exactly.
        let v = usd_value(1_500_000_000_000_000_000, 18, d("3000.10")).unwrap();
        assert_eq!(v, d("4500.15"));
        assert_eq!(whole_cents(v), Some(450_015));
        // 1 wei at 3000: a fraction of a cent, rounded down.
        let v = usd_value(1, 18, d("3000")).unwrap();
        assert_eq!(whole_cents(v), Some(0));
        // Too large for a decimal: unpriced.
        assert_eq!(usd_value(u128::MAX, 18, d("3000")), None);
        assert_eq!(usd_value(1, 29, d("1")), None);
    }

    #[test]
    fn threshold_compares_exact_values() {
        assert!(below_threshold(Some(d("9.999")), 1000));
        assert!(!below_threshold(Some(d("10.00")), 1000));
        assert!(!below_threshold(None, 1000));
    }

    #[tokio::test]
    async fn sweeps_wait_without_a_usable_price_only_when_a_market_is_configured() {
        // Test projects price from the table: 0.001 ETH at 3000 = $3 < $10.
        let m = Arc::new(Market::new(&Config::default(), true));
        assert!(!m.sweep_waits("ETH", 18, 10u128.pow(15), 0, false).await);
        assert!(m.sweep_waits("ETH", 18, 10u128.pow(15), 1000, false).await);
        assert!(!m.sweep_waits("ETH", 18, 10u128.pow(16), 1000, false).await);
        assert!(m.sweep_waits("USDT", 6, 9_990_000, 1000, false).await);
        assert!(!m.sweep_waits("USDT", 6, 10_000_000, 1000, true).await);
        // Live without [market]: no dollar value, swept whatever the amount.
        let m = Arc::new(Market::new(&Config::default(), false));
        assert!(!m.sweep_waits("ETH", 18, 1, 1000, true).await);
        assert!(m.sweep_waits("USDC", 6, 1, 1000, true).await);
        // Live with a provider that cannot answer: no usable price, the sweep waits.
        let cfg = Config {
            market: Some(MarketConfig {
                base_url: "http://127.0.0.1:9".into(),
                timeout_ms: 200,
                ..MarketConfig::default()
            }),
            ..Config::default()
        };
        let m = Arc::new(Market::new(&cfg, false));
        assert!(m.sweep_waits("ETH", 18, 10u128.pow(20), 1000, true).await);
        assert_eq!(m.usable_price("ETH", true).await, None);
    }

    #[test]
    fn freshness_follows_ttl_and_max_age() {
        // Fetched `fetched` s ago, of a round updated `updated` s ago; ttl 60 s, max age 1 h.
        let at = |fetched, updated| {
            freshness(
                Duration::from_secs(fetched),
                updated,
                Duration::from_secs(60),
                3600,
            )
        };
        assert_eq!(at(10, 10), Freshness::Fresh);
        assert_eq!(at(61, 61), Freshness::Stale);
        assert_eq!(at(61, 3601), Freshness::Expired);
        // A feed round fetched now but updated long ago is expired all the same.
        assert_eq!(at(0, 4000), Freshness::Expired);
    }

    #[tokio::test]
    async fn test_mode_prices_from_its_table_and_stables_at_par() {
        let m = Arc::new(Market::new(&Config::default(), true));
        assert!(m.configured() && m.is_test());
        assert_eq!(m.usable_price("ETH", false).await, Some(d("3000.00")));
        assert_eq!(m.usable_price("USDT", true).await, Some(Decimal::ONE));
        m.set_test_price("ETH", d("2500"));
        assert_eq!(m.usable_price("ETH", false).await, Some(d("2500")));
        let l = m
            .list(Some(vec!["ETH".into(), "NOPE".into(), "USDC".into()]))
            .await;
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].usd, d("2500"));
        assert_eq!(l[1].usd, Decimal::ONE);
        let all = m.list(None).await;
        assert_eq!(all.len(), 2 + TEST_PRICES.len());
    }

    #[tokio::test]
    async fn live_without_market_is_unconfigured() {
        let m = Arc::new(Market::new(&Config::default(), false));
        assert!(!m.configured());
        assert_eq!(m.usable_price("ETH", true).await, None);
        assert_eq!(m.usable_price("USDC", true).await, Some(Decimal::ONE));
        assert!(m.list(None).await.is_empty());
    }
}
