//! Idempotent requests (SPEC.md sections 4, 7 and 8; DECISIONS.md section 16): the record
//! key of a request, the in-flight guard, the replay of a stored first answer (opened when it
//! was stored sealed), and the runners that write a mutation and its record in one store
//! transaction; and what identifies such a request: the `Idempotency-Key` header and the
//! body fingerprint (read by `api::extract`).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde_json::Map;

use super::*;

/// Longest accepted `Idempotency-Key`.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The `Idempotency-Key` header (SPEC.md sections 4 and 8), parsed once when the request is
/// extracted: absent, or 1 to [`MAX_IDEMPOTENCY_KEY`] printable ASCII characters. Extraction
/// never refuses; a malformed key is reported (400 `invalid_request`, `param`
/// `Idempotency-Key`) when the handler asks for it with [`IdempotencyKey::get`], after its
/// scope and body checks.
pub struct IdempotencyKey(Result<Option<String>, ApiError>);

/// The optional `Idempotency-Key` header of a creating `POST` (SPEC.md section 4): a retry
/// with the same key and body replays the first answer; another body is 409
/// `idempotency_key_reuse`. Kept 24 hours.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyHeader {
    #[param(
        rename = "Idempotency-Key",
        required = false,
        min_length = 1,
        max_length = 255,
        pattern = "^[!-~]([ -~]{0,253}[!-~])?$"
    )]
    pub idempotency_key: String,
}

/// The REQUIRED `Idempotency-Key` header (payouts): missing is 400 `idempotency_key_required`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct RequiredIdempotencyHeader {
    #[param(
        rename = "Idempotency-Key",
        min_length = 1,
        max_length = 255,
        pattern = "^[!-~]([ -~]{0,253}[!-~])?$"
    )]
    pub idempotency_key: String,
}

impl IdempotencyKey {
    /// Parses the header value, if any.
    pub fn parse(v: Option<&axum::http::HeaderValue>) -> Self {
        IdempotencyKey(v.map(parse_idempotency_key).transpose())
    }

    /// The key, `None` without the header; the refusal for a malformed one.
    pub fn get(&self) -> Result<Option<&str>, ApiError> {
        match &self.0 {
            Ok(k) => Ok(k.as_deref()),
            Err(e) => Err(e.clone()),
        }
    }

    /// The key, required: without the header, 400 `idempotency_key_required` naming
    /// `endpoint` (e.g. `POST /v1/payouts`, SPEC.md section 4, Payouts rule 2).
    pub fn require(&self, endpoint: &str) -> Result<&str, ApiError> {
        self.get()?.ok_or_else(|| {
            ApiError::invalid(
                "Idempotency-Key",
                format!("{endpoint} requires an Idempotency-Key header."),
            )
            .with_code("idempotency_key_required")
        })
    }
}

fn parse_idempotency_key(v: &axum::http::HeaderValue) -> Result<String, ApiError> {
    let s = v.to_str().map_err(|_| {
        ApiError::invalid(
            "Idempotency-Key",
            "Idempotency-Key must be printable ASCII.",
        )
    })?;
    if s.is_empty() || s.len() > MAX_IDEMPOTENCY_KEY {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            format!("Idempotency-Key must have 1 to {MAX_IDEMPOTENCY_KEY} characters."),
        ));
    }
    Ok(s.to_string())
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _: &S,
    ) -> Result<Self, std::convert::Infallible> {
        Ok(IdempotencyKey::parse(parts.headers.get("idempotency-key")))
    }
}

/// What makes two requests under one `Idempotency-Key` "the same request" (SPEC.md section
/// 8): the PARSED body, so the same JSON object with other whitespace or key order
/// matches, and any different value does not (409 `idempotency_key_reuse`).
///
/// Stored form: `v2:` + hex SHA-256 of the object re-serialized canonically (keys sorted,
/// no whitespace; `serde_json::Map` is ordered). Records written by earlier releases hold the
/// bare hex SHA-256 of the raw bytes; they still match a byte-identical retry until they
/// expire (24 hours), so a retry across an upgrade is never refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    canonical: String,
    raw: String,
}

impl Fingerprint {
    const VERSION: &'static str = "v2:";

    pub(super) fn of(fields: &Map<String, Value>, raw: &[u8]) -> Self {
        use sha2::Digest;
        let canonical = serde_json::to_vec(fields).expect("a JSON map serializes");
        Fingerprint {
            canonical: format!(
                "{}{}",
                Self::VERSION,
                hex::encode(sha2::Sha256::digest(canonical))
            ),
            raw: hex::encode(sha2::Sha256::digest(raw)),
        }
    }

