//! The appliance's embedded store: one redb file holding every table, the double-entry
//! ledger, the event log and idempotency records.
//!
//! All mutations go through one writer thread ([`Store::write`]). The writer drains whatever
//! requests are queued, runs each as a closure on the same write transaction and commits them
//! together with `Durability::Immediate` and two-phase commit: one fsync is shared by the
//! batch (group commit) and no caller hears back before its changes are durable. A closure
//! that returns an error before writing anything is simply left out of the batch; one that
//! fails after writing poisons the batch, which is aborted whole (nothing half-written).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use appliance_storage::{Store, StoreOptions};
//! let store = Store::open(std::path::Path::new("/tmp/demo.redb"), StoreOptions::default())?;
//! let n: u64 = store.write(|ctx| Ok::<_, std::convert::Infallible>(ctx.now_us() as u64)).await?;
//! # let _ = n; Ok(()) }
//! ```

pub mod backup;
pub mod chain_state;
pub mod codec;
mod ctx;
mod ctx_cache;
mod ctx_state;
pub mod event_runs;
mod held;
pub mod id_runs;
pub mod index;
pub mod ledger;
mod migrations;
mod open_tables;
mod read_tables;
pub mod records;
pub mod schema;
pub mod sources;
mod table_reads;
pub mod verify;

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod migrate_tests;
#[cfg(test)]
mod test_support;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

use redb::{Database, Durability, ReadableDatabase};
use tokio::sync::{broadcast, mpsc, oneshot};

pub use chain_state::ChainStateOps;
pub use ctx::{
    Compact, CompactRow, EncodedRow, KeyRange, LogFilter, Page, ReadCtx, ReadOps, Reader, ScanOps,
    ValueOps, WriteCtx,
};
pub use ctx_state::Delta;

/// Errors of the store itself (never a business rule).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage: {0}")]
    Redb(#[from] redb::Error),
    #[error("stored value is corrupt: {0}")]
    Corrupt(String),
    #[error("the data store is already opened by another process")]
    Locked,
    #[error("the store writer has stopped")]
    WriterGone,
    #[error("the batch was aborted because another request in it failed mid-write")]
    BatchAborted,
    #[error("schema version {found} is newer than this build supports ({supported})")]
    SchemaTooNew { found: u32, supported: u32 },
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

macro_rules! redb_from {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self { StoreError::Redb(e.into()) }
        }
    )*};
}
redb_from!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError,
    redb::SetDurabilityError
);

/// Result of [`Store::write`]: the closure's own error, or the store's.
#[derive(Debug, thiserror::Error)]
pub enum WriteError<E> {
    /// The closure refused (nothing it did was written).
    #[error("rejected")]
    Rejected(E),
    /// The store failed; the change is not committed.
    #[error(transparent)]
    Store(Arc<StoreError>),
}

/// Tuning of [`Store::open`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// redb page cache, bytes.
    pub cache_size_bytes: usize,
    /// Save allocator state on every commit so that reopening after a crash is instant
    /// (slower commits; see PERFORMANCE.md).
    pub quick_repair: bool,
    /// Most requests committed together in one transaction.
    pub max_batch: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_size_bytes: 256 << 20,
            quick_repair: false,
            max_batch: 512,
        }
    }
}

/// What a committed batch wrote that others may want to hear about.
#[derive(Debug, Clone, Default)]
pub struct CommitNotice {
    /// (project, sequence) of every event appended.
    pub events: Vec<(uuid::Uuid, u64)>,
}

/// A row a committed batch wrote or deleted through [`WriteCtx::put`] /
/// [`WriteCtx::delete`], or a project's test clock ([`WriteCtx::test_clock_set`]): what
/// [`Store::on_commit`] hooks hear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touched {
    /// The row's type (`TypeId::of::<Invoice>()`); see [`Touched::is`] and
    /// [`Touched::is_test_clock`].
    pub kind: std::any::TypeId,
    /// The row's id (a project's id for its test clock).
    pub id: uuid::Uuid,
    /// The row's project.
    pub project: uuid::Uuid,
    /// [`records::Row::parent_id`] of the row as written (a deposit's invoice).
    pub parent: Option<uuid::Uuid>,
    /// [`records::Row::parent_id`] of the row it replaced, when that differs.
    pub old_parent: Option<uuid::Uuid>,
}

