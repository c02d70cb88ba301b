//! Conversions (SPEC.md section 4, Conversions; DECISIONS.md sections 4 and 14).

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::Conversion;
use appliance_storage::records::{
    ConversionBatch, ConversionKind, ConversionStatus, KeyKind, Mode,
};

use crate::api::authed::{access_rules, Authed, PathId, Post};
use crate::api::error::ApiError;
use crate::api::extract::list_schema;
use crate::api::extract::{Fields, JsonBody, Params, ReadBody};
use crate::api::{commit, json, Begin, PageAnswer};
use crate::auth::Access;
use crate::services::conversions::{
    self, ConversionError, ConversionRequest, RuleUpdate, DEFAULT_SLIPPAGE_BPS, MAX_KEEP_ASSETS,
    MAX_SLIPPAGE_BPS,
};
use crate::services::reads;
use crate::services::types::{ChainId, ConversionBatchId, ConversionId};
use crate::state::AppState;
use crate::views::{self, Sorted};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(&[KeyKind::Payout], "conversions:read");
    WRITE = Access::new(&[KeyKind::Payout], "conversions:write");
    CONVERT = Access::new(&[KeyKind::Payout], "conversions:write").signing();
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_rules))
        .routes(routes!(put_rule))
        .routes(routes!(quote_conversion))
        .routes(routes!(list_conversions, create_conversion))
        .routes(routes!(get_batch))
        .routes(routes!(get_conversion))
}

/// List the project's conversion rules: one per chain it lists, with the coins each can
/// convert into (stablecoins first) and whether the chain supports conversions.
///
/// Key: `payout` kind, scope `conversions:read`.
#[utoipa::path(get, path = "/v1/conversion/rules", tag = "conversions",
    responses((status = 200, description = "The rules.", body = ConversionRuleList)))]
async fn list_rules(a: Authed<READ>) -> Result<Response, ApiError> {
    let s = a.scope();
    let v = conversions::rules_of(&a.state.store, s).await?;
    Ok(json(StatusCode::OK, &v))
}

/// Set the conversion rule of a chain. It applies to the next payment; queued rows keep
/// their target (SPEC.md section 4, Conversions).
///
/// Key: `payout` kind, scope `conversions:write`.
#[utoipa::path(put, path = "/v1/conversion/rules/{chain}", tag = "conversions",
    params(("chain" = String, Path, description = "Chain identifier.")),
    request_body = RuleUpdate,
    responses(
        (status = 200, description = "The rule.", body = views::ConversionRuleView),
        (status = 400, description = "`invalid_request`, `invalid_target`, `invalid_keep_asset`.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`chain_not_enabled`, `conversion_unsupported_chain` (switching a rule on where no DEX is configured).", body = crate::api::error::ErrorBody),
    ))]
async fn put_rule(
    a: Authed<WRITE>,
    Path(chain): Path<String>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let update: RuleUpdate = body.read()?;
    if chain.len() > 32 {
        return Err(ApiError::invalid("chain", "Unknown chain."));
    }
    let s = a.scope();
    let chain = ChainId::new(chain);
    a.write(move |ctx| {
        let v = conversions::put_rule(ctx, &s, &chain, update)?;
        Ok((StatusCode::OK, v, ()))
    })
    .await
}

impl ReadBody for RuleUpdate {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        let enabled = f
            .opt_bool("enabled")?
            .ok_or_else(|| ApiError::invalid("enabled", "enabled is required."))?;
        let target_asset = f.req_str("target_asset")?;
        let keep_assets = f.opt_str_list("keep_assets")?.unwrap_or_default();
        if keep_assets.len() > MAX_KEEP_ASSETS {
            return Err(ApiError::invalid(
                "keep_assets",
                format!("keep_assets lists at most {MAX_KEEP_ASSETS} coins."),
            ));
        }
        Ok(RuleUpdate {
            enabled,
            target_asset,
            keep_assets,
        })
    }
}

// `slippage_bps` is read first: its refusal comes before the other fields'.
impl ReadBody for ConversionRequest {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        let slippage_bps = match f.opt_u64("slippage_bps")? {
            None => DEFAULT_SLIPPAGE_BPS,
            Some(v) if v <= MAX_SLIPPAGE_BPS as u64 => v as u32,
            Some(_) => {
                return Err(ApiError::invalid(
                    "slippage_bps",
                    format!("slippage_bps must be from 0 to {MAX_SLIPPAGE_BPS}."),
                ))
            }
        };
        Ok(ConversionRequest {
            chain: f.req_chain("chain")?,
            from_asset: f.req_asset("from_asset")?,
            to_asset: f.req_asset("to_asset")?,
            amount: f.req_amount("amount")?,
            slippage_bps,
        })
    }
}

/// Quote a conversion (read-only; quotes are not held): live projects from the chain's
/// DEX, test projects from the test prices (`market: "test"`). `available` is what the
/// treasury can convert now.
///
/// Key: `payout` kind, scope `conversions:read`.
#[utoipa::path(post, path = "/v1/conversions/quote", tag = "conversions",
    request_body = ConversionRequest,
    responses(
        (status = 200, description = "The quote.", body = views::ConversionQuoteView),
        (status = 400, description = "`invalid_request`, `unknown_asset`.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`chain_not_enabled`, `conversion_unsupported_chain`.", body = crate::api::error::ErrorBody),
        (status = 503, description = "`conversion_unavailable`: the DEX or its node cannot quote now.", body = crate::api::error::ErrorBody),
    ))]
