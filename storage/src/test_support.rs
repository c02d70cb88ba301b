//! Helpers shared by the unit tests of this crate.

use redb::ReadableTable;

/// A database in memory, for tests that need a transaction and no file.
pub(crate) fn memory_db() -> redb::Database {
    redb::Database::builder()
        .create_with_backend(redb::backends::InMemoryBackend::new())
        .expect("an in-memory database")
}

/// Every row of a table of byte keys and values, in key order.
pub(crate) fn table_rows(
    t: &impl ReadableTable<&'static [u8], &'static [u8]>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    t.iter()
        .expect("a table's rows")
        .map(|e| {
            let (k, v) = e.expect("a row");
            (k.value().to_vec(), v.value().to_vec())
        })
        .collect()
}
