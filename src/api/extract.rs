//! Extractors: the authenticated caller, JSON bodies, query parameters and path ids, each
//! rejecting in the SPEC.md section 7 envelope.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::{header, request::Parts, StatusCode};
use base64::Engine;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::error::ApiError;
use crate::auth::{invalid_key, parse_token, Caller};
use crate::state::AppState;

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let ip = client_ip(parts, &state.config.trusted_proxies);
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token);
        let key = presented
            .filter(|t| parse_token(t).is_some())
            .and_then(|t| state.keys.key_by_hash(&state.pepper.hash(t)));
        let now = appliance_storage::now_us();
        let Some(key) = key.filter(|k| k.is_enabled(now)) else {
            if let Err(retry) = state.limits.check_unauthenticated(ip) {
                return Err(rate_limited(retry));
            }
            return Err(invalid_key());
        };
        let Some(project) = state.keys.project(key.project_id) else {
            return Err(invalid_key());
        };
        if let Err(retry) = state
            .limits
            .check_key(key.id, project.settings.requests_per_minute)
        {
            return Err(rate_limited(retry));
        }
        state.keys.record_use(key.id, now);
        if let Some(slot) = parts.extensions.get::<crate::ops::access::KeySlot>() {
            slot.set(&key.key_id);
        }
        Ok(Caller {
            key,
            project,
            ip,
            service_signing: state.config.signing.enabled,
        })
    }
}

/// The token of an `Authorization: Bearer <token>` value; the scheme name is
/// case-insensitive (RFC 9110 section 11.1).
pub fn bearer_token(v: &str) -> Option<&str> {
    let (scheme, token) = v.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// True for `application/json`, any case, with optional parameters of which a `charset` may
/// only be UTF-8 (RFC 8259 section 8.1); `application/jsonfoo` and `text/json` are not.
pub fn is_json_media_type(ct: &str) -> bool {
    let mut parts = ct.split(';');
    let essence = parts.next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return false;
    }
    parts.all(|p| {
        let p = p.trim();
        if p.is_empty() {
            return true;
        }
        let Some((name, value)) = p.split_once('=') else {
            return false;
        };
        if !name.trim().eq_ignore_ascii_case("charset") {
            return true;
        }
        let v = value.trim().trim_matches('"');
        v.eq_ignore_ascii_case("utf-8") || v.eq_ignore_ascii_case("utf8")
    })
}

fn rate_limited(retry: u64) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "Too many requests; retry later.",
    )
    .retry_after(retry)
}

/// The address the client's server presents (SPEC.md section 4, API keys): the peer, or
/// behind a trusted reverse proxy the address it forwarded (`trusted_proxies`).
fn client_ip(parts: &Parts, trusted: &[ipnet::IpNet]) -> IpAddr {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    crate::ops::proxy::client_ip(peer, &parts.headers, trusted)
}

/// A JSON object body with its raw bytes (for idempotency fingerprints). An empty body reads
/// as `{}`; unknown fields are ignored by the field readers.
pub struct JsonBody {
    pub fields: Fields,
    pub raw: axum::body::Bytes,
}

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or("");
            if !is_json_media_type(ct) {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "Request bodies must be JSON with Content-Type: application/json (charset, when given, utf-8).",
                ));
            }
        }
        let limit = state.config.limits.max_body_bytes;
        let raw = axum::body::to_bytes(req.into_body(), limit)
            .await
            .map_err(|e| {
                let too_large = e
                    .into_inner()
                    .downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some();
                if too_large {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "request_too_large",
                        format!("Request bodies are limited to {limit} bytes."),
                    )
                } else {
                    // Malformed framing (a bad chunk) or a body cut short: not a size issue.
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "invalid_request",
                        "The request body could not be read (malformed or incomplete).",
                    )
                }
            })?;
        if raw.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(JsonBody {
                fields: Fields(Map::new()),
                raw,
            });
        }
        let value: Value = serde_json::from_slice(&raw).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!("Malformed JSON: {e}."),
            )
        })?;
        match value {
            Value::Object(m) => Ok(JsonBody {
                fields: Fields(m),
                raw,
            }),
            _ => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                "The body must be a JSON object.",
            )),
        }
    }
}

/// Typed readers over a JSON object; every failure names its field in `param`.
pub struct Fields(pub Map<String, Value>);

impl Fields {
    fn present(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<String>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::invalid(name, format!("{name} must be a string."))),
        }
    }

    pub fn req_str(&self, name: &str) -> Result<String, ApiError> {
        self.opt_str(name)?.ok_or_else(|| missing(name))
    }

    /// A string of at most `max` characters.
    pub fn opt_bounded(&self, name: &str, max: usize) -> Result<Option<String>, ApiError> {
        let v = self.opt_str(name)?;
        if v.as_ref().is_some_and(|s| s.chars().count() > max) {
            return Err(ApiError::invalid(
                name,
                format!("{name} must be at most {max} characters."),
            ));
        }
        Ok(v)
    }

    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("{name} must be a boolean."),
            )),
        }
    }

    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
                ApiError::invalid(name, format!("{name} must be a non-negative integer."))
            }),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("{name} must be an integer."),
            )),
        }
    }

    pub fn req_u64(&self, name: &str) -> Result<u64, ApiError> {
        self.opt_u64(name)?.ok_or_else(|| missing(name))
    }

    pub fn req_uuid(&self, name: &str) -> Result<Uuid, ApiError> {
        let s = self.req_str(name)?;
        Uuid::parse_str(&s).map_err(|_| ApiError::invalid(name, format!("{name} must be a UUID.")))
    }

    pub fn opt_uuid(&self, name: &str) -> Result<Option<Uuid>, ApiError> {
        self.opt_str(name)?
            .map(|s| {
                Uuid::parse_str(&s)
                    .map_err(|_| ApiError::invalid(name, format!("{name} must be a UUID.")))
            })
            .transpose()
    }

    /// An atomic amount: a string of decimal digits, no sign, no fraction, within `u128`.
    pub fn req_atomic(&self, name: &str) -> Result<u128, ApiError> {
        match self.present(name) {
            None => Err(missing(name)),
            Some(Value::String(s)) => parse_atomic(name, s),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("{name} must be a string of digits (atomic units)."),
            )),
        }
    }

    pub fn opt_object(&self, name: &str) -> Result<Option<Map<String, Value>>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m.clone())),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("{name} must be an object."),
            )),
        }
    }

    pub fn opt_str_list(&self, name: &str) -> Result<Option<Vec<String>>, ApiError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(ApiError::invalid(
                        name,
                        format!("{name} must be an array of strings."),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("{name} must be an array of strings."),
            )),
        }
    }
}

