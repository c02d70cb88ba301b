use super::*;
use crate::schema::EVENTS;
use crate::{Store, StoreOptions};

/// The stored bytes of `project`'s event `seq`.
fn raw_event(store: &Store, project: Uuid, seq: u64) -> Vec<u8> {
    store
        .read_blocking(move |r| {
            Ok::<_, StoreError>(
                r.open(EVENTS)?
                    .get((project.as_u128(), seq))?
                    .unwrap()
                    .value()
                    .to_vec(),
            )
        })
        .unwrap()
}

/// An event's id names its millisecond and sequence (schema 12), so its row stores only
/// the id's 40 random bits (schema 14): 11 bytes less than the whole ULID. Every read
/// (by id, by sequence, in lists, after a pin rewrite) gives the id as appended; an id
/// that does not name its event (an older, random one) is stored whole.
#[test]
fn an_events_row_stores_only_the_random_bits_of_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let p = Uuid::now_v7();
    let (ev, pre) = store
        .write_blocking(move |ctx| {
            let ev = ctx.append_event(
                p,
                false,
                "customer.updated",
                "r",
                serde_json::json!({"a": 1}),
            )?;
            let pre = crate::codec::EventData::encode(&serde_json::json!({"b": 2}));
            let pre = ctx.append_event_data(p, false, "customer.updated", "r", &pre)?;
            Ok::<_, StoreError>((ev, pre))
        })
        .unwrap();
    for e in [&ev, &pre] {
        let u = event_ulid_of(&e.id).unwrap();
        assert_eq!(event_ulid_sequence(u), Some(e.sequence));
        assert_eq!(
            u >> 80,
            (e.created_at / 1000) as u128,
            "the id's time is the event's"
        );
    }
    let raw = |seq: u64| raw_event(&store, p, seq);
    let mut stored: Event = crate::codec::decode(&raw(ev.sequence)).unwrap();
    assert!(
        stored.id.starts_with(crate::codec::SHORT_EVENT_ID),
        "{}",
        stored.id
    );
    let mut whole = stored.clone();
    whole.id = ev.id.clone();
    assert_eq!(raw(ev.sequence).len() + 11, encode_record(&whole).len());
    event_id_in_full(&mut stored, ev.sequence);
    assert_eq!(stored.id, ev.id);
    for e in [&ev, &pre] {
        let (id, seq) = (e.id.clone(), e.sequence);
        let by_id = store
            .read_blocking(move |r| r.event(p, &id))
            .unwrap()
            .unwrap();
        assert_eq!((by_id.id.as_str(), by_id.sequence), (e.id.as_str(), seq));
        let at = store
            .read_blocking(move |r| r.event_at(p, seq))
            .unwrap()
            .unwrap();
        assert_eq!(at.id, e.id);
    }
    let listed = store
        .read_blocking(move |r| r.list_events(p, &[], None, None, 10, true))
        .unwrap();
    let ids: Vec<_> = listed.items.iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids, [ev.id.clone(), pre.id.clone()]);
    // The same id read from another sequence is not taken for this event's.
    let mut moved: Event = crate::codec::decode(&raw(ev.sequence)).unwrap();
    event_id_in_full(&mut moved, ev.sequence + 1);
    assert_ne!(moved.id, ev.id);

    // An id that does not name its event is stored whole and reads as written.
    let mut other = whole.clone();
    other.sequence = ev.sequence;
    other.id = format!("evt_{}", ulid::Ulid::new());
    assert_eq!(event_id_in_short(&other), None);
    let bytes = encode_event(&mut other, None);
    let mut back: Event = crate::codec::decode(&bytes).unwrap();
    event_id_in_full(&mut back, ev.sequence);
    assert_eq!(back.id, other.id);
    // Stored ids: 16 bytes or 5, nothing else.
    let parts = crate::codec::short_event_id_parts;
    assert_eq!(parts("evt~0102030405"), Some(([1, 2, 3, 4, 5], false)));
    assert!(parts("evt~01020304").is_none());
    assert!(parts(&ev.id).is_none());
}

