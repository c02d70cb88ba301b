//! Schema 3 -> 4: a store whose rows are JSON (`1 ‖ json`, exactly as the releases before
//! schema version 4 wrote them) verifies as it is, opens, migrates to MessagePack and
//! verifies again, with every record unchanged; so does a backup taken before the upgrade.

use std::collections::BTreeMap;
use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};
use serde::Serialize;
use uuid::Uuid;

use crate::codec::{
    decode, decode_keyed, encode_json_v1, JSON_VERSION, KEYED_TIMES_VERSION, KEYED_VERSION,
    VALUE_VERSION,
};
use crate::ledger::{Account, AccountKind, JournalEntry, Posting};
use crate::records::{Customer, Deposit, DepositStatus, IdempotencyRecord, Wallet};
use crate::schema::{self, *};
use crate::{Delta, ReadOps, Store, StoreError, StoreOptions};

/// A value of a record table decoded as its readers do, from the raw bytes of its key (a
/// row id is a `u128`, which redb stores little-endian): a keyed value gets its id back.
fn decode_at<T: crate::codec::Record>(key: &[u8], v: &[u8]) -> T {
    if matches!(v.first(), Some(&(KEYED_VERSION | KEYED_TIMES_VERSION))) {
        let id = u128::from_le_bytes(key.try_into().expect("a keyed value is under a u128"));
        return decode_keyed(id, v).unwrap();
    }
    decode(v).unwrap()
}

fn close(store: Store) {
    let h = store.shutdown();
    drop(store);
    if let Some(h) = h {
        h.join().unwrap();
    }
}

/// A copy of a store taken before its upgrade (a backup, at `old_copy`) opens, migrates
/// and passes `check`; so does a backup of it taken after (`backup.redb` beside it).
fn an_old_copy_and_its_backup(old_copy: &Path, check: impl Fn(&Store)) {
    let store = Store::open(old_copy, StoreOptions::default()).unwrap();
    check(&store);
    let dest = old_copy.with_file_name("backup.redb");
    store
        .read_blocking(|r| crate::backup::backup(r, &dest))
        .unwrap();
    close(store);
    let copy = Store::open(&dest, StoreOptions::default()).unwrap();
    check(&copy);
    close(copy);
}

/// `store` is at the current schema version and `verify` finds nothing.
fn at_current_schema_and_clean(store: &Store) {
    let v = store
        .read_blocking(|r| r.meta_get("schema_version"))
        .unwrap();
    assert_eq!(v, Some(schema::SCHEMA_VERSION.to_be_bytes().to_vec()));
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
}

/// A sweep of wallet `w` in `asset` at `status`, of 1 atomic unit, opened at block 1 and
/// not sent.
fn sweep_of(
    w: &Wallet,
    asset: &str,
    status: crate::records::SweepStatus,
    now: i64,
) -> crate::records::Sweep {
    crate::records::Sweep {
        id: Uuid::now_v7(),
        project_id: w.project_id,
        wallet_id: w.id,
        chain: w.chain.clone(),
        asset: asset.to_string(),
        amount: 1,
        status,
        skip_reason: None,
        tx_hash: None,
        open_block: Some(1),
        submitted_block: None,
        created_at: now,
        updated_at: now,
        customer_id: w.customer_id,
    }
}

/// Writes a small but complete merchant history through the current code: customers,
/// wallets, confirmed deposits with their ledger entries and holdings, events and
/// idempotency records. Returns the project.
fn populate(store: &Store) -> Uuid {
    let p = Uuid::now_v7();
    for i in 0..5u32 {
        store
            .write_blocking(move |ctx| {
                let now = ctx.now_us();
                let c = Customer {
                    id: Uuid::now_v7(),
                    project_id: p,
                    reference_id: Some(format!("ref-{i}")),
                    email: Some(format!("c{i}@example.com")),
                    status: crate::records::CustomerStatus::Active,
                    metadata: serde_json::json!({"tier": "gold", "i": i}),
                    created_at: now,
                };
                ctx.put(&c)?;
                ctx.append_event(
                    p,
                    false,
                    "customer.created",
                    &c.id.to_string(),
                    serde_json::to_value(&c).unwrap(),
                )?;
                let w = Wallet {
                    id: Uuid::now_v7(),
                    project_id: p,
                    customer_id: c.id,
                    invoice_id: None,
                    chain: "ethereum".into(),
                    role: "deposit".into(),
                    status: "active".into(),
                    address: format!("0x{:040x}", i + 1),
                    memo: None,
                    created_at: now,
                };
                ctx.put(&w)?;
                let amount = 1_000_000u128 * u128::from(i + 1) + (1u128 << 70);
                let entry = JournalEntry {
                    id: Uuid::now_v7(),
                    project_id: p,
                    kind: "deposit_credit".into(),
                    ref_id: w.id,
                    created_at: now,
                    postings: vec![
                        Posting::debit(
                            Account::project(p, "ethereum", "USDT", AccountKind::Deposits),
                            amount,
                        ),
                        Posting::credit(
                            Account::customer(p, c.id, "ethereum", "USDT", AccountKind::Available),
                            amount,
                        ),
                    ],
                };
                ctx.post(&entry)?.expect("balanced");
                ctx.holding_add(w.id, "USDT", Delta::Add(amount))?;
                let d = Deposit {
                    id: Uuid::now_v7(),
                    project_id: p,
                    customer_id: c.id,
                    invoice_id: None,
                    late: false,
                    funding: false,
                    awaiting_price: false,
                    wallet_id: w.id,
                    chain: "ethereum".into(),
                    asset: "USDT".into(),
                    amount,
                    tx_hash: format!("0x{:064x}", i),
                    log_index: 0,
                    from_address: "0x00000000000000000000000000000000000000ff".into(),
                    to_address: w.address.clone(),
                    block_number: 10 + u64::from(i),
                    block_time: now,
                    confirmations: 12,
                    required_confirmations: 12,
                    status: DepositStatus::Confirmed,
                    failure_reason: None,
                    ledger_tx_id: Some(entry.id),
                    reversal_tx_id: None,
                    manual: false,
                    created_at: now,
                    updated_at: now,
                };
                ctx.put(&d)?;
                ctx.append_event(
                    p,
                    false,
                    "deposit.confirmed",
                    &d.id.to_string(),
                    serde_json::json!({"id": d.id, "amount": d.amount.to_string()}),
                )?;
                let rec = IdempotencyRecord {
                    request_hash: "ab".repeat(32),
                    status: 201,
                    body: serde_json::to_string(&d).unwrap(),
                    created_at: now,
                };
                ctx.idempotency_put(format!("key-{i}").as_bytes(), &rec)?;
                Ok::<_, StoreError>(())
            })
            .unwrap();
    }
    p
}

/// Every value of a record table as `T`, by raw key, with the encoding version of each.
fn dump<K: redb::Key + 'static, T: crate::codec::Record>(
    db: &Database,
    def: TableDefinition<K, &[u8]>,
) -> BTreeMap<Vec<u8>, (u8, Vec<u8>)> {
    let r = db.begin_read().unwrap();
    let t = r.open_table(def).unwrap();
    let mut out = BTreeMap::new();
    for e in t.iter().unwrap() {
        let (k, v) = e.unwrap();
        let rec: T = decode_at(K::as_bytes(&k.value()).as_ref(), v.value());
        out.insert(
            K::as_bytes(&k.value()).as_ref().to_vec(),
            (v.value()[0], crate::codec::encode(&rec)),
        );
    }
    out
}

type Dump = BTreeMap<&'static str, BTreeMap<Vec<u8>, (u8, Vec<u8>)>>;

fn dump_all(db: &Database) -> Dump {
    let mut all = Dump::new();
    macro_rules! d {
        ($def:ident, $ty:ty) => {
            all.insert($def.name(), dump::<_, $ty>(db, $def));
        };
    }
    schema::for_each_record_table!(d);
    all
}

/// Rewrites the store at `path` as a schema 3 release left it: every record value
/// `1 ‖ JSON` (the encoding of that release, byte for byte), the `sequences` table
/// holding each project's last event sequence, `schema_version` 3.
fn downgrade_to_3(path: &Path) {
    let db = Database::create(path).unwrap();
    let w = db.begin_write().unwrap();
    fn to_json<K: redb::Key + 'static, T: crate::codec::Record>(
        w: &redb::WriteTransaction,
        def: TableDefinition<K, &[u8]>,
    ) {
        let mut t = w.open_table(def).unwrap();
        let mut rows = Vec::new();
        for e in t.iter().unwrap() {
            let (k, v) = e.unwrap();
            let rec: T = decode_at(K::as_bytes(&k.value()).as_ref(), v.value());
            rows.push((
                K::as_bytes(&k.value()).as_ref().to_vec(),
                encode_json_v1(&rec),
            ));
        }
        for (k, v) in rows {
            t.insert(K::from_bytes(&k), v.as_slice()).unwrap();
        }
    }
    macro_rules! j {
        ($def:ident, $ty:ty) => {
            to_json::<_, $ty>(&w, $def)
        };
    }
    schema::for_each_record_table!(j);
    {
        // Holdings lived in their own table, keyed wallet ‖ asset.
        let mut accounts = w.open_table(ACCOUNTS).unwrap();
        let mut holdings = w.open_table(LEGACY_HOLDINGS).unwrap();
        let mut moved = Vec::new();
        for e in accounts.iter().unwrap() {
            let (k, v) = e.unwrap();
            if let Some((_, _, _, asset, wallet)) = crate::ledger::parse_holding_key(k.value()) {
                moved.push((k.value().to_vec(), wallet, asset, v.value().0));
            }
        }
        assert_eq!(moved.len(), 5);
        for (k, wallet, asset, amount) in moved {
            accounts.remove(k.as_slice()).unwrap();
            let old = [wallet.as_bytes().as_slice(), asset.as_bytes()].concat();
            holdings.insert(old.as_slice(), amount).unwrap();
        }
    }
    {
        let events = w.open_table(EVENTS).unwrap();
        let mut seqs = w.open_table(LEGACY_SEQUENCES).unwrap();
        for e in events.iter().unwrap() {
            let (k, _) = e.unwrap();
            let (p, s) = k.value();
            seqs.insert(p, s).unwrap();
        }
        let mut meta = w.open_table(META).unwrap();
        meta.insert("schema_version", 3u32.to_be_bytes().as_slice())
            .unwrap();
    }
    w.commit().unwrap();
}

