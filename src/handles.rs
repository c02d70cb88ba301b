//! The handles every part of a running appliance shares: the configuration, the store, the
//! chain registry, the market, test mode's simulated chains, the key cache, the data key and
//! the log of written sweeps. The API's state (`state::AppState`) holds them beside what
//! only requests use; the workers, the webhook dispatcher and the operations endpoints take
//! them alone, so nothing below the server reaches the API's state.

use std::ops::Deref;
use std::sync::Arc;

use appliance_storage::records::Project;
use appliance_storage::Store;

use crate::auth::KeyCache;
use crate::config::Config;
use crate::market::Market;
use crate::registry::Registry;
use crate::sealing::DataKey;
use crate::services::sim_chain::SimChains;
use crate::services::sweeps::SweepChanges;
use crate::services::Scope;

/// Cheap-to-clone handle to the shared parts ([`Shared`]).
#[derive(Clone)]
pub struct Handles(Arc<Shared>);

/// What [`Handles`] reaches.
pub struct Shared {
    pub config: Config,
    pub store: Store,
    /// The chain registry with this config's overrides.
    pub registry: Arc<Registry>,
    /// Market prices: the test table in `--test` mode, `[market]` in live mode.
    pub market: Arc<Market>,
    /// Test projects' simulated chains opened so far (test mode).
    pub sim: SimChains,
    /// Projects and API keys, and the keys' last-use times to flush.
    pub keys: KeyCache,
    /// Seals the secrets the store keeps (webhook signing secrets, checkout tokens).
    pub data_key: DataKey,
    /// Sweep rows written, heard by a store commit hook: what the chain senders' memories
    /// of waiting sweeps forget (`workers::chain::waiting`).
    pub sweep_changes: Arc<SweepChanges>,
}

impl Handles {
    pub fn new(shared: Shared) -> Handles {
        Handles(Arc::new(shared))
    }

    /// The scope a worker runs a service of `project` in: this appliance's registry and
    /// webhook attempts.
    pub fn scope(&self, project: Project) -> Scope {
        Scope {
            reg: self.registry.clone(),
            project: Arc::new(project),
            delivery_attempts: self.config.webhooks.max_attempts(),
        }
    }
}

impl Deref for Handles {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}
