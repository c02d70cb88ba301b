use super::*;
use crate::records::DepositStatus;
use crate::{ReadOps, Store, StoreOptions};

/// A deposit on `chain` seen in block 7 and not yet confirmed.
fn deposit(chain: &str) -> Deposit {
    Deposit {
        chain: chain.into(),
        block_number: 7,
        confirmations: 0,
        status: DepositStatus::Detected,
        ledger_tx_id: None,
        ..crate::codec::tests::deposit()
    }
}

fn reopen(store: Store, path: &std::path::Path) -> Store {
    let h = store.shutdown();
    drop(store);
    if let Some(h) = h {
        h.join().unwrap();
    }
    Store::open(path, StoreOptions::default()).unwrap()
}

/// A snapshot row of a simulated chain written over its last operation with the rows
/// below it deleted: the log then begins at the snapshot, `sim_last_seq` still names
/// the last row, and `verify` accepts it; a snapshot after a chain's first row, or a
/// log that begins elsewhere without one, is reported.
#[test]
fn a_snapshot_row_cuts_the_simulated_chain_log_and_verifies() {
    let op = test_rows::op();
    let snap = test_rows::snapshot(9, vec![1, 2, 3]);
    assert!(sim_row_is_snapshot(&snap) && sim_op_readable(&snap));
    assert!(!sim_row_is_snapshot(&op) && !sim_row_is_snapshot(b"{\"op\":\"empty\"}"));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let (p, q) = (Uuid::now_v7(), Uuid::now_v7());
    let (op2, snap2) = (op.clone(), snap.clone());
    let deleted = store
        .write_blocking(move |ctx| {
            for seq in 0..12 {
                ctx.sim_op_put(p, "ethereum", seq, &op2)?;
            }
            ctx.sim_op_put(q, "ethereum", 0, &op2)?;
            ctx.sim_snapshot_put(p, "ethereum", 9, &snap2)?;
            ctx.sim_ops_delete_below(p, "ethereum", 9)
        })
        .unwrap();
    assert_eq!(deleted, 9);
    let (rows, last, other) = store
        .read_blocking(move |r| {
            Ok((
                r.sim_ops_from(p, "ethereum")?,
                r.sim_last_seq(p, "ethereum")?,
                r.sim_ops_from(q, "ethereum")?.len(),
            ))
        })
        .unwrap();
    let seqs: Vec<u64> = rows.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, vec![9, 10, 11]);
    assert_eq!(
        rows[0].1, snap,
        "the snapshot reads back from its own table"
    );
    assert!(sim_row_is_snapshot(&rows[0].1));
    assert_eq!(last, Some(11));
    // The log holds a reference where the snapshot is; the snapshot its own row.
    let (in_log, kept) = store
        .read_blocking(move |r| {
            let log = r.open(SIM_OPS)?;
            let in_log = log
                .get((p.as_u128(), "ethereum", 9u64))?
                .map(|v| v.value().to_vec());
            let chunks = r.open(SIM_SNAPSHOT_CHUNKS)?;
            let kept: Vec<(u64, u32)> = chunks
                .iter()?
                .map(|e| e.map(|(k, _)| (k.value().2, k.value().3)))
                .collect::<Result<_, _>>()?;
            Ok((in_log, kept))
        })
        .unwrap();
    assert_eq!(in_log.as_deref(), Some(SIM_SNAPSHOT_REF));
    assert_eq!(kept, vec![(9, 0)], "one chunk of the one snapshot");
    assert_eq!(other, 1, "another chain's rows stay");
    let v = store.read_blocking(crate::verify::verify).unwrap();
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    // A snapshot after the first row, and a log beginning at 10 without one.
    store
        .write_blocking(move |ctx| {
            ctx.sim_op_put(p, "ethereum", 11, &snap)?;
            ctx.sim_op_put(q, "ethereum", 0, &op)?;
            ctx.sim_op_put(q, "ethereum", 1, &op)?;
            ctx.sim_ops_delete_below(q, "ethereum", 1)?;
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let v = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(v.violations.len(), 2, "{:?}", v.violations);
    assert!(v
        .violations
        .iter()
        .any(|m| m.contains("snapshot after its first")));
    assert!(v
        .violations
        .iter()
        .any(|m| m.contains("operation 1 where 0")));
}

/// A snapshot of many pages is stored in chunks of at most `SIM_SNAPSHOT_CHUNK` bytes
/// and reads back whole; the next snapshot of the chain replaces every chunk of the
/// last (another chain's stay); a snapshot with a chunk missing reads as unreadable and
/// `verify` names it.
#[test]
fn a_large_snapshot_is_stored_in_chunks_under_a_page() {
    let op = test_rows::op();
    let big: Vec<u8> = (0..10_000u32).map(|i| (i % 100) as u8).collect();
    let snap = test_rows::snapshot(5, big);
    let snap2 = test_rows::snapshot(8, vec![9; 4_000]);
    assert!(snap.len() > 3 * SIM_SNAPSHOT_CHUNK && snap.len() < 4 * SIM_SNAPSHOT_CHUNK);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let (p, q) = (Uuid::now_v7(), Uuid::now_v7());
    let chunks = |store: &Store| -> Vec<(u128, u64, u32, usize)> {
        store
            .read_blocking(|r| {
                let t = r.open(SIM_SNAPSHOT_CHUNKS)?;
                let mut out = Vec::new();
                for e in t.iter()? {
                    let (k, v) = e?;
                    let (kp, _, seq, n) = k.value();
                    out.push((kp, seq, n, v.value().len()));
                }
                Ok(out)
            })
            .unwrap()
    };
    let (o, s1) = (op.clone(), snap.clone());
    store
        .write_blocking(move |ctx| {
            for seq in 0..8 {
                ctx.sim_op_put(p, "ethereum", seq, &o)?;
                ctx.sim_op_put(q, "ethereum", seq, &o)?;
            }
            ctx.sim_snapshot_put(p, "ethereum", 5, &s1)?;
            ctx.sim_ops_delete_below(p, "ethereum", 5)?;
            ctx.sim_snapshot_put(q, "ethereum", 3, &s1)?;
            ctx.sim_ops_delete_below(q, "ethereum", 3)
        })
        .unwrap();
    // (sequence number, chunk number) of `id`'s chunks.
    let of = |got: &[(u128, u64, u32, usize)], id: Uuid| -> Vec<(u64, u32)> {
        got.iter()
            .filter(|c| c.0 == id.as_u128())
            .map(|c| (c.1, c.2))
            .collect()
    };
    let got = chunks(&store);
    assert_eq!(of(&got, p), vec![(5, 0), (5, 1), (5, 2), (5, 3)]);
    assert!(got.iter().all(|c| c.3 <= SIM_SNAPSHOT_CHUNK), "{got:?}");
    let rows = store
        .read_blocking(move |r| r.sim_ops_from(p, "ethereum"))
        .unwrap();
    assert_eq!(
        rows[0],
        (5, snap.clone()),
        "the chunks join to the snapshot"
    );
    assert_eq!(rows.len(), 3);
    let v = store.read_blocking(crate::verify::verify).unwrap();
    assert!(v.violations.is_empty(), "{:?}", v.violations);

    // The next snapshot of p replaces its four chunks with two; q's stay.
    let s2 = snap2.clone();
    store
        .write_blocking(move |ctx| {
            ctx.sim_snapshot_put(p, "ethereum", 7, &s2)?;
            ctx.sim_ops_delete_below(p, "ethereum", 7)
        })
        .unwrap();
    let got = chunks(&store);
    assert_eq!(of(&got, p), vec![(7, 0), (7, 1)]);
    assert_eq!(of(&got, q).len(), 4);
    let rows = store
        .read_blocking(move |r| r.sim_ops_from(p, "ethereum"))
        .unwrap();
    assert_eq!(rows, vec![(7, snap2)]);

    // A chunk of q's snapshot lost: its row reads as the bare reference, which
    // `verify` reports as unreadable.
    store
        .write_blocking(move |ctx| {
            let mut t = ctx.table(SIM_SNAPSHOT_CHUNKS)?;
            t.remove((q.as_u128(), "ethereum", 3u64, 1u32))?;
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let rows = store
        .read_blocking(move |r| r.sim_ops_from(q, "ethereum"))
        .unwrap();
    assert_eq!(rows[0], (3, SIM_SNAPSHOT_REF.to_vec()));
    let v = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert!(
        v.violations[0].contains("unreadable operation 3"),
        "{:?}",
        v.violations
    );
}

/// A store of schema version 1 (chain state under `format!` keys of `meta`, exactly as
/// schema 1 wrote it) opens, migrates every row to its table and verifies.
#[test]
fn a_version_1_store_migrates_its_chain_state_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let d = deposit("base-sepolia");
    let did = d.id;
    let rid = Uuid::now_v7();
    let tx = |nonce: u64, done: bool| {
        serde_json::json!({
            "nonce": nonce, "kind": "payout", "ref_id": Uuid::now_v7(),
            "project_id": Uuid::now_v7(),
            "to": "0x0000000000000000000000000000000000000003", "value": "0",
            "data": "", "gas_limit": 21000, "max_fee_per_gas": "2",
            "max_priority_fee_per_gas": "1", "raws": ["02"], "hashes": ["0x01"],
            "sent_at": 0, "done": done
        })
        .to_string()
    };
    let (t0, t1) = (tx(0, true), tx(1, false));
    let (t0c, t1c) = (t0.clone(), t1.clone());
    let watch =
        r#"{"cursor":{"height":9,"recent":[[8,"0x08"],[9,"0x09"]]},"chain_id_checked":true}"#;
    store
        .write_blocking(move |ctx| {
            ctx.put(&d)?;
            ctx.meta_put("schema_version", &1u32.to_be_bytes())?;
            ctx.meta_put(&format!("evm_tx:base-sepolia:{:020}", 0), t0.as_bytes())?;
            ctx.meta_put(&format!("evm_tx:base-sepolia:{:020}", 1), t1.as_bytes())?;
            ctx.meta_put("evm_txs:base-sepolia", b"[1]")?;
            ctx.meta_put("evm_nonce:base-sepolia", &2u64.to_be_bytes())?;
            ctx.meta_put("evm_watch:base-sepolia", watch.as_bytes())?;
            let ids = serde_json::to_vec(&[did]).unwrap();
            ctx.meta_put(&format!("evm_block:base-sepolia:{:020}", 7), &ids)?;
            ctx.meta_put(&format!("evm_block:base-sepolia:{:020}", 8), b"[]")?;
            ctx.meta_put("sim_height:ethereum", &41u64.to_be_bytes())?;
            ctx.meta_put(&format!("sweep_requested:{rid}"), b"1")?;
            ctx.meta_put("unrelated", b"1")?;
            Ok::<_, StoreError>(())
        })
        .unwrap();
    // Before the migration, verify names every legacy row.
    let before = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(before.violations.len(), 9, "{:?}", before.violations);

    let store = reopen(store, &path);
    let (version, left) = store
        .read_blocking(|r| {
            let v = r.meta_get("schema_version")?.unwrap();
            let mut left = Vec::new();
            for p in LEGACY_PREFIXES {
                let t = r.open(META)?;
                let end = legacy_end(p);
                for e in t.range(p..end.as_str())? {
                    left.push(e?.0.value().to_string());
                }
            }
            Ok((v, left))
        })
        .unwrap();
    assert_eq!(version, crate::schema::SCHEMA_VERSION.to_be_bytes());
    assert!(left.is_empty(), "{left:?}");
    let batch = store
        .read_blocking(|r| r.evm_out_txs("base-sepolia", &[1, 5, 0]))
        .unwrap();
    assert_eq!(
        batch,
        vec![(1, t1c.as_bytes().to_vec()), (0, t0c.as_bytes().to_vec())],
        "rows in the order asked, absent nonces left out"
    );
    let (tx0, tx1, pending, next, w, b7, b8, h) = store
        .read_blocking(|r| {
            Ok((
                r.evm_out_tx("base-sepolia", 0)?,
                r.evm_out_tx("base-sepolia", 1)?,
                r.evm_pending("base-sepolia")?,
                r.evm_next_nonce("base-sepolia")?,
                r.evm_watch("base-sepolia")?,
                r.evm_block_deposits("base-sepolia", 7)?,
                r.evm_block_deposits("base-sepolia", 8)?,
                r.sim_height("ethereum")?,
            ))
        })
        .unwrap();
    assert_eq!(tx0.as_deref(), Some(t0c.as_bytes()));
    assert_eq!(tx1.as_deref(), Some(t1c.as_bytes()));
    assert_eq!(pending, vec![1]);
    assert_eq!(next, 2);
    assert_eq!(w.unwrap(), watch.as_bytes());
    assert_eq!(b7, vec![did]);
    assert!(b8.is_empty());
    assert_eq!(h, 41);
    assert!(store
        .read_blocking(move |r| r.sweep_requested(rid))
        .unwrap());
    assert!(!store
        .read_blocking(|r| r.sweep_requested(Uuid::now_v7()))
        .unwrap());
    // Other meta rows stay where they are.
    let other = store.read_blocking(|r| r.meta_get("unrelated")).unwrap();
    assert_eq!(other.as_deref(), Some(&b"1"[..]));
    let v = store.read_blocking(crate::verify::verify).unwrap();
    assert!(v.violations.is_empty(), "{:?}", v.violations);

    // Opening again migrates nothing twice and the tables are written through the
    // typed accessors from then on.
    let store = reopen(store, &path);
    store
        .write_blocking(|ctx| {
            ctx.evm_pending_set("base-sepolia", 1, false)?;
            ctx.evm_block_deposits_clear("base-sepolia", 7)?;
            ctx.sim_height_put("ethereum", 42)?;
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let (pending, b7, h) = store
        .read_blocking(|r| {
            Ok((
                r.evm_pending("base-sepolia")?,
                r.evm_block_deposits("base-sepolia", 7)?,
                r.sim_height("ethereum")?,
            ))
        })
        .unwrap();
    assert!(pending.is_empty());
    assert!(b7.is_empty());
    assert_eq!(h, 42);
}

/// The deposits of blocks a reorg can no longer reach are forgotten oldest first, at
/// most `limit` per call, and only on the chain named; later blocks stay.
#[test]
fn old_blocks_deposits_are_forgotten_in_steps() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let ids: Vec<Uuid> = (0..10).map(|_| Uuid::now_v7()).collect();
    let ids2 = ids.clone();
    store
        .write_blocking(move |ctx| {
            for (i, id) in ids2.iter().enumerate() {
                ctx.evm_block_deposit_add("ethereum", i as u64 / 2, *id)?;
                ctx.evm_block_deposit_add("bsc", i as u64 / 2, *id)?;
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
    // Blocks 0..=3 hold 8 rows: 5, then the 3 left, then none.
    for want in [5, 3, 0] {
        let n = store
            .write_blocking(|ctx| ctx.evm_block_deposits_forget_through("ethereum", 3, 5))
            .unwrap();
        assert_eq!(n, want);
    }
    let (b3, b4, other) = store
        .read_blocking(|r| {
            Ok((
                r.evm_block_deposits("ethereum", 3)?,
                r.evm_block_deposits("ethereum", 4)?,
                r.evm_block_deposits("bsc", 0)?,
            ))
        })
        .unwrap();
    assert!(b3.is_empty());
    assert_eq!(b4.len(), 2, "a later block stays");
    assert_eq!(other.len(), 2, "another chain stays");
}
