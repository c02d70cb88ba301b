//! The driver of test mode's simulated chains (the chains themselves are
//! `services::sim_chain`): the block timer (one block on every opened test project's chain
//! every `test.block_interval_ms`) and the requests of `/v1/test/blocks` and
//! `/v1/test/reorg`. Each chain has a chain worker (`workers::chain`, scope: its one test
//! project, signer: test mode's published key) whose watcher and sender run before and after
//! every block or reorg, under the chain's drive lock, so deposits, sweeps and payouts of a
//! test project follow the same lifecycle as a live one's and an answer reflects what the
//! chain did.
//!
//! Empty timer blocks are kept in memory and written together every [`FLUSH_EVERY`] (and at
//! shutdown, [`flush`]); a block with transactions is written at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use uuid::Uuid;

use appliance_chains::client::ChainClient;
use appliance_chains::evm::watcher::Cursor;
use appliance_chains::evm::B256;
use appliance_chains::sim::HOLD_LIMIT;

use crate::handles::Handles;
use crate::services::sim_chain::{self, Drive, DriveAction, SimHandle, SimOpenError};
use crate::workers::chain::reconcile::track_depth;
use crate::workers::chain::sender::send_step;
use crate::workers::chain::store::{load_watch, save_watch};
use crate::workers::chain::waiting::Waiting;
use crate::workers::chain::watcher::{memory_blocks, watch_step, Watched};
use crate::workers::chain::{ChainWorker, Master, WorkScope};

/// How often deferred empty blocks are written.
pub const FLUSH_EVERY: Duration = Duration::from_secs(30);

/// Most watcher passes one catch-up runs (each covers up to `watcher::MAX_RANGE` blocks).
const MAX_PASSES: usize = 1_000;

/// The chain worker of one test project's chain, with what its watcher keeps between
/// passes.
struct SimWorker {
    w: ChainWorker,
    watched: Watched,
    checked: bool,
    /// Test mode's master key (`Signer::test_mode`) and its factory.
    master: Master,
    /// The oldest block a send the sender still follows can be in, as of its last complete
    /// pass ([`sender_needs_from`]); 0 before one.
    sent_from: u64,
    /// The open sweeps its sender passes over until they change
    /// (`workers::chain::waiting`).
    waiting: Waiting,
}

type Workers = Arc<std::sync::Mutex<HashMap<(Uuid, &'static str), Arc<Mutex<SimWorker>>>>>;

/// Writes every chain's deferred empty blocks (the periodic flush, and at shutdown).
pub async fn flush(state: &Handles) {
    for h in state.sim.all() {
        if let Err(e) = h.flush(&state.store).await {
            tracing::warn!(error = %e, chain = h.chain, project = %h.project, "writing simulated blocks failed");
        }
    }
}

fn worker_for(
    state: &Handles,
    workers: &Workers,
    h: &SimHandle,
) -> anyhow::Result<Arc<Mutex<SimWorker>>> {
    let mut m = workers.lock().expect("lock");
    if let Some(w) = m.get(&(h.project, h.chain)) {
        return Ok(w.clone());
    }
    let client: Arc<dyn ChainClient> = Arc::new(h.client.clone());
    let mut w = ChainWorker::new(
        &state.registry,
        h.chain,
        client,
        WorkScope::Project(h.project),
    )?;
    // A test chain is short and its worker may start after blocks with the project's
    // transfers: watch it from block 0, or from the oldest block it holds when its older
    // history is pruned (`held_from`).
    w.start_block = Some(0);
    debug_assert_eq!(&*w.key, sim_chain::state_key(h.chain, h.project));
    let sw = Arc::new(Mutex::new(SimWorker {
        w,
        watched: Watched::default(),
        checked: false,
        master: Master::of(Arc::new(appliance_signer::Signer::test_mode())),
        sent_from: 0,
        waiting: Waiting::default(),
    }));
    m.insert((h.project, h.chain), sw.clone());
    Ok(sw)
}

/// Runs the watcher until it has caught up with the head, then one sender pass (each
/// failure is logged; the next drive retries), then tells the chain which blocks the
/// worker still needs ([`hold`]).
async fn catch_up(state: &Handles, h: &SimHandle, sw: &mut SimWorker) {
    watch_and_send(state, sw).await;
    hold(state, h, sw).await;
}

async fn watch_and_send(state: &Handles, sw: &mut SimWorker) {
    for _ in 0..MAX_PASSES {
        match watch_step(state, &sw.w, &mut sw.checked, &mut sw.watched).await {
            Ok(true) => break,
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(chain = sw.w.chain, key = %sw.w.key, error = %crate::workers::chain::clean(&e), "simulated chain watcher failed");
                break;
            }
        }
    }
    // The head the pass begins at (a head that cannot be read leaves `sent_from` as it was).
    let head = sw.w.client.head().await.ok();
    match send_step(state, &sw.w, &sw.master, &mut sw.waiting).await {
        Ok(()) => {
            if let Some(head) = head {
                sw.sent_from = sender_needs_from(&sw.w, head);
            }
        }
        Err(e) => {
            tracing::warn!(chain = sw.w.chain, key = %sw.w.key, error = %crate::workers::chain::clean(&e), "simulated chain sender failed")
        }
    }
}