fn versions(d: &Dump) -> BTreeMap<u8, usize> {
    let mut n = BTreeMap::new();
    for rows in d.values() {
        for (v, _) in rows.values() {
            *n.entry(*v).or_default() += 1;
        }
    }
    n
}

fn strip(d: &Dump) -> BTreeMap<&'static str, BTreeMap<Vec<u8>, Vec<u8>>> {
    d.iter()
        .map(|(t, rows)| {
            (
                *t,
                rows.iter()
                    .map(|(k, (_, v))| (k.clone(), v.clone()))
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn a_json_valued_store_verifies_migrates_and_verifies_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p = populate(&store);
    close(store);
    downgrade_to_3(&path);

    // The old store as it lies: every record JSON, and `verify` (of this build) is clean.
    let before = {
        let db = Database::create(&path).unwrap();
        let d = dump_all(&db);
        let n = versions(&d);
        assert_eq!(n.get(&VALUE_VERSION), None, "{n:?}");
        assert!(n[&JSON_VERSION] >= 5 * 5, "{n:?}");
        let r = crate::ReadCtx::new(db.begin_read().unwrap());
        let rep = crate::verify::verify(&r).unwrap();
        assert!(rep.violations.is_empty(), "{:?}", rep.violations);
        assert_eq!(rep.journal_entries, 5);
        assert_eq!(rep.events, 10);
        d
    };

    // A backup of the old store, taken before the upgrade (raw copy of the file).
    let old_copy = dir.path().join("old-backup.redb");
    std::fs::copy(&path, &old_copy).unwrap();

    // Opening migrates: every record MessagePack, nothing changed in content, the
    // sequences table gone, verify clean, and the event log carries on where it was.
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    assert_eq!(store.read_blocking(|r| r.last_sequence(p)).unwrap(), 10);
    let mut held: Vec<u128> = store
        .read_blocking(|r| {
            crate::ScanOps::all::<Wallet>(r)?
                .iter()
                .map(|w| r.holding(w.id, "USDT"))
                .collect()
        })
        .unwrap();
    held.sort();
    let want: Vec<u128> = (1..=5u128).map(|i| 1_000_000 * i + (1u128 << 70)).collect();
    assert_eq!(held, want);
    let ev = store
        .write_blocking(move |ctx| {
            ctx.append_event(p, false, "customer.updated", "x", serde_json::json!({}))
        })
        .unwrap();
    assert_eq!(ev.sequence, 11);
    let v = store
        .read_blocking(|r| r.meta_get("schema_version"))
        .unwrap()
        .unwrap();
    assert_eq!(v, schema::SCHEMA_VERSION.to_be_bytes());
    close(store);
    {
        let db = Database::create(&path).unwrap();
        let mut after = dump_all(&db);
        let n = versions(&after);
        assert_eq!(n.get(&JSON_VERSION), None, "{n:?}");
        // Drop the event appended after the migration before comparing contents.
        let events = after.get_mut(EVENTS.name()).unwrap();
        let last = events.keys().last().unwrap().clone();
        events.remove(&last);
        assert_eq!(strip(&after), strip(&before));
        let r = db.begin_read().unwrap();
        let tables: Vec<String> = r
            .list_tables()
            .unwrap()
            .map(|t| t.name().to_string())
            .collect();
        assert!(!tables.contains(&"sequences".to_string()), "{tables:?}");
        assert!(!tables.contains(&"holdings".to_string()), "{tables:?}");
    }

    // The old backup restores into this build: it opens, migrates and verifies, and a
    // backup of it is complete.
    let store = Store::open(&old_copy, StoreOptions::default()).unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    assert_eq!(rep.events, 10);
    let dest = dir.path().join("new-backup.redb");
    let b = store
        .read_blocking(|r| crate::backup::backup(r, &dest))
        .unwrap();
    assert!(b.rows > 0);
    close(store);
    let copy = Store::open(&dest, StoreOptions::default()).unwrap();
    let rep = copy.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    let c: Vec<Customer> = copy.read_blocking(crate::ScanOps::all).unwrap();
    assert_eq!(c.len(), 5);
}

/// A JSON row that does not decode, and a holding whose wallet is missing, are left as they
/// are by the migration and reported by verify; the rest of the store migrates.
#[test]
fn an_undecodable_json_row_is_left_for_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    populate(&store);
    close(store);
    downgrade_to_3(&path);
    let bad = Uuid::now_v7();
    {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        w.open_table(CUSTOMERS)
            .unwrap()
            .insert(
                bad.as_u128(),
                [&[JSON_VERSION][..], b"{\"id\":"].concat().as_slice(),
            )
            .unwrap();
        let orphan = [Uuid::now_v7().as_bytes().as_slice(), b"USDT"].concat();
        w.open_table(LEGACY_HOLDINGS)
            .unwrap()
            .insert(orphan.as_slice(), 0)
            .unwrap();
        w.commit().unwrap();
    }
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(rep.violations.len(), 2, "{:?}", rep.violations);
    assert!(
        rep.violations.iter().any(|v| v.contains(&bad.to_string())),
        "{:?}",
        rep.violations
    );
    assert!(
        rep.violations.iter().any(|v| v.contains("missing wallet")),
        "{:?}",
        rep.violations
    );
    close(store);
    let db = Database::create(&path).unwrap();
    let r = db.begin_read().unwrap();
    let t = r.open_table(CUSTOMERS).unwrap();
    assert_eq!(
        t.get(bad.as_u128()).unwrap().unwrap().value()[0],
        JSON_VERSION
    );
}

/// Schema 4 -> 5: every address key moves from chain ‖ address to address ‖ chain
/// (`index::address_key`) with its wallet id; a key of the old tag that does not have the
/// old shape stays where it was, and `verify` names it.
#[test]
fn address_keys_move_to_the_address_first_layout() {
    use crate::index::{self, IndexTag};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let a = "0x35503aB8094214FeD332D87630B21FaF4D79ea84";
    let b = "0x00000000000000000000000000000000000000b2";
    let keys: Vec<(&str, &str, Uuid)> = vec![
        ("ethereum", a, Uuid::now_v7()),
        ("bsc", a, Uuid::now_v7()),
        ("polygon", a, Uuid::now_v7()),
        ("ethereum", b, Uuid::now_v7()),
    ];
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let k = keys.clone();
    store
        .write_blocking(move |ctx| {
            for (c, addr, id) in &k {
                ctx.unique_put(&index::address_key(c, addr), *id)?;
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
    close(store);

    // As schema 4 left it: chain ‖ lower-case address, and one key of that tag that is
    // not of that shape.
    let odd = vec![IndexTag::UniqueAddress as u8, 1, 2, 3];
    {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut u = w.open_table(UNIQUE).unwrap();
            for (c, addr, id) in &keys {
                u.remove(index::address_key(c, addr).as_slice()).unwrap();
                let old = index::unique(
                    IndexTag::UniqueAddress,
                    Uuid::nil(),
                    &[c.as_bytes(), addr.to_ascii_lowercase().as_bytes()],
                );
                u.insert(old.as_slice(), id.as_u128()).unwrap();
            }
            u.insert(odd.as_slice(), 7).unwrap();
            let mut meta = w.open_table(META).unwrap();
            meta.insert("schema_version", 4u32.to_be_bytes().as_slice())
                .unwrap();
        }
        w.commit().unwrap();
    }

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    for (c, addr, id) in keys.clone() {
        let got = store
            .read_blocking(move |r| r.unique_get(&index::address_key(c, addr)))
            .unwrap();
        assert_eq!(got, Some(id), "{c} {addr}");
    }
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    assert!(
        rep.violations[0].contains(&hex::encode(&odd)),
        "{:?}",
        rep.violations
    );
    let v = store
        .read_blocking(|r| r.meta_get("schema_version"))
        .unwrap()
        .unwrap();
    assert_eq!(v, schema::SCHEMA_VERSION.to_be_bytes());
    close(store);
    assert_eq!(
        unique_keys_by_tag(&path),
        BTreeMap::from([
            (IndexTag::UniqueAddress as u8, 1),
            (IndexTag::UniqueAddressDigest as u8, 4),
        ])
    );
}

/// The keys of a closed store's `unique` table, counted by tag byte.
fn unique_keys_by_tag(path: &Path) -> BTreeMap<u8, usize> {
    let db = Database::create(path).unwrap();
    let r = db.begin_read().unwrap();
    let u = r.open_table(UNIQUE).unwrap();
    let mut out = BTreeMap::new();
    for e in u.iter().unwrap() {
        *out.entry(e.unwrap().0.value()[0]).or_default() += 1;
    }
    out
}

/// Schema 15 -> 16: transfer keys of schema 7's layout (an EVM hash's 32 bytes
/// ‖ log index ‖ chain) and of schema 6's (a hash of other text), and address keys of
/// schema 5's layout (nil ‖ address ‖ chain), become their 25-byte digest keys on open;
/// every one is found by its transfer or address as before, with its id; a key of an old
/// tag that has no known shape is left and named by `verify`, and nothing else is; a backup
/// of the old store does the same.
#[test]
fn a_schema_15_store_keys_its_transfers_and_addresses_by_digest() {
    use crate::index::{self, IndexTag};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let hash = |b: u8| format!("0x{}", hex::encode([b; 32]));
    let transfers: Vec<(&str, String, u32, Uuid)> = vec![
        ("ethereum", hash(1), 0, Uuid::now_v7()),
        ("ethereum", hash(1), u32::MAX, Uuid::now_v7()),
        ("base", hash(1), 0, Uuid::now_v7()),
        ("ethereum", hash(2), 7, Uuid::now_v7()),
        ("tron", "tx-text".to_string(), u32::MAX, Uuid::now_v7()),
    ];
    let a = "0x35503aB8094214FeD332D87630B21FaF4D79ea84";
    let addresses: Vec<(&str, &str, Uuid)> = vec![
        ("ethereum", a, Uuid::now_v7()),
        ("base", a, Uuid::now_v7()),
        ("tron", "TLyqzVGLV1srkB7dToTAEqgDSfPtXRJZYH", Uuid::now_v7()),
    ];
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    close(store);
    let odd_transfer = vec![IndexTag::UniqueDepositTxHash as u8, 1, 2, 3];
    let odd_address = vec![IndexTag::UniqueAddressChain as u8, 4, 5];
    {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut u = w.open_table(UNIQUE).unwrap();
            for (chain, h, log, id) in &transfers {
                let old = match h.strip_prefix("0x") {
                    Some(hex_digits) => {
                        let mut k = vec![IndexTag::UniqueDepositTxHash as u8];
                        k.extend_from_slice(&hex::decode(hex_digits).unwrap());
                        k.extend_from_slice(&log.to_be_bytes());
                        k.extend_from_slice(chain.as_bytes());
                        k
                    }
                    None => index::unique(
                        IndexTag::UniqueDepositTx,
                        Uuid::nil(),
                        &[chain.as_bytes(), h.as_bytes(), &log.to_be_bytes()],
                    ),
                };
                u.insert(old.as_slice(), id.as_u128()).unwrap();
            }
            for (chain, address, id) in &addresses {
                let old = index::unique(
                    IndexTag::UniqueAddressChain,
                    Uuid::nil(),
                    &[address.to_ascii_lowercase().as_bytes(), chain.as_bytes()],
                );
                u.insert(old.as_slice(), id.as_u128()).unwrap();
            }
            u.insert(odd_transfer.as_slice(), 7).unwrap();
            u.insert(odd_address.as_slice(), 8).unwrap();
            let mut meta = w.open_table(META).unwrap();
            meta.insert("schema_version", 15u32.to_be_bytes().as_slice())
                .unwrap();
        }
        w.commit().unwrap();
    }
    let old_copy = dir.path().join("old.redb");
    std::fs::copy(&path, &old_copy).unwrap();

    let check = |store: &Store| {
        for (chain, h, log, id) in transfers.clone() {
            let key = index::transfer_key(chain, &h, log);
            assert_eq!(key.len(), 25);
            let got = store.read_blocking(move |r| r.unique_get(&key)).unwrap();
            assert_eq!(got, Some(id), "{chain} {h} {log}");
        }
        for (chain, address, id) in addresses.clone() {
            let key = index::address_key(chain, address);
            assert_eq!(key.len(), 17 + chain.len());
            let got = store.read_blocking(move |r| r.unique_get(&key)).unwrap();
            assert_eq!(got, Some(id), "{chain} {address}");
        }
        let v = store
            .read_blocking(|r| r.meta_get("schema_version"))
            .unwrap();
        assert_eq!(v, Some(schema::SCHEMA_VERSION.to_be_bytes().to_vec()));
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert_eq!(rep.violations.len(), 2, "{:?}", rep.violations);
        for odd in [&odd_transfer, &odd_address] {
            assert!(
                rep.violations
                    .iter()
                    .any(|v| v.contains(&hex::encode(odd)) && v.contains("schema version 15")),
                "{:?}",
                rep.violations
            );
        }
    };
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    check(&store);
    close(store);
    // Only the odd keys are left under the old tags; the rest are 8 digest keys.
    assert_eq!(
        unique_keys_by_tag(&path),
        BTreeMap::from([
            (IndexTag::UniqueAddressChain as u8, 1),
            (IndexTag::UniqueDepositTxHash as u8, 1),
            (IndexTag::UniqueAddressDigest as u8, 3),
            (IndexTag::UniqueTransfer as u8, 5),
        ])
    );
    an_old_copy_and_its_backup(&old_copy, check);
}

/// Schema 5 -> 6: a store as schema 5 left it (deposit index entries by wallet,
/// deposit events carrying the whole deposit and their key's project and sequence again)
/// opens, loses the entries by wallet, verifies clean, and its old events read as they were
/// while new deposit events are written compact and read whole.
#[test]
fn a_schema_5_store_migrates_to_6_and_its_old_events_still_read() {
    #[derive(Serialize)]
    struct EventV5<'a> {
        id: &'a str,
        project_id: Uuid,
        sequence: u64,
        #[serde(rename = "type")]
        event_type: &'a str,
        resource_id: &'a str,
        created_at: i64,
        livemode: bool,
        data: &'a serde_json::Value,
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p = populate(&store);
    close(store);
    // As schema 5 wrote it.
    let deposits: Vec<Deposit> = {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        let mut deps = Vec::new();
        {
            let t = w.open_table(DEPOSITS).unwrap();
            for e in t.iter().unwrap() {
                let (k, v) = e.unwrap();
                deps.push(decode_keyed::<Deposit>(k.value(), v.value()).unwrap());
            }
            let mut idx = w.open_table(INDEX).unwrap();
            for d in &deps {
                let k = crate::index::key(
                    crate::index::IndexTag::DepositsByWallet,
                    d.project_id,
                    &[d.wallet_id.as_bytes()],
                    d.id,
                );
                idx.insert(k.as_slice(), ()).unwrap();
            }
            let mut events = w.open_table(EVENTS).unwrap();
            let mut rows = Vec::new();
            for e in events.iter().unwrap() {
                let (k, v) = e.unwrap();
                let ev: crate::records::Event = decode(v.value()).unwrap();
                let (pp, seq) = k.value();
                let old = crate::codec::encode(&EventV5 {
                    id: &ev.id,
                    project_id: Uuid::from_u128(pp),
                    sequence: seq,
                    event_type: &ev.event_type,
                    resource_id: &ev.resource_id,
                    created_at: ev.created_at,
                    livemode: ev.livemode,
                    data: &ev.data,
                });
                rows.push(((pp, seq), old));
            }
            for (k, v) in rows {
                events.insert(k, v.as_slice()).unwrap();
            }
            let mut meta = w.open_table(META).unwrap();
            meta.insert("schema_version", 5u32.to_be_bytes().as_slice())
                .unwrap();
        }
        w.commit().unwrap();
        deps
    };
    assert_eq!(deposits.len(), 5);
    let by_wallet = |db: &Database| -> usize {
        let r = db.begin_read().unwrap();
        let t = r.open_table(INDEX).unwrap();
        let lo = [crate::index::IndexTag::DepositsByWallet as u8];
        let hi = [crate::index::IndexTag::DepositsByWallet as u8 + 1];
        t.range::<&[u8]>(lo.as_slice()..hi.as_slice())
            .unwrap()
            .count()
    };
    {
        let db = Database::create(&path).unwrap();
        assert_eq!(by_wallet(&db), 5);
    }
    let old_copy = dir.path().join("old.redb");
    std::fs::copy(&path, &old_copy).unwrap();

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    assert_eq!(rep.events, 10);
    assert_eq!(
        store
            .read_blocking(|r| r.meta_get("schema_version"))
            .unwrap(),
        Some(schema::SCHEMA_VERSION.to_be_bytes().to_vec())
    );
    // Old events read as written, with their key's project and sequence.
    let page = store
        .read_blocking(|r| r.list_events(p, &[], None, None, 100, true))
        .unwrap();
    assert_eq!(page.items.len(), 10);
    for (i, ev) in page.items.iter().enumerate() {
        assert_eq!(ev.project_id, p);
        assert_eq!(ev.sequence, i as u64 + 1);
        assert!(ev.deposit.is_none() && ev.state.is_none() && ev.row.is_none());
        assert!(ev.data.is_object(), "{ev:?}");
    }
    // A new deposit event is compact in the store and whole when read: the deposit as it
    // was at the event, whatever its row says later.
    let d = deposits[0].clone();
    let d2 = d.clone();
    let seq = store
        .write_blocking(move |ctx| {
            let mut at = d2.clone();
            at.status = DepositStatus::Orphaned;
            at.reversal_tx_id = Some(Uuid::now_v7());
            ctx.put(&at)?;
            let mut then = d2.clone();
            then.status = DepositStatus::Detected;
            then.confirmations = 0;
            then.ledger_tx_id = None;
            ctx.append_row_event(false, "deposit.detected", &then)
                .map(|e| e.sequence)
        })
        .unwrap();
    let ev = store
        .read_blocking(move |r| r.event_at(p, seq))
        .unwrap()
        .unwrap();
    assert_eq!(ev.data, serde_json::Value::Null);
    let Some(crate::records::ResourceRow::Deposit(row)) = ev.row else {
        panic!("the deposit's row: {:?}", ev.row)
    };
    assert_eq!(row.status, DepositStatus::Detected);
    assert_eq!(row.confirmations, 0);
    assert_eq!(row.ledger_tx_id, None);
    assert_eq!(row.amount, d.amount);
    assert_eq!(row.tx_hash, d.tx_hash);
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    close(store);
    {
        let db = Database::create(&path).unwrap();
        assert_eq!(by_wallet(&db), 0);
        let r = db.begin_read().unwrap();
        let t = r.open_table(EVENTS).unwrap();
        let raw = t.get((p.as_u128(), seq)).unwrap().unwrap();
        assert!(
            raw.value().len() < 200,
            "a compact deposit event is {} bytes",
            raw.value().len()
        );
    }

    // A copy taken before the upgrade (a backup) opens, migrates and verifies, and backs up.
    an_old_copy_and_its_backup(&old_copy, |store| {
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    });
}

/// A deposit event whose deposit row is missing still reads (its state alone) and `verify`
/// names it.
#[test]
fn a_deposit_event_without_its_row_reads_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p = populate(&store);
    let ghost = Deposit {
        id: Uuid::now_v7(),
        ..store
            .read_blocking(crate::ScanOps::all::<Deposit>)
            .unwrap()
            .remove(0)
    };
    let gid = ghost.id;
    let seq = store
        .write_blocking(move |ctx| {
            ctx.append_row_event(false, "deposit.confirmed", &ghost)
                .map(|e| e.sequence)
        })
        .unwrap();
    let ev = store
        .read_blocking(move |r| r.event_at(p, seq))
        .unwrap()
        .unwrap();
    assert!(ev.row.is_none());
    assert_eq!(ev.deposit.unwrap().status, DepositStatus::Confirmed);
    let listed = store
        .read_blocking(move |r| r.list_events(p, &[], Some(&gid.to_string()), None, 10, false))
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    assert!(
        rep.violations[0].contains(&gid.to_string()),
        "{:?}",
        rep.violations
    );
    close(store);
}

/// Payout and wallet events of schema 10 store their resource's changing fields (a payout)
/// or nothing (a wallet) and read back with the row as it was at the event; an event whose
/// payout row is missing still reads and `verify` names it.
#[test]
fn payout_and_wallet_events_read_their_rows_as_they_were() {
    use crate::records::{Payout, PayoutStatus, ResourceRow, ResourceState};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p = populate(&store);
    let w = store
        .read_blocking(crate::ScanOps::all::<Wallet>)
        .unwrap()
        .remove(0);
    // A customer's payout: a payout of the project's own funds would also need its lock
    // in the project's `locked` (`verify`'s refund-hold check), which this row-only test
    // does not post.
    let queued = Payout {
        id: Uuid::now_v7(),
        project_id: p,
        customer_id: Some(w.customer_id),
        chain: "ethereum".into(),
        asset: "USDT".into(),
        amount: 5,
        fee_amount: 0,
        to_address: format!("0x{}", "33".repeat(20)),
        memo: None,
        status: PayoutStatus::Queued,
        reference: Some("r".into()),
        tx_hash: None,
        failure_reason: None,
        amount_usd_cents: None,
        created_by_key: Uuid::now_v7(),
        approved_by_key: None,
        queued_block: None,
        submitted_block: None,
        created_at: 1,
        updated_at: 1,
    };
    let (q, w2) = (queued.clone(), w.clone());
    let (created, submitted, wallet_ev) = store
        .write_blocking(move |ctx| {
            ctx.put(&q)?;
            let created = ctx.append_row_event(false, "payout.created", &q)?.sequence;
            let sub = Payout {
                status: PayoutStatus::Submitted,
                tx_hash: Some(format!("0x{}", "ab".repeat(32))),
                updated_at: 2,
                ..q
            };
            ctx.put(&sub)?;
            let submitted = ctx
                .append_row_event(false, "payout.submitted", &sub)?
                .sequence;
            let wallet_ev = ctx.append_row_event(false, "wallet.created", &w2)?.sequence;
            Ok::<_, StoreError>((created, submitted, wallet_ev))
        })
        .unwrap();
    let read = |seq: u64| {
        store
            .read_blocking(move |r| r.event_at(p, seq))
            .unwrap()
            .unwrap()
    };
    let ev = read(created);
    assert_eq!(ev.data, serde_json::Value::Null);
    assert!(matches!(ev.state, Some(ResourceState::Payout(_))));
    let Some(ResourceRow::Payout(row)) = ev.row else {
        panic!("the payout's row: {:?}", ev.row)
    };
    assert_eq!(row.status, PayoutStatus::Queued, "as it was at the event");
    assert_eq!((row.tx_hash.as_deref(), row.updated_at), (None, 1));
    assert_eq!((row.amount, row.reference.as_deref()), (5, Some("r")));
    let Some(ResourceRow::Payout(row)) = read(submitted).row else {
        panic!("the payout's row")
    };
    assert_eq!(row.status, PayoutStatus::Submitted);
    assert!(row.tx_hash.is_some());
    let Some(ResourceRow::Wallet(row)) = read(wallet_ev).row else {
        panic!("the wallet's row")
    };
    assert_eq!((row.id, &row.address), (w.id, &w.address));
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);

    // A payout event whose row is missing reads with its state alone; verify names it.
    let ghost = Payout {
        id: Uuid::now_v7(),
        ..queued
    };
    let gid = ghost.id;
    let seq = store
        .write_blocking(move |ctx| {
            ctx.append_row_event(false, "payout.created", &ghost)
                .map(|e| e.sequence)
        })
        .unwrap();
    let ev = read(seq);
    assert!(ev.row.is_none());
    assert!(
        matches!(ev.state, Some(ResourceState::Payout(ref st)) if st.status == PayoutStatus::Queued)
    );
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    assert!(
        rep.violations[0].contains(&gid.to_string()) && rep.violations[0].contains("payout"),
        "{:?}",
        rep.violations
    );
    close(store);
}

