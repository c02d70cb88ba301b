//! Kraken's public ticker API, the default market provider (DECISIONS.md section 11).
//!
//! `GET {base_url}/0/public/Ticker?pair=XETHZUSD` answers
//! `{"error":[],"result":{"XETHZUSD":{"a":[..],"b":[..],"c":["3000.10000","0.01"],..}}}`;
//! the price used is `c[0]`, the last trade. Failures come in Kraken's own shapes: a non-empty
//! `error` list (`EQuery:Unknown asset pair`, `EAPI:Rate limit exceeded`,
//! `EService:Unavailable`), HTTP 429 and 5xx, and HTML pages from the CDN in front of it.
//! One request per symbol, so an unknown pair costs only its own symbol.

use std::collections::BTreeMap;
use std::time::Duration;

use rust_decimal::Decimal;
use serde_json::Value;

use super::{positive_price, PriceError};

/// Largest answer read (a one-pair ticker is under 1 KiB).
const BODY_MAX: usize = 64 * 1024;

/// Kraken's own pair names where they differ from `{SYMBOL}USD`.
const BUILT_IN_PAIRS: &[(&str, &str)] =
    &[("BTC", "XXBTZUSD"), ("ETH", "XETHZUSD"), ("DOGE", "XDGUSD")];

/// The client of one Kraken-compatible base URL.
#[derive(Debug, Clone)]
pub struct Kraken {
    http: reqwest13::Client,
    base_url: String,
    pairs: BTreeMap<String, String>,
}

