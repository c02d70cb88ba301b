//! Idempotent requests (SPEC.md sections 4, 7 and 8; DECISIONS.md section 16): the record
//! key of a request, the in-flight guard, the replay of a stored first answer (opened when it
//! was stored sealed), and the runners that write a mutation and its record in one store
//! transaction. The `Idempotency-Key` header and the body fingerprint are read in
//! `api::extract`.

use super::*;

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
