//! `GET /v1/coins` (SPEC.md section 2, Coin catalogue; section 4, Meta and public) and the
//! coin logos it links, `GET /assets/coins/{SYMBOL}.svg`, served from SVGs embedded in the
//! binary (DECISIONS.md section 11).

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::authed::{Authed, ANY};
use crate::api::error::ApiError;
use crate::api::extract::Params;
use crate::api::json;
use crate::services::coins::{catalogue, CoinQuery, GroupBy};
use crate::state::AppState;

/// SPEC.md section 8: `GET /v1/coins` `limit` is 1-1000, default 120.
pub const MAX_LIMIT: usize = 1000;
pub const DEFAULT_LIMIT: usize = 120;

/// The logos, one per symbol the registry lists (`assets/coins/`, original artwork).
pub const LOGOS: &[(&str, &str)] = &[
    ("AVAX", include_str!("../../assets/coins/AVAX.svg")),
    ("BNB", include_str!("../../assets/coins/BNB.svg")),
    ("BTC", include_str!("../../assets/coins/BTC.svg")),
    ("DOGE", include_str!("../../assets/coins/DOGE.svg")),
    ("ETH", include_str!("../../assets/coins/ETH.svg")),
    ("POL", include_str!("../../assets/coins/POL.svg")),
    ("SOL", include_str!("../../assets/coins/SOL.svg")),
    ("TON", include_str!("../../assets/coins/TON.svg")),
    ("TRX", include_str!("../../assets/coins/TRX.svg")),
    ("USDC", include_str!("../../assets/coins/USDC.svg")),
    ("USDT", include_str!("../../assets/coins/USDT.svg")),
];

/// `GET /v1/coins` (documented).
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_coins))
}

/// The logos (static files, outside the API description, like `/healthz`).
pub fn assets_router() -> Router<AppState> {
    Router::new().route("/assets/coins/{file}", get(logo))
}

/// `status` of `GET /v1/coins`.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum CoinStatusIn {
    All,
    Live,
}

/// `group_by` of `GET /v1/coins`.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum CoinGroupByIn {
    Symbol,
    Contract,
}

/// The query of `GET /v1/coins` (DECISIONS.md section 3).
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CoinParams {
    /// `all` (default) or `live`: live coins only.
    #[param(inline)]
    pub status: Option<CoinStatusIn>,
    /// Only the coins of this chain.
    #[param(inline)]
    pub chain: Option<crate::services::types::ChainIdIn>,
    /// `symbol` (default: one entry per symbol) or `contract` (one per chain and coin).
    #[param(inline)]
    pub group_by: Option<CoinGroupByIn>,
    /// Most entries returned, 1-1000 (default 120).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// Counts of one chain in the catalogue's totals.
#[derive(ToSchema)]
pub struct CoinChainTotals {
    /// Coins on the chain.
    pub coins: u64,
    /// Of which live.
    pub live: u64,
}

/// `totals` of the coin catalogue: over the whole catalogue, before the `chain` and `status`
/// filters and before `limit`. `coins`/`live` count (chain, coin) pairs.
#[derive(ToSchema)]
pub struct CoinTotals {
    pub coins: u64,
    pub live: u64,
    /// Distinct symbols.
    pub symbols: u64,
    pub chains: u64,
    /// Chains listed for the project and `live`.
    pub chains_live: u64,
    /// Per chain identifier.
    pub by_chain: std::collections::BTreeMap<String, CoinChainTotals>,
}

/// One coin of the catalogue (mainnet contracts and decimals, whatever the key's mode).
#[derive(ToSchema)]
pub struct Coin {
    /// The chain (with `group_by=symbol`: the symbol's first chain in catalogue order).
    pub chain: String,
    pub chain_name: String,
    /// On how many chains of the registry the symbol exists.
    pub chains: u64,
    pub symbol: String,
    pub name: String,
    /// Token contract; empty for a native coin.
    pub contract: String,
    pub decimals: u8,
    pub is_native: bool,
    /// `{public_base_url}/assets/coins/{SYMBOL}.svg` (an SVG embedded in the binary).
    pub logo_url: String,
    pub deposits_enabled: bool,
    pub payouts_enabled: bool,
    pub decimals_differ_from_default: bool,
    /// The chain is listed for the project and `live`, and the coin takes deposits or
    /// payouts there (with `group_by=symbol`: on any of its chains).
    pub live: bool,
    /// Market rank (1 = largest); the catalogue's order after `live` and native-first.
    pub market_rank: u64,
}

/// The coin catalogue (`object: coin_list`, SPEC.md section 2).
#[derive(ToSchema)]
pub struct CoinList {
    /// Always `coin_list`.
    #[schema(pattern = "^coin_list$")]
    pub object: String,
    pub totals: CoinTotals,
    /// Entries in `data`.
    pub returned: u64,
    pub data: Vec<Coin>,
}

/// Parses the query of `GET /v1/coins` (DECISIONS.md section 3): `status=all|live`
/// (default `all`), `chain` (a chain identifier), `group_by=symbol|contract` (default
/// `symbol`), `limit` 1-1000 (default 120). Each bad value is 400 `invalid_request` naming
/// its parameter.
pub fn parse_query(q: &Params) -> Result<CoinQuery, ApiError> {
    let live_only = q.one_of("status", &["all", "live"])?.as_deref() == Some("live");
    let group_by = match q.one_of("group_by", &["symbol", "contract"])?.as_deref() {
        Some("contract") => GroupBy::Contract,
        _ => GroupBy::Symbol,
    };
    let chain = match q.get("chain") {
        None => None,
        Some(c) if appliance_chains::chain(c).is_some() => Some(c.to_string()),
        Some(c) => {
            return Err(ApiError::invalid(
                "chain",
                format!(
                    "chain must be a chain identifier (ethereum, bsc, ...), got {:?}.",
                    c.chars().take(40).collect::<String>()
                ),
            ))
        }
    };
    let limit = match q.get("limit") {
        None => DEFAULT_LIMIT,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::invalid(
                    "limit",
                    format!("limit must be an integer from 1 to {MAX_LIMIT}."),
                ))
            }
        },
    };
    Ok(CoinQuery {
        live_only,
        chain,
        group_by,
        limit,
    })
}

