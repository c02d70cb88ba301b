//! Opening a store: every table made to exist, and the ladder of schema migrations that
//! brings a store of an older version to [`schema::SCHEMA_VERSION`] (schema.rs describes
//! each version). The ladder is data, [`LADDER`]: one step per version that rewrites rows,
//! run in order by one loop, all in the opening transaction, so a crash leaves the old
//! version whole.

mod rekey;
mod rows;
mod runs;

use redb::Database;

use crate::codec::Migrated;
use crate::{chain_state, schema, StoreError};

/// One step of the ladder: it runs on a store whose version is below `to`.
struct Step {
    /// The schema version the step brings a store to.
    to: u32,
    /// What it does, for the log.
    what: &'static str,
    /// The step: rows rewritten, and rows of the old shape left for `verify` to report.
    run: fn(&redb::WriteTransaction) -> Result<Migrated, StoreError>,
}

/// Every migration step, in version order. Versions without a step (10) change no stored
/// row. A step that only removes or moves rows reports them as `rows`.
const LADDER: &[Step] = &[
    Step {
        to: 3,
        what: "chain state moved out of meta",
        run: |txn| {
            let m = chain_state::migrate_meta(txn)?;
            Ok(Migrated {
                rows: m.rows,
                left: m.left,
            })
        },
    },
    Step {
        to: 4,
        what: "records rewritten as MessagePack, holdings moved into accounts",
        run: rows::migrate_to_4,
    },
    Step {
        to: 5,
        what: "address keys laid out address first",
        // Every `UniqueAddress` key (chain ‖ address) of `unique` becomes its address key
        // with the same wallet id, in the current layout (schema 16's digest, not the
        // address ‖ chain schema 5 wrote); one without the old shape stays (in `left`).
        run: |txn| {
            rekey::rekey(
                txn,
                schema::UNIQUE,
                crate::index::IndexTag::UniqueAddress,
                crate::index::address_key_from_legacy,
            )
        },
    },
    Step {
        to: 6,
        what: "deposit index entries by wallet removed",
        run: |txn| {
            Ok(Migrated {
                rows: rows::migrate_to_6(txn)?,
                left: 0,
            })
        },
    },
    Step {
        to: 7,
        what: "index keys of the hot tags and of events moved to tables of their own",
        run: rows::migrate_to_7,
    },
    Step {
        to: 8,
        what: "open sweeps named by their wallets' holding rows",
        run: rows::migrate_to_8,
    },
    Step {
        to: 9,
        what: "deposits and sweeps indexed under their customers",
        run: rows::migrate_to_9,
    },
    Step {
        to: 11,
        what: "simulated chain snapshots stored in chunks",
        run: |txn| {
            Ok(Migrated {
                rows: chain_state::migrate_sim_snapshots(txn)?,
                left: 0,
            })
        },
    },
    Step {
        to: 12,
        what: "event type index keyed by a hash of the type",
        run: runs::migrate_to_12,
    },
    Step {
        to: 13,
        what: "event indexes kept as runs of sequences",
        run: runs::migrate_to_13,
    },
    Step {
        to: 14,
        what: "index keys listed per customer kept as runs of ids",
        run: runs::migrate_to_14,
    },
    Step {
        to: 15,
        what: "a project's lists kept as runs of ids",
        run: runs::migrate_to_15,
    },
    Step {
        to: 16,
        what: "transfer and address keys stored as digests",
        run: runs::migrate_to_16,
    },
];

/// Opens the store's schema in one transaction: refuses a store newer than this build
/// ([`StoreError::SchemaTooNew`]), records [`schema::SCHEMA_VERSION`], makes every table
/// exist, and runs each [`LADDER`] step above the version found. A new store runs none.
pub(crate) fn init_schema(db: &Database) -> Result<(), StoreError> {
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
    open_tables(&txn)?;
    if let Some(found) = found {
        for step in LADDER.iter().filter(|s| found < s.to) {
            let m = (step.run)(&txn)?;
            tracing::info!(
                rows = m.rows,
                left = m.left,
                "{} (schema version {})",
                step.what,
                step.to
            );
        }
    }
    txn.commit()?;
    Ok(())
}

/// Makes every table of the schema exist.
fn open_tables(txn: &redb::WriteTransaction) -> Result<(), StoreError> {
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
    Ok(())
}
