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
pub use ctx::{EncodedRow, Page, ReadCtx, ReadOps, Reader, ScanOps, ValueOps, WriteCtx};
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
        init_schema(&db)?;
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
        rx.await
            .unwrap_or_else(|_| Err(WriteError::Store(Arc::new(StoreError::WriterGone))))
    }

    /// Blocking twin of [`Store::write`] for threads outside the async runtime (CLI).
    pub fn write_blocking<T, E, F>(&self, f: F) -> Result<T, WriteError<E>>
    where
        F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        if self.is_halted() {
            return Err(WriteError::Store(Arc::new(StoreError::WriterGone)));
        }
        let (job, rx) = make_job(f);
        self.jobs
            .blocking_send(job)
            .map_err(|_| WriteError::Store(Arc::new(StoreError::WriterGone)))?;
        rx.blocking_recv()
            .unwrap_or_else(|_| Err(WriteError::Store(Arc::new(StoreError::WriterGone))))
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
        Ok(async move {
            rx.await
                .unwrap_or_else(|_| Err(WriteError::Store(Arc::new(StoreError::WriterGone))))
        })
    }

    async fn submit<T, E, F>(
        &self,
        f: F,
    ) -> Result<oneshot::Receiver<Result<T, WriteError<E>>>, WriteError<E>>
    where
        F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        if self.is_halted() {
            return Err(WriteError::Store(Arc::new(StoreError::WriterGone)));
        }
        let (job, rx) = make_job(f);
        self.jobs
            .send(job)
            .await
            .map_err(|_| WriteError::Store(Arc::new(StoreError::WriterGone)))?;
        Ok(rx)
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

fn make_job<T, E, F>(f: F) -> (Job, oneshot::Receiver<Result<T, WriteError<E>>>)
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

