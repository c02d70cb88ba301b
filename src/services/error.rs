//! The pieces every service error enum shares: [`Fault`] (the store or an invariant failed:
//! never the caller's doing) and [`Invalid`] (a field breaks a rule the service checks).
//!
//! Neither knows HTTP: `api::error` maps them, with every service enum, to SPEC.md section 7
//! statuses and codes.

use appliance_storage::ledger::LedgerError;
use appliance_storage::StoreError;

/// A failure that is not the caller's: the store failed, the ledger refused an entry the
/// service built, or stored data broke an invariant. Answered 500 `internal_error` with the
/// cause logged; workers log it and retry.
#[derive(Debug, thiserror::Error)]
pub enum Fault {
    /// The store failed (the transaction is not committed).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The ledger refused an entry built by the service (a bug, or an overflow no rule
    /// caught first).
    #[error("ledger: {0}")]
    Ledger(#[from] LedgerError),
    /// Stored data broke an invariant (an index pointing at nothing, an undecodable value).
    #[error("{0}")]
    Invariant(String),
}

impl Fault {
    /// A broken invariant, described for the log.
    pub fn invariant(what: impl std::fmt::Display) -> Self {
        Fault::Invariant(what.to_string())
    }
}

/// A request field that breaks a rule a service checks: 400 `invalid_request` naming
/// `param` (SPEC.md section 7). `message` is the client-facing text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// The request field at fault (`param` of the error envelope).
    pub param: &'static str,
    /// What is wrong with it, for the client.
    pub message: String,
}

impl Invalid {
    /// `param` breaks a rule, explained by `message`.
    pub fn new(param: &'static str, message: impl Into<String>) -> Self {
        Invalid {
            param,
            message: message.into(),
        }
    }
}

/// Lets `?` lift store and ledger failures into a service enum's `Fault(Fault)` variant, so
/// a service reads `ctx.get(..)?` whatever its own error type.
macro_rules! fault_from {
    ($($t:ty),* $(,)?) => {$(
        impl From<appliance_storage::StoreError> for $t {
            fn from(e: appliance_storage::StoreError) -> Self {
                Self::Fault(e.into())
            }
        }
        impl From<appliance_storage::ledger::LedgerError> for $t {
            fn from(e: appliance_storage::ledger::LedgerError) -> Self {
                Self::Fault(e.into())
            }
        }
    )*};
}
pub(crate) use fault_from;
