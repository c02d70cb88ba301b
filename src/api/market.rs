//! Market prices: `GET /v1/market/prices`, `GET /v1/market/status` (public; SPEC.md
//! sections 2 and 4, DECISIONS.md section 11) and `POST /v1/test/prices` (test wallet keys;
//! DECISIONS.md section 15).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::authed::Authed;
use crate::api::error::{request_id, ApiError};
use crate::api::extract::{JsonBody, Params, Public};
use crate::api::json;
use crate::api::test_mode::TestMode;
use crate::market::{format_usd, positive_price, PriceEntry};
use crate::state::AppState;

/// Most symbols one `?symbols=` may name.
pub const MAX_SYMBOLS: usize = 64;
/// Longest symbol accepted.
const MAX_SYMBOL_LEN: usize = 16;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(prices))
        .routes(routes!(status))
        .routes(routes!(set_test_price))
}

/// `symbols` of `GET /v1/market/prices`: 1 to 64 comma-separated symbols of 1-16 letters
/// and digits, any case; empty for all.
pub const SYMBOLS_PATTERN: &str = "^([A-Za-z0-9]{1,16}(,[A-Za-z0-9]{1,16}){0,63})?$";

/// The query of `GET /v1/market/prices`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PriceParams {
    /// Comma-separated symbols (`ETH,BTC`, any case), at most 64; omit for all. Unknown
    /// symbols are left out of the answer.
    #[param(pattern = "^([A-Za-z0-9]{1,16}(,[A-Za-z0-9]{1,16}){0,63})?$")]
    pub symbols: Option<String>,
}

/// A symbol `POST /v1/test/prices` accepts: a listed coin that is not a stablecoin.
pub struct PricedSymbolIn;

impl utoipa::PartialSchema for PricedSymbolIn {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::Schema> {
        let mut ids: Vec<&str> = Vec::new();
        for c in appliance_chains::CHAINS {
            for a in c.assets() {
                if !a.is_stable() && !ids.contains(&a.symbol) {
                    ids.push(a.symbol);
                }
            }
        }
        let v = json!({"type": "string", "enum": ids, "description": "A listed coin that is not a stablecoin (upper case, as listed)."});
        crate::services::types::schema_from_json(v)
    }
}
impl ToSchema for PricedSymbolIn {}

/// One price of a price list.
#[derive(ToSchema)]
pub struct Price {
    pub symbol: String,
    /// USD per whole coin; stablecoins `"1.00"` (par).
    #[schema(pattern = r"^[0-9]+\.[0-9]{2,}$")]
    pub usd: String,
    /// Seconds since the value was true (the provider's read, a feed's `updatedAt`); 0 for
    /// par and test prices.
    pub age_seconds: u64,
}

/// A price list (`object: price_list`, SPEC.md section 2).
#[derive(ToSchema)]
pub struct PriceList {
    /// Always `price_list`.
    #[schema(pattern = "^price_list$")]
    pub object: String,
    /// `false` only in live mode without `[market]` (then 503 and an empty list).
    pub configured: bool,
    /// A value older than this is served as it is and refreshed in the background.
    pub ttl_seconds: u64,
    pub data: Vec<Price>,
}

/// The 503 answer without a price source: a price list with `configured:false` and no
/// data, carrying the error envelope's fields (`code: market_not_configured`).
#[derive(ToSchema)]
pub struct PriceListUnconfigured {
    #[schema(pattern = "^price_list$")]
    pub object: String,
    pub configured: bool,
    pub ttl_seconds: u64,
    pub data: Vec<Price>,
    pub error: String,
    pub code: String,
    #[schema(rename = "type")]
    pub kind: String,
    pub message: String,
    pub request_id: String,
}

/// The market source (`object: market_status`, SPEC.md section 2).
#[derive(ToSchema)]
pub struct MarketStatus {
    #[schema(pattern = "^market_status$")]
    pub object: String,
    pub configured: bool,
    /// The provider's base URL (credentials redacted); empty when none is called (test
    /// mode, not configured).
    pub base_url: String,
    /// `kraken`, `test` or `none`.
    pub provider: String,
    /// `chainlink` (feeds read through the `ethereum` node) or `none`.
    pub fallback: String,
    pub ttl_seconds: u64,
    /// A value older than this is never served or used.
    pub max_age_seconds: u64,
}

