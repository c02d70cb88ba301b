//! The event log's writes: an event appended in its stored form (whole `data`, encoded
//! `data`, or a resource's changing fields), and the ids and encoding of event rows.

use super::*;

impl WriteCtx<'_> {
    /// Appends an event to the project's log with the next sequence number.
    pub fn append_event(
        &mut self,
        project: Uuid,
        livemode: bool,
        event_type: &str,
        resource_id: &str,
        data: serde_json::Value,
    ) -> Result<Event, StoreError> {
        self.append(project, livemode, event_type, resource_id, Body::Data(data))
    }

    /// Appends an event about `row` in its compact form ([`CompactRow`]): what the event
    /// keeps of the row is as it is in `row`, which must be the row as this transaction
    /// writes it (before or after this call). The returned event's [`Event::row`] (and
    /// [`Event::deposit_row`]) is empty: the caller has the row at hand, and the outbox
    /// keeps only the event's reference, so the writer does not clone the row per event.
    /// A reader of the stored event gets the row.
    pub fn append_row_event<R: CompactRow>(
        &mut self,
        livemode: bool,
        event_type: &str,
        row: &R,
    ) -> Result<Event, StoreError> {
        let (project, id) = row.event_ids();
        let body = match row.compact() {
            Compact::Deposit(st) => Body::Deposit(st),
            Compact::State(st) => Body::State(st),
        };
        self.append(project, livemode, event_type, &id.to_string(), body)
    }

    /// Before customer `old`'s row is rewritten or removed: its `customer.created` event,
    /// when stored in the compact form that renders from that row
    /// ([`crate::records::ResourceState::Customer`]), is rewritten to hold the row as it
    /// is, so it renders the same afterwards ([`crate::records::ResourceState::CustomerAt`]).
    /// That event is the only compact one about a customer and its first (it is written
    /// with the row), so one event is read whatever the customer's number of events. An
    /// event row that does not decode is left as it is (`appliance verify` reports it).
    pub(super) fn pin_customer_created(
        &self,
        old: &crate::records::Customer,
    ) -> Result<(), StoreError> {
        use crate::records::ResourceState;
        let resource = old.id.to_string();
        let prefix = index::event_resource_prefix(old.project_id, &resource);
        let first = self.with_event_resource_runs(|t, tails| {
            crate::held::forget(t, tails, &prefix)?;
            crate::event_runs::seqs(&*t, &prefix, 0, u64::MAX, true)?
                .next()
                .transpose()
        })?;
        let Some(seq) = first else {
            return Ok(());
        };
        let p = old.project_id.as_u128();
        let stored = self.with_events(|t| Ok(t.get((p, seq))?.map(|g| g.value().to_vec())))?;
        let Some(Ok(mut ev)) = stored.map(|b| decode::<Event>(&b)) else {
            return Ok(());
        };
        ev.sequence = seq;
        event_id_in_full(&mut ev, seq);
        // A UUID resource's key holds no project: the sequence may be another project's.
        if ev.resource_id != resource || ev.state != Some(ResourceState::Customer) {
            return Ok(());
        }
        ev.state = Some(ResourceState::CustomerAt(Box::new(old.clone())));
        let bytes = encode_event(&mut ev, None);
        self.with_events(|t| {
            t.insert((p, seq), bytes.as_slice())?;
            Ok(())
        })
    }

    /// [`WriteCtx::append_event`] with `data` encoded beforehand (off the writer thread,
    /// typically): the row holds the same bytes as if `data` were the equivalent
    /// `serde_json::Value`. The event returned has every field but `data`, which is `Null`
    /// (the stored row has it; `ReadOps` returns it).
    pub fn append_event_data(
        &mut self,
        project: Uuid,
        livemode: bool,
        event_type: &str,
        resource_id: &str,
        data: &crate::codec::EventData,
    ) -> Result<Event, StoreError> {
        self.append(
            project,
            livemode,
            event_type,
            resource_id,
            Body::Encoded(data),
        )
    }

    fn append(
        &mut self,
        project: Uuid,
        livemode: bool,
        event_type: &str,
        resource_id: &str,
        body: Body<'_>,
    ) -> Result<Event, StoreError> {
        let (data, deposit, state, encoded) = match body {
            Body::Data(data) => (data, None, None, None),
            Body::Encoded(data) => (serde_json::Value::Null, None, None, Some(data)),
            Body::Deposit(st) => (serde_json::Value::Null, Some(st), None, None),
            Body::State(st) => (serde_json::Value::Null, None, Some(st), None),
        };
        let r = (|| {
            // Remembered for the batch after the first event of the project (ctx_cache).
            let seq = self.last_sequence_memo(project)? + 1;
            // Schema 12: the id names the sequence, so no `event_ids` row is needed to find
            // it; a sequence too large to name gets a random ULID and the row.
            let (ulid, named) = match event_ulid(seq, self.now) {
                Some(u) => (u, true),
                None => (
                    crate::sources::new_ulid(self.now.max(0) as u64 / 1000),
                    false,
                ),
            };
            let mut ev = Event {
                id: format!("evt_{ulid}"),
                project_id: project,
                sequence: seq,
                event_type: event_type.to_string(),
                resource_id: resource_id.to_string(),
                created_at: self.now,
                livemode,
                data,
                deposit,
                state,
                row: None,
            };
            let bytes = encode_event(&mut ev, encoded);
            self.with_events(|events| {
                events.insert((project.as_u128(), seq), bytes.as_slice())?;
                Ok(())
            })?;
            if !named {
                self.with_event_ids(|ids| {
                    ids.insert(u128::from(ulid), (project.as_u128(), seq))?;
                    Ok(())
                })?;
            }
            let by_type = crate::event_runs::type_prefix(project, event_type);
            let by_resource = index::event_resource_prefix(project, resource_id);
            self.with_event_type_runs(|t, tails| {
                crate::event_runs::add_to_tail(t, tails, &by_type, seq)
            })?;
            self.with_event_resource_runs(|t, tails| {
                crate::event_runs::add_to_tail(t, tails, &by_resource, seq)
            })?;
            self.last_sequence_wrote(project, seq);
            Ok(ev)
        })();
        let ev = self.track(r)?;
        self.notice.events.push((project, ev.sequence));
        Ok(ev)
    }
}

