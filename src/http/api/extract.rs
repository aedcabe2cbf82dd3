//! The API's extractors: a request's JSON body ([`ApiJson`]), its query ([`ApiQuery`]),
//! a job id, tube name or tube and key in its path ([`JobPath`], [`TubePath`],
//! [`KeyPath`]) and the engine that
//! answers it ([`ApiEngine`]). Each one's rejection is an [`ApiError`], so a malformed
//! request, a body over the limit or a wrong parameter is answered the API's JSON
//! error, never axum's plain text.
//!
//! Invariants: a body is read within the route's `DefaultBodyLimit` (over it: 413
//! `payload_too_large`); an empty body reads as `{}` and no `Content-Type` is asked
//! for (`curl -d` sends a form type); queries go through axum's `Query` into the
//! route's type (docs: `types.rs`), the one query parser.

use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::forward::Served;
use crate::engine::Engine;
use crate::protocol::TubeName;
use crate::protocol::ext::Key;
use crate::store::JobId;

/// A JSON request body of type `T`.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let body = Bytes::from_request(req, state).await?;
        let body: &[u8] = if body.is_empty() { b"{}" } else { &body };
        serde_json::from_slice(body)
            .map(ApiJson)
            .map_err(|e| ApiError::bad_request(format!("JSON: {e}")))
    }
}

/// A query of type `T` (its fields say which are required, their defaults, bounds).
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(q) = Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(q))
    }
}

/// A tube name, checked as the protocol checks it.
pub fn tube_name(s: &str) -> Result<TubeName, ApiError> {
    TubeName::new(s.as_bytes())
        .ok_or_else(|| ApiError::bad_request(format!("{s:?} is not a tube name")))
}

/// The job id of a route's `{id}`.
pub struct JobPath(pub JobId);

impl<S: Send + Sync> FromRequestParts<S> for JobPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state).await?;
        id.parse()
            .map(JobPath)
            .map_err(|_| ApiError::bad_request(format!("{id:?} is not a job id")))
    }
}

/// The tube of a route's `{tube}`.
pub struct TubePath(pub TubeName);

impl<S: Send + Sync> FromRequestParts<S> for TubePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(tube) = Path::<String>::from_request_parts(parts, state).await?;
        tube_name(&tube).map(TubePath)
    }
}

/// The tube pattern of a route's `{tubes}`: `name`, `prefix*` or `*`.
pub struct PatternPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PatternPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(tubes) = Path::<String>::from_request_parts(parts, state).await?;
        match crate::protocol::pattern::Pattern::parse(&tubes) {
            Some(p) => Ok(PatternPath(p.to_string())),
            None => Err(ApiError::bad_request(format!(
                "{tubes:?} is not a tube name, a prefix followed by *, or *"
            ))),
        }
    }
}

/// The tube and key of a route's `{tube}/keys/{key}`.
pub struct KeyPath(pub TubeName, pub Key);

impl<S: Send + Sync> FromRequestParts<S> for KeyPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((tube, key)) = Path::<(String, String)>::from_request_parts(parts, state).await?;
        let key = Key::new(key.as_bytes())
            .ok_or_else(|| ApiError::bad_request(format!("{key:?} is not a key")))?;
        Ok(KeyPath(tube_name(&tube)?, key))
    }
}

/// The engine that answers this request here (see [`Served`]).
pub struct ApiEngine(pub Arc<Engine>);

impl<S: Send + Sync> FromRequestParts<S> for ApiEngine {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        match parts.extensions.get::<Served>() {
            Some(Served::Here(engine)) => Ok(ApiEngine(engine.clone())),
            _ => Err(ApiError::unavailable(
                "this instance does not lead: it has no jobs of its own to answer with",
            )),
        }
    }
}
