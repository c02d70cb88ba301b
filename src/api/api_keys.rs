//! API keys (SPEC.md section 4, API keys; section 5).

use axum::http::StatusCode;
use axum::response::Response;

use appliance_storage::records::{ApiKey, KeyKind};

use crate::api::authed::{access_rules, Authed, PathId, Post};
use crate::api::error::ApiError;
use crate::api::extract::{cursor_of, read_body, Fields, JsonBody, Params, ReadBody};
use crate::api::json;
use crate::auth::{default_scopes, Access, Caller, ANY_KIND};
use crate::services::keys::{self, Actor, KeyPatch, KeyPowers, NewKey, LIMIT_PER_KIND};
use crate::services::reads;
use crate::services::types::ApiKeyId;
use crate::state::AppState;
use crate::views::{self, ApiKeyList, ApiKeyView, ApiKeyWithToken, OptTs, Sorted};
use serde_json::json;
use utoipa::openapi::{RefOr, Schema};
use utoipa::PartialSchema;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

access_rules! {
    READ = Access::new(ANY_KIND, "api_keys:read");
    WRITE = Access::new(ANY_KIND, "api_keys:write");
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_keys, create_key))
        .routes(routes!(get_key, patch_key, revoke_key))
        .routes(routes!(roll_key))
}

fn view<'a>(state: &AppState, caller: &'a Caller, k: &'a ApiKey) -> ApiKeyView<'a> {
    views::api_key_view(
        k,
        caller.project.mode.as_str(),
        state.keys.pending_usage(k.id),
    )
}

// `scopes` is read as the kind's default when omitted; both lists are checked as they are
// read, before the key's own powers are.
/// `POST /v1/api_keys`.
#[derive(ToSchema)]
pub struct NewApiKey {
    #[schema(max_length = 100)]
    pub name: String,
    #[schema(value_type = KeyKindIn)]
    pub kind: KeyKind,
    /// Default: the kind's read and write scopes (never `payouts:create`).
    #[schema(value_type = Option<Vec<ScopeIn>>)]
    pub scopes: Vec<String>,
    /// Exact IPs or CIDR blocks, IPv4 or IPv6, at most 32; empty means any source.
    #[schema(value_type = Option<Vec<AllowEntryIn>>, max_items = 32)]
    pub ip_allowlist: Vec<String>,
    #[schema(value_type = Option<bool>)]
    pub signing_enabled: bool,
}

impl ReadBody for NewApiKey {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        let name = f
            .opt_bounded("name", 100)?
            .ok_or_else(|| ApiError::invalid("name", "name is required."))?;
        let kind_s = f.req_str("kind")?;
        let kind = KeyKind::parse(&kind_s)
            .ok_or_else(|| ApiError::invalid("kind", "kind must be checkout, payout or wallet."))?;
        let scopes = f
            .opt_str_list("scopes")?
            .unwrap_or_else(|| default_scopes(kind));
        keys::check_scopes(&scopes)?;
        let ip_allowlist =
            keys::check_allowlist(&f.opt_str_list("ip_allowlist")?.unwrap_or_default())?;
        Ok(NewApiKey {
            name,
            kind,
            scopes,
            ip_allowlist,
            signing_enabled: f.opt_bool("signing_enabled")?.unwrap_or(false),
        })
    }
}

/// `PATCH /v1/api_keys/{id}`.
#[derive(ToSchema)]
pub struct ApiKeyPatch {
    #[schema(max_length = 100)]
    pub name: Option<String>,
    #[schema(value_type = Option<Vec<ScopeIn>>)]
    pub scopes: Option<Vec<String>>,
    /// Empty clears the restriction.
    #[schema(value_type = Option<Vec<AllowEntryIn>>, max_items = 32)]
    pub ip_allowlist: Option<Vec<String>>,
    pub signing_enabled: Option<bool>,
}

impl ReadBody for ApiKeyPatch {
    fn read(f: &Fields) -> Result<Self, ApiError> {
        let scopes = f.opt_str_list("scopes")?;
        if let Some(s) = &scopes {
            keys::check_scopes(s)?;
        }
        Ok(ApiKeyPatch {
            name: f.opt_bounded("name", 100)?,
            scopes,
            ip_allowlist: f
                .opt_str_list("ip_allowlist")?
                .map(|l| keys::check_allowlist(&l))
                .transpose()?,
            signing_enabled: f.opt_bool("signing_enabled")?,
        })
    }
}

/// List the project's API keys, with `limit_per_kind` and `default_scopes`.
///
/// Any key kind; scope `api_keys:read`.
#[utoipa::path(get, path = "/v1/api_keys", tag = "api_keys",
    params(crate::api::extract::PageParams,
        ("include_revoked" = Option<IncludeRevoked>, Query, description = "`1` adds revoked keys (default `0`)."),
    ),
    responses((status = 200, description = "A page of keys.", body = ApiKeyList)))]
