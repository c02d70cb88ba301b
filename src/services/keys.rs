//! API keys (SPEC.md section 4, API keys; section 5; DECISIONS.md sections 2 and 4).

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{ApiKey, KeyKind, Project};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::auth::{self, Pepper};
use crate::services::error::{fault_from, Fault, Invalid};
use crate::services::set_patched;
use crate::services::types::{ApiKeyId, ProjectId};

/// Why a key request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A malformed field (`scopes`, `ip_allowlist`): 400 `invalid_request`.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// DECISIONS.md section 16, kind: a key manages only keys of its
    /// own kind, whatever its scopes (`*` included); keys of another kind come from the
    /// operator: 403 `wrong_key_kind` on `kind`.
    #[error(
        "A {} key can only manage {} keys; keys of another kind come from the operator (appliance key create).",
        .granter.as_str(),
        .granter.as_str()
    )]
    WrongKind { granter: KeyKind },
    /// A scope the managing key does not hold: 403 `scope_not_grantable` on `scopes`.
    #[error("A key can only manage keys within its own scopes; this key lacks {scope}.")]
    MissingScope { scope: String },
    /// `payouts:approve` (or a wildcard covering it) given through the API: only the
    /// operator grants it (DECISIONS.md section 16, amended), so that two-person approval
    /// needs two keys the operator chose: 403 `scope_not_grantable` on `scopes`.
    #[error("payouts:approve (and any wildcard covering it: {scope}) is granted only by the operator (appliance key create).")]
    ApproveNotGrantable { scope: String },
    /// A key with signing managed by a key without: 403 `signing_disabled` on
    /// `signing_enabled`.
    #[error("Only a key with signing enabled can manage a key with signing enabled.")]
    SigningNotHeld,
    /// A key pinned to an allowlist managing a key not pinned within it: 403
    /// `ip_not_allowed` on `ip_allowlist`.
    #[error("A key pinned to an ip_allowlist can only manage keys pinned within that allowlist.")]
    AllowlistWider,
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
    /// Patch of a revoked key: 409 `invalid_state`. Revoking is final, so a revoked key is
    /// read, never changed.
    #[error("A revoked key cannot be changed.")]
    Revoked,
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

/// Validates scopes against the grammar (400 `invalid_request`, param `scopes`). Whether the
/// caller may grant them is [`authorize`]'s question.
pub fn check_scopes(scopes: &[String]) -> Result<(), KeyError> {
    for s in scopes {
        if !auth::is_valid_scope(s) {
            return Err(Invalid::new("scopes", format!("Unknown scope {s:?}.")).into());
        }
    }
    Ok(())
}

/// Who asks for a key to be minted, patched, rolled or revoked: the operator (command line,
/// socket), who may do anything, or an API key, bound by [`authorize`].
#[derive(Clone, Copy)]
pub enum Actor<'a> {
    Operator,
    Key(&'a ApiKey),
}

/// What a key can do, as far as DECISIONS.md section 16 is concerned.
#[derive(Debug, Clone, Copy)]
pub struct KeyPowers<'a> {
    pub kind: KeyKind,
    pub scopes: &'a [String],
    pub signing_enabled: bool,
    /// Empty: any source.
    pub ip_allowlist: &'a [String],
}

impl<'a> From<&'a ApiKey> for KeyPowers<'a> {
    fn from(k: &'a ApiKey) -> Self {
        KeyPowers {
            kind: k.kind,
            scopes: &k.scopes,
            signing_enabled: k.signing_enabled,
            ip_allowlist: &k.ip_allowlist,
        }
    }
}

/// Whether the granted scope `have` covers the scope `want` on a key being managed: a
/// wildcard is only covered by `*` or by the same wildcard.
fn grants(have: &str, want: &str) -> bool {
    auth::scope_covers(have, want) && (!want.ends_with('*') || have == "*" || have == want)
}