/// The oldest block a send followed after a complete sender pass that began at `head` can
/// be in: [`track_depth`] below it. The pass marks done every settled send mined that deep
/// (so what it still follows was mined above, or is not mined yet and will be mined above
/// the head it asked at), and a receipt is asked for until a send is done. One exception:
/// a mined swap whose output cannot be read from its receipt stays unsettled (logged as an
/// error on every pass), and its block may be pruned once it is older than this.
fn sender_needs_from(w: &ChainWorker, head: u64) -> u64 {
    head.saturating_sub(track_depth(w))
}

/// Tells `h`'s chain the oldest block its worker still needs (`SimChain::hold_from`): the
/// older of the watcher's next block less the blocks it remembers to find a fork point
/// ([`memory_blocks`]), and what the sender follows ([`SimWorker::sent_from`]). Blocks
/// from there on stay held when test deposits mine faster than the worker reads (a start
/// that loads many addresses), so the worker never finds its next block pruned nor its
/// own mined sends without receipts. A worker whose next block is pruned all the same
/// (it lags more than `HOLD_LIMIT` blocks) has its watcher moved up to the blocks held
/// ([`skip_to`]), logged as an error; its sends mined in pruned blocks stay as the
/// reconciler leaves a nonce it cannot find (logged on every pass).
async fn hold(state: &Handles, h: &SimHandle, sw: &SimWorker) {
    let key = sw.w.key.clone();
    let cursor = match state.store.read(move |r| load_watch(r, &key)).await {
        Ok(ws) => ws.cursor.height,
        Err(e) => {
            tracing::warn!(chain = sw.w.chain, error = %e, "reading the watcher's position failed");
            return;
        }
    };
    let next = match cursor {
        Some(n) => n + 1,
        None => sw.w.start_block.unwrap_or(0),
    };
    let from = next
        .saturating_sub(memory_blocks(&sw.w) as u64)
        .min(sw.sent_from);
    let floor = {
        let mut c = h.client.chain_state().lock().await;
        c.hold_from(Some(from));
        let floor = c.pruned_to();
        match c.block(floor + 1) {
            Some(b) if next <= floor => (floor, b.parent_hash),
            _ => return,
        }
    };
    tracing::error!(chain = sw.w.chain, project = %h.project, next, pruned_to = floor.0, limit = HOLD_LIMIT,
        "the chain worker lagged more than a simulated chain holds: its next block is pruned; its watcher skips to the oldest block held (test deposits in the skipped blocks were credited by their requests, other transfers to watched addresses there are not seen)");
    if let Err(e) = skip_to(state, &sw.w, floor).await {
        tracing::warn!(chain = sw.w.chain, error = %crate::workers::chain::clean(&e), "moving the watcher past pruned blocks failed");
    }
}