fn init_schema(db: &Database) -> Result<(), StoreError> {
    let mut txn = db.begin_write()?;
    txn.set_two_phase_commit(true);
    let found = {
        use redb::ReadableTable;
        let mut meta = txn.open_table(schema::META)?;
        let found = meta.get("schema_version")?.map(|v| {
            let b = v.value();
            u32::from_be_bytes(b.try_into().unwrap_or([0; 4]))
        });
        match found {
            Some(v) if v > schema::SCHEMA_VERSION => {
                return Err(StoreError::SchemaTooNew {
                    found: v,
                    supported: schema::SCHEMA_VERSION,
                })
            }
            // Migrations from older versions run below, in order, once every table exists.
            _ => {
                meta.insert(
                    "schema_version",
                    schema::SCHEMA_VERSION.to_be_bytes().as_slice(),
                )?;
            }
        }
        found
    };
    txn.open_table(schema::PROJECTS)?;
    txn.open_table(schema::API_KEYS)?;
    txn.open_table(schema::CUSTOMERS)?;
    txn.open_table(schema::WALLETS)?;
    txn.open_table(schema::DEPOSITS)?;
    txn.open_table(schema::PAYOUTS)?;
    txn.open_table(schema::SWEEPS)?;
    txn.open_table(schema::CONVERSION_RULES)?;
    txn.open_table(schema::CONVERSIONS)?;
    txn.open_table(schema::CONVERSION_BATCHES)?;
    txn.open_table(schema::UNIQUE)?;
    txn.open_table(schema::INDEX)?;
    for (_, def) in schema::SPLIT_INDEXES {
        txn.open_table(def)?;
    }
    txn.open_table(schema::EVENT_TYPE_RUNS)?;
    txn.open_table(schema::EVENT_RESOURCE_RUNS)?;
    for def in schema::run_tables() {
        txn.open_table(def)?;
    }
    txn.open_table(schema::ACCOUNTS)?;
    txn.open_table(schema::JOURNAL)?;
    txn.open_table(schema::EVENTS)?;
    txn.open_table(schema::EVENT_IDS)?;
    txn.open_table(schema::IDEMPOTENCY)?;
    txn.open_table(schema::IDEMPOTENCY_EXP)?;
    txn.open_table(schema::SIM_BALANCES)?;
    txn.open_table(schema::ADDRESS_QUOTA)?;
    txn.open_table(schema::COUNTERS)?;
    txn.open_table(schema::WEBHOOK_ENDPOINTS)?;
    txn.open_table(schema::WEBHOOK_DELIVERIES)?;
    txn.open_table(schema::EVM_OUT_TXS)?;
    txn.open_table(schema::EVM_PENDING)?;
    txn.open_table(schema::EVM_NONCES)?;
    txn.open_table(schema::EVM_WATCH)?;
    txn.open_table(schema::EVM_BLOCK_DEPOSITS)?;
    txn.open_table(schema::SIM_HEIGHTS)?;
    txn.open_table(schema::SWEEP_REQUESTS)?;
    txn.open_table(schema::SIM_OPS)?;
    txn.open_table(schema::SIM_SNAPSHOT_CHUNKS)?;
    txn.open_table(schema::INVOICES)?;
    txn.open_table(schema::TEST_CLOCKS)?;
    txn.open_table(schema::TEST_SENDERS)?;
    txn.open_table(schema::BILLING_ACCOUNTS)?;
    txn.open_table(schema::BILLING_ENTRIES)?;
    txn.open_table(schema::FUNDING_ADDRESSES)?;
    if found.is_some_and(|v| v < 3) {
        let m = chain_state::migrate_meta(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "chain state moved out of meta (schema version 3)"
        );
    }
    if found.is_some_and(|v| v < 4) {
        let m = migrate_to_4(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "store migrated to schema version {}",
            schema::SCHEMA_VERSION
        );
    }
    if found.is_some_and(|v| v < 5) {
        let m = migrate_address_keys(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "address keys laid out address first (schema version 5)"
        );
    }
    if found.is_some_and(|v| v < 6) {
        let removed = migrate_to_6(&txn)?;
        tracing::info!(
            removed,
            "deposit index entries by wallet removed (schema version 6)"
        );
    }
    if found.is_some_and(|v| v < 7) {
        let m = migrate_to_7(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "index keys of the hot tags and of events moved to tables of their own (schema version 7)"
        );
    }
    if found.is_some_and(|v| v < 8) {
        let m = migrate_to_8(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "open sweeps named by their wallets' holding rows (schema version 8)"
        );
    }
    if found.is_some_and(|v| v < 9) {
        let m = migrate_to_9(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "deposits and sweeps indexed under their customers (schema version 9)"
        );
    }
    if found.is_some_and(|v| v < 11) {
        let moved = chain_state::migrate_sim_snapshots(&txn)?;
        tracing::info!(
            moved,
            "simulated chain snapshots stored in chunks (schema version 11)"
        );
    }
    if found.is_some_and(|v| v < 12) {
        let m = migrate_to_12(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "event type index keyed by a hash of the type (schema version 12)"
        );
    }
    if found.is_some_and(|v| v < 13) {
        let m = migrate_to_13(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "event indexes kept as runs of sequences (schema version 13)"
        );
    }
    if found.is_some_and(|v| v < 14) {
        let m = migrate_to_14(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "index keys listed per customer kept as runs of ids (schema version 14)"
        );
    }
    if found.is_some_and(|v| v < 15) {
        let m = migrate_to_15(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "a project's lists kept as runs of ids (schema version 15)"
        );
    }
    if found.is_some_and(|v| v < 16) {
        let m = migrate_to_16(&txn)?;
        tracing::info!(
            rows = m.rows,
            left = m.left,
            "transfer and address keys stored as digests (schema version 16)"
        );
    }
    txn.commit()?;
    Ok(())
}

/// Schema 11 -> 12: every key of [`schema::EVENTS_BY_TYPE`] becomes its
/// [`index::event_type_key_from_7`] (the type's 4-byte hash instead of its text), by
/// [`rekey_range`], all in the opening transaction, so a crash leaves schema 11 whole. A
/// key of neither shape stays where it is (counted in `left`). A project's new keys sort before
/// its old ones (a 0 where an old key has the type's length), so the scan, which goes
/// forward from the last old key it read, never reads a key it wrote.
fn migrate_to_12(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use redb::ReadableTableMetadata;
    let keys = txn.open_table(schema::EVENTS_BY_TYPE)?.len()?;
    if keys >= REKEY_PROGRESS_EVERY {
        tracing::info!(
            keys,
            "rekeying the event type index (schema version 12): once, before the server listens"
        );
    }
    rekey_range(
        txn,
        schema::EVENTS_BY_TYPE,
        &[],
        None,
        index::event_type_key_from_7,
    )
}

