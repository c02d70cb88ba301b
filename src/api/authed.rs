//! What a keyed handler starts from: the caller, authorized for the operation's access rule
//! before anything else of the request is read, together with the state; the `{id}` path
//! segment; and the few ways a handler reads or writes (a row by id, a store mutation, an
//! idempotent `POST`).
//!
//! Axum runs extractors in argument order, so a handler whose first argument is
//! [`Authed`] reports its faults in the order SPEC.md section 4 (API keys) gives:
//! authentication (401, 429), then kind, scope, IP allowlist and signing (403), then the
//! path, query and body (400, 413, 415); a path that does not percent-decode is 400 before
//! the access rule is judged.

use std::marker::PhantomData;

use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};

use appliance_storage::records::Row;

use crate::api::error::ApiError;
use crate::api::extract::{path_uuid, JsonBody};
use crate::api::{begin, commit, json, mutate, scope, AnswerForm, Begin, IdempotencyKey, Job};
use crate::auth::{Access, Caller};
use crate::services::types::{Id, ProjectId};
use crate::services::{reads, Scope};
use crate::state::AppState;
use uuid::Uuid;

/// An operation's access rule, carried by a marker type (see [`access_rules!`]).
pub trait Rule {
    /// 403 for a caller the operation is not open to.
    fn check(caller: &Caller) -> Result<(), ApiError>;
}

/// Declares marker types for access rules: `access_rules! { READ = Access::new(..); }`.
macro_rules! access_rules {
    ($($(#[$m:meta])* $vis:vis $name:ident = $access:expr;)*) => {$(
        $(#[$m])*
        #[allow(clippy::upper_case_acronyms)]
        $vis struct $name;
        impl $crate::api::authed::Rule for $name {
            fn check(
                caller: &$crate::auth::Caller,
            ) -> Result<(), $crate::api::error::ApiError> {
                const ACCESS: $crate::auth::Access = $access;
                Ok(caller.require(ACCESS)?)
            }
        }
    )*};
}
pub(crate) use access_rules;

access_rules! {
    /// Any kind of key, no scope.
    pub ANY = Access::any();
}

/// The authenticated caller, authorized for rule `R`, with the state.
pub struct Authed<R> {
    pub state: AppState,
    pub caller: Caller,
    rule: PhantomData<fn() -> R>,
}

impl<R: Rule> FromRequestParts<AppState> for Authed<R> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let caller = Caller::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        // A path segment that does not percent-decode to UTF-8 is the framework's 400 for any
        // key that authenticates, before the access rule (a route without segments has no
        // parameters to read, which is no fault).
        if let Err(e @ PathRejection::FailedToDeserializePathParams(_)) =
            Path::<Vec<(String, String)>>::from_request_parts(parts, state).await
        {
            return Err(e.into_response());
        }
        R::check(&caller).map_err(IntoResponse::into_response)?;
        Ok(Authed {
            state: state.clone(),
            caller,
            rule: PhantomData,
        })
    }
}

impl<R> Authed<R> {
    /// The service scope of the caller.
    pub fn scope(&self) -> Scope {
        scope(&self.state, &self.caller)
    }

    pub fn project_id(&self) -> ProjectId {
        self.caller.project_id()
    }

    /// The caller's project's row `id`, or `missing` (another project's row is not found
    /// either, SPEC.md section 7), read through [`reads::row`].
    pub fn row<T: Row>(&self, id: Id<T>, missing: impl Into<ApiError>) -> Result<T, ApiError> {
        reads::row::<T>(&self.state.store, self.caller.project_id(), id)?
            .ok_or_else(|| missing.into())
    }

    /// `GET /v1/<resource>/{id}` of a row kept per project: [`Authed::row`] answered 200 as
    /// `view` renders it. A view that borrows from the row (the typed views of
    /// [`crate::views`]) goes through [`Authed::row`] and [`json`].
    pub async fn get_by_id<T, V, S>(
        &self,
        id: Id<T>,
        missing: impl Into<ApiError>,
        view: V,
    ) -> Result<Response, ApiError>
    where
        T: Row + Send + 'static,
        V: FnOnce(&T) -> S,
        S: serde::Serialize,
    {
        let row = self.row::<T>(id, missing)?;
        Ok(json(StatusCode::OK, &view(&row)))
    }

    /// A mutation without an `Idempotency-Key` ([`commit`]), answered as `f` answers, with
    /// `f`'s `T`.
    pub async fn commit<A: AnswerForm, T: Send + 'static>(
        &self,
        f: impl Job<A, T>,
    ) -> Result<(Response, Option<T>), ApiError> {
        commit(&self.state, None, f).await
    }

    /// [`Authed::commit`] of a job that leaves nothing to do after the commit.
    pub async fn write<A: AnswerForm>(&self, f: impl Job<A, ()>) -> Result<Response, ApiError> {
        Ok(self.commit(f).await?.0)
    }

    /// An idempotent `POST` to `path` ([`mutate`]): the stored first answer for a known
    /// `Idempotency-Key`, otherwise `f` run through [`commit`], with `f`'s `T` (`None` on a
    /// replay).
    pub async fn mutate<A: AnswerForm, T: Send + 'static>(
        &self,
        key: &IdempotencyKey,
        path: &str,
        body: &JsonBody,
        f: impl Job<A, T>,
    ) -> Result<(Response, Option<T>), ApiError> {
        mutate(&self.state, &self.caller, key, path, &body.fingerprint, f).await
    }

    /// The start of an idempotent `POST` to `path` ([`begin`]): the stored first answer, or
    /// the guard to run it under.
    pub async fn begin(
        &self,
        key: &IdempotencyKey,
        path: &str,
        body: &JsonBody,
    ) -> Result<Begin, ApiError> {
        begin(
            &self.state,
            &self.caller,
            &Method::POST,
            path,
            key,
            &body.fingerprint,
        )
        .await
    }

    /// [`Authed::mutate`] of a job that leaves nothing to do after the commit.
    pub async fn post<A: AnswerForm>(
        &self,
        key: &IdempotencyKey,
        path: &str,
        body: &JsonBody,
        f: impl Job<A, ()>,
    ) -> Result<Response, ApiError> {
        Ok(self.mutate(key, path, body, f).await?.0)
    }
}

/// The input of an idempotent `POST`: its `Idempotency-Key` header (refused only when the
/// handler asks for it) and its JSON object body.
pub struct Post {
    pub key: IdempotencyKey,
    pub body: JsonBody,
}

impl FromRequest<AppState> for Post {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let key = IdempotencyKey::parse(req.headers().get("idempotency-key"));
        let body = JsonBody::from_request(req, state).await?;
        Ok(Post { key, body })
    }
}

/// The `{id}` path parameter as the OpenAPI document describes it: a UUID. The handlers
/// read it typed, as the resource's own id ([`Id`]'s extractor below).
#[derive(utoipa::IntoParams)]
#[into_params(names("id"), parameter_in = Path)]
pub struct PathId(
    /// The resource's id (UUID).
    pub Uuid,
);

/// A resource id from the `{id}` path segment: a handler takes the id of the resource its
/// route names, typed (`id: PayoutId`), and hands the service that resource's id. Not a
/// UUID: 400 `invalid_request`, `param: id` ([`path_uuid`]).
impl<S: Send + Sync, R> FromRequestParts<S> for Id<R> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Path(s) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        path_uuid(&s)
            .map(Id::from)
            .map_err(IntoResponse::into_response)
    }
}