fn missing(name: &str) -> ApiError {
    ApiError::invalid(name, format!("{name} is required."))
}

/// Parses an atomic amount string (SPEC.md section 1 convention 3).
pub fn parse_atomic(name: &str, s: &str) -> Result<u128, ApiError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::invalid(
            name,
            format!("{name} must be a non-negative integer string in atomic units, got {s:?}."),
        ));
    }
    let v: u128 = s.parse().map_err(|_| {
        ApiError::invalid(
            name,
            format!("{name} exceeds the largest supported amount."),
        )
    })?;
    if v == 0 {
        return Err(ApiError::invalid(
            name,
            format!("{name} must be greater than zero."),
        ));
    }
    Ok(v)
}

/// Query parameters in order, repeatable names kept.
pub struct Params(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let q = parts.uri.query().unwrap_or("");
        Ok(Params(
            form_urlencoded::parse(q.as_bytes()).into_owned().collect(),
        ))
    }
}

/// A page request: `limit` 1-100 (default 25) and an opaque cursor (SPEC.md section 8).
pub struct PageReq {
    pub limit: usize,
    pub cursor: Option<Vec<u8>>,
}

impl Params {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub fn uuid(&self, name: &str) -> Result<Option<Uuid>, ApiError> {
        self.get(name)
            .map(|s| {
                Uuid::parse_str(s)
                    .map_err(|_| ApiError::invalid(name, format!("{name} must be a UUID.")))
            })
            .transpose()
    }

    /// A value that must be one of `allowed`.
    pub fn one_of(&self, name: &str, allowed: &[&str]) -> Result<Option<String>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) if allowed.contains(&v) => Ok(Some(v.to_string())),
            Some(v) => Err(ApiError::invalid(
                name,
                format!("{name} must be one of {}, got {v:?}.", allowed.join(", ")),
            )),
        }
    }

    pub fn page(&self) -> Result<PageReq, ApiError> {
        let limit = match self.get("limit") {
            None => 25,
            Some(s) => match s.parse::<usize>() {
                Ok(n) if (1..=100).contains(&n) => n,
                _ => {
                    return Err(ApiError::invalid(
                        "limit",
                        "limit must be an integer from 1 to 100.",
                    ))
                }
            },
        };
        let cursor = match self.get("cursor") {
            None | Some("") => None,
            Some(c) => Some(
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(c)
                    .map_err(|_| {
                        ApiError::invalid("cursor", "cursor is not a cursor this API returned.")
                    })?,
            ),
        };
        Ok(PageReq { limit, cursor })
    }
}

impl PageReq {
    /// The cursor as a row id.
    pub fn cursor_uuid(&self) -> Result<Option<Uuid>, ApiError> {
        self.cursor
            .as_ref()
            .map(|b| {
                Uuid::from_slice(b).map_err(|_| {
                    ApiError::invalid("cursor", "cursor is not a cursor this API returned.")
                })
            })
            .transpose()
    }

    /// The cursor as an event sequence.
    pub fn cursor_seq(&self) -> Result<Option<u64>, ApiError> {
        self.cursor
            .as_ref()
            .map(|b| {
                <[u8; 8]>::try_from(b.as_slice())
                    .map(u64::from_be_bytes)
                    .map_err(|_| {
                        ApiError::invalid("cursor", "cursor is not a cursor this API returned.")
                    })
            })
            .transpose()
    }
}

/// Encodes a cursor.
pub fn cursor_of(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A list answer: `{object:list, data, has_more, next_cursor}`.
pub fn list_json(data: Vec<Value>, has_more: bool, next_cursor: Option<String>) -> Value {
    serde_json::json!({
        "object": "list",
        "data": data,
        "has_more": has_more,
        "next_cursor": if has_more { next_cursor.map(Value::String).unwrap_or(Value::Null) } else { Value::Null },
    })
}

/// A `{id}` path segment that must be a UUID.
pub fn path_uuid(s: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(s)
        .map_err(|_| ApiError::invalid("id", format!("{s:?} is not a valid id (UUID).")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }

    #[test]
    fn only_json_media_types_pass() {
        for ok in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            "application/json;charset=\"UTF-8\"",
            "application/json; foo=bar",
        ] {
            assert!(is_json_media_type(ok), "{ok}");
        }
        for bad in [
            "application/jsonfoo",
            "application/json-patch+json",
            "text/json",
            "application/json; charset=latin1",
            "application/json; charset",
            "",
        ] {
            assert!(!is_json_media_type(bad), "{bad}");
        }
    }
}