/// Schema 12 -> 13: the keys of [`schema::EVENTS_BY_TYPE`] (project ‖ 0 ‖ type hash ‖
/// sequence) and of [`schema::EVENTS_BY_RESOURCE`] (resource prefix ‖ sequence) become runs
/// of [`schema::EVENT_TYPE_RUNS`] and [`schema::EVENT_RESOURCE_RUNS`] ([`event_runs`]);
/// then the old tables are deleted. All in the opening transaction, so a crash leaves
/// schema 12 whole. `rows` counts the sequences moved; a key of another shape cannot be
/// listed by any build of schema 12 and is dropped with its table (counted in `left`).
fn migrate_to_13(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    let by_type = keys_to_runs(
        txn,
        schema::EVENTS_BY_TYPE,
        schema::EVENT_TYPE_RUNS,
        "event type index",
        |k| {
            // project (16) ‖ 0 ‖ hash (4) ‖ sequence (8) -> project ‖ hash
            (k.len() == 29 && k[16] == 0).then(|| ([&k[..16], &k[17..21]].concat(), &k[21..]))
        },
    )?;
    let by_resource = keys_to_runs(
        txn,
        schema::EVENTS_BY_RESOURCE,
        schema::EVENT_RESOURCE_RUNS,
        "event resource index",
        |k| {
            let at = k.len().checked_sub(8).filter(|at| *at > 0)?;
            Some((k[..at].to_vec(), &k[at..]))
        },
    )?;
    Ok(codec::Migrated {
        rows: by_type.rows + by_resource.rows,
        left: by_type.left + by_resource.left,
    })
}

/// Schema 13 -> 14: the keys of `index` listed per customer ([`index::IndexTag::ByCustomer`]:
/// a customer's deposits and its wallets' sweeps; [`index::IndexTag::PayoutsByCustomer`])
/// become runs of [`schema::ID_RUNS`] ([`id_runs`]), filled in key order, and leave
/// `index`; all in the opening transaction, so a crash leaves schema 13 whole. `rows`
/// counts the keys moved; a key too short to hold an id is dropped (counted in `left`).
fn migrate_to_14(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    let mut total = codec::Migrated::default();
    let mut index = txn.open_table(schema::INDEX)?;
    let mut runs = txn.open_table(schema::ID_RUNS)?;
    for tag in [
        index::IndexTag::ByCustomer,
        index::IndexTag::PayoutsByCustomer,
    ] {
        keys_into_id_runs(&mut index, &mut runs, tag as u8, false, &mut total)?;
    }
    Ok(total)
}

/// Schema 14 -> 15: the keys of a project's lists that schema 15 keeps as runs (each
/// [`schema::RunIndex`] of [`schema::RUN_INDEXES`] but [`schema::ID_RUNS`]'s) leave their
/// tag's index table ([`schema::index_table`]) for runs of their own table, full size
/// ([`schema::RunIndex::padded`]), filled in key order; all in the opening transaction, so
/// a crash leaves schema 14 whole. The emptied tables stay. `rows` and `left` as
/// [`migrate_to_14`]'s.
fn migrate_to_15(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use redb::TableHandle;
    let mut total = codec::Migrated::default();
    for r in schema::RUN_INDEXES
        .iter()
        .filter(|r| r.table.name() != schema::ID_RUNS.name())
    {
        let mut keys = txn.open_table(schema::index_table(r.tag as u8))?;
        let mut runs = txn.open_table(r.table)?;
        keys_into_id_runs(&mut keys, &mut runs, r.tag as u8, r.padded, &mut total)?;
    }
    Ok(total)
}

/// Schema 15 -> 16: every transfer key of `unique` (schema 7's
/// [`index::IndexTag::UniqueDepositTxHash`], and schema 6's `UniqueDepositTx` a hash that
/// was not lower-case hex kept) becomes its [`index::transfer_key`], and every address key
/// ([`index::IndexTag::UniqueAddressChain`]) its [`index::address_key`], with the same
/// deposit or wallet id, by [`rekey`]; all in the opening transaction, so a crash leaves
/// schema 15 whole. A key of neither shape stays (counted in `left`; `verify` names it).
/// The new tags sort after the old ones', so no scan reads a key it wrote.
fn migrate_to_16(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use index::IndexTag;
    let mut total = codec::Migrated::default();
    for (tag, convert) in [
        (
            IndexTag::UniqueDepositTx,
            index::transfer_key_from_legacy as fn(&[u8]) -> Option<Vec<u8>>,
        ),
        (
            IndexTag::UniqueDepositTxHash,
            index::transfer_key_from_legacy,
        ),
        (IndexTag::UniqueAddressChain, index::address_key_from_legacy),
    ] {
        let m = rekey(txn, schema::UNIQUE, tag, convert)?;
        total.rows += m.rows;
        total.left += m.left;
    }
    Ok(total)
}

