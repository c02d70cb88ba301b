//! Business rules. Each service function runs inside one store write transaction (or a read
//! snapshot) and does all its checks before its first write, so a refusal writes nothing.
//!
//! # Errors: one enum per service, mapped to HTTP once in `api::error`
//!
//! The core (services, workers, webhooks transport, storage, chains, signer) never imports
//! axum or HTTP status codes. Each service module declares its own `thiserror` enum
//! (`PayoutError`, `CustomerError`, ...) whose variants name the refusal and carry its
//! data (`PayoutError::InsufficientFunds { available, requested, .. }`); the variant's
//! `#[error("...")]` text is the client-facing message. Shared pieces live in [`error`]:
//!
//! - every enum has `#[error(transparent)] Fault(#[from] Fault)` plus
//!   `error::fault_from!(TheError)`, so `?` lifts store (`StoreError`) and ledger failures
//!   (500 `internal_error`, cause logged);
//! - a field that breaks a rule checked in the service is [`error::Invalid`]
//!   (`param` + message: 400 `invalid_request`), usually held as
//!   `#[error(transparent)] Invalid(#[from] Invalid)`;
//! - an error of another service used inside is wrapped transparently
//!   (`PayoutError::Chain(#[from] ChainError)`), not re-described;
//! - a function that can only fail in the store returns `StoreError`, one that can only
//!   fail internally (worker steps, transitions without a caller-facing rule) returns
//!   `Fault`.
//!
//! `src/api/error.rs` holds `ApiError` (the SPEC.md section 7 envelope) and one
//! `impl From<TheError> for ApiError` per enum: the only place a variant gets its status,
//! `code`, `param` and `Retry-After`. Handlers then use `?` on service results inside
//! `api::commit` / `api::mutate`. A new service adds its enum here and its `From` there.

pub mod balances;
pub mod billing;
pub mod chains;
pub mod checkout;
pub mod checkout_cache;
pub mod clock;
pub mod coins;
pub mod conversions;
pub mod customers;
pub mod deposits;
pub mod error;
pub mod invoices;
pub mod keys;
pub mod metadata;
pub mod payouts;
pub mod projects;
pub mod reads;
pub mod sim_chain;
pub mod sweeps;
pub mod test_transfers;
pub mod types;
pub mod wallets;
pub mod webhook_deliveries;
pub mod webhook_endpoints;

/// Sets each listed field of the row `$row` that the patch `$patch` carries (`Some`), by
/// the same name: a PATCH changes only the fields its body names. Checks of the new values
/// come before it.
macro_rules! set_patched {
    ($row:ident, $patch:ident, [$($field:ident),+ $(,)?]) => {
        $(if let Some(v) = $patch.$field {
            $row.$field = v;
        })+
    };
}
pub(crate) use set_patched;

use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

use appliance_storage::codec::EventData;
use appliance_storage::records::{Mode, Project};
use appliance_storage::{StoreError, WriteCtx};

use crate::registry::Registry;
use crate::services::types::ProjectId;

/// Every event type the appliance emits or SPEC.md section 6 lists (`invoice.*` and
/// `conversion.completed` included, so an endpoint can subscribe to them ahead of use),
/// shown as `GET /v1/webhooks` `event_catalog` (docs/decisions.md, Events). An endpoint with
/// no `event_types` receives all of them, and any added later.
///
/// The list is the store's: an event row stores its type as its position here
/// (`appliance_storage::codec::EVENT_TYPE_CODES`, schema 13), so a new type is appended at
/// the end and none is ever moved or removed.
pub const EVENT_CATALOG: &[&str] = appliance_storage::codec::EVENT_TYPE_CODES;

/// What a service needs to know about the request's project and the appliance it runs in.
#[derive(Clone)]
pub struct Scope {
    pub reg: Arc<Registry>,
    pub project: Arc<Project>,
    /// Attempts a new webhook delivery gets (`WebhooksConfig::max_attempts`): the outbox
    /// writes it on each delivery of an event [`emit`] appends.
    pub delivery_attempts: u32,
}

impl Scope {
    pub fn project_id(&self) -> ProjectId {
        ProjectId::of(&self.project)
    }
    pub fn livemode(&self) -> bool {
        self.project.mode == Mode::Live
    }
}

