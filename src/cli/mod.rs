//! Command line (DECISIONS.md section 1).

use std::path::{Path, PathBuf};

use anyhow::Context;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use crate::config::Config;
use crate::operator::{self, ProjectSet, Request};

mod restore;
use restore::restore;

/// Self-hosted custodial wallet and payments service.
#[derive(Debug, Parser)]
#[command(name = "appliance", version, about)]
pub struct Cli {
    /// Serve test mode: simulated chains, project `default` created on first start.
    #[arg(long)]
    pub test: bool,
    /// Address to listen on with `--test` (overrides `listen` in config).
    #[arg(long)]
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
    Serve {
        /// Address to listen on (overrides `listen` in config).
        #[arg(long)]
        listen: Option<String>,
    },
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
        /// Directory to create for the backup (must not exist).
        #[arg(long)]
        out: PathBuf,
    },
    /// Replace the data dir's store, pepper and seed with a backup's (the server must be
    /// stopped; the backup is verified first and the current files are kept aside).
    Restore {
        /// Directory written by `appliance backup` (read only; never created).
        #[arg(long)]
        from: PathBuf,
    },
    /// Approve or reject a payout waiting for approval (operator approval).
    #[command(subcommand)]
    Payout(PayoutCmd),
    /// A project's billing: show it, credit or debit its operational balance (an
    /// `adjustment` entry), or put it on a plan.
    #[command(subcommand)]
    Billing(BillingCmd),
    /// A deterministic simulation of the whole appliance: the real services and
    /// store against simulated chains, with faults and crashes, driven by one seed; the
    /// invariants are checked after every step. Prints one line per failure and a short
    /// trace, then `seed S steps N digest HEX`; exits 0 only if every invariant held. The
    /// same seed gives the same digest. Uses a temporary data dir of its own (never
    /// `--data-dir`); logs at `APPLIANCE_LOG` (default: errors only).
    Simulate {
        /// The seed: every choice of the run, ids and clock included, comes from it.
        #[arg(long)]
        seed: u64,
        /// Steps to run.
        #[arg(long, default_value_t = 10_000)]
        steps: u64,
        /// Keep the data dir afterwards (its path is printed).
        #[arg(long)]
        keep: bool,
        /// Print every step.
        #[arg(long)]
        verbose: bool,
        /// Steps between two settlings (faults off, chains mined until nothing is in
        /// flight, then every address compared with the ledger).
        #[arg(long, default_value_t = crate::simulate::SETTLE_EVERY)]
        settle_every: u64,
        /// A scripted run instead of a random one: `reorg-after-credit` (a
        /// credited deposit whose block a reorg replaces, on the simulated chain; `--steps`
        /// rounds of it).
        #[arg(long)]
        scenario: Option<String>,
    },
    /// Print the version.
    Version,
    /// Print the API's OpenAPI 3.1 document (what `GET /v1/openapi.json` serves); regenerate
    /// the committed copy with `appliance openapi > docs/openapi.json`.
    Openapi,
}

#[derive(Debug, Subcommand)]
pub enum ProjectCmd {
    /// Create a project.
    Create {
        /// Project name (unique).
        #[arg(long)]
        name: String,
        /// `live` (real chains) or `test` (simulated chains).
        #[arg(long, value_parser = ["live", "test"])]
        mode: String,
    },
    /// List projects.
    List,
    /// Show one project (id or name).
    Show {
        /// Project id or name.
        project: String,
    },
    /// Change a project's settings and switches.
    Set(SetArgs),
}