/// Rewrites every record value of the store at `path` with named fields (`2 ‖ MessagePack
/// maps`), as the releases before positional rows wrote every record.
fn rewrite_named(path: &Path) {
    let db = Database::create(path).unwrap();
    let w = db.begin_write().unwrap();
    fn to_named<K: redb::Key + 'static, T: crate::codec::Record>(
        w: &redb::WriteTransaction,
        def: TableDefinition<K, &[u8]>,
    ) {
        let mut t = w.open_table(def).unwrap();
        let mut rows = Vec::new();
        for e in t.iter().unwrap() {
            let (k, v) = e.unwrap();
            let rec: T = decode_at(K::as_bytes(&k.value()).as_ref(), v.value());
            rows.push((
                K::as_bytes(&k.value()).as_ref().to_vec(),
                crate::codec::encode(&rec),
            ));
        }
        for (k, v) in rows {
            t.insert(K::from_bytes(&k), v.as_slice()).unwrap();
        }
    }
    macro_rules! n {
        ($def:ident, $ty:ty) => {
            to_named::<_, $ty>(&w, $def)
        };
    }
    schema::for_each_record_table!(n);
    w.commit().unwrap();
}

/// The encoding version of every stored record value, by table and raw key.
fn raw_versions(db: &Database) -> BTreeMap<(&'static str, Vec<u8>), u8> {
    let mut out = BTreeMap::new();
    for (t, rows) in dump_all(db) {
        for (k, (v, _)) in rows {
            out.insert((t, k), v);
        }
    }
    out
}

