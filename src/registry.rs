//! The chain registry as this appliance runs it: the static registry of `appliance-chains`
//! with the operator's config overrides (confirmations, extra or replaced token contracts),
//! plus what the running process learns about its chains: the node client and the last
//! health report of each live adapter, and the EVM master wallet once the signer is
//! unlocked. One registry belongs to one [`crate::state::AppState`]; nothing here is
//! process-wide.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};

use appliance_chains::client::ChainClient;
use appliance_chains::{AccountKind, ChainInfo};

use crate::config::Config;

/// One asset as configured.
#[derive(Debug, Clone)]
pub struct Asset {
    pub symbol: String,
    pub name: String,
    pub decimals: u8,
    pub contract: String,
    pub is_native: bool,
}

impl Asset {
    /// SPEC.md section 2: stablecoins whose scale is not 6.
    pub fn decimals_differ_from_default(&self) -> bool {
        self.is_stable() && self.decimals != 6
    }

    pub fn is_stable(&self) -> bool {
        matches!(self.symbol.as_str(), "USDT" | "USDC")
    }
}

/// What the live adapter of a chain last reported (DECISIONS.md section 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterHealth {
    /// The last round of node calls succeeded.
    Healthy,
    /// The last round of node calls succeeded, but not as configured: a node is skipped
    /// (failing or lagging) and another serves (DECISIONS.md section 16). The note (one
    /// sentence naming nodes by scheme and host only) is shown as `status_note`; the chain
    /// stays `live`.
    Degraded(String),
    /// Node calls fail after the node was reached once; the note (one sentence) is shown as
    /// `status_note` while the adapter backs off and retries. The chain stays `live`.
    Failing(String),
    /// The node has not been reached since start (unreachable, or it answered with another
    /// chain id): the chain is `paused` with this note and issues no new addresses.
    Unreached(String),
}

/// One chain as configured.
#[derive(Debug)]
pub struct Chain {
    pub info: &'static ChainInfo,
    pub required_confirmations: u32,
    pub assets: Vec<Asset>,
    /// A `[chains.<id>]` table exists in config (an RPC endpoint is configured).
    pub configured: bool,
    /// The DEX conversions swap on (`[chains.<id>.dex]`, checked by `Config::validate`);
    /// `None` when not configured.
    pub dex: Option<appliance_chains::evm::dex::Dex>,
    /// The live adapter's last health report; `None` before it first reached its node.
    health: RwLock<Option<AdapterHealth>>,
    /// The live chain's client (the chain seam), set once when the live adapter starts.
    client: OnceLock<Arc<dyn ChainClient>>,
    /// When the live adapter last reached, and last failed to reach, its node.
    contact: std::sync::Mutex<NodeContact>,
}

/// When a chain's node was last reached and last failed, since start (read by `/readyz`
/// and `/metrics`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeContact {
    /// When a watcher round last reached the node (`None`: never since start).
    pub last_success: Option<std::time::Instant>,
    /// When a node call last failed (`None`: never since start).
    pub last_error: Option<std::time::Instant>,
}

impl Chain {
    /// The live adapter's last health report; `None` before it first reached its node (or
    /// when no adapter runs for this chain).
    pub fn health(&self) -> Option<AdapterHealth> {
        self.health
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Records the live adapter's health (read by `services::chains::effective`) and when
    /// it was reported: `Healthy` stamps the node's last success, anything else its last
    /// error (read by `/readyz` and `/metrics`). `Degraded` counts as a success.
    pub fn set_health(&self, h: AdapterHealth) {
        let now = Some(std::time::Instant::now());
        {
            let mut contact = self.contact.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(h, AdapterHealth::Healthy | AdapterHealth::Degraded(_)) {
                contact.last_success = now;
            } else {
                contact.last_error = now;
            }
        }
        *self.health.write().unwrap_or_else(|e| e.into_inner()) = Some(h);
    }

    /// When the node was last reached and last failed.
    pub fn contact(&self) -> NodeContact {
        *self.contact.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client of this chain's live adapter; `None` when no adapter runs.
    pub fn client(&self) -> Option<&Arc<dyn ChainClient>> {
        self.client.get()
    }

    /// Records the live client when the live adapter starts (the first one set stays).
    pub fn set_client(&self, client: Arc<dyn ChainClient>) {
        let _ = self.client.set(client);
    }

    pub fn id(&self) -> &'static str {
        self.info.id
    }

    pub fn asset(&self, symbol: &str) -> Option<&Asset> {
        self.assets.iter().find(|a| a.symbol == symbol)
    }

    pub fn is_evm(&self) -> bool {
        self.info.account_kind == AccountKind::Contract
    }
}

/// Every chain, in registry order, the installation's EVM master wallet, and the billing
/// plans on offer (configuration every service scope reaches through `Scope::reg`).
#[derive(Debug)]
pub struct Registry {
    pub chains: Vec<Chain>,
    /// `[billing]` plans (DECISIONS.md section 13).
    pub billing: crate::config::BillingConfig,
    /// The EVM master wallet (treasury of the forwarder factory), set once at start from
    /// the unlocked signer.
    treasury: OnceLock<[u8; 20]>,
    /// The server's market prices, set once at start (`AppState::new`): what a funding
    /// credit is valued at inside a store transaction (`services::billing`).
    market: OnceLock<Arc<crate::market::Market>>,
    /// The data key, set once at start (`AppState::new`): what opens the sealed checkout
    /// tokens an invoice's `checkout_url` is made of ([`Registry::checkout_url`]).
    data_key: OnceLock<crate::sealing::DataKey>,
    /// `public_base_url` of the config without a trailing `/` (empty when unset): the base
    /// of `checkout_url` (DECISIONS.md section 12).
    pub public_base_url: String,
}

impl Registry {
    pub fn from_config(cfg: &Config) -> Registry {
        let chains = appliance_chains::CHAINS
            .iter()
            .map(|info| {
                let cc = cfg.chains.get(info.id);
                let mut assets: Vec<Asset> = info
                    .assets()
                    .map(|a| Asset {
                        symbol: a.symbol.to_string(),
                        name: a.name.to_string(),
                        decimals: a.decimals,
                        contract: a.contract.to_string(),
                        is_native: a.is_native,
                    })
                    .collect();
                for o in cc.map(|c| c.assets.as_slice()).unwrap_or(&[]) {
                    let a = Asset {
                        symbol: o.symbol.clone(),
                        name: o.symbol.clone(),
                        decimals: o.decimals,
                        contract: o.contract.clone(),
                        is_native: false,
                    };
                    match assets.iter_mut().find(|x| x.symbol == o.symbol) {
                        Some(x) => {
                            x.contract = a.contract;
                            x.decimals = a.decimals;
                        }
                        None => assets.push(a),
                    }
                }
                Chain {
                    info,
                    required_confirmations: cc
                        .and_then(|c| c.confirmations)
                        .unwrap_or(info.required_confirmations),
                    assets,
                    configured: cc.is_some(),
                    dex: cc
                        .and_then(|c| c.dex.as_ref())
                        .and_then(|d| d.dex(info.id).ok()),
                    health: RwLock::new(None),
                    client: OnceLock::new(),
                    contact: Default::default(),
                }
            })
            .collect();
        Registry {
            chains,
            billing: cfg.billing.clone(),
            treasury: OnceLock::new(),
            market: OnceLock::new(),
            data_key: OnceLock::new(),
            public_base_url: cfg
                .public_base_url
                .as_deref()
                .unwrap_or("")
                .trim_end_matches('/')
                .to_string(),
        }
    }