#[derive(Debug, Args)]
pub struct SetArgs {
    /// Project id or name.
    pub project: String,
    /// New project name.
    #[arg(long)]
    pub name: Option<String>,
    /// Project-level signing switch (off blocks every payout and sweep).
    #[arg(long)]
    pub signing_enabled: Option<bool>,
    /// US cents above which payouts wait for approval, or `none`.
    #[arg(long)]
    pub auto_approve_threshold_cents: Option<String>,
    /// Requests per minute per API key.
    #[arg(long)]
    pub requests_per_minute: Option<u32>,
    /// New deposit addresses per UTC day.
    #[arg(long)]
    pub addresses_per_day: Option<u32>,
    /// Most payouts not yet final at once.
    #[arg(long)]
    pub max_pending_payouts: Option<u32>,
    /// The merchant's name on the hosted checkout page (1-100 characters; `""` removes it).
    #[arg(long)]
    pub merchant_name: Option<String>,
    /// An https URL of the merchant's logo on the hosted checkout page (`""` removes it).
    #[arg(long)]
    pub merchant_logo_url: Option<String>,
    /// Chain the chain and asset switches apply to.
    #[arg(long)]
    pub chain: Option<String>,
    /// Chain status shown to the project (with --chain).
    #[arg(long, value_parser = ["live", "paused", "coming_soon"])]
    pub chain_status: Option<String>,
    /// Operator's `status_note` for the chain (with --chain).
    #[arg(long)]
    pub chain_status_note: Option<String>,
    /// New deposit addresses on the chain (with --chain).
    #[arg(long)]
    pub chain_deposits: Option<bool>,
    /// Payouts on the chain (with --chain).
    #[arg(long)]
    pub chain_payouts: Option<bool>,
    /// Whether the project sees the chain at all (with --chain).
    #[arg(long)]
    pub chain_listed: Option<bool>,
    /// Asset (with --chain) the asset switches apply to.
    #[arg(long)]
    pub asset: Option<String>,
    /// Deposits of the asset (with --chain and --asset).
    #[arg(long)]
    pub asset_deposits: Option<bool>,
    /// Payouts of the asset (with --chain and --asset).
    #[arg(long)]
    pub asset_payouts: Option<bool>,
    /// Archive the asset: no new deposits or payouts (with --chain and --asset).
    #[arg(long)]
    pub asset_archived: Option<bool>,
}

