//! The event log's rows and stored idempotent answers (SPEC.md section 6; DECISIONS.md
//! section 2). Events are written by [`crate::WriteCtx::append_event`], not through [`super::Row`].

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Customer, Deposit, DepositStatus, Payout, PayoutStatus, Wallet};

/// An event of the log (SPEC.md section 6). `data` is the resource as its REST read
/// returns it at the time of the event.
///
/// Stored forms (schema 6): an event of a customer's deposit (`deposit.*`) stores
/// no `data` but [`Event::deposit`], the deposit's fields that change after it is first
/// written, as they were at the event; the rest of the deposit's view comes from its row,
/// whose other fields are never rewritten. Schema 10 does the same for payout events
/// ([`ResourceState::Payout`]: [`PayoutState`]) and for `wallet.created` (a wallet's row is
/// never rewritten: [`ResourceState::Wallet`]); schema 13 for `customer.created`
/// ([`ResourceState::Customer`], kept exact across a later `PATCH` by
/// [`ResourceState::CustomerAt`]). The store's readers
/// ([`crate::ReadOps::event_at`] and the event lists) put that row, with the event's state
/// applied, in [`Event::row`]; the binary renders `data` from it (`views::event_data`).
/// Every other event stores `data` as it is, and so do the events of those resources
/// written before their schema.
/// `project_id` and `sequence` are the row's key and are not stored in the value (schema 6;
/// older rows carry them, and the readers take the key's either way).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    /// `evt_` + ULID (stored as the ULID's 16 bytes, [`crate::codec::event_id`]).
    #[serde(with = "crate::codec::event_id_field")]
    pub id: String,
    #[serde(skip)]
    pub project_id: Uuid,
    #[serde(skip)]
    pub sequence: u64,
    /// The event type (stored as its number when it has one, [`crate::codec::event_type`]).
    #[serde(rename = "type", with = "crate::codec::event_type_field")]
    pub event_type: String,
    /// The resource's id (a UUID is stored as its 16 bytes, [`crate::codec::uuid_text`]).
    #[serde(with = "crate::codec::uuid_text_field")]
    pub resource_id: String,
    pub created_at: i64,
    pub livemode: bool,
    /// The resource as its REST read returned it; `Null` in the stored row of a deposit
    /// event of schema 6 ([`Event::deposit`]).
    #[serde(default)]
    pub data: serde_json::Value,
    /// A deposit event's state of the deposit at the event (schema 6; see the type's doc).
    #[serde(default)]
    pub deposit: Option<DepositState>,
    /// A payout or wallet event's state of its resource at the event (schema 10; see the
    /// type's doc). Positional rows of earlier schemas end before it and read `None`.
    #[serde(default)]
    pub state: Option<ResourceState>,
    /// Filled by the store's readers when [`Event::deposit`] or [`Event::state`] is set and
    /// the resource's row reads: the resource as it was at the event. Never stored.
    #[serde(skip)]
    pub row: Option<ResourceRow>,
}

/// What an event of schema 10 stores of its resource instead of `data` ([`Event::state`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResourceState {
    /// A payout event (`payout.*`): the payout's changing fields at the event.
    Payout(PayoutState),
    /// `wallet.created`: nothing, the wallet's row is never rewritten.
    Wallet,
    /// `customer.created` (schema 13): nothing while the customer's row is as it was at
    /// the event. Before the row is rewritten or removed, the store turns the event into
    /// [`ResourceState::CustomerAt`] with the row as it was ([`crate::WriteCtx::put`]).
    Customer,
    /// `customer.created` whose customer has changed since: its row as at the event.
    CustomerAt(Box<Customer>),
}

/// A resource's row as it was at the event, filled by the store's readers
/// ([`Event::row`]; never stored).
#[derive(Debug, Clone)]
pub enum ResourceRow {
    Deposit(Box<Deposit>),
    Payout(Box<Payout>),
    Wallet(Box<Wallet>),
    Customer(Box<Customer>),
}

/// The fields of a customer's deposit that change after its row is first written (status,
/// confirmations, failure reason, the crediting journal entry), as a deposit event stores
/// them (schema 6). Every other field of the deposit's view (SPEC.md section 2, Deposit) is
/// fixed when the row is first written: amount, addresses, transaction, block, customer,
/// wallet, chain and asset, required confirmations, creation time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepositState {
    pub status: DepositStatus,
    pub confirmations: u32,
    #[serde(default)]
    pub failure_reason: Option<String>,
    /// The crediting journal entry, once the deposit is credited. A deposit's
    /// `ledger_tx_id` is set once, when it is credited, and never changed after
    /// (`services::deposits`), so every event's entry is its row's: from schema 14 the
    /// store writes `true` for it ([`credited`]) and its readers take the id from the row
    /// (`ReadOps::complete_event`); a state read without its row has it nil
    /// ([`DepositState::CREDITED`]) until then.
    #[serde(default, with = "credited")]
    pub ledger_tx_id: Option<Uuid>,
}

