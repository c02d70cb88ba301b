//! Stored records. These are the domain rows; the HTTP shapes are built from them in the
//! binary. Times are Unix microseconds (UTC); amounts are atomic units as `u128`.
//!
//! One module per resource family; every type is re-exported here, so callers name them
//! `records::Payout` whatever file they live in:
//!
//! - [`projects`]: [`Project`], its [`Mode`], settings and per-chain / per-asset switches.
//! - [`keys`]: [`ApiKey`] and [`KeyKind`].
//! - [`customers`]: [`Customer`] and [`Wallet`].
//! - [`deposits`], [`payouts`], [`sweeps`]: the money movements and their statuses.
//! - [`conversions`]: [`ConversionRule`], [`Conversion`], [`ConversionBatch`] and their
//!   kinds and statuses.
//! - [`events`]: [`Event`] (the event log) and [`IdempotencyRecord`].
//! - [`invoices`]: [`Invoice`], its [`InvoiceStatus`], quotes, addresses and refund hold.
//! - [`billing`]: [`BillingAccount`], [`BillingEntry`] and [`FundingAddress`].
//! - [`webhooks`]: [`WebhookEndpoint`], [`WebhookDelivery`] and their statuses.

use redb::TableDefinition;
use uuid::Uuid;

use crate::codec::{Layout, Record};
use crate::index::{self, IndexTag};

