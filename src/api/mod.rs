//! The `/v1` HTTP API: one file per resource, each with its own `router()`.

pub mod api_keys;
pub mod balances;
pub mod billing;
pub mod chains;
pub mod checkout;
pub mod coins;
pub mod conversions;
pub mod customers;
pub mod deposits;
pub mod error;
pub mod events;
pub mod extract;
pub mod http_rules;
pub mod invoices;
pub mod market;
pub mod openapi;
pub mod ops;
pub mod payouts;
pub mod ping;
pub mod schemas;
pub mod stream;
pub mod sweeps;
pub mod test_mode;
pub mod test_transfers;
pub mod wallets;
pub mod webhook_deliveries;
pub mod webhook_docs;
pub mod webhooks;

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::Value;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use appliance_storage::records::IdempotencyRecord;
use appliance_storage::{ReadOps, WriteCtx};

use crate::api::error::ApiError;
use crate::auth::Caller;
use crate::sealing::DataKey;
use crate::services::error::Fault;
use crate::services::Scope;
use crate::state::AppState;

pub use crate::services::IDEMPOTENCY_TTL_US;
pub use extract::{Fingerprint, IdempotencyKey, MAX_IDEMPOTENCY_KEY};

/// Every documented route of the API with its OpenAPI operation (issue 11): each resource
/// module's `router()` registers its handlers with `utoipa_axum::routes!`, so what is served
/// and what `GET /v1/openapi.json` describes come from the same registration.
pub fn documented() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(openapi::router())
        .merge(ping::router())
        .merge(chains::router())
        .merge(coins::router())
        .merge(market::router())
        .merge(api_keys::router())
        .merge(customers::router())
        .merge(wallets::router())
        .merge(balances::router())
        .merge(deposits::router())
        .merge(payouts::router())
        .merge(invoices::router())
        .merge(checkout::router())
        .merge(sweeps::router())
        .merge(conversions::router())
        .merge(events::router())
        .merge(stream::router())
        .merge(webhooks::router())
        .merge(webhook_deliveries::router())
        .merge(billing::router())
        .merge(test_mode::router())
        .merge(test_transfers::router())
}

/// The whole API, with request ids, the 1 MiB body limit and enveloped 404/405.
pub fn router(state: AppState) -> Router {
    let (api, _) = documented().split_for_parts();
    api.merge(ops::router())
        .merge(coins::assets_router())
        .merge(checkout::page_router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // Request ids, the access log, and the HTTP-level rules (issue 9): drain what was
        // left unread, header-count and URI limits, envelope the framework's own errors.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http_rules::edge,
        ))
        .with_state(state)
}

/// A request to an unknown route costs its caller like any other: a request without a valid
/// key is charged to its IP's unauthenticated budget (429 when spent), a keyed one to its key.
async fn charge_unrouted(
    state: &AppState,
    parts: &mut axum::http::request::Parts,
) -> Option<ApiError> {
    use axum::extract::FromRequestParts;
    match Caller::from_request_parts(parts, state).await {
        Err(e) if e.status == StatusCode::TOO_MANY_REQUESTS => Some(e),
        _ => None,
    }
}

async fn not_found(
    axum::extract::State(state): axum::extract::State<AppState>,
    mut parts: axum::http::request::Parts,
) -> ApiError {
    if let Some(e) = charge_unrouted(&state, &mut parts).await {
        return e;
    }
    ApiError::new(StatusCode::NOT_FOUND, "route_not_found", "No such route.")
}

async fn method_not_allowed(
    axum::extract::State(state): axum::extract::State<AppState>,
    mut parts: axum::http::request::Parts,
) -> ApiError {
    if let Some(e) = charge_unrouted(&state, &mut parts).await {
        return e;
    }
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "This route does not accept that method.",
    )
}

/// The service scope of a caller.
pub fn scope(state: &AppState, caller: &Caller) -> Scope {
    Scope {
        reg: state.registry.clone(),
        project: caller.project.clone(),
        delivery_attempts: state.config.webhooks.max_attempts(),
    }
}

/// A JSON answer, written straight from `v` (a typed view or a `Value`).
pub fn json<T: serde::Serialize + ?Sized>(status: StatusCode, v: &T) -> Response {
    json_sized(status, v, 1024)
}

/// [`json`] into a buffer of `capacity` bytes to begin with (a list's size is known
/// roughly in advance: fewer regrowths).
fn json_sized<T: serde::Serialize + ?Sized>(
    status: StatusCode,
    v: &T,
    capacity: usize,
) -> Response {
    let mut body = Vec::with_capacity(capacity);
    serde_json::to_writer(&mut body, v).expect("json");
    raw_json(status, body)
}