/// A store whose records are all named (version 2, as the release before positional rows
/// left it) opens with no migration, takes positional rows (version 3) of the hot records
/// next to them, and reads, verifies, backs up and restores with both encodings in it.
#[test]
fn a_named_store_takes_positional_rows_and_reads_both() {
    use crate::codec::{encode_record, POSITIONAL_VERSION};
    use crate::records::Event;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p1 = populate(&store);
    close(store);
    rewrite_named(&path);
    let named = {
        let db = Database::create(&path).unwrap();
        let v = raw_versions(&db);
        assert!(v.values().all(|&x| x == VALUE_VERSION), "{v:?}");
        assert!(v.len() >= 5 * 6, "{}", v.len());
        v
    };

    // The new build opens it as it is (no migration pass rewrites a row), verify is clean,
    // and it writes the hot records of a second project positionally, including a deposit
    // event (its state struct) and an event whose data came encoded ahead.
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    let p2 = populate(&store);
    let deposits: Vec<Deposit> = store.read_blocking(crate::ScanOps::all).unwrap();
    assert_eq!(deposits.len(), 10);
    let d2 = deposits
        .iter()
        .find(|d| d.project_id == p2)
        .unwrap()
        .clone();
    let d2w = d2.clone();
    let (dev, tev) = store
        .write_blocking(move |ctx| {
            let dev = ctx.append_row_event(false, "deposit.confirmed", &d2w)?;
            let data = crate::codec::EventData::encode(&serde_json::json!({"k": "v", "n": 3}));
            let tev = ctx.append_event_data(p2, false, "customer.updated", "r", &data)?;
            Ok::<_, StoreError>((dev, tev))
        })
        .unwrap();
    close(store);

    let db = Database::create(&path).unwrap();
    let after = raw_versions(&db);
    for (k, v) in &named {
        // The second project's idempotency keys are the first's: those rows are replaced.
        if k.0 != IDEMPOTENCY.name() {
            assert_eq!(after.get(k), Some(v), "a named row was rewritten: {k:?}");
        }
    }
    let new: Vec<_> = after
        .iter()
        .filter(|(k, _)| !named.contains_key(*k))
        .collect();
    assert!(new.len() >= 5 * 6, "{}", new.len());
    for ((table, _), v) in &new {
        let want = if [PROJECTS.name(), API_KEYS.name()].contains(table) {
            VALUE_VERSION
        } else if [EVENTS.name(), IDEMPOTENCY.name()].contains(table) {
            POSITIONAL_VERSION
        } else {
            // Rows under their id (schema 14), their times relative (schema 15):
            // deposits, customers, wallets, journal...
            KEYED_TIMES_VERSION
        };
        assert_eq!(**v, want, "{table}");
    }
    // Positional rows are the smaller: the same deposit in both layouts.
    assert!(encode_record(&d2).len() * 10 < crate::codec::encode(&d2).len() * 7);
    drop(db);

    // Both read: rows, events of both forms, the ledger; verify is clean.
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    assert_eq!(rep.journal_entries, 10);
    assert_eq!(rep.events, 22);
    let customers: Vec<Customer> = store.read_blocking(crate::ScanOps::all).unwrap();
    assert_eq!(customers.len(), 10);
    for p in [p1, p2] {
        let d = deposits.iter().find(|d| d.project_id == p).unwrap().clone();
        let back: Deposit = store
            .read_blocking(move |r| r.get_in(p, d.id))
            .unwrap()
            .unwrap();
        assert_eq!(format!("{back:?}"), format!("{d:?}"));
        let ev: Event = store
            .read_blocking(move |r| r.event_at(p, 2))
            .unwrap()
            .unwrap();
        assert_eq!(ev.event_type, "deposit.confirmed");
        assert_eq!(ev.data["id"], serde_json::json!(d.id));
    }
    let got = store
        .read_blocking(move |r| r.event_at(p2, dev.sequence))
        .unwrap()
        .unwrap();
    assert_eq!(got.deposit, Some(crate::records::DepositState::of(&d2)));
    assert!(matches!(&got.row, Some(crate::records::ResourceRow::Deposit(d)) if d.id == d2.id));
    let got = store
        .read_blocking(move |r| r.event_at(p2, tev.sequence))
        .unwrap()
        .unwrap();
    assert_eq!(got.data, serde_json::json!({"k": "v", "n": 3}));
    assert_eq!(got.deposit, None);
    let held: u128 = store
        .read_blocking(move |r| r.holding(d2.wallet_id, "USDT"))
        .unwrap();
    assert_eq!(held, d2.amount);

    // A backup holds both encodings as they are, and the restored copy verifies and reads.
    let dest = dir.path().join("backup.redb");
    let b = store
        .read_blocking(|r| crate::backup::backup(r, &dest))
        .unwrap();
    assert!(b.rows > 0);
    close(store);
    {
        let db = Database::create(&dest).unwrap();
        assert_eq!(raw_versions(&db), after);
    }
    let copy = Store::open(&dest, StoreOptions::default()).unwrap();
    let rep = copy.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    assert_eq!(rep.events, 22);
    let c: Vec<Customer> = copy.read_blocking(crate::ScanOps::all).unwrap();
    assert_eq!(c.len(), 10);
    close(copy);
}

/// A keyed or positional row that does not decode is still found to be its project's (the
/// project is its first element, or its second after the id): `get_in` reports it as
/// corrupt to its project and as absent to any other, as for a named row.
#[test]
fn an_undecodable_positional_row_belongs_to_its_project() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p = populate(&store);
    let deposits: Vec<Deposit> = store.read_blocking(crate::ScanOps::all).unwrap();
    close(store);
    assert!(deposits.len() >= 2);
    let ids = [deposits[0].id, deposits[1].id];
    {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(DEPOSITS).unwrap();
            let keyed = t.get(ids[0].as_u128()).unwrap().unwrap().value().to_vec();
            assert_eq!(keyed[0], KEYED_TIMES_VERSION);
            t.insert(ids[0].as_u128(), &keyed[..keyed.len() - 5])
                .unwrap();
            // As schema 13 wrote it: positional, with the id.
            let pos = crate::codec::encode_positional(&deposits[1]);
            t.insert(ids[1].as_u128(), &pos[..pos.len() - 5]).unwrap();
        }
        w.commit().unwrap();
    }
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    for id in ids {
        let mine = store.read_blocking(move |r| r.get_in::<Deposit>(p, id));
        assert!(matches!(mine, Err(StoreError::Corrupt(_))), "{mine:?}");
        let other = store
            .read_blocking(move |r| r.get_in::<Deposit>(Uuid::now_v7(), id))
            .unwrap();
        assert!(other.is_none());
    }
    close(store);
}

