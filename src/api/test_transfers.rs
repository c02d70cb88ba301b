//! `POST /v1/test/transfers` and `POST /v1/test/clock` (DECISIONS.md section 15): a
//! transfer to any address the test project custodies, and the test project's clock. Test
//! wallet keys only (`test_mode::TestMode`).

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::AddressOwner;

use crate::api::authed::{Authed, Post};
use crate::api::error::ApiError;
use crate::api::extract::{read_body, JsonBody};
use crate::api::test_mode::TestMode;
use crate::api::{commit, json as json_response, Begin};
use crate::services::test_transfers::{self, NewTestTransfer};
use crate::services::{clock, invoices, sim_chain};
use crate::state::AppState;
use crate::views;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_test_transfer))
        .routes(routes!(advance_clock))
}

read_body!(NewTestTransfer {
    chain: req_chain,
    asset: req_asset,
    decimals: req_u64,
    amount: req_amount,
    to_address: req_str,
    from_address: opt_str,
    sender_class: opt_str,
    confirm: opt_bool or true,
});

/// `POST /v1/test/transfers` — an external transfer on the project's simulated `chain` to
/// `to_address`, any address the project custodies (a customer's deposit address, an
/// invoice's payment address); the appliance reacts exactly as to a real transfer there (a
/// deposit, an invoice payment). The transfer is mined in a new block in the same store
/// transaction as the answer; with `confirm` (default true) the chain then mines the blocks
/// its confirmation threshold needs and the chain worker credits it before the answer,
/// else the block clock confirms it in time. 422 `unknown_address` for an address the
/// project does not custody on that chain.
///
/// Key: test-mode `wallet` kind (else 403 `test_mode_only`), scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/transfers", tag = "test",
    params(crate::api::IdempotencyHeader),
    request_body = NewTestTransfer,
    responses(
        (status = 201, description = "The transfer, mined.", body = views::TestTransferView),
        (status = 400, description = "`invalid_request`, `decimals_mismatch`, `unknown_asset` (named in `param`).", body = crate::api::error::ErrorBody),
        (status = 422, description = "`unknown_address` (`param: to_address`), `chain_not_enabled`.", body = crate::api::error::ErrorBody),
    ))]
async fn create_test_transfer(
    a: Authed<TestMode>,
    Post { key, body }: Post,
) -> Result<Response, ApiError> {
    let req: NewTestTransfer = body.read()?;
    let Some(chain_id) = a
        .state
        .registry
        .chain(&req.chain)
        .filter(|c| c.is_evm())
        .map(|c| c.id())
    else {
        return Err(ApiError::invalid(
            "chain",
            format!("{:?} is not a simulated chain.", req.chain.as_str()),
        ));
    };
    let idem = match a.begin(&key, "/v1/test/transfers", &body).await? {
        Begin::Replay(r) => return Ok(r),
        Begin::Fresh(idem) => idem,
    };
    let h = a.sim_chain(chain_id).await?;
    let s = a.scope();
    let confirm = req.confirm;
    let out = {
        // Exclusive (as mining is): test transfers are few; deposits' block reservations
        // wait meanwhile.
        let mut x = h.exclusive(&a.state.store).await?;
        let cursor = h.cursor(&mut x, sim_chain::now_ms());
        let cur = cursor.clone();
        let r = commit(&a.state, idem, move |ctx| {
            let planned = test_transfers::plan(ctx, &s, &req, cur.next_block, cur.next_time_ms)?;
            cur.write(ctx, std::slice::from_ref(&planned.op))?;
            if let Some(c) = &req.sender_class {
                test_transfers::record_sender_class(ctx, &req.chain, &planned.from_address, c)?;
            }
            let (owner, owner_id) = match planned.owner {
                AddressOwner::Customer(c) => ("customer", c),
                AddressOwner::Invoice(i) => ("invoice", i),
                AddressOwner::Funding(p) => ("funding", p),
            };
            let v = views::to_value(&views::TestTransferView {
                object: "test_transfer",
                chain: req.chain.as_str(),
                asset: req.asset.as_str(),
                amount: req.amount.get().to_string(),
                tx_hash: &planned.tx_hash,
                from_address: &planned.from_address,
                to_address: &planned.to_address,
                block_number: planned.block_number,
                owner,
                owner_id,
                confirm: req.confirm,
            });
            Ok((StatusCode::CREATED, v, planned))
        })
        .await;
        match r {
            Ok((resp, Some(planned))) => {
                let ops = [planned.op.clone()];
                h.committed(&mut x.chain, &cursor, &ops, &ops)
                    .map_err(|e| ApiError::internal(&e))?;
                Ok((resp, Some(planned)))
            }
            Ok((resp, None)) => {
                h.failed(&mut x.chain, cursor);
                Ok((resp, None))
            }
            Err(e) => {
                h.failed(&mut x.chain, cursor);
                Err(e)
            }
        }
    };
    let (resp, planned) = out?;
    if let Some(p) = planned {
        // The chain lock is released: the driver mines and runs the chain worker, so the
        // answer follows what the watcher made of the transfer.
        let blocks = if confirm {
            u64::from(p.required_confirmations.saturating_sub(1))
        } else {
            0
        };
        a.drive(h, sim_chain::DriveAction::Mine(blocks)).await?;
    }
    Ok(resp)
}

/// `POST /v1/test/clock`.
#[derive(ToSchema)]
pub struct AdvanceClock {
    /// Seconds to move the test project's clock forward, 1 to 31,622,400.
    #[schema(minimum = 1, maximum = 31622400)]
    pub advance_seconds: u64,
}

read_body!(AdvanceClock {
    advance_seconds: u64_within(
        None,
        1..=clock::MAX_ADVANCE_S,
        &format!(
            "advance_seconds must be from 1 to {}.",
            clock::MAX_ADVANCE_S
        )
    ),
});

/// `POST /v1/test/clock` — `{advance_seconds}` (1 to 31,622,400): moves the test project's
/// clock forward (invoice expiry, underpaid windows; at most 10 years ahead in all) and
/// expires what became due at once (the expiry worker does the rest within a second).
/// Answers `{object: "test_clock", now}`.
///
/// Key: test-mode `wallet` kind (else 403 `test_mode_only`), scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/clock", tag = "test",
    request_body(content = AdvanceClock),
    responses(
        (status = 200, description = "The project's clock after the move.", body = views::TestClockView),
        (status = 400, description = "`invalid_request` (`param: advance_seconds`).", body = crate::api::error::ErrorBody),
    ))]
async fn advance_clock(a: Authed<TestMode>, body: JsonBody) -> Result<Response, ApiError> {
    let AdvanceClock {
        advance_seconds: secs,
    } = body.read()?;
    let s = a.scope();
    let now = a
        .state
        .store
        .write(move |ctx| {
            let now = clock::advance(ctx, s.project_id(), secs).map_err(ApiError::from)?;
            invoices::expire_due(ctx, &s, crate::services::invoices::EXPIRE_INLINE)
                .map_err(ApiError::from)?;
            Ok::<_, ApiError>(now)
        })
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &views::Sorted(views::TestClockView {
            object: "test_clock",
            now: views::ts(now),
        }),
    ))
}
