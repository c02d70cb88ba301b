//! Where the bytes of a store go: per table, its rows and redb's own figures (leaf and branch pages, stored bytes, fragmentation); the `index`
//! and `unique` tables broken down by [`IndexTag`], the `events` table by event type. For
//! the store's bytes per confirmed deposit (docs/performance.md, "Store bytes per confirmed
//! deposit").
//!
//! ```text
//! cargo run --release --example store_stats -- DATA_DIR_OR_STORE_FILE [--per N]
//! ```
//!
//! `--per N` also divides every figure by N (say, the confirmed deposits of a run). The store
//! must not be open in a server (redb opens it exclusively). Read only: nothing is written.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableHandle};

use appliance_storage::schema;

#[derive(Default)]
struct Sum {
    rows: u64,
    key_bytes: u64,
    value_bytes: u64,
}

impl Sum {
    fn add(&mut self, k: usize, v: usize) {
        self.rows += 1;
        self.key_bytes += k as u64;
        self.value_bytes += v as u64;
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut path: Option<PathBuf> = None;
    let mut per: Option<f64> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--per" => per = Some(args.next().context("--per needs a value")?.parse()?),
            _ if path.is_none() => path = Some(a.into()),
            _ => bail!("usage: store_stats DATA_DIR_OR_STORE_FILE [--per N]"),
        }
    }
    let mut path = path.context("usage: store_stats DATA_DIR_OR_STORE_FILE [--per N]")?;
    if path.is_dir() {
        path = path.join("appliance.redb");
    }
    let file_len = std::fs::metadata(&path)
        .with_context(|| format!("{}", path.display()))?
        .len();
    let db = redb::Database::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let r = db.begin_read()?;
    let div = per.unwrap_or(1.0);
    let f = |x: u64| x as f64 / div;
    println!(
        "{}: {file_len} bytes{}",
        path.display(),
        per.map(|n| format!(" ({:.0} per unit of {n})", file_len as f64 / n))
            .unwrap_or_default()
    );
    println!(
        "{:<22} {:>10} {:>8} {:>8} {:>12} {:>12}",
        "table", "rows", "leaves", "branches", "stored B", "frag B"
    );
    let mut total_pages = 0u64;
    let mut tables: Vec<_> = r.list_tables()?.collect();
    tables.sort_by(|a, b| a.name().cmp(b.name()));
    for h in tables {
        let name = h.name().to_string();
        let t = r.open_untyped_table(h)?;
        let s = t.stats()?;
        total_pages += s.leaf_pages() + s.branch_pages();
        println!(
            "{:<22} {:>10.2} {:>8.3} {:>8.3} {:>12.1} {:>12.1}",
            name,
            f(t.len()?),
            f(s.leaf_pages()),
            f(s.branch_pages()),
            f(s.stored_bytes()),
            f(s.fragmented_bytes()),
        );
    }
    println!(
        "pages in tables: {total_pages} ({:.1} bytes per unit)",
        (total_pages * 4096) as f64 / div
    );

    keys_by_tag(&r, "index", schema::INDEX, &f)?;
    for (_, def) in schema::SPLIT_INDEXES {
        keys_by_tag(&r, def.name(), def, &f)?;
    }
    keys_by_tag(&r, "unique", schema::UNIQUE, &f)?;
    {
        let t = r.open_table(schema::EVENTS)?;
        let mut by: BTreeMap<String, Sum> = BTreeMap::new();
        for e in t.iter()? {
            let (_, v) = e?;
            let v = v.value();
            let ty = appliance_storage::codec::decode::<appliance_storage::records::Event>(v)
                .map(|e| e.event_type)
                .unwrap_or_else(|_| "(undecodable)".into());
            by.entry(ty).or_default().add(24, v.len());
        }
        println!("events by type (value bytes):");
        for (ty, s) in by {
            println!(
                "  {ty:<28} {:>10.2} rows, {:>10.1} value bytes ({:.0} per row)",
                f(s.rows),
                f(s.value_bytes),
                s.value_bytes as f64 / s.rows.max(1) as f64
            );
        }
    }
    Ok(())
}

/// Prints the keys of a table keyed by [`IndexTag`] ‖ ..., counted by their tag byte.
fn keys_by_tag<V: redb::Value + 'static>(
    r: &redb::ReadTransaction,
    name: &str,
    def: redb::TableDefinition<&[u8], V>,
    f: &impl Fn(u64) -> f64,
) -> Result<()> {
    let t = match r.open_table(def) {
        Ok(t) => t,
        // A store older than the table (schema 7's split indexes).
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut by: BTreeMap<u8, Sum> = BTreeMap::new();
    for e in t.iter()? {
        let (k, _) = e?;
        let k = k.value();
        by.entry(k.first().copied().unwrap_or(0))
            .or_default()
            .add(k.len(), 0);
    }
    println!("{name} by tag:");
    for (tag, s) in by {
        println!(
            "  tag {tag:>3}: {:>10.2} keys, {:>10.1} key bytes",
            f(s.rows),
            f(s.key_bytes)
        );
    }
    Ok(())
}
