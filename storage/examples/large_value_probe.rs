//! Probe of redb's write cost after a large value is replaced (docs/performance.md,
//! "Large values and quick repair").
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

fn main() {
    let path = std::env::args().nth(1).expect("path");
    let big: usize = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(5 << 20);
    let qr: bool = std::env::args().nth(3).map(|s| s == "qr").unwrap_or(true);
    let chunk: usize = std::env::args()
        .nth(4)
        .map(|s| s.parse().unwrap())
        .unwrap_or(big);
    let mode = std::env::args().nth(5).unwrap_or_default();
    let migrate = mode == "migrate";
    let grow_gb: Option<f64> = mode.strip_prefix("grow").map(|g| g.parse().unwrap());
    let _ = std::fs::remove_file(&path);
    let db = Database::builder().create(&path).unwrap();
    let mut seq = 0u64;
    let mut rng = 0x9E3779B97F4A7C15u128;
    let row = vec![7u8; 300];
    let small = vec![3u8; 40];
    let mut phase = |db: &Database, name: &str, commits: u32| {
        let t0 = Instant::now();
        let per_commit = small_commits(db, qr, commits, (&row, &small), &mut || {
            let l = seq;
            seq += 1;
            rng = rng
                .wrapping_mul(0x2545F4914F6CDD1D2545F4914F6CDD1D)
                .wrapping_add(1442695040888963407);
            (l, rng)
        });
        println!(
            "{name}: {commits} commits, {:.1} KB written per commit, {:.2} s",
            per_commit / 1024.0,
            t0.elapsed().as_secs_f64()
        );
    };
    let put_big = |db: &Database, fill: u8| {
        let b0 = write_bytes();
        let v = vec![fill; big];
        let txn = begin(db, qr);
        {
            let mut t = txn.open_table(SNAP).unwrap();
            for (i, c) in v.chunks(chunk).enumerate() {
                t.insert(i as u64, c).unwrap();
            }
        }
        txn.commit().unwrap();
        println!(
            "big value {big} B: {:.1} KB written",
            (write_bytes() - b0) as f64 / 1024.0
        );
    };
    phase(&db, "warm-up", 2000);
    phase(&db, "before any big value", 2000);
    if let Some(gb) = grow_gb {
        // Only growth, nothing freed: GB of 3,000 B rows appended, then the small commits.
        let b0 = write_bytes();
        let part = vec![5u8; 3_000];
        let rows = (gb * 1e9 / 3_000.0) as u64;
        let mut k = 0u64;
        while k < rows {
            let mut txn = db.begin_write().unwrap();
            txn.set_durability(Durability::Immediate).unwrap();
            txn.set_quick_repair(qr);
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
            std::fs::metadata(&path).unwrap().len() as f64 / 1e9
        );
        for n in 1..=2 {
            phase(&db, &format!("after growing, phase {n}"), 2000);
        }
        return;
    }
    if migrate {
        // The schema 11 migration: one large row written once, then removed and written
        // again as rows of 3,000 B. Does the cost of the freed value last, and past a reopen?
        put_big(&db, 1);
        phase(&db, "after the first big value", 2000);
        let b0 = write_bytes();
        let txn = begin(&db, qr);
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
            phase(&db, &format!("after the move, phase {n}"), 2000);
        }
        drop(db);
        let mut seq = u64::MAX / 2;
        for reopen in 1..=2 {
            let db = Database::builder().create(&path).unwrap();
            for n in 1..=3 {
                let per_commit = small_commits(&db, qr, 2000, (&row, &small), &mut || {
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
        return;
    }
    put_big(&db, 1);
    phase(&db, "after the first big value", 2000);
    put_big(&db, 2);
    phase(&db, "after replacing it", 2000);
    put_big(&db, 3);
    put_big(&db, 4);
    phase(&db, "after replacing it twice more", 2000);
}