/// The `kind` of [`Touched`] for a project's test clock.
enum TestClockMarker {}

impl Touched {
    pub(crate) fn row<R: records::Row + 'static>(row: &R, old_parent: Option<uuid::Uuid>) -> Self {
        let parent = row.parent_id();
        Touched {
            kind: std::any::TypeId::of::<R>(),
            id: row.id(),
            project: row.project_id(),
            parent,
            old_parent: old_parent.filter(|p| Some(*p) != parent),
        }
    }

    pub(crate) fn test_clock(project: uuid::Uuid) -> Self {
        Touched {
            kind: std::any::TypeId::of::<TestClockMarker>(),
            id: project,
            project,
            parent: None,
            old_parent: None,
        }
    }

    /// Whether this is a row of type `R`.
    pub fn is<R: 'static>(&self) -> bool {
        self.kind == std::any::TypeId::of::<R>()
    }

    /// Whether this is a project's test clock (`id` and `project` are the project).
    pub fn is_test_clock(&self) -> bool {
        self.is::<TestClockMarker>()
    }
}

/// A hook run by the writer thread after each commit, before any request of the batch
/// hears back ([`Store::on_commit`]).
pub type CommitHook = Arc<dyn Fn(&[Touched]) + Send + Sync>;

type Completion = Box<dyn FnOnce(Result<(), Arc<StoreError>>) + Send>;
struct JobOutcome {
    poisoned: bool,
    complete: Completion,
}
type Job = Box<dyn for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> JobOutcome + Send>;

