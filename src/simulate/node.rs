//! The appliance under simulation: its real store (redb on a file in a temporary data dir),
//! its real state and HTTP API (the router, called in process, as a merchant's client calls
//! it over the network) and its real chain workers, run as steps the harness schedules.
//!
//! A crash drops all of it: the store is halted (nothing more is written), the process state,
//! caches and worker memories are dropped, and a new [`Node`] opens the same file, as a
//! restarted process would.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use appliance_signer::Signer;
use appliance_storage::Store;

use crate::config::Config;
use crate::services::chains::AdapterHealth;
use crate::state::AppState;
use crate::workers::chain::waiting::Waiting;
use crate::workers::chain::watcher::{watch_step, Watched};
use crate::workers::chain::{set_health, ChainWorker, Master, WorkScope};

use super::world::World;

/// Most watcher passes one worker step runs before it gives the sender its turn.
const MAX_WATCH_PASSES: usize = 50;

/// One chain's worker and what it keeps between passes.
pub struct Worker {
    pub w: ChainWorker,
    watched: Watched,
    checked: bool,
    waiting: Waiting,
    /// Whether the node was reached since this process started (the chain is `paused`
    /// until then).
    reached: bool,
}

/// What one worker step did.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkOutcome {
    /// The watcher followed the chain up to the head it read, with every call answered.
    pub caught_up: bool,
    /// A watcher or sender call failed (node error, crash).
    pub failed: bool,
}

/// The running appliance.
pub struct Node {
    pub state: AppState,
    router: axum::Router,
    pub workers: BTreeMap<&'static str, Worker>,
    master: Master,
}

/// An API answer: status and JSON body (`Value::Null` for an empty or non-JSON body).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    pub fn str(&self, field: &str) -> Option<String> {
        self.body.get(field)?.as_str().map(str::to_string)
    }
}

impl Node {
    /// Opens the data dir of `config` (store, pepper, data key) and builds the state, the
    /// router and one chain worker per chain of `world`.
    pub async fn start(
        config: &Config,
        signer: Arc<Signer>,
        world: &World,
    ) -> anyhow::Result<Node> {
        crate::data_dir::prepare(&config.data_dir)?;
        let pepper = crate::auth::Pepper::load_or_create(&config.data_dir)?;
        let data_key = crate::sealing::DataKey::load_or_create(&config.data_dir)?;
        let c = config.clone();
        let store = tokio::task::spawn_blocking(move || {
            crate::server::open_store(&c, std::time::Duration::from_secs(10))
        })
        .await??;
        store
            .write(|ctx| crate::server::record_mode(ctx, "live"))
            .await
            .map_err(|e| anyhow!("recording the data dir's mode: {e:?}"))?;
        let state = AppState::new(
            config.clone(),
            store.clone(),
            pepper,
            data_key,
            crate::ops::Ops::default(),
            true,
        )?;
        let master = Master::of(signer.clone());
        state
            .registry
            .set_live_treasury(signer.evm_master_address().0 .0);
        let mut workers = BTreeMap::new();
        for (id, cc) in &config.chains {
            let chain = state
                .registry
                .chain(id)
                .ok_or_else(|| anyhow!("unknown chain {id}"))?;
            let client = world.client(id);
            chain.set_client(client.clone());
            let mut w = ChainWorker::new(&state.registry, id, client, WorkScope::Live)?;
            w.poll = std::time::Duration::from_millis(cc.poll_interval_ms);
            w.replace_after_ms = cc.replace_after_ms;
            w.start_block = cc.start_block;
            w.sweep_threshold_usd_cents = cc.sweep_threshold_usd_cents.unwrap_or(0);
            workers.insert(
                chain.id(),
                Worker {
                    w,
                    watched: Watched::default(),
                    checked: false,
                    waiting: Waiting::default(),
                    reached: false,
                },
            );
        }
        world.set_store(Some(store));
        let router = crate::api::router(state.clone());
        Ok(Node {
            state,
            router,
            workers,
            master,
        })
    }