/// Moves the keys of tag byte `tag` from index table `keys` into runs of `runs` ([`id_runs`],
/// `padded` or not), each prefix's ids in runs of [`id_runs::RUN_IDS`] in key order; adds
/// to `total` the keys moved (`rows`) and those too short to hold an id, dropped (`left`).
/// Logs progress every [`REKEY_PROGRESS_EVERY`] keys.
fn keys_into_id_runs(
    keys: &mut redb::Table<&'static [u8], ()>,
    runs: &mut redb::Table<&'static [u8], &'static [u8]>,
    tag: u8,
    padded: bool,
    total: &mut codec::Migrated,
) -> Result<(), StoreError> {
    use redb::ReadableTable;
    let (lo, hi) = ([tag], [tag + 1]);
    let range = lo.as_slice()..hi.as_slice();
    // The run being filled: its prefix and ids (ascending, as the keys come).
    let mut run: Option<(Vec<u8>, Vec<u128>)> = None;
    let mut flush = |run: &mut Option<(Vec<u8>, Vec<u128>)>| {
        run.take().map_or(Ok(()), |(prefix, ids)| {
            let value = id_runs::encode(&ids, padded);
            runs.insert(id_runs::key(&prefix, ids[0]).as_slice(), value.as_slice())
                .map(|_| ())
        })
    };
    for e in keys.range::<&[u8]>(range.clone())? {
        let (k, _) = e?;
        let Some((prefix, id)) = id_runs::split_key(k.value()) else {
            total.left += 1;
            continue;
        };
        match &mut run {
            Some((p, ids))
                if p.as_slice() == prefix
                    && ids.len() < id_runs::RUN_IDS
                    && ids.last().is_some_and(|l| *l < id) =>
            {
                ids.push(id)
            }
            _ => {
                flush(&mut run)?;
                run = Some((prefix.to_vec(), vec![id]));
            }
        }
        total.rows += 1;
        if total.rows.is_multiple_of(REKEY_PROGRESS_EVERY) {
            tracing::info!(moved = total.rows, tag, "index keys: moving into runs");
        }
    }
    flush(&mut run)?;
    keys.retain_in::<&[u8], _>(range, |_, _| false)?;
    Ok(())
}

/// Moves every key of `old` (an event index of schema 12, read in key order, so each
/// prefix's sequences come ascending) into runs of `runs` filled to
/// [`event_runs::RUN_MAX`] bytes, then deletes `old`. `parse` gives a key's run prefix and
/// its 8 sequence bytes, `None` for a key of another shape (counted in `left`, dropped).
/// Logs the size first and progress every [`REKEY_PROGRESS_EVERY`] keys when large.
fn keys_to_runs(
    txn: &redb::WriteTransaction,
    old: redb::TableDefinition<&[u8], ()>,
    runs: redb::TableDefinition<&[u8], &[u8]>,
    what: &str,
    parse: impl Fn(&[u8]) -> Option<(Vec<u8>, &[u8])>,
) -> Result<codec::Migrated, StoreError> {
    use redb::{ReadableTable, ReadableTableMetadata};
    let mut total = codec::Migrated::default();
    {
        let old = txn.open_table(old)?;
        let keys = old.len()?;
        if keys >= REKEY_PROGRESS_EVERY {
            tracing::info!(
                keys,
                "moving the {what} into runs (schema version 13): once, before the server listens"
            );
        }
        let mut runs = txn.open_table(runs)?;
        // The run being filled: its prefix, first sequence, last sequence and value.
        let mut run: Option<(Vec<u8>, u64, u64, Vec<u8>)> = None;
        let mut flush = |run: &mut Option<(Vec<u8>, u64, u64, Vec<u8>)>| {
            run.take().map_or(Ok(()), |(prefix, first, _, value)| {
                runs.insert(event_runs::key(&prefix, first).as_slice(), value.as_slice())
                    .map(|_| ())
            })
        };
        for e in old.iter()? {
            let (k, _) = e?;
            let parsed = parse(k.value())
                .and_then(|(prefix, seq)| Some((prefix, u64::from_be_bytes(seq.try_into().ok()?))));
            let Some((prefix, seq)) = parsed else {
                total.left += 1;
                continue;
            };
            let appended = match &mut run {
                Some((p, _, last, value)) if *p == prefix => {
                    let pushed = event_runs::push(value, *last, seq);
                    if pushed {
                        *last = seq;
                    }
                    pushed
                }
                _ => false,
            };
            if !appended {
                flush(&mut run)?;
                run = Some((prefix, seq, seq, Vec::new()));
            }
            total.rows += 1;
            if total.rows.is_multiple_of(REKEY_PROGRESS_EVERY) {
                tracing::info!(moved = total.rows, "{what}: moving into runs");
            }
        }
        flush(&mut run)?;
    }
    txn.delete_table(old)?;
    Ok(total)
}

