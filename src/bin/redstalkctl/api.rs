//! The client side of redstalk's admin HTTP API (`/api/v1`, the contract in the
//! project's API spec and docs/CLI.md): JSON requests with the bearer token, error
//! bodies mapped to the tool's errors, cursor paging.
//!
//! Invariants: the token is only ever sent in the `Authorization` header and never
//! printed; every exchange is bounded by the tool's timeout; a 404 that carries no API
//! error body means the server has no admin API (unsupported, exit 3), a 404 with one
//! means the job or tube does not exist (not found, exit 5).

use std::time::Duration;

use serde_json::Value;
use ureq::Agent;

use crate::error::{CtlError, Result};

/// The largest JSON reply read (a page of 1000 jobs is far below it).
const MAX_REPLY: u64 = 64 * 1024 * 1024;

pub struct Api {
    base: String,
    token: Option<String>,
    agent: Agent,
}

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

    fn bearer(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// `GET path?query` as JSON.
    pub fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value> {
        let url = self.url(path);
        let mut req = self.agent.get(&url);
        for (k, v) in query {
            req = req.query(*k, v);
        }
        if let Some(b) = self.bearer() {
            req = req.header("Authorization", b);
        }
        self.finish(&url, req.call())
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let url = self.url(path);
        let mut req = self.agent.post(&url);
        if let Some(b) = self.bearer() {
            req = req.header("Authorization", b);
        }
        self.finish(&url, req.send_json(body))
    }

    /// `DELETE path`.
    pub fn delete(&self, path: &str) -> Result<Value> {
        let url = self.url(path);
        let mut req = self.agent.delete(&url);
        if let Some(b) = self.bearer() {
            req = req.header("Authorization", b);
        }
        self.finish(&url, req.call())
    }

    fn finish(
        &self,
        url: &str,
        reply: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value> {
        let mut resp = reply.map_err(|e| self.transport(e))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_REPLY)
            .read_to_string()
            .map_err(|e| self.transport(e))?;
        let json: Option<Value> = serde_json::from_str(&text).ok();
        if (200..300).contains(&status) {
            return json.ok_or_else(|| {
                CtlError::Unavailable(format!("{url} answered {status} without JSON"))
            });
        }
        Err(status_error(url, status, json.as_ref(), &text))
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

    /// Every entry under `key` of a cursor-paged `GET`, following `next_cursor` until it
    /// is null or `max` entries were read; with `progress`, a count on stderr per page.
    pub fn pages(
        &self,
        path: &str,
        query: &[(&str, String)],
        key: &str,
        max: Option<usize>,
        progress: bool,
    ) -> Result<Vec<Value>> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut q = query.to_vec();
            if let Some(c) = &cursor {
                q.push(("cursor", c.clone()));
            }
            let page = self.get(path, &q)?;
            if let Some(entries) = page.get(key).and_then(Value::as_array) {
                all.extend(entries.iter().cloned());
            }
            cursor = page
                .get("next_cursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if progress {
                eprint!("\r{} {key} read", all.len());
            }
            if cursor.is_none() || max.is_some_and(|m| all.len() >= m) {
                break;
            }
        }
        if progress {
            eprintln!();
        }
        if let Some(m) = max {
            all.truncate(m);
        }
        Ok(all)
    }
}

/// The tool's error for a non-2xx answer.
fn status_error(url: &str, status: u16, json: Option<&Value>, text: &str) -> CtlError {
    let err = json.and_then(|j| j.get("error"));
    let code = err.and_then(|e| e.get("code")).and_then(Value::as_str);
    let message = err
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{url} answered {status}: {}", text.trim()));
    match (code, status) {
        (Some("bad_request"), _) | (None, 400) => CtlError::Usage(message),
        (Some("unauthorized" | "forbidden" | "read_only"), _) | (None, 401 | 403) => {
            CtlError::Refused(message)
        }
        (Some("not_found"), _) => CtlError::NotFound(message),
        (None, 404 | 405) => CtlError::Unsupported(format!(
            "{url}: the server has no admin API (answered {status}); is it redstalk with \
             --metrics ADDR, and is --api that address?"
        )),
        (Some("conflict"), _) | (None, 409) => CtlError::Conflict(message),
        (Some("unsupported"), _) | (None, 501) => CtlError::Unsupported(message),
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

    #[test]
    fn errors_by_code_and_by_bare_status() {
        let body = serde_json::json!({"error": {"code": "not_found", "message": "no job 9"}});
        let e = status_error("u", 404, Some(&body), "");
        assert_eq!(e.exit_code(), 5);
        assert_eq!(status_error("u", 404, None, "Not Found").exit_code(), 3);
        let conflict = serde_json::json!({"error": {"code": "conflict", "message": "reserved"}});
        assert_eq!(status_error("u", 409, Some(&conflict), "").exit_code(), 6);
        assert_eq!(status_error("u", 401, None, "").exit_code(), 4);
        assert_eq!(status_error("u", 503, None, "").exit_code(), 7);
    }
}
