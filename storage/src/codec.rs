//! Value encoding of every stored record: one version byte, then the record.
//!
//! ```text
//! 2 ‖ MessagePack, structs as maps with named fields (rmp-serde `to_vec_named`)   written
//! 1 ‖ JSON                                                                          read only
//! ```
//!
//! Both bodies are self-describing: a later release can add an optional field
//! (`Option<_>` or `#[serde(default)]`) and read older rows without a migration. The version
//! byte marks a change of the body's format, which needs one. MessagePack keeps that
//! property at about half the size of JSON: no quotes or separators, integers in 1-9 bytes,
//! UUIDs as 16 raw bytes instead of 36 characters. See docs/performance.md.
//!
//! This module is the one place a record becomes bytes and back: [`crate::WriteCtx`] and
//! [`crate::ReadOps`] use it for every table of records, so a table added later gets the
//! current encoding by calling [`encode`] / [`decode`]. Rows of version 1 (stores written
//! before schema version 4) stay readable forever, so an old backup restores; they are
//! rewritten as version 2 when the store opens ([`migrate_table`]).

use std::ops::Bound;

use redb::{Key, ReadableTable, TableDefinition, WriteTransaction};
use serde::{de::DeserializeOwned, Serialize};
use uuid::Uuid;

use crate::StoreError;

/// Encoding version of every value written by this build (MessagePack, named fields).
pub const VALUE_VERSION: u8 = 2;

/// Encoding version of the JSON values written before schema version 4 (read only).
pub const JSON_VERSION: u8 = 1;

/// Deepest nesting a stored value may have when read back, the same bound as the JSON
/// decoder's (so a row refused before is refused now, and decoding never exhausts the stack).
const MAX_DEPTH: usize = 128;

/// Encodes a record as `[VALUE_VERSION] ‖ MessagePack` with named fields.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(VALUE_VERSION);
    // Our own records into a Vec: rmp-serde fails only past 1024 levels of nesting, which
    // no record reaches (metadata is flat, services/metadata.rs; views are fixed shapes).
    rmp_serde::encode::write_named(&mut out, value).expect("record serializes");
    out
}

/// The `data` of an event, encoded ahead of the write (MessagePack with named fields, as
/// [`encode`] writes the body of a record): a request thread encodes it, the store writer
/// only copies it into the event row ([`crate::WriteCtx::append_event_data`]).
///
/// Read back, `data` is a `serde_json::Value`, so what is encoded here must be what that
/// value would encode as: maps with string keys, strings, integers, booleans, nulls and
/// arrays. A type whose binary form differs from its JSON form (a `Uuid`: 16 raw bytes
/// instead of a string) must be written as its JSON form (see `views::InvoiceView`).
#[derive(Debug, Clone)]
pub struct EventData(Vec<u8>);

impl EventData {
    /// Encodes `value` (a view serializing as JSON would).
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Self {
        let mut out = Vec::with_capacity(1024);
        // Views are fixed shapes with flat metadata: far from rmp-serde's nesting limit.
        rmp_serde::encode::write_named(&mut out, value).expect("event data serializes");
        EventData(out)
    }

    /// The MessagePack bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// [`encode`] of a record whose last field, a unit placeholder (written as MessagePack
/// nil, one byte), is replaced by `tail`, a value already encoded: how an event row is
/// written with its [`EventData`] without decoding or re-encoding it.
pub(crate) fn encode_with_tail<T: Serialize + ?Sized>(value: &T, tail: &EventData) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + tail.0.len());
    out.push(VALUE_VERSION);
    rmp_serde::encode::write_named(&mut out, value).expect("record serializes");
    let nil = out.pop();
    assert_eq!(
        nil,
        Some(0xc0),
        "the last field of a record with a tail is a unit"
    );
    out.extend_from_slice(&tail.0);
    out
}

/// [`encode`] with the serializer declaring itself human-readable, for values read back
/// through serde's buffering of an internally tagged enum, which always declares itself
/// human-readable: types that serialize differently in binary formats (alloy's hashes,
/// addresses, `U256` and bytes: raw bytes in binary, hex strings otherwise) must then have
/// been written as hex strings too, or they do not read back. Test mode's chain operations
/// (`appliance_chains::sim::Op`) are such values. Read with [`decode`].
pub fn encode_readable<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(VALUE_VERSION);
    let mut ser = rmp_serde::Serializer::new(&mut out)
        .with_struct_map()
        .with_human_readable();
    value.serialize(&mut ser).expect("value serializes");
    out
}

