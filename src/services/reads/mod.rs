//! Reads of a project's rows for the API: one row by id, and a page of rows under an
//! index prefix. The handlers read through here (or through a service's own query
//! function built on it), never through the store directly, so that where and how a
//! resource is read stays one thing to change.
//!
//! A read answers what the store holds for the caller's project: another project's row is
//! `None`, as if it did not exist (SPEC.md section 7: not found either way).

mod lists;
pub use lists::*;

use uuid::Uuid;

use appliance_storage::records::{Event, Row, WebhookEndpoint};
use appliance_storage::{Page, ReadOps, Store, StoreError};

use crate::services::types::{Id, ProjectId};

/// Index entries a list may pass over on the request's own thread (`Store::read_now`);
/// a page whose filter skips more than this many is read again on the blocking pool
/// (`Store::read`). A page of 100 that its filter does not thin runs inline.
pub const INLINE_LIST_VISITS: usize = 256;

/// Where a page starts and how long it is (SPEC.md section 2, Lists).
#[derive(Clone, Copy, Debug)]
pub struct PageReq {
    /// The id of the last row of the previous page (the cursor), or `None` for the first.
    pub before: Option<Uuid>,
    /// Rows at most (1 to 100).
    pub limit: usize,
}

/// The project's row `id` of type `R`, or `None` (missing, or another project's). A short
/// read on the caller's thread (`Store::read_now`): one key lookup.
pub fn row<R: Row>(store: &Store, project: ProjectId, id: Id<R>) -> Result<Option<R>, StoreError> {
    store.read_now(move |r| r.get_in::<R>(project.uuid(), id.uuid()))
}

/// A page of rows under an index prefix (`appliance_storage::index::prefix`), newest first,
/// those `keep` accepts. Read on the caller's thread when the page passes over at most
/// [`INLINE_LIST_VISITS`] index entries (the usual case: a list's filters follow its
/// index), otherwise again on the blocking pool, where a long scan does not hold up a
/// runtime worker.
pub async fn page<R, K>(
    store: &Store,
    prefix: Vec<u8>,
    page: PageReq,
    keep: K,
) -> Result<Page<R>, StoreError>
where
    R: Row + Send + 'static,
    K: Fn(&R) -> bool + Send + 'static,
{
    let PageReq { before, limit } = page;
    let inline = store
        .read_now(|r| r.list_within::<R>(&prefix, before, limit, &keep, INLINE_LIST_VISITS))?;
    match inline {
        Some(rows) => Ok(rows),
        None => {
            store
                .read(move |r| r.list::<R>(&prefix, before, limit, keep))
                .await
        }
    }
}

/// Which events `GET /v1/events` lists: of any of `types` (all when empty), about
/// `resource` (a resource id) when set, after the event sequence `after` (the cursor), in
/// ascending or descending (default) order.
pub struct EventQuery {
    pub types: Vec<String>,
    pub resource: Option<String>,
    pub after: Option<u64>,
    pub ascending: bool,
}

/// A page of the project's events of at most `limit`, as `q` selects.
pub async fn events(
    store: &Store,
    project: ProjectId,
    q: EventQuery,
    limit: usize,
) -> Result<Page<Event>, StoreError> {
    store
        .read(move |r| {
            r.list_events(
                project.uuid(),
                &q.types,
                q.resource.as_deref(),
                q.after,
                limit,
                q.ascending,
            )
        })
        .await
}

/// The project's event `id` (`evt_...`), or `None`.
pub async fn event(
    store: &Store,
    project: ProjectId,
    id: String,
) -> Result<Option<Event>, StoreError> {
    store.read(move |r| r.event(project.uuid(), &id)).await
}

/// Every webhook endpoint of the project, newest first (`GET /v1/webhooks` is never
/// paginated: a project has at most a few).
pub async fn webhook_endpoints(
    store: &Store,
    project: ProjectId,
) -> Result<Vec<WebhookEndpoint>, StoreError> {
    let mut eps = store
        .read(move |r| crate::services::webhook_endpoints::list(r, project))
        .await?;
    eps.reverse();
    Ok(eps)
}

/// The sender class a test transfer recorded for `from` on `chain` (test mode:
/// `POST /v1/test/transfers` with `sender_class`), if any.
pub async fn test_sender_class(
    store: &Store,
    chain: &str,
    from: &str,
) -> Result<Option<String>, StoreError> {
    let (chain, from) = (chain.to_string(), from.to_string());
    store
        .read(move |r| r.test_sender_class(&chain, &from))
        .await
}
