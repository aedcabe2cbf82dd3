//! The guard before every `/api/v1` route: [`Auth::check`] for a request this instance
//! answers, [`Auth::pass_on`] for one its standby forwards (where it is served was
//! decided before, see `api::forward`); a refusal is the API's JSON error.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{Auth, Refused};
use crate::http::Peer;
use crate::http::api::error::ApiError;
use crate::http::api::forward::Served;
use crate::http::api::types::ErrorCode;

/// The checks before every API route.
pub async fn guard(State(auth): State<Arc<Auth>>, mut req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<Peer>()
        .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |p| p.0.ip());
    let forwarded = matches!(req.extensions().get::<Served>(), Some(Served::Leader(_)));
    let change = !matches!(*req.method(), Method::GET | Method::HEAD);
    let verdict = if forwarded {
        auth.pass_on(req.headers_mut(), peer)
    } else {
        auth.check(change, req.headers(), peer)
    };
    match verdict {
        Ok(()) => next.run(req).await,
        Err(refused) => ApiError::from(refused).into_response(),
    }
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> ApiError {
        let code = match r {
            Refused::NoToken | Refused::MissingToken | Refused::WrongToken => {
                ErrorCode::Unauthorized
            }
            Refused::Limited(_) => ErrorCode::TooManyRequests,
            Refused::ReadOnly => ErrorCode::ReadOnly,
            Refused::CrossOrigin(_) | Refused::Role(_) => ErrorCode::Forbidden,
        };
        let e = ApiError::new(code, r.to_string());
        match r {
            Refused::Limited(l) => e.retry_after(l.retry_secs()),
            _ => e,
        }
    }
}