#[derive(Debug, Subcommand)]
pub enum BillingCmd {
    /// The plan, balance, onboarding and the latest entries.
    Show {
        /// Project id or name.
        #[arg(long)]
        project: String,
    },
    /// Credit the operational balance (an `adjustment` entry); may activate a requested plan.
    Credit {
        /// Project id or name.
        #[arg(long)]
        project: String,
        /// USD cents, 1 to 1000000000.
        #[arg(long)]
        cents: u64,
        /// Why (shown to the merchant on the entry).
        #[arg(long)]
        note: String,
    },
    /// Debit the operational balance (an `adjustment` entry).
    Debit {
        /// Project id or name.
        #[arg(long)]
        project: String,
        /// USD cents, 1 to 1000000000.
        #[arg(long)]
        cents: u64,
        /// Why (shown to the merchant on the entry).
        #[arg(long)]
        note: String,
    },
    /// Put the project on a plan, also one merchants cannot self-select (same activation
    /// rule as POST /v1/billing/plan).
    Plan {
        /// Project id or name.
        #[arg(long)]
        project: String,
        /// Plan key from [billing].
        #[arg(long)]
        plan: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PayoutCmd {
    /// `pending_approval` -> `queued`.
    Approve {
        /// Payout id.
        payout: String,
    },
    /// `pending_approval` -> `rejected`; the funds return to available.
    Reject {
        /// Payout id.
        payout: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Mint a key (the token is printed once).
    Create {
        /// Project id or name.
        #[arg(long)]
        project: String,
        /// Key kind.
        #[arg(long, value_parser = ["checkout", "payout", "wallet"])]
        kind: String,
        /// A name for the key (shown in lists).
        #[arg(long)]
        name: Option<String>,
        /// Comma-separated scopes (default: the kind's default scopes).
        #[arg(long, value_delimiter = ',')]
        scopes: Option<Vec<String>>,
        /// Let the key sign payouts.
        #[arg(long)]
        signing_enabled: bool,
    },
    /// List a project's keys.
    List {
        /// Project id or name.
        #[arg(long)]
        project: String,
    },
    /// Revoke a key now (by id).
    Revoke {
        /// Key id.
        key: String,
    },
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    // Files 0600 and directories 0700 whatever umask we were started with.
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

/// `appliance simulate`: runs the simulation and prints its outcome (see
/// [`crate::simulate`]).
fn simulate(opts: crate::simulate::Options) -> anyhow::Result<ExitCode> {
    let started = std::time::Instant::now();
    let rep = crate::simulate::run(&opts)?;
    for f in &rep.failures {
        outln!(
            "FAILED seed {} step {} op {}: {}",
            rep.seed,
            f.step,
            f.op,
            f.what
        );
    }
    if !rep.failures.is_empty() {
        outln!("trace (last steps before the failure):");
        for l in &rep.trace {
            outln!("  {l}");
        }
    }
    let counts: Vec<String> = rep.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    eprintln!(
        "{} steps in {:.1} s; {} crashes, {} reorgs; {}",
        rep.steps,
        started.elapsed().as_secs_f64(),
        rep.crashes,
        rep.reorgs,
        counts.join(" ")
    );
    outln!(
        "seed {} steps {} digest {}",
        rep.seed,
        rep.steps,
        rep.digest
    );
    Ok(if rep.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn load_config(cli: &Cli) -> anyhow::Result<Config> {
    let mut cfg = Config::load(cli.config.as_deref())?;
    let listen = match &cli.command {
        Some(Command::Serve { listen }) => listen.as_ref().or(cli.listen.as_ref()),
        None => cli.listen.as_ref(),
        Some(_) if cli.listen.is_some() => {
            anyhow::bail!("--listen applies only to commands that serve (`--test`, `serve`)")
        }
        Some(_) => None,
    };
    if let Some(l) = listen {
        cfg.listen = l.clone();
    }
    if let Some(d) = &cli.data_dir {
        cfg.data_dir = d.clone();
    }
    Ok(cfg)
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if matches!(cli.command, Some(Command::Simulate { .. }))
        && std::env::var_os("APPLIANCE_LOG").is_none()
    {
        // A simulation's failures are its own output; the appliance's warnings about the
        // faults it injects are not.
        std::env::set_var("APPLIANCE_LOG", "error");
    }
    let cfg = load_config(&cli)?;
    crate::ops::logging::init(cfg.log_format);
    let command = match cli.command {
        None if cli.test => return serve(cfg, true),
        None => {
            eprintln!("nothing to do: use `appliance --test` or `appliance serve --config FILE` (see --help)");
            return Ok(ExitCode::from(2));
        }
        Some(command) => command,
    };
    let req = match command {
        Command::Serve { .. } => return serve(cfg, cli.test),
        Command::Init => return init(&cfg),
        Command::Simulate {
            seed,
            steps,
            keep,
            verbose,
            settle_every,
            scenario,
        } => {
            return simulate(crate::simulate::Options {
                seed,
                steps,
                keep,
                verbose,
                settle_every: settle_every.max(1),
                scenario,
            })
        }
        Command::Version => {
            outln!("appliance {}", env!("CARGO_PKG_VERSION"));
            return Ok(ExitCode::SUCCESS);
        }
        Command::Openapi => {
            let doc = crate::api::openapi::to_json(&crate::api::openapi::document());
            std::io::Write::write_all(&mut std::io::stdout().lock(), doc.as_bytes())?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Restore { from } => return restore(&cfg, &from),
        Command::Verify => Request::Verify,
        Command::Backup { out } => {
            let out = std::path::absolute(&out)?;
            Request::Backup {
                out: out.display().to_string(),
            }
        }
        Command::Payout(PayoutCmd::Approve { payout }) => Request::PayoutApprove { payout },
        Command::Payout(PayoutCmd::Reject { payout }) => Request::PayoutReject { payout },
        Command::Billing(b) => billing_request(b)?,
        Command::Project(p) => project_request(p)?,
        Command::Key(k) => key_request(k),
    };
    let is_verify = matches!(req, Request::Verify);
    let answer = run_operator(&cfg, req)?;
    print_answer(answer, is_verify)
}

/// The operator request of `appliance billing ...`.
fn billing_request(b: BillingCmd) -> anyhow::Result<Request> {
    Ok(match b {
        BillingCmd::Show { project } => Request::BillingShow { project },
        BillingCmd::Credit {
            project,
            cents,
            note,
        } => Request::BillingAdjust {
            project,
            cents: signed_cents(cents, 1)?,
            note,
        },
        BillingCmd::Debit {
            project,
            cents,
            note,
        } => Request::BillingAdjust {
            project,
            cents: signed_cents(cents, -1)?,
            note,
        },
        BillingCmd::Plan { project, plan } => Request::BillingPlan { project, plan },
    })
}

/// The operator request of `appliance project ...`.
fn project_request(p: ProjectCmd) -> anyhow::Result<Request> {
    Ok(match p {
        ProjectCmd::Create { name, mode } => Request::ProjectCreate { name, mode },
        ProjectCmd::List => Request::ProjectList,
        ProjectCmd::Show { project } => Request::ProjectShow { project },
        ProjectCmd::Set(a) => project_set(a)?,
    })
}

/// The operator request of `appliance project set ...`: `--auto-approve-threshold-cents`
/// takes cents, or `none` to clear the threshold.
fn project_set(a: SetArgs) -> anyhow::Result<Request> {
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
    Ok(Request::ProjectSet {
        project: a.project,
        set: ProjectSet {
            name: a.name,
            signing_enabled: a.signing_enabled,
            auto_approve_threshold_cents: threshold,
            clear_auto_approve_threshold: clear,
            requests_per_minute: a.requests_per_minute,
            addresses_per_day: a.addresses_per_day,
            max_pending_payouts: a.max_pending_payouts,
            merchant_name: a.merchant_name,
            merchant_logo_url: a.merchant_logo_url,
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
    })
}

/// The operator request of `appliance key ...`.
fn key_request(k: KeyCmd) -> Request {
    match k {
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
    }
}

/// Prints the operator's answer as pretty JSON; a token it carries is printed once, on its
/// own line, not again in the JSON. `appliance verify` fails when it found a violation.
fn print_answer(mut answer: Value, is_verify: bool) -> anyhow::Result<ExitCode> {
    if let Some(token) = answer
        .get("token")
        .and_then(Value::as_str)
        .map(str::to_string)
    {
        outln!("token: {token}");
        outln!("(the token is shown once; store it now)");
        if let Some(o) = answer.as_object_mut() {
            o.remove("token");
        }
    }
    outln!("{}", serde_json::to_string_pretty(&answer)?);
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

/// `--cents` with its sign, refused outside 1 to 10^9.
fn signed_cents(cents: u64, sign: i64) -> anyhow::Result<i64> {
    if cents == 0 || cents > crate::services::billing::MAX_ADJUSTMENT_CENTS {
        anyhow::bail!(
            "--cents must be from 1 to {}",
            crate::services::billing::MAX_ADJUSTMENT_CENTS
        );
    }
    Ok(sign * cents as i64)
}

/// `appliance init` (DECISIONS.md section 10). Everything is checked first (configuration,
/// passphrase present and long enough, or the existing seed unlocks with it); only then are
/// the data dir, pepper, store and seed written.
fn init(cfg: &Config) -> anyhow::Result<ExitCode> {
    use appliance_signer::Signer;
    cfg.validate()?;
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
    let exists = Signer::exists(&cfg.data_dir);
    let unlocked = if exists {
        Some(Signer::unlock(&cfg.data_dir, &pass).context("unlocking the existing master seed")?)
    } else {
        if pass.chars().count() < appliance_signer::MIN_PASSPHRASE_CHARS {
            anyhow::bail!(
                "the passphrase must have at least {} characters; nothing was written",
                appliance_signer::MIN_PASSPHRASE_CHARS
            );
        }
        None
    };
    crate::data_dir::prepare(&cfg.data_dir)?;
    crate::server::load_pepper(cfg)?;
    crate::sealing::DataKey::load_or_create(&cfg.data_dir).map_err(|e| {
        anyhow::anyhow!(
            "creating the data key {}: {}",
            cfg.data_dir.join(crate::sealing::DATA_KEY_FILE).display(),
            crate::config::io_message(&e)
        )
    })?;
    let store = crate::server::open_store(cfg, std::time::Duration::from_secs(10))?;
    let recorded = store.write_blocking(|ctx| crate::server::record_mode(ctx, "live"));
    close_store(store);
    recorded.map_err(|e| anyhow::anyhow!("recording the data dir's mode: {e:?}"))?;
    let signer = match unlocked {
        Some(s) => {
            outln!(
                "already initialised: {}",
                cfg.data_dir.join(appliance_signer::SEED_FILE).display()
            );
            s
        }
        None => {
            let s = Signer::init(&cfg.data_dir, &pass)?;
            outln!(
                "created the encrypted master seed {}",
                cfg.data_dir.join(appliance_signer::SEED_FILE).display()
            );
            s
        }
    };
    let master = signer.evm_master_address();
    outln!("evm master wallet: {}", master.to_checksum(None));
    outln!(
        "evm forwarder factory (same on every EVM chain): {}",
        appliance_chains::address::to_checksum(&appliance_chains::address::factory_address(
            &master.0 .0
        ))
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
    // A mistyped --data-dir must not become a new, empty appliance (store and pepper).
    // Only a definite "not there": a data dir we may not read goes on to the store's own
    // error, which names the path (`permission denied`).
    let absent = |p: std::path::PathBuf| matches!(p.try_exists(), Ok(false));
    if absent(cfg.store_path()) && absent(cfg.socket_path()) {
        anyhow::bail!(
            "no appliance store in {}: pass the data dir of an appliance (--data-dir), or create one with `appliance init` or `appliance --test`; nothing was created",
            cfg.data_dir.display()
        );
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(v) =
            operator::call_socket(&cfg.socket_path(), &req).map_err(anyhow::Error::msg)?
        {
            return Ok(v);
        }
        match crate::server::open_store(cfg, std::time::Duration::ZERO) {
            Ok(store) => {
                let pepper = crate::server::load_pepper(cfg)?;
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
    let background = crate::workers::background_runtime()?;
    let (closer, result) = rt.block_on(crate::server::run(
        cfg,
        test_mode,
        background.handle().clone(),
    ));
    // Dropping the runtimes drops every task's store handle (the workers' first); then the
    // writer closes the file. This runs on early failures too, so the next start needs no
    // repair.
    background.shutdown_timeout(std::time::Duration::from_secs(5));
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    crate::ops::logging::flush();
    if let Some(h) = closer {
        let _ = h.join();
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag and argument of every command has help text, and only
    /// the serving commands take `--listen`.
    #[test]
    fn every_flag_has_help_and_listen_is_only_where_something_serves() {
        fn walk(
            cmd: &clap::Command,
            path: &str,
            missing: &mut Vec<String>,
            listen: &mut Vec<String>,
        ) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
                if id == "listen" {
                    listen.push(path.to_string());
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing, listen);
            }
        }
        let cmd = <Cli as clap::CommandFactory>::command();
        let (mut missing, mut listen) = (Vec::new(), Vec::new());
        walk(&cmd, "appliance", &mut missing, &mut listen);
        assert!(missing.is_empty(), "flags without help: {missing:?}");
        assert_eq!(listen, vec!["appliance", "appliance serve"]);
    }
}
