use super::*;
use crate::schema::{EVENTS, EVENT_TYPE_RUNS};
use crate::{ReadOps, Reader, Store, StoreOptions};

const TYPES: [&str; 3] = ["deposit.confirmed", "deposit.detected", "payout.created"];

/// Every page of `project`'s events of type `t` (or about resource `t` when it has no
/// dot), `limit` at a time with cursors, in one order: the sequences listed.
fn pages(store: &Store, project: Uuid, t: &str, limit: usize, asc: bool) -> Vec<u64> {
    let t = t.to_string();
    store
        .read_blocking(move |r| {
            let (mut out, mut cursor) = (Vec::new(), None);
            let by_type = t.contains('.');
            let types = if by_type { vec![t.clone()] } else { vec![] };
            let resource = (!by_type).then_some(t.as_str());
            loop {
                let page = r.list_events(project, &types, resource, cursor, limit, asc)?;
                assert!(page.items.iter().all(|e| if by_type {
                    e.event_type == t
                } else {
                    e.resource_id == t
                }));
                out.extend(page.items.iter().map(|e| e.sequence));
                cursor = page.items.last().map(|e| e.sequence);
                if !page.has_more {
                    return Ok::<_, crate::StoreError>(out);
                }
            }
        })
        .unwrap()
}

/// The sequences of `project`'s events of type `t`, ascending, from `events` itself.
fn truth(store: &Store, project: Uuid, t: &str) -> Vec<u64> {
    let t = t.to_string();
    store
        .read_blocking(move |r| {
            let events = r.open(EVENTS)?;
            let p = project.as_u128();
            let mut out = Vec::new();
            for e in events.range((p, 0)..=(p, u64::MAX))? {
                let (k, v) = e?;
                let ev: crate::records::Event = crate::codec::decode(v.value())?;
                if ev.event_type == t {
                    out.push(k.value().1);
                }
            }
            Ok::<_, crate::StoreError>(out)
        })
        .unwrap()
}

/// Lists by type page through runs exactly as the event log holds them, in both orders
/// and across run boundaries, in few rows; an out-of-order or repeated sequence lands
/// in its place once; a run that does not decode leaves only its own events out, and
/// the next event of its type starts a run of its own.
#[test]
fn lists_by_type_read_the_runs_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let (p, q) = (Uuid::now_v7(), Uuid::now_v7());
    for batch in 0..6u32 {
        store
            .write_blocking(move |ctx| {
                for i in 0..700u32 {
                    let project = if i % 5 == 0 { q } else { p };
                    let t = TYPES[((batch * 700 + i) as usize * 7 / 3) % 3];
                    ctx.append_event(project, false, t, "r", serde_json::json!({ "i": i }))?;
                }
                Ok::<_, crate::StoreError>(())
            })
            .unwrap();
    }
    let runs = |store: &Store| {
        store
            .read_blocking(|r| {
                let t = r.open(EVENT_TYPE_RUNS)?;
                let mut rows = Vec::new();
                for e in t.iter()? {
                    let (k, v) = e?;
                    rows.push((k.value().to_vec(), v.value().to_vec()));
                }
                Ok::<_, crate::StoreError>(rows)
            })
            .unwrap()
    };
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    let rows = runs(&store);
    assert!(rows.len() <= 36, "{} runs for 4,200 events", rows.len());
    assert!(rows.iter().all(|(_, v)| v.len() <= RUN_MAX));
    for project in [p, q] {
        for t in TYPES {
            let all = truth(&store, project, t);
            assert!(all.len() > 200, "{t}: {}", all.len());
            for limit in [1, 37, 500] {
                assert_eq!(pages(&store, project, t, limit, true), all);
                let mut desc = all.clone();
                desc.reverse();
                assert_eq!(pages(&store, project, t, limit, false), desc);
            }
        }
    }

    // By resource: every event of each project is about "r", in runs of its own.
    for project in [p, q] {
        let all: Vec<u64> = TYPES
            .iter()
            .flat_map(|t| truth(&store, project, t))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert!(all.len() > 800);
        for limit in [37, 1000] {
            assert_eq!(pages(&store, project, "r", limit, true), all);
            let mut desc = all.clone();
            desc.reverse();
            assert_eq!(pages(&store, project, "r", limit, false), desc);
        }
    }

    // An out-of-order sequence lands in its place, a repeated one is not doubled.
    let pre = type_prefix(p, TYPES[0]);
    let all0 = truth(&store, p, TYPES[0]);
    let missing = (all0[0]..*all0.last().unwrap())
        .find(|s| !all0.contains(s))
        .unwrap();
    store
        .write_blocking(move |ctx| {
            ctx.with_event_type_runs(|t, _| {
                add(t, &pre, missing)?;
                add(t, &pre, missing)?;
                add(t, &pre, all0[3])
            })
        })
        .unwrap();
    let listed = store
        .read_blocking(move |r| {
            let t = r.open(EVENT_TYPE_RUNS)?;
            seqs(&t, &pre, 0, u64::MAX, true)?.collect::<Result<Vec<_>, _>>()
        })
        .unwrap();
    let mut want = truth(&store, p, TYPES[0]);
    want.push(missing);
    want.sort();
    assert_eq!(listed, want);

    // The run holding q's tenth `payout.created` stops decoding: exactly its events
    // leave the lists, and the next event of that type is listed.
    let pre = type_prefix(q, TYPES[2]);
    let all2 = truth(&store, q, TYPES[2]);
    let (bad_key, bad_len) = runs(&store)
        .into_iter()
        .filter(|(k, _)| k.starts_with(&pre[..]))
        .map(|(k, v)| {
            let first = split_key(&k).unwrap().1;
            (k, decode(first, &v).unwrap())
        })
        .find(|(_, seqs)| seqs.contains(&all2[9]))
        .map(|(k, seqs)| (k, seqs.len()))
        .unwrap();
    store
        .write_blocking(move |ctx| {
            ctx.with_event_type_runs(|t, _| {
                t.insert(bad_key.as_slice(), [0x80u8].as_slice())?;
                Ok(())
            })
        })
        .unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    assert!(rep.violations[0].contains("does not decode"));
    let left = pages(&store, q, TYPES[2], 50, true);
    assert_eq!(left.len(), all2.len() - bad_len);
    assert!(!left.contains(&all2[9]));
    let next = store
        .write_blocking(move |ctx| {
            ctx.append_event(q, false, TYPES[2], "r", serde_json::json!({}))
                .map(|e| e.sequence)
        })
        .unwrap();
    assert_eq!(pages(&store, q, TYPES[2], 1, false)[0], next);
}

