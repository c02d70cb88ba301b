//! Projects (tenants), managed by the operator (DECISIONS.md section 1).

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{KeyKind, Mode, Project, ProjectSettings};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::auth::Pepper;
use crate::services::error::{fault_from, Fault, Invalid};
use crate::services::keys::{self, KeyError, NewKey};
use crate::services::wallets;

/// Why a project operation is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    /// A malformed `name`: 400 `invalid_request`.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// Another project has the name: 409 `name_taken` on `name`.
    #[error("A project named {name:?} exists.")]
    NameTaken { name: String },
    /// Minting the project's first keys failed.
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(ProjectError);

/// Creates a project; 409 `name_taken` when the name exists.
pub fn create(ctx: &mut WriteCtx<'_>, name: &str, mode: Mode) -> Result<Project, ProjectError> {
    let ukey = index::unique(IndexTag::UniqueProjectName, Uuid::nil(), &[name.as_bytes()]);
    if name.is_empty() || name.len() > 64 {
        return Err(Invalid::new("name", "A project name has 1 to 64 characters.").into());
    }
    if ctx.unique_get(&ukey)?.is_some() {
        return Err(ProjectError::NameTaken {
            name: name.to_string(),
        });
    }
    let p = Project {
        id: appliance_storage::sources::new_id(),
        name: name.to_string(),
        mode,
        settings: ProjectSettings::default(),
        created_at: ctx.now_us(),
    };
    ctx.unique_put(&ukey, p.id)?;
    // The master wallet is an address the service custodies on every EVM chain.
    for c in appliance_chains::CHAINS
        .iter()
        .filter(|c| c.family == appliance_chains::Family::Evm)
    {
        ctx.unique_put(
            &wallets::address_key(c.id, &wallets::master_address(p.id)),
            Uuid::nil(),
        )?;
    }
    ctx.put(&p)?;
    Ok(p)
}

/// Finds a project by id or name.
pub fn find(ctx: &impl ReadOps, id_or_name: &str) -> Result<Option<Project>, StoreError> {
    if let Ok(id) = Uuid::parse_str(id_or_name) {
        if let Some(p) = ctx.get::<Project>(id)? {
            return Ok(Some(p));
        }
    }
    let ukey = index::unique(
        IndexTag::UniqueProjectName,
        Uuid::nil(),
        &[id_or_name.as_bytes()],
    );
    match ctx.unique_get(&ukey)? {
        Some(id) => Ok(ctx.get::<Project>(id)?),
        None => Ok(None),
    }
}

/// First start of `--test`: project `default` with one key of each kind, `*` scopes and
/// signing on. Returns the project and (kind, token) pairs.
pub fn bootstrap_test(
    ctx: &mut WriteCtx<'_>,
    pepper: &Pepper,
) -> Result<(Project, Vec<(KeyKind, String)>), ProjectError> {
    let p = create(ctx, "default", Mode::Test)?;
    let mut tokens = Vec::new();
    for kind in KeyKind::ALL {
        let (_, token) = keys::create(
            ctx,
            pepper,
            &p,
            keys::Actor::Operator,
            NewKey {
                kind,
                name: format!("default {}", kind.as_str()),
                scopes: Some(vec!["*".into()]),
                ip_allowlist: vec![],
                signing_enabled: true,
                created_by: "merchant".into(),
            },
        )?;
        tokens.push((kind, token));
    }
    Ok((p, tokens))
}

/// Longest `--merchant-name` (characters).
pub const MAX_MERCHANT_NAME: usize = 100;
/// Longest `--merchant-logo-url` (bytes).
pub const MAX_MERCHANT_LOGO_URL: usize = 2048;

/// A `--merchant-name` as stored: trimmed, 1-100 characters without control characters;
/// `""` removes it (`None`). DECISIONS.md section 12.
pub fn merchant_name(v: &str) -> Result<Option<String>, String> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    if v.chars().count() > MAX_MERCHANT_NAME || v.chars().any(char::is_control) {
        return Err(format!(
            "--merchant-name takes 1 to {MAX_MERCHANT_NAME} characters without control characters"
        ));
    }
    Ok(Some(v.to_string()))
}

/// A `--merchant-logo-url` as stored: an `https://` URL with a plain host (the hosted page's
/// Content-Security-Policy allows images from that origin only), at most 2,048 bytes, no
/// whitespace; `""` removes it (`None`). DECISIONS.md section 12.
pub fn merchant_logo_url(v: &str) -> Result<Option<String>, String> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    if v.len() > MAX_MERCHANT_LOGO_URL
        || v.chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\')
        || appliance_web::https_origin(v).is_none()
    {
        return Err(format!(
            "--merchant-logo-url takes an https:// URL with a plain host name, at most {MAX_MERCHANT_LOGO_URL} bytes"
        ));
    }
    Ok(Some(v.to_string()))
}
