use super::*;
use crate::index::IndexTag;
use crate::schema::ID_RUNS;
use crate::{Reader, Store, StoreOptions};
use uuid::Uuid;

fn listed(store: &Store, prefix: &[u8], before: Option<u128>) -> Vec<u128> {
    let prefix = prefix.to_vec();
    store
        .read_blocking(move |r| {
            let t = r.open(ID_RUNS)?;
            ids_desc(&t, &prefix, before)?.collect::<Result<Vec<_>, _>>()
        })
        .unwrap()
}

fn rows(store: &Store) -> Vec<(Vec<u8>, Vec<u8>)> {
    store
        .read_blocking(|r| {
            let t = r.open(ID_RUNS)?;
            t.iter()?
                .map(|e| {
                    let (k, v) = e?;
                    Ok((k.value().to_vec(), v.value().to_vec()))
                })
                .collect::<Result<Vec<_>, StoreError>>()
        })
        .unwrap()
}

/// Appends fill runs of RUN_IDS; an id out of order lands in its place (splitting a
/// full run), a repeated one is not doubled, a removed one leaves (a run's first moves
/// its key); lists give every id newest first from any cursor, per prefix; a run that
/// does not decode leaves out its own ids only, `verify` names it, and the next id is
/// listed.
#[test]
fn runs_hold_each_id_once_and_list_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let p = Uuid::now_v7();
    let (c1, c2) = (Uuid::now_v7(), Uuid::now_v7());
    let (a, b) = (
        crate::index::deposits_of_customer(p, c1),
        crate::index::deposits_of_customer(p, c2),
    );
    assert!(is_run_prefix(&a) && is_run_prefix(&[IndexTag::Deposits as u8]));
    assert!(!is_run_prefix(&[IndexTag::PayoutsOpen as u8]));
    let ids: Vec<u128> = (0..100u128).map(|i| 1_000 + i * 10).collect();
    let (ia, ib) = (ids.clone(), ids.clone());
    let (pa, pb) = (a.clone(), b.clone());
    store
        .write_blocking(move |ctx| {
            ctx.with_runs(ID_RUNS, |t, _| {
                for (x, y) in ia.iter().zip(&ib) {
                    assert!(add(t, &key(&pa, *x))?);
                    assert!(add(t, &key(&pb, *y + 1))?);
                }
                Ok(())
            })
        })
        .unwrap();
    // 100 ids: 7 runs of 15 ids at most, per prefix.
    assert_eq!(rows(&store).len(), 2 * 7);
    assert!(rows(&store)
        .iter()
        .all(|(_, v)| v.len() <= 16 * (RUN_IDS - 1)));
    let mut want: Vec<u128> = ids.iter().rev().copied().collect();
    assert_eq!(listed(&store, &a, None), want);
    for cut in [0usize, 1, 14, 15, 16, 57, 99] {
        let before = want[cut];
        assert_eq!(listed(&store, &a, Some(before)), want[cut + 1..]);
    }
    assert_eq!(
        listed(&store, &b, None),
        want.iter().map(|i| i + 1).collect::<Vec<_>>()
    );

    // Out of order into a full run, repeated, removed (a run's first, a middle one).
    let pa = a.clone();
    store
        .write_blocking(move |ctx| {
            ctx.with_runs(ID_RUNS, |t, _| {
                assert!(add(t, &key(&pa, 1_005))?);
                assert!(!add(t, &key(&pa, 1_005))?);
                assert!(!add(t, &key(&pa, 1_010))?);
                assert!(remove(t, &key(&pa, 1_000))?);
                assert!(remove(t, &key(&pa, 1_500))?);
                assert!(!remove(t, &key(&pa, 1_500))?);
                assert!(contains(t, &key(&pa, 1_005))?);
                assert!(!contains(t, &key(&pa, 1_000))?);
                Ok(())
            })
        })
        .unwrap();
    want.retain(|i| *i != 1_000 && *i != 1_500);
    want.push(1_005);
    want.sort_by(|x, y| y.cmp(x));
    assert_eq!(listed(&store, &a, None), want);
    assert!(rows(&store)
        .iter()
        .all(|(_, v)| v.len() <= 16 * (RUN_IDS - 1)));

    // A damaged run: only its ids leave; verify names it; the next id is listed.
    let (bad_key, lost) = rows(&store)
        .into_iter()
        .filter(|(k, _)| k.starts_with(&b))
        .map(|(k, v)| (k.clone(), decode(split_key(&k).unwrap().1, &v).unwrap()))
        .nth(2)
        .unwrap();
    store
        .write_blocking(move |ctx| {
            ctx.with_runs(ID_RUNS, |t, _| {
                t.insert(bad_key.as_slice(), [1u8; 7].as_slice())?;
                Ok(())
            })
        })
        .unwrap();
    let left = listed(&store, &b, None);
    assert_eq!(left.len(), 100 - lost.len());
    assert!(lost.iter().all(|i| !left.contains(i)));
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    assert!(rep.violations[0].contains("does not decode"));
    let pb = b.clone();
    store
        .write_blocking(move |ctx| ctx.with_runs(ID_RUNS, |t, _| add(t, &key(&pb, 5_000))))
        .unwrap();
    assert_eq!(listed(&store, &b, None)[0], 5_000);
}