/// Schema 8 -> 9: every [`index::IndexTag::DepositsByCustomer`] key of `index` becomes its
/// [`index::deposit_by_customer_key`]; every [`index::IndexTag::SweepsByWallet`] key is
/// removed, and every sweep row is rewritten with its wallet's customer
/// (`Sweep::customer_id`, nil when the wallet is missing or does not decode) and given its
/// [`index::sweep_by_wallet_key`]. In chunks of 4096; all in the opening transaction, so a
/// crash leaves schema 8 whole. A key without the old shape, or a sweep row that does not
/// decode, stays as it is (counted in `left`; `verify` reports the row).
fn migrate_to_9(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use redb::ReadableTable;
    const CHUNK: usize = 4096;
    let mut total = rekey(
        txn,
        schema::INDEX,
        index::IndexTag::DepositsByCustomer,
        index::deposit_by_customer_from_legacy,
    )?;
    let mut idx = txn.open_table(schema::INDEX)?;
    let lo = [index::IndexTag::SweepsByWallet as u8];
    let hi = [index::IndexTag::SweepsByWallet as u8 + 1];
    idx.retain_in::<&[u8], _>(lo.as_slice()..hi.as_slice(), |_, _| false)?;
    let wallets = txn.open_table(schema::WALLETS)?;
    let mut sweeps = txn.open_table(schema::SWEEPS)?;
    let mut from = Some(0u128);
    while let Some(start) = from {
        let chunk: Vec<(u128, Vec<u8>)> = sweeps
            .range(start..)?
            .take(CHUNK)
            .map(|e| e.map(|(k, v)| (k.value(), v.value().to_vec())))
            .collect::<Result<_, _>>()?;
        let Some((last, _)) = chunk.last() else {
            break;
        };
        // The chunk is rewritten below whatever its last key; none follows u128::MAX.
        from = last.checked_add(1);
        for (k, v) in chunk {
            let Ok(mut sw) = codec::decode_keyed::<records::Sweep>(k, &v) else {
                total.left += 1;
                continue;
            };
            sw.customer_id = match wallets.get(sw.wallet_id.as_u128())? {
                Some(row) => {
                    codec::decode_keyed::<records::Wallet>(sw.wallet_id.as_u128(), row.value())
                        .map(|w| w.customer_id)
                        .unwrap_or_default()
                }
                None => uuid::Uuid::nil(),
            };
            sweeps.insert(k, codec::encode_record(&sw).as_slice())?;
            let key =
                index::sweep_by_wallet_key(sw.project_id, sw.customer_id, sw.wallet_id, sw.id);
            idx.insert(key.as_slice(), ())?;
            total.rows += 1;
        }
    }
    Ok(total)
}

