use crate::index::{self, IndexTag};
use crate::records::Customer;
use crate::{ReadOps, ScanOps, Store, StoreError, StoreOptions};
use serde_json::{json, Value};
use uuid::Uuid;

fn deep(levels: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "a": v });
    }
    v
}

/// A row the JSON decoder refuses (nested past its depth limit) is passed over by lists,
/// pages and scans, read as an error only by its own project, and reported by verify.
#[test]
fn undecodable_rows_are_passed_over_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let p = Uuid::now_v7();
    let (good, bad) = store
        .write_blocking(move |ctx| {
            let mut ids = Vec::new();
            for md in [json!({}), deep(200), json!({ "k": "v" })] {
                let c = Customer {
                    id: Uuid::now_v7(),
                    project_id: p,
                    reference_id: None,
                    email: None,
                    status: crate::records::CustomerStatus::Active,
                    metadata: md.clone(),
                    created_at: ctx.now_us(),
                };
                ctx.put(&c)?;
                ctx.append_event(p, false, "customer.created", &c.id.to_string(), md)?;
                ids.push(c.id);
            }
            Ok::<_, StoreError>((vec![ids[0], ids[2]], ids[1]))
        })
        .unwrap();
    store
        .read_blocking(|r| {
            let prefix = index::prefix(IndexTag::Customers, p, &[]);
            let page = r.list::<Customer>(&prefix, None, 10, |_| true)?;
            let listed: Vec<Uuid> = page.items.iter().map(|c| c.id).collect();
            assert_eq!(listed, vec![good[1], good[0]]);
            assert_eq!(r.all::<Customer>()?.len(), 2);
            for asc in [true, false] {
                let ev = r.list_events(p, &[], None, None, 10, asc)?;
                assert_eq!(ev.items.len(), 2);
                let ev = r.list_events(p, &["customer.created".into()], None, None, 10, asc)?;
                assert_eq!(ev.items.len(), 2);
            }
            assert!(matches!(
                r.get_in::<Customer>(p, bad),
                Err(StoreError::Corrupt(_))
            ));
            assert!(r.get_in::<Customer>(Uuid::now_v7(), bad)?.is_none());
            let rep = crate::verify::verify(r)?;
            assert_eq!(
                rep.violations
                    .iter()
                    .filter(|v| v.contains("cannot be decoded"))
                    .count(),
                2,
                "{:?}",
                rep.violations
            );
            Ok(())
        })
        .unwrap();
}
