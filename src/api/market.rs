//! Market prices: `GET /v1/market/prices`, `GET /v1/market/status` (public; SPEC.md
//! sections 2 and 4, DECISIONS.md section 11) and `POST /v1/test/prices` (test wallet keys;
//! DECISIONS.md section 15).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use crate::api::error::{request_id, ApiError};
use crate::api::extract::{JsonBody, Params, Public};
use crate::api::json;
use crate::auth::Caller;
use crate::market::{format_usd, positive_price, PriceEntry};
use crate::state::AppState;

/// Most symbols one `?symbols=` may name.
pub const MAX_SYMBOLS: usize = 64;
/// Longest symbol accepted.
const MAX_SYMBOL_LEN: usize = 16;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/market/prices", get(prices))
        .route("/v1/market/status", get(status))
        .route("/v1/test/prices", post(set_test_price))
}

/// Parses `?symbols=ETH,btc` into upper-case symbols without repeats; `None` when absent or
/// empty (every symbol). 400 `invalid_request` (`param: symbols`) for more than
/// [`MAX_SYMBOLS`] or a symbol that is not 1-16 letters and digits.
pub fn parse_symbols(raw: Option<&str>) -> Result<Option<Vec<String>>, ApiError> {
    let Some(raw) = raw.filter(|r| !r.trim().is_empty()) else {
        return Ok(None);
    };
    let mut out: Vec<String> = Vec::new();
    for part in raw.split(',') {
        let s = part.trim().to_ascii_uppercase();
        if s.is_empty() || s.len() > MAX_SYMBOL_LEN || !s.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(ApiError::invalid(
                "symbols",
                "symbols must be a comma-separated list of coin symbols such as ETH,BTC.",
            ));
        }
        if !out.contains(&s) {
            out.push(s);
        }
        if out.len() > MAX_SYMBOLS {
            return Err(ApiError::invalid(
                "symbols",
                format!("symbols names at most {MAX_SYMBOLS} symbols."),
            ));
        }
    }
    Ok(Some(out))
}

fn entry_json(e: &PriceEntry) -> Value {
    json!({"symbol": e.symbol, "usd": format_usd(e.usd), "age_seconds": e.age_seconds})
}

/// `GET /v1/market/prices?symbols=ETH,BTC` — public. 200 `price_list` of the known symbols
/// asked (all when `symbols` is omitted; unknown symbols are left out): stablecoins at par,
/// test mode's table in `--test` mode, the live source in `serve` mode (a value older than
/// `ttl_seconds` is served and refreshed in the background; one older than
/// `max_age_seconds` is not served). Without `[market]` in live mode: 503 with
/// `configured:false`, an empty list and the error envelope's fields
/// (`market_not_configured`). 400 `invalid_request` for a bad `symbols`; 429 when the
/// client address's unauthenticated budget is spent.
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

/// `GET /v1/market/status` — public. `market_status`: `configured`, `base_url` (the
/// provider's, credentials redacted; empty in test mode, which never calls out), and
/// `provider` (`kraken`, `test` or `none`), `fallback` (`chainlink` or `none`),
/// `ttl_seconds`, `max_age_seconds`.
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

/// `POST /v1/test/prices` `{"symbol":"ETH","usd":"2500.00"}` — test wallet keys with
/// `wallets:create` (else 403 `test_mode_only` / `missing_scope`). Sets the server's test
/// price of a listed coin (one table per server, used by every test project; reset to
/// DECISIONS.md section 11's prices on restart). 200
/// `{object:"test_price", symbol, usd}`. 400 `unknown_asset` (`param: symbol`) for a symbol
/// the registry does not list, `invalid_request` (`param: symbol`) for a stablecoin (par),
/// `invalid_request` (`param: usd`) for a `usd` that is not a decimal string above zero.
async fn set_test_price(
    State(state): State<AppState>,
    caller: Caller,
    body: JsonBody,
) -> Result<Response, ApiError> {
    crate::api::test_mode::check(&caller)?;
    let f = &body.fields;
    let symbol = f.req_str("symbol")?.trim().to_ascii_uppercase();
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
    let usd = positive_price(usd_raw.trim()).map_err(|_| {
        ApiError::invalid(
            "usd",
            "usd must be a decimal string above zero, such as \"2500.00\".",
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
            parse_symbols(Some("eth, BTC,eth")).unwrap(),
            Some(vec!["ETH".to_string(), "BTC".to_string()])
        );
        for bad in ["ETH,", ",", "E-TH", "ABCDEFGHIJKLMNOPQ", "ETH;BTC"] {
            assert!(parse_symbols(Some(bad)).is_err(), "{bad}");
        }
        let many: Vec<String> = (0..65).map(|i| format!("S{i}")).collect();
        assert!(parse_symbols(Some(&many.join(","))).is_err());
        let ok: Vec<String> = (0..64).map(|i| format!("S{i}")).collect();
        assert_eq!(
            parse_symbols(Some(&ok.join(","))).unwrap().unwrap().len(),
            64
        );
    }
}
