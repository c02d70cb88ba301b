//! API keys (SPEC.md section 4, API keys; section 5; DECISIONS.md sections 2 and 4).

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{ApiKey, KeyKind, Project};
use appliance_storage::{ReadOps, WriteCtx};

use crate::auth::{self, Pepper};
use crate::services::error::{fault_from, Fault, Invalid};

/// Why a key request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A malformed field (`scopes`, `ip_allowlist`): 400 `invalid_request`.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// A scope the granting key does not hold: 403 `missing_scope` on `scopes`.
    #[error("A key can only grant scopes it holds; this key lacks {scope}.")]
    MissingScope { scope: String },
    /// Too many enabled keys of the kind: 409 `key_limit_reached` on `kind`.
    #[error(
        "At most {LIMIT_PER_KIND} enabled {} keys per project; revoke one first.",
        .kind.as_str()
    )]
    LimitReached { kind: KeyKind },
    /// No such key in the project: 404 `not_found`.
    #[error("No such API key.")]
    NotFound,
    /// Roll of a revoked or expired key: 409 `invalid_state`.
    #[error("A revoked or expired key cannot be rolled.")]
    NotRollable,
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(KeyError);

/// Most enabled keys per kind (SPEC.md section 8).
pub const LIMIT_PER_KIND: usize = 5;
/// Most `ip_allowlist` entries.
pub const MAX_ALLOWLIST: usize = 32;

/// A parsed create request. `granter` is the scopes of the key that asks (`None`: the
/// operator, who may grant anything).
pub struct NewKey {
    pub kind: KeyKind,
    pub name: String,
    pub scopes: Option<Vec<String>>,
    pub ip_allowlist: Vec<String>,
    pub signing_enabled: bool,
    pub created_by: String,
}

/// Validates scopes against the grammar and the granter's own scopes.
pub fn check_scopes(scopes: &[String], granter: Option<&[String]>) -> Result<(), KeyError> {
    for s in scopes {
        if !auth::is_valid_scope(s) {
            return Err(Invalid::new("scopes", format!("Unknown scope {s:?}.")).into());
        }
        if let Some(g) = granter {
            let covered = g.iter().any(|have| {
                auth::scope_covers(have, s) && (!s.ends_with('*') || have == "*" || have == s)
            });
            if !covered {
                return Err(KeyError::MissingScope { scope: s.clone() });
            }
        }
    }
    Ok(())
}

/// Validates and normalizes an allowlist (exact IPs or CIDRs, at most 32).
pub fn check_allowlist(list: &[String]) -> Result<Vec<String>, Invalid> {
    if list.len() > MAX_ALLOWLIST {
        return Err(Invalid::new(
            "ip_allowlist",
            format!("ip_allowlist holds at most {MAX_ALLOWLIST} entries."),
        ));
    }
    list.iter()
        .map(|e| {
            auth::parse_allow_entry(e)
                .map(|n| {
                    if n.prefix_len() == n.max_prefix_len() {
                        n.addr().to_string()
                    } else {
                        n.to_string()
                    }
                })
                .ok_or_else(|| {
                    Invalid::new(
                        "ip_allowlist",
                        format!("{e:?} is not an IP address or CIDR block."),
                    )
                })
        })
        .collect()
}

fn enabled_of_kind(
    ctx: &WriteCtx<'_>,
    project: Uuid,
    kind: KeyKind,
    now: i64,
) -> Result<usize, Fault> {
    let page = ctx.list::<ApiKey>(
        &index::prefix(IndexTag::ApiKeys, project, &[]),
        None,
        10_000,
        |k| k.kind == kind && k.is_enabled(now),
    )?;
    Ok(page.items.len())
}

fn limit_reached(kind: KeyKind) -> KeyError {
    KeyError::LimitReached { kind }
}

