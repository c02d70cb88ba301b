//! The project clock (DECISIONS.md section 15): a live project's "now" is real time; a test
//! project's runs ahead by what `POST /v1/test/clock` added. Every rule that compares a
//! deadline with "now" for a project (invoice expiry, underpaid windows; billing's monthly
//! minimums) reads it here.

use appliance_storage::records::{Mode, Project};
use appliance_storage::{ReadOps, StoreError, WriteCtx};

use crate::services::types::ProjectId;

/// Most a test clock may run ahead of real time: 10 years, in microseconds.
pub const MAX_OFFSET_US: i64 = 10 * 366 * 86_400_000_000;

/// Most one `POST /v1/test/clock` may add: 366 days, in seconds.
pub const MAX_ADVANCE_S: u64 = 366 * 86_400;

/// Why the clock cannot move.
#[derive(Debug, thiserror::Error)]
pub enum ClockError {
    /// Moving it would put it more than [`MAX_OFFSET_US`] ahead: 400 `invalid_request` on
    /// `advance_seconds`.
    #[error("A test clock runs at most 10 years ahead of real time.")]
    TooFar,
    #[error(transparent)]
    Fault(#[from] crate::services::error::Fault),
}
crate::services::error::fault_from!(ClockError);

/// How far `project`'s clock runs ahead of real time, in microseconds (always 0 for a live
/// project, which is never read from the store).
pub fn offset(r: &impl ReadOps, project: &Project) -> Result<i64, StoreError> {
    match project.mode {
        Mode::Live => Ok(0),
        Mode::Test => r.test_clock_offset(project.id),
    }
}

/// `project`'s now inside a write transaction: the transaction's clock plus the offset
/// (Unix microseconds).
pub fn now(ctx: &WriteCtx<'_>, project: &Project) -> Result<i64, StoreError> {
    Ok(ctx.now_us().saturating_add(offset(ctx, project)?))
}

/// `project`'s now from a read snapshot at real time `real_now_us`.
pub fn now_at(r: &impl ReadOps, project: &Project, real_now_us: i64) -> Result<i64, StoreError> {
    Ok(real_now_us.saturating_add(offset(r, project)?))
}

/// Moves test project `project`'s clock `seconds` ahead; returns its new now (Unix µs).
pub fn advance(
    ctx: &mut WriteCtx<'_>,
    project: ProjectId,
    seconds: u64,
) -> Result<i64, ClockError> {
    let project = project.uuid();
    let cur = ctx.test_clock_offset(project)?;
    let add = i64::try_from(seconds)
        .ok()
        .and_then(|s| s.checked_mul(1_000_000))
        .ok_or(ClockError::TooFar)?;
    let next = cur.checked_add(add).ok_or(ClockError::TooFar)?;
    if next > MAX_OFFSET_US {
        return Err(ClockError::TooFar);
    }
    ctx.test_clock_set(project, next)?;
    Ok(ctx.now_us().saturating_add(next))
}
