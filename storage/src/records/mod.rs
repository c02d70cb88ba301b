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
//! - [`events`]: [`Event`] (the event log) and [`IdempotencyRecord`].
//! - [`webhooks`]: [`WebhookEndpoint`], [`WebhookDelivery`] and their statuses.

use redb::TableDefinition;
use serde::Serialize;
use uuid::Uuid;

pub mod customers;
pub mod deposits;
pub mod events;
pub mod keys;
pub mod payouts;
pub mod projects;
pub mod sweeps;
pub mod webhooks;

pub use customers::*;
pub use deposits::*;
pub use events::*;
pub use keys::*;
pub use payouts::*;
pub use projects::*;
pub use sweeps::*;
pub use webhooks::*;

/// A stored row with its table and the secondary index keys it must appear under.
pub trait Row: Serialize + serde::de::DeserializeOwned {
    const TABLE: TableDefinition<'static, u128, &'static [u8]>;
    fn id(&self) -> Uuid;
    fn project_id(&self) -> Uuid;
    /// Every index key for this row's current state (see [`crate::index`]).
    fn index_keys(&self) -> Vec<Vec<u8>>;
}
