//! Starting and stopping a server: store, key cache, workers, operator socket, HTTP(S).

use std::sync::Arc;

use std::io::Write;

use anyhow::Context;

use appliance_storage::{Store, StoreError, StoreOptions, WriteError};

use crate::auth::Pepper;
use crate::config::Config;
use crate::services::projects;
use crate::state::AppState;
use crate::{api, operator, transport, workers};

/// Opens the data dir's store with the configured options, waiting up to `wait` while
/// another process (an operator command) holds it.
pub fn open_store(config: &Config, wait: std::time::Duration) -> anyhow::Result<Store> {
    let opts = StoreOptions {
        cache_size_bytes: config.storage.cache_size_mb << 20,
        quick_repair: config.storage.quick_repair,
        max_batch: config.storage.max_batch.max(1),
    };
    let deadline = std::time::Instant::now() + wait;
    loop {
        match Store::open(&config.store_path(), opts.clone()) {
            Ok(s) => return Ok(s),
            Err(StoreError::Locked) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(StoreError::Locked) => anyhow::bail!(
                "the data dir {} is in use by another appliance process",
                config.data_dir.display()
            ),
            Err(e) => return Err(e).context("opening the store"),
        }
    }
}

/// Runs the server until SIGINT or SIGTERM. `test_mode` creates project `default` on first
/// start and prints its keys once. Returns the store's writer thread: join it after the
/// runtime is dropped so the store file is closed cleanly.
pub async fn run(
    config: Config,
    test_mode: bool,
) -> anyhow::Result<Option<std::thread::JoinHandle<()>>> {
    if config.webhooks.allow_private_targets {
        tracing::warn!("webhooks.allow_private_targets is ON: webhooks may target private and loopback addresses");
    }
    config.webhooks.validate().map_err(anyhow::Error::msg)?;
    crate::ops::init(&config)?;
    config.limits.validate().map_err(anyhow::Error::msg)?;
    crate::data_dir::prepare(&config.data_dir)?;
    crate::data_dir::raise_open_files_limit();
    let pepper = Pepper::load_or_create(&config.data_dir).context("reading the pepper")?;
    let data_key = crate::sealing::DataKey::load_or_create(&config.data_dir)
        .context("reading the data key")?;
    let store = {
        let c = config.clone();
        tokio::task::spawn_blocking(move || open_store(&c, std::time::Duration::from_secs(10)))
            .await??
    };
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    if test_mode {
        bootstrap(&store, &pepper, &addr.to_string()).await?;
    }
    let signer = unlock_signer(&config)?;
    {
        // Webhook secrets written before they were sealed are sealed now.
        let (store, key) = (store.clone(), data_key.clone());
        match tokio::task::spawn_blocking(move || {
            crate::sealing::migrate_webhook_secrets(&store, &key)
        })
        .await?
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(endpoints = n, "sealed webhook secrets stored in clear"),
            Err(e) => tracing::error!(error = %e, "sealing webhook secrets stored in clear failed"),
        }
    }
    let state = AppState::new(config.clone(), store, pepper, data_key)?;
    if let Some(signer) = &signer {
        state
            .registry
            .set_live_treasury(signer.evm_master_address().0 .0);
        println!(
            "evm master wallet: {}",
            signer.evm_master_address().to_checksum(None)
        );
    }
    if !config.chains.is_empty() {
        let signer = signer
            .clone()
            .context("live chains are configured but no master seed is unlocked")?;
        workers::evm::start(&state, signer).await?;
    }
    let mode = if test_mode { " (test mode)" } else { "" };
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    // The operator socket is up before the server announces itself, so an operator command
    // run right after the "listening" line reaches it.
    let sock = config.socket_path();
    let sock_listener = operator::bind_socket(&sock).context("binding the operator socket")?;
    println!("appliance listening on {scheme}://{addr}{mode}");
    tokio::spawn(workers::sim_chain::run(state.clone()));
    tokio::spawn(workers::maintenance::run(state.clone()));
    tokio::spawn(crate::webhooks::dispatcher::run(state.clone()));
    {
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(e) = operator::serve_socket(state, sock_listener).await {
                tracing::error!(error = %e, "operator socket stopped");
            }
        });
    }
    let app = api::router(state.clone());
    serve_http(&config, &state, listener, app).await?;
    workers::maintenance::flush_usage(&state).await;
    let _ = std::fs::remove_file(&sock);
    let closer = state.store.shutdown();
    drop(state);
    // stdout may be gone by now (a closed pipe must not turn a clean stop into a panic).
    let _ = writeln!(std::io::stdout(), "appliance stopped");
    Ok(closer)
}

