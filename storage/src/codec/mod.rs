//! Value encoding of every stored record: one version byte, then the record.
//!
//! ```text
//! 4 ‖ version 3 without its first field, the row's id, which is its key          written, hot rows
//! 3 ‖ MessagePack, structs as arrays of their fields in order (rmp-serde `write`)  written, events...
//! 2 ‖ MessagePack, structs as maps with named fields (rmp-serde `write_named`)    written, the others
//! 1 ‖ JSON                                                                          read only
//! ```
//!
//! Named bodies are self-describing: a later release can add an optional field
//! (`Option<_>` or `#[serde(default)]`) and read older rows without a migration. The version
//! byte marks a change of the body's format, which needs one. MessagePack keeps that
//! property at about half the size of JSON: no quotes or separators, integers in 1-9 bytes,
//! UUIDs as 16 raw bytes instead of 36 characters. See docs/performance.md, "Values: the
//! codec".
//!
//! **Positional** bodies (version 3) drop the field names, which are about half of a named
//! row: the records written on every deposit, payout, customer and wallet ([`Layout`],
//! chosen per record type; docs/decisions.md, Storage). rmp-serde reads a struct from a map
//! or an array alike, so rows of version 2 and 3 of one type both read with no migration
//! pass, whichever the build writes. The rules of a positionally written struct (and of
//! every struct inside it): every field is always serialized (no `skip_serializing_if`: a
//! skipped field would shift the ones after it), fields are never reordered or removed, and
//! a field added later goes at the end with `#[serde(default)]` (an older, shorter row then
//! reads it as its default). Maps (`serde_json::Value` objects, such as metadata and event
//! `data`) keep their keys in either form. The tests check, for every positional type, that
//! its array has as many elements as the type has fields (`every_field_written`).
//!
//! This module is the one place a record becomes bytes and back: [`crate::WriteCtx`] and
//! [`crate::ReadOps`] use it for every table of records, so a table added later gets the
//! current encoding by calling [`encode`] / [`decode`]. Rows of version 1 (stores written
//! before schema version 4) stay readable forever, so an old backup restores; they are
//! rewritten as version 2 or 3 (their type's [`Layout`]) when the store opens ([`migrate_table`]).

use std::ops::Bound;

use redb::{Key, ReadableTable, TableDefinition, WriteTransaction};
use serde::{de::DeserializeOwned, Serialize};
use uuid::Uuid;

use crate::StoreError;

/// Encoding version of the values written with named fields (MessagePack maps): every
/// record type whose [`Layout`] is `Named`.
pub const VALUE_VERSION: u8 = 2;

/// Encoding version of the values written positionally (MessagePack arrays of the fields in
/// order): the record types whose [`Layout`] is `Positional` ([`encode_positional`]).
pub const POSITIONAL_VERSION: u8 = 3;

/// Encoding version of the JSON values written before schema version 4 (read only).
pub const JSON_VERSION: u8 = 1;

/// Encoding version of the values written positionally less their first field, the
/// row's id, which is the row's key (schema 14; [`Layout::Keyed`], [`encode_keyed`]): a
/// version 3 body whose array is one shorter and lacks the id's 18 bytes. Read with
/// [`decode_keyed`], which puts the key back; [`decode`] refuses it.
pub const KEYED_VERSION: u8 = 4;

/// Encoding version of keyed values ([`KEYED_VERSION`]) whose times are stored relative
/// (schema 15, [`Times`]): `created_at` as its distance from its id's millisecond, the
/// row's other times as their distance from `created_at`. Written by [`encode_record`] for
/// a [`Layout::Keyed`] type that names its [`Record::times`]; read by [`decode_keyed`].
pub const KEYED_TIMES_VERSION: u8 = 5;

/// Deepest nesting a stored value may have when read back, the same bound as the JSON
/// decoder's (so a row refused before is refused now, and decoding never exhausts the stack).
const MAX_DEPTH: usize = 128;

