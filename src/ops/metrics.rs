//! Prometheus metrics: the `metrics` facade with the Prometheus text
//! renderer installed once per serving process.
//!
//! Families (all prefixed `appliance_`):
//! - `http_requests_total{method,route,status}` and
//!   `http_request_duration_seconds{method,route}` (histogram; `route` is the matched route
//!   template such as `/v1/customers/{id}`, or `unmatched`).
//! - `store_commit_duration_seconds` and `store_batch_size` (histograms, recorded by the
//!   store writer in `appliance-storage`), `store_commits_total{result}`.
//! - `webhook_outbox_depth` (open deliveries, read at scrape), and
//!   `webhook_deliveries_total{outcome}` (`succeeded`, `http_error`, `transport_error`).
//! - `chain_head_height{chain,mode}`, `chain_lag_blocks{chain,mode}` (head minus the last
//!   block processed; `mode` is `live` for a configured node, `test` for the simulated chain), `chain_last_error_age_seconds{chain}` (only once a node call failed),
//!   `chain_last_success_age_seconds{chain}`.
//! - `payouts_pending` (payouts not yet final over every project, read at scrape).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::Project;
use appliance_storage::{ReadOps, ScanOps};

use crate::handles::Handles;

/// The method as logged and counted, from a closed set: the methods of RFC 9110 and PATCH,
/// anything else (a client may send any token, up to the header limit) `other`, so a
/// client cannot grow the metrics or the log lines by inventing methods.
pub fn method_label(m: &axum::http::Method) -> &'static str {
    match *m {
        axum::http::Method::GET => "GET",
        axum::http::Method::HEAD => "HEAD",
        axum::http::Method::POST => "POST",
        axum::http::Method::PUT => "PUT",
        axum::http::Method::PATCH => "PATCH",
        axum::http::Method::DELETE => "DELETE",
        axum::http::Method::OPTIONS => "OPTIONS",
        axum::http::Method::CONNECT => "CONNECT",
        axum::http::Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// The renderer of the `metrics` facade's recorder. The facade's recorder is process-wide by
/// the crate's design (`metrics::set_global_recorder`), so its handle is too; everything
/// else the operations endpoints keep lives in `Handles` (`ops::Ops`, the registry).
static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Latency buckets, seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Store batch size buckets, requests per commit (max_batch defaults to 512).
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
/// The outbox is counted up to this many open deliveries (the gauge saturates there).
pub const OUTBOX_COUNT_CAP: usize = 1_000_000;

/// Installs the process-wide recorder (first call only) and its upkeep task. Must run
/// inside the Tokio runtime.
pub fn install() -> anyhow::Result<()> {
    if HANDLE.get().is_some() {
        return Ok(());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets(LATENCY_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full("appliance_store_batch_size".into()),
            BATCH_BUCKETS,
        )?
        .install_recorder()?;
    describe();
    let _ = HANDLE.set(handle.clone());
    tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_secs(5));
        loop {
            t.tick().await;
            handle.run_upkeep();
        }
    });
    Ok(())
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        "appliance_http_requests_total",
        "HTTP requests answered, by method, route template and status."
    );
    describe_histogram!(
        "appliance_http_request_duration_seconds",
        Unit::Seconds,
        "Time to the response head, by method and route template."
    );
    describe_histogram!(
        "appliance_store_commit_duration_seconds",
        Unit::Seconds,
        "Duration of one store write transaction (run and durable commit)."
    );
    describe_histogram!(
        "appliance_store_batch_size",
        "Requests committed together in one store transaction."
    );
    describe_counter!(
        "appliance_store_commits_total",
        "Store write transactions by result (ok or error)."
    );
    describe_gauge!(
        "appliance_webhook_outbox_depth",
        "Webhook deliveries waiting to be sent or retried."
    );
    describe_counter!(
        "appliance_webhook_deliveries_total",
        "Webhook delivery attempts by outcome (succeeded, http_error, transport_error)."
    );
    describe_gauge!(
        "appliance_chain_head_height",
        "Latest block height the chain's node reported."
    );
    describe_gauge!(
        "appliance_chain_lag_blocks",
        "Blocks between the node's head and the last block the watcher processed."
    );
    describe_gauge!(
        "appliance_chain_last_error_age_seconds",
        Unit::Seconds,
        "Seconds since a node call of the chain last failed."
    );
    describe_gauge!(
        "appliance_chain_last_success_age_seconds",
        Unit::Seconds,
        "Seconds since the chain's node was last reached."
    );
    describe_gauge!(
        "appliance_payouts_pending",
        "Payouts not yet final (awaiting approval, queued, signing or submitted)."
    );
}