/// Schema 7 -> 8: every open-sweep key of `unique` ([`index::IndexTag::UniqueOpenSweep`]:
/// (project nil) ‖ wallet ‖ asset -> sweep) becomes the open sweep of its wallet's holding
/// row of that asset ([`ledger::Holding`]; a row with nothing held is written if there is
/// none) and is removed. A key that does not have that shape, or whose wallet is missing or
/// does not decode, stays (counted in `left`; `verify` names it). In chunks of 4096 keys;
/// all in the opening transaction, so a crash leaves schema 7 whole.
fn migrate_to_8(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use redb::ReadableTable;
    const CHUNK: usize = 4096;
    let tag = index::IndexTag::UniqueOpenSweep as u8;
    let end = [tag + 1];
    let mut unique = txn.open_table(schema::UNIQUE)?;
    let wallets = txn.open_table(schema::WALLETS)?;
    let mut accounts = txn.open_table(schema::ACCOUNTS)?;
    let mut total = codec::Migrated::default();
    let mut from = vec![tag];
    loop {
        let chunk: Vec<(Vec<u8>, u128)> = unique
            .range::<&[u8]>(from.as_slice()..end.as_slice())?
            .take(CHUNK)
            .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value())))
            .collect::<Result<_, _>>()?;
        let Some((last, _)) = chunk.last() else {
            break;
        };
        from = [last.as_slice(), &[0]].concat();
        for (k, sweep) in chunk {
            let Some((wallet, asset)) = parse_open_sweep_key(&k) else {
                total.left += 1;
                continue;
            };
            let w = match wallets.get(wallet.as_u128())? {
                Some(row) => {
                    codec::decode_keyed::<records::Wallet>(wallet.as_u128(), row.value()).ok()
                }
                None => None,
            };
            let Some(w) = w else {
                total.left += 1;
                continue;
            };
            let key = w.holding_key(&asset);
            let cur = accounts
                .get(key.as_slice())?
                .map(|g| ledger::Holding::from_value(g.value()))
                .unwrap_or_default();
            let next = ledger::Holding {
                open_sweep: Some(uuid::Uuid::from_u128(sweep)),
                ..cur
            };
            accounts.insert(key.as_slice(), next.to_value())?;
            unique.remove(k.as_slice())?;
            total.rows += 1;
        }
    }
    Ok(total)
}

/// (wallet, asset) of a schema 7 open-sweep key: tag ‖ nil project (16) ‖ len (2) ‖ wallet
/// (16) ‖ len (2) ‖ asset ([`index::unique`]); `None` for any other shape.
fn parse_open_sweep_key(k: &[u8]) -> Option<(uuid::Uuid, String)> {
    let rest = k.strip_prefix(&[index::IndexTag::UniqueOpenSweep as u8])?;
    let rest = rest.strip_prefix(uuid::Uuid::nil().as_bytes().as_slice())?;
    let rest = rest.strip_prefix(&16u16.to_be_bytes())?;
    let (wallet, rest) = rest.split_at_checked(16)?;
    let (len, asset) = rest.split_at_checked(2)?;
    if usize::from(u16::from_be_bytes([len[0], len[1]])) != asset.len() {
        return None;
    }
    let asset = std::str::from_utf8(asset).ok()?.to_string();
    Some((uuid::Uuid::from_slice(wallet).ok()?, asset))
}

/// Schema 6 -> 7: the keys of each tag of [`schema::SPLIT_INDEXES`] move from `index` to
/// the tag's own table, unchanged; the event index keys ([`index::IndexTag::EventsByType`],
/// [`index::IndexTag::EventsByResource`]) move to [`schema::EVENTS_BY_TYPE`] and
/// [`schema::EVENTS_BY_RESOURCE`] in their schema 7 layout
/// ([`index::event_key_from_legacy`]). In chunks of 4096 keys, so memory stays bounded on a
/// large store; all in the opening transaction, so a crash leaves schema 6 whole. A key that
/// does not have its tag's shape stays in `index` (counted in `left`) and `appliance
/// verify` reports it.
fn migrate_to_7(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    use redb::ReadableTable;
    const CHUNK: usize = 4096;
    let mut total = codec::Migrated::default();
    let event_tags = [
        index::IndexTag::EventsByType as u8,
        index::IndexTag::EventsByResource as u8,
    ];
    let split_tags = schema::SPLIT_INDEXES.iter().map(|(t, _)| *t as u8);
    for tag in split_tags.chain(event_tags) {
        let end = [tag + 1];
        let mut from = vec![tag];
        loop {
            let chunk: Vec<Vec<u8>> = {
                let idx = txn.open_table(schema::INDEX)?;
                idx.range::<&[u8]>(from.as_slice()..end.as_slice())?
                    .take(CHUNK)
                    .map(|e| e.map(|(k, _)| k.value().to_vec()))
                    .collect::<Result<_, _>>()?
            };
            let Some(last) = chunk.last() else {
                break;
            };
            // Resume after the last key seen (a key left in place is not read again).
            from = [last.as_slice(), &[0]].concat();
            let mut moved: Vec<&[u8]> = Vec::with_capacity(chunk.len());
            if event_tags.contains(&tag) {
                let mut by_type = txn.open_table(schema::EVENTS_BY_TYPE)?;
                let mut by_resource = txn.open_table(schema::EVENTS_BY_RESOURCE)?;
                for k in &chunk {
                    match index::event_key_from_legacy(k) {
                        Some((true, new)) => {
                            by_type.insert(new.as_slice(), ())?;
                            moved.push(k);
                        }
                        Some((false, new)) => {
                            by_resource.insert(new.as_slice(), ())?;
                            moved.push(k);
                        }
                        None => total.left += 1,
                    }
                }
            } else {
                let mut own = txn.open_table(schema::index_table(tag))?;
                for k in &chunk {
                    own.insert(k.as_slice(), ())?;
                    moved.push(k);
                }
            }
            let mut idx = txn.open_table(schema::INDEX)?;
            for k in moved {
                idx.remove(k)?;
                total.rows += 1;
            }
        }
    }
    let m = migrate_transfer_keys(txn)?;
    total.rows += m.rows;
    total.left += m.left;
    Ok(total)
}