/// `POST /v1/test/prices` body.
#[derive(ToSchema)]
pub struct NewTestPrice {
    pub symbol: PricedSymbolIn,
    /// USD per whole coin: a decimal string above zero and below 10^12, at most 16
    /// decimals.
    #[schema(pattern = r"^(?=[0-9.]*[1-9])[0-9]{1,12}(\.[0-9]{1,16})?$")]
    pub usd: String,
}

/// A test price as set (`object: test_price`).
#[derive(ToSchema)]
pub struct TestPrice {
    #[schema(pattern = "^test_price$")]
    pub object: String,
    pub symbol: String,
    #[schema(pattern = r"^[0-9]+\.[0-9]{2,}$")]
    pub usd: String,
}

/// Parses `?symbols=ETH,btc` ([`SYMBOLS_PATTERN`]) into upper-case symbols without repeats;
/// `None` when absent or empty (every symbol). 400 `invalid_request` (`param: symbols`) for
/// more than [`MAX_SYMBOLS`] parts or a part that is not 1-16 letters and digits.
pub fn parse_symbols(raw: Option<&str>) -> Result<Option<Vec<String>>, ApiError> {
    let Some(raw) = raw.filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    let mut out: Vec<String> = Vec::new();
    let mut parts = 0;
    for part in raw.split(',') {
        parts += 1;
        if part.is_empty()
            || part.len() > MAX_SYMBOL_LEN
            || !part.bytes().all(|b| b.is_ascii_alphanumeric())
            || parts > MAX_SYMBOLS
        {
            return Err(ApiError::invalid(
                "symbols",
                format!(
                    "symbols must be at most {MAX_SYMBOLS} comma-separated coin symbols such as ETH,BTC."
                ),
            ));
        }
        let s = part.to_ascii_uppercase();
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(Some(out))
}

fn entry_json(e: &PriceEntry) -> Value {
    json!({"symbol": e.symbol, "usd": format_usd(e.usd), "age_seconds": e.age_seconds})
}

/// Market prices in USD (SPEC.md section 2, Price list; DECISIONS.md section 11): the known
/// symbols asked (all when `symbols` is omitted; unknown symbols are left out). Stablecoins
/// at par; test mode's table in `--test` mode; the live source in `serve` mode, cached for
/// `ttl_seconds` (an older value is served and refreshed in the background; one older than
/// `max_age_seconds` is not served). Zero, negative and stale upstream values are never
/// served. Without `[market]` in live mode: 503 with `configured:false` and an empty list.
///
/// Public (no key), under the unauthenticated per-address budget.
#[utoipa::path(get, path = "/v1/market/prices", tag = "meta", security(()),
    params(PriceParams),
    responses(
        (status = 200, description = "The price list.", body = PriceList),
        (status = 400, description = "`invalid_request` (`param: symbols`).", body = crate::api::error::ErrorBody),
        (status = 503, description = "`market_not_configured`: no price source in live mode.", body = PriceListUnconfigured),
    ))]
async fn prices(
    State(state): State<AppState>,
    _public: Public,
    q: Params,
) -> Result<Response, ApiError> {
    let symbols = parse_symbols(q.get("symbols"))?;
    let m = state.market.clone();
    if !m.configured() {
        return Ok(json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({
                "object": "price_list",
                "configured": false,
                "ttl_seconds": m.ttl_seconds(),
                "data": [],
                "error": "market_not_configured",
                "code": "market_not_configured",
                "type": "api_error",
                "message": "No market price source is configured ([market] in the configuration).",
                "request_id": request_id(),
            }),
        ));
    }
    let data: Vec<Value> = m.list(symbols).await.iter().map(entry_json).collect();
    Ok(json(
        StatusCode::OK,
        &json!({
            "object": "price_list",
            "configured": true,
            "ttl_seconds": m.ttl_seconds(),
            "data": data,
        }),
    ))
}

