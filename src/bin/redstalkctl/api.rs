//! The client side of redstalk's admin HTTP API (`/api/v1`, docs/API.md): requests and
//! answers are the server's own types (`redstalk::http::api::types`), sent with the
//! bearer token; error bodies mapped to the tool's errors by their code; cursor paging.
//!
//! Invariants: the token is only ever sent in the `Authorization` header and never
//! printed; every exchange is bounded by the tool's timeout; a 404 or 405 that carries
//! no API error body means the server has no admin API (unsupported, exit 3), one with
//! a body says what the API refused (a 404 `not_found`: the job or tube does not
//! exist, exit 5).

use std::time::Duration;

use redstalk::http::api::types::{Cursor, ErrorBody, ErrorCode, Paged};
use serde::Serialize;
use serde::de::DeserializeOwned;
use ureq::Agent;

use crate::error::{CtlError, Result};

/// The largest JSON reply read (a page of 1000 jobs is far below it).
const MAX_REPLY: u64 = 64 * 1024 * 1024;

pub struct Api {
    base: String,
    token: Option<String>,
    agent: Agent,
}

type HttpResult = std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>;

impl Api {
    /// A client of the API at `base` (`http://HOST:PORT`, a trailing `/` allowed).
    pub fn new(base: &str, token: Option<String>, timeout: Duration) -> Api {
        let agent = Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        let base = base.trim_end_matches('/');
        let base = if base.contains("://") {
            base.to_string()
        } else {
            format!("http://{base}")
        };
        Api { base, token, agent }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    /// `req` with the bearer token, when there is one.
    fn authorized<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", format!("Bearer {t}")),
            None => req,
        }
    }

    /// `GET path?query`.
    pub fn get<T: DeserializeOwned>(&self, path: &str, query: &impl Serialize) -> Result<T> {
        let query = serde_urlencoded::to_string(query)
            .map_err(|e| CtlError::Usage(format!("the query of {path}: {e}")))?;
        let mut url = self.url(path);
        if !query.is_empty() {
            url = format!("{url}?{query}");
        }
        self.finish(&url, self.authorized(self.agent.get(&url)).call())
    }

    /// `POST path` with a JSON body.
    pub fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> Result<T> {
        let url = self.url(path);
        self.finish(&url, self.authorized(self.agent.post(&url)).send_json(body))
    }

    /// `POST path` of a change that takes no body.
    pub fn post_empty<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = self.url(path);
        self.finish(&url, self.authorized(self.agent.post(&url)).send_empty())
    }

    /// `PUT path` with a JSON body.
    pub fn put<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> Result<T> {
        let url = self.url(path);
        self.finish(&url, self.authorized(self.agent.put(&url)).send_json(body))
    }

    /// `DELETE path`.
    pub fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = self.url(path);
        self.finish(&url, self.authorized(self.agent.delete(&url)).call())
    }

    fn finish<T: DeserializeOwned>(&self, url: &str, reply: HttpResult) -> Result<T> {
        let mut resp = reply.map_err(|e| self.transport(e))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_REPLY)
            .read_to_string()
            .map_err(|e| self.transport(e))?;
        if (200..300).contains(&status) {
            return serde_json::from_str(&text).map_err(|e| {
                CtlError::Unavailable(format!("{url} answered {status}, not as the API does: {e}"))
            });
        }
        Err(status_error(
            url,
            status,
            serde_json::from_str(&text).ok(),
            &text,
        ))
    }

    fn transport(&self, e: ureq::Error) -> CtlError {
        match e {
            ureq::Error::Timeout(_) => {
                CtlError::Unavailable(format!("{} did not answer in time", self.base))
            }
            other => CtlError::Connect {
                addr: self.base.clone(),
                reason: other.to_string(),
            },
        }
    }

    /// The pages of a cursor-paged `GET path`, from the first (`query` makes each
    /// page's query from its cursor), handed to `each` until it says stop or the last
    /// page came.
    pub fn each_page<P, Q>(
        &self,
        path: &str,
        query: impl Fn(Option<Cursor>) -> Q,
        mut each: impl FnMut(P) -> bool,
    ) -> Result<()>
    where
        P: Paged + DeserializeOwned,
        Q: Serialize,
    {
        let mut cursor = None;
        loop {
            let page: P = self.get(path, &query(cursor.take()))?;
            cursor = page.next_cursor().cloned();
            if !each(page) || cursor.is_none() {
                return Ok(());
            }
        }
    }
}

/// The tool's error for a non-2xx answer, by the API's error code (by the bare status
/// when the answer is not the API's).
fn status_error(url: &str, status: u16, body: Option<ErrorBody>, text: &str) -> CtlError {
    let (code, message) = match body {
        Some(b) => (Some(b.error.code), b.error.message),
        None => (None, format!("{url} answered {status}: {}", text.trim())),
    };
    match (code, status) {
        (Some(ErrorCode::BadRequest | ErrorCode::PayloadTooLarge), _) | (None, 400 | 413) => {
            CtlError::Usage(message)
        }
        (Some(ErrorCode::Unauthorized | ErrorCode::Forbidden | ErrorCode::ReadOnly), _)
        | (None, 401 | 403) => CtlError::Refused(message),
        (Some(ErrorCode::NotFound), _) => CtlError::NotFound(message),
        (Some(ErrorCode::MethodNotAllowed), _) => {
            CtlError::Unsupported(format!("{url}: {message} (a redstalk of another version?)"))
        }
        (None, 404 | 405) => CtlError::Unsupported(format!(
            "{url}: the server has no admin API (answered {status}); is it redstalk with \
             --http ADDR, and is --api that address?"
        )),
        (Some(ErrorCode::Conflict), _) | (None, 409) => CtlError::Conflict(message),
        _ => CtlError::Unavailable(message),
    }
}

/// `s` as one path segment: everything but unreserved characters percent-encoded
/// (tube names may hold `/`, `+`, `;`, `$`, `(`, `)`).
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_encoded() {
        assert_eq!(seg("a/b+c(d)"), "a%2Fb%2Bc%28d%29");
        assert_eq!(seg("emails.v2_x-y"), "emails.v2_x-y");
    }

    fn body(code: &str) -> Option<ErrorBody> {
        serde_json::from_str(&format!(
            r#"{{"error": {{"code": "{code}", "message": "m"}}}}"#
        ))
        .ok()
    }

    #[test]
    fn errors_by_code_and_by_bare_status() {
        assert_eq!(status_error("u", 404, body("not_found"), "").exit_code(), 5);
        assert_eq!(status_error("u", 404, None, "Not Found").exit_code(), 3);
        assert_eq!(
            status_error("u", 405, body("method_not_allowed"), "").exit_code(),
            3
        );
        assert_eq!(status_error("u", 409, body("conflict"), "").exit_code(), 6);
        assert_eq!(
            status_error("u", 413, body("payload_too_large"), "").exit_code(),
            2
        );
        assert_eq!(status_error("u", 403, body("read_only"), "").exit_code(), 4);
        assert_eq!(status_error("u", 401, None, "").exit_code(), 4);
        assert_eq!(status_error("u", 503, None, "").exit_code(), 7);
        assert_eq!(
            status_error("u", 500, body("a_new_code"), "").exit_code(),
            7
        );
    }
}