fn raw_json(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// An idempotent request in flight: removes its key from the in-flight set when dropped.
pub struct Idem {
    state: AppState,
    key: Vec<u8>,
    fingerprint: Fingerprint,
}

impl Drop for Idem {
    fn drop(&mut self) {
        self.state.inflight.lock().expect("lock").remove(&self.key);
    }
}

/// The idempotency record key of a request, and the key records written before schema 15
/// have (read until they expire): the project, the method, the path and the
/// `Idempotency-Key`, length-prefixed ([`IndexTag::Projects`], 74 bytes for a UUID key).
/// From schema 15:
/// - an `Idempotency-Key` that is a UUID in its canonical text: the project, the UUID's 16
///   bytes and the first 8 bytes of the SHA-256 of the method and path
///   ([`IndexTag::IdempotencyUuid`], 41 bytes; UUID v7 keys come in order);
/// - any other: the project and the first 16 bytes of the SHA-256 of the old key
///   ([`IndexTag::IdempotencyDigest`], 33 bytes).
///
/// Keys are scoped by project, so only a caller's own records could collide, and 64 bits
/// (the same key on two paths) or 128 bits (two keys) put that out of reach.
///
/// [`IndexTag::Projects`]: appliance_storage::index::IndexTag::Projects
/// [`IndexTag::IdempotencyDigest`]: appliance_storage::index::IndexTag::IdempotencyDigest
/// [`IndexTag::IdempotencyUuid`]: appliance_storage::index::IndexTag::IdempotencyUuid
fn record_keys(caller: &Caller, method: &Method, path: &str, key: &str) -> (Vec<u8>, Vec<u8>) {
    use appliance_storage::index::{self, IndexTag};
    use sha2::Digest;
    let project = caller.project_id();
    let legacy = index::unique(
        IndexTag::Projects,
        project,
        &[method.as_str().as_bytes(), path.as_bytes(), key.as_bytes()],
    );
    let k = match appliance_storage::codec::canonical_uuid(key) {
        Some(u) => {
            let route = index::unique(
                IndexTag::IdempotencyUuid,
                uuid::Uuid::nil(),
                &[method.as_str().as_bytes(), path.as_bytes()],
            );
            [
                &[IndexTag::IdempotencyUuid as u8][..],
                project.as_bytes(),
                u.as_bytes(),
                &sha2::Sha256::digest(&route)[..8],
            ]
            .concat()
        }
        None => [
            &[IndexTag::IdempotencyDigest as u8][..],
            project.as_bytes(),
            &sha2::Sha256::digest(&legacy)[..16],
        ]
        .concat(),
    };
    (k, legacy)
}

fn reuse_error() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "idempotency_key_reuse",
        "This Idempotency-Key was used with a different request body.",
    )
    .param("Idempotency-Key")
}

/// The answer a record stored under `record_key` holds: opened when it was stored sealed
/// ([`commit_rendered`]).
/// ([`commit_rendered`]); `key` is `None` where no record is stored sealed ([`commit`]).
fn stored_body(
    key: Option<&DataKey>,
    record_key: &[u8],
    rec: &IdempotencyRecord,
) -> Result<String, ApiError> {
    match key {
        Some(key) => key.open_answer(record_key, &rec.body),
        None if !crate::sealing::is_sealed(&rec.body) => Ok(rec.body.clone()),
        None => Err(crate::sealing::OpenError),
    }
    .map_err(|e| Fault::invariant(format!("an idempotent answer: {e}")).into())
}

fn replay(
    key: &DataKey,
    record_key: &[u8],
    rec: &IdempotencyRecord,
    fingerprint: &Fingerprint,
) -> Result<Response, ApiError> {
    if !fingerprint.matches(&rec.request_hash) {
        return Err(reuse_error());
    }
    let mut r = raw_json(
        StatusCode::from_u16(rec.status).unwrap_or(StatusCode::OK),
        stored_body(Some(key), record_key, rec)?,
    );
    r.headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    Ok(r)
}

/// Either the stored first answer, or a guard to run the request under.
pub enum Begin {
    Replay(Response),
    Fresh(Option<Idem>),
}

