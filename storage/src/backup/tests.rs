use super::*;
use crate::records::Customer;
use crate::{ReadOps, Store, StoreOptions};

#[test]
fn a_backup_holds_every_row_and_opens_as_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.redb"), StoreOptions::default()).unwrap();
    let p = uuid::Uuid::now_v7();
    let ids: Vec<uuid::Uuid> = (0..20)
        .map(|i| {
            store
                .write_blocking(move |ctx| {
                    let c = Customer {
                        id: uuid::Uuid::now_v7(),
                        project_id: p,
                        reference_id: Some(format!("r{i}")),
                        email: None,
                        status: crate::records::CustomerStatus::Active,
                        metadata: serde_json::json!({"i": i}),
                        created_at: ctx.now_us(),
                    };
                    ctx.put(&c)?;
                    ctx.append_event(
                        p,
                        false,
                        "customer.created",
                        &c.id.to_string(),
                        serde_json::json!({}),
                    )?;
                    Ok::<_, StoreError>(c.id)
                })
                .unwrap()
        })
        .collect();
    let dest = dir.path().join("b.redb");
    let rep = store.read_blocking(|r| backup(r, &dest)).unwrap();
    assert!(rep.rows >= 20 * 4, "{rep:?}");
    // The same path again is refused rather than overwritten.
    assert!(store.read_blocking(|r| backup(r, &dest)).is_err());
    let copy = Store::open(&dest, StoreOptions::default()).unwrap();
    for id in ids {
        let c: Customer = copy.read_blocking(|r| r.get(id)).unwrap().unwrap();
        assert_eq!(c.project_id, p);
    }
    assert_eq!(copy.read_blocking(|r| r.last_sequence(p)).unwrap(), 20);
    let v = copy.read_blocking(crate::verify::verify).unwrap();
    assert!(v.violations.is_empty(), "{:?}", v.violations);
}
