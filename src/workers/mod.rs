//! Background workers inside the binary.
//!
//! The server runs them on their own runtime ([`background_runtime`]), whose threads run at
//! a lower OS priority than the API's, so that under load requests win the cores while the
//! workers keep progressing (docs/decisions.md, Runtime).

pub mod billing;
pub mod chain;
pub mod invoices;
pub mod maintenance;
pub mod sim_chain;

/// How much nicer than the process (nice(2) increment, clamped to 19) the background
/// runtime's threads run. Linux's scheduler weights a thread by its nice value (each step
/// about x1.25): at +10 a background thread gets about a tenth of what a request thread
/// gets of a contended core (weight 110 against 1024), and a whole core when the API is
/// idle. A weight, never a pause: a runnable background thread always gets its share, so
/// the workers cannot be starved however busy the API is.
pub const BACKGROUND_NICE: i32 = 10;

/// Worker threads of the background runtime: one per CPU like the API's runtime (each idle
/// one costs nothing; under load the scheduler's weights decide, not their number).
fn background_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// The runtime of the background workers (chain watchers and senders, the simulated
/// chain, webhook deliveries, invoice expiry, billing, maintenance): threads named
/// `appliance-bg`, each set to the process's nice value plus [`BACKGROUND_NICE`] as it starts
/// (its blocking-pool threads too: everything it runs is background work). Store writes
/// still go through the one store writer thread, at the process's priority.
///
/// Shut it down before joining the store writer (its tasks hold store handles).
pub fn background_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let nice = background_nice(rustix::process::getpriority_process(None)?);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(background_threads())
        .thread_name("appliance-bg")
        .on_thread_start(move || {
            // Per thread on Linux (the nice value is a thread's attribute). Set, not
            // added: a blocking-pool thread started by a background thread inherits its
            // value already. Failing leaves the thread at the process's priority: the
            // workers still run, only without the API's precedence.
            if let Err(e) = rustix::process::setpriority_process(None, nice) {
                tracing::warn!(error = %e, "could not lower a background thread's priority");
            }
        })
        .enable_all()
        .build()
}

/// The nice value of the background threads for a process at nice `process`.
fn background_nice(process: i32) -> i32 {
    (process + BACKGROUND_NICE).clamp(-20, 19)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_threads_run_nicer_than_the_process_and_no_nicer_than_19() {
        assert_eq!(background_nice(0), 10);
        assert_eq!(background_nice(5), 15);
        assert_eq!(background_nice(15), 19);
        assert_eq!(background_nice(-20), -10);
    }

    #[test]
    fn every_background_thread_has_the_same_priority() {
        let base = rustix::process::getpriority_process(None).unwrap();
        let rt = background_runtime().unwrap();
        // A worker thread, and a blocking-pool thread started from it (which inherits the
        // worker's value before its own start hook runs).
        let (worker, blocking) = rt.block_on(async {
            tokio::spawn(async {
                let w = rustix::process::getpriority_process(None).unwrap();
                let b = tokio::task::spawn_blocking(|| {
                    rustix::process::getpriority_process(None).unwrap()
                })
                .await
                .unwrap();
                (w, b)
            })
            .await
            .unwrap()
        });
        assert_eq!(worker, background_nice(base));
        assert_eq!(blocking, background_nice(base));
        rt.shutdown_background();
    }
}
