//! Probe of redb's write cost after a large value is replaced (docs/performance.md,
//! "A large value replaced makes every later commit write more").
//!
//! ```text
//! cargo build --release -p appliance-storage --example large_value_probe
//! target/release/examples/large_value_probe PATH [VALUE_BYTES [qr|noqr [CHUNK_BYTES [migrate]]]]
//! ```
//!
//! Creates a fresh store at PATH and runs phases of 2,000 small durable commits (20 appended
//! 300 B log rows and 20 random-key 40 B index rows each, like the appliance's commits),
//! printing the bytes the process wrote to disk per commit (`/proc/self/io` `write_bytes`):
//! before any large value, after one is written, after it is replaced once and three times.
//! The value (default 5 MiB) is stored as one row, or as rows of CHUNK_BYTES each. `qr` (the
//! default) commits with redb's quick repair, as the appliance does. `migrate` instead
//! writes the value as one row once, then moves it into rows of 3,000 B (the schema 11
//! migration of simulated chain snapshots) and measures three phases after, and two after
//! reopening the file. `growN` (N in GB) instead appends N GB of 3,000 B rows, freeing
//! nothing, and measures the small commits after: what the file's size alone costs.
use redb::{Database, Durability, TableDefinition};
use std::time::Instant;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const IDX: TableDefinition<u128, &[u8]> = TableDefinition::new("idx");
const SNAP: TableDefinition<u64, &[u8]> = TableDefinition::new("snap");
const CHUNKS: TableDefinition<u64, &[u8]> = TableDefinition::new("chunks");

fn write_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/io").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A durable write transaction committed as the appliance commits (two-phase), with quick
/// repair as `qr` says.
fn begin(db: &Database, qr: bool) -> redb::WriteTransaction {
    let mut txn = db.begin_write().unwrap();
    txn.set_durability(Durability::Immediate).unwrap();
    txn.set_two_phase_commit(true);
    txn.set_quick_repair(qr);
    txn
}

