//! Shared state of a running appliance.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use uuid::Uuid;

use appliance_storage::records::{ApiKey, Project};
use appliance_storage::{ScanOps, Store, StoreError};

use crate::auth::{KeyCache, Pepper};
use crate::config::Config;
use crate::handles::{Handles, Shared};
use crate::sealing::DataKey;

/// Cheap-to-clone handle to everything a request needs: the shared [`Handles`] (reached
/// through `Deref`: `state.store`, `state.registry`, ...) and what only the API uses.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

pub struct Inner {
    pub handles: Handles,
    pub pepper: Pepper,
    pub limits: Limits,
    /// Idempotency keys whose first request is still running.
    pub inflight: Mutex<HashSet<Vec<u8>>>,
    /// Webhook dispatcher handle, rate limits and event stream slots.
    pub webhooks: Arc<crate::webhooks::Webhooks>,
    /// What `/readyz` and `/metrics` keep between requests.
    pub ops: Arc<crate::ops::Ops>,
    /// Invoices whose checkout refund is being classified now (node reads;
    /// `api::checkout`), so one runs at a time per invoice.
    pub refund_classifying: Mutex<HashSet<Uuid>>,
    /// Checkout documents by token, kept exact by a store commit hook
    /// (`services::checkout_cache`).
    pub checkout_cache: Arc<crate::services::checkout_cache::CheckoutCache>,
}

impl Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Deref for Inner {
    type Target = Handles;
    fn deref(&self) -> &Handles {
        &self.handles
    }
}

impl AppState {
    /// Re-reads every project and key into the cache (after operator changes).
    pub fn reload_cache(&self) {
        match self
            .store
            .read_blocking(|r| Ok((r.all::<Project>()?, r.all::<ApiKey>()?)))
        {
            Ok((projects, keys)) => {
                for p in projects {
                    self.keys.put_project(p);
                }
                for k in keys {
                    self.keys.put_key(k);
                }
            }
            Err(e) => tracing::error!(error = %e, "reloading the key cache failed"),
        }
    }

    /// Builds the state and fills the key cache from the store. `test_mode`: the server runs
    /// `--test` (market prices from the test table, DECISIONS.md section 15).
    pub fn new(
        config: Config,
        store: Store,
        pepper: Pepper,
        data_key: DataKey,
        ops: crate::ops::Ops,
        test_mode: bool,
    ) -> Result<AppState, StoreError> {
        let keys = KeyCache::default();
        let (projects, api_keys) =
            store.read_blocking(|r| Ok((r.all::<Project>()?, r.all::<ApiKey>()?)))?;
        for p in projects {
            keys.put_project(p);
        }
        for k in api_keys {
            keys.put_key(k);
        }
        let unauth =
            NonZeroU32::new(config.limits.unauthenticated_per_minute.max(1)).expect("non-zero");
        let registry = Arc::new(crate::registry::Registry::from_config(&config));
        let market = Arc::new(crate::market::Market::new(&config, test_mode));
        registry.set_market(market.clone());
        registry.set_data_key(data_key.clone());
        let checkout_cache = Arc::new(crate::services::checkout_cache::CheckoutCache::new(
            crate::services::checkout_cache::DEFAULT_BUDGET_BYTES,
        ));
        store.on_commit(checkout_cache.hook());
        let sweep_changes = Arc::new(crate::services::sweeps::SweepChanges::default());
        store.on_commit(sweep_changes.hook());
        let sim = crate::services::sim_chain::SimChains::default();
        sim.set_policy(crate::services::sim_chain::ChainPolicy {
            snapshot_min_ops: config.test.snapshot_min_ops,
            retain_blocks: config.test.retain_blocks,
        });
        let handles = Handles::new(Shared {
            config,
            store,
            registry,
            market,
            sim,
            keys,
            data_key,
            sweep_changes,
        });
        Ok(AppState(Arc::new(Inner {
            webhooks: Arc::new(crate::webhooks::Webhooks::new(
                handles.config.webhooks.clone(),
            )),
            limits: Limits {
                per_key: Mutex::new(HashMap::new()),
                unauthenticated: RateLimiter::keyed(Quota::per_minute(unauth)),
                checkout: Mutex::new(HashMap::new()),
                refund: Mutex::new(HashMap::new()),
                public_bodies: Default::default(),
            },
            handles,
            pepper,
            inflight: Mutex::new(HashSet::new()),
            ops: Arc::new(ops),
            refund_classifying: Mutex::new(HashSet::new()),
            checkout_cache,
        })))
    }
}

/// Request-rate limiters (SPEC.md section 8, DECISIONS.md section 8).
pub struct Limits {
    per_key: Mutex<HashMap<Uuid, (u32, Arc<DefaultDirectRateLimiter>)>>,
    unauthenticated: DefaultKeyedRateLimiter<IpAddr>,
    /// Per checkout token (keyed by its invoice), DECISIONS.md section 12.
    checkout: Mutex<HashMap<Uuid, (u32, Arc<DefaultDirectRateLimiter>)>>,
    /// Checkout refund requests per token (SPEC.md section 8).
    refund: Mutex<HashMap<Uuid, (u32, Arc<DefaultDirectRateLimiter>)>>,
    /// Keyless requests of each source address whose bodies are being read now.
    public_bodies: crate::slots::Slots<IpAddr>,
}