/// Bits of an event ULID's 80-bit random part that carry the event's sequence (schema 12).
const EVENT_SEQ_BITS: u32 = 40;
/// Bits of an event ULID's random part left random: an id stays unique across projects
/// (two projects' events of one sequence in one millisecond differ here).
const EVENT_RANDOM_BITS: u32 = 40;

/// The ULID of the event at `seq` created at `created_at` (Unix microseconds; schema 12):
/// its millisecond (48 bits), then `seq` (40 bits), then 40 random bits, so
/// [`ReadOps::event`] finds the event from its id alone and no `event_ids` row is written
/// (one table less per event); and, from schema 14, the row stores only the
/// random bits ([`event_id_in_short`]). `None` for a sequence of 0 or of 2^40 and more, or
/// a time outside the ULID's (such an event gets a random ULID and an `event_ids` row, as
/// before schema 12).
pub(crate) fn event_ulid(seq: u64, created_at: i64) -> Option<ulid::Ulid> {
    let random = crate::sources::random_u128() & ((1u128 << EVENT_RANDOM_BITS) - 1);
    named_ulid(seq, created_at, random)
}

/// The ULID named by (time of `created_at`, `seq`, `random`); `None` outside their ranges.
fn named_ulid(seq: u64, created_at: i64, random: u128) -> Option<ulid::Ulid> {
    let ms = u128::try_from(created_at.div_euclid(1000)).ok()?;
    if seq == 0 || seq >> EVENT_SEQ_BITS != 0 || ms >> 48 != 0 || random >> EVENT_RANDOM_BITS != 0 {
        return None;
    }
    Some(ulid::Ulid::from(
        ms << (EVENT_SEQ_BITS + EVENT_RANDOM_BITS) | u128::from(seq) << EVENT_RANDOM_BITS | random,
    ))
}