/// Moves the watcher's stored position to `floor` (the chain's newest pruned block and its
/// hash), where the blocks it could still scan begin, unless it moved past it meanwhile:
/// the position [`held_from`] gives a watcher that never ran, for one that fell behind the
/// chain's held history (more than `HOLD_LIMIT` blocks, or held by a build without the
/// hold). What it skips was credited as the `held_from` rule says.
async fn skip_to(state: &Handles, w: &ChainWorker, floor: (u64, B256)) -> anyhow::Result<()> {
    let key = w.key.clone();
    crate::workers::chain::write(state, move |ctx| {
        let mut ws = load_watch(ctx, &key)?;
        if ws.cursor.height.is_some_and(|h| h >= floor.0) {
            return Ok(());
        }
        ws.cursor = Cursor {
            height: Some(floor.0),
            recent: [floor].into(),
        };
        save_watch(ctx, &key, &ws)
    })
    .await
}

/// The oldest block `h`'s chain holds (0 until it prunes; `RETAIN_BLOCKS`): where a
/// watcher that never ran starts, since older blocks cannot be scanned any more. Every
/// transfer of a test deposit or test transfer is credited in its own request, so what the
/// watcher finds in a test chain's pruned blocks was recorded then.
async fn held_from(h: &SimHandle) -> u64 {
    match h.client.chain_state().lock().await.pruned_to() {
        0 => 0,
        n => n + 1,
    }
}

/// One driven change of a chain: worker catch-up, the action, catch-up again. `timer`: a
/// timer block (`step_ms` apart from the previous one, deferred when empty).
async fn drive(
    state: &Handles,
    workers: &Workers,
    h: &Arc<SimHandle>,
    action: DriveAction,
    timer: Option<u64>,
) -> Result<u64, SimOpenError> {
    let _drive = h.drive.lock().await;
    let sw = worker_for(state, workers, h).map_err(|e| SimOpenError::Write(e.to_string()))?;
    let mut sw = sw.lock().await;
    sw.w.start_block = Some(held_from(h).await);
    catch_up(state, h, &mut sw).await;
    let r = match action {
        DriveAction::Mine(n) => match timer {
            Some(step) => h.mine(&state.store, n, step, true).await,
            None => h.mine(&state.store, n, 0, false).await,
        },
        DriveAction::Reorg { depth, drop } => sim_chain::reorg(&state.store, h, depth, drop).await,
    };
    if r.is_ok() {
        catch_up(state, h, &mut sw).await;
    }
    r
}

/// Opens the chains that have stored operations, serves drive requests, and mines one
/// block on every opened chain every `test.block_interval_ms`.
pub async fn run(state: Handles) {
    let interval_ms = state.config.test.block_interval_ms.max(10);
    let interval = Duration::from_millis(interval_ms);
    let workers: Workers = Default::default();
    if let Some(mut rx) = state.sim.take_drive_queue() {
        let (state, workers) = (state.clone(), workers.clone());
        tokio::spawn(async move {
            while let Some(Drive {
                handle,
                action,
                reply,
            }) = rx.recv().await
            {
                let (state, workers) = (state.clone(), workers.clone());
                tokio::spawn(async move {
                    let r = drive(&state, &workers, &handle, action, None).await;
                    let _ = reply.send(r);
                });
            }
        });
    }
    state.sim.open_stored(&state.store, &state.registry).await;
    let mut last_flush = Instant::now();
    loop {
        tokio::time::sleep(interval).await;
        for h in state.sim.all() {
            if let Err(e) = drive(
                &state,
                &workers,
                &h,
                DriveAction::Mine(1),
                Some(interval_ms),
            )
            .await
            {
                tracing::error!(error = %e, chain = h.chain, project = %h.project, "simulated block failed");
            }
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            flush(&state).await;
            last_flush = Instant::now();
        }
    }
}
