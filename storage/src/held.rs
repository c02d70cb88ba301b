//! Runs a batch holds ahead of their rows: the last run of a list ([`crate::id_runs::Tail`])
//! or of an event index ([`crate::event_runs::Tail`]) takes the batch's appends in memory and
//! is written once (docs/decisions.md, "A batch also holds the last run"). This module keeps
//! what both kinds share: the map by prefix, and writing a run out.

use redb::Table;

use crate::StoreError;

/// A table of runs: prefix ‖ first -> the run's value.
pub(crate) type RunsTable<'t> = Table<'t, &'static [u8], &'static [u8]>;

/// A run held by the batch (always ahead of its row: a run is held from an append on).
pub(crate) trait HeldRun {
    /// Its row (key, value) under `prefix`.
    fn row(&self, prefix: &[u8]) -> (Vec<u8>, Vec<u8>);
}

/// The batch's held runs of one kind, by prefix.
pub(crate) type Held<T> = std::collections::HashMap<Box<[u8]>, T>;

/// Writes `run` (of `prefix`) into `runs`.
pub(crate) fn write<T: HeldRun>(
    runs: &mut RunsTable<'_>,
    prefix: &[u8],
    run: &T,
) -> Result<(), StoreError> {
    let (k, v) = run.row(prefix);
    runs.insert(k.as_slice(), v.as_slice())?;
    Ok(())
}

/// Writes `prefix`'s held run, if any, and forgets it: before anything but an append
/// reaches the prefix's runs.
pub(crate) fn forget<T: HeldRun>(
    runs: &mut RunsTable<'_>,
    held: &mut Held<T>,
    prefix: &[u8],
) -> Result<(), StoreError> {
    match held.remove(prefix) {
        Some(run) => write(runs, prefix, &run),
        None => Ok(()),
    }
}

/// Writes and forgets the held runs whose prefix `of_table` accepts (those of `runs`'
/// table).
pub(crate) fn forget_all<T: HeldRun>(
    runs: &mut RunsTable<'_>,
    held: &mut Held<T>,
    of_table: impl Fn(&[u8]) -> bool,
) -> Result<(), StoreError> {
    let prefixes: Vec<Box<[u8]>> = held.keys().filter(|p| of_table(p)).cloned().collect();
    for p in prefixes {
        forget(runs, held, &p)?;
    }
    Ok(())
}