/// Whether every source `inner` admits is also admitted by `outer` (both allowlists, empty
/// meaning any source).
fn allowlist_within(inner: &[String], outer: &[String]) -> bool {
    if outer.is_empty() {
        return true;
    }
    if inner.is_empty() {
        return false;
    }
    let outer: Vec<ipnet::IpNet> = outer
        .iter()
        .filter_map(|e| auth::parse_allow_entry(e))
        .collect();
    inner
        .iter()
        .all(|e| auth::parse_allow_entry(e).is_some_and(|n| outer.iter().any(|o| o.contains(&n))))
}

/// DECISIONS.md section 16, the one rule for key management: a key may mint, patch, roll or
/// revoke a key only when it could hold that key itself.
///
/// - kind: a key manages only keys of its own kind, `*` or not (403 `wrong_key_kind`,
///   param `kind`; a `*` reaching every kind would let a checkout key mint a payout key);
/// - scopes: the target's scopes must be a subset of the granter's, a wildcard only granted
///   by `*` or the same wildcard (403 `scope_not_grantable`, param `scopes`);
/// - `payouts:approve` is never granted by a key ([`no_approve_granted`]);
/// - signing: a target with signing enabled needs a granter with signing enabled (403
///   `signing_disabled`, param `signing_enabled`);
/// - IP allowlist: a granter pinned to an allowlist may only manage keys pinned within it;
///   an empty list (any source) is wider than any list (403 `ip_not_allowed`, param
///   `ip_allowlist`).
///
/// Applied to the key being minted, to a patched key both before and after the patch, to the
/// key being rolled (its successor has the same powers) and to the key being revoked. A key
/// managing itself is bound the same way, so no key widens itself: not its scopes, not its
/// signing, not by loosening or removing its allowlist.
pub fn authorize(granter: &ApiKey, target: KeyPowers<'_>) -> Result<(), KeyError> {
    if granter.kind != target.kind {
        return Err(KeyError::WrongKind {
            granter: granter.kind,
        });
    }
    for s in target.scopes {
        if !granter.scopes.iter().any(|have| grants(have, s)) {
            return Err(KeyError::MissingScope { scope: s.clone() });
        }
    }
    if target.signing_enabled && !granter.signing_enabled {
        return Err(KeyError::SigningNotHeld);
    }
    if !allowlist_within(target.ip_allowlist, &granter.ip_allowlist) {
        return Err(KeyError::AllowlistWider);
    }
    Ok(())
}

/// The approve scope only the operator grants (DECISIONS.md section 16, amended).
pub const APPROVE_SCOPE: &str = "payouts:approve";

/// A key (not the operator) may not give `payouts:approve`, by name or through a wildcard
/// (`*`, `payouts:*`), to a payout key (the only kind that can use it) that did not hold it
/// before (`before`: the key's scopes before a patch; empty for a new key). Rolling or
/// revoking a key that holds it gives nothing new and stays allowed ([`authorize`] still
/// applies).
fn no_approve_granted(
    actor: Actor<'_>,
    kind: KeyKind,
    after: &[String],
    before: &[String],
) -> Result<(), KeyError> {
    if matches!(actor, Actor::Operator) || kind != KeyKind::Payout {
        return Ok(());
    }
    let covers = |scopes: &[String]| scopes.iter().any(|s| auth::scope_covers(s, APPROVE_SCOPE));
    if covers(before) {
        // Held already: a patch that keeps it grants nothing, one that adds a wildcard
        // around it neither.
        return Ok(());
    }
    match after.iter().find(|s| auth::scope_covers(s, APPROVE_SCOPE)) {
        Some(s) => Err(KeyError::ApproveNotGrantable { scope: s.clone() }),
        None => Ok(()),
    }
}