/// Schema 6 -> 7: every [`index::IndexTag::UniqueDepositTx`] key of `unique` becomes its
/// [`index::transfer_key`] with the same deposit id (the current layout: schema 16's, not
/// the 32 bytes of hash schema 7 wrote); one that does not have the old shape stays and is
/// counted in `left` (`verify` names it).
fn migrate_transfer_keys(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    rekey(
        txn,
        schema::UNIQUE,
        index::IndexTag::UniqueDepositTx,
        index::transfer_key_from_legacy,
    )
}

/// Schema 4 -> 5: every [`index::IndexTag::UniqueAddress`] key (chain ‖ address) of
/// `unique` becomes its [`index::address_key`] (the current layout: schema 16's digest,
/// not the address ‖ chain schema 5 wrote) with the same wallet id. A key that does not
/// have the old shape stays where it is (counted in `left`).
fn migrate_address_keys(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    rekey(
        txn,
        schema::UNIQUE,
        index::IndexTag::UniqueAddress,
        index::address_key_from_legacy,
    )
}

/// Rewrites every key of `tag` in `table` (`unique`, `index`) as `convert` gives it
/// ([`rekey_range`] over the tag's keys).
fn rekey<V>(
    txn: &redb::WriteTransaction,
    table: redb::TableDefinition<&'static [u8], V>,
    tag: index::IndexTag,
    convert: fn(&[u8]) -> Option<Vec<u8>>,
) -> Result<codec::Migrated, StoreError>
where
    V: for<'a> redb::Value<SelfType<'a> = V> + 'static,
{
    let tag = tag as u8;
    rekey_range(txn, table, &[tag], Some(&[tag + 1]), convert)
}

/// Keys a migration rewrites between two progress lines in the log: a store of 10M
/// deposits has about 22M event-type keys, which take about 7 minutes on a slow machine of
/// this kind.
const REKEY_PROGRESS_EVERY: u64 = 1_000_000;

/// Rewrites every key of `table` from `start` (up to `end`, or the table's end) as
/// `convert` gives it, with the same value, in chunks of 4096 keys so memory stays bounded,
/// logging its progress every [`REKEY_PROGRESS_EVERY`] keys. `convert` returns the new key
/// (the same key: left as it is, not counted) or `None` for a key without the old shape
/// (left in place and counted in `left`).
fn rekey_range<V>(
    txn: &redb::WriteTransaction,
    table: redb::TableDefinition<&'static [u8], V>,
    start: &[u8],
    end: Option<&[u8]>,
    convert: fn(&[u8]) -> Option<Vec<u8>>,
) -> Result<codec::Migrated, StoreError>
where
    V: for<'a> redb::Value<SelfType<'a> = V> + 'static,
{
    use redb::ReadableTable;
    use std::ops::Bound;
    const CHUNK: usize = 4096;
    let mut t = txn.open_table(table)?;
    let mut total = codec::Migrated::default();
    let mut from = start.to_vec();
    let mut next_report = REKEY_PROGRESS_EVERY;
    loop {
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let chunk: Vec<(Vec<u8>, V)> = t
            .range::<&[u8]>((Bound::Included(from.as_slice()), upper))?
            .take(CHUNK)
            .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value())))
            .collect::<Result<_, _>>()?;
        let Some((last, _)) = chunk.last() else {
            break;
        };
        // Resume after the last key seen (a key left in place is not read again).
        from = [last.as_slice(), &[0]].concat();
        for (k, v) in chunk {
            match convert(&k) {
                Some(new) if new == k => {}
                Some(new) => {
                    t.insert(new.as_slice(), v)?;
                    t.remove(k.as_slice())?;
                    total.rows += 1;
                }
                None => total.left += 1,
            }
        }
        let done = total.rows + total.left;
        if done >= next_report {
            tracing::info!(table = redb::TableHandle::name(&table), done, "rekeying");
            next_report = done + REKEY_PROGRESS_EVERY;
        }
    }
    Ok(total)
}

