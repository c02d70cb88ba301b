//! Command line (DECISIONS.md section 1).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use crate::auth::Pepper;
use crate::config::Config;
use crate::operator::{self, ProjectSet, Request};

/// Self-hosted custodial wallet and payments service.
#[derive(Debug, Parser)]
#[command(name = "appliance", version, about)]
pub struct Cli {
    /// Serve test mode: simulated chains, project `default` created on first start.
    #[arg(long)]
    pub test: bool,
    /// Address to listen on (overrides `listen` in config).
    #[arg(long, global = true)]
    pub listen: Option<String>,
    /// Data directory (overrides `data_dir` in config; default ./appliance-data).
    #[arg(long, global = true)]
    pub data_dir: Option<PathBuf>,
    /// Configuration file (TOML).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve live mode (chains without a configured adapter are listed as paused).
    Serve,
    /// Create the data dir: store, pepper and the encrypted master seed (passphrase from
    /// APPLIANCE_PASSPHRASE, `signing.passphrase_env` or `signing.passphrase_file`, never an
    /// argument); prints the master addresses.
    Init,
    /// Manage projects.
    #[command(subcommand)]
    Project(ProjectCmd),
    /// Manage API keys.
    #[command(subcommand)]
    Key(KeyCmd),
    /// Check every ledger and index invariant; exits non-zero on any violation.
    Verify,
    /// Write a consistent backup (store snapshot, pepper, encrypted seed) to a new directory;
    /// works while the server runs.
    Backup {
        #[arg(long)]
        out: PathBuf,
    },
    /// Replace the data dir's store, pepper and seed with a backup's (the server must be
    /// stopped; the backup is verified first and the current files are kept aside).
    Restore {
        #[arg(long)]
        from: PathBuf,
    },
    /// Approve or reject a payout waiting for approval (operator approval).
    #[command(subcommand)]
    Payout(PayoutCmd),
    /// Print the version.
    Version,
}

#[derive(Debug, Subcommand)]
pub enum ProjectCmd {
    /// Create a project.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long, value_parser = ["live", "test"])]
        mode: String,
    },
    /// List projects.
    List,
    /// Show one project (id or name).
    Show { project: String },
    /// Change a project's settings and switches.
    Set(SetArgs),
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// Project id or name.
    pub project: String,
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub signing_enabled: Option<bool>,
    /// US cents above which payouts wait for approval, or `none`.
    #[arg(long)]
    pub auto_approve_threshold_cents: Option<String>,
    #[arg(long)]
    pub requests_per_minute: Option<u32>,
    #[arg(long)]
    pub addresses_per_day: Option<u32>,
    #[arg(long)]
    pub max_pending_payouts: Option<u32>,
    /// Chain the chain and asset switches apply to.
    #[arg(long)]
    pub chain: Option<String>,
    #[arg(long, value_parser = ["live", "paused", "coming_soon"])]
    pub chain_status: Option<String>,
    #[arg(long)]
    pub chain_status_note: Option<String>,
    #[arg(long)]
    pub chain_deposits: Option<bool>,
    #[arg(long)]
    pub chain_payouts: Option<bool>,
    #[arg(long)]
    pub chain_listed: Option<bool>,
    /// Asset (with --chain) the asset switches apply to.
    #[arg(long)]
    pub asset: Option<String>,
    #[arg(long)]
    pub asset_deposits: Option<bool>,
    #[arg(long)]
    pub asset_payouts: Option<bool>,
    #[arg(long)]
    pub asset_archived: Option<bool>,
}

#[derive(Debug, Subcommand)]
pub enum PayoutCmd {
    /// `pending_approval` -> `queued`.
    Approve { payout: String },
    /// `pending_approval` -> `rejected`; the funds return to available.
    Reject { payout: String },
}

