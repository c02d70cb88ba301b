//! `/v1/test/*`: the simulated chain (SPEC.md section 4, Test mode). Test wallet keys
//! only; anything else is 403 `test_mode_only`.

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::{Deposit, KeyKind, Mode};

use crate::api::authed::{Authed, PathId, Post, Rule};
use crate::api::error::ApiError;
use crate::api::extract::{read_body, Fields, JsonBody, ReadBody};
use crate::api::{json as json_response, raw_json, run_idempotent, Begin, Idem, RecordKey};
use crate::auth::{Access, Caller};
use crate::services::deposits::{self, TestDeposit};
use crate::services::sim_chain::{self, SimHandle};
use crate::services::types::EvmChainIn;
use crate::services::types::{CustomerId, DepositId};
use crate::services::Scope;
use crate::state::AppState;
use crate::views::{self, Sorted};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const ACCESS: Access = Access::new(&[KeyKind::Wallet], "wallets:create");

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_test_deposit))
        .routes(routes!(confirm_test_deposit))
        .routes(routes!(fail_test_deposit))
        .routes(routes!(orphan_test_deposit))
        .routes(routes!(mine_blocks))
        .routes(routes!(reorg))
        .routes(routes!(drop_tx))
}

/// The access rule of the `/v1/test` endpoints: a test-mode `wallet` key (else 403
/// `test_mode_only`) with scope `wallets:create`.
pub struct TestMode;

impl Rule for TestMode {
    fn check(caller: &Caller) -> Result<(), ApiError> {
        if caller.project.mode != Mode::Test || caller.key.kind != KeyKind::Wallet {
            return Err(ApiError::forbidden(
                "test_mode_only",
                "Only test-mode wallet keys can use /v1/test endpoints.",
            ));
        }
        Ok(caller.require(ACCESS)?)
    }
}

impl Authed<TestMode> {
    /// The caller's project's simulated chain `chain`, opened on first use.
    pub(crate) async fn sim_chain(&self, chain: &str) -> Result<Arc<SimHandle>, ApiError> {
        let sim = &self.state.sim;
        let (store, reg) = (&self.state.store, &self.state.registry);
        Ok(sim.get(store, reg, self.caller.project.id, chain).await?)
    }

    /// Drives the chain of `h` (mine, reorg) and answers its new height.
    pub(crate) async fn drive(
        &self,
        h: Arc<SimHandle>,
        action: sim_chain::DriveAction,
    ) -> Result<u64, ApiError> {
        Ok(self.state.sim.drive(h, action).await?)
    }
}

// The block and the transfer's hash are filled in when the block is reserved.
impl ReadBody for TestDeposit {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        Ok(TestDeposit {
            customer_id: CustomerId::from(f.req_uuid("customer_id")?),
            chain: f.req_chain("chain")?,
            asset: f.req_asset("asset")?,
            decimals: f.req_u64("decimals")?,
            amount: f.req_amount("amount")?,
            confirm: f.opt_bool("confirm")?.unwrap_or(true),
            block_number: 0,
            block_time_us: 0,
            minted: deposits::Minted::fresh(),
        })
    }
}

/// `POST /v1/test/deposits` — a transfer to the customer's address on the project's
/// simulated chain, mined in a new block in the same store transaction as the deposit;
/// with `confirm` (default true) it is credited at once (DECISIONS.md
/// section 16). The chain watcher later sees the same transfer (same tx hash and log index)
/// and recognises it as known.
///
/// Key: test-mode `wallet` kind (else 403 `test_mode_only`), scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/deposits", tag = "test",
    params(crate::api::IdempotencyHeader),
    request_body = TestDeposit,
    responses(
        (status = 201, description = "The deposit.", body = crate::views::DepositView),
        (status = 400, description = "`invalid_request`, `decimals_mismatch`, `unknown_asset`.", body = crate::api::error::ErrorBody),
        (status = 404, description = "`not_found`: no such customer (`param: customer_id`).", body = crate::api::error::ErrorBody),
        (status = 422, description = "No deposit address on that chain, or refused by the chain.", body = crate::api::error::ErrorBody),
    ))]