/// A project's list (schema 15) is written in full-size runs: every value is RUN_IDS - 1
/// slots whether the run holds 1 id or 15, through appends, an out-of-order id that
/// splits a full run, and removals; the list reads every id newest first.
#[test]
fn a_projects_runs_are_written_full_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let p = Uuid::now_v7();
    let prefix = crate::index::prefix(IndexTag::Deposits, p, &[]);
    let runs = run_of(&prefix).unwrap();
    assert!(
        runs.padded && run_of(&crate::index::deposits_of_customer(p, p)).is_some_and(|r| !r.padded)
    );
    let table = runs.table;
    let mut want: Vec<u128> = (0..40u128).map(|i| 1_000 + i * 10).collect();
    let pr = prefix.clone();
    let ids = want.clone();
    store
        .write_blocking(move |ctx| {
            ctx.with_runs(table, |t, _| {
                for id in &ids {
                    assert!(add(t, &key(&pr, *id))?);
                }
                // Into a full run, out of order; removals of a first and a middle id.
                assert!(add(t, &key(&pr, 1_005))?);
                assert!(remove(t, &key(&pr, 1_000))?);
                assert!(remove(t, &key(&pr, 1_200))?);
                Ok(())
            })
        })
        .unwrap();
    want.retain(|i| *i != 1_000 && *i != 1_200);
    want.push(1_005);
    want.sort_by(|x, y| y.cmp(x));
    let pr = prefix.clone();
    let rows = store
        .read_blocking(move |r| {
            let t = r.open(table)?;
            let listed = ids_desc(&t, &pr, None)?.collect::<Result<Vec<_>, _>>()?;
            let lens = t
                .iter()?
                .map(|e| e.map(|(_, v)| v.value().len()))
                .collect::<Result<Vec<_>, _>>()?;
            Ok::<_, StoreError>((listed, lens))
        })
        .unwrap();
    assert_eq!(rows.0, want);
    // 40 ids in 3 runs, the first split in two by the out-of-order id.
    assert_eq!(rows.1.len(), 4);
    assert!(
        rows.1.iter().all(|l| *l == 16 * (RUN_IDS - 1)),
        "{:?}",
        rows.1
    );
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
}

#[test]
fn runs_refuse_values_that_are_not_ascending_ids() {
    let v: Vec<u8> = [5u128, 9].iter().flat_map(|i| i.to_be_bytes()).collect();
    assert_eq!(decode(1, &v).unwrap(), [1, 5, 9]);
    assert_eq!(decode(1, &[]).unwrap(), [1]);
    assert_eq!(decode(5, &v), None, "not above the first");
    assert_eq!(decode(1, &v[..20]), None, "not whole ids");
    let down: Vec<u8> = [9u128, 5].iter().flat_map(|i| i.to_be_bytes()).collect();
    assert_eq!(decode(1, &down), None);
    // Padded: free (zero) slots after the ids, and only after them.
    assert_eq!(encode(&[1, 5, 9], true).len(), 16 * (RUN_IDS - 1));
    assert_eq!(decode(1, &encode(&[1, 5, 9], true)).unwrap(), [1, 5, 9]);
    assert_eq!(decode(1, &encode(&[1], true)).unwrap(), [1]);
    assert_eq!(encode(&[1, 5, 9], false), v);
    let mut gap = encode(&[1, 5], true);
    gap[16 * 2 + 15] = 9;
    assert_eq!(decode(1, &gap), None, "an id after a free slot");
    let p = crate::index::deposits_of_customer(Uuid::now_v7(), Uuid::now_v7());
    assert_eq!(split_key(&key(&p, 42)), Some((&p[..], 42)));
    assert_eq!(split_key(&[7; 16]), None);
    assert!(run_of_key(&key(&p, 42)).is_some() && run_of_key(&p[..1]).is_none());
}