type Hooks = Arc<std::sync::RwLock<Vec<CommitHook>>>;

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    jobs: mpsc::Sender<Job>,
    commits: broadcast::Sender<CommitNotice>,
    hooks: Hooks,
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// Set by [`Store::halt`]: every write from then on is refused unrun.
    halted: Arc<std::sync::atomic::AtomicBool>,
    writer: Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl Store {
    /// Opens (or creates) the store file, runs pending migrations and starts the writer.
    ///
    /// Errors: [`StoreError::Locked`] when another process has the file open.
    pub fn open(path: &Path, opts: StoreOptions) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut builder = Database::builder();
        builder.set_cache_size(opts.cache_size_bytes);
        builder.set_repair_callback(|s| {
            tracing::warn!(
                progress = s.progress(),
                "repairing store after unclean shutdown"
            );
        });
        let db = match builder.create(path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(StoreError::Locked),
            Err(e) => return Err(e.into()),
        };
        let db = Arc::new(db);
        migrations::init_schema(&db)?;
        let (jobs, rx) = mpsc::channel::<Job>(16_384);
        let (commits, _) = broadcast::channel(4096);
        let writer_db = db.clone();
        let writer_commits = commits.clone();
        let hooks: Hooks = Arc::default();
        let writer_hooks = hooks.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer_stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                writer_loop(
                    writer_db,
                    rx,
                    writer_commits,
                    writer_hooks,
                    opts,
                    writer_stop,
                )
            })?;
        Ok(Store {
            db,
            jobs,
            commits,
            hooks,
            stop,
            halted: Arc::default(),
            writer: Arc::new(std::sync::Mutex::new(Some(handle))),
        })
    }

    /// Stops the writer once the queued jobs are committed and closes the file cleanly as
    /// soon as every other handle to the store is dropped (so the next open needs no
    /// repair). Join the returned thread after dropping the other handles (for a server:
    /// after its runtime is gone). Later writes fail with [`StoreError::WriterGone`].
    pub fn shutdown(&self) -> Option<std::thread::JoinHandle<()>> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wake the writer if it is idle.
        let (job, _rx) = make_job(|_| Ok::<(), std::convert::Infallible>(()));
        let _ = self.jobs.try_send(job);
        self.writer.lock().ok()?.take()
    }

    /// Refuses every write queued from now on ([`StoreError::WriterGone`], the closure never
    /// runs), as if the process had died: the file keeps exactly the transactions committed
    /// before. The simulation's crashes halt the store at a chosen point of a
    /// step (between a send's store write and its broadcast, say), then reopen the file.
    pub fn halt(&self) {
        self.halted.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn is_halted(&self) -> bool {
        self.halted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Runs `f` inside the next write transaction and returns once it is durably committed.
    ///
    /// `f` must do its checks before its first write: an `Err` returned after writing
    /// aborts the whole batch ([`StoreError::BatchAborted`] for everyone in it).
    pub async fn write<T, E, F>(&self, f: F) -> Result<T, WriteError<E>>
    where
        F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let rx = self.submit(f).await?;
        rx.await.unwrap_or_else(|_| Err(writer_gone()))
    }

    /// Blocking twin of [`Store::write`] for threads outside the async runtime (CLI).
    pub fn write_blocking<T, E, F>(&self, f: F) -> Result<T, WriteError<E>>
    where
        F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let (job, rx) = self.job(f)?;
        self.jobs.blocking_send(job).map_err(|_| writer_gone())?;
        rx.blocking_recv().unwrap_or_else(|_| Err(writer_gone()))
    }

    /// Queues `f` for the writer and returns once it is queued, with a future of its
    /// outcome (what [`Store::write`] returns). Jobs run in the order they are queued, so a
    /// caller that queues under a lock of its own orders its jobs (test mode's chain
    /// operations, `services::sim_chain`).
    pub async fn enqueue<T, E, F>(
        &self,
        f: F,
    ) -> Result<impl std::future::Future<Output = Result<T, WriteError<E>>>, WriteError<E>>
    where
        F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let rx = self.submit(f).await?;
        Ok(async move { rx.await.unwrap_or_else(|_| Err(writer_gone())) })
    }

    async fn submit<T, E, F>(&self, f: F) -> Result<Reply<T, E>, WriteError<E>>
    where
        F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let (job, rx) = self.job(f)?;
        self.jobs.send(job).await.map_err(|_| writer_gone())?;
        Ok(rx)
    }

    /// The job of `f` for the writer; refused once the store is halted.
    fn job<T, E, F>(&self, f: F) -> Result<(Job, Reply<T, E>), WriteError<E>>
    where
        F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        if self.is_halted() {
            return Err(writer_gone());
        }
        Ok(make_job(f))
    }

    /// Runs `f` on a read snapshot, off the async runtime.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&ReadCtx) -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let ctx = ReadCtx::new(db.begin_read()?);
            f(&ctx)
        })
        .await
        .map_err(|_| StoreError::WriterGone)?
    }

    /// Runs `f` on a read snapshot on the calling thread, also from async code: for the
    /// request path's short, bounded reads (a row by id, one customer's balances, an
    /// idempotency record), which take microseconds in redb's page cache, less than the
    /// two thread hand-offs of [`Store::read`] (to the blocking pool and back). Scans and
    /// pages that may pass over many rows use [`Store::read`]. See docs/performance.md, "The read path".
    pub fn read_now<T>(
        &self,
        f: impl FnOnce(&ReadCtx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.read_blocking(f)
    }

    /// Blocking twin of [`Store::read`].
    pub fn read_blocking<T>(
        &self,
        f: impl FnOnce(&ReadCtx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let ctx = ReadCtx::new(self.db.begin_read()?);
        f(&ctx)
    }

    /// Notices of committed batches (events appended), for the webhook outbox and streams.
    pub fn subscribe(&self) -> broadcast::Receiver<CommitNotice> {
        self.commits.subscribe()
    }

    /// Runs `hook` on the writer thread after every committed batch with the rows it wrote
    /// ([`Touched`]), before any request of the batch hears back and before the next batch
    /// starts: a cache that drops what a hook names never serves a row older than an
    /// answered write (its fills must still guard against a read that began before the
    /// commit; see `services::checkout_cache`). Keep hooks short: they delay every commit.
    pub fn on_commit(&self, hook: CommitHook) {
        self.hooks.write().expect("hooks lock").push(hook);
    }
}

/// Where the writer sends a job's outcome.
type Reply<T, E> = oneshot::Receiver<Result<T, WriteError<E>>>;

/// A write refused or lost because the writer is gone (halted or shut down).
fn writer_gone<E>() -> WriteError<E> {
    WriteError::Store(Arc::new(StoreError::WriterGone))
}

fn make_job<T, E, F>(f: F) -> (Job, Reply<T, E>)
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move |ctx: &mut WriteCtx<'_>| {
        ctx.begin_job();
        let r = f(ctx);
        let poisoned = ctx.storage_failed() || (r.is_err() && ctx.job_dirty());
        JobOutcome {
            poisoned,
            complete: Box::new(move |commit| {
                let _ = tx.send(match commit {
                    Ok(()) => r.map_err(WriteError::Rejected),
                    Err(e) => Err(WriteError::Store(e)),
                });
            }),
        }
    });
    (job, rx)
}