/// A store of schema 13, whose hot rows and journal entries carry their id (positional,
/// version 3), opens with no pass over its rows: its rows read, list and verify as before,
/// beside the rows without their id (version 4) the build writes next, and a backup keeps
/// both as they are. Its lists, a key per row (in `index` per customer, in their tag's
/// table per project), move into runs on open (schemas 14 and 15) and list the same.
#[test]
fn a_schema_13_store_reads_its_rows_with_ids_beside_keyed_ones() {
    use crate::codec::{encode_positional, POSITIONAL_VERSION};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p1 = populate(&store);
    let deposits: Vec<Deposit> = store.read_blocking(crate::ScanOps::all).unwrap();
    let resource = deposits[0].id.to_string();
    let listed = lists(&store, p1, resource.clone());
    // Each customer's deposits, newest first, in pages of 1 and whole.
    let by_customer = |store: &Store, deposits: &[Deposit]| -> Vec<Vec<Uuid>> {
        let owners: Vec<(Uuid, Uuid)> = deposits
            .iter()
            .map(|d| (d.project_id, d.customer_id))
            .collect();
        store
            .read_blocking(move |r| {
                let mut out = Vec::new();
                for (p, c) in owners {
                    let prefix = crate::index::deposits_of_customer(p, c);
                    out.push(
                        r.list::<Deposit>(&prefix, None, 10, |_| true)?
                            .items
                            .iter()
                            .map(|d| d.id)
                            .collect(),
                    );
                    let (mut paged, mut cursor) = (Vec::new(), None);
                    loop {
                        let page = r.list::<Deposit>(&prefix, cursor, 1, |_| true)?;
                        paged.extend(page.items.iter().map(|d| d.id));
                        cursor = page.items.last().map(|d| d.id);
                        if !page.has_more {
                            break;
                        }
                    }
                    out.push(paged);
                }
                Ok::<_, StoreError>(out)
            })
            .unwrap()
    };
    let customers_listed = by_customer(&store, &deposits);
    assert!(customers_listed.iter().all(|ids| !ids.is_empty()));
    close(store);

    fn to_positional<K: redb::Key + 'static, T: crate::codec::Record>(
        w: &redb::WriteTransaction,
        def: TableDefinition<K, &[u8]>,
    ) {
        let mut t = w.open_table(def).unwrap();
        let mut rows = Vec::new();
        for e in t.iter().unwrap() {
            let (k, v) = e.unwrap();
            if matches!(v.value()[0], KEYED_VERSION | KEYED_TIMES_VERSION) {
                let kb = K::as_bytes(&k.value()).as_ref().to_vec();
                let rec: T = decode_at(&kb, v.value());
                rows.push((kb, encode_positional(&rec)));
            }
        }
        for (k, v) in rows {
            t.insert(K::from_bytes(&k), v.as_slice()).unwrap();
        }
    }
    let (versions, contents) = {
        let db = Database::create(&path).unwrap();
        let before = raw_versions(&db);
        let keyed = before
            .values()
            .filter(|&&x| x == KEYED_VERSION || x == KEYED_TIMES_VERSION)
            .count();
        // 5 customers, wallets, deposits and journal entries at least.
        assert!(keyed >= 4 * 5, "{keyed}");
        let w = db.begin_write().unwrap();
        macro_rules! p {
            ($def:ident, $ty:ty) => {
                to_positional::<_, $ty>(&w, $def)
            };
        }
        schema::for_each_record_table!(p);
        // The keys listed per customer, as schema 13 kept them: one key each in `index`.
        {
            use redb::ReadableTableMetadata;
            let mut runs = w.open_table(ID_RUNS).unwrap();
            let mut idx = w.open_table(INDEX).unwrap();
            for e in runs.iter().unwrap() {
                let (k, v) = e.unwrap();
                let (prefix, first) = crate::id_runs::split_key(k.value()).unwrap();
                for id in crate::id_runs::decode(first, v.value()).unwrap() {
                    idx.insert(crate::id_runs::key(prefix, id).as_slice(), ())
                        .unwrap();
                }
            }
            assert!(runs.len().unwrap() >= 3);
            runs.retain(|_, _| false).unwrap();
        }
        // A project's lists, as schemas 7 to 14 kept them: one key each in their tag's
        // table.
        let mut lists = 0;
        for r in schema::RUN_INDEXES.iter().filter(|r| r.padded) {
            use redb::ReadableTableMetadata;
            let mut runs = w.open_table(r.table).unwrap();
            let mut idx = w.open_table(schema::index_table(r.tag as u8)).unwrap();
            for e in runs.iter().unwrap() {
                let (k, v) = e.unwrap();
                assert_eq!(v.value().len(), 16 * (crate::id_runs::RUN_IDS - 1));
                let (prefix, first) = crate::id_runs::split_key(k.value()).unwrap();
                for id in crate::id_runs::decode(first, v.value()).unwrap() {
                    idx.insert(crate::id_runs::key(prefix, id).as_slice(), ())
                        .unwrap();
                }
            }
            lists += usize::from(runs.len().unwrap() > 0);
            runs.retain(|_, _| false).unwrap();
        }
        // Customers (all, by status), wallets (all, by chain), deposits (all, by chain, by
        // status).
        assert!(lists >= 7, "{lists}");
        w.open_table(META)
            .unwrap()
            .insert("schema_version", 13u32.to_be_bytes().as_slice())
            .unwrap();
        w.commit().unwrap();
        let after = raw_versions(&db);
        assert!(!after
            .values()
            .any(|&x| x == KEYED_VERSION || x == KEYED_TIMES_VERSION));
        for (k, v) in &before {
            let want = if *v == KEYED_VERSION || *v == KEYED_TIMES_VERSION {
                POSITIONAL_VERSION
            } else {
                *v
            };
            assert_eq!(after[k], want, "{k:?}");
        }
        (after, dump_all(&db))
    };

    // Opens as it is; reads, lists and verifies as before; writes keyed rows beside.
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    assert_eq!(lists(&store, p1, resource.clone()), listed);
    assert_eq!(by_customer(&store, &deposits), customers_listed);
    let p2 = populate(&store);
    let d2: Vec<Deposit> = store.read_blocking(crate::ScanOps::all).unwrap();
    assert_eq!(d2.len(), 2 * deposits.len());
    for d in &d2 {
        let (p, id) = (d.project_id, d.id);
        let back: Deposit = store
            .read_blocking(move |r| r.get_in(p, id))
            .unwrap()
            .unwrap();
        assert_eq!(format!("{back:?}"), format!("{d:?}"));
        let entry = d.ledger_tx_id.unwrap();
        let e = store
            .read_blocking(move |r| r.journal_entry(entry))
            .unwrap()
            .unwrap();
        assert_eq!(e.id, entry);
        assert!(!e.postings.is_empty());
    }
    close(store);

    let db = Database::create(&path).unwrap();
    let now = raw_versions(&db);
    for (k, v) in versions.iter().filter(|(k, _)| k.0 != IDEMPOTENCY.name()) {
        assert_eq!(
            now.get(k),
            Some(v),
            "a row of schema 13 was rewritten: {k:?}"
        );
    }
    let new_keyed = now
        .iter()
        .filter(|(k, v)| !versions.contains_key(*k) && **v == KEYED_TIMES_VERSION)
        .count();
    assert!(new_keyed >= 4 * 5, "{new_keyed}");
    let all = dump_all(&db);
    // (The second project's idempotency keys are the first's: those rows are replaced.)
    for (table, rows) in contents.iter().filter(|(t, _)| **t != IDEMPOTENCY.name()) {
        for (k, (_, named)) in rows {
            assert_eq!(&all[table][k].1, named, "{table} row changed");
        }
    }
    let meta = db.begin_read().unwrap();
    let version = meta
        .open_table(META)
        .unwrap()
        .get("schema_version")
        .unwrap()
        .unwrap()
        .value()
        .to_vec();
    assert_eq!(version, schema::SCHEMA_VERSION.to_be_bytes());
    drop(meta);
    drop(db);

    // A backup holds both forms as they are; the copy verifies and lists.
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let dest = dir.path().join("backup.redb");
    store
        .read_blocking(|r| crate::backup::backup(r, &dest))
        .unwrap();
    close(store);
    {
        let db = Database::create(&dest).unwrap();
        assert_eq!(raw_versions(&db), now);
    }
    let copy = Store::open(&dest, StoreOptions::default()).unwrap();
    let rep = copy.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    assert_eq!(lists(&copy, p1, resource), listed);
    assert_eq!(by_customer(&copy, &deposits), customers_listed);
    {
        // No key listed per customer is left in `index`, nor a key of a project's list
        // in its tag's table.
        let db = Database::create(&path).unwrap();
        let r = db.begin_read().unwrap();
        for run in schema::RUN_INDEXES.iter().filter(|r| r.padded) {
            let t = run.tag as u8;
            let idx = r.open_table(schema::index_table(t)).unwrap();
            let left = idx
                .range::<&[u8]>([t].as_slice()..[t + 1].as_slice())
                .unwrap();
            assert_eq!(left.count(), 0, "{:?}", run.tag);
        }
        let idx = r.open_table(INDEX).unwrap();
        for t in [
            crate::index::IndexTag::ByCustomer as u8,
            crate::index::IndexTag::PayoutsByCustomer as u8,
        ] {
            assert_eq!(
                idx.range::<&[u8]>([t].as_slice()..[t + 1].as_slice())
                    .unwrap()
                    .count(),
                0
            );
        }
    }
    let r2 = d2
        .iter()
        .find(|d| d.project_id == p2)
        .unwrap()
        .id
        .to_string();
    assert_eq!(lists(&copy, p2, r2)[0].len(), 3);
    close(copy);
}

