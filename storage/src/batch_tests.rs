//! The writer's per-batch memos ([`crate::ctx_cache`]: each project's last event sequence,
//! whether an index prefix has keys) against group commit: several jobs on one
//! transaction, a failed job's batch aborted whole.

use redb::{ReadableTable, ReadableTableMetadata};
use uuid::Uuid;

use crate::index::{self, IndexTag};
use crate::schema::EVENTS;
use crate::{make_job, run_batch, ReadOps, Store, StoreError, StoreOptions, WriteCtx};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    (dir, store)
}

fn append(ctx: &mut WriteCtx<'_>, project: Uuid) -> Result<u64, StoreError> {
    let ev = ctx.append_event(project, false, "test.event", "r", serde_json::json!({}))?;
    Ok(ev.sequence)
}

/// The stored sequences of `project`, in order.
fn sequences(store: &Store, project: Uuid) -> Vec<u64> {
    store
        .read_blocking(|r| {
            let t = crate::Reader::open(r, EVENTS)?;
            let mut out = Vec::new();
            for e in t.range((project.as_u128(), 0)..=(project.as_u128(), u64::MAX))? {
                out.push(e?.0.value().1);
            }
            Ok(out)
        })
        .unwrap()
}

/// A request of a test batch: its sequence number, or why it refused.
type TestJob = Box<dyn FnOnce(&mut WriteCtx<'_>) -> Result<u64, &'static str> + Send>;

/// Runs `jobs` as one batch (one transaction), as the writer does with queued requests;
/// returns whether it committed.
fn batch(store: &Store, jobs: Vec<TestJob>) -> Result<Vec<Result<u64, String>>, ()> {
    let mut rxs = Vec::new();
    let mut queued = Vec::new();
    for f in jobs {
        let (job, rx) = make_job(f);
        queued.push(job);
        rxs.push(rx);
    }
    let mut completions = Vec::new();
    let r = run_batch(
        &store.db,
        queued,
        &mut completions,
        &StoreOptions::default(),
    );
    let ok = r.is_ok();
    let res = r.map(|_| ()).map_err(std::sync::Arc::new);
    for c in completions {
        c(res.clone());
    }
    if !ok {
        return Err(());
    }
    Ok(rxs
        .into_iter()
        .map(|mut rx| rx.try_recv().unwrap().map_err(|e| e.to_string()))
        .collect())
}

#[test]
fn a_rolled_back_requests_events_leave_the_next_sequence_contiguous() {
    let (_dir, store) = store();
    let p = Uuid::now_v7();
    let q = Uuid::now_v7();
    let first = store.write_blocking(move |ctx| append(ctx, p)).unwrap();
    assert_eq!(first, 1);

    // One batch: a request appends two events of `p` and one of `q`, a second appends one
    // more of `p` and then fails. The batch is aborted whole: none of these numbers exist.
    // (An assert inside a job would be caught with the job's panic: results go out through
    // `numbered`.)
    let numbered = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = numbered.clone();
    let r = batch(
        &store,
        vec![
            Box::new(move |ctx| {
                append(ctx, p).map_err(|_| "store")?;
                append(ctx, q).map_err(|_| "store")?;
                append(ctx, p).map_err(|_| "store")
            }),
            Box::new(move |ctx| {
                let seq = append(ctx, p).map_err(|_| "store")?;
                seen.lock().unwrap().push(seq);
                Err("refused after writing")
            }),
        ],
    );
    assert!(
        r.is_err(),
        "a request that fails after writing aborts its batch"
    );
    assert_eq!(
        *numbered.lock().unwrap(),
        vec![4],
        "numbered after the batch's own events"
    );
    assert_eq!(sequences(&store, p), vec![1]);
    assert_eq!(sequences(&store, q), Vec::<u64>::new());

    // The next batch numbers from what is stored, not from the aborted batch's memo. A
    // request that refuses before writing is left out of it without touching the others.
    let r = batch(
        &store,
        vec![
            Box::new(move |ctx| append(ctx, p).map_err(|_| "store")),
            Box::new(|_ctx| Err("refused before writing")),
            Box::new(move |ctx| {
                append(ctx, q).map_err(|_| "store")?;
                append(ctx, p).map_err(|_| "store")
            }),
        ],
    )
    .expect("a request refused before writing does not abort the batch");
    assert_eq!(r[0], Ok(2));
    assert!(r[1].is_err());
    assert_eq!(r[2], Ok(3));
    assert_eq!(sequences(&store, p), vec![1, 2, 3]);
    assert_eq!(sequences(&store, q), vec![1]);
    let after = store.write_blocking(move |ctx| append(ctx, p)).unwrap();
    assert_eq!(after, 4);
    assert_eq!(store.read_blocking(|r| r.last_sequence(p)).unwrap(), 4);
}

#[test]
fn a_remembered_index_prefix_follows_the_batchs_own_index_writes() {
    let (_dir, store) = store();
    let p = Uuid::now_v7();
    let other = Uuid::now_v7();
    let seen = store
        .write_blocking(move |ctx| {
            let mut seen = vec![ctx.index_has_any(IndexTag::WebhookEndpoints, p)?];
            let k = index::key(IndexTag::WebhookEndpoints, p, &[], Uuid::now_v7());
            // A write under another project's prefix leaves `p`'s answer as it was.
            ctx.index_insert(&index::key(
                IndexTag::WebhookEndpoints,
                other,
                &[],
                Uuid::now_v7(),
            ))?;
            seen.push(ctx.index_has_any(IndexTag::WebhookEndpoints, p)?);
            ctx.index_insert(&k)?;
            seen.push(ctx.index_has_any(IndexTag::WebhookEndpoints, p)?);
            seen.push(ctx.index_has_any(IndexTag::WebhookEndpoints, other)?);
            ctx.index_remove(&k)?;
            seen.push(ctx.index_has_any(IndexTag::WebhookEndpoints, p)?);
            Ok::<_, StoreError>(seen)
        })
        .unwrap();
    assert_eq!(seen, vec![false, false, true, true, false]);
}

#[test]
fn a_remembered_sim_log_end_follows_the_batchs_writes_and_dies_with_an_aborted_batch() {
    use crate::ChainStateOps;
    let (_dir, store) = store();
    let p = Uuid::now_v7();
    let seen = store
        .write_blocking(move |ctx| {
            let mut seen = vec![ctx.sim_last_seq(p, "ethereum")?];
            ctx.sim_op_put(p, "ethereum", 0, b"a")?;
            seen.push(ctx.sim_last_seq(p, "ethereum")?);
            ctx.sim_op_put(p, "ethereum", 1, b"b")?;
            seen.push(ctx.sim_last_seq(p, "ethereum")?);
            // Another chain of the project is its own log.
            seen.push(ctx.sim_last_seq(p, "polygon")?);
            // A generic read of the table drops the memo; the answer stays the same.
            seen.push(ChainStateOps::sim_last_seq(&*ctx, p, "ethereum")?);
            seen.push(ctx.sim_last_seq(p, "ethereum")?);
            Ok::<_, StoreError>(seen)
        })
        .unwrap();
    assert_eq!(seen, vec![None, Some(0), Some(1), None, Some(1), Some(1)]);

    // A batch that writes operation 2 and then fails is aborted whole: the next batch reads
    // the log's end from what is stored.
    let r = batch(
        &store,
        vec![
            Box::new(move |ctx| {
                ctx.sim_op_put(p, "ethereum", 2, b"c")
                    .map_err(|_| "store")?;
                ctx.sim_last_seq(p, "ethereum")
                    .map_err(|_| "store")?
                    .ok_or("no end")
            }),
            Box::new(|ctx| {
                ctx.sim_height_put("ethereum", 7).map_err(|_| "store")?;
                Err("refused after writing")
            }),
        ],
    );
    assert!(r.is_err());
    let after = store
        .write_blocking(move |ctx| {
            Ok::<_, StoreError>((
                ctx.sim_last_seq(p, "ethereum")?,
                ctx.sim_height("ethereum")?,
            ))
        })
        .unwrap();
    assert_eq!(after, (Some(1), 0));
    // The kept `sim_heights` handle reads what a write through another handle left.
    let height = store
        .write_blocking(|ctx| {
            let before = ctx.sim_height("ethereum")?;
            ctx.sim_height_put("ethereum", 9)?;
            Ok::<_, StoreError>((before, ctx.sim_height("ethereum")?))
        })
        .unwrap();
    assert_eq!(height, (0, 9));
}

/// Schema 12: a new event's id names its sequence, so it is found with no `event_ids` row;
/// an event of an earlier schema (a random ULID and its row) is still found; an id is
/// found only in its own project, and an id with the right sequence but other random bits
/// is not found.
#[test]
fn an_events_id_names_its_sequence_and_older_ids_still_read() {
    use crate::schema::EVENT_IDS;
    let (_dir, store) = store();
    let p = Uuid::now_v7();
    let q = Uuid::now_v7();
    let ev = store
        .write_blocking(move |ctx| {
            ctx.append_event(p, false, "test.event", "r", serde_json::json!({"n": 1}))
        })
        .unwrap();
    let other = store
        .write_blocking(move |ctx| {
            ctx.append_event(q, false, "test.event", "r", serde_json::json!({}))
        })
        .unwrap();
    assert_eq!((ev.sequence, other.sequence), (1, 1));
    assert_ne!(ev.id, other.id, "one sequence in two projects: two ids");
    let rows = store
        .read_blocking(|r| Ok(crate::Reader::open(r, EVENT_IDS)?.len()?))
        .unwrap();
    assert_eq!(
        rows, 0,
        "no event_ids row for an id that names its sequence"
    );

    let id = ev.id.clone();
    let found = store
        .read_blocking(move |r| r.event(p, &id))
        .unwrap()
        .unwrap();
    assert_eq!(
        (found.sequence, found.data.clone()),
        (1, serde_json::json!({"n": 1}))
    );
    let lower = ev.id.to_lowercase().replacen("EVT_", "evt_", 1);
    assert!(store
        .read_blocking(move |r| r.event(p, &lower))
        .unwrap()
        .is_some());
    let id = ev.id.clone();
    assert!(
        store
            .read_blocking(move |r| r.event(q, &id))
            .unwrap()
            .is_none(),
        "another project's id is not found"
    );
    // The same sequence with other random bits.
    let u = u128::from(ulid::Ulid::from_string(&ev.id[4..]).unwrap()) ^ 1;
    let forged = format!("evt_{}", ulid::Ulid::from(u));
    assert!(store
        .read_blocking(move |r| r.event(p, &forged))
        .unwrap()
        .is_none());

    // An event as schema 11 wrote it: a random ULID, found through its `event_ids` row.
    let second = store.write_blocking(move |ctx| append(ctx, p)).unwrap();
    let legacy = ulid::Ulid::new();
    store
        .write_blocking(move |ctx| {
            let mut events = ctx.txn.open_table(EVENTS)?;
            let bytes = events.get((p.as_u128(), second))?.unwrap().value().to_vec();
            let mut row: crate::records::Event = crate::codec::decode(&bytes)?;
            row.id = format!("evt_{legacy}");
            let bytes = crate::codec::encode_record(&row);
            events.insert((p.as_u128(), second), bytes.as_slice())?;
            ctx.txn
                .open_table(EVENT_IDS)?
                .insert(u128::from(legacy), (p.as_u128(), second))?;
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let id = format!("evt_{legacy}");
    let found = store
        .read_blocking(move |r| r.event(p, &id))
        .unwrap()
        .unwrap();
    assert_eq!(found.sequence, second);

    // A damaged row: its own id answers the damage; an older id whose bits happen to name
    // that sequence still reads through its `event_ids` row.
    let third = store.write_blocking(move |ctx| append(ctx, p)).unwrap();
    let third_id = store
        .read_blocking(move |r| {
            let page = r.list_events(p, &[], None, Some(third - 1), 1, true)?;
            Ok(page.items[0].id.clone())
        })
        .unwrap();
    let u = u128::from(ulid::Ulid::from_string(&third_id[4..]).unwrap());
    let odd = ulid::Ulid::from(u ^ 1);
    store
        .write_blocking(move |ctx| {
            ctx.txn
                .open_table(EVENTS)?
                .insert((p.as_u128(), third), [0xffu8, 0].as_slice())?;
            ctx.txn
                .open_table(EVENT_IDS)?
                .insert(u128::from(odd), (p.as_u128(), second))?;
            Ok::<_, StoreError>(())
        })
        .unwrap();
    let r = store.read_blocking(move |r| r.event(p, &third_id));
    assert!(matches!(r, Err(StoreError::Corrupt(_))), "{r:?}");
    let id = format!("evt_{odd}");
    let found = store
        .read_blocking(move |r| r.event(p, &id))
        .unwrap()
        .unwrap();
    assert_eq!(found.sequence, second);
}

fn customer(project: Uuid, id: Uuid) -> crate::records::Customer {
    crate::records::Customer {
        id,
        project_id: project,
        reference_id: None,
        email: None,
        status: crate::records::CustomerStatus::Active,
        metadata: serde_json::json!({}),
        created_at: 1,
    }
}

/// The project's customers as its list reads them (`GET /v1/customers`), newest first.
fn customers_listed<R: ReadOps>(r: &R, project: Uuid) -> Result<Vec<Uuid>, StoreError> {
    let prefix = index::prefix(IndexTag::Customers, project, &[]);
    Ok(r.scan_ids(&prefix, None, usize::MAX, |_| Ok(true))?.items)
}

/// A batch's appends to a project's list (its last run, held by the batch: `id_runs::Tail`)
/// are seen by a read of the list later in the same batch, are all there after the commit
/// (more than a run holds, so a full run gives way to a new one), and leave nothing when
/// the batch is aborted.
#[test]
fn a_batchs_list_appends_are_read_in_the_batch_and_written_by_its_commit() {
    let (_dir, store) = store();
    let p = Uuid::now_v7();
    let ids: Vec<Uuid> = (0..40).map(|_| Uuid::now_v7()).collect();
    let mut jobs: Vec<TestJob> = Vec::new();
    for chunk in ids[..20].chunks(5) {
        let chunk = chunk.to_vec();
        jobs.push(Box::new(move |ctx| {
            for id in chunk {
                ctx.put(&customer(p, id)).map_err(|_| "put")?;
            }
            Ok(0)
        }));
    }
    // A read of the list in the same batch, after the appends.
    jobs.push(Box::new(move |ctx| {
        Ok(customers_listed(&*ctx, p).map_err(|_| "list")?.len() as u64)
    }));
    let tail = ids[20..].to_vec();
    jobs.push(Box::new(move |ctx| {
        for id in tail {
            ctx.put(&customer(p, id)).map_err(|_| "put")?;
        }
        Ok(0)
    }));
    let out = batch(&store, jobs).unwrap();
    assert_eq!(
        out[4],
        Ok(20),
        "the batch's own appends are listed within it"
    );
    let mut want = ids.clone();
    want.reverse();
    let listed = store
        .read_blocking(move |r| customers_listed(r, p))
        .unwrap();
    assert_eq!(listed, want);

    // Appends of an aborted batch (a job that wrote, then refused) leave no trace, and the
    // next batch appends after the list as committed.
    let more: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let m = more.clone();
    let aborted = batch(
        &store,
        vec![Box::new(move |ctx| {
            for id in m {
                ctx.put(&customer(p, id)).map_err(|_| "put")?;
            }
            Err("refused after writing")
        })],
    );
    assert!(aborted.is_err());
    let listed = store
        .read_blocking(move |r| customers_listed(r, p))
        .unwrap();
    assert_eq!(listed, want);
    let last = Uuid::now_v7();
    store
        .write_blocking(move |ctx| ctx.put(&customer(p, last)))
        .unwrap();
    want.insert(0, last);
    let listed = store
        .read_blocking(move |r| customers_listed(r, p))
        .unwrap();
    assert_eq!(listed, want);
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
}

/// A batch's events, whose type and resource runs the batch holds ahead of their rows
/// (`event_runs::Tail`), are listed by type and by resource later in the same batch and
/// after its commit, each once; a customer created and rewritten in one batch has its
/// `customer.created` pinned to the row it was created with (the rewrite reads the
/// customer's resource run, which the batch holds).
#[test]
fn a_batchs_events_are_listed_in_the_batch_and_written_by_its_commit() {
    use crate::records::ResourceState;
    let (_dir, store) = store();
    let p = Uuid::now_v7();
    let c = customer(p, Uuid::now_v7());
    let mut jobs: Vec<TestJob> = Vec::new();
    for _ in 0..4 {
        jobs.push(Box::new(move |ctx| {
            for _ in 0..60 {
                append(ctx, p).map_err(|_| "append")?;
            }
            Ok(0)
        }));
    }
    let types = vec!["test.event".to_string()];
    let t2 = types.clone();
    jobs.push(Box::new(move |ctx| {
        let page = ctx
            .list_events(p, &t2, None, None, 1_000, true)
            .map_err(|_| "list")?;
        Ok(page.items.len() as u64)
    }));
    let c2 = c.clone();
    jobs.push(Box::new(move |ctx| {
        ctx.put(&c2).map_err(|_| "put")?;
        let ev = ctx
            .append_row_event(false, "customer.created", &c2)
            .map_err(|_| "event")?;
        let mut changed = c2.clone();
        changed.email = Some("changed@x.co".into());
        ctx.put(&changed).map_err(|_| "rewrite")?;
        let by_resource = ctx
            .list_events(p, &[], Some(&c2.id.to_string()), None, 10, true)
            .map_err(|_| "list")?;
        Ok(by_resource.items.len() as u64 * 1_000_000 + ev.sequence)
    }));
    let out = batch(&store, jobs).unwrap();
    assert_eq!(
        out[4],
        Ok(240),
        "the batch's own events are listed within it"
    );
    assert_eq!(out[5], Ok(1_000_000 + 241));
    let listed = store
        .read_blocking(move |r| r.list_events(p, &types, None, None, 1_000, true))
        .unwrap();
    let seqs: Vec<u64> = listed.items.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, (1..=240).collect::<Vec<u64>>());
    let id = c.id;
    let stored = store
        .read_blocking(move |r| {
            let raw = crate::Reader::open(r, EVENTS)?;
            let ev: crate::records::Event =
                crate::codec::decode(raw.get((p.as_u128(), 241))?.unwrap().value())?;
            Ok::<_, StoreError>(ev.state)
        })
        .unwrap();
    assert_eq!(stored, Some(ResourceState::CustomerAt(Box::new(c))), "{id}");
    let rep = store.read_blocking(crate::verify::verify).unwrap();
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
}