/// Decodes a value written by [`encode`] (or by the JSON encoding of version 1); an unknown
/// version or a body that does not parse as `T` is [`StoreError::Corrupt`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&VALUE_VERSION, body)) => {
            let mut de = rmp_serde::Deserializer::from_read_ref(body);
            de.set_max_depth(MAX_DEPTH);
            T::deserialize(&mut de).map_err(|e| StoreError::Corrupt(e.to_string()))
        }
        Some((&JSON_VERSION, body)) => {
            serde_json::from_slice(body).map_err(|e| StoreError::Corrupt(e.to_string()))
        }
        Some((v, _)) => Err(StoreError::Corrupt(format!("unknown value version {v}"))),
        None => Err(StoreError::Corrupt("empty value".into())),
    }
}

/// Encodes a record the way every build before schema version 4 did (`1 ‖ JSON`). Only
/// tests use it, to write a store exactly as an older release left it.
#[doc(hidden)]
pub fn encode_json_v1<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![JSON_VERSION];
    serde_json::to_writer(&mut out, value).expect("record serializes");
    out
}

/// The `project_id` of an encoded row, found without decoding it, for rows that do not
/// decode (see `ReadOps::get_in`). Records carry `project_id` among their first fields, so
/// only the head of the value is searched.
pub(crate) fn raw_project_id(bytes: &[u8]) -> Option<Uuid> {
    let (&version, body) = bytes.split_first()?;
    let head = &body[..body.len().min(512)];
    let find = |field: &[u8]| -> Option<usize> {
        Some(head.windows(field.len()).position(|w| w == field)? + field.len())
    };
    match version {
        VALUE_VERSION => {
            // fixstr(10) "project_id", then bin8 of 16 bytes.
            let at = find(b"\xaaproject_id\xc4\x10")?;
            Uuid::from_slice(head.get(at..at + 16)?).ok()
        }
        JSON_VERSION => {
            let at = find(b"\"project_id\":\"")?;
            let uuid = head.get(at..at + 36)?;
            Uuid::parse_str(std::str::from_utf8(uuid).ok()?).ok()
        }
        _ => None,
    }
}

/// `#[serde(serialize_with = "crate::codec::amount")]` for a `u128` amount: in the store's
/// binary encoding an amount that fits 64 bits is a MessagePack integer (1-9 bytes) rather
/// than rmp-serde's 16-byte binary for every `u128` (18 bytes). The derived `Deserialize`
/// reads both forms (rmp-serde's `u128` accepts any integer), and JSON is unchanged.
pub fn amount<S: serde::Serializer>(v: &u128, s: S) -> Result<S::Ok, S::Error> {
    match u64::try_from(*v) {
        Ok(small) if !s.is_human_readable() => s.serialize_u64(small),
        _ => s.serialize_u128(*v),
    }
}

/// What [`migrate_table`] did to one table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// Rows rewritten in the current encoding.
    pub rows: u64,
    /// Rows of an older encoding that do not decode: left as they are (`appliance verify`
    /// reports them).
    pub left: u64,
}

/// Rows rewritten per pass of [`migrate_table`], so the migration of a large store holds
/// a bounded number of rows in memory.
const MIGRATE_CHUNK: usize = 4096;