/// Defines a unit-variant enum with `as_str`, its inverse `parse` and `ALL` (every value,
/// in declaration order) from one list of `Variant => "name"` pairs, so they cannot drift
/// apart. The names are the enum's serde names (`snake_case`), which is how the values are
/// stored and sent. A list that gives each value its stored number (`Variant => "name" =
/// 0`) also gets [`coded_serde!`]'s serde forms.
macro_rules! str_enum {
    (
        $(#[$m:meta])*
        pub enum $ty:ident {
            $($(#[$vm:meta])* $v:ident => $s:literal = $n:literal),+ $(,)?
        }
    ) => {
        str_enum! {
            $(#[$m])*
            pub enum $ty { $($(#[$vm])* $v => $s),+ }
        }
        coded_serde!($ty { $($v = $n),+ });
    };
    (
        $(#[$m:meta])*
        pub enum $ty:ident {
            $($(#[$vm:meta])* $v:ident => $s:literal),+ $(,)?
        }
    ) => {
        $(#[$m])*
        pub enum $ty {
            $($(#[$vm])* $v,)+
        }
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: [$ty; [$($s),+].len()] = [$($ty::$v),+];
            /// The value's name, as stored and sent (its serde name).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$v => $s,)+
                }
            }
            /// The value named `s`; `None` for any other string.
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($s => Some($ty::$v),)+
                    _ => None,
                }
            }
        }
    };
}

/// Serializes a unit-variant enum of [`str_enum!`] (through its list of numbers) as its name in human-readable forms
/// (JSON, query strings) and as a one-byte number in the store's binary encoding (schema 13:
/// a status in a row or an event state takes 1 byte instead of 6-17); reads
/// either, so rows written with the name read as before. The numbers are stored: never
/// change one, give a new variant the next.
macro_rules! coded_serde {
    ($ty:ident { $($v:ident = $n:literal),+ $(,)? }) => {
        impl $ty {
            /// The value's stored number.
            pub fn code(self) -> u8 {
                match self {
                    $($ty::$v => $n,)+
                }
            }
            /// The value of stored number `n`; `None` for any other number.
            pub fn of_code(n: u64) -> Option<Self> {
                match n {
                    $($n => Some($ty::$v),)+
                    _ => None,
                }
            }
        }
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                if s.is_human_readable() {
                    s.serialize_str(self.as_str())
                } else {
                    s.serialize_u8(self.code())
                }
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any($crate::codec::NameOrCode {
                    what: stringify!($ty),
                    name: $ty::parse,
                    code: $ty::of_code,
                })
            }
        }
    };
}

/// Implements [`Row`] for a record of table `schema::$table` keyed by its `id` field and
/// owned by its `project_id` field (`key = field, project = field` name others); `|row,
/// keys| { ... }` adds the row's index keys to an [`IndexKeys`]. `parent = field` makes
/// [`Row::parent_id`] that optional id field.
macro_rules! row {
    ($ty:ty, $table:ident, $(parent = $parent:ident,)? |$r:pat_param, $k:ident| $body:block) => {
        row!($ty, $table, key = id, project = project_id, $(parent = $parent,)? |$r, $k| $body);
    };
    (
        $ty:ty,
        $table:ident,
        key = $id:ident,
        project = $project:ident,
        $(parent = $parent:ident,)?
        |$r:pat_param, $k:ident| $body:block
    ) => {
        impl $crate::records::Row for $ty {
            const TABLE: redb::TableDefinition<'static, u128, &'static [u8]> =
                $crate::schema::$table;
            fn id(&self) -> uuid::Uuid {
                self.$id
            }
            fn project_id(&self) -> uuid::Uuid {
                self.$project
            }
            $(fn parent_id(&self) -> Option<uuid::Uuid> {
                self.$parent
            })?
            fn index_keys(&self) -> Vec<Vec<u8>> {
                fn add($r: &$ty, $k: &mut $crate::records::IndexKeys) $body
                let mut keys = $crate::records::IndexKeys::new(self.$project, self.$id);
                add(self, &mut keys);
                keys.keys
            }
        }
    };
}

/// The element of `items` that `is` picks, pushed first (made by `new`) when none does: the
/// per-key entries a record keeps in a list (an invoice's amounts received per asset, a
/// project's overrides per chain and asset).
pub fn entry<T>(items: &mut Vec<T>, is: impl Fn(&T) -> bool, new: impl FnOnce() -> T) -> &mut T {
    let i = match items.iter().position(is) {
        Some(i) => i,
        None => {
            items.push(new());
            items.len() - 1
        }
    };
    &mut items[i]
}

pub mod billing;
pub mod conversions;
pub mod customers;
pub mod deposits;
pub mod events;
pub mod invoices;
pub mod keys;
pub mod payouts;
pub mod projects;
pub mod sweeps;
pub mod webhooks;

pub use billing::*;
pub use conversions::*;
pub use customers::*;
pub use deposits::*;
pub use events::*;
pub use invoices::*;
pub use keys::*;
pub use payouts::*;
pub use projects::*;
pub use sweeps::*;
pub use webhooks::*;

/// The [`Layout`] of every record type (docs/decisions.md, Storage: "Positional rows"):
/// positional for the records every deposit, payout, customer or wallet writes (their field
/// names were about half of each row), named (self-describing) for the records written
/// rarely. A positional type follows the rules of [`crate::codec`]'s doc: no
/// `skip_serializing_if`, no reordering, fields added at the end with `#[serde(default)]`.
///
/// A keyed type lists its times after its layout, `created_at` first: they are stored
/// relative to its id and to `created_at` ([`crate::codec::Times`], schema 15). A
/// deposit's `block_time` (microseconds, its block's) is one of them: a block is made a
/// moment before its deposit is seen.
macro_rules! layouts {
    ($($ty:ty => $layout:ident $({ $created:ident $(, $later:ident)* })?),+ $(,)?) => {
        $(impl Record for $ty {
            const LAYOUT: Layout = Layout::$layout;
            $(fn times(&mut self) -> Option<crate::codec::Times<'_>> {
                Some(crate::codec::Times {
                    id: self.id,
                    created: &mut self.$created,
                    later: vec![$(&mut self.$later),*],
                })
            })?
        })+
    };
}

layouts! {
    Deposit => Keyed { created_at, updated_at, block_time },
    Payout => Keyed { created_at, updated_at },
    Sweep => Keyed { created_at, updated_at },
    Customer => Keyed { created_at },
    Wallet => Keyed { created_at },
    Event => Positional,
    crate::ledger::JournalEntry => Keyed { created_at },
    IdempotencyRecord => Positional,
    Project => Named,
    ApiKey => Named,
    ConversionRule => Named,
    Conversion => Named,
    ConversionBatch => Named,
    Invoice => Named,
    WebhookEndpoint => Named,
    WebhookDelivery => Named,
    BillingAccount => Named,
    BillingEntry => Named,
    FundingAddress => Named,
}

/// A stored row with its table and the secondary index keys it must appear under. Its
/// value is written in its type's [`Layout`] ([`crate::codec::encode_record`]).
pub trait Row: Record {
    const TABLE: TableDefinition<'static, u128, &'static [u8]>;
    fn id(&self) -> Uuid;
    fn project_id(&self) -> Uuid;
    /// Every index key for this row's current state (see [`crate::index`]).
    fn index_keys(&self) -> Vec<Vec<u8>>;
    /// The record whose views include this row, when that is another record: a deposit
    /// paying an invoice is part of the invoice's checkout document. Reported with every
    /// write of the row to [`crate::Store::on_commit`] hooks ([`crate::Touched::parent`]),
    /// so a cache of the parent's view can drop it exactly.
    fn parent_id(&self) -> Option<Uuid> {
        None
    }
}

/// The index keys of one row ([`Row::index_keys`]), in the layout of [`index::key`]: the
/// row's project and id around each entry's tag and values.
pub struct IndexKeys {
    project: Uuid,
    id: Uuid,
    keys: Vec<Vec<u8>>,
}

impl IndexKeys {
    fn new(project: Uuid, id: Uuid) -> Self {
        IndexKeys {
            project,
            id,
            keys: Vec::new(),
        }
    }

    /// The row in its project's list of `tag`.
    pub fn list(&mut self, tag: IndexTag) -> &mut Self {
        self.by_all(tag, &[])
    }

    /// The row under one value (a status, chain, reference, parent id...) of `tag`.
    pub fn by(&mut self, tag: IndexTag, value: impl AsRef<[u8]>) -> &mut Self {
        self.by_all(tag, &[value.as_ref()])
    }

    /// The row under the values of `tag`, in order.
    pub fn by_all(&mut self, tag: IndexTag, values: &[&[u8]]) -> &mut Self {
        self.push(index::key(tag, self.project, values, self.id))
    }

    /// The row in the global (project nil) list of `tag`: a worker's queue over every
    /// project.
    pub fn global(&mut self, tag: IndexTag) -> &mut Self {
        self.push(index::key(tag, Uuid::nil(), &[], self.id))
    }

    /// A key of another layout, built by its own function of [`index`].
    pub fn push(&mut self, key: Vec<u8>) -> &mut Self {
        self.keys.push(key);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    /// `as_str` is each value's serde name and `parse` its inverse.
    fn round_trips<T>(all: &[T], as_str: fn(T) -> &'static str, parse: fn(&str) -> Option<T>)
    where
        T: Copy + PartialEq + std::fmt::Debug + Serialize,
    {
        for &v in all {
            let name = as_str(v);
            assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{name}\""));
            assert_eq!(parse(name), Some(v));
        }
        assert_eq!(parse("no_such_value"), None);
    }

    /// The statuses stored as their name write the same bytes as that name's text, in
    /// either layout: rows written with the text read as the enum and back.
    #[test]
    fn named_statuses_are_stored_as_their_text() {
        use crate::codec::{decode, encode, encode_positional};
        fn same<T>(all: &[T], as_str: fn(T) -> &'static str, parse: fn(&str) -> Option<T>)
        where
            T: Copy + PartialEq + std::fmt::Debug + Serialize + serde::de::DeserializeOwned,
        {
            round_trips(all, as_str, parse);
            for &v in all {
                let name = as_str(v);
                assert_eq!(encode(&v), encode(name));
                assert_eq!(encode_positional(&v), encode_positional(name));
                assert_eq!(decode::<T>(&encode(name)).unwrap(), v);
            }
        }
        use RefundStatus as R;
        same(
            &[CustomerStatus::Active, CustomerStatus::Disabled],
            CustomerStatus::as_str,
            CustomerStatus::parse,
        );
        same(
            &[
                R::AwaitingAddress,
                R::Pending,
                R::Sent,
                R::Confirmed,
                R::Skipped,
                R::Failed,
            ],
            R::as_str,
            R::parse,
        );
    }

    #[test]
    fn status_names_are_serde_names_and_parse_back() {
        use DepositStatus as D;
        use PayoutStatus as P;
        use SweepStatus as S;
        round_trips(&KeyKind::ALL, KeyKind::as_str, KeyKind::parse);
        round_trips(
            &DeliveryStatus::ALL,
            DeliveryStatus::as_str,
            DeliveryStatus::parse,
        );
        round_trips(
            &[DeliveryMode::Unordered, DeliveryMode::Ordered],
            DeliveryMode::as_str,
            DeliveryMode::parse,
        );
        round_trips(
            &[D::Detected, D::Confirmed, D::Failed, D::Orphaned],
            D::as_str,
            D::parse,
        );
        round_trips(
            &[
                P::PendingApproval,
                P::Queued,
                P::Signing,
                P::Submitted,
                P::Confirmed,
                P::Failed,
                P::Canceled,
                P::Rejected,
            ],
            P::as_str,
            P::parse,
        );
        round_trips(
            &[S::Open, S::Submitted, S::Confirmed, S::Failed, S::Skipped],
            S::as_str,
            S::parse,
        );
    }
}