#[test]
fn runs_decode_what_they_encode_and_refuse_bad_bytes() {
    let seqs = [5u64, 6, 9, 200, 70_000, u64::MAX];
    let v = encode(&seqs);
    assert_eq!(decode(5, &v).unwrap(), seqs);
    assert_eq!(decode(7, &[]).unwrap(), [7]);
    // cut varint, zero distance, overflow past u64, overlong varint
    assert_eq!(decode(1, &[0x80]), None);
    assert_eq!(decode(1, &[0]), None);
    assert_eq!(decode(u64::MAX, &[1]), None);
    assert_eq!(decode(0, &[0xff; 11]), None);
    assert_eq!(
        decode(
            0,
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02]
        ),
        None
    );
    assert_eq!(
        decode(
            0,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        )
        .unwrap(),
        [0, u64::MAX]
    );
    let p = type_prefix(Uuid::now_v7(), "deposit.confirmed");
    assert_eq!(split_key(&key(&p, 42)), Some((&p[..], 42)));
    assert_eq!(split_key(&key(&p, 42)[..8]), None);
    assert_eq!(
        split_key(&[7; 9]),
        Some((&[7u8][..], u64::from_be_bytes([7; 8])))
    );
}

/// One step of [`the_batchs_tails_write_what_the_plain_runs_do`].
#[derive(Debug, Clone)]
enum Op {
    /// Appends a sequence `n` above the last so far under prefix `p`.
    Add(usize, u64),
    /// Adds a sequence at or below those so far (out of order, or again).
    AddBelow(usize, u64),
    /// Reads prefix `p`'s runs through the batch's handle (its tail written first).
    Read(usize),
    /// Another reader or writer of the table: every tail is written first.
    Close,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        14 => (0..3usize, prop_oneof![1..3u64, 100..200u64, 1_000..100_000u64]).prop_map(|(p, n)| Op::Add(p, n)),
        1 => (0..3usize, 0..2_000u64).prop_map(|(p, n)| Op::AddBelow(p, n)),
        1 => (0..3usize).prop_map(Op::Read),
        1 => Just(Op::Close),
    ]
}

proptest::proptest! {
    /// The same appends through the batch's tails ([`add_to_tail`], written at random
    /// points and at the end) and straight on the table ([`add`]) read the same
    /// sequences at every read and leave the same rows, through runs that fill up
    /// (distances of 1 to 5 varint bytes) and sequences out of order or repeated.
    #[test]
    fn the_batchs_tails_write_what_the_plain_runs_do(ops in proptest::collection::vec(op(), 1..400)) {
        let prefixes = [type_prefix(Uuid::from_u128(1), TYPES[0]).to_vec(), vec![8u8; 16], vec![9u8; 20]];
        let db = crate::test_support::memory_db();
        let txn = db.begin_write().unwrap();
        let with = redb::TableDefinition::<&[u8], &[u8]>::new("with_tails");
        let plain = redb::TableDefinition::<&[u8], &[u8]>::new("plain");
        let mut tails = Tails::new();
        let mut next = [1_000u64; 3];
        for op in ops {
            match op {
                Op::Add(p, n) | Op::AddBelow(p, n) => {
                    let seq = if let Op::Add(..) = op {
                        next[p] += n;
                        next[p]
                    } else {
                        1_000 + n
                    };
                    add_to_tail(&mut txn.open_table(with).unwrap(), &mut tails, &prefixes[p], seq).unwrap();
                    add(&mut txn.open_table(plain).unwrap(), &prefixes[p], seq).unwrap();
                }
                Op::Read(p) => {
                    let mut t = txn.open_table(with).unwrap();
                    crate::held::forget(&mut t, &mut tails, &prefixes[p]).unwrap();
                    let a = seqs(&t, &prefixes[p], 0, u64::MAX, true).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
                    let u = txn.open_table(plain).unwrap();
                    let b = seqs(&u, &prefixes[p], 0, u64::MAX, true).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
                    proptest::prop_assert_eq!(a, b);
                }
                Op::Close => {
                    crate::held::forget_all(&mut txn.open_table(with).unwrap(), &mut tails, |_| true).unwrap();
                    proptest::prop_assert!(tails.is_empty());
                }
            }
        }
        crate::held::forget_all(&mut txn.open_table(with).unwrap(), &mut tails, |_| true).unwrap();
        proptest::prop_assert_eq!(
            crate::test_support::table_rows(&txn.open_table(with).unwrap()),
            crate::test_support::table_rows(&txn.open_table(plain).unwrap())
        );
    }
}