async fn create_test_deposit(
    a: Authed<TestMode>,
    Post { key, body }: Post,
) -> Result<Response, ApiError> {
    let mut req: TestDeposit = body.read()?;
    let s = a.scope();
    let simulated = a
        .state
        .registry
        .chain(&req.chain)
        .is_some_and(|c| c.is_evm());
    if !simulated {
        // Keypair chains have no simulated chain yet: the legacy height numbers the block.
        let (h, now) = deposits::sim_height_now(&a.state.store, req.chain.to_string()).await?;
        req.block_number = h;
        req.block_time_us = now;
        let (resp, _) = a
            .mutate(&key, "/v1/test/deposits", &body, move |ctx| {
                let d = deposits::create_test(ctx, &s, req)?;
                Ok((StatusCode::CREATED, views::deposit(&s.reg, &d), ()))
            })
            .await?;
        return Ok(resp);
    }
    let h = a.sim_chain(&req.chain).await?;
    let idem = match a.begin(&key, "/v1/test/deposits", &body).await? {
        Begin::Replay(r) => return Ok(r),
        Begin::Fresh(idem) => idem,
    };
    // In a task of its own: a reserved block is settled even if the client goes away.
    let task = tokio::spawn(async move {
        let out =
            simulated_deposit(&a.state, &h, s, req, idem.as_ref().map(Idem::record_key)).await;
        drop(idem);
        out
    });
    let (status, body) = task
        .await
        .map_err(|e| ApiError::internal(&format!("test deposit task: {e}")))??;
    Ok(raw_json(
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        body,
    ))
}

/// What a test deposit's store job answers: the body rendered inside the job (a request
/// with an `Idempotency-Key` stores it as its record in the same transaction, or replays
/// the stored one), or the deposit as written, rendered after the commit on the request's
/// task (no record to store: the store writer does not render it).
enum Answer {
    Rendered(u16, String),
    Written(Box<Deposit>),
}

/// A test deposit on a simulated chain: reserves the next block, queues the store job
/// under the chain lock, awaits the commit without it, settles the block (see
/// `services::sim_chain`). The job writes the block's operation whatever the outcome: the
/// transfer with the deposit, or an empty block when the request is refused or replayed.
async fn simulated_deposit(
    state: &AppState,
    h: &sim_chain::SimHandle,
    s: Scope,
    mut req: TestDeposit,
    rec_key: Option<RecordKey>,
) -> Result<(u16, String), ApiError> {
    let (gate, chain, r) = h.reserve_block(&state.store, sim_chain::now_ms()).await?;
    req.block_number = r.block;
    req.block_time_us = i64::try_from(r.time_ms.saturating_mul(1000)).unwrap_or(i64::MAX);
    let reg = s.reg.clone();
    let job = r.clone();
    let queued = state
        .store
        .enqueue(move |ctx| {
            if !job.in_order(ctx)? {
                return Err(ApiError::from(sim_chain::SimOpenError::Rebuilding));
            }
            let t_ms = job.time_ms;
            let out = match rec_key {
                Some(rec_key) => run_idempotent(ctx, Some(rec_key), move |ctx| {
                    let (d, op) = write_test_deposit(ctx, &s, req, t_ms)?;
                    Ok((StatusCode::CREATED, views::deposit(&s.reg, &d), op))
                })
                .map(|(status, body, op)| (Answer::Rendered(status, body), op)),
                None => write_test_deposit(ctx, &s, req, t_ms)
                    .map(|(d, op)| (Answer::Written(Box::new(d)), Some(op))),
            };
            let (answer, op) = match out {
                Ok((answer, Some(op))) => (Ok(answer), op),
                // A replay: the block stays, empty.
                Ok((answer, None)) => (Ok(answer), job.empty_block()),
                // Refused after writing: the batch is aborted (a bug path), nothing is kept.
                Err(e) if ctx.job_wrote() => return Err(e),
                // Refused before writing: the block stays, empty.
                Err(e) => (Err(e), job.empty_block()),
            };
            job.write(ctx, &op)?;
            Ok((answer, op))
        })
        .await;
    drop(chain);
    let out = match queued {
        Ok(done) => done.await,
        Err(e) => Err(e),
    };
    let (answer, written) = match out {
        Ok((answer, op)) => (Ok(answer), Some(op)),
        Err(e) => (Err(e), None),
    };
    h.settle(&mut *h.client.chain_state().lock().await, r, written);
    drop(gate);
    Ok(match answer?? {
        Answer::Rendered(status, body) => (status, body),
        Answer::Written(d) => (
            StatusCode::CREATED.as_u16(),
            serde_json::to_string(&views::deposit_view(&reg, &d)).expect("json"),
        ),
    })
}

