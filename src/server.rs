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
/// another process (an operator command) holds it. Errors name the file
/// (`opening the store /var/lib/appliance/appliance.redb: permission denied`).
pub fn open_store(config: &Config, wait: std::time::Duration) -> anyhow::Result<Store> {
    let opts = StoreOptions {
        cache_size_bytes: config.storage.cache_size_mb << 20,
        quick_repair: config.storage.quick_repair,
        max_batch: config.storage.max_batch.max(1),
    };
    let path = config.store_path();
    let deadline = std::time::Instant::now() + wait;
    loop {
        match Store::open(&path, opts.clone()) {
            Ok(s) => return Ok(s),
            Err(StoreError::Locked) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(StoreError::Locked) => anyhow::bail!(
                "the data dir {} is in use by another appliance process",
                config.data_dir.display()
            ),
            Err(e) => anyhow::bail!("opening the store {}: {}", path.display(), short_error(&e)),
        }
    }
}

/// An error's text with an OS permission error said plainly.
fn short_error(e: &dyn std::fmt::Display) -> String {
    let m = e.to_string();
    if m.contains("Permission denied") || m.contains("os error 13") {
        "permission denied".into()
    } else {
        m
    }
}

/// Store meta key recording what a data dir serves: `test` (written by the first `--test`
/// start) or `live` (written by `init` and by `serve`). A backup carries it in its store;
/// `restore` refuses a test-mode backup into a live data dir.
pub const DATA_DIR_MODE_KEY: &str = "data_dir_mode";

/// The mode a store records ([`DATA_DIR_MODE_KEY`]); `None` for a store that predates it.
pub fn recorded_mode(r: &impl appliance_storage::ReadOps) -> Result<Option<String>, StoreError> {
    Ok(r.meta_get(DATA_DIR_MODE_KEY)?
        .map(|b| String::from_utf8_lossy(&b).into_owned()))
}

/// Records `mode` (`test` or `live`) in the store; `live` replaces `test`, never the reverse.
pub fn record_mode(
    ctx: &mut appliance_storage::WriteCtx<'_>,
    mode: &str,
) -> Result<(), StoreError> {
    let now = recorded_mode(ctx)?;
    if now.as_deref() == Some(mode) || (now.as_deref() == Some("live") && mode == "test") {
        return Ok(());
    }
    ctx.meta_put(DATA_DIR_MODE_KEY, mode.as_bytes())
}

/// Reads the pepper, creating the data dir and the pepper on first use; errors name the path.
pub fn load_pepper(config: &Config) -> anyhow::Result<Pepper> {
    Pepper::load_or_create(&config.data_dir).map_err(|e| {
        anyhow::anyhow!(
            "reading the pepper {}: {}",
            config.data_dir.join("pepper").display(),
            crate::config::io_message(&e)
        )
    })
}

/// Everything checked and prepared before the store is opened: the
/// configuration, the TLS files, the listen address (bound), the plain-HTTP rule and the
/// master seed (passphrase). Nothing here writes to the data dir.
struct Prepared {
    listener: tokio::net::TcpListener,
    addr: std::net::SocketAddr,
    rustls: Option<axum_server::tls_rustls::RustlsConfig>,
    signer: Option<Arc<appliance_signer::Signer>>,
    ops: crate::ops::Ops,
}