    /// The value to store with a new idempotency record.
    pub fn stored(&self) -> &str {
        &self.canonical
    }

    /// Whether a stored record's fingerprint is this request's.
    pub fn matches(&self, stored: &str) -> bool {
        if stored.starts_with(Self::VERSION) {
            stored == self.canonical
        } else {
            stored == self.raw
        }
    }
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
    let project = caller.project.id;
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

/// The answer a record stored under `record_key` holds: opened with `key` when its
/// [`AnswerForm`] stores it sealed; `key` is `None` for a form that stores it in clear.
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

/// The store job of a mutation: it writes, and answers its status, its body in form `A`
/// ([`AnswerForm`]) and `T`, what the handler needs after the commit (cache updates).
pub trait Job<A, T>:
    for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<(StatusCode, A, T), ApiError> + Send + 'static
{
}

impl<A, T, F> Job<A, T> for F where
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<(StatusCode, A, T), ApiError>
        + Send
        + 'static
{
}

/// An idempotent `POST`: replays the stored first answer for a known `Idempotency-Key`
/// (optional), otherwise runs `f` through [`commit`].
pub async fn mutate<A: AnswerForm, T: Send + 'static>(
    state: &AppState,
    caller: &Caller,
    key: &IdempotencyKey,
    path: &str,
    fingerprint: &Fingerprint,
    f: impl Job<A, T>,
) -> Result<(Response, Option<T>), ApiError> {
    match begin(state, caller, &Method::POST, path, key, fingerprint).await? {
        Begin::Replay(r) => Ok((r, None)),
        Begin::Fresh(idem) => commit(state, idem, f).await,
    }
}

/// Top-level answer fields that carry a secret shown once: an API key's `token`, a webhook
/// endpoint's `secret`. A [`Value`] answer stores them as null in the idempotency record, so
/// a replay answers the same object without the secret (DECISIONS.md section 16; SPEC.md
/// section 5 rule 10: shown exactly once).
pub const SECRET_FIELDS: &[&str] = &["token", "secret"];

/// The form of an idempotent answer, and the form its idempotency record stores:
/// - a [`Value`] is answered as serialized; its record holds it with each top-level field
///   of [`SECRET_FIELDS`] as null (never a secret at rest, never a secret in a replay);
/// - a `String` is JSON the job serialized itself, or that was serialized before the job ran
///   (`invoices::prepare`: the writer thread then only stores it). It holds none of
///   [`SECRET_FIELDS`]; its record holds it sealed with the data key (an invoice's answer
///   carries its checkout token, which the store never holds in clear).
pub trait AnswerForm: Send + 'static {
    /// Whether records of this form are stored sealed.
    const SEALED: bool;

    /// The body to answer, and with `record` (the record key and the data key) the body to
    /// store as the idempotency record.
    fn bodies(self, record: Option<(&[u8], &DataKey)>) -> (String, Option<String>);
}

impl AnswerForm for Value {
    const SEALED: bool = false;

    fn bodies(mut self, record: Option<(&[u8], &DataKey)>) -> (String, Option<String>) {
        let body = serde_json::to_string(&self).expect("json");
        let stored = record.map(|_| {
            let mut redacted = false;
            if let Value::Object(m) = &mut self {
                for field in SECRET_FIELDS {
                    if let Some(v) = m.get_mut(*field) {
                        *v = Value::Null;
                        redacted = true;
                    }
                }
            }
            if redacted {
                serde_json::to_string(&self).expect("json")
            } else {
                body.clone()
            }
        });
        (body, stored)
    }
}

impl AnswerForm for String {
    const SEALED: bool = true;

    fn bodies(self, record: Option<(&[u8], &DataKey)>) -> (String, Option<String>) {
        let stored = record.map(|(key, data_key)| data_key.seal_answer(key, &self));
        (self, stored)
    }
}

/// Runs a mutation as one store transaction together with its idempotency record
/// ([`run_idempotent`]), releases the in-flight key, and answers with exactly the bytes the
/// job answered (what a replay answers too, but for the secrets an [`AnswerForm`] keeps out
/// of its record). `T` is handed back for post-commit work (cache updates); it is `None` on
/// a replay.
pub async fn commit<A: AnswerForm, T: Send + 'static>(
    state: &AppState,
    idem: Option<Idem>,
    f: impl Job<A, T>,
) -> Result<(Response, Option<T>), ApiError> {
    let rec_key = idem.as_ref().map(Idem::record_key);
    let out = state
        .store
        .write(move |ctx| run_idempotent(ctx, rec_key, f))
        .await;
    drop(idem);
    let (status, body, extra) = out?;
    Ok((
        raw_json(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body),
        extra,
    ))
}