/// An event about a resource whose id is a UUID (v7, minted by the same job or before)
/// stores its `created_at` as its distance from that id's millisecond (schema 15), a
/// few bytes instead of 9, its id marked so; every read gives the id and time as
/// appended. A resource id that is not a canonical UUID keeps the time whole.
#[test]
fn an_events_row_stores_its_time_from_its_resources_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let p = Uuid::now_v7();
    let resource = Uuid::now_v7().to_string();
    let upper = Uuid::now_v7().to_string().to_uppercase();
    let (r1, r2) = (resource.clone(), upper.clone());
    let evs = store
        .write_blocking(move |ctx| {
            let mut out = Vec::new();
            for r in [&r1, &r2] {
                out.push(ctx.append_event(
                    p,
                    false,
                    "customer.updated",
                    r,
                    serde_json::json!({"a": 1}),
                )?);
            }
            Ok::<_, StoreError>(out)
        })
        .unwrap();
    let raw = |seq: u64| raw_event(&store, p, seq);
    let stored: Event = crate::codec::decode(&raw(evs[0].sequence)).unwrap();
    assert!(
        stored.id.starts_with(crate::codec::SHORT_EVENT_ID_REL),
        "{}",
        stored.id
    );
    let base = ((Uuid::parse_str(&resource).unwrap().as_u128() >> 80) as i64) * 1000;
    assert_eq!(stored.created_at, evs[0].created_at - base);
    // The same row with its time whole (schema 14's form) is longer: 9 bytes for the
    // time against 1, 2, 3 or 5 for its distance (under 128 µs, 256, 65,536, or more),
    // less the id's marker byte.
    let mut whole = stored.clone();
    whole.id = whole.id.replace(
        crate::codec::SHORT_EVENT_ID_REL,
        crate::codec::SHORT_EVENT_ID,
    );
    whole.created_at = evs[0].created_at;
    let saved = encode_record(&whole).len() - raw(evs[0].sequence).len();
    assert!([3, 5, 6, 7].contains(&saved), "{saved}");
    let mut back = stored.clone();
    event_id_in_full(&mut back, evs[0].sequence);
    assert_eq!(
        (back.id.as_str(), back.created_at),
        (evs[0].id.as_str(), evs[0].created_at)
    );
    // Not a canonical UUID: the time whole.
    let other: Event = crate::codec::decode(&raw(evs[1].sequence)).unwrap();
    assert!(
        other.id.starts_with(crate::codec::SHORT_EVENT_ID),
        "{}",
        other.id
    );
    assert_eq!(other.created_at, evs[1].created_at);
    for e in &evs {
        let (id, seq) = (e.id.clone(), e.sequence);
        let by_id = store
            .read_blocking(move |r| r.event(p, &id))
            .unwrap()
            .unwrap();
        assert_eq!((&by_id.id, by_id.created_at), (&e.id, e.created_at));
        let at = store
            .read_blocking(move |r| r.event_at(p, seq))
            .unwrap()
            .unwrap();
        assert_eq!((&at.id, at.created_at), (&e.id, e.created_at));
    }
    let listed = store
        .read_blocking(move |r| r.list_events(p, &[], None, None, 10, true))
        .unwrap();
    let got: Vec<_> = listed
        .items
        .iter()
        .map(|e| (e.id.clone(), e.created_at))
        .collect();
    let want: Vec<_> = evs.iter().map(|e| (e.id.clone(), e.created_at)).collect();
    assert_eq!(got, want);
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
}

/// A credited deposit's event stores `true` for its journal entry, which its row names
/// (schema 14): 17 bytes less; the event reads with the row's entry, a state of schema
/// 13 (the entry's 16 bytes) reads as it is, JSON keeps the id, and without its row the
/// event shows no entry rather than a made-up one.
#[test]
fn a_credited_deposit_events_entry_is_its_rows() {
    use crate::records::DepositState;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let mut d = crate::codec::tests::deposit();
    let entry = d.ledger_tx_id.unwrap();
    d.project_id = Uuid::now_v7();
    let p = d.project_id;
    let dw = d.clone();
    let ev = store
        .write_blocking(move |ctx| {
            ctx.put(&dw)?;
            ctx.append_row_event(false, "deposit.confirmed", &dw)
        })
        .unwrap();
    let seq = ev.sequence;
    let raw = store
        .read_blocking(move |r| {
            Ok::<_, StoreError>(
                r.open(EVENTS)?
                    .get((p.as_u128(), seq))?
                    .unwrap()
                    .value()
                    .to_vec(),
            )
        })
        .unwrap();
    let stored: Event = crate::codec::decode(&raw).unwrap();
    assert_eq!(
        stored.deposit.as_ref().unwrap().ledger_tx_id,
        Some(DepositState::CREDITED)
    );
    let st = DepositState::of(&d);
    let mut with_id = Vec::new();
    rmp_serde::encode::write(&mut with_id, &(st.status, st.confirmations, (), entry)).unwrap();
    let mut credited = Vec::new();
    rmp_serde::encode::write(&mut credited, &st).unwrap();
    assert_eq!(credited.len() + 17, with_id.len());
    // Schema 13's form reads as it is; JSON keeps the id.
    assert_eq!(rmp_serde::from_slice::<DepositState>(&with_id).unwrap(), st);
    let json = serde_json::to_value(&st).unwrap();
    assert_eq!(json["ledger_tx_id"], serde_json::json!(entry));
    assert_eq!(serde_json::from_value::<DepositState>(json).unwrap(), st);
    let read = store
        .read_blocking(move |r| r.event_at(p, seq))
        .unwrap()
        .unwrap();
    assert_eq!(read.deposit, Some(st.clone()));
    assert!(
        matches!(&read.row, Some(crate::records::ResourceRow::Deposit(r)) if r.ledger_tx_id == Some(entry))
    );
    // (This store has no journal: verify reports that, and nothing about the event.)
    let names_none = |v: &String| v.contains("names no journal entry");
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(
        !rep.violations.iter().any(names_none),
        "{:?}",
        rep.violations
    );
    // A row that names no entry under a credited event: verify says so.
    let mut uncredited = d.clone();
    uncredited.ledger_tx_id = None;
    store
        .write_blocking(move |ctx| ctx.put(&uncredited))
        .unwrap();
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(
        rep.violations.iter().any(names_none),
        "{:?}",
        rep.violations
    );
    // Without its row: no entry shown.
    let id = d.id;
    store
        .write_blocking(move |ctx| {
            ctx.with_rows(crate::schema::DEPOSITS, |t| {
                t.remove(id.as_u128())?;
                Ok(())
            })
        })
        .unwrap();
    let read = store
        .read_blocking(move |r| r.event_at(p, seq))
        .unwrap()
        .unwrap();
    assert!(read.row.is_none());
    assert_eq!(read.deposit.unwrap().ledger_tx_id, None);
}