/// How a record type is written (docs/decisions.md, Storage: "Positional rows").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `VALUE_VERSION ‖` named MessagePack ([`encode`]): self-describing, the default for
    /// records written rarely (projects, keys, endpoints, invoices, billing...).
    Named,
    /// `POSITIONAL_VERSION ‖` positional MessagePack ([`encode_positional`]): the records
    /// written on the hot paths. The type must follow the positional rules of this module's
    /// doc, and a [`crate::records::Row`] of this layout has `id` and `project_id` (both
    /// UUIDs) as its first two fields (what [`raw_project_id`] reads; tests check it).
    Positional,
    /// `KEYED_VERSION ‖` positional MessagePack less the first field ([`encode_keyed`]):
    /// rows stored under their id (a `u128` key), whose first field is that id: the hot
    /// [`crate::records::Row`]s and journal entries. Their id is not stored twice (18 bytes
    /// less per row; schema 14); read them with [`decode_keyed`].
    Keyed,
}

impl Layout {
    /// Encodes `value` in this layout.
    pub fn encode<T: Serialize + ?Sized>(self, value: &T) -> Vec<u8> {
        match self {
            Layout::Named => encode(value),
            Layout::Positional => encode_positional(value),
            Layout::Keyed => encode_keyed(value),
        }
    }
}

/// A record type stored through this codec, with the [`Layout`] it is written in. Every
/// type of [`crate::schema::for_each_record_table`] implements it (the choices are listed
/// in one place, `records/mod.rs`).
pub trait Record: Serialize + DeserializeOwned + Clone {
    /// How rows of this type are written; rows of either layout read back.
    const LAYOUT: Layout;

    /// A [`Layout::Keyed`] row's times, stored relative ([`KEYED_TIMES_VERSION`]); `None`
    /// (the default) for a type that stores them as they are.
    fn times(&mut self) -> Option<Times<'_>> {
        None
    }
}

/// The times of a keyed row (microseconds since the epoch), which it stores relative
/// (schema 15): `created` as its distance from the millisecond of `id` (a UUID v7
/// the same job mints, so a few hundred microseconds: 1 to 3 bytes instead of 9), each of
/// `later` as its distance from `created`: `updated_at` (0, one byte, for a row never
/// changed since), a deposit's `block_time` (its block's, a moment before it is seen).
pub struct Times<'a> {
    pub id: Uuid,
    pub created: &'a mut i64,
    pub later: Vec<&'a mut i64>,
}

impl Times<'_> {
    /// The millisecond of the id in microseconds (any 128 bits: the top 48 as a UUID v7's).
    fn base(&self) -> i64 {
        // 48 bits of milliseconds: at most 2^48 * 1000 < 2^58, no overflow.
        uuid_ms(self.id) as i64 * 1000
    }

    /// Rewrites the times as stored; `None`, nothing changed, when a distance overflows.
    fn make_relative(&mut self) -> Option<()> {
        let created = self.created.checked_sub(self.base())?;
        let later: Vec<i64> = self
            .later
            .iter()
            .map(|t| t.checked_sub(*self.created))
            .collect::<Option<_>>()?;
        for (t, v) in self.later.iter_mut().zip(later) {
            **t = v;
        }
        *self.created = created;
        Some(())
    }

    /// Rewrites stored times back; `None` when one overflows (not a value this codec wrote).
    fn make_absolute(&mut self) -> Option<()> {
        let created = self.created.checked_add(self.base())?;
        for t in self.later.iter_mut() {
            **t = t.checked_add(created)?;
        }
        *self.created = created;
        Some(())
    }
}

/// Encodes a record in its type's [`Layout`]: a keyed row that names its [`Record::times`]
/// as [`KEYED_TIMES_VERSION`].
pub fn encode_record<T: Record>(value: &T) -> Vec<u8> {
    if T::LAYOUT == Layout::Keyed {
        let mut row = value.clone();
        if row.times().and_then(|mut t| t.make_relative()).is_some() {
            let mut v = encode_keyed(&row);
            if v[0] == KEYED_VERSION {
                v[0] = KEYED_TIMES_VERSION;
                return v;
            }
        }
    }
    T::LAYOUT.encode(value)
}

/// Encodes a record as `[VALUE_VERSION] ‖ MessagePack` with named fields.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.push(VALUE_VERSION);
    // Our own records into a Vec: rmp-serde fails only past 1024 levels of nesting, which
    // no record reaches (metadata is flat, services/metadata.rs; views are fixed shapes).
    rmp_serde::encode::write_named(&mut out, value).expect("record serializes");
    out
}

