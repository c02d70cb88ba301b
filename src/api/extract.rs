//! Extractors: the authenticated caller, JSON bodies, query parameters and path ids, each
//! rejecting in the SPEC.md section 7 envelope.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::{header, request::Parts, StatusCode};
use base64::Engine;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::error::ApiError;
use crate::api::idempotency::Fingerprint;
use crate::auth::{parse_token, Caller};
use crate::services::types::{Amount, AssetSymbol, ChainId, Id};
use crate::state::AppState;

/// The time a key's expiry is judged at: real time, or for a key that expires (a rolled
/// key) of a test project, that project's clock (DECISIONS.md section 15: the test clock
/// moves key expiry too). Keys that never expire cost no store read.
fn key_now(state: &AppState, k: &appliance_storage::records::ApiKey, now: i64) -> i64 {
    if k.expires_at.is_none() {
        return now;
    }
    match state.keys.project(k.project_id) {
        Some(p) if p.mode == appliance_storage::records::Mode::Test => state
            .store
            .read_now(|r| crate::services::clock::now_at(r, &p, now))
            .unwrap_or(now),
        _ => now,
    }
}

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
            .and_then(|t| {
                state
                    .keys
                    .key_by_hash(state.pepper.hash_hex(t, &mut [0; 64]))
            });
        let now = appliance_storage::now_us();
        let Some(key) = key.filter(|k| k.is_enabled(key_now(state, k, now))) else {
            if let Err(retry) = state.limits.check_unauthenticated(ip) {
                return Err(rate_limited(retry));
            }
            return Err(ApiError::invalid_key());
        };
        let Some(project) = state.keys.project(key.project_id) else {
            return Err(ApiError::invalid_key());
        };
        if let Err(retry) = state
            .limits
            .check_key(key.id, project.settings.requests_per_minute)
        {
            return Err(rate_limited(retry));
        }
        state.keys.record_use(key.id, now);
        if let Some(slot) = parts.extensions.get::<crate::ops::access::KeySlot>() {
            slot.set(&key);
        }
        Ok(Caller {
            key,
            project,
            ip,
            service_signing: state.config.signing.enabled,
        })
    }
}

/// A keyless request to a public endpoint (`/v1/market/*`, DECISIONS.md section 11): charged
/// to its client address's unauthenticated budget (DECISIONS.md section 8); 429 with
/// `Retry-After` when spent.
pub struct Public;

impl FromRequestParts<AppState> for Public {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let ip = client_ip(parts, &state.config.trusted_proxies);
        state
            .limits
            .check_unauthenticated(ip)
            .map_err(rate_limited)?;
        Ok(Public)
    }
}

/// The client's address (the peer, or behind a trusted proxy the forwarded one), charged
/// nothing: the public checkout endpoints charge a token's budget or, for a miss, this
/// address's unauthenticated budget themselves (DECISIONS.md section 12).
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(ClientIp(client_ip(parts, &state.config.trusted_proxies)))
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

