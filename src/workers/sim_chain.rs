//! The block timer of test mode's simulated chains (the chains themselves are
//! `services::sim_chain`): one block on every opened test project's chain every
//! `test.block_interval_ms`. Empty blocks are kept in memory and written together every
//! [`FLUSH_EVERY`] (and at shutdown, [`flush`]); a block with transactions is written at
//! once.

use std::time::{Duration, Instant};

use crate::services::sim_chain;
use crate::state::AppState;

/// How often deferred empty blocks are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(30);

/// Writes every chain's deferred empty blocks (the periodic flush, and at shutdown).
pub async fn flush(state: &AppState) {
    for h in state.sim.all() {
        if let Err(e) = h.flush(&state.store).await {
            tracing::warn!(error = %e, chain = h.chain, project = %h.project, "writing simulated blocks failed");
        }
    }
}

/// Opens the chains that have stored operations, then mines one block on every opened
/// chain every `test.block_interval_ms` (and advances the legacy block clock of test
/// sweeps and payouts).
pub async fn run(state: AppState) {
    let interval_ms = state.config.test.block_interval_ms.max(10);
    let interval = Duration::from_millis(interval_ms);
    state.sim.open_stored(&state.store, &state.registry).await;
    let mut last_flush = Instant::now();
    loop {
        tokio::time::sleep(interval).await;
        for h in state.sim.all() {
            let _drive = h.drive.lock().await;
            if let Err(e) = h.mine(&state.store, 1, interval_ms, true).await {
                tracing::error!(error = %e, chain = h.chain, project = %h.project, "simulated block failed");
            }
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            flush(&state).await;
            last_flush = Instant::now();
        }
        match sim_chain::mine(
            &state.store,
            state.registry.clone(),
            state.config.webhooks.max_attempts(),
            None,
            1,
        )
        .await
        {
            Ok(heights) => {
                for (c, h) in &heights {
                    crate::ops::metrics::chain_position(c, "test", *h, *h);
                }
            }
            Err(e) => tracing::error!(error = %e, "simulated block failed"),
        }
    }
}