/// What the lists over the moved indexes answer for `p`: deposits by status, chain and in
/// all; customers; wallets by chain; events by type and by resource, both ways.
fn lists(store: &Store, p: Uuid, resource: String) -> Vec<Vec<String>> {
    use crate::index::{self, IndexTag};
    store
        .read_blocking(move |r| {
            let ids = |items: Vec<Uuid>| items.iter().map(Uuid::to_string).collect::<Vec<_>>();
            let mut out = Vec::new();
            for (tag, values) in [
                (IndexTag::Deposits, vec![]),
                (IndexTag::DepositsByStatus, vec![b"confirmed".as_slice()]),
                (IndexTag::DepositsByChain, vec![b"ethereum".as_slice()]),
            ] {
                let page = r.list::<Deposit>(&index::prefix(tag, p, &values), None, 3, |_| true)?;
                assert!(page.has_more);
                out.push(ids(page.items.iter().map(|d| d.id).collect()));
            }
            let page = r.list::<Customer>(
                &index::prefix(IndexTag::Customers, p, &[]),
                None,
                10,
                |_| true,
            )?;
            out.push(ids(page.items.iter().map(|c| c.id).collect()));
            let page = r.scan_ids(
                &index::prefix(IndexTag::WalletsByChain, p, &[b"ethereum"]),
                None,
                10,
                |_| Ok(true),
            )?;
            out.push(ids(page.items));
            for asc in [true, false] {
                let evs = |page: crate::Page<crate::records::Event>| {
                    page.items.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
                };
                out.push(evs(r.list_events(
                    p,
                    &["deposit.confirmed".into()],
                    None,
                    None,
                    10,
                    asc,
                )?));
                out.push(evs(r.list_events(
                    p,
                    &[],
                    Some(&resource),
                    None,
                    10,
                    asc,
                )?));
                out.push(evs(r.list_events(
                    p,
                    &[],
                    Some("ref-text"),
                    None,
                    10,
                    asc,
                )?));
            }
            Ok(out)
        })
        .unwrap()
}

/// Schema 6 -> 7: a store as schema 6 left it (every index key in `index`, the
/// event index keys with the project and the resource id as text) opens, moves the keys of
/// the hot tags to their own tables and the event keys to their new layout, answers every
/// list as before and verifies clean; a key of an event tag that does not have its shape
/// stays and `verify` names it; a copy taken before the upgrade (a backup) migrates too and
/// backs up.
#[test]
fn a_schema_6_store_moves_its_index_keys_to_their_tables() {
    use crate::index::{self, IndexTag};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p = populate(&store);
    // An event about a resource whose id is not a UUID, and one of another project about
    // a deposit of `p` (read by id, its key would be found from `p`).
    let other = Uuid::now_v7();
    let deposit = store.read_blocking(crate::ScanOps::all::<Deposit>).unwrap()[0]
        .id
        .to_string();
    let d = deposit.clone();
    store
        .write_blocking(move |ctx| {
            ctx.append_event(p, false, "note.added", "ref-text", serde_json::json!({}))?;
            ctx.append_event(other, false, "note.added", &d, serde_json::json!({}))?;
            ctx.append_event(
                other,
                false,
                "note.added",
                "ref-text",
                serde_json::json!({}),
            )
        })
        .unwrap();
    // Transfer keys: an EVM hash (schema 7 keys its bytes) and another text (kept).
    let evm_hash = format!("0x{}", "0f".repeat(32));
    let (t1, t2) = (Uuid::now_v7(), Uuid::now_v7());
    let h = evm_hash.clone();
    store
        .write_blocking(move |ctx| {
            ctx.unique_put(&index::transfer_key("ethereum", &h, 2), t1)?;
            ctx.unique_put(&index::transfer_key("tron", "tx-1", u32::MAX), t2)
        })
        .unwrap();
    let before = lists(&store, p, deposit.clone());
    assert_eq!(before[5].len(), 5, "deposit.confirmed events: {before:?}");
    assert_eq!(before[6].len(), 1, "events of one deposit: {before:?}");
    assert_eq!(before[7].len(), 1, "events of a text resource: {before:?}");
    close(store);

    // As schema 6 wrote it: every key in `index`, events keyed by tag ‖ project ‖ text.
    let odd = {
        let mut k = vec![IndexTag::EventsByType as u8];
        k.extend_from_slice(p.as_bytes());
        k.extend_from_slice(&[0, 9, b'x']);
        k
    };
    let moved = {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        let mut moved = 0;
        {
            let mut idx = w.open_table(INDEX).unwrap();
            for (_, def) in SPLIT_INDEXES {
                let t = w.open_table(def).unwrap();
                for e in t.iter().unwrap() {
                    idx.insert(e.unwrap().0.value(), ()).unwrap();
                    moved += 1;
                }
            }
            for r in schema::RUN_INDEXES.iter().filter(|r| r.padded) {
                let t = w.open_table(r.table).unwrap();
                for e in t.iter().unwrap() {
                    let (k, v) = e.unwrap();
                    let (prefix, first) = crate::id_runs::split_key(k.value()).unwrap();
                    for id in crate::id_runs::decode(first, v.value()).unwrap() {
                        idx.insert(crate::id_runs::key(prefix, id).as_slice(), ())
                            .unwrap();
                        moved += 1;
                    }
                }
            }
            let events = w.open_table(EVENTS).unwrap();
            for e in events.iter().unwrap() {
                let (k, v) = e.unwrap();
                let (pp, seq) = k.value();
                let pp = Uuid::from_u128(pp);
                let ev: crate::records::Event = decode(v.value()).unwrap();
                for (tag, value) in [
                    (IndexTag::EventsByType, &ev.event_type),
                    (IndexTag::EventsByResource, &ev.resource_id),
                ] {
                    let old = index::key_seq(tag, pp, &[value.as_bytes()], seq);
                    idx.insert(old.as_slice(), ()).unwrap();
                    moved += 1;
                }
            }
            idx.insert(odd.as_slice(), ()).unwrap();
            let mut u = w.open_table(UNIQUE).unwrap();
            for (chain, hash, log, id) in [
                ("ethereum", evm_hash.as_str(), 2u32, t1),
                ("tron", "tx-1", u32::MAX, t2),
            ] {
                u.remove(index::transfer_key(chain, hash, log).as_slice())
                    .unwrap();
                let legacy = index::unique(
                    IndexTag::UniqueDepositTx,
                    Uuid::nil(),
                    &[chain.as_bytes(), hash.as_bytes(), &log.to_be_bytes()],
                );
                u.insert(legacy.as_slice(), id.as_u128()).unwrap();
            }
            let mut meta = w.open_table(META).unwrap();
            meta.insert("schema_version", 6u32.to_be_bytes().as_slice())
                .unwrap();
        }
        for (_, def) in SPLIT_INDEXES {
            w.delete_table(def).unwrap();
        }
        for r in schema::RUN_INDEXES.iter().filter(|r| r.padded) {
            w.delete_table(r.table).unwrap();
        }
        // Schema 6 had none of the event index tables of schema 7 or 13.
        w.delete_table(EVENTS_BY_TYPE).unwrap();
        w.delete_table(EVENTS_BY_RESOURCE).unwrap();
        w.delete_table(EVENT_TYPE_RUNS).unwrap();
        w.delete_table(EVENT_RESOURCE_RUNS).unwrap();
        w.commit().unwrap();
        moved
    };
    assert!(moved > 40, "{moved}");
    let old_copy = dir.path().join("old.redb");
    std::fs::copy(&path, &old_copy).unwrap();

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(lists(&store, p, deposit.clone()), before);
    let h = evm_hash.clone();
    let (k1, k2) = store
        .read_blocking(move |r| {
            Ok((
                r.unique_get(&index::transfer_key("ethereum", &h, 2))?,
                r.unique_get(&index::transfer_key("tron", "tx-1", u32::MAX))?,
            ))
        })
        .unwrap();
    assert_eq!((k1, k2), (Some(t1), Some(t2)));
    assert_eq!(index::transfer_key("ethereum", &evm_hash, 2).len(), 25);
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    assert!(
        rep.violations[0].contains(&hex::encode(&odd)),
        "{:?}",
        rep.violations
    );
    // New writes land in the new tables and read with the old.
    let seq = store
        .write_blocking(move |ctx| {
            ctx.append_event(
                p,
                false,
                "deposit.confirmed",
                "ref-text",
                serde_json::json!({}),
            )
            .map(|e| e.sequence)
        })
        .unwrap();
    let page = store
        .read_blocking(move |r| r.list_events(p, &[], Some("ref-text"), None, 10, false))
        .unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.items[0].sequence, seq);
    close(store);
    {
        let db = Database::create(&path).unwrap();
        let r = db.begin_read().unwrap();
        let idx = r.open_table(INDEX).unwrap();
        // Only the cold tags (customers' deposits, wallets by customer, ...) and the odd key.
        for e in idx.iter().unwrap() {
            let (k, _) = e.unwrap();
            let k = k.value();
            assert!(
                !SPLIT_INDEXES.iter().any(|(t, _)| *t as u8 == k[0]),
                "{}",
                hex::encode(k)
            );
            assert!(
                k[0] != IndexTag::EventsByResource as u8,
                "{}",
                hex::encode(k)
            );
            assert!(k[0] != IndexTag::EventsByType as u8 || k == odd.as_slice());
        }
        // Through schema 7's tables into schema 13's runs: one run per resource here.
        let t = r.open_table(EVENT_RESOURCE_RUNS).unwrap();
        let key = crate::event_runs::key(&index::event_resource_prefix(p, &deposit), 10);
        assert_eq!(key.len(), 25, "a UUID resource's key is 1 + 16 + 8 bytes");
        assert!(redb::ReadableTableMetadata::len(&t).unwrap() >= 4);
        assert!(r
            .list_tables()
            .unwrap()
            .all(|t| t.name() != "events_by_resource"));
    }

    // A copy taken before the upgrade (a backup) opens, migrates, verifies and backs up.
    an_old_copy_and_its_backup(&old_copy, |store| {
        assert_eq!(lists(store, p, deposit.clone()), before);
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    });
}

