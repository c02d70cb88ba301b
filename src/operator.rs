//! Operator commands (`appliance project ...`, `key ...`, `verify`): one implementation,
//! reached through the Unix socket of a running server (mode 0600, in the data dir) or
//! directly on the store when no server runs (DECISIONS.md section 1). There is no network
//! admin surface.
//!
//! Wire format on the socket: one JSON [`Request`] per line, one JSON answer per line:
//! `{"ok": <value>}` or `{"error": "<message>"}`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    entry, ApiKey, AssetOverride, ChainOverride, KeyKind, Mode, Project,
};
use appliance_storage::{ReadOps, ScanOps, Store, WriteError};

use crate::auth::Pepper;
use crate::services::error::Fault;
use crate::services::payouts::PayoutError;
use crate::services::types::ApiKeyId;
use crate::services::{billing, keys, projects};
use crate::views;

/// An operator command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    ProjectCreate {
        name: String,
        mode: String,
    },
    ProjectList,
    ProjectShow {
        project: String,
    },
    ProjectSet {
        project: String,
        set: ProjectSet,
    },
    KeyCreate {
        project: String,
        kind: String,
        name: Option<String>,
        scopes: Option<Vec<String>>,
        signing_enabled: bool,
    },
    KeyList {
        project: String,
    },
    KeyRevoke {
        key: String,
    },
    Verify,
    /// A consistent backup into the new directory `out` (absolute path).
    Backup {
        out: String,
    },
    PayoutApprove {
        payout: String,
    },
    PayoutReject {
        payout: String,
    },
    /// The project's billing, as `GET /v1/billing` shows it, with its latest entries.
    BillingShow {
        project: String,
    },
    /// An `adjustment` entry of `cents` (positive: credit, negative: debit).
    BillingAdjust {
        project: String,
        cents: i64,
        note: String,
    },
    /// Puts the project on a plan (also one that is not self-selectable), under the
    /// activation rule of `POST /v1/billing/plan`.
    BillingPlan {
        project: String,
        plan: String,
    },
}

/// Settings changed by `project set`; `None` leaves a field alone.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProjectSet {
    pub name: Option<String>,
    pub signing_enabled: Option<bool>,
    pub auto_approve_threshold_cents: Option<u64>,
    /// Removes the threshold: every payout auto-approves.
    #[serde(default)]
    pub clear_auto_approve_threshold: bool,
    pub requests_per_minute: Option<u32>,
    pub addresses_per_day: Option<u32>,
    pub max_pending_payouts: Option<u32>,
    /// `Some("")` removes the name.
    #[serde(default)]
    pub merchant_name: Option<String>,
    /// `Some("")` removes the logo.
    #[serde(default)]
    pub merchant_logo_url: Option<String>,
    pub chain: Option<String>,
    pub chain_status: Option<String>,
    pub chain_status_note: Option<String>,
    pub chain_deposits: Option<bool>,
    pub chain_payouts: Option<bool>,
    pub chain_listed: Option<bool>,
    pub asset: Option<String>,
    pub asset_deposits: Option<bool>,
    pub asset_payouts: Option<bool>,
    pub asset_archived: Option<bool>,
}

/// The operator's message for a failed write: the refusal's text, or the store's failure.
fn err<E: std::fmt::Display>(e: WriteError<E>) -> String {
    match e {
        WriteError::Rejected(e) => e.to_string(),
        WriteError::Store(s) => s.to_string(),
    }
}

fn project_json(p: &Project) -> Value {
    json!({
        "id": p.id,
        "name": p.name,
        "mode": p.mode.as_str(),
        "settings": p.settings,
        "created_at": views::ts(p.created_at),
    })
}

fn find_project(store: &Store, s: &str) -> Result<Project, String> {
    let s2 = s.to_string();
    store
        .read_blocking(|r| Ok(projects::find(r, &s2)))
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no project {s:?}"))
}