async fn quote_conversion(a: Authed<READ>, body: JsonBody) -> Result<Response, ApiError> {
    let req: ConversionRequest = body.read()?;
    let s = a.scope();
    let v =
        conversions::quote(&a.state.store, &a.state.registry, &a.state.market, &s, &req).await?;
    Ok(json(StatusCode::OK, &Sorted(v)))
}

/// Convert coins the customers hold (SPEC.md section 4, Conversions rule 2): drawn on the
/// customers holding `from_asset` pro rata to their available balances (one row per
/// customer), sized against the free treasury, quoted and planned at once as one batch.
/// A test project answers 422 `conversion_test_mode`.
///
/// Key: `payout` kind, scope `conversions:write`, signing enabled.
#[utoipa::path(post, path = "/v1/conversions", tag = "conversions",
    params(crate::api::RequiredIdempotencyHeader),
    request_body = ConversionRequest,
    responses(
        (status = 202, description = "Planned: the rows and their batch.", body = views::ConversionRequestView),
        (status = 400, description = "`invalid_request`, `unknown_asset`, `idempotency_key_required`.", body = crate::api::error::ErrorBody),
        (status = 402, description = "`insufficient_funds`: the free treasury or the customers' balances lack the amount.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`chain_not_enabled`, `conversion_unsupported_chain`, `conversion_test_mode`.", body = crate::api::error::ErrorBody),
        (status = 503, description = "`conversion_unavailable`: the DEX or its node cannot quote now.", body = crate::api::error::ErrorBody),
    ))]
async fn create_conversion(
    a: Authed<CONVERT>,
    Post { key, body }: Post,
) -> Result<Response, ApiError> {
    key.require("POST /v1/conversions")?;
    let req: ConversionRequest = body.read()?;
    if a.caller.project.mode == Mode::Test {
        return Err(ConversionError::TestMode.into());
    }
    let idem = match a.begin(&key, "/v1/conversions", &body).await? {
        Begin::Replay(r) => return Ok(r),
        Begin::Fresh(idem) => idem,
    };
    let s = a.scope();
    // The quote is read before the store transaction (it asks the DEX).
    let q = conversions::price(&a.state.registry, &a.state.market, &s, &req).await?;
    let (resp, _) = commit(&a.state, idem, move |ctx| {
        let (rows, batch) = conversions::create_manual(ctx, &s, &req, &q)?;
        Ok((
            StatusCode::ACCEPTED,
            conversions::request_json(&s.reg, &rows, &batch),
            (),
        ))
    })
    .await?;
    Ok(resp)
}

/// List conversion rows, newest first.
///
/// Key: `payout` kind, scope `conversions:read`.
#[utoipa::path(get, path = "/v1/conversions", tag = "conversions",
    params(crate::api::extract::PageParams,
        ("status" = Option<ConversionStatusIn>, Query, description = "Only rows in this status."),
        ("chain" = Option<String>, Query, description = "Only rows on this chain."),
        ("kind" = Option<ConversionKindIn>, Query, description = "Only `auto` or `manual` rows."),
    ),
    responses((status = 200, description = "A page of conversions.", body = ConversionList)))]
async fn list_conversions(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let p = a.caller.project_id();
    let status = q.status::<ConversionStatus>()?;
    let chain = q.get("chain").map(str::to_string);
    let kind = match q.one_of("kind", &["auto", "manual"])? {
        Some(k) => ConversionKind::parse(&k),
        None => None,
    };
    let query = reads::ConversionQuery {
        status,
        chain,
        kind,
    };
    let rows = reads::conversions(&a.state.store, p, query, page.rows()?).await?;
    Ok(rows.answer(|x| Sorted(conversions::conversion_view(&a.state.registry, x))))
}

/// Read a conversion batch.
///
/// Key: `payout` kind, scope `conversions:read`.
#[utoipa::path(get, path = "/v1/conversions/batches/{id}", tag = "conversions", params(PathId),
    responses((status = 200, description = "The batch.", body = views::ConversionBatchView)))]
async fn get_batch(a: Authed<READ>, id: ConversionBatchId) -> Result<Response, ApiError> {
    a.get_by_id::<ConversionBatch, _, _>(id, ConversionError::BatchNotFound, |x| {
        Sorted(conversions::batch_view(&a.state.registry, x))
    })
    .await
}

/// Read a conversion row.
///
/// Key: `payout` kind, scope `conversions:read`.
#[utoipa::path(get, path = "/v1/conversions/{id}", tag = "conversions", params(PathId),
    responses((status = 200, description = "The conversion.", body = views::ConversionView)))]
async fn get_conversion(a: Authed<READ>, id: ConversionId) -> Result<Response, ApiError> {
    a.get_by_id::<Conversion, _, _>(id, ConversionError::NotFound, |x| {
        Sorted(conversions::conversion_view(&a.state.registry, x))
    })
    .await
}

list_schema! {
    ConversionRuleList => crate::views::ConversionRuleView;
    ConversionList => crate::views::ConversionView;
}

/// A conversion row status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ConversionStatusIn {
    Queued,
    Converting,
    Converted,
    Skipped,
    Failed,
}

/// A conversion kind filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ConversionKindIn {
    Auto,
    Manual,
}