/// Schema 7 -> 8: the open-sweep keys of `unique` move into the holding rows of their
/// wallets (`ledger::Holding`), a row with nothing held written where there was none; an
/// odd key stays for `verify`; a copy taken before the upgrade (a backup) migrates the same
/// way and backs up.
#[test]
fn a_schema_7_store_moves_its_open_sweeps_into_the_holding_rows() {
    use crate::index::{self, IndexTag};
    use crate::ledger::Holding;
    use crate::records::SweepStatus;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    populate(&store);
    let wallets = store.read_blocking(crate::ScanOps::all::<Wallet>).unwrap();
    assert_eq!(wallets.len(), 5);
    // Open sweeps: two wallets' USDT (held) and one wallet's ETH (nothing held: no row).
    let opened: Vec<(Wallet, &str)> = vec![
        (wallets[0].clone(), "USDT"),
        (wallets[1].clone(), "USDT"),
        (wallets[2].clone(), "ETH"),
    ];
    let o = opened.clone();
    let sweeps: Vec<Uuid> = store
        .write_blocking(move |ctx| {
            let mut ids = Vec::new();
            for (w, asset) in &o {
                let sw = sweep_of(w, asset, SweepStatus::Open, ctx.now_us());
                ctx.open_sweep_set(w, asset, Some(sw.id))?;
                ctx.put(&sw)?;
                ids.push(sw.id);
            }
            Ok::<_, StoreError>(ids)
        })
        .unwrap();
    let holdings = |store: &Store| -> Vec<Holding> {
        let o = opened.clone();
        store
            .write_blocking(move |ctx| {
                o.iter()
                    .map(|(w, a)| ctx.holding_of(w, a))
                    .collect::<Result<Vec<_>, StoreError>>()
            })
            .unwrap()
    };
    let before = holdings(&store);
    assert_eq!(
        before.iter().map(|h| h.open_sweep).collect::<Vec<_>>(),
        sweeps.iter().copied().map(Some).collect::<Vec<_>>()
    );
    assert_eq!(before[2].amount, 0);
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    close(store);

    // As schema 7 wrote it: holding rows `(amount, 0)` (none where nothing was held), the
    // open sweeps under keys of their own.
    let odd = {
        let mut k = vec![IndexTag::UniqueOpenSweep as u8];
        k.extend_from_slice(&[0, 1, 2]);
        k
    };
    {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut accounts = w.open_table(ACCOUNTS).unwrap();
            let mut u = w.open_table(UNIQUE).unwrap();
            for ((wallet, asset), sweep) in opened.iter().zip(&sweeps) {
                let key = wallet.holding_key(asset);
                let amount = accounts.get(key.as_slice()).unwrap().unwrap().value().0;
                if amount == 0 {
                    accounts.remove(key.as_slice()).unwrap();
                } else {
                    accounts.insert(key.as_slice(), (amount, 0)).unwrap();
                }
                let old = index::unique(
                    IndexTag::UniqueOpenSweep,
                    Uuid::nil(),
                    &[wallet.id.as_bytes(), asset.as_bytes()],
                );
                u.insert(old.as_slice(), sweep.as_u128()).unwrap();
            }
            u.insert(odd.as_slice(), Uuid::now_v7().as_u128()).unwrap();
            let mut meta = w.open_table(META).unwrap();
            meta.insert("schema_version", 7u32.to_be_bytes().as_slice())
                .unwrap();
        }
        w.commit().unwrap();
    }
    let old_copy = dir.path().join("old.redb");
    std::fs::copy(&path, &old_copy).unwrap();

    let check = |store: &Store| {
        assert_eq!(holdings(store), before);
        let v = store
            .read_blocking(|r| r.meta_get("schema_version"))
            .unwrap();
        assert_eq!(v, Some(schema::SCHEMA_VERSION.to_be_bytes().to_vec()));
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
        assert!(
            rep.violations[0].contains(&hex::encode(&odd)),
            "{:?}",
            rep.violations
        );
    };
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    check(&store);
    close(store);
    {
        let db = Database::create(&path).unwrap();
        let r = db.begin_read().unwrap();
        let u = r.open_table(UNIQUE).unwrap();
        let tag = IndexTag::UniqueOpenSweep as u8;
        let left: Vec<Vec<u8>> = u
            .range::<&[u8]>([tag].as_slice()..[tag + 1].as_slice())
            .unwrap()
            .map(|e| e.unwrap().0.value().to_vec())
            .collect();
        assert_eq!(left, vec![odd.clone()], "only the odd key stays");
    }

    // A copy taken before the upgrade (a backup) opens, migrates, verifies and backs up.
    an_old_copy_and_its_backup(&old_copy, check);
}

/// `verify` names an open sweep that no holding row names, and a holding row that names a
/// sweep which is not open.
#[test]
fn verify_reports_open_sweeps_and_holding_rows_that_disagree() {
    use crate::records::SweepStatus;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    populate(&store);
    let w = store.read_blocking(crate::ScanOps::all::<Wallet>).unwrap()[0].clone();
    let (open, done) = store
        .write_blocking(move |ctx| {
            let now = ctx.now_us();
            let mk = |status| sweep_of(&w, "USDT", status, now);
            let (open, done) = (mk(SweepStatus::Open), mk(SweepStatus::Confirmed));
            ctx.put(&open)?;
            ctx.put(&done)?;
            // The holding row names the confirmed one; the open one is named by nothing.
            ctx.open_sweep_set(&w, "USDT", Some(done.id))?;
            Ok::<_, StoreError>((open.id, done.id))
        })
        .unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(rep.violations.len(), 2, "{:?}", rep.violations);
    assert!(rep
        .violations
        .iter()
        .any(|v| v.contains(&done.to_string()) && v.contains("not an open sweep")));
    assert!(rep
        .violations
        .iter()
        .any(|v| v.contains(&open.to_string()) && v.contains("no holding row names it")));
    close(store);
}