/// Schema 5 -> 6: the index entries of deposits by wallet are removed (a wallet's deposits
/// are listed under its customer). Event rows are not rewritten: a deposit event of schema
/// 5 keeps its whole `data` and reads as it did. Returns the entries removed.
fn migrate_to_6(txn: &redb::WriteTransaction) -> Result<u64, StoreError> {
    let lo = [index::IndexTag::DepositsByWallet as u8];
    let hi = [index::IndexTag::DepositsByWallet as u8 + 1];
    let mut idx = txn.open_table(schema::INDEX)?;
    let mut removed = 0u64;
    idx.retain_in::<&[u8], _>(lo.as_slice()..hi.as_slice(), |_, _| {
        removed += 1;
        false
    })?;
    Ok(removed)
}

/// Schema 3 -> 4: every record rewritten from JSON to MessagePack ([`codec`]), and the
/// `sequences` table dropped (the last event key of a project gives its sequence). Rows
/// that do not decode stay as they are, for `appliance verify` to report.
fn migrate_to_4(txn: &redb::WriteTransaction) -> Result<codec::Migrated, StoreError> {
    let mut total = codec::Migrated::default();
    macro_rules! migrate {
        ($def:ident, $ty:ty) => {{
            let m = codec::migrate_table::<_, $ty>(txn, schema::$def)?;
            total.rows += m.rows;
            total.left += m.left;
        }};
    }
    schema::for_each_record_table!(migrate);
    match txn.delete_table(schema::LEGACY_SEQUENCES) {
        Ok(_) => {}
        Err(redb::TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(e.into()),
    }
    total.rows += move_holdings(txn)?;
    Ok(total)
}

/// Schema 4: each row of the old `holdings` table (wallet ‖ asset -> amount) moves into
/// `accounts` under [`ledger::holding_key`], found through its wallet. A row whose wallet
/// is missing or undecodable stays where it is, for `verify` to report; the table is
/// dropped once empty. Returns the rows moved.
fn move_holdings(txn: &redb::WriteTransaction) -> Result<u64, StoreError> {
    use redb::{ReadableTable, ReadableTableMetadata};
    let rows: Vec<(Vec<u8>, u128)> = match txn.open_table(schema::LEGACY_HOLDINGS) {
        Ok(t) => t
            .iter()?
            .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value())))
            .collect::<Result<_, _>>()?,
        Err(e) => return Err(e.into()),
    };
    let wallets = txn.open_table(schema::WALLETS)?;
    let mut accounts = txn.open_table(schema::ACCOUNTS)?;
    let mut legacy = txn.open_table(schema::LEGACY_HOLDINGS)?;
    let mut moved = 0;
    for (k, amount) in rows {
        let Some((w, asset)) = k.split_at_checked(16) else {
            continue;
        };
        let Ok(wallet) = uuid::Uuid::from_slice(w) else {
            continue;
        };
        let Some(row) = wallets.get(wallet.as_u128())? else {
            continue;
        };
        let Ok(w) = codec::decode_keyed::<records::Wallet>(wallet.as_u128(), row.value()) else {
            continue;
        };
        let asset = String::from_utf8_lossy(asset);
        let key = w.holding_key(&asset);
        accounts.insert(key.as_slice(), (amount, 0))?;
        legacy.remove(k.as_slice())?;
        moved += 1;
    }
    let empty = legacy.is_empty()?;
    drop(legacy);
    if empty {
        txn.delete_table(schema::LEGACY_HOLDINGS)?;
    }
    Ok(moved)
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