/// Encodes a record as `[POSITIONAL_VERSION] ‖ MessagePack` with structs as arrays of their
/// fields in declaration order (see the module's doc for the rules such a struct follows).
pub fn encode_positional<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(192);
    out.push(POSITIONAL_VERSION);
    // As in `encode`: our own records, far from rmp-serde's nesting limit.
    rmp_serde::encode::write(&mut out, value).expect("record serializes");
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

/// The position after the array header at the start of a positional body, and the
/// header's element count: a fixarray (one byte) or an array16 (three); `None` otherwise
/// (rmp-serde writes no longer array for a record).
fn array_head(body: &[u8]) -> Option<(usize, usize)> {
    match *body.first()? {
        b @ 0x90..=0x9f => Some((1, usize::from(b & 0x0f))),
        0xdc => Some((
            3,
            usize::from(u16::from_be_bytes([*body.get(1)?, *body.get(2)?])),
        )),
        _ => None,
    }
}

/// The array header of `body` (see [`array_head`]) with `count` elements, in the header's
/// own form (a fixarray stays one while `count` fits it; an array16 stays an array16).
fn with_count(body: &[u8], count: usize, out: &mut Vec<u8>) -> Option<()> {
    match *body.first()? {
        0x90..=0x9f if count <= 15 => out.push(0x90 | count as u8),
        0x90..=0x9f | 0xdc => {
            out.push(0xdc);
            out.extend_from_slice(&u16::try_from(count).ok()?.to_be_bytes());
        }
        _ => return None,
    }
    Some(())
}

/// A UUID as rmp-serde writes it in the store's binary form: bin8 of 16 bytes.
const UUID_HEAD: &[u8] = b"\xc4\x10";

/// Encodes a record as `[KEYED_VERSION] ‖` its [`encode_positional`] body less the first
/// element, which must be the row's id as a UUID (bin8 of 16 bytes): the row is stored under
/// that id, so [`decode_keyed`] puts it back from the key. A record whose body does not
/// start so (none of this build's) is written as version 3 whole.
pub fn encode_keyed<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut v = encode_positional(value);
    let body = &v[1..];
    let Some((at, count)) = array_head(body).filter(|(at, n)| {
        *n > 0 && body.get(*at..*at + 2) == Some(UUID_HEAD) && body.len() >= *at + 18
    }) else {
        return v;
    };
    // One element fewer: the header keeps its form and its size.
    match v[1] {
        0xdc => v[2..4].copy_from_slice(&(count as u16 - 1).to_be_bytes()),
        _ => v[1] -= 1,
    }
    v.drain(1 + at..1 + at + 18);
    v[0] = KEYED_VERSION;
    v
}

/// Decodes a value stored under `id` (a row's key): a [`KEYED_VERSION`] value gets its id
/// back as its first field; any other version is [`decode`]d as it is. Every reader of a
/// table keyed by row id reads through this.
pub fn decode_keyed<T: Record>(id: u128, bytes: &[u8]) -> Result<T, StoreError> {
    let Some((&version @ (KEYED_VERSION | KEYED_TIMES_VERSION), body)) = bytes.split_first() else {
        return decode(bytes);
    };
    let corrupt = || StoreError::Corrupt("keyed value without an array header".into());
    let (at, count) = array_head(body).ok_or_else(corrupt)?;
    let mut whole = Vec::with_capacity(bytes.len() + 20);
    whole.push(POSITIONAL_VERSION);
    with_count(body, count + 1, &mut whole).ok_or_else(corrupt)?;
    whole.extend_from_slice(UUID_HEAD);
    whole.extend_from_slice(&id.to_be_bytes());
    whole.extend_from_slice(&body[at..]);
    let mut row: T = decode(&whole)?;
    if version == KEYED_TIMES_VERSION {
        row.times()
            .and_then(|mut t| t.make_absolute())
            .ok_or_else(|| StoreError::Corrupt("stored times out of range".into()))?;
    }
    Ok(row)
}