/// Schema 8 -> 9: deposits by customer and sweeps by wallet move under one range per
/// customer (`IndexTag::ByCustomer`), sweep rows written without their customer are
/// rewritten with it; the lists read the same before and after, `verify` is clean, and a
/// copy taken before the upgrade (a backup) migrates the same way.
#[test]
fn a_schema_8_store_indexes_deposits_and_sweeps_under_their_customers() {
    use crate::index::{self, IndexTag};
    use crate::records::{Sweep, SweepStatus};
    use crate::ScanOps;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p = populate(&store);
    let wallets = store.read_blocking(ScanOps::all::<Wallet>).unwrap();
    let ws = wallets.clone();
    store
        .write_blocking(move |ctx| {
            // Two sweeps of the first wallet, one of the second.
            for w in [&ws[0], &ws[0], &ws[1]] {
                let now = ctx.now_us();
                ctx.put(&Sweep {
                    tx_hash: Some(format!("0x{}", "ab".repeat(32))),
                    submitted_block: Some(2),
                    ..sweep_of(w, "USDT", SweepStatus::Confirmed, now)
                })?;
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let lists = |store: &Store| -> Vec<Vec<Uuid>> {
        let ws = wallets.clone();
        store
            .read_blocking(move |r| {
                let mut out = Vec::new();
                for w in &ws {
                    let d = r.list::<Deposit>(
                        &index::deposits_of_customer(p, w.customer_id),
                        None,
                        10,
                        |_| true,
                    )?;
                    out.push(d.items.iter().map(|d| d.id).collect());
                    let s = r.list::<Sweep>(
                        &index::sweeps_of_wallet(p, w.customer_id, w.id),
                        None,
                        10,
                        |_| true,
                    )?;
                    out.push(s.items.iter().map(|s| s.id).collect());
                }
                Ok::<_, StoreError>(out)
            })
            .unwrap()
    };
    let before = lists(&store);
    assert_eq!(before[0].len(), 1, "{before:?}");
    assert_eq!(before[1].len(), 2, "{before:?}");
    assert_eq!(before[3].len(), 1, "{before:?}");
    assert!(before[5].is_empty(), "{before:?}");
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    let deposits = store.read_blocking(ScanOps::all::<Deposit>).unwrap();
    let sweeps = store.read_blocking(ScanOps::all::<Sweep>).unwrap();
    close(store);

    // As schema 8 wrote it: keys by customer (tag 31) and by wallet (tag 51), sweep rows
    // without their customer (one element fewer in the positional array).
    {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut idx = w.open_table(INDEX).unwrap();
            let mut runs = w.open_table(ID_RUNS).unwrap();
            for d in &deposits {
                let new = index::deposit_by_customer_key(p, d.customer_id, d.id);
                assert!(crate::id_runs::remove(&mut runs, &new).unwrap());
                let old = index::key(
                    IndexTag::DepositsByCustomer,
                    p,
                    &[d.customer_id.as_bytes()],
                    d.id,
                );
                idx.insert(old.as_slice(), ()).unwrap();
            }
            let mut rows = w.open_table(SWEEPS).unwrap();
            for sw in &sweeps {
                let new = index::sweep_by_wallet_key(p, sw.customer_id, sw.wallet_id, sw.id);
                assert!(crate::id_runs::remove(&mut runs, &new).unwrap());
                let old = index::key(
                    IndexTag::SweepsByWallet,
                    p,
                    &[sw.wallet_id.as_bytes()],
                    sw.id,
                );
                idx.insert(old.as_slice(), ()).unwrap();
                // As schema 8 wrote it: positional (version 3), without `customer_id`.
                let b = crate::codec::encode_positional(sw);
                assert_eq!(b[1], 0x9e, "a positional row of 14 fields");
                let mut old_row = vec![b[0], 0x9d];
                old_row.extend_from_slice(&b[2..b.len() - 18]);
                let read: Sweep = decode(&old_row).unwrap();
                assert_eq!(read.customer_id, Uuid::nil());
                assert_eq!(read.id, sw.id);
                rows.insert(sw.id.as_u128(), old_row.as_slice()).unwrap();
            }
            let mut meta = w.open_table(META).unwrap();
            meta.insert("schema_version", 8u32.to_be_bytes().as_slice())
                .unwrap();
        }
        w.commit().unwrap();
    }
    let old_copy = dir.path().join("old.redb");
    std::fs::copy(&path, &old_copy).unwrap();

    let check = |store: &Store| {
        assert_eq!(lists(store), before);
        let rows = store.read_blocking(ScanOps::all::<Sweep>).unwrap();
        assert_eq!(rows.len(), 3);
        for sw in &rows {
            let w = wallets.iter().find(|w| w.id == sw.wallet_id).unwrap();
            assert_eq!(sw.customer_id, w.customer_id);
        }
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    };
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    check(&store);
    close(store);
    {
        let db = Database::create(&path).unwrap();
        let r = db.begin_read().unwrap();
        let idx = r.open_table(INDEX).unwrap();
        for tag in [IndexTag::DepositsByCustomer, IndexTag::SweepsByWallet] {
            let t = tag as u8;
            assert_eq!(
                idx.range::<&[u8]>([t].as_slice()..[t + 1].as_slice())
                    .unwrap()
                    .count(),
                0,
                "no key of tag {t} left"
            );
        }
    }
    an_old_copy_and_its_backup(&old_copy, check);
}

/// Schema 10 -> 11: a simulated chain's snapshot stored in one row of `sim_snapshots`
/// moves into chunks of at most `SIM_SNAPSHOT_CHUNK` bytes; the log reads the same,
/// `sim_snapshots` is gone, and the store verifies; so does a backup taken before.
#[test]
fn a_schema_10_store_moves_its_chain_snapshots_into_chunks() {
    use crate::chain_state::test_rows;
    let op = test_rows::op();
    let snap = test_rows::snapshot(4, vec![7; 7_000]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let p = Uuid::now_v7();
    let (o, s) = (op.clone(), snap.clone());
    store
        .write_blocking(move |ctx| {
            for seq in 0..6 {
                ctx.sim_op_put(p, "ethereum", seq, &o)?;
            }
            ctx.sim_snapshot_put(p, "ethereum", 4, &s)?;
            ctx.sim_ops_delete_below(p, "ethereum", 4)?;
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let log = |store: &Store| {
        store
            .read_blocking(move |r| {
                use crate::chain_state::ChainStateOps;
                r.sim_ops_from(p, "ethereum")
            })
            .unwrap()
    };
    let before = log(&store);
    assert_eq!(before, vec![(4, snap.clone()), (5, op.clone())]);
    close(store);

    // As schema 10 wrote it: the snapshot whole in one row of `sim_snapshots`.
    {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        w.delete_table(SIM_SNAPSHOT_CHUNKS).unwrap();
        {
            let mut old = w.open_table(SIM_SNAPSHOTS).unwrap();
            old.insert((p.as_u128(), "ethereum", 4u64), snap.as_slice())
                .unwrap();
            let mut meta = w.open_table(META).unwrap();
            meta.insert("schema_version", 10u32.to_be_bytes().as_slice())
                .unwrap();
        }
        w.commit().unwrap();
    }
    let old_copy = dir.path().join("old.redb");
    std::fs::copy(&path, &old_copy).unwrap();

    let check = |store: &Store| {
        assert_eq!(log(store), before);
        at_current_schema_and_clean(store);
    };
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    check(&store);
    close(store);
    {
        let db = Database::create(&path).unwrap();
        let r = db.begin_read().unwrap();
        let names: Vec<String> = r
            .list_tables()
            .unwrap()
            .map(|t| t.name().to_string())
            .collect();
        assert!(!names.iter().any(|n| n == "sim_snapshots"), "{names:?}");
        let t = r.open_table(SIM_SNAPSHOT_CHUNKS).unwrap();
        let sizes: Vec<(u32, usize)> = t
            .iter()
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.value().3, v.value().len())
            })
            .collect();
        assert_eq!(sizes.len(), snap.len().div_ceil(SIM_SNAPSHOT_CHUNK));
        assert!(sizes.iter().all(|(_, n)| *n <= SIM_SNAPSHOT_CHUNK));
    }

    // A copy taken before the upgrade (a backup) opens, migrates, verifies and backs up.
    an_old_copy_and_its_backup(&old_copy, check);
}

/// Schema 11 -> 12 -> 13: a store whose `events_by_type` keys hold the type's
/// text opens, rekeys every one by the type's hash (more keys than one migration chunk, two
/// projects; schema 12), moves them into runs of sequences and deletes the table (schema
/// 13), lists every type as before in both orders, keeps an event id of schema 11 readable
/// and verifies clean; so does a copy taken before the upgrade (a backup).
#[test]
fn a_schema_11_store_moves_its_event_type_keys_into_runs() {
    use crate::records::Event;
    const TYPES: [&str; 3] = ["deposit.confirmed", "payout.created", "wallet.created"];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    let (p, q) = (Uuid::now_v7(), Uuid::now_v7());
    // Each project's resources: two UUIDs (keys without a project: a UUID names one
    // project's resource) and two texts (keys with the project).
    let resources = [(); 2].map(|()| {
        [
            Uuid::now_v7().to_string(),
            Uuid::now_v7().to_string(),
            "r".to_string(),
            "inv_text".to_string(),
        ]
    });
    let rs = resources.clone();
    store
        .write_blocking(move |ctx| {
            for i in 0..4_500u32 {
                let project = if i % 3 == 0 { q } else { p };
                let t = TYPES[(i as usize * 7 / 3) % 3];
                let r = &rs[usize::from(project == q)][(i as usize / 2) % 4];
                ctx.append_event(project, false, t, r, serde_json::json!({ "i": i }))?;
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let lists = |store: &Store| {
        let resources = resources.clone();
        store
            .read_blocking(move |r| {
                let mut out = Vec::new();
                for (project, resources) in [p, q].into_iter().zip(&resources) {
                    for asc in [true, false] {
                        for t in TYPES {
                            let page =
                                r.list_events(project, &[t.to_string()], None, None, 100, asc)?;
                            assert!(page.items.iter().all(|e| e.event_type == t));
                            out.push(page.items.into_iter().map(|e| e.id).collect::<Vec<_>>());
                        }
                        for res in resources {
                            let page = r.list_events(project, &[], Some(res), None, 100, asc)?;
                            assert!(page.items.iter().all(|e| e.resource_id == *res));
                            out.push(page.items.into_iter().map(|e| e.id).collect::<Vec<_>>());
                        }
                    }
                }
                Ok(out)
            })
            .unwrap()
    };
    let before = lists(&store);
    assert!(before.iter().all(|ids| ids.len() == 100), "every list full");
    close(store);

    // As schema 11 wrote it: each key project ‖ type length ‖ type ‖ sequence, each
    // resource's key (schema 7 to 12) resource ‖ sequence, no runs, and the first event's
    // id random with an `event_ids` row.
    let legacy = ulid::Ulid::new();
    let first_id = {
        let db = Database::create(&path).unwrap();
        let w = db.begin_write().unwrap();
        let first_id;
        {
            let mut events = w.open_table(EVENTS).unwrap();
            let mut old_keys = Vec::new();
            let mut resource_keys = Vec::new();
            for e in events.iter().unwrap() {
                let (k, v) = e.unwrap();
                let (project, seq) = k.value();
                let ev: Event = decode(v.value()).unwrap();
                resource_keys.push(crate::index::event_resource_key(
                    Uuid::from_u128(project),
                    &ev.resource_id,
                    seq,
                ));
                let t = ev.event_type.as_bytes();
                old_keys.push(
                    [
                        Uuid::from_u128(project).as_bytes().as_slice(),
                        &[t.len() as u8],
                        t,
                        &seq.to_be_bytes(),
                    ]
                    .concat(),
                );
            }
            let mut by_type = w.open_table(EVENTS_BY_TYPE).unwrap();
            by_type.retain(|_, _| false).unwrap();
            for k in &old_keys {
                by_type.insert(k.as_slice(), ()).unwrap();
            }
            let mut by_resource = w.open_table(EVENTS_BY_RESOURCE).unwrap();
            for k in &resource_keys {
                by_resource.insert(k.as_slice(), ()).unwrap();
            }
            let first = events
                .get((p.as_u128(), 1))
                .unwrap()
                .unwrap()
                .value()
                .to_vec();
            let mut ev: Event = decode(&first).unwrap();
            crate::ctx::event_id_in_full(&mut ev, 1);
            first_id = std::mem::replace(&mut ev.id, format!("evt_{legacy}"));
            let bytes = crate::codec::encode_record(&ev);
            events.insert((p.as_u128(), 1), bytes.as_slice()).unwrap();
            w.open_table(EVENT_IDS)
                .unwrap()
                .insert(u128::from(legacy), (p.as_u128(), 1))
                .unwrap();
            let mut meta = w.open_table(META).unwrap();
            meta.insert("schema_version", 11u32.to_be_bytes().as_slice())
                .unwrap();
        }
        w.delete_table(EVENT_TYPE_RUNS).unwrap();
        w.delete_table(EVENT_RESOURCE_RUNS).unwrap();
        w.commit().unwrap();
        first_id
    };
    let old_copy = dir.path().join("old.redb");
    std::fs::copy(&path, &old_copy).unwrap();

    let check = |store: &Store| {
        // p's first event now has its schema 11 id, in the oldest pages of its type and of
        // its resource.
        let mut expected = before.clone();
        let at = expected.iter_mut().flatten().filter(|id| **id == first_id);
        assert_eq!(at.map(|id| *id = format!("evt_{legacy}")).count(), 2);
        assert!(lists(store) == expected, "the lists changed");
        let id = format!("evt_{legacy}");
        let ev = store
            .read_blocking(move |r| r.event(p, &id))
            .unwrap()
            .unwrap();
        assert_eq!(ev.sequence, 1);
        at_current_schema_and_clean(store);
    };
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    check(&store);
    close(store);
    // Schema 12's keys (the rekey above) then moved into runs (schema 13): the old table is
    // gone, and the runs hold every sequence once, a few rows per (project, type).
    {
        let db = Database::create(&path).unwrap();
        let r = db.begin_read().unwrap();
        assert!(r
            .list_tables()
            .unwrap()
            .all(|t| t.name() != "events_by_type"));
        let t = r.open_table(EVENT_TYPE_RUNS).unwrap();
        let mut seqs = std::collections::BTreeMap::<(u128, u64), usize>::new();
        let mut rows = 0;
        for e in t.iter().unwrap() {
            let (k, v) = e.unwrap();
            let (prefix, first) = crate::event_runs::split_key(k.value()).unwrap();
            let project = u128::from_be_bytes(prefix[..16].try_into().unwrap());
            for seq in crate::event_runs::decode(first, v.value()).unwrap() {
                *seqs.entry((project, seq)).or_default() += 1;
            }
            assert!(v.value().len() <= crate::event_runs::RUN_MAX);
            rows += 1;
        }
        assert_eq!(seqs.len(), 4_500);
        assert!(seqs.values().all(|n| *n == 1));
        assert!(
            rows <= 30,
            "{rows} runs for 4,500 events of 3 types in 2 projects"
        );
        assert!(r
            .list_tables()
            .unwrap()
            .all(|t| t.name() != "events_by_resource"));
        let t = r.open_table(EVENT_RESOURCE_RUNS).unwrap();
        let mut n = 0;
        for e in t.iter().unwrap() {
            let (k, v) = e.unwrap();
            let (_, first) = crate::event_runs::split_key(k.value()).unwrap();
            n += crate::event_runs::decode(first, v.value()).unwrap().len();
        }
        assert_eq!(n, 4_500);
    }
    an_old_copy_and_its_backup(&old_copy, check);
}
