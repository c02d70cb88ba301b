//! The timer of test mode's simulated chain (the chain itself is `services::sim_chain`).

use std::time::Duration;

use crate::services::sim_chain;
use crate::state::AppState;

/// Mines one block on every EVM chain every `test.block_interval_ms`.
pub async fn run(state: AppState) {
    let interval = Duration::from_millis(state.config.test.block_interval_ms.max(10));
    loop {
        tokio::time::sleep(interval).await;
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