/// Starts an idempotent request (SPEC.md sections 4, 7, 8): replays the stored answer of
/// a completed one, refuses a different body (409 `idempotency_key_reuse`) or a concurrent
/// duplicate (409 `idempotency_in_progress` with `Retry-After`). `key` is the request's
/// `Idempotency-Key` (a malformed one is refused here), `fingerprint` its parsed body's.
pub async fn begin(
    state: &AppState,
    caller: &Caller,
    method: &Method,
    path: &str,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
) -> Result<Begin, ApiError> {
    let Some(key) = key.get()? else {
        return Ok(Begin::Fresh(None));
    };
    let (rkey, legacy) = record_keys(caller, method, path, key);
    // A record of the form before schema 15 is read until it expires (24 hours); the job
    // checks again under the new key only, the one any record written meanwhile has.
    let stored = state.store.read_now(|r| match r.idempotency_get(&rkey)? {
        Some(rec) => Ok(Some((rec, &rkey))),
        None => Ok(r.idempotency_get(&legacy)?.map(|rec| (rec, &legacy))),
    })?;
    let now = appliance_storage::now_us();
    if let Some((rec, at)) = stored.filter(|(r, _)| r.created_at + IDEMPOTENCY_TTL_US > now) {
        return replay(&state.data_key, at, &rec, fingerprint).map(Begin::Replay);
    }
    if !state.inflight.lock().expect("lock").insert(rkey.clone()) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "idempotency_in_progress",
            "A request with this Idempotency-Key is still being processed.",
        )
        .retry_after(1));
    }
    Ok(Begin::Fresh(Some(Idem {
        state: state.clone(),
        key: rkey,
        fingerprint: fingerprint.clone(),
    })))
}

/// An idempotent `POST`: replays the stored first answer for a known `Idempotency-Key`
/// (optional), otherwise runs `f` through [`commit`].
pub async fn mutate<T, F>(
    state: &AppState,
    caller: &Caller,
    key: &IdempotencyKey,
    path: &str,
    fingerprint: &Fingerprint,
    f: F,
) -> Result<(Response, Option<T>), ApiError>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<(StatusCode, Value, T), ApiError>
        + Send
        + 'static,
    T: Send + 'static,
{
    match begin(state, caller, &Method::POST, path, key, fingerprint).await? {
        Begin::Replay(r) => Ok((r, None)),
        Begin::Fresh(idem) => commit(state, idem, f).await,
    }
}

/// Top-level answer fields that carry a secret shown once: an API key's `token`, a webhook
/// endpoint's `secret`. [`commit`] stores them as null in the idempotency record, so a
/// replay answers the same object without the secret (DECISIONS.md section 16; SPEC.md
/// section 5 rule 10: shown exactly once).
pub const SECRET_FIELDS: &[&str] = &["token", "secret"];

/// 201 for a new resource, 200 for an existing one returned again.
pub fn created_or_ok(created: bool) -> StatusCode {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    }
}

/// Runs a mutation as one store transaction together with its idempotency record, and
/// answers with exactly the bytes that were stored, except that each top-level field of
/// [`SECRET_FIELDS`] is stored as null (never a secret at rest, never a secret in a
/// replay). `T` is handed back for post-commit work (cache updates); it is `None` on a
/// replay.
pub async fn commit<T, F>(
    state: &AppState,
    idem: Option<Idem>,
    f: F,
) -> Result<(Response, Option<T>), ApiError>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<(StatusCode, Value, T), ApiError>
        + Send
        + 'static,
    T: Send + 'static,
{
    commit_job(state, idem, move |ctx, rec_key| {
        run_idempotent(ctx, rec_key, f)
    })
    .await
}

/// [`commit`] for a job that answers JSON it serialized itself, or before the job ran
/// (`invoices::prepare`: the writer thread then only stores it). The body must hold none of
/// [`SECRET_FIELDS`]; its idempotency record stores it sealed with the data key (an
/// invoice's answer carries its checkout token, which the store never holds in clear).
pub async fn commit_rendered<T, F>(
    state: &AppState,
    idem: Option<Idem>,
    f: F,
) -> Result<(Response, Option<T>), ApiError>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<(StatusCode, String, T), ApiError>
        + Send
        + 'static,
    T: Send + 'static,
{
    let key = state.data_key.clone();
    commit_job(state, idem, move |ctx, rec_key| {
        run_idempotent_rendered(ctx, rec_key, &key, f)
    })
    .await
}