/// One answered HTTP request. The handles of a (route, method, status) are kept per thread
/// once the recorder is installed: registering them again each time costs a few
/// allocations and a lookup in the recorder's map per request.
pub fn http_request(method: &axum::http::Method, route: &str, status: u16, latency: Duration) {
    type Handles = Vec<(&'static str, u16, metrics::Counter, metrics::Histogram)>;
    /// Handles kept for at most this many (method, status) pairs per route and thread.
    const PER_ROUTE: usize = 64;
    thread_local! {
        static CACHE: std::cell::RefCell<std::collections::HashMap<String, Handles>> =
            std::cell::RefCell::default();
    }
    // Every label comes from a closed set: the method from
    // [`method_label`], the route is a template of the router or `unmatched`, the
    // status one the appliance answered.
    let method = method_label(method);
    let register = || {
        let route = route.to_string();
        let counter = metrics::counter!(
            "appliance_http_requests_total",
            "method" => method,
            "route" => route.clone(),
            "status" => status.to_string()
        );
        let histogram = metrics::histogram!(
            "appliance_http_request_duration_seconds",
            "method" => method,
            "route" => route
        );
        (counter, histogram)
    };
    let seconds = latency.as_secs_f64();
    // No recorder yet: handles registered now would stay no-ops, so none are kept (and
    // none were: the cache is only filled once the recorder is installed).
    let cache_it = HANDLE.get().is_some();
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        let cached = cache_it.then(|| cache.get(route)).flatten();
        if let Some((_, _, c, h)) = cached.and_then(|handles| {
            handles
                .iter()
                .find(|(m, s, _, _)| *s == status && *m == method)
        }) {
            c.increment(1);
            h.record(seconds);
            return;
        }
        let (c, h) = register();
        c.increment(1);
        h.record(seconds);
        if cache_it {
            let handles = cache.entry(route.to_string()).or_default();
            if handles.len() < PER_ROUTE {
                handles.push((method, status, c, h));
            }
        }
    });
}

/// One webhook delivery attempt finished: `status` is the receiver's HTTP status, if any.
pub fn webhook_attempt(succeeded: bool, status: Option<u16>) {
    let outcome = match (succeeded, status) {
        (true, _) => "succeeded",
        (false, Some(_)) => "http_error",
        (false, None) => "transport_error",
    };
    metrics::counter!("appliance_webhook_deliveries_total", "outcome" => outcome).increment(1);
}

/// The node's head and the last block processed; `mode` is `live` (a configured node) or
/// `test` (test mode's simulated chain).
pub fn chain_position(chain: &str, mode: &'static str, head: u64, processed: u64) {
    let chain = chain.to_string();
    metrics::gauge!("appliance_chain_head_height", "chain" => chain.clone(), "mode" => mode)
        .set(head as f64);
    metrics::gauge!("appliance_chain_lag_blocks", "chain" => chain, "mode" => mode)
        .set(head.saturating_sub(processed) as f64);
}

/// The metrics text (Prometheus exposition format 0.0.4), with the gauges that are read
/// from the store at scrape time refreshed first. `None` when no recorder is installed.
pub async fn render(state: &Handles) -> Option<String> {
    let handle = HANDLE.get()?;
    let now = Instant::now();
    for c in state.registry.chains.iter() {
        let h = c.contact();
        if let Some(t) = h.last_error {
            metrics::gauge!("appliance_chain_last_error_age_seconds", "chain" => c.id())
                .set(now.duration_since(t).as_secs_f64());
        }
        if let Some(t) = h.last_success {
            metrics::gauge!("appliance_chain_last_success_age_seconds", "chain" => c.id())
                .set(now.duration_since(t).as_secs_f64());
        }
    }
    let counts = state
        .store
        .read(move |r| {
            let mut pending = 0u64;
            for p in r.all::<Project>()? {
                pending += r.count_of(IndexTag::PayoutsOpen, p.id)?;
            }
            let due = index::prefix(IndexTag::WebhookDeliveriesDue, uuid::Uuid::nil(), &[]);
            let outbox = r.count_prefix(&due, OUTBOX_COUNT_CAP)?;
            Ok((pending, outbox))
        })
        .await;
    match counts {
        Ok((pending, outbox)) => {
            metrics::gauge!("appliance_payouts_pending").set(pending as f64);
            metrics::gauge!("appliance_webhook_outbox_depth").set(outbox as f64);
        }
        Err(e) => tracing::warn!(error = %e, "reading metrics gauges from the store failed"),
    }
    Some(handle.render())
}