/// Runs one command on the store. Returns the answer and whether keys or projects changed
/// (so a running server refreshes its cache).
pub fn execute(
    store: &Store,
    pepper: &Pepper,
    config: &crate::config::Config,
    req: Request,
) -> Result<(Value, bool), String> {
    match req {
        Request::ProjectCreate { name, mode } => project_create(store, name, &mode),
        Request::ProjectList => {
            let ps = store
                .read_blocking(|r| r.all::<Project>())
                .map_err(|e| e.to_string())?;
            Ok((
                json!(ps.iter().map(project_json).collect::<Vec<_>>()),
                false,
            ))
        }
        Request::ProjectShow { project } => {
            Ok((project_json(&find_project(store, &project)?), false))
        }
        Request::ProjectSet { project, set } => project_set(store, &project, set),
        Request::KeyCreate {
            project,
            kind,
            name,
            scopes,
            signing_enabled,
        } => {
            let p = find_project(store, &project)?;
            let kind = KeyKind::parse(&kind).ok_or("--kind must be checkout, payout or wallet")?;
            if let Some(s) = &scopes {
                keys::check_scopes(s).map_err(|e| e.to_string())?;
            }
            let pepper = pepper.clone();
            let env = p.mode.as_str();
            let (k, token) = store
                .write_blocking(move |ctx| {
                    keys::create(
                        ctx,
                        &pepper,
                        &p,
                        keys::Actor::Operator,
                        keys::NewKey {
                            kind,
                            name: name.unwrap_or_else(|| format!("{} key", kind.as_str())),
                            scopes,
                            ip_allowlist: vec![],
                            signing_enabled,
                            created_by: "merchant".into(),
                        },
                    )
                })
                .map_err(err)?;
            let mut v = views::api_key(&k, env, None);
            v["token"] = json!(token);
            Ok((v, true))
        }
        Request::KeyList { project } => key_list(store, &project),
        Request::KeyRevoke { key } => key_revoke(store, &key),
        Request::Backup { out } => backup(store, config, Path::new(&out)).map(|v| (v, false)),
        Request::PayoutApprove { payout } => decide_payout(store, config, &payout, true),
        Request::PayoutReject { payout } => decide_payout(store, config, &payout, false),
        Request::BillingShow { project } => billing_show(store, config, &project),
        Request::BillingAdjust {
            project,
            cents,
            note,
        } => billing_adjust(store, config, &project, cents, note),
        Request::BillingPlan { project, plan } => billing_plan(store, config, &project, &plan),
        Request::Verify => verify(store),
    }
}

/// `project create`: `mode` is `live` or `test`.
fn project_create(store: &Store, name: String, mode: &str) -> Result<(Value, bool), String> {
    let mode = match mode {
        "live" => Mode::Live,
        "test" => Mode::Test,
        _ => return Err("--mode must be live or test".into()),
    };
    let p = store
        .write_blocking(move |ctx| projects::create(ctx, &name, mode))
        .map_err(err)?;
    Ok((project_json(&p), true))
}

/// `project set`: the settings given, applied to the project named `project`.
fn project_set(store: &Store, project: &str, set: ProjectSet) -> Result<(Value, bool), String> {
    let id = find_project(store, project)?.id;
    let p = store
        .write_blocking(move |ctx| {
            let mut p = ctx
                .get::<Project>(id)
                .map_err(|e| e.to_string())?
                .ok_or("No such project.")?;
            apply_set(&mut p, set)?;
            ctx.put(&p).map_err(|e| e.to_string())?;
            Ok::<_, String>(p)
        })
        .map_err(err)?;
    Ok((project_json(&p), true))
}

/// `key list`: the project's keys (at most 10,000), without tokens.
fn key_list(store: &Store, project: &str) -> Result<(Value, bool), String> {
    let p = find_project(store, project)?;
    let ks = store
        .read_blocking(|r| {
            r.list::<ApiKey>(
                &index::prefix(IndexTag::ApiKeys, p.id, &[]),
                None,
                10_000,
                |_| true,
            )
        })
        .map_err(|e| e.to_string())?;
    Ok((
        json!(ks
            .items
            .iter()
            .map(|k| views::api_key(k, p.mode.as_str(), None))
            .collect::<Vec<_>>()),
        false,
    ))
}

/// `key revoke`: `key` is the key's id.
fn key_revoke(store: &Store, key: &str) -> Result<(Value, bool), String> {
    let id = Uuid::parse_str(key).map_err(|_| "the key id must be a UUID".to_string())?;
    let (k, mode) = store
        .write_blocking(move |ctx| {
            let k = ctx.get::<ApiKey>(id)?.ok_or(keys::KeyError::NotFound)?;
            // The key's `env` is its project's mode (test or live).
            let p = ctx
                .get::<Project>(k.project_id)?
                .ok_or(keys::KeyError::NotFound)?;
            Ok::<_, keys::KeyError>((
                keys::revoke(ctx, k.project_id.into(), keys::Actor::Operator, id.into())?,
                p.mode,
            ))
        })
        .map_err(err)?;
    Ok((views::api_key(&k, mode.as_str(), None), true))
}