/// Most keyless requests of one source address reading their bodies at once: a
/// body may take up to `limits.body_read_timeout_secs`, so without this one address could
/// hold every connection the ceiling allows; past it, 429.
pub const PUBLIC_BODIES_PER_IP: usize = 4;

/// One keyless body being read ([`Limits::public_body`]); released when dropped.
pub type PublicBodySlot = crate::slots::Slot<IpAddr>;

/// Most per-token limiters kept; past it, the ones whose budget is full again (idle for a
/// minute or more) are dropped, so a flood of tokens cannot grow memory without bound.
const MAX_TOKEN_LIMITERS: usize = 100_000;

fn check_in(
    map: &Mutex<HashMap<Uuid, (u32, Arc<DefaultDirectRateLimiter>)>>,
    key: Uuid,
    per_minute: u32,
) -> Result<(), u64> {
    let limiter = {
        let mut m = map.lock().expect("lock");
        if m.len() >= MAX_TOKEN_LIMITERS && !m.contains_key(&key) {
            // A limiter that would admit a whole minute's budget at once has been idle.
            m.retain(|_, (n, l)| {
                l.check_n(NonZeroU32::new(*n).expect("non-zero"))
                    .map(|r| r.is_err())
                    .unwrap_or(true)
            });
        }
        let e = m
            .entry(key)
            .or_insert_with(|| (per_minute, Arc::new(direct(per_minute))));
        if e.0 != per_minute {
            *e = (per_minute, Arc::new(direct(per_minute)));
        }
        e.1.clone()
    };
    limiter.check().map_err(|nu| retry_after_s(&nu))
}

impl Limits {
    /// Counts one request of `key` against `per_minute`; `Err(retry_after_s)` when over.
    pub fn check_key(&self, key: Uuid, per_minute: u32) -> Result<(), u64> {
        self.check_key_weighted(key, per_minute, 1)
    }

    /// Counts a request that costs `weight` requests of the key's budget (on-chain reads,
    /// SPEC.md section 4: "rate-limited harder"). The extra `weight - 1` is taken on top of
    /// the one the extractor already counted.
    pub fn check_key_extra(&self, key: Uuid, per_minute: u32, weight: u32) -> Result<(), u64> {
        match weight.checked_sub(1).and_then(std::num::NonZeroU32::new) {
            Some(extra) => self.check_key_weighted(key, per_minute, extra.get()),
            None => Ok(()),
        }
    }

    fn check_key_weighted(&self, key: Uuid, per_minute: u32, weight: u32) -> Result<(), u64> {
        let limiter = {
            let mut m = self.per_key.lock().expect("lock");
            let e = m
                .entry(key)
                .or_insert_with(|| (0, Arc::new(direct(per_minute))));
            if e.0 != per_minute {
                *e = (per_minute, Arc::new(direct(per_minute)));
            }
            e.1.clone()
        };
        let n = std::num::NonZeroU32::new(weight.max(1)).expect("non-zero");
        match limiter.check_n(n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(nu)) => Err(retry_after_s(&nu)),
            // More than the whole budget at once: never allowed, retry in a minute.
            Err(_) => Err(60),
        }
    }

    /// Counts one request to the checkout of invoice `id` (its token's budget).
    pub fn check_checkout(&self, id: Uuid, per_minute: u32) -> Result<(), u64> {
        check_in(&self.checkout, id, per_minute.max(1))
    }

    /// Counts one refund request to the checkout of invoice `id`.
    pub fn check_refund(&self, id: Uuid, per_minute: u32) -> Result<(), u64> {
        check_in(&self.refund, id, per_minute.max(1))
    }

    /// A slot to read one keyless request's body from `ip`; `None` when
    /// [`PUBLIC_BODIES_PER_IP`] are being read already.
    pub fn public_body(&self, ip: IpAddr) -> Option<PublicBodySlot> {
        self.public_bodies.take(ip, PUBLIC_BODIES_PER_IP)
    }

    /// Counts one unauthenticated request from `ip`.
    pub fn check_unauthenticated(&self, ip: IpAddr) -> Result<(), u64> {
        self.unauthenticated
            .check_key(&ip)
            .map_err(|nu| retry_after_s(&nu))
    }
}

/// Whole seconds (at least 1) until a refused request would be allowed.
fn retry_after_s(nu: &governor::NotUntil<governor::clock::QuantaInstant>) -> u64 {
    nu.wait_time_from(governor::clock::Clock::now(
        &governor::clock::DefaultClock::default(),
    ))
    .as_secs()
    .max(1)
}

fn direct(per_minute: u32) -> DefaultDirectRateLimiter {
    RateLimiter::direct(Quota::per_minute(
        NonZeroU32::new(per_minute.max(1)).expect("non-zero"),
    ))
}