#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Mint a key (the token is printed once).
    Create {
        /// Project id or name.
        #[arg(long)]
        project: String,
        #[arg(long, value_parser = ["checkout", "payout", "wallet"])]
        kind: String,
        #[arg(long)]
        name: Option<String>,
        /// Comma-separated scopes (default: the kind's default scopes).
        #[arg(long, value_delimiter = ',')]
        scopes: Option<Vec<String>>,
        #[arg(long)]
        signing_enabled: bool,
    },
    /// List a project's keys.
    List {
        #[arg(long)]
        project: String,
    },
    /// Revoke a key now (by id).
    Revoke { key: String },
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    // Files 0600 and directories 0700 whatever umask we were started with (issue 9 item 5).
    crate::data_dir::set_private_umask();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(cli: &Cli) -> anyhow::Result<Config> {
    let mut cfg = Config::load(cli.config.as_deref())?;
    if let Some(l) = &cli.listen {
        cfg.listen = l.clone();
    }
    if let Some(d) = &cli.data_dir {
        cfg.data_dir = d.clone();
    }
    Ok(cfg)
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let cfg = load_config(&cli)?;
    crate::ops::logging::init(cfg.log_format);
    let req = match cli.command {
        None if cli.test => return serve(cfg, true),
        None => {
            eprintln!("nothing to do: use `appliance --test` or `appliance serve --config FILE` (see --help)");
            return Ok(ExitCode::from(2));
        }
        Some(Command::Serve) => return serve(cfg, cli.test),
        Some(Command::Init) => return init(&cfg),
        Some(Command::Version) => {
            println!("appliance {}", env!("CARGO_PKG_VERSION"));
            return Ok(ExitCode::SUCCESS);
        }
        Some(Command::Verify) => Request::Verify,
        Some(Command::Backup { out }) => {
            let out = std::path::absolute(&out)?;
            Request::Backup {
                out: out.display().to_string(),
            }
        }
        Some(Command::Restore { from }) => return restore(&cfg, &from),
        Some(Command::Payout(PayoutCmd::Approve { payout })) => Request::PayoutApprove { payout },
        Some(Command::Payout(PayoutCmd::Reject { payout })) => Request::PayoutReject { payout },
        Some(Command::Project(p)) => match p {
            ProjectCmd::Create { name, mode } => Request::ProjectCreate { name, mode },
            ProjectCmd::List => Request::ProjectList,
            ProjectCmd::Show { project } => Request::ProjectShow { project },
            ProjectCmd::Set(a) => {
                let (threshold, clear) = match a.auto_approve_threshold_cents.as_deref() {
                    None => (None, false),
                    Some("none") => (None, true),
                    Some(v) => (
                        Some(v.parse::<u64>().map_err(|_| {
                            anyhow::anyhow!("--auto-approve-threshold-cents takes cents or `none`")
                        })?),
                        false,
                    ),
                };
                Request::ProjectSet {
                    project: a.project,
                    set: ProjectSet {
                        name: a.name,
                        signing_enabled: a.signing_enabled,
                        auto_approve_threshold_cents: threshold,
                        clear_auto_approve_threshold: clear,
                        requests_per_minute: a.requests_per_minute,
                        addresses_per_day: a.addresses_per_day,
                        max_pending_payouts: a.max_pending_payouts,
                        chain: a.chain,
                        chain_status: a.chain_status,
                        chain_status_note: a.chain_status_note,
                        chain_deposits: a.chain_deposits,
                        chain_payouts: a.chain_payouts,
                        chain_listed: a.chain_listed,
                        asset: a.asset,
                        asset_deposits: a.asset_deposits,
                        asset_payouts: a.asset_payouts,
                        asset_archived: a.asset_archived,
                    },
                }
            }
        },
        Some(Command::Key(k)) => match k {
            KeyCmd::Create {
                project,
                kind,
                name,
                scopes,
                signing_enabled,
            } => Request::KeyCreate {
                project,
                kind,
                name,
                scopes,
                signing_enabled,
            },
            KeyCmd::List { project } => Request::KeyList { project },
            KeyCmd::Revoke { key } => Request::KeyRevoke { key },
        },
    };
    let is_verify = matches!(req, Request::Verify);
    let answer = run_operator(&cfg, req)?;
    if let Some(token) = answer.get("token").and_then(Value::as_str) {
        println!("token: {token}");
    }
    println!("{}", serde_json::to_string_pretty(&answer)?);
    if is_verify {
        let n = answer["violations"].as_array().map(Vec::len).unwrap_or(0);
        if n > 0 {
            eprintln!("verify: {n} violation(s)");
            return Ok(ExitCode::FAILURE);
        }
        eprintln!("verify: all invariants hold");
    }
    Ok(ExitCode::SUCCESS)
}

/// `appliance init` (DECISIONS.md section 10).
fn init(cfg: &Config) -> anyhow::Result<ExitCode> {
    use appliance_signer::Signer;
    crate::data_dir::prepare(&cfg.data_dir)?;
    Pepper::load_or_create(&cfg.data_dir)?;
    crate::sealing::DataKey::load_or_create(&cfg.data_dir)?;
    close_store(crate::server::open_store(
        cfg,
        std::time::Duration::from_secs(10),
    )?);
    let pass = match appliance_signer::read_passphrase(
        cfg.signing.passphrase_env.as_deref(),
        cfg.signing.passphrase_file.as_deref(),
    ) {
        Ok(p) => p,
        // DECISIONS.md section 10: with no passphrase configured, ask on a terminal.
        Err(e) if std::io::IsTerminal::is_terminal(&std::io::stdin()) => {
            let first = zeroize::Zeroizing::new(rpassword::prompt_password("seed passphrase: ")?);
            let again = zeroize::Zeroizing::new(rpassword::prompt_password("again: ")?);
            if first.is_empty() || *first != *again {
                anyhow::bail!("the passphrases are empty or differ ({e})");
            }
            first
        }
        Err(e) => return Err(e.into()),
    };
    let signer = if Signer::exists(&cfg.data_dir) {
        println!(
            "already initialised: {}",
            cfg.data_dir.join(appliance_signer::SEED_FILE).display()
        );
        Signer::unlock(&cfg.data_dir, &pass)?
    } else {
        let s = Signer::init(&cfg.data_dir, &pass)?;
        println!(
            "created the encrypted master seed {}",
            cfg.data_dir.join(appliance_signer::SEED_FILE).display()
        );
        s
    };
    let master = signer.evm_master_address();
    println!("evm master wallet: {}", master.to_checksum(None));
    println!(
        "evm forwarder factory (same on every EVM chain): {}",
        appliance_chains::address::to_checksum(&appliance_chains::address::factory_address(
            &master.0 .0
        ))
    );
    Ok(ExitCode::SUCCESS)
}

