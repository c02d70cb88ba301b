use crate::records::{Customer, Event, ResourceRow, ResourceState};
use crate::schema::EVENTS;
use crate::{ReadOps, Reader, Store, StoreError, StoreOptions};
use redb::ReadableTable;
use uuid::Uuid;

fn customer(project: Uuid, email: &str) -> Customer {
    Customer {
        id: Uuid::now_v7(),
        project_id: project,
        reference_id: None,
        email: Some(email.into()),
        status: crate::records::CustomerStatus::Active,
        metadata: serde_json::json!({}),
        created_at: 1,
    }
}

/// `customer.created` is stored compact and reads the customer's row; the first
/// rewrite of the row pins the row as it was into the event, later ones leave it; a
/// removal pins too; another project's event at the same sequence, about another
/// customer, is not touched; `verify` stays clean throughout.
#[test]
fn a_customers_created_event_keeps_the_row_it_was_created_with() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let (p, q) = (Uuid::now_v7(), Uuid::now_v7());
    let (a, b) = (customer(p, "a@x.co"), customer(q, "b@x.co"));
    let (a2, b2) = (a.clone(), b.clone());
    let (ea, eb) = store
        .write_blocking(move |ctx| {
            ctx.put(&a2)?;
            let ea = ctx.append_row_event(false, "customer.created", &a2)?;
            ctx.put(&b2)?;
            let eb = ctx.append_row_event(false, "customer.created", &b2)?;
            Ok::<_, StoreError>((ea.id, eb.id))
        })
        .unwrap();
    let read = |project: Uuid, id: String| {
        store
            .read_blocking(move |r| {
                let ev = r.event(project, &id)?.unwrap();
                let raw = r.open(EVENTS)?;
                let stored: Event = crate::codec::decode(
                    raw.get((project.as_u128(), ev.sequence))?.unwrap().value(),
                )?;
                Ok::<_, StoreError>((ev, stored.state))
            })
            .unwrap()
    };
    let shown = |ev: &Event| match &ev.row {
        Some(ResourceRow::Customer(c)) => (**c).clone(),
        other => panic!("no customer row: {other:?}"),
    };
    let clean = || {
        let rep = store.read_blocking(crate::verify::verify).unwrap();
        assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    };
    let (ev, state) = read(p, ea.clone());
    assert_eq!(state, Some(ResourceState::Customer));
    assert_eq!(shown(&ev), a);
    clean();

    for email in ["second@x.co", "third@x.co"] {
        let mut changed = a.clone();
        changed.email = Some(email.into());
        store.write_blocking(move |ctx| ctx.put(&changed)).unwrap();
        let (ev, state) = read(p, ea.clone());
        assert_eq!(state, Some(ResourceState::CustomerAt(Box::new(a.clone()))));
        assert_eq!(shown(&ev), a);
        clean();
    }
    let (ev, state) = read(q, eb.clone());
    assert_eq!(state, Some(ResourceState::Customer));
    assert_eq!(shown(&ev), b);

    let id = b.id;
    store
        .write_blocking(move |ctx| ctx.delete::<Customer>(id))
        .unwrap()
        .unwrap();
    let (ev, state) = read(q, eb);
    assert_eq!(state, Some(ResourceState::CustomerAt(Box::new(b.clone()))));
    assert_eq!(shown(&ev), b);
    clean();
}