/// [`authorize`] for an actor, judged on the granter's row as stored in this transaction
/// (the cached copy only when the row is gone), so a concurrent narrowing counts.
fn authorize_actor(
    ctx: &WriteCtx<'_>,
    actor: Actor<'_>,
    target: KeyPowers<'_>,
) -> Result<(), KeyError> {
    match actor {
        Actor::Operator => Ok(()),
        Actor::Key(cached) => {
            let fresh = ctx.get::<ApiKey>(cached.id)?;
            authorize(fresh.as_ref().unwrap_or(cached), target)
        }
    }
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
            Some(e.as_str())
                .filter(|e| auth::allow_entry_is_plain(e))
                .and_then(auth::parse_allow_entry)
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

/// Mints a key for `actor` ([`authorize`]); returns the stored row and the token (shown
/// once).
pub fn create(
    ctx: &mut WriteCtx<'_>,
    pepper: &Pepper,
    project: &Project,
    actor: Actor<'_>,
    req: NewKey,
) -> Result<(ApiKey, String), KeyError> {
    let now = ctx.now_us();
    let scopes = req.scopes.unwrap_or_else(|| auth::default_scopes(req.kind));
    authorize_actor(
        ctx,
        actor,
        KeyPowers {
            kind: req.kind,
            scopes: &scopes,
            signing_enabled: req.signing_enabled,
            ip_allowlist: &req.ip_allowlist,
        },
    )?;
    no_approve_granted(actor, req.kind, &scopes, &[])?;
    if enabled_of_kind(ctx, project.id, req.kind, now)? >= LIMIT_PER_KIND {
        return Err(limit_reached(req.kind));
    }
    let t = auth::mint_token(project.mode);
    let key = ApiKey {
        id: appliance_storage::sources::new_id(),
        project_id: project.id,
        kind: req.kind,
        name: req.name,
        token_hash: pepper.hash(&t.token),
        key_id: t.key_id,
        last4: t.last4,
        scopes,
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
    put_new(ctx, &key)?;
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

/// The project's key `id` (404 `not_found` otherwise).
pub fn load(ctx: &WriteCtx<'_>, project: ProjectId, id: ApiKeyId) -> Result<ApiKey, KeyError> {
    ctx.get_in::<ApiKey>(project.uuid(), id.uuid())?
        .ok_or(KeyError::NotFound)
}

/// Applies a patch for `actor`: [`authorize`] must accept the key both as it is and as it
/// would be after the patch.
pub fn patch(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    actor: Actor<'_>,
    id: ApiKeyId,
    p: KeyPatch,
) -> Result<ApiKey, KeyError> {
    let mut k = load(ctx, project, id)?;
    authorize_actor(ctx, actor, KeyPowers::from(&k))?;
    if k.revoked_at.is_some() {
        return Err(KeyError::Revoked);
    }
    let before = k.scopes.clone();
    set_patched!(k, p, [name, scopes, ip_allowlist, signing_enabled]);
    authorize_actor(ctx, actor, KeyPowers::from(&k))?;
    no_approve_granted(actor, k.kind, &k.scopes, &before)?;
    ctx.put(&k)?;
    Ok(k)
}

/// Revokes at once, for `actor` ([`authorize`]); revoking a revoked key answers it
/// unchanged (idempotent).
pub fn revoke(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    actor: Actor<'_>,
    id: ApiKeyId,
) -> Result<ApiKey, KeyError> {
    let mut k = load(ctx, project, id)?;
    authorize_actor(ctx, actor, KeyPowers::from(&k))?;
    if k.revoked_at.is_none() {
        k.revoked_at = Some(ctx.now_us());
        ctx.put(&k)?;
    }
    Ok(k)
}

/// Rolls a key: a new key with the same settings, the old one expiring after
/// `grace_hours` (both work until then). `actor` must be able to hold the key
/// ([`authorize`]): the successor carries the same powers. Returns (new, token, old).
pub fn roll(
    ctx: &mut WriteCtx<'_>,
    pepper: &Pepper,
    project: &Project,
    actor: Actor<'_>,
    id: ApiKeyId,
    grace_hours: u64,
) -> Result<(ApiKey, String, ApiKey), KeyError> {
    let now = ctx.now_us();
    let mut old = load(ctx, ProjectId::of(project), id)?;
    authorize_actor(ctx, actor, KeyPowers::from(&old))?;
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
        id: appliance_storage::sources::new_id(),
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
    put_new(ctx, &new)?;
    Ok((new, t.token, old))
}

/// Writes a new key with its token hash's unique index (a token finds its key through it).
fn put_new(ctx: &mut WriteCtx<'_>, key: &ApiKey) -> Result<(), StoreError> {
    ctx.unique_put(
        &index::unique(
            IndexTag::UniqueTokenHash,
            Uuid::nil(),
            &[key.token_hash.as_bytes()],
        ),
        key.id,
    )?;
    ctx.put(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kind: KeyKind, scopes: &[&str], signing: bool, allow: &[&str]) -> ApiKey {
        ApiKey {
            id: Uuid::now_v7(),
            project_id: Uuid::nil(),
            kind,
            name: "k".into(),
            token_hash: "h".into(),
            key_id: "apktest00000000".into(),
            last4: "0000".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            ip_allowlist: allow.iter().map(|s| s.to_string()).collect(),
            signing_enabled: signing,
            created_by: "merchant".into(),
            rotated_from: None,
            expires_at: None,
            revoked_at: None,
            last_used_at: None,
            use_count: 0,
            created_at: 0,
        }
    }

    /// The refusal as SPEC.md section 7 answers it: (code, param).
    fn code(granter: &ApiKey, target: &ApiKey) -> Option<(&'static str, String)> {
        authorize(granter, KeyPowers::from(target)).err().map(|e| {
            let e = crate::api::error::ApiError::from(e);
            (e.code, e.param.unwrap_or_default())
        })
    }

    const NARROW: &[&str] = &["api_keys:read", "api_keys:write", "customers:read"];

    #[test]
    fn a_star_key_manages_only_its_own_kind() {
        for granter in KeyKind::ALL {
            let star = key(granter, &["*"], true, &[]);
            for kind in KeyKind::ALL {
                let want = (kind != granter).then(|| ("wrong_key_kind", "kind".to_string()));
                assert_eq!(code(&star, &key(kind, &["*"], true, &[])), want);
            }
        }
    }

    #[test]
    fn only_the_operator_grants_payouts_approve() {
        let star = key(KeyKind::Payout, &["*"], true, &[]);
        let refused = |after: &[&str], before: &[&str]| {
            let after: Vec<String> = after.iter().map(|s| s.to_string()).collect();
            let before: Vec<String> = before.iter().map(|s| s.to_string()).collect();
            no_approve_granted(Actor::Key(&star), KeyKind::Payout, &after, &before).is_err()
        };
        assert!(refused(&["payouts:approve"], &[]));
        assert!(refused(&["payouts:*"], &[]));
        assert!(refused(&["*"], &["payouts:read"]));
        assert!(!refused(&["payouts:read", "payouts:create"], &[]));
        // Held already (a rename, a narrowing): nothing new is given.
        assert!(!refused(&["payouts:approve"], &["payouts:approve"]));
        assert!(!refused(&["payouts:approve", "payouts:read"], &["*"]));
        // The operator may; other kinds cannot use it, so a `*` wallet key is no grant.
        let all = vec!["payouts:approve".to_string()];
        assert!(no_approve_granted(Actor::Operator, KeyKind::Payout, &all, &[]).is_ok());
        assert!(no_approve_granted(Actor::Key(&star), KeyKind::Wallet, &["*".into()], &[]).is_ok());
    }

    #[test]
    fn other_keys_manage_only_their_own_kind_within_their_scopes() {
        let narrow = key(KeyKind::Wallet, NARROW, false, &[]);
        // The example: the * payout key is out of reach on every count.
        let payout_star = key(KeyKind::Payout, &["*"], true, &[]);
        assert_eq!(
            code(&narrow, &payout_star),
            Some(("wrong_key_kind", "kind".into()))
        );
        let wallet_star = key(KeyKind::Wallet, &["*"], false, &[]);
        assert_eq!(
            code(&narrow, &wallet_star),
            Some(("scope_not_grantable", "scopes".into()))
        );
        let wider = key(
            KeyKind::Wallet,
            &["customers:read", "customers:write"],
            false,
            &[],
        );
        assert_eq!(
            code(&narrow, &wider),
            Some(("scope_not_grantable", "scopes".into()))
        );
        assert_eq!(
            code(
                &narrow,
                &key(KeyKind::Wallet, &["customers:read"], false, &[])
            ),
            None
        );
        assert_eq!(code(&narrow, &key(KeyKind::Wallet, &[], false, &[])), None);
        // Group wildcards: covered by * or the same wildcard, never by its members.
        let group = key(KeyKind::Wallet, &["customers:*", "api_keys:*"], false, &[]);
        assert_eq!(
            code(
                &group,
                &key(KeyKind::Wallet, &["customers:write"], false, &[])
            ),
            None
        );
        assert_eq!(
            code(&group, &key(KeyKind::Wallet, &["customers:*"], false, &[])),
            None
        );
        assert_eq!(
            code(&narrow, &key(KeyKind::Wallet, &["customers:*"], false, &[])),
            Some(("scope_not_grantable", "scopes".into()))
        );
    }

    #[test]
    fn signing_only_from_a_key_that_has_it() {
        let star_no_signing = key(KeyKind::Payout, &["*"], false, &[]);
        let signer = key(KeyKind::Payout, &["payouts:create"], true, &[]);
        assert_eq!(
            code(&star_no_signing, &signer),
            Some(("signing_disabled", "signing_enabled".into()))
        );
        let star = key(KeyKind::Payout, &["*"], true, &[]);
        assert_eq!(code(&star, &signer), None);
    }

    #[test]
    fn no_key_widens_itself() {
        let me = key(KeyKind::Wallet, NARROW, false, &["10.0.0.0/8"]);
        let mut widened = me.clone();
        widened.signing_enabled = true;
        assert_eq!(
            code(&me, &widened),
            Some(("signing_disabled", "signing_enabled".into()))
        );
        let mut widened = me.clone();
        widened.scopes.push("customers:write".into());
        assert_eq!(
            code(&me, &widened),
            Some(("scope_not_grantable", "scopes".into()))
        );
        let mut widened = me.clone();
        widened.ip_allowlist.clear();
        assert_eq!(
            code(&me, &widened),
            Some(("ip_not_allowed", "ip_allowlist".into()))
        );
        let mut widened = me.clone();
        widened.ip_allowlist = vec!["10.0.0.0/7".into()];
        assert_eq!(
            code(&me, &widened),
            Some(("ip_not_allowed", "ip_allowlist".into()))
        );
        // Narrowing, or changing nothing that matters, is fine.
        let mut narrowed = me.clone();
        narrowed.name = "renamed".into();
        narrowed.scopes = vec!["customers:read".into()];
        narrowed.ip_allowlist = vec!["10.1.0.0/16".into(), "10.2.3.4".into()];
        assert_eq!(code(&me, &narrowed), None);
        assert_eq!(code(&me, &me), None);
    }

    #[test]
    fn allowlists_compare_by_containment() {
        let outer = vec!["10.0.0.0/8".to_string(), "2001:db8::/32".to_string()];
        assert!(allowlist_within(&["10.1.2.3".into()], &outer));
        assert!(allowlist_within(&["2001:db8:1::/48".into()], &outer));
        assert!(!allowlist_within(&["11.0.0.1".into()], &outer));
        assert!(!allowlist_within(&[], &outer));
        assert!(allowlist_within(&[], &[]));
        assert!(allowlist_within(&["1.2.3.4".into()], &[]));
    }
}