/// [`encode_positional`] of a record whose last field, a unit placeholder (written as
/// MessagePack nil, one byte), is replaced by `tail`, a value already encoded: how an event
/// row is written with its [`EventData`] without decoding or re-encoding it. (The tail
/// stays named: it reads back as a `serde_json::Value`.)
pub(crate) fn encode_with_tail<T: Serialize + ?Sized>(value: &T, tail: &EventData) -> Vec<u8> {
    let mut out = Vec::with_capacity(192 + tail.0.len());
    out.push(POSITIONAL_VERSION);
    rmp_serde::encode::write(&mut out, value).expect("record serializes");
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

/// Decodes a value written by [`encode`] or [`encode_positional`] (or by the JSON encoding
/// of version 1); an unknown version or a body that does not parse as `T` is
/// [`StoreError::Corrupt`]. Named and positional bodies go through the same decoder:
/// rmp-serde reads a struct from a map or an array.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    match bytes.split_first() {
        Some((&(VALUE_VERSION | POSITIONAL_VERSION), body)) => {
            let mut de = rmp_serde::Deserializer::from_read_ref(body);
            de.set_max_depth(MAX_DEPTH);
            T::deserialize(&mut de).map_err(|e| StoreError::Corrupt(e.to_string()))
        }
        Some((&JSON_VERSION, body)) => {
            serde_json::from_slice(body).map_err(|e| StoreError::Corrupt(e.to_string()))
        }
        Some((&(KEYED_VERSION | KEYED_TIMES_VERSION), _)) => Err(StoreError::Corrupt(
            "a value stored without its id read without its key".into(),
        )),
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
/// decode (see `ReadOps::get_in`). Named records carry `project_id` among their first
/// fields, so only the head of the value is searched; positional rows ([`Layout`]) have it
/// as their second element, after the 16 bytes of `id`, and keyed rows as their first.
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
        POSITIONAL_VERSION => {
            // An array header (fixarray or array16), then bin8 of 16 bytes twice.
            let at = match *body.first()? {
                0x92..=0x9f => 1,
                0xdc => 3,
                _ => return None,
            };
            let rest = body.get(at..)?;
            if rest.get(..2)? != b"\xc4\x10" || rest.get(18..20)? != b"\xc4\x10" {
                return None;
            }
            Uuid::from_slice(rest.get(20..36)?).ok()
        }
        KEYED_VERSION | KEYED_TIMES_VERSION => {
            let (at, _) = array_head(body)?;
            let rest = body.get(at..)?;
            if rest.get(..2)? != UUID_HEAD {
                return None;
            }
            Uuid::from_slice(rest.get(2..18)?).ok()
        }
        JSON_VERSION => {
            let at = find(b"\"project_id\":\"")?;
            let uuid = head.get(at..at + 36)?;
            Uuid::parse_str(std::str::from_utf8(uuid).ok()?).ok()
        }
        _ => None,
    }
}

mod fields;
pub use fields::*;

/// What [`migrate_table`] did to one table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// Rows rewritten in the current encoding.
    pub rows: u64,
    /// Rows of an older encoding that do not decode: left as they are (`appliance verify`
    /// reports them).
    pub left: u64,
}

/// The sum of two steps' counts.
impl std::ops::AddAssign for Migrated {
    fn add_assign(&mut self, m: Migrated) {
        self.rows += m.rows;
        self.left += m.left;
    }
}

/// Rows rewritten per pass of [`migrate_table`], so the migration of a large store holds
/// a bounded number of rows in memory.
const MIGRATE_CHUNK: usize = 4096;

/// Rewrites every row of `def` still in an older encoding (JSON) as `T` in its current
/// one ([`encode_record`]), inside the caller's transaction. Rows of version 2 or 3 are
/// current whatever `T`'s layout. Rows that do not decode as `T` are left untouched and
/// counted.
pub fn migrate_table<K, T>(
    txn: &WriteTransaction,
    def: TableDefinition<K, &[u8]>,
) -> Result<Migrated, StoreError>
where
    K: Key + 'static,
    T: Record,
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
                if !matches!(
                    v.first(),
                    Some(&(VALUE_VERSION | POSITIONAL_VERSION | KEYED_VERSION))
                ) {
                    match decode::<T>(v) {
                        Ok(r) => batch.push((kb.clone(), encode_record(&r))),
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
pub(crate) mod tests;