/// Rewrites every row of `def` still in an older encoding as `T` in the current one, inside
/// the caller's transaction. Rows that do not decode as `T` are left untouched and counted.
pub fn migrate_table<K, T>(
    txn: &WriteTransaction,
    def: TableDefinition<K, &[u8]>,
) -> Result<Migrated, StoreError>
where
    K: Key + 'static,
    T: Serialize + DeserializeOwned,
{
    let mut m = Migrated::default();
    let mut table = txn.open_table(def)?;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        {
            let lower = match &after {
                Some(k) => Bound::Excluded(K::from_bytes(k)),
                None => Bound::Unbounded,
            };
            for e in table.range::<K::SelfType<'_>>((lower, Bound::Unbounded))? {
                let (k, v) = e?;
                let kb = K::as_bytes(&k.value()).as_ref().to_vec();
                let v = v.value();
                if v.first() != Some(&VALUE_VERSION) {
                    match decode::<T>(v) {
                        Ok(r) => batch.push((kb.clone(), encode(&r))),
                        Err(_) => m.left += 1,
                    }
                }
                last = Some(kb);
                if batch.len() >= MIGRATE_CHUNK {
                    break;
                }
            }
        }
        for (k, v) in &batch {
            table.insert(K::from_bytes(k), v.as_slice())?;
            m.rows += 1;
        }
        match last {
            Some(k) if batch.len() >= MIGRATE_CHUNK => after = Some(k),
            _ => return Ok(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Customer, Deposit, DepositStatus};

    fn customer() -> Customer {
        Customer {
            id: Uuid::now_v7(),
            project_id: Uuid::now_v7(),
            reference_id: Some("ref-1".into()),
            email: None,
            status: "active".into(),
            metadata: serde_json::json!({"plan": "gold", "n": 7, "neg": -3, "f": 1.5}),
            created_at: 1_700_000_000_000_000,
        }
    }

    #[test]
    fn both_encodings_decode_to_the_same_record() {
        let c = customer();
        let v2 = encode(&c);
        let v1 = encode_json_v1(&c);
        assert_eq!(v2[0], VALUE_VERSION);
        assert_eq!(v1[0], JSON_VERSION);
        let a: Customer = decode(&v2).unwrap();
        let b: Customer = decode(&v1).unwrap();
        assert_eq!(
            serde_json::to_value(&a).unwrap(),
            serde_json::to_value(&c).unwrap()
        );
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            serde_json::to_value(&c).unwrap()
        );
        assert!(v2.len() < v1.len(), "{} !< {}", v2.len(), v1.len());
        assert_eq!(raw_project_id(&v2), Some(c.project_id));
        assert_eq!(raw_project_id(&v1), Some(c.project_id));
    }

    #[test]
    fn amounts_past_u64_survive() {
        let d = Deposit {
            id: Uuid::now_v7(),
            project_id: Uuid::now_v7(),
            customer_id: Uuid::now_v7(),
            invoice_id: None,
            late: false,
            funding: false,
            awaiting_price: false,
            wallet_id: Uuid::now_v7(),
            chain: "ethereum".into(),
            asset: "ETH".into(),
            amount: u128::MAX - 5,
            tx_hash: "0xab".into(),
            log_index: 3,
            from_address: "0x1".into(),
            to_address: "0x2".into(),
            block_number: 9,
            block_time: 1,
            confirmations: 0,
            required_confirmations: 12,
            status: DepositStatus::Detected,
            failure_reason: None,
            ledger_tx_id: None,
            reversal_tx_id: Some(Uuid::now_v7()),
            manual: false,
            created_at: 1,
            updated_at: 2,
        };
        let back: Deposit = decode(&encode(&d)).unwrap();
        assert_eq!(back.amount, d.amount);
        // Small amounts take a few bytes and read back exactly too.
        let small = Deposit {
            amount: 100_000_000,
            ..d.clone()
        };
        let bytes = encode(&small);
        assert!(bytes.len() + 10 < encode(&d).len());
        assert_eq!(decode::<Deposit>(&bytes).unwrap().amount, 100_000_000);
        assert_eq!(
            decode::<Deposit>(&encode(&Deposit {
                amount: u128::from(u64::MAX) + 1,
                ..d.clone()
            }))
            .unwrap()
            .amount,
            u128::from(u64::MAX) + 1
        );
        assert_eq!(back.reversal_tx_id, d.reversal_tx_id);
        assert_eq!(back.status, d.status);
    }

    /// A field added later (an `Option`, or `#[serde(default)]`) reads as absent from a row
    /// written before it existed: no migration is needed for it.
    #[test]
    fn an_added_optional_field_needs_no_migration() {
        #[derive(Serialize)]
        struct Old {
            id: u32,
        }
        #[derive(serde::Deserialize)]
        struct New {
            id: u32,
            extra: Option<String>,
            #[serde(default)]
            count: u64,
        }
        let n: New = decode(&encode(&Old { id: 4 })).unwrap();
        assert_eq!((n.id, n.extra, n.count), (4, None, 0));
    }

    /// A table that is not a `Row` table gets the codec through `value_put` / `value_get`.
    #[test]
    fn other_tables_get_the_codec_through_value_ops() {
        use crate::{Store, StoreOptions, ValueOps};
        const T: TableDefinition<(u128, &str), &[u8]> = TableDefinition::new("test_values");
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
        let c = customer();
        let c2 = c.clone();
        store
            .write_blocking(move |ctx| ctx.value_put(T, (7, "a"), &c2))
            .unwrap();
        let back: Customer = store
            .read_blocking(|r| r.value_get(T, (7, "a")))
            .unwrap()
            .unwrap();
        assert_eq!(back.id, c.id);
        let raw = store
            .read_blocking(|r| {
                let t = crate::Reader::open(r, T)?;
                let v = t.get((7, "a"))?.unwrap().value().to_vec();
                Ok(v)
            })
            .unwrap();
        assert_eq!(raw[0], VALUE_VERSION);
        let none: Option<Customer> = store.read_blocking(|r| r.value_get(T, (8, "a"))).unwrap();
        assert!(none.is_none());
    }

    #[test]
    fn unknown_versions_and_garbage_are_corrupt() {
        assert!(matches!(
            decode::<Customer>(&[]),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            decode::<Customer>(&[9, 1, 2]),
            Err(StoreError::Corrupt(_))
        ));
        assert!(matches!(
            decode::<Customer>(&[VALUE_VERSION, 0xc1]),
            Err(StoreError::Corrupt(_))
        ));
    }
}