/// `verify`: the store's invariants ([`appliance_storage::verify::verify`]).
fn verify(store: &Store) -> Result<(Value, bool), String> {
    let rep = store
        .read_blocking(appliance_storage::verify::verify)
        .map_err(|e| e.to_string())?;
    Ok((
        json!({
            "journal_entries": rep.journal_entries,
            "accounts": rep.accounts,
            "events": rep.events,
            "rows_checked": rep.rows_checked,
            "violations": rep.violations,
        }),
        false,
    ))
}

/// Files of the data dir besides the store that a backup must carry: without the pepper no
/// API key validates; without the data key no webhook secret opens; without the encrypted
/// seed live funds cannot move.
pub const BACKUP_FILES: &[&str] = &[
    "pepper",
    crate::sealing::DATA_KEY_FILE,
    appliance_signer::SEED_FILE,
];

/// Writes `out/appliance.redb` (a consistent snapshot, taken while the server runs), the
/// pepper, the data key, the encrypted seed when there is one, and `manifest.json`. `out` must not exist;
/// it is created with mode 0700 and its files 0600.
fn backup(store: &Store, config: &crate::config::Config, out: &Path) -> Result<Value, String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if !out.is_absolute() {
        return Err("the backup directory must be an absolute path".into());
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(out)
        .map_err(|e| format!("creating {}: {e}", out.display()))?;
    let db = out.join("appliance.redb");
    let rep = store
        .read_blocking(|r| appliance_storage::backup::backup(r, &db))
        .map_err(|e| e.to_string())?;
    std::fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| e.to_string())?;
    let mut files = vec!["appliance.redb".to_string()];
    // Checksums of every file: `restore` refuses a copy that does not match.
    let mut sha256 = serde_json::Map::new();
    sha256.insert("appliance.redb".into(), json!(sha256_hex_file(&db)?));
    for name in BACKUP_FILES {
        let from = config.data_dir.join(name);
        if !from.exists() {
            continue;
        }
        let bytes = std::fs::read(&from).map_err(|e| format!("reading {}: {e}", from.display()))?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(out.join(name))
            .map_err(|e| e.to_string())?;
        std::io::Write::write_all(&mut f, &bytes).map_err(|e| e.to_string())?;
        f.sync_all().map_err(|e| e.to_string())?;
        {
            use sha2::Digest;
            sha256.insert(
                name.to_string(),
                json!(hex::encode(sha2::Sha256::digest(&bytes))),
            );
        }
        files.push(name.to_string());
    }
    let manifest = json!({
        "created_at": views::ts(appliance_storage::now_us()),
        "tables": rep.tables,
        "rows": rep.rows,
        "files": files,
        "sha256": sha256,
    });
    std::fs::write(
        out.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest).expect("json"),
    )
    .map_err(|e| e.to_string())?;
    Ok(json!({"backup": out.display().to_string(), "manifest": manifest}))
}

