//! A reorg under the watcher's cursor: where the chains part (the fork point), and the one
//! transaction that unwinds what the orphaned blocks did.

use super::*;

/// The fork point: walking back the stored hashes from the cursor's block, the newest one
/// the node's canonical chain still has, confirmed by the node's next block hanging from it
/// (never assumed from a range being scanned; a node that answers from two views
/// of the chain during the walk, a pool behind a load balancer or a reorg under way, cannot
/// make it too high: a candidate whose next block on the node does not descend from it is
/// passed over). `None`: the fork is deeper than the memory (operator attention).
async fn fork_point(w: &ChainWorker, cursor: &Cursor) -> anyhow::Result<Option<u64>> {
    for (n, h) in cursor.recent.iter().rev() {
        let Some(b) = w.client.block(*n).await? else {
            continue;
        };
        if b.hash != *h {
            continue;
        }
        match w.client.block(*n + 1).await? {
            // The node's chain continues from our block: it is on the node's chain.
            Some(next) if next.parent_hash == *h => return Ok(Some(*n)),
            // The node's block after it hangs from another block: not on its chain now.
            Some(_) => continue,
            // The node's head is our block (or the node is behind): it has no other.
            None => return Ok(Some(*n)),
        }
    }
    Ok(None)
}

/// The cursor's last block is no longer canonical: find the fork point, unwind the
/// deposits above it (failed or orphaned, with events) and rewind the cursor. The sender
/// learns of the reorg from its receipts on its next pass.
pub(super) async fn reorg(state: &Handles, w: &ChainWorker, ws: WatchState) -> anyhow::Result<()> {
    let fork = fork_point(w, &ws.cursor).await?.ok_or_else(|| {
        anyhow!(
            "a reorg deeper than the {} remembered blocks: operator attention needed",
            ws.cursor.recent.len()
        )
    })?;
    tracing::warn!(chain = w.chain, key = %w.key, fork, height = ?ws.cursor.height, "reorg: rewinding");
    let reg = state.registry.clone();
    let attempts = state.config.webhooks.max_attempts();
    let key = w.key.clone();
    let scope = w.scope;
    write(state, move |ctx| {
        let mut ws = load_watch(ctx, &key)?;
        let mut scopes = Scopes::new(reg, scope, attempts);
        let top = ws.cursor.height.unwrap_or(fork);
        for n in fork + 1..=top {
            let ids = ctx.evm_block_deposits(&key, n)?;
            if ids.is_empty() {
                continue;
            }
            for id in ids {
                let Some(d) = ctx.get::<Deposit>(id)? else {
                    continue;
                };
                if let Some(s) = scopes.of(ctx, d.project_id)? {
                    deposits::unwind(ctx, &s, d)?;
                }
            }
            ctx.evm_block_deposits_clear(&key, n)?;
        }
        follow_sends_above(ctx, &key, fork)?;
        ws.cursor.rewind(fork);
        save_watch(ctx, &key, &ws)?;
        Ok(())
    })
    .await
}

/// Sends of the master wallet mined above `fork` that the sender no longer follows (done:
/// deeper than `reconcile::track_depth` when it last looked) are followed again, in the
/// reorg's own transaction, so every sweep and payout above the fork point is re-checked
/// against the chain: a receipt the reorg removed is rebroadcast, as for a
/// shallow reorg. Sends are mined in nonce order, so the walk down from the newest stops
/// at the first one mined at or below the fork.
fn follow_sends_above(ctx: &mut WriteCtx<'_>, key: &str, fork: u64) -> Result<usize, Fault> {
    let mut n = super::super::store::stored_nonce(ctx, key)?;
    let mut reopened = 0;
    while n > 0 {
        n -= 1;
        let Some(mut tx) = super::super::store::out_tx(ctx, key, n)? else {
            continue;
        };
        let Some(block) = tx.mined.as_ref().map(|m| m.block) else {
            continue;
        };
        if block <= fork {
            break;
        }
        if tx.done {
            tx.done = false;
            super::super::store::put_tx(ctx, key, &tx)?;
            ctx.evm_pending_set(key, n, true)?;
            reopened += 1;
        }
    }
    if reopened > 0 {
        tracing::warn!(
            key,
            fork,
            sends = reopened,
            "a reorg deeper than the sender follows: its sends above the fork are checked again"
        );
    }
    Ok(reopened)
}