/// The part [`commit`] and [`commit_rendered`] share: runs `job` (given the request's
/// idempotency record key) as one store transaction, releases the in-flight key, and
/// answers the job's status and JSON body.
async fn commit_job<T, J>(
    state: &AppState,
    idem: Option<Idem>,
    job: J,
) -> Result<(Response, Option<T>), ApiError>
where
    J: for<'a, 'b> FnOnce(
            &'a mut WriteCtx<'b>,
            Option<RecordKey>,
        ) -> Result<(u16, String, Option<T>), ApiError>
        + Send
        + 'static,
    T: Send + 'static,
{
    let rec_key = idem.as_ref().map(Idem::record_key);
    let out = state.store.write(move |ctx| job(ctx, rec_key)).await;
    drop(idem);
    let (status, body, extra) = out?;
    Ok((
        raw_json(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body),
        extra,
    ))
}

/// [`run_idempotent`] for [`commit_rendered`].
pub fn run_idempotent_rendered<T, F>(
    ctx: &mut WriteCtx<'_>,
    rec_key: Option<RecordKey>,
    data_key: &DataKey,
    f: F,
) -> Result<(u16, String, Option<T>), ApiError>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<(StatusCode, String, T), ApiError>,
{
    if let Some(replay) = stored_answer(ctx, rec_key.as_ref(), Some(data_key))? {
        return Ok(replay);
    }
    let (status, body, extra) = f(ctx)?;
    if let Some(key) = rec_key {
        let sealed = data_key.seal_answer(&key.0, &body);
        put_record(ctx, key, status, sealed)?;
    }
    Ok((status.as_u16(), body, Some(extra)))
}

/// Stores `body` (what a replay answers) as the idempotency record under `key`.
fn put_record(
    ctx: &mut WriteCtx<'_>,
    (k, h): RecordKey,
    status: StatusCode,
    body: String,
) -> Result<(), ApiError> {
    ctx.idempotency_put(
        &k,
        &IdempotencyRecord {
            request_hash: h.stored().to_string(),
            status: status.as_u16(),
            body,
            created_at: ctx.now_us(),
        },
    )?;
    Ok(())
}

/// The answer stored under `rec_key` meanwhile, if any (a different body is 409
/// `idempotency_key_reuse`).
fn stored_answer<T>(
    ctx: &WriteCtx<'_>,
    rec_key: Option<&RecordKey>,
    data_key: Option<&DataKey>,
) -> Result<Option<(u16, String, Option<T>)>, ApiError> {
    if let Some((k, h)) = rec_key {
        if let Some(rec) = ctx
            .idempotency_get(k)?
            .filter(|r| r.created_at + IDEMPOTENCY_TTL_US > ctx.now_us())
        {
            if !h.matches(&rec.request_hash) {
                return Err(reuse_error());
            }
            return Ok(Some((rec.status, stored_body(data_key, k, &rec)?, None)));
        }
    }
    Ok(None)
}

/// The idempotency record key and request fingerprint of an idempotent request.
pub type RecordKey = (Vec<u8>, Fingerprint);

impl Idem {
    /// Its record key and fingerprint, for [`run_idempotent`].
    pub fn record_key(&self) -> RecordKey {
        (self.key.clone(), self.fingerprint.clone())
    }
}

/// The body of [`commit`]'s store job: replays a record stored meanwhile (a different body
/// is 409 `idempotency_key_reuse`), otherwise runs `f` and stores its answer under
/// `rec_key` (secrets as null). Answers (status, body, `Some(extra)`), or `None` for a
/// replay. For handlers that write more in the same job whatever the outcome
/// (`test_mode::create_test_deposit`).
pub fn run_idempotent<T, F>(
    ctx: &mut WriteCtx<'_>,
    rec_key: Option<RecordKey>,
    f: F,
) -> Result<(u16, String, Option<T>), ApiError>
where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<(StatusCode, Value, T), ApiError>,
{
    if let Some(replay) = stored_answer(ctx, rec_key.as_ref(), None)? {
        return Ok(replay);
    }
    let (status, mut value, extra) = f(ctx)?;
    let body = serde_json::to_string(&value).expect("json");
    if let Some(key) = rec_key {
        let mut redacted = false;
        if let Value::Object(m) = &mut value {
            for field in SECRET_FIELDS {
                if let Some(v) = m.get_mut(*field) {
                    *v = Value::Null;
                    redacted = true;
                }
            }
        }
        let stored = if redacted {
            serde_json::to_string(&value).expect("json")
        } else {
            body.clone()
        };
        put_record(ctx, key, status, stored)?;
    }
    Ok((status.as_u16(), body, Some(extra)))
}

