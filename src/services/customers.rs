//! Customers (SPEC.md section 4, Customers).

use serde_json::{Map, Value};

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{Customer, CustomerStatus};
use appliance_storage::{ReadOps, WriteCtx};

use crate::services::error::{fault_from, Fault};
use crate::services::metadata::{self, MetadataError};
use crate::services::set_patched;
use crate::services::types::CustomerId;
use crate::services::{emit, emit_row, Scope};
use crate::views;

/// Why a customer request is refused (statuses and codes: `api::error`).
#[derive(Debug, thiserror::Error)]
pub enum CustomerError {
    /// No such customer in the project: 404 `not_found`.
    #[error("No such customer.")]
    NotFound,
    /// Another customer of the project has this `reference_id`: 409 `reference_id_taken`.
    #[error("Another customer already has this reference_id.")]
    ReferenceTaken,
    /// `metadata` out of bounds: 400 `invalid_request` on `metadata` or `metadata[key]`.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error(transparent)]
    Fault(#[from] Fault),
}
fault_from!(CustomerError);

/// Fields of a create request, already parsed.
pub struct NewCustomer {
    pub reference_id: Option<String>,
    pub email: Option<String>,
    pub metadata: Option<Map<String, Value>>,
}

/// Creates a customer, or returns the existing one with the same `reference_id`
/// (`(customer, created)`); emits `customer.created` for a new one.
pub fn create(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    req: NewCustomer,
) -> Result<(Customer, bool), CustomerError> {
    let p = s.project.id;
    let md = metadata::for_create(req.metadata.unwrap_or_default())?;
    if let Some(r) = &req.reference_id {
        let key = index::unique(IndexTag::UniqueCustomerRef, p, &[r.as_bytes()]);
        if let Some(id) = ctx.unique_get(&key)? {
            let c = ctx
                .get::<Customer>(id)?
                .ok_or_else(|| Fault::invariant("reference index points at nothing"))?;
            return Ok((c, false));
        }
    }
    let c = Customer {
        id: appliance_storage::sources::new_id(),
        project_id: p,
        reference_id: req.reference_id,
        email: req.email,
        status: CustomerStatus::Active,
        metadata: Value::Object(md),
        created_at: ctx.now_us(),
    };
    if let Some(r) = &c.reference_id {
        ctx.unique_put(
            &index::unique(IndexTag::UniqueCustomerRef, p, &[r.as_bytes()]),
            c.id,
        )?;
    }
    ctx.put(&c)?;
    emit_row(ctx, s, "customer.created", &c)?;
    Ok((c, true))
}

/// A patch: each `Some` replaces the field (`Some(None)` clears it).
pub struct CustomerPatch {
    pub email: Option<Option<String>>,
    pub metadata: Option<Map<String, Value>>,
    pub reference_id: Option<Option<String>>,
    pub status: Option<CustomerStatus>,
}

/// Applies a patch and emits `customer.updated`. A `reference_id` taken by another customer
/// is 409 `reference_id_taken`.
pub fn patch(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    id: CustomerId,
    req: CustomerPatch,
) -> Result<Customer, CustomerError> {
    let p = s.project.id;
    let mut c = ctx
        .get_in::<Customer>(p, id.uuid())?
        .ok_or(CustomerError::NotFound)?;
    // Every check before the first write: an error after writing aborts the whole store
    // batch (`Store::write`), failing other requests committed with this one.
    let metadata = match req.metadata {
        Some(m) => {
            // Stripe-style merge: a key set to null is removed.
            let cur = match &c.metadata {
                Value::Object(o) => o.clone(),
                _ => Map::new(),
            };
            Some(Value::Object(metadata::merge(cur, m)?))
        }
        None => None,
    };
    if let Some(Some(r)) = &req.reference_id {
        if c.reference_id.as_deref() != Some(r) {
            let key = index::unique(IndexTag::UniqueCustomerRef, p, &[r.as_bytes()]);
            if ctx.unique_get(&key)?.is_some() {
                return Err(CustomerError::ReferenceTaken);
            }
        }
    }
    if let Some(r) = req.reference_id {
        if let Some(old) = &c.reference_id {
            ctx.unique_remove(&index::unique(
                IndexTag::UniqueCustomerRef,
                p,
                &[old.as_bytes()],
            ))?;
        }
        if let Some(new) = &r {
            ctx.unique_put(
                &index::unique(IndexTag::UniqueCustomerRef, p, &[new.as_bytes()]),
                c.id,
            )?;
        }
        c.reference_id = r;
    }
    if let Some(m) = metadata {
        c.metadata = m;
    }
    set_patched!(c, req, [email, status]);
    ctx.put(&c)?;
    emit(ctx, s, "customer.updated", c.id, views::customer(&c))?;
    Ok(c)
}