async fn prepare(config: &Config, test_mode: bool) -> anyhow::Result<Prepared> {
    config.validate()?;
    if config.webhooks.allow_private_targets {
        tracing::warn!("webhooks.allow_private_targets is ON: webhooks may target private and loopback addresses");
    }
    let ops = crate::ops::init(config)?;
    config.limits.validate().map_err(anyhow::Error::msg)?;
    for net in config
        .trusted_proxies
        .iter()
        .filter(|n| n.prefix_len() == 0)
    {
        // Every peer is then a trusted proxy: any client sets its own address with
        // X-Forwarded-For (allowlists, rate limits, the metrics' loopback rule). Allowed, as
        // behind a proxy that is the only way in, but said.
        tracing::warn!(
            trusted_proxies = %net,
            "trusted_proxies contains {net}: EVERY peer is trusted to name the client address in              X-Forwarded-For; list only your reverse proxies' addresses unless nothing else can reach this port"
        );
    }
    let rustls = match &config.tls {
        Some(tls) => Some(
            axum_server::tls_rustls::RustlsConfig::from_pem_file(&tls.cert, &tls.key)
                .await
                .map_err(|e| {
                    anyhow::anyhow!(
                        "loading TLS certificate {} and key {}: {}",
                        tls.cert.display(),
                        tls.key.display(),
                        short_error(&e)
                    )
                })?,
        ),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("binding {}: {}", config.listen, short_error(&e)))?;
    let addr = listener.local_addr()?;
    if rustls.is_none() && !test_mode && !addr.ip().is_loopback() {
        if !config.allow_plain_http {
            anyhow::bail!(
                "refusing to serve plain HTTP on the non-loopback address {addr} in live mode: \
                 configure [tls], listen on loopback, or set allow_plain_http = true behind a \
                 TLS-terminating proxy"
            );
        }
        tracing::warn!(
            %addr,
            "allow_plain_http is ON: serving PLAIN HTTP on a non-loopback address; API keys \
             and payloads cross the network unencrypted unless a TLS-terminating proxy is in front"
        );
    }
    let signer = unlock_signer(config)?;
    Ok(Prepared {
        listener,
        addr,
        rustls,
        signer,
        ops,
    })
}

/// Runs the server until SIGINT or SIGTERM. `test_mode` creates project `default` on first
/// start and prints its keys once. The background workers are spawned on `background`
/// ([`workers::background_runtime`]), the API on the calling runtime. Returns the store's
/// writer thread (join it after both runtimes are dropped so the store file is closed
/// cleanly) and the outcome: an early failure after the store opened still returns the
/// writer thread, so every exit closes the store cleanly.
pub async fn run(
    config: Config,
    test_mode: bool,
    background: tokio::runtime::Handle,
) -> (Option<std::thread::JoinHandle<()>>, anyhow::Result<()>) {
    let opened = async {
        let prepared = prepare(&config, test_mode).await?;
        let (pepper, data_key, store) = open_data_dir(&config).await?;
        anyhow::Ok((prepared, pepper, data_key, store))
    };
    let (prepared, pepper, data_key, store) = match opened.await {
        Ok(o) => o,
        Err(e) => return (None, Err(e)),
    };
    let result = serve(
        config,
        test_mode,
        store.clone(),
        pepper,
        data_key,
        prepared,
        background,
    )
    .await;
    let closer = store.shutdown();
    drop(store);
    (closer, result)
}

/// After every check in [`prepare`] passed: creates the data dir (0700) and reads or creates
/// the pepper and the data key, then opens the store (waiting up to 10 s for an operator
/// command that holds it). Errors name the file at fault.
async fn open_data_dir(
    config: &Config,
) -> anyhow::Result<(Pepper, crate::sealing::DataKey, Store)> {
    crate::data_dir::prepare(&config.data_dir)?;
    crate::data_dir::raise_open_files_limit();
    let pepper = load_pepper(config)?;
    let data_key = crate::sealing::DataKey::load_or_create(&config.data_dir).map_err(|e| {
        anyhow::anyhow!(
            "reading the data key {}: {}",
            config
                .data_dir
                .join(crate::sealing::DATA_KEY_FILE)
                .display(),
            crate::config::io_message(&e)
        )
    })?;
    let c = config.clone();
    let store =
        tokio::task::spawn_blocking(move || open_store(&c, std::time::Duration::from_secs(10)))
            .await??;
    Ok((pepper, data_key, store))
}