impl IntoResponse for Begin {
    fn into_response(self) -> Response {
        match self {
            Begin::Replay(r) => r,
            Begin::Fresh(_) => StatusCode::NO_CONTENT.into_response(),
        }
    }
}

/// `GET /v1/<resource>/{id}` of a row kept per project: the caller's project's row `id`
/// answered 200 as `view` renders it, or `missing` (404 `not_found`: another project's row
/// is not found either, SPEC.md section 7). A view that borrows from the row (the typed
/// views of [`crate::views`]) goes through [`row_by_id`] and [`json`].
pub async fn get_by_id<R, V, S>(
    state: &AppState,
    caller: &Caller,
    id: uuid::Uuid,
    missing: impl Into<ApiError>,
    view: V,
) -> Result<Response, ApiError>
where
    R: appliance_storage::records::Row + Send + 'static,
    V: FnOnce(&R) -> S,
    S: serde::Serialize,
{
    let row = row_by_id::<R>(state, caller, id, missing)?;
    Ok(json(StatusCode::OK, &view(&row)))
}

/// The caller's project's row `id`, or `missing` (another project's row is not found
/// either, SPEC.md section 7). A short read on the request's thread
/// (`Store::read_now`).
pub fn row_by_id<R>(
    state: &AppState,
    caller: &Caller,
    id: uuid::Uuid,
    missing: impl Into<ApiError>,
) -> Result<R, ApiError>
where
    R: appliance_storage::records::Row,
{
    let p = caller.project_id();
    state
        .store
        .read_now(move |r| r.get_in::<R>(p, id))?
        .ok_or_else(|| missing.into())
}

/// Index entries a list may pass over on the request's own thread (`Store::read_now`);
/// a page whose filter skips more than this many is read again on the blocking pool
/// (`Store::read`). A page of 100 that its filter does not thin runs inline.
pub const INLINE_LIST_VISITS: usize = 256;

/// A page of rows read by [`list_page`], answered by [`Listed::answer`].
pub struct Listed<R> {
    pub items: Vec<R>,
    pub has_more: bool,
}

impl<R: appliance_storage::records::Row> Listed<R> {
    /// The list answer (`{object: list, data, has_more, next_cursor}`, SPEC.md section 2,
    /// Lists), each row as `view` renders it, written straight to the response body.
    pub fn answer<'a, S: serde::Serialize>(&'a self, view: impl Fn(&'a R) -> S) -> Response {
        let next = self
            .items
            .last()
            .map(|r| extract::cursor_of(r.id().as_bytes()));
        let data = self.items.iter().map(view).collect::<Vec<_>>();
        let body = extract::ListPage::new(&data, self.has_more, next);
        json_sized(StatusCode::OK, &body, 256 + 768 * data.len())
    }
}

/// A page of rows under an index prefix, newest first, those `keep` accepts. Read on the
/// request's thread when the page passes over at most [`INLINE_LIST_VISITS`] index
/// entries (the usual case: a list's filters follow its index), otherwise again on the
/// blocking pool, where a long scan does not hold up a runtime worker.
pub async fn list_page<R, K>(
    state: &AppState,
    prefix: Vec<u8>,
    page: extract::PageReq,
    keep: K,
) -> Result<Listed<R>, ApiError>
where
    R: appliance_storage::records::Row + Send + 'static,
    K: Fn(&R) -> bool + Send + 'static,
{
    let before = page.cursor_uuid()?;
    let limit = page.limit;
    let inline = state
        .store
        .read_now(|r| r.list_within::<R>(&prefix, before, limit, &keep, INLINE_LIST_VISITS))?;
    let rows = match inline {
        Some(rows) => rows,
        None => {
            state
                .store
                .read(move |r| r.list::<R>(&prefix, before, limit, keep))
                .await?
        }
    };
    Ok(Listed {
        items: rows.items,
        has_more: rows.has_more,
    })
}

/// A page of rows under an index prefix as a list answer ([`list_page`] and
/// [`Listed::answer`]), for a view that owns what it renders.
pub async fn list_rows<R, K, V, S>(
    state: &AppState,
    prefix: Vec<u8>,
    page: extract::PageReq,
    keep: K,
    view: V,
) -> Result<Response, ApiError>
where
    R: appliance_storage::records::Row + Send + 'static,
    K: Fn(&R) -> bool + Send + 'static,
    V: Fn(&R) -> S,
    S: serde::Serialize,
{
    Ok(list_page(state, prefix, page, keep).await?.answer(view))
}