/// Mints a key; returns the stored row and the token (shown once).
pub fn create(
    ctx: &mut WriteCtx<'_>,
    pepper: &Pepper,
    project: &Project,
    req: NewKey,
) -> Result<(ApiKey, String), KeyError> {
    let now = ctx.now_us();
    if enabled_of_kind(ctx, project.id, req.kind, now)? >= LIMIT_PER_KIND {
        return Err(limit_reached(req.kind));
    }
    let t = auth::mint_token(project.mode);
    let key = ApiKey {
        id: Uuid::now_v7(),
        project_id: project.id,
        kind: req.kind,
        name: req.name,
        token_hash: pepper.hash(&t.token),
        key_id: t.key_id,
        last4: t.last4,
        scopes: req.scopes.unwrap_or_else(|| auth::default_scopes(req.kind)),
        ip_allowlist: req.ip_allowlist,
        signing_enabled: req.signing_enabled,
        created_by: req.created_by,
        rotated_from: None,
        expires_at: None,
        revoked_at: None,
        last_used_at: None,
        use_count: 0,
        created_at: now,
    };
    ctx.unique_put(
        &index::unique(
            IndexTag::UniqueTokenHash,
            Uuid::nil(),
            &[key.token_hash.as_bytes()],
        ),
        key.id,
    )?;
    ctx.put(&key)?;
    Ok((key, t.token))
}

/// A patch of the mutable fields.
#[derive(Default)]
pub struct KeyPatch {
    pub name: Option<String>,
    pub scopes: Option<Vec<String>>,
    pub ip_allowlist: Option<Vec<String>>,
    pub signing_enabled: Option<bool>,
}

pub fn load(ctx: &WriteCtx<'_>, project: Uuid, id: Uuid) -> Result<ApiKey, KeyError> {
    ctx.get_in::<ApiKey>(project, id)?.ok_or(KeyError::NotFound)
}

pub fn patch(
    ctx: &mut WriteCtx<'_>,
    project: Uuid,
    id: Uuid,
    p: KeyPatch,
) -> Result<ApiKey, KeyError> {
    let mut k = load(ctx, project, id)?;
    if let Some(n) = p.name {
        k.name = n;
    }
    if let Some(s) = p.scopes {
        k.scopes = s;
    }
    if let Some(a) = p.ip_allowlist {
        k.ip_allowlist = a;
    }
    if let Some(s) = p.signing_enabled {
        k.signing_enabled = s;
    }
    ctx.put(&k)?;
    Ok(k)
}

/// Revokes at once; revoking a revoked key answers it unchanged (idempotent).
pub fn revoke(ctx: &mut WriteCtx<'_>, project: Uuid, id: Uuid) -> Result<ApiKey, KeyError> {
    let mut k = load(ctx, project, id)?;
    if k.revoked_at.is_none() {
        k.revoked_at = Some(ctx.now_us());
        ctx.put(&k)?;
    }
    Ok(k)
}

/// Rolls a key: a new key with the same settings, the old one expiring after
/// `grace_hours` (both work until then). Returns (new, token, old).
pub fn roll(
    ctx: &mut WriteCtx<'_>,
    pepper: &Pepper,
    project: &Project,
    id: Uuid,
    grace_hours: u64,
) -> Result<(ApiKey, String, ApiKey), KeyError> {
    let now = ctx.now_us();
    let mut old = load(ctx, project.id, id)?;
    if !old.is_enabled(now) {
        return Err(KeyError::NotRollable);
    }
    // The old key keeps working during the grace period, so it still counts; a roll may
    // exceed the limit by its own successor.
    if enabled_of_kind(ctx, project.id, old.kind, now)? > LIMIT_PER_KIND {
        return Err(limit_reached(old.kind));
    }
    let t = auth::mint_token(project.mode);
    let new = ApiKey {
        id: Uuid::now_v7(),
        token_hash: pepper.hash(&t.token),
        key_id: t.key_id,
        last4: t.last4,
        rotated_from: Some(old.id),
        expires_at: None,
        revoked_at: None,
        last_used_at: None,
        use_count: 0,
        created_at: now,
        ..old.clone()
    };
    let expiry = now + grace_hours as i64 * 3_600_000_000;
    old.expires_at = Some(old.expires_at.map_or(expiry, |e| e.min(expiry)));
    ctx.put(&old)?;
    ctx.unique_put(
        &index::unique(
            IndexTag::UniqueTokenHash,
            Uuid::nil(),
            &[new.token_hash.as_bytes()],
        ),
        new.id,
    )?;
    ctx.put(&new)?;
    Ok((new, t.token, old))
}