async fn serve(
    config: Config,
    test_mode: bool,
    store: Store,
    pepper: Pepper,
    data_key: crate::sealing::DataKey,
    prepared: Prepared,
    background: tokio::runtime::Handle,
) -> anyhow::Result<()> {
    let Prepared {
        listener,
        addr,
        rustls,
        signer,
        ops,
    } = prepared;
    let mode = if test_mode { "test" } else { "live" };
    store
        .write(move |ctx| record_mode(ctx, mode))
        .await
        .map_err(|e| anyhow::anyhow!("recording the data dir's mode: {e:?}"))?;
    if test_mode {
        bootstrap(&store, &pepper, &addr.to_string()).await?;
    }
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
    {
        // Checkout tokens written before they were sealed are sealed now (once).
        let (store, key) = (store.clone(), data_key.clone());
        match tokio::task::spawn_blocking(move || {
            crate::sealing::migrate_checkout_tokens(&store, &key)
        })
        .await?
        {
            Ok(n) if n == Default::default() => {}
            Ok(n) => tracing::info!(
                invoices = n.invoices,
                events = n.events,
                answers = n.answers,
                "sealed checkout tokens stored in clear"
            ),
            Err(e) => tracing::error!(error = %e, "sealing checkout tokens stored in clear failed"),
        }
    }
    let state = AppState::new(config.clone(), store, pepper, data_key, ops, test_mode)?;
    state.market.start();
    if let Some(signer) = &signer {
        state
            .registry
            .set_live_treasury(signer.evm_master_address().0 .0);
        outln!(
            "evm master wallet: {}",
            signer.evm_master_address().to_checksum(None)
        );
    }
    if !config.chains.is_empty() {
        let signer = signer
            .clone()
            .context("live chains are configured but no master seed is unlocked")?;
        // Started on the background runtime, so its workers' tasks (and what they spawn)
        // run there.
        let state = state.clone();
        background
            .spawn(async move { workers::chain::start(&state, signer).await })
            .await??;
    }
    let mode = if test_mode { " (test mode)" } else { "" };
    let scheme = if rustls.is_some() { "https" } else { "http" };
    // The operator socket is up before the server announces itself, so an operator command
    // run right after the "listening" line reaches it.
    let sock = config.socket_path();
    let sock_listener = operator::bind_socket(&sock).context("binding the operator socket")?;
    // Printed only once the listener is bound and TLS loaded (both done in `prepare`).
    outln!("appliance listening on {scheme}://{addr}{mode}");
    // The workers run on their own, lower-priority threads: under load the API's requests
    // win the cores, the workers keep their (smaller) share (docs/decisions.md, Runtime).
    background.spawn(workers::sim_chain::run(state.handles.clone()));
    background.spawn(workers::maintenance::run(state.handles.clone()));
    background.spawn(workers::invoices::run(state.handles.clone()));
    background.spawn(workers::billing::run(state.handles.clone()));
    background.spawn(crate::webhooks::dispatcher::run(
        state.handles.clone(),
        state.webhooks.clone(),
    ));
    {
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(e) = operator::serve_socket(state, sock_listener).await {
                tracing::error!(error = %e, "operator socket stopped");
            }
        });
    }
    let app = api::router(state.clone());
    serve_http(&config, &state, listener, app, rustls).await?;
    workers::maintenance::flush_usage(&state).await;
    workers::sim_chain::flush(&state).await;
    let _ = std::fs::remove_file(&sock);
    drop(state);
    // stdout may be gone by now (a closed pipe must not turn a clean stop into a panic).
    let _ = writeln!(std::io::stdout(), "appliance stopped");
    Ok(())
}

/// Serves the API on `listener` (HTTPS when `[tls]` is set) through [`transport::serve`]
/// until SIGINT or SIGTERM; open event streams are ended so the shutdown does not wait on them.
async fn serve_http(
    config: &Config,
    state: &AppState,
    listener: tokio::net::TcpListener,
    app: axum::Router,
    rustls: Option<axum_server::tls_rustls::RustlsConfig>,
) -> anyhow::Result<()> {
    // Loaded in `prepare`, before the store opened.
    let tls = rustls.map(|r| r.get_inner());
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
        outln!("project default (test mode) id={}", p.id);
        let now = appliance_storage::now_us();
        for k in keys.items {
            // A key that no longer validates says so.
            let state = if k.revoked_at.is_some() {
                " (revoked)"
            } else if k.expires_at.is_some_and(|e| e <= now) {
                " (expired)"
            } else {
                ""
            };
            outln!("  {} key {} id={}{state}", k.kind.as_str(), k.key_id, k.id);
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
    outln!("created project default (test mode) id={}", p.id);
    outln!("These keys are shown once; store them now.");
    for (kind, token) in &tokens {
        outln!("{} key: {}", kind.as_str(), token);
    }
    if let Some((_, wallet)) = tokens
        .iter()
        .find(|(k, _)| *k == appliance_storage::records::KeyKind::Wallet)
    {
        outln!("Try it (from another shell):");
        outln!("  curl -s http://{listen}/v1/ping -H 'Authorization: Bearer {wallet}'");
        outln!(
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