/// Serves the API on `listener` (HTTPS when `[tls]` is set) through [`transport::serve`]
/// until SIGINT or SIGTERM; open event streams are ended so the shutdown does not wait on them.
async fn serve_http(
    config: &Config,
    state: &AppState,
    listener: tokio::net::TcpListener,
    app: axum::Router,
) -> anyhow::Result<()> {
    let tls = match &config.tls {
        Some(tls) => Some(
            axum_server::tls_rustls::RustlsConfig::from_pem_file(&tls.cert, &tls.key)
                .await
                .context("loading TLS certificate and key")?
                .get_inner(),
        ),
        None => None,
    };
    let s2 = state.clone();
    let stop = async move {
        shutdown_signal().await;
        s2.webhooks.shutdown();
    };
    transport::serve(
        listener,
        app,
        tls,
        transport::Settings::from_limits(&config.limits),
        stop,
    )
    .await?;
    Ok(())
}

/// Unlocks the master seed when one exists or live chains are configured (they need it),
/// and records the EVM master wallet for address derivation (DECISIONS.md section 10).
pub fn unlock_signer(config: &Config) -> anyhow::Result<Option<Arc<appliance_signer::Signer>>> {
    use appliance_signer::Signer;
    let exists = Signer::exists(&config.data_dir);
    if !exists && config.chains.is_empty() {
        return Ok(None);
    }
    if !exists {
        anyhow::bail!(
            "no master seed in {}: run `appliance init --data-dir {}` first",
            config.data_dir.display(),
            config.data_dir.display()
        );
    }
    let pass = appliance_signer::read_passphrase(
        config.signing.passphrase_env.as_deref(),
        config.signing.passphrase_file.as_deref(),
    )?;
    let signer = Signer::unlock(&config.data_dir, &pass).context("unlocking the master seed")?;
    Ok(Some(Arc::new(signer)))
}

/// First start of `--test`: project `default` and its three keys, printed once.
async fn bootstrap(store: &Store, pepper: &Pepper, listen: &str) -> anyhow::Result<()> {
    let existing = store
        .read(|r| Ok(projects::find(r, "default")))
        .await?
        .map_err(|e| anyhow::anyhow!(e))?;
    if let Some(p) = existing {
        let keys = store
            .read(move |r| {
                use appliance_storage::ReadOps;
                r.list::<appliance_storage::records::ApiKey>(
                    &appliance_storage::index::prefix(
                        appliance_storage::index::IndexTag::ApiKeys,
                        p.id,
                        &[],
                    ),
                    None,
                    100,
                    |_| true,
                )
            })
            .await?;
        println!("project default (test mode) id={}", p.id);
        for k in keys.items {
            println!("  {} key {} id={}", k.kind.as_str(), k.key_id, k.id);
        }
        return Ok(());
    }
    let pepper = Arc::new(pepper.clone());
    let (p, tokens) = store
        .write(move |ctx| projects::bootstrap_test(ctx, &pepper))
        .await
        .map_err(|e| match e {
            WriteError::Rejected(e) => anyhow::anyhow!(e),
            WriteError::Store(s) => anyhow::anyhow!(s),
        })?;
    println!("created project default (test mode) id={}", p.id);
    println!("These keys are shown once; store them now.");
    for (kind, token) in &tokens {
        println!("{} key: {}", kind.as_str(), token);
    }
    if let Some((_, wallet)) = tokens
        .iter()
        .find(|(k, _)| *k == appliance_storage::records::KeyKind::Wallet)
    {
        println!("Try it (from another shell):");
        println!("  curl -s http://{listen}/v1/ping -H 'Authorization: Bearer {wallet}'");
        println!(
            "  curl -s http://{listen}/v1/customers -H 'Authorization: Bearer {wallet}' -H 'Content-Type: application/json' -d '{{\"reference_id\":\"user-1\"}}'"
        );
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