/// What the store job of an idempotent request needs of it: its idempotency record key, its
/// request fingerprint, and the data key that seals a sealed [`AnswerForm`].
pub struct RecordKey {
    key: Vec<u8>,
    fingerprint: Fingerprint,
    data_key: DataKey,
}

impl Idem {
    /// Its record key and fingerprint, for [`run_idempotent`].
    pub fn record_key(&self) -> RecordKey {
        RecordKey {
            key: self.key.clone(),
            fingerprint: self.fingerprint.clone(),
            data_key: self.state.data_key.clone(),
        }
    }
}

/// The body of [`commit`]'s store job: replays a record stored meanwhile (a different body
/// is 409 `idempotency_key_reuse`), otherwise runs `f` and stores its answer under
/// `rec_key` in the form [`AnswerForm`] gives. Answers (status, body, `Some(extra)`), or
/// `None` for a replay. For handlers that write more in the same job whatever the outcome
/// (`test_mode::create_test_deposit`).
pub fn run_idempotent<A, T, F>(
    ctx: &mut WriteCtx<'_>,
    rec_key: Option<RecordKey>,
    f: F,
) -> Result<(u16, String, Option<T>), ApiError>
where
    A: AnswerForm,
    F: for<'a, 'b> FnOnce(&'a mut WriteCtx<'b>) -> Result<(StatusCode, A, T), ApiError>,
{
    if let Some(rk) = &rec_key {
        if let Some((status, body)) = stored_answer(ctx, rk, A::SEALED)? {
            return Ok((status, body, None));
        }
    }
    let (status, answer, extra) = f(ctx)?;
    let record = rec_key.as_ref().map(|rk| (&rk.key[..], &rk.data_key));
    let (body, stored) = answer.bodies(record);
    if let (Some(rk), Some(stored)) = (rec_key, stored) {
        ctx.idempotency_put(
            &rk.key,
            &IdempotencyRecord {
                request_hash: rk.fingerprint.stored().to_string(),
                status: status.as_u16(),
                body: stored,
                created_at: ctx.now_us(),
            },
        )?;
    }
    Ok((status.as_u16(), body, Some(extra)))
}

/// The answer stored under `rk` meanwhile, if any (a different body is 409
/// `idempotency_key_reuse`); `sealed` where its form stores it sealed.
fn stored_answer(
    ctx: &WriteCtx<'_>,
    rk: &RecordKey,
    sealed: bool,
) -> Result<Option<(u16, String)>, ApiError> {
    let Some(rec) = ctx
        .idempotency_get(&rk.key)?
        .filter(|r| r.created_at + IDEMPOTENCY_TTL_US > ctx.now_us())
    else {
        return Ok(None);
    };
    if !rk.fingerprint.matches(&rec.request_hash) {
        return Err(reuse_error());
    }
    let data_key = sealed.then_some(&rk.data_key);
    Ok(Some((rec.status, stored_body(data_key, &rk.key, &rec)?)))
}

impl IntoResponse for Begin {
    fn into_response(self) -> Response {
        match self {
            Begin::Replay(r) => r,
            Begin::Fresh(_) => StatusCode::NO_CONTENT.into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_the_parsed_object() {
        let parse = |b: &str| match serde_json::from_str::<Value>(b).unwrap() {
            Value::Object(m) => Fingerprint::of(&m, b.as_bytes()),
            _ => unreachable!(),
        };
        let a = parse(r#"{"a":1,"b":{"c":"x","d":[1,2]}}"#);
        let b = parse("{ \"b\": {\"d\": [1, 2], \"c\": \"x\"},\n \"a\": 1 }");
        assert!(b.matches(a.stored()));
        assert!(!parse(r#"{"a":2,"b":{"c":"x","d":[1,2]}}"#).matches(a.stored()));
        assert!(!parse(r#"{"a":1,"b":{"c":"x","d":[2,1]}}"#).matches(a.stored()));
        // A record of an earlier release (hex SHA-256 of the raw bytes) matches the same bytes.
        use sha2::Digest;
        let legacy = hex::encode(sha2::Sha256::digest(br#"{"a":1,"b":{"c":"x","d":[1,2]}}"#));
        assert!(a.matches(&legacy));
        assert!(!b.matches(&legacy));
        // An empty body reads as `{}`.
        assert!(Fingerprint::of(&Map::new(), b"").matches(parse("{}").stored()));
    }
}