/// [`DepositState::ledger_tx_id`] in the store's binary form (schema 14): `true` for a
/// credited deposit (its row names the entry), nil for none; rows of schema 6 to 13 hold
/// the entry's 16 bytes and read as they are. Human-readable forms keep the UUID.
mod credited {
    use serde::{Deserializer, Serializer};
    use uuid::Uuid;

    pub fn serialize<S: Serializer>(v: &Option<Uuid>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(_) if !s.is_human_readable() => s.serialize_bool(true),
            Some(id) => s.serialize_some(id),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Uuid>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Option<Uuid>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("nil, true, or a journal entry's id")
            }
            fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(v.then_some(super::DepositState::CREDITED))
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
                d.deserialize_any(V)
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
                Uuid::from_slice(v).map(Some).map_err(E::custom)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Uuid::parse_str(v).map(Some).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl DepositState {
    /// [`DepositState::ledger_tx_id`] of a credited deposit as read from the store, before
    /// its row names the entry (nil: no journal entry has that id).
    pub const CREDITED: Uuid = Uuid::nil();

    /// The state of `d` as it is now.
    pub fn of(d: &Deposit) -> DepositState {
        DepositState {
            status: d.status,
            confirmations: d.confirmations,
            failure_reason: d.failure_reason.clone(),
            ledger_tx_id: d.ledger_tx_id,
        }
    }

    /// `d` (its row as stored now) as it was in this state. A credited state read from the
    /// store ([`DepositState::CREDITED`]) keeps the row's entry.
    pub fn apply(&self, mut d: Deposit) -> Deposit {
        d.status = self.status;
        d.confirmations = self.confirmations;
        d.failure_reason = self.failure_reason.clone();
        if self.ledger_tx_id != Some(Self::CREDITED) {
            d.ledger_tx_id = self.ledger_tx_id;
        }
        d
    }
}

/// The fields of a payout that change after its row is first written, and that its view
/// shows (status, transaction hash, failure reason, last update), as a payout event stores
/// them (schema 10). Every other field of the payout's view (SPEC.md section 2, Payout) is
/// fixed when the payout is created: customer, chain, asset, amounts (the fee is written
/// once), destination, memo, reference, dollar value, creation time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutState {
    pub status: PayoutStatus,
    #[serde(with = "crate::codec::hex_opt_field")]
    pub tx_hash: Option<String>,
    pub failure_reason: Option<String>,
    /// Microseconds since the Unix epoch.
    pub updated_at: i64,
}

impl PayoutState {
    /// The state of `p` as it is now.
    pub fn of(p: &Payout) -> PayoutState {
        PayoutState {
            status: p.status,
            tx_hash: p.tx_hash.clone(),
            failure_reason: p.failure_reason.clone(),
            updated_at: p.updated_at,
        }
    }

    /// `p` (its row as stored now) as it was in this state.
    pub fn apply(&self, mut p: Payout) -> Payout {
        p.status = self.status;
        p.tx_hash = self.tx_hash.clone();
        p.failure_reason = self.failure_reason.clone();
        p.updated_at = self.updated_at;
        p
    }
}

/// Type of the log rows that carry a billing line (DECISIONS.md section 7: events and
/// billing lines share the tenant's `sequence`). The event stream sends them as `billing`
/// frames; `GET /v1/events`, the lookup by id and the webhook outbox never see them (a
/// billing line is no event, so the event list has a gap at its sequence).
pub const BILLING_LINE: &str = "billing.line";

impl Event {
    /// Whether this log row is a billing line rather than an event.
    pub fn is_billing_line(&self) -> bool {
        self.event_type == BILLING_LINE
    }
}

/// The stored first answer to an idempotent request (DECISIONS.md section 2).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// SHA-256 of the request body, hex: a different body under the same key is a reuse.
    /// Stored as its 32 bytes in the `v2:` form (schema 15, [`crate::codec::fingerprint_text`]).
    #[serde(with = "crate::codec::fingerprint_field")]
    pub request_hash: String,
    pub status: u16,
    /// The answer's JSON body, exactly as first sent (stored deflated when that is shorter,
    /// schema 12: [`crate::codec::answer_body`]).
    #[serde(with = "crate::codec::answer_body_field")]
    pub body: String,
    pub created_at: i64,
}