/// `appliance restore --from DIR`: checks that no server runs, that the backup opens and
/// passes every `verify` invariant and that its data key opens its sealed secrets, then moves
/// the current store, pepper, data key and seed aside
/// (`<name>.before-restore-<unix time>`) and puts the backup's in their place.
fn restore(cfg: &Config, from: &std::path::Path) -> anyhow::Result<ExitCode> {
    if operator::call_socket(&cfg.socket_path(), &Request::ProjectList)
        .map_err(anyhow::Error::msg)?
        .is_some()
    {
        anyhow::bail!(
            "a server is running on {}; stop it before restoring",
            cfg.data_dir.display()
        );
    }
    // Holding the current store's lock for the whole swap keeps a server from starting on it.
    let current = if cfg.store_path().exists() {
        Some(crate::server::open_store(cfg, std::time::Duration::ZERO)?)
    } else {
        None
    };
    let backup_db = from.join("appliance.redb");
    {
        let b =
            appliance_storage::Store::open(&backup_db, appliance_storage::StoreOptions::default())
                .map_err(|e| {
                    anyhow::anyhow!("{} is not a readable backup: {e}", backup_db.display())
                })?;
        let rep = b.read_blocking(appliance_storage::verify::verify)?;
        // The backup's data key must open the secrets its store holds sealed.
        let key = crate::sealing::DataKey::load(from)?;
        let secrets =
            b.read_blocking(|r| Ok(crate::sealing::check_webhook_secrets(r, key.as_ref())))?;
        close_store(b);
        if !rep.violations.is_empty() {
            anyhow::bail!(
                "the backup fails verify ({} violations); not restoring",
                rep.violations.len()
            );
        }
        if let Err(e) = secrets {
            anyhow::bail!("the backup is not complete: {e}; not restoring");
        }
    }
    if let Some(s) = current {
        close_store(s);
    }
    crate::data_dir::prepare(&cfg.data_dir)?;
    let stamp = chrono::Utc::now().timestamp();
    for name in std::iter::once("appliance.redb").chain(operator::BACKUP_FILES.iter().copied()) {
        let target = cfg.data_dir.join(name);
        if target.exists() {
            std::fs::rename(
                &target,
                cfg.data_dir.join(format!("{name}.before-restore-{stamp}")),
            )?;
        }
        let source = from.join(name);
        if source.exists() {
            std::fs::copy(&source, &target)?;
            std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        }
    }
    println!(
        "restored {} into {}",
        from.display(),
        cfg.data_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Closes a store opened by a command so the next open needs no repair.
fn close_store(store: appliance_storage::Store) {
    let closer = store.shutdown();
    drop(store);
    if let Some(h) = closer {
        let _ = h.join();
    }
}

/// Runs an operator command through a running server's socket, or on the store directly
/// when no server runs. A server that is still starting holds the store before its socket
/// answers: keep trying the socket for a while then.
fn run_operator(cfg: &Config, req: Request) -> anyhow::Result<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(v) =
            operator::call_socket(&cfg.socket_path(), &req).map_err(anyhow::Error::msg)?
        {
            return Ok(v);
        }
        match crate::server::open_store(cfg, std::time::Duration::ZERO) {
            Ok(store) => {
                let pepper = Pepper::load_or_create(&cfg.data_dir)?;
                let out = operator::execute(&store, &pepper, cfg, req);
                close_store(store);
                return out.map(|(v, _)| v).map_err(anyhow::Error::msg);
            }
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
}

fn serve(cfg: Config, test_mode: bool) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let closer = rt.block_on(crate::server::run(cfg, test_mode))?;
    // Dropping the runtime drops every task's store handle; then the writer closes the file.
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    if let Some(h) = closer {
        let _ = h.join();
    }
    Ok(ExitCode::SUCCESS)
}
