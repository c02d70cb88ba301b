//! Store-level write benchmark: N concurrent writers, each committing "create a customer and
//! append its event" jobs through the group-commit writer, for a fixed time. Prints
//! requests/s, commits/s, mean batch size and latency percentiles. Isolates the store from
//! HTTP: `cargo run --release -p appliance-storage --example write_bench -- [writers] [seconds] [quick_repair]`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use appliance_storage::records::Customer;
use appliance_storage::{Store, StoreOptions};
use uuid::Uuid;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let writers: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let quick_repair = args.get(3).is_some_and(|s| s == "quick_repair");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        &dir.path().join("bench.redb"),
        StoreOptions {
            quick_repair,
            ..Default::default()
        },
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let project = Uuid::now_v7();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let lat = rt.block_on(async {
        let mut handles = Vec::new();
        for _ in 0..writers {
            let (store, done) = (store.clone(), done.clone());
            handles.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    store
                        .write(move |ctx| {
                            let c = Customer {
                                id: Uuid::now_v7(),
                                project_id: project,
                                reference_id: Some(Uuid::new_v4().to_string()),
                                email: None,
                                status: appliance_storage::records::CustomerStatus::Active,
                                metadata: serde_json::json!({}),
                                created_at: ctx.now_us(),
                            };
                            ctx.put(&c)?;
                            ctx.append_event(
                                project,
                                false,
                                "customer.created",
                                &c.id.to_string(),
                                serde_json::json!({"id": c.id}),
                            )?;
                            Ok::<_, appliance_storage::StoreError>(())
                        })
                        .await
                        .unwrap();
                    lat.push(t.elapsed());
                    done.fetch_add(1, Ordering::Relaxed);
                }
                lat
            }));
        }
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.unwrap());
        }
        all
    });
    let mut lat = lat;
    lat.sort();
    let n = done.load(Ordering::Relaxed);
    let pct =
        |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)].as_secs_f64() * 1000.0;
    println!(
        "writers {writers} quick_repair {quick_repair}: {} req/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        n / seconds,
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
}
