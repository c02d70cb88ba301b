//! Typed resource ids: a `Uuid` that names one kind of record, so that a customer id
//! passed where a payout id belongs does not compile. Below the services and the key model
//! (`auth`), so both, and the API above them, share them.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use uuid::Uuid;

use appliance_storage::records;

/// The id of one resource, typed by the record it names (`Id<records::Payout>`), so that a
/// customer id passed where a payout id belongs does not compile. The services take and
/// return these; the store keeps bare `Uuid`s, converted at the service's edge
/// ([`Id::uuid`], `From<Uuid>`). Serialized, displayed and ordered as the UUID it wraps;
/// its traits are written out below, as a derive would ask them of `R` too.
#[repr(transparent)]
pub struct Id<R>(Uuid, PhantomData<fn() -> R>);

/// A project's id.
pub type ProjectId = Id<records::Project>;
/// A customer's id.
pub type CustomerId = Id<records::Customer>;
/// A wallet's id.
pub type WalletId = Id<records::Wallet>;
/// A deposit's id.
pub type DepositId = Id<records::Deposit>;
/// A sweep's id.
pub type SweepId = Id<records::Sweep>;
/// A payout's id.
pub type PayoutId = Id<records::Payout>;
/// An invoice's id.
pub type InvoiceId = Id<records::Invoice>;
/// A conversion's id (one leg of a batch).
pub type ConversionId = Id<records::Conversion>;
/// A conversion batch's id.
pub type ConversionBatchId = Id<records::ConversionBatch>;
/// An API key's id.
pub type ApiKeyId = Id<records::ApiKey>;
/// A webhook endpoint's id.
pub type WebhookEndpointId = Id<records::WebhookEndpoint>;
/// A webhook delivery's id.
pub type WebhookDeliveryId = Id<records::WebhookDelivery>;

impl<R> Id<R> {
    pub const fn new(id: Uuid) -> Self {
        Id(id, PhantomData)
    }
    /// The nil id: the operator acting without a key, the project's own (master) owner.
    pub const fn nil() -> Self {
        Id::new(Uuid::nil())
    }
    /// The UUID, as the store keys it.
    pub const fn uuid(self) -> Uuid {
        self.0
    }
    /// The UUID, borrowed (an index key's bytes).
    pub const fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

impl<R: records::Row> Id<R> {
    /// The id of a stored row.
    pub fn of(row: &R) -> Self {
        Id::new(row.id())
    }
}

impl<R> From<Uuid> for Id<R> {
    fn from(id: Uuid) -> Self {
        Id::new(id)
    }
}
impl<R> From<Id<R>> for Uuid {
    fn from(id: Id<R>) -> Self {
        id.0
    }
}
impl<R> Clone for Id<R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for Id<R> {}
impl<R> PartialEq for Id<R> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl<R> Eq for Id<R> {}
impl<R> PartialOrd for Id<R> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<R> Ord for Id<R> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}
impl<R> Hash for Id<R> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}
impl<R> fmt::Debug for Id<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}
impl<R> fmt::Display for Id<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
impl<R> serde::Serialize for Id<R> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}