/// The store job's writes of a test deposit on a simulated chain: the deposit
/// (`deposits::create_test`), the block's transfer and the block's deposit (which the chain
/// worker unwinds if a reorg removes its block).
fn write_test_deposit(
    ctx: &mut appliance_storage::WriteCtx<'_>,
    s: &Scope,
    req: TestDeposit,
    t_ms: u64,
) -> Result<(Deposit, appliance_chains::sim::Op), ApiError> {
    let d = deposits::create_test(ctx, s, req)?;
    let op = sim_chain::deposit_transfer(&s.reg, &d, t_ms)?;
    ctx.evm_block_deposit_add(
        &sim_chain::state_key(&d.chain, d.project_id),
        d.block_number,
        d.id,
    )?;
    Ok((d, op))
}

async fn transition(
    a: Authed<TestMode>,
    id: DepositId,
    f: fn(
        &mut appliance_storage::WriteCtx<'_>,
        &Scope,
        DepositId,
    ) -> Result<appliance_storage::records::Deposit, deposits::DepositError>,
) -> Result<Response, ApiError> {
    let s = a.scope();
    let (resp, _) = a
        .commit(move |ctx| {
            let d = f(ctx, &s, id)?;
            Ok((StatusCode::OK, views::deposit(&s.reg, &d), ()))
        })
        .await?;
    Ok(resp)
}

/// `detected` -> `confirmed`: the deposit is credited (`deposit.confirmed`); 409
/// `invalid_state` from another status.
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/deposits/{id}/confirm", tag = "test", params(PathId),
    responses((status = 200, description = "The deposit.", body = crate::views::DepositView)))]
async fn confirm_test_deposit(a: Authed<TestMode>, id: DepositId) -> Result<Response, ApiError> {
    transition(a, id, deposits::confirm).await
}

/// `detected` -> `failed` (`deposit.failed`); 409 `invalid_state` from another status.
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/deposits/{id}/fail", tag = "test", params(PathId),
    responses((status = 200, description = "The deposit.", body = crate::views::DepositView)))]
async fn fail_test_deposit(a: Authed<TestMode>, id: DepositId) -> Result<Response, ApiError> {
    transition(a, id, deposits::fail).await
}

/// `confirmed` -> `orphaned`: the credit is reversed (`deposit.orphaned`); 409
/// `invalid_state` from another status.
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/deposits/{id}/orphan", tag = "test", params(PathId),
    responses((status = 200, description = "The deposit.", body = crate::views::DepositView)))]
async fn orphan_test_deposit(a: Authed<TestMode>, id: DepositId) -> Result<Response, ApiError> {
    transition(a, id, deposits::orphan).await
}

/// The project's simulated chains a test request names: `chain` (an EVM chain, else 400
/// with `param` `chain`) or, without it, every EVM chain.
fn sim_chain_ids(state: &AppState, chain: Option<&str>) -> Result<Vec<&'static str>, ApiError> {
    let reg = &state.registry;
    match chain {
        Some(c) => match reg.chain(c).filter(|c| c.is_evm()) {
            Some(c) => Ok(vec![c.id()]),
            None => Err(ApiError::invalid(
                "chain",
                format!("{c:?} is not a simulated chain."),
            )),
        },
        None => Ok(reg
            .chains
            .iter()
            .filter(|c| c.is_evm())
            .map(|c| c.id())
            .collect()),
    }
}

/// `POST /v1/test/blocks`.
#[derive(ToSchema)]
pub struct MineBlocks {
    /// Blocks to mine (default 1).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 10000)]
    pub count: u64,
    /// One simulated chain (default: every one).
    #[schema(value_type = Option<EvmChainIn>)]
    pub chain: Option<String>,
}

read_body!(MineBlocks {
    count: u64_within(
        Some(1),
        1..=sim_chain::MAX_BLOCKS,
        &format!("count must be from 1 to {}.", sim_chain::MAX_BLOCKS)
    ),
    chain: opt_str,
});

/// `POST /v1/test/reorg`.
#[derive(ToSchema)]
pub struct ReorgRequest {
    /// A simulated EVM chain of the project.
    #[schema(value_type = EvmChainIn)]
    pub chain: String,
    /// Blocks replaced (1 to the blocks the chain holds: its height, or fewer once it
    /// pruned older blocks; at most 1000).
    #[schema(minimum = 1, maximum = 1000)]
    pub depth: u64,
    /// Drop the removed transactions (default true, as Anvil does); false returns them to the
    /// mempool.
    #[schema(value_type = Option<bool>)]
    pub drop: bool,
}

read_body!(ReorgRequest {
    chain: req_str,
    depth: req_u64,
    drop: opt_bool or true,
});

/// `POST /v1/test/drop_tx`.
#[derive(ToSchema)]
pub struct DropTxRequest {
    /// A simulated EVM chain of the project.
    #[schema(value_type = EvmChainIn)]
    pub chain: String,
    /// A pending transaction's hash.
    #[schema(pattern = "^0x[0-9a-fA-F]{64}$")]
    pub tx_hash: String,
}