/// One step of [`the_batchs_tails_write_what_the_plain_runs_do`].
#[derive(Debug, Clone)]
enum Op {
    /// Adds id `base + n` under prefix `p` (mostly ascending: `base` grows).
    Add(usize, u128),
    /// Adds an id below those so far (out of order).
    AddBelow(usize, u128),
    Remove(usize, u128),
    /// Another reader or writer of the table: the tails are written first.
    Close,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        12 => (0..3usize, 1..4u128).prop_map(|(p, n)| Op::Add(p, n)),
        1 => (0..3usize, 0..400u128).prop_map(|(p, n)| Op::AddBelow(p, n)),
        2 => (0..3usize, 0..400u128).prop_map(|(p, n)| Op::Remove(p, n)),
        1 => Just(Op::Close),
    ]
}

proptest::proptest! {
    /// The same operations through the batch's tails ([`add_to_tail`], written at
    /// random points and at the end) and straight on the table ([`add`], [`remove`])
    /// answer the same and leave the same rows, for padded and unpadded runs (three
    /// prefixes, two tables, one of them shared by two prefixes).
    #[test]
    fn the_batchs_tails_write_what_the_plain_runs_do(ops in proptest::collection::vec(op(), 1..300)) {
        let project = Uuid::from_u128(7);
        let prefixes = [
            crate::index::prefix(IndexTag::Deposits, project, &[]),
            crate::index::deposits_of_customer(project, Uuid::from_u128(8)),
            crate::index::deposits_of_customer(project, Uuid::from_u128(9)),
        ];
        let db = crate::test_support::memory_db();
        let txn = db.begin_write().unwrap();
        let plain_defs = [
            redb::TableDefinition::<&[u8], &[u8]>::new("plain_padded"),
            redb::TableDefinition::<&[u8], &[u8]>::new("plain"),
        ];
        let table_of = |p: usize| run_of(&prefixes[p]).unwrap().table;
        let plain_of = |p: usize| plain_defs[usize::from(p > 0)];
        let mut tails = Tails::new();
        let mut next = 1_000u128;
        for op in ops {
            match op {
                Op::Close => {
                    for def in [table_of(0), table_of(1)] {
                        let mut t = txn.open_table(def).unwrap();
                        write_tails(&mut t, &mut tails, def.name()).unwrap();
                    }
                    proptest::prop_assert!(tails.is_empty());
                }
                Op::Add(p, n) | Op::AddBelow(p, n) => {
                    let id = if matches!(op, Op::Add(..)) {
                        next += n;
                        next
                    } else {
                        1_000 + n
                    };
                    let k = key(&prefixes[p], id);
                    let a = add_to_tail(&mut txn.open_table(table_of(p)).unwrap(), &mut tails, &k).unwrap();
                    let b = add(&mut txn.open_table(plain_of(p)).unwrap(), &k).unwrap();
                    proptest::prop_assert_eq!(a, b, "add {}", id);
                }
                Op::Remove(p, n) => {
                    let k = key(&prefixes[p], 1_000 + n);
                    let mut t = txn.open_table(table_of(p)).unwrap();
                    crate::held::forget(&mut t, &mut tails, &prefixes[p]).unwrap();
                    let a = remove(&mut t, &k).unwrap();
                    let b = remove(&mut txn.open_table(plain_of(p)).unwrap(), &k).unwrap();
                    proptest::prop_assert_eq!(a, b, "remove {}", 1_000 + n);
                }
            }
        }
        for def in [table_of(0), table_of(1)] {
            write_tails(&mut txn.open_table(def).unwrap(), &mut tails, def.name()).unwrap();
        }
        proptest::prop_assert!(tails.is_empty());
        // Prefix 0's table is the padded runs_deposits; 1 and 2 share ID_RUNS.
        proptest::prop_assert_eq!(
            crate::test_support::table_rows(&txn.open_table(table_of(0)).unwrap()),
            crate::test_support::table_rows(&txn.open_table(plain_defs[0]).unwrap())
        );
        proptest::prop_assert_eq!(
            crate::test_support::table_rows(&txn.open_table(table_of(1)).unwrap()),
            crate::test_support::table_rows(&txn.open_table(plain_defs[1]).unwrap())
        );
    }
}