async fn list_keys(a: Authed<READ>, q: Params) -> Result<Response, ApiError> {
    let page = q.page()?;
    let include_revoked = q
        .one_of("include_revoked", &["0", "1", "true", "false"])?
        .is_some_and(|v| v == "1" || v == "true");
    let rows = reads::api_keys(
        &a.state.store,
        a.caller.project_id(),
        include_revoked,
        page.rows()?,
    )
    .await?;
    let next = rows.items.last().map(|k| cursor_of(k.id.as_bytes()));
    Ok(json(
        StatusCode::OK,
        &Sorted(ApiKeyList {
            object: "list",
            data: rows
                .items
                .iter()
                .map(|k| view(&a.state, &a.caller, k))
                .collect(),
            has_more: rows.has_more,
            next_cursor: next.filter(|_| rows.has_more),
            limit_per_kind: LIMIT_PER_KIND,
            default_scopes: KeyKind::ALL
                .iter()
                .map(|k| (k.as_str(), default_scopes(*k)))
                .collect(),
        }),
    ))
}

/// Mint a key of the project's mode; the token is in this answer only. A key can mint only
/// keys of its own kind (403 `wrong_key_kind`; other kinds come from the operator) that it
/// could hold itself (403 `scope_not_grantable`, `signing_disabled`, `ip_not_allowed`);
/// `payouts:approve` is granted only by the operator; at most 5 enabled keys per kind (409
/// `key_limit_reached`).
///
/// Any key kind; scope `api_keys:write`.
#[utoipa::path(post, path = "/v1/api_keys", tag = "api_keys",
    params(crate::api::IdempotencyHeader),
    request_body(content = NewApiKey),
    responses((status = 201, description = "The key with its token.", body = ApiKeyWithToken)))]
async fn create_key(a: Authed<WRITE>, Post { key, body }: Post) -> Result<Response, ApiError> {
    let NewApiKey {
        name,
        kind,
        scopes: effective,
        ip_allowlist,
        signing_enabled,
    } = body.read()?;
    // Checked before an idempotent replay too, so a key that could not mint this key cannot
    // read another key's first answer either (the transaction checks again).
    keys::authorize(
        &a.caller.key,
        KeyPowers {
            kind,
            scopes: &effective,
            signing_enabled,
            ip_allowlist: &ip_allowlist,
        },
    )?;
    let pepper = a.state.pepper.clone();
    let project = a.caller.project.clone();
    let env = project.mode.as_str();
    let granter = a.caller.key.clone();
    let (resp, key) = a
        .mutate(&key, "/v1/api_keys", &body, move |ctx| {
            let (k, token) = keys::create(
                ctx,
                &pepper,
                &project,
                Actor::Key(&granter),
                NewKey {
                    kind,
                    name,
                    scopes: Some(effective),
                    ip_allowlist,
                    signing_enabled,
                    created_by: "merchant".into(),
                },
            )?;
            let v = views::to_value(&ApiKeyWithToken {
                key: views::api_key_view(&k, env, None),
                token: &token,
                old_key_expires_at: None,
            });
            Ok((StatusCode::CREATED, v, k))
        })
        .await?;
    if let Some(k) = key {
        a.state.keys.put_key(k);
    }
    Ok(resp)
}

/// Read an API key.
///
/// Any key kind; scope `api_keys:read`.
#[utoipa::path(get, path = "/v1/api_keys/{id}", tag = "api_keys", params(PathId),
    responses((status = 200, description = "The key.", body = crate::views::ApiKeyView)))]
async fn get_key(a: Authed<READ>, id: ApiKeyId) -> Result<Response, ApiError> {
    a.get_by_id::<ApiKey, _, _>(id, ApiError::not_found("API key"), |k| {
        views::to_value(&view(&a.state, &a.caller, k))
    })
    .await
}

/// Update a key: `name`, `scopes`, `ip_allowlist` (empty clears), `signing_enabled`;
/// effective immediately.
///
/// Any key kind; scope `api_keys:write`.
#[utoipa::path(patch, path = "/v1/api_keys/{id}", tag = "api_keys", params(PathId),
    request_body = ApiKeyPatch,
    responses((status = 200, description = "The key.", body = crate::views::ApiKeyView)))]
async fn patch_key(a: Authed<WRITE>, id: ApiKeyId, body: JsonBody) -> Result<Response, ApiError> {
    let ApiKeyPatch {
        name,
        scopes,
        ip_allowlist,
        signing_enabled,
    } = body.read()?;
    let patch = KeyPatch {
        name,
        scopes,
        ip_allowlist,
        signing_enabled,
    };
    let p = a.caller.project_id();
    let env = a.caller.project.mode.as_str();
    let granter = a.caller.key.clone();
    let (resp, key) = a
        .commit(move |ctx| {
            let k = keys::patch(ctx, p, Actor::Key(&granter), id, patch)?;
            Ok((StatusCode::OK, views::api_key(&k, env, None), k))
        })
        .await?;
    if let Some(k) = key {
        a.state.keys.put_key(k);
    }
    Ok(resp)
}