/// `commits` small commits of 20 log rows (`row`) and 20 index rows (`small`) each, keys
/// from `next` (log key, index key); returns the bytes written per commit.
fn small_commits(
    db: &Database,
    qr: bool,
    commits: u32,
    (row, small): (&[u8], &[u8]),
    next: &mut impl FnMut() -> (u64, u128),
) -> f64 {
    let b0 = write_bytes();
    for _ in 0..commits {
        let txn = begin(db, qr);
        {
            let mut log = txn.open_table(LOG).unwrap();
            let mut idx = txn.open_table(IDX).unwrap();
            for _ in 0..20 {
                let (l, i) = next();
                log.insert(l, row).unwrap();
                idx.insert(i, small).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    (write_bytes() - b0) as f64 / f64::from(commits)
}

/// The probe's settings (from the command line) and its key sources.
struct Probe {
    path: String,
    /// Size of the large value (bytes).
    big: usize,
    /// Whether commits use quick repair.
    qr: bool,
    /// Size of the rows the large value is stored in (bytes).
    chunk: usize,
    /// The next log key.
    seq: u64,
    /// The index key generator's state.
    rng: u128,
    row: Vec<u8>,
    small: Vec<u8>,
}

impl Probe {
    /// A phase of `commits` small commits, printed as `name`.
    fn phase(&mut self, db: &Database, name: &str, commits: u32) {
        let t0 = Instant::now();
        let (seq, rng) = (&mut self.seq, &mut self.rng);
        let per_commit = small_commits(db, self.qr, commits, (&self.row, &self.small), &mut || {
            let l = *seq;
            *seq += 1;
            *rng = rng
                .wrapping_mul(0x2545F4914F6CDD1D2545F4914F6CDD1D)
                .wrapping_add(1442695040888963407);
            (l, *rng)
        });
        println!(
            "{name}: {commits} commits, {:.1} KB written per commit, {:.2} s",
            per_commit / 1024.0,
            t0.elapsed().as_secs_f64()
        );
    }

    /// Writes the large value (every byte `fill`) in rows of `chunk` bytes.
    fn put_big(&self, db: &Database, fill: u8) {
        let b0 = write_bytes();
        let v = vec![fill; self.big];
        let txn = begin(db, self.qr);
        {
            let mut t = txn.open_table(SNAP).unwrap();
            for (i, c) in v.chunks(self.chunk).enumerate() {
                t.insert(i as u64, c).unwrap();
            }
        }
        txn.commit().unwrap();
        println!(
            "big value {} B: {:.1} KB written",
            self.big,
            (write_bytes() - b0) as f64 / 1024.0
        );
    }

    /// Only growth, nothing freed: `gb` GB of 3,000 B rows appended, then the small
    /// commits.
    fn grow(&mut self, db: &Database, gb: f64) {
        let b0 = write_bytes();
        let part = vec![5u8; 3_000];
        let rows = (gb * 1e9 / 3_000.0) as u64;
        let mut k = 0u64;
        while k < rows {
            let mut txn = db.begin_write().unwrap();
            txn.set_durability(Durability::Immediate).unwrap();
            txn.set_quick_repair(self.qr);
            {
                let mut c = txn.open_table(CHUNKS).unwrap();
                for _ in 0..10_000 {
                    c.insert(k, part.as_slice()).unwrap();
                    k += 1;
                }
            }
            txn.commit().unwrap();
        }
        println!(
            "grown by {rows} rows of 3,000 B: {:.0} MB written, file {:.2} GB",
            (write_bytes() - b0) as f64 / 1e6,
            std::fs::metadata(&self.path).unwrap().len() as f64 / 1e9
        );
        for n in 1..=2 {
            self.phase(db, &format!("after growing, phase {n}"), 2000);
        }
    }

    /// The schema 11 migration: one large row written once, then removed and written again
    /// as rows of 3,000 B. Does the cost of the freed value last, and past a reopen?
    fn migrate(&mut self, db: Database) {
        self.put_big(&db, 1);
        self.phase(&db, "after the first big value", 2000);
        let b0 = write_bytes();
        let txn = begin(&db, self.qr);
        {
            let mut t = txn.open_table(SNAP).unwrap();
            let v = t.remove(0).unwrap().unwrap().value().to_vec();
            drop(t);
            let mut c = txn.open_table(CHUNKS).unwrap();
            for (i, part) in v.chunks(3_000).enumerate() {
                c.insert(i as u64, part).unwrap();
            }
        }
        txn.commit().unwrap();
        println!(
            "moved into 3,000 B rows: {:.1} KB written",
            (write_bytes() - b0) as f64 / 1024.0
        );
        for n in 1..=3 {
            self.phase(&db, &format!("after the move, phase {n}"), 2000);
        }
        drop(db);
        let mut seq = u64::MAX / 2;
        for reopen in 1..=2 {
            let db = Database::builder().create(&self.path).unwrap();
            for n in 1..=3 {
                let rows = (self.row.as_slice(), self.small.as_slice());
                let per_commit = small_commits(&db, self.qr, 2000, rows, &mut || {
                    let l = seq;
                    seq += 1;
                    (l, u128::from(seq).wrapping_mul(0x9E3779B97F4A7C15))
                });
                println!(
                    "after reopen {reopen}, phase {n}: {:.1} KB written per commit",
                    per_commit / 1024.0
                );
            }
        }
    }
}

fn main() {
    let arg = |n: usize| std::env::args().nth(n);
    let path = arg(1).expect("path");
    let big: usize = arg(2).map(|s| s.parse().unwrap()).unwrap_or(5 << 20);
    let qr: bool = arg(3).map(|s| s == "qr").unwrap_or(true);
    let chunk: usize = arg(4).map(|s| s.parse().unwrap()).unwrap_or(big);
    let mode = arg(5).unwrap_or_default();
    let grow_gb: Option<f64> = mode.strip_prefix("grow").map(|g| g.parse().unwrap());
    let _ = std::fs::remove_file(&path);
    let db = Database::builder().create(&path).unwrap();
    let mut p = Probe {
        path,
        big,
        qr,
        chunk,
        seq: 0,
        rng: 0x9E3779B97F4A7C15,
        row: vec![7u8; 300],
        small: vec![3u8; 40],
    };
    p.phase(&db, "warm-up", 2000);
    p.phase(&db, "before any big value", 2000);
    if let Some(gb) = grow_gb {
        return p.grow(&db, gb);
    }
    if mode == "migrate" {
        return p.migrate(db);
    }
    p.put_big(&db, 1);
    p.phase(&db, "after the first big value", 2000);
    p.put_big(&db, 2);
    p.phase(&db, "after replacing it", 2000);
    p.put_big(&db, 3);
    p.put_big(&db, 4);
    p.phase(&db, "after replacing it twice more", 2000);
}