/// The random bits `ev`'s id is stored as (schema 14, [`crate::codec::short_event_id`]),
/// when its ULID is [`named_ulid`] of the event's time and sequence; `None` when it is not
/// (an id of an earlier schema, or a random one).
pub(super) fn event_id_in_short(ev: &Event) -> Option<[u8; crate::codec::SHORT_EVENT_ID_BYTES]> {
    let ulid = event_ulid_of(&ev.id)?;
    let random = ulid & ((1u128 << EVENT_RANDOM_BITS) - 1);
    (named_ulid(ev.sequence, ev.created_at, random).map(u128::from) == Some(ulid)).then(|| {
        random.to_be_bytes()[16 - crate::codec::SHORT_EVENT_ID_BYTES..]
            .try_into()
            .expect("the last 5 of 16 bytes")
    })
}

/// The millisecond of a resource id that is a UUID in its canonical text (a UUID v7's
/// time), in microseconds.
fn resource_base_us(resource_id: &str) -> Option<i64> {
    // 48 bits of milliseconds: at most 2^48 * 1000 < 2^58, no overflow.
    crate::codec::canonical_uuid(resource_id).map(|u| crate::codec::uuid_ms(u) as i64 * 1000)
}

/// Makes a short id read from event row `seq` whole again ([`event_id_in_short`]'s
/// inverse), and a [`crate::codec::SHORT_EVENT_ID_REL`] row's `created_at` absolute; any
/// other id is left as it is (as is a relative one whose time does not add up, which no
/// build writes).
pub(crate) fn event_id_in_full(ev: &mut Event, seq: u64) {
    let Some((b, relative)) = crate::codec::short_event_id_parts(&ev.id) else {
        return;
    };
    let created = if relative {
        let Some(created) =
            resource_base_us(&ev.resource_id).and_then(|base| ev.created_at.checked_add(base))
        else {
            return;
        };
        created
    } else {
        ev.created_at
    };
    let mut r = [0u8; 16];
    r[16 - b.len()..].copy_from_slice(&b);
    if let Some(u) = named_ulid(seq, created, u128::from_be_bytes(r)) {
        ev.id = format!("evt_{u}");
        ev.created_at = created;
    }
}

/// The stored value of event `ev` (its `sequence` set): its id in short form when it has
/// one ([`event_id_in_short`]), and `tail` as its `data` when given
/// ([`crate::codec::encode_with_tail`]).
///
/// Schema 15: with a short id and a resource that is a UUID, `created_at` is stored as its
/// distance from the resource's millisecond (the resource was made by the same job or
/// before: a few bytes instead of 9), the id marked so ([`crate::codec::SHORT_EVENT_ID_REL`]).
pub(crate) fn encode_event(ev: &mut Event, tail: Option<&crate::codec::EventData>) -> Vec<u8> {
    let full = event_id_in_short(ev).map(|random| {
        let rel = resource_base_us(&ev.resource_id).and_then(|b| ev.created_at.checked_sub(b));
        let short = crate::codec::short_event_id(random, rel.is_some());
        let created = rel.map(|rel| std::mem::replace(&mut ev.created_at, rel));
        (std::mem::replace(&mut ev.id, short), created)
    });
    let bytes = match tail {
        Some(data) => crate::codec::encode_with_tail(&EventRow::of(ev), data),
        None => encode_record(&*ev),
    };
    if let Some((id, created)) = full {
        ev.id = id;
        if let Some(created) = created {
            ev.created_at = created;
        }
    }
    bytes
}

/// The ULID of an `evt_` id (either case), as a number; `None` for anything else.
pub(super) fn event_ulid_of(id: &str) -> Option<u128> {
    let u = ulid::Ulid::from_string(id.strip_prefix("evt_")?).ok()?;
    Some(u128::from(u))
}