    /// The store (for the harness's own reads).
    pub fn store(&self) -> &Store {
        &self.state.store
    }

    /// Stops the process as a crash would: the store refuses every further write, the
    /// state and the workers' memories are dropped, and the store file is closed (what was
    /// committed stays, nothing else). Returns once the file can be opened again.
    pub async fn crash(self, world: &World) {
        let store = self.state.store.clone();
        store.halt();
        world.set_store(None);
        drop(self);
        let closer = store.shutdown();
        drop(store);
        if let Some(t) = closer {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }

    /// A `POST` of `body` with `key`, no idempotency key ([`Node::call`]).
    pub async fn post(
        &self,
        path: &str,
        key: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Answer> {
        self.call(Method::POST, path, Some(key), body, None).await
    }

    /// One API request as a client sends it: `key` as the bearer token, `body` as JSON, an
    /// `Idempotency-Key` when given.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> anyhow::Result<Answer> {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(k) = key {
            req = req.header("authorization", format!("Bearer {k}"));
        }
        if let Some(k) = idempotency_key {
            req = req.header("idempotency-key", k);
        }
        let body = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Body::from(serde_json::to_vec(b)?)
            }
            None => Body::empty(),
        };
        let mut req = req.body(body)?;
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000))));
        let resp = self
            .router
            .clone()
            .oneshot(req)
            .await
            .map_err(|e| anyhow!("router: {e}"))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| anyhow!("reading the answer: {e}"))?
            .to_bytes();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer { status, body })
    }

    /// An operator command, as `appliance project ...` runs it through the socket.
    pub async fn operator(&self, req: crate::operator::Request) -> anyhow::Result<Value> {
        let (store, pepper, config) = (
            self.state.store.clone(),
            self.state.pepper.clone(),
            self.state.config.clone(),
        );
        let (v, changed) = tokio::task::spawn_blocking(move || {
            crate::operator::execute(&store, &pepper, &config, req)
        })
        .await
        .context("operator command")?
        .map_err(|e| anyhow!(e))?;
        if changed {
            self.state.reload_cache();
        }
        Ok(v)
    }

    /// One step of chain `chain`'s worker: watcher passes until it has caught up (at most
    /// [`MAX_WATCH_PASSES`]), then one sender pass, reporting health as the live loops do.
    pub async fn work(&mut self, chain: &str) -> WorkOutcome {
        let Some(wk) = self.workers.get_mut(chain) else {
            return WorkOutcome::default();
        };
        let mut out = WorkOutcome::default();
        for _ in 0..MAX_WATCH_PASSES {
            match watch_step(&self.state, &wk.w, &mut wk.checked, &mut wk.watched).await {
                Ok(done) => {
                    wk.reached = true;
                    set_health(&self.state, &wk.w, AdapterHealth::Healthy);
                    if done {
                        out.caught_up = true;
                        break;
                    }
                }
                Err(e) => {
                    out.failed = true;
                    let h = if wk.reached {
                        AdapterHealth::Failing(crate::workers::chain::note(&e))
                    } else {
                        AdapterHealth::Unreached(crate::services::chains::CONNECTING.into())
                    };
                    set_health(&self.state, &wk.w, h);
                    tracing::debug!(chain, error = %crate::workers::chain::clean(&e), "simulated watcher pass failed");
                    break;
                }
            }
        }
        if let Err(e) = crate::workers::chain::sender::send_step(
            &self.state,
            &wk.w,
            &self.master,
            &mut wk.waiting,
        )
        .await
        {
            out.failed = true;
            tracing::debug!(chain, error = %crate::workers::chain::clean(&e), "simulated sender pass failed");
        }
        out
    }

    /// The invoice expiry worker's pass.
    pub async fn expire_invoices(&self) -> anyhow::Result<usize> {
        crate::workers::invoices::pass(&self.state).await
    }

    /// The billing worker's pass.
    pub async fn billing_pass(&self) -> anyhow::Result<usize> {
        crate::workers::billing::pass(&self.state).await
    }
}