fn writer_loop(
    db: Arc<Database>,
    mut rx: mpsc::Receiver<Job>,
    commits: broadcast::Sender<CommitNotice>,
    hooks: Hooks,
    opts: StoreOptions,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    while let Some(first) = rx.blocking_recv() {
        let mut jobs = vec![first];
        while jobs.len() < opts.max_batch {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let mut completions: Vec<Completion> = Vec::with_capacity(jobs.len());
        let batch_size = jobs.len();
        let started = std::time::Instant::now();
        let result = run_batch(&db, jobs, &mut completions, &opts);
        record_commit(batch_size, started.elapsed(), result.is_ok());
        let (result, notice) = match result {
            Ok((n, touched)) => {
                if !touched.is_empty() {
                    for h in hooks.read().expect("hooks lock").iter() {
                        h(&touched);
                    }
                }
                (Ok(()), Some(n))
            }
            Err(e) => {
                tracing::error!(error = %e, "store batch failed");
                (Err(Arc::new(e)), None)
            }
        };
        for c in completions {
            c(result.clone());
        }
        if let Some(n) = notice {
            if !n.events.is_empty() {
                let _ = commits.send(n);
            }
        }
        if stop.load(std::sync::atomic::Ordering::SeqCst) && rx.is_empty() {
            break;
        }
    }
    // Refuse further jobs, then close the file once this is the last handle: redb marks
    // the file clean when the Database is dropped.
    drop(rx);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while Arc::strong_count(&db) > 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    if Arc::strong_count(&db) > 1 {
        tracing::warn!("store handles still open at shutdown; the next start will check the file");
    }
    drop(db);
}

/// Commit figures through the `metrics` facade (a no-op unless the process installed a
/// recorder): `appliance_store_commit_duration_seconds`, `appliance_store_batch_size`
/// (requests in the transaction) and `appliance_store_commits_total{result}`.
fn record_commit(batch_size: usize, took: std::time::Duration, ok: bool) {
    metrics::histogram!("appliance_store_commit_duration_seconds").record(took.as_secs_f64());
    metrics::histogram!("appliance_store_batch_size").record(batch_size as f64);
    metrics::counter!(
        "appliance_store_commits_total",
        "result" => if ok { "ok" } else { "error" }
    )
    .increment(1);
}

fn run_batch(
    db: &Database,
    jobs: Vec<Job>,
    completions: &mut Vec<Completion>,
    opts: &StoreOptions,
) -> Result<(CommitNotice, Vec<Touched>), StoreError> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    txn.set_two_phase_commit(true);
    txn.set_quick_repair(opts.quick_repair);
    let mut poisoned = false;
    let notice;
    {
        let mut ctx = WriteCtx::new(&txn);
        for job in jobs {
            match std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut ctx))) {
                Ok(out) => {
                    poisoned |= out.poisoned;
                    completions.push(out.complete);
                }
                Err(_) => {
                    tracing::error!("a store job panicked; aborting its batch");
                    poisoned = true;
                }
            }
        }
        if !poisoned {
            // What the batch kept ahead of its tables goes into them before the commit.
            if let Err(e) = ctx.write_held_runs() {
                tracing::error!(error = %e, "writing the runs a batch held (lists, event indexes) failed; aborting it");
                poisoned = true;
            }
        }
        notice = (ctx.take_notice(), ctx.take_touched());
    }
    if poisoned {
        txn.abort()?;
        return Err(StoreError::BatchAborted);
    }
    txn.commit()?;
    Ok(notice)
}

/// Current time as Unix microseconds ([`sources::now_us`]: the wall clock, or the
/// simulation's clock).
pub fn now_us() -> i64 {
    sources::now_us()
}