/// The sequence an event ULID of schema 12 names ([`event_ulid`]); `None` when its bits
/// there are 0. Any ULID yields a number: the reader checks the event it names has that id.
pub(super) fn event_ulid_sequence(ulid: u128) -> Option<u64> {
    let seq = (ulid >> EVENT_RANDOM_BITS) & ((1u128 << EVENT_SEQ_BITS) - 1);
    u64::try_from(seq).ok().filter(|s| *s != 0)
}

/// What a compact event keeps of its row.
pub enum Compact {
    /// A deposit's changing fields ([`Event::deposit`], schema 6).
    Deposit(crate::records::DepositState),
    /// A payout's changing fields, or nothing for a row that renders the event itself
    /// ([`Event::state`], schema 10).
    State(crate::records::ResourceState),
}

/// A row whose events are stored in the compact form ([`WriteCtx::append_row_event`]):
/// the event keeps only what changes, and the row renders the rest.
pub trait CompactRow {
    /// The row's project and id.
    fn event_ids(&self) -> (Uuid, Uuid);
    /// What the event keeps of the row.
    fn compact(&self) -> Compact;
}

/// The [`CompactRow`] impl of each row type: what its events keep.
macro_rules! compact_rows {
    ($($(#[$doc:meta])* $ty:ident($row:ident) => $compact:expr;)+) => {$(
        $(#[$doc])*
        impl CompactRow for crate::records::$ty {
            fn event_ids(&self) -> (Uuid, Uuid) {
                (self.project_id, self.id)
            }
            fn compact(&self) -> Compact {
                let $row = self;
                $compact
            }
        }
    )+};
}

compact_rows! {
    /// `deposit.*` (schema 6): the deposit's changing fields.
    Deposit(d) => Compact::Deposit(crate::records::DepositState::of(d));
    /// `payout.*` (schema 10): the payout's changing fields.
    Payout(p) => Compact::State(crate::records::ResourceState::Payout(
        crate::records::PayoutState::of(p),
    ));
    /// `wallet.created` (schema 10): nothing; the wallet's row (never rewritten) renders it.
    Wallet(_w) => Compact::State(crate::records::ResourceState::Wallet);
    /// `customer.created` (schema 13): nothing; the customer's row renders it until the row
    /// changes ([`WriteCtx::put`] keeps the event exact then).
    Customer(_c) => Compact::State(crate::records::ResourceState::Customer);
}

/// What an appended event stores of its resource (one of [`Event`]'s stored forms).
enum Body<'a> {
    /// `data` whole.
    Data(serde_json::Value),
    /// `data` whole, encoded beforehand ([`crate::codec::encode_with_tail`]).
    Encoded(&'a crate::codec::EventData),
    /// A deposit's changing fields ([`Event::deposit`], schema 6).
    Deposit(crate::records::DepositState),
    /// A payout's changing fields, or nothing for a wallet ([`Event::state`], schema 10).
    State(crate::records::ResourceState),
}

/// How an [`Event`] with `data` is stored when its `data` comes already encoded: the
/// stored fields of `Event` in its order, `data` a placeholder that
/// [`crate::codec::encode_with_tail`] replaces by the encoded bytes. Positional, like every
/// event row; it lacks `Event::deposit` and `Event::state`, the last fields, so the array is
/// two shorter and reads them as their default (`None`).
#[derive(serde::Serialize)]
pub(super) struct EventRow<'a> {
    #[serde(serialize_with = "crate::codec::event_id")]
    id: &'a str,
    #[serde(rename = "type", serialize_with = "crate::codec::event_type")]
    event_type: &'a str,
    #[serde(serialize_with = "crate::codec::uuid_text")]
    resource_id: &'a str,
    created_at: i64,
    livemode: bool,
    data: (),
}

impl<'a> EventRow<'a> {
    pub(super) fn of(e: &'a Event) -> Self {
        EventRow {
            id: &e.id,
            event_type: &e.event_type,
            resource_id: &e.resource_id,
            created_at: e.created_at,
            livemode: e.livemode,
            data: (),
        }
    }
}