read_body!(DropTxRequest {
    chain: req_str,
    tx_hash: req_str,
});

/// `POST /v1/test/blocks` — mine `count` (1-10,000, default 1) blocks on the project's
/// simulated `chain` (default: every EVM chain of the project), and advance sweeps and
/// payouts accordingly. Answers the project's chain heights.
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/blocks", tag = "test",
    request_body = MineBlocks,
    responses((status = 200, description = "Heights after mining.", body = views::TestBlocksView)))]
async fn mine_blocks(a: Authed<TestMode>, body: JsonBody) -> Result<Response, ApiError> {
    let MineBlocks { count, chain } = body.read()?;
    let ids = sim_chain_ids(&a.state, chain.as_deref())?;
    let mut heights = std::collections::BTreeMap::new();
    for id in ids {
        let h = a.sim_chain(id).await?;
        let head = a.drive(h, sim_chain::DriveAction::Mine(count)).await?;
        heights.insert(id.to_string(), head);
    }
    Ok(json_response(
        StatusCode::OK,
        &Sorted(views::TestBlocksView {
            object: "test_blocks",
            mined: count,
            heights,
        }),
    ))
}

/// `POST /v1/test/reorg` — `{chain, depth, drop?}`: the last `depth` blocks (1 to the
/// blocks the chain holds, its height until it prunes (`test.retain_blocks`), at most
/// [`sim_chain::MAX_REORG_DEPTH`]) of the project's simulated
/// `chain` are replaced by empty blocks; their transactions are dropped (`drop`, default
/// true, as Anvil does) or return to the mempool (DECISIONS.md section 15).
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/reorg", tag = "test",
    request_body = ReorgRequest,
    responses(
        (status = 200, description = "The reorg.", body = views::TestReorgView),
        (status = 400, description = "`invalid_request` (`param`: `chain` or `depth`).", body = crate::api::error::ErrorBody),
    ))]
async fn reorg(a: Authed<TestMode>, body: JsonBody) -> Result<Response, ApiError> {
    let ReorgRequest { chain, depth, drop } = body.read()?;
    let id = sim_chain_ids(&a.state, Some(&chain))?[0];
    if !(1..=sim_chain::MAX_REORG_DEPTH).contains(&depth) {
        return Err(ApiError::invalid(
            "depth",
            format!("depth must be from 1 to {}.", sim_chain::MAX_REORG_DEPTH),
        ));
    }
    let h = a.sim_chain(id).await?;
    let height = a
        .drive(h, sim_chain::DriveAction::Reorg { depth, drop })
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &Sorted(views::TestReorgView {
            object: "test_reorg",
            chain: id,
            depth,
            drop,
            height,
        }),
    ))
}

/// `POST /v1/test/drop_tx` — `{chain, tx_hash}`: removes a pending transaction from the
/// mempool of the project's simulated `chain` (as `anvil_dropTransaction`). A hash that is
/// not pending there (unknown, or already mined) is 404 `not_found` with `param`
/// `tx_hash`.
///
/// Key: test-mode `wallet` kind, scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/drop_tx", tag = "test",
    request_body = DropTxRequest,
    responses(
        (status = 200, description = "The dropped transaction.", body = views::TestDroppedTxView),
        (status = 400, description = "`invalid_request` (`param`: `chain` or `tx_hash`).", body = crate::api::error::ErrorBody),
        (status = 404, description = "`not_found`: not pending on that chain (`param`: `tx_hash`).", body = crate::api::error::ErrorBody),
    ))]
async fn drop_tx(a: Authed<TestMode>, body: JsonBody) -> Result<Response, ApiError> {
    let DropTxRequest {
        chain,
        tx_hash: raw,
    } = body.read()?;
    let id = sim_chain_ids(&a.state, Some(&chain))?[0];
    let hash = sim_chain::parse_tx_hash(&raw).ok_or_else(|| {
        ApiError::invalid("tx_hash", "tx_hash must be 0x followed by 64 hex digits.")
    })?;
    let h = a.sim_chain(id).await?;
    if !h.client.chain_state().lock().await.drop_pending(hash) {
        return Err(ApiError::not_found("pending transaction on this chain").param("tx_hash"));
    }
    Ok(json_response(
        StatusCode::OK,
        &Sorted(views::TestDroppedTxView {
            object: "test_dropped_tx",
            chain: id,
            tx_hash: format!("{hash:#x}"),
        }),
    ))
}