/// Appends an event for the scope's project in the running transaction, with its webhook
/// deliveries (the outbox).
pub fn emit(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    event_type: &str,
    resource_id: Uuid,
    data: Value,
) -> Result<(), StoreError> {
    emit_with(ctx, s, event_type, |ctx, project, livemode| {
        ctx.append_event(
            project,
            livemode,
            event_type,
            &resource_id.to_string(),
            data,
        )
    })
}

/// The common part of every `emit*`: the event type is in the catalogue, `append` writes
/// the event (given the project id and its livemode), and the event's webhook deliveries
/// (the outbox) commit with it.
fn emit_with(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    event_type: &str,
    append: impl FnOnce(
        &mut WriteCtx<'_>,
        Uuid,
        bool,
    ) -> Result<appliance_storage::records::Event, StoreError>,
) -> Result<(), StoreError> {
    debug_assert!(
        EVENT_CATALOG.contains(&event_type),
        "event type {event_type} is missing from services::EVENT_CATALOG"
    );
    let event = append(ctx, s.project.id, s.project.mode == Mode::Live)?;
    webhook_deliveries::enqueue_with(ctx, &event, s.delivery_attempts)?;
    Ok(())
}

/// [`emit`] of a view that serializes as its JSON (`views::InvoiceView`): encoded straight
/// into the event's row, without a `serde_json::Value` tree.
pub fn emit_view<D: serde::Serialize + ?Sized>(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    event_type: &str,
    resource_id: Uuid,
    view: &D,
) -> Result<(), StoreError> {
    emit_data(ctx, s, event_type, resource_id, &EventData::encode(view))
}

/// [`emit`] of data encoded beforehand (`invoices::prepare` encodes an invoice's
/// `invoice.created` data on the request's thread; the store writer copies the bytes).
pub fn emit_data(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    event_type: &str,
    resource_id: Uuid,
    data: &EventData,
) -> Result<(), StoreError> {
    emit_with(ctx, s, event_type, |ctx, project, livemode| {
        ctx.append_event_data(
            project,
            livemode,
            event_type,
            &resource_id.to_string(),
            data,
        )
    })
}

/// [`emit`] of an event about `row` in its compact stored form: the event refers to the
/// row (and keeps its changing fields, for a deposit or a payout), and its `data` is
/// rendered from the row when the outbox sends it ([`crate::views::event_data`]), as the
/// resource's `GET` renders it. `row` must be as this transaction leaves it. The outbox
/// keeps a reference to the event (`webhook_deliveries::EventRef`: project, id, sequence,
/// type): the row is not cloned onto the appended event.
pub fn emit_row<R: CompactEvent>(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    event_type: &str,
    row: &R,
) -> Result<(), StoreError> {
    debug_assert!(row.emitted_by(s) && event_type.starts_with(R::TYPE_PREFIX));
    emit_with(ctx, s, event_type, |ctx, _, livemode| {
        ctx.append_row_event(livemode, event_type, row)
    })
}

/// A row whose events are stored in the compact form ([`emit_row`], the store's
/// [`appliance_storage::CompactRow`]).
pub trait CompactEvent: appliance_storage::CompactRow {
    /// What the row's event types begin with (`payout.`).
    const TYPE_PREFIX: &'static str;
    /// Whether the row is the scope's project's and emits its own events.
    fn emitted_by(&self, s: &Scope) -> bool;
}