impl Kraken {
    /// A client of `base_url` (no trailing `/0/public`), answers bounded by `timeout`;
    /// `pairs` (symbol to pair) override the built-in names.
    pub fn new(
        base_url: &str,
        timeout: Duration,
        pairs: &BTreeMap<String, String>,
    ) -> Result<Kraken, PriceError> {
        let http = reqwest13::Client::builder()
            .redirect(reqwest13::redirect::Policy::none())
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .timeout(timeout)
            .user_agent(concat!("appliance/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| PriceError::Transport(e.to_string()))?;
        Ok(Kraken {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            pairs: pairs
                .iter()
                .map(|(k, v)| (k.to_ascii_uppercase(), v.clone()))
                .collect(),
        })
    }

    /// The pair asked for `symbol`.
    pub fn pair(&self, symbol: &str) -> String {
        if let Some(p) = self.pairs.get(symbol) {
            return p.clone();
        }
        BUILT_IN_PAIRS
            .iter()
            .find(|(s, _)| *s == symbol)
            .map(|(_, p)| p.to_string())
            .unwrap_or_else(|| format!("{symbol}USD"))
    }

    /// The last trade price of `symbol` in USD.
    pub async fn fetch(&self, symbol: &str) -> Result<Decimal, PriceError> {
        let pair = self.pair(symbol);
        let url = format!("{}/0/public/Ticker?pair={pair}", self.base_url);
        let mut resp = self.http.get(&url).send().await.map_err(|e| {
            PriceError::Transport(appliance_chains::redact::scrub_urls(&e.to_string()))
        })?;
        let status = resp.status().as_u16();
        let mut body: Vec<u8> = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(c)) => {
                    body.extend_from_slice(&c);
                    if body.len() > BODY_MAX {
                        return Err(PriceError::Malformed("answer too large".into()));
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(PriceError::Transport(e.to_string())),
            }
        }
        parse_ticker(status, &body, &pair)
    }
}

/// Reads one ticker answer of `pair` (HTTP `status`, `body`) into its last trade price.
pub fn parse_ticker(status: u16, body: &[u8], pair: &str) -> Result<Decimal, PriceError> {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let errors: Vec<String> = json
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| e.as_str().unwrap_or("?").chars().take(120).collect())
                .collect()
        })
        .unwrap_or_default();
    let rate_limited = errors.iter().any(|e| e.contains("Rate limit"));
    if status == 429 || rate_limited {
        return Err(PriceError::RateLimited(status));
    }
    if !(200..300).contains(&status) {
        return Err(match errors.is_empty() {
            true => PriceError::Status(status),
            false => PriceError::Provider(errors.join("; ")),
        });
    }
    let Some(json) = json else {
        let start = String::from_utf8_lossy(&body[..body.len().min(40)])
            .trim_start()
            .to_ascii_lowercase();
        let what = if start.starts_with("<!doctype html") || start.starts_with("<html") {
            "an HTML page instead of JSON".to_string()
        } else {
            "an answer that is not JSON".to_string()
        };
        return Err(PriceError::Malformed(what));
    };
    if !errors.is_empty() {
        return Err(PriceError::Provider(errors.join("; ")));
    }
    let Some(result) = json.get("result").and_then(Value::as_object) else {
        return Err(PriceError::Malformed("no result object".into()));
    };
    // One pair was asked: its entry is the only one (Kraken may answer under its own
    // spelling of the pair, e.g. `XETHZUSD` for `ETHUSD`).
    let entry = match result.len() {
        1 => result.values().next(),
        _ => result.get(pair),
    };
    let Some(entry) = entry else {
        return Err(PriceError::Missing(pair.to_string()));
    };
    let last = entry
        .get("c")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(Value::as_str)
        .ok_or_else(|| PriceError::Malformed("no last trade price (c[0])".into()))?;
    positive_price(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok_body(pair: &str, last: &str) -> Vec<u8> {
        format!(
            r#"{{"error":[],"result":{{"{pair}":{{"a":["3000.20000","1","1.000"],"b":["3000.10000","2","2.000"],"c":["{last}","0.05000000"],"v":["100.1","2000.2"],"p":["2990.1","2980.2"],"t":[100,2000],"l":["2900.00000","2850.00000"],"h":["3050.00000","3100.00000"],"o":"2950.00000"}}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn reads_the_last_trade_price() {
        let p = parse_ticker(200, &ok_body("XETHZUSD", "3000.10000"), "XETHZUSD").unwrap();
        assert_eq!(p, "3000.1".parse::<Decimal>().unwrap());
        // Kraken's own spelling of the one pair asked.
        let p = parse_ticker(200, &ok_body("XETHZUSD", "2999.5"), "ETHUSD").unwrap();
        assert_eq!(p.to_string(), "2999.5");
    }

    #[test]
    fn refuses_zero_negative_and_unparsable_prices() {
        for bad in ["0.00000", "0", "-1.5", "abc", "", "1e5", "NaN"] {
            let e = parse_ticker(200, &ok_body("XETHZUSD", bad), "XETHZUSD").unwrap_err();
            assert!(matches!(e, PriceError::Refused(..)), "{bad}: {e:?}");
        }
    }

    #[test]
    fn reads_kraken_error_shapes() {
        let e =
            parse_ticker(200, br#"{"error":["EQuery:Unknown asset pair"]}"#, "BNBUSD").unwrap_err();
        assert!(
            matches!(&e, PriceError::Provider(m) if m == "EQuery:Unknown asset pair"),
            "{e:?}"
        );
        let e = parse_ticker(200, br#"{"error":["EAPI:Rate limit exceeded"]}"#, "X").unwrap_err();
        assert!(matches!(e, PriceError::RateLimited(200)), "{e:?}");
        let e = parse_ticker(429, b"Too Many Requests", "X").unwrap_err();
        assert!(matches!(e, PriceError::RateLimited(429)), "{e:?}");
        let e = parse_ticker(503, br#"{"error":["EService:Unavailable"]}"#, "X").unwrap_err();
        assert!(matches!(e, PriceError::Provider(_)), "{e:?}");
        let e = parse_ticker(502, b"<html><body>Bad gateway</body></html>", "X").unwrap_err();
        assert!(matches!(e, PriceError::Status(502)), "{e:?}");
        let e = parse_ticker(
            200,
            b"<!DOCTYPE html><html><head><title>Just a moment...</title></head></html>",
            "X",
        )
        .unwrap_err();
        assert!(
            matches!(&e, PriceError::Malformed(m) if m.contains("HTML")),
            "{e:?}"
        );
        let e = parse_ticker(200, br#"{"error":[],"result":{}}"#, "XETHZUSD").unwrap_err();
        assert!(matches!(e, PriceError::Missing(_)), "{e:?}");
        let e = parse_ticker(
            200,
            br#"{"error":[],"result":{"XETHZUSD":{"c":[]}}}"#,
            "XETHZUSD",
        )
        .unwrap_err();
        assert!(matches!(e, PriceError::Malformed(_)), "{e:?}");
        let e = parse_ticker(200, br#"{"error":[]}"#, "X").unwrap_err();
        assert!(matches!(e, PriceError::Malformed(_)), "{e:?}");
    }

    #[test]
    fn pair_names_follow_kraken_with_overrides() {
        let mut o = BTreeMap::new();
        o.insert("sol".to_string(), "SOLUSDT".to_string());
        let k = Kraken::new("http://127.0.0.1:1/", Duration::from_secs(1), &o).unwrap();
        assert_eq!(k.pair("BTC"), "XXBTZUSD");
        assert_eq!(k.pair("ETH"), "XETHZUSD");
        assert_eq!(k.pair("DOGE"), "XDGUSD");
        assert_eq!(k.pair("AVAX"), "AVAXUSD");
        assert_eq!(k.pair("SOL"), "SOLUSDT");
        assert_eq!(k.base_url, "http://127.0.0.1:1");
    }
}