/// 429 `rate_limited` with `Retry-After: retry` seconds.
pub fn rate_limited(retry: u64) -> ApiError {
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

/// A JSON object body with its idempotency fingerprint. An empty body reads as `{}`;
/// unknown fields are ignored by the field readers.
pub struct JsonBody {
    pub fields: Fields,
    pub fingerprint: Fingerprint,
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
                let inner = e.into_inner();
                let too_large = inner
                    .downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some();
                // The body's errors come wrapped (axum::Error, once per body layer).
                let late = std::iter::successors(
                    Some(&*inner as &(dyn std::error::Error + 'static)),
                    |e| e.source(),
                )
                .any(|e| e.is::<crate::transport::BodyTimeout>());
                if late {
                    ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "request_timeout",
                        format!(
                            "The request body was not received within {} s.",
                            state.config.limits.body_read_timeout_secs
                        ),
                    )
                } else if too_large {
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
                fingerprint: Fingerprint::of(&Map::new(), &raw),
                fields: Fields(Map::new()),
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
                fingerprint: Fingerprint::of(&m, &raw),
                fields: Fields(m),
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

/// A request body read from its [`Fields`] (each reader's rules, messages and `param`) into
/// the struct that also describes the body in the OpenAPI document (`ToSchema`).
pub trait ReadBody: Sized {
    fn read(f: &Fields) -> Result<Self, ApiError>;
}

/// Describes a page of a resource for the OpenAPI document (`object: list`, newest first):
/// the envelope [`ListPage`] writes, under the list's component name.
macro_rules! list_schema {
    ($($name:ident => $item:ty;)*) => {$(
        #[doc = concat!("A page of `", stringify!($item), "` (`object: list`), newest first.")]
        #[derive(utoipa::ToSchema)]
        pub struct $name {
            /// Always `list`.
            #[schema(pattern = "^list$")]
            pub object: String,
            pub data: Vec<$item>,
            /// More items follow; pass `next_cursor` as `cursor`.
            pub has_more: bool,
            /// The cursor of the next page; null at the end.
            pub next_cursor: Option<String>,
        }
    )*};
}
pub(crate) use list_schema;

/// `impl ReadBody` for a body whose fields are each read by one [`Fields`] reader under the
/// field's own name, in declaration order: `field: reader`, `field: reader(args)` (the
/// reader's arguments after the name), with `or default` for an optional field's default.
macro_rules! read_body {
    ($ty:ident { $($field:ident: $reader:ident $(($($arg:expr),*))? $(or $default:expr)?),* $(,)? }) => {
        impl $crate::api::extract::ReadBody for $ty {
            fn read(
                f: &$crate::api::extract::Fields,
            ) -> Result<Self, $crate::api::error::ApiError> {
                Ok($ty {
                    $($field: f.$reader(stringify!($field) $($(, $arg)*)?)? $(.unwrap_or($default))?,)*
                })
            }
        }
    };
}
pub(crate) use read_body;

impl JsonBody {
    /// The body as the request struct `T`.
    pub fn read<T: ReadBody>(&self) -> Result<T, ApiError> {
        T::read(&self.fields)
    }
}

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

    /// A string a patch may set, clear or leave: `None` when absent, `Some(None)` for null,
    /// else a string of at most `max` characters.
    pub fn opt_nullable(&self, name: &str, max: usize) -> Result<Option<Option<String>>, ApiError> {
        if !self.has(name) {
            return Ok(None);
        }
        Ok(Some(self.opt_bounded(name, max)?))
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
            // JSON has one number type: `20.0` is the integer 20 (as JSON Schema's `integer`
            // says), as long as it is exact (at most 2^53).
            Some(Value::Number(n)) => n
                .as_u64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(f))
                        .map(|f| f as u64)
                })
                .map(Some)
                .ok_or_else(|| {
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

    /// A whole number in `range`: required without a `default`; outside the range, 400 with
    /// `message`.
    pub fn u64_within(
        &self,
        name: &str,
        default: Option<u64>,
        range: std::ops::RangeInclusive<u64>,
        message: &str,
    ) -> Result<u64, ApiError> {
        let v = match default {
            Some(d) => self.opt_u64(name)?.unwrap_or(d),
            None => self.req_u64(name)?,
        };
        if !range.contains(&v) {
            return Err(ApiError::invalid(name, message));
        }
        Ok(v)
    }

    pub fn req_uuid(&self, name: &str) -> Result<Uuid, ApiError> {
        let s = self.req_str(name)?;
        Uuid::parse_str(&s).map_err(|_| ApiError::invalid(name, format!("{name} must be a UUID.")))
    }

    /// A required resource id, typed (`WalletId`, `CustomerId`, ...): a UUID string.
    pub fn req_id<R>(&self, name: &str) -> Result<Id<R>, ApiError> {
        self.req_uuid(name).map(Id::from)
    }

    pub fn opt_uuid(&self, name: &str) -> Result<Option<Uuid>, ApiError> {
        self.opt_str(name)?
            .map(|s| {
                Uuid::parse_str(&s)
                    .map_err(|_| ApiError::invalid(name, format!("{name} must be a UUID.")))
            })
            .transpose()
    }

    /// An atomic amount ([`Amount`]: canonical digits, positive, within `u128`).
    pub fn req_amount(&self, name: &'static str) -> Result<Amount, ApiError> {
        match self.present(name) {
            None => Err(missing(name)),
            Some(Value::String(s)) => Ok(Amount::parse(name, s)?),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("{name} must be a string of digits (atomic units)."),
            )),
        }
    }

    /// A required chain identifier.
    pub fn req_chain(&self, name: &str) -> Result<ChainId, ApiError> {
        self.req_str(name).map(ChainId::new)
    }

    /// An optional asset symbol.
    pub fn opt_asset(&self, name: &str) -> Result<Option<AssetSymbol>, ApiError> {
        Ok(self.opt_str(name)?.map(AssetSymbol::new))
    }

    /// A required asset symbol.
    pub fn req_asset(&self, name: &str) -> Result<AssetSymbol, ApiError> {
        self.req_str(name).map(AssetSymbol::new)
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

/// A resource status a list can be filtered by (`?status=`, and the `status` of a bulk
/// replay). Every such filter parses through [`parse_status`]: an unknown value is 400
/// `invalid_request` naming the field, never an empty list (docs/decisions.md, lists).
pub trait StatusFilter: Sized + Copy {
    /// Every value, as written on the wire, in the order the refusal lists them.
    const NAMES: &'static [&'static str];
    fn from_name(s: &str) -> Option<Self>;
}

/// Parses a status filter value of field `name`.
pub fn parse_status<S: StatusFilter>(name: &str, v: &str) -> Result<S, ApiError> {
    S::from_name(v).ok_or_else(|| {
        ApiError::invalid(
            name,
            format!("{name} must be one of {}, got {v:?}.", S::NAMES.join(", ")),
        )
    })
}

macro_rules! status_filter {
    ($($t:ty => [$($n:literal),*]);* $(;)?) => {$(
        impl StatusFilter for $t {
            const NAMES: &'static [&'static str] = &[$($n),*];
            fn from_name(s: &str) -> Option<Self> {
                <$t>::parse(s)
            }
        }
    )*};
}
status_filter! {
    appliance_storage::records::PayoutStatus => [
        "pending_approval", "queued", "signing", "submitted", "confirmed", "failed",
        "canceled", "rejected"
    ];
    appliance_storage::records::DepositStatus => ["detected", "confirmed", "failed", "orphaned"];
    appliance_storage::records::CustomerStatus => ["active", "disabled"];
    appliance_storage::records::SweepStatus => ["open", "submitted", "confirmed", "failed", "skipped"];
    appliance_storage::records::ConversionStatus => [
        "queued", "converting", "converted", "skipped", "failed"
    ];
    appliance_storage::records::InvoiceStatus => [
        "open", "pending", "paid", "underpaid", "overpaid", "expired", "canceled"
    ];
    appliance_storage::records::DeliveryStatus => [
        "pending", "succeeded", "failed", "exhausted", "skipped", "canceled"
    ];
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

    /// The `status` filter of a list, parsed one way for every list ([`parse_status`]).
    pub fn status<S: StatusFilter>(&self) -> Result<Option<S>, ApiError> {
        self.get("status")
            .map(|v| parse_status("status", v))
            .transpose()
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

    /// The page as the read module takes it: the cursor as the id of the last row seen.
    pub fn rows(&self) -> Result<crate::services::reads::PageReq, ApiError> {
        Ok(crate::services::reads::PageReq {
            before: self.cursor_uuid()?,
            limit: self.limit,
        })
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

/// A list answer, `{object:list, data, has_more, next_cursor}`, written from typed items:
/// the same bytes as [`list_json`] of the items' values (fields in byte order of their
/// names, as a `Value` object keeps them). `next_cursor` is null unless `has_more`.
#[derive(serde::Serialize)]
pub struct ListPage<'a, T> {
    data: &'a [T],
    has_more: bool,
    next_cursor: Option<String>,
    object: &'static str,
}

impl<'a, T: serde::Serialize> ListPage<'a, T> {
    pub fn new(data: &'a [T], has_more: bool, next_cursor: Option<String>) -> Self {
        ListPage {
            data,
            has_more,
            next_cursor: next_cursor.filter(|_| has_more),
            object: "list",
        }
    }
}

/// Cursor pagination of a list (SPEC.md section 8): newest first.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Page size, 1-100 (default 25).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The previous page's `next_cursor` (empty: the first page).
    #[param(pattern = "^([A-Za-z0-9_-]{21}[AQgw])?$")]
    pub cursor: Option<String>,
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
    use appliance_storage::records::{DeliveryStatus, DepositStatus, PayoutStatus, SweepStatus};

    fn round_trips<S: StatusFilter>(name: impl Fn(S) -> &'static str) {
        for n in S::NAMES {
            let s = parse_status::<S>("status", n).expect(n);
            assert_eq!(name(s), *n);
        }
        let e = parse_status::<S>("status", "lost")
            .err()
            .expect("lost is refused");
        assert_eq!(e.status.as_u16(), 400);
        assert_eq!(e.code, "invalid_request");
        assert_eq!(e.param.as_deref(), Some("status"));
    }

    #[test]
    fn every_status_filter_lists_exactly_the_values_it_parses() {
        round_trips::<PayoutStatus>(|s| s.as_str());
        round_trips::<DepositStatus>(|s| s.as_str());
        round_trips::<SweepStatus>(|s| s.as_str());
        round_trips::<DeliveryStatus>(|s| s.as_str());
        assert_eq!(DeliveryStatus::ALL.len(), DeliveryStatus::NAMES.len());
    }

    #[test]
    fn integers_are_json_integers_whatever_their_spelling() {
        let f = |v: Value| {
            let mut m = Map::new();
            m.insert("n".into(), v);
            Fields(m).opt_u64("n")
        };
        assert_eq!(f(serde_json::json!(20)).unwrap(), Some(20));
        assert_eq!(f(serde_json::json!(20.0)).unwrap(), Some(20));
        assert_eq!(f(serde_json::json!(0.0)).unwrap(), Some(0));
        for bad in [
            serde_json::json!(20.5),
            serde_json::json!(-1),
            serde_json::json!(-1.0),
            serde_json::json!(1e300),
            serde_json::json!("20"),
        ] {
            let e = f(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(e.status.as_u16(), 400);
            assert_eq!(e.param.as_deref(), Some("n"));
        }
    }

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