/// Revoke a key now; idempotent.
///
/// Any key kind; scope `api_keys:write`.
#[utoipa::path(delete, path = "/v1/api_keys/{id}", tag = "api_keys", params(PathId),
    responses((status = 200, description = "The key with `revoked_at`.", body = crate::views::ApiKeyView)))]
async fn revoke_key(a: Authed<WRITE>, id: ApiKeyId) -> Result<Response, ApiError> {
    let p = a.caller.project_id();
    let env = a.caller.project.mode.as_str();
    let granter = a.caller.key.clone();
    let (resp, key) = a
        .commit(move |ctx| {
            let k = keys::revoke(ctx, p, Actor::Key(&granter), id)?;
            Ok((StatusCode::OK, views::api_key(&k, env, None), k))
        })
        .await?;
    if let Some(k) = key {
        a.state.keys.put_key(k);
    }
    Ok(resp)
}

/// `POST /v1/api_keys/{id}/roll`.
#[derive(ToSchema)]
pub struct RollApiKey {
    /// Hours the old key keeps working (default 24).
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 168)]
    pub grace_hours: u64,
}

read_body!(RollApiKey {
    grace_hours: u64_within(Some(24), 0..=168, "grace_hours must be from 0 to 168."),
});

/// Roll a key: a new key; the old one expires after `grace_hours`. A replay of the same
/// `Idempotency-Key` answers the new key with `token` null.
///
/// Any key kind; scope `api_keys:write`.
#[utoipa::path(post, path = "/v1/api_keys/{id}/roll", tag = "api_keys",
    params(PathId, crate::api::IdempotencyHeader),
    request_body = RollApiKey,
    responses((status = 201, description = "The new key with its token and `old_key_expires_at`.", body = ApiKeyWithToken)))]
async fn roll_key(
    a: Authed<WRITE>,
    id: ApiKeyId,
    Post { key, body }: Post,
) -> Result<Response, ApiError> {
    let RollApiKey { grace_hours: grace } = body.read()?;
    // Checked before an idempotent replay too (the transaction checks again).
    let target = a.row::<ApiKey>(id, ApiError::not_found("API key"))?;
    keys::authorize(&a.caller.key, KeyPowers::from(&target))?;
    let pepper = a.state.pepper.clone();
    let project = a.caller.project.clone();
    let env = project.mode.as_str();
    let granter = a.caller.key.clone();
    let path = format!("/v1/api_keys/{id}/roll");
    let (resp, keys_out) = a
        .mutate(&key, &path, &body, move |ctx| {
            let (new, token, old) =
                keys::roll(ctx, &pepper, &project, Actor::Key(&granter), id, grace)?;
            let v = views::to_value(&ApiKeyWithToken {
                key: views::api_key_view(&new, env, None),
                token: &token,
                old_key_expires_at: Some(OptTs(old.expires_at)),
            });
            Ok((StatusCode::CREATED, v, (new, old)))
        })
        .await?;
    if let Some((new, old)) = keys_out {
        a.state.keys.put_key(new);
        a.state.keys.put_key(old);
    }
    Ok(resp)
}

/// `include_revoked` of `GET /v1/api_keys`.
#[derive(ToSchema)]
pub enum IncludeRevoked {
    #[schema(rename = "0")]
    No,
    #[schema(rename = "1")]
    Yes,
    #[schema(rename = "false")]
    False,
    #[schema(rename = "true")]
    True,
}

/// A key kind a request may name.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum KeyKindIn {
    Checkout,
    Payout,
    Wallet,
}

/// A scope a key may hold: a known scope, `*`, or `<group>:*`.
pub struct ScopeIn;

impl PartialSchema for ScopeIn {
    fn schema() -> RefOr<Schema> {
        let mut all: Vec<String> = vec!["*".into()];
        let mut groups: Vec<&str> = Vec::new();
        for s in crate::auth::ALL_SCOPES {
            all.push((*s).to_string());
            let g = s.split(':').next().unwrap_or(s);
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        all.extend(groups.iter().map(|g| format!("{g}:*")));
        crate::services::types::schema_from_json(
            json!({"type": "string", "enum": all, "description": "A scope (SPEC.md section 5 rule 6, DECISIONS.md section 4)."}),
        )
    }
}
impl ToSchema for ScopeIn {}

/// An `ip_allowlist` entry: an exact IP or a CIDR block ([`crate::auth::ALLOW_ENTRY_PATTERN`]).
pub struct AllowEntryIn;

impl PartialSchema for AllowEntryIn {
    fn schema() -> RefOr<Schema> {
        crate::services::types::schema_from_json(json!({
            "type": "string",
            "description": "An IPv4 or IPv6 address, or a CIDR block (`203.0.113.0/24`, `2001:db8::/32`).",
            "minLength": 1,
            "pattern": crate::auth::ALLOW_ENTRY_PATTERN,
        }))
    }
}
impl ToSchema for AllowEntryIn {}