    /// Records the EVM master wallet at start (the first one set stays).
    pub fn set_live_treasury(&self, address: [u8; 20]) {
        let _ = self.treasury.set(address);
    }

    /// Records the server's market at start (the first one set stays).
    pub fn set_market(&self, market: Arc<crate::market::Market>) {
        let _ = self.market.set(market);
    }

    /// Records the data key at start (the first one set stays).
    pub fn set_data_key(&self, key: crate::sealing::DataKey) {
        let _ = self.data_key.set(key);
    }

    /// The sealed form of checkout token `token` of invoice `invoice`, as the store keeps
    /// it (`Invoice::checkout_token`); `None` without a data key (a registry built outside
    /// a server).
    pub fn seal_checkout_token(&self, invoice: uuid::Uuid, token: &str) -> Option<String> {
        Some(self.data_key.get()?.seal_checkout_token(invoice, token))
    }

    /// `checkout_url` of invoice `invoice` whose stored token is `stored` (sealed, or in
    /// clear in a row not yet migrated): `{public_base_url}/checkout/{token}` (DECISIONS.md
    /// section 12). A sealed token this registry cannot open (no data key set, or not the
    /// key it was sealed with, which `appliance restore` refuses) renders no token, logged.
    pub fn checkout_url(&self, invoice: uuid::Uuid, stored: &str) -> String {
        let token = if crate::sealing::is_sealed(stored) {
            match self
                .data_key
                .get()
                .map(|k| k.checkout_token(invoice, stored))
            {
                Some(Ok(t)) => t,
                _ => {
                    tracing::error!(%invoice, "the checkout token of an invoice does not open");
                    Default::default()
                }
            }
        } else {
            zeroize::Zeroizing::new(stored.to_string())
        };
        format!("{}/checkout/{}", self.public_base_url, token.as_str())
    }

    /// The server's market (`None` in a registry built outside a server, as unit tests do).
    pub fn market(&self) -> Option<&Arc<crate::market::Market>> {
        self.market.get()
    }

    /// The EVM master wallet, once the signer is unlocked.
    pub fn live_treasury(&self) -> Option<[u8; 20]> {
        self.treasury.get().copied()
    }

    /// The forwarder factory a project's addresses are derived under (DECISIONS.md section
    /// 9): live projects use the factory of the real treasury; test projects that of the
    /// test stand-in. `None`: live project but no master key unlocked.
    pub fn factory_for(&self, project: &appliance_storage::records::Project) -> Option<[u8; 20]> {
        use appliance_chains::address::{factory_address, test_treasury};
        match project.mode {
            appliance_storage::records::Mode::Test => Some(factory_address(&test_treasury())),
            appliance_storage::records::Mode::Live => {
                self.live_treasury().map(|t| factory_address(&t))
            }
        }
    }

    /// Live clients of the chains whose live adapter runs, by chain id.
    pub fn clients(&self) -> BTreeMap<&'static str, Arc<dyn ChainClient>> {
        self.chains
            .iter()
            .filter_map(|c| c.client().map(|r| (c.id(), r.clone())))
            .collect()
    }

    pub fn chain(&self, id: &str) -> Option<&Chain> {
        self.chains.iter().find(|c| c.info.id == id)
    }

    /// Asset of a chain; `None` when either is unknown.
    pub fn asset(&self, chain: &str, symbol: &str) -> Option<&Asset> {
        self.chain(chain)?.asset(symbol)
    }

    /// Decimals of an asset (0 for an unknown pair, which stored rows never hold).
    pub fn decimals(&self, chain: &str, symbol: &str) -> u8 {
        self.asset(chain, symbol).map(|a| a.decimals).unwrap_or(0)
    }
}