/// The [`CompactEvent`] impl of a row type: its event type prefix and which of its rows
/// emit events.
macro_rules! compact_event {
    ($($(#[$doc:meta])* $ty:ident, $prefix:literal, |$row:ident, $s:ident| $emits:expr;)+) => {$(
        $(#[$doc])*
        impl CompactEvent for appliance_storage::records::$ty {
            const TYPE_PREFIX: &'static str = $prefix;
            fn emitted_by(&self, $s: &Scope) -> bool {
                let $row = self;
                $emits
            }
        }
    )+};
}

compact_event! {
    /// A customer's deposit (`deposit.*`, schema 6): the event keeps the deposit's changing
    /// fields (`records::Event::deposit`). An invoice payment or a funding transfer emits
    /// no deposit events.
    Deposit, "deposit.",
        |d, s| d.project_id == s.project.id && d.invoice_id.is_none() && !d.funding;
    /// A payout (`payout.*`, schema 10): the event keeps the payout's changing fields
    /// (`records::ResourceState::Payout`).
    Payout, "payout.", |p, s| p.project_id == s.project.id;
    /// A wallet (`wallet.created`, schema 10): no data stored, the wallet's row (never
    /// rewritten) renders it (`records::ResourceState::Wallet`).
    Wallet, "wallet.created", |w, s| w.project_id == s.project.id;
    /// A customer (`customer.created`, schema 13): no data stored, the customer's row
    /// renders it, and the store keeps the event exact when the row later changes
    /// (`records::ResourceState::Customer`).
    Customer, "customer.created", |c, s| c.project_id == s.project.id;
}

/// A new journal entry (a fresh id) of `kind` about row `ref_id` of `project`, written at
/// `now` (µs since the Unix epoch).
pub fn journal_entry(
    project: Uuid,
    kind: appliance_storage::ledger::JournalKind,
    ref_id: Uuid,
    now: i64,
    postings: Vec<appliance_storage::ledger::Posting>,
) -> appliance_storage::ledger::JournalEntry {
    appliance_storage::ledger::JournalEntry {
        id: appliance_storage::sources::new_id(),
        project_id: project,
        kind,
        ref_id,
        created_at: now,
        postings,
    }
}

/// Idempotency records expire after 24 hours (SPEC.md section 8); the API replays within
/// it and the maintenance worker purges after it.
pub const IDEMPOTENCY_TTL_US: i64 = 24 * 3_600_000_000;

/// Days since the Unix epoch (UTC) of a microsecond timestamp.
pub fn utc_day(us: i64) -> u32 {
    (us.div_euclid(86_400_000_000)).max(0) as u32
}

/// Test-mode transaction hash: `0x` + hex of SHA-256 over a label and an id.
pub fn sim_tx_hash(label: &str, id: Uuid) -> String {
    format!("0x{}", hex::encode(sim_digest(label, id)))
}

/// SHA-256 over a label and an id: what test mode's hashes and senders are made of.
fn sim_digest(label: &str, id: Uuid) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest([label.as_bytes(), id.as_bytes()].concat()).into()
}

/// Test-mode hash of a simulated transfer into a deposit address (a test deposit, a test
/// transfer): `0x` + the 16 bytes of `id` (a UUID v7 minted for the transfer, time first:
/// the test transfer's id, a test deposit's [`deposits::Minted`]) + the first 16 bytes of
/// [`sim_tx_hash`]`(label, id)`, in hex. Still `0x` + 64 hex digits, unique as the id is,
/// and derived from it; but the transfer's unique key ([`appliance_storage::index::transfer_key`],
/// hash first) of the transfers of one store batch sit side by side at the end of their
/// range instead of one random leaf of `unique` each, the one random page per test deposit
/// that its customer's position does not explain (docs/performance.md, "Why pages, not
/// rows, are the cost"). A live
/// chain's hashes are random and keep a leaf each.
pub fn sim_transfer_hash(label: &str, id: Uuid) -> String {
    format!("0x{}", hex::encode(sim_transfer_hash_bytes(label, id)))
}

/// The 32 bytes of [`sim_transfer_hash`].
pub fn sim_transfer_hash_bytes(label: &str, id: Uuid) -> [u8; 32] {
    let h = sim_digest(label, id);
    let mut b = [0u8; 32];
    b[..16].copy_from_slice(id.as_bytes());
    b[16..].copy_from_slice(&h[..16]);
    b
}

/// Test-mode sender of a simulated transfer made from `id` (a test deposit's, a test
/// transfer's without a `from_address`): the first 20 bytes of [`sim_tx_hash`]`("sender",
/// id)`.
pub fn sim_sender_bytes(id: Uuid) -> [u8; 20] {
    sim_digest("sender", id)[..20]
        .try_into()
        .expect("20 of 32 bytes")
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod webhook_tests;