/// The coin catalogue (SPEC.md section 2, Coin catalogue): every coin of the registry in its
/// mainnet view, switched-off coins included (`live:false`). Order: live first, native coins
/// ahead of tokens, then market rank. `totals` cover the whole catalogue, before the filters
/// and `limit`. `logo_url` is `{public_base_url}/assets/coins/{SYMBOL}.svg` (a path from
/// the root when `public_base_url` is not set). Not for a payment picker: `GET /v1/chains`
/// is.
///
/// Any key kind; no scope.
#[utoipa::path(get, path = "/v1/coins", tag = "meta",
    params(CoinParams),
    responses(
        (status = 200, description = "The catalogue.", body = CoinList),
        (status = 400, description = "`invalid_request`: a bad `status`, `chain`, `group_by` or `limit` (named in `param`).", body = crate::api::error::ErrorBody),
    ))]
async fn list_coins(a: Authed<ANY>, q: Params) -> Result<Response, ApiError> {
    let query = parse_query(&q)?;
    let base = a
        .state
        .config
        .public_base_url
        .as_deref()
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string();
    let v = catalogue(&a.state.registry, &a.caller.project, &query, &base);
    Ok(json(StatusCode::OK, &v))
}

/// The embedded SVG of `symbol` (any case).
pub fn logo_svg(symbol: &str) -> Option<&'static str> {
    LOGOS
        .iter()
        .find(|(s, _)| s.eq_ignore_ascii_case(symbol))
        .map(|(_, svg)| *svg)
}

/// `GET /assets/coins/{SYMBOL}.svg` — public, no key: the logo as `image/svg+xml`, cached a
/// day, with a CSP that lets it run nothing. 404 `not_found` for any other name.
async fn logo(Path(file): Path<String>) -> Response {
    let svg = file
        .strip_suffix(".svg")
        .filter(|s| s.len() <= 16)
        .and_then(logo_svg);
    let Some(svg) = svg else {
        return ApiError::not_found("logo").into_response();
    };
    crate::api::with_headers(
        svg,
        &[
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registry_symbol_has_an_embedded_logo() {
        for c in appliance_chains::CHAINS {
            for a in c.assets() {
                let svg = logo_svg(a.symbol).unwrap_or_else(|| panic!("{}", a.symbol));
                assert!(svg.starts_with("<svg ") && svg.contains(a.symbol));
                assert!(!svg.contains("<script"));
            }
        }
        assert_eq!(logo_svg("eth"), logo_svg("ETH"));
        assert!(logo_svg("NOPE").is_none());
    }
}