/// SHA-256 of a file, hex.
fn sha256_hex_file(path: &Path) -> Result<String, String> {
    use sha2::Digest;
    let mut f =
        std::fs::File::open(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok(hex::encode(h.finalize()))
}

/// Operator approval or rejection of a payout waiting for approval. The operator acts as no
/// key at all (nil), which always differs from the key that created the payout.
fn decide_payout(
    store: &Store,
    config: &crate::config::Config,
    payout: &str,
    approve: bool,
) -> Result<(Value, bool), String> {
    let id = Uuid::parse_str(payout).map_err(|_| "the payout id must be a UUID".to_string())?;
    let reg = std::sync::Arc::new(crate::registry::Registry::from_config(config));
    let attempts = config.webhooks.max_attempts();
    let v = store
        .write_blocking(move |ctx| {
            let p = ctx
                .get::<appliance_storage::records::Payout>(id)?
                .ok_or(PayoutError::NotFound)?;
            let project = ctx
                .get::<Project>(p.project_id)?
                .ok_or_else(|| Fault::invariant("No such project."))?;
            let scope = crate::services::Scope {
                reg,
                project: std::sync::Arc::new(project),
                delivery_attempts: attempts,
            };
            let p = if approve {
                crate::services::payouts::approve(ctx, &scope, ApiKeyId::nil(), id.into())?
            } else {
                crate::services::payouts::reject(ctx, &scope, ApiKeyId::nil(), id.into())?
            };
            Ok::<_, PayoutError>(views::payout(&scope.reg, &p))
        })
        .map_err(err)?;
    Ok((v, false))
}

/// The service scope of `project` as the operator acts on it.
fn operator_scope(config: &crate::config::Config, project: Project) -> crate::services::Scope {
    crate::services::Scope {
        reg: std::sync::Arc::new(crate::registry::Registry::from_config(config)),
        project: std::sync::Arc::new(project),
        delivery_attempts: config.webhooks.max_attempts(),
    }
}

/// `appliance billing show --project P`: the Billing object and the 20 latest entries.
fn billing_show(
    store: &Store,
    config: &crate::config::Config,
    project: &str,
) -> Result<(Value, bool), String> {
    let s = operator_scope(config, find_project(store, project)?);
    let v = store
        .read_blocking(|r| {
            let acct = billing::account(r, s.project_id()).map_err(|e| e.to_string());
            let acct = match acct {
                Ok(a) => a,
                Err(e) => return Ok(Err(e)),
            };
            let mut v = match billing::billing_json(r, &s, &acct) {
                Ok(v) => v,
                Err(e) => return Ok(Err(e.to_string())),
            };
            let entries = r.list::<appliance_storage::records::BillingEntry>(
                &index::prefix(IndexTag::BillingEntries, s.project.id, &[]),
                None,
                20,
                |_| true,
            )?;
            v["entries"] = json!(entries
                .items
                .iter()
                .map(|e| views::billing_entry(&s.reg, e))
                .collect::<Vec<_>>());
            v["project"] = json!(s.project.name);
            Ok(Ok(v))
        })
        .map_err(|e| e.to_string())??;
    Ok((v, false))
}

/// `appliance billing credit|debit --project P --cents N --note TEXT` (DECISIONS.md section
/// 13): one `adjustment` entry; a credit may activate a requested plan.
fn billing_adjust(
    store: &Store,
    config: &crate::config::Config,
    project: &str,
    cents: i64,
    note: String,
) -> Result<(Value, bool), String> {
    if cents == 0 || cents.unsigned_abs() > billing::MAX_ADJUSTMENT_CENTS {
        return Err(format!(
            "--cents must be from 1 to {}",
            billing::MAX_ADJUSTMENT_CENTS
        ));
    }
    let note = note.trim().to_string();
    if note.is_empty() || note.chars().count() > billing::MAX_NOTE_CHARS {
        return Err(format!(
            "--note must be 1 to {} characters",
            billing::MAX_NOTE_CHARS
        ));
    }
    let s = operator_scope(config, find_project(store, project)?);
    let v = store
        .write_blocking(move |ctx| {
            let e = billing::adjust(ctx, &s, cents, note)?;
            let acct = billing::account(ctx, s.project_id())?;
            Ok::<_, Fault>(json!({
                "entry": views::billing_entry(&s.reg, &e),
                "balance_cents": acct.balance_cents.to_string(),
                "plan": acct.plan,
                "requested_plan": acct.requested_plan,
            }))
        })
        .map_err(err)?;
    Ok((v, false))
}

/// `appliance billing plan --project P --plan KEY`.
fn billing_plan(
    store: &Store,
    config: &crate::config::Config,
    project: &str,
    plan: &str,
) -> Result<(Value, bool), String> {
    let plan = config
        .billing
        .plan(plan)
        .cloned()
        .ok_or_else(|| format!("no plan {plan:?} in [billing]"))?;
    let s = operator_scope(config, find_project(store, project)?);
    let v = store
        .write_blocking(move |ctx| {
            billing::assign_plan(ctx, &s, &plan)?;
            let acct = billing::account(ctx, s.project_id())?;
            billing::billing_json(ctx, &s, &acct)
        })
        .map_err(err)?;
    Ok((v, false))
}

fn apply_set(p: &mut Project, s: ProjectSet) -> Result<(), String> {
    if let Some(n) = s.name {
        p.name = n;
    }
    let st = &mut p.settings;
    if let Some(v) = s.signing_enabled {
        st.signing_enabled = v;
    }
    if s.clear_auto_approve_threshold {
        st.auto_approve_threshold_cents = None;
    }
    if let Some(v) = s.auto_approve_threshold_cents {
        st.auto_approve_threshold_cents = Some(v);
    }
    if let Some(v) = s.requests_per_minute {
        st.requests_per_minute = v.max(1);
    }
    if let Some(v) = s.addresses_per_day {
        st.addresses_per_day = v;
    }
    if let Some(v) = s.max_pending_payouts {
        st.max_pending_payouts = v;
    }
    if let Some(v) = s.merchant_name {
        st.merchant_name = crate::services::projects::merchant_name(&v)?;
    }
    if let Some(v) = s.merchant_logo_url {
        st.merchant_logo_url = crate::services::projects::merchant_logo_url(&v)?;
    }
    let chain_fields = s.chain_status.is_some()
        || s.chain_status_note.is_some()
        || s.chain_deposits.is_some()
        || s.chain_payouts.is_some()
        || s.chain_listed.is_some();
    let asset_fields =
        s.asset_deposits.is_some() || s.asset_payouts.is_some() || s.asset_archived.is_some();
    if (chain_fields || asset_fields || s.asset.is_some()) && s.chain.is_none() {
        return Err("chain and asset switches need --chain".into());
    }
    if let Some(chain) = s.chain {
        let c =
            appliance_chains::chain(&chain).ok_or_else(|| format!("unknown chain {chain:?}"))?;
        if let Some(status) = &s.chain_status {
            appliance_chains::ChainStatus::parse(status)
                .ok_or("--chain-status must be live, paused or coming_soon")?;
        }
        if chain_fields {
            let o = entry(
                &mut st.chains,
                |o| o.chain == chain,
                || ChainOverride {
                    chain: chain.clone(),
                    ..Default::default()
                },
            );
            o.status = s.chain_status.or(o.status.take());
            o.status_note = s.chain_status_note.or(o.status_note.take());
            o.deposits_enabled = s.chain_deposits.or(o.deposits_enabled);
            o.payouts_enabled = s.chain_payouts.or(o.payouts_enabled);
            o.listed = s.chain_listed.or(o.listed);
        }
        if let Some(asset) = s.asset {
            if c.asset(&asset).is_none() {
                return Err(format!("{asset:?} is not an asset on {chain}"));
            }
            let is = |o: &AssetOverride| o.chain == chain && o.symbol == asset;
            let o = entry(&mut st.assets, is, || AssetOverride {
                chain: chain.clone(),
                symbol: asset.clone(),
                ..Default::default()
            });
            o.deposits_enabled = s.asset_deposits.or(o.deposits_enabled);
            o.payouts_enabled = s.asset_payouts.or(o.payouts_enabled);
            o.archived = s.asset_archived.or(o.archived);
        }
    }
    Ok(())
}

/// Sends a command to the server listening on `socket`. `Ok(None)` when no server answers
/// there (then the caller opens the store itself).
pub fn call_socket(socket: &Path, req: &Request) -> Result<Option<Value>, String> {
    let mut stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(_) => return Ok(None),
    };
    let mut line = serde_json::to_string(req).map_err(|e| e.to_string())?;
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(|e| e.to_string())?;
    let v: Value =
        serde_json::from_str(&answer).map_err(|e| format!("bad answer from server: {e}"))?;
    match (v.get("ok"), v.get("error")) {
        (Some(ok), _) => Ok(Some(ok.clone())),
        (_, Some(e)) => Err(e.as_str().unwrap_or("error").to_string()),
        _ => Err("bad answer from server".into()),
    }
}

/// Binds the operator socket (mode 0600), replacing a stale one.
pub fn bind_socket(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves the operator socket of a running server.
pub async fn serve_socket(
    state: crate::state::AppState,
    listener: tokio::net::UnixListener,
) -> std::io::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    loop {
        let (stream, _) = listener.accept().await?;
        let state = state.clone();
        tokio::spawn(async move {
            let (r, mut w) = stream.into_split();
            let mut lines = tokio::io::BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let answer = match serde_json::from_str::<Request>(&line) {
                    Ok(req) => {
                        let st = state.clone();
                        match tokio::task::spawn_blocking(move || {
                            execute(&st.store, &st.pepper, &st.config, req)
                        })
                        .await
                        {
                            Ok(Ok((v, changed))) => {
                                if changed {
                                    state.reload_cache();
                                }
                                json!({"ok": v})
                            }
                            Ok(Err(e)) => json!({"error": e}),
                            Err(e) => json!({"error": e.to_string()}),
                        }
                    }
                    Err(e) => json!({"error": format!("bad request: {e}")}),
                };
                let mut s = answer.to_string();
                s.push('\n');
                if w.write_all(s.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
    }
}