/// The market price source (SPEC.md section 2, market status): `configured`, the provider's
/// `base_url` (credentials redacted; empty in test mode, which never calls out), `provider`,
/// `fallback`, `ttl_seconds`, `max_age_seconds`.
///
/// Public (no key), under the unauthenticated per-address budget.
#[utoipa::path(get, path = "/v1/market/status", tag = "meta", security(()),
    responses((status = 200, description = "The market source.", body = MarketStatus)))]
async fn status(State(state): State<AppState>, _public: Public) -> Result<Response, ApiError> {
    let m = &state.market;
    Ok(json(
        StatusCode::OK,
        &json!({
            "object": "market_status",
            "configured": m.configured(),
            "base_url": m.base_url(),
            "provider": m.provider(),
            "fallback": m.fallback(),
            "ttl_seconds": m.ttl_seconds(),
            "max_age_seconds": m.max_age_seconds(),
        }),
    ))
}

/// Sets a test price (DECISIONS.md sections 11 and 15): one table per server, used by every
/// test project (payout values and auto-approval) and served by `GET /v1/market/prices` in
/// `--test` mode; back to DECISIONS.md section 11's prices on restart. Stablecoins stay at
/// par.
///
/// Test-mode wallet keys only (else 403 `test_mode_only`); scope `wallets:create`.
#[utoipa::path(post, path = "/v1/test/prices", tag = "test",
    request_body(content = NewTestPrice),
    responses(
        (status = 200, description = "The price as set.", body = TestPrice),
        (status = 400, description = "`unknown_asset` (`param: symbol`), `invalid_request` for a stablecoin (`param: symbol`) or a `usd` that is not a decimal above zero (`param: usd`).", body = crate::api::error::ErrorBody),
    ))]
async fn set_test_price(
    Authed { state, .. }: Authed<TestMode>,
    body: JsonBody,
) -> Result<Response, ApiError> {
    let f = &body.fields;
    let symbol = f.req_str("symbol")?;
    let usd_raw = f.req_str("usd")?;
    let m = &state.market;
    if !m.knows(&symbol) {
        return Err(ApiError::invalid(
            "symbol",
            format!("{symbol:?} is not a coin the registry lists."),
        )
        .with_code("unknown_asset"));
    }
    if m.is_stable(&symbol) {
        return Err(ApiError::invalid(
            "symbol",
            format!("{symbol} is a stablecoin: it is priced at par, 1.00 USD."),
        ));
    }
    let usd = positive_price(&usd_raw).map_err(|_| {
        ApiError::invalid(
            "usd",
            "usd must be a decimal string above zero and below 10^12 with at most 16 decimals, such as \"2500.00\".",
        )
    })?;
    m.set_test_price(&symbol, usd);
    Ok(json(
        StatusCode::OK,
        &json!({"object": "test_price", "symbol": symbol, "usd": format_usd(usd)}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_parse_bounded_and_upper_case() {
        assert_eq!(parse_symbols(None).unwrap(), None);
        assert_eq!(parse_symbols(Some("")).unwrap(), None);
        assert_eq!(
            parse_symbols(Some("eth,BTC,eth")).unwrap(),
            Some(vec!["ETH".to_string(), "BTC".to_string()])
        );
        for bad in [
            "ETH,",
            ",",
            "E-TH",
            "ABCDEFGHIJKLMNOPQ",
            "ETH;BTC",
            "ETH, BTC",
            " ",
        ] {
            assert!(parse_symbols(Some(bad)).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..65).map(|i| format!("S{i}")).collect();
        assert!(parse_symbols(Some(&many.join(","))).is_err());
        // Repeats count as parts (the documented pattern bounds parts, not distinct ones).
        assert!(parse_symbols(Some(&["ETH"; 65].join(","))).is_err());
        let ok: Vec<String> = (0..64).map(|i| format!("S{i}")).collect();
        assert_eq!(
            parse_symbols(Some(&ok.join(","))).unwrap().unwrap().len(),
            64
        );
    }
}
