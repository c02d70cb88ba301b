//! Housekeeping: flushes key usage counters and purges expired idempotency records.

use std::time::Duration;

use appliance_storage::records::ApiKey;
use appliance_storage::ReadOps;

use crate::handles::Handles;
use crate::services::IDEMPOTENCY_TTL_US;

/// Writes counted key uses (`last_used_at`, `use_count`) to the store.
pub async fn flush_usage(state: &Handles) {
    let usage = state.keys.take_usage();
    if usage.is_empty() {
        return;
    }
    let r = state
        .store
        .write(move |ctx| {
            for (id, (at, n)) in usage {
                if let Some(mut k) = ctx.get::<ApiKey>(id)? {
                    k.last_used_at = Some(at);
                    k.use_count += n;
                    ctx.put(&k)?;
                }
            }
            Ok::<_, appliance_storage::StoreError>(())
        })
        .await;
    // The auth cache is left alone: authentication does not need the counters (key views
    // read the store plus `pending_usage`), and putting this record back into the cache
    // could race with a revocation committed meanwhile.
    if let Err(e) = r {
        tracing::warn!(error = ?e, "flushing key usage failed");
    }
}

/// Every 10 s: key usage; every minute: up to 10,000 expired idempotency records.
pub async fn run(state: Handles) {
    let mut tick = 0u64;
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        flush_usage(&state).await;
        tick += 1;
        if tick.is_multiple_of(6) {
            let cutoff = appliance_storage::now_us() - IDEMPOTENCY_TTL_US;
            if let Err(e) = state
                .store
                .write(move |ctx| ctx.idempotency_purge(cutoff, 10_000))
                .await
            {
                tracing::warn!(error = ?e, "purging idempotency records failed");
            }
        }
    }
}
